#!/usr/bin/env bats
# Standalone mode with a real Slurm 22.05 (no burst_buffer plugin): the harness's second
# configuration (HARNESS_MODE=standalone, harness.bash) runs bbkit's PrologSlurmctld,
# EpilogSlurmctld and TaskProlog from the installed tree (share/bbkit/standalone/slurm, over
# bbkit-job) with bbkit.toml in mode = "standalone". bbkit owns capacity here: Slurm knows no
# pool, so the assertions read bbkit's own figures. Jobs are submitted by an unprivileged user;
# every line seen is kept in build/tests/slurm/transcript-standalone.txt.
#
# Slurm 22.05 facts relied on are in the comments where they are used (and in the scripts).

HARNESS_MODE=standalone
BBKIT_SLURM_TRANSCRIPT=${BBKIT_SLURM_TRANSCRIPT:-$BBKIT_BUILD_DIR/tests/slurm/transcript-standalone.txt}
load harness

setup_file() {
  mkdir -p "$(dirname "$TRANSCRIPT")"
  : >"$TRANSCRIPT"
  start_cluster root
  setpriv --reuid="$TEST_UID" --regid="$TEST_GID" --init-groups \
    dd if=/dev/zero of="$DATA_DIR/slow.dat" bs=4M count=$((SLOW_MIB / 4)) conv=fsync status=none
}

teardown_file() {
  finish_cluster
}

setup() {
  scenario_setup
}

teardown() {
  scenario_teardown
}

# A job that holds its buffer until $JOBS_DIR/release-<tag> exists (at most 5 minutes).
held_job_script() {
  local file=$1 tag=$2
  shift 2
  job_script "$file" "$@" <<JOB
echo "running with \$BB_JOB_DIR"
for i in \$(seq 1 1500); do [ -e "$JOBS_DIR/release-$tag" ] && exit 0; sleep 0.2; done
exit 1
JOB
}

# bbkit's state of a job's (latest) buffer, from bb-stat --json job (empty when none).
bb_state() {
  bb-stat --json job "$1" 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin).get("state", ""))' 2>/dev/null || true
}

bb_state_is() { [ "$(bb_state "$1")" = "$2" ]; }

# The time bbkit's buffer of a job entered a state (ISO 8601, from bb-stat --json job).
bb_entered() {
  bb-stat --json job "$1" | python3 -c 'import json, sys; print(json.load(sys.stdin)["entered"].get(sys.argv[1], ""))' "$2"
}

# The job is done in Slurm's view (no COMPLETING flag: EpilogSlurmctld has ended). A job the
# prolog held instead fails at once, with bbkit's reason.
wait_job_done() {
  wait_job "$1" "JobState=($2|PENDING Reason=job_requeued_in_held_state) " "${3:-120}" || return 1
  [[ $JOB_STATE_LINE == "JobState=$2 "* ]] ||
    fail "job $1 was held: $(scontrol show job "$1" | grep -o 'AdminComment=.*')"
}

# bbkit's pool is whole: nothing charged, nothing in trash (its own figures: Slurm has none).
assert_pool_whole() {
  local pool=$1 figures
  wait_until 60 "bbkit's pool $pool to be whole" pool_whole "$pool"
  figures=$(bbkit_pool "$pool")
  transcript "root# bb-pool --json list   # $pool: total used trash free = $figures"
}

pool_whole() {
  local t u tr f
  read -r t u tr f <<<"$(bbkit_pool "$1")"
  [ "$u" = 0 ] && [ "$tr" = 0 ] && [ "$f" = "$t" ]
}

assert_no_buffer_dir() {
  local pool=$1 job=$2 left
  left=$(find "$SLURM_DIR/pools/$pool/job" "$SLURM_DIR/pools/$pool/trash" -mindepth 1 -maxdepth 1 -name "e2e.$job.*" 2>/dev/null)
  [ -z "$left" ] || fail "buffer directories of job $job are still there: $left"
}

# Scenario a, also run again under SlurmUser=slurm (f): `name` keeps the two apart.
run_stage_in_and_out() {
  local name=$1 sum out script
  mkdir -p "$DATA_DIR/$name/tree/sub"
  head -c 3000000 /dev/urandom >"$DATA_DIR/$name/input.dat"
  printf 'hello from the parallel file system\n' >"$DATA_DIR/$name/tree/sub/hello.txt"
  chown -R "$SLURM_TEST_USER:" "$DATA_DIR/$name"
  sum=$(sha256sum <"$DATA_DIR/$name/input.dat" | cut -d' ' -f1)

  # The srun step runs without the batch step's BB_JOB_DIR: TaskProlog sets it for that task
  # too (22.05 runs TaskProlog before every task, the batch script's included).
  script=$(job_script "$name.sh" "#SBATCH --job-name=scenario-$name" \
    '#BB pool=pool1 capacity=8MiB' \
    "#BB stage_in type=file source=$DATA_DIR/$name/input.dat destination=\$BB_JOB_DIR/input.dat" \
    "#BB stage_in type=directory source=$DATA_DIR/$name/tree destination=\$BB_JOB_DIR/tree" \
    "#BB stage_out type=directory source=\$BB_JOB_DIR/results destination=$DATA_DIR/$name/results" <<'EOF2'
echo "batch BB_JOB_DIR=$BB_JOB_DIR"
mkdir "$BB_JOB_DIR/results"
sha256sum <"$BB_JOB_DIR/input.dat" | cut -d' ' -f1 >"$BB_JOB_DIR/results/input.sha256"
env -u BB_JOB_DIR srun --ntasks=1 bash -c 'echo "step BB_JOB_DIR=$BB_JOB_DIR"; tr a-z A-Z <"$BB_JOB_DIR/tree/sub/hello.txt" >"$BB_JOB_DIR/results/upper.txt"'
id -un >"$BB_JOB_DIR/results/user"
EOF2
)
  submit "$script"
  assert_equal "$status" 0
  wait_job_done "$JOB" COMPLETED 120
  slurm_run scontrol show job "$JOB"
  assert_output --partial "ExitCode=0:0"
  refute_output --partial "AdminComment=bbkit"

  # Both tasks saw the buffer directory through TaskProlog, and read their input there.
  out=$(cat "$JOBS_DIR/scenario-$name-$JOB.out")
  transcript "$out"
  [[ $out == *"batch BB_JOB_DIR=$SLURM_DIR/pools/pool1/job/e2e.$JOB."* ]] || fail "job output: $out"
  [[ $out == *"step BB_JOB_DIR=$SLURM_DIR/pools/pool1/job/e2e.$JOB."* ]] || fail "job output: $out"
  # Its output is at the stage-out destination, owned by the user.
  assert_equal "$(cat "$DATA_DIR/$name/results/input.sha256")" "$sum"
  assert_equal "$(cat "$DATA_DIR/$name/results/upper.txt")" "HELLO FROM THE PARALLEL FILE SYSTEM"
  assert_equal "$(cat "$DATA_DIR/$name/results/user")" "$SLURM_TEST_USER"
  assert_equal "$(stat -c %U "$DATA_DIR/$name/results/upper.txt")" "$SLURM_TEST_USER"
  # The buffer ended complete, its directory is gone and the space is back.
  wait_until 30 "job $JOB's buffer to be complete" bb_state_is "$JOB" complete
  assert_no_buffer_dir pool1 "$JOB"
  assert_pool_whole pool1
}

# Two jobs of 6MiB each in the 10MiB pool "small": TAG1 holds its buffer, RUNNING, until
# $JOBS_DIR/release-TAG exists; TAG2, submitted then, prints where it ran. Sets job1 and job2.
submit_pair() {
  local tag=$1 first second
  first=$(held_job_script "${tag}1.sh" "$tag" "#SBATCH --job-name=scenario-${tag}1" '#BB pool=small capacity=6MiB')
  second=$(job_script "${tag}2.sh" "#SBATCH --job-name=scenario-${tag}2" '#BB pool=small capacity=6MiB' <<<'echo "second ran in $BB_JOB_DIR"')
  submit "$first"
  assert_equal "$status" 0
  job1=$JOB
  wait_job "$job1" 'JobState=RUNNING ' 60
  submit "$second"
  assert_equal "$status" 0
  job2=$JOB
}

# The smoke scenario: what the submission tier runs of this suite (tests/CMakeLists.txt).
# bats test_tags=smoke
@test "a. stage-in and stage-out of real files: the tasks (batch and srun) read their input in \$BB_JOB_DIR, the output lands, the buffer ends complete" {
  run_stage_in_and_out a
}

@test "b. two jobs that together exceed the pool: the second waits in bbkit's queue (CONFIGURING), then runs" {
  submit_pair b
  # Its PrologSlurmctld waits in the pool's FIFO queue: Slurm shows the job CONFIGURING (it
  # holds its CPU meanwhile), bbkit has no buffer for it yet.
  wait_job "$job2" 'JobState=CONFIGURING ' 30
  local i
  for i in $(seq 1 10); do
    sleep 0.5
    [ "$(job_field "$job2" JobState)" = CONFIGURING ] ||
      fail "job $job2 left CONFIGURING while $job1 held the space: $(job_field "$job2" JobState)"
  done
  slurm_run squeue -h -j "$job1,$job2" -o '%i %T'
  assert_line "$job1 RUNNING"
  assert_line "$job2 CONFIGURING"
  read -r _ used _ _ <<<"$(bbkit_pool small)"
  assert_equal "$used" $((6 * 1048576))

  touch "$JOBS_DIR/release-b"
  wait_job_done "$job1" COMPLETED 60
  wait_job_done "$job2" COMPLETED 90
  grep -q "second ran in $SLURM_DIR/pools/small/job/e2e.$job2." "$JOBS_DIR/scenario-b2-$job2.out" ||
    fail "job $job2's output: $(cat "$JOBS_DIR/scenario-b2-$job2.out")"
  slurm_run scontrol show job "$job2"
  assert_output --partial "ExitCode=0:0"
  # The second got its space only once the first's buffer was being torn down.
  local done1 alloc2
  done1=$(bb_entered "$job1" teardown)
  alloc2=$(bb_entered "$job2" allocated)
  transcript "(job $job1 teardown at $done1, job $job2 allocated at $alloc2)"
  [ -n "$done1" ] && [ -n "$alloc2" ] && ! [[ $alloc2 < $done1 ]] ||
    fail "job $job2 was allocated ($alloc2) before job $job1's teardown ($done1)"
  wait_until 30 "job $job2's buffer to be complete" bb_state_is "$job2" complete
  assert_no_buffer_dir small "$job1"
  assert_no_buffer_dir small "$job2"
  assert_pool_whole small
}

@test "c. a missing stage-in source: the job ends held with bbkit's reason in AdminComment, the space freed" {
  mkdir -p "$DATA_DIR/c"
  chown "$SLURM_TEST_USER:" "$DATA_DIR/c"
  script=$(job_script c.sh '#SBATCH --job-name=scenario-c' '#BB pool=small capacity=2MiB' \
    "#BB stage_in type=file source=$DATA_DIR/c/missing.dat destination=\$BB_JOB_DIR/in" <<<'echo "should not run"')
  # No cli_filter in standalone mode: sbatch accepts it.
  submit "$script"
  assert_equal "$status" 0
  job=$JOB
  # The prolog failed for good: scontrol requeuehold (Slurm 22.05: Priority=0,
  # Reason=job_requeued_in_held_state), and the failed PrologSlurmctld's own requeue finds the
  # job pending already.
  wait_job "$job" 'JobState=PENDING Reason=job_requeued_in_held_state' 60
  slurm_run scontrol show job "$job"
  assert_output --partial "Priority=0"
  assert_output --regexp "AdminComment=bbkit: bb-[a-z]+: .*$DATA_DIR/c/missing.dat"
  refute_output --partial "should not run"
  # EpilogSlurmctld ran on the requeue (deallocate_nodes): the buffer is gone.
  wait_until 30 "job $job's buffer to be complete" bb_state_is "$job" complete
  assert_no_buffer_dir small "$job"
  assert_pool_whole small
  [ ! -e "$JOBS_DIR/scenario-c-$job.out" ] || fail "the job ran: $(cat "$JOBS_DIR/scenario-c-$job.out")"
  # It stays held (no retry behind the admin's back).
  sleep 3
  assert_equal "$(job_field "$job" JobState) $(job_field "$job" Priority)" "PENDING 0"
  slurm_run scancel "$job"
  assert_equal "$status" 0
}

@test "d. a failing stage-out keeps the buffer and its data; teardown refuses without --force; a retry delivers and ends it" {
  mkdir -p "$DATA_DIR/d-out"
  chmod 0755 "$DATA_DIR/d-out"  # root's: the user cannot write the destination
  script=$(job_script d.sh '#SBATCH --job-name=scenario-d' '#BB pool=pool1 capacity=4MiB' \
    "#BB stage_out type=directory source=\$BB_JOB_DIR/results destination=$DATA_DIR/d-out/results" <<'EOF2'
mkdir "$BB_JOB_DIR/results"
echo "precious" >"$BB_JOB_DIR/results/data.txt"
EOF2
)
  submit "$script"
  assert_equal "$status" 0
  job=$JOB
  wait_job_done "$job" COMPLETED 120
  slurm_run scontrol show job "$job"
  assert_output --partial "ExitCode=0:0"
  # Slurm 22.05 refuses any update of a finished job ("Job has already finished"): the epilog
  # cannot set the AdminComment of a COMPLETED job; slurmctld logs its exit status only.
  grep -q "JobId=$job EpilogSlurmctld exit status [1-9]" "$SLURM_DIR/log/slurmctld.log" ||
    fail "no failed EpilogSlurmctld for job $job in slurmctld.log"
  # The buffer and its data stay, charged, and bbkit says why.
  dir=$(find "$SLURM_DIR/pools/pool1/job" -mindepth 1 -maxdepth 1 -name "e2e.$job.*")
  [ -n "$dir" ] || fail "job $job's buffer directory is gone"
  assert_equal "$(cat "$dir/results/data.txt")" precious
  read -r _ used _ _ <<<"$(bbkit_pool pool1)"
  assert_equal "$used" $((4 * 1048576))
  slurm_run bb-stat job "$job"
  assert_output --partial "$DATA_DIR/d-out"
  slurm_run bb-pool check
  assert_output --partial "e2e.$job."
  # Not without --force: the results have not reached their destination.
  slurm_run bb-teardown --job "$job"
  assert_equal "$status" 69
  assert_dir_exists "$dir"
  # The admin fixes the destination and delivers.
  chown "$SLURM_TEST_USER:" "$DATA_DIR/d-out"
  slurm_run bb-stage out --retry --job "$job"
  assert_equal "$status" 0
  assert_equal "$(cat "$DATA_DIR/d-out/results/data.txt")" precious
  assert_equal "$(stat -c %U "$DATA_DIR/d-out/results/data.txt")" "$SLURM_TEST_USER"
  slurm_run bb-stage --job "$job" end
  assert_equal "$status" 0
  wait_until 30 "job $job's buffer to be complete" bb_state_is "$job" complete
  assert_no_buffer_dir pool1 "$job"
  assert_pool_whole pool1
  slurm_run bb-pool check
  assert_equal "$status" 0
}

# Processes with a file open under a directory. A process in another mount namespace (the
# daemons' under with-default-config) inside a release's root (tests/slurm-release) shows its
# files by their path from the host's root, which ends with the path seen here.
open_files_under() {
  find /proc/[0-9]*/fd -lname "*$1/*" 2>/dev/null || true
}

stage_started() {
  local done total
  read -r done total < <(stage_progress "$1") || return 1
  [ "${done:-0}" -gt 0 ] && [ "$done" -lt "$total" ]
}

copy_pids() {
  open_files_under "$SLURM_DIR/pools/slow/job" | cut -d/ -f3 | sort -u
}

# Stops the processes copying into the slow pool (SIGSTOP), as slurm.bats does: on a fast disk
# the copy could end before the checks that it is still in progress.
pause_copy() {
  PAUSED_PIDS=$(copy_pids)
  [ -n "$PAUSED_PIDS" ] || { fail "no process copies into the buffer"; return 1; }
  # shellcheck disable=SC2086
  kill -STOP $PAUSED_PIDS
  transcript "(copy paused: SIGSTOP to pid(s) $(echo $PAUSED_PIDS))"
}

resume_copy() {
  # shellcheck disable=SC2086
  kill -CONT $PAUSED_PIDS 2>/dev/null || true
  PAUSED_PIDS=
  transcript "(copy resumed)"
}

@test "e. scancel during a long stage-in (in PrologSlurmctld) stops the copy and frees the space" {
  script=$(job_script e.sh "#SBATCH --job-name=scenario-e" \
    "#BB pool=slow capacity=$((SLOW_MIB + 16))MiB" \
    "#BB stage_in type=file source=$DATA_DIR/slow.dat destination=\$BB_JOB_DIR/slow.dat" <<<'echo "should not run"')
  submit "$script"
  assert_equal "$status" 0
  job=$JOB
  wait_job "$job" 'JobState=CONFIGURING ' 60
  wait_until 60 "the copy of job $job to start" stage_started "$job"
  pause_copy || return 1
  read -r done total < <(stage_progress "$job")
  [ -n "$done" ] && [ "$done" -lt "$total" ] || { resume_copy; fail "the stage-in of job $job is not in progress (${done:-?} of ${total:-?})"; }
  resume_copy
  # Slurm 22.05 kills the PrologSlurmctld's process group (SIGKILL) and runs EpilogSlurmctld,
  # whose bbkit-job end tears down the buffer of a job that never ran, stopping its stager.
  slurm_run -u scancel "$job"
  transcript "(scancel with the copy at $done of $total bytes)"
  assert_equal "$status" 0
  wait_job_done "$job" CANCELLED 60
  wait_until 60 "the copy to stop" test -z "$(open_files_under "$SLURM_DIR/pools/slow")"
  # The flush also kills the EpilogSlurmctld Slurm has just started for the job, its process
  # group included: when that lands before the epilog's end has left the group, slurmctld logs
  # "JobId=N EpilogSlurmctld killed by signal 9", the buffer stays, and reconcile (its timer)
  # ends it, as a job Slurm lists as ended whose buffer never got to pre-run.
  local waited=0
  while ! bb_state_is "$job" complete && [ "$waited" -lt 100 ]; do
    sleep 0.2
    waited=$((waited + 1))
  done
  if ! bb_state_is "$job" complete &&
    grep -q "JobId=$job EpilogSlurmctld killed by signal 9" "$SLURM_DIR/log/slurmctld.log"; then
    transcript "(Slurm killed job $job's EpilogSlurmctld before its end left the process group)"
    slurm_run bb-pool reconcile --slurm --apply
    assert_equal "$status" 0
    assert_line --index 0 --regexp "^torn down: [^ ]+\.$job\.1 \(job $job, "
  fi
  wait_until 60 "job $job's buffer to be complete" bb_state_is "$job" complete
  assert_no_buffer_dir slow "$job"
  assert_pool_whole slow
  [ ! -e "$JOBS_DIR/scenario-e-$job.out" ] || fail "the job ran: $(cat "$JOBS_DIR/scenario-e-$job.out")"

  # The same outcome made certain: a reservation for the job, which Slurm lists as CANCELLED
  # (as one made by a prolog in the flush's window would be), is found and ended by reconcile.
  slurm_run bb-pool alloc --job "$job" --user "$SLURM_TEST_USER" --pool slow --capacity 1MiB
  assert_equal "$status" 0
  slurm_run bb-pool reconcile --slurm
  assert_equal "$status" 0
  assert_line --index 0 --regexp "^ended in Slurm: [^ ]+\.$job\.2 \(job $job, user $SLURM_TEST_USER, pool slow, 1MiB, allocated\)$"
  slurm_run bb-pool reconcile --slurm --apply
  assert_equal "$status" 0
  assert_line --index 0 --regexp "^torn down: [^ ]+\.$job\.2 "
  assert_no_buffer_dir slow "$job"
  assert_pool_whole slow
}

@test "f. scenario a again with SlurmUser=slurm (the tools through sudo -n and the drop-in)" {
  use_slurm_user slurm
  slurm_run scontrol show config
  assert_output --regexp "SlurmUser += slurm\($(id -u slurm)\)"
  # From 24.11 Slurm numbers the scripts (PrologSlurmctld[0]).
  assert_output --regexp "PrologSlurmctld(\[0\])? += [^ ]*/share/bbkit/standalone/slurm/prolog-slurmctld"
  run_stage_in_and_out f
  # SlurmUser (an operator) may set AdminComment and requeuehold: a failing job is held with
  # bbkit's reason as under root.
  script=$(job_script f-missing.sh '#SBATCH --job-name=scenario-f-missing' '#BB pool=small capacity=2MiB' \
    "#BB stage_in type=file source=$DATA_DIR/f/missing.dat destination=\$BB_JOB_DIR/in" <<<'true')
  submit "$script"
  assert_equal "$status" 0
  job=$JOB
  wait_job "$job" 'JobState=PENDING Reason=job_requeued_in_held_state' 60
  slurm_run scontrol show job "$job"
  assert_output --regexp "AdminComment=bbkit: bb-[a-z]+: .*$DATA_DIR/f/missing.dat"
  assert_pool_whole small
  # The tools ran as root through sudo, for slurm (the audit log names sudo's caller).
  slurm_run grep -c "sudo_user=slurm" "$SLURM_DIR/bbkit/state/log/audit.log"
  assert_equal "$status" 0
}

@test "g. install-slurm --standalone passes the cluster's slurm.conf (its PrologEpilogTimeout holds bbkit's prolog and epilog, as this release reads it) and refuses a shorter limit" {
  local limit
  limit=$(prolog_epilog_timeout)
  # Slurm reads the key the harness wrote: up to 24.11 as itself, from 25.05 as what
  # PrologTimeout and EpilogTimeout fall back to (shown as one line when they are equal).
  slurm_run scontrol show config
  assert_line --regexp "^PrologEpilogTimeout += $limit\$"
  run "$BBKIT_SOURCE_DIR/tests/with-default-config" "$BBKIT_CONFIG" \
    "${BBKIT_INSTALL_SLURM:-$INSTALL_SLURM}" --standalone --slurm-conf-dir "$SLURM_DIR/etc" \
    --bindir "$BBKIT_BIN" --slurm-release "$(slurm_release)"
  assert_success
  assert_line --regexp "^install-slurm: PrologEpilogTimeout=$limit leaves (Prolog|Epilog)Slurmctld room \([0-9]+ s needed\)$"
  # A copy whose limit is shorter than the stage-in may take: refused, naming the key to set.
  mkdir -p "$SLURM_DIR/etc-short"
  sed 's/^PrologEpilogTimeout=.*/PrologEpilogTimeout=60/' "$SLURM_CONF" >"$SLURM_DIR/etc-short/slurm.conf"
  run "$BBKIT_SOURCE_DIR/tests/with-default-config" "$BBKIT_CONFIG" \
    "${BBKIT_INSTALL_SLURM:-$INSTALL_SLURM}" --standalone --slurm-conf-dir "$SLURM_DIR/etc-short" \
    --bindir "$BBKIT_BIN" --slurm-release "$(slurm_release)"
  assert_failure 78
  # An unprivileged SlurmUser of this cluster (slurm.conf's, as install-slurm takes it) is said
  # first; the refusals follow it.
  local user first=0
  user=$(sed -n 's/^SlurmUser=//p' "$SLURM_CONF" | tail -n 1)
  if [ "${user:-root}" != root ]; then
    assert_line --index 0 "install-slurm: SlurmUser $user (slurm.conf; --slurm-user to say otherwise)"
    first=1
  fi
  if release_at_least 25.05; then
    assert_line --index "$first" --regexp "PrologEpilogTimeout=60 is shorter than PrologSlurmctld may take .*; set PrologTimeout=[0-9]+ or more"
  else
    assert_line --index "$first" --regexp "PrologEpilogTimeout=60 is shorter than PrologSlurmctld may take .*; set PrologEpilogTimeout=[0-9]+ or more"
  fi
}

# EligibleTime (or another time field) of a job, in seconds since the epoch.
job_epoch() {
  local when
  when=$(job_field "$1" "$2")
  date -d "$when" +%s
}

@test "h. a job still short of space after bbkit's queue wait is requeued by Slurm and starts again after the requeue delay" {
  # A PrologSlurmctld failure (75: short of capacity after [timeouts] queue) makes Slurm
  # requeue the job, eligible again after the requeue delay: SchedulerParameters=requeue_delay=
  # from 25.11 when set, else the credential lifetime, 120 s (bbkit(7), STANDALONE MODE).
  local delay=120
  sed -i 's/^queue = .*/queue = 2/' "$BBKIT_CONFIG"
  if release_at_least 25.11; then
    delay=5
    sed -i "s/^SchedulerParameters=.*/SchedulerParameters=bf_interval=1,requeue_delay=$delay/" "$SLURM_CONF"
  fi
  restart_slurmctld "[timeouts] queue = 2, a requeue delay of $delay s"
  submit_pair h
  wait_job "$job2" 'JobState=CONFIGURING ' 30
  wait_job "$job2" 'JobState=PENDING Reason=BeginTime ' 60
  local requeued eligible
  requeued=$(date +%s)
  eligible=$(job_epoch "$job2" EligibleTime)
  transcript "(job $job2 requeued at $(date -d "@$requeued" +%T), eligible at $(date -d "@$eligible" +%T))"
  [ "$((eligible - requeued))" -ge "$((delay - 3))" ] && [ "$((eligible - requeued))" -le "$((delay + 2))" ] ||
    fail "job $job2 is eligible $((eligible - requeued)) s after its requeue, not $delay s"
  slurm_run scontrol show job "$job2"
  assert_output --partial "Restarts=1"
  assert_output --regexp "AdminComment=bbkit: bb-pool: .*small"
  read -r _ used _ _ <<<"$(bbkit_pool small)"
  assert_equal "$used" $((6 * 1048576))
  if release_at_least 25.11; then
    # The space comes back; at its eligible time the job starts again and runs.
    touch "$JOBS_DIR/release-h"
    wait_job_done "$job1" COMPLETED 60
    wait_job_done "$job2" COMPLETED $((delay + 60))
    grep -q "second ran in $SLURM_DIR/pools/small/job/e2e.$job2." "$JOBS_DIR/scenario-h2-$job2.out" ||
      fail "job $job2's output: $(cat "$JOBS_DIR/scenario-h2-$job2.out")"
    [ "$(job_epoch "$job2" StartTime)" -ge "$eligible" ] || fail "job $job2 started before its eligible time"
  else
    touch "$JOBS_DIR/release-h"
    wait_job_done "$job1" COMPLETED 60
    slurm_run scancel "$job2"
  fi
  assert_pool_whole small
  sed -i "s/^queue = .*/queue = ${BBKIT_SLURM_QUEUE_SECONDS:-150}/" "$BBKIT_CONFIG"
  sed -i 's/^SchedulerParameters=.*/SchedulerParameters=bf_interval=1/' "$SLURM_CONF"
  restart_slurmctld "the suite's queue and requeue delay again"
}
