#!/usr/bin/env bats
# Controller failover (bbkit(7), STATE DIRECTORY, "Controller failover"): two controllers share
# one state directory and take turns writing it. A host here is a configuration of its own in
# its own directory, where root keeps that host's files beside its record key: the key (copied,
# as a site copies it) and the host's token.

load common

setup() {
  common_setup
  mkdir -p "$TEST_DIR/nvme" "$TEST_DIR/small" "$TEST_DIR/a" "$TEST_DIR/b"
  U=$(test_user)
  write_config 'state_owner = "nobody"' '[timeouts]' 'takeover = 1'
  cp "$TEST_DIR/bbkit.toml" "$TEST_DIR/a/bbkit.toml"
  cp "$TEST_DIR/bbkit.toml" "$TEST_DIR/b/bbkit.toml"
  A=$TEST_DIR/a/bbkit.toml
  B=$TEST_DIR/b/bbkit.toml
  unset BBKIT_CONFIG
  bb-pool --config "$A" init nvme >/dev/null
  bb-pool --config "$A" init small >/dev/null
  install -m 0400 "$TEST_DIR/a/record.key" "$TEST_DIR/b/record.key"
}
teardown() { common_teardown; }

# What a refused command must leave as it was: every row of state.db, and the pools' trees.
snapshot() {
  sqlite3 "$TEST_DIR/state/state.db" .dump
  (cd "$TEST_DIR" && find nvme small -printf '%p %m %s\n' | sort)
}

@test "takeover writes the next epoch and this host's token; again on the holder changes nothing" {
  run bb-pool --config "$A" takeover
  assert_success
  assert_output "took state directory $TEST_DIR/state over as epoch 1"
  assert_equal "$(cat "$TEST_DIR/a/record.key.controller")" "1 $TEST_DIR/state"
  assert_equal "$(stat -c '%U %a' "$TEST_DIR/a/record.key.controller")" "root 600"
  run bb-pool --config "$A" takeover
  assert_success
  assert_output "this host already holds state directory $TEST_DIR/state as epoch 1"
  run bb-pool --config "$B" takeover --json
  assert_success
  assert_output --partial '"epoch": 2'
  assert_output --partial '"changed": true'
  assert_output --partial '"before": {'
  run bb-pool --config "$A" takeover --holds
  assert_failure 69
  assert_output --partial "this host does not hold state directory $TEST_DIR/state: $(hostname) (epoch 2, since "
  run bb-pool --config "$B" takeover --holds --json
  assert_success
  assert_output --partial '"holds": true'
  assert_output --partial '"token": 2'
  run bb-pool --config "$B" takeover --release --holds
  assert_failure 64
  run bb-pool --config "$B" takeover --release
  assert_success
  [ ! -s "$TEST_DIR/b/record.key.controller" ]
}

@test "without a claim, both hosts write and --holds says so" {
  run bb-pool --config "$B" takeover --holds
  assert_success
  assert_output --partial "no controller holds state directory"
  run bb-pool --config "$B" drain small
  assert_success
  run bb-pool --config "$A" resume small
  assert_success
}

# The class: every command of a host that does not hold the claim either only reads, or is
# refused with 69 before it changes anything, in state.db or in the pools. The list must name
# every subcommand the tools' --help lists, so a new one fails here until it is placed.
@test "every writing command of a host that does not hold the claim exits 69 and changes nothing" {
  bb-pool --config "$A" takeover >/dev/null
  bb-pool --config "$A" alloc --job 7 --user "$U" --capacity 1GiB >/dev/null
  script=$TEST_DIR/job.sh
  printf '#!/bin/sh\n#BB_LUA capacity=1GiB\n' >"$script"
  mkdir "$TEST_DIR/nvme/job/main.99.1.orphan"  # something check --repair would quarantine
  before=$(snapshot)
  writers=(
    "bb-pool init nvme"
    "bb-pool init --replace small"
    "bb-pool alloc --job 8 --user $U --capacity 1GiB"
    "bb-pool alloc --job 9 --user $U --script $script"
    "bb-pool drain nvme"
    "bb-pool resume nvme"
    "bb-pool check --repair"
    "bb-pool recover"
    "bb-pool reap"
    "bb-pool migrate"
    "bb-stage --job 7 in"
    "bb-stage --job 7 pre-run"
    "bb-stage --job 7 post-run"
    "bb-stage --job 7 out"
    "bb-stage --job 7 end"
    "bb-teardown --job 7"
    "bb-teardown --job 7 --hurry"
  )
  readers=(
    "bb-pool list"
    "bb-pool show nvme"
    "bb-pool check"
    "bb-pool health"
    "bb-stage --job 7 paths"
    "bb-stat pools"
    "bb-stat job 7"
  )
  for cmd in "${writers[@]}"; do
    tool=${cmd%% *}
    # shellcheck disable=SC2086 # the words of the command
    run $tool --config "$B" ${cmd#* }
    [ "$status" -eq 69 ] || fail "$cmd on the other host: exit $status, not 69: $output"
    [[ $output == *"this host does not hold state directory"* ]] || fail "$cmd: $output"
    [ "$(snapshot)" = "$before" ] || fail "$cmd on the other host changed the state or a pool"
  done
  for cmd in "${readers[@]}"; do
    tool=${cmd%% *}
    # shellcheck disable=SC2086
    run $tool --config "$B" ${cmd#* }
    [ "$status" -ne 69 ] || fail "$cmd, which only reads, refused on the other host: $output"
    [ "$(snapshot)" = "$before" ] || fail "$cmd changed the state or a pool"
  done
  # Every subcommand is placed (takeover, and reconcile, which asks Slurm first, have their own
  # tests; bb-teardown and bb-stat have their own lists).
  placed=" ${writers[*]} ${readers[*]} bb-pool takeover bb-pool reconcile "
  for sub in $(bb-pool --help | awk '/^Subcommands:/ { on = 1; next } on && NF { print $1 }'); do
    [[ $placed == *" bb-pool $sub "* || $placed == *" bb-pool $sub"* ]] || fail "bb-pool $sub is in no list"
  done
  for sub in $(bb-stage --help | awk '/^Subcommands:/ { on = 1; next } on && NF { print $1 }'); do
    [[ $placed == *"bb-stage --job 7 $sub"* ]] || fail "bb-stage $sub is in no list"
  done
  # The holder still writes.
  run bb-pool --config "$A" drain nvme
  assert_success
}

@test "a process that lost the claim while it ran writes nothing more" {
  bb-pool --config "$A" takeover >/dev/null
  # An alloc of host a waiting in the queue of a full pool: it began under a's claim.
  bb-pool --config "$A" alloc --job 1 --user "$U" --pool small --capacity 4KiB >/dev/null
  bb-pool --config "$A" alloc --job 2 --user "$U" --pool small --capacity 4KiB --wait 30 \
    >"$TEST_DIR/waiter.out" 2>&1 &
  waiter=$!
  for _ in $(seq 50); do
    bb-stat --config "$A" pools --json | grep -q '"queued": 1' && break
    sleep 0.1
  done
  bb-pool --config "$B" takeover >/dev/null
  bb-teardown --config "$B" --job 1 >/dev/null  # space frees: the waiter would be granted
  status=0
  wait "$waiter" || status=$?
  [ "$status" -eq 69 ] || fail "the waiter of the old claim: exit $status: $(cat "$TEST_DIR/waiter.out")"
  grep -q "began while this host held state directory" "$TEST_DIR/waiter.out"
  run bb-pool --config "$B" show small --json
  assert_output --partial '"used": 0'
}

@test "a takeover killed before or after its commit leaves nothing writing until it is run again" {
  [ -n "$(BBKIT_FAULT=list bb-pool)" ] || skip "built without fault injection"
  bb-pool --config "$A" takeover >/dev/null
  run env BBKIT_FAULT=takeover.before-commit bb-pool --config "$B" takeover
  assert_failure
  run bb-pool --config "$A" takeover --holds
  assert_success  # the claim did not change
  run env BBKIT_FAULT=takeover.committed bb-pool --config "$B" takeover
  assert_failure
  run bb-pool --config "$A" drain nvme
  assert_failure 69  # the claim is b's now
  run bb-pool --config "$B" drain nvme
  assert_failure 69  # but b has no token yet
  run bb-pool --config "$B" takeover
  assert_success
  assert_output --partial "over as epoch 3"
  run bb-pool --config "$B" drain nvme
  assert_success
}

@test "a command of a host without the claim waits for that host's takeover, then goes on" {
  bb-pool --config "$A" takeover >/dev/null
  sed -i 's/^takeover = 1$/takeover = 30/' "$B"
  bb-pool --config "$B" drain nvme >"$TEST_DIR/drain.out" 2>&1 &
  drain=$!
  sleep 1
  kill -0 "$drain"  # still waiting
  bb-pool --config "$B" takeover >/dev/null
  wait "$drain"
  grep -q "waiting up to 30 s for this host to take state directory" "$TEST_DIR/drain.out"
  run bb-pool --config "$B" list
  assert_output --partial "draining"
}

@test "a host without the key makes none where records are sealed; takeover refuses another key" {
  bb-pool --config "$A" takeover >/dev/null
  bb-pool --config "$A" alloc --job 1 --user "$U" --capacity 1GiB >/dev/null
  rm "$TEST_DIR/b/record.key"
  run bb-pool --config "$B" takeover
  assert_failure 78
  assert_output --partial "copy the key"
  assert_file_not_exists "$TEST_DIR/b/record.key"
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TEST_DIR/b/record.key"
  chmod 0400 "$TEST_DIR/b/record.key"
  run bb-pool --config "$B" takeover
  assert_failure 78
  assert_output --partial "matches none of the records"
  run bb-pool --config "$A" takeover --holds
  assert_success
}

@test "primary-on and primary-off take over and release as Slurm runs them: no arguments, no file descriptors" {
  scripts=$BBKIT_BIN/../share/bbkit/standalone/slurm
  [ -x "$scripts/primary-on" ] || skip "no installed tree ($scripts)"
  BBKIT_CONFIG=$B "$scripts/primary-on" <&- >&- 2>&-
  run bb-pool --config "$B" takeover --holds
  assert_success
  BBKIT_CONFIG=$B "$scripts/primary-on" <&- >&- 2>&-  # a restart of the same primary
  assert_equal "$(cat "$TEST_DIR/b/record.key.controller")" "1 $TEST_DIR/state"
  BBKIT_CONFIG=$B "$scripts/primary-off" <&- >&- 2>&-
  run bb-pool --config "$B" takeover --holds
  assert_failure 69
  run env BBKIT_CONFIG="$TEST_DIR/none.toml" "$scripts/primary-on"
  assert_failure
}
