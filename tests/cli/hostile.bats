#!/usr/bin/env bats
# Hostile input: huge lines, NUL bytes, invalid UTF-8, thousands of stage lines, trees deeper
# than PATH_MAX, sources that change while they are copied, ids and names that try to climb
# out. Each gets a clear one-line error with its documented exit code, or correct handling;
# never a crash, a hang, or a write outside the buffer.
# Speed is never asserted (machines here are noisy): a parser gone quadratic is caught by the
# suite's ctest timeout.

bats_require_minimum_version 1.5.0
load common

setup() { staging_setup; }
teardown() {
  stop_writer
  common_teardown
}

# A writer loop in the background (as root: the file keeps its owner) that stops when asked.
start_writer() {
  rm -f "$TEST_DIR/stop-writer"
  bash -c "while [ ! -e '$TEST_DIR/stop-writer' ]; do $1; done" 3>&- &
  WRITER=$!
}
stop_writer() {
  [ -n "${WRITER:-}" ] || return 0
  touch "$TEST_DIR/stop-writer"
  wait "$WRITER" 2>/dev/null || true
  WRITER=
}

as_user() { runuser -u "$U" -- "$@"; }

# One line on stderr, "bb-TOOL: ...", and no crash (a signal or an internal error).
assert_one_line_error() {
  local tool=$1
  [ "$status" -ne 0 ] && [ "$status" -lt 128 ] && [ "$status" -ne 70 ] ||
    fail "expected a clean error, got exit $status"
  [ "${#lines[@]}" -eq 1 ] || fail "expected one line, got ${#lines[@]}: ${output:0:300}"
  [[ "${lines[0]}" == "$tool: "* ]] || fail "not a $tool message: ${lines[0]:0:300}"
}

# Prints a string of N bytes of the character C.
repeat() { head -c "$2" /dev/zero | tr '\0' "$1"; }

# The pool holds only what bbkit made: the marker, job/, persistent/, trash/, quarantine/, env/
# and buffers.
assert_pool_clean() {
  run find "$TEST_DIR/nvme" -mindepth 1 -maxdepth 1 -not -name .bbkit-pool -not -name job \
    -not -name persistent -not -name trash -not -name quarantine -not -name env
  assert_output ''
  run bb-pool check
  assert_success
}

@test "a directive line of megabytes with 200,000 keys is parsed in bounded time" {
  {
    echo '#!/bin/bash'
    printf '#BB_LUA capacity=1G'
    seq -f ' key%g=v' 1 200000 | tr -d '\n'
    echo
  } >"$TEST_DIR/job.sh"
  [ "$(stat -c %s "$TEST_DIR/job.sh")" -gt 2000000 ]
  run --separate-stderr bb-parse --script "$TEST_DIR/job.sh" --json
  assert_success
  assert_output --partial '"capacity": 1073741824'
  [ "$(grep -c "unknown key 'key" <<<"$output")" -eq 200000 ]
}

@test "a directive line of megabytes with a repeated key is one clear error" {
  {
    echo '#!/bin/bash'
    printf '#BB_LUA capacity=1G'
    seq -f ' k%g=v' 1 100000 | tr -d '\n'
    echo ' capacity=2G'
  } >"$TEST_DIR/job.sh"
  run bb-parse --script "$TEST_DIR/job.sh"
  assert_failure 65
  assert_one_line_error bb-parse
  assert_output --partial "script line 2: 'capacity=' is given twice"
}

@test "a path past PATH_MAX is refused; a --bb line of 5,000 directives splits in bounded time" {
  long=$(repeat a 2000000)
  printf '#BB_LUA capacity=1G\n#BB_LUA stage_out type=file source=r destination=/x/%s\n' "$long" >"$TEST_DIR/bbf"
  run bb-parse --bbf "$TEST_DIR/bbf" --json
  assert_failure 65
  assert_one_line_error bb-parse
  assert_output 'bb-parse: --bbf line 2: destination= is 2000003 bytes long (a path holds at most 4095 bytes)'
  # A single argument is at most 128 KiB (MAX_ARG_STRLEN): 5,000 directives fill it.
  many=$(printf '#DW jobdw capacity=1G'; repeat x 5000 | sed 's/x/ #DW persistentdw name=p/g')
  [ "${#many}" -gt 100000 ]
  run bb-parse --bb "$many" --json
  assert_success
  assert_output --partial '"name": "p"'
  # An error echoing a long token is still one line, cut in the middle.
  printf '#BB_LUA capacity=1G\n#BB_LUA stage_out type=file source=r destination=x/%s\n' "$(repeat a 4000)" >"$TEST_DIR/bbf"
  run bb-parse --bbf "$TEST_DIR/bbf"
  assert_failure 65
  assert_one_line_error bb-parse
  [ "${#output}" -lt 2048 ] || fail "message of ${#output} bytes"
  assert_output --partial 'bytes ...]'
}

@test "a 20 MB source= is refused with one line before anything is stored" {
  write_config '[limits]' 'script_size = "32MiB"'  # the value's bound, not the script's
  printf '#!/bin/bash\n#BB_LUA capacity=1G\n#BB_LUA stage_in type=file source=/%s destination=d\n' \
    "$(repeat s 20971520)" >"$TEST_DIR/job.sh"
  run bb-parse --script "$TEST_DIR/job.sh"
  assert_failure 65
  assert_one_line_error bb-parse
  assert_output 'bb-parse: script line 3: source= is 20971521 bytes long (a path holds at most 4095 bytes)'
  run bb-pool alloc --job 33 --user "$U" --script "$TEST_DIR/job.sh"
  assert_failure 65
  assert_one_line_error bb-pool
  run bb-stat job 33
  assert_failure 66
  assert_pool_clean
}

@test "names and other values past 256 bytes are refused with 65 naming key and line" {
  run bb-parse --bb "#BB_LUA capacity=1G pool=$(repeat p 257)"
  assert_failure 65
  assert_output 'bb-parse: --bb: pool= is 257 bytes long (a value holds at most 256 bytes)'
  printf '#BB_LUA capacity=1G\n#BB create_persistent name=%s capacity=1G\n' "$(repeat n 300)" >"$TEST_DIR/bbf"
  run bb-parse --bbf "$TEST_DIR/bbf"
  assert_failure 65
  assert_output 'bb-parse: --bbf line 2: name= is 300 bytes long (a value holds at most 256 bytes)'
}

@test "100,000 continued lines join in bounded time" {
  {
    echo '#!/bin/bash'
    echo '#BB_LUA capacity=1G \'
    for i in $(seq 1 100000); do echo "#BB_LUA \\"; done
    echo '#BB_LUA pool=nvme'
  } >"$TEST_DIR/job.sh"
  run bb-parse --script "$TEST_DIR/job.sh" --json
  assert_success
  assert_output --partial '"pool": "nvme"'
}

@test "a configuration line of a near-megabyte is one clear error, not an echo of it" {
  printf 'cluster = "%s"\n' "$(repeat x 1000000)" >"$TEST_DIR/big.toml"
  run bb-parse --config "$TEST_DIR/big.toml" config
  assert_failure 78
  assert_one_line_error bb-parse
  # The line bound (bbkit.toml(5)) refuses it before toml11 reads the value.
  assert_output --partial 'big.toml:1: invalid TOML: a line longer than 8192 bytes'
  [ "${#output}" -lt 4096 ] || fail "message of ${#output} bytes"
  # Under the bound, a value past its own limit still names its key.
  printf 'cluster = "%s"\n' "$(repeat x 8000)" >"$TEST_DIR/long.toml"
  run bb-parse --config "$TEST_DIR/long.toml" config
  assert_failure 78
  assert_one_line_error bb-parse
  assert_output --partial 'long.toml:1: cluster'
  printf 'state_dir = "/x"\n%s = 1\n' "$(repeat k 1000000)" >"$TEST_DIR/key.toml"
  run bb-parse --config "$TEST_DIR/key.toml" config
  assert_failure 78
  assert_one_line_error bb-parse
  [ "${#output}" -lt 4096 ] || fail "message of ${#output} bytes"
}

# Runs bb-parse as the unprivileged user (root refuses a file it does not control before reading
# it), with at most 200 MB of address space and 30 seconds: a regression fails instead of
# eating the machine. Sanitized builds reserve terabytes of address space: time alone bounds them.
bounded_bb_parse() {
  local limit="ulimit -v 204800;"
  [ "${BBKIT_SANITIZE:-}" = 1 ] && limit=
  run runuser -u "$U" -- timeout 30 bash -c "$limit exec bb-parse \"\$@\"" bb-parse "$@"
}

@test "a configuration that is not a bounded regular file exits 78 without reading it all" {
  bounded_bb_parse --config /dev/zero config
  assert_failure 78
  assert_one_line_error bb-parse
  assert_output 'bb-parse: /dev/zero: cannot read configuration: not a regular file (use --config FILE or set BBKIT_CONFIG)'
  mkfifo -m 644 "$TEST_DIR/fifo.toml"
  bounded_bb_parse --config "$TEST_DIR/fifo.toml" config
  assert_failure 78
  assert_output --partial 'not a regular file'
  # 2 MiB of valid TOML (comments): refused for its size alone.
  { repeat '#' 2097152; printf '\ncluster = "c"\n'; } >"$TEST_DIR/huge.toml"
  bounded_bb_parse --config "$TEST_DIR/huge.toml" config
  assert_failure 78
  assert_one_line_error bb-parse
  assert_output --partial 'huge.toml: cannot read configuration: larger than 1MiB'
  # As root the same files are refused too.
  run bb-parse --config /dev/zero config
  assert_failure 78
  assert_one_line_error bb-parse
}

@test "a deeply nested array in the configuration exits 78, not with a crash" {
  { printf 'x = '; repeat '[' 100000; echo; } >"$TEST_DIR/nested.toml"
  run bb-parse --config "$TEST_DIR/nested.toml" config
  assert_failure 78
  assert_one_line_error bb-parse
  assert_output --partial 'nested.toml:1: invalid TOML: arrays and inline tables nested more than 8 deep'
}

@test "a newline in state_dir, a pool path or a hook path exits 78 naming the key" {
  printf 'cluster = "c"\nstate_dir = "/var/lib/bbkit\\nBB_JOB_DIR=/etc"\n' >"$TEST_DIR/state.toml"
  run bb-parse --config "$TEST_DIR/state.toml" config
  assert_failure 78
  assert_one_line_error bb-parse
  assert_output --partial 'state.toml:2: state_dir: a path cannot contain a control character'
  printf '[[pool]]\nname = "p"\npath = """/bb/p\n/etc"""\ncapacity = "1GiB"\n' >"$TEST_DIR/pool.toml"
  run bb-parse --config "$TEST_DIR/pool.toml" config
  assert_failure 78
  assert_one_line_error bb-parse
  assert_output --partial 'pool.toml:3: pool[0].path: a path cannot contain a control character'
  printf '[hooks]\npre_run = "/etc/bbkit/pre\\r"\n' >"$TEST_DIR/hook.toml"
  run bb-parse --config "$TEST_DIR/hook.toml" config
  assert_failure 78
  assert_output --partial 'hook.toml:2: hooks.pre_run: a path cannot contain a control character'
}

@test "NUL bytes: trailing ones in a script are ignored, others are errors naming the line" {
  printf '#!/bin/bash\n#BB_LUA capacity=1G\nsrun app\n\0\0\0' >"$TEST_DIR/job.sh"
  run bb-parse --script "$TEST_DIR/job.sh"
  assert_success
  printf '#!/bin/bash\n#BB_LUA capa\0city=1G\n' >"$TEST_DIR/job.sh"
  run bb-parse --script "$TEST_DIR/job.sh"
  assert_failure 65
  assert_one_line_error bb-parse
  assert_output --partial 'script line 2: NUL byte'
  printf '#DW jobdw capacity=1G\n\0#DW persistentdw name=x\n' >"$TEST_DIR/bbf"
  run bb-parse --bbf "$TEST_DIR/bbf"
  assert_failure 65
  assert_one_line_error bb-parse
  assert_output --partial '--bbf line 2: NUL byte'
  printf 'state_dir = "/var/\0lib"\n' >"$TEST_DIR/nul.toml"
  run bb-parse --config "$TEST_DIR/nul.toml" config
  assert_failure 78
  assert_one_line_error bb-parse
}

@test "invalid UTF-8 in paths is kept byte for byte; in the configuration it is an error" {
  bad=$(printf '/pfs/caf\xe9/\xff\xfe')
  run --separate-stderr bb-parse --bb "#BB_LUA capacity=1G #BB_LUA stage_out type=directory source=out destination=$bad" --emit-script
  assert_success
  [[ "$output" == *"destination=$bad"* ]] || fail "path changed: $output"
  run --separate-stderr bb-parse --bb "#BB_LUA capacity=1G #BB_LUA stage_out type=directory source=out destination=$bad" --json
  assert_success
  assert_output --partial 'caf'
  printf 'cluster = "caf\xe9"\n' >"$TEST_DIR/latin1.toml"
  run bb-parse --config "$TEST_DIR/latin1.toml" config
  assert_failure 78
  assert_one_line_error bb-parse
}

@test "a file with a Latin-1 name is staged in and out under that name" {
  name=$(printf 'r\xe9sultat\xff')
  as_user mkdir "$TEST_DIR/pfs/in"
  as_user sh -c "printf 'bytes\n' >'$TEST_DIR/pfs/in/$name'"
  printf '#!/bin/bash\n#BB_LUA capacity=1G\n#BB_LUA stage_in type=directory source=%s destination=in\n#BB_LUA stage_out type=directory source=in destination=%s\n' \
    "$TEST_DIR/pfs/in" "$TEST_DIR/pfs/out" >"$TEST_DIR/job.sh"
  bb-pool alloc --job 30 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  run bb-stage in --job 30
  assert_success
  [ "$(cat "$(bbdir $TEST_DIR/nvme/job/main.30.1)/in/$name")" = bytes ]
  bb-stage pre-run --job 30
  bb-stage post-run --job 30
  run bb-stage out --job 30
  assert_success
  [ "$(cat "$TEST_DIR/pfs/out/$name")" = bytes ]
}

@test "5,000 stage lines are parsed, allocated and staged in" {
  as_user mkdir "$TEST_DIR/pfs/many"
  as_user sh -c "cd '$TEST_DIR/pfs/many' && for i in \$(seq 1 5000); do echo \$i >f\$i; done"
  {
    echo '#!/bin/bash'
    echo '#BB_LUA capacity=1G'
    for i in $(seq 1 5000); do
      echo "#BB_LUA stage_in type=file source=$TEST_DIR/pfs/many/f$i destination=d$((i % 50))/f$i"
    done
  } >"$TEST_DIR/job.sh"
  run bb-parse --script "$TEST_DIR/job.sh" --json
  assert_success
  [ "$(grep -c '"type": "file"' <<<"$output")" -eq 5000 ]
  bb-pool alloc --job 31 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  run bb-stage in --job 31
  assert_success
  [ "$(find "$(bbdir $TEST_DIR/nvme/job/main.31.1)" -type f | wc -l)" -eq 5000 ]
  [ "$(cat "$(bbdir $TEST_DIR/nvme/job/main.31.1)/d7/f4957")" = 4957 ]
}

@test "a source tree deeper than PATH_MAX is refused with one clear error, nothing half done" {
  # 200 levels of 40-character names: about 8,200 bytes, twice PATH_MAX. The stage-in check
  # measures it (each directory opened relative to its parent), but the copy opens paths whole,
  # so such a tree is refused (see bb-stage(1)); the buffer stays usable and tears down cleanly.
  part=$(repeat d 40)
  as_user mkdir "$TEST_DIR/pfs/deep"
  as_user bash -c "cd '$TEST_DIR/pfs/deep' && for i in \$(seq 1 200); do mkdir $part && cd -P $part || exit 1; done; printf 'bottom\n' >leaf"
  printf '#!/bin/bash\n#BB_LUA capacity=1G\n#BB_LUA stage_in type=directory source=%s destination=tree\n' \
    "$TEST_DIR/pfs/deep" >"$TEST_DIR/job.sh"
  bb-pool alloc --job 32 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  run bb-stage in --job 32
  assert_failure 74
  assert_one_line_error bb-stage
  assert_output --partial 'File name too long'
  [ "${#output}" -lt 2048 ] || fail "message of ${#output} bytes"
  run bb-teardown --job 32
  assert_success
  run bb-pool reap
  assert_success
  [ -z "$(ls -A "$TEST_DIR/nvme/trash")" ]
  assert_pool_clean
}

@test "a source that grows while it is copied fails the stage; the rerun copies it whole" {
  as_user mkdir "$TEST_DIR/pfs/live"
  as_user truncate -s 64M "$TEST_DIR/pfs/live/base"
  as_user sh -c "head -c 32M /dev/urandom >'$TEST_DIR/pfs/live/growing'"
  printf '#!/bin/bash\n#BB_LUA capacity=1G\n#BB_LUA stage_in type=directory source=%s destination=live\n' \
    "$TEST_DIR/pfs/live" >"$TEST_DIR/job.sh"
  bb-pool alloc --job 33 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  start_writer "printf 'more data\n' >>'$TEST_DIR/pfs/live/growing'"
  # On a loaded machine the writer may start late: let it append once before the copy starts.
  local size tries=0; size=$(stat -c %s "$TEST_DIR/pfs/live/growing")
  while [ "$(stat -c %s "$TEST_DIR/pfs/live/growing")" = "$size" ]; do
    [ $((tries += 1)) -lt 1000 ] || fail "the writer never appended"
    sleep 0.01
  done
  run bb-stage in --job 33
  assert_failure 74
  assert_one_line_error bb-stage
  assert_output --partial 'growing: it changed while it was copied'
  stop_writer
  run bb-stage in --job 33
  assert_success
  cmp "$TEST_DIR/pfs/live/growing" "$(bbdir $TEST_DIR/nvme/job/main.33.1)/live/growing"
}

@test "a source rewritten while it is copied is never reported done with mixed content" {
  as_user mkdir "$TEST_DIR/pfs/live"
  as_user sh -c "head -c 48M /dev/urandom >'$TEST_DIR/pfs/live/a'; head -c 48M /dev/urandom >'$TEST_DIR/pfs/live/b'"
  as_user cp "$TEST_DIR/pfs/live/a" "$TEST_DIR/pfs/live/target"
  printf '#!/bin/bash\n#BB_LUA capacity=1G\n#BB_LUA stage_in type=file source=%s destination=t\n' \
    "$TEST_DIR/pfs/live/target" >"$TEST_DIR/job.sh"
  bb-pool alloc --job 34 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null
  # Rewrites the file in place, shrinking it first, over and over.
  live=$TEST_DIR/pfs/live
  start_writer "truncate -s 1M $live/target; dd if=$live/b of=$live/target bs=1M conv=notrunc status=none; truncate -s 1M $live/target; dd if=$live/a of=$live/target bs=1M conv=notrunc status=none"
  run bb-stage in --job 34
  stop_writer
  if [ "$status" -eq 0 ]; then
    # Done only with a state the file really had: a or b, or the writer's state between two of
    # its writes (a prefix of a or b, at least 1 MiB); never parts of both.
    copy=$(bbdir $TEST_DIR/nvme/job/main.34.1)/t
    size=$(stat -c %s "$copy")
    [ "$size" -ge $((1 << 20)) ] || fail "a copy of $size bytes, shorter than the writer leaves it"
    cmp -s -n "$size" "$copy" "$live/a" || cmp -s -n "$size" "$copy" "$live/b" ||
      fail "a mixed copy reported done ($size bytes)"
  else
    assert_failure 74
    assert_one_line_error bb-stage
    assert_output --partial 'it changed while it was copied'
  fi
}

@test "job ids that are not numbers are usage errors in every tool" {
  for id in abc -1 1x 1.5 '' ' 7' 99999999999999999999999 '1;2'; do
    run bb-pool alloc --job "$id" --user root --capacity 1G
    assert_failure 64
    run bb-stage in --job "$id"
    assert_failure 64
    run bb-teardown --job "$id"
    assert_failure 64
    run bb-parse --job-id "$id" --bb 'capacity=1G'
    assert_failure 64
    assert_one_line_error bb-parse
  done
  run bb-parse --job-id 12 --array-job-id 'x/../y' --bb '#BB_LUA stage_out type=file source=r destination=/o/%A'
  assert_failure 64
  assert_output --partial "array job id 'x/../y' is not a number"
  run bb-stat job abc
  assert_failure 64
  assert_pool_clean
}

@test "persistent names with / or .. are refused everywhere and nothing is written outside" {
  for name in ../evil a/b .. . 'x/../../y' '/abs' 'a b' "$(repeat n 100)"; do
    printf '#!/bin/bash\n#BB create_persistent name=%s capacity=1G\n' "\"$name\"" >"$TEST_DIR/job.sh"
    run bb-parse --script "$TEST_DIR/job.sh"
    assert_failure 65
    assert_one_line_error bb-parse
    run bb-pool alloc --persistent "$name" --capacity 1G
    assert_failure
    assert_one_line_error bb-pool
    run bb-teardown --persistent "$name"
    assert_failure
    assert_one_line_error bb-teardown
    run bb-parse --bb "#DW persistentdw name=\"$name\""
    assert_failure 65
  done
  [ ! -e "$TEST_DIR/evil" ] && [ ! -e "$TEST_DIR/nvme/evil" ] && [ ! -e "$TEST_DIR/y" ]
  [ -z "$(ls -A "$TEST_DIR/nvme/persistent")" ]
  assert_pool_clean
}

@test "destinations that climb out of the buffer are refused before anything is allocated" {
  for dest in ../x '$BB_JOB_DIR/../x' '/etc/x' 'a/../../x' '${DW_JOB_STRIPED}/..' '$HOME/x'; do
    run bb-pool alloc --job 40 --user root --bb "#BB_LUA capacity=1G #BB_LUA stage_in type=file source=/etc/hostname destination=$dest"
    assert_failure 65
    assert_one_line_error bb-pool
  done
  [ -z "$(ls -A "$TEST_DIR/nvme/job")" ]
  assert_pool_clean
}
