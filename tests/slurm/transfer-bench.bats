#!/usr/bin/env bats
# bench/transfer's run, here beside the harness it loads (bench/transfer starts it; see
# bench/README.md, "transfer"; no ctest runs it): the node cluster of tests/slurm/nodes.bash with burst_buffer/lua on the host and two pools of one
# directory tree each: "ctl" (staging = "controller") and "xfer" (staging = "slurm",
# transfer_nodes = 3, partition xfer of n1..n3). For each pool, JOBS jobs are submitted at once,
# each staging in a tree of FILES files (MIB MiB in all); the batch's wall time runs from the
# first submission to the last job's end. The controller host's share is what slurmctld and
# slurmscriptd, with every hook and tool they ran and reaped (bb-stage, bb-mover, scontrol),
# used: CPU (utime, stime and their reaped children's, /proc/PID/stat) and bytes written to
# and read from storage (write_bytes and read_bytes of /proc/PID/io, which take in reaped
# children's; the page cache is dropped before each batch); and how often
# slurmctld was asked about one job (sdiag's REQUEST_JOB_INFO_SINGLE count: bb-stage's asks
# about its transfer job; the bench itself waits with one squeue of the user's jobs every 2 s,
# REQUEST_JOB_USER_INFO). With BENCH_NODE_CPU set, n1..n3 are held to that percentage of a CPU
# during the xfer batch, so that its stages last minutes. Results go to $BENCH_OUT as JSON
# lines, one per pool.

BBKIT_SLURM_TRANSCRIPT=${BBKIT_SLURM_TRANSCRIPT:-$BBKIT_BUILD_DIR/tests/slurm/transcript-bench-transfer.txt}
# shellcheck disable=SC2034 # read by harness.bash and nodes.bash
HARNESS_MODE=slurm
# shellcheck disable=SC2034 # read by nodes.bash
NODE_COUNT=3
# shellcheck disable=SC2034 # read by nodes.bash
NODE_SLURM_EXTRA="PartitionName=xfer Nodes=n1,n2,n3 MaxTime=INFINITE State=UP"
# shellcheck disable=SC2034 # read by nodes.bash
NODE_BEFORE_START=install_bench_bbkit
load nodes

: "${BENCH_JOBS:=4}" "${BENCH_FILES:=400}" "${BENCH_MIB:=96}" "${BENCH_NODE_CPU:=}" "${BENCH_OUT:?bench/transfer sets it}"

install_bench_bbkit() {
  local capacity=$((BENCH_JOBS * (BENCH_MIB + 8) + 64))
  mkdir -m 0755 "$SLURM_DIR/pools/ctl" "$SLURM_DIR/pools/xfer"
  cat >"$BBKIT_CONFIG" <<EOF
state_dir = "$SLURM_DIR/bbkit/state"
mode = "slurm"
directives = ["BB_LUA"]
cluster = "e2e"
state_group = "slurm"
slurm_release = "$(slurm_release)"

[timeouts]
stage_in = 900
stage_out = 900
other = 100

[limits]
mover_threads = 4

[[pool]]
name = "ctl"
path = "$SLURM_DIR/pools/ctl"
capacity = "${capacity}MiB"
granularity = "1MiB"

[[pool]]
name = "xfer"
path = "$SLURM_DIR/pools/xfer"
capacity = "${capacity}MiB"
granularity = "1MiB"
staging = "slurm"
transfer_partition = "xfer"
transfer_nodes = 3
EOF
  chmod 0644 "$BBKIT_CONFIG"
  bb-pool init ctl >/dev/null && bb-pool init xfer >/dev/null || return 1
  install_bbkit_scripts root
}

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
}

teardown() {
  unslow_node
}

# CPU seconds (with reaped children), write_bytes and read_bytes of slurmctld and its
# slurmscriptd.
controller_use() {
  local ctld p cpu=0 written=0 read=0 ticks
  ticks=$(getconf CLK_TCK)
  ctld=$(our_pid "$SLURM_DIR/run/slurmctld.pid" "$SLURM_CONF")
  for p in "$ctld" $(scriptd_pids "$ctld"); do
    cpu=$((cpu + $(awk '{print $14 + $15 + $16 + $17}' "/proc/$p/stat")))
    written=$((written + $(awk '$1 == "write_bytes:" {print $2}' "/proc/$p/io")))
    read=$((read + $(awk '$1 == "read_bytes:" {print $2}' "/proc/$p/io")))
  done
  echo "$(awk -v c="$cpu" -v t="$ticks" 'BEGIN { printf "%.2f", c / t }') $written $read"
}

# slurmctld's count of single-job info requests (scontrol show job ID), from sdiag.
job_info_asks() {
  sdiag | awk '$1 == "REQUEST_JOB_INFO_SINGLE" { sub(/.*count:/, ""); print $1 + 0; found = 1 } END { if (!found) print 0 }'
}

# Waits for every job of JOBS (ids) to be COMPLETED, up to 900 s: one squeue of the test
# user's jobs every 2 s, not one scontrol per job (wait_job), so that slurmctld's share is
# bbkit's. A job squeue does not list (purged, or squeue failing) is not done; one that
# ended otherwise fails the batch.
wait_batch() {
  local deadline=$((SECONDS + 900)) listed done_count
  while :; do
    listed=$(squeue -h -t all -u "$SLURM_TEST_USER" -o '%i %T') || listed=
    done_count=$(awk -v ids=" $* " 'index(ids, " " $1 " ") && $2 == "COMPLETED"' <<<"$listed" | wc -l)
    [ "$done_count" -lt $# ] || return 0
    if awk -v ids=" $* " 'index(ids, " " $1 " ") && $2 ~ /^(FAILED|CANCELLED|TIMEOUT|NODE_FAIL|BOOT_FAIL|OUT_OF_MEMORY|DEADLINE|PREEMPTED)$/ { bad = 1 } END { exit !bad }' <<<"$listed"; then
      fail "a job of the batch ended otherwise: $listed"
    fi
    [ "$SECONDS" -lt "$deadline" ] || fail "jobs not COMPLETED after 900 s: $listed"
    sleep 2
  done
}

# JOBS jobs staging in a tree each from pool POOL; prints one JSON line.
run_batch() {
  local pool=$1 i script jobs=() start cpu0 w0 r0 cpu1 w1 r1 per_file asks0 asks1
  per_file=$((BENCH_MIB * 1048576 / BENCH_FILES))
  for ((i = 0; i < BENCH_JOBS; i++)); do
    mkdir -p "$DATA_DIR/$pool/$i"
    for ((f = 0; f < BENCH_FILES; f++)); do
      head -c "$per_file" /dev/urandom >"$DATA_DIR/$pool/$i/f$f"
    done
  done
  chown -R "$SLURM_TEST_USER:" "$DATA_DIR/$pool"
  # The sources from storage, not from the page cache: read_bytes counts what a mover read.
  # (The whole host's clean cache goes: both batches start from the same, cold, state.)
  sync
  echo 3 >/proc/sys/vm/drop_caches
  [ "$pool" != xfer ] || [ -z "$BENCH_NODE_CPU" ] || slow_node n1 "$BENCH_NODE_CPU" n2 n3
  asks0=$(job_info_asks)
  read -r cpu0 w0 r0 < <(controller_use)
  start=$(date +%s.%N)
  for ((i = 0; i < BENCH_JOBS; i++)); do
    script=$(job_script "$pool-$i.sh" "#SBATCH --job-name=bench-$pool-$i" \
      "#BB_LUA pool=$pool capacity=$((BENCH_MIB + 8))MiB" \
      "#BB_LUA stage_in type=directory source=$DATA_DIR/$pool/$i destination=\$BB_JOB_DIR/in" <<'EOF2'
test -d "$BB_JOB_DIR/in"
EOF2
)
    submit "$script"
    [ "$status" -eq 0 ] || fail "sbatch: $output"
    jobs+=("$JOB")
  done
  wait_batch "${jobs[@]}"
  read -r cpu1 w1 r1 < <(controller_use)
  asks1=$(job_info_asks)
  unslow_node
  awk -v pool="$pool" -v jobs="$BENCH_JOBS" -v mib="$BENCH_MIB" -v files="$BENCH_FILES" \
    -v start="$start" -v end="$(date +%s.%N)" -v cpu="$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN{print b - a}')" \
    -v written=$((w1 - w0)) -v read=$((r1 - r0)) -v asks=$((asks1 - asks0)) -v node_cpu="${BENCH_NODE_CPU:-100}" 'BEGIN {
      gib = jobs * mib / 1024
      wall = end - start
      printf "{\"pool\":\"%s\",\"jobs\":%d,\"files_per_job\":%d,\"mib_per_job\":%d,\"node_cpu_percent\":%d,", pool, jobs, files, mib, pool == "xfer" ? node_cpu : 100
      printf "\"wall_seconds\":%.2f,\"controller_cpu_seconds\":%.2f,\"controller_cpu_seconds_per_gib\":%.3f,", wall, cpu, cpu / gib
      printf "\"controller_written_bytes\":%d,\"controller_written_bytes_per_gib\":%.0f,", written, written / gib
      printf "\"controller_read_bytes\":%d,\"controller_read_bytes_per_gib\":%.0f,", read, read / gib
      printf "\"job_info_asks\":%d,\"job_info_asks_per_job_minute\":%.2f}\n", asks, asks / jobs / (wall / 60)
    }' >>"$BENCH_OUT"
  cancel_leftover_jobs
}

@test "transfer bench: controller staging, then staging on three transfer nodes" {
  run_batch ctl
  run_batch xfer
}
