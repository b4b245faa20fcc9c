#!/usr/bin/env bats
# bb-teardown: ending job buffers and persistent buffers, and its error paths.

load common

setup() {
  common_setup
  mkdir -p "$TEST_DIR/nvme" "$TEST_DIR/small"
  U=$(test_user)
  bb-pool init nvme >/dev/null
}
teardown() {
  [ -z "${stager:-}" ] || kill -9 "$stager" 2>/dev/null || true
  common_teardown
}

@test "help documents every option" {
  run bb-teardown --help
  assert_success
  for opt in --job --persistent --hurry --force --json --config --state-dir; do
    assert_output --partial -- "$opt"
    grep -q -- "${opt//-/\\\\-}" "$BBKIT_SOURCE_DIR/man/man1/bb-teardown.1" || fail "man page lacks $opt"
  done
}

@test "neither --job nor --persistent is a usage error; both too" {
  run bb-teardown
  assert_failure 64
  run bb-teardown --job 1 --persistent x
  assert_failure 64
}

@test "teardown moves the directory away, records complete and releases the space" {
  bb-pool alloc --job 3 --user "$U" --capacity 1G >/dev/null
  echo data >"$(bbdir $TEST_DIR/nvme/job/main.3.1)/f"
  run bb-teardown --job 3
  assert_success
  assert_output --partial "torn down: main.3.1"
  assert_not_exist "$(bbdir $TEST_DIR/nvme/job/main.3.1)"
  assert_not_exist "$TEST_DIR/state/env/main.3.1.env"
  assert_not_exist "$TEST_DIR/state/run/main.3.1.lock"
  run bb-stat job 3 --json
  assert_output --partial '"state": "complete"'
  grep -q "action=teardown buffer=main.3.1" "$TEST_DIR/state/log/audit.log"
}

@test "unknown or already torn down exits 0 with a note" {
  run bb-teardown --job 77
  assert_success
  assert_output --partial "note: job 77 has no burst buffer"
  bb-pool alloc --job 3 --user "$U" --capacity 1G >/dev/null
  bb-teardown --job 3 >/dev/null
  run bb-teardown --job 3
  assert_success
  assert_output --partial "already torn down"
}

@test "a symlink planted in place of the buffer is moved, never followed" {
  bb-pool alloc --job 4 --user "$U" --capacity 1G >/dev/null
  mkdir "$TEST_DIR/victim"; echo precious >"$TEST_DIR/victim/file"
  buf="$(bbdir $TEST_DIR/nvme/job/main.4.1)"
  rmdir "$buf"
  ln -s "$TEST_DIR/victim" "$buf"
  run bb-teardown --job 4
  assert_success
  assert_file_exists "$TEST_DIR/victim/file"
}

@test "symlinks inside the buffer are removed, their targets kept" {
  bb-pool alloc --job 4 --user "$U" --capacity 1G >/dev/null
  mkdir "$TEST_DIR/victim"; echo precious >"$TEST_DIR/victim/file"
  ln -s "$TEST_DIR/victim" "$(bbdir $TEST_DIR/nvme/job/main.4.1)/link"
  ln -s "$TEST_DIR/victim/file" "$(bbdir $TEST_DIR/nvme/job/main.4.1)/flink"
  run bb-teardown --job 4
  assert_success
  assert_file_exists "$TEST_DIR/victim/file"
}

@test "a mount point inside a buffer stops its removal: nothing beneath it is deleted" {
  bb-pool alloc --job 6 --user "$U" --capacity 1G >/dev/null
  b="$(bbdir $TEST_DIR/nvme/job/main.6.1)"
  mkdir -p "$TEST_DIR/site/tree" "$b/mnt"
  echo precious >"$TEST_DIR/site/tree/file"
  chown "$U" "$b/mnt"
  # Site tooling's bind mount, in a private mount namespace so that it ends with the test.
  run unshare -m --propagation private sh -c 'mount --bind "$1" "$2" && exec bb-teardown --job 6' \
    sh "$TEST_DIR/site" "$b/mnt"
  assert_success
  assert_output --partial "a mount point (bbkit never removes across a mount"
  assert_file_exists "$TEST_DIR/site/tree/file"
  [ -n "$(ls "$TEST_DIR/nvme/trash")" ]  # waits there, still charged
  run bb-pool reap --budget 5           # outside the namespace nothing is mounted there
  assert_success
  assert_file_exists "$TEST_DIR/site/tree/file"
  [ -z "$(ls "$TEST_DIR/nvme/trash")" ]
}

@test "teardown never deletes as root another user's directory the buffer's owner could not" {
  bb-pool alloc --job 7 --user "$U" --capacity 1G >/dev/null
  # A directory of the owner's holding one of nobody's, moved by the owner into the buffer.
  mkdir -p "$TEST_DIR/home/proj/theirs" "$TEST_DIR/home/proj/empty-theirs"
  echo theirs >"$TEST_DIR/home/proj/theirs/file"
  echo mine >"$TEST_DIR/home/proj/mine"
  chown "$U" "$TEST_DIR/home" "$TEST_DIR/home/proj" "$TEST_DIR/home/proj/mine"
  chown -R nobody "$TEST_DIR/home/proj/theirs" "$TEST_DIR/home/proj/empty-theirs"
  runuser -u "$U" -- mv "$TEST_DIR/home/proj" "$(bbdir $TEST_DIR/nvme/job/main.7.1)/proj"
  run bb-teardown --job 7
  assert_success
  assert_output --partial "could not delete"
  kept=$(ls -d "$TEST_DIR"/nvme/quarantine/*.kept.*)
  [ "$(echo "$kept" | wc -l)" = 1 ]
  [ "$(stat -c %U "$kept")" = nobody ]
  assert_file_exists "$kept/file"
  assert_not_exist "$(bbdir $TEST_DIR/nvme/job/main.7.1)"
  [ -z "$(ls "$TEST_DIR/nvme/trash")" ]
  grep -q "action=kept buffer=main.7.1 entry=$kept uid=" "$TEST_DIR/state/log/audit.log"
  run bb-pool check --repair
  assert_failure 1
  assert_output --partial "kept-entry"
  assert_file_exists "$kept/file"     # repair never deletes
}

@test "a deep tree is removed completely" {
  bb-pool alloc --job 5 --user "$U" --capacity 1G >/dev/null
  d="$(bbdir $TEST_DIR/nvme/job/main.5.1)"
  for i in $(seq 200); do d="$d/d"; done
  mkdir -p "$d" && touch "$d/leaf"
  run bb-teardown --job 5 --json
  assert_success
  assert_output --partial '"reaped": true'
  [ -z "$(ls -A "$TEST_DIR/nvme/trash")" ]
}

@test "a live stager is stopped through its run lock; --hurry does not wait" {
  bb-pool alloc --job 6 --user "$U" --capacity 1G >/dev/null
  # A stand-in stager: holds the run lock and records itself as bb-stage would.
  # (read is a builtin: no subshell, so the start time is this very process's.)
  # It tells the test it is ready only once it holds the lock and has recorded itself; its
  # sleep does not keep bats' descriptor 3, so a failure cannot stall the suite.
  ( exec 9>"$TEST_DIR/state/run/main.6.1.lock"; flock 9
    read -r -a stat </proc/$BASHPID/stat
    echo "$BASHPID ${stat[21]}" >&9; : >"$TEST_DIR/stand-in.ready"; exec sleep 300 ) 3>&- &
  stager=$!
  for _ in $(seq 600); do [ -e "$TEST_DIR/stand-in.ready" ] && break; sleep 0.05; done
  [ -e "$TEST_DIR/stand-in.ready" ]
  run timeout 20 bb-teardown --job 6 --hurry
  assert_success
  ! kill -0 "$stager" 2>/dev/null
}

@test "a teardown that cannot move the directory leaves teardown-fail, still charged" {
  bb-pool alloc --job 7 --user "$U" --capacity 1G >/dev/null
  chattr +i "$TEST_DIR/nvme/job" 2>/dev/null || skip "no chattr on this file system"
  run bb-teardown --job 7
  chattr -i "$TEST_DIR/nvme/job"
  assert_failure
  assert_output --partial "stays charged"
  run bb-stat job 7 --json
  assert_output --partial '"state": "teardown-fail"'
  run bb-teardown --job 7
  assert_success
}

@test "a persistent buffer in use needs --force" {
  bb-pool alloc --persistent p1 --capacity 1G --owner "$U" >/dev/null
  bb-pool alloc --job 8 --user "$U" --bb '#DW jobdw capacity=1G #DW persistentdw name=p1' >/dev/null
  run bb-teardown --persistent p1
  assert_failure 73
  run bb-teardown --persistent p1 --force
  assert_success
  run bb-teardown --persistent p1
  assert_success
  assert_output --partial "does not exist"
}

@test "killed in the middle, teardown is finished by recover" {
  bb-pool alloc --job 9 --user "$U" --capacity 1G >/dev/null
  sqlite3 "$TEST_DIR/state/state.db" "UPDATE buffers SET state='teardown' WHERE key='main.9.1'"
  run bb-pool recover
  assert_success
  assert_output --partial "main.9.1: teardown -> finished"
  assert_not_exist "$(bbdir $TEST_DIR/nvme/job/main.9.1)"
}
