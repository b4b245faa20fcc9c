# A real multi-node Slurm cluster on this one host, the ground of the node-local burst buffers
# (bbkit(7), NODE-LOCAL POOLS): harness.bash's munged and slurmctld on the host, and one slurmd
# per node n1..n4, each in namespaces of its own:
# - network: a netns (`ip netns add`, bbkit-ID-nK) whose eth0 is one end of a veth pair, the
#   other end on a bridge (bbkID) that holds the host's address on a private /24 (NET.1); node K
#   is NET.(10+K). slurmctld listens on the bridge address, every slurmd on its node's address;
#   srun and sbatch run on the host (or inside a node, from a batch script) and reach them all.
# - mount: a private mount namespace in which the node's own directory ($SLURM_DIR/nodes/nK/nvme)
#   is bind-mounted at one common path, $NODE_LOCAL_DIR: every node sees its "local NVMe" there,
#   the host sees an empty directory. The node's /etc/hosts names the nodes and the host.
# - UTS: the node's host name is its node name, as `hostname` in a job shows.
# ID is the cluster directory's random suffix, so the names are unique and the guard and the
# teardown find them from the directory alone. Teardown (finish_nodes, or the harness's guard
# through run/guard-hook when the suite dies without it) kills every process left in the
# namespaces and removes the veths, the bridge, the namespaces and the /run/netns mount that
# `ip netns add` makes when it made it.
#
# Load it instead of harness.bash (`load nodes`); the cluster has no burst_buffer plugin
# (HARNESS_MODE=plain). Set before start_nodes:
# - NODE_GRES="NAME:COUNT": every node has COUNT units of the GRES NAME (GresTypes, the nodes'
#   Gres= and a gres.conf with a count only: Flags=CountOnly, no device file);
# - NODE_SLURM_EXTRA: lines added to slurm.conf as they are;
# - NODE_BEFORE_START: a function run once slurm.conf is written, before munged and slurmctld
#   start (transfer.bats installs bbkit's burst_buffer/lua hooks with it);
# - NODE_BBKIT=1: bbkit on the nodes (start_node_bbkit): bbkit installed where every node sees
#   it, each node's own state directory at one common path ($NODE_STATE_DIR, bind-mounted per
#   node like $NODE_LOCAL_DIR), one bbkit.toml for all (standalone mode, pool "nvme" on the
#   node's local directory) that every node reads as /etc/bbkit/bbkit.toml, and slurmd's
#   Prolog, Epilog and TaskProlog bbkit's node scripts (share/bbkit/standalone/slurm-node);
#   with a node-local pool, the slurm.conf lines, cli_filter.lua and job_submit.lua from
#   install-slurm --node-local (install_node_local), so every sbatch gets its job's GRES added
#   and slurmctld checks every job and every change to one again.

# shellcheck disable=SC2034 # read by harness.bash
: "${HARNESS_MODE:=plain}"
load harness

NODE_COUNT=${NODE_COUNT:-4}
NODES=()
for ((i = 1; i <= NODE_COUNT; i++)); do NODES+=("n$i"); done
unset i

# Why this machine cannot run the cluster (nothing when it can). The kernel's abilities are
# tried in a throwaway network namespace, so the probe leaves nothing behind.
nodes_unsupported() {
  local cmd
  [ "$(id -u)" -eq 0 ] || { echo "the node cluster needs root (network and mount namespaces)"; return 0; }
  for cmd in ip unshare nsenter; do
    command -v "$cmd" >/dev/null || { echo "the node cluster needs $cmd (iproute2, util-linux)"; return 0; }
  done
  unshare --net --mount --uts --propagation private true 2>/dev/null ||
    { echo "this kernel cannot make network, mount and UTS namespaces here"; return 0; }
  unshare --net sh -c 'ip link add bbkprobe type bridge && ip link add bbkprobe0 type veth peer name bbkprobe1' \
    >/dev/null 2>&1 || { echo "this kernel cannot make bridges and veth pairs"; return 0; }
  if ! [ -d /run ] || ! [ -w /run ]; then echo "ip netns needs a writable /run"; fi
}

# The first three octets of a private /24 that no address or route of the host overlaps,
# starting at one derived from the pid, so that two suites at once rarely try the same one.
pick_node_net() {
  python3 - "$$" <<'PY'
import ipaddress, subprocess, sys
used = []
for args in (["ip", "-4", "-o", "addr", "show"], ["ip", "-4", "route", "show", "table", "all"]):
    for word in subprocess.run(args, capture_output=True, text=True).stdout.split():
        try:
            net = ipaddress.ip_network(word, strict=False)
        except ValueError:
            continue
        if net.prefixlen > 0:
            used.append(net)
seed = int(sys.argv[1])
for prefix in ("10.77", "172.29", "192.168"):
    for i in range(200):
        third = 20 + (seed + i) % 200
        net = ipaddress.ip_network(f"{prefix}.{third}.0/24")
        if not any(net.overlaps(u) for u in used):
            print(f"{prefix}.{third}")
            sys.exit(0)
sys.exit("no free private /24 for the node network")
PY
}

# The controllers in namespaces of their own (failover.bash): c1, c2 at NET.2, NET.3. Without
# them slurmctld runs on the host, at NET.1.
CONTROLLERS=(${CONTROLLERS[@]+"${CONTROLLERS[@]}"})

node_netns() { echo "bbkit-$NODE_ID-$1"; }
node_addr() {
  case $1 in
    c*) echo "$NODE_NET.$((1 + ${1#c}))" ;;
    *) echo "$NODE_NET.$((10 + ${1#n}))" ;;
  esac
}

# The bridge with the host's address, and per node a netns whose eth0 is a veth into the bridge.
# A guard hook that removes them all is in place before the first is made.
start_node_network() {
  local node ns veth
  NODE_ID=${SLURM_DIR##*.}
  NODE_BRIDGE=bbk$NODE_ID
  NODE_NET=$(pick_node_net)
  export NODE_ID NODE_BRIDGE NODE_NET
  # `ip netns add` makes /run/netns a mount point (a bind mount on itself) when it is not one:
  # the teardown removes it again only if this cluster made it.
  if [ ! -d /run/netns ]; then
    echo dir >"$SLURM_DIR/run/netns-ours"
  elif ! mountpoint -q /run/netns; then
    echo mount >"$SLURM_DIR/run/netns-ours"
  fi
  {
    echo '#!/bin/bash'
    echo "# The node network of $SLURM_DIR (tests/slurm/nodes.bash), for the cluster's guard."
    declare -f remove_node_network
    printf 'remove_node_network %q\n' "$SLURM_DIR"
  } >"$SLURM_DIR/run/guard-hook"
  chmod 0755 "$SLURM_DIR/run/guard-hook"
  ip link add "$NODE_BRIDGE" type bridge
  ip addr add "$NODE_NET.1/24" dev "$NODE_BRIDGE"
  ip link set "$NODE_BRIDGE" up
  for node in "${NODES[@]}" ${CONTROLLERS[@]+"${CONTROLLERS[@]}"}; do
    ns=$(node_netns "$node")
    veth=$NODE_BRIDGE$node
    ip netns add "$ns"
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" master "$NODE_BRIDGE" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$(node_addr "$node")/24" dev eth0
    ip -n "$ns" link set eth0 up
  done
  transcript "root# (bridge $NODE_BRIDGE $NODE_NET.1/24; ${NODES[*]} at $NODE_NET.11-$((10 + NODE_COUNT))${CONTROLLERS[*]:+, ${CONTROLLERS[*]} at $NODE_NET.2-$((1 + ${#CONTROLLERS[@]}))} in netns bbkit-$NODE_ID-*)"
}

# Removes the node network of the cluster in DIR: the processes still in its namespaces
# (SIGKILL), its veths and bridge, its namespaces, and /run/netns's mount when the cluster made
# it and no namespace is left there. Safe to run again or on a half-made network. Self-contained:
# the guard runs it from run/guard-hook, without this file.
remove_node_network() {
  local dir=$1 id ns pids link i
  id=${dir##*.}
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^bbkit-$id-[cn][0-9]+$"); do
    for i in $(seq 1 100); do
      pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
      [ -n "${pids// /}" ] || break
      # shellcheck disable=SC2086 # a list of pids
      kill -KILL $pids 2>/dev/null || true
      sleep 0.1
    done
  done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^bbk$id([cn][0-9]+)?$" | sort -r); do
    ip link del "$link" 2>/dev/null || true
  done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^bbkit-$id-[cn][0-9]+$"); do
    ip netns del "$ns" 2>/dev/null || true
  done
  if [ -s "$dir/run/netns-ours" ] && mountpoint -q /run/netns && [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
    umount /run/netns 2>/dev/null || true
    [ "$(cat "$dir/run/netns-ours")" != dir ] || rmdir /run/netns 2>/dev/null || true
  fi
  return 0
}

# slurm.conf's layout of this cluster (write_slurm_conf's topology). With CONTROLLERS, each is a
# SlurmctldHost at its own address and the backup takes over after CTLD_TIMEOUT seconds
# (failover.bash). Else slurmctld is the host, on the bridge address: with NoCtldInAddrAny it listens on what the host name resolves to, which
# start_nodes makes the bridge address for it alone (CTLD_WRAP). NoInAddrAny is left out: each
# slurmd's "any address" is its own namespace's, and srun on the host takes the nodes'
# connections back on the bridge address, where the host name resolves to loopback. Each node
# has the host's CPU layout and a small memory.
nodes_topology() {
  local hw mem node list
  hw=$(slurmd -C | head -n 1 | grep -o 'CPUs=.* ThreadsPerCore=[0-9]*')
  mem=$(slurmd -C | head -n 1 | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
  ((mem > 2048)) && mem=2048
  echo "# ${NODE_COUNT} nodes in network, mount and UTS namespaces on bridge $NODE_BRIDGE ($NODE_NET.0/24)"
  if [ ${#CONTROLLERS[@]} -eq 0 ]; then
    echo "SlurmctldHost=$(host_name)($NODE_NET.1)"
    echo "CommunicationParameters=NoCtldInAddrAny"
  else
    # failover.bash: each controller in namespaces of its own, listening on its own address.
    for node in "${CONTROLLERS[@]}"; do echo "SlurmctldHost=$node($(node_addr "$node"))"; done
    echo "SlurmctldTimeout=$CTLD_TIMEOUT"
  fi
  echo "SlurmdSpoolDir=$SLURM_DIR/spool/%n"
  echo "SlurmdPidFile=$SLURM_DIR/run/slurmd-%n.pid"
  echo "SlurmdLogFile=$SLURM_DIR/log/slurmd-%n.log"
  [ -z "${NODE_GRES:-}" ] || echo "GresTypes=${NODE_GRES%%:*}"
  for node in "${NODES[@]}"; do
    echo "NodeName=$node NodeAddr=$(node_addr "$node") $hw RealMemory=$mem${NODE_GRES:+ Gres=$NODE_GRES} State=UNKNOWN"
  done
  list=$(
    IFS=,
    echo "${NODES[*]}"
  )
  echo "PartitionName=nodes Nodes=$list Default=YES MaxTime=INFINITE State=UP"
}

# The host's short name, as slurmctld compares it with SlurmctldHost.
host_name() {
  local name
  name=$(cat /proc/sys/kernel/hostname)
  echo "${name%%.*}"
}

# slurmctld's CTLD_WRAP: a private mount namespace where /etc/hosts is the cluster's, so that
# the host name resolves to the bridge address and slurmctld listens there (NoCtldInAddrAny).
# The host's /etc/hosts is not touched.
nodes_ctld_wrap() {
  # shellcheck disable=SC2016 # expanded by the inner shell
  CTLD_WRAP=(unshare --mount --propagation private
    sh -c 'mount --bind "$1" /etc/hosts && shift && exec "$@"' sh "$SLURM_DIR/etc/hosts")
}
# Each test runs in a process of its own that loads this file again: a restart of slurmctld
# there needs the wrap too.
[ -z "${SLURM_DIR:-}" ] || nodes_ctld_wrap

# The command that runs another inside NODE's namespaces (sets NODE_WRAP): its netns, then a new
# private mount namespace with the node's directory at $NODE_LOCAL_DIR and the cluster's hosts
# file at /etc/hosts, the cluster's configuration at /etc/slurm (where Slurm's commands look
# when nothing names it: slurmd gives its HealthCheckProgram no SLURM_CONF), and a UTS namespace
# named after the node. The netns is entered with
# nsenter, not `ip netns exec`: that one mounts a new /sys, without the cgroup file systems
# under /sys/fs/cgroup, and Slurm 22.05's slurmd then fails to start ("Unable to initialize
# cgroup plugin") even with proctrack/linuxproc and task/none.
# With NODE_BBKIT=1 the node's state directory is at $NODE_STATE_DIR too, and bbkit.toml at
# /etc/bbkit/bbkit.toml (tests/with-default-config): slurmd gives its Prolog and Epilog no
# BBKIT_CONFIG.
node_wrap() {
  local node=$1
  mkdir -p /etc/slurm
  # shellcheck disable=SC2016 # expanded by the inner shell
  NODE_WRAP=(nsenter --net="/run/netns/$(node_netns "$node")" unshare --mount --uts --propagation private
    sh -c 'echo "$1" >/proc/sys/kernel/hostname && mount --bind "$2" "$3" && mount --bind "$4" /etc/hosts &&
      mount --bind "$5" /etc/slurm && shift 5 && exec "$@"' sh "$node" "$SLURM_DIR/nodes/$node/nvme" "$NODE_LOCAL_DIR"
    "$SLURM_DIR/etc/hosts" "$SLURM_DIR/etc")
  if [ "${NODE_BBKIT:-0}" = 1 ]; then
    # shellcheck disable=SC2016 # expanded by the inner shell
    NODE_WRAP+=(sh -c 'mount --bind "$0" "$1" && shift && exec "$@"' "$SLURM_DIR/nodes/$node/state" "$NODE_STATE_DIR"
      "$BBKIT_SOURCE_DIR/tests/with-default-config" "$BBKIT_CONFIG")
  fi
}

# Runs a command inside NODE's namespaces, those of its running slurmd (what its Prolog, Epilog
# and jobs see), as root, in slurmd's root directory (entering a mount namespace alone would
# leave a release's root for the host's: tests/slurm-release).
node_exec() {
  local node=$1 pid
  shift
  pid=$(node_slurmd_pid "$node") || { echo "no slurmd for $node" >&2; return 1; }
  nsenter --target "$pid" --mount --uts --net --root --wd -- "$@"
}

# Starts NODE's slurmd in its namespaces and waits for the node to be idle.
start_node() {
  local node=$1
  node_wrap "$node"
  start_slurmd "$node" "${NODE_WRAP[@]}"
  transcript "root# (slurmd -N $node started in netns $(node_netns "$node"), pid $(node_slurmd_pid "$node"))"
}

# Kills NODE's slurmd with SIGKILL (what its jobs' slurmstepd run stays) and waits for it to be
# gone.
kill_node_slurmd() {
  local node=$1 pid
  pid=$(node_slurmd_pid "$node") || { fail "no slurmd for $node"; return 1; }
  kill_and_wait "$pid" "slurmd of $node"
  transcript "root# kill -KILL $pid   # slurmd -N $node"
}

# Starts NODE's slurmd again after kill_node_slurmd, in namespaces made as start_node makes them
# (the same directories, address and name), without waiting for the node to be idle: a job may
# hold it. Returns once its log says it started (it has registered with slurmctld by then).
restart_node() {
  local node=$1 log=$SLURM_DIR/log/slurmd-$1.log before
  before=$(grep -c 'slurmd started on' "$log" 2>/dev/null || true)
  node_wrap "$node"
  if ! (cd "$SLURM_DIR/log" && "${NODE_WRAP[@]}" env -i PATH="/usr/sbin:/usr/bin:/sbin:/bin" SLURM_CONF="$SLURM_CONF" \
    slurmd -f "$SLURM_CONF" -N "$node"); then
    fail "slurmd -N $node did not start again: $(grep -E 'error|fatal' "$log" | tail -n 3 | tr '\n' ' ')"
    return 1
  fi
  wait_until 30 "slurmd of $node to start again" sh -c "[ \"\$(grep -c 'slurmd started on' '$log')\" -gt ${before:-0} ]"
  transcript "root# (slurmd -N $node started again in netns $(node_netns "$node"), pid $(node_slurmd_pid "$node"))"
}

# The pid of NODE's slurmd (fails when it does not run).
node_slurmd_pid() {
  our_pid "$SLURM_DIR/run/slurmd-$1.pid" "$SLURM_CONF"
}

# Sets up the cluster in a new temporary directory and starts munged, slurmctld and the nodes.
# Where the machine cannot, it starts nothing and sets NODES_SKIP, the reason every scenario
# then skips with (skip_without_nodes in setup: bats 1.8 cannot skip from setup_file).
start_nodes() {
  local why node
  # iproute2 is in scripts/install-deps's list; where it is missing, the check below says so.
  command -v ip >/dev/null || "$BBKIT_SOURCE_DIR/scripts/install-deps" >&2 || true
  why=$(nodes_unsupported)
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
  # The host's view of the common path: an empty directory nobody writes to.
  mkdir -m 0755 "$NODE_LOCAL_DIR" "$SLURM_DIR/nodes"
  for node in "${NODES[@]}"; do
    mkdir -m 0755 "$SLURM_DIR/nodes/$node" "$SLURM_DIR/nodes/$node/nvme" "$SLURM_DIR/spool/$node"
    chown "$SLURM_TEST_USER:" "$SLURM_DIR/nodes/$node/nvme"
  done
  start_guard "$$"
  start_node_network
  {
    echo "127.0.0.1 localhost"
    echo "$NODE_NET.1 $(host_name)"
    for node in "${NODES[@]}"; do echo "$(node_addr "$node") $node"; done
  } >"$SLURM_DIR/etc/hosts"
  chmod 0644 "$SLURM_DIR/etc/hosts"
  if [ "${NODE_BBKIT:-0}" = 1 ]; then start_node_bbkit || return 1; fi
  write_slurm_conf root nodes_topology
  if [ -n "${NODE_GRES:-}" ]; then
    # A count without a device file: Slurm only counts the units.
    echo "NodeName=n[1-$NODE_COUNT] Name=${NODE_GRES%%:*} Count=${NODE_GRES#*:} Flags=CountOnly" >"$SLURM_DIR/etc/gres.conf"
  fi
  if [ "${NODE_BBKIT:-0}" = 1 ] && [ "$NODE_POOL_LOCAL" = yes ]; then install_node_local || return 1; fi
  [ -z "${NODE_SLURM_EXTRA:-}" ] || printf '%s\n' "$NODE_SLURM_EXTRA" >>"$SLURM_CONF"
  # A suite's own set-up of what slurmctld reads when it starts (transfer.bats: bbkit's hooks).
  [ -z "${NODE_BEFORE_START:-}" ] || "$NODE_BEFORE_START" || return 1
  nodes_ctld_wrap
  start_munge
  start_slurmctld
  for node in "${NODES[@]}"; do start_node "$node"; done
}

# NODE_BBKIT=1: bbkit for the nodes, before any slurmd starts. The tools and the node scripts
# come from the installed tree ctest's install.tree fixture makes (BBKIT_BIN_DIR), else from a
# tree installed here from the build (tests/install-tree): slurmd's scripts run as programs
# and the job's user runs the TaskProlog, so neither may live in the checkout. Every node sees
# the host's /tmp, where both trees are. Sets NODE_STATE_DIR, NODE_BBKIT_TREE and NODE_POOL_DIR
# (the pool's path on each node), and, without a node-local pool, adds the Slurm lines to
# NODE_SLURM_EXTRA (with one, install_node_local does).
start_node_bbkit() {
  local node share
  if [ -n "${BBKIT_BIN_DIR:-}" ]; then
    NODE_BBKIT_TREE=$(cd "$BBKIT_BIN_DIR/.." && pwd)
  else
    NODE_BBKIT_TREE=$SLURM_DIR/tree
    "$BBKIT_SOURCE_DIR/tests/install-tree" "$BBKIT_BUILD_DIR" "$NODE_BBKIT_TREE"
  fi
  BBKIT_BIN=$NODE_BBKIT_TREE/bin
  PATH="$BBKIT_BIN:$PATH"
  NODE_STATE_DIR=$SLURM_DIR/node-state
  NODE_POOL_DIR=$NODE_LOCAL_DIR/pool
  export NODE_BBKIT_TREE NODE_STATE_DIR NODE_POOL_DIR BBKIT_BIN PATH
  mkdir -m 0711 "$NODE_STATE_DIR"
  # The local disk is the pool's: root's, as bbkit wants every directory above a pool.
  for node in "${NODES[@]}"; do
    mkdir -m 0711 "$SLURM_DIR/nodes/$node/state"
    mkdir -m 0755 "$SLURM_DIR/nodes/$node/nvme/pool"
    chown root: "$SLURM_DIR/nodes/$node/nvme"
  done
  write_node_bbkit_conf
  # A node-local pool: install-slurm --node-local prints the slurm.conf lines (start_nodes, once
  # slurm.conf and gres.conf are written). Else the node scripts' lines as they are.
  if [ "$NODE_POOL_LOCAL" = no ]; then
    share=$NODE_BBKIT_TREE/share/bbkit/standalone
    NODE_SLURM_EXTRA="Prolog=$share/slurm-node/prolog
Epilog=$share/slurm-node/epilog
TaskProlog=$share/slurm/task-prolog
PrologFlags=Alloc,DeferBatch${NODE_SLURM_EXTRA:+
$NODE_SLURM_EXTRA}"
  fi
  : "${NODE_GRES:=bbnvme:$NODE_POOL_UNITS}"
  # Each node's pool, made inside the node's view (its state directory and local disk).
  for node in "${NODES[@]}"; do
    node_wrap "$node"
    "${NODE_WRAP[@]}" env -i PATH="$BBKIT_BIN:/usr/sbin:/usr/bin:/sbin:/bin" bb-pool init nvme >/dev/null ||
      { fail "bb-pool init nvme on $node failed"; return 1; }
  done
  transcript "root# (bbkit from $NODE_BBKIT_TREE on every node; state $NODE_STATE_DIR, pool nvme at $NODE_POOL_DIR per node, node_local $NODE_POOL_LOCAL)"
}

# A node-local pool: bbkit's Slurm lines as a site installs them, with the installed tree's
# install-slurm --node-local (bbkit(7), NODE-LOCAL POOLS): it checks the gres.conf start_nodes
# wrote (NODE_GRES) and writes cli_filter.lua next to slurm.conf, which adds each job's GRES at
# submit, and job_submit.lua with bbkit_job_submit.lua, slurmctld's check of every job and
# every change to one; the lines it prints (GresTypes, PrologFlags, BatchStartTimeout, Prolog,
# Epilog, TaskProlog, CliFilterPlugins, JobSubmitPlugins, HealthCheckProgram,
# HealthCheckInterval) go before NODE_SLURM_EXTRA, and the Gres it gives the nodes must be
# NODE_GRES.
install_node_local() {
  local log=$SLURM_DIR/log/install-slurm.log lines args
  args=(--node-local --nodes "n[1-$NODE_COUNT]" --slurm-conf-dir "$SLURM_DIR/etc" --config "$BBKIT_CONFIG")
  if ! "$NODE_BBKIT_TREE/share/bbkit/slurm/install-slurm" "${args[@]}" >"$log" 2>&1; then
    fail "install-slurm --node-local failed: $(cat "$log")"
    return 1
  fi
  transcript "root# install-slurm $(printf '%q ' "${args[@]}" | sed 's/ $//')" "$(cat "$log")"
  lines=$(grep -E '^(GresTypes|PrologFlags|BatchStartTimeout|Prolog|Epilog|TaskProlog|CliFilterPlugins|JobSubmitPlugins|HealthCheckProgram|HealthCheckInterval)=' "$log")
  [ "$(wc -l <<<"$lines")" -eq 10 ] || { fail "install-slurm --node-local printed no slurm.conf lines: $(cat "$log")"; return 1; }
  grep -qx "Gres=$NODE_GRES" "$log" || { fail "install-slurm --node-local gives the nodes another Gres than $NODE_GRES: $(cat "$log")"; return 1; }
  [ -s "$SLURM_DIR/etc/cli_filter.lua" ] || { fail "install-slurm --node-local wrote no cli_filter.lua"; return 1; }
  [ -s "$SLURM_DIR/etc/job_submit.lua" ] || { fail "install-slurm --node-local wrote no job_submit.lua"; return 1; }
  NODE_SLURM_EXTRA="$lines${NODE_SLURM_EXTRA:+
$NODE_SLURM_EXTRA}"
}

# The nodes' bbkit.toml: standalone mode, the node's state directory, and one pool "nvme" of
# NODE_POOL_UNITS (64) units of 1 MiB on the node's local directory: node-local (bbkit(7),
# node_local) when the tools take the key, else a plain standalone pool on each node. Sets
# NODE_POOL_LOCAL (yes or no).
NODE_POOL_UNITS=${NODE_POOL_UNITS:-64}
write_node_bbkit_conf() {
  local release pool_keys
  release=$(slurm_release)
  for pool_keys in 'node_local = true
gres = "bbnvme"' ''; do
    cat >"$BBKIT_CONFIG" <<EOF
state_dir = "$NODE_STATE_DIR"
mode = "standalone"
cluster = "nodes"
${release:+slurm_release = \"$release\"}

[timeouts]
stage_in = 240
stage_out = 240
other = 100
validate = 4
queue = ${NODE_BBKIT_QUEUE_SECONDS:-5}

[limits]
mover_threads = 2

[[pool]]
name = "nvme"
path = "$NODE_POOL_DIR"
capacity = "${NODE_POOL_UNITS}MiB"
granularity = "1MiB"
$pool_keys
EOF
    chmod 0644 "$BBKIT_CONFIG"
    bb-parse config >/dev/null 2>&1 && break
  done
  NODE_POOL_LOCAL=no
  [ -z "$pool_keys" ] || NODE_POOL_LOCAL=yes
  export NODE_POOL_LOCAL
}

# slow_processes PERCENT WHAT PID...: the cgroup (v1 cpu controller, or v2) that slows the
# processes, and what they start from then on, to PERCENT of one CPU together: sets
# SLOW_CGROUP; unslow_node (the scenario's teardown) moves them back. WHAT says which in the
# transcript. Skips the scenario where the kernel has no cgroup cpu controller.
slow_processes() {
  local percent=$1 what=$2 root p
  shift 2
  if [ -f /sys/fs/cgroup/cpu/cgroup.procs ] && [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
    root=/sys/fs/cgroup/cpu
    SLOW_CGROUP=$root/bbkit-slow-$$
    mkdir -p "$SLOW_CGROUP"
    echo 100000 >"$SLOW_CGROUP/cpu.cfs_period_us"
    echo $((percent * 1000)) >"$SLOW_CGROUP/cpu.cfs_quota_us"
  elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    root=/sys/fs/cgroup
    SLOW_CGROUP=$root/bbkit-slow-$$
    mkdir -p "$SLOW_CGROUP"
    echo "$((percent * 1000)) 100000" >"$SLOW_CGROUP/cpu.max"
  else
    skip "no cgroup cpu controller to slow processes with"
  fi
  SLOW_ROOT=$root
  for p in "$@"; do echo "$p" >"$SLOW_CGROUP/cgroup.procs"; done
  transcript "root# ($what, pid $*, and what they start limited to $percent% of a CPU together: $SLOW_CGROUP)"
}

# slow_node NODE PERCENT [NODE...]: slow_processes for the nodes' slurmds, and so their
# Prologs and movers.
slow_node() {
  local node=$1 percent=$2 pids more
  pids=$(node_slurmd_pid "$node") || fail "no slurmd for $node"
  for more in "${@:3}"; do
    pids="$pids $(node_slurmd_pid "$more")" || fail "no slurmd for $more"
  done
  # shellcheck disable=SC2086 # a list of pids
  slow_processes "$percent" "slurmd of $node${3:+ ${*:3}}" $pids
}

unslow_node() {
  local p
  [ -n "${SLOW_CGROUP:-}" ] || return 0
  while read -r p; do
    echo "$p" >"$SLOW_ROOT/cgroup.procs" 2>/dev/null || true
  done < <(cat "$SLOW_CGROUP/cgroup.procs" 2>/dev/null)
  rmdir "$SLOW_CGROUP" 2>/dev/null || true
  SLOW_CGROUP=
}

skip_without_nodes() {
  [ -z "${NODES_SKIP:-}" ] || skip "$NODES_SKIP"
}

# Stops every daemon, removes the node network and the temporary directory (finish_cluster).
finish_nodes() {
  [ -n "${SLURM_DIR:-}" ] && [ -d "$SLURM_DIR" ] || return 0
  stop_cluster
  remove_node_network "$SLURM_DIR"
  finish_cluster
}
