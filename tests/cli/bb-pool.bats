#!/usr/bin/env bats
# bb-pool: every command and error path, with exit codes and messages.

load common

setup() {
  common_setup
  mkdir -p "$TEST_DIR/nvme" "$TEST_DIR/small"
  U=$(test_user)
  bb-pool recover >/dev/null  # a writing command creates the state directory
}
teardown() {
  [ -z "${MOUNTED:-}" ] || umount "$MOUNTED"
  common_teardown
}

init_pools() { bb-pool init nvme >/dev/null && bb-pool init small >/dev/null; }

used_of() {  # used bytes of a pool, from bb-pool show --json
  bb-pool show "$1" --json | sed -n 's/.*"used": \([0-9]*\).*/\1/p'
}

@test "help lists every subcommand and bb-pool(1) documents them" {
  run bb-pool --help
  assert_success
  for sub in list show init alloc drain resume check recover reap; do
    assert_output --partial "$sub"
    grep -q "^\.B $sub\|^\.SS $sub\|^\.TP\n.B $sub" "$BBKIT_SOURCE_DIR/man/man1/bb-pool.1" ||
      grep -q "$sub" "$BBKIT_SOURCE_DIR/man/man1/bb-pool.1" || fail "man page lacks $sub"
  done
  run bb-pool alloc --help
  for opt in --job --user --pool --capacity --script --bb --persistent --owner --access --type \
             --expires --wait --json; do
    assert_output --partial -- "$opt"
    grep -q -- "${opt//-/\\\\-}" "$BBKIT_SOURCE_DIR/man/man1/bb-pool.1" || fail "man page lacks $opt"
  done
}

@test "a subcommand is required, and a misspelt one is named with the ones there are" {
  run bb-pool
  assert_failure 64
  run bb-pool lst
  assert_failure 64
  assert_output "bb-pool: unknown subcommand 'lst' (list, show, init, alloc, drain, resume, check, health, recover, reap, reconcile, migrate, takeover) (see bb-pool --help)"
  run bb-pool --config "$BBKIT_CONFIG" $'l\x1bst' --json
  assert_failure 64
  assert_output --partial "unknown subcommand 'l\\x1bst'"
}

@test "list shows an uninitialised pool, init makes it ready and is idempotent" {
  run bb-pool list
  assert_success
  assert_output --partial "uninitialised"
  run bb-pool init nvme
  assert_success
  assert_file_exists "$TEST_DIR/nvme/.bbkit-pool"
  assert_dir_exists "$TEST_DIR/nvme/job"
  assert_dir_exists "$TEST_DIR/nvme/persistent"
  uuid=$(sed -n 's/^uuid=//p' "$TEST_DIR/nvme/.bbkit-pool")
  run bb-pool init nvme
  assert_success
  assert_output --partial "$uuid"
}

@test "init of a pool directory that is missing exits 69" {
  run bb-pool init nvme --config "$BBKIT_CONFIG"
  rmdir "$TEST_DIR/small"
  run bb-pool init small
  assert_failure 69
  assert_output --partial "does not exist"
}

@test "an unknown pool exits 66" {
  run bb-pool init nope
  assert_failure 66
  run bb-pool show nope
  assert_failure 66
}

@test "alloc reserves rounded space and creates the user's 0700 directory" {
  init_pools
  run bb-pool alloc --job 42 --user "$U" --capacity 1500M --json
  assert_success
  assert_output --partial '"allocated": 2147483648'
  assert_output --partial '"key": "main.42.1"'
  dir="$(bbdir $TEST_DIR/nvme/job/main.42.1)"
  [ "$(stat -c '%U %a' "$dir")" = "$U 700" ]
  [ "$(used_of nvme)" = 2147483648 ]
  grep -q "^BB_JOB_DIR=$dir$" "$TEST_DIR/state/env/main.42.1.env"
  grep -q "action=alloc buffer=main.42.1" "$TEST_DIR/state/log/audit.log"
}

@test "alloc takes pool, capacity and staging from a job script" {
  init_pools
  printf '#!/bin/bash\n#BB_LUA pool=small capacity=3K\n#BB_LUA stage_out type=directory source=out destination=/tmp/%%j\n' >"$TEST_DIR/job.sh"
  run bb-pool alloc --job 7 --user "$U" --script "$TEST_DIR/job.sh" --json
  assert_success
  assert_output --partial '"pool": "small"'
  assert_output --partial '"allocated": 3072'
}

@test "alloc --script reads a script of [limits] script_size bytes and refuses one byte more with 65" {
  init_pools
  sized_script "$TEST_DIR/at.sh" 4194304 '#BB_LUA pool=small capacity=1K'
  run bb-pool alloc --job 8 --user "$U" --script "$TEST_DIR/at.sh" --json
  assert_success
  assert_output --partial '"allocated": 1024'
  sized_script "$TEST_DIR/over.sh" 4194305 '#BB_LUA pool=small capacity=1K'
  run bb-pool alloc --job 9 --user "$U" --script "$TEST_DIR/over.sh"
  assert_failure 65
  assert_output "$(script_size_message bb-pool "$TEST_DIR/over.sh" 4194305 4194304)"
  truncate -s 200M "$TEST_DIR/huge.sh"
  limit="ulimit -v 102400;"
  [ "${BBKIT_SANITIZE:-}" = 1 ] && limit=  # sanitizers reserve terabytes of address space
  run timeout 20 bash -c "$limit exec bb-pool alloc --job 10 --user $U --script '$TEST_DIR/huge.sh'"
  assert_failure 65
  [ "$(used_of small)" = 1024 ]
}

@test "an identical alloc is idempotent, a different one exits 73" {
  init_pools
  bb-pool alloc --job 42 --user "$U" --capacity 1G >/dev/null
  run bb-pool alloc --job 42 --user "$U" --capacity 1G
  assert_success
  assert_output --partial "already allocated"
  [ "$(used_of nvme)" = 1073741824 ]
  run bb-pool alloc --job 42 --user "$U" --capacity 2G
  assert_failure 73
  assert_output --partial "tear it down first"
}

@test "an alloc after teardown starts a new incarnation" {
  init_pools
  bb-pool alloc --job 42 --user "$U" --capacity 1G >/dev/null
  bb-teardown --job 42 >/dev/null
  run bb-pool alloc --job 42 --user "$U" --capacity 1G --json
  assert_success
  assert_output --partial '"incarnation": 2'
  assert_dir_exists "$(bbdir $TEST_DIR/nvme/job/main.42.2)"
}

@test "a full pool exits 75 with BurstBufferResources" {
  init_pools
  bb-pool alloc --job 1 --user "$U" --pool small --capacity 3K >/dev/null
  run bb-pool alloc --job 2 --user "$U" --pool small --capacity 2K
  assert_failure 75
  assert_output --partial "BurstBufferResources"
  [ "$(used_of small)" = 3072 ]
}

@test "larger than the pool's total exits 65: it can never be satisfied" {
  init_pools
  run bb-pool alloc --job 1 --user "$U" --pool small --capacity 5K
  assert_failure 65
  assert_output --partial "can never be satisfied"
}

@test "--wait queues in FIFO order and is granted when space frees" {
  init_pools
  bb-pool alloc --job 1 --user "$U" --pool small --capacity 3K >/dev/null
  bb-pool alloc --job 2 --user "$U" --pool small --capacity 2K --wait 20 >"$TEST_DIR/w2" 2>&1 &
  w2=$!
  for _ in $(seq 50); do grep -q '"queued": 1' <(bb-pool show small --json) && break; sleep 0.1; done
  run bb-stat job 2 --json
  assert_output --partial "BurstBufferResources"
  # A later request that would fit after teardown still waits behind the queue head.
  bb-teardown --job 1 >/dev/null
  wait "$w2"
  grep -q "allocated: main.2.1" "$TEST_DIR/w2"
  [ "$(used_of small)" = 2048 ]
}

@test "--wait takes seconds; a word is a usage error" {
  init_pools
  run bb-pool alloc --job 2 --user "$U" --pool small --capacity 2K --wait soon
  assert_failure 64
  assert_output --partial -- "--wait"
}

@test "--wait gives up after its time with 75 and leaves the queue" {
  init_pools
  bb-pool alloc --job 1 --user "$U" --pool small --capacity 3K >/dev/null
  run bb-pool alloc --job 2 --user "$U" --pool small --capacity 2K --wait 1
  assert_failure 75
  assert_output --partial "timed out"
  run bb-pool show small --json
  assert_output --partial '"queued": 0'
}

@test "--wait default waits timeouts.queue seconds, then 75" {
  printf '\n[timeouts]\nqueue = 1\n' >>"$BBKIT_CONFIG"
  init_pools
  bb-pool alloc --job 1 --user "$U" --pool small --capacity 3K >/dev/null
  start=$(date +%s%N)
  run bb-pool alloc --job 2 --user "$U" --pool small --capacity 2K --wait default
  elapsed=$(( ($(date +%s%N) - start) / 1000000 ))
  assert_failure 75
  assert_output --partial "timed out"
  [ "$elapsed" -ge 900 ] || fail "gave up after ${elapsed} ms, before timeouts.queue"
  [ "$elapsed" -lt 5000 ] || fail "waited ${elapsed} ms, far beyond timeouts.queue = 1"
  run bb-pool show small --json
  assert_output --partial '"queued": 0'
}

@test "--wait none is no limit; --wait default is granted when there is space" {
  init_pools
  run bb-pool alloc --job 1 --user "$U" --pool small --capacity 1K --wait none
  assert_success
  run bb-pool alloc --job 2 --user "$U" --pool small --capacity 1K --wait default
  assert_success
}

@test "a waiter that is killed leaves the queue" {
  init_pools
  bb-pool alloc --job 1 --user "$U" --pool small --capacity 3K >/dev/null
  bb-pool alloc --job 2 --user "$U" --pool small --capacity 2K --wait 60 >/dev/null 2>&1 &
  w=$!
  for _ in $(seq 50); do grep -q '"queued": 1' <(bb-pool show small --json) && break; sleep 0.1; done
  kill -9 "$w"; wait "$w" || true
  run bb-pool alloc --job 3 --user "$U" --pool small --capacity 1K
  assert_success
  run bb-pool show small --json
  assert_output --partial '"queued": 0'
}

@test "drain refuses new allocations with 69 and resume allows them" {
  init_pools
  run bb-pool drain nvme
  assert_success
  run bb-pool alloc --job 1 --user "$U" --capacity 1G
  assert_failure 69
  assert_output --partial "draining"
  run bb-pool list --format slurm-lua
  assert_output --partial '"free":0'
  bb-pool resume nvme
  run bb-pool alloc --job 1 --user "$U" --capacity 1G
  assert_success
}

@test "a pool whose marker is missing or different exits 69 (not mounted?)" {
  init_pools
  mv "$TEST_DIR/nvme/.bbkit-pool" "$TEST_DIR/marker"
  run bb-pool alloc --job 1 --user "$U" --capacity 1G
  assert_failure 69
  assert_output --partial "not mounted"
  printf 'name=nvme\nuuid=00000000-0000-0000-0000-000000000000\n' >"$TEST_DIR/nvme/.bbkit-pool"
  run bb-pool alloc --job 1 --user "$U" --capacity 1G
  assert_failure 69
  run bb-pool check
  assert_failure 1
  assert_output --partial "pool-unavailable"
}

@test "a pool root writable by others is refused with 77" {
  init_pools
  chmod 777 "$TEST_DIR/nvme"
  run bb-pool alloc --job 1 --user "$U" --capacity 1G
  assert_failure 77
  assert_output --partial "writable by group or others"
  chmod 755 "$TEST_DIR/nvme"
  chown "$U" "$TEST_DIR/nvme/job"
  run bb-pool alloc --job 1 --user "$U" --capacity 1G
  assert_failure 77
  assert_output --partial "not root"
}

@test "a state directory open to others is refused with 77" {
  init_pools
  chmod 755 "$TEST_DIR/state"
  run bb-pool list
  assert_failure 77
}

@test "a non-root user cannot use bb-pool on root's state (77)" {
  init_pools
  chmod 644 "$BBKIT_CONFIG"
  run runuser -u "$U" -- env BBKIT_CONFIG="$BBKIT_CONFIG" "$BBKIT_BIN/bb-pool" alloc --job 5 --user "$U" --capacity 1G
  assert_failure 77
}

@test "a corrupt state database exits 78; a newer schema is refused" {
  init_pools
  cp "$TEST_DIR/state/state.db" "$TEST_DIR/good.db"
  rm -f "$TEST_DIR/state/state.db-wal" "$TEST_DIR/state/state.db-shm"
  head -c 4096 /dev/urandom >"$TEST_DIR/state/state.db"
  run bb-pool list
  assert_failure 78
  cp "$TEST_DIR/good.db" "$TEST_DIR/state/state.db"
  sqlite3 "$TEST_DIR/state/state.db" "PRAGMA user_version = 999"
  run bb-pool list
  assert_failure 78
  assert_output --partial "upgrade bbkit"
}

@test "a reader gets an answer while a writer holds the state lock" {
  init_pools
  bb-pool alloc --job 1 --user "$U" --capacity 1G >/dev/null
  # The test holds the lock itself (no background holder to wait for); a reader that took
  # it would give up after the lock timeout, and `timeout` bounds a hang.
  exec 8>>"$TEST_DIR/state/lock"
  flock -n 8
  run timeout 60 bb-pool list --json 8>&-
  assert_success
  assert_output --partial '"used": 1073741824'
  run timeout 60 bb-stat pools 8>&-
  assert_success
  exec 8>&-
}

@test "slurm-lua format counts granules, integers only" {
  init_pools
  bb-pool alloc --job 1 --user "$U" --capacity 3G >/dev/null
  run bb-pool list --format slurm-lua
  assert_success
  assert_output '{"pools":[{"free":97,"granularity":1073741824,"id":"nvme","quantity":100},{"free":4,"granularity":1024,"id":"small","quantity":4}]}'
  run cat "$TEST_DIR/state/pools.json"
  assert_output --partial '"free":97'
}

@test "persistent buffers: root creates, jobs use with a count, destroy needs --force while used" {
  init_pools
  run bb-pool alloc --persistent shared --capacity 2G --owner "$U" --json
  assert_success
  assert_output --partial '"name": "shared"'
  [ "$(stat -c %U "$(bbdir $TEST_DIR/nvme/persistent/main.shared)")" = "$U" ]
  run bb-pool alloc --job 9 --user "$U" --bb '#DW jobdw capacity=1G #DW persistentdw name=shared'
  assert_success
  grep -q "^DW_PERSISTENT_STRIPED_shared=$(bbdir $TEST_DIR/nvme/persistent/main.shared)$" "$TEST_DIR/state/env/main.9.1.env"
  run bb-teardown --persistent shared
  assert_failure 73
  assert_output --partial "--force"
  bb-teardown --job 9 >/dev/null
  run bb-teardown --persistent shared
  assert_success
  assert_not_exist "$(bbdir $TEST_DIR/nvme/persistent/main.shared)"
}

@test "persistent names starting with a digit or holding a slash are refused" {
  init_pools
  run bb-pool alloc --persistent 9lives --capacity 1G
  assert_failure 65
  run bb-pool alloc --persistent a/b --capacity 1G
  assert_failure 65
  run bb-pool alloc --persistent .. --capacity 1G
  assert_failure 65
}

@test "a job cannot use another user's persistent buffer" {
  init_pools
  bb-pool alloc --persistent mine --capacity 1G >/dev/null   # owned by root
  run bb-pool alloc --job 9 --user "$U" --bb '#DW jobdw capacity=1G #DW persistentdw name=mine'
  assert_failure 77
  run bb-pool alloc --job 9 --user "$U" --bb '#DW jobdw capacity=1G #DW persistentdw name=none'
  assert_failure 66
}

@test "expired persistent buffers are listed by check" {
  init_pools
  bb-pool alloc --persistent old --capacity 1G --expires 2001-01-01 >/dev/null
  run bb-pool check
  assert_failure 1
  assert_output --partial "expired-persistent"
  run bb-pool alloc --persistent bad --capacity 1G --expires tomorrow
  assert_failure 64
}

@test "user_capacity limits a user in standalone mode" {
  write_config '[limits]' 'user_capacity = "2GiB"'
  # write_config puts the limits table before the pools: keep the file valid
  init_pools
  bb-pool alloc --job 1 --user "$U" --capacity 2G >/dev/null
  run bb-pool alloc --job 2 --user "$U" --capacity 1G
  assert_failure 75
  assert_output --partial "user_capacity"
}

@test "check finds an orphan directory and repair quarantines it without deleting" {
  init_pools
  mkdir "$(bbdir $TEST_DIR/nvme/job/main.999.1)"
  echo keep >"$(bbdir $TEST_DIR/nvme/job/main.999.1)/data"
  run bb-pool check --json
  assert_failure 1
  assert_output --partial "orphan-directory"
  run bb-pool check --repair
  assert_success
  assert_output --partial "[repaired]"
  assert_not_exist "$(bbdir $TEST_DIR/nvme/job/main.999.1)"
  grep -rq keep "$TEST_DIR/nvme/quarantine/"
  run bb-pool check
  assert_success
  assert_output "no findings"
}

@test "check finds a record whose directory vanished; repair closes it and frees the space" {
  init_pools
  bb-pool alloc --job 5 --user "$U" --capacity 1G >/dev/null
  rmdir "$(bbdir $TEST_DIR/nvme/job/main.5.1)"
  run bb-pool check
  assert_failure 1
  assert_output --partial "missing-directory"
  run bb-pool check --repair
  assert_success
  [ "$(used_of nvme)" = 0 ]
}

@test "recover rolls an interrupted allocation forward or back" {
  init_pools
  # A dead allocator left an `allocating` record: simulate with a pid that is gone.
  bb-pool alloc --job 6 --user "$U" --capacity 1G >/dev/null
  sqlite3 "$TEST_DIR/state/state.db" "UPDATE buffers SET state='allocating', lock_pid=999999, lock_start=1 WHERE key='main.6.1'"
  bb-pool alloc --job 7 --user "$U" --capacity 1G >/dev/null
  sqlite3 "$TEST_DIR/state/state.db" "UPDATE buffers SET state='allocating', lock_pid=999999, lock_start=1 WHERE key='main.7.1'"
  rmdir "$(bbdir $TEST_DIR/nvme/job/main.7.1)"
  run bb-pool recover
  assert_success
  assert_output --partial "main.6.1: allocating -> allocated (rolled forward)"
  assert_output --partial "main.7.1: allocating -> rolled back"
  [ "$(used_of nvme)" = 1073741824 ]
  run bb-pool recover
  assert_output "nothing to recover"
}

@test "reap empties trash within its budget and releases the space" {
  init_pools
  bb-pool alloc --job 8 --user "$U" --capacity 1G >/dev/null
  mkdir -p "$(bbdir $TEST_DIR/nvme/job/main.8.1)/a/b"
  ln -s /etc "$(bbdir $TEST_DIR/nvme/job/main.8.1)/a/etc-link"
  # Teardown with no reap budget leaves the directory in trash, still charged.
  sqlite3 "$TEST_DIR/state/state.db" "SELECT 1" >/dev/null
  bb-teardown --job 8 >/dev/null
  run bb-pool reap --json
  assert_success
  [ -e /etc/passwd ]
  [ "$(used_of nvme)" = 0 ]
}

@test "list, show and stage paths create no state directory" {
  run bb-pool --state-dir "$TEST_DIR/typo" list
  assert_failure 66
  assert_equal "${#lines[@]}" 1
  run bb-pool --state-dir "$TEST_DIR/typo" show nvme
  assert_failure 66
  run bb-stage --state-dir "$TEST_DIR/typo" --job 7 paths
  assert_failure 66
  assert_not_exist "$TEST_DIR/typo"
}

# --- availability and init --replace ------------------------------------------------------

# Empties a pool's directory as a reformat or a tmpfs after a reboot would.
wipe_pool() { find "$TEST_DIR/$1" -mindepth 1 -delete; }

@test "list shows up, draining, unavailable and uninitialised" {
  run bb-pool list
  assert_line --regexp '^nvme .* uninitialised$'
  init_pools
  bb-pool drain small >/dev/null
  run bb-pool list
  assert_line --regexp '^nvme .* up$'
  assert_line --regexp '^small .* draining$'
  rm "$TEST_DIR/nvme/.bbkit-pool"
  run bb-pool list --json
  assert_output --partial '"availability": "unavailable"'
  run bb-pool list
  assert_line --regexp '^nvme .* unavailable$'
  printf 'name=nvme\nuuid=00000000-0000-0000-0000-000000000000\n' >"$TEST_DIR/nvme/.bbkit-pool"
  run bb-pool list
  assert_line --regexp '^nvme .* unavailable$'
  rm -r "$TEST_DIR/nvme"; touch "$TEST_DIR/nvme"
  run bb-pool list
  assert_line --regexp '^nvme .* unavailable$'
}

@test "an unavailable or draining pool has free 0 in pools.json after the next write" {
  init_pools
  bb-pool alloc --job 1 --user "$U" --capacity 1G >/dev/null
  grep -q '{"free":99,"granularity":1073741824,"id":"nvme"' "$TEST_DIR/state/pools.json"
  bb-pool drain small >/dev/null
  grep -q '{"free":0,"granularity":1024,"id":"small"' "$TEST_DIR/state/pools.json"
  rm "$TEST_DIR/nvme/.bbkit-pool"
  bb-pool resume small >/dev/null  # the next write: pools.json follows the marker
  grep -q '{"free":0,"granularity":1073741824,"id":"nvme"' "$TEST_DIR/state/pools.json"
}

@test "init on a wiped pool refuses and names init --replace" {
  init_pools
  bb-pool alloc --job 42 --user "$U" --capacity 1G >/dev/null
  wipe_pool nvme
  run bb-pool init nvme
  assert_failure 69
  assert_equal "${#lines[@]}" 1
  assert_output --partial "bb-pool init --replace nvme"
  run bb-pool alloc --job 43 --user "$U" --capacity 1G
  assert_failure 69
  assert_output --partial "init --replace nvme"
}

@test "init --replace closes the lost buffers, releases their space and writes a new marker" {
  init_pools
  old=$(sed -n 's/^uuid=//p' "$TEST_DIR/nvme/.bbkit-pool")
  bb-pool alloc --job 42 --user "$U" --capacity 1G >/dev/null
  bb-pool alloc --job 43 --user "$U" --capacity 2G >/dev/null
  bb-pool alloc --job 44 --user "$U" --capacity 1K --pool small >/dev/null
  bb-teardown --job 43 >/dev/null  # in trash: charged until reaped
  wipe_pool nvme
  run bb-pool init --replace nvme
  assert_success
  assert_output --partial "closed 1 buffer,"
  assert_line "closed main.42.1"
  new=$(sed -n 's/^uuid=//p' "$TEST_DIR/nvme/.bbkit-pool")
  [ -n "$new" ] && [ "$new" != "$old" ]
  for d in job persistent trash quarantine; do assert_dir_exists "$TEST_DIR/nvme/$d"; done
  assert_equal "$(used_of nvme)" 0
  bb-pool show nvme --json | grep -q '"trash": 0'
  bb-pool show nvme --json | grep -q '"availability": "up"'
  assert_equal "$(used_of small)" 1024
  grep -q 'action=replace.*buffer=main.42.1' "$TEST_DIR/state/log/audit.log"
  assert_not_exist "$TEST_DIR/state/env/main.42.1.env"
  run bb-teardown --job 42
  assert_success
  assert_output --partial "already torn down"
  run bb-stat job 42 --json
  assert_output --partial '"state": "complete"'
  run bb-pool alloc --job 45 --user "$U" --capacity 1G
  assert_success
}

@test "init --replace refuses a pool whose marker is in place, an unknown or uninitialised pool" {
  init_pools
  bb-pool alloc --job 42 --user "$U" --capacity 1G >/dev/null
  run bb-pool init --replace nvme
  assert_failure 73
  assert_output --partial "recorded marker"
  assert_equal "$(used_of nvme)" 1073741824
  run bb-pool init --replace nope
  assert_failure 66
  run bb-pool --state-dir "$TEST_DIR/other" init --replace nvme
  assert_failure 69
  assert_output --partial "never initialised"
}

@test "init --replace refuses when a buffer directory is still there" {
  init_pools
  bb-pool alloc --job 42 --user "$U" --capacity 1G >/dev/null
  rm "$TEST_DIR/nvme/.bbkit-pool"
  run bb-pool init --replace nvme
  assert_failure 73
  assert_output --partial "still exists"
  assert_equal "$(used_of nvme)" 1073741824
}

@test "init --replace refuses while a stager holds a buffer's run lock" {
  init_pools
  bb-pool alloc --job 42 --user "$U" --capacity 1G >/dev/null
  wipe_pool nvme
  ( exec 9>"$TEST_DIR/state/run/main.42.1.lock"; flock 9
    : >"$TEST_DIR/stand-in.ready"; exec sleep 300 ) 3>&- &
  stager=$!
  for _ in $(seq 600); do [ -e "$TEST_DIR/stand-in.ready" ] && break; sleep 0.05; done
  run bb-pool init --replace nvme
  kill "$stager"; wait "$stager" 2>/dev/null || true
  assert_failure 69
  assert_output --partial "main.42.1"
  assert_equal "$(used_of nvme)" 1073741824
  run bb-pool init --replace nvme
  assert_success
}

# --- found on the way -------------------------------------------------------------------------

@test "alloc --wait without a value means no limit" {
  init_pools
  run bb-pool alloc --job 5 --user "$U" --capacity 1K --pool small --wait
  assert_success
  run bb-pool alloc --job 6 --user "$U" --capacity 1K --pool small --wait 0
  assert_success
  run bb-pool alloc --job 7 --user "$U" --capacity 1K --pool small --wait abc
  assert_failure 64
}

@test "a command-line capacity error names the command line, not a script line" {
  init_pools
  run bb-pool alloc --job 5 --user "$U" --capacity 1.5G
  assert_failure 65
  assert_output --partial "command line"
  refute_output --partial "script line"
  run bb-pool alloc --persistent p1 --capacity 0
  assert_failure
  refute_output --partial "script line"
}

@test "init --replace killed after the new marker is written is run again" {
  [ -n "$(BBKIT_FAULT=list bb-pool)" ] || skip "built without fault injection"
  init_pools
  bb-pool alloc --job 42 --user "$U" --capacity 1G >/dev/null
  wipe_pool nvme
  run env BBKIT_FAULT=replace.marker-written bb-pool init --replace nvme
  assert_failure 137
  assert_file_exists "$TEST_DIR/nvme/.bbkit-pool"
  assert_equal "$(used_of nvme)" 1073741824
  run bb-pool list
  assert_line --regexp '^nvme .* unavailable$'
  run bb-pool init --replace nvme
  assert_success
  assert_line "closed main.42.1"
  assert_equal "$(used_of nvme)" 0
}

# --- reaping many entries -------------------------------------------------------------------

# Removal reads a directory a chunk of names at a time: 200,000 files in one directory (names
# as long as a job's checkpoints') are torn down and reaped in 16 MiB of address space, where
# reading all the names first, as removal once did, needed 27 MiB (the tools alone need 8.5).
@test "teardown and reap of 200,000 files in one directory fit in 16 MiB of address space" {
  [ "${BBKIT_SANITIZE:-}" != 1 ] || skip "a sanitizer reserves more address space than that"
  init_pools
  bb-pool alloc --job 9 --user "$U" --capacity 1G >/dev/null
  mkdir "$(bbdir $TEST_DIR/nvme/job/main.9.1)/flat"
  chown "$U" "$(bbdir $TEST_DIR/nvme/job/main.9.1)/flat"
  (cd "$(bbdir $TEST_DIR/nvme/job/main.9.1)/flat" &&
    seq -f 'checkpoint.step000045.rank%06g.h5' 200000 | xargs touch)
  limit=16384
  run sh -c 'ulimit -v "$1" && exec bb-teardown --job 9 --json' sh "$limit"
  assert_success
  torn=$(sed -n 's/.*"entries_removed": \([0-9]*\).*/\1/p' <<<"$output")
  run sh -c 'ulimit -v "$1" && exec bb-pool reap --json' sh "$limit"
  assert_success
  reaped=$(sed -n 's/.*"entries_removed": \([0-9]*\).*/\1/p' <<<"$output")
  assert_equal "$((torn + reaped))" 200002  # the files, flat/ and the buffer's directory
  [ -z "$(ls -A "$TEST_DIR/nvme/trash")" ]
  assert_equal "$(used_of nvme)" 0
}

@test "teardown and reap print the entries they removed, and no progress line off a terminal" {
  init_pools
  bb-pool alloc --job 10 --user "$U" --capacity 1G >/dev/null
  mkdir -p "$(bbdir $TEST_DIR/nvme/job/main.10.1)/a/b"
  touch "$(bbdir $TEST_DIR/nvme/job/main.10.1)/a/b/f" "$(bbdir $TEST_DIR/nvme/job/main.10.1)/a/g"
  chown -R "$U" "$(bbdir $TEST_DIR/nvme/job/main.10.1)/a"
  run bb-teardown --job 10
  assert_success
  assert_output "torn down: main.10.1 (space released), 5 entries removed"
  run bb-pool reap
  assert_success
  assert_output "reaped 0 buffer(s), released 0, 0 entries removed"
}

# bb-pool health (bbkit(7), NODE-LOCAL POOLS, Node health): what no job controls, read only.
@test "health: pools in order are healthy (0), a draining one too and listed; --node-local and --json" {
  init_pools
  run bb-pool health
  assert_success
  assert_output "$(printf 'pool nvme: ok\npool small: ok')"
  bb-pool drain small >/dev/null
  run bb-pool health small
  assert_success
  assert_output "pool small: ok (draining)"
  run bb-pool health --json
  assert_success
  assert_output --partial '"healthy": true'
  assert_output --partial '"draining": ['
  run bb-pool health --node-local
  assert_failure 65
  assert_output "bb-pool: the configuration has no node-local pool to check"
  run bb-pool health nope
  assert_failure 66
  assert_output --partial "unknown pool 'nope'"
  # It writes nothing: the state is as it was.
  local before
  before=$(stat -c %Y "$TEST_DIR/state/state.db")
  bb-pool health >/dev/null
  assert_equal "$(stat -c %Y "$TEST_DIR/state/state.db")" "$before"
}

@test "health: a pool not mounted or not set up, a node script others may change: 69, a line each" {
  init_pools
  mv "$TEST_DIR/nvme/.bbkit-pool" "$TEST_DIR/marker"
  run bb-pool health
  assert_failure 69
  assert_line "pool nvme: FAULT"
  assert_line "pool small: ok"
  assert_line --partial "pool nvme: fault: "
  assert_line --regexp "^bb-pool: unhealthy: pool nvme: .*not mounted"
  mv "$TEST_DIR/marker" "$TEST_DIR/nvme/.bbkit-pool"
  chmod 777 "$TEST_DIR/small"
  run bb-pool health small
  assert_failure 69
  assert_line --partial "writable by group or others"
  chmod 755 "$TEST_DIR/small"
  # A script the node runs as root that another account may rewrite.
  printf '#!/bin/sh\n' >"$TEST_DIR/prolog"
  chmod 0775 "$TEST_DIR/prolog"
  run bb-pool health --trust "$TEST_DIR/prolog" nvme
  assert_failure 69
  assert_line --regexp "^$TEST_DIR/prolog: fault: .*writable"
  chmod 0755 "$TEST_DIR/prolog"
  run bb-pool health --trust "$TEST_DIR/prolog" --trust "$TEST_DIR/missing" nvme
  assert_failure 69
  assert_line --regexp "^$TEST_DIR/missing: fault: "
  refute_line --regexp "^$TEST_DIR/prolog: fault"
  # A pool that was never initialised on this host.
  write_config '[[pool]]' 'name = "late"' "path = \"$TEST_DIR/late\"" 'capacity = "1MiB"'
  mkdir "$TEST_DIR/late"
  run bb-pool health late
  assert_failure 69
  assert_output --partial "pool 'late' is not initialised (run bb-pool init late)"
}

@test "health: a pool's file system smaller than its capacity or mounted read-only: 69" {
  mkdir -p "$TEST_DIR/fs"
  mount -t tmpfs -o size=8m,mode=0755 bbkit-health "$TEST_DIR/fs" 2>/dev/null ||
    skip "cannot mount a tmpfs here"
  MOUNTED=$TEST_DIR/fs
  write_config '[[pool]]' 'name = "fast"' "path = \"$TEST_DIR/fs\"" 'capacity = "4MiB"'
  bb-pool init fast >/dev/null
  run bb-pool health fast
  assert_success
  mount -o remount,ro "$TEST_DIR/fs"
  run bb-pool health fast
  mount -o remount,rw "$TEST_DIR/fs"
  assert_failure 69
  assert_output --partial "is mounted read-only"
  write_config '[[pool]]' 'name = "fast"' "path = \"$TEST_DIR/fs\"" 'capacity = "64MiB"'
  run bb-pool health fast
  assert_failure 69
  assert_output --partial "less than the pool's capacity 64MiB"
}

# bb-pool health --monitor (bbkit(7), HEALTH AND MONITORING): a monitoring plugin's answer.
@test "health --monitor: OK with its perfdata, WARNING for a failed stage, CRITICAL for a pool not mounted" {
  init_pools
  run bb-pool health --monitor
  assert_success
  assert_line --index 0 "BBKIT OK - 2 pools in service, 0 live buffers | pools=2 buffers=0 stalled=0 teardown_failed=0 findings=0"
  assert_line "timers: not checked: systemd is not running here"
  [ -d /run/systemd/system ] && fail "this test expects no systemd (the timers are unit-tested)"
  # A stage-in whose source is missing: the buffer keeps its failed stage, a warning.
  U=$(test_user)
  failed_stage_in 5
  run bb-pool health --monitor
  assert_failure 1
  assert_line --index 0 --regexp '^BBKIT WARNING - stalled-stage main\.5\.1: .* \| pools=2 buffers=1 stalled=1 teardown_failed=0 findings=1$'
  assert_line --regexp '^WARNING: stalled-stage main\.5\.1: '
  # A pool whose file system is gone outranks it.
  mv "$TEST_DIR/small/.bbkit-pool" "$TEST_DIR/marker"
  run bb-pool health --monitor
  assert_failure 2
  assert_line --index 0 --regexp '^BBKIT CRITICAL - pool small: .*not mounted.* \(and [0-9]+ more\) \| '
  run bb-pool health --monitor --json
  assert_failure 2
  run jq -r '.state, .items[0].state, .stalled_stages' <<<"$output"
  assert_output "$(printf 'CRITICAL\nCRITICAL\n1')"
  mv "$TEST_DIR/marker" "$TEST_DIR/small/.bbkit-pool"
  # A draining pool is an OK item; --no-timers leaves the timers out.
  bb-teardown --job 5 --hurry >/dev/null 2>&1 || bb-teardown --job 5 >/dev/null
  bb-pool drain small >/dev/null
  run bb-pool health --monitor --no-timers
  assert_success
  assert_line "OK: pool small: draining (bb-pool resume small ends it)"
  assert_line "timers: not checked (--no-timers)"
  # It writes nothing.
  local before
  before=$(stat -c %Y "$TEST_DIR/state/state.db")
  bb-pool health --monitor >/dev/null || true
  assert_equal "$(stat -c %Y "$TEST_DIR/state/state.db")" "$before"
  for bad in "--slurm" "--no-timers"; do
    run bb-pool health $bad
    assert_failure 64
    assert_output "bb-pool: --slurm and --no-timers go with --monitor"
  done
}

@test "health --monitor --slurm: Slurm that cannot be asked is UNKNOWN (exit 3), nothing torn down" {
  init_pools
  command -v squeue >/dev/null || skip "needs Slurm's clients"
  # Slurm's real clients, with a controller that does not answer (nothing listens there).
  printf 'ClusterName=main\nSlurmctldHost=localhost\nSlurmctldPort=6999\n' >"$TEST_DIR/slurm.conf"
  # Without a job buffer there is nothing to ask Slurm about.
  run env SLURM_CONF="$TEST_DIR/slurm.conf" bb-pool health --monitor --slurm --no-timers
  assert_success
  bb-pool alloc --job 7 --user "$(id -un)" --capacity 1GiB >/dev/null
  run env SLURM_CONF="$TEST_DIR/slurm.conf" bb-pool health --monitor --slurm --no-timers
  assert_failure 3
  assert_line --index 0 --regexp '^BBKIT UNKNOWN - slurm: .*\| pools=2 buffers=1 '
  [ "$(used_of nvme)" -eq $((1024 * 1024 * 1024)) ] || fail "the buffer is gone"
}

@test "health: a state directory others may write or a broken state.db fails it" {
  init_pools
  chmod 777 "$TEST_DIR/state"
  run bb-pool health
  assert_failure 77
  chmod 711 "$TEST_DIR/state"
  rm -f "$TEST_DIR/state/state.db-wal" "$TEST_DIR/state/state.db-shm"
  printf 'not a database' >"$TEST_DIR/state/state.db"
  run bb-pool health
  assert_failure
}
