#!/usr/bin/env bats
# share/bbkit/standalone/gridengine/{prolog,epilog}, run as sge_shepherd runs them (queue_conf
# "prolog root@PATH --config FILE"): as root, no arguments but the admin's, the job's environment
# (JOB_ID, SGE_TASK_ID, USER, JOB_SCRIPT, REQNAME, SGE_JOB_SPOOL_DIR set by Grid Engine, the
# rest, PATH and BBKIT_* included, the user's), the job's working directory, the job script in
# the execd's spool (job_scripts/JOB_ID) and the shepherd's error file in active_jobs/JOB.TASK.
# Exit statuses: 0, 99 (reschedule) and 100 (job error state), never another (queue error).

load common

setup() {
  staging_setup
  GE_DIR=${BBKIT_BIN_DIR:?the suites run against the installed tree}/../share/bbkit/standalone/gridengine
  BBKIT_JOB=$BBKIT_BIN_DIR/../share/bbkit/standalone/bbkit-job
  mkdir -p "$TEST_DIR/spool/job_scripts" "$TEST_DIR/spool/active_jobs" "$TEST_DIR/evil"
  chmod 755 "$TEST_DIR/spool" "$TEST_DIR/spool/job_scripts" "$TEST_DIR/spool/active_jobs"
  # What a user could put on the job's PATH or in BBKIT_BINDIR: never run.
  for tool in bb-parse bb-pool bb-stage bb-stat bb-teardown sudo id env readlink stat tr sed \
    dirname tail; do
    printf '#!/bin/sh\ntouch %s/ran-%s\nexit 0\n' "$TEST_DIR/evil" "$tool" >"$TEST_DIR/evil/$tool"
    chmod 755 "$TEST_DIR/evil/$tool"
  done
}
teardown() { common_teardown; }

as_user() { runuser -u "$U" -- "$@"; }

# The features bbkit-job runs (bb-stage end, bb-stat env, bb-pool alloc --wait default).
require_bbkit_job() {
  bb-stage --help | grep -q '^ *end ' && bb-stat --help | grep -q '^ *env ' ||
    skip "bbkit-job needs 'bb-stage end' and 'bb-stat env', which this build does not have yet"
}

# Spools job $1's script (the remaining arguments are its lines after the shebang) as execd
# does: a root-owned copy in job_scripts/.
spool_script() {
  local job=$1
  shift
  { echo '#!/bin/sh'; for l in "$@"; do printf '%s\n' "$l"; done; echo 'echo computing'; } \
    >"$TEST_DIR/spool/job_scripts/$job"
  chmod 755 "$TEST_DIR/spool/job_scripts/$job"
}

# ge WHICH JOB [TASK]: runs the prolog or epilog for JOB as the shepherd would, into $status and
# $output (stdout and stderr: the job's files). GE_USER and GE_SCRIPT override USER and
# JOB_SCRIPT.
ge() {
  local which=$1 job=$2 task=${3:-undefined}
  local spool="$TEST_DIR/spool/active_jobs/$job.${task/undefined/1}"
  mkdir -p "$spool"
  if [ ! -e "$spool/error" ]; then
    : >"$spool/error"
    chown "$U" "$spool/error"
  fi
  # The user's environment names evil tools, and sets the adapters' library's variables
  # (bbkit-lib.sh), which count for nothing: the library sets them itself.
  run env -i PATH="$TEST_DIR/evil:/usr/local/bin:/bin:/usr/bin" HOME=/nonexistent \
    BBKIT_BINDIR="$TEST_DIR/evil" BBKIT_CONFIG=/nonexistent/bbkit.toml SUDO_UID=1 \
    bbkit_job_bindir="$TEST_DIR/evil" bbkit_job_config=/nonexistent/bbkit.toml \
    bbkit_tools="$TEST_DIR/evil" bbkit_path="$TEST_DIR/evil" bbkit_uid=1 \
    bbkit_job="$TEST_DIR/evil/bbkit-job" \
    bbkit_say_also="$TEST_DIR/evil/ran-appended" \
    JOB_ID="$job" SGE_TASK_ID="$task" USER="${GE_USER:-$U}" LOGNAME="${GE_USER:-$U}" \
    JOB_SCRIPT="${GE_SCRIPT:-$TEST_DIR/spool/job_scripts/$job}" REQNAME=job.sh \
    SGE_JOB_SPOOL_DIR="$spool" ENVIRONMENT=BATCH \
    "${GE_FUNCTIONS[@]}" \
    "${GE_SHELL:-sh}" -c 'cd "$1" && shift && exec "$@"' - "$TEST_DIR/pfs" \
    ${GE_SHELL:+"$GE_SHELL" --posix} "$GE_DIR/$which" --config "$BBKIT_CONFIG"
}
# GE_SHELL: the shell that runs the script, in POSIX mode (bash: RHEL's /bin/sh), and the
# shepherd's part (dash would drop the exported functions below); GE_FUNCTIONS: more of the
# job's environment.
GE_SHELL=
GE_FUNCTIONS=()

# The shepherd's error file of job $1 (what qstat -j shows as the error reason).
error_file() { cat "$TEST_DIR/spool/active_jobs/$1.1/error"; }

no_evil_ran() {
  [ -z "$(ls "$TEST_DIR/evil" | grep '^ran-' || true)" ] || { ls "$TEST_DIR/evil"; false; }
}

no_buffers() {
  run bb-pool show nvme --json
  assert_output --partial '"used": 0'
  [ -z "$(ls "$TEST_DIR/nvme/job")" ]
}

@test "gridengine: where /bin/sh is bash, functions the job's environment exports replace nothing" {
  require_bbkit_job
  spool_script 61 "#BB_LUA pool=nvme capacity=1GiB"
  # Exported bash functions named like the commands the scripts run, each leaving a mark.
  local f
  GE_FUNCTIONS=()
  for f in readlink dirname id printf env stat tr cat tail sed head; do
    GE_FUNCTIONS+=("BASH_FUNC_$f%%=() { touch $TEST_DIR/evil/ran-function-$f; command $f \"\$@\"; }")
  done
  GE_SHELL=bash ge prolog 61
  assert_success
  GE_SHELL=bash ge epilog 61
  assert_success
  no_evil_ran
  no_buffers
}

@test "gridengine scripts are installed executable and are POSIX sh" {
  for s in prolog epilog; do
    [ -x "$GE_DIR/$s" ]
    [ "$(head -n 1 "$GE_DIR/$s")" = '#!/bin/sh' ]
    sh -n "$GE_DIR/$s"
  done
  if command -v checkbashisms >/dev/null; then checkbashisms "$GE_DIR/prolog" "$GE_DIR/epilog"; fi
}

@test "a job without directives: prolog and epilog exit 0 and do nothing" {
  spool_script 41
  ge prolog 41
  assert_success
  require_bbkit_job
  ge epilog 41
  assert_success
  no_evil_ran
  no_buffers
}

@test "stage-in, the job as the user through bbkit-job env, stage-out: the result lands" {
  require_bbkit_job
  as_user mkdir "$TEST_DIR/pfs/input"
  as_user sh -c "printf 'data\n' >'$TEST_DIR/pfs/input/in.txt'"
  spool_script 42 "#BB_LUA pool=nvme capacity=1G" \
    "#BB_LUA stage_in type=directory source=$TEST_DIR/pfs/input destination=\$BB_JOB_DIR/input" \
    "#BB_LUA stage_out type=directory source=\$BB_JOB_DIR/output destination=$TEST_DIR/pfs/results"
  ge prolog 42
  assert_success
  buf="$(bbdir $TEST_DIR/nvme/job/main.42.1)"
  [ "$(cat "$buf/input/in.txt")" = data ]
  # The job, as its user, in its working directory.
  run as_user sh -c "cd '$TEST_DIR/pfs' && eval \"\$('$BBKIT_JOB' env 42 --shell)\" &&
    mkdir \"\$BB_JOB_DIR/output\" && tr a-z A-Z <\"\$BB_JOB_DIR/input/in.txt\" >\"\$BB_JOB_DIR/output/r.txt\" &&
    echo \"dir=\$BB_JOB_DIR\""
  assert_success
  assert_output "dir=$buf"
  ge epilog 42
  assert_success
  [ "$(cat "$TEST_DIR/pfs/results/r.txt")" = DATA ]
  [ "$(stat -c %U "$TEST_DIR/pfs/results/r.txt")" = "$U" ]
  [ ! -e "$buf" ]
  no_evil_ran
  no_buffers
}

@test "an array task gets its own buffer, (task + 1) * 10^12 + JOB_ID" {
  require_bbkit_job
  spool_script 43 "#BB_LUA pool=nvme capacity=1G"
  ge prolog 43 7
  assert_success
  [ -d "$(bbdir $TEST_DIR/nvme/job/main.8000000000043.1)" ]
  run as_user sh -c "JOB_ID=43 SGE_TASK_ID=7; '$BBKIT_JOB' env \$(( (SGE_TASK_ID + 1) * 1000000000000 + JOB_ID ))"
  assert_success
  assert_output --partial "main.8000000000043.1"
  ge epilog 43 7
  assert_success
  no_buffers
}

@test "a missing stage-in source: 100 (job error state), the reason last and in the error file" {
  require_bbkit_job
  spool_script 44 "#BB_LUA pool=nvme capacity=1G" \
    "#BB_LUA stage_in type=file source=$TEST_DIR/pfs/missing destination=in"
  ge prolog 44
  assert_failure 100
  [[ "${lines[-1]}" == bb-* ]]
  assert_equal "$(error_file 44)" "${lines[-1]}"
  # Grid Engine runs the epilog after a failed prolog: it ends what the prolog left.
  ge epilog 44
  assert_success
  no_buffers
}

@test "a script over [limits] script_size: 100, bb-parse's reason last and in the error file; at the limit it runs" {
  require_bbkit_job
  sized_script "$TEST_DIR/spool/job_scripts/48" 4194304 "#BB_LUA pool=nvme capacity=1G"
  ge prolog 48
  assert_success
  ge epilog 48
  assert_success
  no_buffers
  sized_script "$TEST_DIR/spool/job_scripts/49" 4194305 "#BB_LUA pool=nvme capacity=1G"
  ge prolog 49
  assert_failure 100
  assert_equal "${lines[-1]}" \
    "$(script_size_message bb-parse "$TEST_DIR/spool/job_scripts/49" 4194305 4194304)"
  assert_equal "$(error_file 49)" "${lines[-1]}"
  no_evil_ran
  ge epilog 49
  assert_success
  no_buffers
}

@test "a full pool: 99 (rescheduled), the reason in the error file, nothing left" {
  require_bbkit_job
  write_config '[timeouts]' 'queue = 1'
  bb-pool alloc --job 1 --user "$U" --pool small --capacity 4K >/dev/null
  spool_script 45 "#BB_LUA pool=small capacity=4K"
  ge prolog 45
  assert_failure 99
  [[ "${lines[-1]}" == bb-pool:* ]]
  assert_equal "$(error_file 45)" "${lines[-1]}"
  ge epilog 45
  assert_success
  [ -z "$(ls "$TEST_DIR/small/job" | grep '\.45\.' || true)" ]
}

@test "a failing stage-out: epilog 100, the buffer and its data kept" {
  require_bbkit_job
  mkdir -m 700 "$TEST_DIR/locked"
  spool_script 46 "#BB_LUA pool=nvme capacity=1G" \
    "#BB_LUA stage_out type=directory source=out destination=$TEST_DIR/locked/res"
  ge prolog 46
  assert_success
  buf="$(bbdir $TEST_DIR/nvme/job/main.46.1)"
  as_user sh -c "mkdir '$buf/out' && printf 'precious\n' >'$buf/out/r.txt'"
  ge epilog 46
  assert_failure 100
  [[ "${lines[-1]}" == bb-* ]]
  assert_equal "$(error_file 46)" "${lines[-1]}"
  [ "$(cat "$buf/out/r.txt")" = precious ]
  [ ! -e "$TEST_DIR/locked/res" ]
}

@test "hostile JOB_ID values are refused with 100, nothing run" {
  spool_script 47 "#BB_LUA pool=nvme capacity=1G"
  for bad in '47;touch x' '../47' '47/..' '' '047' '4 7' '$(id)' '99999999999999'; do
    GE_SCRIPT="$TEST_DIR/spool/job_scripts/47" ge prolog "$bad"
    assert_failure 100
    assert_output --partial "bbkit-gridengine-prolog: "
    [ "${#lines[@]}" -eq 1 ]
    GE_SCRIPT="$TEST_DIR/spool/job_scripts/47" ge epilog "$bad"
    assert_failure 100
  done
  for bad in '1;id' '../1' '01' '-1' '99999999'; do
    ge prolog 47 "$bad"
    assert_failure 100
    assert_output --regexp "SGE_TASK_ID|too large"
  done
  [ ! -e "$TEST_DIR/pfs/x" ]
  no_evil_ran
  no_buffers
}

@test "a job owner that does not exist is refused with 100, nothing run" {
  spool_script 48 "#BB_LUA pool=nvme capacity=1G"
  GE_USER=no-such-user-bbkit ge prolog 48
  assert_failure 100
  assert_output "bbkit-gridengine-prolog: job 48: job owner 'no-such-user-bbkit' does not exist on this host"
  GE_USER=-r ge prolog 48
  assert_failure 100
  no_evil_ran
  no_buffers
}

@test "qrsh/qlogin jobs (JOB_SCRIPT not a path) have nothing to do: 0" {
  for word in QRSH QLOGIN INTERACTIVE; do
    GE_SCRIPT=$word ge prolog 51
    assert_success
    assert_output ""
  done
  require_bbkit_job
  ge epilog 51
  assert_success
  no_evil_ran
  no_buffers
}

@test "a job script that is a symlink planted by the user is refused with 100, nothing run" {
  as_user sh -c "printf '#!/bin/sh\n#BB_LUA pool=nvme capacity=1G\n' >'$TEST_DIR/pfs/mine.sh'"
  ln -s "$TEST_DIR/pfs/mine.sh" "$TEST_DIR/spool/job_scripts/49"
  GE_SCRIPT="$TEST_DIR/spool/job_scripts/49" ge prolog 49
  assert_failure 100
  assert_output --partial "is not a regular file (a symbolic link or missing)"
  [ "${#lines[@]}" -eq 1 ]
  assert_equal "$(error_file 49)" "${lines[-1]}"
  rm "$TEST_DIR/spool/job_scripts/49"
  GE_SCRIPT="$TEST_DIR/spool/job_scripts/49" ge prolog 49
  assert_failure 100
  no_evil_ran
  no_buffers
}

@test "a binary job (qsub -b y: JOB_SCRIPT is its command, not a spooled script) is not read" {
  as_user sh -c "printf '#!/bin/sh\n#BB_LUA pool=nvme capacity=1G\n' >'$TEST_DIR/pfs/mine.sh'"
  GE_SCRIPT="$TEST_DIR/pfs/mine.sh" ge prolog 52
  assert_success
  GE_SCRIPT=/bin/sleep ge prolog 52
  assert_success
  no_buffers
}

@test "a bad argument on the queue's prolog line is 100, never a queue error" {
  spool_script 50
  run env -i JOB_ID=50 SGE_TASK_ID=undefined USER="$U" JOB_SCRIPT="$TEST_DIR/spool/job_scripts/50" \
    "$GE_DIR/prolog" --bogus
  assert_failure 100
  run env -i JOB_ID=50 SGE_TASK_ID=undefined USER="$U" JOB_SCRIPT="$TEST_DIR/spool/job_scripts/50" \
    "$GE_DIR/prolog" --config
  assert_failure 100
  run env -i "$GE_DIR/epilog"
  assert_failure 100
}
