#!/usr/bin/env bats
# bbkit on the nodes of a real multi-node Slurm cluster (nodes.bash with NODE_BBKIT=1; bbkit(7),
# NODE-LOCAL POOLS): slurmd's Prolog and Epilog are share/bbkit/standalone/slurm-node/prolog and epilog, its
# TaskProlog the standalone task-prolog; every node has its own pool "nvme" on its local disk
# and its own state directory, at the same paths; with the tools' node_local (NODE_POOL_LOCAL=yes)
# install-slurm --node-local installs the cli_filter that adds each job's GRES (bbnvme, one
# unit per MiB) at submit, and job_submit.lua, slurmctld's check of every job and change. Each
# scenario reads the nodes' pools from inside the nodes (node_tool) and Slurm's count from
# scontrol -d show node (gres_used). Every line seen is kept in
# build/tests/slurm/transcript-nodelocal.txt.

BBKIT_SLURM_TRANSCRIPT=${BBKIT_SLURM_TRANSCRIPT:-$BBKIT_BUILD_DIR/tests/slurm/transcript-nodelocal.txt}
# shellcheck disable=SC2034 # read by nodes.bash
NODE_BBKIT=1
# shellcheck disable=SC2034 # read by nodes.bash: a 1 GiB pool per node (GRES bbnvme:1024)
NODE_POOL_UNITS=1024
load nodes

setup_file() {
  mkdir -p "$(dirname "$TRANSCRIPT")"
  : >"$TRANSCRIPT"
  start_nodes
}

teardown_file() {
  finish_nodes
}

setup() {
  skip_without_nodes
  scenario_setup
}

teardown() {
  [ -z "${NODES_SKIP:-}" ] || return 0
  unslow_node
  scenario_teardown
}

# A bbkit tool inside NODE (its state directory, pool and /etc/bbkit/bbkit.toml), as root.
node_tool() {
  local node=$1
  shift
  node_exec "$node" env -i PATH="$NODE_BBKIT_TREE/bin:/usr/sbin:/usr/bin:/sbin:/bin" "$@"
}

# What NODE's pool "nvme" has in use, as bb-pool list shows it ("0" when nothing).
pool_used() {
  node_tool "$1" bb-pool list | awk '$1 == "nvme" { print $3 }'
}

pool_used_is() {
  [ "$(pool_used "$1")" = "$2" ]
}

# The job is PENDING for REASON, as squeue's %r says it.
job_pending_for() {
  [ "$(squeue -h -j "$1" -o '%T %r')" = "PENDING $2" ]
}

pools_free() {
  local node
  for node in "$@"; do
    [ "$(pool_used "$node")" = 0 ] || return 1
    [ -z "$(ls -A "$SLURM_DIR/nodes/$node/nvme/pool/job" 2>/dev/null)" ] || return 1
  done
}

all_nodes_idle() {
  [ "$(sinfo -h -N -o '%N %T')" = "$(printf '%s idle\n' "${NODES[@]}")" ]
}

# The pids of bb-mover processes inside NODE's namespaces (its network namespace). A zombie
# does not count: this host's PID 1 reaps orphans lazily.
node_movers() {
  local p
  for p in $(ip netns pids "$(node_netns "$1")"); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = bb-mover ] || continue
    grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null || echo "$p"
  done
  return 0
}

# NODE's GRES in use as slurmctld counts it: "bbnvme:N" (scontrol -d show node's GresUsed).
gres_used() {
  scontrol -d show node "$1" | sed -n 's/.*GresUsed=\([^ ]*\).*/\1/p'
}

gres_free() {
  local node
  for node in "$@"; do
    [ "$(gres_used "$node")" = bbnvme:0 ] || return 1
  done
}

wait_ended() {
  wait_job "$1" 'JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL)' "${2:-60}"
}

# The smoke scenario: what the submission tier runs of this suite (tests/CMakeLists.txt).
# bats test_tags=smoke
@test "a. a two-node job: each node stages the input into its own buffer and reads it from BB_JOB_DIR; the results land; both pools are free after" {
  local script node
  # The results' directory exists: with a plain pool on each node (no node_local), every node
  # stages its out/ into the same destination, and a new one would be created by both at once.
  mkdir -p "$DATA_DIR/a/out"
  head -c 3M /dev/urandom >"$DATA_DIR/a/input.dat"
  chown -R "$SLURM_TEST_USER:" "$DATA_DIR/a"
  script=$(job_script a.sh '#SBATCH --job-name=a' '#SBATCH --nodes=2' \
    '#BB pool=nvme capacity=8MiB' \
    "#BB stage_in type=file source=$DATA_DIR/a/input.dat destination=\$BB_JOB_DIR/input.dat" \
    "#BB stage_out type=directory source=\$BB_JOB_DIR/out destination=$DATA_DIR/a/out" <<'JOB'
srun --ntasks-per-node=1 sh -c 'mkdir -p "$BB_JOB_DIR/out" && echo "$(hostname) $BB_JOB_DIR $(md5sum <"$BB_JOB_DIR/input.dat")" | tee "$BB_JOB_DIR/out/$(hostname)"'
JOB
  )
  submit "$script"
  assert_equal "$status" 0
  wait_ended "$JOB"
  [[ $JOB_STATE_LINE == JobState=COMPLETED* ]] || fail "job $JOB: $JOB_STATE_LINE; $(cat "$JOBS_DIR/a-$JOB.out" 2>/dev/null)"
  local sum nodes
  sum=$(md5sum <"$DATA_DIR/a/input.dat")
  nodes=$(scontrol show hostnames "$(job_field "$JOB" NodeList)")
  assert_equal "$(wc -l <<<"$nodes")" 2
  for node in $nodes; do
    # Each node read the whole input from its own buffer, under the pool's path on that node.
    run grep "^$node " "$JOBS_DIR/a-$JOB.out"
    assert_output --regexp "^$node $NODE_POOL_DIR/job/[^ ]+ $sum"
    # gather=nodes, a node-local pool's default: each node's results under DEST/<node>.
    if [ "$NODE_POOL_LOCAL" = yes ]; then
      assert_equal "$(cat "$DATA_DIR/a/out/$node/$node")" "$output"
    else
      assert_equal "$(cat "$DATA_DIR/a/out/$node")" "$output"
    fi
  done
  # The buffers were on the nodes' own disks: the host has no pool at that path.
  assert [ ! -e "$NODE_POOL_DIR" ]
  wait_until 30 "both pools free" pools_free $nodes
  wait_until 30 "every node idle" all_nodes_idle
}

@test "b. scancel during a two-node stage-in stops it on both nodes and frees both pools" {
  local script node movers=() p ns
  mkdir -p "$DATA_DIR/b"
  head -c 768M /dev/zero >"$DATA_DIR/b/big.dat"
  chown -R "$SLURM_TEST_USER:" "$DATA_DIR/b"
  # Both nodes' slurmds, and so their Prologs and movers, slowed, and the file large: the copy
  # lasts long enough to be seen on this busy host (at full speed it can end between two looks;
  # at 256 MiB one node's copy once ended unseen while three releases' suites ran at once).
  slow_node n1 10 n2
  script=$(job_script b.sh '#SBATCH --job-name=b' '#SBATCH --nodes=2' '#SBATCH --nodelist=n1,n2' \
    '#BB pool=nvme capacity=800MiB' \
    "#BB stage_in type=file source=$DATA_DIR/b/big.dat destination=\$BB_JOB_DIR/big.dat" <<<'echo "the job ran"')
  submit "$script"
  assert_equal "$status" 0
  # Each node's mover stopped (SIGSTOP) as soon as it shows: the stage-in holds there.
  local deadline=$((SECONDS + 45)) found
  while [ "${#movers[@]}" -lt 2 ] && [ "$SECONDS" -lt "$deadline" ]; do
    for node in n1 n2; do
      found=0
      for p in "${movers[@]}"; do
        [ "$(ip netns identify "$p" 2>/dev/null)" = "$(node_netns "$node")" ] && found=1
      done
      [ "$found" -eq 0 ] || continue
      for p in $(node_movers "$node"); do
        kill -STOP "$p" && movers+=("$p") && PAUSED_PIDS="${PAUSED_PIDS:-} $p"
      done
    done
    sleep 0.01
  done
  [ "${#movers[@]}" -ge 2 ] || fail "the stage-in's movers did not show on both nodes (${movers[*]})"
  transcript "(bb-mover stopped on n1 and n2: ${movers[*]})"
  for node in n1 n2; do
    assert_equal "$(pool_used "$node")" 800MiB
  done
  assert_equal "$(job_field "$JOB" JobState) $(job_field "$JOB" Reason)" "RUNNING Prolog"

  slurm_run scancel "$JOB"
  assert_equal "$status" 0
  wait_ended "$JOB" 60
  assert_equal "$JOB_STATE_LINE" "JobState=CANCELLED Reason=Prolog BurstBufferState="
  wait_until 30 "both pools free" pools_free n1 n2
  wait_until 30 "every node idle" all_nodes_idle
  # No mover is left, stopped or not, and the job never ran.
  for node in n1 n2; do
    assert_equal "$(node_movers "$node")" ""
  done
  assert_file_not_exists "$JOBS_DIR/b-$JOB.out"
}

@test "c. a source removed after submit: the job is held with bbkit's reason naming the node; every node stays in service and its pool free" {
  local script
  mkdir -p "$DATA_DIR/c"
  echo input >"$DATA_DIR/c/in.dat"
  chown -R "$SLURM_TEST_USER:" "$DATA_DIR/c"
  script=$(job_script c.sh '#SBATCH --job-name=c' '#SBATCH --nodes=2' '#SBATCH --hold' \
    '#BB pool=nvme capacity=2MiB' \
    "#BB stage_in type=file source=$DATA_DIR/c/in.dat destination=\$BB_JOB_DIR/in.dat" <<<'echo "should not run"')
  submit "$script"
  assert_equal "$status" 0
  rm "$DATA_DIR/c/in.dat"
  slurm_run scontrol release "$JOB"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=PENDING Reason=job_requeued_in_held_state' 60
  assert_equal "$(job_field "$JOB" Priority)" 0
  run scontrol show job "$JOB"
  assert_output --regexp "AdminComment=bbkit: node n[1-4]: bb-stage: .*'$DATA_DIR/c/in.dat': cannot stat: No such file or directory"
  wait_until 30 "every node idle" all_nodes_idle
  wait_until 30 "every pool free" pools_free "${NODES[@]}"
  assert_file_not_exists "$JOBS_DIR/c-$JOB.out"
}

@test "d. a pool drained on one node is no fault of the node: the job is held with bbkit's reason, every node stays in service and its pool free" {
  local script
  node_tool n3 bb-pool drain nvme
  script=$(job_script d.sh '#SBATCH --job-name=d' '#SBATCH --nodes=2' '#SBATCH --nodelist=n3,n4' \
    '#BB pool=nvme capacity=2MiB' <<<'echo "should not run"')
  submit "$script"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=PENDING Reason=job_requeued_in_held_state' 60
  run scontrol show job "$JOB"
  assert_output --partial "AdminComment=bbkit: node n3: bb-pool: pool 'nvme' is draining"
  wait_until 30 "n3 and n4 idle" sh -c "[ \"\$(sinfo -h -n n3,n4 -o '%T' | sort -u)\" = idle ]"
  wait_until 30 "n4's pool free" pools_free n4
  slurm_run scancel "$JOB"
  node_tool n3 bb-pool resume nvme
  wait_until 30 "every node idle" all_nodes_idle
}

# NODE's Gres= as slurmctld holds it now (scontrol show node: "bbnvme:1K" for 1024).
node_gres() {
  scontrol -o show node "$1" | tr ' ' '\n' | sed -n 's/^Gres=//p' | head -n 1
}

node_gres_is() {
  [ "$(node_gres "$1")" = "$2" ]
}

# NODE's HealthCheckProgram run by hand, as an administrator does on the node (slurmd runs it
# with SLURMD_NODENAME alone).
node_healthcheck() {
  node_exec "$1" env -i SLURMD_NODENAME="$1" "$NODE_BBKIT_TREE/share/bbkit/standalone/slurm-node/healthcheck"
}

@test "e. a buffer kept by a failed stage-out: Slurm's count of the node's GRES is lowered by its space, so a job that would not fit waits for Resources instead of being requeued; a reconfigure's count is fixed again, and ending the buffer restores it" {
  local first second
  # The first job's results cannot land: its destination's parent is root's.
  mkdir -m 0755 "$DATA_DIR/e"
  # shellcheck disable=SC2016 # expanded in the job
  first=$(job_script e1.sh '#SBATCH --job-name=e1' '#SBATCH --nodelist=n2' \
    '#BB pool=nvme capacity=800MiB' \
    "#BB stage_out type=directory source=\$BB_JOB_DIR/out destination=$DATA_DIR/e/out" <<<'mkdir "$BB_JOB_DIR/out" && hostname >"$BB_JOB_DIR/out/who" && sleep 6')
  # shellcheck disable=SC2016 # expanded in the job
  second=$(job_script e2.sh '#SBATCH --job-name=e2' '#SBATCH --nodelist=n2' \
    '#BB pool=nvme capacity=400MiB' <<<'echo "e2 ran in $BB_JOB_DIR"')
  assert_equal "$(node_gres n2)" bbnvme:1K
  submit "$first"
  local one=$JOB
  # The second is queued behind the first, before its buffer is kept.
  wait_job "$one" 'JobState=RUNNING' 60
  submit "$second"
  local two=$JOB
  wait_ended "$one" 60
  [[ $JOB_STATE_LINE == JobState=COMPLETED* ]] || fail "job $one: $JOB_STATE_LINE"
  # n2's Epilog failed to stage out: the buffer and its data stay, and Slurm's count of n2's
  # GRES is what is free: 1024 - 800 units.
  wait_until 30 "n2 idle" node_idle n2
  assert_equal "$(pool_used n2)" 800MiB
  assert_equal "$(gres_used n2)" bbnvme:0
  assert_equal "$(node_gres n2)" bbnvme:224
  transcript "root# scontrol show node n2 | grep Gres" "$(scontrol show node n2 | grep Gres)"
  assert_equal "$(node_gres n1)" bbnvme:1K
  run node_tool n2 bb-stat gres --slurm-jobs "" --slurm-node-gres "$(node_gres n2)"
  transcript "root@n2# bb-stat gres --slurm-jobs '' --slurm-node-gres $(node_gres n2)" "$output"
  assert_success
  assert_line --regexp '^ *nvme +bbnvme +1024 +800 +224 +224$'
  assert_file_not_exists "$DATA_DIR/e/out"
  # Slurm does not place the second where it cannot fit: it waits (22.05: BadConstraints, n2
  # alone counting too few), never requeued, no AdminComment. A job asking n2 alone for more
  # than it now counts is refused at submit.
  sleep 5
  run squeue -h -j "$two" -o '%T %r'
  transcript "root# squeue -j $two" "$output"
  assert_output --regexp '^PENDING '
  run scontrol show job "$two"
  assert_output --partial "Restarts=0"
  refute_output --partial "AdminComment=bbkit"
  slurm_run -u sbatch "$second"
  assert_failure
  assert_output --partial "Requested node configuration is not available"
  # A reconfigure gives n2 slurm.conf's count again: check names the difference, and the
  # healthcheck (run every HealthCheckInterval; here by hand) lowers it again. The job is held
  # meanwhile: Slurm would place it on n2, whose Prolog would lower the count and requeue it.
  scontrol hold "$two"
  scontrol reconfigure
  wait_until 30 "n2's count restored by the reconfigure" node_gres_is n2 bbnvme:1K
  run node_tool n2 bb-pool check --slurm-jobs "" --slurm-node-gres "$(node_gres n2)"
  transcript "root@n2# bb-pool check --slurm-jobs '' --slurm-node-gres bbnvme:1K" "$output" "(exit $status)"
  assert_failure 1
  assert_output --partial "gres-count"
  assert_output --partial "bbnvme: Slurm counts 1024 units on this node, bbkit 224"
  run node_healthcheck n2
  transcript "root@n2# SLURMD_NODENAME=n2 healthcheck" "$output" "(exit $status)"
  assert_success
  assert_equal "$(node_gres n2)" bbnvme:224
  run sinfo -h -n n2 -o '%T'
  refute_output --partial drain
  scontrol release "$two"
  # The administrator's fix: the destination writable, the stage-out retried and the kept
  # buffer ended by hand, on the node. Ending it before the retry is refused, naming the retry.
  run node_tool n2 bb-stage --job "$one" end
  transcript "root@n2# bb-stage --job $one end" "$output" "(exit $status)"
  assert_failure
  assert_output --partial "bb-stage out --retry --job $one"
  assert_equal "$(pool_used n2)" 800MiB
  chown "$SLURM_TEST_USER:" "$DATA_DIR/e"
  run node_tool n2 bb-stage out --retry --job "$one"
  transcript "root@n2# bb-stage out --retry --job $one" "$output" "(exit $status)"
  assert_success
  run node_tool n2 bb-stage --job "$one" end
  transcript "root@n2# bb-stage --job $one end" "$output" "(exit $status)"
  assert_success
  assert_equal "$(cat "$DATA_DIR/e/out/n2/who")" n2
  assert_equal "$(pool_used n2)" 0
  run node_healthcheck n2
  assert_success
  assert_equal "$(node_gres n2)" bbnvme:1K
  wait_ended "$two" 60
  [[ $JOB_STATE_LINE == JobState=COMPLETED* ]] || fail "job $two: $JOB_STATE_LINE"
  run cat "$JOBS_DIR/e2-$two.out"
  assert_output --regexp "^e2 ran in $NODE_POOL_DIR/job/"
  wait_until 30 "n2's pool free" pools_free n2
  wait_until 30 "n2's GRES free" gres_free n2
}

# The share of each node under distribute=shard (bbkit(7), NODE-LOCAL POOLS): the files of the
# tree ROOT, each as "MD5 PATH" (PATH relative to ROOT), that go to node NODES[i] where i is
# FNV-1a (64 bit) of PATH, mixed by MurmurHash3's finalizer, modulo the number of nodes; written
# to PREFIX.NODE, sorted by PATH.
expected_shares() {
  python3 - "$@" <<'PY'
import hashlib, os, sys
root, prefix, nodes = sys.argv[1], sys.argv[2], sys.argv[3:]
def fnv1a64(text):
    h = 0xcbf29ce484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    # MurmurHash3's 64-bit finalizer
    h ^= h >> 33
    h = (h * 0xff51afd7ed558ccd) & 0xFFFFFFFFFFFFFFFF
    h ^= h >> 33
    h = (h * 0xc4ceb9fe1a85ec53) & 0xFFFFFFFFFFFFFFFF
    h ^= h >> 33
    return h
shares = {n: [] for n in nodes}
for top, _, files in os.walk(root):
    for f in files:
        path = os.path.join(top, f)
        rel = os.path.relpath(path, root)
        with open(path, "rb") as data:
            shares[nodes[fnv1a64(rel) % len(nodes)]].append((rel.encode(), hashlib.md5(data.read()).hexdigest()))
for n in nodes:
    with open(f"{prefix}.{n}", "w") as out:
        for rel, md5 in sorted(shares[n]):
            out.write(f"{md5} {rel.decode()}\n")
PY
}

@test "f. distribute=shard over two nodes: each node holds its share of a 200-file tree, together each file once; gather=nodes and gather=merge stage the results out" {
  local script node nodes i j
  mkdir -p "$DATA_DIR/f/in" "$DATA_DIR/f/held"
  for i in $(seq 0 9); do
    mkdir "$DATA_DIR/f/in/d$i"
    for j in $(seq 0 19); do
      head -c $((RANDOM % 3000 + 1)) /dev/urandom >"$DATA_DIR/f/in/d$i/f$j.dat"
    done
  done
  # A directory without files: every node makes it.
  mkdir -p "$DATA_DIR/f/in/d0/empty/deeper"
  chown -R "$SLURM_TEST_USER:" "$DATA_DIR/f"
  # What each node lists: the files of its share with their MD5, and the directories; its
  # results, under the same names on both nodes (out/, gather=nodes) and under its own names
  # (merged/, gather=merge).
  cat >"$JOBS_DIR/f-node.sh" <<'NODE'
#!/bin/bash
set -euo pipefail
data=$1 node=$(hostname)
cd "$BB_JOB_DIR/in"
find . -type f -printf '%P\n' | LC_ALL=C sort | while IFS= read -r f; do
  echo "$(md5sum <"$f" | cut -d' ' -f1) $f"
done >"$data/held/$node.files"
find . -mindepth 1 -type d -printf '%P\n' | LC_ALL=C sort >"$data/held/$node.dirs"
mkdir -p "$BB_JOB_DIR/out/sub" "$BB_JOB_DIR/merged/sub"
echo "$node" >"$BB_JOB_DIR/out/who"
echo "$node" >"$BB_JOB_DIR/out/sub/who"
cp "$data/held/$node.files" "$BB_JOB_DIR/merged/$node.files"
echo "$node" >"$BB_JOB_DIR/merged/sub/$node"
NODE
  chmod 0755 "$JOBS_DIR/f-node.sh"
  chown "$SLURM_TEST_USER:" "$JOBS_DIR/f-node.sh"
  script=$(job_script f.sh '#SBATCH --job-name=f' '#SBATCH --nodes=2' \
    '#BB pool=nvme capacity=8MiB' \
    "#BB stage_in type=directory source=$DATA_DIR/f/in destination=\$BB_JOB_DIR/in distribute=shard" \
    "#BB stage_out type=directory source=\$BB_JOB_DIR/out destination=$DATA_DIR/f/nodes gather=nodes" \
    "#BB stage_out type=directory source=\$BB_JOB_DIR/merged destination=$DATA_DIR/f/merged gather=merge" \
    <<<"srun --ntasks-per-node=1 $JOBS_DIR/f-node.sh $DATA_DIR/f")
  submit "$script"
  assert_equal "$status" 0
  wait_ended "$JOB" 120
  [[ $JOB_STATE_LINE == JobState=COMPLETED* ]] || fail "job $JOB: $JOB_STATE_LINE; $(cat "$JOBS_DIR/f-$JOB.out" 2>/dev/null)"
  # Slurm's order of the job's nodes, the one the node Prologs pass as --nodes.
  nodes=$(scontrol show hostnames "$(job_field "$JOB" NodeList)")
  assert_equal "$(wc -l <<<"$nodes")" 2
  # shellcheck disable=SC2086 # the node names
  expected_shares "$DATA_DIR/f/in" "$DATA_DIR/f/expected" $nodes
  for node in $nodes; do
    transcript "($node holds $(wc -l <"$DATA_DIR/f/held/$node.files") of the 200 files)"
    # Its share and nothing else, with the source's contents.
    assert_equal "$(cat "$DATA_DIR/f/held/$node.files")" "$(cat "$DATA_DIR/f/expected.$node")"
    [ -s "$DATA_DIR/f/held/$node.files" ] || fail "$node holds no file"
    # Every directory, on every node.
    assert_equal "$(cat "$DATA_DIR/f/held/$node.dirs")" "$(cd "$DATA_DIR/f/in" && find . -mindepth 1 -type d -printf '%P\n' | LC_ALL=C sort)"
    # gather=nodes: each node's out/ under DEST/<node>/, the same names kept apart.
    assert_equal "$(cat "$DATA_DIR/f/nodes/$node/who")" "$node"
    assert_equal "$(cat "$DATA_DIR/f/nodes/$node/sub/who")" "$node"
    # gather=merge: both nodes' files in one DEST.
    assert_equal "$(cat "$DATA_DIR/f/merged/$node.files")" "$(cat "$DATA_DIR/f/held/$node.files")"
    assert_equal "$(cat "$DATA_DIR/f/merged/sub/$node")" "$node"
  done
  # Together the nodes hold every input file exactly once.
  assert_equal "$(cat "$DATA_DIR"/f/held/*.files | LC_ALL=C sort -k 2)" \
    "$(cd "$DATA_DIR/f/in" && find . -type f -printf '%P\n' | LC_ALL=C sort | while IFS= read -r f; do echo "$(md5sum <"$f" | cut -d' ' -f1) $f"; done | LC_ALL=C sort -k 2)"
  assert_equal "$(cat "$DATA_DIR"/f/held/*.files | wc -l)" 200
  assert_equal "$(find "$DATA_DIR/f/nodes" -mindepth 1 -maxdepth 1 -printf '%P\n' | LC_ALL=C sort)" "$nodes"
  # shellcheck disable=SC2086 # the node names
  assert_equal "$(find "$DATA_DIR/f/merged" -mindepth 1 -maxdepth 1 -printf '%P\n' | LC_ALL=C sort)" "$(printf '%s.files\n' $nodes; echo sub)"
  # shellcheck disable=SC2086 # the node names
  wait_until 30 "both pools free" pools_free $nodes
  # shellcheck disable=SC2086
  wait_until 30 "both nodes' GRES free" gres_free $nodes
}

@test "g. Slurm counts the space as GRES: a job over half of every node's pool runs, a second waits for Resources while a smaller one runs beside; oversized requests and a user's own --gres are refused at submit" {
  local big second small script node small_node used
  mkdir -p "$DATA_DIR/g"
  chown "$SLURM_TEST_USER:" "$DATA_DIR/g"
  # The jobs have time limits: backfill starts the small one before the waiting one.
  big=$(job_script g1.sh '#SBATCH --job-name=g1' '#SBATCH --nodes=4' '#SBATCH --time=10' \
    '#BB pool=nvme capacity=600MiB' <<<'sleep 600')
  second=$(job_script g2.sh '#SBATCH --job-name=g2' '#SBATCH --nodes=1' '#SBATCH --time=2' \
    '#BB pool=nvme capacity=600MiB' <<<'echo "g2 should not run"')
  small=$(job_script g3.sh '#SBATCH --job-name=g3' '#SBATCH --nodes=1' '#SBATCH --time=2' \
    '#BB pool=nvme capacity=200MiB' <<<'sleep 600')
  submit "$big"
  local g1=$JOB
  wait_job "$g1" 'JobState=RUNNING Reason=None' 60
  # The cli_filter added the request's units per node to the job's GRES (kept as gres:NAME up
  # to 23.02, gres/NAME from 23.11).
  local tres=gres:
  ! release_at_least 23.11 || tres=gres/
  run scontrol show job "$g1"
  assert_output --partial "TresPerNode=${tres}bbnvme:600"
  run scontrol -d show job "$g1"
  transcript "root# scontrol -d show job $g1" "$output"
  assert_output --partial "JOB_GRES=bbnvme:2400"
  assert_equal "$(job_field "$g1" NodeList)" "n[1-4]"
  for node in "${NODES[@]}"; do
    wait_until 30 "$node's buffer allocated" pool_used_is "$node" 600MiB
    assert_equal "$(gres_used "$node")" bbnvme:600
  done
  run scontrol -d show node n1
  transcript "root# scontrol -d show node n1" "$output"
  # 1024 units, as Slurm prints the count.
  assert_output --partial "Gres=bbnvme:1K"
  assert_output --partial "GresUsed=bbnvme:600"

  submit "$second"
  local g2=$JOB
  submit "$small"
  local g3=$JOB
  wait_job "$g3" 'JobState=RUNNING Reason=None' 60
  small_node=$(job_field "$g3" NodeList)
  transcript "(g3 runs on $small_node)"
  wait_until 30 "g2 to wait for Resources" job_pending_for "$g2" Resources
  run squeue -h -j "$g2" -o '%T %r %b'
  transcript "root# squeue -h -j $g2 -o '%T %r %b'" "$output"
  assert_output "PENDING Resources ${tres}bbnvme:600"
  for node in "${NODES[@]}"; do
    used=600
    [ "$node" != "$small_node" ] || used=800
    assert_equal "$(gres_used "$node")" "bbnvme:$used"
    assert_equal "$(pool_used "$node")" "${used}MiB"
  done

  # More than a node's pool: refused by the cli_filter, with bb-parse's message; no job made.
  local jobs_before
  jobs_before=$(squeue -h -u "$SLURM_TEST_USER" -o %i | sort)
  script=$(job_script g4.sh '#SBATCH --job-name=g4' '#BB pool=nvme capacity=2GiB' <<<'echo "should not run"')
  submit "$script"
  assert_equal "$status" 1
  assert_output --partial "capacity=2GiB can never be satisfied: pool 'nvme' holds only 1GiB in total"
  # The GRES named by the user in a job with a request: refused, its count is bbkit's.
  script=$(job_script g5.sh '#SBATCH --job-name=g5' '#BB pool=nvme capacity=10MiB' <<<'echo "should not run"')
  submit --gres=bbnvme:1 "$script"
  assert_equal "$status" 1
  assert_output --partial "bbkit: --gres asks for bbnvme itself"
  script=$(job_script g6.sh '#SBATCH --job-name=g6' '#SBATCH --gres=bbnvme:1' '#BB pool=nvme capacity=10MiB' <<<'echo "should not run"')
  submit "$script"
  assert_equal "$status" 1
  assert_output --partial "bbkit: --gres asks for bbnvme itself"
  # And in a job without a request: it would hold space on the node that no buffer uses.
  script=$(job_script g7.sh '#SBATCH --job-name=g7' <<<'echo "should not run"')
  submit --gres=bbnvme:1 "$script"
  assert_equal "$status" 1
  assert_output --partial "bbkit: --gres asks for bbnvme itself"
  assert_equal "$(squeue -h -u "$SLURM_TEST_USER" -o %i | sort)" "$jobs_before"

  # Cancelled (the waiting one first: it would start once the others are gone), every node's
  # pool and GRES are free again.
  slurm_run scancel "$g2"
  wait_ended "$g2" 60
  slurm_run scancel "$g1" "$g3"
  wait_ended "$g1" 60
  wait_ended "$g3" 60
  wait_until 60 "every pool free" pools_free "${NODES[@]}"
  wait_until 30 "every node's GRES free" gres_free "${NODES[@]}"
  wait_until 30 "every node idle" all_nodes_idle
}

@test "h. slurmd SIGKILLed and restarted on both nodes of a running job: the job completes, the restarted slurmds' Epilogs stage out and end the buffers, pools and GRES are free" {
  local script node
  mkdir -p "$DATA_DIR/h"
  head -c 2M /dev/urandom >"$DATA_DIR/h/input.dat"
  chown -R "$SLURM_TEST_USER:" "$DATA_DIR/h"
  # The job runs until the file go exists (at most 170 s); each node's result is staged out.
  script=$(job_script h.sh '#SBATCH --job-name=h' '#SBATCH --nodes=2' '#SBATCH --nodelist=n3,n4' \
    '#BB pool=nvme capacity=50MiB' \
    "#BB stage_in type=file source=$DATA_DIR/h/input.dat destination=\$BB_JOB_DIR/input.dat" \
    "#BB stage_out type=directory source=\$BB_JOB_DIR/out destination=$DATA_DIR/h/out" <<JOB
srun --ntasks-per-node=1 sh -c 'mkdir -p "\$BB_JOB_DIR/out" && md5sum <"\$BB_JOB_DIR/input.dat" >"\$BB_JOB_DIR/out/\$(hostname)"'
touch $DATA_DIR/h/ran
for i in \$(seq 1 850); do [ ! -e $DATA_DIR/h/go ] || break; sleep 0.2; done
[ -e $DATA_DIR/h/go ]
echo "h ended"
JOB
  )
  submit "$script"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=RUNNING Reason=None' 60
  wait_until 60 "the job's steps to have run" test -e "$DATA_DIR/h/ran"
  for node in n3 n4; do
    assert_equal "$(pool_used "$node")" 50MiB
    assert_equal "$(gres_used "$node")" bbnvme:50
  done
  # n3 runs the batch script, n4 only held the step: both slurmds die and come back while the
  # job runs on.
  for node in n3 n4; do
    kill_node_slurmd "$node"
  done
  assert_equal "$(job_field "$JOB" JobState)" RUNNING
  for node in n3 n4; do
    restart_node "$node"
  done
  assert_equal "$(job_field "$JOB" JobState)" RUNNING
  # The buffers are still there, in the restarted slurmds' view of the nodes.
  for node in n3 n4; do
    assert_equal "$(pool_used "$node")" 50MiB
  done
  touch "$DATA_DIR/h/go"
  wait_ended "$JOB" 120
  [[ $JOB_STATE_LINE == JobState=COMPLETED* ]] || fail "job $JOB: $JOB_STATE_LINE; $(cat "$JOBS_DIR/h-$JOB.out" 2>/dev/null)"
  run cat "$JOBS_DIR/h-$JOB.out"
  assert_output --partial "h ended"
  # Each node's Epilog, run by its new slurmd, staged its result out (gather=nodes) and ended
  # its buffer.
  local sum
  sum=$(md5sum <"$DATA_DIR/h/input.dat")
  for node in n3 n4; do
    assert_equal "$(cat "$DATA_DIR/h/out/$node/$node")" "$sum"
  done
  wait_until 60 "every pool free" pools_free "${NODES[@]}"
  wait_until 30 "every node's GRES free" gres_free "${NODES[@]}"
  wait_until 60 "every node idle" all_nodes_idle
}

@test "i. the user's own second job kills the first one's mover during its stage-in: the first is held with bbkit's reason, the node stays in service" {
  local first killer one two
  mkdir -p "$DATA_DIR/i"
  head -c 500M /dev/urandom >"$DATA_DIR/i/big.dat"
  chown -R "$SLURM_TEST_USER:" "$DATA_DIR/i"
  # The killer: the same user's job on the same node, killing every bb-mover of theirs.
  # shellcheck disable=SC2016 # expanded in the job
  killer=$(job_script i2.sh '#SBATCH --job-name=i2' '#SBATCH --nodelist=n1' '#SBATCH --ntasks=1' \
    '#SBATCH --time=5' <<<'end=$((SECONDS + 120)); while [ $SECONDS -lt $end ]; do pkill -KILL -u "$(id -u)" -x bb-mover && echo killed; sleep 0.02; done; true')
  first=$(job_script i1.sh '#SBATCH --job-name=i1' '#SBATCH --nodelist=n1' '#SBATCH --ntasks=1' \
    '#BB pool=nvme capacity=600MiB' \
    "#BB stage_in type=file source=$DATA_DIR/i/big.dat destination=\$BB_JOB_DIR/big.dat" <<<'echo "i1 should not run"')
  submit "$killer"
  two=$JOB
  wait_job "$two" 'JobState=RUNNING Reason=None' 60
  submit "$first"
  one=$JOB
  wait_job "$one" 'JobState=PENDING Reason=job_requeued_in_held_state' 120
  run scontrol show job "$one"
  transcript "root# scontrol show job $one" "$output"
  assert_output --regexp "AdminComment=bbkit: node n1: bb-stage: .*(signal|killed)"
  run sinfo -h -n n1 -o '%T %E'
  refute_output --partial drain
  run node_tool n1 bb-pool health --node-local
  assert_success
  slurm_run scancel "$two" "$one"
  wait_ended "$two" 60
  wait_until 60 "n1's pool free" pools_free n1
  wait_until 30 "every node idle" all_nodes_idle
}

@test "j. root lowers a held job's GRES below its request after every submit check: the job asks for space Slurm never gave, held with bbkit's reason, nothing reserved, no node drained; a job Slurm gave the space runs beside it" {
  local script other tres=gres:
  ! release_at_least 23.11 || tres=gres/
  script=$(job_script j1.sh '#SBATCH --job-name=j1' '#SBATCH --nodelist=n2' '#SBATCH --ntasks=1' \
    '#SBATCH --hold' '#BB pool=nvme capacity=800MiB' <<<'echo "j1 should not run"')
  submit "$script"
  assert_equal "$status" 0
  run scontrol show job "$JOB"
  assert_output --partial "TresPerNode=${tres}bbnvme:800"
  # Root may change a job's bbkit GRES (job_submit.lua lets root and SlurmUser): what no submit
  # check sees. The node's Prolog holds the job to what Slurm gives it.
  slurm_run scontrol update JobId="$JOB" Gres=bbnvme:1
  assert_equal "$status" 0
  run scontrol show job "$JOB"
  assert_output --partial "TresPerNode=${tres}bbnvme:1"
  slurm_run scontrol release "$JOB"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=PENDING Reason=job_requeued_in_held_state' 60
  run scontrol show job "$JOB"
  assert_output --partial "AdminComment=bbkit: node n2: bb-pool: job $JOB asks for 800MiB of pool 'nvme' but Slurm gave it 1 bbnvme on this node, 1MiB (its request or GRES changed after the submit-time checks)"
  run sinfo -h -n n2 -o '%T %E'
  refute_output --partial drain
  assert_equal "$(pool_used n2)" 0
  slurm_run scancel "$JOB"
  # A job Slurm gave the space gets it on the same node.
  script=$(job_script j2.sh '#SBATCH --job-name=j2' '#SBATCH --nodelist=n2' '#SBATCH --ntasks=1' \
    '#BB pool=nvme capacity=900MiB' <<<'echo "j2 ran"')
  submit "$script"
  other=$JOB
  wait_ended "$other" 120
  [[ $JOB_STATE_LINE == JobState=COMPLETED* ]] || fail "job $other: $JOB_STATE_LINE"
  wait_until 30 "n2's pool free" pools_free n2
  wait_until 30 "every node idle" all_nodes_idle
}

@test "k. a stage-in far longer than BatchStartTimeout + MessageTimeout (20 s), the nodes registering again meanwhile: the job starts once its Prolog ends and completes with its data" {
  local script started
  # From 23.11 `scontrol reconfigure` restarts slurmctld and every slurmd: on 26.05 the slowed
  # node's restarted slurmd was seen not to register again for minutes, its job left RUNNING
  # without its batch script, which is another scenario than this one (left open: bbkit(7),
  # NODE-LOCAL POOLS, Slurm lines).
  ! release_at_least 23.11 || skip "scontrol reconfigure restarts the daemons from Slurm 23.11"
  mkdir -p "$DATA_DIR/k"
  head -c 300M /dev/urandom >"$DATA_DIR/k/big.dat"
  chown -R "$SLURM_TEST_USER:" "$DATA_DIR/k"
  slow_node n3 2
  # shellcheck disable=SC2016 # expanded in the job
  script=$(job_script k.sh '#SBATCH --job-name=k' '#SBATCH --nodelist=n3' '#SBATCH --ntasks=1' \
    '#BB pool=nvme capacity=400MiB' \
    "#BB stage_in type=file source=$DATA_DIR/k/big.dat destination=\$BB_JOB_DIR/big.dat" <<<'echo "k ran: $(stat -c %s "$BB_JOB_DIR/big.dat") bytes"')
  submit "$script"
  started=$SECONDS
  wait_job "$JOB" 'JobState=RUNNING Reason=Prolog' 60
  # Past BatchStartTimeout + MessageTimeout, every node registers again (slurmctld's check for
  # batch jobs missing from their node runs at a node's registration).
  while [ $((SECONDS - started)) -lt 30 ]; do sleep 1; done
  assert_equal "$(job_field "$JOB" JobState) $(job_field "$JOB" Reason)" "RUNNING Prolog"
  slurm_run scontrol reconfigure
  assert_equal "$status" 0
  # Once the Prolog is done the node runs at full speed again: at 2% of a CPU 26.05's
  # slurmstepd was seen not to finish even this job's echo in 10 minutes.
  wait_job "$JOB" 'JobState=(RUNNING Reason=None|COMPLETED|FAILED|CANCELLED|PENDING)' 600
  unslow_node
  wait_ended "$JOB" 120
  transcript "(job $JOB ended $((SECONDS - started)) s after its submission)"
  [[ $JOB_STATE_LINE == JobState=COMPLETED* ]] || fail "job $JOB: $JOB_STATE_LINE"
  run cat "$JOBS_DIR/k-$JOB.out"
  assert_output "k ran: 314572800 bytes"
  [ $((SECONDS - started)) -gt 40 ] || fail "the stage-in took only $((SECONDS - started)) s: not past the timeouts"
  run grep -F "missing from batch node" "$SLURM_DIR/log/slurmctld.log"
  assert_failure
  wait_until 60 "n3's pool free" pools_free n3
  wait_until 30 "every node idle" all_nodes_idle
}

@test "l. slurmctld checks every job (job_submit.lua): one sent with a slurm.conf without the cli_filter gets its GRES and runs; its user may not change that GRES while it waits, but may change the rest; a job naming bbnvme itself is refused at submit" {
  local alt script gres tres=gres:
  ! release_at_least 23.11 || tres=gres/
  # The user's own slurm.conf: Slurm's, without CliFilterPlugins (as a client without bbkit's
  # cli_filter, or slurmrestd, submits).
  alt=$JOBS_DIR/my-slurm.conf
  grep -v -i '^CliFilterPlugins' "$SLURM_CONF" >"$alt"
  chown "$SLURM_TEST_USER:" "$alt"
  # shellcheck disable=SC2016 # expanded in the job
  script=$(job_script l1.sh '#SBATCH --job-name=l1' '#SBATCH --nodelist=n3' '#SBATCH --ntasks=1' \
    '#SBATCH --hold' '#BB pool=nvme capacity=300MiB' <<<'echo "l1 ran in $BB_JOB_DIR"')
  JOB=
  slurm_run -u env SLURM_CONF="$alt" sbatch "$script"
  assert_equal "$status" 0
  JOB=$(sed -n 's/^Submitted batch job \([0-9]\+\)$/\1/p' <<<"$output")
  [ -n "$JOB" ] || fail "no job id in sbatch's output: $output"
  run scontrol show job "$JOB"
  assert_output --partial "TresPerNode=${tres}bbnvme:300"
  # The user resizing it, either way: refused (Slurm 22.05 drops job_modify's message to the
  # user and says what its code means; 23.02 and later pass bbkit's on), the job as it was.
  for gres in bbnvme:1 bbnvme:900; do
    slurm_run -u scontrol update JobId="$JOB" Gres="$gres"
    [ "$status" -ne 0 ] || fail "the user changed the job's GRES to $gres: $output"
    if release_at_least 23.02; then
      assert_output --partial "bbkit: a user may not add, remove or resize a node-local pool's GRES (bbnvme) of a job"
    else
      assert_output --partial "Access/permission denied"
    fi
  done
  # slurmctld's log has it too, whatever the release shows the user.
  for gres in bbnvme:1 bbnvme:900; do
    grep -qF "bbkit: a user may not add, remove or resize a node-local pool's GRES (bbnvme) of a job: bbkit sized it from the job's burst-buffer request (bbnvme:300 here; the change asks for $gres): root or SlurmUser may" "$SLURM_DIR/log/slurmctld.log" ||
      fail "slurmctld.log lacks bbkit's refusal of Gres=$gres"
  done
  run scontrol show job "$JOB"
  assert_output --partial "TresPerNode=${tres}bbnvme:300"
  # Anything else of the job is the user's to change.
  slurm_run -u scontrol update JobId="$JOB" TimeLimit=5
  assert_equal "$status" 0
  assert_equal "$(job_field "$JOB" TimeLimit)" 00:05:00
  slurm_run scontrol release "$JOB"
  assert_equal "$status" 0
  wait_ended "$JOB" 120
  [[ $JOB_STATE_LINE == JobState=COMPLETED* ]] || fail "job $JOB: $JOB_STATE_LINE; $(cat "$JOBS_DIR/l1-$JOB.out" 2>/dev/null)"
  run cat "$JOBS_DIR/l1-$JOB.out"
  assert_output --regexp "^l1 ran in $NODE_POOL_DIR/job/"
  # Without the cli_filter, a job naming bbnvme itself is refused by slurmctld: no job made.
  local jobs_before
  jobs_before=$(squeue -h -u "$SLURM_TEST_USER" -o %i | sort)
  script=$(job_script l2.sh '#SBATCH --job-name=l2' '#SBATCH --gres=bbnvme:5' <<<'echo "should not run"')
  slurm_run -u env SLURM_CONF="$alt" sbatch "$script"
  assert_equal "$status" 1
  assert_output --partial "bbkit: --gres asks for bbnvme:5 itself, the GRES bbkit sizes from a burst-buffer request"
  script=$(job_script l3.sh '#SBATCH --job-name=l3' '#SBATCH --gres=bbnvme:1' '#BB pool=nvme capacity=10MiB' <<<'echo "should not run"')
  slurm_run -u env SLURM_CONF="$alt" sbatch "$script"
  assert_equal "$status" 1
  assert_output --partial "bbkit: --gres asks for bbnvme:1 itself, the GRES bbkit sizes from the burst-buffer request (bbnvme:10 here)"
  assert_equal "$(squeue -h -u "$SLURM_TEST_USER" -o %i | sort)" "$jobs_before"
  wait_until 30 "n3's pool free" pools_free n3
  wait_until 30 "every node idle" all_nodes_idle
}
