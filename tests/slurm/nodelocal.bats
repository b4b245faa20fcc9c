#!/usr/bin/env bats
# bbkit on the nodes of a real multi-node Slurm cluster (nodes.bash with NODE_BBKIT=1, issue
# 30): slurmd's Prolog and Epilog are share/bbkit/standalone/slurm-node/prolog and epilog, its
# TaskProlog the standalone task-prolog; every node has its own pool "nvme" on its local disk
# and its own state directory, at the same paths. Each scenario reads the nodes' pools from
# inside the nodes (node_tool). Every line seen is kept in
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

wait_ended() {
  wait_job "$1" 'JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL)' "${2:-60}"
}

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
  head -c 256M /dev/zero >"$DATA_DIR/b/big.dat"
  chown -R "$SLURM_TEST_USER:" "$DATA_DIR/b"
  script=$(job_script b.sh '#SBATCH --job-name=b' '#SBATCH --nodes=2' '#SBATCH --nodelist=n1,n2' \
    '#BB pool=nvme capacity=300MiB' \
    "#BB stage_in type=file source=$DATA_DIR/b/big.dat destination=\$BB_JOB_DIR/big.dat" <<<'echo "the job ran"')
  submit "$script"
  assert_equal "$status" 0
  # Each node's mover stopped (SIGSTOP) as soon as it shows: the stage-in holds there.
  local deadline=$((SECONDS + 30)) found
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
    assert_equal "$(pool_used "$node")" 300MiB
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

@test "d. a node whose pool is draining fails its Prolog: Slurm drains that node and holds the job, with bbkit's reason; the other node is free" {
  local script
  node_tool n3 bb-pool drain nvme
  script=$(job_script d.sh '#SBATCH --job-name=d' '#SBATCH --nodes=2' '#SBATCH --nodelist=n3,n4' \
    '#BB pool=nvme capacity=2MiB' <<<'echo "should not run"')
  submit "$script"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=PENDING Reason=launch_failed_requeued_held' 60
  run scontrol show job "$JOB"
  assert_output --partial "AdminComment=bbkit: node n3: bb-pool: pool 'nvme' is draining"
  assert_equal "$(sinfo -h -n n3 -o '%T %E')" "drained Prolog error"
  run grep -F "prolog failed: rc:69 output:bbkit node prolog: job $JOB: node n3: bb-pool: pool 'nvme' is draining" "$SLURM_DIR/log/slurmd-n3.log"
  assert_success
  wait_until 30 "n4's pool free" pools_free n4
  assert_equal "$(sinfo -h -n n4 -o '%T')" idle
  # Back in service once the pool is.
  slurm_run scancel "$JOB"
  node_tool n3 bb-pool resume nvme
  slurm_run scontrol update NodeName=n3 State=RESUME
  assert_equal "$status" 0
  wait_until 30 "every node idle" all_nodes_idle
}

@test "e. a node short of space requeues the job (no hold): it runs once the space is back" {
  local first second
  first=$(job_script e1.sh '#SBATCH --job-name=e1' '#SBATCH --nodelist=n2' \
    '#BB pool=nvme capacity=800MiB' <<<'sleep 8')
  second=$(job_script e2.sh '#SBATCH --job-name=e2' '#SBATCH --nodelist=n2' \
    '#BB pool=nvme capacity=400MiB' <<<'echo "e2 ran in $BB_JOB_DIR"')
  submit "$first"
  local one=$JOB
  wait_job "$one" 'JobState=RUNNING Reason=None' 30
  submit "$second"
  local two=$JOB
  wait_job "$two" 'JobState=PENDING Reason=BeginTime' 60
  run scontrol show job "$two"
  assert_output --partial "AdminComment=bbkit: node n2: bb-pool: "
  assert_output --regexp "Priority=[1-9]"
  assert_output --partial "Restarts=1"
  run sinfo -h -n n2 -o '%T'
  refute_output --partial drain
  wait_ended "$one" 30
  # Slurm makes a requeued job eligible again about 120 s later (its credential's lifetime).
  # Not hastened with `scontrol update StartTime=now`: a job started again that way a few
  # seconds after its requeue was seen to start without its node Prolog, so without a buffer.
  wait_ended "$two" 200
  [[ $JOB_STATE_LINE == JobState=COMPLETED* ]] || fail "job $two: $JOB_STATE_LINE"
  run cat "$JOBS_DIR/e2-$two.out"
  assert_output --regexp "^e2 ran in $NODE_POOL_DIR/job/"
  wait_until 30 "n2's pool free" pools_free n2
}
