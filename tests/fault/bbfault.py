# The world the fault drivers (run, stress) work in: a scratch directory with a configuration,
# one initialised pool, a job user and source trees; the built tools run against it; and the
# invariants every crash and every moment of a stress run must keep.
import json
import os
import pwd
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time

FINAL = ("complete", "deleted")
USER = "bbkit-test"


class Violation(Exception):
    """An invariant does not hold: a bug in bbkit, never in the test."""


def ensure_user():
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                        "/usr/sbin/nologin", USER], check=False)
        return pwd.getpwnam(USER)


class World:
    def __init__(self, build_dir, capacity="64GiB", granularity="1GiB", pool_path=None,
                 extra_toml=(), keep=False, bin_dir=None, prefix="bbkit-fault."):
        # bin_dir: an installed tree's bin/ (its bb-mover in ../libexec/bbkit), else the build's.
        self.bin = bin_dir or os.path.join(build_dir, "bin")
        for tool in ("bb-pool", "bb-stage", "bb-teardown", "bb-mover"):
            where = [os.path.join(self.bin, tool)]
            if tool == "bb-mover":
                where.append(os.path.join(self.bin, "..", "libexec", "bbkit", tool))
            if not any(os.access(path, os.X_OK) for path in where):
                raise SystemExit(f"fault: {self.bin}/{tool} is missing (run ./scripts/build)")
        self.dir = tempfile.mkdtemp(prefix=prefix)
        os.chmod(self.dir, 0o755)
        self.keep = keep
        self.user = ensure_user()
        self.pool = "nvme"
        self.pool_path = pool_path or os.path.join(self.dir, "nvme")
        os.makedirs(self.pool_path, exist_ok=True)
        self.pfs = os.path.join(self.dir, "pfs")
        os.makedirs(self.pfs)
        os.chmod(self.pfs, 0o755)
        os.chown(self.pfs, self.user.pw_uid, self.user.pw_gid)
        self.state = os.path.join(self.dir, "state")
        self.fault_log = os.path.join(self.dir, "fault.log")
        hooks = os.path.join(self.dir, "hook.sh")
        with open(hooks, "w") as f:
            f.write("#!/bin/sh\nexit 0\n")
        os.chmod(hooks, 0o755)
        self.config = os.path.join(self.dir, "bbkit.toml")
        with open(self.config, "w") as f:
            f.write(f'state_dir = "{self.state}"\ndefault_pool = "{self.pool}"\n'
                    'allow_root = true\nflags = ["EnablePersistent"]\n')
            for line in extra_toml:
                f.write(line + "\n")
            f.write("[timeouts]\nother = 20\n")
            f.write(f'[hooks]\npre_run = "{hooks}"\npost_run = "{hooks}"\n')
            f.write(f'[[pool]]\nname = "{self.pool}"\npath = "{self.pool_path}"\n'
                    f'capacity = "{capacity}"\ngranularity = "{granularity}"\n')
        self.env = dict(os.environ)
        for key in ("BBKIT_FAULT", "BBKIT_FAULT_LOG", "BBKIT_STATE_DIR"):
            self.env.pop(key, None)
        self.env["BBKIT_CONFIG"] = self.config
        self.env["PATH"] = self.bin + ":" + self.env.get("PATH", "")
        self.check_ok(self.run(["bb-pool", "init", self.pool]), "bb-pool init")

    def close(self):
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ---- running the tools ----------------------------------------------------------------

    def start(self, args, fault=None):
        """Starts a tool in its own process group (so whatever it leaves running is found)."""
        env = dict(self.env)
        if fault:
            env["BBKIT_FAULT"] = fault
            env["BBKIT_FAULT_LOG"] = self.fault_log
            # bb-mover runs as the job's user: the log must be writable by it.
            with open(self.fault_log, "a"):
                os.chmod(self.fault_log, 0o666)
        return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, text=True, start_new_session=True)

    def finish(self, proc, timeout=600):
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise Violation(f"{' '.join(proc.args)} hung for {timeout} s (stuck lock?)")
        wait_group_gone(proc.pid)
        return proc.returncode, out, err

    def run(self, args, fault=None, timeout=600):
        return self.finish(self.start(args, fault), timeout)

    def check_ok(self, result, what, codes=(0,)):
        rc, out, err = result
        if rc not in codes:
            raise Violation(f"{what}: exit {rc}: {err.strip() or out.strip()}")
        return out

    def take_fault_log(self):
        try:
            with open(self.fault_log) as f:
                hits = [line.strip() for line in f if line.strip()]
            os.unlink(self.fault_log)
            return hits
        except FileNotFoundError:
            return []

    def fault_points(self):
        env = dict(self.env)
        env["BBKIT_FAULT"] = "list"
        out = subprocess.run(["bb-pool"], env=env, capture_output=True, text=True).stdout
        return [line.split("\t")[0] for line in out.splitlines() if line.strip()]

    # ---- the state, read directly ---------------------------------------------------------

    def rows(self, sql, args=()):
        db = sqlite3.connect(f"file:{self.state}/state.db?mode=ro", uri=True, timeout=30)
        try:
            return db.execute(sql, args).fetchall()
        finally:
            db.close()

    def pool_show(self):
        out = self.check_ok(self.run(["bb-pool", "show", self.pool, "--json"]), "bb-pool show")
        value = json.loads(out)
        return value[0] if isinstance(value, list) else value

    # ---- invariants -----------------------------------------------------------------------

    def recover_converges(self):
        """recover succeeds, and a second recover finds nothing left to do."""
        first = self.check_ok(self.run(["bb-pool", "recover"]), "bb-pool recover")
        second = self.check_ok(self.run(["bb-pool", "recover"]), "second bb-pool recover")
        if second.strip() != "nothing to recover":
            raise Violation("recover does not converge: the second run did\n  " +
                            second.strip().replace("\n", "\n  ") + "\n after\n  " +
                            first.strip().replace("\n", "\n  "))
        return first

    def check_clean(self, allow=()):
        """check finds nothing but the kinds in `allow` (a killed stage is a stalled-stage until
        it is resumed: bbkit(7), STANDALONE MODE)."""
        rc, out, err = self.run(["bb-pool", "check", "--json"])
        findings = json.loads(out) if out.strip() else None
        unexpected = [f for f in findings or [] if f.get("kind") not in allow]
        if unexpected or (rc != 0 and not findings):
            raise Violation(f"bb-pool check (exit {rc}) reports: {out.strip() or err.strip()}")

    def accounting(self):
        """Used == live buffers, trash == ended unreaped buffers, and both within the total."""
        live = self.rows("SELECT COALESCE(SUM(allocated_bytes), 0) FROM buffers WHERE pool = ?"
                         " AND state NOT IN ('pending', 'complete', 'deleted')", (self.pool,))[0][0]
        trash = self.rows("SELECT COALESCE(SUM(allocated_bytes), 0) FROM buffers WHERE pool = ?"
                          " AND state IN ('complete', 'deleted') AND reaped = 0",
                          (self.pool,))[0][0]
        shown = self.pool_show()
        if shown["used"] != live or shown["trash"] != trash:
            raise Violation(f"accounting: bb-pool shows used {shown['used']} trash "
                            f"{shown['trash']}, the records hold {live} live and {trash} trash")
        if live + trash > shown["total"]:
            raise Violation(f"over-commit: {live} + {trash} > {shown['total']}")

    def directories_match_records(self):
        live = self.rows("SELECT key, directory FROM buffers WHERE pool = ? AND state NOT IN "
                         "('pending', 'complete', 'deleted')", (self.pool,))
        expected = {d for _, d in live}
        found = set()
        for sub in ("job", "persistent"):
            for name in os.listdir(os.path.join(self.pool_path, sub)):
                found.add(f"{sub}/{name}")
        if expected != found:
            raise Violation(f"directories without a record: {sorted(found - expected)}; "
                            f"records without a directory: {sorted(expected - found)}")
        trashed = [k for (k,) in self.rows(
            "SELECT key FROM buffers WHERE pool = ? AND state IN ('complete', 'deleted') AND "
            "reaped = 0", (self.pool,))]
        entries = os.listdir(os.path.join(self.pool_path, "trash"))
        for key in trashed:
            if not any(e.startswith(key + ".") and ".piece" not in e for e in entries):
                raise Violation(f"trash record {key} has no trash/ entry")
        for e in entries:
            if not any(e.startswith(key + ".") for key in trashed):
                raise Violation(f"trash/{e} has no record")

    def public_matches_records(self):
        """Every buffer that is not final has its file in public/buffers/<uid>/, showing its
        recorded state, and no other buffer has one. Only after a later write: a kill between
        a publish and its commit leaves files that the next publish settles (.owner/unsettled)."""
        recorded = {key: (uid, state) for key, uid, state in self.rows(
            "SELECT key, uid, state FROM buffers WHERE state NOT IN ('complete', 'deleted')")}
        shown = {}
        base = os.path.join(self.state, "public", "buffers")
        for uid in os.listdir(base) if os.path.isdir(base) else []:
            for name in os.listdir(os.path.join(base, uid)):
                if not name.endswith(".json"):
                    continue  # a temporary of a killed writer
                with open(os.path.join(base, uid, name)) as f:
                    shown[name[:-len(".json")]] = (int(uid), json.load(f)["state"])
        if shown != recorded:
            wrong = sorted(k for k in set(shown) | set(recorded) if shown.get(k) != recorded.get(k))
            raise Violation("public/ differs from the records: " + ", ".join(
                f"{k} shown {shown.get(k)} recorded {recorded.get(k)}" for k in wrong[:5]))

    def invariants(self, outs=(), after_forward=False):
        self.check_clean(allow=() if after_forward else ("stalled-stage",))
        self.accounting()
        self.directories_match_records()
        if after_forward:
            self.public_matches_records()
        for out in outs:
            out.verify(final=after_forward)


def wait_group_gone(pgid, timeout=60):
    """Waits until no process of the group is left (a killed bb-stage's mover finishing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not group_members(pgid):
            return
        time.sleep(0.02)
    for pid in group_members(pgid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    raise Violation(f"processes of group {pgid} still running after {timeout} s")


def group_members(pgid):
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[0] is the state, [2] the process group; zombies are gone for our purpose
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def children_of(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def write_tree(root, files, uid, gid, seed, size=600):
    """A tree of `files` small files in a few subdirectories, owned by the user."""
    os.makedirs(root, exist_ok=True)
    for i in range(files):
        sub = os.path.join(root, f"d{i % 7}")
        os.makedirs(sub, exist_ok=True)
        with open(os.path.join(sub, f"f{i}"), "wb") as f:
            f.write((f"{seed}:{i}:" * (size // 8 + i % 50)).encode()[:size + i % 1000])
    for dirpath, dirnames, filenames in os.walk(root):
        os.chown(dirpath, uid, gid)
        for name in filenames:
            os.chown(os.path.join(dirpath, name), uid, gid)


def read_tree(root):
    """{relative path: bytes} of every regular file under root."""
    tree = {}
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            path = os.path.join(dirpath, name)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as f:
                    tree[os.path.relpath(path, root)] = f.read()
    return tree


def is_temporary(name):
    return name.startswith(".") and ".bbkit-" in name


class StageOut:
    """A stage-out destination: each final name must hold the complete old or new file. A
    `fresh` destination (it did not exist) is absent or complete, never partial: it is built
    under a temporary name beside it and renamed whole."""

    def __init__(self, dest, old, new, fresh=False):
        self.dest, self.old, self.new, self.fresh = dest, old, new, fresh

    def sibling_temporaries(self):
        parent, base = os.path.split(self.dest)
        return [n for n in os.listdir(parent) if is_temporary(n) and n.startswith(f".{base}.")]

    def verify(self, final):
        got = {}
        temps = []
        for rel, data in read_tree(self.dest).items():
            # A file under a temporary name, or anywhere in a directory tree built under one.
            if any(is_temporary(part) for part in rel.split(os.sep)):
                temps.append(rel)
            else:
                got[rel] = data
        if self.fresh and os.path.lexists(self.dest) and got != self.new:
            missing = sorted(set(self.new) - set(got))[:3]
            raise Violation(f"stage-out: new destination {self.dest} appeared incomplete "
                            f"(lacks {missing})")
        for rel, data in got.items():
            if rel not in self.old and rel not in self.new:
                raise Violation(f"stage-out: {self.dest}/{rel} is neither old nor new")
            if data != self.new.get(rel) and data != self.old.get(rel):
                raise Violation(f"stage-out: {self.dest}/{rel} holds a partial or wrong file "
                                f"({len(data)} bytes; old {len(self.old.get(rel, b''))}, "
                                f"new {len(self.new.get(rel, b''))})")
        for rel in self.old:
            if rel not in got:
                raise Violation(f"stage-out: {self.dest}/{rel} (old) vanished")
        if final:
            if got != self.new and {**self.old, **self.new} != got:
                missing = sorted(set(self.new) - set(got))[:3]
                raise Violation(f"stage-out done but {self.dest} lacks new files {missing}")
            for rel, data in self.new.items():
                if got.get(rel) != data:
                    raise Violation(f"stage-out done but {self.dest}/{rel} is not the new file")
            temps += self.sibling_temporaries()
            if temps:
                raise Violation(f"stage-out done but temporaries are left: {temps[:3]}")
