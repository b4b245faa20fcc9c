#!/usr/bin/env bats
# The state directory on real NFS (bbkit(7), STATE DIRECTORY): run by tests/nfs-kernel inside
# Debian's user-mode-linux kernel, where one NFSv4.2 export is mounted twice, at $BBKIT_NFS_A
# and $BBKIT_NFS_B, standing in for two controller hosts. Each test's state directory is on the
# export, reached through both mounts by two configurations; the pools are local (one kernel).

load ../cli/common

setup() {
  if [ -z "${BBKIT_NFS_A:-}" ] || [ -z "${BBKIT_NFS_B:-}" ]; then
    skip "needs the NFS mounts tests/nfs-kernel makes (BBKIT_NFS_A, BBKIT_NFS_B)"
  fi
  common_setup
  mkdir -p "$TEST_DIR/nvme" "$TEST_DIR/small"
  shared=$(basename "$(mktemp -d "$BBKIT_NFS_A/bbkit-state.XXXXXX")")
  STATE_A=$BBKIT_NFS_A/$shared/state
  STATE_B=$BBKIT_NFS_B/$shared/state
  CONFIG_A=$TEST_DIR/a.toml
  CONFIG_B=$TEST_DIR/b.toml
  nfs_config "$CONFIG_A" "$STATE_A"
  nfs_config "$CONFIG_B" "$STATE_B"
  export STATE_A STATE_B CONFIG_A CONFIG_B
  export BBKIT_CONFIG=$CONFIG_A
}
teardown() {
  [ -n "${shared:-}" ] && rm -rf "${BBKIT_NFS_A:?}/$shared"
  common_teardown
}

# nfs_config FILE STATE_DIR [LINE...]: the suite's pools, the state directory given.
nfs_config() {
  local file=$1 state=$2
  shift 2
  {
    printf 'state_dir = "%s"\ndefault_pool = "nvme"\nallow_root = true\n' "$state"
    for line in "$@"; do printf '%s\n' "$line"; done
    printf '[[pool]]\nname = "nvme"\npath = "%s/nvme"\ncapacity = "100GiB"\ngranularity = "1GiB"\n' "$TEST_DIR"
    printf '[[pool]]\nname = "small"\npath = "%s/small"\ncapacity = "4KiB"\ngranularity = "1KiB"\n' "$TEST_DIR"
  } >"$file"
}

# caller ID CYCLES CONFIG: CYCLES times alloc (retrying on 75) then teardown on pool small, as
# tests/cli/concurrency.bats does, through the mount CONFIG names; other statuses are logged.
caller() {
  local id=$1 cycles=$2 job rc
  export BBKIT_CONFIG=$3
  for c in $(seq "$cycles"); do
    job=$((id * 1000 + c))
    while :; do
      rc=0; bb-pool alloc --job "$job" --user root --pool small --capacity 1K >/dev/null 2>>"$TEST_DIR/err.$id" || rc=$?
      [ "$rc" -eq 0 ] && break
      [ "$rc" -eq 75 ] || { echo "alloc $job: exit $rc" >>"$TEST_DIR/bad"; break; }
      echo 75 >>"$TEST_DIR/retries.$id"
    done
    rc=0; bb-teardown --job "$job" >/dev/null 2>>"$TEST_DIR/err.$id" || rc=$?
    if [ "$rc" -eq 75 ]; then rc=0; bb-teardown --job "$job" >/dev/null 2>>"$TEST_DIR/err.$id" || rc=$?; fi
    [ "$rc" -eq 0 ] || echo "teardown $job: exit $rc" >>"$TEST_DIR/bad"
  done
}

# bats test_tags=smoke
@test "on NFS: a rollback journal, and callers through two mounts at once never over-commit" {
  run bb-parse config
  assert_success
  assert_line "# state_dir file system: nfs (shared)"
  bb-pool init small >/dev/null
  BBKIT_CONFIG=$CONFIG_B bb-pool init nvme >/dev/null
  [ ! -e "$STATE_A/state.db-wal" ] && [ ! -e "$STATE_A/state.db-shm" ]
  [ -e "$STATE_A/state.db-journal" ]
  # The user-mode kernel runs on one CPU, a tool call there takes about a second: 4 callers of
  # 5 cycles (40 calls) in the submission tier, 8 of 15 in the full one.
  callers=${BBKIT_NFS_CALLERS:-4}
  cycles=${BBKIT_NFS_CYCLES:-5}
  if [ "${BBKIT_TEST_TIER:-}" = full ]; then
    callers=${BBKIT_NFS_CALLERS:-8}
    cycles=${BBKIT_NFS_CYCLES:-15}
  fi
  export -f caller
  export TEST_DIR
  pids=()
  start=$(date +%s.%N)
  for i in $(seq "$callers"); do
    config=$CONFIG_A
    [ $((i % 2)) = 0 ] && config=$CONFIG_B
    caller "$i" "$cycles" "$config" &
    pids+=($!)
  done
  samples=0
  while kill -0 "${pids[@]}" 2>/dev/null; do
    line=$(BBKIT_CONFIG=$CONFIG_B bb-pool show small --json)
    used=$(sed -n 's/.*"used": \([0-9]*\).*/\1/p' <<<"$line")
    trash=$(sed -n 's/.*"trash": \([0-9]*\).*/\1/p' <<<"$line")
    [ $((used + trash)) -le 4096 ] || echo "over-commit: used=$used trash=$trash" >>"$TEST_DIR/bad"
    samples=$((samples + 1))
    sleep 1
  done
  for p in "${pids[@]}"; do wait "$p"; done
  elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  [ ! -s "$TEST_DIR/bad" ] || { cat "$TEST_DIR/bad"; cat "$TEST_DIR"/err.* | sort | uniq -c | head; false; }
  run bb-pool show small --json
  assert_output --partial '"used": 0'
  assert_output --partial '"trash": 0'
  run bb-pool check
  assert_success
  BBKIT_CONFIG=$CONFIG_B run bb-pool check
  assert_success
  done_count=$(sqlite3 "$STATE_B/state.db" "SELECT COUNT(*) FROM buffers WHERE state='complete' AND reaped=1")
  [ "$done_count" -eq $((callers * cycles)) ]
  [ ! -e "$STATE_A/state.db-wal" ]
  retries=$(cat "$TEST_DIR"/retries.* 2>/dev/null | wc -l)
  echo "# $((callers * cycles)) cycles through two mounts in $elapsed s, $retries retries on 75, $samples samples" >&3
}

@test "on NFS: writers killed mid-transaction through one mount; the other recovers, nothing committed is lost" {
  bb-pool init nvme >/dev/null
  bb-pool init small >/dev/null
  for job in 1 2 3 4; do bb-pool alloc --job "$job" --user root --capacity 1G >/dev/null; done
  # Killed before its commit: its journal holds the pages it changed, under a header SQLite
  # leaves blank until the commit syncs it (not a hot journal: state.db was not written). A
  # reader through the other mount reads the last commit and writes nothing.
  run env BBKIT_FAULT=txn.before-commit bb-pool alloc --job 5 --user root --capacity 1G
  [ "$status" -eq 137 ] || { echo "txn.before-commit: exit $status"; false; }
  [ -s "$STATE_A/state.db-journal" ]
  journal=$(md5sum <"$STATE_A/state.db-journal")
  db=$(md5sum <"$STATE_A/state.db")
  BBKIT_CONFIG=$CONFIG_B run bb-pool list
  assert_success
  [ "$(md5sum <"$STATE_A/state.db-journal")" = "$journal" ]
  [ "$(md5sum <"$STATE_A/state.db")" = "$db" ]
  [ -z "$(sqlite3 "$STATE_B/state.db" 'SELECT state FROM buffers WHERE job_id=5')" ]
  job=5
  # Killed after committing the record (bbkit(7), CRASHES).
  for point in alloc.reserved dir.made alloc.env-written; do
    job=$((job + 1))
    run env BBKIT_FAULT=$point bb-pool alloc --job "$job" --user root --capacity 1G
    [ "$status" -eq 137 ] || { echo "$point: exit $status"; false; }
  done
  # Killed at any instant, commits in flight included: a journal left non-empty is a hot one,
  # which the next connection through the other mount rolls back.
  hot=0
  for i in $(seq 12); do
    job=$((100 + i))
    bb-pool alloc --job "$job" --user root --capacity 1G >/dev/null 2>&1 &
    pid=$!
    sleep "0.$((RANDOM % 10))$((RANDOM % 10))"
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    if [ -s "$STATE_A/state.db-journal" ]; then hot=$((hot + 1)); fi
  done
  BBKIT_CONFIG=$CONFIG_B run bb-pool recover
  assert_success
  BBKIT_CONFIG=$CONFIG_B run bb-pool check
  assert_success
  for job in 1 2 3 4; do
    state=$(sqlite3 "$STATE_B/state.db" "SELECT state FROM buffers WHERE job_id=$job")
    [ "$state" = allocated ] || { echo "job $job: '$state'"; false; }
  done
  [ "$(sqlite3 "$STATE_B/state.db" 'PRAGMA integrity_check')" = ok ]
  [ ! -s "$STATE_A/state.db-journal" ]
  echo "# 12 writers killed at random, $hot journals left hot" >&3
}

@test "on NFS: a mount whose locks stay on this host (local_lock=flock) is refused, nothing created" {
  [ -n "${BBKIT_NFS_LOCAL_LOCK:-}" ] || skip "needs tests/nfs-kernel's third mount"
  grep -q " $BBKIT_NFS_LOCAL_LOCK nfs4 .*local_lock=flock" /proc/mounts ||
    skip "this kernel does not show local_lock=flock"
  nfs_config "$TEST_DIR/c.toml" "$BBKIT_NFS_LOCAL_LOCK/$shared/state"
  BBKIT_CONFIG=$TEST_DIR/c.toml run bb-pool init nvme
  assert_failure 78
  assert_output --partial "with local_lock=flock: its locks may keep out no other host"
  [ ! -e "$STATE_A" ]
}

@test "on NFS: state_journal = wal is refused, and a WAL state.db moved there is converted by a writer" {
  nfs_config "$TEST_DIR/wal.toml" "$STATE_A" 'state_journal = "wal"'
  BBKIT_CONFIG=$TEST_DIR/wal.toml run bb-pool init nvme
  assert_failure 78
  assert_output --partial "network file system (nfs), where SQLite's WAL is not safe"
  [ ! -e "$STATE_A/state.db" ]
  # Made on a local disk (WAL), then moved to the export whole.
  nfs_config "$TEST_DIR/local.toml" "$TEST_DIR/local-state"
  BBKIT_CONFIG=$TEST_DIR/local.toml bb-pool init nvme >/dev/null
  BBKIT_CONFIG=$TEST_DIR/local.toml bb-pool init small >/dev/null
  BBKIT_CONFIG=$TEST_DIR/local.toml bb-pool alloc --job 7 --user root --capacity 1G >/dev/null
  [ -s "$TEST_DIR/local-state/state.db-wal" ]
  rmdir "$STATE_A" 2>/dev/null || true
  cp -a "$TEST_DIR/local-state" "$STATE_A"
  run bb-pool list
  assert_failure 78
  assert_output --partial "is in WAL mode on a nfs file system"
  BBKIT_CONFIG=$CONFIG_B run bb-pool recover
  assert_success
  [ ! -e "$STATE_B/state.db-wal" ] && [ ! -e "$STATE_B/state.db-shm" ]
  # Through the mount that converted it (the other may see the removed WAL for as long as its
  # attribute cache holds, and refuses it meanwhile, as SQLite would open it).
  BBKIT_CONFIG=$CONFIG_B run bb-pool show nvme --json
  assert_success
  assert_output --partial '"used": 1073741824'
}

@test "on NFS: after a takeover through one mount, the other host's writers write nothing" {
  # Two hosts: each has root's files of its own beside its record key (the key copied).
  mkdir -p "$TEST_DIR/a" "$TEST_DIR/b"
  nfs_config "$TEST_DIR/a/bbkit.toml" "$STATE_A" 'state_owner = "nobody"' '[timeouts]' 'takeover = 1'
  nfs_config "$TEST_DIR/b/bbkit.toml" "$STATE_B" 'state_owner = "nobody"' '[timeouts]' 'takeover = 1'
  A=$TEST_DIR/a/bbkit.toml B=$TEST_DIR/b/bbkit.toml
  chmod 0755 "$(dirname "$STATE_A")"  # the state owner reaches its directory
  bb-pool --config "$A" init nvme >/dev/null
  bb-pool --config "$A" init small >/dev/null
  install -m 0400 "$TEST_DIR/a/record.key" "$TEST_DIR/b/record.key"
  bb-pool --config "$A" takeover >/dev/null
  bb-pool --config "$A" alloc --job 1 --user root --capacity 1G >/dev/null
  # Host a's waiter in the full pool small began under a's claim.
  bb-pool --config "$A" alloc --job 2 --user root --pool small --capacity 4KiB >/dev/null
  bb-pool --config "$A" alloc --job 3 --user root --pool small --capacity 4KiB --wait 60 \
    >"$TEST_DIR/waiter.out" 2>&1 &
  waiter=$!
  sleep 3
  run bb-pool --config "$B" drain nvme
  assert_failure 69
  run bb-pool --config "$B" takeover
  assert_success
  assert_output --partial "over as epoch 2 from"
  bb-teardown --config "$B" --job 2 >/dev/null  # the space the waiter waits for
  status=0
  wait "$waiter" || status=$?
  [ "$status" -eq 69 ] || { cat "$TEST_DIR/waiter.out"; false; }
  run bb-pool --config "$A" alloc --job 4 --user root --capacity 1G
  assert_failure 69
  run bb-pool --config "$B" alloc --job 4 --user root --capacity 1G
  assert_success
  run bb-pool --config "$B" check
  assert_success
  # The waiter's request stays as it queued it under a's claim (pending), never granted; the
  # new holder's recover drops it, its waiter gone.
  [ "$(sqlite3 "$STATE_B/state.db" 'SELECT state FROM buffers WHERE job_id=3')" = pending ]
  run bb-pool --config "$B" recover
  assert_success
  [ "$(sqlite3 "$STATE_B/state.db" "SELECT COUNT(*) FROM buffers WHERE job_id=3 AND state NOT IN ('complete','deleted')")" = 0 ]
  [ "$(sqlite3 "$STATE_B/state.db" 'SELECT epoch FROM controller')" = 2 ]
}
