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

# SQL: the row's staging column with the stage-out destination moved into a directory only root
# may write (the record holds its paths in hex).
forged_staging() {
  echo "replace(staging, lower(hex('$TEST_DIR/pfs/out.txt')), lower(hex('$ROOTONLY/forged')))"
}

# The owner's forgery of job 1's record: root's uid and group, and a stage-out destination in
# a directory only root may write.
forge_job_1() {
  as_owner_sql "UPDATE buffers SET uid = 0, gid = 0, staging = $(forged_staging) WHERE job_id = 1"
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

@test "a schema object the owner adds makes every root command refuse (77, one line); check --repair rebuilds from the sealed records" {
  bb-pool alloc --job 1 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  bb-pool alloc --job 2 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  forge_job_1
  as_owner_sql "CREATE TRIGGER t AFTER UPDATE OF state ON buffers BEGIN
      UPDATE buffers SET uid = 0, gid = 0 WHERE id = NEW.id; END"
  local action
  for action in "bb-stage --job 2 in" "bb-teardown --job 2" "bb-pool alloc --job 3 --user $U --capacity 1GiB" \
    "bb-pool recover" "bb-stat burst"; do
    run -77 $action
    assert_output "${action%% *}: state.db holds a trigger 't' that bbkit did not create: root runs and trusts nothing another account wrote in it (bbkit(7), SECURITY; bb-pool check --repair rebuilds it from its sealed records)"
  done
  run -1 bb-pool check
  assert_output --partial "foreign-schema"
  assert_output --partial "state.db holds a trigger 't' that bbkit did not create"
  run -0 bb-pool check --repair
  assert_output --partial "state.db rebuilt from 1 sealed record(s), 1 row(s) without root's seal left out"
  run ls "$TEST_DIR/state"
  assert_output --regexp "state\.db\.foreign\.[0-9]+"
  run -0 runuser -u "$OWNER" -- sqlite3 "$DB" "SELECT name FROM sqlite_schema WHERE type = 'trigger'"
  assert_output ""
  # Job 2's buffer goes on; job 1's forged row was not carried over.
  bb-stage --job 2 in
  run -66 bb-stage --job 1 in
  run ls -A "$ROOTONLY"
  assert_output ""
}

@test "a database from before seals is sealed only by bb-pool migrate, as root, and never twice" {
  bb-pool alloc --job 1 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  local version
  version=$(as_owner_sql "PRAGMA user_version")
  as_owner_sql "ALTER TABLE buffers DROP COLUMN seal; ALTER TABLE buffers DROP COLUMN temp_token;
      DROP TABLE controller; DROP INDEX buffers_held; DROP TABLE stage_runs; ALTER TABLE buffers DROP COLUMN held_since; ALTER TABLE buffers DROP COLUMN ended; PRAGMA user_version = 5"
  # Root sealed this state directory: a rewound schema is refused, even to migrate.
  run -77 bb-stage --job 1 in
  assert_output "bb-stage: state.db has schema version 5, older than the version $version root sealed it at: it was replaced or rewound outside bbkit, and root migrates nothing on its owner's word (bbkit(7), SECURITY; bb-pool check --repair rebuilds it from its sealed records)"
  run -77 bb-pool migrate
  # A database from an older bbkit, which root never sealed: only bb-pool migrate seals it.
  rm "$TEST_DIR/record.key.sealed"
  run -77 bb-stage --job 1 in
  assert_output "bb-stage: state.db has schema version 5, from before records were sealed, and its owner is not root: run bb-pool migrate as root once to seal its records (bbkit(7), SECURITY)"
  run -77 runuser -u "$OWNER" -- env BBKIT_CONFIG="$BBKIT_CONFIG" "$(command -v bb-pool)" migrate
  run -0 bb-pool migrate
  assert_output "state.db at schema $version, 1 record(s) sealed"
  bb-stage --job 1 in
  run -0 bb-pool --json migrate
  assert_output --partial '"sealed": 0'
}

@test "state.db and lock are used only as regular files of one link: a planted link is neither opened for writing nor chowned" {
  bb-pool alloc --job 1 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  local f
  for f in lock state.db; do
    runuser -u "$OWNER" -- sh -c "echo mine >'$TEST_DIR/state/mine' && mv '$TEST_DIR/state/$f' '$TEST_DIR/state/$f.saved' && ln '$TEST_DIR/state/mine' '$TEST_DIR/state/$f'"
    run -77 bb-pool alloc --job 2 --user "$U" --capacity 1GiB
    assert_output "bb-pool: $TEST_DIR/state/$f is not a regular file of one link: it was planted outside bbkit, so root does not use it (bbkit(7), SECURITY; move it aside)"
    run cat "$TEST_DIR/state/mine"
    assert_output mine
    runuser -u "$OWNER" -- sh -c "rm '$TEST_DIR/state/$f' '$TEST_DIR/state/mine' && mv '$TEST_DIR/state/$f.saved' '$TEST_DIR/state/$f'"
  done
  bb-pool alloc --job 2 --user "$U" --capacity 1GiB >/dev/null
}

# refused STATUS OUTPUT ACTION: ACTION exited STATUS with OUTPUT, which must be a refusal: 77,
# one line naming state.db.
refused() {
  if [ "$1" -ne 77 ] || [ "$(printf '%s\n' "$2" | wc -l)" -ne 1 ] || [[ $2 != *state.db* ]]; then
    printf 'expected %s refused (77, one line naming state.db), got %s:\n%s\n' "$3" "$1" "$2" >&2
    return 1
  fi
}

# Every file under the test's directory that root made or changed since $TEST_DIR/mark (its
# inode's change time, which no copy of times can set back), outside the state directory and
# the pools, where root's own files live: none, in the tests below.
root_made_elsewhere() {
  find "$TEST_DIR" \( -path "$TEST_DIR/state" -o -path "$TEST_DIR/nvme" \
    -o -path "$TEST_DIR/small" \) -prune -o -user root -cnewer "$TEST_DIR/mark" -print
}

# nothing_written_as_root: the attack got the owner nothing (checked before the exit statuses,
# so that a failure shows what root wrote).
nothing_written_as_root() {
  run ls -A "$ROOTONLY"
  assert_output ""
  run root_made_elsewhere
  assert_output ""
}

# forged_or_refused STATUS OUTPUT: bb-pool check listed job 1's row as forged or the file's
# schema as foreign (1), or refused the file in one line (77 or 78); it never found the row
# sealed.
forged_or_refused() {
  case $1 in
    1) [[ $2 == *"forged-record: pool nvme: main.1.1"* || $2 == *"foreign-schema: state.db"* ]] ||
      { printf 'bb-pool check does not list main.1.1 as forged:\n%s\n' "$2" >&2; return 1; } ;;
    77 | 78) [ "$(printf '%s\n' "$2" | wc -l)" -eq 1 ] ||
      { printf 'bb-pool check refused in more than one line:\n%s\n' "$2" >&2; return 1; } ;;
    *) printf 'bb-pool check exited %s:\n%s\n' "$1" "$2" >&2; return 1 ;;
  esac
}

@test "a trigger the state owner adds to state.db makes root neither rewrite nor seal a row: the stage-out writes nothing as root" {
  bb-pool alloc --job 1 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  bb-stage --job 1 in
  bb-stage --job 1 pre-run
  dir=$(job_dir 1)
  runuser -u "$U" -- sh -c "echo '* * * * * root echo owned' >'$dir/out.txt'"
  # When root's own UPDATE moves the row to post-run, SQLite runs the owner's code in root's
  # transaction: the row becomes root's, with a stage-out into root's directory, and root seals
  # the row as it reads it back.
  as_owner_sql "CREATE TRIGGER hostile AFTER UPDATE OF state ON buffers
      WHEN NEW.state = 'post-run' BEGIN
        UPDATE buffers SET uid = 0, gid = 0, user = 'root', staging = $(forged_staging)
          WHERE id = NEW.id;
      END"
  touch "$TEST_DIR/mark"
  run bb-stage --job 1 post-run
  post_run=("$status" "$output")
  run bb-stage --job 1 out
  out=("$status" "$output")
  nothing_written_as_root
  # The first root action that met the owner's trigger refused the file, and so does the next.
  refused "${post_run[@]}" post-run
  refused "${out[@]}" out
}

@test "a state.db the owner downgraded to the schema before seals is not migrated and sealed by root: the forged row stays refused" {
  bb-pool alloc --job 1 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  bb-stage --job 1 in
  bb-stage --job 1 pre-run
  dir=$(job_dir 1)
  runuser -u "$U" -- sh -c "echo '* * * * * root echo owned' >'$dir/out.txt'"
  bb-stage --job 1 post-run
  # The owner makes the row root's, with a stage-out into root's directory, and makes the file
  # look as it did before seals existed, for root to "migrate" and seal.
  forge_job_1
  as_owner_sql "ALTER TABLE buffers DROP COLUMN seal; ALTER TABLE buffers DROP COLUMN temp_token;
      DROP TABLE controller; DROP INDEX buffers_held; DROP TABLE stage_runs; ALTER TABLE buffers DROP COLUMN held_since; ALTER TABLE buffers DROP COLUMN ended; PRAGMA user_version = 5"
  touch "$TEST_DIR/mark"
  run bb-stage --job 1 out
  out=("$status" "$output")
  run bb-pool check
  check=("$status" "$output")
  # Whatever root runs next, the row stays unsealed: recover, the stage-out again, check again.
  run bb-pool recover
  run bb-stage --job 1 out
  again=("$status" "$output")
  run bb-pool check
  check_again=("$status" "$output")
  nothing_written_as_root
  refused "${out[@]}" out
  forged_or_refused "${check[@]}"
  [ "${again[0]}" -ne 0 ] && [ "$(printf '%s\n' "${again[1]}" | wc -l)" -eq 1 ] ||
    fail "the second stage-out exited ${again[0]}: ${again[1]}"
  forged_or_refused "${check_again[@]}"
}

# The owner's loop: public/, public/buffers/, public/buffers/UID, public/.owner/ and env/
# swapped for symlinks to a directory of root's and back, over and over. Root may make a directory anew in
# the moment one is gone (a writer sets up public/ when missing): the owner then drops the old.
swap_public_loop() {
  runuser -u "$OWNER" -- bash -c '
    cd "$1" || exit 1
    while :; do
      for d in public public/buffers "public/buffers/$3" public/.owner env; do
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
  for d in public public/buffers "public/buffers/$1" public/.owner env; do
    d="$TEST_DIR/state/$d"
    [ -L "$d" ] && rm -f "$d"
    [ -e "$d.real" ] && { mv -T "$d.real" "$d" 2>/dev/null || rm -rf "$d.real"; }
  done
  return 0
}

@test "root writes nothing through public/, its directories or env/ swapped for symlinks while it runs" {
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
