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
  [ -n "${victim:-}" ] && kill -CONT "$victim" 2>/dev/null
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
  [ ! -e "$TEST_DIR/nvme/job/7.1" ]
  run bb-pool check
  assert_success
}
