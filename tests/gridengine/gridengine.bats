#!/usr/bin/env bats
# End to end against a real Grid Engine (Debian's gridengine-master/-exec/-client, SGE 8.1.9):
# a private cell on loopback (tests/gridengine/ge-cell) whose queue runs bbkit's installed
# share/bbkit/standalone/gridengine/{prolog,epilog} as root; jobs submitted with qsub as the
# unprivileged test user, the job itself using bbkit-job env. Skipped, saying why, where Grid
# Engine is not installed (scripts/install-deps installs it) or this is not root.

load ../cli/common

GE_CELL_SCRIPT=$BBKIT_SOURCE_DIR/tests/gridengine/ge-cell

setup_file() {
  [ "$(id -u)" = 0 ] || skip "needs root (Grid Engine's daemons and a root prolog)"
  [ -x /usr/lib/gridengine/sge_qmaster ] && command -v qsub >/dev/null ||
    skip "Grid Engine is not installed (scripts/install-deps installs it)"
  staging_setup
  # A short wait for space, so a full pool reschedules quickly (where bbkit-job's tools are in).
  if bb-stage --help | grep -q '^ *end '; then write_config '[timeouts]' 'queue = 2'; fi
  export TEST_DIR BBKIT_CONFIG U
  export SGE_ROOT=/var/lib/gridengine SGE_CELL=bbkit-test.$$
  export SGE_QMASTER_PORT=${BBKIT_GE_QMASTER_PORT:-16444} SGE_EXECD_PORT=${BBKIT_GE_EXECD_PORT:-16445}
  GE_DIR=$(readlink -f "$BBKIT_BIN_DIR/../share/bbkit/standalone/gridengine")
  BBKIT_JOB=$(readlink -f "$BBKIT_BIN_DIR/../share/bbkit/standalone/bbkit-job")
  export GE_DIR BBKIT_JOB
  mkdir -m 755 "$TEST_DIR/ge" "$TEST_DIR/work"
  chown "$U" "$TEST_DIR/work"
  "$GE_CELL_SCRIPT" start "$TEST_DIR/ge" "$SGE_CELL" \
    "$GE_DIR/prolog --config $BBKIT_CONFIG" "$GE_DIR/epilog --config $BBKIT_CONFIG" 3>&-
}

teardown_file() {
  [ -n "${TEST_DIR:-}" ] || return 0
  "$GE_CELL_SCRIPT" stop "$TEST_DIR/ge" "$SGE_CELL" 3>&- || true
  common_teardown
}

# common.bash unsets BBKIT_CONFIG as each test loads it: the cell's configuration again.
setup() { export BBKIT_CONFIG=$TEST_DIR/bbkit.toml; }

require_bbkit_job() {
  bb-stage --help | grep -q '^ *end ' && bb-stat --help | grep -q '^ *env ' ||
    skip "bbkit-job needs 'bb-stage end' and 'bb-stat env', which this build does not have yet"
}

# submit NAME: submits $TEST_DIR/work/NAME.sh as the test user (its lines on standard input,
# after the shebang); the job id in $job.
submit() {
  local name=$1
  { echo '#!/bin/sh'; cat; } >"$TEST_DIR/work/$name.sh"
  chown "$U" "$TEST_DIR/work/$name.sh"
  job=$(cd "$TEST_DIR/work" && runuser -u "$U" -- env SGE_ROOT="$SGE_ROOT" SGE_CELL="$SGE_CELL" \
    SGE_QMASTER_PORT="$SGE_QMASTER_PORT" SGE_EXECD_PORT="$SGE_EXECD_PORT" \
    qsub -terse -q bbkit.q -cwd -N "$name" -o "$name.out" -e "$name.err" "$name.sh")
  [[ $job =~ ^[0-9]+$ ]]
}

# Waits (up to 60 s) until job $job has left qstat, or is in state $1 (e.g. Eqw).
wait_job() {
  local want=${1:-gone} st
  for _ in $(seq 300); do
    st=$(qstat -u '*' | awk -v j="$job" '$1 == j {print $5}')
    [ "$want" = gone ] && [ -z "$st" ] && return 0
    [ "$want" != gone ] && [ "$st" = "$want" ] && return 0
    sleep 0.2
  done
  echo "job $job: state '$st', waited for '$want'" >&2
  qstat -j "$job" >&2 || true
  cat "$TEST_DIR/ge/execd/localhost/messages" >&2 || true
  return 1
}

@test "a job without directives runs through the root prolog and epilog" {
  require_bbkit_job
  submit plain <<'EOF'
echo "ran $JOB_ID"
EOF
  wait_job
  [ "$(cat "$TEST_DIR/work/plain.out")" = "ran $job" ]
  [ ! -s "$TEST_DIR/work/plain.err" ] || { cat "$TEST_DIR/work/plain.err"; false; }
  # No queue went into error state.
  run qstat -f -q bbkit.q
  refute_output --regexp 'localhost +[A-Z]+ +[0-9/]+ +[0-9.]+ +lx-amd64 +[a-zA-Z]*E'
}

# The smoke scenario: what the submission tier runs of this suite (tests/CMakeLists.txt).
# bats test_tags=smoke
@test "stage-in, the job writes into \$BB_JOB_DIR through bbkit-job env, stage-out: the result lands" {
  require_bbkit_job
  runuser -u "$U" -- mkdir "$TEST_DIR/pfs/input"
  runuser -u "$U" -- sh -c "printf 'data\n' >'$TEST_DIR/pfs/input/in.txt'"
  submit flow <<EOF
#BB_LUA pool=nvme capacity=1G
#BB_LUA stage_in type=directory source=$TEST_DIR/pfs/input destination=\$BB_JOB_DIR/input
#BB_LUA stage_out type=directory source=\$BB_JOB_DIR/output destination=$TEST_DIR/pfs/results
eval "\$('$BBKIT_JOB' env \$JOB_ID --shell)"
mkdir "\$BB_JOB_DIR/output"
tr a-z A-Z <"\$BB_JOB_DIR/input/in.txt" >"\$BB_JOB_DIR/output/r.txt"
echo "dir=\$BB_JOB_DIR"
EOF
  wait_job
  cat "$TEST_DIR/work/flow.err" >&2 || true
  [[ "$(cat "$TEST_DIR/work/flow.out")" == "dir=$TEST_DIR/nvme/job/main.$job.1."* ]]
  [ "$(cat "$TEST_DIR/pfs/results/r.txt")" = DATA ]
  [ "$(stat -c %U "$TEST_DIR/pfs/results/r.txt")" = "$U" ]
  [ ! -e "$(bbdir "$TEST_DIR/nvme/job/main.$job.1")" ]
}

@test "a missing stage-in source: the job in error state, bbkit's reason in qstat -j" {
  require_bbkit_job
  submit missing <<EOF
#BB_LUA pool=nvme capacity=1G
#BB_LUA stage_in type=file source=$TEST_DIR/pfs/missing destination=in
echo "must not run"
EOF
  wait_job Eqw
  run qstat -j "$job"
  assert_output --regexp 'error reason +1: +bb-'
  run grep -qs "must not run" "$TEST_DIR/work/missing.out"
  assert_failure
  # The epilog that Grid Engine runs after the failed prolog ended the buffer.
  [ ! -e "$(bbdir "$TEST_DIR/nvme/job/main.$job.1")" ]
  qdel "$job" >/dev/null
  wait_job
}

@test "a failing stage-out: the job in error state with the reason, the buffer and data kept" {
  require_bbkit_job
  mkdir -m 700 "$TEST_DIR/locked"
  submit stageout <<EOF
#BB_LUA pool=nvme capacity=1G
#BB_LUA stage_out type=directory source=out destination=$TEST_DIR/locked/res
eval "\$('$BBKIT_JOB' env \$JOB_ID --shell)"
mkdir "\$BB_JOB_DIR/out" && echo precious >"\$BB_JOB_DIR/out/r.txt"
EOF
  wait_job Eqw
  run qstat -j "$job"
  assert_output --regexp 'error reason +1: +bb-'
  [ "$(cat "$(bbdir "$TEST_DIR/nvme/job/main.$job.1")/out/r.txt")" = precious ]
  qdel "$job" >/dev/null
  wait_job
}

@test "a full pool: the job is rescheduled (99) and runs once space is freed" {
  require_bbkit_job
  bb-pool alloc --job 999999 --user "$U" --pool small --capacity 4K >/dev/null
  submit full <<'EOF'
#BB_LUA pool=small capacity=4K
echo ran
EOF
  # Rescheduled at least once: the execd logs bbkit's reason (the shepherd's exit status 25,
  # "reschedule", after the prolog's 99) and the job is still there, not run.
  msgs=$TEST_DIR/ge/execd/localhost/messages
  for _ in $(seq 150); do
    grep -qs "bb-pool: .*pool 'small'" "$msgs" && break
    sleep 0.2
  done
  grep -q "bb-pool: .*pool 'small'" "$msgs" || { cat "$msgs"; qstat -j "$job"; false; }
  grep -q "shepherd of job $job.1 exited with exit status = 25" "$msgs"
  run qstat -j "$job"
  assert_success
  run grep -qs ran "$TEST_DIR/work/full.out"
  assert_failure
  bb-teardown --job 999999 >/dev/null
  wait_job
  [ "$(cat "$TEST_DIR/work/full.out")" = ran ]
  [ -z "$(ls "$TEST_DIR/small/job")" ]
}
