#!/usr/bin/env bats
# Races between a teardown and whoever looks at the buffer meanwhile, made deterministic with
# the injection points: BBKIT_FAULT=NAME:1:stop stops the process there until SIGCONT.
# Found by tests/fault/stress: recover took a teardown in progress for a dead one, finished it
# itself, and the teardown then stopped recover (SIGTERM) as if it were a stager; and a teardown
# that gave up waiting for an allocation left the directory the allocation made then.

load ../cli/common

setup() {
  common_setup
  mkdir -p "$TEST_DIR/nvme" "$TEST_DIR/small"
  U=$(test_user)
  bb-pool init nvme >/dev/null
  bb-pool init small >/dev/null
  [ -n "$(BBKIT_FAULT=list bb-pool)" ] || skip "built without BBKIT_FAULT_INJECTION"
}
teardown() {
  for pid in ${victim:-} ${stager:-} ${tearer:-} ${waiter:-}; do
    kill -CONT "$pid" 2>/dev/null || true
  done
  common_teardown
}

state_of() { sqlite3 "$TEST_DIR/state/state.db" "SELECT state FROM buffers WHERE job_id=$1 ORDER BY incarnation DESC LIMIT 1"; }

# Waits until process $1 is stopped (state T in /proc/PID/stat).
wait_stopped() {
  for _ in $(seq 200); do
    [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = T ] && return 0
    sleep 0.05
  done
  return 1
}

@test "recover and check leave a teardown between its commit and its run lock alone" {
  bb-pool alloc --job 5 --user "$U" --capacity 1G >/dev/null
  BBKIT_FAULT=teardown.committed:1:stop bb-teardown --job 5 >"$TEST_DIR/out" 2>&1 &
  victim=$!
  wait_stopped "$victim"
  [ "$(state_of 5)" = teardown ]
  run bb-pool recover
  assert_success
  assert_output "nothing to recover"
  run bb-pool check
  assert_success
  kill -CONT "$victim"
  wait "$victim"
  victim=
  [ "$(state_of 5)" = complete ]
  run bb-pool check
  assert_success
}

@test "a second teardown waits for the first instead of stopping it" {
  bb-pool alloc --job 6 --user "$U" --capacity 1G >/dev/null
  BBKIT_FAULT=teardown.committed:1:stop bb-teardown --job 6 >"$TEST_DIR/first" 2>&1 &
  victim=$!
  wait_stopped "$victim"
  bb-teardown --hurry --job 6 >"$TEST_DIR/second" 2>&1 &
  second=$!
  sleep 1
  kill -0 "$second"  # still waiting for the first
  kill -CONT "$victim"
  wait "$victim" || { cat "$TEST_DIR/first"; false; }
  victim=
  wait "$second" || { cat "$TEST_DIR/second"; false; }
  [ "$(state_of 6)" = complete ]
  run bb-pool check
  assert_success
}

@test "an allocation torn down while it was in flight leaves no directory behind" {
  # The teardown waits 10 s for the allocation, then ends the buffer anyway.
  BBKIT_FAULT=alloc.reserved:1:stop bb-pool alloc --job 7 --user "$U" --capacity 1G >"$TEST_DIR/alloc" 2>&1 &
  victim=$!
  wait_stopped "$victim"
  run bb-teardown --job 7
  assert_success
  kill -CONT "$victim"
  rc=0; wait "$victim" || rc=$?
  victim=
  [ "$rc" -eq 66 ] || { cat "$TEST_DIR/alloc"; false; }
  grep -q "torn down while it was being allocated" "$TEST_DIR/alloc"
  [ ! -e "$(bbdir $TEST_DIR/nvme/job/main.7.1)" ]
  run bb-pool check
  assert_success
}

# Found by tests/fault/stress: recover read a waiter as pending, the waiter got its space,
# allocated and exited, and recover then took it for a dead waiter and ended the fresh
# allocation, leaving its directory with no record.
@test "recover leaves alone a waiter that got its space while recover was looking" {
  bb-pool alloc --job 10 --user "$U" --capacity 4K --pool small >/dev/null
  bb-pool alloc --job 11 --user "$U" --capacity 4K --pool small --wait 30 >"$TEST_DIR/waiter" 2>&1 &
  waiter=$!
  for _ in $(seq 100); do [ "$(state_of 11)" = pending ] && break; sleep 0.1; done
  [ "$(state_of 11)" = pending ]
  BBKIT_FAULT=recover.listed:1:stop bb-pool recover >"$TEST_DIR/recover" 2>&1 &
  victim=$!
  wait_stopped "$victim"
  bb-teardown --job 10 >/dev/null
  wait "$waiter" || { cat "$TEST_DIR/waiter"; false; }
  [ "$(state_of 11)" = allocated ]
  kill -CONT "$victim"
  wait "$victim" || { cat "$TEST_DIR/recover"; false; }
  victim=
  [ "$(state_of 11)" = allocated ]
  [ -d "$(bbdir $TEST_DIR/small/job/main.11.1)" ]
  run bb-pool check
  assert_success
  run bb-stage in --job 11
  assert_success
}

@test "recover leaves alone a stage-in that finished while recover was looking" {
  mkdir -p "$TEST_DIR/pfs/in12"
  echo data >"$TEST_DIR/pfs/in12/f"
  chown -R "$U" "$TEST_DIR/pfs"
  printf '#!/bin/bash\n#BB_LUA pool=nvme capacity=1G\n#BB_LUA stage_in type=directory source=%s destination=in\n' \
    "$TEST_DIR/pfs/in12" >"$TEST_DIR/job12.sh"
  bb-pool alloc --job 12 --user "$U" --script "$TEST_DIR/job12.sh" >/dev/null
  BBKIT_FAULT=stage.entered:1:stop bb-stage in --job 12 >"$TEST_DIR/stage" 2>&1 &
  stager=$!
  wait_stopped "$stager"
  [ "$(state_of 12)" = staging-in ]
  BBKIT_FAULT=recover.listed:1:stop bb-pool recover >"$TEST_DIR/recover" 2>&1 &
  victim=$!
  wait_stopped "$victim"
  kill -CONT "$stager"
  wait "$stager" || { cat "$TEST_DIR/stage"; false; }
  [ "$(state_of 12)" = staged-in ]
  kill -CONT "$victim"
  wait "$victim" || { cat "$TEST_DIR/recover"; false; }
  victim=
  run cat "$TEST_DIR/recover"
  refute_output --partial "not recovered"
  [ "$(state_of 12)" = staged-in ]
  run bb-pool check
  assert_success
}

@test "check reports nothing for a teardown or a waiter that ended while it was looking" {
  bb-pool alloc --job 13 --user "$U" --capacity 4K --pool small >/dev/null
  bb-pool alloc --job 14 --user "$U" --capacity 4K --pool small --wait 3 >"$TEST_DIR/waiter" 2>&1 &
  waiter=$!
  for _ in $(seq 100); do [ "$(state_of 14)" = pending ] && break; sleep 0.1; done
  [ "$(state_of 14)" = pending ]
  BBKIT_FAULT=teardown.committed:1:stop bb-teardown --job 13 >"$TEST_DIR/teardown" 2>&1 &
  tearer=$!
  wait_stopped "$tearer"
  BBKIT_FAULT=check.listed:1:stop bb-pool check >"$TEST_DIR/check" 2>&1 &
  victim=$!
  wait_stopped "$victim"
  # The waiter times out and leaves the queue; the teardown finishes and exits.
  rc=0; wait "$waiter" || rc=$?
  [ "$rc" -eq 75 ] || { cat "$TEST_DIR/waiter"; false; }
  kill -CONT "$tearer"
  wait "$tearer" || { cat "$TEST_DIR/teardown"; false; }
  kill -CONT "$victim"
  rc=0; wait "$victim" || rc=$?
  victim=
  [ "$rc" -eq 0 ] || { cat "$TEST_DIR/check"; false; }
}
