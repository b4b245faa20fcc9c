#!/usr/bin/env bats
# Slurm's backup controller taking over with buffers in flight (failover.bash; bbkit(7), STATE
# DIRECTORY, "Controller failover"): c1 and c2 run slurmctld with burst_buffer/lua and share
# Slurm's and bbkit's state on one volume; jobs run on n1. In each scenario the controller in
# control crashes, hangs or reboots at one point of a buffer's life, and the other one finishes
# the work: every buffer ends once, with its data complete, the pool's use exact and
# `bb-pool check` clean; a controller that lost the claim writes nothing. Every line seen is
# kept in build/tests/slurm/transcript-failover.txt.

BBKIT_SLURM_TRANSCRIPT=${BBKIT_SLURM_TRANSCRIPT:-$BBKIT_BUILD_DIR/tests/slurm/transcript-failover.txt}
load failover

setup_file() {
  mkdir -p "$(dirname "$TRANSCRIPT")"
  : >"$TRANSCRIPT"
  start_failover_cluster
}

teardown_file() {
  finish_failover_cluster
}

setup() {
  skip_without_nodes
  scenario_setup
}

teardown() {
  [ -z "${NODES_SKIP:-}" ] || return 0
  unslow_node
  if [ -z "${BATS_TEST_COMPLETED:-}" ]; then
    local c
    for c in "${CONTROLLERS[@]}"; do
      echo "--- $c: slurmctld.log (last 40 lines)"
      tail -n 40 "$SLURM_DIR/log/ctld-$c/slurmctld.log" 2>/dev/null
    done >&3 2>/dev/null || true
  fi
  # A controller cut off is rebooted before anything else: resumed, its slurmctld would go on
  # as the primary beside the other one.
  [ -z "${FROZEN_PIDS:-}" ] || reboot_controller c1
  scenario_teardown
  restore_controllers
}

# Back to the start for the next scenario: c1 in control and holding bbkit's claim, c2 standing
# by (a crashed or frozen controller rebooted). A c2 that took control and handed it back is
# rebooted too: up to Slurm 23.11.1 a slurmctld that went to standby once takes every later
# hook's end for its own kill ("terminated by slurmctld") when it takes control again, and
# leaves the job where it was (its track_script_flush; bbkit(7), STATE DIRECTORY, "Controller
# failover").
restore_controllers() {
  local c
  for c in "${CONTROLLERS[@]}"; do
    if ! ctl_slurmctld_pid "$c" >/dev/null || [ -n "$(ctl_stopped "$c")" ]; then
      reboot_controller "$c"
    fi
  done
  FROZEN_PIDS=
  wait_for_claim c1 90
  if [ -n "${C2_TOOK_OVER:-}" ]; then
    reboot_controller c2
    C2_TOOK_OVER=
  fi
  # A node Slurm drained in a scenario (a job launched twice by controllers that disagreed)
  # back in service.
  if [ "$(sinfo -h -n n1 -o %T 2>/dev/null)" != idle ]; then
    scontrol update NodeName=n1 State=RESUME 2>/dev/null || true
    wait_until 60 "n1 to be idle" node_idle n1
  fi
}

# The pids of C's processes that are stopped (frozen).
ctl_stopped() {
  local p
  for p in $(ctl_pids "$1"); do
    grep -q '^State:.*T' "/proc/$p/status" 2>/dev/null && echo "$p"
  done
  return 0
}

# The job's input: a tree of NUMBER (600) files of 1 to 4 KiB and one of 3 MB under
# $DATA_DIR/NAME/in, owned by the test user: enough files that a mover slowed to a few percent
# of a CPU takes seconds over them.
make_input() {
  local name=$1 number=${2:-600}
  python3 - "$DATA_DIR/$name/in" "$number" <<'PY'
import os, sys
top, number = sys.argv[1], int(sys.argv[2])
for i in range(number):
    d = os.path.join(top, "d%02d" % (i % 20))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%04d" % i), "wb") as f:
        f.write(os.urandom(1024 + (i * 37) % 3072))
os.makedirs(os.path.join(top, "sub"), exist_ok=True)
with open(os.path.join(top, "sub", "big"), "wb") as f:
    f.write(os.urandom(3000000))
PY
  chown -R "$SLURM_TEST_USER:" "$DATA_DIR/$name"
}

# A job that stages $DATA_DIR/NAME/in in, copies it to results/ in its buffer, waits until
# $JOBS_DIR/release-NAME exists (at most 5 minutes), and stages results/ out to
# $DATA_DIR/NAME/out.
failover_job() {
  local name=$1
  job_script "$name.sh" "#SBATCH --job-name=failover-$name" \
    '#BB_LUA pool=pool1 capacity=16MiB' \
    "#BB_LUA stage_in type=directory source=$DATA_DIR/$name/in destination=\$BB_JOB_DIR/in" \
    "#BB_LUA stage_out type=directory source=\$BB_JOB_DIR/results destination=$DATA_DIR/$name/out" <<JOB
echo "running on \$(hostname) with \$BB_JOB_DIR"
cp -a "\$BB_JOB_DIR/in" "\$BB_JOB_DIR/results"
for i in \$(seq 1 1500); do [ -e "$JOBS_DIR/release-$name" ] && exit 0; sleep 0.2; done
exit 1
JOB
}

# The job's data arrived whole: out/ is in/, file for file, owned by the user.
assert_output_whole() {
  local name=$1
  run diff -r "$DATA_DIR/$name/in" "$DATA_DIR/$name/out"
  assert_success
  assert_equal "$(stat -c %U "$DATA_DIR/$name/out/sub/big")" "$SLURM_TEST_USER"
}

# bbkit's books are exact: nothing allocated, nothing in trash, no buffer directory left, and
# `bb-pool check` finds nothing wrong (read on the host, which holds no claim: it only reads).
# A teardown reaps its buffer within 2 s and leaves the rest to `bb-pool reap` (a site's timer,
# which runs where the claim is): run first on controller C (c1).
assert_pool_exact() {
  local c=${1:-c1} figures t u tr f left
  run ctl_exec "$c" bb-pool reap
  assert_success
  figures=$(bbkit_pool pool1)
  read -r t u tr f <<<"$figures"
  [ "$u" = 0 ] && [ "$tr" = 0 ] && [ "$f" = "$t" ] || fail "pool1 is not whole: total used trash free = $figures"
  left=$(find "$SLURM_DIR/pools/pool1/job" "$SLURM_DIR/pools/pool1/trash" -mindepth 1 -maxdepth 1 2>/dev/null)
  [ -z "$left" ] || fail "buffer directories are left in pool1: $left"
  run bb-pool check
  assert_success
}

# Whether controller C's log, from line FROM on, has a line matching the extended expression.
ctl_logged_since() {
  tail -n "+$2" "$SLURM_DIR/log/ctld-$1/slurmctld.log" | grep -q -E "$3"
}

@test "a. c1 holds the claim and stages; c2 stands by and writes nothing" {
  local from
  from=$(($(wc -l <"$SLURM_DIR/log/ctld-c2/slurmctld.log") + 1))
  make_input a
  script=$(failover_job a)
  submit "$script"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=RUNNING' 120
  run ctl_exec c2 bb-pool takeover --holds
  assert_failure 69
  run ctl_exec c2 bb-pool drain pool1
  assert_failure 69
  touch "$JOBS_DIR/release-a"
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 120
  assert_output_whole a
  assert_pool_exact
  # From 23.02.3 the standby loads burst_buffer/lua too and asks for the pools every 30 s: it
  # reads the shared state while c1 writes it (23.11 and later here: 23.02 alone does not say
  # which patch level).
  if release_at_least 23.11; then
    wait_until 70 "c2, standing by, to read the pools" \
      ctl_logged_since c2 "$from" 'slurm_bb_pools returned, status=0, response=\{"pools":\[\{'
    ! ctl_logged_since c2 "$from" 'Running as primary controller' || fail "c2 took control in scenario a"
  fi
}

# Every buffer job JOB had was allocated once and torn down once (the audit log, whichever
# controller wrote each line); sets BUFFERS, how many it had.
assert_each_buffer_ended_once() {
  local job=$1 log=$SLURM_DIR/shared/bbkit/state/log/audit.log keys key allocs ends
  keys=$(grep -o "action=alloc buffer=[^ ]*\.$job\.[^ ]*" "$log" | sed 's/.*buffer=//' | sort -u)
  [ -n "$keys" ] || fail "the audit log shows no buffer of job $job"
  for key in $keys; do
    allocs=$(grep -c "action=alloc buffer=$key " "$log")
    ends=$(grep -c -E "action=teardown(-force)? buffer=$key( |$)" "$log")
    [ "$allocs" = 1 ] && [ "$ends" = 1 ] ||
      fail "buffer $key: $allocs alloc and $ends teardown lines in the audit log: $(grep -F "$key" "$log")"
  done
  transcript "(audit log, job $job:)" "$(grep -E "buffer=[^ ]*\.$job\." "$log")"
  BUFFERS=$(wc -w <<<"$keys")
}

# The pid (host's view) of the first process on controller C whose command (its name, or its
# command line's first word: slurmscriptd names itself there) is NAME. The candidates come from
# one pgrep, kept when they are in C's network namespace: reading every process of C on each
# call made hold_on_c1's polls seconds apart on a loaded host, and a mover of a few seconds
# went by unseen.
ctl_process() {
  local c=$1 name=$2 p ns
  ns=$(stat -L -c %i "/run/netns/$(node_netns "$c")" 2>/dev/null) || return 1
  for p in $(pgrep -f -- "$name"); do
    [ "$(stat -L -c %i "/proc/$p/ns/net" 2>/dev/null)" = "$ns" ] || continue
    # Not a zombie (an orphan's, which the namespace's init shell never reaps).
    { grep -q '^State:.*[ZX]' "/proc/$p/status"; } 2>/dev/null && continue
    if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$name" ] ||
      [ "$({ tr '\0' '\n' <"/proc/$p/cmdline"; } 2>/dev/null | head -n 1 | sed 's|.*/||; s/:.*//')" = "$name" ]; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

# hold_on_c1 NAME WHAT: waits for a process NAME (bb-mover, bb-teardown) on c1 and stops it
# (SIGSTOP) where it is: WHAT is in flight. Sets HELD.
hold_on_c1() {
  local name=$1 what=$2 deadline=$((SECONDS + 120))
  HELD=
  while [ -z "$HELD" ]; do
    [ "$SECONDS" -lt "$deadline" ] || { fail "waited 120s for $what on c1 ($name)"; return 1; }
    # Found and stopped; still there once stopped (it may have ended in between).
    if HELD=$(ctl_process c1 "$name") && kill -STOP "$HELD" 2>/dev/null &&
      grep -q '^State:.*T' "/proc/$HELD/status" 2>/dev/null; then
      break
    fi
    HELD=
    sleep 0.1
  done
  PAUSED_PIDS="${PAUSED_PIDS:-} $HELD"
  transcript "root# kill -STOP $HELD   # $name on c1, job $JOB: $what"
  # The phase held is the one asked for: a mover missed would let the job go on to its next
  # phase's, and the scenario test another crash than it says.
  local expect=$what state
  case $what in stage-in) expect=staging-in ;; stage-out) expect=staging-out ;; esac
  state=$(job_field "$JOB" BurstBufferState)
  [ "$state" = "$expect" ] || fail "held $name $HELD while job $JOB's buffer is $state, not $expect"
}

# Stages job JOB's input in on c1, slowed to 3% of a CPU, and holds the mover there (SIGSTOP)
# once it runs. With "saved", then waits until Slurm has saved the job's state since (its
# job_state file and burst_buffer_lua_state newer than the stop): what the next controller
# recovers then says "staging-in".
stage_in_held_on_c1() {
  local name=$1 saved=${2:-} stamp=$SLURM_DIR/run/stage-in-held
  slow_processes 3 "slurmscriptd on c1" "$(ctl_process c1 slurmscriptd)"
  script=$(failover_job "$name")
  submit "$script"
  assert_equal "$status" 0
  hold_on_c1 bb-mover "stage-in"
  touch "$stamp"
  [ "$saved" = saved ] || return 0
  wait_slurm_saved "$stamp"
}

# Whether Slurm's saved list of buffers (burst_buffer_lua_state) has job JOB's: the buffer's
# name is the job id, which Slurm packs as a string (a 32-bit length, counting the NUL, then the
# bytes and the NUL).
slurm_saved_buffer() {
  python3 - "$STATE_SAVE_LOCATION/burst_buffer_lua_state" "$1" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
name = sys.argv[2].encode() + b"\0"
sys.exit(0 if struct.pack(">I", len(name)) + name in data else 1)
PY
}

# Waits until Slurm has saved what it knows of job JOB as it is now (since the file STAMP was
# touched), for the next controller to recover: its list of buffers, saved every 30 s when it
# changed (with the job's buffer), and the jobs' state, saved
# when something about jobs changes, not when a buffer's state does: another job submitted
# (held) makes it save, as on any busy cluster. Without this the next controller recovers an
# older state: scenario b (neither saved), or (the job saved, the buffer list not) a job left
# staging in for good, without any hook running (Slurm 22.05; bbkit(7), STATE DIRECTORY,
# "Controller failover").
wait_slurm_saved() {
  local stamp=$1
  wait_until 60 "Slurm to save its buffer list with job $JOB's" slurm_saved_buffer "$JOB"
  slurm_run -u sbatch -H --job-name=failover-nudge --output=/dev/null --wrap=true
  assert_equal "$status" 0
  wait_until 60 "Slurm to save job $JOB" sh -c "[ $STATE_SAVE_LOCATION/job_state -nt $stamp ]"
}

@test "b. c1 crashes as a stage-in begins: c2 stages in what Slurm saved, or, Slurm having saved the job but not its buffer, leaves it waiting; bbkit's check names the stopped stage-in, and the cancelled job's buffer ends once" {
  make_input b
  touch "$JOBS_DIR/release-b"
  stage_in_held_on_c1 b
  crash_controller c1
  wait_for_claim c2 90
  transcript "(c1's processes after the crash: $(for p in $(ctl_pids c1); do printf '%s ' "$(cat /proc/$p/comm)"; done))"
  # What Slurm recovers depends on what it saved before the crash (wait_slurm_saved): neither
  # the job nor its buffer (22.05 here, mostly), and c2 sets the buffer up again (bb-pool
  # alloc answers "already allocated") and resumes the stage-in; or the job staging in and not
  # its buffer (26.05 here, mostly), and Slurm runs no hook for it again (bbkit(7), STATE
  # DIRECTORY, "Controller failover").
  local log=$SLURM_DIR/log/ctld-c2/slurmctld.log
  sleep 20
  if grep -q "Modify JobId=$JOB burst buffer state from staging-in to staging-in" "$log" &&
    ! grep -q "slurm_bb_setup for JobId=$JOB " "$log"; then
    transcript "(Slurm saved job $JOB staging in, not its buffer: it runs no hook for it)"
    run ctl_exec c2 bb-pool check
    assert_failure 1
    assert_output --partial "stage-in stopped"
    slurm_run scancel "$JOB"
    assert_equal "$status" 0
    wait_job "$JOB" 'JobState=CANCELLED .*BurstBufferState=complete' 120
  else
    # Set up again on the buffer c1 made: one buffer in all (below).
    wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 300
    assert_output_whole b
  fi
  assert_each_buffer_ended_once "$JOB"
  assert_equal "$BUFFERS" 1
  assert_pool_exact c2
}

@test "c. c1 crashes during a stage-in Slurm saved: c2 tears the stage-in down, defers the job, stages in again; the job completes with its data" {
  make_input c
  touch "$JOBS_DIR/release-c"
  stage_in_held_on_c1 c saved
  crash_controller c1
  wait_for_claim c2 90
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 300
  # c2 recovered the job staging in: it tore the buffer down (Slurm then defers the job at
  # least 60 s) and set a second one up.
  grep -q "Modify JobId=$JOB burst buffer state from staging-in to teardown" "$SLURM_DIR/log/ctld-c2/slurmctld.log" ||
    fail "c2 did not tear job $JOB's buffer down"
  assert_output_whole c
  assert_each_buffer_ended_once "$JOB"
  assert_equal "$BUFFERS" 2
  assert_pool_exact c2
}

# Runs job NAME through its stage-in on c1 and lets it end; c1's hooks slowed to 3% of a CPU from
# then on, so that its stage-out and teardown take seconds.
job_through_run_on_c1() {
  local name=$1
  make_input "$name"
  script=$(failover_job "$name")
  submit "$script"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=RUNNING' 120
  slow_processes 3 "slurmscriptd on c1" "$(ctl_process c1 slurmscriptd)"
  touch "$JOBS_DIR/release-$name"
}

@test "d. c1 crashes while the job runs: c2 stages out and tears down when it ends" {
  make_input d
  script=$(failover_job d)
  submit "$script"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=RUNNING .*BurstBufferState=running' 120
  touch "$SLURM_DIR/run/running"
  wait_slurm_saved "$SLURM_DIR/run/running"
  crash_controller c1
  wait_for_claim c2 90
  touch "$JOBS_DIR/release-d"
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 300
  assert_output_whole d
  assert_each_buffer_ended_once "$JOB"
  assert_equal "$BUFFERS" 1
  assert_pool_exact c2
}

@test "e. c1 crashes during a stage-out: c2 runs post-run and the stage-out again; the data lands whole" {
  job_through_run_on_c1 e
  hold_on_c1 bb-mover "stage-out"
  touch "$SLURM_DIR/run/held"
  wait_slurm_saved "$SLURM_DIR/run/held"
  crash_controller c1
  wait_for_claim c2 90
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 300
  assert_output_whole e
  assert_each_buffer_ended_once "$JOB"
  assert_equal "$BUFFERS" 1
  assert_pool_exact c2
}

@test "f. c1 crashes during a teardown: c2 tears down again; the buffer ends once" {
  job_through_run_on_c1 f
  hold_on_c1 bb-teardown "teardown"
  touch "$SLURM_DIR/run/held"
  wait_slurm_saved "$SLURM_DIR/run/held"
  crash_controller c1
  wait_for_claim c2 90
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 300
  assert_output_whole f
  assert_each_buffer_ended_once "$JOB"
  assert_equal "$BUFFERS" 1
  assert_pool_exact c2
}

# What a controller's processes could change: every row of state.db, the trees of the pool and
# of the job's data, and the audit log.
state_snapshot() {
  sqlite3 "file:$SLURM_DIR/shared/bbkit/state/state.db?mode=ro" .dump
  (cd "$SLURM_DIR" && find pools/pool1 data -printf '%p %m %s\n' | sort)
  cat "$SLURM_DIR/shared/bbkit/state/log/audit.log"
}

# The smoke scenario: what the submission tier runs of this suite (tests/CMakeLists.txt).
# bats test_tags=smoke
@test "g. c1 hangs during a stage-out, its run lock held: c2 takes over and stages out; c1's stage-out, resumed, is refused and changes nothing" {
  job_through_run_on_c1 g
  hold_on_c1 bb-mover "stage-out"
  stager=$(ctl_process c1 bb-stage)
  touch "$SLURM_DIR/run/held"
  wait_slurm_saved "$SLURM_DIR/run/held"
  freeze_controller c1
  wait_for_claim c2 90
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 300
  assert_output_whole g
  assert_each_buffer_ended_once "$JOB"
  assert_equal "$BUFFERS" 1
  assert_pool_exact c2
  # c1 comes back believing it is primary: its stage-out goes on where it stopped, and every
  # command run there is refused before it changes anything.
  before=$(state_snapshot)
  thaw_controller c1 "$stager" "$HELD"
  wait_until 60 "c1's stage-out (pid $stager) to end" sh -c "! [ -d /proc/$stager ] || grep -q '^State:.*Z' /proc/$stager/status"
  run ctl_exec c1 bb-pool drain pool1
  assert_failure 69
  assert_output --partial "this host does not hold state directory"
  run ctl_exec c1 bb-stage --job "$JOB" out
  assert_failure 69
  assert_equal "$(state_snapshot)" "$before"
  # The audit log names the host of each action: c1 allocated, c2 tore down.
  grep -q "host=c1 pid=[0-9]* tool=bb-pool alloc action=alloc buffer=e2e.$JOB.1 " "$SLURM_DIR/shared/bbkit/state/log/audit.log" ||
    fail "no allocation by c1 in the audit log"
  grep -q "host=c2 pid=[0-9]* tool=bb-teardown action=teardown buffer=e2e.$JOB.1 " "$SLURM_DIR/shared/bbkit/state/log/audit.log" ||
    fail "no teardown by c2 in the audit log"
  assert_output_whole g
  run bb-pool check
  assert_success
}
