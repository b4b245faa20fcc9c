#!/usr/bin/env bats
# Many callers at once on a small pool: capacity is never over-committed, every buffer is
# released, and the only error a caller sees is 75 (short of capacity, retry later).

load common

setup() {
  common_setup
  mkdir -p "$TEST_DIR/nvme" "$TEST_DIR/small"
  U=$(test_user)
  bb-pool init small >/dev/null
  bb-pool init nvme >/dev/null
}
teardown() { common_teardown; }

# One caller: CYCLES times alloc (retrying on 75) then teardown; any other status is logged.
caller() {
  local id=$1 cycles=$2 job rc
  for c in $(seq "$cycles"); do
    job=$((id * 1000 + c))
    while :; do
      rc=0; bb-pool alloc --job "$job" --user "$U" --pool small --capacity 1K >/dev/null 2>>"$TEST_DIR/err.$id" || rc=$?
      [ "$rc" -eq 0 ] && break
      [ "$rc" -eq 75 ] || { echo "alloc $job: exit $rc" >>"$TEST_DIR/bad"; break; }
      echo 75 >>"$TEST_DIR/retries.$id"
    done
    rc=0; bb-teardown --job "$job" >/dev/null 2>>"$TEST_DIR/err.$id" || rc=$?
    [ "$rc" -eq 0 ] || [ "$rc" -eq 75 ] || echo "teardown $job: exit $rc" >>"$TEST_DIR/bad"
    if [ "$rc" -eq 75 ]; then bb-teardown --job "$job" >/dev/null 2>&1 || echo "teardown $job retry failed" >>"$TEST_DIR/bad"; fi
  done
}

@test "16 callers x 50 alloc/teardown cycles on a pool that fits 4 never over-commit" {
  callers=${BBKIT_STRESS_CALLERS:-16}
  cycles=${BBKIT_STRESS_CYCLES:-50}
  export -f caller
  export U TEST_DIR
  pids=()
  for i in $(seq "$callers"); do caller "$i" "$cycles" & pids+=($!); done
  # Watch the accounting while they run: used + trash never exceeds the pool's 4 KiB.
  samples=0
  while kill -0 "${pids[@]}" 2>/dev/null; do
    line=$(bb-pool show small --json)
    used=$(sed -n 's/.*"used": \([0-9]*\).*/\1/p' <<<"$line")
    trash=$(sed -n 's/.*"trash": \([0-9]*\).*/\1/p' <<<"$line")
    [ $((used + trash)) -le 4096 ] || echo "over-commit: used=$used trash=$trash" >>"$TEST_DIR/bad"
    samples=$((samples + 1))
    sleep 0.05
  done
  for p in "${pids[@]}"; do wait "$p"; done
  [ ! -s "$TEST_DIR/bad" ] || { cat "$TEST_DIR/bad"; cat "$TEST_DIR"/err.* | sort | uniq -c | head; false; }
  [ "$samples" -gt 0 ]
  run bb-pool show small --json
  assert_output --partial '"used": 0'
  assert_output --partial '"trash": 0'
  run bb-pool check
  assert_success
  # Every buffer reached complete exactly once.
  done_count=$(sqlite3 "$TEST_DIR/state/state.db" "SELECT COUNT(*) FROM buffers WHERE state='complete' AND reaped=1")
  [ "$done_count" -eq $((callers * cycles)) ]
  retries=$(cat "$TEST_DIR"/retries.* 2>/dev/null | wc -l)
  echo "# $((callers * cycles)) cycles, $retries retries on 75, $samples accounting samples" >&3
}
