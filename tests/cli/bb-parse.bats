#!/usr/bin/env bats
# bb-parse: every command and every error path, with exit codes and messages.

load common

setup() { common_setup; }
teardown() { common_teardown; }

script() {  # script NAME LINE... : writes a job script with a shebang
  local file="$TEST_DIR/$1"; shift
  { echo '#!/bin/bash'; for l in "$@"; do printf '%s\n' "$l"; done; echo 'srun app'; } >"$file"
  echo "$file"
}

# --- common conventions ------------------------------------------------------------------

@test "help lists every option of the man page" {
  run bb-parse --help
  assert_success
  for opt in --script --bb --bbf --job-id --user --array-job-id --array-task-id --workdir \
             --job-name --json --emit-script --check-sources --config --verbose --quiet --version; do
    assert_output --partial -- "$opt"
    grep -q -- "${opt//-/\\\\-}" "$BBKIT_SOURCE_DIR/man/man1/bb-parse.1" || fail "man page lacks $opt"
  done
  grep -q -- 'granularity' "$BBKIT_SOURCE_DIR/man/man1/bb-parse.1"
}

@test "version prints bbkit and the version" {
  run bb-parse --version
  assert_success
  assert_output --regexp '^bbkit [0-9]+\.[0-9]+\.[0-9]+$'
}

@test "unknown option is a usage error with exit 64" {
  run bb-parse --no-such-option
  assert_failure 64
  assert_output --partial "bb-parse: "
}

@test "nothing to parse is a usage error" {
  run bb-parse
  assert_failure 64
  assert_output --partial "nothing to parse"
}

# --- size ---------------------------------------------------------------------------------

@test "size prints bytes, rounded bytes and Slurm's form" {
  run bb-parse size 1200GiB
  assert_success
  assert_line "bytes:   1288490188800"
  assert_line "text:    1200GiB"
}

@test "size json has bytes nodes rounded and text" {
  run bb-parse size 100MB --granularity 1MiB --json
  assert_success
  echo "$output" | grep -q '"bytes": 100000000'
  echo "$output" | grep -q '"nodes": false'
  echo "$output" | grep -q '"rounded": 100663296'
  echo "$output" | grep -q '"text": "100MB"'
}

@test "size of a node count" {
  run bb-parse size 4nodes --json
  assert_success
  echo "$output" | grep -q '"nodes": true'
  echo "$output" | grep -q '"text": "4N"'
}

@test "size 1.5G exits 65 naming the token" {
  run bb-parse size 1.5G
  assert_failure 65
  assert_output --partial "'1.5G'"
  assert_output --partial "decimals"
}

@test "size rejects unknown suffixes, zero, blanks and overflow with 65" {
  for bad in 1B 2E 0 "1 G" 9223372036854775808 3.5TB; do
    run bb-parse size "$bad"
    assert_failure 65
    assert_output --partial "'$bad'"
  done
}

@test "a negative size is refused after --" {
  run bb-parse size -- -1G
  assert_failure 65
  assert_output --partial "negative"
}

@test "size with a node-count granularity is refused" {
  run bb-parse size 10G --granularity 2N
  assert_failure 65
  assert_output --partial "node count"
}

@test "size prints the forms of scontrol show burst" {
  for pair in 1288490188800:1200GiB 256000:250KiB 4000000000:4GB 1000256000:1000256KB 1200:1200; do
    run bb-parse size "${pair%%:*}" --json
    assert_success
    echo "$output" | grep -q "\"text\": \"${pair##*:}\"" || fail "${pair%%:*} -> $output"
  done
}

# --- config -------------------------------------------------------------------------------

@test "config prints the effective configuration that reads back the same" {
  run bb-parse config
  assert_success
  assert_output --partial 'name = "nvme"'
  assert_output --partial 'capacity = "100GiB"'
  assert_output --partial 'stage_in = 86400'
  echo "$output" >"$TEST_DIR/again.toml"
  run bb-parse --config "$TEST_DIR/again.toml" config --json
  assert_success
  echo "$output" | grep -q '"granularity": 1073741824'
}

@test "config json holds every section" {
  run bb-parse config --json
  assert_success
  for key in state_dir mode cluster directives default_pool flags allow_users deny_users \
             allow_root timeouts limits pools hooks; do
    echo "$output" | grep -q "\"$key\"" || fail "missing $key"
  done
}

@test "config is found through --config, then BBKIT_CONFIG" {
  cp "$TEST_DIR/bbkit.toml" "$TEST_DIR/other.toml"
  sed -i 's/cluster = .*//; 1i cluster = "other"' "$TEST_DIR/other.toml"
  run bb-parse --config "$TEST_DIR/other.toml" config --json
  assert_success
  echo "$output" | grep -q '"cluster": "other"'
  run bb-parse config --json
  echo "$output" | grep -q '"cluster": "main"'
}

@test "a missing configuration exits 78 naming the file" {
  run bb-parse --config "$TEST_DIR/nope.toml" config
  assert_failure 78
  assert_output --partial "nope.toml"
}

@test "an unknown configuration key exits 78 naming key and line" {
  write_config 'colour = "blue"'
  run bb-parse config
  assert_failure 78
  assert_output --partial "colour"
  assert_output --partial "bbkit.toml:4"
}

@test "a wrong type exits 78 naming the key" {
  write_config 'allow_root = "yes"'
  sed -i '/^allow_root = true$/d' "$TEST_DIR/bbkit.toml"
  run bb-parse config
  assert_failure 78
  assert_output --partial "allow_root"
}

@test "config prints timeouts.queue: 600 by default, else the configured value" {
  run bb-parse config
  assert_success
  assert_output --partial "queue = 600"
  write_config '[timeouts]' 'queue = 42'
  run bb-parse config
  assert_output --partial "queue = 42"
  run bb-parse config --json
  echo "$output" | grep -q '"queue": 42' || fail "no queue in $output"
}

@test "a timeouts.queue that is not a positive number of seconds up to Slurm's maximum exits 78" {
  for bad in 0 -5 '"600"' 1.5 2073601; do
    write_config '[timeouts]' "queue = $bad"
    run bb-parse config
    assert_failure 78
    assert_output --partial "queue"
  done
}

@test "config prints slurm_release and slurm_conf when set and poll_interval always, and reads them back" {
  run bb-parse config
  assert_success
  refute_output --partial "slurm_release"
  refute_output --partial "slurm_conf"
  assert_line "poll_interval = 15"
  run bb-parse config --json
  echo "$output" | grep -q '"slurm_release": null' || fail "no null slurm_release in $output"
  echo "$output" | grep -q '"slurm_conf": null' || fail "no null slurm_conf in $output"
  write_config 'slurm_release = "23.02"' 'slurm_conf = "/opt/slurm/etc/slurm.conf"' 'poll_interval = 40'
  run bb-parse config
  assert_line 'slurm_release = "23.02"'
  assert_line 'slurm_conf = "/opt/slurm/etc/slurm.conf"'
  assert_line "poll_interval = 40"
  echo "$output" >"$TEST_DIR/again.toml"
  run bb-parse --config "$TEST_DIR/again.toml" config --json
  assert_success
  echo "$output" | grep -q '"slurm_release": "23.02"' || fail "$output"
  echo "$output" | grep -q '"slurm_conf": "/opt/slurm/etc/slurm.conf"' || fail "$output"
  echo "$output" | grep -q '"poll_interval": 40' || fail "$output"
}

@test "a malformed or unknown slurm_release, or a poll_interval that is not a positive integer, exits 78" {
  for bad in '"24.5"' '"24.11.5"' '"19.05"' '"24.08"' 24.11; do
    write_config "slurm_release = $bad"
    run bb-parse config
    assert_failure 78
    assert_output --partial "slurm_release: "
  done
  for bad in 0 -15 '"15"' 1.5; do
    write_config "poll_interval = $bad"
    run bb-parse config
    assert_failure 78
    assert_output --partial "poll_interval: "
  done
}

@test "a decimal pool capacity exits 78 naming the pool key" {
  sed -i 's/capacity = "100GiB"/capacity = "1.5T"/' "$TEST_DIR/bbkit.toml"
  run bb-parse config
  assert_failure 78
  assert_output --partial "capacity"
  assert_output --partial "1.5T"
}

@test "the shipped example configuration is valid" {
  run bb-parse --config "$BBKIT_SOURCE_DIR/share/bbkit/bbkit.toml.example" config
  assert_success
}

# --- requests -----------------------------------------------------------------------------

@test "a lua-style script parses to the normalized request" {
  f=$(script job.sh '#SBATCH -N 1' '#BB_LUA pool=nvme capacity=10G' \
      '#BB_LUA stage_in type=file source=/etc/hostname destination=$BB_JOB_DIR/in/host' \
      '#BB_LUA stage_out type=directory source=out destination=/tmp/results')
  run bb-parse --script "$f" --json
  assert_success
  echo "$output" | grep -q '"pool": "nvme"'
  echo "$output" | grep -q '"capacity": 10737418240'
  echo "$output" | grep -q '"allocated": 10737418240'
  echo "$output" | grep -q '"destination": "in/host"'
  echo "$output" | grep -q '"source": "out"'
  echo "$output" | grep -q '"line": 3'
}

@test "the readable summary names pool, sizes and stage lines" {
  f=$(script job.sh '#DW jobdw capacity=1500MiB access_mode=striped type=scratch' \
      '#DW stage_in type=directory source=/etc/default destination=$DW_JOB_STRIPED/default')
  run bb-parse --script "$f"
  assert_success
  assert_output --partial "pool nvme"
  assert_output --partial "capacity 1500MiB"
  assert_output --partial "allocated 2GiB"
  assert_output --partial "stage_in: directory /etc/default -> \$BB_JOB_DIR/default"
}

@test "script from standard input" {
  run bash -c "printf '#!/bin/sh\n#BB_LUA capacity=1G\n' | bb-parse --script - --json"
  assert_success
  assert_output --partial '"capacity": 1073741824'
}

@test "a script of [limits] script_size bytes is read; one byte more is refused with 65 naming both" {
  sized_script "$TEST_DIR/at.sh" 4194304
  run bb-parse --script "$TEST_DIR/at.sh" --json
  assert_success
  assert_output --partial '"capacity": 1073741824'
  sized_script "$TEST_DIR/over.sh" 4194305
  run bb-parse --script "$TEST_DIR/over.sh"
  assert_failure 65
  assert_output "$(script_size_message bb-parse "$TEST_DIR/over.sh" 4194305 4194304)"
  # Through a pipe the size is not known: refused once the limit is passed.
  run bash -c "cat '$TEST_DIR/over.sh' | bb-parse --script -"
  assert_failure 65
  assert_output "bb-parse: cannot read job script from standard input: more than 4194304 bytes, over the limit of 4194304 bytes ([limits] script_size in bbkit.toml: shorten the script or raise the limit)"
  run bb-parse --bbf "$TEST_DIR/over.sh"
  assert_failure 65
  assert_output --partial "bb-parse: cannot read directives file '$TEST_DIR/over.sh': 4194305 bytes"
  # The limit is the configuration's.
  write_config '[limits]' 'script_size = "8MiB"'
  run bb-parse --script "$TEST_DIR/over.sh" --json
  assert_success
  write_config '[limits]' 'script_size = "1KiB"'
  run bb-parse --script "$TEST_DIR/at.sh"
  assert_failure 65
  assert_output "$(script_size_message bb-parse "$TEST_DIR/at.sh" 4194304 1024)"
  write_config '[limits]' 'script_size = "1GiB"'
  run bb-parse config
  assert_failure 78
  assert_output --partial "script_size"
}

@test "a 200 MB sparse script is refused at once, without reading it, in bounded memory" {
  truncate -s 200M "$TEST_DIR/huge.sh"
  limit="ulimit -v 102400;"
  [ "${BBKIT_SANITIZE:-}" = 1 ] && limit=  # sanitizers reserve terabytes of address space
  start=$SECONDS
  run timeout 20 bash -c "$limit exec bb-parse --script '$TEST_DIR/huge.sh'"
  assert_failure 65
  assert_output "$(script_size_message bb-parse "$TEST_DIR/huge.sh" 209715200 4194304)"
  [ $((SECONDS - start)) -lt 5 ]
}

@test "a script without directives parses to an empty request" {
  f=$(script plain.sh '#SBATCH -N 1')
  run bb-parse --script "$f" --json
  assert_success
  assert_output --partial '"has_directive": false'
  assert_output --partial '"job_buffer": null'
}

@test "Slurm's saved script with a trailing NUL parses; an inner NUL is refused" {
  printf '#!/bin/bash\n#BB_LUA capacity=1G\nsrun x\n\0' >"$TEST_DIR/saved"
  run bb-parse --script "$TEST_DIR/saved" --json
  assert_success
  printf '#!/bin/bash\n#BB_LUA capa\0city=1G\nsrun x\n' >"$TEST_DIR/nul"
  run bb-parse --script "$TEST_DIR/nul"
  assert_failure 65
  assert_output --partial "line 2"
  assert_output --partial "NUL"
}

@test "the --bb short form is translated as Slurm does" {
  run bb-parse --bb "capacity=1G access=striped type=scratch" --emit-script
  assert_success
  assert_output --partial "capacity=1GiB"
  run bb-parse --bb "capacity=1G access=striped type=scratch" --json
  assert_success
  assert_output --partial '"access": "striped"'
}

@test "--bb with directives and --bbf files" {
  printf '#DW jobdw capacity=2G pool=nvme\n#DW stage_out type=file source=$DW_JOB_STRIPED/r destination=/tmp/r\n' >"$TEST_DIR/bbf"
  run bb-parse --bbf "$TEST_DIR/bbf" --json
  assert_success
  assert_output --partial '"capacity": 2147483648'
  assert_output --partial '"from": "--bbf"'
  run bb-parse --bb "#BB_LUA pool=small capacity=3K" --json
  assert_success
  assert_output --partial '"allocated": 3072'
}

@test "a missing --bbf file exits 66" {
  run bb-parse --bbf "$TEST_DIR/none"
  assert_failure 66
  assert_output --partial "none"
}

@test "a missing script exits 66" {
  run bb-parse --script "$TEST_DIR/none.sh"
  assert_failure 66
}

@test "symbols are replaced per value and cannot inject a key" {
  f=$(script job.sh '#BB_LUA capacity=1G' \
      '#BB_LUA stage_out type=directory source=out destination=/tmp/%u/%x.%j.%%')
  run bb-parse --script "$f" --job-id 77 --user root --job-name 'x destination=/etc' --json
  assert_success
  assert_output --partial '"destination": "/tmp/root/x destination=/etc.77.%"'
}

@test "the job's request is refused with exit 65 for a decimal capacity, naming the line" {
  f=$(script job.sh '#SBATCH -N 1' '#BB_LUA capacity=1.5G')
  run bb-parse --script "$f"
  assert_failure 65
  assert_output --partial "line 3"
  assert_output --partial "'1.5G'"
}

@test "unknown pool exits 66" {
  run bb-parse --bb "#BB_LUA pool=ssd capacity=1G"
  assert_failure 66
  assert_output --partial "ssd"
}

@test "a request larger than the pool can never be satisfied" {
  run bb-parse --bb "#BB_LUA pool=small capacity=5K"
  assert_failure 65
  assert_output --partial "can never be satisfied"
}

@test "capacity without pool or default pool is refused" {
  sed -i '/^default_pool/d' "$TEST_DIR/bbkit.toml"
  run bb-parse --bb "#BB_LUA capacity=1G"
  assert_failure 65
  assert_output --partial "default_pool"
}

@test "a destination outside the buffer is refused" {
  for dest in '../x' '$BB_JOB_DIR/../../etc' '/etc/passwd' 'a/../../b'; do
    f=$(script job.sh '#BB_LUA capacity=1G' \
        "#BB_LUA stage_in type=file source=/etc/hostname destination=$dest")
    run bb-parse --script "$f"
    assert_failure 65
    assert_output --partial "outside the buffer"
  done
}

@test "type=cache and swap are refused with the reason" {
  run bb-parse --bb "#DW jobdw capacity=1G type=cache"
  assert_failure 65
  assert_output --partial "cache"
  run bb-parse --bb "#DW swap 10GiB"
  assert_failure 65
  assert_output --partial "swap"
}

@test "an unknown command is an error, an unknown key a warning" {
  run bb-parse --bb "#DW frobnicate x=1"
  assert_failure 65
  assert_output --partial "frobnicate"
  run bb-parse --bb "#DW jobdw capacity=1G pfs=/scratch" --json
  assert_success
  assert_output --partial "pfs"
}

@test "a persistent name starting with a digit is refused" {
  f=$(script p.sh '#BB create_persistent name=9lives capacity=1G')
  run bb-parse --script "$f" --user root
  assert_failure 65
  assert_output --partial "9lives"
}

@test "persistent create by a user is refused without EnablePersistent" {
  u=$(test_user)
  f=$(script p.sh '#BB create_persistent name=alpha capacity=1G')
  run bb-parse --script "$f" --user "$u"
  assert_failure 77
  assert_output --partial "EnablePersistent"
  write_config 'flags = ["EnablePersistent"]'
  run bb-parse --script "$f" --user "$u" --json
  assert_success
  assert_output --partial '"name": "alpha"'
}

@test "root is refused unless allow_root, and deny_users is honoured" {
  sed -i 's/^allow_root = true$/allow_root = false/' "$TEST_DIR/bbkit.toml"
  run bb-parse --bb "#BB_LUA capacity=1G" --user root
  assert_failure 77
  assert_output --partial "root"
  u=$(test_user)
  write_config "deny_users = [\"$u\"]"
  run bb-parse --bb "#BB_LUA capacity=1G" --user "$u"
  assert_failure 77
  run bb-parse --bb "#BB_LUA capacity=1G" --user no-such-user-here
  assert_failure 66
}

@test "emit-script output parses back to the same request" {
  f=$(script job.sh '#DW jobdw capacity=1500MiB' \
      '#DW stage_in type=file source="/tmp/my file" destination=$DW_JOB_STRIPED/a b' \
      '#DW stage_out type=directory source=$DW_JOB_STRIPED/out destination=/tmp/out')
  run bb-parse --script "$f" --json
  assert_failure 65   # "b" is an unquoted stray word after the destination
  f=$(script job.sh '#DW jobdw capacity=1500MiB' \
      '#DW stage_in type=file source="/tmp/my file" destination="$DW_JOB_STRIPED/a b"' \
      '#DW stage_out type=directory source=$DW_JOB_STRIPED/out destination=/tmp/out')
  run bb-parse --script "$f" --json
  assert_success
  first=$(echo "$output" | grep -v '"line"\|"from"')
  bb-parse --script "$f" --emit-script >"$TEST_DIR/emitted"
  { echo '#!/bin/bash'; cat "$TEST_DIR/emitted"; } >"$TEST_DIR/again.sh"
  run bb-parse --script "$TEST_DIR/again.sh" --json
  assert_success
  second=$(echo "$output" | grep -v '"line"\|"from"')
  [ "$first" = "$second" ] || fail "round trip differs"
}

# --- check-sources ------------------------------------------------------------------------

@test "check-sources totals readable sources" {
  mkdir -p "$TEST_DIR/src/sub"
  head -c 3000 /dev/zero >"$TEST_DIR/src/a"
  head -c 1000 /dev/zero >"$TEST_DIR/src/sub/b"
  f=$(script job.sh '#BB_LUA pool=small capacity=4K' \
      "#BB_LUA stage_in type=directory source=$TEST_DIR/src destination=src")
  run bb-parse --script "$f" --user root --check-sources --json
  assert_success
  assert_output --partial '"bytes": 4000'
}

@test "check-sources refuses sources larger than the buffer with 65" {
  head -c 5000 /dev/zero >"$TEST_DIR/big"
  f=$(script job.sh '#BB_LUA pool=small capacity=4K' \
      "#BB_LUA stage_in type=file source=$TEST_DIR/big destination=big")
  run bb-parse --script "$f" --user root --check-sources
  assert_failure 65
  assert_output --partial "stage-in needs"
  assert_output --partial "buffer holds 4KiB"
}

@test "check-sources stops counting at the first file over the buffer: 65, one line" {
  mkdir -p "$TEST_DIR/tree"
  for i in $(seq 1 50); do head -c 1000 /dev/zero >"$TEST_DIR/tree/f$i"; done
  # Counted to the end, the missing second source would be exit 66.
  f=$(script job.sh '#BB_LUA pool=small capacity=4K' \
      "#BB_LUA stage_in type=directory source=$TEST_DIR/tree destination=t" \
      "#BB_LUA stage_in type=file source=$TEST_DIR/missing destination=m")
  run bb-parse --script "$f" --user root --check-sources
  assert_failure 65
  [ "${#lines[@]}" = 1 ] || fail "message spans ${#lines[@]} lines: $output"
  assert_output "bb-parse: stage-in needs at least 5KB (5000 bytes counted so far) but the buffer holds 4KiB (request a larger capacity)"
}

@test "check-sources reports a missing source with 66" {
  f=$(script job.sh '#BB_LUA capacity=1G' \
      "#BB_LUA stage_in type=file source=$TEST_DIR/missing destination=x")
  run bb-parse --script "$f" --user root --check-sources
  assert_failure 66
  assert_output --partial "$TEST_DIR/missing"
}

@test "check-sources runs as the job's user: an unreadable file exits 77" {
  u=$(test_user)
  f=$(script job.sh '#BB_LUA capacity=1G' \
      "#BB_LUA stage_in type=file source=/etc/shadow destination=x")
  chmod 644 "$f"
  run bb-parse --script "$f" --user "$u" --check-sources
  assert_failure 77
  assert_output --partial "/etc/shadow"
  mkdir -p "$TEST_DIR/tree/inner"
  echo secret >"$TEST_DIR/tree/inner/s"
  chmod 600 "$TEST_DIR/tree/inner/s"
  f=$(script job2.sh '#BB_LUA capacity=1G' \
      "#BB_LUA stage_in type=directory source=$TEST_DIR/tree destination=t")
  run bb-parse --script "$f" --user "$u" --check-sources
  assert_failure 77
  assert_output --partial "$TEST_DIR/tree/inner/s"
}

@test "a file name with a newline cannot forge a second message line" {
  u=$(test_user)
  mkdir -p "$TEST_DIR/tree"
  bad="$TEST_DIR/tree/s"$'\n'"bb-parse: forged reason"
  echo secret >"$bad"
  chmod 600 "$bad"
  f=$(script job.sh '#BB_LUA capacity=1G' \
      "#BB_LUA stage_in type=directory source=$TEST_DIR/tree destination=t")
  run bb-parse --script "$f" --user "$u" --check-sources
  assert_failure 77
  [ "${#lines[@]}" = 1 ] || fail "message spans ${#lines[@]} lines: $output"
  assert_output --partial "tree/s\\x0abb-parse: forged reason"
}

@test "a job name with a newline or an escape is refused, never emitted as a line" {
  f=$(script job.sh '#BB_LUA capacity=1G' \
      '#BB_LUA stage_in type=file source=/tmp/%x destination=x')
  run bb-parse --script "$f" --job-id 5 --user root --job-name $'a\n#BB_LUA capacity=9T' --emit-script
  assert_failure 65
  [ "${#lines[@]}" = 1 ] || fail "message spans ${#lines[@]} lines: $output"
  assert_output --partial "holds a control character"
  run bb-parse --script "$f" --job-id 5 --user root --job-name $'a\e[2Jb' --emit-script
  assert_failure 65
  assert_output --partial 'a\x1b[2Jb'
  run bb-parse --script "$f" --job-id 5 --user root --job-name $'tab\there' --emit-script
  assert_success
  [ "${#lines[@]}" = 2 ]
}

@test "check-sources expands list files" {
  echo data >"$TEST_DIR/one"
  printf '%s in/one\n# comment\n\n"%s" in/two\n' "$TEST_DIR/one" "$TEST_DIR/one" >"$TEST_DIR/list"
  f=$(script job.sh '#BB_LUA capacity=1G' \
      "#BB_LUA stage_in type=list source=$TEST_DIR/list destination=\$BB_JOB_DIR")
  run bb-parse --script "$f" --user root --check-sources --json
  assert_success
  assert_output --partial '"bytes": 10'
  printf '%s ../escape\n' "$TEST_DIR/one" >"$TEST_DIR/badlist"
  f=$(script job.sh '#BB_LUA capacity=1G' \
      "#BB_LUA stage_in type=list source=$TEST_DIR/badlist destination=d")
  run bb-parse --script "$f" --user root --check-sources
  assert_failure 65
  assert_output --partial "badlist' line 1"
}

@test "stage_out type=list is refused at parse time naming the line" {
  f=$(script job.sh '#BB_LUA capacity=1G' \
      '#BB_LUA stage_out type=list source=$BB_JOB_DIR/out destination=/tmp/out')
  run bb-parse --script "$f"
  assert_failure 65
  assert_output --partial "script line 3: stage_out type=list is not supported"
  [ "${#lines[@]}" -eq 1 ]
  run bb-parse --script "$f" --emit-script
  assert_failure 65
  f=$(script job.sh '#BB_LUA capacity=1G' \
      '#BB_LUA stage_in type=list source=/tmp/list destination=$BB_JOB_DIR/in')
  run bb-parse --script "$f"
  assert_success
}

@test "check-sources as root without --user is a usage error" {
  [ "$(id -u)" -eq 0 ] || skip "needs root"
  f=$(script job.sh '#BB_LUA capacity=1G')
  run bb-parse --script "$f" --check-sources
  assert_failure 64
}

@test "a job name with a symbol waits for the job id and is not checked yet" {
  f=$(script job.sh '#BB_LUA capacity=1G' \
      '#BB_LUA stage_in type=file source=/data/%j/in destination=in')
  run bb-parse --script "$f" --user root --check-sources --json
  assert_success
  assert_output --partial '"unresolved": true'
  assert_output --partial 'not checked'
}

@test "a blank between a capacity and its unit is refused with 65" {
  run bb-parse --script "$(script blank.sh '#DW jobdw capacity=10 GiB')"
  assert_failure 65
  assert_output --partial "capacity=10 GiB"
  assert_output --partial "script line 2"
  refute_output --partial "unknown key"
  run bb-parse --bb "capacity=10 GiB"
  assert_failure 65
  assert_output --partial "blank between the number and its unit"
  run bb-parse --script "$(script fine.sh '#DW jobdw capacity=10GiB')"
  assert_success
}
