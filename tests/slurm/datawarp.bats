#!/usr/bin/env bats
# End to end with a real Slurm 22.05 and its burst_buffer/datawarp plugin: the plugin runs
# bbkit's dw_wlm_cli and dwstat (share/bbkit/datawarp, installed by install-slurm --plugin
# datawarp) for every step and every 30 s poll, as it ran Cray's DataWarp. Scenarios follow
# what Slurm's own burst-buffer regression tests check: job buffers with real staging, job
# arrays, persistent buffers created and destroyed by zero-node jobs and surviving a slurmctld
# restart, EnablePersistent, afterburstbuffer, a reservation holding space, scontrol show
# dwstat; and a pool staged by transfer jobs (staging = "slurm") under this plugin. Every line
# seen is kept in build/tests/slurm/transcript-datawarp.txt.

HARNESS_MODE=datawarp
BBKIT_SLURM_TRANSCRIPT=${BBKIT_SLURM_TRANSCRIPT:-${BBKIT_BUILD_DIR:?}/tests/slurm/transcript-datawarp.txt}
load harness

setup_file() {
  mkdir -p "$(dirname "$TRANSCRIPT")"
  : >"$TRANSCRIPT"
  start_cluster root
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

# pool1 is also the DefaultPool: `scontrol show burst` prints it on its first line. Waits (up to
# two 30 s polls) until Slurm reports it as "TotalSpace FreeSpace UsedSpace" = $1.
assert_default_pool() {
  wait_until 75 "Slurm to report pool1 as $1" sh -c "[ \"\$(scontrol show burst | sed -n 's/^Name=datawarp DefaultPool=pool1 .*TotalSpace=\([^ ]*\) FreeSpace=\([^ ]*\) UsedSpace=\([^ ]*\).*/\1 \2 \3/p')\" = '$1' ]"
}

# bbkit's own figures for pool1 are whole: nothing used, nothing in trash.
assert_bbkit_pool_whole() {
  local figures t u tr f
  figures=$(bbkit_pool "$1")
  read -r t u tr f <<<"$figures"
  [ "$u" = 0 ] && [ "$tr" = 0 ] && [ "$f" = "$t" ] || fail "bbkit's pool $1 is not whole: total used trash free = $figures"
}

# The smoke scenario: what the submission tier runs of this suite (tests/CMakeLists.txt).
# bats test_tags=smoke
@test "a. #DW jobdw with stage-in and stage-out of real files through dw_wlm_cli" {
  mkdir -p "$DATA_DIR/a/tree/sub"
  head -c 3000000 /dev/urandom >"$DATA_DIR/a/input.dat"
  printf 'hello from the parallel file system\n' >"$DATA_DIR/a/tree/sub/hello.txt"
  chown -R "$SLURM_TEST_USER:" "$DATA_DIR/a"
  sum=$(sha256sum <"$DATA_DIR/a/input.dat" | cut -d' ' -f1)
  script=$(job_script a.sh '#SBATCH --job-name=dw-a' \
    '#DW jobdw capacity=8MiB access_mode=striped type=scratch' \
    "#DW stage_in type=file source=$DATA_DIR/a/input.dat destination=\$DW_JOB_STRIPED/input.dat" \
    "#DW stage_in type=directory source=$DATA_DIR/a/tree destination=\$DW_JOB_STRIPED/tree" \
    "#DW stage_out type=directory source=\$DW_JOB_STRIPED/results destination=$DATA_DIR/a/results" <<'EOF2'
echo "DW_JOB_STRIPED=$DW_JOB_STRIPED"
mkdir "$DW_JOB_STRIPED/results"
sha256sum <"$DW_JOB_STRIPED/input.dat" | cut -d' ' -f1 >"$DW_JOB_STRIPED/results/input.sha256"
tr a-z A-Z <"$DW_JOB_STRIPED/tree/sub/hello.txt" >"$DW_JOB_STRIPED/results/upper.txt"
id -un >"$DW_JOB_STRIPED/results/user"
EOF2
)
  submit "$script"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 120
  slurm_run scontrol show job "$JOB"
  assert_output --partial "BurstBuffer=#DW jobdw capacity=8MiB"
  assert_output --partial "ExitCode=0:0"
  out=$(cat "$JOBS_DIR/dw-a-$JOB.out")
  [[ $out == *"DW_JOB_STRIPED=$SLURM_DIR/pools/pool1/job/e2e.$JOB."* ]] || fail "job output: $out"
  assert_equal "$(cat "$DATA_DIR/a/results/input.sha256")" "$sum"
  assert_equal "$(cat "$DATA_DIR/a/results/upper.txt")" "HELLO FROM THE PARALLEL FILE SYSTEM"
  assert_equal "$(cat "$DATA_DIR/a/results/user")" "$SLURM_TEST_USER"
  assert_equal "$(stat -c %U "$DATA_DIR/a/results/upper.txt")" "$SLURM_TEST_USER"
  # Slurm drove every step through dw_wlm_cli, in order.
  for fn in job_process setup data_in real_size paths pre_run post_run data_out teardown; do
    grep -q "dw_wlm_cli --function $fn .*$JOB\|dw_wlm_cli --function $fn --job .*/job.$JOB/script" "$SLURM_DIR/log/slurmctld.log" ||
      fail "slurmctld.log shows no $fn call for job $JOB"
  done
  assert_default_pool "64MiB 64MiB 0"
  assert_bbkit_pool_whole pool1
}

@test "b. a request larger than the pool is refused at submit by the cli_filter, and by job_process when the filter cannot see it" {
  script=$(job_script b.sh '#SBATCH --job-name=dw-b' '#DW jobdw pool=small capacity=1GiB' <<<'true')
  submit "$script"
  [ "$status" -ne 0 ] || fail "sbatch accepted 1GiB from a 10MiB pool: $output"
  assert_output --regexp "sbatch: error: lua: bb-parse: script line 4: capacity=1GiB can never be satisfied: pool 'small' holds only 10MiB"
  # A script on standard input is out of the cli_filter's sight: job_process refuses it.
  submit <"$script"
  [ "$status" -ne 0 ] || fail "sbatch accepted 1GiB from a 10MiB pool read from stdin: $output"
  assert_output --regexp "sbatch: error: burst_buffer/datawarp: bb-parse: .*capacity=1GiB.*'small' holds only 10MiB"
  assert_output --partial "Batch job submission failed"
  slurm_run squeue -h -n dw-b -o '%i %T %r'
  assert_output ""
  assert_bbkit_pool_whole small
}

@test "c. a job array: every task gets its own buffer and stages its own result out" {
  mkdir -p "$DATA_DIR/c"
  chown "$SLURM_TEST_USER:" "$DATA_DIR/c"
  script=$(job_script c.sh '#SBATCH --job-name=dw-c' '#DW jobdw capacity=2MiB' \
    "#DW stage_out type=file source=\$DW_JOB_STRIPED/out.txt destination=$DATA_DIR/c/task-%a.txt" <<'EOF2'
echo "task $SLURM_ARRAY_TASK_ID in $DW_JOB_STRIPED" >"$DW_JOB_STRIPED/out.txt"
EOF2
)
  submit --array=1-3 "$script"
  assert_equal "$status" 0
  local t
  for t in 1 2 3; do
    wait_job "${JOB}_$t" 'JobState=COMPLETED .*BurstBufferState=complete' 120
  done
  dirs=()
  for t in 1 2 3; do
    run cat "$DATA_DIR/c/task-$t.txt"
    assert_success
    assert_output --regexp "^task $t in $SLURM_DIR/pools/pool1/job/e2e\.[0-9]+\.[0-9]+\.[0-9a-f]{16}$"
    dirs+=("${output##* }")
  done
  # Three buffers, one per task.
  [ "$(printf '%s\n' "${dirs[@]}" | sort -u | wc -l)" = 3 ] || fail "tasks shared buffers: ${dirs[*]}"
  assert_default_pool "64MiB 64MiB 0"
}

@test "d. a persistent buffer: created by a zero-node job, used by other jobs, kept across a slurmctld restart, destroyed by a zero-node job" {
  create=$(job_script d-create.sh '#SBATCH --job-name=dw-d-create' \
    '#BB create_persistent name=dwshared capacity=5MiB access=striped type=scratch' <<<'true')
  submit -N0 "$create"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 60
  grep -q "dw_wlm_cli --function create_persistent -c CLI -t dwshared -u $TEST_UID -C pool1:5242880 -a striped -T scratch" "$SLURM_DIR/log/slurmctld.log" ||
    fail "no create_persistent call in slurmctld.log"
  slurm_run scontrol show burst
  assert_output --regexp "Name=dwshared CreateTime=[^ ]+ Pool=pool1 Size=5MiB State=allocated UserID=$SLURM_TEST_USER\($TEST_UID\)"
  slurm_run bb-stat sessions
  assert_output --regexp " dwshared +bbkit +$TEST_UID "

  writer=$(job_script d-write.sh '#SBATCH --job-name=dw-d-write' '#DW persistentdw name=dwshared' <<'EOF2'
echo "DW_PERSISTENT_STRIPED_dwshared=$DW_PERSISTENT_STRIPED_dwshared"
[ -z "${DW_JOB_STRIPED:-}" ] || { echo "unexpected DW_JOB_STRIPED=$DW_JOB_STRIPED"; exit 1; }
echo "written by $SLURM_JOB_ID" >"$DW_PERSISTENT_STRIPED_dwshared/note"
EOF2
)
  submit "$writer"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 90
  writer_job=$JOB
  grep -q "DW_PERSISTENT_STRIPED_dwshared=$SLURM_DIR/pools/pool1/persistent/e2e.dwshared\." "$JOBS_DIR/dw-d-write-$writer_job.out" ||
    fail "job output: $(cat "$JOBS_DIR/dw-d-write-$writer_job.out")"

  restart_slurmctld "the persistent buffer must survive it"
  wait_until 30 "the node to be idle" node_idle
  slurm_run scontrol show burst
  assert_output --regexp "Name=dwshared CreateTime=[^ ]+ Pool=pool1 Size=5MiB State=allocated UserID=$SLURM_TEST_USER\($TEST_UID\)"

  reader=$(job_script d-read.sh '#SBATCH --job-name=dw-d-read' '#DW persistentdw name=dwshared' <<<'cat "$DW_PERSISTENT_STRIPED_dwshared/note"')
  submit "$reader"
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 90
  assert_equal "$(cat "$JOBS_DIR/dw-d-read-$JOB.out")" "written by $writer_job"

  destroy=$(job_script d-destroy.sh '#SBATCH --job-name=dw-d-destroy' '#BB destroy_persistent name=dwshared' <<<'true')
  submit -N0 "$destroy"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 60
  wait_until 30 "Slurm to forget dwshared" sh -c '! scontrol show burst | grep -q "Name=dwshared"'
  run bb-stat --json sessions
  refute_output --partial dwshared
  ! ls -d "$SLURM_DIR/pools/pool1/persistent/e2e.dwshared".* >/dev/null 2>&1 || fail "the persistent buffer's directory is still there"
  assert_default_pool "64MiB 64MiB 0"
}

@test "e. without EnablePersistent a user's create_persistent is refused at submit" {
  # Slurm reads burst_buffer.conf's Flags when slurmctld starts.
  sed -i 's/^Flags=.*/Flags=DisablePersistent/' "$SLURM_DIR/etc/burst_buffer.conf"
  sed -i 's/^flags = .*/flags = []/' "$BBKIT_CONFIG"
  restart_slurmctld "Flags=DisablePersistent"
  create=$(job_script e.sh '#SBATCH --job-name=dw-e' \
    '#BB create_persistent name=dwdenied capacity=1MiB access=striped type=scratch' <<<'true')
  submit -N0 "$create"
  local refused=$status said=$output
  sed -i 's/^Flags=.*/Flags=EnablePersistent/' "$SLURM_DIR/etc/burst_buffer.conf"
  sed -i 's/^flags = .*/flags = ["EnablePersistent"]/' "$BBKIT_CONFIG"
  restart_slurmctld "Flags=EnablePersistent again"
  [ "$refused" -ne 0 ] || fail "sbatch accepted a persistent buffer without EnablePersistent: $said"
  # bbkit's cli_filter refuses it first, saying why (Slurm 22.05 itself would answer only
  # "request invalid", its parser's later check overwriting the permission error).
  [[ $said == *"sbatch: error: lua: bb-parse: "*"may not create persistent burst buffers (EnablePersistent is not set)"* ]] ||
    fail "sbatch said: $said"
  ! grep -q "function create_persistent -c CLI -t dwdenied" "$SLURM_DIR/log/slurmctld.log" ||
    fail "create_persistent ran for a refused job"
  run bb-stat --json sessions
  refute_output --partial dwdenied
  # bbkit refuses it too, whoever asks it through the tools (not root itself).
  sed -i 's/^flags = .*/flags = []/' "$BBKIT_CONFIG"
  run setpriv --reuid="$TEST_UID" --regid="$TEST_GID" --init-groups bb-parse --script "$create" --user "$SLURM_TEST_USER"
  sed -i 's/^flags = .*/flags = ["EnablePersistent"]/' "$BBKIT_CONFIG"
  assert_equal "$status" 77
  assert_output --partial "may not create persistent burst buffers (EnablePersistent is not set)"
}

@test "f. scontrol show dwstat prints bbkit's DataWarp tables and only them" {
  script=$(job_script f.sh '#SBATCH --job-name=dw-f' '#DW jobdw capacity=3MiB' <<'EOF2'
for i in $(seq 1 300); do [ -e "$SLURM_SUBMIT_DIR/release-f" ] && exit 0; sleep 0.2; done
exit 1
EOF2
)
  submit "$script"
  wait_job "$JOB" 'JobState=RUNNING .*BurstBufferState=running' 60
  slurm_run scontrol show dwstat
  assert_line --regexp '^ *pool +units +quantity +free +gran'
  assert_line --regexp '^ *pool1 +bytes +64MiB +61MiB +1MiB'
  slurm_run scontrol show dwstat sessions
  assert_line --regexp '^ *sess +state +token +creator +owner'
  assert_line --regexp " CA--- +$JOB +bbkit +$TEST_UID "
  slurm_run scontrol show dwstat instances
  assert_line --regexp " 3MiB .* $JOB +private +1$"
  slurm_run scontrol show dwstat activations
  assert_line --regexp '^ *activ +state +sess +conf +nodes'
  slurm_run -u scontrol show dwstat sessions extra words
  assert_output --partial "usage: dwstat"
  slurm_run -u scontrol show dwstat "; touch /tmp/bbkit-dwstat-pwned"
  assert_output --partial "usage: dwstat"
  [ ! -e /tmp/bbkit-dwstat-pwned ] || fail "dwstat ran a user's words"
  touch "$JOBS_DIR/release-f"
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 60
}

@test "g. --dependency=afterburstbuffer: the dependent job starts only after the parent's stage-out" {
  mkdir -p "$DATA_DIR/g"
  chown "$SLURM_TEST_USER:" "$DATA_DIR/g"
  parent=$(job_script g1.sh '#SBATCH --job-name=dw-g1' '#DW jobdw capacity=40MiB' \
    "#DW stage_out type=file source=\$DW_JOB_STRIPED/big.dat destination=$DATA_DIR/g/big.dat" <<'EOF2'
head -c 33554432 /dev/urandom >"$DW_JOB_STRIPED/big.dat"
sha256sum <"$DW_JOB_STRIPED/big.dat" | cut -d' ' -f1 >"$SLURM_SUBMIT_DIR/g.sha256"
EOF2
)
  submit "$parent"
  parent_job=$JOB
  child=$(job_script g2.sh '#SBATCH --job-name=dw-g2' <<EOF2
sha256sum <"$DATA_DIR/g/big.dat" | cut -d' ' -f1
EOF2
)
  submit "--dependency=afterburstbuffer:$parent_job" "$child"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=COMPLETED' 120
  assert_equal "$(cat "$JOBS_DIR/dw-g2-$JOB.out")" "$(cat "$JOBS_DIR/g.sha256")"
  wait_job "$parent_job" 'JobState=COMPLETED .*BurstBufferState=complete' 60
}

@test "h. a reservation holding burst-buffer space keeps it from other users' jobs until it ends" {
  # Space only (ANY_NODES: no node of its own): a job outside it could run at once but for
  # the space held; a job in it uses that space.
  slurm_run scontrol create reservation ReservationName=dwres StartTime=now Duration=10 \
    Users="$SLURM_TEST_USER" Flags=ANY_NODES BurstBuffer=datawarp:pool1:48MiB
  assert_equal "$status" 0
  slurm_run scontrol show reservation dwres
  assert_output --partial "BurstBuffer=datawarp:pool1:48M"
  script=$(job_script h.sh '#SBATCH --job-name=dw-h' '#DW jobdw capacity=32MiB' <<<'echo "ran in $DW_JOB_STRIPED"')
  submit "$script"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=PENDING Reason=BurstBufferResources BurstBufferState=pending' 60
  local i
  for i in $(seq 1 25); do
    sleep 0.2
    [ "$(job_field "$JOB" JobState) $(job_field "$JOB" BurstBufferState)" = "PENDING pending" ] ||
      fail "job $JOB got space while the reservation held 48MiB of 64MiB: $(job_field "$JOB" JobState) $(job_field "$JOB" BurstBufferState)"
  done
  run bb-stat --json sessions
  refute_output --partial "\"token\": \"$JOB\""
  outside=$JOB
  inside=$(job_script h-in.sh '#SBATCH --job-name=dw-h-in' '#DW jobdw capacity=40MiB' <<<'echo "reserved space in $DW_JOB_STRIPED"')
  submit --reservation=dwres "$inside"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 120
  grep -q "reserved space in $SLURM_DIR/pools/pool1/job/e2e.$JOB." "$JOBS_DIR/dw-h-in-$JOB.out"
  [ "$(job_field "$outside" BurstBufferState)" = pending ] || fail "job $outside got space while the reservation held it"
  JOB=$outside
  slurm_run scontrol delete reservation dwres
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 120
  grep -q "ran in $SLURM_DIR/pools/pool1/job/e2e.$JOB." "$JOBS_DIR/dw-h-$JOB.out"
}

@test "i. scenario a's flow again with SlurmUser=slurm (dw_wlm_cli calls the tools through sudo -n)" {
  use_slurm_user slurm
  slurm_run scontrol show config
  assert_output --regexp "SlurmUser += slurm\($(id -u slurm)\)"
  mkdir -p "$DATA_DIR/i"
  printf 'input of i\n' >"$DATA_DIR/i/in.txt"
  chown -R "$SLURM_TEST_USER:" "$DATA_DIR/i"
  script=$(job_script i.sh '#SBATCH --job-name=dw-i' '#DW jobdw capacity=2MiB' \
    "#DW stage_in type=file source=$DATA_DIR/i/in.txt destination=\$DW_JOB_STRIPED/in.txt" \
    "#DW stage_out type=file source=\$DW_JOB_STRIPED/out.txt destination=$DATA_DIR/i/out.txt" <<'EOF2'
tr a-z A-Z <"$DW_JOB_STRIPED/in.txt" >"$DW_JOB_STRIPED/out.txt"
EOF2
)
  submit "$script"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 120
  assert_equal "$(cat "$DATA_DIR/i/out.txt")" "INPUT OF I"
  slurm_run scontrol show dwstat
  assert_line --regexp '^ *pool1 +bytes +64MiB'
  assert_default_pool "64MiB 64MiB 0"
}

@test "j. slurmctld restarted while a job runs on its buffer: Slurm finds the session again and the stage-out lands" {
  mkdir -p "$DATA_DIR/j"
  chown "$SLURM_TEST_USER:" "$DATA_DIR/j"
  script=$(job_script j.sh '#SBATCH --job-name=dw-j' '#DW jobdw capacity=4MiB' \
    "#DW stage_out type=file source=\$DW_JOB_STRIPED/out.txt destination=$DATA_DIR/j/out.txt" <<'EOF2'
for i in $(seq 1 600); do [ -e "$SLURM_SUBMIT_DIR/release-j" ] && break; sleep 0.2; done
echo "survived in $DW_JOB_STRIPED" >"$DW_JOB_STRIPED/out.txt"
EOF2
)
  submit "$script"
  wait_job "$JOB" 'JobState=RUNNING .*BurstBufferState=running' 60
  restart_slurmctld "a job holds its buffer"
  slurm_run scontrol show burst
  assert_output --regexp "JobID=$JOB CreateTime=[^ ]+ Pool=pool1 Size=4MiB State=allocated UserID=$SLURM_TEST_USER\($TEST_UID\)"
  # Not a vestigial buffer: nothing was torn down.
  ! grep -q "Purging vestigial buffer for JobId=$JOB" "$SLURM_DIR/log/slurmctld.log" ||
    fail "slurmctld purged the running job's buffer"
  touch "$JOBS_DIR/release-j"
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 90
  run cat "$DATA_DIR/j/out.txt"
  assert_output --regexp "^survived in $SLURM_DIR/pools/pool1/job/e2e\.$JOB\.[0-9]+\.[0-9a-f]{16}$"
  assert_default_pool "64MiB 64MiB 0"
}

@test "k. DataWarp-era scripts end to end: a dotted persistent name created and destroyed by one-node jobs, a repeated key, %% in a stage path" {
  # A one-node job whose only line is #BB create_persistent: Slurm runs setup and data_in, no
  # paths and no pre_run, then post_run and data_out when it ends. It must end.
  create=$(job_script k-create.sh '#SBATCH --job-name=dw-k-create' \
    '#BB create_persistent name=climate.v2 capacity=5MiB access=striped type=scratch' <<<'true')
  submit "$create"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 90
  grep -q "dw_wlm_cli --function post_run --token $JOB " "$SLURM_DIR/log/slurmctld.log" ||
    fail "slurmctld.log shows no post_run for the one-node create job $JOB"
  ! grep -q "dw_wlm_cli --function pre_run --token $JOB " "$SLURM_DIR/log/slurmctld.log" ||
    fail "Slurm ran pre_run for a job without #DW options: the scenario no longer tests that path"
  slurm_run scontrol show burst
  assert_output --regexp "Name=climate.v2 CreateTime=[^ ]+ Pool=pool1 Size=5MiB State=allocated UserID=$SLURM_TEST_USER\($TEST_UID\)"

  # A job written the DataWarp way: a key repeated with the same value, the dotted persistent
  # buffer, and a stage-out path holding %% and %j (Slurm replaces them once, bbkit never again).
  mkdir -p "$DATA_DIR/k/100%"
  chown -R "$SLURM_TEST_USER:" "$DATA_DIR/k"
  user=$(job_script k-use.sh '#SBATCH --job-name=dw-k-use' \
    '#DW jobdw type=scratch capacity=2MiB access_mode=striped,private type=scratch' \
    '#DW persistentdw name=climate.v2' \
    "#DW stage_out type=file source=\$DW_JOB_STRIPED/out.txt destination=$DATA_DIR/k/100%%/out.%j" <<'EOF2'
echo "in $DW_PERSISTENT_STRIPED_climate_v2" >"$DW_PERSISTENT_STRIPED_climate_v2/note"
echo "job $SLURM_JOB_ID" >"$DW_JOB_STRIPED/out.txt"
EOF2
)
  submit "$user"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 120
  assert_equal "$(cat "$DATA_DIR/k/100%/out.$JOB")" "job $JOB"
  run ls "$DATA_DIR/k"
  assert_output '100%'
  # The directory's name ends in a part nobody else can guess (bbkit(7), SECURITY).
  pdir=$(find "$SLURM_DIR/pools/pool1/persistent" -mindepth 1 -maxdepth 1 -name 'e2e.climate.v2*')
  grep -q "^in $pdir$" "$pdir/note" || fail "the job did not write into the dotted persistent buffer"

  destroy=$(job_script k-destroy.sh '#SBATCH --job-name=dw-k-destroy' '#BB destroy_persistent name=climate.v2' <<<'true')
  submit "$destroy"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 90
  wait_until 30 "Slurm to forget climate.v2" sh -c '! scontrol show burst | grep -q "Name=climate.v2"'
  [ ! -e "$pdir" ] || fail "the persistent buffer's directory is still there"
  assert_default_pool "64MiB 64MiB 0"
  assert_bbkit_pool_whole pool1
}

@test "l. a create-only job with a bad request is refused at sbatch by the cli_filter, not held" {
  bad=$(job_script l.sh '#SBATCH --job-name=dw-l' \
    '#BB create_persistent name=toobig capacity=1GiB pool=small access=striped type=scratch' <<<'true')
  submit "$bad"
  [ "$status" -ne 0 ] || fail "sbatch accepted a persistent buffer larger than its pool: $output"
  assert_output --regexp "sbatch: error: lua: bb-parse: script line [0-9]+: capacity=1GiB can never be satisfied: pool 'small' holds only 10MiB"
  slurm_run squeue -h -n dw-l -o '%i %T %r'
  assert_output ""
  ! grep -q "function create_persistent -c CLI -t toobig" "$SLURM_DIR/log/slurmctld.log" ||
    fail "create_persistent ran for a job refused at submit"
  bad=$(job_script l2.sh '#SBATCH --job-name=dw-l2' '#BB destroy_persistent name=no/such' <<<'true')
  submit "$bad"
  [ "$status" -ne 0 ] || fail "sbatch accepted a persistent name holding '/': $output"
  assert_output --regexp "sbatch: error: lua: bb-parse: script line [0-9]+: invalid persistent buffer name 'no/such'"
  assert_bbkit_pool_whole small
}

@test "m. scontrol show dwstat prints DataWarp's layouts, empty-table lines and all tables within Slurm's 2 s" {
  slurm_run scontrol show dwstat sessions
  assert_output "no sessions"
  slurm_run scontrol show dwstat configurations
  assert_output "no scratch, cache, swap configurations"
  slurm_run scontrol show dwstat most
  assert_line --regexp '^ *pool units quantity +free gran$'
  assert_line --regexp '^ *pool1 bytes +64MiB +64MiB 1MiB$'
  assert_line "no activations"
  refute_output --partial "Error running dwstat"
}

@test "n. AllowUsers and DenyUsers of two users each, as install-slurm lists them: an allowed user's job runs, a denied user's is refused at submit by Slurm itself" {
  local bbconf=$SLURM_DIR/etc/burst_buffer.conf
  cp "$bbconf" "$SLURM_DIR/burst_buffer.conf.n"
  cp "$BBKIT_CONFIG" "$SLURM_DIR/bbkit.toml.n"
  # bbkit.toml's users, then burst_buffer.conf written anew from them; Slurm reads it at start.
  users_in_both() {  # users_in_both KEY LIST
    cp "$SLURM_DIR/bbkit.toml.n" "$BBKIT_CONFIG"
    sed -i "s/^cluster = .*/&\n$1 = $2/" "$BBKIT_CONFIG"
    rm -f "$bbconf"
    install_bbkit_scripts root
    restart_slurmctld "$(grep -E '^(Allow|Deny)Users=' "$bbconf")"
  }
  users_in_both allow_users "[\"nobody\", \"$SLURM_TEST_USER\"]"
  run grep -E '^(AllowUsers|DenyUsers)=' "$bbconf"
  assert_output "AllowUsers=nobody,$SLURM_TEST_USER"
  script=$(job_script n.sh '#SBATCH --job-name=dw-n' '#DW jobdw capacity=1MiB' <<<'echo "allowed in $DW_JOB_STRIPED"')
  submit "$script"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 90
  grep -q "allowed in $SLURM_DIR/pools/pool1/job/e2e.$JOB." "$JOBS_DIR/dw-n-$JOB.out"

  users_in_both deny_users "[\"$SLURM_TEST_USER\", \"nobody\"]"
  run grep -E '^(AllowUsers|DenyUsers)=' "$bbconf"
  assert_output "DenyUsers=$SLURM_TEST_USER,nobody"
  # From standard input the cli_filter sees no script: Slurm's own check refuses it.
  submit <"$script"
  local refused=$status said=$output
  # With the script named, bbkit's cli_filter refuses it first, saying why.
  submit "$script"
  local filtered=$status filter_said=$output
  cp "$SLURM_DIR/burst_buffer.conf.n" "$bbconf"
  cp "$SLURM_DIR/bbkit.toml.n" "$BBKIT_CONFIG"
  restart_slurmctld "no AllowUsers or DenyUsers again"
  [ "$refused" -ne 0 ] || fail "Slurm accepted a job of a user its DenyUsers lists: $said"
  [[ $said == *"Burst Buffer permission denied"* ]] || fail "sbatch said: $said"
  [ "$filtered" -ne 0 ] || fail "sbatch accepted a job of a user deny_users lists: $filter_said"
  [[ $filter_said == *"sbatch: error: lua: bb-parse: "* ]] || fail "sbatch said: $filter_said"
  slurm_run squeue -h -n dw-n -t pending,running -o '%i %T %r'
  assert_output ""
}

# After i, the tools run through sudo -n as SlurmUser slurm's (i's slurm.conf stays), which
# drops SLURM_CONF: bb-stage's sbatch finds the cluster's slurm.conf through bbkit.toml's
# slurm_conf alone. Alone (bats --filter), as root's.
@test "o. a pool with staging = \"slurm\" under the datawarp plugin: dw_wlm_cli's data_in and data_out each run as a transfer job of the user on the node, and the data lands" {
  local i script jobs
  mkdir -p "$DATA_DIR/o/tree/sub"
  for i in $(seq 1 40); do head -c $((i * 997)) /dev/urandom >"$DATA_DIR/o/tree/sub/f$i"; done
  ln "$DATA_DIR/o/tree/sub/f1" "$DATA_DIR/o/tree/linked-f1"
  chown -R "$SLURM_TEST_USER:" "$DATA_DIR/o"
  script=$(job_script o.sh '#SBATCH --job-name=dw-o' \
    '#DW jobdw capacity=8MiB access_mode=striped type=scratch pool=xfer' \
    "#DW stage_in type=directory source=$DATA_DIR/o/tree destination=\$DW_JOB_STRIPED/tree" \
    "#DW stage_out type=directory source=\$DW_JOB_STRIPED/tree destination=$DATA_DIR/o/out" <<'EOF2'
test -s "$DW_JOB_STRIPED/tree/sub/f40"
echo "ran in $DW_JOB_STRIPED" >"$DW_JOB_STRIPED/tree/result"
EOF2
)
  submit "$script"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 240
  grep -q "dw_wlm_cli --function data_in .*$JOB\|dw_wlm_cli --function data_in --job .*/job.$JOB/script" "$SLURM_DIR/log/slurmctld.log" ||
    fail "slurmctld.log shows no data_in call for job $JOB"
  # Slurm's own record: a stage-in and a stage-out job of the user, each COMPLETED on the node.
  slurm_run squeue -h --states=all -o '%i|%j|%u|%P|%T|%N'
  mapfile -t jobs < <(printf '%s\n' "$output" | grep -E "^[0-9]+\|bbkit\.e2e\.$JOB\." | sort -n)
  assert_equal "${#jobs[@]}" 2
  [[ ${jobs[0]} =~ \.in\.[0-9a-f]+\|$SLURM_TEST_USER\|e2e\|COMPLETED\|localhost$ ]] || fail "stage-in transfer job: ${jobs[0]}"
  [[ ${jobs[1]} =~ \.out\.[0-9a-f]+\|$SLURM_TEST_USER\|e2e\|COMPLETED\|localhost$ ]] || fail "stage-out transfer job: ${jobs[1]}"
  # What the job wrote came back with the tree, hard link and all, as the user's.
  grep -q "^ran in $SLURM_DIR/pools/xfer/job/e2e.$JOB." "$DATA_DIR/o/out/result" || fail "result: $(cat "$DATA_DIR/o/out/result")"
  diff -r --exclude=result "$DATA_DIR/o/tree" "$DATA_DIR/o/out" || fail "the staged-out tree differs"
  assert_equal "$(stat -c %i "$DATA_DIR/o/out/linked-f1")" "$(stat -c %i "$DATA_DIR/o/out/sub/f1")"
  assert_equal "$(stat -c %U "$DATA_DIR/o/out/result")" "$SLURM_TEST_USER"
  assert_bbkit_pool_whole xfer
  [ -z "$(find "$SLURM_DIR/pools/xfer/transfer" -mindepth 1 -maxdepth 1 2>/dev/null)" ] || fail "transfer directories left"
}
