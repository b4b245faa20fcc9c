#!/usr/bin/env bats
# bb-pool reconcile --slurm: buffers whose jobs Slurm no longer knows. Slurm's clients are
# stand-ins on PATH here (squeue and scontrol answering from a file); the check against a real
# slurmctld is part of tests/slurm/.

bats_require_minimum_version 1.5.0
load common

setup() {
  common_setup
  write_config 'mode = "slurm"' 'directives = ["BB_LUA"]'
  mkdir -p "$TEST_DIR/small" "$TEST_DIR/nvme" "$TEST_DIR/bin"
  bb-pool init small >/dev/null
  # squeue lists the ids in $TEST_DIR/jobs; scontrol knows them too and says "Invalid job id"
  # for any other; $TEST_DIR/down makes both fail as with slurmctld down.
  cat >"$TEST_DIR/bin/squeue" <<SH
#!/bin/bash
echo "squeue \$*" >>"$TEST_DIR/calls"
if [ -e "$TEST_DIR/down" ]; then
  echo "squeue: error: Unable to contact slurm controller (connect failure)" >&2; exit 1
fi
cat "$TEST_DIR/jobs"
SH
  cat >"$TEST_DIR/bin/scontrol" <<SH
#!/bin/bash
echo "scontrol \$*" >>"$TEST_DIR/calls"
if [ -e "$TEST_DIR/scontrol-down" ]; then
  echo "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" >&2; exit 1
fi
if grep -qx "\$4" "$TEST_DIR/known"; then echo "JobId=\$4 JobState=COMPLETED"; exit 0; fi
echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1
SH
  chmod +x "$TEST_DIR/bin/squeue" "$TEST_DIR/bin/scontrol"
  PATH="$TEST_DIR/bin:$PATH"
  : >"$TEST_DIR/jobs"
  : >"$TEST_DIR/known"
  for id in 1 2 3; do
    bb-pool alloc --job "$id" --user root --pool small --capacity 1K >/dev/null
  done
}

teardown() {
  common_teardown
}

@test "reconcile is documented and needs --slurm" {
  run bb-pool reconcile --help
  assert_success
  for opt in --slurm --apply --json; do
    assert_output --partial -- "$opt"
    grep -q -- "${opt//-/\\\\-}" "$BBKIT_SOURCE_DIR/man/man1/bb-pool.1" || fail "man page lacks $opt"
  done
  grep -q 'reconcile' "$BBKIT_SOURCE_DIR/man/man1/bb-pool.1"
  run bb-pool reconcile
  assert_failure 64
  assert_output "bb-pool: reconcile needs --slurm (the scheduler to ask)"
}

@test "lists only buffers whose jobs Slurm neither lists nor knows, and touches nothing" {
  echo 1 >"$TEST_DIR/jobs"   # pending or running: listed by squeue
  echo 2 >"$TEST_DIR/known"  # not listed, but scontrol still knows it
  run bb-pool reconcile --slurm
  assert_success
  assert_output "unknown to Slurm: main.3.1 (job 3, user root, pool small, 1KiB, allocated)
3 job buffer(s) checked, 1 unknown to Slurm (--apply tears them down)"
  run grep -c "squeue" "$TEST_DIR/calls"
  assert_output 1
  run grep -x "scontrol --oneliner show job 3" "$TEST_DIR/calls"
  assert_success
  run grep -x "scontrol --oneliner show job 1" "$TEST_DIR/calls"
  assert_failure
  assert_dir_exists "$(bbdir $TEST_DIR/small/job/main.3.1)"
  run bb-pool reconcile --slurm --json
  assert_success
  assert_output --partial '"checked": 3'
  assert_output --partial '"key": "main.3.1"'
  assert_output --partial '"torn_down": false'
}

@test "--apply tears down exactly the orphans and frees their space" {
  printf '1\n2\n' >"$TEST_DIR/jobs"
  run bb-pool reconcile --slurm --apply
  assert_success
  assert_line --index 0 "torn down: main.3.1 (job 3, user root, pool small, 1KiB, allocated)"
  assert_line --index 1 "3 job buffer(s) checked, 1 unknown to Slurm"
  assert_dir_not_exists "$(bbdir $TEST_DIR/small/job/main.3.1)"
  assert_dir_exists "$(bbdir $TEST_DIR/small/job/main.1.1)"
  assert_dir_exists "$(bbdir $TEST_DIR/small/job/main.2.1)"
  run bb-stat job 3
  assert_line --regexp "^state: +complete"
  # Nothing left to do: a second run changes nothing.
  run bb-pool reconcile --slurm --apply
  assert_success
  assert_output "2 job buffer(s) checked, 0 unknown to Slurm"
}

# squeue's columns: job id, job state, BurstBufferState. Pending while bbkit holds its buffer is
# a buffer Slurm lost (slurmctld killed before it saved it): the job waits for space bbkit holds.
@test "a job Slurm lists with BurstBufferState pending has lost its buffer: listed, and torn down with --apply" {
  bb-stage pre-run --job 3 >/dev/null
  printf '1 PENDING pending\n2 CONFIGURING staging-in\n3 RUNNING pending\n' >"$TEST_DIR/jobs"
  run bb-pool reconcile --slurm
  assert_success
  assert_output "pending in Slurm: main.1.1 (job 1, user root, pool small, 1KiB, allocated)
3 job buffer(s) checked, 0 unknown to Slurm, 1 pending in Slurm (its buffer lost) (--apply tears them down)"
  run grep -x "squeue --noheader --all --states=all --Format=JobID:24,State:24,BurstBufferState:24" "$TEST_DIR/calls"
  assert_success
  run bb-pool reconcile --slurm --json
  assert_output --partial '"reason": "pending-in-slurm"'
  run bb-pool reconcile --slurm --apply
  assert_success
  assert_line --index 0 "torn down: main.1.1 (job 1, user root, pool small, 1KiB, allocated)"
  assert_dir_not_exists "$(bbdir $TEST_DIR/small/job/main.1.1)"
  # staging-in in Slurm, and running in bbkit: neither is touched.
  assert_dir_exists "$(bbdir $TEST_DIR/small/job/main.2.1)"
  assert_dir_exists "$(bbdir $TEST_DIR/small/job/main.3.1)"
  # Slurm sets the job up again: a new incarnation.
  run bb-pool alloc --job 1 --user root --pool small --capacity 1K
  assert_success
  assert_output --partial "main.1.2"
}

# Standalone mode: bbkit's EpilogSlurmctld ends each buffer, and Slurm's flush of a job cancelled
# while its PrologSlurmctld runs can kill that epilog before it starts its work. A job Slurm
# lists as ended whose buffer never reached pre-run has nothing in it: listed and, with --apply,
# torn down. Buffers of jobs still completing, or that ran (pre-run done), are never touched,
# nor are they in slurm mode (Slurm tears down its own).
@test "standalone: a job Slurm lists as ended before it ran, its buffer not ended: listed and torn down with --apply" {
  write_config 'mode = "standalone"'
  bb-pool alloc --job 4 --user root --pool small --capacity 1K >/dev/null
  bb-stage pre-run --job 2 >/dev/null
  printf '1 CANCELLED\n2 COMPLETED\n3 COMPLETING\n4 TIMEOUT\n' >"$TEST_DIR/jobs"
  run bb-pool reconcile --slurm
  assert_success
  assert_output "ended in Slurm: main.1.1 (job 1, user root, pool small, 1KiB, allocated)
ended in Slurm: main.4.1 (job 4, user root, pool small, 1KiB, allocated)
4 job buffer(s) checked, 0 unknown to Slurm, 2 ended in Slurm before it ran (--apply tears them down)"
  run bb-pool reconcile --slurm --json
  assert_output --partial '"reason": "ended-in-slurm"'
  run bb-pool reconcile --slurm --apply
  assert_success
  assert_line --index 0 "torn down: main.1.1 (job 1, user root, pool small, 1KiB, allocated)"
  assert_line --index 1 "torn down: main.4.1 (job 4, user root, pool small, 1KiB, allocated)"
  for id in 1 4; do assert_dir_not_exists "$(bbdir $TEST_DIR/small/job/main.$id.1)"; done
  for id in 2 3; do assert_dir_exists "$(bbdir $TEST_DIR/small/job/main.$id.1)"; done
  # The same answer in slurm mode touches nothing: Slurm tears its jobs' buffers down itself.
  write_config 'mode = "slurm"' 'directives = ["BB_LUA"]'
  bb-pool alloc --job 7 --user root --pool small --capacity 1K >/dev/null
  echo "7 CANCELLED" >>"$TEST_DIR/jobs"
  run bb-pool reconcile --slurm --apply
  assert_success
  assert_output "3 job buffer(s) checked, 0 unknown to Slurm"
}

# A teardown that fails is a failure with its own code (bbkit(7), EXIT STATUS), named on its
# line; the other buffers are torn down all the same.
@test "--apply: a teardown that fails exits with its code, the others torn down" {
  dir=$(bbdir "$TEST_DIR/small/job/main.2.1")
  chattr +i "$dir" 2>/dev/null || skip "no chattr on this file system"
  run --separate-stderr bb-pool reconcile --slurm --apply
  chattr -i "$dir"
  assert_failure 77
  [[ $stderr == "bb-pool: warning: buffer main.2.1: teardown failed: "* ]] || fail "stderr: $stderr"
  assert_line --index 0 "torn down: main.1.1 (job 1, user root, pool small, 1KiB, allocated)"
  assert_line --index 1 --regexp '^NOT torn down: main\.2\.1 \(job 2, user root, pool small, 1KiB, allocated\): teardown of buffer main\.2\.1 failed: .*stays charged'
  assert_line --index 2 "torn down: main.3.1 (job 3, user root, pool small, 1KiB, allocated)"
  assert_dir_not_exists "$(bbdir $TEST_DIR/small/job/main.3.1)"
  run bb-pool reconcile --slurm --apply --json
  assert_success
  assert_output --partial '"torn_down": true'
  assert_dir_not_exists "$dir"
}

@test "when Slurm cannot be asked: exit 69 and nothing is torn down" {
  touch "$TEST_DIR/down"
  run bb-pool reconcile --slurm --apply
  assert_failure 69
  assert_output --partial "bb-pool: cannot ask Slurm: squeue failed (exit status 1: squeue: error: Unable to contact slurm controller (connect failure)); nothing was torn down"
  rm "$TEST_DIR/down"
  touch "$TEST_DIR/scontrol-down"
  run bb-pool reconcile --slurm --apply
  assert_failure 69
  assert_output --partial "cannot ask Slurm: scontrol failed"
  for id in 1 2 3; do assert_dir_exists "$(bbdir $TEST_DIR/small/job/main.$id.1)"; done
  # No clients at all.
  rm "$TEST_DIR/bin/squeue"
  PATH="$TEST_DIR/bin" run "$BBKIT_BIN/bb-pool" reconcile --slurm --apply
  assert_failure 69
  assert_output --partial "squeue is not on PATH"
  for id in 1 2 3; do assert_dir_exists "$(bbdir $TEST_DIR/small/job/main.$id.1)"; done
}
