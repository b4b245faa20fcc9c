# Two Slurm controllers and bbkit's state moving between them (bbkit(7), STATE DIRECTORY,
# "Controller failover"), built on nodes.bash's cluster: the controllers c1 (primary) and c2
# (backup) each run slurmctld in network, mount, UTS and PID namespaces of their own on the
# cluster's bridge (c1 at NET.2, c2 at NET.3), one slurmd runs in node n1's. What the two
# controllers share, as a site's two hosts share a failover volume:
# - $SLURM_DIR/shared, a tmpfs mounted on the host, which both see: Slurm's StateSaveLocation
#   (shared/slurm) and bbkit's state directory (shared/bbkit/state), so install-slurm's check
#   (one volume, not the root file system) passes as at a site;
# - the pool (pools/pool1) and the data, in the host's directories.
# What each has of its own, as a host has: its host name, address and processes (a controller
# neither sees nor signals the other's: a PID namespace each, with its own /proc), slurmctld's
# pid and log files (run/ctld-cK and log/ctld-cK, seen at run/ctld and log/ctld:
# write_slurm_conf's CTLD_SUBDIR), and root's bbkit directory ($SLURM_DIR/bbkit, bound from
# ctl/cK/bbkit): bbkit.toml, the record key (copied, as a site copies it) and the host's
# controller token beside it. Slurm runs with burst_buffer/lua and bbkit's scripts as
# install-slurm installs them, with the SlurmctldPrimaryOnProg and OffProg lines it prints for
# two controllers.
#
# A controller "crashes" (crash_controller: SIGKILL of its slurmctld, whose slurmscriptd then
# kills the hooks, as Slurm does), "hangs or is cut off" (freeze_controller: every process of
# the host stopped, its locks and open files kept, its link to the bridge down), "reboots"
# (reboot_controller: every process left killed, slurmctld started afresh). The teardown kills whatever is left in the
# namespaces (nodes.bash's remove_node_network) and unmounts the shared volume.

# shellcheck disable=SC2034 # read by harness.bash and nodes.bash
HARNESS_MODE=slurm
# shellcheck disable=SC2034 # read by nodes.bash
NODE_COUNT=1
# shellcheck disable=SC2034 # read by nodes.bash
CONTROLLERS=(c1 c2)
# SlurmctldTimeout: the backup asks the primary every third of it and takes over once neither
# an answer nor the heartbeat file has come for that long.
CTLD_TIMEOUT=${CTLD_TIMEOUT:-6}
load nodes

# The host pids of every process of controller C (those in its network namespace).
ctl_pids() {
  ip netns pids "$(node_netns "$1")" 2>/dev/null || true
}

# The host pid of the process that is pid 1 in C's PID namespace (its "init", a shell that
# stays: slurmctld is its child, so killing slurmctld kills nothing else).
ctl_init_pid() {
  local p
  for p in $(ctl_pids "$1"); do
    if awk '$1 == "NSpid:" && $NF == 1 { found = 1 } END { exit !found }' "/proc/$p/status" 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

# The host pid of C's slurmctld (the init's child running slurmctld -D; fails when none runs).
ctl_slurmctld_pid() {
  local init p
  init=$(ctl_init_pid "$1") || return 1
  for p in $(ctl_pids "$1"); do
    [ "$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null)" = "$init" ] || continue
    { tr '\0' ' ' <"/proc/$p/cmdline"; } 2>/dev/null | grep -q "slurmctld -D -f $SLURM_CONF" || continue
    echo "$p"
    return 0
  done
  return 1
}

# The command that runs another in controller C's namespaces (sets CTL_WRAP): its netns, then
# new mount, UTS and PID namespaces (a /proc of its own), with the cluster's hosts file, C's
# own run/ctld, log/ctld and bbkit directory, and pid 1 a shell that starts the command and
# then only reaps.
ctl_wrap() {
  local c=$1
  # shellcheck disable=SC2016 # expanded by the inner shell
  CTL_WRAP=(nsenter --net="/run/netns/$(node_netns "$c")"
    unshare --mount --uts --pid --fork --mount-proc --propagation private
    sh -c 'echo "$1" >/proc/sys/kernel/hostname && mount --bind "$2" /etc/hosts &&
      mount --bind "$3/run/ctld-$1" "$3/run/ctld" && mount --bind "$3/log/ctld-$1" "$3/log/ctld" &&
      mount --bind "$3/ctl/$1/bbkit" "$3/bbkit" && shift 3 && "$@" &
      while :; do wait; sleep 1; done' sh "$c" "$SLURM_DIR/etc/hosts" "$SLURM_DIR")
}

# Starts controller C's slurmctld (in the foreground of its namespace's init, -D) and waits until
# `scontrol ping` shows it UP.
start_controller() {
  local c=$1 role=primary
  [ "$c" = c1 ] || role=backup
  ctl_wrap "$c"
  (
    cd "$SLURM_DIR/log/ctld-$c" &&
      setsid "${CTL_WRAP[@]}" env -i PATH="$BBKIT_BIN:/usr/sbin:/usr/bin:/sbin:/bin" BBKIT_CONFIG="$BBKIT_CONFIG" \
        SLURM_CONF="$SLURM_CONF" LANG=C.UTF-8 "$(command -v slurmctld)" -D -f "$SLURM_CONF" \
        </dev/null >>"$SLURM_DIR/log/ctld-$c/stderr" 2>&1 &
  )
  wait_until 60 "slurmctld on $c to answer" sh -c "scontrol ping 2>/dev/null | grep -q 'Slurmctld($role) at $c is UP'"
  transcript "root# (slurmctld -D on $c started in its namespaces, pid $(ctl_slurmctld_pid "$c"))"
}

# The host of the state directory's claim, as `bb-pool takeover --holds --json` says (run on
# the host, which holds no claim: it only reads).
claim_holder() {
  bb-pool takeover --holds --json 2>/dev/null | python3 -c '
import json, sys
print((json.load(sys.stdin).get("claim") or {}).get("host", ""))'
}

# Waits until controller C holds bbkit's state directory (its SlurmctldPrimaryOnProg ran).
wait_for_claim() {
  local c=$1 deadline=$((SECONDS + ${2:-60})) holder
  # For the scenarios' teardown (failover.bats, restore_controllers).
  [ "$c" != c2 ] || C2_TOOK_OVER=1
  while holder=$(claim_holder) && [ "$holder" != "$c" ]; do
    [ "$SECONDS" -lt "$deadline" ] || { fail "waited ${2:-60}s for $c to hold bbkit's state directory (held by '${holder}')"; return 1; }
    sleep 0.5
  done
}

# crash_controller C: SIGKILL of C's slurmctld (its slurmscriptd kills every hook it runs).
crash_controller() {
  local c=$1 pid
  pid=$(ctl_slurmctld_pid "$c") || { fail "no slurmctld runs on $c"; return 1; }
  kill_and_wait "$pid" "slurmctld on $c"
  transcript "root# kill -KILL $pid   # slurmctld on $c"
}

# freeze_controller C / thaw_controller C [PID...]: C cut off, as a host that hangs or that the
# network loses, though still alive and reaching the shared volume: every process of C stopped
# (its locks and open files kept) and its link to the bridge down (a client's connection to it
# fails and goes to the other controller, as at a site; a stopped daemon that still accepted
# connections would hold every client until its timeout). thaw_controller resumes them all and
# brings the link up, or resumes only the processes given (C stays cut off).
freeze_controller() {
  local pids
  pids=$(ctl_pids "$1" | tr '\n' ' ')
  # shellcheck disable=SC2086 # a list of pids
  kill -STOP $pids
  ip link set "$NODE_BRIDGE$1" down
  FROZEN_PIDS="${FROZEN_PIDS:-} $pids"
  transcript "root# kill -STOP $pids   # every process on $1" "root# ip link set $NODE_BRIDGE$1 down   # $1 cut off"
}
thaw_controller() {
  local c=$1 pids
  shift
  if [ $# -gt 0 ]; then
    pids="$*"
  else
    pids=$(ctl_pids "$c" | tr '\n' ' ')
    ip link set "$NODE_BRIDGE$c" up
  fi
  # shellcheck disable=SC2086 # a list of pids
  kill -CONT $pids 2>/dev/null || true
  transcript "root# kill -CONT $pids   # on $c"
}

# reboot_controller C: every process left on C killed (its init with them), slurmctld started
# again in new namespaces. As the primary, c1 asks c2 to step down at start (Slurm's
# REQUEST_CONTROL) and takes control back.
reboot_controller() {
  local c=$1 pids i
  for i in $(seq 1 50); do
    pids=$(ctl_pids "$c" | tr '\n' ' ')
    [ -n "${pids// /}" ] || break
    # shellcheck disable=SC2086 # a list of pids
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  ip link set "$NODE_BRIDGE$c" up
  transcript "root# (every process on $c killed: the host reboots)"
  start_controller "$c"
}

# A command inside controller C's namespaces (as its hooks run, with its bbkit directory and
# host name), as root, with the hooks' PATH and BBKIT_CONFIG.
ctl_exec() {
  local c=$1 init
  shift
  init=$(ctl_init_pid "$c") || { echo "no processes on $c" >&2; return 1; }
  nsenter --target "$init" --mount --uts --net --pid --root --wd -- \
    env -i PATH="$BBKIT_BIN:/usr/sbin:/usr/bin:/sbin:/bin" BBKIT_CONFIG="$BBKIT_CONFIG" SLURM_CONF="$SLURM_CONF" "$@"
}

# bbkit for the controllers: one configuration (Slurm mode, state on the shared volume, one pool
# of 64 MiB), the pool made and the record key made on the host, then each controller's copy of
# both.
write_failover_bbkit() {
  local release c
  release=$(slurm_release)
  cat >"$BBKIT_CONFIG" <<EOF
state_dir = "$SLURM_DIR/shared/bbkit/state"
mode = "slurm"
directives = ["BB_LUA"]
cluster = "e2e"
${release:+slurm_release = \"$release\"}

[timeouts]
stage_in = 240
stage_out = 240
other = 100
validate = 4
takeover = 30

[limits]
mover_threads = 2

[[pool]]
name = "pool1"
path = "$SLURM_DIR/pools/pool1"
capacity = "64MiB"
granularity = "1MiB"
EOF
  chmod 0644 "$BBKIT_CONFIG"
  bb-pool init pool1 >/dev/null
  for c in "${CONTROLLERS[@]}"; do
    mkdir -m 0755 "$SLURM_DIR/ctl/$c" "$SLURM_DIR/ctl/$c/bbkit"
    install -m 0644 "$BBKIT_CONFIG" "$SLURM_DIR/ctl/$c/bbkit/bbkit.toml"
    install -m 0400 "$SLURM_DIR/bbkit/record.key" "$SLURM_DIR/ctl/$c/bbkit/record.key"
  done
}

# Sets up the cluster in a new temporary directory and starts munged, c1, c2 and n1's slurmd.
# Where the machine cannot, it starts nothing and sets NODES_SKIP (skip_without_nodes).
start_failover_cluster() {
  local why c lines
  command -v ip >/dev/null || "$BBKIT_SOURCE_DIR/scripts/install-deps" >&2 || true
  why=$(nodes_unsupported)
  if [ -z "$why" ] && ! unshare --pid --fork --mount-proc true 2>/dev/null; then
    why="this kernel cannot make PID namespaces here"
  fi
  if [ -n "$why" ]; then
    NODES_SKIP="no node cluster: $why"
    export NODES_SKIP
    return 0
  fi
  ensure_packages
  ensure_test_user
  new_cluster_dir
  NODE_LOCAL_DIR=$SLURM_DIR/local-nvme
  export NODE_LOCAL_DIR
  mkdir -m 0755 "$NODE_LOCAL_DIR" "$SLURM_DIR/nodes" "$SLURM_DIR/nodes/n1" "$SLURM_DIR/nodes/n1/nvme" \
    "$SLURM_DIR/shared" "$SLURM_DIR/ctl" "$SLURM_DIR/spool/n1" "$SLURM_DIR/pools/pool1" \
    "$SLURM_DIR/run/ctld" "$SLURM_DIR/log/ctld"
  for c in "${CONTROLLERS[@]}"; do mkdir -m 0755 "$SLURM_DIR/run/ctld-$c" "$SLURM_DIR/log/ctld-$c"; done
  start_guard "$$"
  start_node_network
  # The guard's hook unmounts the shared volume too, once the namespaces are empty.
  printf 'umount %q 2>/dev/null || true\n' "$SLURM_DIR/shared" >>"$SLURM_DIR/run/guard-hook"
  mount -t tmpfs -o size=256m,mode=0755 bbkit-failover "$SLURM_DIR/shared"
  mkdir -m 0700 "$SLURM_DIR/shared/slurm"
  mkdir -m 0755 "$SLURM_DIR/shared/bbkit"
  STATE_SAVE_LOCATION=$SLURM_DIR/shared/slurm
  CTLD_SUBDIR=ctld
  export STATE_SAVE_LOCATION CTLD_SUBDIR
  {
    echo "127.0.0.1 localhost"
    echo "$NODE_NET.1 $(host_name)"
    for c in "${CONTROLLERS[@]}" "${NODES[@]}"; do echo "$(node_addr "$c") $c"; done
  } >"$SLURM_DIR/etc/hosts"
  chmod 0644 "$SLURM_DIR/etc/hosts"
  write_slurm_conf root nodes_topology
  write_failover_bbkit
  install_bbkit_scripts root
  lines=$(grep -E '^SlurmctldPrimary(On|Off)Prog=/' "$SLURM_DIR/log/install-slurm.log") || true
  [ "$(wc -l <<<"$lines")" -eq 2 ] ||
    { fail "install-slurm printed no SlurmctldPrimaryOnProg/OffProg lines for two controllers: $(cat "$SLURM_DIR/log/install-slurm.log")"; return 1; }
  printf '%s\n' "$lines" >>"$SLURM_CONF"
  transcript "$lines"
  start_munge
  start_controller c1
  start_controller c2
  start_node n1
  wait_for_claim c1
}

# Stops every daemon, kills what is left in the namespaces, unmounts the shared volume, keeps
# each controller's log in the build directory and removes the temporary directory.
finish_failover_cluster() {
  local c
  [ -n "${SLURM_DIR:-}" ] && [ -d "$SLURM_DIR" ] || return 0
  stop_cluster
  remove_node_network "$SLURM_DIR"
  if [ -d "${BBKIT_BUILD_DIR}/tests/slurm" ]; then
    for c in "${CONTROLLERS[@]}"; do
      cp "$SLURM_DIR/log/ctld-$c/slurmctld.log" "$BBKIT_BUILD_DIR/tests/slurm/slurmctld-failover-$c.log" 2>/dev/null || true
    done
  fi
  # Kept (BBKIT_SLURM_KEEP=1), the directory keeps the shared volume mounted, to be read.
  [ "${BBKIT_SLURM_KEEP:-0}" = 1 ] || umount "$SLURM_DIR/shared" 2>/dev/null || true
  finish_cluster
}
