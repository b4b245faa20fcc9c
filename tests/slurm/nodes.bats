#!/usr/bin/env bats
# The multi-node cluster of nodes.bash, proved on its own before node-local burst buffers are
# built on it (bbkit(7), NODE-LOCAL POOLS): four slurmd in network, mount and UTS namespaces of their own on one
# bridge, one slurmctld on the host. Jobs are submitted by an unprivileged user from the host;
# every line seen is kept in build/tests/slurm/transcript-nodes.txt. Scenario d tears the
# cluster down itself and looks for anything left.

BBKIT_SLURM_TRANSCRIPT=${BBKIT_SLURM_TRANSCRIPT:-$BBKIT_BUILD_DIR/tests/slurm/transcript-nodes.txt}
load nodes

setup_file() {
  mkdir -p "$(dirname "$TRANSCRIPT")"
  : >"$TRANSCRIPT"
  # Whether /run/netns was a mount point before: after the teardown it must be as it was.
  NETNS_MOUNTED_BEFORE=no
  mountpoint -q /run/netns && NETNS_MOUNTED_BEFORE=yes
  export NETNS_MOUNTED_BEFORE
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

# Waits for the job to end and fails unless it completed, with its output.
wait_completed() {
  local job=$1 out=$2
  wait_job "$job" 'JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL)' 60
  [[ $JOB_STATE_LINE == JobState=COMPLETED* ]] ||
    fail "job $job: $JOB_STATE_LINE; its output: $(cat "$out" 2>/dev/null)"
}

all_nodes_idle() {
  [ "$(sinfo -h -N -o '%N %T')" = "$(printf '%s idle\n' "${NODES[@]}")" ]
}

# Whether a process is gone (a zombie counts: it holds no namespace, file or port).
pid_gone() {
  [ ! -e "/proc/$1" ] || grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null
}

# The smoke scenario: what the submission tier runs of this suite (tests/CMakeLists.txt).
# bats test_tags=smoke
@test "a. four nodes idle in their own network namespaces; sbatch -N2 runs srun hostname on two of them" {
  slurm_run sinfo -h -N -o '%N %T'
  assert_equal "$status" 0
  assert_output "$(printf '%s idle\n' "${NODES[@]}")"
  # slurmctld listens on the bridge address alone.
  run ss -ltnH "sport = :$CTLD_PORT"
  assert_equal "${#lines[@]}" 1
  assert_output --regexp " $NODE_NET\.1:$CTLD_PORT "
  local node pid
  for node in "${NODES[@]}"; do
    pid=$(node_slurmd_pid "$node") || fail "no slurmd for $node"
    assert_equal "$(ip netns identify "$pid")" "$(node_netns "$node")"
    slurm_run scontrol -o show node "$node"
    assert_output --partial "NodeAddr=$(node_addr "$node") "
  done

  local script
  script=$(job_script a-two.sh '#SBATCH --job-name=a-two' '#SBATCH --nodes=2' <<<'srun hostname')
  submit "$script"
  assert_equal "$status" 0
  wait_completed "$JOB" "$JOBS_DIR/a-two-$JOB.out"
  run sort -u "$JOBS_DIR/a-two-$JOB.out"
  assert_equal "${#lines[@]}" 2
  assert_line --index 0 --regexp '^n[1-4]$'
  assert_line --index 1 --regexp '^n[1-4]$'

  # srun on the host: it reaches every slurmd through the bridge, and they reach it back.
  slurm_run -u srun -N "$NODE_COUNT" hostname
  assert_equal "$status" 0
  assert_equal "$(sort <<<"$output")" "$(printf '%s\n' "${NODES[@]}")"
}

@test "b. each node's local path holds only what a job on that node wrote there" {
  local script node
  script=$(job_script b-local.sh '#SBATCH --job-name=b-local' "#SBATCH --nodes=$NODE_COUNT" <<JOB
srun --ntasks-per-node=1 sh -c 'hostname >"$NODE_LOCAL_DIR/who"'
srun --ntasks-per-node=1 sh -c 'echo "\$(hostname): \$(ls -A "$NODE_LOCAL_DIR" | tr "\n" " ")\$(cat "$NODE_LOCAL_DIR/who")"'
JOB
  )
  submit "$script"
  assert_equal "$status" 0
  wait_completed "$JOB" "$JOBS_DIR/b-local-$JOB.out"
  # Each node saw one file at the common path, with its own name in it.
  run sort "$JOBS_DIR/b-local-$JOB.out"
  assert_output "$(for node in "${NODES[@]}"; do echo "$node: who $node"; done)"
  # On the host, each node's directory holds that file alone, and the common path nothing.
  for node in "${NODES[@]}"; do
    assert_equal "$(ls -A "$SLURM_DIR/nodes/$node/nvme")" who
    assert_equal "$(cat "$SLURM_DIR/nodes/$node/nvme/who")" "$node"
  done
  assert_equal "$(ls -A "$NODE_LOCAL_DIR")" ""
  run grep -F " $NODE_LOCAL_DIR " /proc/mounts
  assert_failure
}

@test "c. a slurmd killed and restarted inside its namespaces comes back idle; so do all four after slurmctld restarts" {
  local node=n3 pid new
  # A file on the node's disk while its slurmd is away: the restarted node sees it.
  echo "kept" >"$SLURM_DIR/nodes/$node/nvme/c-kept"
  pid=$(node_slurmd_pid "$node") || fail "no slurmd for $node"
  kill -KILL "$pid"
  wait_until 10 "slurmd $pid to die" pid_gone "$pid"
  slurm_run scontrol update NodeName="$node" State=DOWN Reason=slurmd-killed
  assert_equal "$status" 0
  slurm_run sinfo -h -n "$node" -o '%T'
  assert_output --regexp '^down'

  # ReturnToService=2: a down node that registers with a valid configuration is idle again.
  start_node "$node"
  new=$(node_slurmd_pid "$node") || fail "no slurmd for $node after the restart"
  [ "$new" != "$pid" ] || fail "slurmd of $node still has pid $pid"
  assert_equal "$(ip netns identify "$new")" "$(node_netns "$node")"
  slurm_run sinfo -h -N -o '%N %T'
  assert_output "$(printf '%s idle\n' "${NODES[@]}")"
  slurm_run -u srun -w "$node" sh -c "hostname; cat '$NODE_LOCAL_DIR/c-kept'"
  assert_equal "$status" 0
  assert_output "$(printf '%s\nkept' "$node")"
  rm -f "$SLURM_DIR/nodes/$node/nvme/c-kept"

  # slurmctld restarted from this test's process: on the bridge address again, nowhere else.
  restart_slurmctld "the nodes must stay"
  run ss -ltnH "sport = :$CTLD_PORT"
  assert_equal "${#lines[@]}" 1
  assert_output --regexp " $NODE_NET\.1:$CTLD_PORT "
  wait_until 30 "all nodes idle after the restart" all_nodes_idle
  slurm_run -u srun -N "$NODE_COUNT" hostname
  assert_equal "$status" 0
  assert_equal "$(sort <<<"$output")" "$(printf '%s\n' "${NODES[@]}")"
}

@test "d. teardown leaves no namespace, link, mount or process behind" {
  local script node dir=$SLURM_DIR id=$NODE_ID pids=() pid
  # A job on every node while the cluster goes: its steps must go with it.
  script=$(job_script d-hold.sh '#SBATCH --job-name=d-hold' "#SBATCH --nodes=$NODE_COUNT" <<<'srun sleep 300')
  submit "$script"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=RUNNING' 30
  steps_everywhere() {
    local n p
    for n in "${NODES[@]}"; do
      for p in $(ip netns pids "$(node_netns "$n")"); do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = sleep ] && continue 2
      done
      return 1
    done
  }
  wait_until 30 "the job's sleep on every node" steps_everywhere
  for node in "${NODES[@]}"; do
    mapfile -t -O "${#pids[@]}" pids < <(ip netns pids "$(node_netns "$node")")
  done
  [ "${#pids[@]}" -ge $((NODE_COUNT * 3)) ] || fail "only ${#pids[@]} processes in the nodes: ${pids[*]}"
  pids+=("$(tr -dc '0-9' <"$dir/run/slurmctld.pid")" "$(tr -dc '0-9' <"$dir/run/munged.pid")")

  finish_nodes

  run ip netns list
  refute_output --partial "bbkit-$id-"
  run ip -o link show
  refute_output --partial "bbk$id"
  run grep -e "$dir" -e "/run/netns/bbkit-$id-" /proc/mounts
  assert_failure
  if [ "$NETNS_MOUNTED_BEFORE" = no ] && [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
    run mountpoint -q /run/netns
    assert_failure
  fi
  for pid in "${pids[@]}"; do
    pid_gone "$pid" || fail "process $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)) is still there"
  done
  run pgrep -f -- "$dir"
  assert_failure
  assert [ ! -e "$dir" ]
}
