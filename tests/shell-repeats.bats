#!/usr/bin/env bats
# scripts/check-shell-repeats, which scripts/lint-scripts runs over the shell scripts of share/:
# the scheduler scripts, which have no file name extension, write each rule they share once
# (bbkit-lib.sh), and a block written again in any of them is found. ctest runs this as
# lint.shell-repeats.

bats_load_library bats-support
bats_load_library bats-assert

setup() {
  top=$(cd "$BATS_TEST_DIRNAME/.." && pwd)
  check=$top/scripts/check-shell-repeats
  TEST_DIR=$(mktemp -d "${BATS_TMPDIR:-/tmp}/bbkit-repeats.XXXXXX")
  # Two adapters and the library, copied: what a test plants goes into the copies.
  cp "$top/share/bbkit/standalone/pbs/prologue" "$TEST_DIR/prologue"
  cp "$top/share/bbkit/standalone/slurm/epilog-slurmctld" "$TEST_DIR/epilog-slurmctld"
  cp "$top/share/bbkit/standalone/bbkit-lib.sh" "$TEST_DIR/bbkit-lib.sh"
  copies=("$TEST_DIR/prologue" "$TEST_DIR/epilog-slurmctld" "$TEST_DIR/bbkit-lib.sh")
}

teardown() {
  rm -rf "$TEST_DIR"
}

# plant FILE LINES...: LINES appended to FILE, after a blank line.
plant() {
  local file=$1
  shift
  printf '\n' >>"$file"
  printf '%s\n' "$@" >>"$file"
}

# The body of bbkit_ge_error_file in bbkit-lib.sh, six lines once normalised.
ge_error_file=(
  '    bbkit_say_also='
  '    set -- "${SGE_JOB_SPOOL_DIR:-}"'
  '    if [ -n "$1" ] && [ -d "$1" ] && [ ! -L "$1" ] && [ -f "$1/error" ] &&'
  '        [ ! -L "$1/error" ] && [ "$(stat -c %U -- "$1")" != "${USER:-}" ]; then'
  '        bbkit_say_also=$1/error'
  '    fi'
)

@test "the scheduler scripts, the Debian package's and install-slurm repeat no run of six lines" {
  cd "$top"
  run "$check" share/bbkit/standalone/bbkit-lib.sh share/bbkit/standalone/bbkit-job \
    share/bbkit/standalone/*/* share/bbkit/datawarp/dw_wlm_cli share/bbkit/datawarp/dwstat \
    share/bbkit/slurm/install-slurm share/bbkit/debian/postinst share/bbkit/debian/prerm \
    share/bbkit/debian/postrm
  assert_success
  assert_output --regexp '^check-shell-repeats: [0-9]+ shell scripts, no run of 6 lines repeated$'
}

@test "a rule of the library written again in an adapter fails, naming both places" {
  run "$check" "${copies[@]}"
  assert_success
  local at end
  at=$(grep -n -F -x -e "${ge_error_file[0]}" "$TEST_DIR/bbkit-lib.sh" | cut -d: -f1)
  end=$(($(wc -l <"$TEST_DIR/prologue") + 2))
  plant "$TEST_DIR/prologue" "${ge_error_file[@]}"
  run "$check" "${copies[@]}"
  assert_failure 1
  assert_output "check-shell-repeats: $TEST_DIR/prologue:$end-$((end + 5)) and $TEST_DIR/bbkit-lib.sh:$at-$((at + 5)) repeat 6 lines ('bbkit_say_also=' ...): write them once (a function; bbkit-lib.sh for what adapters share), or mark them '# repeated on purpose: WHY'"
}

@test "indentation, blank lines and comments do not hide a repeat" {
  plant "$TEST_DIR/epilog-slurmctld" "${ge_error_file[0]# }" '' '# a comment' \
    "${ge_error_file[@]:1:3}" "	${ge_error_file[4]}  " '' "${ge_error_file[5]}"
  run "$check" "${copies[@]}"
  assert_failure 1
  assert_output --regexp "^check-shell-repeats: $TEST_DIR/epilog-slurmctld:[0-9]+-[0-9]+ and $TEST_DIR/bbkit-lib.sh:[0-9]+-[0-9]+ repeat 6 lines "
  assert_equal "${#lines[@]}" 1
}

@test "five lines are no finding, six are; --min-lines sets the number" {
  plant "$TEST_DIR/prologue" "${ge_error_file[@]:0:5}"
  run "$check" "${copies[@]}"
  assert_success
  run "$check" --min-lines 5 "${copies[@]}"
  assert_failure 1
  assert_output --partial "repeat 5 lines"
}

@test "a run repeated within one script is found" {
  plant "$TEST_DIR/epilog-slurmctld" 'one' 'two' 'three' 'four' 'five' 'six' 'x' \
    'one' 'two' 'three' 'four' 'five' 'six' 'seven'
  run "$check" "$TEST_DIR/epilog-slurmctld"
  assert_failure 1
  assert_output --regexp "^check-shell-repeats: $TEST_DIR/epilog-slurmctld:[0-9]+-[0-9]+ and $TEST_DIR/epilog-slurmctld:[0-9]+-[0-9]+ repeat 6 lines \('one' \.\.\.\)"
  assert_equal "${#lines[@]}" 1
}

@test "a run marked as repeated on purpose passes; the mark needs its reason" {
  plant "$TEST_DIR/prologue" '# repeated on purpose: this test says so' "${ge_error_file[@]}"
  run "$check" "${copies[@]}"
  assert_success
  # The mark reaches the next blank line only.
  plant "$TEST_DIR/epilog-slurmctld" '# repeated on purpose: this test says so' 'exit 0' '' \
    "${ge_error_file[@]}"
  run "$check" "${copies[@]}"
  assert_failure 1
  assert_output --partial "$TEST_DIR/epilog-slurmctld:"
  printf '# repeated on purpose:\n' >>"$TEST_DIR/prologue"
  run "$check" "${copies[@]}"
  assert_failure 64
  assert_output --partial "say why after '# repeated on purpose:'"
}

@test "usage errors exit 64" {
  run "$check"
  assert_failure 64
  run "$check" --min-lines 1 "${copies[@]}"
  assert_failure 64
}
