#!/usr/bin/env bats
# bb-stage: data in and out as the job's user, the phases, and every failure path. Trees are
# compared by content, modes, times and link targets, not by exit codes alone.

bats_require_minimum_version 1.5.0
load common

setup() { staging_setup; }
teardown() { common_teardown; }

as_user() { runuser -u "$U" -- "$@"; }

# Writes a job script whose lines follow the shebang.
job_script() {
  { echo '#!/bin/bash'; for l in "$@"; do printf '%s\n' "$l"; done; echo 'srun app'; } >"$TEST_DIR/job.sh"
}

# A tree the user owns, with the awkward cases.
make_tree() {
  local t=$1
  as_user mkdir -p "$t/sub/deeper" "$t/empty"
  as_user sh -c "printf 'hello\n' >'$t/plain'; printf 'x' >'$t/sub/deeper/leaf'"
  as_user sh -c "printf 'space\n' >'$t/with space'; printf 'tab\n' >'$t/tab	name'; printf 'dash\n' >'$t/-leading'"
  as_user ln -s plain "$t/rel-link"
  as_user ln -s /nonexistent/target "$t/dangling"
  as_user truncate -s 64M "$t/sparse"
  as_user sh -c "printf 'data' | dd of='$t/sparse' bs=1 seek=1048576 conv=notrunc status=none"
  as_user ln "$t/plain" "$t/hardlink"
  as_user chmod 0640 "$t/plain"
  as_user chmod 0700 "$t/sub"
  as_user touch -d '2001-02-03 04:05:06.123456789' "$t/sub/deeper/leaf"
}

# Starts `bb-stage ARGS...` in the background (its pid in $stager, its mover's in $mover) and
# returns once that mover is frozen (SIGSTOP) part-way through the copy, after $FREEZE_AFTER
# whole files. With crash injection compiled in, the mover stops itself there
# (BBKIT_FAULT=mover.file-copied:N:stop), so the test cannot lose the race to a fast copy.
# Without it (the sanitizer build), it is stopped once $FREEZE_WATCH (a command printing one
# line per file copied) shows enough files; should the copy finish first, the test is skipped,
# never passed. Only this stager's own child is looked at: other suites run movers as the same
# user at the same time.
start_frozen_stage() {
  local state
  mover=
  if [ -n "$(BBKIT_FAULT=list bb-pool)" ]; then
    BBKIT_FAULT="mover.file-copied:$FREEZE_AFTER:stop" bb-stage "$@" >/dev/null 2>&1 &
    stager=$!
    for _ in $(seq 3000); do
      [ -n "$mover" ] || mover=$(pgrep -P "$stager" -x bb-mover || true)
      state=
      [ -z "$mover" ] || state=$(awk '{print $3}' "/proc/$mover/stat" 2>/dev/null || true)
      [ "$state" = T ] && return 0
      kill -0 "$stager" 2>/dev/null || break
      sleep 0.01
    done
    kill -9 "$stager" 2>/dev/null || true
    echo "the mover never stopped after $FREEZE_AFTER files" >&2
    return 1
  fi
  bb-stage "$@" >/dev/null 2>&1 &
  stager=$!
  for _ in $(seq 3000); do
    [ "$(eval "$FREEZE_WATCH" 2>/dev/null | wc -l)" -gt "$FREEZE_AFTER" ] && break
    kill -0 "$stager" 2>/dev/null || break
    sleep 0.01
  done
  mover=$(pgrep -P "$stager" -x bb-mover || true)
  # A mover that was stopped keeps its stager waiting, so the kill that follows lands mid-copy;
  # one that already exited (a zombie takes the signal too) is not stopped.
  [ -n "$mover" ] && kill -STOP "$mover" 2>/dev/null || skip "the copy finished before it could be frozen"
  for _ in $(seq 100); do
    state=$(awk '{print $3}' "/proc/$mover/stat" 2>/dev/null || true)
    [ "$state" = T ] && return 0
    [ "$state" = R ] || [ "$state" = S ] || [ "$state" = D ] || break
    sleep 0.01
  done
  skip "the copy finished before it could be frozen"
}

# Kills the stager of start_frozen_stage and checks its mover dies with it (parent-death
# signal, SIGKILL even while stopped).
kill_frozen_stage() {
  kill -9 "$stager"; wait "$stager" || true
  for _ in $(seq 100); do [ -e "/proc/$mover" ] || break; sleep 0.05; done
  [ ! -e "/proc/$mover" ]
}

# True when no process has a file open under this test's directory (no mover left behind).
nothing_open_here() {
  ! find /proc/[0-9]*/fd -lname "$TEST_DIR/*" 2>/dev/null | grep -q .
}

# Prints one line per entry: path, type, mode, size, mtime (ns), link target; content hashes.
describe_tree() {
  (cd "$1" && find . -printf '%p %y %m %s %T@ %l\n' | sort && find . -type f -print0 | sort -z | xargs -0 -r sha1sum)
}

@test "help and bb-stage(1) document every subcommand and option" {
  run bb-stage --help
  assert_success
  for word in in out pre-run post-run paths --job --json --retry --progress --output --config --state-dir; do
    grep -q -- "${word//-/\\\\-}" "$BBKIT_SOURCE_DIR/man/man1/bb-stage.1" || fail "man page lacks $word"
  done
  run bb-stage in
  assert_failure 64
}

@test "the full lifecycle moves data in and out as the user, faithfully" {
  make_tree "$TEST_DIR/pfs/input"
  job_script "#BB_LUA pool=nvme capacity=1G" \
    "#BB_LUA stage_in type=directory source=$TEST_DIR/pfs/input destination=\$BB_JOB_DIR/input" \
    "#BB_LUA stage_in type=file source=$TEST_DIR/pfs/input/plain destination=one/copy" \
    "#BB_LUA stage_out type=directory source=\$BB_JOB_DIR/output destination=$TEST_DIR/pfs/results"
  bb-pool alloc --job 21 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  run bb-stage in --job 21 --json
  assert_success
  assert_output --partial '"files":'
  buf="$(bbdir $TEST_DIR/nvme/job/main.21.1)"
  [ "$(describe_tree "$TEST_DIR/pfs/input")" = "$(describe_tree "$buf/input")" ] || {
    diff <(describe_tree "$TEST_DIR/pfs/input") <(describe_tree "$buf/input"); false; }
  [ "$(stat -c %U "$buf/input/plain")" = "$U" ]
  [ "$(stat -c %i "$buf/input/plain")" = "$(stat -c %i "$buf/input/hardlink")" ]
  [ "$(stat -c %b "$buf/input/sparse")" -lt 1000 ]
  [ "$(cat "$buf/one/copy")" = hello ]
  run bb-stat job 21 --json
  assert_output --partial '"state": "staged-in"'
  bb-stage pre-run --job 21
  as_user sh -c "mkdir '$buf/output' && printf 'result\n' >'$buf/output/r.txt'"
  bb-stage post-run --job 21
  run bb-stage out --job 21
  assert_success
  [ "$(cat "$TEST_DIR/pfs/results/r.txt")" = result ]
  [ "$(stat -c %U "$TEST_DIR/pfs/results/r.txt")" = "$U" ]
  [ -z "$(find "$TEST_DIR/pfs/results" -name '*.bbkit-*')" ]
  run bb-stat job 21 --json
  assert_output --partial '"state": "staged-out"'
  bb-teardown --job 21 >/dev/null
  run bb-pool show nvme --json
  assert_output --partial '"used": 0'
}

@test "the progress record names the stage, its stager and its end; bb-stat job reads it" {
  make_tree "$TEST_DIR/pfs/input"
  job_script "#BB_LUA capacity=1G" "#BB_LUA stage_in type=directory source=$TEST_DIR/pfs/input destination=in"
  bb-pool alloc --job 23 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  before=$(date +%s)
  bb-stage in --job 23 >/dev/null
  record="$TEST_DIR/state/progress/main.23.1"
  [ "$(stat -c %a "$record")" = 600 ]
  [ ! -e "$record.tmp" ]
  python3 - "$record" "$before" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["direction"] == "in", r
assert r["phase"] in ("copying", "syncing"), r
assert r["files_done"] == r["files_total"] > 0, r
assert r["bytes_done"] == r["bytes_total"], r
assert int(sys.argv[2]) - 1 <= r["started"] <= r["updated"], r
assert isinstance(r["pid"], int) and r["pid"] > 0, r
for key in ("files_per_second", "bytes_per_second", "eta_seconds"):
    assert key in r, key
PY
  run bb-stat job 23
  assert_success
  # The stage is over: the counters only, no pace.
  assert_line --regexp '^progress:   [0-9,]+/[0-9,]+ entries, [0-9.]+[KMG]?i?B/[0-9.]+[KMG]?i?B$'
  run bb-stat job 23 --json
  assert_output --partial '"direction": "in"'
}

@test "a second stage-in copies nothing" {
  make_tree "$TEST_DIR/pfs/input"
  job_script "#BB_LUA capacity=1G" "#BB_LUA stage_in type=directory source=$TEST_DIR/pfs/input destination=in"
  bb-pool alloc --job 22 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  bb-stage in --job 22 >/dev/null
  run bb-stage in --job 22
  assert_success
  assert_output --partial "nothing to do"
}

@test "a job without stage lines goes straight through" {
  bb-pool alloc --job 23 --user "$U" --capacity 1G >/dev/null
  run bb-stage in --job 23
  assert_success
  bb-stage pre-run --job 23
  bb-stage post-run --job 23
  run bb-stage out --job 23
  assert_success
  run bb-stat job 23 --json
  assert_output --partial '"state": "staged-out"'
}

# A slurmctld killed after bbkit's stage-out and teardown, before it saved them, replays the
# hooks on restart: they succeed with a note, and only for a job that really got that far.
@test "post-run and stage-out replayed after the teardown succeed with a note" {
  bb-pool alloc --job 24 --user "$U" --capacity 1G >/dev/null
  bb-stage in --job 24 >/dev/null
  bb-stage pre-run --job 24
  bb-stage post-run --job 24
  bb-stage out --job 24 >/dev/null
  bb-teardown --job 24 >/dev/null
  run bb-stage post-run --job 24
  assert_success
  assert_output "note: main.24.1 went through post-run before it was torn down"
  run bb-stage out --job 24
  assert_success
  assert_output "stage-out of main.24.1: nothing to do (staged out before it was torn down)"
  run bb-stage out --job 24 --json
  assert_output --partial '"note": "staged out before it was torn down"'
  # Replayed pre-run of a job that already ran: refused, so that it never runs without its data.
  run bb-stage pre-run --job 24
  assert_failure 66
  assert_output "bb-stage: job 24 already ran with burst buffer main.24.1, which was torn down: it cannot run again without it (a scheduler restarted from older state? bbkit(7), CRASHES)"
  # Torn down while running (a cancel): its results were never staged out.
  bb-pool alloc --job 25 --user "$U" --capacity 1G >/dev/null
  bb-stage in --job 25 >/dev/null
  bb-stage pre-run --job 25
  bb-teardown --job 25 >/dev/null
  run bb-stage out --job 25
  assert_failure 66
  assert_output --partial "job 25 has no burst buffer"
  run bb-stage post-run --job 25
  assert_failure 66
}

@test "--check gives the stage's own verdict without running it: 0 done, 75 running elsewhere" {
  bb-pool alloc --job 26 --user "$U" --capacity 1G >/dev/null
  run bb-stage --job 26 in --check
  assert_failure 65
  assert_output "bb-stage: stage-in of main.26.1 has not run to its end: it is allocated (bb-stage in runs it)"
  run bb-stage --job 26 out --check
  assert_failure 65
  assert_output --partial "cannot stage out main.26.1: it is allocated (stage out needs post-run)"
  # Another process holds the run lock (as a stage-in started before a restart would).
  # A holder is believed only when it has the lock file open (bbkit(7), SECURITY): this one
  # opens and locks it, then becomes a sleep that keeps it.
  lockfile="$TEST_DIR/state/run/main.26.1.lock"
  mkdir -p "$TEST_DIR/state/run"
  : >"$lockfile"
  (exec 8<"$lockfile" && flock -n 8 && exec sleep 60) &
  sleeper=$!
  sleep 0.5
  echo "$sleeper 1" >"$lockfile"
  run bb-stage --job 26 in --check
  kill "$sleeper"
  wait "$sleeper" 2>/dev/null || true
  assert_failure 75
  assert_output "bb-stage: stage-in of main.26.1 is running: pid $sleeper works on it"
  bb-stage in --job 26 >/dev/null
  run bb-stage --job 26 in --check
  assert_success
  assert_output "stage-in of main.26.1: done"
  run bb-stage --job 26 in --check --json
  assert_output --partial '"nothing_to_do": true'
  bb-stage pre-run --job 26
  bb-stage post-run --job 26
  bb-stage out --job 26 >/dev/null
  run bb-stage --job 26 out --check
  assert_output "stage-out of main.26.1: done"
  bb-teardown --job 26 >/dev/null
  # A replay after teardown: done with bb-stage out's note; stage-in has no buffer any more.
  run bb-stage --job 26 out --check
  assert_success
  assert_output "stage-out of main.26.1: done (staged out before it was torn down)"
  run bb-stage --job 26 in --check
  assert_failure 66
  run bb-stage --job 26 out --check --retry
  assert_failure 64
}

@test "a file the user cannot read is refused with 77 naming it; the state says why" {
  job_script "#BB_LUA capacity=1G" "#BB_LUA stage_in type=file source=/etc/shadow destination=s"
  bb-pool alloc --job 24 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  run bb-stage in --job 24
  assert_failure 77
  assert_output --partial "/etc/shadow"
  run bb-stat job 24 --json
  assert_output --partial '"state": "staging-in"'
  assert_output --partial "BurstBufferOperation"
  [ ! -e "$(bbdir $TEST_DIR/nvme/job/main.24.1)/s" ]
}

@test "another user's 0600 file is refused with 77" {
  echo secret >"$TEST_DIR/pfs/root-only"
  chmod 600 "$TEST_DIR/pfs/root-only"
  job_script "#BB_LUA capacity=1G" "#BB_LUA stage_in type=file source=$TEST_DIR/pfs/root-only destination=s"
  bb-pool alloc --job 25 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  run bb-stage in --job 25
  assert_failure 77
  assert_output --partial "root-only"
}

# The tree is counted by the mover's walk while it copies (no walk of its own before): refused
# with the measurement's message at the first file over the capacity, never past it.
@test "a tree larger than the buffer is refused with 65 by the copy's own walk, having written no more than the buffer holds" {
  as_user mkdir "$TEST_DIR/pfs/tree"
  for i in 1 2 3 4 5 6; do as_user head -c 1000 /dev/zero >"$TEST_DIR/pfs/tree/f$i"; done
  job_script "#BB_LUA pool=small capacity=4K" "#BB_LUA stage_in type=directory source=$TEST_DIR/pfs/tree destination=t"
  bb-pool alloc --job 27 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  run bb-stage in --job 27
  assert_failure 65
  assert_output --regexp "^bb-stage: .*stage-in needs at least 5KB \(5000 bytes counted so far\) but the buffer holds 4KiB \(request a larger capacity\)"
  written=$(find "$(bbdir $TEST_DIR/small/job/main.27.1)" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
  [ "$written" -le 4096 ] || fail "$written bytes written into a 4KiB buffer"
}

# Where the time went: bb-stage --json and bb-stat job (from the progress record).
@test "a stage reports its phases: walk, wait, copy, finish, sync, the serial share and the workers' idle share" {
  as_user mkdir "$TEST_DIR/pfs/few"
  for i in 1 2 3; do as_user sh -c "echo $i >'$TEST_DIR/pfs/few/f$i'"; done
  job_script "#BB_LUA pool=nvme capacity=1G" "#BB_LUA stage_in type=directory source=$TEST_DIR/pfs/few destination=few"
  bb-pool alloc --job 28 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  run bb-stage in --job 28 --json
  assert_success
  for field in walk wait copy finish sync before after busy threads seconds idle_share; do
    assert_output --regexp "\"phases\": \{[^}]*\"$field\": [0-9]"
  done
  run bb-stat job 28
  assert_line --regexp "^mover: +walk [0-9.]+ s, wait [0-9.]+ s, copy [0-9.]+ s, finish [0-9.]+ s, sync [0-9.]+ s; serial [0-9.]+ s of [0-9.]+ s \([0-9.]+%\); workers idle [0-9]+% \([0-9]+ threads?\)$"
  run bb-stat job 28 --json
  assert_output --regexp '"phases": \{[^}]*"idle_share"'
}

@test "sources larger than the buffer are refused with 65 before copying" {
  as_user head -c 5000 /dev/zero >"$TEST_DIR/pfs/big"
  chown "$U" "$TEST_DIR/pfs/big"
  job_script "#BB_LUA pool=small capacity=4K" "#BB_LUA stage_in type=file source=$TEST_DIR/pfs/big destination=big"
  bb-pool alloc --job 26 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  run bb-stage in --job 26
  assert_failure 65
  assert_output --partial "stage-in needs"
  [ ! -e "$(bbdir $TEST_DIR/small/job/main.26.1)/big" ]
}

@test "a symlink planted in the buffer cannot redirect a write outside it" {
  as_user sh -c "echo data >'$TEST_DIR/pfs/f'"
  job_script "#BB_LUA capacity=1G" "#BB_LUA stage_in type=file source=$TEST_DIR/pfs/f destination=in/passwd-copy"
  bb-pool alloc --job 27 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  as_user ln -s /etc "$(bbdir $TEST_DIR/nvme/job/main.27.1)/in"
  run bb-stage in --job 27
  assert_failure 77
  [ ! -e /etc/passwd-copy ]
}

@test "a stage-out source planted as a symlink out of the buffer is refused" {
  bb-pool alloc --job 28 --user "$U" --bb "#BB_LUA capacity=1G #BB_LUA stage_out type=directory source=out destination=$TEST_DIR/pfs/stolen" >/dev/null
  job=28
  buf="$(bbdir $TEST_DIR/nvme/job/main.28.1)"
  as_user ln -s /root "$buf/out"
  bb-stage in --job 28 >/dev/null
  bb-stage pre-run --job 28
  bb-stage post-run --job 28
  run bb-stage out --job 28
  assert_failure 77
  [ ! -e "$TEST_DIR/pfs/stolen" ] || [ -z "$(ls -A "$TEST_DIR/pfs/stolen")" ]
}

@test "stage-out to a directory the user cannot write fails naming it, keeps the data, and --retry works" {
  mkdir -p "$TEST_DIR/locked"
  chmod 755 "$TEST_DIR/locked"
  bb-pool alloc --job 29 --user "$U" --bb "#BB_LUA capacity=1G #BB_LUA stage_out type=directory source=out destination=$TEST_DIR/locked/res" >/dev/null
  buf="$(bbdir $TEST_DIR/nvme/job/main.29.1)"
  bb-stage in --job 29 >/dev/null; bb-stage pre-run --job 29
  as_user sh -c "mkdir '$buf/out' && echo keep >'$buf/out/k'"
  bb-stage post-run --job 29
  run bb-stage out --job 29
  assert_failure 77
  assert_output --partial "$TEST_DIR/locked"
  [ "$(cat "$buf/out/k")" = keep ]
  run bb-stage out --job 29
  assert_failure 69
  assert_output --partial "--retry"
  chown "$U" "$TEST_DIR/locked"
  run bb-stage out --job 29 --retry
  assert_success
  [ "$(cat "$TEST_DIR/locked/res/k")" = keep ]
}

@test "a stage-in timeout stops the mover and records the reason" {
  # 6 GiB of allocated (unwritten) extents: instant to make, far more than a second to copy.
  as_user fallocate -l 6G "$TEST_DIR/pfs/big"
  write_config '[timeouts]' 'stage_in = 1'
  job_script "#BB_LUA capacity=7G" "#BB_LUA stage_in type=file source=$TEST_DIR/pfs/big destination=big"
  bb-pool alloc --job 30 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
  run bb-stage in --job 30
  assert_failure 75
  assert_output --partial "timed out"
  nothing_open_here
  run bb-stat job 30 --json
  assert_output --partial "timed out"
}

@test "kill -9 in the middle of a copy, then recover and a rerun resumes" {
  as_user mkdir "$TEST_DIR/pfs/many"
  as_user sh -c "cd '$TEST_DIR/pfs/many' && for i in \$(seq 300); do head -c 200000 /dev/urandom >f\$i; done"
  job_script "#BB_LUA capacity=1G" "#BB_LUA stage_in type=directory source=$TEST_DIR/pfs/many destination=m"
  bb-pool alloc --job 31 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  FREEZE_AFTER=20 FREEZE_WATCH="ls '$(bbdir $TEST_DIR/nvme/job/main.31.1)/m'" start_frozen_stage in --job 31
  # The mover dies with the stager (parent-death signal, SIGKILL even while stopped).
  kill_frozen_stage
  run bb-pool recover
  assert_output --partial "interrupted"
  run bb-stage in --job 31 --json
  assert_success
  [ "$(describe_tree "$TEST_DIR/pfs/many")" = "$(describe_tree "$(bbdir $TEST_DIR/nvme/job/main.31.1)/m")" ]
}

# Path, type, mode, link count, ns mtime, and size and link target of every entry but a
# directory (whose size depends on its history) (the top directory's own line included), then
# content hashes.
describe_fully() {
  (cd "$1" && { find . -type d -printf '%p %y %m %n %T@\n'; find . ! -type d -printf '%p %y %m %n %T@ %s %l\n'; } | sort &&
    find . -type f -print0 | sort -z | xargs -0 -r sha1sum)
}

# Stages make_tree's tree in as `input` of job $1 and runs it to post-run; the job's stage_out
# line copies it to $2.
staged_tree_job() {
  make_tree "$TEST_DIR/pfs/input"
  job_script "#BB_LUA capacity=1G" \
    "#BB_LUA stage_in type=directory source=$TEST_DIR/pfs/input destination=input" \
    "#BB_LUA stage_out type=directory source=input destination=$2"
  bb-pool alloc --job "$1" --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  bb-stage in --job "$1" >/dev/null
  bb-stage pre-run --job "$1"
  bb-stage post-run --job "$1"
}

@test "stage-out into a new destination gives an identical tree and leaves no temporary" {
  staged_tree_job 35 "$TEST_DIR/pfs/results"
  run bb-stage out --job 35
  assert_success
  # Round trip: content, modes, ns mtimes (the renamed top directory's too), symlink targets,
  # link counts; the hard link is one inode.
  diff <(describe_fully "$TEST_DIR/pfs/input") <(describe_fully "$TEST_DIR/pfs/results")
  [ "$(stat -c %i "$TEST_DIR/pfs/results/plain")" = "$(stat -c %i "$TEST_DIR/pfs/results/hardlink")" ]
  [ "$(stat -c %b "$TEST_DIR/pfs/results/sparse")" -lt 1000 ]
  [ "$(stat -c %U "$TEST_DIR/pfs/results/sub/deeper/leaf")" = "$U" ]
  [ -z "$(find "$TEST_DIR/pfs" -name '*.bbkit-*')" ]
}

@test "stage-out into an existing destination directory keeps what is there and adds the rest" {
  as_user mkdir -p "$TEST_DIR/pfs/results/sub"
  as_user sh -c "echo mine >'$TEST_DIR/pfs/results/mine'; echo old >'$TEST_DIR/pfs/results/plain'"
  staged_tree_job 36 "$TEST_DIR/pfs/results"
  run bb-stage out --job 36
  assert_success
  [ "$(cat "$TEST_DIR/pfs/results/mine")" = mine ]
  # Everything staged is identical; the top directory lists one entry more.
  diff <(describe_fully "$TEST_DIR/pfs/input" | grep -v '^\. d') \
    <(describe_fully "$TEST_DIR/pfs/results" | grep -v -e '^\. d' -e '^\./mine ' -e ' \./mine$')
  [ "$(stat -c %i "$TEST_DIR/pfs/results/plain")" = "$(stat -c %i "$TEST_DIR/pfs/results/hardlink")" ]
  [ -z "$(find "$TEST_DIR/pfs" -name '*.bbkit-*')" ]
}

@test "kill -9 while a stage-out fills its temporary directory: no final name, then --retry completes" {
  job_script "#BB_LUA capacity=1G" "#BB_LUA stage_out type=directory source=res destination=$TEST_DIR/pfs/res"
  bb-pool alloc --job 33 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  buf="$(bbdir $TEST_DIR/nvme/job/main.33.1)"
  bb-stage in --job 33 >/dev/null; bb-stage pre-run --job 33
  as_user mkdir -p "$buf/res/sub"
  as_user sh -c "cd '$buf/res' && for i in \$(seq 600); do head -c 100000 /dev/urandom >f\$i; done; ln f1 sub/f1-link; ln -s f2 sub/f2-link"
  bb-stage post-run --job 33
  # A destination that does not exist is built as .res.bbkit-<hex> beside it, final names inside.
  FREEZE_AFTER=20 FREEZE_WATCH="find '$TEST_DIR/pfs' -mindepth 2 -path '*/.res.bbkit-*' -type f" \
    start_frozen_stage out --job 33
  # The mover is frozen before its rename; the stager is killed and the mover dies with it
  # (parent-death signal, SIGKILL even while stopped).
  kill_frozen_stage
  [ ! -e "$TEST_DIR/pfs/res" ]
  left=$(find "$TEST_DIR/pfs" -mindepth 1 -maxdepth 1 -name '.res.bbkit-*' -type d | wc -l)
  echo "temporary directories left by the killed stage-out: $left"
  [ "$left" = 1 ]
  temp_inode=$(find "$TEST_DIR/pfs" -mindepth 1 -maxdepth 1 -name '.res.bbkit-*' -type d -printf '%i')
  bb-pool recover >/dev/null
  run bb-stage out --job 33 --retry
  assert_success
  [ -z "$(find "$TEST_DIR/pfs" -name '*.bbkit-*')" ]
  diff <(describe_fully "$buf/res") <(describe_fully "$TEST_DIR/pfs/res")
  # The rerun (same boot, same buffer) took the killed run's tree over and renamed it into place.
  [ "$(stat -c %i "$TEST_DIR/pfs/res")" = "$temp_inode" ]
}

# libstdc++'s std::hash of a string (what older movers put in their temporaries' names, of the
# boot id anyone may read): 32 low bits in hex.
old_boot_tag() {
  python3 -c '
import sys
M, mask = 0xc6a4a7935bd1e995, (1 << 64) - 1
data = open("/proc/sys/kernel/random/boot_id").read().strip().encode()
n, a = len(data), len(data) & ~7
h = (0xc70f6907 ^ (n * M)) & mask
for i in range(0, a, 8):
    k = int.from_bytes(data[i:i + 8], "little") * M & mask
    h = (h ^ ((k ^ (k >> 47)) * M & mask)) * M & mask
if n & 7:
    h = (h ^ int.from_bytes(data[a:], "little")) * M & mask
h = (h ^ (h >> 47)) * M & mask
print("%08x" % ((h ^ (h >> 47)) & 0xffffffff))'
}

@test "a stage-out never takes over another user's temporary planted in a shared directory" {
  A=$(test_user bbkit-test-other)
  # A group directory both may write (2775, not sticky), the other user in the victim's group.
  shared="$TEST_DIR/pfs/group"
  as_user mkdir "$shared"
  chmod 2775 "$shared"
  job_script "#BB_LUA capacity=1G" "#BB_LUA stage_out type=directory source=res destination=$shared/res"
  bb-pool alloc --job 34 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  buf="$(bbdir $TEST_DIR/nvme/job/main.34.1)"
  bb-stage in --job 34 >/dev/null; bb-stage pre-run --job 34
  as_user mkdir -m 0700 "$buf/res"
  as_user sh -c "echo secret >'$buf/res/result'"
  bb-stage post-run --job 34
  # The old name (the boot's public hash) and the new one (the buffer's tag, as if the other
  # user had seen it beside a killed run), both planted 0777 by the other user.
  token=$(sqlite3 "$TEST_DIR/state/state.db" "SELECT temp_token FROM buffers WHERE job_id = 34")
  [ ${#token} = 32 ]
  tag=$(printf %s "$(cat /proc/sys/kernel/random/boot_id)" | openssl dgst -sha256 -hmac "$token" -r | cut -c1-16)
  for temp in ".res.bbkit-$(old_boot_tag)0123456789ab" ".res.bbkit-${tag}0123456789ab"; do
    runuser -u "$A" -g "$U" -- mkdir "$shared/$temp"
    runuser -u "$A" -g "$U" -- chmod 0777 "$shared/$temp"
    runuser -u "$A" -g "$U" -- touch "$shared/$temp/planted"
  done
  run bb-stage out --job 34
  assert_success
  # The result is the victim's, mode as the source, holding what the source holds.
  [ "$(stat -c '%U %a' "$shared/res")" = "$U 700" ]
  [ "$(ls -A "$shared/res")" = result ]
  [ "$(cat "$shared/res/result")" = secret ]
  # The other user's directories are theirs, untouched.
  [ "$(find "$shared" -mindepth 1 -maxdepth 1 -name '.res.bbkit-*' -user "$A" | wc -l)" = 2 ]
}

@test "a record made before temporaries had a token gets one before its first stage" {
  job_script "#BB_LUA capacity=1G" "#BB_LUA stage_out type=directory source=res destination=$TEST_DIR/pfs/res"
  bb-pool alloc --job 37 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  sqlite3 "$TEST_DIR/state/state.db" "UPDATE buffers SET temp_token = '' WHERE job_id = 37"
  bb-stage in --job 37 >/dev/null
  bb-stage pre-run --job 37
  as_user mkdir "$(bbdir $TEST_DIR/nvme/job/main.37.1)/res"
  bb-stage post-run --job 37
  run bb-stage out --job 37
  assert_success
  token=$(sqlite3 "$TEST_DIR/state/state.db" "SELECT temp_token FROM buffers WHERE job_id = 37")
  [[ $token =~ ^[0-9a-f]{32}$ ]]
}

@test "paths prints the job's environment and writes Slurm's path file" {
  bb-pool alloc --job 32 --user "$U" --capacity 1G >/dev/null
  run bb-stage paths --job 32
  assert_success
  assert_line "BB_JOB_DIR=$(bbdir $TEST_DIR/nvme/job/main.32.1)"
  assert_line "DW_JOB_STRIPED=$(bbdir $TEST_DIR/nvme/job/main.32.1)"
  touch "$TEST_DIR/pathfile"
  bb-stage paths --job 32 --output "$TEST_DIR/pathfile"
  grep -q "^DW_JOB_PRIVATE=$(bbdir $TEST_DIR/nvme/job/main.32.1)$" "$TEST_DIR/pathfile"
  run bb-stage paths --job 99
  assert_failure 66
  # A failed call's code is its errno's, as in every tool (bbkit(7), EXIT STATUS).
  run bb-stage paths --job 32 --output "$TEST_DIR/no/such/pathfile"
  assert_failure 66
  assert_output --partial "bb-stage: cannot create $TEST_DIR/no/such/pathfile: No such file or directory"
}

@test "paths --output writes into no symlink, device, FIFO, directory, second name, another's file or other content" {
  bb-pool alloc --job 32 --user "$U" --capacity 1G >/dev/null
  mkdir "$TEST_DIR/t"
  echo "the target's own" >"$TEST_DIR/t/target"
  ln -s "$TEST_DIR/t/target" "$TEST_DIR/t/symlink"
  ln -s /dev/stdout "$TEST_DIR/t/stdout"
  ln -s "$TEST_DIR/t/missing" "$TEST_DIR/t/dangling"
  echo "root:x:0:0:root:/root:/bin/bash" >"$TEST_DIR/t/passwd"
  echo "BB_JOB_DIR=/elsewhere" >"$TEST_DIR/t/theirs"
  chown nobody "$TEST_DIR/t/theirs"
  mkfifo "$TEST_DIR/t/fifo"
  mknod "$TEST_DIR/t/device" c 1 3
  mkdir "$TEST_DIR/t/directory"
  echo "two names" >"$TEST_DIR/t/linked"
  ln "$TEST_DIR/t/linked" "$TEST_DIR/t/linked2"
  before=$(cd "$TEST_DIR/t" && stat -c '%n %F %i %h %s %Y' -- * && cat target linked)
  local name
  for name in symlink stdout dangling fifo device directory linked passwd theirs; do
    run timeout 20 bb-stage paths --job 32 --output "$TEST_DIR/t/$name"
    assert_failure 73
    assert_output --regexp "^bb-stage: refusing to write $TEST_DIR/t/$name: it (is a symlink|is not a regular file|has other names \(hard links\)|belongs to uid [0-9]+|is not a file this command wrote)"
  done
  [ "$(cd "$TEST_DIR/t" && stat -c '%n %F %i %h %s %Y' -- * && cat target linked)" = "$before" ]
  # - is standard output; no name, or a directory's, is a usage error.
  cd "$TEST_DIR/t"
  run bb-stage paths --job 32 --output -
  assert_success
  assert_line "BB_JOB_DIR=$(bbdir $TEST_DIR/nvme/job/main.32.1)"
  [ ! -e "$TEST_DIR/t/-" ]
  run -64 bb-stage paths --job 32 --output ""
  run -64 bb-stage paths --job 32 --output "$TEST_DIR/t/"
  assert_output "bb-stage: --output needs a file name, or - for standard output"
  # A file made empty before the call (Slurm's), or written by an earlier call, is written in
  # place; a new one is made 0600.
  : >"$TEST_DIR/t/pathfile"
  inode=$(stat -c %i "$TEST_DIR/t/pathfile")
  bb-stage paths --job 32 --output "$TEST_DIR/t/pathfile"
  bb-stage paths --job 32 --output "$TEST_DIR/t/pathfile"
  [ "$(stat -c %i "$TEST_DIR/t/pathfile")" = "$inode" ]
  [ "$(grep -c "^BB_JOB_DIR=" "$TEST_DIR/t/pathfile")" = 1 ]
  bb-stage paths --job 32 --output "$TEST_DIR/t/new"
  [ "$(stat -c %a "$TEST_DIR/t/new")" = 600 ]
}

@test "a failing pre_run hook fails the phase with its last stderr line" {
  printf '#!/bin/sh\necho "noise" >&2\necho "quota server unreachable for $BBKIT_USER" >&2\nexit 3\n' >"$TEST_DIR/hook"
  chmod 755 "$TEST_DIR/hook"
  write_config '[hooks]' "pre_run = \"$TEST_DIR/hook\""
  bb-pool alloc --job 33 --user "$U" --capacity 1G >/dev/null
  bb-stage in --job 33 >/dev/null
  run bb-stage pre-run --job 33
  assert_failure 70
  assert_output --partial "quota server unreachable for $U"
  run bb-stat job 33 --json
  assert_output --partial '"state": "pre-run"'
}

@test "a pre_run hook that cannot be started fails the phase with its errno's code" {
  printf '#!/bin/sh\nexit 0\n' >"$TEST_DIR/hook"
  chmod 644 "$TEST_DIR/hook"
  write_config '[hooks]' "pre_run = \"$TEST_DIR/hook\""
  bb-pool alloc --job 36 --user "$U" --capacity 1G >/dev/null
  bb-stage in --job 36 >/dev/null
  run bb-stage pre-run --job 36
  assert_failure 77
  assert_output "bb-stage: cannot start $TEST_DIR/hook: Permission denied"
}

@test "a phase out of order is refused naming both states" {
  bb-pool alloc --job 34 --user "$U" --capacity 1G >/dev/null
  run bb-stage out --job 34
  assert_failure 65
  assert_output --partial "allocated"
  run bb-stage in --job 404
  assert_failure 66
}

@test "stage_concurrency bounds stagers; the rest wait their turn" {
  write_config '[limits]' 'stage_concurrency = 1'
  as_user dd if=/dev/zero of="$TEST_DIR/pfs/big" bs=1M count=300 status=none
  for j in 41 42; do
    job_script "#BB_LUA capacity=1G" "#BB_LUA stage_in type=file source=$TEST_DIR/pfs/big destination=b"
    bb-pool alloc --job $j --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  done
  bb-stage in --job 41 >/dev/null & a=$!
  bb-stage in --job 42 >/dev/null & b=$!
  wait $a; wait $b
  run bb-stat job 42 --json
  assert_output --partial '"state": "staged-in"'
}

@test "paths --json prints the environment as one JSON object" {
  bb-pool alloc --job 34 --user "$U" --capacity 1G >/dev/null
  run bb-stage --json paths --job 34
  assert_success
  assert_output --partial "\"BB_JOB_DIR\": \"$(bbdir $TEST_DIR/nvme/job/main.34.1)\""
  assert_output --partial '"DW_JOB_STRIPED"'
  [ "${output:0:1}" = "{" ]
}

@test "one file staged is counted as 1 file" {
  as_user sh -c "printf 'x' >'$TEST_DIR/pfs/one'"
  job_script "#BB_LUA capacity=1G" "#BB_LUA stage_in type=file source=$TEST_DIR/pfs/one destination=one"
  bb-pool alloc --job 35 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  run bb-stage in --job 35
  assert_success
  assert_output --partial ": 1 file written,"
}

# bb-mover's errors, as bb-stage reads them: an "error CODE {...}" line on standard output, the
# message and the failure's kind (stage_plan.hpp), and "bb-mover: MESSAGE" on standard error,
# with bbkit(7)'s exit codes.
@test "bb-mover reports a malformed plan (65) and an argument (64) on stdout and stderr" {
  # Installed, it is PREFIX/libexec/bbkit/bb-mover (bbkit(7), FILES); in the build, bin/.
  local mover=$BBKIT_BIN/../libexec/bbkit/bb-mover
  [ -x "$mover" ] || mover=$BBKIT_BIN/bb-mover
  bb-mover() { "$mover" "$@"; }
  run --separate-stderr bb-mover <<<'not a plan'
  assert_failure 65
  assert_output --regexp '^error 65 \{"kind":"internal","message":"malformed stage plan: .*"\}$'
  [[ $stderr == "bb-mover: malformed stage plan: "* ]] || fail "stderr: $stderr"
  run --separate-stderr bb-mover --no-such-option </dev/null
  assert_failure 64
  assert_output --regexp '^error 64 \{"kind":"internal","message":".*--no-such-option.* \(see bb-mover --help\)"\}$'
  [[ $stderr == "bb-mover: "*"--no-such-option"*" (see bb-mover --help)" ]] || fail "stderr: $stderr"
}
