#!/usr/bin/env bats
# An install under a prefix other than the configured one (cmake --install --prefix): the
# tools find their bb-mover, install-slurm and the standalone scripts find their tools, all relative to
# where they are installed (bbkit(7), FILES).

load common

setup_file() {
  PREFIX_ROOT=$(mktemp -d /tmp/bbkit-install.XXXXXX)
  chmod 755 "$PREFIX_ROOT"
  P="$PREFIX_ROOT/opt/bbkit"
  cmake --install "$BBKIT_BUILD_DIR" --prefix "$P" >/dev/null
  export PREFIX_ROOT P
}

teardown_file() { rm -rf "${PREFIX_ROOT:?}"; }

setup() { staging_setup; }
teardown() { common_teardown; }

as_user() { runuser -u "$U" -- "$@"; }

# alloc_with_file JOB: a buffer for JOB whose stage-in copies one file of the user's.
alloc_with_file() {
  as_user sh -c "printf 'hello\n' >'$TEST_DIR/pfs/in.txt'"
  "$P/bin/bb-pool" alloc --job "$1" --user "$U" \
    --bb "#BB_LUA capacity=1G #BB_LUA stage_in type=file source=$TEST_DIR/pfs/in.txt destination=in.txt" >/dev/null
}

@test "the install puts the tools in bin, the mover in libexec/bbkit, the standalone and datawarp scripts executable" {
  for tool in bb-parse bb-pool bb-stage bb-teardown bb-stat; do
    assert_file_executable "$P/bin/$tool"
  done
  assert_file_not_exists "$P/bin/bb-mover"
  assert_file_executable "$P/libexec/bbkit/bb-mover"
  assert_file_executable "$P/share/bbkit/standalone/bbkit-job"
  for script in prolog-slurmctld epilog-slurmctld task-prolog; do
    assert_file_executable "$P/share/bbkit/standalone/slurm/$script"
  done
  assert_file_not_exists "$P/share/bbkit/examples"
  assert_file_executable "$P/share/bbkit/slurm/install-slurm"
  assert_file_executable "$P/share/bbkit/datawarp/dw_wlm_cli"
  assert_file_executable "$P/share/bbkit/datawarp/dwstat"
  assert_file_exists "$P/share/bbkit/datawarp/burst_buffer.conf"
  for s in pbs/prologue pbs/epilogue gridengine/prolog gridengine/epilog; do
    assert_file_executable "$P/share/bbkit/standalone/$s"
  done
  assert_file_exists "$P/share/bbkit/bbkit.toml.example"
  assert_file_exists "$P/share/man/man7/bbkit.7"
}

@test "an installed bb-stage stages with the mover of its own prefix" {
  alloc_with_file 7
  run "$P/bin/bb-stage" in --job 7
  assert_success
  run cat "$(bbdir $TEST_DIR/nvme/job/main.7.1)/in.txt"
  assert_output hello
  run "$P/bin/bb-teardown" --job 7
  assert_success
}

@test "a mover that others could change is refused with 78, and the buffer is left as it was" {
  alloc_with_file 8
  chmod g+w "$P/libexec/bbkit/bb-mover"
  run "$P/bin/bb-stage" in --job 8
  chmod g-w "$P/libexec/bbkit/bb-mover"
  assert_failure 78
  assert_output --partial "$P/libexec/bbkit/bb-mover"
  assert_output --partial "chmod go-w"
  [ "${#lines[@]}" -eq 1 ]
  run "$P/bin/bb-stage" in --job 8
  assert_success
}

@test "install-slurm finds the tools of its own prefix without --bindir" {
  write_config 'mode = "slurm"' 'directives = ["BB_LUA"]' \
    '[timeouts]' 'stage_in = 600' 'stage_out = 600' 'other = 120'
  mkdir -p "$TEST_DIR/etc"
  run env PATH=/usr/sbin:/usr/bin:/sbin:/bin "$P/share/bbkit/slurm/install-slurm" \
    --slurm-conf-dir "$TEST_DIR/etc" --config "$BBKIT_CONFIG" --slurm-api 22.05
  assert_success
  run grep '^BBKIT_BINDIR = ' "$TEST_DIR/etc/burst_buffer.lua"
  assert_output "BBKIT_BINDIR = \"$P/bin\""
}

@test "the installed EpilogSlurmctld finds bbkit-job and the tools of its own prefix" {
  alloc_with_file 9
  run env PATH=/usr/bin:/bin SLURM_JOB_ID=9 "$P/share/bbkit/standalone/slurm/epilog-slurmctld"
  assert_success
  run "$P/bin/bb-stat" job 9 --json
  assert_output --partial teardown
}

@test "the Debian package's bbkit.toml is valid and holds no pool" {
  install -m 0644 "$BBKIT_SOURCE_DIR/share/bbkit/debian/bbkit.toml" "$TEST_DIR/package.toml"
  sed -i "s|^state_dir = .*|state_dir = \"$TEST_DIR/package-state\"|" "$TEST_DIR/package.toml"
  run "$P/bin/bb-parse" --config "$TEST_DIR/package.toml" config
  assert_success
  # Reading commands never create state: the first writing one (recover, as the package's
  # bbkit-recover.service runs at boot) does.
  run "$P/bin/bb-pool" --config "$TEST_DIR/package.toml" list
  assert_failure 66
  run "$P/bin/bb-pool" --config "$TEST_DIR/package.toml" recover
  assert_success
  run "$P/bin/bb-pool" --config "$TEST_DIR/package.toml" list
  assert_success
  refute_output --partial nvme
}
