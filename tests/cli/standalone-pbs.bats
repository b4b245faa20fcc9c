#!/usr/bin/env bats
# share/bbkit/standalone/pbs/{prologue,epilogue}, run as pbs_mom runs them (OpenPBS
# src/resmom/prolog.c run_pelog): as root, with pbs_mom's environment (PBS_HOME, BBKIT_CONFIG)
# plus PBS_JOBDIR, argv "JOBID USER GROUP" for the prologue and ten arguments for the epilogue,
# the job script at $PBS_HOME/mom_priv/jobs/JOBID.SC. Exit statuses: prologue 0 (run), 1
# (abort), 75 (any other: requeue); epilogue 0 or 1 (logged only), never 2 (requeue of a
# checkpointed job).

load common

setup() {
  staging_setup
  PBS_DIR=${BBKIT_BIN_DIR:?the suites run against the installed tree}/../share/bbkit/standalone/pbs
  BBKIT_JOB=$BBKIT_BIN_DIR/../share/bbkit/standalone/bbkit-job
  PBS_HOME_DIR=$TEST_DIR/pbs
  mkdir -p "$PBS_HOME_DIR/mom_priv/jobs"
  chmod 751 "$PBS_HOME_DIR/mom_priv"
  chmod 711 "$PBS_HOME_DIR/mom_priv/jobs"
  G=$(id -gn "$U")
}
teardown() { common_teardown; }

as_user() { runuser -u "$U" -- "$@"; }

require_bbkit_job() {
  bb-stage --help | grep -q '^ *end ' && bb-stat --help | grep -q '^ *env ' ||
    skip "bbkit-job needs 'bb-stage end' and 'bb-stat env', which this build does not have yet"
}

# Places job $1's script (the remaining arguments are its lines after the shebang) where
# pbs_mom keeps it: mom_priv/jobs/JOBID.SC, owned by the job's user.
spool_script() {
  local pbsid=$1
  shift
  { echo '#!/bin/sh'; for l in "$@"; do printf '%s\n' "$l"; done; echo 'echo computing'; } \
    >"$PBS_HOME_DIR/mom_priv/jobs/$pbsid.SC"
  chown "$U" "$PBS_HOME_DIR/mom_priv/jobs/$pbsid.SC"
}

# pbs_mom's environment: root's, PBS_HOME (as /etc/pbs.conf sets it) and the site's BBKIT_CONFIG;
# DIR is the working directory.
mom_run() {
  local dir=$1
  shift
  run env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root PBS_HOME="$PBS_HOME_DIR" \
    BBKIT_CONFIG="$BBKIT_CONFIG" PBS_JOBDIR=/nonexistent \
    sh -c 'cd "$1" && shift && exec "$@"' - "$dir" "$@"
}

# prologue PBSID [USER]: into $status and $output, run from mom_priv like pbs_mom.
prologue() { mom_run "$PBS_HOME_DIR/mom_priv" "$PBS_DIR/prologue" "$1" "${2:-$U}" "$G"; }

# epilogue PBSID: the ten arguments, run from the user's working directory.
epilogue() {
  mom_run "$TEST_DIR/pfs" "$PBS_DIR/epilogue" "$1" "$U" "$G" job.sh 4242 \
    "walltime=01:00:00,ncpus=1" "cput=00:00:01,walltime=00:00:02" workq null 0
}

no_buffers() {
  run bb-pool show nvme --json
  assert_output --partial '"used": 0'
  [ -z "$(ls "$TEST_DIR/nvme/job")" ]
}

@test "pbs scripts are installed executable, root-owned, not group/other writable, POSIX sh" {
  for s in prologue epilogue; do
    # pbs_mom's own check (run_pelog): root-owned regular file, r-x for root, not g/o writable.
    real=$(readlink -f "$PBS_DIR/$s")
    [ -x "$real" ]
    [ "$(stat -c %u "$real")" = 0 ]
    [ $(( $(stat -c %#a "$real") & 022 )) -eq 0 ]
    [ "$(head -n 1 "$real")" = '#!/bin/sh' ]
    sh -n "$real"
  done
}

@test "installed as documented, a symlink in mom_priv, the prologue finds bbkit-job and its tools" {
  ln -s "$PBS_DIR/prologue" "$PBS_HOME_DIR/mom_priv/prologue"
  spool_script 60.server
  mom_run "$PBS_HOME_DIR/mom_priv" "$PBS_HOME_DIR/mom_priv/prologue" 60.server "$U" "$G"
  assert_success
  assert_output ""
}

@test "a job without directives: prologue and epilogue exit 0 and do nothing" {
  spool_script 61.server
  prologue 61.server
  assert_success
  require_bbkit_job
  epilogue 61.server
  assert_success
  no_buffers
}

@test "stage-in, the job as the user through bbkit-job env, stage-out: the result lands" {
  require_bbkit_job
  as_user mkdir "$TEST_DIR/pfs/input"
  as_user sh -c "printf 'data\n' >'$TEST_DIR/pfs/input/in.txt'"
  spool_script 62.pbs-server.example "#BB_LUA pool=nvme capacity=1G" \
    "#BB_LUA stage_in type=directory source=$TEST_DIR/pfs/input destination=\$BB_JOB_DIR/input" \
    "#BB_LUA stage_out type=directory source=\$BB_JOB_DIR/output destination=$TEST_DIR/pfs/results"
  prologue 62.pbs-server.example
  assert_success
  buf="$(bbdir $TEST_DIR/nvme/job/main.62.1)"
  [ "$(cat "$buf/input/in.txt")" = data ]
  PBS_JOBID=62.pbs-server.example
  run as_user sh -c "cd '$TEST_DIR/pfs' && eval \"\$('$BBKIT_JOB' env ${PBS_JOBID%%.*} --shell)\" &&
    mkdir \"\$BB_JOB_DIR/output\" && tr a-z A-Z <\"\$BB_JOB_DIR/input/in.txt\" >\"\$BB_JOB_DIR/output/r.txt\" &&
    echo \"dir=\$BB_JOB_DIR\""
  assert_success
  assert_output "dir=$buf"
  epilogue 62.pbs-server.example
  assert_success
  [ "$(cat "$TEST_DIR/pfs/results/r.txt")" = DATA ]
  [ "$(stat -c %U "$TEST_DIR/pfs/results/r.txt")" = "$U" ]
  [ ! -e "$buf" ]
  no_buffers
}

@test "a subjob of an array gets its own buffer, (index + 1) * 10^12 + seq" {
  require_bbkit_job
  spool_script '63[0].server' "#BB_LUA pool=nvme capacity=1G"
  prologue '63[0].server'
  assert_success
  [ -d "$(bbdir $TEST_DIR/nvme/job/main.1000000000063.1)" ]
  run as_user sh -c "PBS_JOBID='63[0].server' PBS_ARRAY_INDEX=0;
    '$BBKIT_JOB' env \$(( (PBS_ARRAY_INDEX + 1) * 1000000000000 + \${PBS_JOBID%%[.[]*} ))"
  assert_success
  assert_output --partial "main.1000000000063.1"
  epilogue '63[0].server'
  assert_success
  no_buffers
}

@test "a missing stage-in source: 1 (abort), the reason last, the buffer torn down at once" {
  require_bbkit_job
  spool_script 64.server "#BB_LUA pool=nvme capacity=1G" \
    "#BB_LUA stage_in type=file source=$TEST_DIR/pfs/missing destination=in"
  prologue 64.server
  assert_failure 1
  [[ "${lines[-1]}" == bb-* ]]
  # No epilogue follows an aborted prologue: nothing may be left.
  no_buffers
}

@test "a script over [limits] script_size: 1 (abort), bb-parse's reason last, nothing made; at the limit it runs" {
  require_bbkit_job
  sized_script "$PBS_HOME_DIR/mom_priv/jobs/46.server.SC" 4194304 "#BB_LUA pool=nvme capacity=1G"
  chown "$U" "$PBS_HOME_DIR/mom_priv/jobs/46.server.SC"
  prologue 46.server
  assert_success
  epilogue 46.server
  assert_success
  no_buffers
  # A 200 MB sparse script, as root, with bounded memory: refused from its size at once.
  truncate -s 200M "$PBS_HOME_DIR/mom_priv/jobs/47.server.SC"
  chown "$U" "$PBS_HOME_DIR/mom_priv/jobs/47.server.SC"
  start=$SECONDS
  # Sanitizers reserve terabytes of address space: no limit under them.
  [ "${BBKIT_SANITIZE:-}" = 1 ] || ulimit -v 409600
  prologue 47.server
  assert_failure 1
  assert_equal "${lines[-1]}" \
    "$(script_size_message bb-parse "$PBS_HOME_DIR/mom_priv/jobs/47.server.SC" 209715200 4194304)"
  [ $((SECONDS - start)) -lt 10 ]
  no_buffers
}

@test "a full pool: 75 (requeue), the reason last, nothing left" {
  require_bbkit_job
  write_config '[timeouts]' 'queue = 1'
  bb-pool alloc --job 1 --user "$U" --pool small --capacity 4K >/dev/null
  spool_script 65.server "#BB_LUA pool=small capacity=4K"
  prologue 65.server
  assert_failure 75
  [[ "${lines[-1]}" == bb-pool:* ]]
  [ -z "$(ls "$TEST_DIR/small/job" | grep '\.65\.' || true)" ]
}

@test "a failing stage-out: epilogue 1 (never 2), the buffer and its data kept" {
  require_bbkit_job
  mkdir -m 700 "$TEST_DIR/locked"
  spool_script 66.server "#BB_LUA pool=nvme capacity=1G" \
    "#BB_LUA stage_out type=directory source=out destination=$TEST_DIR/locked/res"
  prologue 66.server
  assert_success
  buf="$(bbdir $TEST_DIR/nvme/job/main.66.1)"
  as_user sh -c "mkdir '$buf/out' && printf 'precious\n' >'$buf/out/r.txt'"
  epilogue 66.server
  assert_failure 1
  [[ "${lines[-1]}" == bb-* ]]
  [ "$(cat "$buf/out/r.txt")" = precious ]
  [ ! -e "$TEST_DIR/locked/res" ]
}

@test "hostile job ids are refused with 1 (abort), one line, nothing run" {
  spool_script 67.server "#BB_LUA pool=nvme capacity=1G"
  for bad in '67;touch x.server' '../67.server' '67/../../x' '67.ser/ver' '67..' '67.' '' \
    '067.server' '$(id).server' '67[1;id].server' '67[].server' '67[01].server' \
    '67[99999999].server' '9999999999999.server' '67.server
bb-stage: forged'; do
    prologue "$bad"
    assert_failure 1
    assert_output --partial "bbkit-pbs-prologue: "
    [ "${#lines[@]}" -eq 1 ]
    epilogue "$bad"
    assert_failure 1
  done
  [ ! -e "$TEST_DIR/pfs/x" ] && [ ! -e "$PBS_HOME_DIR/mom_priv/x" ]
  no_buffers
}

@test "a user that does not exist is refused with 1, nothing run" {
  spool_script 68.server "#BB_LUA pool=nvme capacity=1G"
  prologue 68.server no-such-user-bbkit
  assert_failure 1
  assert_output "bbkit-pbs-prologue: job 68.server: user 'no-such-user-bbkit' does not exist on this host"
  prologue 68.server -r
  assert_failure 1
  no_buffers
}

@test "a job script that is a symlink planted by the user is refused with 1, nothing run" {
  as_user sh -c "printf '#!/bin/sh\n#BB_LUA pool=nvme capacity=1G\n' >'$TEST_DIR/pfs/mine.sh'"
  ln -s "$TEST_DIR/pfs/mine.sh" "$PBS_HOME_DIR/mom_priv/jobs/69.server.SC"
  prologue 69.server
  assert_failure 1
  assert_output --partial "is not a regular file (a symbolic link or missing)"
  [ "${#lines[@]}" -eq 1 ]
  no_buffers
}

@test "an interactive job (no script in mom_priv/jobs) has nothing to do: 0" {
  prologue 70.server
  assert_success
  assert_output ""
  require_bbkit_job
  epilogue 70.server
  assert_success
  no_buffers
}

@test "PBS_HOME comes from PBS_CONF_FILE when pbs_mom's environment lacks it" {
  spool_script 71.server
  printf 'PBS_EXEC=/opt/pbs\nPBS_HOME=%s\n' "$PBS_HOME_DIR" >"$TEST_DIR/pbs.conf"
  run env -i PATH=/usr/bin:/bin PBS_CONF_FILE="$TEST_DIR/pbs.conf" BBKIT_CONFIG="$BBKIT_CONFIG" \
    "$PBS_DIR/prologue" 71.server "$U" "$G"
  assert_success
  run env -i PATH=/usr/bin:/bin PBS_CONF_FILE="$TEST_DIR/nonexistent" BBKIT_CONFIG="$BBKIT_CONFIG" \
    "$PBS_DIR/prologue" 71.server "$U" "$G"
  assert_failure 1
  assert_output --partial "no directory /var/spool/pbs/mom_priv/jobs"
}
