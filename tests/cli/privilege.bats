#!/usr/bin/env bats
# The privilege boundary (bbkit(7), SECURITY): what a less privileged party can make root do.
# A test SlurmUser runs the tools through a real sudoers drop-in written by install-slurm
# (installed under /etc/sudoers.d for the test, removed afterwards), inside a mount namespace
# where root's own configuration, /etc/bbkit/bbkit.toml, is the test's (with-default-config).
# Each test is an attack that worked before the defence it names.

bats_require_minimum_version 1.5.0
load common

SLURM_SHARE="$BBKIT_SOURCE_DIR/share/bbkit/slurm"
WITH_DEFAULT_CONFIG="$BBKIT_SOURCE_DIR/tests/with-default-config"

# The SlurmUser of these tests: its own account, so that no other suite's user gains sudo.
slurm_test_user() {
  local name=bbkit-slurmtest
  if ! id "$name" >/dev/null 2>&1; then
    useradd --system --create-home --home-dir "/var/tmp/$name" --shell /bin/bash "$name" \
      2>/dev/null || id "$name" >/dev/null
  fi
  echo "$name"
}

setup() {
  staging_setup
  SU=$(slurm_test_user)
  SU_HOME=$(getent passwd "$SU" | cut -d: -f6)
  mkdir -p "$SU_HOME" && chown "$SU:" "$SU_HOME" && chmod 700 "$SU_HOME"
  # The drop-in install-slurm writes (slurm-scripts.bats checks that it does, the same way).
  sed -e "s|@SLURM_USER@|$SU|g" -e "s|@BINDIR@|$BBKIT_BIN|g" \
    "$SLURM_SHARE/sudoers" >"$TEST_DIR/bbkit.sudoers"
  # sudo skips drop-ins whose name holds a dot.
  DROPIN="/etc/sudoers.d/bbkit-privilege-test-$$"
  install -m 0440 -o root -g root "$TEST_DIR/bbkit.sudoers" "$DROPIN"
  visudo -cf "$DROPIN" >/dev/null
  BIN=$BBKIT_BIN
  MARK="$TEST_DIR/hook-ran-as-root"
}

teardown() {
  rm -f "${DROPIN:-/nonexistent}" "${EXTRA_DROPIN:-/nonexistent}"
  rm -rf "${SU_HOME:?}"/* 2>/dev/null || true
  common_teardown
}

# as_slurm COMMAND...: COMMAND as the SlurmUser, in the namespace where root's configuration is
# the test's.
as_slurm() {
  "$WITH_DEFAULT_CONFIG" "$BBKIT_CONFIG" runuser -u "$SU" -- "$@"
}

# The attacker's configuration: a hook of its own that would run as root, its own state
# directory, and a root-owned directory as a pool.
write_attack_config() {
  cat >"$SU_HOME/hook" <<EOF
#!/bin/sh
touch '$MARK'
EOF
  chmod 755 "$SU_HOME/hook"
  cat >"$SU_HOME/x.toml" <<EOF
state_dir = "$SU_HOME/state"
allow_root = true
[[pool]]
name = "p"
path = "/root"
capacity = "1GiB"
[hooks]
pre_run = "$SU_HOME/hook"
EOF
  chown -R "$SU:" "$SU_HOME"
}

@test "through sudo, --config and --state-dir are refused (77) and the caller's hook never runs as root" {
  write_attack_config
  run -77 as_slurm sudo -n "$BIN/bb-pool" alloc --config "$SU_HOME/x.toml" --job 1 --user 0 \
    --pool p --capacity 1G
  assert_output --regexp "^bb-pool: refusing --config: running as root for uid $(id -u "$SU") \\($SU, through sudo\\), which may not choose the files root reads or writes"
  run -77 as_slurm sudo -n "$BIN/bb-stage" --job 1 --config "$SU_HOME/x.toml" pre-run
  assert_output --partial "refusing --config"
  run -77 as_slurm sudo -n "$BIN/bb-stage" --job 1 --state-dir "$SU_HOME/state" pre-run
  assert_output --partial "refusing --state-dir"
  run -77 as_slurm sudo -n "$BIN/bb-stat" --config "$SU_HOME/x.toml" pools
  assert_file_not_exists "$MARK"
  assert_file_not_exists "/root/job"
  # What the drop-in does not name, sudo itself refuses.
  run as_slurm sudo -n "$BIN/bb-pool" --config "$SU_HOME/x.toml" init p
  assert_failure 1
  assert_output --partial "password is required"
  run as_slurm sudo -n "$BIN/bb-pool" init nvme
  assert_failure 1
}

@test "through sudo, output files are refused: bb-stat --prometheus and bb-stage paths --output write nothing as root" {
  bb-pool alloc --job 7 --user "$U" --pool nvme --capacity 1G >/dev/null
  run -77 as_slurm sudo -n "$BIN/bb-stat" --prometheus /root/bbkit-owned
  assert_output --partial "refusing --prometheus"
  assert_file_not_exists /root/bbkit-owned
  run -77 as_slurm sudo -n "$BIN/bb-stage" --job 7 paths --output /root/bbkit-owned
  assert_output --partial "refusing --output"
  assert_file_not_exists /root/bbkit-owned
  # The same commands as root itself still work.
  run bb-stat --prometheus "$TEST_DIR/metrics.prom" pools
  assert_success
  assert_file_exists "$TEST_DIR/metrics.prom"
}

@test "through sudo, an env_keep that lets BBKIT_CONFIG, BBKIT_STATE_DIR or BBKIT_FAULT_LOG in changes nothing" {
  write_attack_config
  EXTRA_DROPIN="/etc/sudoers.d/bbkit-privilege-env-$$"
  printf 'Defaults:%s env_keep += "BBKIT_CONFIG BBKIT_STATE_DIR BBKIT_FAULT BBKIT_FAULT_LOG"\n' \
    "$SU" >"$EXTRA_DROPIN"
  chmod 0440 "$EXTRA_DROPIN"
  bb-pool alloc --job 8 --user "$U" --pool nvme --capacity 1G >/dev/null
  bb-stage --job 8 in >/dev/null
  run as_slurm env BBKIT_CONFIG="$SU_HOME/x.toml" BBKIT_STATE_DIR="$SU_HOME/state" \
    BBKIT_FAULT=hook.entered BBKIT_FAULT_LOG=/root/bbkit-fault-log \
    sudo -n "$BIN/bb-stage" --job 8 pre-run
  assert_success
  assert_file_not_exists "$MARK"
  assert_file_not_exists /root/bbkit-fault-log
  assert_dir_not_exists "$SU_HOME/state"
  run bb-stat --json job 8
  assert_output --partial '"state": "running"'
}

@test "through sudo, a script is read with the caller's permissions, not root's" {
  printf '#!/bin/bash\n#BB_LUA capacity=1G pool=nvme\n' >"$TEST_DIR/root-only.sh"
  chmod 600 "$TEST_DIR/root-only.sh"
  run -77 as_slurm sudo -n "$BIN/bb-parse" --script "$TEST_DIR/root-only.sh" --json
  assert_output "bb-parse: cannot read '$TEST_DIR/root-only.sh': Permission denied"
  run -0 as_slurm sudo -n "$BIN/bb-parse" --script /dev/null --json
  chmod 644 "$TEST_DIR/root-only.sh"
  run -0 as_slurm sudo -n "$BIN/bb-parse" --script "$TEST_DIR/root-only.sh" --json
}

@test "through sudo, a persistent buffer is refused without EnablePersistent, and its owner must be allowed" {
  run as_slurm sudo -n "$BIN/bb-pool" alloc --persistent pp --pool nvme --capacity 1G
  assert_failure 77
  assert_output "bb-pool: user root may not create persistent burst buffers (EnablePersistent is not set)"
  assert_not_exist "$(bbdir $TEST_DIR/nvme/persistent/main.pp)"
  write_config 'flags = ["EnablePersistent"]' "deny_users = [\"$U\"]"
  run as_slurm sudo -n "$BIN/bb-pool" alloc --persistent pp --owner "$U" --pool nvme --capacity 1G
  assert_failure 77
  assert_output --partial "user $U may not use burst buffers (listed in deny_users)"
  # Root itself still may, for anyone.
  run bb-pool alloc --persistent pp --owner "$U" --pool nvme --capacity 1G
  assert_success
}

@test "through sudo, bb-teardown --force is refused (77): an administrator's override, never SlurmUser's" {
  write_config 'flags = ["EnablePersistent"]'
  run bb-pool alloc --job 71 --user "$U" --pool nvme --capacity 1G
  assert_success
  run as_slurm sudo -n "$BIN/bb-teardown" --job 71 --force
  assert_failure 77
  assert_output --partial "refusing --force: running as root for uid $(id -u "$SU") ($SU, through sudo)"
  assert_dir_exists "$(bbdir $TEST_DIR/nvme/job/main.71.1)"
  run bb-pool alloc --persistent inuse --owner "$U" --pool nvme --capacity 1G
  assert_success
  run as_slurm sudo -n "$BIN/bb-teardown" --job 71
  assert_success
  # The drop-in allows no --persistent in this mode: the override cannot come that way either.
  run as_slurm sudo -n "$BIN/bb-teardown" --persistent inuse --force
  assert_failure
  assert_dir_exists "$(bbdir $TEST_DIR/nvme/persistent/main.inuse)"
  # Root itself may.
  run bb-teardown --persistent inuse --force
  assert_success
}

@test "the audit log names sudo's caller" {
  run as_slurm sudo -n "$BIN/bb-pool" alloc --job 9 --user "$U" --pool nvme --capacity 1G
  assert_success
  run grep "action=alloc" "$TEST_DIR/state/log/audit.log"
  assert_output --regexp " uid=0 sudo_uid=$(id -u "$SU") sudo_user=$SU host=$(hostname) pid=[0-9]+ tool=bb-pool alloc action=alloc "
}

@test "privileged actions also go to syslog (identifier bbkit, authpriv), naming sudo's caller" {
  run "$BBKIT_SOURCE_DIR/tests/with-log-socket" "$TEST_DIR/syslog" \
    "$WITH_DEFAULT_CONFIG" "$BBKIT_CONFIG" runuser -u "$SU" -- \
    sudo -n "$BIN/bb-pool" alloc --job 9 --user "$U" --pool nvme --capacity 1G
  assert_success
  # <85>: facility authpriv (10), severity notice (5).
  run grep "bbkit\[" "$TEST_DIR/syslog"
  assert_output --regexp "^<85>.*bbkit\[[0-9]+\]: uid=0 sudo_uid=$(id -u "$SU") sudo_user=$SU tool=bb-pool alloc action=alloc buffer=main.9.1 "
}

@test "root refuses a configuration that another user could change (78)" {
  chown "$U" "$BBKIT_CONFIG"
  run -78 bb-stat
  assert_output "bb-stat: configuration $BBKIT_CONFIG is not trusted: it is owned by uid $(id -u "$U") (root reads and runs only what nobody else can change: chown root $BBKIT_CONFIG)"
  chown root "$BBKIT_CONFIG"
  chmod 664 "$BBKIT_CONFIG"
  run -78 bb-stat
  assert_output --partial "it is writable by group or others"
  chmod 644 "$BBKIT_CONFIG"
  chmod 777 "$TEST_DIR"
  run -78 bb-stat
  assert_output --partial "$TEST_DIR is writable by group or others (root reads and runs only what nobody else can change: chmod go-w $TEST_DIR)"
  chmod 755 "$TEST_DIR"
  # A symlink another user may replace: the directory holding it is theirs.
  mkdir "$TEST_DIR/userdir" && chown "$U" "$TEST_DIR/userdir"
  ln -s "$BBKIT_CONFIG" "$TEST_DIR/userdir/bbkit.toml"
  run -78 bb-stat --config "$TEST_DIR/userdir/bbkit.toml"
  assert_output --partial "$TEST_DIR/userdir is owned by uid $(id -u "$U")"
  # A root-owned symlink in a root-owned directory to a root-owned file is fine.
  ln -s "$BBKIT_CONFIG" "$TEST_DIR/link.toml"
  run -0 bb-stat --config "$TEST_DIR/link.toml"
  # Not root: no privilege to lend, so no such check.
  chown "$U" "$BBKIT_CONFIG"
  run -0 runuser -u "$U" -- bb-stat --config "$BBKIT_CONFIG"
}

@test "root refuses to run a hook that another user could change, and records the failure" {
  printf '#!/bin/sh\ntouch %s\n' "$MARK" >"$TEST_DIR/hook"
  chmod 755 "$TEST_DIR/hook"
  chown "$U" "$TEST_DIR/hook"
  write_config '[hooks]' "pre_run = \"$TEST_DIR/hook\""
  bb-pool alloc --job 11 --user "$U" --pool nvme --capacity 1G >/dev/null
  bb-stage --job 11 in >/dev/null
  run -78 bb-stage --job 11 pre-run
  assert_output "bb-stage: pre_run hook $TEST_DIR/hook is not trusted: it is owned by uid $(id -u "$U") (root reads and runs only what nobody else can change: chown root $TEST_DIR/hook)"
  assert_file_not_exists "$MARK"
  chown root "$TEST_DIR/hook"
  run -0 bb-stage --job 11 pre-run
  assert_file_exists "$MARK"
}

@test "env files are readable by the state owner and state_group only: other users cannot even learn which exist" {
  write_config "state_group = \"$(id -gn "$SU")\""
  bb-pool alloc --job 12 --user "$U" --pool nvme --capacity 1G >/dev/null
  env_dir="$TEST_DIR/state/env"
  run stat -c '%a %G' "$env_dir" "$env_dir/main.12.env" "$env_dir/main.12.1.env"
  assert_output "2710 $(id -gn "$SU")
640 $(id -gn "$SU")
640 $(id -gn "$SU")"
  # The job's user (any user outside state_group): not even the file's existence.
  run runuser -u "$U" -- stat "$env_dir/main.12.env"
  assert_failure
  assert_output --partial "Permission denied"
  run runuser -u "$U" -- cat "$env_dir/main.12.1.env"
  assert_failure
  # SlurmUser, in state_group, reads it as burst_buffer.lua does.
  run runuser -u "$SU" -- cat "$env_dir/main.12.env"
  assert_success
  assert_line "BB_JOB_DIR=$(bbdir $TEST_DIR/nvme/job/main.12.1)"
  # An env/ left world-searchable by an older version is closed at the next writing call
  # (a reading one, such as bb-stat, changes nothing: bbkit(7), STATE DIRECTORY).
  chmod 0711 "$env_dir"
  bb-pool recover >/dev/null
  run stat -c %a "$env_dir"
  assert_output 2710
  # A state_group that does not exist is a configuration error.
  write_config 'state_group = "no-such-group-here"'
  run -78 bb-stat
  assert_output "bb-stat: state_group 'no-such-group-here' is not a group on this host (groupadd it, or change state_group in the configuration)"
}

@test "a user other than the state's owner is told whom to run as, root once" {
  bb-pool recover >/dev/null
  chmod 0711 "$TEST_DIR/state"
  run -77 runuser -u "$U" -- "$BIN/bb-pool" --config "$BBKIT_CONFIG" list
  assert_output "bb-pool: state directory $TEST_DIR/state belongs to root (run this as root)"
}

@test "a pool root that is a symlink is reported as one, and receives nothing" {
  mkdir "$TEST_DIR/real"
  rmdir "$TEST_DIR/small" 2>/dev/null || rm -rf "$TEST_DIR/small"
  ln -s "$TEST_DIR/real" "$TEST_DIR/small"
  run -78 bb-pool init small
  assert_output "bb-pool: pool directory $TEST_DIR/small is a symlink (name the directory it points to in the configuration)"
  run find "$TEST_DIR/real" -mindepth 1
  assert_output ''
}
