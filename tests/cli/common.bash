# Shared set-up for the command-line suites: the tools on PATH ($BBKIT_BIN: the installed tree's
# bin/ that ctest gives in BBKIT_BIN_DIR, else the build's bin/), a scratch directory, and a
# small valid configuration each test may extend.
bats_load_library bats-support
bats_load_library bats-assert
bats_load_library bats-file

: "${BBKIT_BUILD_DIR:?run the suites through ctest (it sets BBKIT_BUILD_DIR)}"
: "${BBKIT_SOURCE_DIR:?run the suites through ctest (it sets BBKIT_SOURCE_DIR)}"

BBKIT_BIN=${BBKIT_BIN_DIR:-$BBKIT_BUILD_DIR/bin}
PATH="$BBKIT_BIN:$PATH"
export PATH
unset BBKIT_CONFIG BBKIT_STATE_DIR

# Writes $TEST_DIR/bbkit.toml with two pools and points BBKIT_CONFIG at it; extra TOML lines
# given as arguments go before the pools.
# shellcheck disable=SC2120 # the arguments are optional: the suites pass some
write_config() {
  {
    printf 'state_dir = "%s/state"\n' "$TEST_DIR"
    printf 'default_pool = "nvme"\n'
    printf 'allow_root = true\n'
    for line in "$@"; do printf '%s\n' "$line"; done
    printf '[[pool]]\nname = "nvme"\npath = "%s/nvme"\ncapacity = "100GiB"\ngranularity = "1GiB"\n' "$TEST_DIR"
    printf '[[pool]]\nname = "small"\npath = "%s/small"\ncapacity = "4KiB"\ngranularity = "1KiB"\n' "$TEST_DIR"
  } >"$TEST_DIR/bbkit.toml"
  export BBKIT_CONFIG="$TEST_DIR/bbkit.toml"
}

common_setup() {
  TEST_DIR=$(mktemp -d "${BATS_TMPDIR:-/tmp}/bbkit-cli.XXXXXX")
  chmod 755 "$TEST_DIR"
  export TEST_DIR
  sanitizer_setup
  # shellcheck disable=SC2119 # no extra lines here
  write_config
}

common_teardown() {
  local clean=0
  sanitizer_check || clean=$?
  [ -n "${TEST_DIR:-}" ] && rm -rf "$TEST_DIR"
  return "$clean"
}

# In a sanitizer build (scripts/sanitize) every tool, whichever user it runs as (runuser, the
# mover after dropping privileges), writes its reports into one world-writable directory per
# test; a report there fails the test even when the tool's exit status was expected to fail.
sanitizer_setup() {
  [ "${BBKIT_SANITIZE:-}" = 1 ] || return 0
  mkdir -m 1777 "$TEST_DIR/sanitizer"
  chmod 1777 "$TEST_DIR/sanitizer"
  export ASAN_OPTIONS="${ASAN_OPTIONS:-halt_on_error=1:exitcode=86}:log_path=$TEST_DIR/sanitizer/asan"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1:exitcode=86}:log_path=$TEST_DIR/sanitizer/ubsan"
}

sanitizer_check() {
  [ "${BBKIT_SANITIZE:-}" = 1 ] && [ -d "${TEST_DIR:-}/sanitizer" ] || return 0
  local report found=0
  for report in "$TEST_DIR"/sanitizer/*; do
    [ -e "$report" ] || continue
    found=1
    echo "sanitizer report $report:" >&2
    cat "$report" >&2
  done
  [ "$found" = 0 ]
}

# failed_stage_in JOB: job JOB of the test user ($U, set by the caller) in pool nvme (initialised
# by the caller), whose stage-in fails (its source is missing): the buffer keeps its failed stage.
failed_stage_in() {
  # shellcheck disable=SC2016 # $BB_JOB_DIR is the job script's, expanded by bbkit
  printf '#!/bin/sh\n#BB_LUA pool=nvme capacity=1G\n#BB_LUA stage_in source=%s destination=$BB_JOB_DIR/x type=file\n' \
    "$TEST_DIR/missing" >"$TEST_DIR/job$1.sh"
  bb-pool alloc --job "$1" --user "$U" --script "$TEST_DIR/job$1.sh" --wait default >/dev/null
  ! bb-stage in --job "$1" >/dev/null 2>&1 || fail "the stage-in of job $1 did not fail"
}

# Creates (once) an unprivileged user for permission tests; prints its name. NAME (default
# bbkit-test) gives a suite that runs alongside its own variants a user of its own.
# shellcheck disable=SC2120 # NAME is optional: the suites pass one
test_user() {
  local name=${1:-bbkit-test}
  if ! id "$name" >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin "$name" 2>/dev/null || id "$name" >/dev/null
  fi
  echo "$name"
}

# The set-up of the staging suites: pools nvme and small initialised, and $TEST_DIR/pfs (the
# "parallel file system") owned by the unprivileged test user, whose name is left in $U.
staging_setup() {
  common_setup
  mkdir -p "$TEST_DIR/nvme" "$TEST_DIR/small" "$TEST_DIR/pfs"
  chmod 755 "$TEST_DIR/pfs"
  # shellcheck disable=SC2119 # the default user
  U=$(test_user)
  chown "$U" "$TEST_DIR/pfs"
  bb-pool init nvme >/dev/null
  bb-pool init small >/dev/null
}

# sized_script FILE BYTES [LINE...]: a job script of exactly BYTES bytes: a shebang, the LINEs
# (default one #BB_LUA capacity=1G), then ':' commands padding it out (read past the directives).
sized_script() {
  local file=$1 bytes=$2
  shift 2
  [ $# -gt 0 ] || set -- '#BB_LUA capacity=1G'
  { echo '#!/bin/sh'; for l in "$@"; do printf '%s\n' "$l"; done; } >"$file"
  # shellcheck disable=SC2094 # stat runs (an expansion) before the append opens the file
  yes : | head -c $((bytes - $(stat -c %s "$file"))) >>"$file"
  [ "$(stat -c %s "$file")" = "$bytes" ]
}

# The refusal of a job script over [limits] script_size, as bb-parse and bb-pool word it.
script_size_message() {  # TOOL FILE BYTES LIMIT
  echo "$1: cannot read job script '$2': $3 bytes, over the limit of $4 bytes ([limits] script_size in bbkit.toml: shorten the script or raise the limit)"
}

# bbdir PATH: a buffer directory named as bbkit names new ones, PATH (…/job/CLUSTER.JOB.INC or
# …/persistent/CLUSTER.NAME) and a random part after it (bbkit(7), SECURITY); PATH itself when
# no such directory exists (an older record's name, or none yet).
bbdir() {
  local d
  for d in "$1".????????????????; do
    [ -d "$d" ] && { echo "$d"; return 0; }
  done
  echo "$1"
}

# node_config NODE [TOML...]: what a compute node holds for node-local pools (bbkit(7),
# NODE-LOCAL POOLS), in $TEST_DIR/NODE: its own bbkit.toml (standalone mode, pool "nvme" of
# 64 MiB with node_local = true, then the TOML lines given), state directory and pool "nvme",
# initialised.
node_config() {
  local dir=$TEST_DIR/$1
  shift
  mkdir -p "$dir/nvme"
  {
    cat <<TOML
state_dir = "$dir/state"
mode = "standalone"
allow_root = true
default_pool = "nvme"
[[pool]]
name = "nvme"
path = "$dir/nvme"
capacity = "64MiB"
granularity = "1MiB"
node_local = true
TOML
    printf '%s\n' "$@"
  } >"$dir/bbkit.toml"
  BBKIT_CONFIG=$dir/bbkit.toml bb-pool init nvme >/dev/null
}
