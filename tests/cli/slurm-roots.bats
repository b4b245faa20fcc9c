#!/usr/bin/env bats
# scripts/slurm-root and tests/slurm-release, the roots the end-to-end suites run other Slurm
# releases in: their usage errors, and a root that cannot be made (no archive) leaving the cache
# as it was. Making a real root is the slurm-RELEASE.build tests' part.

load common

setup() { common_setup; }
teardown() { common_teardown; }

@test "slurm-root refuses releases it has no root for, unknown options and no release, in one line" {
  run "$BBKIT_SOURCE_DIR/scripts/slurm-root" 23.11
  assert_failure 64
  assert_output "slurm-root: no root for Slurm '23.11': give 24.11 or 26.05 (22.05 is this host's own)"
  run "$BBKIT_SOURCE_DIR/scripts/slurm-root" 22.05
  assert_failure 64
  run "$BBKIT_SOURCE_DIR/scripts/slurm-root" --fresh 24.11
  assert_failure 64
  assert_output "slurm-root: unknown option '--fresh' (known: --rebuild)"
  run "$BBKIT_SOURCE_DIR/scripts/slurm-root"
  assert_failure 64
  run env BBKIT_SLURM_ROOT_DAYS=soon "$BBKIT_SOURCE_DIR/scripts/slurm-root" 24.11
  assert_failure 64
  assert_output "slurm-root: BBKIT_SLURM_ROOT_DAYS must be a number of days"
}

@test "slurm-root: a root debootstrap cannot make fails with 69 and leaves the cached one and nothing else" {
  local cache=$TEST_DIR/cache
  mkdir -p "$cache/24.11/etc" "$cache/24.11/usr/sbin"
  echo "an older recipe" >"$cache/24.11/etc/bbkit-slurm-root"
  # Nothing listens on port 9 of loopback: the archive is unreachable.
  run env BBKIT_SLURM_ROOTS="$cache" BBKIT_DEBIAN_MIRROR=http://127.0.0.1:9/debian \
    "$BBKIT_SOURCE_DIR/scripts/slurm-root" 24.11
  assert_failure 69
  assert_line --regexp "^slurm-root: debootstrap of Debian trixie failed \(last lines above; full log $cache/\.24\.11\.new\.[A-Za-z0-9]+\.log\)$"
  assert_equal "$(cat "$cache/24.11/etc/bbkit-slurm-root")" "an older recipe"
  run find "$cache" -mindepth 1 -maxdepth 1 -name '.24.11.new.*' -type d
  assert_output ""
}

@test "slurm-release refuses unknown actions and a run without a suite" {
  run "$BBKIT_SOURCE_DIR/tests/slurm-release" test 24.11 "$BBKIT_SOURCE_DIR" "$TEST_DIR/work"
  assert_failure 64
  assert_output "slurm-release: unknown action 'test'"
  run "$BBKIT_SOURCE_DIR/tests/slurm-release" run 24.11 "$BBKIT_SOURCE_DIR" "$TEST_DIR/work"
  assert_failure 64
  assert_output "slurm-release: run needs a suite name"
  run "$BBKIT_SOURCE_DIR/tests/slurm-release" build 24.11
  assert_failure 64
  [ ! -e "$TEST_DIR/work" ]
}
