#!/usr/bin/env bats
# End to end with a real Slurm 22.05: munged, slurmctld and slurmd from Debian's packages run on
# loopback in a temporary directory (harness.bash), Slurm drives every buffer through bbkit's
# burst_buffer.lua and cli_filter.lua, and jobs are submitted by an unprivileged user. Each
# scenario asserts on sbatch/squeue/scontrol output and on the files on disk; every line seen
# is kept in build/tests/slurm/transcript.txt.

load harness

setup_file() {
  mkdir -p "$(dirname "$TRANSCRIPT")"
  : >"$TRANSCRIPT"
  start_cluster root
  # The slow source is written once, durably, so that its write-back does not compete with
  # the stage-ins that read it.
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

# The pool is whole again in Slurm's view and in bbkit's: nothing allocated, nothing in trash.
# Space bbkit frees outside Slurm (reconcile, a teardown Slurm gave up on) reaches Slurm only
# with its next slurm_bb_pools call, every 30 s after the previous one ended: wait two periods.
assert_pool_whole() {
  local pool=$1 total=$2 figures
  wait_until 75 "Slurm to report $pool free" sh -c "scontrol show burst | grep -q 'PoolName\[[0-9]*\]=$pool .*TotalSpace=$total FreeSpace=$total UsedSpace=0'"
  slurm_run scontrol show burst
  figures=$(bbkit_pool "$pool")
  read -r t u tr f <<<"$figures"
  [ "$u" = 0 ] && [ "$tr" = 0 ] && [ "$f" = "$t" ] || fail "bbkit's pool $pool is not whole: total used trash free = $figures"
}

# No directory of the job's buffer is left in its pool (trash included).
assert_no_buffer_dir() {
  local pool=$1 job=$2 left
  left=$(find "$SLURM_DIR/pools/$pool/job" "$SLURM_DIR/pools/$pool/trash" -mindepth 1 -maxdepth 1 -name "$job.*" 2>/dev/null)
  [ -z "$left" ] || fail "buffer directories of job $job are still there: $left"
}

# Scenario a, also run again under SlurmUser=slurm (h): `name` keeps the two apart.
run_stage_in_and_out() {
  local name=$1 sum out script
  mkdir -p "$DATA_DIR/$name/tree/sub"
  head -c 3000000 /dev/urandom >"$DATA_DIR/$name/input.dat"
  printf 'hello from the parallel file system\n' >"$DATA_DIR/$name/tree/sub/hello.txt"
  chown -R "$SLURM_TEST_USER:" "$DATA_DIR/$name"
  sum=$(sha256sum <"$DATA_DIR/$name/input.dat" | cut -d' ' -f1)

  script=$(job_script "$name.sh" "#SBATCH --job-name=scenario-$name" \
    '#BB_LUA pool=pool1 capacity=8MiB' \
    "#BB_LUA stage_in type=file source=$DATA_DIR/$name/input.dat destination=\$BB_JOB_DIR/input.dat" \
    "#BB_LUA stage_in type=directory source=$DATA_DIR/$name/tree destination=\$BB_JOB_DIR/tree" \
    "#BB_LUA stage_out type=directory source=\$BB_JOB_DIR/results destination=$DATA_DIR/$name/results" <<'EOF2'
echo "BB_JOB_DIR=$BB_JOB_DIR"
echo "DW_JOB_STRIPED=$DW_JOB_STRIPED"
mkdir "$BB_JOB_DIR/results"
sha256sum <"$DW_JOB_STRIPED/input.dat" | cut -d' ' -f1 >"$BB_JOB_DIR/results/input.sha256"
tr a-z A-Z <"$BB_JOB_DIR/tree/sub/hello.txt" >"$BB_JOB_DIR/results/upper.txt"
id -un >"$BB_JOB_DIR/results/user"
EOF2
)
  submit "$script"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 120
  slurm_run scontrol show job "$JOB"
  assert_output --partial "BurstBuffer=#BB_LUA pool=pool1 capacity=8MiB"
  assert_output --partial "ExitCode=0:0"

  # The job saw its buffer directory through both variables, and read its input there.
  out=$(cat "$JOBS_DIR/scenario-$name-$JOB.out")
  [[ $out == *"BB_JOB_DIR=$SLURM_DIR/pools/pool1/job/e2e.$JOB."* ]] || fail "job output: $out"
  [[ $out == *"DW_JOB_STRIPED=$SLURM_DIR/pools/pool1/job/e2e.$JOB."* ]] || fail "job output: $out"
  # Its output is at the stage-out destination, owned by the user.
  assert_equal "$(cat "$DATA_DIR/$name/results/input.sha256")" "$sum"
  assert_equal "$(cat "$DATA_DIR/$name/results/upper.txt")" "HELLO FROM THE PARALLEL FILE SYSTEM"
  assert_equal "$(cat "$DATA_DIR/$name/results/user")" "$SLURM_TEST_USER"
  assert_equal "$(stat -c %U "$DATA_DIR/$name/results/upper.txt")" "$SLURM_TEST_USER"
  # The buffer is gone and the space is back.
  assert_no_buffer_dir pool1 "$JOB"
  assert_pool_whole pool1 64MiB
}

# The smoke scenario: what the submission tier runs of this suite (tests/CMakeLists.txt).
# bats test_tags=smoke
@test "a. stage-in and stage-out of real files: the job reads its input in the buffer, the output lands, the buffer is gone" {
  run_stage_in_and_out a
}

@test "b. a request larger than the whole pool is refused at submit, saying so" {
  script=$(job_script b.sh '#SBATCH --job-name=scenario-b' '#BB_LUA pool=small capacity=1GiB' <<<'true')
  submit "$script"
  [ "$status" -ne 0 ] || fail "sbatch accepted a request for 1GiB from a 10MiB pool: $output"
  # The exact lines sbatch prints: Slurm prefixes the filter's message with "lua: ".
  assert_line --regexp "^sbatch: error: lua: bb-parse: .*capacity=1GiB.*'small' holds only 10MiB"
  assert_line "sbatch: error: cli_filter plugin terminated with error"

  # Without the client-side filter (a user may point sbatch at a slurm.conf of their own),
  # slurmctld's job_process hook refuses it too.
  mkdir -p "$SLURM_DIR/etc-nofilter"
  grep -v '^CliFilterPlugins=' "$SLURM_CONF" >"$SLURM_DIR/etc-nofilter/slurm.conf"
  chmod -R a+rX "$SLURM_DIR/etc-nofilter"
  SLURM_CONF=$SLURM_DIR/etc-nofilter/slurm.conf submit "$script"
  [ "$status" -ne 0 ] || fail "slurmctld accepted a request for 1GiB from a 10MiB pool: $output"
  assert_output --partial "sbatch: error: burst_buffer/lua:"
  assert_output --partial "capacity=1GiB"
  assert_output --partial "small"
  assert_output --partial "Batch job submission failed"
  slurm_run squeue -h -n scenario-b -o '%i %T %r'
  assert_output ""
  assert_pool_whole small 10MiB
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

# The line number of a bb state change in slurmctld's log, to check the order of two.
bb_log_line() {
  grep -n "Modify JobId=$1 burst buffer state from $2 to $3" "$SLURM_DIR/log/slurmctld.log" | head -n 1 | cut -d: -f1
}

@test "c. two jobs needing 60% of a pool each: the second pends on BurstBufferResources until the first's teardown" {
  first=$(held_job_script c1.sh c '#SBATCH --job-name=scenario-c1' '#BB_LUA pool=small capacity=6MiB')
  second=$(job_script c2.sh '#SBATCH --job-name=scenario-c2' '#BB_LUA pool=small capacity=6MiB' <<<'echo "second ran in $BB_JOB_DIR"')
  submit "$first"
  assert_equal "$status" 0
  job1=$JOB
  wait_job "$job1" 'JobState=RUNNING .*BurstBufferState=running' 60
  slurm_run scontrol show burst
  assert_output --regexp "PoolName\[[0-9]+\]=small Granularity=1MiB TotalSpace=10MiB FreeSpace=4MiB UsedSpace=6MiB"

  submit "$second"
  assert_equal "$status" 0
  job2=$JOB
  wait_job "$job2" 'JobState=PENDING Reason=BurstBufferResources BurstBufferState=pending' 60
  # Several backfill cycles (bf_interval=1) later it is still waiting for space, not started.
  local i
  for i in $(seq 1 15); do
    sleep 0.2
    [ "$(job_field "$job2" JobState) $(job_field "$job2" Reason)" = "PENDING BurstBufferResources" ] ||
      fail "job $job2 left BurstBufferResources while $job1 held the space: $(job_field "$job2" JobState) $(job_field "$job2" Reason)"
  done
  slurm_run squeue -h -j "$job1,$job2" -o '%i %T %r'
  assert_line "$job1 RUNNING None"
  assert_line "$job2 PENDING BurstBufferResources"

  touch "$JOBS_DIR/release-c"
  wait_job "$job1" 'JobState=COMPLETED .*BurstBufferState=complete' 60
  wait_job "$job2" 'JobState=COMPLETED .*BurstBufferState=complete' 90
  grep -q "second ran in $SLURM_DIR/pools/small/job/e2e.$job2." "$JOBS_DIR/scenario-c2-$job2.out"
  # The second's stage-in began only after the first's teardown finished.
  local done1 start2
  done1=$(bb_log_line "$job1" teardown complete)
  start2=$(bb_log_line "$job2" pending staging-in)
  [ -n "$done1" ] && [ -n "$start2" ] && [ "$done1" -lt "$start2" ] ||
    fail "job $job2 started staging in (log line ${start2:-none}) before job $job1's teardown ended (line ${done1:-none})"
  assert_no_buffer_dir small "$job1"
  assert_no_buffer_dir small "$job2"
  assert_pool_whole small 10MiB
}

@test "d. a missing or unreadable stage-in source is refused at submit; one that vanishes after submit holds the job, naming the file" {
  mkdir -p "$DATA_DIR/d"
  echo secret >"$DATA_DIR/d/root-only.dat"
  chmod 0600 "$DATA_DIR/d/root-only.dat"
  echo data >"$DATA_DIR/d/later.dat"
  chown "$SLURM_TEST_USER:" "$DATA_DIR/d" "$DATA_DIR/d/later.dat"

  script=$(job_script d1.sh '#SBATCH --job-name=scenario-d1' '#BB_LUA pool=pool1 capacity=1MiB' \
    "#BB_LUA stage_in type=file source=$DATA_DIR/d/missing.dat destination=\$BB_JOB_DIR/in" <<<'true')
  submit "$script"
  [ "$status" -ne 0 ] || fail "sbatch accepted a missing source: $output"
  assert_output --partial "$DATA_DIR/d/missing.dat"
  assert_output --partial "sbatch: error"

  script=$(job_script d2.sh '#SBATCH --job-name=scenario-d2' '#BB_LUA pool=pool1 capacity=1MiB' \
    "#BB_LUA stage_in type=file source=$DATA_DIR/d/root-only.dat destination=\$BB_JOB_DIR/in" <<<'true')
  submit "$script"
  [ "$status" -ne 0 ] || fail "sbatch accepted a source its user cannot read: $output"
  assert_output --partial "$DATA_DIR/d/root-only.dat"
  slurm_run squeue -h -n scenario-d1,scenario-d2 -o '%i %T'
  assert_output ""

  # The source exists at submit and is removed while the job waits for space behind a job
  # holding 6 of the 10 MiB: stage-in then fails, and the job is held with the file's name.
  blocker=$(held_job_script d-blocker.sh d '#SBATCH --job-name=scenario-d-blocker' '#BB_LUA pool=small capacity=6MiB')
  submit "$blocker"
  assert_equal "$status" 0
  blocker_job=$JOB
  wait_job "$blocker_job" 'JobState=RUNNING .*BurstBufferState=running' 60
  script=$(job_script d3.sh '#SBATCH --job-name=scenario-d3' '#BB_LUA pool=small capacity=6MiB' \
    "#BB_LUA stage_in type=file source=$DATA_DIR/d/later.dat destination=\$BB_JOB_DIR/in" <<<'cat "$BB_JOB_DIR/in"')
  submit "$script"
  assert_equal "$status" 0
  job=$JOB
  wait_job "$job" 'JobState=PENDING Reason=BurstBufferResources BurstBufferState=pending' 60
  rm "$DATA_DIR/d/later.dat"
  touch "$JOBS_DIR/release-d"
  wait_job "$blocker_job" 'JobState=COMPLETED .*BurstBufferState=complete' 60
  wait_job "$job" "JobState=PENDING Reason=burst_buffer/lua:.*later.dat" 60
  slurm_run squeue -h -j "$job" -o '%i %T %r'
  assert_output --partial "$DATA_DIR/d/later.dat"
  slurm_run scontrol show job "$job"
  assert_output --partial "Priority=0"
  assert_output --partial "later.dat"

  # The admin gives up on it: scancel --hurry tears the buffer down and nothing stays charged.
  # Slurm's flush of the cancelled job (seen on 24.11 and 26.05) may SIGKILL the teardown it
  # has just started (its log: "teardown for JobId=N terminated by slurmctld"), which leaves
  # Slurm's record in teardown until slurmctld restarts and takes the teardown up again
  # (_recover_job_bb): the admin's way out, taken here when Slurm says so.
  slurm_run scancel --hurry "$job"
  local deadline=$((SECONDS + 60))
  until [ "$(job_field "$job" BurstBufferState)" = complete ]; do
    if grep -q "teardown for JobId=$job terminated by slurmctld" "$SLURM_DIR/log/slurmctld.log"; then
      transcript "note: Slurm killed its own teardown of job $job (its flush of the cancelled job)"
      restart_slurmctld "Slurm's teardown of job $job was killed by its own flush"
      break
    fi
    [ "$SECONDS" -lt "$deadline" ] || break
    sleep 1
  done
  wait_job "$job" 'JobState=CANCELLED .*BurstBufferState=complete' 120
  assert_no_buffer_dir small "$job"
  assert_pool_whole small 10MiB
}

# Open files of any process under a directory (the mover's copy, for instance).
# Processes with a file open under a directory. A process in another mount namespace (the
# daemons' under with-default-config) inside a release's root (tests/slurm-release) shows its
# files by their path from the host's root, which ends with the path seen here.
open_files_under() {
  find /proc/[0-9]*/fd -lname "*$1/*" 2>/dev/null || true
}

# A job staging in the slow file, waited for until its copy has visibly started.
start_slow_job() {
  local name=$1 script
  shift
  script=$(job_script "$name.sh" "#SBATCH --job-name=scenario-$name" \
    "#BB_LUA pool=slow capacity=$((SLOW_MIB + 16))MiB" \
    "#BB_LUA stage_in type=file source=$DATA_DIR/slow.dat destination=\$BB_JOB_DIR/slow.dat" "$@")
  submit "$script"
  assert_equal "$status" 0
  wait_job "$JOB" 'BurstBufferState=staging-in' 60
  wait_until 60 "the copy of job $JOB to start" copy_started "$JOB"
}

copy_started() {
  local done total
  read -r done total < <(stage_progress "$1") || return 1
  [ "${done:-0}" -gt 0 ] && [ "$done" -lt "$total" ]
}

# Fails unless the job's stage-in is still copying; prints "bytes_done of bytes_total".
assert_still_copying() {
  local done total
  read -r done total < <(stage_progress "$1") || true
  if ! { [ -n "$done" ] && [ "$done" -lt "$total" ]; }; then
    fail "the stage-in of job $1 is not in progress (bytes ${done:-?} of ${total:-?})"
    return 1
  fi
  echo "$done of $total bytes"
}

# The processes that have a file open in the slow pool's job buffers: the movers copying.
copy_pids() {
  open_files_under "$SLURM_DIR/pools/slow/job" | cut -d/ -f3 | sort -u
}

# Stops the processes copying into the slow pool (SIGSTOP) until resume_copy, so that what must
# happen while a stage-in is in progress does not race the copy: on a fast disk even the largest
# slow file is copied in a few seconds, less than waiting for Slurm to save its state takes.
pause_copy() {
  PAUSED_PIDS=$(copy_pids)
  [ -n "$PAUSED_PIDS" ] || { fail "no process copies into the buffer"; return 1; }
  # shellcheck disable=SC2086  # one pid per word
  kill -STOP $PAUSED_PIDS
  transcript "(copy paused: SIGSTOP to pid(s) $(echo $PAUSED_PIDS))"
}

resume_copy() {
  # shellcheck disable=SC2086
  kill -CONT $PAUSED_PIDS 2>/dev/null || true
  transcript "(copy resumed)"
}

@test "e. scancel during a long stage-in stops the copy and frees the space" {
  start_slow_job e <<<'true'
  job=$JOB
  pause_copy || return 1
  progress=$(assert_still_copying "$job") || { resume_copy; return 1; }
  resume_copy
  slurm_run -u scancel "$job"
  transcript "(scancel with the copy at $progress)"
  assert_equal "$status" 0
  wait_teardown_after_cancel "$job"
  slurm_run squeue -h -j "$job" -o '%i %T %r'
  # The copy stopped: nothing has a file open in the pool, and the partial copy is gone.
  wait_until 30 "the copy to stop" test -z "$(open_files_under "$SLURM_DIR/pools/slow")"
  assert_no_buffer_dir slow "$job"
  assert_pool_whole slow "$SLOW_POOL_CAPACITY"
  slurm_run bb-stat --json job "$job"
  assert_output --partial '"complete"'
}

@test "f. scontrol show burst lists the pool and the job's buffer, line for line in bb-stat burst's layout; show bbstat prints bbkit's table and refuses anything else" {
  script=$(held_job_script f.sh f '#SBATCH --job-name=scenario-f' '#BB_LUA pool=pool1 capacity=4MiB')
  submit "$script"
  job=$JOB
  wait_job "$job" 'JobState=RUNNING .*BurstBufferState=running' 60

  # FreeSpace is bbkit's answer to Slurm's last pools poll (slurm_bb_pools): one that came
  # between Slurm's allocation and bbkit's (the setup hook) shows the space free until the next
  # poll, PollInterval (15 s) on (seen on 26.05). UsedSpace is Slurm's own count.
  wait_until 40 "Slurm's pools poll to see the buffer" \
    sh -c "scontrol show burst | grep -qE 'PoolName\[[0-9]+\]=pool1 .*FreeSpace=60MiB UsedSpace=4MiB'"
  slurm_run -u scontrol show burst
  assert_equal "$status" 0
  assert_output --regexp "PoolName\[[0-9]+\]=pool1 Granularity=1MiB TotalSpace=64MiB FreeSpace=60MiB UsedSpace=4MiB"
  assert_output --regexp "JobID=$job CreateTime=[0-9T:-]+ Pool=pool1 Size=4MiB State=allocated UserID=$SLURM_TEST_USER\($TEST_UID\)"
  via_scontrol=$output

  # bb-stat burst has this release's layout (bbkit.toml's slurm_release is the cluster's): every
  # line, its fields in their order; the values that are Slurm's own (Name=lua, the timeouts of
  # burst_buffer.conf) aside, the pool's, Flags' and PollInterval's lines are the same text.
  release=$(slurm_release)
  slurm_run bb-stat burst
  assert_equal "$status" 0
  via_bbkit=$output
  local ours theirs i
  mapfile -t theirs < <(burst_layout <<<"$via_scontrol")
  mapfile -t ours < <(burst_layout <<<"$via_bbkit")
  for ((i = 0; i < ${#theirs[@]} || i < ${#ours[@]}; i++)); do
    [ "${ours[i]-}" = "${theirs[i]-}" ] ||
      fail "Slurm $release: line $((i + 1)) of scontrol show burst is '${theirs[i]-(none)}', bb-stat burst's '${ours[i]-(none)}'"
  done
  grep_line() { grep -x "  $1" <<<"$2" || true; }
  pool_line='PoolName\[[0-9]*\]=pool1 .*'
  assert_equal "$(grep_line "$pool_line" "$via_bbkit")" "$(grep_line "$pool_line" "$via_scontrol")"
  assert_equal "$(grep_line 'Flags=.*' "$via_bbkit")" "$(grep_line 'Flags=.*' "$via_scontrol")"
  assert_equal "$(grep_line 'PollInterval=.*' "$via_bbkit")" "$(grep_line 'PollInterval=.*' "$via_scontrol")"
  if [ "$(printf '%s\n' "$release" "24.05" | sort -V | head -n 1)" = 24.05 ]; then
    assert_line "  PollInterval=15"
  else
    refute_line --partial "PollInterval"
  fi

  # bbkit's own table through Slurm, as the user, equal to bb-stat's.
  slurm_run -u scontrol show bbstat pools
  assert_equal "$status" 0
  via_slurm=$output
  slurm_run bb-stat pools
  assert_equal "$(printf '%s\n' "$via_slurm" | sed '/^$/d')" "$(printf '%s\n' "$output" | sed '/^$/d')"
  assert_output --partial pool1
  slurm_run -u scontrol show bbstat job "$job"
  assert_output --partial "running"

  # Nothing a user types reaches a shell or becomes an option.
  marker=/tmp/bbkit-e2e-injected.$$
  rm -f "$marker"
  local words
  for words in "; touch $marker" "pools; touch $marker" "\$(touch $marker)" "\`touch $marker\`" \
    "job 1;touch $marker" "--config=$marker pools" "job --json"; do
    slurm_run -u scontrol show bbstat "$words"
    refute_output --partial "pool1"
    # shellcheck disable=SC2086 # split into several words on purpose
    slurm_run -u scontrol show bbstat $words
    refute_output --partial "pool1"
    [ ! -e "$marker" ] || fail "'scontrol show bbstat $words' ran a command"
  done
  slurm_run -u scontrol show bbstat "; touch $marker"
  assert_output --partial "usage"
  [ ! -e "$marker" ]

  touch "$JOBS_DIR/release-f"
  wait_job "$job" 'JobState=COMPLETED .*BurstBufferState=complete' 60
  assert_pool_whole pool1 64MiB
}

# Slurm 22.05 saves its burst-buffer state (state/burst_buffer_lua_state) only from its bb
# agent, which wakes every 30 s right after calling slurm_bb_pools. Waits until the next wake-up
# is a little more than `lead` seconds away, so that a job submitted now is in Slurm's saved
# state shortly after its stage-in begins.
wait_for_bb_agent_phase() {
  local lead=$1 last next now
  last=$(grep 'slurm_bb_pools ran for' "$SLURM_DIR/log/slurmctld.log" | tail -n 1 | sed 's/^\[\([^]]*\)\].*/\1/')
  [ -n "$last" ] || fail "no slurm_bb_pools call in slurmctld.log"
  next=$(date -d "$last" +%s%N)
  now=$(date +%s%N)
  while ((next - now < lead * 1000000000)); do next=$((next + 30000000000)); done
  sleep "$(((next - now) / 1000000 - lead * 1000))e-3"
}

@test "g. slurmctld killed and restarted during a long stage-in: the job completes with its data, no capacity leaks" {
  wait_for_bb_agent_phase 3
  start_slow_job g "#BB_LUA stage_out type=directory source=\$BB_JOB_DIR/results destination=$DATA_DIR/g-results" <<'JOB'
mkdir "$BB_JOB_DIR/results"
stat -c %s "$BB_JOB_DIR/slow.dat" >"$BB_JOB_DIR/results/size"
tail -c 1048576 "$BB_JOB_DIR/slow.dat" | sha256sum | cut -d' ' -f1 >"$BB_JOB_DIR/results/tail.sha256"
JOB
  job=$JOB
  pause_copy || return 1
  # Crash once Slurm's saved state has both the job in staging-in and its buffer: 22.05 saves
  # the job only on job changes (a comment is one; bb state changes are not), and the buffer
  # from its bb agent (see wait_for_bb_agent_phase). A crash before that is one Slurm cannot
  # recover from ("_recover_job_bb: Invalid job burst buffer state pending").
  touch "$JOBS_DIR/g.saved"
  slurm_run scontrol update JobId="$job" Comment=staging-in-saved
  wait_until 20 "slurmctld to save the job" test "$SLURM_DIR/state/job_state" -nt "$JOBS_DIR/g.saved"
  wait_until 40 "slurmctld to save its burst-buffer state" test "$SLURM_DIR/state/burst_buffer_lua_state" -nt "$JOBS_DIR/g.sh"
  progress=$(assert_still_copying "$job") || { resume_copy; return 1; }
  # The copy goes on from where it was paused and lasts seconds more: the kill comes first.
  resume_copy
  restart_slurmctld "SIGKILL during the stage-in of job $job, copy at $progress" KILL
  wait_job "$job" 'JobState=COMPLETED .*BurstBufferState=complete' 240
  slurm_run scontrol show job "$job"
  assert_output --partial "ExitCode=0:0"
  assert_equal "$(cat "$DATA_DIR/g-results/size")" "$((SLOW_MIB * 1048576))"
  assert_equal "$(cat "$DATA_DIR/g-results/tail.sha256")" "$(tail -c 1048576 "$DATA_DIR/slow.dat" | sha256sum | cut -d' ' -f1)"
  assert_no_buffer_dir slow "$job"
  assert_pool_whole slow "$SLOW_POOL_CAPACITY"
  slurm_run bb-pool check
  assert_equal "$status" 0
}

# Before h, which leaves SlurmUser=slurm: as root the hooks run the tools themselves, with the
# configuration and the tools' directory install-slurm wrote into them.
@test "k. hooks installed without --config or --bindir, slurmctld started with no environment (as 24.11.0 and 24.11.1 start the hooks): scenario a's job stages in and out" {
  # $BBKIT_CONFIG (exported) names the suite's configuration, not /etc/bbkit/bbkit.toml.
  HARNESS_INSTALL_BARE=1 install_bbkit_scripts root
  HARNESS_CTLD_ENV=bare restart_slurmctld "no BBKIT_CONFIG, no PATH"
  local ctld
  ctld=$(cat "$SLURM_DIR/run/slurmctld.pid")
  run grep -c -E '^(PATH|BBKIT_CONFIG)=' <(tr '\0' '\n' <"/proc/$ctld/environ")
  assert_output 0
  run_stage_in_and_out k
  install_bbkit_scripts root
  restart_slurmctld "the suite's environment again"
}

@test "h. scenario a again with SlurmUser=slurm (the tools through sudo -n)" {
  use_slurm_user slurm
  slurm_run scontrol show config
  assert_output --regexp "SlurmUser += slurm\($(id -u slurm)\)"
  run_stage_in_and_out h
}

@test "i. bb-pool reconcile --slurm asks the real slurmctld: only a buffer whose job Slurm never heard of is torn down" {
  script=$(held_job_script i.sh i '#SBATCH --job-name=scenario-i' '#BB_LUA pool=pool1 capacity=4MiB')
  submit "$script"
  job=$JOB
  wait_job "$job" 'JobState=RUNNING .*BurstBufferState=running' 60
  # A buffer left by a job this cluster does not know (a lost slurmctld state, a typo'd alloc).
  slurm_run bb-pool alloc --job 999999 --user "$SLURM_TEST_USER" --pool pool1 --capacity 2MiB
  assert_equal "$status" 0
  slurm_run bb-pool reconcile --slurm
  assert_equal "$status" 0
  assert_line --index 0 "unknown to Slurm: e2e.999999.1 (job 999999, user $SLURM_TEST_USER, pool pool1, 2MiB, allocated)"
  refute_output --partial "job $job,"
  assert_dir_exists "$(echo "$SLURM_DIR"/pools/pool1/job/e2e.999999.1.*)"

  # slurmctld down: nothing can be decided, nothing is touched.
  stop_slurmctld TERM
  transcript "root# (slurmctld stopped)"
  slurm_run bb-pool reconcile --slurm --apply
  assert_equal "$status" 69
  assert_dir_exists "$(echo "$SLURM_DIR"/pools/pool1/job/e2e.999999.1.*)"
  start_slurmctld
  wait_job "$job" 'JobState=RUNNING' 60

  slurm_run bb-pool reconcile --slurm --apply
  assert_equal "$status" 0
  assert_line --index 0 "torn down: e2e.999999.1 (job 999999, user $SLURM_TEST_USER, pool pool1, 2MiB, allocated)"
  assert_no_buffer_dir pool1 999999
  assert_dir_exists "$(echo "$SLURM_DIR"/pools/pool1/job/e2e."$job".1.*)"
  read -r _ used _ _ <<<"$(bbkit_pool pool1)"
  assert_equal "$used" $((4 * 1048576))

  touch "$JOBS_DIR/release-i"
  wait_job "$job" 'JobState=COMPLETED .*BurstBufferState=complete' 60
  assert_pool_whole pool1 64MiB
}

@test "j. slurmctld killed before it saved its burst-buffer state: the job pends on its own lost buffer until reconcile frees it, then completes" {
  # Job a holds the slow pool, so job j pends on BurstBufferResources and Slurm saves it that
  # way (a Comment update saves a job; burst-buffer state changes do not). Then a is released,
  # j gets its buffer and starts staging in, and slurmctld is killed before its bb agent saves
  # (every 30 s): the restarted slurmctld has j pending with BurstBufferState=pending, waiting
  # for the space bbkit still holds for j's lost buffer.
  hold=$(held_job_script j-hold.sh j-hold '#SBATCH --job-name=scenario-j-hold' '#BB_LUA pool=slow capacity=64MiB')
  submit "$hold"
  holder=$JOB
  wait_job "$holder" 'JobState=RUNNING .*BurstBufferState=running' 60
  script=$(job_script j.sh "#SBATCH --job-name=scenario-j" \
    "#BB_LUA pool=slow capacity=$((SLOW_MIB + 16))MiB" \
    "#BB_LUA stage_in type=file source=$DATA_DIR/slow.dat destination=\$BB_JOB_DIR/slow.dat" <<JOB
test "\$(stat -c %s "\$BB_JOB_DIR/slow.dat")" = "$((SLOW_MIB * 1048576))"
JOB
  )
  submit "$script"
  job=$JOB
  wait_job "$job" 'JobState=PENDING Reason=BurstBufferResources BurstBufferState=pending' 60
  touch "$JOBS_DIR/j.saved"
  slurm_run scontrol update JobId="$job" Comment=saved-while-pending
  wait_until 20 "slurmctld to save the job" test "$SLURM_DIR/state/job_state" -nt "$JOBS_DIR/j.saved"
  wait_for_bb_agent_phase 28
  touch "$JOBS_DIR/j.released"
  touch "$JOBS_DIR/release-j-hold"
  wait_job "$holder" 'JobState=COMPLETED .*BurstBufferState=complete' 60
  wait_job "$job" 'BurstBufferState=staging-in' 60
  wait_until 60 "the copy of job $job to start" copy_started "$job"
  [ ! "$SLURM_DIR/state/burst_buffer_lua_state" -nt "$JOBS_DIR/j.released" ] ||
    skip "Slurm saved its burst-buffer state before the crash (the crash must come first)"
  restart_slurmctld "SIGKILL before slurmctld saved the buffer of job $job" KILL
  # The holder's completion is a job change: if Slurm saved the jobs after j's stage-in began,
  # it recovers j in staging-in with no buffer record, a case of Slurm's own (bbkit's buffer
  # is then Slurm's to tear down when the job is cancelled); this scenario needs the save first.
  # Slurm may also have gone on past staging-in before this looks (observed on 24.11: pre-run
  # 13 s after the restart): any state it shows decides.
  wait_job "$job" 'BurstBufferState=[a-z]' 60
  if [[ ! $JOB_STATE_LINE =~ BurstBufferState=pending ]]; then
    slurm_run bb-stat job "$job"
    transcript "bbkit's record of job $job: $output"
    skip "Slurm saved job $job after its stage-in began: $JOB_STATE_LINE"
  fi
  wait_job "$job" 'JobState=PENDING .*BurstBufferState=pending' 60
  slurm_run bb-pool reconcile --slurm
  assert_equal "$status" 0
  assert_line --index 0 --regexp "^pending in Slurm: e2e\.$job\.1 \(job $job, user $SLURM_TEST_USER, pool slow, [0-9]+MiB, (allocated|staging-in|staged-in)\)$"
  slurm_run bb-pool reconcile --slurm --apply
  assert_equal "$status" 0
  assert_line --index 0 --regexp "^torn down: e2e\.$job\.1 "
  # Slurm sets the job up again (a new incarnation) and it runs with all of its data.
  wait_job "$job" 'JobState=COMPLETED .*BurstBufferState=complete' 300
  slurm_run scontrol show job "$job"
  assert_output --partial "ExitCode=0:0"
  # A holder that ended right before the crash may come back RUNNING until slurmd reports it.
  if [ "$(job_field "$holder" JobState)" != COMPLETED ]; then slurm_run scancel "$holder"; fi
  # Its stage-out, lost with the state, is taken up again by Slurm's stage-out check, which 26.05
  # runs a minute after the restart (observed: bb_p_job_test_stage_out 60 s after the restart).
  # Slurm's record of the holder is Slurm's own: bbkit tore the holder's buffer down before the
  # crash (checked below). When Slurm recovered the holder's burst-buffer state as running and
  # its end came before the plugin had loaded (observed on 24.11: no bb_p_job_start_stage_out for it
  # after the restart), Slurm never stages it out; the transcript notes it and bbkit's side is
  # still checked.
  local deadline=$((SECONDS + 180))
  until [ "$(job_field "$holder" BurstBufferState)" = complete ]; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      transcript "note: Slurm left job $holder in BurstBufferState=$(job_field "$holder" BurstBufferState) (JobState=$(job_field "$holder" JobState)) after the restart: its own record, nothing of bbkit's"
      # The log since the last start of slurmctld.
      if awk '/slurmctld version/ { since = "" } { since = since $0 "\n" } END { printf "%s", since }' \
        "$SLURM_DIR/log/slurmctld.log" | grep -q "bb_p_job_start_stage_out: BURST_BUF: JobId=$holder\$"; then
        fail "job $holder: Slurm started its stage-out after the restart, and it did not complete in 180 s"
      fi
      break
    fi
    sleep 1
  done
  assert_no_buffer_dir slow "$holder"
  assert_no_buffer_dir slow "$job"
  assert_pool_whole slow "$SLOW_POOL_CAPACITY"
  slurm_run bb-pool check
  assert_equal "$status" 0
}

@test "l. CliFilterParameters=cli_filter_lua_path= (Slurm 25.11 and later): install-slurm puts cli_filter.lua there, and sbatch still refuses a bad request at submit" {
  release_at_least 25.11 ||
    skip "CliFilterParameters exists from Slurm 25.11 (this is $(slurm_release), which refuses a slurm.conf holding it)"
  # The submitting side's slurm.conf: the clients read cli_filter.lua, slurmctld never does.
  local etc=$SLURM_DIR/etc-lua-path lua=$SLURM_DIR/lua
  mkdir -p "$etc" "$lua"
  { cat "$SLURM_CONF"; echo "CliFilterParameters=cli_filter_lua_path=$lua/bbkit-filter.lua"; } >"$etc/slurm.conf"
  # Root's hooks (--slurm-user root, whatever SlurmUser this cluster runs as): the point is
  # where cli_filter.lua goes, and it names this suite's configuration only outside sudo.
  run "${BBKIT_INSTALL_SLURM:-$INSTALL_SLURM}" --slurm-conf-dir "$etc" --config "$BBKIT_CONFIG" \
    --bindir "$BBKIT_BIN" --slurm-release "$(slurm_release)" --slurm-user root
  assert_success
  assert_file_exists "$lua/bbkit-filter.lua"
  assert_file_not_exists "$etc/cli_filter.lua"
  chmod -R a+rX "$etc" "$lua"
  script=$(job_script l.sh '#SBATCH --job-name=scenario-l' '#BB_LUA pool=small capacity=1GiB' <<<'true')
  SLURM_CONF=$etc/slurm.conf submit "$script"
  [ "$status" -ne 0 ] || fail "sbatch accepted a request for 1GiB from a 10MiB pool: $output"
  assert_line --regexp "^sbatch: error: lua: bb-parse: .*capacity=1GiB.*'small' holds only 10MiB"
  slurm_run squeue -h -n scenario-l -o '%i %T %r'
  assert_output ""
}

@test "m. a failing pre-run (the site's pre_run hook) tears the buffer down; Slurm requeues the job with its release's reason" {
  # An admin's pre_run hook that refuses (bbkit.toml [hooks]): bb-stage pre-run fails with its
  # last line. Slurm then tears the buffer down (hurry) and requeues the job; the reason is
  # "Burst buffer pre_run error" up to 24.11 and, from 25.05, "burst_buffer/lua:
  # slurm_bb_pre_run failed: MESSAGE" (bbkit(7), USE WITH SLURM).
  local hook=$SLURM_DIR/bbkit/pre-run-refuses
  printf '#!/bin/sh\necho "site check: scratch not mounted" >&2\nexit 3\n' >"$hook"
  chmod 0755 "$hook"
  cp "$BBKIT_CONFIG" "$BBKIT_CONFIG.m"
  printf '\n[hooks]\npre_run = "%s"\n' "$hook" >>"$BBKIT_CONFIG"
  restart_slurmctld "bbkit.toml with a pre_run hook that fails"
  script=$(job_script m.sh '#SBATCH --job-name=scenario-m' '#BB_LUA pool=pool1 capacity=2MiB' <<<'echo ran')
  submit "$script"
  assert_equal "$status" 0
  job=$JOB
  if release_at_least 25.05; then
    wait_job "$job" 'JobState=PENDING Reason=burst_buffer/lua:_slurm_bb_pre_run_failed:_bb-stage:_pre_run_hook_.*site_check:_scratch_not_mounted' 90
  else
    wait_job "$job" 'JobState=PENDING Reason=Burst_buffer_pre_run_error ' 90
  fi
  slurm_run scontrol show job "$job"
  [ ! -e "$JOBS_DIR/scenario-m-$job.out" ] || fail "the job ran: $(cat "$JOBS_DIR/scenario-m-$job.out")"
  # bbkit's buffer was torn down: the space is back in both views.
  assert_no_buffer_dir pool1 "$job"
  assert_pool_whole pool1 64MiB
  slurm_run scancel "$job"
  mv -f "$BBKIT_CONFIG.m" "$BBKIT_CONFIG"
  restart_slurmctld "bbkit.toml without the hook again"
}

@test "n. burst_buffer.lua installed with another release's hook signatures refuses to load, naming the --slurm-api to rerun with" {
  # install-slurm picks the signatures from slurmctld -V (the suites' installs use that); a
  # wrong --slurm-api must not fail quietly on the real daemon (bbkit(7), Slurm releases).
  local user wrong want
  user=$(sed -n 's/^SlurmUser=//p' "$SLURM_CONF" | tail -n 1)
  if release_at_least 24.05; then wrong=22.05 want=24.05; else wrong=24.05 want=22.05; fi
  release_at_least 23.02 && ! release_at_least 24.05 && want=23.02
  install_bbkit_scripts "${user:-root}" --slurm-api "$wrong"
  transcript "root# (restart slurmctld: burst_buffer.lua with the $wrong signatures)"
  stop_slurmctld TERM
  launch_slurmctld
  wait_until 30 "slurmctld to log the refusal" grep -q "rerun install-slurm --slurm-api $want" "$SLURM_DIR/log/slurmctld.log"
  if release_at_least 24.05; then
    # From 24.05 the plugin loads the script when it starts: slurmctld refuses to run.
    wait_until 30 "slurmctld to stop on the refused script" grep -q "fatal: failed to initialize burst_buffer plugin" "$SLURM_DIR/log/slurmctld.log"
    ! scontrol ping >/dev/null 2>&1 || fail "slurmctld $SLURM_RELEASE answers with a refused burst_buffer.lua"
  else
    # Up to 23.11 it runs and refuses every burst-buffer job.
    wait_until 30 "slurmctld to answer" scontrol ping
    script=$(job_script n.sh '#SBATCH --job-name=scenario-n' '#BB_LUA pool=pool1 capacity=1MiB' <<<'echo ran')
    submit "$script"
    [ "$status" -ne 0 ] || fail "Slurm $SLURM_RELEASE took a job through burst_buffer.lua with the $wrong signatures (job $JOB)"
  fi
  install_bbkit_scripts "${user:-root}"
  restart_slurmctld "burst_buffer.lua with the signatures install-slurm found"
  run_stage_in_and_out n
}
