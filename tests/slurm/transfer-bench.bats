#!/usr/bin/env bats
# bench/transfer's run, here beside the harness it loads (bench/transfer starts it; see
# bench/README.md, "transfer"; no ctest runs it): the node cluster of tests/slurm/nodes.bash with burst_buffer/lua on the host and two pools of one
# directory tree each: "ctl" (staging = "controller") and "xfer" (staging = "slurm",
# transfer_nodes = 3, partition xfer of n1..n3). For each pool, JOBS jobs are submitted at once,
# each staging in a tree of FILES files (MIB MiB in all); the batch's wall time runs from the
# first submission to the last job's end. The controller host's share is what slurmctld and
# slurmscriptd, with every hook and tool they ran and reaped (bb-stage, bb-mover, scontrol),
# used: CPU (utime, stime and their reaped children's, /proc/PID/stat) and bytes written to
# storage (write_bytes of /proc/PID/io, which takes in reaped children's). Results go to
# $BENCH_OUT as JSON lines, one per pool.

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

: "${BENCH_JOBS:=4}" "${BENCH_FILES:=400}" "${BENCH_MIB:=96}" "${BENCH_OUT:?bench/transfer sets it}"

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

# CPU seconds (with reaped children) and write_bytes of slurmctld and its slurmscriptd.
controller_use() {
  local ctld p cpu=0 written=0 ticks
  ticks=$(getconf CLK_TCK)
  ctld=$(our_pid "$SLURM_DIR/run/slurmctld.pid" "$SLURM_CONF")
  for p in "$ctld" $(scriptd_pids "$ctld"); do
    cpu=$((cpu + $(awk '{print $14 + $15 + $16 + $17}' "/proc/$p/stat")))
    written=$((written + $(awk '$1 == "write_bytes:" {print $2}' "/proc/$p/io")))
  done
  echo "$(awk -v c="$cpu" -v t="$ticks" 'BEGIN { printf "%.2f", c / t }') $written"
}

# JOBS jobs staging in a tree each from pool POOL; prints one JSON line.
run_batch() {
  local pool=$1 i script jobs=() start cpu0 w0 cpu1 w1 per_file
  per_file=$((BENCH_MIB * 1048576 / BENCH_FILES))
  for ((i = 0; i < BENCH_JOBS; i++)); do
    mkdir -p "$DATA_DIR/$pool/$i"
    for ((f = 0; f < BENCH_FILES; f++)); do
      head -c "$per_file" /dev/urandom >"$DATA_DIR/$pool/$i/f$f"
    done
  done
  chown -R "$SLURM_TEST_USER:" "$DATA_DIR/$pool"
  sync
  read -r cpu0 w0 < <(controller_use)
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
  for JOB in "${jobs[@]}"; do wait_job "$JOB" 'JobState=COMPLETED ' 900; done
  read -r cpu1 w1 < <(controller_use)
  awk -v pool="$pool" -v jobs="$BENCH_JOBS" -v mib="$BENCH_MIB" -v files="$BENCH_FILES" \
    -v start="$start" -v end="$(date +%s.%N)" -v cpu="$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN{print b - a}')" \
    -v written=$((w1 - w0)) 'BEGIN {
      gib = jobs * mib / 1024
      printf "{\"pool\":\"%s\",\"jobs\":%d,\"files_per_job\":%d,\"mib_per_job\":%d,\"wall_seconds\":%.2f,", pool, jobs, files, mib, end - start
      printf "\"controller_cpu_seconds\":%.2f,\"controller_cpu_seconds_per_gib\":%.3f,", cpu, cpu / gib
      printf "\"controller_written_bytes\":%d,\"controller_written_bytes_per_gib\":%.0f}\n", written, written / gib
    }' >>"$BENCH_OUT"
  cancel_leftover_jobs
}

@test "transfer bench: controller staging, then staging on three transfer nodes" {
  run_batch ctl
  run_batch xfer
}
