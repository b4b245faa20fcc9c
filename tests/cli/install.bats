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
  for script in prolog epilog healthcheck; do
    assert_file_executable "$P/share/bbkit/standalone/slurm-node/$script"
  done
  assert_file_not_exists "$P/share/bbkit/examples"
  assert_file_executable "$P/share/bbkit/slurm/install-slurm"
  # The Slurm scripts install-slurm fills in (submit_rules.lua written into two of them): data.
  for f in burst_buffer.lua cli_filter.lua submit_rules.lua bbkit_job_submit.lua job_submit.lua \
    burst_buffer.conf sudoers; do
    [ "$(stat -c '%a %U' "$P/share/bbkit/slurm/$f")" = "644 root" ] || fail "$P/share/bbkit/slurm/$f: $(stat -c '%a %U' "$P/share/bbkit/slurm/$f")"
  done
  assert_file_executable "$P/share/bbkit/datawarp/dw_wlm_cli"
  assert_file_executable "$P/share/bbkit/datawarp/dwstat"
  assert_file_exists "$P/share/bbkit/datawarp/burst_buffer.conf"
  for s in pbs/prologue pbs/epilogue gridengine/prolog gridengine/epilog spur/job_submit \
    spur/prolog_slurmctld spur/epilog_slurmctld; do
    assert_file_executable "$P/share/bbkit/standalone/$s"
  done
  # The adapters' library: sourced, never run; root's and writable by root only, like them.
  [ "$(stat -c '%a %U' "$P/share/bbkit/standalone/bbkit-lib.sh")" = "644 root" ]
  assert_file_exists "$P/share/bbkit/bbkit.toml.example"
  assert_file_exists "$P/share/man/man7/bbkit.7"
  # The units name the tools of this prefix, not of the one the build was configured with.
  for unit in "$P"/share/bbkit/systemd/*.service; do
    run grep -h '^ExecStart=/' "$unit"
    assert_success
    assert_output --regexp "^ExecStart=$P/bin/bb-(pool|stat) "
  done
  [ "$(ls "$P"/share/bbkit/systemd/*.service | wc -l)" -eq 5 ]
  [ "$(ls "$P"/share/bbkit/systemd/*.timer | wc -l)" -eq 4 ]
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

# install_slurm ARG...: the installed install-slurm, next to $TEST_DIR/etc/slurm.conf.
install_slurm() {
  mkdir -p "$TEST_DIR/etc"
  "$P/share/bbkit/slurm/install-slurm" --slurm-conf-dir "$TEST_DIR/etc" "$@"
}

@test "install-slurm lists AllowUsers and DenyUsers comma-separated, and checks an existing list as Slurm reads it" {
  local conf=$TEST_DIR/etc/burst_buffer.conf nobody_uid
  nobody_uid=$(id -u nobody)
  write_config 'mode = "datawarp"' "allow_users = [\"$U\", \"nobody\"]"
  run install_slurm --plugin datawarp
  assert_success
  run grep -E '^(AllowUsers|DenyUsers)=' "$conf"
  assert_output "AllowUsers=$U,nobody"
  # The same users in another order, one by uid, an empty item, the key in another case.
  sed -i "s/^AllowUsers=.*/allowusers=$nobody_uid,,$U/" "$conf"
  run install_slurm --plugin datawarp
  assert_success
  assert_output --partial "burst_buffer.conf checked (kept as it is)"
  # The list colon-joined, as install-slurm wrote it before: Slurm reads no user from it.
  sed -i "s/^allowusers=.*/AllowUsers=$U:nobody/" "$conf"
  run install_slurm --plugin datawarp
  assert_failure 78
  assert_output "install-slurm: $conf: AllowUsers=$U:nobody: Slurm finds no user in '$U:nobody' (it splits the list at commas only; a blank is part of a name): list bbkit.toml's allow_users comma-separated ('$U,nobody')"
  # A blank after the comma (quoted, else Slurm cannot read the file): ' nobody' is no user.
  sed -i "s/^AllowUsers=.*/AllowUsers=\"$U, nobody\"/" "$conf"
  run install_slurm --plugin datawarp
  assert_failure 78
  assert_output --partial "AllowUsers=$U, nobody: Slurm finds no user in ' nobody'"
  # A user missing; the last setting wins.
  printf 'AllowUsers=%s,nobody\nAllowUsers=%s\n' "$U" "$U" >>"$conf"
  run install_slurm --plugin datawarp
  assert_failure 78
  assert_output "install-slurm: $conf: AllowUsers=$U but bbkit.toml's allow_users is '$U,nobody': list the same users, comma-separated (in any order, by name or uid)"

  # DenyUsers of two users, in Slurm mode too (its burst_buffer/lua checks them at submit).
  rm "$conf"
  write_config 'mode = "slurm"' 'directives = ["BB_LUA"]' "deny_users = [\"nobody\", \"$U\"]"
  run install_slurm --slurm-api 22.05
  assert_success
  run grep -E '^(AllowUsers|DenyUsers)=' "$conf"
  assert_output "DenyUsers=nobody,$U"
  sed -i "s/^DenyUsers=.*/DenyUsers=$U:nobody/" "$conf"
  run install_slurm --slurm-api 22.05
  assert_failure 78
  assert_output --partial "DenyUsers=$U:nobody: Slurm finds no user in '$U:nobody'"
  sed -i "s/^DenyUsers=.*/DenyUsers=$U,$nobody_uid/" "$conf"
  run install_slurm --slurm-api 22.05
  assert_success
  # A list Slurm has and bbkit.toml has not.
  echo "AllowUsers=$U" >>"$conf"
  run install_slurm --slurm-api 22.05
  assert_failure 78
  assert_output --partial "AllowUsers=$U but bbkit.toml's allow_users is '': list the same users"
}

@test "install-slurm installs cli_filter.lua where slurm.conf's CliFilterParameters=cli_filter_lua_path= names (Slurm 25.11 and later), or refuses" {
  local etc=$TEST_DIR/etc
  write_config 'mode = "slurm"' 'directives = ["BB_LUA"]'
  mkdir -p "$etc" "$TEST_DIR/lua"
  echo "CliFilterParameters=cli_filter_lua_path=$TEST_DIR/lua/filter.lua" >"$etc/slurm.conf"
  run install_slurm --slurm-release 25.11
  assert_success
  assert_line "install-slurm: slurm.conf's CliFilterParameters names $TEST_DIR/lua/filter.lua: cli_filter.lua goes there"
  assert_line "install-slurm: wrote $TEST_DIR/lua/filter.lua"
  assert_file_not_exists "$etc/cli_filter.lua"
  run grep -c '^function slurm_cli_pre_submit' "$TEST_DIR/lua/filter.lua"
  assert_output 1
  # Keys in any case, the last setting wins, the first cli_filter_lua_path= in the list counts,
  # an Include file is read (relative to slurm.conf's directory).
  rm "$TEST_DIR/lua/filter.lua"
  printf 'ClusterName=Alpha\nclifilterparameters=cli_filter_lua_path=/nowhere/x.lua\nInclude %%c.conf\n' >"$etc/slurm.conf"
  echo "CLIFILTERPARAMETERS=other=1,cli_filter_lua_path=$TEST_DIR/lua/inc.lua,cli_filter_lua_path=/nowhere/y.lua" >"$etc/alpha.conf"
  run install_slurm --slurm-release 26.05
  assert_success
  assert_file_exists "$TEST_DIR/lua/inc.lua"
  # A name Slurm's commands would each read from their own working directory; a directory; a
  # directory that does not exist: refused, nothing written.
  rm "$TEST_DIR/lua/inc.lua"
  for path in lua/filter.lua "$TEST_DIR/lua" "$TEST_DIR/none/filter.lua"; do
    echo "CliFilterParameters=cli_filter_lua_path=$path" >"$etc/slurm.conf"
    run install_slurm --slurm-release 25.11 --slurm-api 24.05
    assert_failure 78
    [ "${#lines[@]}" -eq 1 ]
    assert_output --partial "install-slurm: $etc/slurm.conf: CliFilterParameters: "
  done
  assert_output --partial "$TEST_DIR/none, the directory of cli_filter_lua_path, does not exist"
  run find "$etc" "$TEST_DIR/lua" -name '*filter*'
  assert_output ""
  # An empty name means the default place.
  echo "CliFilterParameters=cli_filter_lua_path=" >"$etc/slurm.conf"
  run install_slurm --slurm-release 25.11
  assert_success
  assert_file_exists "$etc/cli_filter.lua"
  # Before 25.11 the key does not exist (Slurm refuses such a slurm.conf): the default place.
  rm "$etc/cli_filter.lua"
  echo "CliFilterParameters=cli_filter_lua_path=$TEST_DIR/lua/filter.lua" >"$etc/slurm.conf"
  run install_slurm --slurm-release 24.11
  assert_success
  assert_output --partial "install-slurm: warning: Slurm 24.11 does not know CliFilterParameters (25.11 and later)"
  assert_file_exists "$etc/cli_filter.lua"
  assert_file_not_exists "$TEST_DIR/lua/filter.lua"
  # The datawarp plugin's cli_filter goes there too.
  write_config 'mode = "datawarp"'
  rm "$etc/burst_buffer.conf"
  run install_slurm --plugin datawarp --slurm-release 25.11
  assert_success
  assert_file_exists "$TEST_DIR/lua/filter.lua"
  run grep -x 'BBKIT_PLUGIN = "datawarp"' "$TEST_DIR/lua/filter.lua"
  assert_success
}

@test "install-slurm --standalone refuses a PrologSlurmctld/EpilogSlurmctld limit shorter than bbkit's [timeouts], by release" {
  local etc=$TEST_DIR/etc
  # PrologSlurmctld: queue 600 + stage_in 1000 + other 100 = 1700, 1870 with room to report;
  # EpilogSlurmctld: other 100 + stage_out 2000 + other 100 = 2200, 2420.
  write_config 'mode = "standalone"' '[timeouts]' 'queue = 600' 'stage_in = 1000' \
    'stage_out = 2000' 'other = 100'
  mkdir -p "$etc"
  # Slurm starts the controller scripts with no environment: they read /etc/bbkit/bbkit.toml.
  standalone() {
    "$BBKIT_SOURCE_DIR/tests/with-default-config" "$BBKIT_CONFIG" \
      "$P/share/bbkit/slurm/install-slurm" --slurm-conf-dir "$etc" --standalone "$@"
  }
  # Unset: no limit in any release.
  echo 'ClusterName=x' >"$etc/slurm.conf"
  run standalone --slurm-release 24.11
  assert_success
  assert_line "install-slurm: PrologSlurmctld and EpilogSlurmctld run without a time limit"
  # Up to 24.11 PrologEpilogTimeout bounds both: it must hold the longer.
  echo 'PrologEpilogTimeout=2000' >>"$etc/slurm.conf"
  run standalone --slurm-release 24.11
  assert_failure 78
  assert_output "install-slurm: $etc/slurm.conf: PrologEpilogTimeout=2000 is shorter than EpilogSlurmctld may take (timeouts.other 100 + stage_out 2000 + other 100 s, with room to report: 2420 s): Slurm would kill it before the stage-out ends; set PrologEpilogTimeout=2420 or more (0: no limit), or lower bbkit.toml's [timeouts]"
  echo 'prologepilogtimeout=300' >>"$etc/slurm.conf"
  run standalone --slurm-release 22.05
  assert_failure 78
  assert_output --partial "PrologEpilogTimeout=300 is shorter than EpilogSlurmctld may take"
  echo 'PrologEpilogTimeout=2420' >>"$etc/slurm.conf"
  run standalone --slurm-release 24.11
  assert_success
  assert_line "install-slurm: PrologEpilogTimeout=2420 leaves EpilogSlurmctld room (2420 s needed)"
  # From 25.05 PrologTimeout and EpilogTimeout, each falling back to PrologEpilogTimeout.
  echo 'PrologEpilogTimeout=1000' >>"$etc/slurm.conf"
  run standalone --slurm-release 25.05
  assert_failure 78
  assert_line --index 0 --partial "PrologEpilogTimeout=1000 is shorter than PrologSlurmctld may take (timeouts.queue 600 + stage_in 1000 + other 100 s, with room to report: 1870 s): Slurm would kill it and requeue the job, which stages in again; set PrologTimeout=1870 or more"
  assert_line --index 1 --partial "PrologEpilogTimeout=1000 is shorter than EpilogSlurmctld may take"
  assert_line --index 1 --partial "set EpilogTimeout=2420 or more"
  printf 'PrologTimeout=1870\nEpilogTimeout=0\n' >>"$etc/slurm.conf"
  run standalone --slurm-release 26.05
  assert_success
  assert_line "install-slurm: PrologTimeout=1870 leaves PrologSlurmctld room (1870 s needed)"
  assert_line "install-slurm: EpilogSlurmctld runs without a time limit (EpilogTimeout=0)"
  # 24.11 does not know PrologTimeout: PrologEpilogTimeout=1000 bounds both there.
  run standalone --slurm-release 24.11
  assert_failure 78
  assert_output --partial "warning: Slurm 24.11 does not know PrologTimeout (25.05 and later)"
  assert_output --partial "PrologEpilogTimeout=1000 is shorter than EpilogSlurmctld may take"
  # Slurm's INFINITE is 65535 s; a value no limit can hold asks for none.
  printf 'PrologTimeout=INFINITE\n' >>"$etc/slurm.conf"
  write_config 'mode = "standalone"' '[timeouts]' 'queue = 600' 'stage_in = 86400'
  run standalone --slurm-release 25.11
  assert_failure 78
  assert_output --partial "PrologTimeout=INFINITE is shorter than PrologSlurmctld may take (timeouts.queue 600 + stage_in 86400 + other 300 s, with room to report: 96030 s, more than the 65533 s any limit holds): set PrologTimeout=0 (no limit)"
  run standalone --slurm-release 2411
  assert_failure 64
}

@test "install-slurm writes the configuration's absolute name and the tools' directory into the hooks, whatever --config and --bindir" {
  write_config 'mode = "slurm"' 'directives = ["BB_LUA"]'
  mkdir -p "$TEST_DIR/etc"
  # BBKIT_CONFIG, relative, without --config; the tools of the installed prefix.
  run env -C "$TEST_DIR" BBKIT_CONFIG=bbkit.toml PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    "$P/share/bbkit/slurm/install-slurm" --slurm-conf-dir etc --slurm-api 22.05
  assert_success
  for script in burst_buffer.lua cli_filter.lua; do
    run grep -E '^BBKIT_(CONFIG|BINDIR) = ' "$TEST_DIR/etc/$script"
    assert_output "BBKIT_BINDIR = \"$P/bin\"
BBKIT_CONFIG = \"$TEST_DIR/bbkit.toml\""
  done
  # From a source tree: the tools found on PATH, named by their directory.
  run env BBKIT_CONFIG="$TEST_DIR/bbkit.toml" PATH="$P/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    "$BBKIT_SOURCE_DIR/share/bbkit/slurm/install-slurm" --slurm-conf-dir "$TEST_DIR/etc" --slurm-api 22.05
  assert_success
  assert_line "install-slurm: bb-parse found on PATH: BBKIT_BINDIR = $P/bin"
  run grep -h '^BBKIT_BINDIR = ' "$TEST_DIR/etc/burst_buffer.lua" "$TEST_DIR/etc/cli_filter.lua"
  assert_output "BBKIT_BINDIR = \"$P/bin\"
BBKIT_BINDIR = \"$P/bin\""
}
