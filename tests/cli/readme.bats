#!/usr/bin/env bats
# README.md's "A taste" runs as it is written: its block, extracted, under bash -e.

load common

setup() { common_setup; }
teardown() {
  [ -z "${taste_dir:-}" ] || rm -rf "$taste_dir"
  common_teardown
}

@test "README's A taste runs as written and stages the job's result out" {
  unset BBKIT_CONFIG
  awk '/^## A taste/ {in_section = 1} in_section && /^```sh$/ {block = 1; next}
       block && /^```$/ {exit} block {print}' "$BBKIT_SOURCE_DIR/README.md" >"$TEST_DIR/taste.sh"
  [ -s "$TEST_DIR/taste.sh" ]
  # The block cds into a scratch directory of its own (removed afterwards); its last line
  # prints the result. Any failing command stops it (bash -e).
  trap_line='trap '\''pwd >"$TASTE_WHERE"'\'' EXIT'
  sed -i "1i $trap_line" "$TEST_DIR/taste.sh"
  run env TASTE_WHERE="$TEST_DIR/where" bash -e "$TEST_DIR/taste.sh"
  taste_dir=$(cat "$TEST_DIR/where" 2>/dev/null || true)
  [ "$taste_dir" != "$TEST_DIR" ] && [ "$taste_dir" != / ] || taste_dir=
  assert_success
  assert_output --partial "exit 65"
  assert_output --partial "allocated: main.42.1 1GiB in pool demo for nobody"
  assert_output --partial "torn down: main.42.1"
  assert_equal "${lines[-1]}" "HELLO"
}
