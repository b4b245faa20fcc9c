#!/usr/bin/env bats
# The README's first command: the demo runs start to end on the tools under test ($BBKIT_BIN).

load common

@test "the demo runs the whole walk-through and cleans up after itself" {
  before=$(ls -d /tmp/bbkit-demo.* 2>/dev/null | wc -l)
  BBKIT_BINDIR="$BBKIT_BIN" run "$BBKIT_SOURCE_DIR/scripts/demo"
  assert_success
  assert_output --partial "demo complete"
  assert_output --partial "allocated 96MiB"
  assert_output --partial "all readable"
  assert_output --partial "exit status 65"
  assert_output --partial "allocated: demo.42.1 96MiB in pool demo"
  assert_output --partial "JobID=42 "
  assert_output --partial '"files": 2'
  assert_output --partial "BB_JOB_DIR="
  assert_output --partial "3 /tmp/bbkit-demo."
  assert_output --partial "exit status 75"
  assert_output --partial "torn down: demo.42.1 (space released)"
  assert_output --partial "no findings"
  after=$(ls -d /tmp/bbkit-demo.* 2>/dev/null | wc -l)
  [ "$before" -eq "$after" ]
}
