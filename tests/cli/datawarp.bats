#!/usr/bin/env bats
# dw_wlm_cli and dwstat (share/bbkit/datawarp), the programs Slurm's burst_buffer/datawarp
# plugin runs, called exactly as the plugin calls them (argv, order, a saved job script ending in
# a NUL byte) against the real tools and a real state directory in datawarp mode: the JSON the
# plugin parses (one object, one key, an array of objects, integers where it reads integers, no
# apostrophe), a whole job with real files, persistent buffers, hostile and malformed arguments,
# dwstat's words, and callers running at once as the plugin's threads do. Slurm itself is in
# tests/slurm/datawarp.bats.

bats_require_minimum_version 1.5.0
load common

# The installed scripts when ctest gives an installed tree (BBKIT_BIN_DIR): they find PREFIX/bin
# next to themselves. Else the sources', pointed at the build's tools by BBKIT_BINDIR.
DW_SHARE="$BBKIT_SOURCE_DIR/share/bbkit/datawarp"
[ -n "${BBKIT_BIN_DIR:-}" ] && DW_SHARE="$BBKIT_BIN_DIR/../share/bbkit/datawarp"

setup() {
  common_setup
  if [ -n "${BBKIT_BIN_DIR:-}" ]; then
    unset BBKIT_BINDIR
  else
    export BBKIT_BINDIR="$BBKIT_BIN"
  fi
  U=nobody
  NUID=$(id -u "$U")
  NGID=$(id -g "$U")
  dw_config 'flags = ["EnablePersistent"]'
  mkdir -p "$TEST_DIR/nvme" "$TEST_DIR/small" "$TEST_DIR/pfs"
  chmod 755 "$TEST_DIR/pfs"
  chown "$U" "$TEST_DIR/pfs"
  bb-pool init nvme >/dev/null
  bb-pool init small >/dev/null
}
teardown() { common_teardown; }

# dw_config [LINE...]: a datawarp-mode bbkit.toml (no default_pool: the first pool is Slurm's
# DefaultPool) with the extra lines before the pools: nvme (100 GiB in 1 GiB units), small
# (4 KiB in 1 KiB units).
dw_config() {
  {
    printf 'state_dir = "%s/state"\n' "$TEST_DIR"
    printf 'mode = "datawarp"\n'
    for line in "$@"; do printf '%s\n' "$line"; done
    printf '[[pool]]\nname = "nvme"\npath = "%s/nvme"\ncapacity = "100GiB"\ngranularity = "1GiB"\n' "$TEST_DIR"
    printf '[[pool]]\nname = "small"\npath = "%s/small"\ncapacity = "4KiB"\ngranularity = "1KiB"\n' "$TEST_DIR"
  } >"$TEST_DIR/bbkit.toml"
  export BBKIT_CONFIG="$TEST_DIR/bbkit.toml"
}

# The system's python3 when there is one: a pyenv shim costs half a second a call.
PYTHON=python3
[ -x /usr/bin/python3 ] && PYTHON=/usr/bin/python3

dw() { "$DW_SHARE/dw_wlm_cli" "$@"; }

# one_line_error TOOL: the last run failed with one line, "TOOL: ...", and no crash.
one_line_error() {
  [ "$status" -ne 0 ] && [ "$status" -lt 128 ] && [ "$status" -ne 70 ] ||
    fail "expected a clean error, got exit $status"
  [ "${#lines[@]}" -eq 1 ] || fail "expected one line, got ${#lines[@]}: ${output:0:300}"
  [[ "${lines[0]}" == "$1: "* ]] || fail "not a $1 message: ${lines[0]:0:300}"
}
dwstat() { "$DW_SHARE/dwstat" "$@"; }

# job_script ID LINE...: the script where slurmctld saves it (hash.<id%10>/job.<id>/script,
# directory and file 0700, SlurmUser's), ending with the NUL byte Slurm writes; prints its path.
job_script() {
  local id=$1 dir
  shift
  dir="$TEST_DIR/statesave/hash.$((id % 10))/job.$id"
  mkdir -p "${dir%/*}"
  [ -d "$dir" ] || mkdir -m 0700 "$dir"
  { printf '#!/bin/bash\n'; printf '%s\n' "$@"; printf 'echo job\n\0'; } >"$dir/script"
  chmod 0700 "$dir/script"
  echo "$dir/script"
}

# setup_job ID SCRIPT POOL:SIZE: Slurm's setup call for job ID, the user being nobody.
setup_job() {
  dw --function setup --token "$1" --caller SLURM --user "$NUID" --groupid "$NGID" \
    --capacity "$3" --job "$2"
}

# check_dws KEY [TEXT]: TEXT ($output by default) is the answer the plugin parses for KEY (pools,
# sessions, instances, configurations) with the shape its parser needs: else it crashes slurmctld
# or reads zeros.
check_dws() {
  "$PYTHON" -c '
import json, sys
key, text = sys.argv[1], sys.argv[2]
assert "\x27" not in text, "an apostrophe (the plugin turns it into a quote): " + text
doc = json.loads(text)
assert isinstance(doc, dict), "top level is not an object"
assert list(doc) == [key], "keys are %s, not [%s]" % (list(doc), key)
items = doc[key]
assert isinstance(items, list), "%s is not an array" % key
def integer(item, *path):
    value = item
    for name in path:
        assert isinstance(value, dict) and name in value, "no %s in %s" % (".".join(path), item)
        value = value[name]
    assert type(value) is int and value >= 0, "%s is not a whole number: %r" % (".".join(path), value)
    return value
for item in items:
    assert isinstance(item, dict), "an element is not an object: %r" % (item,)
    if key == "pools":
        assert isinstance(item["id"], str) and item["id"], item
        assert item["units"] == "bytes", item
        assert integer(item, "granularity") > 0, item
        assert integer(item, "free") <= integer(item, "quantity"), item
    elif key == "sessions":
        for name in ("id", "created", "owner"):
            integer(item, name)
        assert isinstance(item["token"], str) and item["token"], item
    elif key == "instances":
        integer(item, "id")
        integer(item, "capacity", "bytes")
        integer(item, "links", "session")
    elif key == "configurations":
        integer(item, "id")
        integer(item, "links", "instance")
' "$1" "${2-$output}"
}

# json EXPR [TEXT]: evaluates the Python expression EXPR on TEXT ($output by default) parsed as
# `d`, printing the result (a list one element a line).
json() {
  "$PYTHON" -c '
import json, sys
d = json.loads(sys.argv[2])
r = eval(sys.argv[1])
print("\n".join(str(x) for x in r) if isinstance(r, list) else r)
' "$1" "${2-$output}"
}

# The session tokens show_sessions lists, sorted, one a line.
tokens() {
  local answer
  answer=$(dw --function show_sessions) && check_dws sessions "$answer" &&
    json 'sorted(s["token"] for s in d["sessions"])' "$answer"
}

# The free units pools reports for POOL.
pool_free() {
  local answer
  answer=$(dw --function pools) && check_dws pools "$answer" &&
    json "[p['free'] for p in d['pools'] if p['id'] == '$1'][0]" "$answer"
}

# --- the JSON answers ----------------------------------------------------------------------

@test "pools: one key holding both pools, the first the default, in granularity units" {
  run dw --function pools
  assert_success
  check_dws pools
  run json '[" ".join(str(p[k]) for k in ("id", "units", "granularity", "quantity", "free")) for p in d["pools"]]'
  assert_output $'nvme bytes 1073741824 100 100\nsmall bytes 1024 4 4'
}

@test "pools gives a draining pool and one whose file system is not mounted no free units" {
  bb-pool drain small >/dev/null
  run pool_free small
  assert_output 0
  run pool_free nvme
  assert_output 100
  bb-pool resume small >/dev/null
  run pool_free small
  assert_output 4
  # small's path without its marker: not mounted.
  mkdir "$TEST_DIR/unmounted"
  sed -i "s#\"$TEST_DIR/small\"#\"$TEST_DIR/unmounted\"#" "$BBKIT_CONFIG"
  grep -q unmounted "$BBKIT_CONFIG"
  run dw --function pools
  assert_success
  check_dws pools
  run json '[" ".join(str(p[k]) for k in ("id", "quantity", "free")) for p in d["pools"]]'
  assert_output $'nvme 100 100\nsmall 4 0'
}

@test "with no buffer, sessions, instances and configurations are one key holding an empty array" {
  run dw --function show_sessions
  assert_success
  assert_output '{"sessions":[]}'
  run dw --function show_instances
  assert_success
  assert_output '{"instances":[]}'
  run dw --function show_configurations
  assert_success
  assert_output '{"configurations":[]}'
}

@test "every JSON answer keeps the plugin's shape with job, persistent and session-only buffers live" {
  run dw --function create_persistent -c CLI -t shared -u "$NUID" -C nvme:2147483648 -a striped -T scratch
  assert_success
  s=$(job_script 7 '#DW jobdw capacity=1536MiB access_mode=striped type=scratch')
  run setup_job 7 "$s" nvme:2GiB
  assert_success
  p=$(job_script 8 '#DW persistentdw name=shared')
  run setup_job 8 "$p" nvme:0
  assert_success

  run dw --function show_sessions
  assert_success
  check_dws sessions
  [ "$(json 'sorted(s["token"] for s in d["sessions"])')" = $'7\n8\nshared' ]
  [ "$(json 'sorted(set(s["owner"] for s in d["sessions"]))')" = "$NUID" ]
  now=$(date +%s)
  for created in $(json '[s["created"] for s in d["sessions"]]'); do
    [ "$created" -le "$now" ] && [ "$created" -gt $((now - 600)) ] || fail "created $created is not now ($now)"
  done
  # Each session its own id.
  [ "$(json 'len(set(s["id"] for s in d["sessions"]))')" = 3 ]
  sessions=$output

  run dw --function show_instances
  assert_success
  check_dws instances
  instances=$output
  # Job 8's session has no space of its own: no instance. Each instance links to its session.
  [ "$(json 'len(d["instances"])')" = 2 ]
  id7=$(json '[s["id"] for s in d["sessions"] if s["token"] == "7"][0]' "$sessions")
  idp=$(json '[s["id"] for s in d["sessions"] if s["token"] == "shared"][0]' "$sessions")
  [ "$(json "[i['capacity']['bytes'] for i in d['instances'] if i['links']['session'] == $id7][0]")" = 2147483648 ]
  [ "$(json "[i['capacity']['bytes'] for i in d['instances'] if i['links']['session'] == $idp][0]")" = 2147483648 ]

  run dw --function show_configurations
  assert_success
  check_dws configurations
  [ "$(json 'len(d["configurations"])')" = 2 ]
  [ "$(json 'sorted(c["links"]["instance"] for c in d["configurations"])')" = \
    "$(json 'sorted(i["id"] for i in d["instances"])' "$instances")" ]

  run dw --function pools
  assert_success
  check_dws pools
  [ "$(json 'd["pools"][0]["free"]')" = 96 ]

  # real_size: a JSON object, capacity in bytes as an integer (1536 MiB rounds up to 2 GiB).
  run dw --function real_size --token 7
  assert_success
  refute_output --partial "'"
  [ "$(json 'type(d).__name__')" = dict ]
  [ "$(json 'd["units"]')" = bytes ]
  [ "$(json 'type(d["capacity"]).__name__')" = int ]
  [ "$(json 'd["capacity"]')" = 2147483648 ]
}

@test "a job through every function in Slurm's order moves its real files in and out" {
  printf 'input data\n' >"$TEST_DIR/pfs/in.txt"
  chown "$U" "$TEST_DIR/pfs/in.txt"
  s=$(job_script 11 '#DW jobdw capacity=1GiB access_mode=striped type=scratch' \
    "#DW stage_in type=file source=$TEST_DIR/pfs/in.txt destination=\$DW_JOB_STRIPED/in.txt" \
    "#DW stage_out type=file source=\$DW_JOB_STRIPED/out.txt destination=$TEST_DIR/pfs/out.txt")
  jd=$(dirname "$s")

  run dw --function job_process --job "$s"
  assert_success

  printf 'node1\n' >"$jd/client_nids"
  chmod 0600 "$jd/client_nids"
  run dw --function setup --token 11 --caller SLURM --user "$NUID" --groupid "$NGID" \
    --capacity nvme:1GiB --job "$s" --nodehostnamefile "$jd/client_nids"
  assert_success
  run tokens
  assert_output 11

  run dw --function data_in --token 11 --job "$s"
  assert_success

  run dw --function real_size --token 11
  assert_success
  [ "$(json 'd["capacity"]')" = 1073741824 ]
  [ "$(json 'd["units"]')" = bytes ]

  run dw --function paths --job "$s" --token 11 --pathfile "$jd/path"
  assert_success
  assert_file_exists "$jd/path"
  run grep '^DW_JOB_STRIPED=' "$jd/path"
  assert_success
  striped=${output#DW_JOB_STRIPED=}
  [[ "$striped" == "$TEST_DIR/nvme/"* ]] || fail "DW_JOB_STRIPED=$striped is not in pool nvme"
  [ "$(stat -c %U "$striped")" = "$U" ]
  [ "$(cat "$striped/in.txt")" = 'input data' ]
  # Every line is NAME=value, as Slurm adds each to the job's environment; no empty line.
  run grep -cv '^[A-Za-z_][A-Za-z0-9_]*=' "$jd/path"
  assert_output 0
  # An array task's path file (Slurm 24.11 names hash.N/job.ID, a directory it no longer
  # creates for array tasks): the directory is made, private, as Slurm makes its own.
  run dw --function paths --job "$s" --token 11 --pathfile "$TEST_DIR/state/hash.2/job.12/path"
  assert_success
  assert_equal "$(stat -c %a "$TEST_DIR/state/hash.2/job.12")" 700
  assert_equal "$(stat -c %a "$TEST_DIR/state/hash.2")" 700
  cmp "$jd/path" "$TEST_DIR/state/hash.2/job.12/path"

  run dw --function pre_run --token 11 --job "$s" --nodehostnamefile "$jd/client_nids"
  assert_success
  run dwstat activations
  assert_success
  [ "${#lines[@]}" -eq 2 ] || fail "no activation while the job runs: $output"

  # The job, as its user.
  runuser -u "$U" -- sh -c 'echo "$(cat "$1/in.txt") processed" >"$1/out.txt"' sh "$striped"

  run dw --function post_run --token 11 --job "$s"
  assert_success
  run dw --function data_out --token 11 --job "$s"
  assert_success
  assert_file_exists "$TEST_DIR/pfs/out.txt"
  [ "$(cat "$TEST_DIR/pfs/out.txt")" = 'input data processed' ]
  [ "$(stat -c %U "$TEST_DIR/pfs/out.txt")" = "$U" ]

  run dw --function teardown --token 11 --job "$s"
  assert_success
  assert_not_exist "$striped"
  run tokens
  assert_output ''
  run pool_free nvme
  assert_output 100
  run dw --function show_instances
  assert_output '{"instances":[]}'
}

@test "a job cancelled after setup is torn down with --hurry; a second teardown succeeds" {
  s=$(job_script 12 '#DW jobdw capacity=1GiB')
  run setup_job 12 "$s" nvme:1GiB
  assert_success
  run dw --function teardown --token 12 --job "$s" --hurry
  assert_success
  run tokens
  assert_output ''
  run dw --function teardown --token 12 --job "$s" --hurry
  assert_success
  # A job that never had a buffer (Slurm's speculative teardown), and Slurm's own stand-in
  # script for a job whose script is gone.
  printf '#!/bin/bash\nexit 0\n\0' >"$TEST_DIR/burst_buffer_script"
  run dw --function teardown --token 4242 --job "$TEST_DIR/burst_buffer_script"
  assert_success
}

@test "Slurm's size strings: decimal units and plain bytes, rounded up to the pool's granularity" {
  s=$(job_script 13 '#DW jobdw capacity=2KB pool=small')
  run setup_job 13 "$s" small:2KB
  assert_success
  run dw --function real_size --token 13
  assert_success
  [ "$(json 'd["capacity"]')" = 2048 ]
  s=$(job_script 14 '#DW jobdw capacity=1000 pool=small')
  run setup_job 14 "$s" small:1000
  assert_success
  run dw --function real_size --token 14
  [ "$(json 'd["capacity"]')" = 1024 ]
  run pool_free small
  assert_output 1
}

# --- persistent buffers --------------------------------------------------------------------

@test "create_persistent prints created; the buffer is a session and an instance until teardown of its name" {
  run dw --function create_persistent -c CLI -t scratch1 -u "$NUID" -C nvme:3221225472 -a striped -T scratch
  assert_success
  assert_line created
  run dw --function show_sessions
  check_dws sessions
  [ "$(json '[s["token"] for s in d["sessions"]]')" = scratch1 ]
  [ "$(json 'd["sessions"][0]["owner"]')" = "$NUID" ]
  id=$(json 'd["sessions"][0]["id"]')
  run dw --function show_instances
  check_dws instances
  [ "$(json 'len(d["instances"])')" = 1 ]
  [ "$(json 'd["instances"][0]["capacity"]["bytes"]')" = 3221225472 ]
  [ "$(json 'd["instances"][0]["links"]["session"]')" = "$id" ]
  run pool_free nvme
  assert_output 97

  # A job that only uses it: a session without space, and only the persistent path.
  s=$(job_script 21 '#DW persistentdw name=scratch1')
  run dw --function job_process --job "$s"
  assert_success
  run setup_job 21 "$s" nvme:0
  assert_success
  run tokens
  assert_output $'21\nscratch1'
  run dw --function show_instances
  [ "$(json 'len(d["instances"])')" = 1 ]
  run dw --function data_in --token 21 --job "$s"
  assert_success
  run dw --function paths --job "$s" --token 21 --pathfile "$TEST_DIR/path21"
  assert_success
  run cat "$TEST_DIR/path21"
  assert_line --regexp "^DW_PERSISTENT_STRIPED_scratch1=$TEST_DIR/nvme/"
  refute_line --partial DW_JOB_STRIPED
  refute_line --partial DW_JOB_PRIVATE
  dir=$(sed -n 's/^DW_PERSISTENT_STRIPED_scratch1=//p' "$TEST_DIR/path21")
  [ -d "$dir" ]
  run dw --function pre_run --token 21 --job "$s"
  assert_success
  runuser -u "$U" -- sh -c 'echo kept >"$1/kept.txt"' sh "$dir"
  for f in post_run data_out; do
    run dw --function "$f" --token 21 --job "$s"
    assert_success
  done
  run dw --function teardown --token 21 --job "$s"
  assert_success
  # The persistent buffer outlives the job, data included.
  run tokens
  assert_output scratch1
  [ "$(cat "$dir/kept.txt")" = kept ]

  # Slurm's destroy: teardown of the name.
  run dw --function teardown --token scratch1 --job "$s"
  assert_success
  assert_not_exist "$dir"
  run tokens
  assert_output ''
  run dw --function show_instances
  assert_output '{"instances":[]}'
  run pool_free nvme
  assert_output 100
  # Gone already: still a success (Slurm retries a failed teardown forever).
  run dw --function teardown --token scratch1 --job "$s"
  assert_success
  run dw --function teardown --token scratch1 --job "$s" --hurry
  assert_success
}

@test "a one-node job whose only line is #BB create_persistent: post_run and data_out come right after data_in" {
  # Slurm's plugin, for a job without #DW options: create_persistent, setup (size 0), data_in,
  # then no paths and no pre_run (staged-in to running), then post_run, data_out, teardown.
  s=$(job_script 71 '#BB create_persistent name=climate.v2 capacity=48 access=striped type=scratch')
  run dw --function create_persistent -c CLI -t climate.v2 -u "$NUID" -C small:1024 -a striped -T scratch
  assert_success
  assert_line created
  run setup_job 71 "$s" small:0
  assert_success
  run dw --function data_in --token 71 --job "$s"
  assert_success
  run dw --function post_run --token 71 --job "$s"
  assert_success
  run dw --function data_out --token 71 --job "$s"
  assert_success
  # A slurmctld restarted during stage-out runs both again.
  run dw --function post_run --token 71 --job "$s"
  assert_success
  run dw --function data_out --token 71 --job "$s"
  assert_success
  run dw --function teardown --token 71 --job "$s"
  assert_success
  run tokens
  assert_output climate.v2
  # A dotted name is a job's DW_PERSISTENT_STRIPED_climate_v2.
  u=$(job_script 72 '#DW persistentdw name=climate.v2')
  run dw --function job_process --job "$u"
  assert_success
  run setup_job 72 "$u" small:0
  assert_success
  run dw --function data_in --token 72 --job "$u"
  assert_success
  run dw --function paths --job "$u" --token 72 --pathfile "$TEST_DIR/path72"
  assert_success
  run cat "$TEST_DIR/path72"
  assert_line --regexp "^DW_PERSISTENT_STRIPED_climate_v2=$TEST_DIR/small/persistent/[^/]*climate\.v2(\.[0-9a-f]{16})?$"
  # pre_run twice (Slurm runs paths and pre_run again after revoking an allocation), teardown.
  for f in pre_run pre_run post_run data_out teardown; do
    run dw --function "$f" --token 72 --job "$u"
    assert_success
  done
  run dw --function teardown --token climate.v2 --job "$s"
  assert_success
  run tokens
  assert_output ''
}

@test "post-run still refuses a buffer that never staged in, naming both states" {
  s=$(job_script 73 '#DW jobdw capacity=1GiB')
  run setup_job 73 "$s" nvme:1GiB
  assert_success
  run dw --function post_run --token 73 --job "$s"
  assert_failure 65
  assert_output --regexp "^bb-stage: .*allocated.*"
  [ "${#lines[@]}" -eq 1 ]
  run dw --function teardown --token 73 --job "$s" --hurry
  assert_success
}

@test "setup reads the script Slurm passes with its symbols replaced already: no second replacement, \\\\ kept" {
  # What Slurm's plugin hands setup for a job with '%' in a #DW line: "#!/bin/sh" and the
  # directives with %% already turned into %, %x already the job name (here one holding '%j'),
  # and a \\ left as written.
  runuser -u "$U" -- mkdir -p "$TEST_DIR/pfs/100%"
  printf 'with backslashes\n' >"$TEST_DIR/pfs/in\\\\put"
  chown "$U" "$TEST_DIR/pfs/in\\\\put"
  memfd="$TEST_DIR/statesave/memfd.74"
  mkdir -p "$TEST_DIR/statesave"
  {
    printf '#!/bin/sh\n'
    printf '#DW jobdw capacity=1GiB\n'
    printf '#DW stage_in type=file source=%s destination=$DW_JOB_STRIPED/in\n' "$TEST_DIR/pfs/in\\\\put"
    printf '#DW stage_out type=file source=$DW_JOB_STRIPED/out destination=%s\n' "$TEST_DIR/pfs/100%/out.a%jb"
  } >"$memfd"
  run setup_job 74 "$memfd" nvme:1GiB
  assert_success
  run dw --function data_in --token 74 --job "$memfd"
  assert_success
  run dw --function paths --job "$memfd" --token 74 --pathfile "$TEST_DIR/path74"
  striped=$(sed -n 's/^DW_JOB_STRIPED=//p' "$TEST_DIR/path74")
  [ "$(cat "$striped/in")" = 'with backslashes' ]
  run dw --function pre_run --token 74 --job "$memfd"
  assert_success
  runuser -u "$U" -- sh -c 'echo out >"$1/out"' sh "$striped"
  for f in post_run data_out teardown; do
    run dw --function "$f" --token 74 --job "$memfd"
    assert_success
  done
  [ "$(cat "$TEST_DIR/pfs/100%/out.a%jb")" = out ]
  run ls "$TEST_DIR/pfs/100%"
  assert_output 'out.a%jb'
}

@test "job_process takes DataWarp's lines as Slurm's guide writes them" {
  s=$(job_script 75 '#DW jobdw type=scratch capacity=1GiB access_mode=striped,private type=scratch' \
    '#DW persistentdw name=alpha.v2')
  run dw --function job_process --job "$s"
  assert_success
  s=$(job_script 76 '#DW jobdw type=scratch capacity=1GiB type=cache')
  run dw --function job_process --job "$s"
  assert_failure 65
  assert_output "bb-parse: script line 2: 'type=' is given twice with different values ('scratch' and 'cache'; give it once)"
  s=$(job_script 77 '#BB create_persistent name=9lives capacity=1GiB')
  run dw --function job_process --job "$s"
  assert_failure 65
  assert_output --partial "must not start with a digit"
  s=$(job_script 78 $'#BB create_persistent name=a\x01b capacity=1GiB')
  run dw --function job_process --job "$s"
  assert_failure 65
  [ "${#lines[@]}" -eq 1 ]
  assert_output --partial "use only letters, digits, '_', '-' and '.'"
}

@test "the cli_filter in datawarp mode checks a create-only job at submit, which the plugin never asks about" {
  # As the submitting user: the filter runs in sbatch.
  chmod 755 "$TEST_DIR"
  chmod 644 "$BBKIT_CONFIG"
  filter="$TEST_DIR/cli_filter.lua"
  sed -e 's/^BBKIT_PLUGIN = .*/BBKIT_PLUGIN = "datawarp"/' \
    -e "s|^BBKIT_BINDIR = .*|BBKIT_BINDIR = \"$BBKIT_BIN\"|" "$DW_SHARE/../slurm/cli_filter.lua" >"$filter"
  # The submit rules it loads from beside itself (install-slurm writes them into it).
  cp "$DW_SHARE/../slurm/submit_rules.lua" "$TEST_DIR/"
  printf '#!/bin/bash\n#BB create_persistent name=big capacity=1GiB pool=small\necho\n' >"$TEST_DIR/big.sh"
  printf '#!/bin/bash\n#BB create_persistent name=fits.v2 capacity=48 pool=small\necho\n' >"$TEST_DIR/fits.sh"
  printf '#!/bin/bash\n#DW jobdw capacity=1GiB \\\n#BB destroy_persistent name=x\necho\n' >"$TEST_DIR/mixed.sh"
  printf '#!/bin/bash\n#SBATCH -N 1\n#BB_LUA pool=small capacity=1K\necho no datawarp line\n' >"$TEST_DIR/plain.sh"
  chmod 644 "$filter" "$TEST_DIR/submit_rules.lua" "$TEST_DIR"/*.sh
  pre_submit() {
    setpriv --reuid "$NUID" --regid "$NGID" --clear-groups env PATH="$PATH" \
      BBKIT_CONFIG="$BBKIT_CONFIG" "${LUA:-lua5.1}" -e "
      slurm = {SUCCESS = 0, ERROR = -1,
               log_error = function(fmt, ...) io.write('error: ', string.format(fmt, ...), '\n') end,
               log_info = function(fmt, ...) io.write('info: ', string.format(fmt, ...), '\n') end}
      dofile('$filter')
      print('rc=' .. slurm_cli_pre_submit($1, 0))"
  }
  run pre_submit "{type = 'sbatch', argv = {'$TEST_DIR/big.sh'}}"
  assert_line "rc=-1"
  assert_line "error: bb-parse: script line 2: capacity=1GiB can never be satisfied: pool 'small' holds only 4KiB in total"
  run pre_submit "{type = 'sbatch', argv = {'$TEST_DIR/fits.sh'}}"
  assert_output "rc=0"
  run pre_submit "{type = 'sbatch', argv = {'$TEST_DIR/mixed.sh'}}"
  assert_line "rc=-1"
  assert_line --regexp "^error: bb-parse: script line 2: a #DW line continues on a #BB line"
  # #BB_LUA is not a datawarp-mode directive: Slurm's plugin ignores it, bb-parse only warns.
  run pre_submit "{type = 'sbatch', argv = {'$TEST_DIR/plain.sh'}}"
  assert_output "rc=0"
  # The submitting user's own checks: no EnablePersistent, no persistent buffer.
  dw_config
  chmod 644 "$BBKIT_CONFIG"
  run pre_submit "{type = 'sbatch', argv = {'$TEST_DIR/fits.sh'}}"
  assert_line "rc=-1"
  assert_line --regexp "^error: bb-parse: .*may not create persistent burst buffers \(EnablePersistent is not set\)"
}

@test "create_persistent of an existing name: the same request is created again, another size fails in one line" {
  run dw --function create_persistent -c CLI -t dup -u "$NUID" -C nvme:1073741824 -a striped -T scratch
  assert_success
  assert_line created
  # A requeued job's create: the same buffer, created.
  run dw --function create_persistent -c CLI -t dup -u "$NUID" -C nvme:1073741824 -a striped -T scratch
  assert_success
  assert_line created
  run dw --function create_persistent -c CLI -t dup -u "$NUID" -C nvme:2147483648 -a striped -T scratch
  assert_failure
  [ "${#lines[@]}" -eq 1 ] || fail "expected one line: $output"
  assert_output --regexp '^bb-pool: .*dup'
  refute_output --partial created
  run dw --function show_instances
  [ "$(json '[i["capacity"]["bytes"] for i in d["instances"]]')" = 1073741824 ]
  run tokens
  assert_output dup
}

@test "create_persistent without -a and -T, and in another pool" {
  run dw --function create_persistent -c CLI -t plain -u "$NUID" -C small:2048
  assert_success
  assert_line created
  run pool_free small
  assert_output 2
  run dw --function show_configurations
  check_dws configurations
  [ "$(json '[c["type"] for c in d["configurations"]]')" = scratch ]
  run dw --function teardown --token plain --job "$TEST_DIR/none"
  assert_success
  run pool_free small
  assert_output 4
}

# --- hostile and malformed input -----------------------------------------------------------

@test "an unknown function answers invalid function; a missing --function is a usage error" {
  run dw --function frobnicate
  assert_failure 64
  [[ "$output" == "invalid function"* ]] || fail "does not start with 'invalid function': $output"
  [ "${#lines[@]}" -eq 1 ]
  run dw --function destroy_everything --token 1
  assert_failure 64
  [[ "$output" == "invalid function"* ]]
  run dw
  assert_failure 64
  assert_output --partial "dw_wlm_cli: usage: dw_wlm_cli --function NAME"
  run dw --token 12 --job /dev/null
  assert_failure 64
  assert_output --partial "dw_wlm_cli: usage:"
  run dw --function
  assert_failure 64
  assert_output --partial "dw_wlm_cli: usage:"
  # Options: unknown ones, a missing value, the JSON calls take none.
  run dw --function data_in --token 12 --bogus 1
  assert_failure 64
  assert_output "dw_wlm_cli: data_in: unknown argument '--bogus'"
  run dw --function data_in --token
  assert_failure 64
  assert_output "dw_wlm_cli: data_in: --token needs a value"
  run dw --function data_in
  assert_failure 64
  assert_output "dw_wlm_cli: data_in needs --token"
  run dw --function show_sessions --token 12
  assert_failure 64
  assert_output "dw_wlm_cli: show_sessions takes no options"
  run dw --function pools extra
  assert_failure 64
  assert_output "dw_wlm_cli: pools: unknown argument 'extra'"
}

@test "no value becomes an option: a value starting with '-' is refused before any tool runs" {
  s=$(job_script 30 '#DW jobdw capacity=1GiB')
  run dw --function data_in --token --help
  assert_failure 64
  assert_output "dw_wlm_cli: data_in: --token '--help' starts with '-'"
  run dw --function setup --token 30 --caller SLURM --user "$NUID" --groupid "$NGID" \
    --capacity nvme:1GiB --job --version
  assert_failure 64
  assert_output "dw_wlm_cli: setup: --job '--version' starts with '-'"
  run dw --function create_persistent -c CLI -t --state-dir=/tmp -u "$NUID" -C nvme:1073741824
  assert_failure 64
  assert_output --partial "-t '--state-dir=/tmp' starts with '-'"
  run dw --function teardown --token -1 --job "$s"
  assert_failure 64
  assert_output "dw_wlm_cli: teardown: --token '-1' starts with '-'"
  # A size after the pool's colon reaches bb-pool as --capacity's value, never as an option.
  run setup_job 30 "$s" 'nvme:--help'
  assert_failure 65
  [ "${#lines[@]}" -eq 1 ]
  assert_output --partial "bb-pool: command line: invalid size '--help'"
  run tokens
  assert_output ''
}

@test "job tokens that are not job ids, sizes that are not POOL:SIZE and bytes that are not numbers are refused" {
  s=$(job_script 31 '#DW jobdw capacity=1GiB')
  run dw --function data_in --token '1;rm -rf /' --job "$s"
  assert_failure 64
  assert_output "dw_wlm_cli: data_in: --token '1;rm -rf /' is not a job id"
  run dw --function teardown --token '1;rm -rf /' --job "$s"
  assert_failure 64
  assert_output "dw_wlm_cli: teardown: --token '1;rm -rf /' is not a job id"
  run dw --function setup --token '31 32' --caller SLURM --user "$NUID" --groupid "$NGID" \
    --capacity nvme:1GiB --job "$s"
  assert_failure 64
  assert_output "dw_wlm_cli: setup: --token '31 32' is not a job id"
  run dw --function setup --token 31 --caller SLURM --user nobody --groupid "$NGID" \
    --capacity nvme:1GiB --job "$s"
  assert_failure 64
  assert_output "dw_wlm_cli: setup: --user 'nobody' is not a number"
  for capacity in nvme1GiB nvme: :1GiB; do
    run setup_job 31 "$s" "$capacity"
    assert_failure 64
    assert_output "dw_wlm_cli: setup: --capacity '$capacity' is not POOL:SIZE"
  done
  run setup_job 31 "$s" nope:1GiB
  assert_failure
  [ "${#lines[@]}" -eq 1 ]
  assert_output --partial nope
  run dw --function create_persistent -c CLI -t big -u "$NUID" -C nvme:2G
  assert_failure 64
  assert_output "dw_wlm_cli: create_persistent: -C '2G' is not a number"
  run dw --function create_persistent -c CLI -t big -u "$NUID" -C nvme
  assert_failure 64
  assert_output "dw_wlm_cli: create_persistent: -C 'nvme' is not POOL:BYTES"
  run dw --function destroy_persistent --token 31
  assert_failure 64
  assert_output "dw_wlm_cli: destroy_persistent: --token '31' is a job id"
  run tokens
  assert_output ''
  run pool_free nvme
  assert_output 100
}

@test "persistent names with '/' or '..' are refused by the tools and nothing is written outside the pool" {
  for name in a/b .. ../../etc a..b 'x y'; do
    run dw --function create_persistent -c CLI -t "$name" -u "$NUID" -C nvme:1073741824 -a striped -T scratch
    assert_failure 65
    [ "${#lines[@]}" -eq 1 ] || fail "expected one line for '$name': $output"
    assert_output --partial "invalid persistent buffer name"
    refute_output --partial created
    run dw --function teardown --token "$name" --job /dev/null
    assert_failure 65
    assert_output --partial "bb-teardown: invalid persistent buffer name"
  done
  run tokens
  assert_output ''
  run find "$TEST_DIR" -mindepth 1 -maxdepth 1 -not -name bbkit.toml -not -name state \
    -not -name record.key -not -name record.key.sealed -not -name nvme -not -name small -not -name pfs -not -name sanitizer
  assert_output ''
  run find "$TEST_DIR/nvme/persistent" "$TEST_DIR/small/persistent" -mindepth 1
  assert_output ''
}

@test "setup of a script that does not exist fails and allocates nothing" {
  run setup_job 32 "$TEST_DIR/statesave/hash.2/job.32/script" nvme:1GiB
  assert_failure 66
  [ "${#lines[@]}" -eq 1 ]
  assert_output --partial "cannot read '$TEST_DIR/statesave/hash.2/job.32/script'"
  run dw --function show_sessions
  assert_output '{"sessions":[]}'
  run pool_free nvme
  assert_output 100
  run dw --function data_in --token 32 --job "$TEST_DIR/statesave/hash.2/job.32/script"
  assert_failure
  run dw --function teardown --token 32 --job "$TEST_DIR/statesave/hash.2/job.32/script" --hurry
  assert_success
}

@test "job_process: a directive error fails naming its line; Slurm's saved scripts pass" {
  s=$(job_script 33 '#DW jobdw capacity=1GiB' '#DW stage_in type=bogus source=/etc/hostname destination=$DW_JOB_STRIPED/h')
  run dw --function job_process --job "$s"
  assert_failure 65
  [ "${#lines[@]}" -eq 1 ]
  assert_output --regexp '^bb-parse: .*line 3.*bogus'
  s=$(job_script 34 '#DW jobdw capacity=banana')
  run dw --function job_process --job "$s"
  assert_failure 65
  assert_output --regexp '^bb-parse: .*line 2.*banana'
  # setup checks again, and allocates nothing.
  run setup_job 34 "$s" nvme:1GiB
  assert_failure 65
  assert_output --partial "line 2"
  run dw --function show_sessions
  assert_output '{"sessions":[]}'
  # salloc's script: "#!/bin/bash\n" and the directive, no newline, no NUL.
  printf '#!/bin/bash\n#DW jobdw capacity=1GiB access_mode=striped' >"$TEST_DIR/salloc-script"
  run dw --function job_process --job "$TEST_DIR/salloc-script"
  assert_success
  run dw --function job_process
  assert_failure 64
  assert_output "dw_wlm_cli: job_process needs --job"
}

# --- dwstat --------------------------------------------------------------------------------

@test "dwstat with no word prints the pools table as DataWarp did: its five columns, right-aligned" {
  run dwstat
  assert_success
  assert_output " pool units quantity   free gran
 nvme bytes   100GiB 100GiB 1GiB
small bytes     4KiB   4KiB 1KiB"
  run dwstat pools
  assert_success
  assert_line --index 0 " pool units quantity   free gran"
}

@test "dwstat's empty tables print DataWarp's lines, not a lone header" {
  run dwstat sessions
  assert_success
  assert_output "no sessions"
  run dwstat instances
  assert_output "no instances"
  run dwstat configurations
  assert_output "no scratch, cache, swap configurations"
  run dwstat activations
  assert_output "no activations"
  run dwstat most
  assert_success
  assert_output " pool units quantity   free gran
 nvme bytes   100GiB 100GiB 1GiB
small bytes     4KiB   4KiB 1KiB

no sessions

no instances

no scratch, cache, swap configurations

no activations"
}

@test "dwstat's tables with live buffers: DataWarp's columns and words, and most prints all five" {
  run dw --function create_persistent -c CLI -t stat1.v2 -u "$NUID" -C nvme:1073741824 -a striped -T scratch
  assert_success
  s=$(job_script 61 '#DW jobdw capacity=1536MiB')
  run setup_job 61 "$s" nvme:1536MiB
  assert_success
  run dw --function data_in --token 61 --job "$s"
  assert_success
  run dw --function pre_run --token 61 --job "$s"
  assert_success
  run dwstat sessions
  assert_success
  assert_line --index 0 --regexp '^ *sess state +token creator owner +created expiration nodes$'
  assert_line --regexp "^ *[0-9]+ CA--- +stat1.v2 +bbkit +$NUID [0-9T:-]{19} +never +0$"
  assert_line --regexp "^ *[0-9]+ CA--- +61 +bbkit +$NUID [0-9T:-]{19} +never +0$"
  [ "${#lines[@]}" -eq 3 ]
  run dwstat instances
  assert_line --index 0 --regexp '^ *inst state +sess +bytes nodes +created expiration intact +label +public confs$'
  assert_line --regexp ' 1GiB +0 [0-9T:-]{19} +never intact +stat1.v2 +public +1$'
  # 1536MiB rounds up to 2GiB in 1GiB units; a size that is not whole prints two decimals.
  assert_line --regexp ' 2GiB +0 [0-9T:-]{19} +never intact +61 private +1$'
  run dwstat configurations
  assert_line --index 0 --regexp '^ *conf state +inst +type access_type activs$'
  assert_line --regexp ' scratch +stripe +1$'
  run dwstat activations
  assert_line --index 0 --regexp '^ *activ state +sess +conf nodes$'
  [ "${#lines[@]}" -eq 2 ]
  run dwstat pools
  assert_line --index 1 --regexp '^ *nvme bytes +100GiB +97GiB +1GiB$'

  for word in most all; do
    run dwstat "$word"
    assert_success
    assert_line --regexp '^ *pool units quantity'
    assert_line --regexp '^ *sess state +token'
    assert_line --regexp '^ *inst state +sess'
    assert_line --regexp '^ *conf state +inst'
    assert_line --regexp '^ *activ state +sess'
    assert_line --regexp ' stat1.v2 +bbkit '
  done
}

@test "bb-stat --dwstat refuses other views and options in one line" {
  run bb-stat --dwstat burst
  assert_failure 64
  one_line_error bb-stat
  assert_output --partial "unknown dwstat view 'burst'"
  run bb-stat --dwstat sessions --json
  assert_failure 64
  one_line_error bb-stat
  run bb-stat --dwstat sessions extra
  assert_failure 64
  one_line_error bb-stat
  run bb-stat --dwstat $'ses\nsions'
  assert_failure 64
  one_line_error bb-stat
  run bb-stat --dwstat "$(printf 'x%.0s' $(seq 1 5000))"
  assert_failure 64
  one_line_error bb-stat
}

@test "dwstat answers odd words with its usage line and exit 0" {
  usage='usage: dwstat [pools | sessions | instances | configurations | activations | most | all]'
  for word in --help -h foo '; rm' '$(id)' '--state-dir=/tmp' '../../etc/passwd' burst; do
    run dwstat "$word"
    assert_success
    assert_output "$usage"
  done
  run dwstat a b
  assert_success
  assert_output "$usage"
  run dwstat sessions --json
  assert_success
  assert_output "$usage"
  run dwstat ';' rm -rf /
  assert_success
  assert_output "$usage"
}

@test "under PrivateData dwstat shows no buffer, while show_sessions still lists it for Slurm" {
  dw_config 'flags = ["EnablePersistent", "PrivateData"]'
  run dw --function create_persistent -c CLI -t secret -u "$NUID" -C nvme:1073741824 -a striped -T scratch
  assert_success
  s=$(job_script 40 '#DW jobdw capacity=1GiB')
  run setup_job 40 "$s" nvme:1GiB
  assert_success
  for table in sessions instances configurations activations; do
    run dwstat "$table"
    assert_success
    [ "${#lines[@]}" -eq 1 ] || fail "dwstat $table shows a buffer under PrivateData: $output"
    assert_output --regexp '^no '
  done
  run dwstat most
  assert_success
  refute_output --partial secret
  run tokens
  assert_output $'40\nsecret'
}

# --- callers at once -----------------------------------------------------------------------

@test "8 setups at once all get their session and pools' free counts them; 8 teardowns at once free it all" {
  for i in $(seq 1 8); do
    job_script "5$i" '#DW jobdw capacity=1GiB' >/dev/null
  done
  pids=()
  for i in $(seq 1 8); do
    setup_job "5$i" "$TEST_DIR/statesave/hash.$i/job.5$i/script" nvme:1GiB >"$TEST_DIR/out.$i" 2>&1 &
    pids+=($!)
  done
  # The plugin's poll runs meanwhile: every answer parses.
  for _ in 1 2 3; do
    run dw --function show_sessions
    assert_success
    check_dws sessions
  done
  for i in $(seq 1 8); do
    wait "${pids[$((i - 1))]}" || fail "setup of job 5$i failed: $(cat "$TEST_DIR/out.$i")"
  done
  run tokens
  assert_output "$(seq 51 58)"
  run pool_free nvme
  assert_output 92
  run dw --function show_instances
  check_dws instances
  [ "$(json 'len(set(i["links"]["session"] for i in d["instances"]))')" = 8 ]

  pids=()
  for i in $(seq 1 8); do
    dw --function teardown --token "5$i" --job "$TEST_DIR/statesave/hash.$i/job.5$i/script" \
      >"$TEST_DIR/out.$i" 2>&1 &
    pids+=($!)
  done
  run dw --function pools
  check_dws pools
  for i in $(seq 1 8); do
    wait "${pids[$((i - 1))]}" || fail "teardown of job 5$i failed: $(cat "$TEST_DIR/out.$i")"
  done
  run tokens
  assert_output ''
  run pool_free nvme
  assert_output 100
}

@test "creates of one persistent name at once: each reads created or retry later, and one buffer exists" {
  pids=()
  for i in 1 2 3 4 5 6; do
    dw --function create_persistent -c CLI -t racer -u "$NUID" -C nvme:1073741824 -a striped -T scratch \
      >"$TEST_DIR/out.$i" 2>&1 &
    pids+=($!)
  done
  created=0
  for i in 1 2 3 4 5 6; do
    rc=0
    wait "${pids[$((i - 1))]}" || rc=$?
    out=$(cat "$TEST_DIR/out.$i")
    if [ "$rc" -eq 0 ]; then
      grep -qx created "$TEST_DIR/out.$i" || fail "create $i exited 0 without created: $out"
      created=$((created + 1))
    else
      # Another caller is allocating it right now: temporary, in one line, and not "created"
      # (the plugin would then read a session that is not there yet).
      [ "$rc" -eq 75 ] || fail "create $i exited $rc: $out"
      [[ "$out" == "bb-pool: "*"being allocated by pid "*"retry later"* ]] || fail "create $i: $out"
      [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "create $i: more than one line: $out"
    fi
  done
  [ "$created" -ge 1 ]
  run tokens
  assert_output racer
  run pool_free nvme
  assert_output 99
  # The plugin's retry, once the first has finished, reads created.
  run dw --function create_persistent -c CLI -t racer -u "$NUID" -C nvme:1073741824 -a striped -T scratch
  assert_success
  assert_line created
  run pool_free nvme
  assert_output 99
}

@test "space comes only from Slurm: a script that asks for space Slurm did not count gets none" {
  # Slurm counts only `#DW jobdw capacity=`; these lines it never reads as space.
  for line in '#DW capacity=90GiB' '#BB capacity=50GiB' '#BB jobdw capacity=50GiB' \
    '#DW use_persistent name=x'; do
    script=$(job_script 301 "$line")
    run dw --function job_process --job "$script"
    assert_failure
    assert_output --partial "is not read by Slurm's datawarp plugin"
    [ "${#lines[@]}" -eq 1 ] || fail "more than one line: $output"
  done
  # A jobdw line Slurm did count, but setup says 0 (Slurm's symbol replacement can add lines
  # bbkit alone would read): refused, nothing allocated.
  script=$(job_script 302 '#DW jobdw capacity=90GiB')
  run setup_job 302 "$script" nvme:0
  assert_failure 65
  assert_output "bb-pool: job 302 asks for 90GiB (script line 2) but Slurm granted no space (in datawarp mode the size is setup's --capacity)"
  run dw --function show_sessions
  assert_output '{"sessions":[]}'
  # With Slurm's size it is the size Slurm counted, whatever the script says.
  run setup_job 302 "$script" nvme:2GiB
  assert_success
  run dw --function real_size --token 302
  assert_output '{"capacity":2147483648,"units":"bytes"}'
}

@test "real_size answers nothing for a buffer that has ended, so a reused job id is never charged an old size" {
  script=$(job_script 303 '#DW jobdw capacity=3GiB')
  run setup_job 303 "$script" nvme:3GiB
  assert_success
  run dw --function teardown --token 303 --job "$script" --hurry
  assert_success
  run dw --function real_size --token 303
  assert_success
  assert_output ""
}

@test "create_persistent follows bbkit's flags and deny_users even when SlurmUser is root" {
  dw_config
  run dw --function create_persistent -c CLI -t noflag -u "$NUID" -C small:1024
  assert_failure 77
  assert_output --partial "user $U may not create persistent burst buffers (EnablePersistent is not set)"
  refute_output --partial created
  dw_config 'flags = ["EnablePersistent"]' "deny_users = [\"$U\"]"
  run dw --function create_persistent -c CLI -t denied -u "$NUID" -C small:1024
  assert_failure 77
  assert_output --partial "listed in deny_users"
  run dw --function show_sessions
  assert_output '{"sessions":[]}'
  # Root's own buffer needs no flag: Slurm lets root create one.
  dw_config
  run dw --function create_persistent -c CLI -t rootbuf -u 0 -C small:1024
  assert_success
  assert_output --partial created
}

@test "a value with a newline or backslashes is answered on one line" {
  run dw --function create_persistent -c CLI -t $'-x\nsbatch: forged\\c' -u 1 -C small:1
  assert_failure 64
  [ "${#lines[@]}" -eq 1 ] || fail "more than one line: $output"
  run dw --function $'bogus\nsbatch: forged'
  assert_failure 64
  [ "${#lines[@]}" -eq 1 ] || fail "more than one line: $output"
  assert_output --partial "invalid function 'bogus?sbatch: forged'"
}
