#!/usr/bin/env bats
# bbkit's Slurm scripts: burst_buffer.lua, cli_filter.lua, the sudoers drop-in and
# install-slurm. The Lua hooks run under $LUA (lua5.1 by default; ctest runs the suite once
# each under lua5.1, lua5.3 and lua5.4, the Lua versions Slurm may link) with a `slurm` table
# shaped like a given release's (tests/slurm-lua/call-hook.lua) against the real tools and a
# real state directory. The end-to-end runs through a real slurmctld live in tests/slurm/.

load common

LUA=${LUA:-lua5.1}
LUAC=luac${LUA#lua}

# Tests of install-slurm and the sudoers drop-in alone run once, under the default Lua.
once_per_lua_set() {
  [ "$LUA" = lua5.1 ] || skip "install-slurm itself is tested under lua5.1's run"
}

# The Slurm release whose `slurm` table the hooks see: one that calls API's signatures.
release() {
  case "${API:-22.05}" in
    22.05) echo 22.05 ;;
    23.02) echo 23.11 ;;
    *) echo 24.11 ;;
  esac
}

# The installed scripts when ctest gives an installed tree (BBKIT_BIN_DIR), else the sources.
SLURM_SHARE="$BBKIT_SOURCE_DIR/share/bbkit/slurm"
[ -n "${BBKIT_BIN_DIR:-}" ] && SLURM_SHARE="$BBKIT_BIN_DIR/../share/bbkit/slurm"

setup() {
  common_setup
  write_config 'mode = "slurm"' 'directives = ["BB_LUA"]' \
    '[timeouts]' 'stage_in = 600' 'stage_out = 600' 'other = 120'
  mkdir -p "$TEST_DIR/nvme" "$TEST_DIR/small" "$TEST_DIR/etc" "$TEST_DIR/data"
  bb-pool init nvme >/dev/null
  bb-pool init small >/dev/null
  CONF="$TEST_DIR/etc"
  # Where the hooks' users can read it: the checkout may be out of their reach.
  CALL_HOOK="$TEST_DIR/call-hook.lua"
  install -m 0644 "$BBKIT_SOURCE_DIR/tests/slurm-lua/call-hook.lua" "$CALL_HOOK"
}

teardown() {
  [ -n "${DROPIN:-}" ] && rm -f "$DROPIN"
  [ -z "${MOUNTED:-}" ] || umount "$MOUNTED"
  common_teardown
}

install_scripts() {
  "$SLURM_SHARE/install-slurm" --slurm-conf-dir "$CONF" --config "$BBKIT_CONFIG" \
    --bindir "$BBKIT_BIN" --slurm-api "${API:-22.05}" "$@"
}

# Makes this host's Slurm say it is VERSION (slurmctld -V and scontrol -V print "slurm VERSION"),
# or, for "", have no Slurm install-slurm can ask.
fake_slurm() {
  mkdir -p "$TEST_DIR/fake-slurm"
  for prog in slurmctld scontrol; do
    if [ -n "$1" ]; then
      printf '#!/bin/sh\necho "slurm %s"\n' "$1" >"$TEST_DIR/fake-slurm/$prog"
    else
      printf '#!/bin/sh\nexit 1\n' >"$TEST_DIR/fake-slurm/$prog"
    fi
    chmod 0755 "$TEST_DIR/fake-slurm/$prog"
  done
  case ":$PATH:" in *":$TEST_DIR/fake-slurm:"*) ;; *) PATH="$TEST_DIR/fake-slurm:$PATH" ;; esac
}

# The setup's configuration, with env/ readable by USER's group, as an unprivileged SlurmUser
# needs (state_group).
config_for_slurm_user() {
  write_config 'mode = "slurm"' 'directives = ["BB_LUA"]' "state_group = \"$(id -gn "$1")\"" \
    '[timeouts]' 'stage_in = 600' 'stage_out = 600' 'other = 120'
}

# install_scripts_for USER [ARG...]: install-slurm for an unprivileged SlurmUser, whose tools run
# through sudo and read only /etc/bbkit/bbkit.toml: run where that file is $BBKIT_CONFIG.
install_scripts_for() {
  local user=$1
  shift
  "$BBKIT_SOURCE_DIR/tests/with-default-config" "$BBKIT_CONFIG" "$SLURM_SHARE/install-slurm" \
    --slurm-conf-dir "$CONF" --bindir "$BBKIT_BIN" --slurm-api "${API:-22.05}" \
    --slurm-user "$user" "$@"
}

# hook FUNCTION ARG...: runs one function of the installed burst_buffer.lua; what it logs
# through slurm.log_* goes to $TEST_DIR/slurmctld.log.
hook() {
  "$LUA" "$CALL_HOOK" --release "${RELEASE:-$(release)}" "$CONF/burst_buffer.lua" "$@" \
    2>>"$TEST_DIR/slurmctld.log"
}

# job_script ID LINE...: a job script where Slurm keeps it (hash.<id%10>/job.<id>/script),
# ending with the NUL byte Slurm appends.
job_script() {
  local id=$1 dir
  shift
  dir="$TEST_DIR/statesave/hash.$((id % 10))/job.$id"
  mkdir -p "$dir"
  { printf '#!/bin/bash\n'; printf '%s\n' "$@"; printf 'echo job\n\0'; } >"$dir/script"
  echo "$dir/script"
}

@test "the shipped Lua compiles under this run's Lua" {
  for f in burst_buffer.lua cli_filter.lua submit_rules.lua bbkit_job_submit.lua job_submit.lua; do
    run "$LUAC" -p "$SLURM_SHARE/$f"
    assert_success
  done
  run "$LUAC" -p "$CALL_HOOK"
  assert_success
}

@test "install-slurm --help documents every option" {
  once_per_lua_set
  run "$SLURM_SHARE/install-slurm" --help
  assert_success
  for opt in --slurm-conf-dir --config --bindir --slurm-api --lua --slurm-user --sudoers --sudo \
    --standalone --node-local --nodes; do
    assert_output --partial -- "$opt"
  done
  run "$SLURM_SHARE/install-slurm" --bogus
  assert_failure 64
  assert_output --partial "install-slurm: unknown argument '--bogus'"
  run "$SLURM_SHARE/install-slurm" --config "$BBKIT_CONFIG"
  assert_failure 64
  assert_output --partial "give --slurm-conf-dir DIR"
  run install_scripts --slurm-api 21.08
  assert_failure 64
}

@test "install-slurm fills in the settings from the effective configuration and checks them" {
  once_per_lua_set
  run install_scripts
  assert_success
  assert_output --partial "BurstBufferType=burst_buffer/lua"
  assert_output --partial "CliFilterPlugins=cli_filter/lua"
  run "$LUAC" -p "$CONF/burst_buffer.lua" "$CONF/cli_filter.lua"
  assert_success
  run grep -E '^(BBKIT_[A-Z_]+|SLURM_API) = ' "$CONF/burst_buffer.lua"
  assert_line "BBKIT_BINDIR = \"$BBKIT_BIN\""
  assert_line "BBKIT_CONFIG = \"$BBKIT_CONFIG\""
  assert_line "BBKIT_STATE_DIR = \"$TEST_DIR/state\""
  assert_line 'BBKIT_CLUSTER = "main"'
  assert_line 'BBKIT_DIRECTIVE = "BB_LUA"'
  assert_line 'SLURM_API = "22.05"'
  assert_line 'BBKIT_SUDO = "auto"'
  # Slurm's timeouts above bbkit's: 600 s -> 660 s, 120 s -> 150 s.
  run grep -v '^#' "$CONF/burst_buffer.conf"
  assert_line "Directive=BB_LUA"
  assert_line "StageInTimeout=660"
  assert_line "StageOutTimeout=660"
  assert_line "OtherTimeout=150"
  assert_line "Flags=DisablePersistent"
  # The state directory follows BBKIT_STATE_DIR as every tool does.
  BBKIT_STATE_DIR="$TEST_DIR/other-state" run install_scripts
  assert_success
  run grep '^BBKIT_STATE_DIR = ' "$CONF/burst_buffer.lua"
  assert_output "BBKIT_STATE_DIR = \"$TEST_DIR/other-state\""
}

@test "install-slurm with a backup controller refuses a state_dir local to this host and off StateSaveLocation's file system" {
  once_per_lua_set
  run bb-parse config
  assert_line --regexp '^# state_dir file system: [^ ]+ \(local\)$'
  # One controller: nothing to share.
  printf '%s\n' 'SlurmctldHost=one' 'StateSaveLocation=/proc/bbkit-nowhere' >"$CONF/slurm.conf"
  run install_scripts
  assert_success
  refute_output --partial "SlurmctldPrimaryOnProg"
  # Two: the state directory must move with the primary.
  printf '%s\n' 'SlurmctldHost=one' 'slurmctldhost=two' 'StateSaveLocation=/proc/bbkit-nowhere' \
    >"$CONF/slurm.conf"
  run install_scripts
  assert_failure 78
  assert_output --partial "state_dir $TEST_DIR/state is on "
  assert_output --partial "local to this host, and not on StateSaveLocation's own volume (/proc/bbkit-nowhere; both must exist, apart from the root file system), with 2 controllers in slurm.conf"
  [ "$(grep -c 'state_dir' <<<"$output")" -eq 1 ]
  printf '%s\n' 'ControlMachine=one' 'BackupController=two' 'StateSaveLocation=/proc/bbkit-nowhere' \
    >"$CONF/slurm.conf"
  run install_scripts
  assert_failure 78
  # Both on the root file system (/var/lib/bbkit and /var/spool/slurmctld of one disk), or one
  # not made yet (judged by a parent they share): refused, nothing moves with the primary.
  mkdir -p "$TEST_DIR/slurm-state"
  if [ "$(stat -c %d "$TEST_DIR")" = "$(stat -c %d /)" ]; then
    printf '%s\n' 'SlurmctldHost=one' 'SlurmctldHost=two' "StateSaveLocation=$TEST_DIR/slurm-state" \
      >"$CONF/slurm.conf"
    run install_scripts
    assert_failure 78
  fi
  # On StateSaveLocation's own volume (one that moves with the primary): accepted.
  mkdir -p "$TEST_DIR/volume"
  mount -t tmpfs -o size=8m tmpfs "$TEST_DIR/volume" || skip "cannot mount a tmpfs here"
  MOUNTED=$TEST_DIR/volume
  mkdir -p "$TEST_DIR/volume/slurmctld" "$TEST_DIR/volume/bbkit"
  chmod 0711 "$TEST_DIR/volume/bbkit"
  sed -i "s|^state_dir = .*|state_dir = \"$TEST_DIR/volume/bbkit\"|" "$BBKIT_CONFIG"
  printf '%s\n' 'SlurmctldHost=one' 'SlurmctldHost=two' \
    "StateSaveLocation=$TEST_DIR/volume/nowhere" >"$CONF/slurm.conf"
  run install_scripts
  assert_failure 78  # StateSaveLocation not made yet
  printf '%s\n' 'SlurmctldHost=one' 'SlurmctldHost=two' \
    "StateSaveLocation=$TEST_DIR/volume/slurmctld" >"$CONF/slurm.conf"
  run install_scripts
  assert_success
  # ... and the primary takes bbkit's state over at each start (Controller failover).
  scripts=$(cd "$BBKIT_BIN/../share/bbkit/standalone/slurm" && pwd)
  assert_line "SlurmctldPrimaryOnProg=$scripts/primary-on"
  assert_line "SlurmctldPrimaryOffProg=$scripts/primary-off"
  # A site's own program is kept, and told to run bbkit's.
  echo 'SlurmctldPrimaryOnProg=/usr/local/sbin/move-address' >>"$CONF/slurm.conf"
  run install_scripts
  assert_success
  refute_line --partial "SlurmctldPrimaryOnProg="
  assert_line "SlurmctldPrimaryOffProg=$scripts/primary-off"
  assert_output --partial "note: slurm.conf's SlurmctldPrimaryOnProg is /usr/local/sbin/move-address: have it run $scripts/primary-on too"
  # A release whose standby, once it handed control back, discards its hooks' results when it
  # takes control again (up to 23.11.1): the site is told to restart it. Not from 24.05.
  run install_scripts --slurm-release 23.02
  assert_success
  assert_output --partial "note: Slurm 23.02: restart slurmctld on a controller after it hands control back"
  run install_scripts --slurm-release 24.05
  assert_success
  refute_output --partial "restart slurmctld on a controller"
  # On a network file system (a test build can say so): accepted wherever StateSaveLocation is.
  printf '%s\n' 'SlurmctldHost=one' 'SlurmctldHost=two' 'StateSaveLocation=/proc/bbkit-nowhere' \
    >"$CONF/slurm.conf"
  if BBKIT_TEST_SHARED_FS=nfs bb-parse config | grep -qx '# state_dir file system: nfs (shared)'; then
    BBKIT_TEST_SHARED_FS=nfs run install_scripts
    assert_success
  fi
}

@test "install-slurm refuses a standalone configuration and a burst_buffer.conf that would SIGKILL bbkit" {
  once_per_lua_set
  write_config 'mode = "standalone"'
  run install_scripts
  assert_failure 78
  assert_output --partial 'set mode = "slurm"'
  assert_output --partial 'use --standalone'
  assert_file_not_exists "$CONF/burst_buffer.lua"
  write_config 'mode = "slurm"' 'directives = ["BB_LUA"]' '[timeouts]' 'stage_in = 600' 'other = 120'
  printf 'Directive=DW\nStageInTimeout=600\n' >"$CONF/burst_buffer.conf"
  run install_scripts
  assert_failure 78
  assert_output --partial "Directive=DW but bbkit.toml's directives start with BB_LUA"
  assert_output --partial "StageInTimeout=600 is not above bbkit's timeouts.stage_in = 600"
  # Slurm's default StageOutTimeout (86400) is bbkit's default too: no room to report.
  assert_output --partial "StageOutTimeout=86400 is not above bbkit's timeouts.stage_out = 86400"
  # The file is left as it was.
  run cat "$CONF/burst_buffer.conf"
  assert_output $'Directive=DW\nStageInTimeout=600'
  printf 'directive=BB_LUA\nStageInTimeout=700\nStageOutTimeout=95040\notherTimeout=150\n' \
    >"$CONF/burst_buffer.conf"
  run install_scripts
  assert_success
  assert_output --partial "burst_buffer.conf checked (kept as it is)"
}

@test "install-slurm --standalone prints the slurm.conf lines naming the installed scripts and writes nothing next to slurm.conf" {
  once_per_lua_set
  write_config 'mode = "standalone"'
  # Slurm gives the controller scripts no environment: another configuration than
  # /etc/bbkit/bbkit.toml is refused, as they would not read it.
  run "$SLURM_SHARE/install-slurm" --standalone --slurm-conf-dir "$CONF" --config "$BBKIT_CONFIG" \
    --bindir "$BBKIT_BIN"
  assert_failure 78
  assert_output "install-slurm: $(readlink -f "$BBKIT_CONFIG"): Slurm gives PrologSlurmctld and EpilogSlurmctld no environment, so bbkit there reads /etc/bbkit/bbkit.toml: install this file there (and run this without --config or BBKIT_CONFIG)"
  run ls -A "$CONF"
  assert_output ""
  run "$BBKIT_SOURCE_DIR/tests/with-default-config" "$BBKIT_CONFIG" "$SLURM_SHARE/install-slurm" \
    --standalone --slurm-conf-dir "$CONF" --bindir "$BBKIT_BIN"
  assert_success
  scripts=$(cd "$SLURM_SHARE/../standalone/slurm" && pwd)
  assert_line "PrologSlurmctld=$scripts/prolog-slurmctld"
  assert_line "EpilogSlurmctld=$scripts/epilog-slurmctld"
  assert_line "TaskProlog=$scripts/task-prolog"
  refute_line --partial BurstBufferType=
  refute_line --partial CliFilterPlugins=
  for name in prolog-slurmctld epilog-slurmctld task-prolog; do
    assert_file_executable "$scripts/$name"
  done
  assert_file_executable "$scripts/../bbkit-job"
  # No Lua, no burst_buffer.conf, no drop-in for a root SlurmUser.
  run ls -A "$CONF"
  assert_output ""
  # A Slurm-mode configuration is refused with --standalone, and the reverse.
  write_config 'mode = "slurm"' 'directives = ["BB_LUA"]'
  run "$BBKIT_SOURCE_DIR/tests/with-default-config" "$BBKIT_CONFIG" "$SLURM_SHARE/install-slurm" \
    --standalone --slurm-conf-dir "$CONF" --bindir "$BBKIT_BIN"
  assert_failure 78
  assert_output --partial '--standalone needs mode = "standalone"'
}

@test "install-slurm --standalone writes the sudoers drop-in an unprivileged SlurmUser needs for bbkit-job's calls" {
  once_per_lua_set
  user=$(test_user)
  # SlurmUser needs no state_group in standalone mode: the job's user reads its own env file.
  write_config 'mode = "standalone"'
  run "$BBKIT_SOURCE_DIR/tests/with-default-config" "$BBKIT_CONFIG" "$SLURM_SHARE/install-slurm" \
    --standalone --slurm-conf-dir "$CONF" --bindir "$BBKIT_BIN" --slurm-user "$user"
  assert_success
  assert_output --partial "install -m 0440 -o root -g root $CONF/bbkit.sudoers /etc/sudoers.d/bbkit"
  assert_line --partial "PrologSlurmctld="
  run visudo -cf "$CONF/bbkit.sudoers"
  assert_success
  bin=$BBKIT_BIN
  run awk '/^#/ { next } { line = line $0 } /\\$/ { sub(/\\$/, "", line); next } { gsub(/ +/, " ", line); print line; line = "" }' "$CONF/bbkit.sudoers"
  assert_output "Defaults:$user !requiretty
$user ALL = (root) NOPASSWD: $bin/bb-parse --script *, $bin/bb-pool alloc *, $bin/bb-stage --job *, $bin/bb-teardown --job *, $bin/bb-stat *, $bin/bb-pool takeover, $bin/bb-pool takeover --release"
  # Through sudo the tools read only /etc/bbkit/bbkit.toml: another configuration is refused.
  run "$SLURM_SHARE/install-slurm" --standalone --slurm-conf-dir "$CONF" --config "$BBKIT_CONFIG" \
    --bindir "$BBKIT_BIN" --slurm-user "$user"
  assert_failure 78
  assert_output --partial "which read only /etc/bbkit/bbkit.toml"
}

@test "install-slurm --plugin datawarp writes the burst_buffer.conf naming bbkit's dw_wlm_cli and dwstat, and checks an existing one" {
  once_per_lua_set
  fake_slurm 22.05.8  # no PollInterval (see the next test)
  write_config 'mode = "datawarp"' 'flags = ["EnablePersistent", "TeardownFailure"]' \
    '[timeouts]' 'stage_in = 600' 'stage_out = 600' 'other = 120' 'validate = 9'
  run "$SLURM_SHARE/install-slurm" --plugin datawarp --slurm-conf-dir "$CONF" \
    --config "$BBKIT_CONFIG" --bindir "$BBKIT_BIN"
  assert_success
  assert_line "BurstBufferType=burst_buffer/datawarp"
  assert_line "CliFilterPlugins=cli_filter/lua"
  programs=$(cd "$SLURM_SHARE/../datawarp" && pwd)
  run grep -v '^#' "$CONF/burst_buffer.conf"
  assert_output "GetSysState=$programs/dw_wlm_cli
GetSysStatus=$programs/dwstat
DefaultPool=nvme
Flags=EnablePersistent,TeardownFailure
StageInTimeout=660
StageOutTimeout=660
OtherTimeout=150
ValidateTimeout=10"
  assert_file_executable "$programs/dw_wlm_cli"
  assert_file_executable "$programs/dwstat"
  # The cli_filter reading #DW and #BB lines (persistent-only jobs are checked nowhere else at
  # submit), no burst_buffer.lua, no drop-in for a root SlurmUser.
  assert_file_not_exists "$CONF/burst_buffer.lua"
  run grep -x 'BBKIT_PLUGIN = "datawarp"' "$CONF/cli_filter.lua"
  assert_success
  run "$LUAC" -p "$CONF/cli_filter.lua"
  assert_success
  assert_file_not_exists "$CONF/bbkit.sudoers"
  # A second run checks the file and keeps it.
  run "$SLURM_SHARE/install-slurm" --plugin datawarp --slurm-conf-dir "$CONF" \
    --config "$BBKIT_CONFIG" --bindir "$BBKIT_BIN"
  assert_success
  assert_output --partial "burst_buffer.conf checked (kept as it is)"
  # Cray's programs, EmulateCray, another default pool, a short timeout: each refused by name.
  printf 'GetSysState=/opt/cray/dw_wlm/default/bin/dw_wlm_cli\nGetSysStatus=%s/dwstat\nDefaultPool=small\nFlags=EmulateCray\nStageInTimeout=600\n' \
    "$programs" >"$CONF/burst_buffer.conf"
  run "$SLURM_SHARE/install-slurm" --plugin datawarp --slurm-conf-dir "$CONF" \
    --config "$BBKIT_CONFIG" --bindir "$BBKIT_BIN"
  assert_failure 78
  assert_output --partial "GetSysState=/opt/cray/dw_wlm/default/bin/dw_wlm_cli is not bbkit's $programs/dw_wlm_cli"
  assert_output --partial "DefaultPool=small but bbkit's default pool is nvme"
  assert_output --partial "Flags holds EmulateCray"
  assert_output --partial "StageInTimeout=600 is not above bbkit's timeouts.stage_in = 600"
  # A configuration in another mode is refused, and the reverse.
  write_config 'mode = "slurm"' 'directives = ["BB_LUA"]'
  run "$SLURM_SHARE/install-slurm" --plugin datawarp --slurm-conf-dir "$CONF" \
    --config "$BBKIT_CONFIG" --bindir "$BBKIT_BIN"
  assert_failure 78
  assert_output --partial '--plugin datawarp needs mode = "datawarp"'
  run "$SLURM_SHARE/install-slurm" --plugin cray --slurm-conf-dir "$CONF" --bindir "$BBKIT_BIN"
  assert_failure 64
  assert_output --partial "--plugin must be lua or datawarp, got 'cray'"
  run "$SLURM_SHARE/install-slurm" --plugin datawarp --standalone --slurm-conf-dir "$CONF" --bindir "$BBKIT_BIN"
  assert_failure 64
}

@test "install-slurm writes bbkit's poll_interval as PollInterval with the 24.05 signatures only, and checks an existing burst_buffer.conf's" {
  once_per_lua_set
  write_config 'mode = "slurm"' 'directives = ["BB_LUA"]' 'poll_interval = 30' \
    '[timeouts]' 'stage_in = 600' 'stage_out = 600' 'other = 120'
  API=24.05 run install_scripts
  assert_success
  # After Flags, where scontrol show burst prints it.
  run grep -v '^#' "$CONF/burst_buffer.conf"
  assert_equal "${lines[4]}" "Flags=DisablePersistent"
  assert_equal "${lines[5]}" "PollInterval=30"
  API=24.05 run install_scripts
  assert_success
  assert_output --partial "burst_buffer.conf checked (kept as it is)"
  sed -i 's/^PollInterval=30$/pollinterval=20/' "$CONF/burst_buffer.conf"
  API=24.05 run install_scripts
  assert_failure 78
  assert_output --partial "burst_buffer.conf: PollInterval=20 but bbkit.toml's poll_interval is 30: make them equal"
  sed -i '/^pollinterval=/d' "$CONF/burst_buffer.conf"
  API=24.05 run install_scripts
  assert_failure 78
  assert_output --partial "burst_buffer.conf: PollInterval=15 (Slurm's default) but bbkit.toml's poll_interval is 30: make them equal"
  # Slurm before 24.05 refuses a burst_buffer.conf holding the key: none written, one refused.
  for api in 22.05 23.02; do
    rm "$CONF/burst_buffer.conf"
    API=$api run install_scripts
    assert_success
    run grep -ci '^PollInterval' "$CONF/burst_buffer.conf"
    assert_output 0
  done
  echo 'PollInterval=30' >>"$CONF/burst_buffer.conf"
  API=22.05 run install_scripts
  assert_failure 78
  assert_output --partial "burst_buffer.conf: PollInterval=30: Slurm before 24.05 refuses this key (and the file): remove it"
}

@test "install-slurm --plugin datawarp writes PollInterval for Slurm 24.05 and later, as slurmctld -V (else slurm_release) says" {
  once_per_lua_set
  write_config 'mode = "datawarp"' 'poll_interval = 20'
  datawarp_install() {
    "$SLURM_SHARE/install-slurm" --plugin datawarp --slurm-conf-dir "$CONF" \
      --config "$BBKIT_CONFIG" --bindir "$BBKIT_BIN"
  }
  fake_slurm 24.11.5
  run datawarp_install
  assert_success
  run grep -v '^#' "$CONF/burst_buffer.conf"
  assert_equal "${lines[3]}" "Flags=DisablePersistent"
  assert_equal "${lines[4]}" "PollInterval=20"
  run datawarp_install
  assert_success
  assert_output --partial "burst_buffer.conf checked (kept as it is)"
  sed -i 's/^PollInterval=20$/PollInterval=15/' "$CONF/burst_buffer.conf"
  run datawarp_install
  assert_failure 78
  assert_output --partial "PollInterval=15 but bbkit.toml's poll_interval is 20: make them equal"
  # 23.11: none written, one refused.
  rm "$CONF/burst_buffer.conf"
  fake_slurm 23.11.10
  run datawarp_install
  assert_success
  run grep -c '^PollInterval' "$CONF/burst_buffer.conf"
  assert_output 0
  echo 'PollInterval=20' >>"$CONF/burst_buffer.conf"
  run datawarp_install
  assert_failure 78
  assert_output --partial "PollInterval=20: Slurm before 24.05 refuses this key (and the file): remove it"
  # No Slurm here: bbkit.toml's slurm_release decides; without it the key is left out, saying so.
  rm "$CONF/burst_buffer.conf"
  fake_slurm ""
  run datawarp_install
  assert_success
  assert_output --partial "install-slurm: note: no slurmctld here and no slurm_release in bbkit.toml: $CONF/burst_buffer.conf has no PollInterval"
  run grep -c '^PollInterval' "$CONF/burst_buffer.conf"
  assert_output 0
  rm "$CONF/burst_buffer.conf"
  write_config 'mode = "datawarp"' 'poll_interval = 20' 'slurm_release = "25.05"'
  run datawarp_install
  assert_success
  refute_output --partial "note:"
  refute_output --partial "warning:"
  run grep -x 'PollInterval=20' "$CONF/burst_buffer.conf"
  assert_success
}

@test "install-slurm warns when bbkit.toml's slurm_release is not the Slurm found here, or without one the Slurm --slurm-api means" {
  once_per_lua_set
  write_config 'mode = "slurm"' 'directives = ["BB_LUA"]' 'slurm_release = "24.11"' \
    '[timeouts]' 'stage_in = 600' 'stage_out = 600' 'other = 120'
  fake_slurm 24.11.5
  API=24.05 run install_scripts
  assert_success
  refute_output --partial "warning"
  fake_slurm 25.05.1
  API=24.05 run install_scripts
  assert_success
  assert_line "install-slurm: warning: bbkit.toml says slurm_release = \"24.11\" but the Slurm here is 25.05: bb-stat burst prints 24.11's layout"
  [ "$(grep -c warning <<<"$output")" = 1 ]
  # Without Slurm here, the releases --slurm-api stands for.
  fake_slurm ""
  API=24.05 run install_scripts
  assert_success
  refute_output --partial "warning"
  rm "$CONF/burst_buffer.conf"
  API=23.02 run install_scripts
  assert_success
  assert_line "install-slurm: warning: bbkit.toml says slurm_release = \"24.11\" but --slurm-api 23.02 means Slurm 23.02 or 23.11: bb-stat burst prints 24.11's layout"
  write_config 'mode = "slurm"' 'directives = ["BB_LUA"]' 'slurm_release = "23.11"' \
    '[timeouts]' 'stage_in = 600' 'stage_out = 600' 'other = 120'
  API=23.02 run install_scripts
  assert_success
  refute_output --partial "warning"
  API=22.05 run install_scripts
  assert_line "install-slurm: warning: bbkit.toml says slurm_release = \"23.11\" but --slurm-api 22.05 means Slurm 22.05: bb-stat burst prints 23.11's layout"
  API=24.05 run install_scripts
  assert_line --partial "but --slurm-api 24.05 means Slurm 24.05 or later"
}

@test "install-slurm --plugin datawarp: the drop-in adds bb-teardown --persistent for an unprivileged SlurmUser, and only in datawarp mode" {
  once_per_lua_set
  user=$(test_user)
  write_config 'mode = "datawarp"'
  run "$BBKIT_SOURCE_DIR/tests/with-default-config" "$BBKIT_CONFIG" "$SLURM_SHARE/install-slurm" \
    --plugin datawarp --slurm-conf-dir "$CONF" --bindir "$BBKIT_BIN" --slurm-user "$user"
  assert_success
  run visudo -cf "$CONF/bbkit.sudoers"
  assert_success
  bin=$BBKIT_BIN
  run awk '/^#/ { next } { line = line $0 } /\\$/ { sub(/\\$/, "", line); next } { gsub(/ +/, " ", line); print line; line = "" }' "$CONF/bbkit.sudoers"
  assert_output "Defaults:$user !requiretty
$user ALL = (root) NOPASSWD: $bin/bb-parse --script *, $bin/bb-pool alloc *, $bin/bb-stage --job *, $bin/bb-teardown --job *, $bin/bb-teardown --persistent *, $bin/bb-stat *, $bin/bb-pool takeover, $bin/bb-pool takeover --release"
}

@test "install-slurm checks the scripts with the luac of the Lua Slurm's plugin links" {
  once_per_lua_set
  command -v gcc >/dev/null || skip "no C compiler to build a stand-in burst_buffer_lua.so"
  # A stand-in plugin linking liblua5.3 as SchedMD's packages do, in slurm.conf's PluginDir.
  plugins="$TEST_DIR/plugins"
  mkdir -p "$plugins"
  stand_in() {  # stand_in LIBRARY: burst_buffer_lua.so linking LIBRARY
    gcc -shared -o "$plugins/$1" -Wl,-soname,"$1" -x c /dev/null
    gcc -shared -o "$plugins/burst_buffer_lua.so" -x c /dev/null -L"$plugins" \
      -Wl,--no-as-needed -l:"$1"
  }
  stand_in liblua5.3.so.0
  printf 'ClusterName=x\nPluginDir=%s:%s\n' "$TEST_DIR/none" "$plugins" >"$CONF/slurm.conf"
  run install_scripts
  assert_success
  assert_line --index 0 "install-slurm: $plugins/burst_buffer_lua.so links Lua 5.3: checking the scripts with luac5.3 (--lua to override)"
  stand_in liblua-5.4.so
  run install_scripts
  assert_line --index 0 "install-slurm: $plugins/burst_buffer_lua.so links Lua 5.4: checking the scripts with luac5.4 (--lua to override)"
  stand_in liblua5.2.so.0
  run install_scripts
  assert_failure 78
  assert_output "install-slurm: $plugins/burst_buffer_lua.so links Lua 5.2, which bbkit's scripts are not checked against: give --lua 5.1, 5.3 or 5.4"
  run install_scripts --lua 5.1
  assert_success
  refute_output --partial "links Lua"
  run install_scripts --lua 5.2
  assert_failure 64
  # No plugin there: the newest luac installed.
  printf 'PluginDir=%s\n' "$TEST_DIR/none" >"$CONF/slurm.conf"
  run install_scripts
  assert_success
  newest=$(for v in 5.4 5.3 5.1; do command -v "luac$v" >/dev/null && echo "$v" && break; done)
  assert_line --index 0 "install-slurm: no burst_buffer_lua.so in $TEST_DIR/none: checking the scripts with luac$newest (--lua to choose the Lua Slurm links)"
}

@test "install-slurm picks the hook signatures it is told" {
  API=24.05 run install_scripts
  assert_success
  run "$LUA" -e "slurm = {SUCCESS = 0, ERROR = -1, SLURM_BB_BUSY = 'BUSY'}
    dofile('$CONF/burst_buffer.lua')
    print(type(slurm_bb_test_data_in) .. ' ' .. type(slurm_bb_test_data_out))"
  assert_output "function function"
  # 24.05's burst_buffer.conf holds PollInterval, which Slurm 22.05 refuses: a new one.
  rm "$CONF/burst_buffer.conf"
  API=22.05 run install_scripts
  run "$LUA" -e "slurm = {SUCCESS = 0, ERROR = -1}; dofile('$CONF/burst_buffer.lua');
    print(type(slurm_bb_test_data_in) .. ' ' .. type(slurm_bb_get_status))"
  assert_output "nil function"
  # Without --slurm-api: what this host's Slurm reports, or an error asking for it.
  run "$SLURM_SHARE/install-slurm" --slurm-conf-dir "$CONF" --config "$BBKIT_CONFIG" \
    --bindir "$BBKIT_BIN"
  if command -v slurmctld >/dev/null || command -v scontrol >/dev/null; then
    version=$( (slurmctld -V || scontrol -V) 2>/dev/null | sed -n 's/^slurm[^ ]* \([0-9]*\.[0-9]*\).*/\1/p' | head -n1)
    assert_success
    assert_line --index 0 --regexp "^install-slurm: Slurm $version found: using the (22.05|23.02|24.05) hook signatures"
  else
    assert_failure 64
    assert_output --partial "give --slurm-api 22.05, 23.02 or 24.05"
  fi
}

@test "the sudoers drop-in lets an unprivileged SlurmUser make exactly the hooks' calls, keeps no environment, and passes visudo" {
  once_per_lua_set
  user=$(test_user)
  config_for_slurm_user "$user"
  run install_scripts_for "$user"
  assert_success
  assert_output --partial "install -m 0440 -o root -g root $CONF/bbkit.sudoers /etc/sudoers.d/bbkit"
  run visudo -cf "$CONF/bbkit.sudoers"
  assert_success
  run stat -c %a "$CONF/bbkit.sudoers"
  assert_output 440
  bin=$BBKIT_BIN
  run awk '/^#/ { next } { line = line $0 } /\\$/ { sub(/\\$/, "", line); next } { gsub(/ +/, " ", line); print line; line = "" }' "$CONF/bbkit.sudoers"
  assert_output "Defaults:$user !requiretty
$user ALL = (root) NOPASSWD: $bin/bb-parse --script *, $bin/bb-pool alloc *, $bin/bb-stage --job *, $bin/bb-teardown --job *, $bin/bb-stat *, $bin/bb-pool takeover, $bin/bb-pool takeover --release"
  run grep -c env_keep "$CONF/bbkit.sudoers"
  assert_output 0
  # The hooks name root's own configuration, and never pass it through sudo.
  run grep -c -- '^BBKIT_CONFIG = "/etc/bbkit/bbkit.toml"' "$CONF/burst_buffer.lua"
  assert_output 1
  # The cli_filter runs in the users' environment, where that file is the default.
  run grep -c -- '^BBKIT_CONFIG = ""' "$CONF/cli_filter.lua"
  assert_output 1
  run "$LUA" -e "slurm = {SUCCESS = 0, ERROR = -1}; dofile('$CONF/burst_buffer.lua'); BBKIT_SUDO = 'always'
    print(bbkit.command_line('bb-pool', { 'alloc' }))"
  assert_output "sudo -n '$BBKIT_BIN/bb-pool' 'alloc' </dev/null 2>&1; echo \"bbkit-exit=\$?\""
  run install_scripts --slurm-user 'bad user'
  assert_failure 64
}

@test "install-slurm refuses an unprivileged SlurmUser that cannot read env/ or would need a configuration other than root's own" {
  once_per_lua_set
  user=$(test_user)
  run install_scripts_for "$user"
  assert_failure 78
  assert_output "install-slurm: SlurmUser $user cannot read the state directory's env/: set state_group = \"$(id -gn "$user")\" in bbkit.toml"
  config_for_slurm_user "$user"
  run install_scripts --slurm-user "$user"
  assert_failure 78
  assert_output "install-slurm: SlurmUser $user runs the tools through sudo, which read only /etc/bbkit/bbkit.toml: install $(readlink -f "$BBKIT_CONFIG") there (and run this without --config)"
  assert_file_not_exists "$CONF/burst_buffer.lua"
  # --sudo never: the tools run as SlurmUser itself, with whatever configuration it names.
  run install_scripts --slurm-user "$user" --sudo never
  assert_success
}

@test "install-slurm takes SlurmUser from slurm.conf when --slurm-user is not given" {
  once_per_lua_set
  user=$(test_user)
  config_for_slurm_user "$user"
  printf 'ClusterName=x\nSlurmUser=%s\n' "$user" >"$CONF/slurm.conf"
  run "$BBKIT_SOURCE_DIR/tests/with-default-config" "$BBKIT_CONFIG" "$SLURM_SHARE/install-slurm" \
    --slurm-conf-dir "$CONF" --bindir "$BBKIT_BIN" --slurm-api 22.05
  assert_success
  assert_line "install-slurm: SlurmUser $user (slurm.conf; --slurm-user to say otherwise)"
  assert_line "install-slurm: wrote $CONF/bbkit.sudoers (SlurmUser $user may make exactly the hooks' bbkit calls as root)"
  run grep -c "^$user ALL = (root) NOPASSWD:" "$CONF/bbkit.sudoers"
  assert_output 1
  # Another configuration than root's own is refused for it as for --slurm-user, before
  # anything is written.
  rm -f "$CONF/bbkit.sudoers" "$CONF"/*.lua "$CONF/burst_buffer.conf"
  run install_scripts
  assert_failure 78
  assert_output --partial "SlurmUser $user runs the tools through sudo, which read only /etc/bbkit/bbkit.toml"
  run ls -A "$CONF"
  assert_output "slurm.conf"
  # --slurm-user says otherwise; a SlurmUser that is not a plain name is refused.
  run install_scripts --slurm-user root
  assert_success
  refute_output --partial "SlurmUser $user"
  printf 'SlurmUser="a b"\n' >>"$CONF/slurm.conf"
  run install_scripts
  assert_failure 78
  assert_output "install-slurm: $CONF/slurm.conf: SlurmUser=a b is not a plain user name"
}

# conf_dir_state: every file of $CONF with its mode and checksum, to tell whether a run wrote.
conf_dir_state() {
  (cd "$CONF" && find . -printf '%p %m %y\n' | sort && find . -type f -exec sha256sum {} + | sort)
}

@test "install-slurm writes nothing when any check fails: each refusal, in each mode, leaves the directory as it was" {
  once_per_lua_set
  user=$(test_user)
  # A site's own scripts and slurm.conf: what a failed run must leave untouched.
  printf -- '-- the site'"'"'s own\n' >"$CONF/burst_buffer.lua"
  printf -- '-- the site'"'"'s own filter\n' >"$CONF/cli_filter.lua"
  printf 'ClusterName=x\n' >"$CONF/slurm.conf"
  # Each case: what makes it fail (a shell command run first), then install-slurm's arguments.
  local cases=(
    "printf 'StageInTimeout=60\n' >'$CONF/burst_buffer.conf'|--slurm-api 22.05"
    "printf 'Directive=DW\n' >'$CONF/burst_buffer.conf'|--slurm-api 22.05"
    "printf 'PollInterval=15\n' >'$CONF/burst_buffer.conf'|--slurm-api 22.05"
    "printf 'AllowUsers=nosuchuser\n' >'$CONF/burst_buffer.conf'|--slurm-api 22.05"
    "write_config 'mode = \"datawarp\"'; printf 'GetSysState=/bin/true\n' >'$CONF/burst_buffer.conf'|--plugin datawarp"
    "write_config 'mode = \"slurm\"' 'directives = [\"BB_LUA\"]' '[timeouts]' 'stage_in = 3000000'|--slurm-api 22.05"
    "config_for_slurm_user '$user'|--slurm-api 22.05 --slurm-user $user"
    "printf 'SlurmUser=$user\n' >>'$CONF/slurm.conf'|--slurm-api 22.05"
    "write_config 'mode = \"standalone\"'; printf 'PrologEpilogTimeout=10\n' >>'$CONF/slurm.conf'|--standalone"
    "printf 'CliFilterParameters=cli_filter_lua_path=relative.lua\n' >>'$CONF/slurm.conf'|--slurm-release 25.11"
    "write_config 'mode = \"slurm\"' 'directives = [\"BB_LUA\"]' 'state_dir = 1'|--slurm-api 22.05"
  )
  local c before after
  for c in "${cases[@]}"; do
    rm -f "$CONF/burst_buffer.conf"
    printf 'ClusterName=x\n' >"$CONF/slurm.conf"
    write_config 'mode = "slurm"' 'directives = ["BB_LUA"]' \
      '[timeouts]' 'stage_in = 600' 'stage_out = 600' 'other = 120'
    eval "${c%%|*}"
    before=$(conf_dir_state)
    # shellcheck disable=SC2086 # the case's arguments, split on purpose
    run "$SLURM_SHARE/install-slurm" --slurm-conf-dir "$CONF" --config "$BBKIT_CONFIG" \
      --bindir "$BBKIT_BIN" ${c#*|}
    [ "$status" -ne 0 ] || fail "case '$c' passed: $output"
    after=$(conf_dir_state)
    [ "$before" = "$after" ] || fail "case '$c' ($status: $output) changed $CONF: $(diff <(echo "$before") <(echo "$after"))"
  done
}

@test "install-slurm keeps what it replaces when it differs, as NAME.bbkit-saved-DATE, and leaves an unchanged file alone" {
  once_per_lua_set
  printf -- '-- the site'"'"'s own\n' >"$CONF/burst_buffer.lua"
  printf -- '-- the site'"'"'s own filter\n' >"$CONF/cli_filter.lua"
  run install_scripts
  assert_success
  assert_line --regexp "^install-slurm: kept the file it replaced as $CONF/burst_buffer\.lua\.bbkit-saved-[0-9]{8}-[0-9]{6}\$"
  assert_line --regexp "^install-slurm: kept the file it replaced as $CONF/cli_filter\.lua\.bbkit-saved-[0-9]{8}-[0-9]{6}\$"
  run cat "$CONF"/burst_buffer.lua.bbkit-saved-*
  assert_output "-- the site's own"
  run cat "$CONF"/cli_filter.lua.bbkit-saved-*
  assert_output "-- the site's own filter"
  run grep -c '^BBKIT_BINDIR = ' "$CONF/burst_buffer.lua"
  assert_output 1
  # A rerun with nothing changed writes nothing and keeps nothing more.
  sleep 1
  run install_scripts
  assert_success
  assert_line "install-slurm: $CONF/burst_buffer.lua unchanged"
  assert_line "install-slurm: $CONF/cli_filter.lua unchanged"
  refute_output --partial "kept the file"
  run sh -c "ls '$CONF' | grep -c bbkit-saved"
  assert_output 2
  # A change of setting replaces bbkit's own file, keeping the earlier one.
  run install_scripts --sudo always
  assert_success
  assert_line --regexp "^install-slurm: kept the file it replaced as $CONF/burst_buffer\.lua\.bbkit-saved-"
  run sh -c "ls '$CONF' | grep -c bbkit-saved"
  assert_output 3
}

@test "install-slurm --dry-run runs every check, says what it would write and replace, and changes nothing" {
  once_per_lua_set
  printf -- '-- the site'"'"'s own\n' >"$CONF/burst_buffer.lua"
  printf 'ClusterName=x\nCliFilterPlugins=cli_filter/user_defaults\n' >"$CONF/slurm.conf"
  before=$(conf_dir_state)
  run install_scripts --dry-run
  assert_success
  assert_line --regexp "^install-slurm: would replace $CONF/burst_buffer\.lua \(kept as $CONF/burst_buffer\.lua\.bbkit-saved-[0-9-]+\):$"
  assert_line --regexp "^-{3} the site's own\$"
  assert_line "install-slurm: would write $CONF/cli_filter.lua"
  assert_line "install-slurm: would write $CONF/burst_buffer.conf"
  assert_line "install-slurm: dry run: nothing was changed; the lines below are what a run would print"
  # The site's cli_filter plugins stay, bbkit's is added.
  assert_line "CliFilterPlugins=cli_filter/user_defaults,cli_filter/lua"
  [ "$(conf_dir_state)" = "$before" ]
  # A check that fails fails the dry run too.
  printf 'StageInTimeout=60\n' >"$CONF/burst_buffer.conf"
  before=$(conf_dir_state)
  run install_scripts --dry-run
  assert_failure 78
  assert_output --partial "StageInTimeout=60 is not above bbkit's timeouts.stage_in"
  [ "$(conf_dir_state)" = "$before" ]
  # The real run does what the dry run said.
  rm "$CONF/burst_buffer.conf"
  run install_scripts
  assert_success
  assert_line "install-slurm: wrote $CONF/cli_filter.lua"
  assert_line "install-slurm: wrote $CONF/burst_buffer.conf"
  assert_line "CliFilterPlugins=cli_filter/user_defaults,cli_filter/lua"
}

@test "install-slurm --standalone notes a site's own PrologSlurmctld; --plugin datawarp says how slurmctld gets BBKIT_CONFIG" {
  once_per_lua_set
  write_config 'mode = "standalone"'
  printf 'ClusterName=x\nPrologSlurmctld=/etc/slurm/site-prolog\n' >"$CONF/slurm.conf"
  run "$BBKIT_SOURCE_DIR/tests/with-default-config" "$BBKIT_CONFIG" "$SLURM_SHARE/install-slurm" \
    --standalone --slurm-conf-dir "$CONF" --bindir "$BBKIT_BIN"
  assert_success
  assert_line "install-slurm: note: slurm.conf has PrologSlurmctld=/etc/slurm/site-prolog: bbkit's replaces it (call that one from yours, or the reverse)"
  refute_output --partial "EpilogSlurmctld=/etc"
  write_config 'mode = "datawarp"'
  rm -f "$CONF/slurm.conf"
  run "$SLURM_SHARE/install-slurm" --plugin datawarp --slurm-conf-dir "$CONF" \
    --config "$BBKIT_CONFIG" --bindir "$BBKIT_BIN" --slurm-release 22.05
  assert_success
  assert_line "  printf '[Service]\nEnvironment=BBKIT_CONFIG=%s\n' '$(readlink -f "$BBKIT_CONFIG")' >/etc/systemd/system/slurmctld.service.d/bbkit.conf"
  assert_line "  systemctl daemon-reload && systemctl restart slurmctld"
}

@test "hooks: a job's whole life through the real tools" {
  install_scripts >/dev/null
  echo input >"$TEST_DIR/data/in.txt"
  script=$(job_script 17 '#BB_LUA pool=small capacity=2K' \
    "#BB_LUA stage_in type=file source=$TEST_DIR/data/in.txt destination=\$BB_JOB_DIR/in.txt" \
    "#BB_LUA stage_out type=file source=\$BB_JOB_DIR/out.txt destination=$TEST_DIR/data/out.txt")
  run hook slurm_bb_pools
  assert_success
  assert_line --index 0 "rc=0"
  assert_output --partial '{"free":4,"granularity":1024,"id":"small","quantity":4}'
  run hook slurm_bb_job_process "$script"
  assert_output "rc=0"
  run hook slurm_bb_setup 17 0 0 small 2048 "$script"
  assert_line --index 0 "rc=0"
  assert_output --partial "allocated: main.17.1 2KiB in pool small"
  run hook slurm_bb_data_in 17 "$script"
  assert_line --index 0 "rc=0"
  assert_file_exists "$(bbdir $TEST_DIR/small/job/main.17.1)/in.txt"
  run hook slurm_bb_real_size 17
  assert_output $'rc=0\n2048'
  : >"$TEST_DIR/path"
  run hook slurm_bb_paths 17 "$script" "$TEST_DIR/path"
  assert_output "rc=0"
  run cat "$TEST_DIR/path"
  assert_line "BB_JOB_DIR=$(bbdir $TEST_DIR/small/job/main.17.1)"
  assert_line "DW_JOB_STRIPED=$(bbdir $TEST_DIR/small/job/main.17.1)"
  run hook slurm_bb_pre_run 17 "$script"
  assert_line --index 0 "rc=0"
  echo output >"$(bbdir $TEST_DIR/small/job/main.17.1)/out.txt"
  run hook slurm_bb_post_run 17 "$script"
  assert_line --index 0 "rc=0"
  run hook slurm_bb_data_out 17 "$script"
  assert_line --index 0 "rc=0"
  run cat "$TEST_DIR/data/out.txt"
  assert_output output
  run hook slurm_bb_get_status job 17
  assert_line --index 0 "rc=0"
  assert_line "state:      staged-out"
  run hook slurm_bb_job_teardown 17 "$script" false
  assert_line --index 0 "rc=0"
  assert_dir_not_exists "$(bbdir $TEST_DIR/small/job/main.17.1)"
  assert_file_not_exists "$TEST_DIR/state/env/main.17.env"
  run hook slurm_bb_pools
  assert_output --partial '{"free":4,"granularity":1024,"id":"small","quantity":4}'
  # Slurm runs teardown again after a restart: still success.
  run hook slurm_bb_job_teardown 17 "$script" false
  assert_line --index 0 "rc=0"
}

@test "hooks: installed without --config or --bindir, a job's stages run with an empty environment (as Slurm 24.11.0 and 24.11.1 start them)" {
  # What the tools' default would be in slurmctld's environment: BBKIT_CONFIG and a PATH
  # finding the tools, both lost in those releases' slurmscriptd.
  BBKIT_CONFIG=$BBKIT_CONFIG PATH="$BBKIT_BIN:$PATH" run "$SLURM_SHARE/install-slurm" \
    --slurm-conf-dir "$CONF" --slurm-api "${API:-22.05}"
  assert_success
  echo input >"$TEST_DIR/data/in.txt"
  script=$(job_script 23 '#BB_LUA pool=small capacity=1K' \
    "#BB_LUA stage_in type=file source=$TEST_DIR/data/in.txt destination=\$BB_JOB_DIR/in.txt")
  bare() {  # the hook with nothing in its environment
    env -i "$(command -v "$LUA")" "$CALL_HOOK" --release "$(release)" "$CONF/burst_buffer.lua" "$@"
  }
  run bare slurm_bb_setup 23 0 0 small 1024 "$script"
  assert_line --index 0 "rc=0"
  run bare slurm_bb_data_in 23 "$script"
  assert_line --index 0 "rc=0"
  run cat "$(bbdir $TEST_DIR/small/job/main.23.1)/in.txt"
  assert_output input
  run bare slurm_bb_job_teardown 23 "$script" false
  assert_line --index 0 "rc=0"
  assert_dir_not_exists "$(bbdir $TEST_DIR/small/job/main.23.1)"
}

@test "hooks: a failing tool's one-line message reaches Slurm with slurm.ERROR" {
  install_scripts >/dev/null
  echo input >"$TEST_DIR/data/in.txt"
  chmod 644 "$TEST_DIR/data/in.txt"
  script=$(job_script 21 '#BB_LUA pool=small capacity=1K' \
    "#BB_LUA stage_in type=file source=$TEST_DIR/data/in.txt destination=in.txt")
  run hook slurm_bb_setup 21 0 0 small 1024 "$script"
  assert_line --index 0 "rc=0"
  # The source disappears after setup: data_in fails naming the file, the buffer stays.
  rm "$TEST_DIR/data/in.txt"
  run hook slurm_bb_data_in 21 "$script"
  assert_line --index 0 "rc=-1"
  assert_line --index 1 --regexp "^bb-stage: .*'$TEST_DIR/data/in.txt'.*No such file or directory"
  assert_dir_exists "$(bbdir $TEST_DIR/small/job/main.21.1)"
  run grep -c "slurm.log_error: bbkit: bb-stage: script line 3: stage-in source" "$TEST_DIR/slurmctld.log"
  assert_output 1
  # scancel --hurry: teardown with hurry="true".
  run hook slurm_bb_job_teardown 21 "$script" true
  assert_line --index 0 "rc=0"
  assert_dir_not_exists "$(bbdir $TEST_DIR/small/job/main.21.1)"
  # Setup validates again: a missing source is refused before any space is reserved.
  script=$(job_script 22 '#BB_LUA pool=small capacity=1K' \
    "#BB_LUA stage_in type=file source=$TEST_DIR/data/gone.txt destination=in.txt")
  run hook slurm_bb_setup 22 0 0 small 1024 "$script"
  assert_line --index 0 "rc=-1"
  assert_line --index 1 --partial "bb-parse: script line 3: stage-in source '$TEST_DIR/data/gone.txt'"
  run bb-stat job 22
  assert_failure 66
  # Teardown of a job that never got a buffer succeeds.
  run hook slurm_bb_job_teardown 22 "$script" true
  assert_line --index 0 "rc=0"
}

@test "hooks: a file name cannot forge the reason Slurm shows" {
  install_scripts >/dev/null
  u=$(test_user)
  mkdir -p "$TEST_DIR/data/tree"
  chmod 755 "$TEST_DIR/data" "$TEST_DIR/data/tree"
  bad="$TEST_DIR/data/tree/f"$'\n'"bb-stage: forged reason"
  echo x >"$bad"
  chmod 644 "$bad"
  script=$(job_script 23 '#BB_LUA pool=small capacity=1K' \
    "#BB_LUA stage_in type=directory source=$TEST_DIR/data/tree destination=t")
  run hook slurm_bb_setup 23 "$(id -u "$u")" "$(id -g "$u")" small 1024 "$script"
  assert_line --index 0 "rc=0"
  chmod 600 "$bad"  # unreadable to the job's user once set up: the stage-in fails naming it
  run hook slurm_bb_data_in 23 "$script"
  assert_line --index 0 "rc=-1"
  # The copy's walk meets it (nothing walks the tree before): the mover's wording.
  assert_line --index 1 --regexp "^bb-stage: .*tree/f\\\\x0abb-stage: forged reason.*permission denied"
  [ "${#lines[@]}" = 2 ] || fail "the reason spans lines: $output"
  run grep -c "forged" "$TEST_DIR/slurmctld.log"
  assert_output 1
  run hook slurm_bb_job_teardown 23 "$script" true
  assert_line --index 0 "rc=0"
}

@test "hooks: a directive continued without a blank before the backslash is read as Slurm reads it" {
  install_scripts >/dev/null
  script=$(job_script 31 '#BB_LUA capacity=1K\' '#BB_LUA pool=small')
  run hook slurm_bb_job_process "$script"
  assert_line --index 0 "rc=0"
  run hook slurm_bb_setup 31 0 0 small 1024 "$script"
  assert_line --index 0 "rc=0"
  assert_dir_exists "$(bbdir $TEST_DIR/small/job/main.31.1)"
  run hook slurm_bb_job_teardown 31 "$script" true
  assert_line --index 0 "rc=0"
}

# slurm_bb_paths builds the job-level file's name itself (it runs inside slurmctld and may not
# fork); the tools name it in lib/bbkit/job_environment.cpp. Here under a cluster other than the
# default and past a first incarnation, so neither part of the name can drift unnoticed.
@test "hooks: slurm_bb_paths opens the file the tools name for the cluster and current incarnation" {
  write_config 'mode = "slurm"' 'directives = ["BB_LUA"]' 'cluster = "blue"' \
    '[timeouts]' 'stage_in = 600' 'stage_out = 600' 'other = 120'
  install_scripts >/dev/null
  script=$(job_script 18 '#BB_LUA pool=small capacity=1K')
  run hook slurm_bb_setup 18 0 0 small 1024 "$script"
  assert_line --index 0 "rc=0"
  run hook slurm_bb_job_teardown 18 "$script" true
  assert_line --index 0 "rc=0"
  run hook slurm_bb_setup 18 0 0 small 1024 "$script"
  assert_line --index 0 "rc=0"
  assert_output --partial "allocated: blue.18.2"
  assert_file_exists "$TEST_DIR/state/env/blue.18.env"
  : >"$TEST_DIR/path"
  run hook slurm_bb_paths 18 "$script" "$TEST_DIR/path"
  assert_output "rc=0"
  run cat "$TEST_DIR/path"
  assert_line "BB_JOB_DIR=$(bbdir $TEST_DIR/small/job/blue.18.2)"
  # Without the file the tools write, the hook fails naming the one it looked for.
  run hook slurm_bb_job_teardown 18 "$script" true
  assert_line --index 0 "rc=0"
  assert_file_not_exists "$TEST_DIR/state/env/blue.18.env"
  run hook slurm_bb_paths 18 "$script" "$TEST_DIR/path"
  assert_line --index 0 "rc=-1"
  assert_output --partial "cannot read $TEST_DIR/state/env/blue.18.env"
}

@test "hooks: a bare #BB_LUA reserves nothing and every buffer hook succeeds" {
  install_scripts >/dev/null
  script=$(job_script 30 '#BB_LUA')
  run hook slurm_bb_job_process "$script"
  assert_output "rc=0"
  run hook slurm_bb_setup 30 0 0 "(null)" 0 "$script"
  assert_line --index 0 "rc=0"
  for fn in slurm_bb_data_in slurm_bb_pre_run slurm_bb_post_run slurm_bb_data_out; do
    run hook "$fn" 30 "$script"
    assert_output "rc=0"
  done
  : >"$TEST_DIR/path"
  run hook slurm_bb_paths 30 "$script" "$TEST_DIR/path"
  assert_output "rc=0"
  assert_file_empty "$TEST_DIR/path"
  run hook slurm_bb_job_teardown 30 "$script" false
  assert_line --index 0 "rc=0"
  run bb-stat job 30
  assert_failure 66
}

@test "job_process: Slurm's view of capacity= and pool= must be bbkit's, and fit the pool" {
  install_scripts >/dev/null
  check() {  # check EXPECTED-MESSAGE LINE...
    local want=$1
    shift
    run hook slurm_bb_job_process "$(job_script 40 "$@")"
    if [ -z "$want" ]; then
      assert_output "rc=0"
    else
      assert_line --index 0 "rc=-1"
      assert_line --index 1 --partial "$want"
    fi
  }
  check "" '#BB_LUA pool=small capacity=4K'
  check "" '#BB_LUA capacity=4096 pool=small access=striped'
  check "can never be satisfied: pool small holds 4096 bytes in all" '#BB_LUA pool=small capacity=5K'
  check "can never be satisfied" '#BB_LUA pool=small capacity=1M'
  check "only one #BB_LUA line may hold capacity=" \
    '#BB_LUA pool=small capacity=1K' '#BB_LUA pool=small capacity=1K'
  check "capacity= appears in a 'stage_in' line" '#BB_LUA pool=small capacity=1K' \
    '#SBATCH -N1' '#BB_LUA stage_in type=file source=/data/capacity=3 destination=x'
  check "pool= is missing on the buffer line" '#BB_LUA capacity=1K'
  check "'pool=' is part of another word" '#BB_LUA mempool=small capacity=1K pool=small'
  check "capacity= appears twice" '#BB_LUA pool=small capacity=1K capacity=2K'
  check "unknown pool 'ssd' (pools: nvme, small)" '#BB_LUA pool=ssd capacity=1K'
  check "capacity=1.5K: invalid size" '#BB_LUA pool=small capacity=1.5K'
  check "capacity=2N: a node count" '#BB_LUA pool=small capacity=2N'
  check "capacity=0: size '0' is zero" '#BB_LUA pool=small capacity=0'
  check "unknown unit" '#BB_LUA pool=small capacity=1X'
  check "write #BB_LUA followed by a blank" '#BB_LUAX pool=small capacity=1K'
  # A continued line is one line to Slurm, as to bbkit.
  check "" '#BB_LUA pool=small \' '#BB_LUA capacity=2K'
  # After the first non-comment line nothing counts, as Slurm stops there too.
  check "" 'echo start' '#BB_LUA pool=small capacity=1M'
}

@test "job_process: values past bb-parse's bounds are refused with bb-parse's words" {
  install_scripts >/dev/null
  long_path="/$(head -c 1048576 /dev/zero | tr '\0' s)"
  run hook slurm_bb_job_process "$(job_script 41 '#BB_LUA pool=small capacity=1K' \
    "#BB_LUA stage_in type=file source=$long_path destination=d")"
  assert_line --index 0 "rc=-1"
  assert_line --index 1 "bbkit: source= is 1048577 bytes long (a path holds at most 4095 bytes)"
  # bb-parse says the same at setup, after the line's label.
  run bb-parse --script "$TEST_DIR/statesave/hash.1/job.41/script"
  assert_failure 65
  assert_output "bb-parse: script line 3: source= is 1048577 bytes long (a path holds at most 4095 bytes)"
  run hook slurm_bb_job_process "$(job_script 42 "#BB_LUA pool=$(printf 'p%.0s' $(seq 257)) capacity=1K")"
  assert_line --index 0 "rc=-1"
  assert_line --index 1 "bbkit: pool= is 257 bytes long (a value holds at most 256 bytes)"
  # A quoted path with blanks of exactly 4095 bytes passes, as in bb-parse.
  run hook slurm_bb_job_process "$(job_script 43 '#BB_LUA pool=small capacity=1K' \
    "#BB_LUA stage_in type=file source=\"/a b$(printf 'c%.0s' $(seq 4091))\" destination=d")"
  assert_output "rc=0"
}

@test "job_process reads at most 4 MiB of a script; a longer one is bb-parse's to refuse, in one line" {
  install_scripts >/dev/null
  script=$(job_script 44 '#BB_LUA pool=small capacity=1K')
  truncate -s 200M "$script"
  run hook slurm_bb_job_process "$script"
  assert_line --index 0 "rc=-1"
  assert_line --index 1 "$(script_size_message bb-parse "$script" 209715200 4194304)"
  # Within [limits] script_size, but past what the Lua reads: bb-parse reads and accepts it.
  write_config 'mode = "slurm"' 'directives = ["BB_LUA"]' '[limits]' 'script_size = "256MiB"'
  script=$(job_script 45)
  sized_script "$script" 5000000 '#BB_LUA pool=small capacity=1K'
  run hook slurm_bb_job_process "$script"
  assert_output "rc=0"
}

@test "get_status: only pools, burst and job <digits> reach bb-stat" {
  install_scripts >/dev/null
  run hook slurm_bb_get_status pools
  assert_line --index 0 "rc=0"
  assert_line --regexp "^small +bytes +4KiB +4KiB +1KiB +(up|uninitialised)$"
  run hook slurm_bb_get_status burst
  assert_line --index 0 "rc=0"
  assert_output --partial "PoolName"
  for words in "; touch $TEST_DIR/pwned" "pools; touch $TEST_DIR/pwned" "--config /etc/passwd" \
               "job 1;touch $TEST_DIR/pwned" "job \$(touch $TEST_DIR/pwned)" "sessions"; do
    run hook slurm_bb_get_status $words
    assert_output $'rc=0\nusage: scontrol show bbstat pools | burst | job JOBID'
  done
  run hook slurm_bb_get_status "job" "1'; touch $TEST_DIR/pwned; '"
  assert_output --partial "usage:"
  assert_file_not_exists "$TEST_DIR/pwned"
  run hook slurm_bb_get_status job 123
  assert_line --index 0 "rc=0"
  assert_line --index 1 --partial "bb-stat: "
}

@test "23.02 signatures: uid, gid and job_info appended, get_status(uid, gid, ...)" {
  API=23.02
  install_scripts >/dev/null
  script=$(job_script 50 '#BB_LUA pool=small capacity=1K')
  run "$LUA" -e "
    slurm = {SUCCESS = 0, ERROR = -1, log_error = function() end,
             job_info_to_string = function() end}
    dofile('$CONF/burst_buffer.lua')
    local info = {job_id = 50}
    print(slurm_bb_job_process('$script', '0', '0', info))
    print(slurm_bb_setup('50', '0', '0', 'small', '1024', '$script', info))
    print(slurm_bb_data_in('50', '$script', '0', '0', info))
    print(slurm_bb_real_size('50', '0', '0', info))
    print(select(2, slurm_bb_get_status('0', '0', 'job', '50')) ~= nil)
    print(slurm_bb_job_teardown('50', '$script', 'true', '0', '0'))"
  assert_success
  assert_line --index 0 "0"
  assert_line --partial "allocated: main.50.1"
  assert_line "0	1024"
  assert_line --partial "torn down: main.50.1"
}

@test "23.02+: get_status answers for the caller, so PrivateData holds for scontrol show bbstat" {
  write_config 'mode = "slurm"' 'directives = ["BB_LUA"]' 'flags = ["PrivateData"]' \
    '[timeouts]' 'stage_in = 600' 'stage_out = 600' 'other = 120'
  local user; user=$(test_user)
  uid=$(id -u "$user")
  bb-pool alloc --job 60 --user root --pool small --capacity 1K >/dev/null
  bb-pool alloc --job 61 --user "$user" --pool small --capacity 1K >/dev/null
  API=23.02
  install_scripts >/dev/null
  run "$LUA" -e "
    slurm = {SUCCESS = 0, ERROR = -1, log_error = function() end,
             job_info_to_string = function() end}
    dofile('$CONF/burst_buffer.lua')
    print(select(2, slurm_bb_get_status('$uid', '$uid', 'burst')))
    print(select(2, slurm_bb_get_status('$uid', '$uid', 'job', '60')))
    print(select(2, slurm_bb_get_status('0', '0', 'burst')))
    print(select(2, slurm_bb_get_status('x1', '0', 'burst')))"
  assert_success
  assert_line --partial "JobID=61 "
  assert_line "bb-stat: no burst buffer for job 60"
  # A uid that is not a number is refused, not dropped (which would show everything).
  assert_line "bbkit: refusing to show status for caller uid 'x1': not a number"
  # root (the last call) sees both.
  [ "$(grep -c 'JobID=60 ' <<<"$output")" = 1 ]
  [ "$(grep -c 'JobID=61 ' <<<"$output")" = 2 ]
}

@test "24.05: test_data_in and test_data_out report the recorded stage" {
  API=24.05
  install_scripts >/dev/null
  script=$(job_script 60 '#BB_LUA pool=small capacity=1K')
  run hook slurm_bb_setup 60 0 0 small 1024 "$script"
  assert_line --index 0 "rc=0"
  # Another process stages the buffer (one started before a slurmctld restart): Slurm is told
  # BUSY and polls again.
  # (A holder is believed only when it has the lock file open, as a real stager has.)
  lockfile="$TEST_DIR/state/run/main.60.1.lock"
  mkdir -p "$TEST_DIR/state/run"
  : >"$lockfile"
  (exec 8<"$lockfile" && flock -n 8 && exec sleep 60) &
  sleeper=$!
  sleep 0.5
  echo "$sleeper 1" >"$lockfile"
  run hook slurm_bb_test_data_in 60 "$script" 0 0
  kill "$sleeper"
  wait "$sleeper" 2>/dev/null || true
  assert_line --index 0 "rc=0"
  assert_line --index 1 "BUSY"
  run hook slurm_bb_data_in 60 "$script" 0 0
  assert_line --index 0 "rc=0"
  run hook slurm_bb_test_data_in 60 "$script" 0 0
  assert_output "rc=0"
  run hook slurm_bb_pre_run 60 "$script"
  run hook slurm_bb_post_run 60 "$script"
  run hook slurm_bb_data_out 60 "$script"
  assert_line --index 0 "rc=0"
  run hook slurm_bb_test_data_out 60 "$script" 0 0
  assert_output "rc=0"
  # A job without a buffer (a bare #BB_LUA) has nothing to wait for.
  run hook slurm_bb_test_data_in 61 "$(job_script 61 '#BB_LUA')" 0 0
  assert_output "rc=0"
  run hook slurm_bb_job_teardown 60 "$script" false
  assert_line --index 0 "rc=0"
}

@test "cli_filter: refuses at submit what bb-parse refuses, as the submitting user" {
  install_scripts >/dev/null
  user=$(test_user)
  chmod 755 "$TEST_DIR" "$TEST_DIR/data" "$CONF"
  chmod 644 "$BBKIT_CONFIG" "$CONF/cli_filter.lua"
  echo secret >"$TEST_DIR/data/private.txt"
  chmod 600 "$TEST_DIR/data/private.txt"
  echo open >"$TEST_DIR/data/open.txt"
  chmod 644 "$TEST_DIR/data/open.txt"
  printf '#!/bin/bash\n#BB_LUA pool=small capacity=1K\n#BB_LUA stage_in type=file source=%s destination=x\necho\n' \
    "$TEST_DIR/data/private.txt" >"$TEST_DIR/private.sh"
  printf '#!/bin/bash\n#BB_LUA pool=small capacity=1K\n#BB_LUA stage_in type=file source=%s destination=x\necho\n' \
    "$TEST_DIR/data/open.txt" >"$TEST_DIR/open.sh"
  printf '#!/bin/bash\necho no buffer\n' >"$TEST_DIR/plain.sh"
  chmod 644 "$TEST_DIR"/*.sh
  submit() {  # submit OPTIONS-TABLE-LUA: runs slurm_cli_pre_submit as the test user
    setpriv --reuid "$user" --regid "$user" --clear-groups env PATH="$PATH" \
      BBKIT_CONFIG="$BBKIT_CONFIG" "$LUA" -e "
      slurm = {SUCCESS = 0, ERROR = -1,
               log_error = function(fmt, ...) io.write('error: ', string.format(fmt, ...), '\n') end,
               log_info = function(fmt, ...) io.write('info: ', string.format(fmt, ...), '\n') end}
      dofile('$CONF/cli_filter.lua')
      print('rc=' .. slurm_cli_pre_submit($1, 0))"
  }
  run submit "{type = 'sbatch', argv = {'$TEST_DIR/private.sh'}}"
  assert_line "rc=-1"
  assert_line --regexp "^error: bb-parse: .*'$TEST_DIR/data/private.txt'.*Permission denied"
  run submit "{type = 'sbatch', argv = {'$TEST_DIR/open.sh'}}"
  assert_output "rc=0"
  # A file name cannot forge the message sbatch shows.
  mkdir "$TEST_DIR/data/tree"
  chmod 755 "$TEST_DIR/data/tree"
  echo secret >"$TEST_DIR/data/tree/s"$'\n'"bb-parse: forged"
  chmod 600 "$TEST_DIR/data/tree/s"$'\n'"bb-parse: forged"
  printf '#!/bin/bash\n#BB_LUA pool=small capacity=1K\n#BB_LUA stage_in type=directory source=%s destination=x\necho\n' \
    "$TEST_DIR/data/tree" >"$TEST_DIR/tree.sh"
  chmod 644 "$TEST_DIR/tree.sh"
  run submit "{type = 'sbatch', argv = {'$TEST_DIR/tree.sh'}}"
  assert_line "rc=-1"
  assert_line --regexp "^error: bb-parse: .*tree/s\\\\x0abb-parse: forged.*Permission denied"
  refute_line --regexp "^error: bb-parse: forged"
  run submit "{type = 'sbatch', argv = {'$TEST_DIR/plain.sh'}}"
  assert_output "rc=0"
  run submit "{type = 'sbatch', wrap = 'hostname', bb = '#BB_LUA pool=small capacity=1.5K'}"
  assert_line "rc=-1"
  assert_line --partial "error: bb-parse: --bb: "
  run submit "{type = 'srun', argv = {'hostname'}, bb = '#BB_LUA pool=small capacity=1K'}"
  assert_output "rc=0"
  # The check cannot run (the configuration is unreadable here): the job goes on, noted.
  chmod 600 "$BBKIT_CONFIG"
  run submit "{type = 'sbatch', argv = {'$TEST_DIR/private.sh'}}"
  assert_line --index 0 --regexp "^info: bbkit: burst-buffer request not checked at submit \(checked again at setup\): bb-parse: .*$BBKIT_CONFIG"
  assert_line --index 1 "rc=0"
}

@test "unprivileged SlurmUser: the hooks run the tools through sudo -n and the drop-in" {
  # A SlurmUser per Lua: the suite runs under each Lua at once (ctest -j), and another run's
  # drop-in for a shared user would let sudo -n through where this one removed its own.
  user=$(test_user "bbkit-sudo-${LUA//[^a-z0-9]/}")
  # A run killed before its teardown left its drop-in behind, which would let sudo -n through.
  for f in /etc/sudoers.d/bbkit-test-*; do
    if [ -e "$f" ] && ! kill -0 "${f##*-}" 2>/dev/null; then rm -f "$f"; fi
  done
  DROPIN="/etc/sudoers.d/bbkit-test-$$"
  dropin=$DROPIN
  config_for_slurm_user "$user"
  chmod 755 "$TEST_DIR" "$CONF"
  chmod 644 "$BBKIT_CONFIG"
  run install_scripts_for "$user" --sudoers "$dropin"
  assert_success
  assert_output --partial "wrote $dropin"
  echo input >"$TEST_DIR/data/in.txt"
  chmod 755 "$TEST_DIR/data"
  chmod 644 "$TEST_DIR/data/in.txt"
  script=$(job_script 70 '#BB_LUA pool=small capacity=1K' \
    "#BB_LUA stage_in type=file source=$TEST_DIR/data/in.txt destination=in.txt")
  chown -R "$user" "$TEST_DIR/statesave"
  as_slurm_user() {
    "$BBKIT_SOURCE_DIR/tests/with-default-config" "$BBKIT_CONFIG" \
      setpriv --reuid "$user" --regid "$user" --clear-groups \
      "$LUA" "$CALL_HOOK" --release 22.05 "$CONF/burst_buffer.lua" "$@" \
      2>>"$TEST_DIR/slurmctld.log"
  }
  run as_slurm_user slurm_bb_pools
  assert_line --index 0 "rc=0"
  run as_slurm_user slurm_bb_job_process "$script"
  assert_output "rc=0"
  run as_slurm_user slurm_bb_setup 70 0 0 small 1024 "$script"
  rm -f "$dropin"
  assert_line --index 0 "rc=0"
  assert_output --partial "allocated: main.70.1"
  install_scripts_for "$user" --sudoers "$dropin" >/dev/null
  run as_slurm_user slurm_bb_data_in 70 "$script"
  assert_line --index 0 "rc=0"
  assert_file_exists "$(bbdir $TEST_DIR/small/job/main.70.1)/in.txt"
  : >"$TEST_DIR/path"
  chown "$user" "$TEST_DIR/path"
  run as_slurm_user slurm_bb_paths 70 "$script" "$TEST_DIR/path"
  assert_output "rc=0"
  run grep -c "BB_JOB_DIR=$(bbdir $TEST_DIR/small/job/main.70.1)" "$TEST_DIR/path"
  assert_output 1
  run as_slurm_user slurm_bb_job_teardown 70 "$script" true
  rm -f "$dropin"
  assert_line --index 0 "rc=0"
  assert_dir_not_exists "$(bbdir $TEST_DIR/small/job/main.70.1)"
  # Without the drop-in, sudo -n refuses at once (no password prompt) and Slurm gets why.
  run as_slurm_user slurm_bb_setup 71 0 0 small 1024 "$script"
  assert_line --index 0 "rc=-1"
  assert_line --index 1 --partial "sudo"
}

@test "each release's slurm table: the script loads with its signatures, defines what the release requires, and refuses the others" {
  install_scripts >/dev/null
  for api in 22.05 23.02 24.05; do
    sed "s/^SLURM_API = .*/SLURM_API = \"$api\"/" "$CONF/burst_buffer.lua" >"$CONF/bb.$api.lua"
  done
  for release in 22.05 23.02 23.11 24.05 24.11 25.05 25.11; do
    case $release in
      22.05) want=22.05 n=11 words="Slurm 22.05" ;;
      23.*) want=23.02 n=11 words="Slurm 23.02 or 23.11" ;;
      *) want=24.05 n=13 words="Slurm 24.05 or later" ;;
    esac
    run "$LUA" "$CALL_HOOK" --release "$release" "$CONF/bb.$want.lua" -
    assert_success
    assert_output "loaded: $n required functions"
    for api in 22.05 23.02 24.05; do
      [ "$api" = "$want" ] && continue
      run "$LUA" "$CALL_HOOK" --release "$release" "$CONF/bb.$api.lua" -
      assert_failure 3
      why="bbkit: burst_buffer.lua has the $api hook signatures (SLURM_API) but is loaded by $words, which calls the $want ones: rerun install-slurm --slurm-api $want"
      # Slurm's log says what to rerun, and the load fails with the same words.
      assert_line --index 0 "slurm.log_error: $why"
      assert_line --index 1 "$CONF/bb.$api.lua does not load: $why"
      [ "${#lines[@]}" = 2 ] || fail "unexpected output: $output"
    done
  done
  # Outside Slurm (no slurm table) the script loads with whatever it was installed with.
  for api in 22.05 23.02 24.05; do
    run "$LUA" "$CALL_HOOK" --release none "$CONF/bb.$api.lua" slurm_bb_get_status pools
    assert_line --index 0 "rc=0"
  done
}

@test "22.05 signatures: the words after scontrol show bbstat are never taken as a caller's uid" {
  install_scripts >/dev/null
  # 23.02's get_status(uid, gid, ...) under 22.05 would read "0 0 burst" as root asking.
  RELEASE=22.05 run hook slurm_bb_get_status 0 0 burst
  assert_output $'rc=0\nusage: scontrol show bbstat pools | burst | job JOBID'
  sed -i 's/^SLURM_API = .*/SLURM_API = "23.02"/' "$CONF/burst_buffer.lua"
  RELEASE=22.05 run hook slurm_bb_get_status 0 0 burst
  assert_failure 3
  refute_output --partial "PoolName"
}

@test "24.05+: a stage-out replayed after teardown succeeds, test_data_out included" {
  API=24.05
  install_scripts >/dev/null
  echo input >"$TEST_DIR/data/in.txt"
  script=$(job_script 80 '#BB_LUA pool=small capacity=1K' \
    "#BB_LUA stage_in type=file source=$TEST_DIR/data/in.txt destination=in.txt" \
    "#BB_LUA stage_out type=file source=\$BB_JOB_DIR/in.txt destination=$TEST_DIR/data/out.txt")
  for step in "slurm_bb_setup 80 0 0 small 1024 $script" "slurm_bb_data_in 80 $script" \
              "slurm_bb_test_data_in 80 $script" "slurm_bb_pre_run 80 $script" \
              "slurm_bb_post_run 80 $script" "slurm_bb_data_out 80 $script" \
              "slurm_bb_test_data_out 80 $script" "slurm_bb_job_teardown 80 $script false"; do
    run hook $step
    assert_line --index 0 "rc=0"
  done
  assert_file_exists "$TEST_DIR/data/out.txt"
  # A restarted slurmctld that had not saved the end of the job replays from post_run.
  run hook slurm_bb_post_run 80 "$script" 0 0
  assert_line --index 0 "rc=0"
  assert_line --index 1 "note: main.80.1 went through post-run before it was torn down"
  run hook slurm_bb_data_out 80 "$script" 0 0
  assert_line --index 0 "rc=0"
  assert_line --index 1 "stage-out of main.80.1: nothing to do (staged out before it was torn down)"
  run hook slurm_bb_test_data_out 80 "$script" 0 0
  assert_output "rc=0"
  run hook slurm_bb_job_teardown 80 "$script" false
  assert_line --index 0 "rc=0"
  # test_data_out answers what bb-stage out answers: a buffer torn down before it staged out
  # (a cancelled job) did not stage out, for data_out and test_data_out alike.
  script=$(job_script 81 '#BB_LUA pool=small capacity=1K')
  run hook slurm_bb_setup 81 0 0 small 1024 "$script"
  assert_line --index 0 "rc=0"
  run hook slurm_bb_job_teardown 81 "$script" true
  assert_line --index 0 "rc=0"
  run hook slurm_bb_data_out 81 "$script" 0 0
  assert_output $'rc=-1\nbb-stage: job 81 has no burst buffer (bb-pool alloc first)'
  run hook slurm_bb_test_data_out 81 "$script" 0 0
  assert_output $'rc=-1\nbb-stage: job 81 has no burst buffer (bb-pool alloc first)'
  # The same for stage-in: test_data_in says what bb-stage in says.
  run hook slurm_bb_data_in 81 "$script" 0 0
  assert_line --index 0 "rc=-1"
  run hook slurm_bb_test_data_in 81 "$script" 0 0
  assert_output $'rc=-1\nbb-stage: job 81 has no burst buffer (bb-pool alloc first)'
}

@test "24.05+: test_data_in and test_data_out fail with bb-stage's words while the stage has not run" {
  API=24.05
  install_scripts >/dev/null
  script=$(job_script 82 '#BB_LUA pool=small capacity=1K')
  run hook slurm_bb_setup 82 0 0 small 1024 "$script"
  assert_line --index 0 "rc=0"
  run hook slurm_bb_test_data_in 82 "$script" 0 0
  assert_output $'rc=-1\nbb-stage: stage-in of main.82.1 has not run to its end: it is allocated (bb-stage in runs it)'
  run hook slurm_bb_test_data_out 82 "$script" 0 0
  assert_output $'rc=-1\nbb-stage: cannot stage out main.82.1: it is allocated (stage out needs post-run)'
  run bb-stage --job 82 out --check --retry
  assert_failure 64
  run hook slurm_bb_job_teardown 82 "$script" true
  assert_line --index 0 "rc=0"
}

@test "hooks: a script Slurm passes as /proc/<pid>/fd/N (the job script holds a %) works in setup and the stage hooks" {
  API=24.05
  install_scripts >/dev/null
  echo input >"$TEST_DIR/data/in.txt"
  # What slurmctld passes then: an open file holding #!/bin/sh and the directive lines only.
  printf '%s\n' '#!/bin/sh' '#BB_LUA pool=small capacity=2K' \
    "#BB_LUA stage_in type=file source=$TEST_DIR/data/in.txt destination=in.txt" \
    "#BB_LUA stage_out type=file source=\$BB_JOB_DIR/in.txt destination=$TEST_DIR/data/out.txt" \
    >"$TEST_DIR/memfd"
  exec {fd}<"$TEST_DIR/memfd"
  rm "$TEST_DIR/memfd"
  script=/proc/$$/fd/$fd
  for step in "slurm_bb_setup 90 0 0 small 2048 $script" "slurm_bb_data_in 90 $script 0 0" \
              "slurm_bb_test_data_in 90 $script 0 0" "slurm_bb_pre_run 90 $script 0 0" \
              "slurm_bb_post_run 90 $script 0 0" "slurm_bb_data_out 90 $script 0 0" \
              "slurm_bb_test_data_out 90 $script 0 0"; do
    run hook $step
    assert_line --index 0 "rc=0"
  done
  run cat "$TEST_DIR/data/out.txt"
  assert_output input
  : >"$TEST_DIR/path"
  run hook slurm_bb_paths 90 "$script" "$TEST_DIR/path" 0 0
  assert_output "rc=0"
  run hook slurm_bb_job_teardown 90 "$script" false 0 0
  assert_line --index 0 "rc=0"
  exec {fd}<&-
}

@test "hooks: real_size replies digits only, and pools.json stays integer and below 2^63" {
  API=24.05
  install_scripts >/dev/null
  script=$(job_script 95 '#BB_LUA pool=nvme capacity=3G')
  run hook slurm_bb_setup 95 0 0 nvme 3221225472 "$script"
  assert_line --index 0 "rc=0"
  run hook slurm_bb_real_size 95 0 0
  # 24.05+ rejects anything after the digits (a newline, a unit).
  assert_output $'rc=0\n3221225472'
  run hook slurm_bb_job_teardown 95 "$script" true
  assert_line --index 0 "rc=0"
  # A pool as large as bbkit allows: every number Slurm's JSON reader sees is a plain integer
  # below 2^63.
  write_config 'mode = "slurm"' 'directives = ["BB_LUA"]' '[[pool]]' 'name = "huge"' \
    "path = \"$TEST_DIR/huge\"" 'capacity = "8191PiB"' 'granularity = "1"'
  mkdir -p "$TEST_DIR/huge"
  bb-pool init huge >/dev/null
  run hook slurm_bb_pools
  assert_line --index 0 "rc=0"
  numbers=$(sed 1d <<<"$output" | grep -oE '"(quantity|granularity|free)":[^,}]*' | cut -d: -f2)
  assert_output --partial '"granularity":1,"id":"huge","quantity":9222246136947933184'
  [ -n "$numbers" ]
  for n in $numbers; do
    [[ $n =~ ^[0-9]+$ ]] || fail "not a plain integer in pools.json: $n"
    [ "${#n}" -lt 19 ] || [[ ${#n} -eq 19 && $n < 9223372036854775808 ]] || fail "$n is 2^63 or more"
  done
}

# ---- node-local pools (bbkit(7), NODE-LOCAL POOLS) -------------------------------------------

# node_local_config [LINE...]: a standalone configuration with the top-level LINEs and a
# node-local pool "local" of 800 GiB in 1 GiB granules (800 units of its GRES per node, $NL_GRES
# else bbnvme), before the setup's shared pools nvme and small.
node_local_config() {
  mkdir -p "$TEST_DIR/local"
  write_config 'mode = "standalone"' "$@" '[[pool]]' 'name = "local"' \
    "path = \"$TEST_DIR/local\"" 'capacity = "800GiB"' 'granularity = "1GiB"' 'node_local = true' \
    ${NL_GRES:+"gres = \"$NL_GRES\""}
}

install_node_local() {
  "$SLURM_SHARE/install-slurm" --node-local --slurm-conf-dir "$CONF" --config "$BBKIT_CONFIG" \
    --bindir "$BBKIT_BIN" "$@"
}

# cli_submit OPTIONS-TABLE-LUA: the installed cli_filter's slurm_cli_pre_submit as the test user
# $U; prints its return code and the job's --gres afterwards.
cli_submit() {
  setpriv --reuid "$U" --regid "$U" --clear-groups env PATH="$PATH" \
    BBKIT_CONFIG="$BBKIT_CONFIG" "$LUA" -e "
    slurm = {SUCCESS = 0, ERROR = -1,
             log_error = function(fmt, ...) io.write('error: ', string.format(fmt, ...), '\n') end,
             log_info = function(fmt, ...) io.write('info: ', string.format(fmt, ...), '\n') end}
    dofile('$CONF/cli_filter.lua')
    local options = $1
    print('rc=' .. slurm_cli_pre_submit(options, 0))
    print('gres=' .. tostring(options.gres))"
}

# A job script readable by the test user.
user_script() {  # user_script NAME LINE...
  local file=$TEST_DIR/$1
  shift
  { printf '#!/bin/bash\n'; printf '%s\n' "$@"; printf 'echo job\n'; } >"$file"
  chmod 644 "$file"
  echo "$file"
}

@test "cli_filter: reads the GRES of bb-parse --json in bbkit's one shape, and the names of a --gres as Slurm keeps it" {
  run "$LUA" -e "
    dofile('$SLURM_SHARE/cli_filter.lua')
    local function show(json)
      local name, count, problem = bbkit_json_gres(json)
      print(tostring(name) .. ' ' .. tostring(count) .. ' ' .. tostring(problem))
    end
    show('{\n  \"gres\": \"bbnvme:200\",\n  \"has_directive\": true,\n  \"node_local\": true\n}')
    show('{\"has_directive\": true, \"job_buffer\": {\"node_local\": false}}')
    show('{\"gres\":\"scratch_2:7\"}')
    -- A value cannot forge the key: every quote inside a JSON string is escaped.
    show('{\"job_name\": \"x\\\\\"gres\\\\\": \\\\\"bbnvme:99\\\\\"\"}')
    show('{\"node_local\": true}')
    show('{\"gres\": \"bbnvme:1\", \"x\": {\"gres\": \"bbnvme:2\"}}')
    show('{\"gres\": \"BBNVME:1\"}')
    show('{\"gres\": \"bbnvme:0\"}')
    show('{\"gres\": \"bbnvme:01\"}')
    show('{\"gres\": \"bb;touch x:1\"}')
    show('{\"gres\": \"' .. string.rep('a', 33) .. ':1\"}')
    show('{\"gres\": \"bbnvme:200,gpu:1\"}')
    show('{\"gres\": null}')
    for _, v in ipairs({'gres:gpu:tesla:1,gres:bbnvme:2', 'gres/gpu:1', 'bbnvme', 'none', 'NONE', ''}) do
      print(v .. ' -> ' .. table.concat(bbkit_gres_names(v), ' '))
    end
    print('nil -> ' .. table.concat(bbkit_gres_names(nil), ' '))"
  assert_success
  unread="bbkit: bb-parse --json names its gres in a shape bbkit's Slurm scripts do not read (rerun install-slurm after upgrading bbkit)"
  assert_output "bbnvme 200 nil
nil nil nil
scratch_2 7 nil
nil nil nil
nil nil bbkit: bb-parse --json says node_local but names no gres
nil nil $unread
nil nil $unread
nil nil $unread
nil nil $unread
nil nil $unread
nil nil $unread
nil nil $unread
nil nil $unread
gres:gpu:tesla:1,gres:bbnvme:2 -> gpu bbnvme
gres/gpu:1 -> gpu
bbnvme -> bbnvme
none -> 
NONE -> 
 -> 
nil -> "
}

@test "cli_filter: adds the GRES after the job's own, refuses a job naming it, and checks that Slurm took it" {
  run "$LUA" -e "
    dofile('$SLURM_SHARE/cli_filter.lua')
    local json = '{\n  \"gres\": \"bbnvme:200\",\n  \"node_local\": true\n}'
    for _, given in ipairs({'', 'gpu:1', 'gres:gpu:1', 'gres/gpu:tesla:2,gres/fpga', 'none',
                            'bbnvme:5', 'gres:gpu:1,gres:BBNVME', 'gres/bbnvme:tlc:1'}) do
      local options = {gres = given ~= '' and given or nil}
      local problem = bbkit_cli_add_gres(options, json)
      print(given .. ' -> ' .. tostring(options.gres) .. ' ' .. tostring(problem))
    end
    -- A request without a node-local pool leaves --gres as it is.
    local options = {gres = 'gpu:1'}
    print(tostring(bbkit_cli_add_gres(options, '{\"has_directive\": true}')) .. ' ' .. options.gres)
    print(tostring(bbkit_cli_add_gres(options, nil)) .. ' ' .. options.gres)
    -- An options table that drops what is written (Slurm's reports no failure): refused.
    local dropping = setmetatable({}, {__newindex = function() end})
    print(bbkit_cli_add_gres(dropping, json))"
  assert_success
  mine() { echo "bbkit: --gres asks for $1 itself, the GRES bbkit sizes from the burst-buffer request (bbnvme:200 here): remove it from --gres (and #SBATCH --gres)"; }
  assert_output " -> bbnvme:200 nil
gpu:1 -> gpu:1,bbnvme:200 nil
gres:gpu:1 -> gres:gpu:1,bbnvme:200 nil
gres/gpu:tesla:2,gres/fpga -> gres/gpu:tesla:2,gres/fpga,bbnvme:200 nil
none -> bbnvme:200 nil
bbnvme:5 -> bbnvme:5 $(mine bbnvme)
gres:gpu:1,gres:BBNVME -> gres:gpu:1,gres:BBNVME $(mine BBNVME)
gres/bbnvme:tlc:1 -> gres/bbnvme:tlc:1 $(mine bbnvme)
nil gpu:1
nil gpu:1
bbkit: could not add --gres bbnvme:200 to the job (Slurm did not take --gres=bbnvme:200)"
}

@test "cli_filter (node-local pool): sbatch, salloc and srun get the request's GRES per node at submit; other jobs are left alone" {
  # Needs bb-parse's node_local and gres (bbkit(7), NODE-LOCAL POOLS).
  once_per_lua_set
  U=$(test_user)
  node_local_config
  run install_node_local --nodes 'n[1-4]'
  assert_success
  chmod 755 "$TEST_DIR" "$CONF"
  chmod 644 "$BBKIT_CONFIG" "$CONF/cli_filter.lua"
  local_job=$(user_script local.sh '#BB_LUA pool=local capacity=200GiB')
  run cli_submit "{type = 'sbatch', argv = {'$local_job'}}"
  assert_output $'rc=0\ngres=bbnvme:200'
  run cli_submit "{type = 'sbatch', argv = {'$local_job'}, gres = 'gpu:1'}"
  assert_output $'rc=0\ngres=gpu:1,bbnvme:200'
  # Slurm 22.05 keeps what sbatch --gres and #SBATCH --gres gave as "gres:NAME...".
  run cli_submit "{type = 'sbatch', argv = {'$local_job'}, gres = 'gres:gpu:1'}"
  assert_output $'rc=0\ngres=gres:gpu:1,bbnvme:200'
  # The user may not size bbkit's GRES: refused in one line, their --gres left as it was.
  run cli_submit "{type = 'sbatch', argv = {'$local_job'}, gres = 'gpu:1,bbnvme:5'}"
  assert_output "error: bbkit: --gres asks for bbnvme itself, the GRES bbkit sizes from a burst-buffer request (#BB_LUA pool=... capacity=...): remove it from --gres (and #SBATCH --gres)
rc=-1
gres=gpu:1,bbnvme:5"
  # So is a job that asks for no burst buffer: it would hold space no buffer uses.
  run cli_submit "{type = 'sbatch', argv = {'$(user_script none.sh)'}, gres = 'gres:BBNVME:1'}"
  assert_output "error: bbkit: --gres asks for BBNVME itself, the GRES bbkit sizes from a burst-buffer request (#BB_LUA pool=... capacity=...): remove it from --gres (and #SBATCH --gres)
rc=-1
gres=gres:BBNVME:1"
  # Per node, rounded up to the granularity.
  run cli_submit "{type = 'srun', argv = {'hostname'}, bb = '#BB_LUA pool=local capacity=1500MiB'}"
  assert_output $'rc=0\ngres=bbnvme:2'
  run cli_submit "{type = 'salloc', gres = 'gpu:2', bb = '#BB_LUA pool=local capacity=3GiB'}"
  assert_output $'rc=0\ngres=gpu:2,bbnvme:3'
  # More than a node's pool holds: refused by bb-parse at submit.
  run cli_submit "{type = 'salloc', bb = '#BB_LUA pool=local capacity=801GiB'}"
  assert_line --index 0 --partial "error: bb-parse: "
  assert_line "rc=-1"
  # A shared pool's request, no request, a job without directives: --gres untouched.
  run cli_submit "{type = 'sbatch', argv = {'$(user_script shared.sh '#BB_LUA pool=small capacity=1K')'}, gres = 'gpu:1'}"
  assert_output $'rc=0\ngres=gpu:1'
  run cli_submit "{type = 'sbatch', argv = {'$(user_script plain.sh)'}}"
  assert_output $'rc=0\ngres=nil'
  run cli_submit "{type = 'srun', argv = {'hostname'}, gres = 'gpu:1'}"
  assert_output $'rc=0\ngres=gpu:1'
}

@test "cli_filter (node-local pool): a script whose directives use another of bbkit.toml's prefixes is seen too" {
  # Needs bb-parse's node_local and gres. No burst_buffer plugin reads the script in standalone
  # mode: bbkit-job reads every configured directive, so the cli_filter looks for each.
  once_per_lua_set
  U=$(test_user)
  node_local_config 'directives = ["BB_LUA", "NODE"]'
  install_node_local --nodes n1 >/dev/null
  run grep -E '^BBKIT_(PLUGIN|DIRECTIVES?|NODE_GRES) = ' "$CONF/cli_filter.lua"
  assert_output 'BBKIT_DIRECTIVE = "BB_LUA"
BBKIT_PLUGIN = "standalone"
BBKIT_DIRECTIVES = "BB_LUA NODE"
BBKIT_NODE_GRES = "bbnvme"'
  chmod 755 "$TEST_DIR" "$CONF"
  chmod 644 "$BBKIT_CONFIG" "$CONF/cli_filter.lua"
  run cli_submit "{type = 'sbatch', argv = {'$(user_script node.sh '#NODE pool=local capacity=2GiB')'}}"
  assert_output $'rc=0\ngres=bbnvme:2'
}

@test "cli_filter (node-local pool) under Slurm's own sbatch: the GRES reaches the job's options" {
  # Needs bb-parse's node_local and gres. sbatch -v prints the options after the cli_filter ran;
  # no slurmctld answers here, so nothing is submitted.
  once_per_lua_set
  command -v sbatch >/dev/null || skip "no sbatch on this host"
  node_local_config
  printf '%s\n' 'ClusterName=bbkit' 'SlurmctldHost=localhost(127.0.0.1)' 'SlurmctldPort=1' \
    'CliFilterPlugins=cli_filter/lua' 'NodeName=n1 CPUs=1' 'PartitionName=p Nodes=n1 Default=YES' \
    >"$CONF/slurm.conf"
  run install_node_local --nodes n1
  assert_success
  job=$(user_script job.sh '#SBATCH --gres=gpu:1' '#BB_LUA pool=local capacity=200GiB')
  run env SLURM_CONF="$CONF/slurm.conf" timeout 60 sbatch -v "$job"
  assert_line --regexp '^sbatch: gres +: gres:gpu:1,gres:bbnvme:200$'
  job=$(user_script mine.sh '#SBATCH --gres=bbnvme:1' '#BB_LUA pool=local capacity=200GiB')
  run env SLURM_CONF="$CONF/slurm.conf" timeout 60 sbatch -v "$job"
  assert_failure
  assert_line --partial "bbkit: --gres asks for bbnvme itself"
  assert_line --partial "cli_filter plugin terminated with error"
}

# --- job_submit.lua (node-local pools): slurmctld's check of every job, bbkit(7) NODE-LOCAL POOLS

# A job's user for the descriptions below ($JS_UID), and one bbkit.toml's deny_users names
# (nobody): bb-parse checks who may use burst buffers.
js_setup() {
  U=$(test_user)
  JS_UID=$(id -u "$U")
  export JS_UID
  node_local_config 'deny_users = ["nobody"]'
  install_node_local --nodes 'n[1-4]' "$@" >/dev/null
  # mktemp's directory for the job scripts: none may be left behind.
  mkdir -m 1777 "$TEST_DIR/tmp"
}

# job_hook RELEASE FUNCTION ARG...: the installed job_submit.lua's hook as slurmctld calls it
# (tests/slurm-lua/call-hook.lua: the release's `slurm` table and job description), as
# $SLURM_AS when set (SlurmUser), else root; prints rc, the job's tres_per_node, the processes
# it started and, before them, what the user is told (slurmctld's own log lines left out).
job_hook() {
  local release=$1 as=()
  shift
  [ -z "${SLURM_AS:-}" ] || as=(setpriv --reuid "$SLURM_AS" --regid "$SLURM_AS" --clear-groups)
  "${as[@]}" env TMPDIR="$TEST_DIR/tmp" "$LUA" "$CALL_HOOK" --release "$release" \
    "$CONF/job_submit.lua" "$@" 2>&1 | grep -v '^slurm.log_info: '
}

# submit_job RELEASE FIELDS: slurm_job_submit of a job description (a Lua table constructor)
# submitted by its user.
submit_job() {
  job_hook "$1" slurm_job_submit "$2" "$JS_UID"
}

# A batch script with LINE... after its first line, as Lua string text (for a FIELDS table).
lua_script() {
  local text='#!/bin/bash\n' line
  for line in "$@"; do text+="$line\\n"; done
  printf '%s' "${text}srun hostname\\n"
}

# standin_bb_parse [OUTPUT]: the installed bbkit_job_submit.lua runs a bb-parse stand-in that
# records each call's arguments (NUL-separated, $TEST_DIR/standin/args), the script it was
# given ($TEST_DIR/standin/script) and the mode of that script's directory, appends a line to
# $TEST_DIR/standin/calls, and prints OUTPUT (default: bbkit's JSON with gres bbnvme:1).
standin_bb_parse() {
  local out=${1:-'{"gres": "bbnvme:1", "has_directive": true, "job_buffer": {"node_local": true}}'}
  mkdir -p "$TEST_DIR/standin"
  printf '%s\n' "$out" >"$TEST_DIR/standin/output"
  cat >"$TEST_DIR/standin/bb-parse" <<'SH'
#!/bin/bash
here=$(dirname "$0")
echo call >>"$here/calls"
printf '%s\0' "$@" >"$here/args"
while [ $# -gt 0 ]; do
  if [ "$1" = --script ]; then
    cp "$2" "$here/script"
    stat -c '%a %U' "$(dirname "$2")" >"$here/dirmode"
  fi
  shift
done
cat "$here/output"
SH
  chmod 755 "$TEST_DIR/standin" "$TEST_DIR/standin/bb-parse"
  sed -i "s|^BBKIT_BINDIR = .*|BBKIT_BINDIR = \"$TEST_DIR/standin\"|" "$CONF/bbkit_job_submit.lua"
}

# The value after OPTION in the stand-in's last arguments.
standin_arg() {
  local args i
  mapfile -d '' -t args <"$TEST_DIR/standin/args"
  for ((i = 0; i < ${#args[@]} - 1; i++)); do
    [ "${args[$i]}" != "$1" ] || { printf '%s' "${args[$((i + 1))]}"; return 0; }
  done
  return 1
}

@test "job_submit (node-local pool): a job's request gets its GRES per node in its release's form, after the job's own items" {
  js_setup
  local release prefix job
  job=$(lua_script '#SBATCH --nodes=2' '#BB_LUA pool=local capacity=200GiB')
  for release in 22.05 23.02 23.11 24.11 25.11; do
    prefix=gres/
    case $release in 22.05 | 23.02) prefix=gres: ;; esac
    run submit_job "$release" "{script = '$job', user_id = $JS_UID}"
    assert_output "rc=0
tres_per_node=${prefix}bbnvme:200
spawned=2"
    # The job's own items stay as they are, bbkit's after them in the release's form.
    run submit_job "$release" "{script = '$job', user_id = $JS_UID, tres_per_node = '${prefix}gpu:2'}"
    assert_output "rc=0
tres_per_node=${prefix}gpu:2,${prefix}bbnvme:200
spawned=2"
    run submit_job "$release" "{script = '$job', user_id = $JS_UID, tres_per_node = '${prefix}gpu:tesla:1,${prefix}fpga'}"
    assert_line "tres_per_node=${prefix}gpu:tesla:1,${prefix}fpga,${prefix}bbnvme:200"
  done
  # Through the cli_filter (sbatch, salloc, srun) the job has it already: kept as it is.
  run submit_job 22.05 "{script = '$job', user_id = $JS_UID, tres_per_node = 'gres:gpu:1,gres:bbnvme:200'}"
  assert_output "rc=0
tres_per_node=gres:gpu:1,gres:bbnvme:200
spawned=2"
  # --bb (salloc, srun, slurmrestd's burst_buffer): no script, per node, rounded up.
  run submit_job 24.11 "{burst_buffer = '#BB_LUA pool=local capacity=1500MiB', user_id = $JS_UID, tres_per_node = 'gres/gpu:1'}"
  assert_output "rc=0
tres_per_node=gres/gpu:1,gres/bbnvme:2
spawned=1"
  # Every directive bbkit.toml names is read, as bbkit-job on the nodes reads them.
  run submit_job 24.11 "{script = '$(lua_script '#BB pool=local capacity=3GiB')', user_id = $JS_UID}"
  assert_line "tres_per_node=gres/bbnvme:3"
  # A request in a shared pool, or a bare directive: no GRES.
  run submit_job 24.11 "{script = '$(lua_script '#BB_LUA pool=small capacity=1K')', user_id = $JS_UID, tres_per_node = 'gres/gpu:1'}"
  assert_output "rc=0
tres_per_node=gres/gpu:1
spawned=2"
  run submit_job 24.11 "{script = '$(lua_script '#BB_LUA')', user_id = $JS_UID}"
  assert_output "rc=0
tres_per_node=nil
spawned=2"
  # What bb-parse refuses is refused at submit, in one line, the job's GRES left alone.
  run submit_job 24.11 "{script = '$(lua_script '#BB_LUA pool=local capacity=801GiB')', user_id = $JS_UID}"
  assert_line --index 0 --regexp "^slurm.log_user: bbkit: bb-parse: .*capacity=801GiB can never be satisfied"
  assert_line --index 1 "rc=-1"
  assert_line --index 2 "tres_per_node=nil"
  [ "${#lines[@]}" = 4 ] || fail "more than one line to the user: $output"
  run submit_job 24.11 "{burst_buffer = '#BB_LUA pool=local capacity=1GiB', user_id = $(id -u nobody)}"
  assert_line --index 0 --regexp "^slurm.log_user: bbkit: bb-parse: user nobody may not use burst buffers"
  assert_line "rc=-1"
  # Every script went to bb-parse in a directory of its own, removed afterwards.
  run ls -A "$TEST_DIR/tmp"
  assert_output ""
}

@test "job_submit (node-local pool): a job naming a pool's GRES itself is refused, with a request or without" {
  js_setup
  local job mine
  job=$(lua_script '#BB_LUA pool=local capacity=200GiB')
  mine="the GRES bbkit sizes from the burst-buffer request (bbnvme:200 here)"
  refused() {  # refused RELEASE FIELDS LINE: refused with LINE, the job's GRES as it was
    run submit_job "$1" "$2"
    assert_line --index 0 "slurm.log_user: $3"
    assert_line --index 1 "rc=-1"
    [ "${#lines[@]}" = 4 ] || fail "not one line to the user: $output"
  }
  refused 22.05 "{script = '$job', user_id = $JS_UID, tres_per_node = 'gres:gpu:1,gres:bbnvme:5'}" \
    "bbkit: --gres asks for bbnvme:5 itself, $mine: remove it from the job's --gres"
  assert_line --index 2 "tres_per_node=gres:gpu:1,gres:bbnvme:5"
  refused 24.11 "{script = '$job', user_id = $JS_UID, tres_per_node = 'gres/bbnvme:tlc:200'}" \
    "bbkit: --gres asks for bbnvme:tlc:200 itself, $mine: remove it from the job's --gres"
  refused 24.11 "{script = '$job', user_id = $JS_UID, tres_per_node = 'gres/bbnvme:200,gres/bbnvme:200'}" \
    "bbkit: --gres asks for bbnvme:200 itself, $mine: remove it from the job's --gres"
  refused 24.11 "{script = '$job', user_id = $JS_UID, tres_per_node = 'gres/BBNVME:200'}" \
    "bbkit: --gres asks for BBNVME:200 itself, $mine: remove it from the job's --gres"
  refused 24.11 "{script = '$job', user_id = $JS_UID, tres_per_node = 'gres/bbnvme:200', tres_per_task = 'gres/bbnvme:1'}" \
    "bbkit: --tres-per-task asks for bbnvme:1 itself, $mine: remove it from the job's --tres-per-task"
  # Without a request in a node-local pool: it would hold space on the nodes no buffer uses.
  none="the GRES bbkit sizes from a burst-buffer request (#BB_LUA pool=... capacity=...)"
  refused 22.05 "{script = '$(lua_script '#SBATCH -N 2')', user_id = $JS_UID, tres_per_node = 'gres:BBNVME:1'}" \
    "bbkit: --gres asks for BBNVME:1 itself, $none: remove it from the job's --gres"
  assert_line "spawned=0"
  refused 24.11 "{user_id = $JS_UID, tres_per_job = 'gres/bbnvme:8'}" \
    "bbkit: tres_per_job asks for bbnvme:8 itself, $none: remove it from the job's tres_per_job"
  refused 24.11 "{script = '$(lua_script '#BB_LUA pool=small capacity=1K')', user_id = $JS_UID, tres_per_node = 'gres/bbnvme:1'}" \
    "bbkit: --gres asks for bbnvme:1 itself, $none: remove it from the job's --gres"
  # What the job wrote reaches the user in one line, its control characters escaped (the
  # user's lines come first, then rc).
  run submit_job 24.11 "{user_id = $JS_UID, tres_per_node = 'gres/bbnvme:1\nslurm.log_user: forged\r'}"
  assert_line --index 0 "slurm.log_user: bbkit: --gres asks for bbnvme:1\\x0aslurm.log_user: forged\\x0d itself, $none: remove it from the job's --gres"
  assert_line --index 1 "rc=-1"
  # Another pool's GRES of the same name prefix is not bbkit's.
  run submit_job 24.11 "{user_id = $JS_UID, tres_per_node = 'gres/bbnvme2:1,gres/nvme:1'}"
  assert_output "rc=0
tres_per_node=gres/bbnvme2:1,gres/nvme:1
spawned=0"
}

@test "job_submit (node-local pool): a job without directives, --bb or a pool's GRES starts no process" {
  js_setup
  standin_bb_parse
  local fields
  for fields in "{script = '$(lua_script '#SBATCH -N 2' '#SBATCH --gres=gpu:1')', tres_per_node = 'gres:gpu:1'}" \
    "{script = '$(lua_script)'}" \
    "{script = '#!/bin/sh\n# This script was created by sbatch --wrap.\n\nhostname\n'}" \
    "{script = '#!/bin/bash\necho\n#BB_LUA pool=local capacity=1GiB\n'}" \
    "{script = '#!/bin/bash\n# BB_LUA pool=local capacity=1GiB\n'}" \
    "{}" "{burst_buffer = ''}" "{tres_per_node = 'gres/gpu:2', tres_per_task = 'gres/fpga:1'}"; do
    run submit_job 24.11 "$fields"
    assert_line --index 0 "rc=0"
    assert_line --index 2 "spawned=0"
  done
  assert_file_not_exists "$TEST_DIR/standin/calls"
  # One with a directive: bb-parse once, the script in a directory only SlurmUser enters.
  run submit_job 24.11 "{script = '$(lua_script '#SBATCH -N 2' '#BB_LUA pool=local capacity=1GiB')', user_id = $JS_UID}"
  assert_output "rc=0
tres_per_node=gres/bbnvme:1
spawned=2"
  assert_equal "$(wc -l <"$TEST_DIR/standin/calls")" 1
  assert_equal "$(cat "$TEST_DIR/standin/dirmode")" "700 root"
  run ls -A "$TEST_DIR/tmp"
  assert_output ""
}

@test "job_submit fails closed: bb-parse missing or answering garbage, a Lua error, an unreadable bbkit.toml refuse the jobs that need bbkit; others pass" {
  js_setup
  local job plain own
  job="{script = '$(lua_script '#BB_LUA pool=local capacity=2GiB')', user_id = $JS_UID}"
  plain="{script = '$(lua_script '#SBATCH -N 1')', user_id = $JS_UID, tres_per_node = 'gres/gpu:1'}"
  own="{user_id = $JS_UID, tres_per_node = 'gres/bbnvme:1'}"
  refused() {  # refused FIELDS LINE-REGEXP: refused in one line matching
    run submit_job 24.11 "$1"
    assert_line --index 0 --regexp "^slurm.log_user: $2"
    assert_line --index 1 "rc=-1"
    [ "${#lines[@]}" = 4 ] || fail "not one line to the user: $output"
  }
  # No bb-parse where bbkit_job_submit.lua looks.
  mkdir "$TEST_DIR/empty"
  sed -i "s|^BBKIT_BINDIR = .*|BBKIT_BINDIR = \"$TEST_DIR/empty\"|" "$CONF/bbkit_job_submit.lua"
  refused "$job" "bbkit: bb-parse: .*$TEST_DIR/empty/bb-parse.*not found"
  run submit_job 24.11 "$plain"
  assert_line --index 0 "rc=0"
  # A bb-parse that answers what bbkit's does not: garbage, no request, a gres in another shape.
  standin_bb_parse 'garbage'
  refused "$job" "bbkit: bb-parse --json printed no request bbkit's job_submit.lua reads \(rerun install-slurm after upgrading bbkit\)$"
  standin_bb_parse '{"warnings": []}'
  refused "$job" "bbkit: bb-parse --json printed no request"
  standin_bb_parse '{"has_directive": true, "job_buffer": {"node_local": true}}'
  refused "$job" "bbkit: bb-parse --json says node_local but names no gres$"
  standin_bb_parse '{"gres": "bbnvme:1,gpu:9", "has_directive": true, "job_buffer": {}}'
  refused "$job" "bbkit: bb-parse --json names its gres in a shape bbkit's Slurm scripts do not read"
  run ls -A "$TEST_DIR/tmp"
  assert_output ""
  # A Lua error anywhere (a field of the wrong type, a user id missing) refuses the job: up to
  # Slurm 25.11 an error raised out of job_submit.lua lets it through.
  standin_bb_parse
  for fields in "{script = true, user_id = $JS_UID}" "{script = {}, user_id = $JS_UID}" \
    "{burst_buffer = '#BB_LUA pool=local capacity=1GiB'}" "{tres_per_node = {}}" \
    "{script = '$(lua_script '#BB_LUA pool=local capacity=1GiB')', user_id = 'x'}"; do
    refused "$fields" "bbkit: job_submit.lua failed, so the job is refused: .*$CONF/bbkit_job_submit.lua:[0-9]+: "
  done
  # bbkit.toml unreadable by SlurmUser: the jobs that need bbkit are refused (bb-parse says
  # why), the others pass without a process.
  chmod 755 "$CONF"
  chmod 600 "$BBKIT_CONFIG"
  sed -i "s|^BBKIT_BINDIR = .*|BBKIT_BINDIR = \"$BBKIT_BIN\"|" "$CONF/bbkit_job_submit.lua"
  SLURM_AS=$U refused "$job" "bbkit: bb-parse: .*$BBKIT_CONFIG"
  SLURM_AS=$U refused "$own" "bbkit: --gres asks for bbnvme:1 itself"
  SLURM_AS=$U run submit_job 24.11 "$plain"
  assert_output "rc=0
tres_per_node=gres/gpu:1
spawned=0"
  run ls -A "$TEST_DIR/tmp"
  assert_output ""
}

@test "job_modify: a user may not add, remove or resize a pool's GRES of their job; root and SlurmUser may, and a user's other changes pass" {
  js_setup --slurm-user "$(test_user)"
  run grep '^BBKIT_SLURM_UID = ' "$CONF/bbkit_job_submit.lua"
  assert_output "BBKIT_SLURM_UID = \"$JS_UID\""
  # A user's change: refused with ESLURM_ACCESS_DENIED; Slurm 22.05 drops the message in
  # job_modify (and shows its own words for the code), 23.02 and later show it.
  local user=$((JS_UID + 1)) rec="{tres_per_node = 'gres/gpu:1,gres/bbnvme:200'}"
  modify() {  # modify RELEASE CHANGE JOB_REC UID
    job_hook "$1" slurm_job_modify "$2" "$3" "$4"
  }
  why="bbkit: a user may not add, remove or resize a node-local pool's GRES (bbnvme) of a job: bbkit sized it from the job's burst-buffer request"
  run modify 24.11 "{tres_per_node = 'gres/gpu:1,gres/bbnvme:1'}" "$rec" "$user"
  assert_output "slurm.log_user: $why (bbnvme:200 here; the change asks for bbnvme:1): root or SlurmUser may
rc=2002
tres_per_node=gres/gpu:1,gres/bbnvme:1
spawned=0"
  run modify 22.05 "{tres_per_node = 'gres:bbnvme:900'}" "{tres_per_node = 'gres:bbnvme:200'}" "$user"
  assert_line --index 0 --partial "Use of log.user() in job_modify is not supported. Message discarded: (\"$why (bbnvme:200 here; the change asks for bbnvme:900)"
  assert_line "rc=2002"
  # Removing it, clearing every GRES, adding it to a job without, per task too: refused.
  for change in "{tres_per_node = 'gres/gpu:1'}" "{tres_per_node = ''}"; do
    run modify 24.11 "$change" "$rec" "$user"
    assert_line --index 0 "slurm.log_user: $why (bbnvme:200 here; the change asks for none): root or SlurmUser may"
    assert_line "rc=2002"
  done
  run modify 24.11 "{tres_per_node = 'gres/bbnvme:5'}" "{}" "$user"
  assert_line --index 0 "slurm.log_user: $why (none here; the change asks for bbnvme:5): root or SlurmUser may"
  run modify 24.11 "{tres_per_task = 'gres/bbnvme:5'}" "$rec" "$user"
  assert_line "rc=2002"
  # A user's change that keeps it, or changes something else: no word, no process.
  for change in "{tres_per_node = 'gres/gpu:2,gres/bbnvme:200'}" "{tres_per_node = 'gres/bbnvme:200'}" \
    "{time_limit = 10}" "{name = 'renamed', script = '#!/bin/bash\n#BB_LUA pool=local capacity=800GiB\n'}"; do
    run modify 24.11 "$change" "$rec" "$user"
    assert_line --index 0 "rc=0"
    assert_line --index 2 "spawned=0"
    [ "${#lines[@]}" = 3 ] || fail "$change: $output"
  done
  run modify 24.11 "{tres_per_node = 'gres/gpu:2'}" "{tres_per_node = 'gres/gpu:1'}" "$user"
  assert_line --index 0 "rc=0"
  # Root and SlurmUser may: the nodes' Prolog still holds the job to what Slurm gave it.
  for uid in 0 "$JS_UID"; do
    run modify 24.11 "{tres_per_node = 'gres/bbnvme:1'}" "$rec" "$uid"
    assert_line --index 0 "rc=0"
  done
  # A Lua error refuses the change too.
  run modify 24.11 "{tres_per_node = {}}" "$rec" "$user"
  assert_line --index 0 --regexp "^slurm.log_user: bbkit: job_submit.lua failed, so the job is refused: "
  assert_line "rc=2002"
}

# RANDOM_TEXT: a random text of shell metacharacters, quotes, blanks, control characters,
# option-like words and printable characters, from bash's RANDOM (seeded by the caller).
random_text() {
  local bits=('$(touch '"$CANARY"')' '`touch '"$CANARY"'`' ";touch $CANARY;" "|touch $CANARY"
    "&&touch $CANARY" ">$CANARY" "'" '"' '\' '\\' '$IFS' '${IFS}' '%x' '%u' '%d' $'\n' $'\t'
    $'\r' '*' '?' '~' '!' '{a,b}' '#' ' ' '$((1))' '$' ')' '(' ';' '&' $'\x01' $'\x1b[2J' $'\x7f'
    'é' ']]' '--json' '--config /dev/null' '-' '=' ',' 'bbkit-exit=0')
  local n=$((RANDOM % 8 + 1)) k text=''
  for ((k = 0; k < n; k++)); do
    text+=${bits[$((RANDOM % ${#bits[@]}))]}
    # shellcheck disable=SC2059 # an octal escape made here
    ((RANDOM % 2)) || text+=$(printf "\\$(printf '%03o' $((RANDOM % 94 + 33)))")
  done
  printf '%s' "$text"
}

@test "job_submit: generated hostile names, working directories, --bb texts and scripts reach bb-parse as they are, never the shell" {
  js_setup
  standin_bb_parse
  CANARY=$TEST_DIR/canary
  local seed=${BBKIT_SEED:-$((RANDOM * 32768 + RANDOM))} i fields jobs=20 real=8
  # The submission tier's share; the full tier all of them.
  [ "${BBKIT_TEST_TIER:-full}" != full ] || jobs=120 real=40
  RANDOM=$seed
  fields="{script = os.getenv('JS_SCRIPT'), burst_buffer = os.getenv('JS_BB'), name = os.getenv('JS_NAME'), work_dir = os.getenv('JS_DIR'), user_id = $JS_UID}"
  for ((i = 0; i < jobs; i++)); do
    JS_NAME=$(random_text) JS_DIR=/data/$(random_text) JS_BB="#BB_LUA pool=local $(random_text)"
    JS_SCRIPT="#!/bin/bash
#SBATCH --job-name=$(random_text | tr '\n' ' ')
#BB_LUA pool=local capacity=1GiB
#BB_LUA stage_in type=file source=/data/$(random_text) destination=\$BB_JOB_DIR/x
srun $(random_text)"
    export JS_NAME JS_DIR JS_BB JS_SCRIPT
    run submit_job 24.11 "$fields"
    [ "$output" = $'rc=0\ntres_per_node=gres/bbnvme:1\nspawned=2' ] || fail "seed $seed, job $i: $output"
    [ "$(standin_arg --job-name)" = "$JS_NAME" ] || fail "seed $seed, job $i: --job-name differs"
    [ "$(standin_arg --workdir)" = "$JS_DIR" ] || fail "seed $seed, job $i: --workdir differs"
    [ "$(standin_arg --bb)" = "$JS_BB" ] || fail "seed $seed, job $i: --bb differs"
    [ "$(standin_arg --user)" = "$JS_UID" ] || fail "seed $seed, job $i: --user differs"
    printf '%s' "$JS_SCRIPT" | cmp -s - "$TEST_DIR/standin/script" || fail "seed $seed, job $i: the script differs"
    [ ! -e "$CANARY" ] || fail "seed $seed, job $i: the shell ran part of the job's text"
  done
  # The real bb-parse: whatever it makes of them, one line to the user, and nothing run.
  sed -i "s|^BBKIT_BINDIR = .*|BBKIT_BINDIR = \"$BBKIT_BIN\"|" "$CONF/bbkit_job_submit.lua"
  for ((i = 0; i < real; i++)); do
    JS_NAME=$(random_text) JS_DIR=/data/$(random_text) JS_BB="#BB_LUA pool=local capacity=1GiB $(random_text)"
    JS_SCRIPT="#!/bin/bash
#BB_LUA pool=local capacity=1GiB
#BB_LUA stage_in type=file source=/data/$(random_text) destination=\$BB_JOB_DIR/x"
    export JS_NAME JS_DIR JS_BB JS_SCRIPT
    run submit_job 24.11 "$fields"
    case "${#lines[@]} ${lines[0]}" in
      "3 rc=0" | "4 slurm.log_user: bbkit: "*) ;;
      *) fail "seed $seed, real job $i: $output" ;;
    esac
    [ ! -e "$CANARY" ] || fail "seed $seed, real job $i: the shell ran part of the job's text"
  done
  run ls -A "$TEST_DIR/tmp"
  assert_output ""
}

@test "install-slurm --node-local prints the slurm.conf lines, writes gres.conf, the cli_filter and job_submit.lua, and nothing for SlurmUser" {
  # Needs bb-parse's node_local and gres, and the nodes' scripts (standalone/slurm-node/).
  once_per_lua_set
  node_local_config
  printf '%s\n' 'ClusterName=bbkit' 'GresTypes=gpu' 'PrologFlags=Contain' \
    'CliFilterPlugins=cli_filter/syslog' >"$CONF/slurm.conf"
  run install_node_local --nodes 'n[1-4]'
  assert_success
  nodes=$(cd "$SLURM_SHARE/../standalone/slurm-node" && pwd)
  scripts=$(cd "$SLURM_SHARE/../standalone/slurm" && pwd)
  assert_line "GresTypes=gpu,bbnvme"
  assert_line "PrologFlags=Contain,Alloc,DeferBatch"
  # The default stage_in (a day) is more than Slurm's 16 bits hold: the most, and a warning.
  assert_line "BatchStartTimeout=65533"
  assert_line "install-slurm: warning: timeouts.stage_in 86400 + other 300 s is more than BatchStartTimeout can hold (65533 s): a stage-in longer than that is requeued when its node registers again; lower timeouts.stage_in"
  assert_line "Prolog=$nodes/prolog"
  assert_line "Epilog=$nodes/epilog"
  assert_line "TaskProlog=$scripts/task-prolog"
  assert_line "CliFilterPlugins=cli_filter/syslog,cli_filter/lua"
  assert_line "JobSubmitPlugins=lua"
  assert_line "Gres=bbnvme:800"
  assert_line "HealthCheckProgram=$nodes/healthcheck"
  assert_line "HealthCheckInterval=300"
  assert_line "install-slurm: wrote $CONF/gres.conf"
  assert_line "install-slurm: Prolog and Epilog run without a time limit"
  refute_line --partial "PrologSlurmctld"
  refute_line --regexp '^BurstBufferType='
  for name in prolog epilog; do assert_file_executable "$nodes/$name"; done
  assert_line "install-slurm: wrote $CONF/bbkit_job_submit.lua"
  assert_line "install-slurm: wrote $CONF/job_submit.lua"
  run grep -v '^#' "$CONF/gres.conf"
  assert_output "NodeName=n[1-4] Name=bbnvme Count=800 Flags=CountOnly"
  run grep -E '^BBKIT_(BINDIR|CONFIG|PLUGIN) = ' "$CONF/cli_filter.lua"
  assert_output "BBKIT_BINDIR = \"$BBKIT_BIN\"
BBKIT_CONFIG = \"$BBKIT_CONFIG\"
BBKIT_PLUGIN = \"standalone\""
  run grep -E '^BBKIT_[A-Z_]+ = ' "$CONF/bbkit_job_submit.lua"
  assert_output "BBKIT_BINDIR = \"$BBKIT_BIN\"
BBKIT_CONFIG = \"$BBKIT_CONFIG\"
BBKIT_DIRECTIVE = \"BB_LUA\"
BBKIT_PLUGIN = \"standalone\"
BBKIT_DIRECTIVES = \"BB_LUA DW BB\"
BBKIT_NODE_GRES = \"bbnvme\"
BBKIT_SLURM_UID = \"0\""
  run grep -E '^BBKIT_[A-Z_]+ = ' "$CONF/job_submit.lua"
  assert_output "BBKIT_JOB_SUBMIT = \"$CONF/bbkit_job_submit.lua\""
  # Each installed script stands alone: the submit rules written in, not loaded from elsewhere.
  for f in cli_filter.lua bbkit_job_submit.lua; do
    run grep -c 'submit_rules.lua")$' "$CONF/$f"
    assert_output 0
    run grep -c '^function bbkit_gres_items(value)$' "$CONF/$f"
    assert_output 1
  done
  for f in cli_filter.lua bbkit_job_submit.lua job_submit.lua; do
    run "$LUAC" -p "$CONF/$f"
    assert_success
    assert_equal "$(stat -c '%a %U' "$CONF/$f")" "644 root"
  done
  # No burst_buffer plugin, and the nodes' scripts run as root under slurmd: no drop-in.
  run ls -A "$CONF"
  assert_output $'bbkit_job_submit.lua\ncli_filter.lua\ngres.conf\njob_submit.lua\nslurm.conf'
  # Flags and lists that hold bbkit's already are printed as they are; two node-local pools,
  # each its own GRES, every node both.
  mkdir -p "$TEST_DIR/local2"
  node_local_config '[timeouts]' 'other = 100' >/dev/null
  printf '[[pool]]\nname = "fast"\npath = "%s/local2"\ncapacity = "10GiB"\ngranularity = "512MiB"\nnode_local = true\ngres = "bbfast"\n' \
    "$TEST_DIR/local2" >>"$BBKIT_CONFIG"
  printf '%s\n' 'gestypes=x' 'GresTypes=bbnvme,GPU' 'prologflags=alloc,contain' \
    'CliFilterPlugins=cli_filter/lua' 'HealthCheckProgram=/usr/sbin/nhc' \
    'JobSubmitPlugins=job_submit/all_partitions' >"$CONF/slurm.conf"
  rm "$CONF/gres.conf"
  run install_node_local --nodes 'n[1-2],big01'
  assert_success
  assert_line "GresTypes=bbnvme,GPU,bbfast"
  assert_line "PrologFlags=alloc,contain,DeferBatch"
  refute_line --regexp "^HealthCheckProgram="
  assert_line "install-slurm: note: slurm.conf has HealthCheckProgram=/usr/sbin/nhc: call $nodes/healthcheck from it (it drains the node itself when bbkit's pools are not in order)"
  assert_line "CliFilterPlugins=cli_filter/lua"
  assert_line "JobSubmitPlugins=job_submit/all_partitions,lua"
  assert_line "Gres=bbnvme:800,bbfast:20"
  run grep -v '^#' "$CONF/gres.conf"
  assert_output "NodeName=n[1-2],big01 Name=bbnvme Count=800 Flags=CountOnly
NodeName=n[1-2],big01 Name=bbfast Count=20 Flags=CountOnly"
  run grep '^BBKIT_NODE_GRES = ' "$CONF/bbkit_job_submit.lua"
  assert_output 'BBKIT_NODE_GRES = "bbnvme bbfast"'
  # The lua plugin already listed, in either spelling: printed as it is.
  for have in JobSubmitPlugins=Lua jobsubmitplugins=job_submit/lua,job_submit/require_timelimit; do
    printf 'ClusterName=bbkit\n%s\n' "$have" >"$CONF/slurm.conf"
    run install_node_local --nodes 'n[1-2],big01'
    assert_success
    assert_line "JobSubmitPlugins=${have#*=}"
  done
}

@test "install-slurm --node-local keeps a site's own job_submit.lua and says how to call bbkit's check from it; it rewrites its own" {
  once_per_lua_set
  js_setup
  # bbkit's own, changed: written again.
  sed -i 's|^BBKIT_JOB_SUBMIT = .*|BBKIT_JOB_SUBMIT = "/elsewhere"|' "$CONF/job_submit.lua"
  run install_node_local --nodes 'n[1-4]'
  assert_success
  assert_line "install-slurm: wrote $CONF/job_submit.lua"
  cmp "$CONF/job_submit.lua" <(sed "s|^BBKIT_JOB_SUBMIT = .*|BBKIT_JOB_SUBMIT = \"$CONF/bbkit_job_submit.lua\"|" "$SLURM_SHARE/job_submit.lua")
  # A site's own, or a link to one: kept as it is, with a note; bbkit's functions installed
  # beside it all the same.
  local site
  for site in file link; do
    printf '%s\n' "-- the site's rules" 'function slurm_job_submit(j, p, u) return slurm.SUCCESS end' \
      'function slurm_job_modify(j, r, p, u) return slurm.SUCCESS end' >"$TEST_DIR/site.lua"
    rm -f "$CONF/job_submit.lua" "$CONF/bbkit_job_submit.lua"
    if [ "$site" = file ]; then
      cp "$TEST_DIR/site.lua" "$CONF/job_submit.lua"
    else
      ln -s "$TEST_DIR/site.lua" "$CONF/job_submit.lua"
    fi
    run install_node_local --nodes 'n[1-4]'
    assert_success
    assert_line "install-slurm: note: $CONF/job_submit.lua is the site's own, kept as it is: call bbkit's check from it (dofile(\"$CONF/bbkit_job_submit.lua\") at its top; in slurm_job_submit and slurm_job_modify, return what bbkit_job_submit(job_desc, part_list, submit_uid) and bbkit_job_modify(job_desc, job_rec, part_list, modify_uid) return when it is not slurm.SUCCESS), as $(cd "$SLURM_SHARE" && pwd)/job_submit.lua does"
    refute_line "install-slurm: wrote $CONF/job_submit.lua"
    assert_line "install-slurm: wrote $CONF/bbkit_job_submit.lua"
    assert_line "JobSubmitPlugins=lua"
    cmp "$CONF/job_submit.lua" "$TEST_DIR/site.lua"
  done
  [ -L "$CONF/job_submit.lua" ]
  # The site's script doing what the note says holds every job to bbkit's check.
  rm "$CONF/job_submit.lua"
  cat >"$CONF/job_submit.lua" <<EOF
dofile("$CONF/bbkit_job_submit.lua")
function slurm_job_submit(job_desc, part_list, submit_uid)
    local rc = bbkit_job_submit(job_desc, part_list, submit_uid)
    if rc ~= slurm.SUCCESS then return rc end
    job_desc.comment = "the site's"
    return slurm.SUCCESS
end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return bbkit_job_modify(job_desc, job_rec, part_list, modify_uid)
end
EOF
  run submit_job 24.11 "{script = '$(lua_script '#BB_LUA pool=local capacity=5GiB')', user_id = $JS_UID}"
  assert_output $'rc=0\ntres_per_node=gres/bbnvme:5\nspawned=2'
  run submit_job 24.11 "{user_id = $JS_UID, tres_per_node = 'gres/bbnvme:5'}"
  assert_line "rc=-1"
}

@test "install-slurm --node-local writes SlurmUser's uid for job_modify: --slurm-user, else slurm.conf's SlurmUser, else root; refuses one this host does not know" {
  once_per_lua_set
  node_local_config
  U=$(test_user)
  uid_written() {
    run grep '^BBKIT_SLURM_UID = ' "$CONF/bbkit_job_submit.lua"
    assert_output "BBKIT_SLURM_UID = \"$1\""
  }
  printf 'ClusterName=bbkit\nSlurmUser=%s\n' "$U" >"$CONF/slurm.conf"
  run install_node_local --nodes n1
  assert_success
  uid_written "$(id -u "$U")"
  run install_node_local --nodes n1 --slurm-user root
  assert_success
  uid_written 0
  printf 'ClusterName=bbkit\nSlurmUser=4242\n' >"$CONF/slurm.conf"
  run install_node_local --nodes n1
  assert_success
  uid_written 4242
  echo 'ClusterName=bbkit' >"$CONF/slurm.conf"
  run install_node_local --nodes n1
  assert_success
  uid_written 0
  # Each rerun that changed bbkit_job_submit.lua kept the one before it.
  run sh -c "ls '$CONF' | grep -c '^bbkit_job_submit\.lua\.bbkit-saved-'"
  assert_output 3
  rm -f "$CONF"/*.lua "$CONF"/*.bbkit-saved-* "$CONF/gres.conf"
  printf 'ClusterName=bbkit\nSlurmUser=bbkit-no-such-user\n' >"$CONF/slurm.conf"
  run install_node_local --nodes n1
  assert_failure 78
  assert_line "install-slurm: SlurmUser bbkit-no-such-user is no user on this host: run install-slurm --node-local on the controller (job_submit.lua lets SlurmUser change a job's bbkit GRES)"
  run ls -A "$CONF"
  assert_output slurm.conf
}

@test "install-slurm --node-local refuses PrologFlags with NoHold (DeferBatch would defer nothing), writing nothing" {
  once_per_lua_set
  node_local_config
  local flags
  for flags in NoHold Alloc,NoHold alloc,nohold NOHOLD,Contain; do
    printf 'ClusterName=bbkit\nPrologFlags=%s\n' "$flags" >"$CONF/slurm.conf"
    run install_node_local --nodes 'n[1-4]'
    assert_failure 78
    assert_line "install-slurm: $CONF/slurm.conf: PrologFlags=$flags holds NoHold, under which Slurm does not wait for the Prologs and DeferBatch defers nothing: a job's batch script could start while its nodes still stage in; remove NoHold"
    run ls -A "$CONF"
    assert_output slurm.conf
  done
  # A flag that only contains the word is another flag.
  printf 'ClusterName=bbkit\nPrologFlags=Alloc,NoHoldX\n' >"$CONF/slurm.conf"
  run install_node_local --nodes 'n[1-4]'
  assert_success
}

@test "install-slurm --node-local gives BatchStartTimeout room for the Prolog's stage-in, and refuses a shorter one" {
  once_per_lua_set
  # stage_in 1000 + other 100 = 1100, 1210 with room to report.
  node_local_config '[timeouts]' 'stage_in = 1000' 'other = 100'
  echo 'ClusterName=bbkit' >"$CONF/slurm.conf"
  run install_node_local --nodes 'n[1-4]'
  assert_success
  assert_line "BatchStartTimeout=1210"
  refute_line --partial "warning: timeouts.stage_in"
  rm -f "$CONF/gres.conf" "$CONF"/*.lua
  for v in 10 1209 abc; do
    printf 'ClusterName=bbkit\nBatchStartTimeout=%s\n' "$v" >"$CONF/slurm.conf"
    run install_node_local --nodes 'n[1-4]'
    assert_failure 78
    assert_line "install-slurm: $CONF/slurm.conf: BatchStartTimeout=$v is shorter than the Prolog's stage-in may take (timeouts.stage_in 1000 + other 100 s, with room: 1210 s): Slurm would requeue a job still staging in when its node registers again; set BatchStartTimeout=1210 or more, or lower bbkit.toml's [timeouts]"
    run ls -A "$CONF"
    assert_output slurm.conf
  done
  printf 'ClusterName=bbkit\nBatchStartTimeout=5000\n' >"$CONF/slurm.conf"
  run install_node_local --nodes 'n[1-4]'
  assert_success
  refute_line --regexp "^BatchStartTimeout="
}

@test "install-slurm --node-local keeps a gres.conf that gives every node the pool's count (warning without Flags=CountOnly), and refuses one that does not" {
  # Needs bb-parse's node_local and gres, and the nodes' scripts.
  once_per_lua_set
  NL_GRES=scratch node_local_config
  gres_conf() {
    printf '%s\n' "$@" >"$CONF/gres.conf"
    cp "$CONF/gres.conf" "$TEST_DIR/gres.before"
    rm -f "$CONF"/*.lua
  }
  kept() {
    run install_node_local --nodes 'n[01-04]'
    assert_success
    assert_line "install-slurm: $CONF/gres.conf checked (kept as it is)"
    assert_line "Gres=scratch:800"
    cmp "$CONF/gres.conf" "$TEST_DIR/gres.before"
  }
  refused() {  # refused LINE: the one line install-slurm says, the file left as it was
    run install_node_local --nodes 'n[01-04]'
    assert_failure 78
    assert_line "install-slurm: $CONF/gres.conf: $1"
    [ "$(grep -c 'gres.conf: ' <<<"$output")" = 1 ] || fail "more than one line on gres.conf: $output"
    cmp "$CONF/gres.conf" "$TEST_DIR/gres.before"
    assert_file_not_exists "$CONF/cli_filter.lua"
    assert_file_not_exists "$CONF/job_submit.lua"
  }
  count_only="install-slurm: warning: $CONF/gres.conf: a line of Name=scratch has no Flags=CountOnly: add it (bbkit's GRES is a count only; Slurm then loads no GRES plugin for it)"
  fix="write NodeName=n[01-04] Name=scratch Count=800 Flags=CountOnly (then restart slurmd)"
  # Other GRES, keys in any case, comments, ranges written otherwise, lines that add up.
  gres_conf '# site' 'AutoDetect=off' 'NodeName=n[01-02] Name=gpu File=/dev/nvidia0' \
    'NodeName=n01,n02 Name=scratch Count=800 Flags=CountOnly' \
    'nodename=n[03-04] name=SCRATCH count=400 flags=countonly # half' \
    'NodeName=n03,n04 Name=scratch Count=400 Flags=CountOnly'
  kept
  refute_line --partial "Flags=CountOnly"
  gres_conf 'Name=scratch Count=800 Flags=CountOnly'
  kept
  refute_line --partial "Flags=CountOnly"
  # Without Flags=CountOnly on every line of it: kept, with one warning.
  gres_conf 'Name=scratch Count=800'
  kept
  assert_line "$count_only"
  gres_conf 'NodeName=n[01-02] Name=scratch Count=800 Flags=CountOnly' 'NodeName=n[03-04] Name=scratch Count=800'
  kept
  assert_line "$count_only"
  [ "$(grep -c 'CountOnly' <<<"$output")" = 1 ] || fail "more than one warning: $output"
  gres_conf 'NodeName=n[01-04] Name=scratch Count=700'
  refused "node n01 has 700 of scratch but pool local gives it 800 (capacity / granularity): $fix"
  gres_conf 'NodeName=n[01-03] Name=scratch Count=800' 'NodeName=n[05-09] Name=scratch Count=800'
  refused "node n04 has 0 of scratch but pool local gives it 800 (capacity / granularity): $fix"
  gres_conf 'NodeName=n[01-04] Name=gpu Count=2'
  refused "node n01 has 0 of scratch but pool local gives it 800 (capacity / granularity): $fix"
  gres_conf 'NodeName=n[01-04] Name=scratch Count=1K'
  refused "node n01 has 1024 of scratch but pool local gives it 800 (capacity / granularity): $fix"
  gres_conf 'Name=scratch Count=800' 'NodeName=n02 Name=scratch Count=1'
  refused "node n02 has 801 of scratch but pool local gives it 800 (capacity / granularity): $fix"
  # What install-slurm cannot read is refused, never run.
  gres_conf "NodeName=n\$(touch\${IFS}$TEST_DIR/pwned) Name=scratch Count=800"
  refused "NodeName=n\$(touch\${IFS}$TEST_DIR/pwned) (Name=scratch) is not a node list install-slurm reads: write NodeName=n[01-04] Name=scratch Count=800 Flags=CountOnly"
  assert_file_not_exists "$TEST_DIR/pwned"
  gres_conf 'NodeName=n[01-04] Name=scratch Count=8e2'
  refused "Count=8e2 of Name=scratch is not a count install-slurm reads: write NodeName=n[01-04] Name=scratch Count=800 Flags=CountOnly"
}

@test "install-slurm --node-local refuses a Prolog or Epilog limit shorter than bbkit's [timeouts], by release" {
  # Needs bb-parse's node_local and gres, and the nodes' scripts.
  once_per_lua_set
  # Prolog: stage_in 1000 + other 100 = 1100, 1210 with room to report (no queue: Slurm
  # reserved the space); Epilog: other 100 + stage_out 2000 + other 100 = 2200, 2420.
  node_local_config '[timeouts]' 'queue = 600' 'stage_in = 1000' 'stage_out = 2000' 'other = 100'
  echo 'PrologEpilogTimeout=2000' >"$CONF/slurm.conf"
  run install_node_local --nodes n1 --slurm-release 22.05
  assert_failure 78
  assert_output "install-slurm: $CONF/slurm.conf: PrologEpilogTimeout=2000 is shorter than Epilog may take (timeouts.other 100 + stage_out 2000 + other 100 s, with room to report: 2420 s): Slurm would kill it before the stage-out ends and drain the node; set PrologEpilogTimeout=2420 or more (0: no limit), or lower bbkit.toml's [timeouts]"
  assert_file_not_exists "$CONF/gres.conf"
  printf '%s\n' 'PrologEpilogTimeout=2000' 'PrologTimeout=1000' 'EpilogTimeout=0' >"$CONF/slurm.conf"
  run install_node_local --nodes n1 --slurm-release 25.05
  assert_failure 78
  assert_line "install-slurm: Epilog runs without a time limit (EpilogTimeout=0)"
  assert_line "install-slurm: $CONF/slurm.conf: PrologTimeout=1000 is shorter than Prolog may take (timeouts.stage_in 1000 + other 100 s, with room to report: 1210 s): Slurm would kill it, drain the node and requeue the job, which stages in again; set PrologTimeout=1210 or more (0: no limit), or lower bbkit.toml's [timeouts]"
  printf '%s\n' 'PrologTimeout=1210' 'EpilogTimeout=0' >"$CONF/slurm.conf"
  run install_node_local --nodes n1 --slurm-release 25.05
  assert_success
  assert_line "install-slurm: PrologTimeout=1210 leaves Prolog room (1210 s needed)"
  assert_line "install-slurm: Epilog runs without a time limit (EpilogTimeout=0)"
  echo 'PrologEpilogTimeout=2420' >"$CONF/slurm.conf"
  run install_node_local --nodes n1 --slurm-release 24.11
  assert_success
  assert_line "install-slurm: PrologEpilogTimeout=2420 leaves Epilog room (2420 s needed)"
}

@test "install-slurm --node-local refuses a configuration without node-local pools, a missing or hostile --nodes, and writes nothing then" {
  once_per_lua_set
  # Usage: checked before the configuration is read.
  run "$SLURM_SHARE/install-slurm" --node-local --slurm-conf-dir "$CONF" --config "$BBKIT_CONFIG" --bindir "$BBKIT_BIN"
  assert_failure 64
  assert_output "install-slurm: --node-local needs --nodes NODELIST (the compute nodes with the node-local pools)"
  run "$SLURM_SHARE/install-slurm" --standalone --nodes n1 --slurm-conf-dir "$CONF" --bindir "$BBKIT_BIN"
  assert_failure 64
  assert_output "install-slurm: --nodes names the nodes of node-local pools: it goes with --node-local"
  run install_node_local --nodes n1 --plugin datawarp
  assert_failure 64
  for hostile in 'n1;touch x' 'n[1-4] Name=x' $'n1\nNodeName=n2 Name=bbnvme Count=1' 'n1,' ',n1' \
    'n[1-4' 'n[4-1]' 'n[0-65536]' 'n[1-40000],m[1-40000]' '-n1' '.n1' 'n$(id)' "$(printf 'a%.0s' {1..65})" \
    'n[1-2]x['; do
    run install_node_local --nodes "$hostile"
    assert_failure 64
    [ "${#lines[@]}" = 1 ] || fail "more than one line for '$hostile': $output"
    assert_output --partial "is not a node list"
  done
  run install_node_local --nodes "$(printf 'a%.0s' {1..63})[1-9]"
  refute_output --partial "is not a node list"
  # A standalone configuration whose pools are all shared, and another mode.
  write_config 'mode = "standalone"'
  run install_node_local --nodes n1
  assert_failure 78
  assert_output "install-slurm: bbkit.toml has no pool with node_local = true: --node-local needs one (use --standalone for shared pools)"
  write_config 'mode = "slurm"' 'directives = ["BB_LUA"]'
  run install_node_local --nodes n1
  assert_failure 78
  assert_output --partial '--node-local needs mode = "standalone"'
  run ls -A "$CONF"
  assert_output ""
}

@test "install-slurm --node-local: a gres that is not a GRES name never reaches a file" {
  # Needs bb-parse's node_local and gres: bb-parse config refuses such a gres first; install-slurm
  # checks it again before writing.
  once_per_lua_set
  for bad in 'bb nvme' 'bbnvme Count=9' 'BBNVME' '9nvme' 'a$(id)' "$(printf 'a%.0s' {1..33})"; do
    NL_GRES=$bad node_local_config
    run install_node_local --nodes n1
    assert_failure 78
    run ls -A "$CONF"
    assert_output ""
  done
}
