# A private Slurm cluster for the end-to-end suites: Debian's munged, slurmctld and slurmd
# started by hand on loopback, in a temporary directory. Two configurations, chosen by
# HARNESS_MODE (set before loading this file):
# - slurm (default, slurm.bats): burst_buffer/lua and cli_filter/lua run bbkit's scripts
#   (installed through install-slurm) against a bbkit configuration in Slurm mode;
# - datawarp (datawarp.bats): burst_buffer/datawarp runs bbkit's dw_wlm_cli and dwstat
#   (install-slurm --plugin datawarp) against a bbkit configuration in datawarp mode;
# - standalone (standalone.bats): no burst_buffer plugin and no cli_filter; PrologSlurmctld,
#   EpilogSlurmctld and TaskProlog are the installed tree's share/bbkit/standalone/slurm
#   scripts (the lines `install-slurm --standalone` prints), bbkit.toml says mode =
#   "standalone". Slurm 22.05 gives the controller scripts no environment, so slurmctld and
#   slurmd run in a private mount namespace where /etc/slurm is this cluster's etc/ and
#   /etc/bbkit/bbkit.toml its bbkit.toml (the host's files are never touched);
# - plain (nodes.bats, through nodes.bash): no burst_buffer plugin, no cli_filter and no bbkit
#   scripts: the cluster alone, whose nodes nodes.bash lays out.
# Only the processes started here are ever stopped, by their pid files (SIGTERM, then SIGKILL);
# /etc/slurm and system services are never touched.
#
# Facts this relies on (Slurm 22.05 on Debian 12) are in the comments where they are used.
# Every sbatch/squeue/scontrol line a test sees goes to $TRANSCRIPT.

bats_load_library bats-support
bats_load_library bats-assert
bats_load_library bats-file

: "${BBKIT_BUILD_DIR:?run the suite through ctest (it sets BBKIT_BUILD_DIR)}"
: "${BBKIT_SOURCE_DIR:?run the suite through ctest (it sets BBKIT_SOURCE_DIR)}"

BBKIT_BIN=${BBKIT_BIN_DIR:-$BBKIT_BUILD_DIR/bin}
PATH="$BBKIT_BIN:$PATH"
export PATH
# install-slurm of the installed tree when ctest gives one, else of the sources.
INSTALL_SLURM=$BBKIT_SOURCE_DIR/share/bbkit/slurm/install-slurm
[ -n "${BBKIT_BIN_DIR:-}" ] && INSTALL_SLURM=$BBKIT_BIN_DIR/../share/bbkit/slurm/install-slurm
TRANSCRIPT=${BBKIT_SLURM_TRANSCRIPT:-$BBKIT_BUILD_DIR/tests/slurm/transcript.txt}
SLURM_TEST_USER=bbkit-test
HARNESS_MODE=${HARNESS_MODE:-slurm}
case "$HARNESS_MODE" in slurm | datawarp | standalone | plain) ;; *) echo "HARNESS_MODE must be slurm, datawarp, standalone or plain" >&2; exit 64 ;; esac

# ---------------------------------------------------------------------------------------------
# The Slurm release

# The release the suites run against ("22.05"): $SLURM_RELEASE when the caller says (test roots
# of other releases export it), else what slurmctld -V reports. Scenarios use it only where the
# releases differ.
slurm_release() {
  [ -n "${SLURM_RELEASE:-}" ] ||
    SLURM_RELEASE=$(slurmctld -V 2>/dev/null | sed -n 's/^slurm[^ ]* \([0-9]*\.[0-9]*\).*/\1/p' | head -n 1)
  echo "$SLURM_RELEASE"
}

SLURM_RELEASE=$(slurm_release)
export SLURM_RELEASE

# release_at_least X.Y: whether the release is X.Y or later.
release_at_least() {
  local have want=$1
  have=$(slurm_release)
  [ -n "$have" ] || return 1
  [ $((10#${have%%.*} * 100 + 10#${have#*.})) -ge $((10#${want%%.*} * 100 + 10#${want#*.})) ]
}

# ---------------------------------------------------------------------------------------------
# Transcript and commands

transcript() { printf '%s\n' "$@" >>"$TRANSCRIPT"; }

# Runs a command (as root, or as the test user with -u) from the jobs directory; sets
# $output (stdout and stderr) and $status like bats' run, and records both in the transcript.
slurm_run() {
  local who='#' prefix=()
  if [ "${1:-}" = -u ]; then
    shift
    who='$'
    prefix=(setpriv --reuid="$TEST_UID" --regid="$TEST_GID" --init-groups
      env HOME="$JOBS_DIR" USER="$SLURM_TEST_USER" LOGNAME="$SLURM_TEST_USER")
  fi
  status=0
  output=$(cd "$JOBS_DIR" && "${prefix[@]}" "$@" 2>&1) || status=$?
  if [ "$who" = '$' ]; then who="$SLURM_TEST_USER\$"; else who="root#"; fi
  transcript "$who $(printf '%q ' "$@" | sed 's/ $//')"
  [ -n "$output" ] && transcript "$output"
  [ "$status" -ne 0 ] && transcript "(exit $status)"
  lines=()
  [ -n "$output" ] && mapfile -t lines <<<"$output"
  return 0
}

# Submits as the test user; sets $JOB (the id) on success.
submit() {
  JOB=
  slurm_run -u sbatch "$@"
  if [ "$status" -eq 0 ]; then
    JOB=$(sed -n 's/^Submitted batch job \([0-9]\+\)$/\1/p' <<<"$output")
    [ -n "$JOB" ] || fail "no job id in sbatch's output: $output"
  fi
}

# One field of `scontrol -o show job ID` (empty when absent).
job_field() {
  scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}

# Waits until the job's "JobState Reason BurstBufferState" (as scontrol -o shows them) matches
# the extended regular expression; logs every distinct squeue line and scontrol state seen.
wait_job() {
  local job=$1 pattern=$2 timeout=${3:-60} deadline line last_line='' sq last_sq=''
  deadline=$((SECONDS + timeout))
  while :; do
    line="JobState=$(job_field "$job" JobState) Reason=$(job_field "$job" Reason) BurstBufferState=$(job_field "$job" BurstBufferState)"
    sq=$(squeue -h -j "$job" -o '%i %u %T %r' 2>/dev/null || true)
    if [ "$sq" != "$last_sq" ] && [ -n "$sq" ]; then
      transcript "root# squeue -h -j $job -o '%i %u %T %r'" "$sq"
      last_sq=$sq
    fi
    if [ "$line" != "$last_line" ]; then
      transcript "root# scontrol -o show job $job   # $(date +%T.%3N) $line"
      last_line=$line
    fi
    if [[ $line =~ $pattern ]]; then
      # shellcheck disable=SC2034 # read by the suites (nodelocal.bats)
      JOB_STATE_LINE=$line
      return 0
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      transcript "(gave up after ${timeout}s waiting for /$pattern/)"
      fail "job $job: waited ${timeout}s for /$pattern/, last seen: $line"
      return 1
    fi
    sleep 0.2
  done
}

# Every scenario's set-up and teardown (the suites' setup and teardown call them): its name and
# time in the transcript; afterwards, a mover paused by the scenario resumed (a failed scenario
# must not leave one stopped), the test user's jobs cancelled and gone (one scenario's leftovers
# must not starve the next), and on failure the end of slurmctld.log on the terminal.
scenario_setup() {
  transcript "" "== $BATS_TEST_DESCRIPTION"
  SCENARIO_START=$SECONDS
}

scenario_teardown() {
  # shellcheck disable=SC2086
  [ -z "${PAUSED_PIDS:-}" ] || kill -CONT $PAUSED_PIDS 2>/dev/null || true
  cancel_leftover_jobs
  if [ -n "${BATS_TEST_COMPLETED:-}" ]; then
    transcript "-- passed in $((SECONDS - ${SCENARIO_START:-$SECONDS})) s"
  else
    transcript "-- FAILED after $((SECONDS - ${SCENARIO_START:-$SECONDS})) s"
    {
      echo "--- slurmctld.log (last 60 lines)"
      tail -n 60 "$SLURM_DIR/log/slurmctld.log" 2>/dev/null
    } >&3 2>/dev/null || true
  fi
}

# A job script in $JOBS_DIR owned by the test user: the lines given, then `set -e` and the body
# read from stdin.
job_script() {
  local file=$JOBS_DIR/$1
  shift
  {
    echo '#!/bin/bash'
    printf '#SBATCH --output=%s/%%x-%%j.out\n' "$JOBS_DIR"
    for line in "$@"; do printf '%s\n' "$line"; done
    echo 'set -euo pipefail'
    cat
  } >"$file"
  chown "$SLURM_TEST_USER:" "$file"
  echo "$file"
}

# Polls a command until it succeeds; fails the test after the timeout.
wait_until() {
  local timeout=$1 what=$2 deadline
  shift 2
  deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      fail "waited ${timeout}s for $what"
      return 1
    fi
    sleep 0.2
  done
}

# Pool figures as Slurm reports them: `TotalSpace FreeSpace UsedSpace` of one pool.
burst_pool() {
  scontrol show burst 2>/dev/null |
    sed -n "s/^ *PoolName\[[0-9]*\]=$1 .*TotalSpace=\([^ ]*\) FreeSpace=\([^ ]*\) UsedSpace=\([^ ]*\).*/\1 \2 \3/p"
}

# `scontrol show burst`'s layout, from its text on stdin: each line's field names in order and
# its indentation, without the values.
burst_layout() {
  sed -E 's/=[^ ]*/=/g'
}

# bbkit's own figures for a pool from `bb-pool --json list`: "total used trash free".
bbkit_pool() {
  bb-pool --json list | python3 -c '
import json, sys
data = json.load(sys.stdin)
pools = data["pools"] if isinstance(data, dict) else data
for p in pools:
    if p.get("name") == sys.argv[1]:
        print(p.get("total"), p.get("used"), p.get("trash"), p.get("free"))
' "$1"
}

# The staging progress of a job's buffer from `bb-stat --json job ID`: "bytes_done bytes_total"
# (nothing while there is none).
stage_progress() {
  bb-stat --json job "$1" 2>/dev/null | python3 -c '
import json, sys
p = json.load(sys.stdin).get("progress")
if p:
    print(p["bytes_done"], p["bytes_total"])
'
}

# Every job of the test user cancelled and gone from the queue, with its buffer torn down:
# one scenario's leftovers must not starve the next one.
cancel_leftover_jobs() {
  local jobs
  # No cluster, no jobs (a scenario may have torn it down); a client without its slurm.conf
  # would look for a controller in DNS for a minute.
  [ -e "${SLURM_CONF:-}" ] || return 0
  jobs=$(squeue -h -u "$SLURM_TEST_USER" -o %i 2>/dev/null | tr '\n' ' ')
  [ -n "${jobs// /}" ] || return 0
  transcript "(cleaning up after the test: jobs $jobs)"
  scancel --hurry -u "$SLURM_TEST_USER" 2>/dev/null || true
  local deadline=$((SECONDS + 60))
  # shellcheck disable=SC2143 # grep -q would end squeue early: SIGPIPE, and a failing pipeline
  while [ -n "$(squeue -h -u "$SLURM_TEST_USER" -t all -o '%i %T' 2>/dev/null | grep -v -E 'COMPLETED|CANCELLED|FAILED|TIMEOUT')" ] &&
    [ "$SECONDS" -lt "$deadline" ]; do
    sleep 0.2
  done
}

# ---------------------------------------------------------------------------------------------
# The cluster

# Ports nothing listens on, chosen by the kernel.
free_ports() {
  python3 -c '
import socket
socks = []
for _ in range(int(__import__("sys").argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
' "$1"
}

ensure_packages() {
  local cmd missing=0
  for cmd in munged mungekey slurmctld slurmd sbatch squeue scontrol luac5.1 sudo setpriv; do
    command -v "$cmd" >/dev/null || missing=1
  done
  [ -e /usr/lib/x86_64-linux-gnu/slurm-wlm/burst_buffer_lua.so ] || missing=1
  if [ "$missing" -eq 1 ]; then
    "$BBKIT_SOURCE_DIR/scripts/install-deps" >&2
  fi
}

# The test user; with SLURM_TEST_UID (tests/slurm-release gives each release's root its own), that
# uid: the releases' suites run at once, and a scenario's `pkill -u` (nodelocal.bats i) must reach
# no other suite's processes, as a uid two roots both chose would.
ensure_test_user() {
  if ! id "$SLURM_TEST_USER" >/dev/null 2>&1; then
    useradd --system ${SLURM_TEST_UID:+--uid "$SLURM_TEST_UID"} --no-create-home \
      --shell /usr/sbin/nologin "$SLURM_TEST_USER" 2>/dev/null || id "$SLURM_TEST_USER" >/dev/null
  fi
  TEST_UID=$(id -u "$SLURM_TEST_USER")
  TEST_GID=$(id -g "$SLURM_TEST_USER")
  export TEST_UID TEST_GID
}

# The pid recorded in a pid file, if that process still runs a command naming `what`.
our_pid() {
  local file=$1 what=$2 pid
  [ -s "$file" ] || return 1
  pid=$(tr -dc '0-9' <"$file")
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$what" || return 1
  echo "$pid"
}

# kill_and_wait PID WHAT: SIGKILL, then waits (10 s at most) until the process is gone (a zombie
# counts: it holds nothing); WHAT names it if it does not die.
kill_and_wait() {
  local pid=$1 what=$2
  kill -KILL "$pid"
  wait_until 10 "$what $pid to die" sh -c "! [ -d /proc/$pid ] || grep -q '^State:.*Z' /proc/$pid/status"
}

# SIGTERM, then SIGKILL after `grace` seconds, for one daemon started from a pid file.
stop_daemon() {
  local file=$1 what=$2 grace=${3:-15} pid i
  pid=$(our_pid "$file" "$what") || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < grace * 10; i++)); do
    [ -e "/proc/$pid" ] && ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}

# slurmscriptd is slurmctld's child; a SIGKILLed slurmctld may leave it behind.
scriptd_pids() {
  local ctld=$1 p
  for p in /proc/[0-9]*; do
    [ "$(awk '{print $4}' "$p/stat" 2>/dev/null)" = "$ctld" ] || continue
    tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -q slurmscriptd && echo "${p#/proc/}"
  done
  return 0
}

# The cluster's layout in slurm.conf (write_slurm_conf's default): one node on loopback.
loopback_topology() {
  local hw
  # The node as slurmd sees it (CPUs, sockets, cores, threads, memory), renamed to localhost.
  hw=$(slurmd -C | head -n 1 | sed 's/^NodeName=[^ ]* //; s/ UpTime=.*//')
  cat <<EOF
# one node on loopback
SlurmctldHost=localhost(127.0.0.1)
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
SlurmdSpoolDir=$SLURM_DIR/spool/slurmd
SlurmdPidFile=$SLURM_DIR/run/slurmd.pid
SlurmdLogFile=$SLURM_DIR/log/slurmd.log
NodeName=localhost NodeAddr=127.0.0.1 $hw State=UNKNOWN
PartitionName=e2e Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
}

# slurm.conf for SlurmUser (root by default); `topology` names the function that prints the
# cluster's layout: controller address, the node daemons' files, nodes and partition
# (loopback_topology; nodes.bash has its own). STATE_SAVE_LOCATION and CTLD_SUBDIR (a
# directory under run/ and log/ for slurmctld's pid and log files) serve failover.bash's two
# controllers, which see their own directory there.
write_slurm_conf() {
  local slurm_user=${1:-root} topology=${2:-loopback_topology}
  {
    echo "# bbkit end-to-end suite ($SLURM_DIR)"
    "$topology"
    cat <<EOF
ClusterName=bbkit-e2e
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=$slurm_user
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SLURM_DIR/munge/munge.socket.2
CredType=cred/munge
StateSaveLocation=${STATE_SAVE_LOCATION:-$SLURM_DIR/state}
SlurmctldPidFile=$SLURM_DIR/run/${CTLD_SUBDIR:+$CTLD_SUBDIR/}slurmctld.pid
SlurmctldLogFile=$SLURM_DIR/log/${CTLD_SUBDIR:+$CTLD_SUBDIR/}slurmctld.log
SlurmctldDebug=debug
SlurmdDebug=info
DebugFlags=BurstBuffer
PlugStackConfig=$SLURM_DIR/etc/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
EOF
  } >"$SLURM_DIR/etc/slurm.conf"
  # From 24.05 slurmd loads a cgroup plugin unless told not to (none is wanted here: no
  # cgroups are mounted in a release's root).
  if release_at_least 24.05; then
    echo "CgroupPlugin=disabled" >"$SLURM_DIR/etc/cgroup.conf"
  fi
  if [ "$HARNESS_MODE" = slurm ]; then
    printf '%s\n' BurstBufferType=burst_buffer/lua CliFilterPlugins=cli_filter/lua >>"$SLURM_DIR/etc/slurm.conf"
  elif [ "$HARNESS_MODE" = datawarp ]; then
    printf '%s\n' BurstBufferType=burst_buffer/datawarp CliFilterPlugins=cli_filter/lua >>"$SLURM_DIR/etc/slurm.conf"
  elif [ "$HARNESS_MODE" = standalone ]; then
    # DebugFlags=Script logs every PrologSlurmctld/EpilogSlurmctld run in slurmctld.log.
    sed -i 's/^DebugFlags=BurstBuffer$/DebugFlags=Script/' "$SLURM_DIR/etc/slurm.conf"
    echo "PrologEpilogTimeout=$(prolog_epilog_timeout)" >>"$SLURM_DIR/etc/slurm.conf"
  fi
}

# Standalone mode: Slurm's limit on PrologSlurmctld and EpilogSlurmctld (PrologEpilogTimeout,
# which every release reads: from 25.05 as what PrologTimeout and EpilogTimeout fall back to),
# with room above what write_bbkit_conf's [timeouts] let the scripts take (queue + stage_in +
# other, other + stage_out + other); install-slurm --standalone checks it.
prolog_epilog_timeout() {
  echo $(((${BBKIT_SLURM_QUEUE_SECONDS:-150} + 240 + 100) * 2))
}

# bbkit's configuration in Slurm mode: pools are directories inside the temporary directory.
# Timeouts stay below burst_buffer.conf's so Slurm reports bbkit's message, not a kill.
# In standalone mode every directive dialect is accepted (the default), and a job short of
# space waits in the pool's queue, inside its PrologSlurmctld, up to [timeouts] queue seconds.
write_bbkit_conf() {
  local release mode_lines='mode = "slurm"
directives = ["BB_LUA"]' queue_line=''
  if [ "$HARNESS_MODE" = standalone ]; then
    mode_lines='mode = "standalone"'
    queue_line="queue = ${BBKIT_SLURM_QUEUE_SECONDS:-150}"
  elif [ "$HARNESS_MODE" = datawarp ]; then
    mode_lines="mode = \"datawarp\"
flags = [${BBKIT_DATAWARP_FLAGS:-\"EnablePersistent\"}]"
  fi
  release=$(slurm_release)
  cat >"$BBKIT_CONFIG" <<EOF
state_dir = "$SLURM_DIR/bbkit/state"
$mode_lines
cluster = "e2e"
state_group = "slurm"
${release:+slurm_release = \"$release\"}
slurm_conf = "$SLURM_CONF"

[timeouts]
stage_in = 240
stage_out = 240
other = 100
validate = 4
$queue_line

[limits]
mover_threads = 2

[[pool]]
name = "pool1"
path = "$SLURM_DIR/pools/pool1"
capacity = "64MiB"
granularity = "1MiB"

[[pool]]
name = "small"
path = "$SLURM_DIR/pools/small"
capacity = "10MiB"
granularity = "1MiB"

[[pool]]
name = "slow"
path = "$SLURM_DIR/pools/slow"
capacity = "$SLOW_POOL_CAPACITY"
granularity = "1MiB"
direct_io = true
EOF
  # In datawarp mode also a pool staged by transfer jobs on the one node (datawarp.bats o).
  if [ "$HARNESS_MODE" = datawarp ]; then
    cat >>"$BBKIT_CONFIG" <<EOF

[[pool]]
name = "xfer"
path = "$SLURM_DIR/pools/xfer"
capacity = "32MiB"
granularity = "1MiB"
staging = "slurm"
transfer_partition = "e2e"
transfer_nodes = 1
EOF
  fi
}

# The pools write_bbkit_conf configures.
harness_pools() {
  echo pool1 small slow
  [ "$HARNESS_MODE" != datawarp ] || echo xfer
}

start_munge() {
  mungekey --create --keyfile="$SLURM_DIR/munge/munge.key" >/dev/null
  munged --socket="$SLURM_DIR/munge/munge.socket.2" --key-file="$SLURM_DIR/munge/munge.key" \
    --pid-file="$SLURM_DIR/run/munged.pid" --log-file="$SLURM_DIR/log/munged.log" \
    --seed-file="$SLURM_DIR/munge/munged.seed"
  wait_until 10 "munged's socket" test -S "$SLURM_DIR/munge/munge.socket.2"
}

# slurmctld inherits this environment, and slurmscriptd and every hook inherit slurmctld's.
# Under an unprivileged SlurmUser (slurm.conf's) it runs where /etc/bbkit/bbkit.toml is
# $BBKIT_CONFIG, the only configuration the tools read through sudo. With HARNESS_CTLD_ENV=bare
# it gets no environment at all, as Slurm 24.11.0 and 24.11.1 start the hooks in slurmscriptd
# (no PATH, no BBKIT_CONFIG).
start_slurmctld() {
  launch_slurmctld
  wait_until 30 "slurmctld to answer" scontrol ping
  transcript "root# slurmctld -f $SLURM_CONF   # started, pid $(cat "$SLURM_DIR/run/slurmctld.pid" 2>/dev/null)"
}

# A command slurmctld is started through, before the harness's own (nodes.bash sets one).
CTLD_WRAP=()

# Starts slurmctld (it daemonizes) without waiting for it to answer.
launch_slurmctld() {
  local wrap=("${CTLD_WRAP[@]}") user environment
  user=$(sed -n 's/^SlurmUser=//p' "$SLURM_CONF" | tail -n 1)
  if [ "$HARNESS_MODE" = standalone ]; then
    site_paths_wrap
    wrap+=("${SITE_WRAP[@]}")
  elif [ "${user:-root}" != root ]; then
    wrap+=("$BBKIT_SOURCE_DIR/tests/with-default-config" "$BBKIT_CONFIG")
  fi
  environment=(PATH="$BBKIT_BIN:/usr/sbin:/usr/bin:/sbin:/bin" BBKIT_CONFIG="$BBKIT_CONFIG"
    SLURM_CONF="$SLURM_CONF" LANG=C.UTF-8)
  [ "${HARNESS_CTLD_ENV:-}" != bare ] || environment=()
  (
    cd "$SLURM_DIR/log" &&
      "${wrap[@]}" env -i "${environment[@]}" "$(command -v slurmctld)" -f "$SLURM_CONF"
  )
}

# Standalone mode: the daemons (and every script and job they start) see this cluster's
# slurm.conf and bbkit.toml at the default paths, /etc/slurm/slurm.conf and
# /etc/bbkit/bbkit.toml, in a private mount namespace (Slurm 22.05 runs PrologSlurmctld and
# EpilogSlurmctld with the job's variables only: no SLURM_CONF, no BBKIT_CONFIG). Sets SITE_WRAP.
site_paths_wrap() {
  mkdir -p /etc/slurm
  # shellcheck disable=SC2016 # expanded by the inner shell
  SITE_WRAP=("$BBKIT_SOURCE_DIR/tests/with-default-config" "$BBKIT_CONFIG"
    sh -c 'mount --bind "$0" /etc/slurm && exec "$@"' "$SLURM_DIR/etc")
}

# start_slurmd [NODE [COMMAND...]]: slurmd for NODE (localhost), started through COMMAND when
# one is given (nodes.bash: the node's namespaces); returns once the node is idle.
# shellcheck disable=SC2120 # NODE and COMMAND are optional: nodes.bash passes them
start_slurmd() {
  local node=${1:-localhost} wrap=()
  shift || true
  wrap=("$@")
  if [ "$HARNESS_MODE" = standalone ]; then
    site_paths_wrap
    wrap+=("${SITE_WRAP[@]}")
  fi
  local log
  log=$(sed -n 's/^SlurmdLogFile=//p' "$SLURM_CONF" | tail -n 1)
  log=${log/\%n/$node}
  if ! (cd "$SLURM_DIR/log" && "${wrap[@]}" env -i PATH="/usr/sbin:/usr/bin:/sbin:/bin" SLURM_CONF="$SLURM_CONF" \
    slurmd -f "$SLURM_CONF" -N "$node"); then
    fail "slurmd -N $node did not start: $(grep -E 'error|fatal' "$log" 2>/dev/null | tail -n 3 | tr '\n' ' ')"
    return 1
  fi
  wait_until 30 "node $node to be idle" node_idle "$node"
}

node_idle() { sinfo -h -n "${1:-localhost}" -o '%T' | grep -qx 'idle'; }

# Stops slurmctld (and the slurmscriptd it forked) by its pid file.
stop_slurmctld() {
  local sig=${1:-TERM} pid scriptd
  pid=$(our_pid "$SLURM_DIR/run/slurmctld.pid" "$SLURM_CONF") || return 0
  scriptd=$(scriptd_pids "$pid")
  if [ "$sig" = KILL ]; then
    kill_and_wait "$pid" slurmctld
  else
    stop_daemon "$SLURM_DIR/run/slurmctld.pid" "$SLURM_CONF" 60
  fi
  local p
  for p in $scriptd; do
    if [ -d "/proc/$p" ]; then kill -KILL "$p" 2>/dev/null || true; fi
  done
  rm -f "$SLURM_DIR/run/slurmctld.pid"
}

restart_slurmctld() {
  transcript "root# (restart slurmctld: ${1:-restart})"
  stop_slurmctld "${2:-TERM}"
  start_slurmctld
}

# Waits for a cancelled job's buffer to be torn down (BurstBufferState=complete), then for the
# job to be CANCELLED with it. The 22.05 race (measured with Slurm 22.05 on this machine): the
# kill meant for a cancelled stage-in also hits the teardown that follows, before the Lua runs,
# and the buffer stays in `teardown` until slurmctld restarts. Only when slurmctld logged exactly
# that is it restarted, as install-slurm tells a site to, which re-runs teardown; bbkit's own
# state is asserted afterwards either way. SECONDS: how long the teardown may take (30).
wait_teardown_after_cancel() {
  local job=$1 deadline=$((SECONDS + ${2:-30}))
  while [ "$SECONDS" -lt "$deadline" ]; do
    [ "$(job_field "$job" BurstBufferState)" = complete ] && break
    sleep 0.2
  done
  if [ "$(job_field "$job" BurstBufferState)" = teardown ] &&
    grep -q "teardown for JobId=$job terminated by slurmctld" "$SLURM_DIR/log/slurmctld.log"; then
    transcript "(Slurm 22.05 race: teardown of job $job was killed with its cancelled stage-in; restarting slurmctld re-runs it)"
    restart_slurmctld "teardown for JobId=$job terminated by slurmctld"
  fi
  wait_job "$job" 'JobState=CANCELLED .*BurstBufferState=complete' 60
}

stop_cluster() {
  [ -n "${SLURM_DIR:-}" ] && [ -d "$SLURM_DIR/run" ] || return 0
  stop_slurmctld TERM
  # One slurmd per node: slurmd.pid on loopback, slurmd-NODE.pid in nodes.bash's cluster.
  local f
  for f in "$SLURM_DIR"/run/slurmd*.pid; do
    stop_daemon "$f" "$SLURM_CONF" 30
  done
  stop_daemon "$SLURM_DIR/run/munged.pid" "$SLURM_DIR/munge" 10
  # Job steps and their children run under slurmstepd, which slurmd normally stops; anything
  # left with this cluster's SLURM_CONF and a job id in its environment is ours.
  local p
  for p in /proc/[0-9]*; do
    tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qxF "SLURM_CONF=$SLURM_CONF" || continue
    tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -q '^SLURM_JOB_ID=' || continue
    kill -KILL "${p#/proc/}" 2>/dev/null || true
  done
}

# A guard that stops the cluster if the suite's process disappears without its teardown
# (for example when ctest kills it at its timeout): the daemons are detached from the suite.
# Last it runs run/guard-hook when there is one (nodes.bash's removes the nodes' network).
# The guard is detached too (started from a subshell that exits at once, in a session of its
# own): ctest's timeout kills the suite's whole process tree, which a child of the suite's
# shell is part of, and a 26.05 transfer suite's cluster once outlived its killed guard.
start_guard() {
  local owner=$1 i
  rm -f "$SLURM_DIR/run/guard.pid"
  # shellcheck disable=SC2016 # the inner shell expands these
  (setsid bash -c '
    owner=$1 dir=$2 conf=$3
    echo $$ >"$dir/run/guard.pid"
    start=$(awk "{print \$22}" /proc/$owner/stat)
    while [ "$(awk "{print \$22}" /proc/$owner/stat 2>/dev/null)" = "$start" ]; do
      [ -e "$dir/run/guard.stop" ] && exit 0
      sleep 1
    done
    for f in "$dir/run/slurmctld.pid" "$dir"/run/slurmd*.pid "$dir/run/munged.pid"; do
      [ -s "$f" ] || continue
      pid=$(tr -dc 0-9 <"$f")
      tr "\0" " " </proc/$pid/cmdline 2>/dev/null | grep -qF -- "$dir" || continue
      kill -TERM "$pid"; sleep 5; kill -KILL "$pid" 2>/dev/null
    done
    if [ -s "$dir/run/sudoers-dropin" ]; then
      f=$(cat "$dir/run/sudoers-dropin")
      case "$f" in /etc/sudoers.d/bbkit-e2e-*) rm -f "$f" ;; esac
    fi
    [ ! -x "$dir/run/guard-hook" ] || "$dir/run/guard-hook"
  ' bbkit-slurm-guard "$owner" "$SLURM_DIR" "$SLURM_CONF" </dev/null >/dev/null 2>&1 &)
  for ((i = 0; i < 100; i++)); do
    [ ! -s "$SLURM_DIR/run/guard.pid" ] || return 0
    sleep 0.05
  done
  fail "the cluster's guard did not start"
}

# Installs bbkit's Slurm scripts next to slurm.conf, as a site would, for the suite's Slurm
# release. With an unprivileged SlurmUser the tools run through sudo and read only
# /etc/bbkit/bbkit.toml, and in standalone mode the controller scripts Slurm starts with no
# environment read it too: install-slurm (and slurmctld, see start_slurmctld) then run where that
# is $BBKIT_CONFIG (with-default-config). With HARNESS_INSTALL_BARE=1 (root only) neither
# --config nor --bindir is given: install-slurm finds both as the tools would ($BBKIT_CONFIG,
# the tools of its installation or of PATH).
install_bbkit_scripts() {
  local user=${1:-root} args wrap=()
  shift || true
  # Any further arguments go to install-slurm as they are.
  args=(--slurm-conf-dir "$SLURM_DIR/etc" --slurm-user "$user" --slurm-release "$(slurm_release)" "$@")
  [ "${HARNESS_INSTALL_BARE:-0}" = 1 ] || args+=(--bindir "$BBKIT_BIN")
  if [ "$HARNESS_MODE" = standalone ]; then
    args=(--standalone "${args[@]}")
  elif [ "$HARNESS_MODE" = datawarp ]; then
    args=(--plugin datawarp "${args[@]}")
  fi
  if [ "$user" != root ] || [ "$HARNESS_MODE" = standalone ]; then
    wrap=("$BBKIT_SOURCE_DIR/tests/with-default-config" "$BBKIT_CONFIG")
  elif [ "${HARNESS_INSTALL_BARE:-0}" != 1 ]; then
    args+=(--config "$BBKIT_CONFIG")
  fi
  "${wrap[@]}" "${BBKIT_INSTALL_SLURM:-$INSTALL_SLURM}" "${args[@]}" >"$SLURM_DIR/log/install-slurm.log" 2>&1 ||
    { cat "$SLURM_DIR/log/install-slurm.log" >&2; return 1; }
  transcript "root# install-slurm $(printf '%q ' "${args[@]}")"
  if [ "$HARNESS_MODE" = standalone ]; then
    # The slurm.conf lines install-slurm --standalone prints, as a site would add them.
    local lines
    lines=$(grep -E '^(PrologSlurmctld|EpilogSlurmctld|TaskProlog)=/' "$SLURM_DIR/log/install-slurm.log")
    [ "$(printf '%s\n' "$lines" | wc -l)" -eq 3 ] ||
      { cat "$SLURM_DIR/log/install-slurm.log" >&2; echo "install-slurm --standalone printed no slurm.conf lines" >&2; return 1; }
    printf '%s\n' "$lines" >>"$SLURM_CONF"
    transcript "$lines"
  fi
}

# A stage-in that lasts seconds without any help from bbkit: one file of zeros copied into the
# "slow" pool, which uses O_DIRECT (direct_io), so the copy runs at the disk's speed rather than
# the page cache's. The disk is timed with three O_DIRECT writes of 64 MiB and the fastest one
# counts (other work on the machine only slows it down): the file is sized to take about
# $BBKIT_SLURM_SLOW_SECONDS (15) seconds at that speed, 512 MiB to 6 GiB. Sets SLOW_MIB and the
# pool's capacity.
calibrate_slow_stage() {
  local target=${BBKIT_SLURM_SLOW_SECONDS:-15} t0 t1 best=0 i mib
  for i in 1 2 3; do
    t0=$(date +%s%N)
    dd if=/dev/zero of="$SLURM_DIR/pools/slow/.calibrate" bs=4M count=16 oflag=direct status=none
    t1=$(date +%s%N)
    rm -f "$SLURM_DIR/pools/slow/.calibrate"
    mib=$((64 * 1000000000 / (t1 - t0 + 1)))  # MiB per second
    ((mib > best)) && best=$mib
  done
  mib=$((best * target))
  ((mib < 512)) && mib=512
  ((mib > 6144)) && mib=6144
  SLOW_MIB=$((mib / 4 * 4))
  SLOW_POOL_CAPACITY="$((SLOW_MIB + 64))MiB"
  export SLOW_MIB SLOW_POOL_CAPACITY
  transcript "(disk: up to $best MiB/s with O_DIRECT; slow stage-in file: $SLOW_MIB MiB)"
}

# The cluster's new temporary directory and its variables (SLURM_DIR, SLURM_CONF, BBKIT_CONFIG,
# JOBS_DIR, DATA_DIR, CTLD_PORT, SLURMD_PORT); nothing is started.
new_cluster_dir() {
  SLURM_DIR=$(mktemp -d /tmp/bbkit-slurm.XXXXXX)
  export SLURM_DIR
  # The job user execs its script from the spool and reads slurm.conf and the munge socket:
  # every directory on those paths is 0755. Slurm's state directory stays 0700.
  chmod 0755 "$SLURM_DIR"
  # shellcheck disable=SC2174 # $SLURM_DIR is 0755 already (above), and so are its parents
  mkdir -m 0755 -p "$SLURM_DIR"/{etc,munge,run,log,spool/slurmd,bbkit,pools,jobs,data}
  mkdir -m 0700 "$SLURM_DIR/state"
  chmod 0755 "$SLURM_DIR/spool"
  : >"$SLURM_DIR/etc/plugstack.conf"
  SLURM_CONF=$SLURM_DIR/etc/slurm.conf
  BBKIT_CONFIG=$SLURM_DIR/bbkit/bbkit.toml
  JOBS_DIR=$SLURM_DIR/jobs
  DATA_DIR=$SLURM_DIR/data
  export SLURM_CONF BBKIT_CONFIG JOBS_DIR DATA_DIR
  chown "$SLURM_TEST_USER:" "$JOBS_DIR" "$DATA_DIR"
  read -r CTLD_PORT SLURMD_PORT < <(free_ports 2)
  export CTLD_PORT SLURMD_PORT
}

# Sets up everything in a new temporary directory and starts the daemons.
start_cluster() {
  local slurm_user=${1:-root}
  ensure_packages
  ensure_test_user
  new_cluster_dir
  local pool
  for pool in $(harness_pools); do mkdir -p "$SLURM_DIR/pools/$pool"; done
  calibrate_slow_stage
  write_slurm_conf "$slurm_user"
  write_bbkit_conf
  for pool in $(harness_pools); do bb-pool init "$pool" >/dev/null; done
  install_bbkit_scripts "$slurm_user"
  start_guard "$$"
  start_munge
  start_slurmctld
  # shellcheck disable=SC2119 # the one node, localhost
  start_slurmd
}

# Restarts slurmctld and slurmd with an unprivileged SlurmUser: bbkit's scripts reinstalled for
# it (the hooks then call the tools through sudo -n), install-slurm's sudoers drop-in copied to
# /etc/sudoers.d under a unique name (removed by finish_cluster), and Slurm's state directory
# and logs owned by that user. bbkit's state directory stays root's: the in-slurmctld hooks,
# running as SlurmUser, only open pools.json and env/<job>.env there (search permission).
use_slurm_user() {
  local user=$1 dropin
  stop_slurmctld TERM
  stop_daemon "$SLURM_DIR/run/slurmd.pid" "$SLURM_CONF" 30
  write_slurm_conf "$user"
  install_bbkit_scripts "$user"
  [ -s "$SLURM_DIR/etc/bbkit.sudoers" ] || fail "install-slurm wrote no sudoers drop-in for SlurmUser=$user"
  # sudo skips drop-ins whose name holds a dot; mktemp's suffix has none.
  dropin=$(mktemp /etc/sudoers.d/bbkit-e2e-XXXXXXXX)
  echo "$dropin" >"$SLURM_DIR/run/sudoers-dropin"
  install -m 0440 -o root -g root "$SLURM_DIR/etc/bbkit.sudoers" "$dropin"
  visudo -cf "$dropin" >/dev/null || fail "$dropin does not pass visudo -c"
  transcript "root# install -m 0440 -o root -g root $SLURM_DIR/etc/bbkit.sudoers $dropin"
  chown -R "$user:" "$SLURM_DIR/state"
  chown "$user:" "$SLURM_DIR/log" "$SLURM_DIR/log/slurmctld.log"
  start_slurmctld
  # shellcheck disable=SC2119 # the one node, localhost
  start_slurmd
}

remove_sudoers_dropin() {
  local dropin
  [ -s "$SLURM_DIR/run/sudoers-dropin" ] || return 0
  dropin=$(cat "$SLURM_DIR/run/sudoers-dropin")
  case "$dropin" in /etc/sudoers.d/bbkit-e2e-*) rm -f "$dropin" ;; esac
  rm -f "$SLURM_DIR/run/sudoers-dropin"
}

# Stops every daemon started here and removes the temporary directory (kept with
# BBKIT_SLURM_KEEP=1, or when the daemons refuse to stop).
finish_cluster() {
  [ -n "${SLURM_DIR:-}" ] && [ -d "$SLURM_DIR" ] || return 0
  stop_cluster
  remove_sudoers_dropin
  : >"$SLURM_DIR/run/guard.stop"
  # It looks for guard.stop once a second; the directory may be gone by then.
  stop_daemon "$SLURM_DIR/run/guard.pid" bbkit-slurm-guard 2
  if [ -d "${BBKIT_BUILD_DIR}/tests/slurm" ]; then
    # Named after the suite's transcript (transcript-datawarp.txt: slurmctld-datawarp.log), so
    # that the next suite's logs do not replace a failed one's.
    local tag
    tag=$(basename "${TRANSCRIPT:-transcript.txt}" .txt)
    tag=${tag#transcript}
    cp "$SLURM_DIR/log/slurmctld.log" "$BBKIT_BUILD_DIR/tests/slurm/slurmctld$tag.log" 2>/dev/null || true
    local f
    for f in "$SLURM_DIR"/log/slurmd*.log; do
      [ -e "$f" ] || continue
      cp "$f" "$BBKIT_BUILD_DIR/tests/slurm/$(basename "$f" .log)$tag.log" 2>/dev/null || true
    done
    # bbkit's own log (audit.log: which tool did what to which buffer, and when).
    if [ -d "$SLURM_DIR/bbkit/state/log" ]; then
      rm -rf "$BBKIT_BUILD_DIR/tests/slurm/bbkit-log$tag"
      cp -r "$SLURM_DIR/bbkit/state/log" "$BBKIT_BUILD_DIR/tests/slurm/bbkit-log$tag" 2>/dev/null || true
    fi
  fi
  if [ "${BBKIT_SLURM_KEEP:-0}" != 1 ]; then
    rm -rf "$SLURM_DIR"
  fi
}
