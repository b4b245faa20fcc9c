#!/usr/bin/env bats
# The Debian package (scripts/package): installed with dpkg -i on this machine, checked where
# bbkit(7) FILES says its files are, the units verified by systemd-analyze, the demo run against
# /usr/bin, then purged. Run by .ci/run:
#   BBKIT_DEB=build-package/bbkit_VERSION_ARCH.deb bats tests/package/package.bats
# It changes the machine (/etc/bbkit/bbkit.toml, /var/lib/bbkit, /usr): run it as root on a
# machine where bbkit is not installed otherwise.

bats_load_library bats-support
bats_load_library bats-assert
bats_load_library bats-file

setup_file() {
  : "${BBKIT_DEB:?name the .deb in BBKIT_DEB}"
  [ "$(id -u)" -eq 0 ] || skip "needs root: installs a package"
  if dpkg-query -W -f='${Status}' bbkit 2>/dev/null | grep -q installed; then
    echo "bbkit is already installed here: not touching it" >&2
    return 1
  fi
  [ ! -e /var/lib/bbkit ] || { echo "/var/lib/bbkit exists: not touching it" >&2; return 1; }
  [ ! -e /etc/bbkit/bbkit.toml ] || { echo "/etc/bbkit/bbkit.toml exists: not touching it" >&2; return 1; }
  dpkg -i "$BBKIT_DEB" >&3
}

teardown_file() {
  dpkg --purge bbkit >&3 || true
  # The tools' own records (the state database) and root's key to them stay after a purge by
  # design (postrm).
  rm -rf /var/lib/bbkit
  rm -f /etc/bbkit/record.key /etc/bbkit/record.key.sealed
  rmdir /etc/bbkit 2>/dev/null || true
}

UNITS="bbkit-recover.service bbkit-reap.service bbkit-reap.timer bbkit-check.service
  bbkit-check.timer bbkit-reconcile.service bbkit-reconcile.timer bbkit-metrics.service
  bbkit-metrics.timer"

@test "the package puts every file where bbkit(7) FILES says" {
  for tool in bb-parse bb-pool bb-stage bb-teardown bb-stat; do
    assert_file_executable "/usr/bin/$tool"
  done
  assert_file_executable /usr/libexec/bbkit/bb-mover
  assert_file_executable /usr/share/bbkit/standalone/bbkit-job
  assert_file_executable /usr/share/bbkit/standalone/slurm/prolog-slurmctld
  assert_file_executable /usr/share/bbkit/slurm/install-slurm
  # The Slurm scripts install-slurm fills in (submit_rules.lua written into two of them): data.
  for f in burst_buffer.lua cli_filter.lua submit_rules.lua bbkit_job_submit.lua job_submit.lua \
    burst_buffer.conf sudoers; do
    [ "$(stat -c '%a %U' "/usr/share/bbkit/slurm/$f")" = "644 root" ] || fail "/usr/share/bbkit/slurm/$f: $(stat -c '%a %U' "/usr/share/bbkit/slurm/$f")"
  done
  assert_file_executable /usr/share/bbkit/datawarp/dw_wlm_cli
  assert_file_executable /usr/share/bbkit/datawarp/dwstat
  for s in pbs/prologue pbs/epilogue gridengine/prolog gridengine/epilog spur/job_submit \
    spur/prolog_slurmctld spur/epilog_slurmctld slurm-node/prolog slurm-node/epilog \
    slurm-node/healthcheck; do
    assert_file_executable "/usr/share/bbkit/standalone/$s"
  done
  # The adapters' library: sourced, never run; root's and writable by root only, like them.
  [ "$(stat -c '%a %U' /usr/share/bbkit/standalone/bbkit-lib.sh)" = "644 root" ]
  assert_file_exists /usr/share/bbkit/bbkit.toml.example
  assert_file_exists /usr/share/man/man7/bbkit.7.gz
  assert_file_exists /usr/share/man/man1/bb-stage.1.gz
  assert_file_exists /usr/lib/tmpfiles.d/bbkit.conf
  assert_file_exists /etc/logrotate.d/bbkit
  for unit in $UNITS; do assert_file_exists "/lib/systemd/system/$unit"; done
  run dpkg-query -W -f='${Conffiles}\n' bbkit
  assert_output --partial /etc/bbkit/bbkit.toml
  assert_output --partial /etc/logrotate.d/bbkit
  [ "$(stat -c '%a %U' /var/lib/bbkit)" = "700 root" ]
}

@test "the package enables the recovery at boot and the timers" {
  assert_link_exists /etc/systemd/system/multi-user.target.wants/bbkit-recover.service
  for timer in bbkit-reap bbkit-check bbkit-reconcile bbkit-metrics; do
    assert_link_exists "/etc/systemd/system/timers.target.wants/$timer.timer"
  done
}

@test "the binaries are stripped and carry no crash-injection points" {
  run file -L /usr/bin/bb-pool /usr/libexec/bbkit/bb-mover
  refute_output --partial "not stripped"
  run env BBKIT_FAULT=list /usr/bin/bb-parse size 1GiB
  assert_success
  refute_output --partial "stage.entered"
  run du -sm /usr/bin/bb-pool
  [ "$(cut -f1 <<<"$output")" -lt 20 ]
}

@test "the package depends on the shared libsodium its seals use (dpkg-shlibdeps)" {
  run dpkg-deb -f "$BBKIT_DEB" Depends
  assert_success
  assert_output --regexp '(^|, )libsodium23( |,|$)'
  run ldd /usr/bin/bb-pool
  assert_output --partial libsodium.so.23
}

@test "the shipped configuration works: the units' commands succeed with it" {
  run /usr/bin/bb-parse config
  assert_success
  run /usr/bin/bb-pool recover
  assert_success
  run /usr/bin/bb-pool reap --budget 600
  assert_success
  run /usr/bin/bb-pool check
  assert_success
  prom=$(mktemp -d)
  run /usr/bin/bb-stat --prometheus "$prom/bbkit.prom"
  assert_success
  assert_file_exists "$prom/bbkit.prom"
  rm -rf "$prom"
}

@test "systemd-analyze verify accepts every unit and timer" {
  local paths=()
  for unit in $UNITS; do paths+=("/lib/systemd/system/$unit"); done
  run systemd-analyze verify "${paths[@]}"
  assert_success
  refute_output
}

@test "the logrotate file is valid" {
  command -v logrotate >/dev/null || skip "logrotate is not installed"
  run logrotate --debug /etc/logrotate.d/bbkit
  assert_success
}

@test "the demo runs against the installed tools" {
  BBKIT_BINDIR=/usr/bin run "$BBKIT_SOURCE_DIR/scripts/demo"
  assert_success
  assert_output --partial "demo complete"
}

@test "install-slurm of the package names /usr/bin" {
  conf=$(mktemp -d)
  printf 'mode = "slurm"\ndirectives = ["BB_LUA"]\nstate_dir = "%s/state"\n' "$conf" >"$conf/bbkit.toml"
  run /usr/share/bbkit/slurm/install-slurm --slurm-conf-dir "$conf" \
    --config "$conf/bbkit.toml" --slurm-api 22.05
  assert_success
  run grep '^BBKIT_BINDIR = ' "$conf/burst_buffer.lua"
  assert_output 'BBKIT_BINDIR = "/usr/bin"'
  rm -rf "$conf"
}
