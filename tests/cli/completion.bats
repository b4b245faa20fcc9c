#!/usr/bin/env bats
# Bash completion (share/bash-completion/completions): subcommands and options from the tools'
# --help, pool names from bb-pool list.

load common

setup() {
  common_setup
  mkdir -p "$TEST_DIR/nvme" "$TEST_DIR/small"
  # shellcheck source=/dev/null
  . "$BBKIT_SOURCE_DIR/share/bash-completion/completions/bb-stat"
}
teardown() { common_teardown; }

complete_words() {  # complete_words WORD... : COMPREPLY for the last word, one per line
  COMP_WORDS=("$@")
  COMP_CWORD=$(($# - 1))
  COMPREPLY=()
  _bbkit
  printf '%s\n' "${COMPREPLY[@]}"
}

@test "every tool has a completion file that registers _bbkit" {
  for tool in bb-parse bb-pool bb-stage bb-stat bb-teardown; do
    assert_file_exists "$BBKIT_SOURCE_DIR/share/bash-completion/completions/$tool"
    run bash -c ". '$BBKIT_SOURCE_DIR/share/bash-completion/completions/$tool'; complete -p $tool"
    assert_success
    assert_output --partial "_bbkit"
  done
}

@test "bb-pool completes its subcommands and a subcommand's options" {
  run complete_words bb-pool re
  assert_success
  assert_line recover
  assert_line reap
  assert_line reconcile
  assert_line resume
  refute_line list
  run complete_words bb-pool alloc --ca
  assert_output -- "--capacity"
  run complete_words bb-pool init --re
  assert_output -- "--replace"
}

@test "pool arguments complete the names bb-pool list prints" {
  bb-pool init nvme >/dev/null
  run complete_words bb-pool init n
  assert_output "nvme"
  run complete_words bb-pool alloc --pool s
  assert_output "small"
  run complete_words bb-pool drain ""
  assert_line nvme
  assert_line small
}

@test "bb-stat completes its views and bb-stage its subcommands" {
  run complete_words bb-stat b
  assert_output $'buffers\nburst'
  run complete_words bb-stat bu
  assert_output $'buffers\nburst'
  run complete_words bb-stat buf
  assert_output "buffers"
  run complete_words bb-stage --job 7 pa
  assert_output "paths"
  run complete_words bb-stat --pro
  assert_output -- "--prometheus"
  run complete_words bb-stat hi
  assert_output "history"
  run complete_words bb-stat history --by ""
  assert_output $'user\npool'
  run complete_words bb-stat history --since now-7
  assert_output "now-7days"
  run complete_words bb-stat history --pl
  assert_output -- "--plot"
  run complete_words bb-pool health --mon
  assert_output -- "--monitor"
}

@test "no state directory completes no pool and prints nothing" {
  run complete_words bb-pool --state-dir "$TEST_DIR/typo" init ""
  assert_success
  assert_output ""
  assert_not_exist "$TEST_DIR/state"
}
