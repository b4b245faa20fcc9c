#!/usr/bin/env bats
# Full disks: a pool on a small tmpfs that fills up during stage-in, and a stage-out
# destination that fills up. The error names the pool (and the file), exits 74, nothing is
# recorded done that is not, teardown cleans the buffer, and stage-out's data survives for a
# --retry once space is freed.

load ../cli/common

setup() {
  common_setup
  mkdir -p "$TEST_DIR/nvme" "$TEST_DIR/small" "$TEST_DIR/pfs" "$TEST_DIR/full"
  chmod 755 "$TEST_DIR/pfs" "$TEST_DIR/full"
  # The pool's accounting (100GiB) is far larger than its file system (4 MiB): the disk, not
  # the capacity check, is what runs out.
  mount -t tmpfs -o size=4m,mode=0755 bbkit-pool "$TEST_DIR/nvme" || skip "cannot mount a tmpfs here"
  U=$(test_user)
  chown "$U" "$TEST_DIR/pfs"
  bb-pool init nvme >/dev/null
  bb-pool init small >/dev/null
}

teardown() {
  umount "$TEST_DIR/full" 2>/dev/null || true
  umount "$TEST_DIR/nvme" 2>/dev/null || true
  common_teardown
}

as_user() { runuser -u "$U" -- "$@"; }

state_of() { sqlite3 "$TEST_DIR/state/state.db" "SELECT state FROM buffers WHERE job_id=$1 ORDER BY incarnation DESC LIMIT 1"; }

@test "stage-in into a full pool fails with 74 naming the pool and the file; teardown cleans it" {
  as_user mkdir "$TEST_DIR/pfs/in"
  as_user sh -c "head -c 3M /dev/urandom >'$TEST_DIR/pfs/in/a'; head -c 3M /dev/urandom >'$TEST_DIR/pfs/in/b'"
  as_user sh -c "printf small >'$TEST_DIR/pfs/in/c'"
  bb-pool alloc --job 41 --user "$U" --bb "#BB_LUA capacity=1G #BB_LUA stage_in type=directory source=$TEST_DIR/pfs/in destination=in" >/dev/null
  run bb-stage in --job 41
  assert_failure 74
  assert_output --partial "pool 'nvme'"
  assert_output --partial "no space left on device"
  assert_output --partial "$(bbdir $TEST_DIR/nvme/job/main.41.1)/in/"
  [ "${#lines[@]}" -eq 1 ]
  [ "$(state_of 41)" = staging-in ]
  run bb-stat job 41 --json
  assert_output --partial "no space left on device"
  # Not done: a pre-run refuses, and stat does not say staged-in.
  run bb-stage pre-run --job 41
  assert_failure
  refute_output --partial "staged-in ->"
  run bb-teardown --job 41
  assert_success
  bb-pool reap >/dev/null
  [ "$(state_of 41)" = complete ]
  [ -z "$(ls -A "$TEST_DIR/nvme/job")" ]
  [ -z "$(ls -A "$TEST_DIR/nvme/trash")" ]
  [ "$(df --output=used -B1 "$TEST_DIR/nvme" | tail -1)" -lt 65536 ]
  run bb-pool check
  assert_success
}

@test "a rerun after space is freed completes the stage-in" {
  as_user mkdir "$TEST_DIR/pfs/in"
  as_user sh -c "head -c 3M /dev/urandom >'$TEST_DIR/pfs/in/a'; head -c 3M /dev/urandom >'$TEST_DIR/pfs/in/b'"
  bb-pool alloc --job 42 --user "$U" --bb "#BB_LUA capacity=1G #BB_LUA stage_in type=directory source=$TEST_DIR/pfs/in destination=in" >/dev/null
  run bb-stage in --job 42
  assert_failure 74
  mount -o remount,size=16m "$TEST_DIR/nvme"
  run bb-stage in --job 42
  assert_success
  [ "$(state_of 42)" = staged-in ]
  cmp "$TEST_DIR/pfs/in/a" "$(bbdir $TEST_DIR/nvme/job/main.42.1)/in/a"
  cmp "$TEST_DIR/pfs/in/b" "$(bbdir $TEST_DIR/nvme/job/main.42.1)/in/b"
  bb-teardown --job 42 >/dev/null
  run bb-pool check
  assert_success
}

@test "stage-out to a full destination fails with 74 naming the file, keeps the data, --retry works" {
  mount -t tmpfs -o size=2m,mode=0755 bbkit-dest "$TEST_DIR/full"
  chown "$U" "$TEST_DIR/full"
  # An old result at the destination must survive the failure whole.
  as_user sh -c "printf 'old result' >'$TEST_DIR/full/r1'"
  bb-pool alloc --job 43 --user "$U" --bb "#BB_LUA capacity=1G #BB_LUA stage_out type=directory source=out destination=$TEST_DIR/full" >/dev/null
  buf="$(bbdir $TEST_DIR/nvme/job/main.43.1)"
  bb-stage pre-run --job 43
  as_user mkdir "$buf/out"
  as_user sh -c "head -c 1500K /dev/urandom >'$buf/out/r1'; head -c 1500K /dev/urandom >'$buf/out/r2'"
  bb-stage post-run --job 43
  run bb-stage out --job 43
  assert_failure 74
  assert_output --partial "no space left on device"
  assert_output --partial "$TEST_DIR/full/"
  assert_output --partial "pool 'nvme'"
  [ "$(state_of 43)" = staging-out ]
  # Nothing partial under a final name, no temporary left, the old file whole.
  [ "$(cat "$TEST_DIR/full/r1")" = "old result" ]
  [ ! -e "$TEST_DIR/full/r2" ]
  [ -z "$(ls -A "$TEST_DIR/full" | grep -v '^r1$')" ]
  # The buffer and its data are kept.
  [ "$(stat -c %s "$buf/out/r1")" -eq 1536000 ]
  run bb-stage out --job 43
  assert_failure 69
  assert_output --partial "--retry"
  mount -o remount,size=16m "$TEST_DIR/full"
  run bb-stage out --job 43 --retry
  assert_success
  [ "$(state_of 43)" = staged-out ]
  cmp "$buf/out/r1" "$TEST_DIR/full/r1"
  cmp "$buf/out/r2" "$TEST_DIR/full/r2"
  bb-teardown --job 43 >/dev/null
  run bb-pool check
  assert_success
}
