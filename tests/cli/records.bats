#!/usr/bin/env bats
# Root trusts no record it did not check (bbkit(7), SECURITY). The state owner (here a test
# account, as a site's SlurmUser would be) owns state.db, run/, progress/ and log/; root, which
# the tools run as, acts only on rows that carry its seal and writes nothing through what the
# owner planted. Each test is an attack by the owner that worked before its defence.

bats_require_minimum_version 1.5.0
load common

setup() {
  staging_setup
  OWNER=$(test_user bbkit-stateowner)
  rm -rf "$TEST_DIR/state"
  write_config "state_owner = \"$OWNER\""
  bb-pool init nvme >/dev/null
  bb-pool init small >/dev/null
  DB="$TEST_DIR/state/state.db"
  # Where the owner would have root write: a root-only directory nobody else may touch.
  ROOTONLY="$TEST_DIR/rootonly"
  mkdir -m 700 "$ROOTONLY"
  echo in >"$TEST_DIR/pfs/in.txt"
  chown "$U" "$TEST_DIR/pfs/in.txt"
  cat >"$TEST_DIR/job.sh" <<JOB
#!/bin/sh
#BB_LUA capacity=1GiB
#BB_LUA stage_in type=file source=$TEST_DIR/pfs/in.txt destination=in.txt
#BB_LUA stage_out type=file source=out.txt destination=$TEST_DIR/pfs/out.txt
JOB
}

teardown() {
  [ -z "${SWAPPER:-}" ] || kill "$SWAPPER" 2>/dev/null || true
  [ -z "${VICTIM:-}" ] || kill "$VICTIM" 2>/dev/null || true
  [ -z "${HOLDER:-}" ] || kill "$HOLDER" 2>/dev/null || true
  common_teardown
}

# as_owner_sql SQL: the state owner changes state.db, as it may.
as_owner_sql() {
  runuser -u "$OWNER" -- sqlite3 "$DB" "$1"
}

# The owner's forgery of job 1's record: root's uid and group, and a stage-out destination in
# a directory only root may write.
forge_job_1() {
  as_owner_sql "UPDATE buffers SET uid = 0, gid = 0,
      staging = replace(staging, '$TEST_DIR/pfs/out.txt', '$ROOTONLY/forged')
      WHERE job_id = 1"
}

job_dir() {
  bb-stage --job "$1" paths | sed -n 's/^BB_JOB_DIR=//p'
}

@test "a lifecycle works when the state owner is not root: root seals what it writes" {
  bb-pool alloc --job 1 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  bb-stage --job 1 in
  bb-stage --job 1 pre-run
  dir=$(job_dir 1)
  runuser -u "$U" -- sh -c "echo out >'$dir/out.txt'"
  bb-stage --job 1 post-run
  bb-stage --job 1 out
  bb-teardown --job 1
  assert_file_exists "$TEST_DIR/pfs/out.txt"
  # Every row carries a seal: 64 hex digits.
  run sqlite3 "$DB" "SELECT COUNT(*) FROM buffers WHERE length(seal) <> 64"
  assert_output 0
  run -0 bb-pool check
}

@test "a record the state owner changed is refused by every root action on it (77, one line), and nothing is written" {
  bb-pool alloc --job 1 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  forge_job_1
  local action
  for action in "bb-stage --job 1 in" "bb-stage --job 1 pre-run" "bb-stage --job 1 post-run" \
    "bb-stage --job 1 out" "bb-stage --job 1 paths" "bb-stage --job 1 end" "bb-teardown --job 1"; do
    run -77 $action
    assert_output "${action%% *}: record of buffer main.1.1 in state.db does not carry root's seal: it was changed outside bbkit, so root does not act on it (bbkit(7), SECURITY; bb-pool check lists it)"
  done
  run ls -A "$ROOTONLY"
  assert_output ""
  # The record is as the owner left it: nothing acted on it.
  run sqlite3 "$DB" "SELECT state, uid FROM buffers WHERE job_id = 1"
  assert_output "allocated|0"
}

@test "root's uid and a destination of root's, forged after pre-run, get the owner nothing" {
  bb-pool alloc --job 1 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  bb-stage --job 1 in
  bb-stage --job 1 pre-run
  dir=$(job_dir 1)
  runuser -u "$U" -- sh -c "echo '* * * * * root echo owned' >'$dir/out.txt'"
  forge_job_1
  run -77 bb-stage --job 1 post-run
  run -77 bb-stage --job 1 out
  assert_file_not_exists "$ROOTONLY/forged"
}

@test "an edit of any column breaks the seal: size, directory, state, lock holder, user" {
  local column
  for column in "allocated_bytes = allocated_bytes * 2" "directory = '../../rootonly'" \
    "state = 'running'" "lock_pid = 1, lock_start = 1" "user = 'root'"; do
    bb-pool alloc --job 7 --user "$U" --capacity 1GiB >/dev/null
    as_owner_sql "UPDATE buffers SET $column WHERE job_id = 7"
    run -77 bb-teardown --job 7
    assert_output --partial "does not carry root's seal"
    # Out of the way for the next round, as an administrator would.
    sqlite3 "$DB" "DELETE FROM buffers WHERE job_id = 7"
    rm -rf "$TEST_DIR"/nvme/job/main.7.*
  done
}

@test "recover and check leave a forged record and what it names alone; check lists it" {
  bb-pool alloc --job 1 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  bb-pool alloc --job 2 --user "$U" --capacity 1GiB >/dev/null
  dir1=$(sqlite3 "$DB" "SELECT directory FROM buffers WHERE job_id = 1")
  forge_job_1
  run -0 bb-pool recover
  assert_output --partial "record of buffer main.1.1 in state.db does not carry root's seal"
  run -1 bb-pool check --repair
  assert_output --partial "forged-record: pool nvme: main.1.1: its record in state.db does not carry root's seal"
  refute_output --partial "orphan-directory"
  assert_dir_exists "$TEST_DIR/nvme/$dir1"
  # The other buffer is served as before.
  bb-teardown --job 2
  run -1 bb-pool check --json
  assert_output --partial '"forged-record"'
}

@test "a row the state owner adds is never root's: a buffer of uid 0 copied from a sealed one" {
  bb-pool alloc --job 1 --user "$U" --capacity 1GiB >/dev/null
  as_owner_sql "INSERT INTO buffers (key, cluster, job_id, incarnation, pool, requested_bytes,
      allocated_bytes, uid, gid, user, state, directory, created, seal, temp_token)
      SELECT 'main.9.1', cluster, 9, 1, pool, requested_bytes, allocated_bytes, 0, 0, 'root',
      'allocated', 'job/main.9.1', created, seal, temp_token FROM buffers WHERE job_id = 1"
  run -77 bb-stage --job 9 in
  assert_output --partial "record of buffer main.9.1 in state.db does not carry root's seal"
  run -77 bb-teardown --job 9
}

@test "the record key is root's: one another user may read or change is refused (78)" {
  key="$TEST_DIR/record.key"
  assert_file_exists "$key"
  run stat -c '%U %a' "$key"
  assert_output "root 400"
  chmod 0444 "$key"
  run -78 bb-pool alloc --job 3 --user "$U" --capacity 1GiB
  assert_output "bb-pool: record key $key may be read by group or others (chmod 0400 $key)"
  chmod 0400 "$key"
  chown "$OWNER" "$key"
  run -78 bb-pool alloc --job 3 --user "$U" --capacity 1GiB
  assert_output --partial "record key"
  chown root "$key"
}

@test "a run lock that names another process is not believed: teardown stops nobody it did not start" {
  bb-pool alloc --job 1 --user "$U" --capacity 1GiB >/dev/null
  # A process of root's that the owner would have root stop.
  sleep 300 &
  VICTIM=$!
  start=$(awk '{print $22}' "/proc/$VICTIM/stat")
  lock="$TEST_DIR/state/run/main.1.1.lock"
  runuser -u "$OWNER" -- sh -c "touch '$lock' && setfattr -n user.bbkit.holder -v '$VICTIM $start' '$lock'"
  runuser -u "$OWNER" -- flock "$lock" sleep 30 &
  HOLDER=$!
  sleep 0.5
  run bb-teardown --job 1 --hurry
  kill -0 "$VICTIM"
}

@test "root writes nothing through what the owner planted in run/, log/ or progress/" {
  bb-pool alloc --job 1 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  echo precious >"$ROOTONLY/target"
  # A hard link where root appends its audit lines (the owner makes one where the kernel's
  # protected_hardlinks is off; root stands in for it here).
  rm -f "$TEST_DIR/state/log/audit.log"
  ln "$ROOTONLY/target" "$TEST_DIR/state/log/audit.log"
  bb-pool alloc --job 2 --user "$U" --capacity 1GiB >/dev/null
  run cat "$ROOTONLY/target"
  assert_output precious
  # A run lock that is a hard link to root's file is refused, not written.
  rm -f "$TEST_DIR/state/run/main.1.1.lock"
  ln "$ROOTONLY/target" "$TEST_DIR/state/run/main.1.1.lock"
  run -77 bb-stage --job 1 in
  assert_output --partial "links (a hard link to a file elsewhere?)"
  run cat "$ROOTONLY/target"
  assert_output precious
  rm -f "$TEST_DIR/state/run/main.1.1.lock"
  # progress/ swapped for a symlink to a directory of root's: refused, or written around.
  mv "$TEST_DIR/state/progress" "$TEST_DIR/state/progress.real"
  runuser -u "$OWNER" -- ln -s "$ROOTONLY" "$TEST_DIR/state/progress"
  run bb-stage --job 1 in
  run ls -A "$ROOTONLY"
  assert_output target
}

@test "state.db's WAL as a symlink or a second link is not opened" {
  bb-pool alloc --job 1 --user "$U" --capacity 1GiB >/dev/null
  echo precious >"$ROOTONLY/target"
  rm -f "$DB-wal"
  ln -s "$ROOTONLY/target" "$DB-wal"
  run bb-pool alloc --job 2 --user "$U" --capacity 1GiB
  [ "$status" -ne 0 ]
  rm -f "$DB-wal"
  ln "$ROOTONLY/target" "$DB-wal"
  run bb-pool alloc --job 2 --user "$U" --capacity 1GiB
  [ "$status" -ne 0 ]
  run cat "$ROOTONLY/target"
  assert_output precious
  rm -f "$DB-wal"
}

@test "reap and publish pass over a forged record, and serve the others" {
  bb-pool alloc --job 1 --user "$U" --capacity 1GiB >/dev/null
  bb-teardown --job 1 >/dev/null
  # The owner puts the ended buffer back into the trash accounts, under root's uid.
  as_owner_sql "UPDATE buffers SET reaped = 0, uid = 0 WHERE job_id = 1"
  run -0 bb-pool reap
  run sqlite3 "$DB" "SELECT reaped, uid FROM buffers WHERE job_id = 1"
  assert_output "0|0"
  # Publishing (every writing command does it) goes on for the others.
  bb-pool alloc --job 2 --user "$U" --capacity 1GiB >/dev/null
  run -0 bb-stat --json sessions
  refute_output --partial 'main.1.1'
  assert_output --partial 'main.2.1'
}

# The owner's loop: public/, public/buffers/, public/buffers/UID and public/.owner/ swapped for
# symlinks to a directory of root's and back, over and over. Root may make a directory anew in
# the moment one is gone (a writer sets up public/ when missing): the owner then drops the old.
swap_public_loop() {
  runuser -u "$OWNER" -- bash -c '
    cd "$1" || exit 1
    while :; do
      for d in public public/buffers "public/buffers/$3" public/.owner; do
        mv -T "$d" "$d.real" 2>/dev/null || continue
        ln -sT "$2" "$d" 2>/dev/null
        sleep "0.00$((RANDOM % 5))"
        [ -L "$d" ] && rm -f "$d"
        mv -T "$d.real" "$d" 2>/dev/null || rm -rf "$d.real"
      done
    done' _ "$TEST_DIR/state" "$ROOTONLY" "$1" &
  SWAPPER=$!
}

# Stops the loop and puts back what it left, whichever step it was at.
put_public_back() {
  kill "$SWAPPER" 2>/dev/null || true
  wait "$SWAPPER" 2>/dev/null || true
  SWAPPER=
  local d
  for d in public public/buffers "public/buffers/$1" public/.owner; do
    d="$TEST_DIR/state/$d"
    [ -L "$d" ] && rm -f "$d"
    [ -e "$d.real" ] && { mv -T "$d.real" "$d" 2>/dev/null || rm -rf "$d.real"; }
  done
  return 0
}

@test "root writes nothing through public/ or its directories swapped for symlinks while it runs" {
  local uid i action out
  uid=$(id -u "$U")
  bb-pool alloc --job 1 --user "$U" --capacity 1GiB >/dev/null  # public/buffers/UID exists
  swap_public_loop "$uid"
  for i in $(seq 2 31); do
    for action in "bb-pool alloc --job $i --user $U --capacity 1GiB" "bb-teardown --job $i"; do
      out=$($action 2>&1) && continue
      [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "$action failed with more than one line: $out"
    done
  done
  put_public_back "$uid"
  run ls -A "$ROOTONLY"
  assert_output ""
  # Put back, the state directory serves as before.
  run -0 bb-pool recover
  bb-pool alloc --job 40 --user "$U" --capacity 1GiB >/dev/null
  assert_file_exists "$TEST_DIR/state/public/buffers/$uid/main.40.1.json"
  run ls -A "$ROOTONLY"
  assert_output ""
}
