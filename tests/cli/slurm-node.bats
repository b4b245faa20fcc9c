#!/usr/bin/env bats
# The node scripts of node-local pools (share/bbkit/standalone/slurm-node/prolog and epilog;
# bbkit(7), NODE-LOCAL POOLS) as slurmd runs them, without a Slurm cluster: each node of the job
# is a directory of its own (bbkit.toml, state directory, pool, as tests/cli/nodelocal.bats), the
# real tools and bbkit-job run against it, and Slurm's commands are stand-ins that answer from
# files and log their calls. The scripts set their own PATH, so the stand-ins cannot come first
# on the caller's PATH: each script runs in a mount namespace of its own where they are
# bind-mounted over /usr/local/sbin, the first directory of that PATH (nothing changes outside
# the namespace). `scontrol show hostnames` is Slurm's own scontrol, reading a slurm.conf that
# names no reachable controller (it expands the list locally). The environment is the one
# slurmd builds (no PATH, SLURM_NODELIST compressed), plus BBKIT_CONFIG naming the node's
# bbkit.toml and BBKIT_BINDIR the tools under test. The cluster runs: tests/slurm/nodelocal.bats.

load common
bats_require_minimum_version 1.5.0

NODE_SCRIPTS="$BBKIT_SOURCE_DIR/share/bbkit/standalone/slurm-node"
[ -n "${BBKIT_BIN_DIR:-}" ] && NODE_SCRIPTS="$BBKIT_BIN_DIR/../share/bbkit/standalone/slurm-node"
REAL_SCONTROL=$(command -v scontrol || true)

# The stand-ins for Slurm's commands, in $TEST_DIR/slurm-bin. Every call is logged to
# $TEST_DIR/calls, one line each (its arguments joined by '|'). Control files in $TEST_DIR:
#   job.sh          what `scontrol write batch_script` writes (absent: "Job script not specified")
#   state           the job's state for `squeue -o %T` (default RUNNING; "invalid": Invalid job id)
#   name            the job's name for `squeue -o %j`
#   requeue-fails   `scontrol requeue` and `requeuehold` fail
#   gres            the job's TresPerNode for `squeue -o '%b|%j'` (default gres:bbnvme:64,
#                   the whole of a node's pool)
#   gres-fails      `squeue -o '%b|%j'` fails (slurmctld does not answer)
#   node-gres       the node's Gres= for `scontrol -o show node` (default bbnvme:64, the
#                   pool's units); `scontrol update NodeName=NODE Gres=X` sets it to X; the line
#                   ends with Reason=<node-reason> when there is one
#   node-gres-then  replaces node-gres once a `scontrol -o show node` has printed it (an
#                   administrator's update between two looks)
#   node-jobs       `squeue -h -w NODE -t all -o '%A %T'`: lines "ID STATE" (default the job
#                   of SLURM_JOB_ID RUNNING, none without it)
# `scontrol update` keeps the last AdminComment, byte for byte, in $TEST_DIR/admin-comment, and
# a node's drain reason in $TEST_DIR/node-reason (removed by a resume), which sinfo -o %E
# answers; logger keeps its message in $TEST_DIR/syslog.
fake_slurm() {
  local bin=$TEST_DIR/slurm-bin
  mkdir -p "$bin"
  printf '%s\n' 'ClusterName=bbkit' 'SlurmctldHost=localhost(127.0.0.1)' 'SlurmctldPort=1' \
    'NodeName=n1 CPUs=1' 'PartitionName=p Nodes=n1 Default=YES' >"$TEST_DIR/slurm.conf"
  cat >"$bin/log-call" <<SH
#!/bin/sh
# Logs one call: its name and arguments joined by '|'.
{ printf '%s' "\$1"; shift; for a in "\$@"; do printf '|%s' "\$a"; done; echo; } >>"$TEST_DIR/calls"
SH
  cat >"$bin/scontrol" <<SH
#!/bin/sh
T='$TEST_DIR'
"\$T/slurm-bin/log-call" scontrol "\$@"
case "\$1 \${2:-}" in
  "show hostnames") SLURM_CONF=\$T/slurm.conf exec '$REAL_SCONTROL' show hostnames "\$3" ;;
  "write batch_script")
    [ -e "\$T/job.sh" ] || { echo "scontrol: error: Job script not specified" >&2; exit 1; }
    cp "\$T/job.sh" "\$4" && echo "batch script for job \$3 written to \$4" ;;
  "update NodeName=\${SLURMD_NODENAME:-}")
    shift 2
    printf '%s\n' "\$@" >"\$T/node-update"
    case \$1 in
      State=DRAIN) printf '%s' "\${2#Reason=}" >"\$T/node-reason" ;;
      State=RESUME) rm -f "\$T/node-reason" ;;
      Gres=*) printf '%s\n' "\${1#Gres=}" >"\$T/node-gres" ;;
    esac ;;
  "-o show")
    [ "\$3 \$4" = "node \${SLURMD_NODENAME:-}" ] || { echo "Node \$4 not found" >&2; exit 1; }
    echo "NodeName=\$4 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 Gres=\$(cat "\$T/node-gres" 2>/dev/null || echo bbnvme:64) NodeAddr=\$4 OS=Linux 6.1.0 #1 SMP RealMemory=1 State=IDLE\$([ ! -e "\$T/node-reason" ] || echo " Reason=\$(cat "\$T/node-reason")")"
    [ ! -e "\$T/node-gres-then" ] || mv "\$T/node-gres-then" "\$T/node-gres" ;;
  "update JobId=\$SLURM_JOB_ID")
    case \$3 in AdminComment=*) printf '%s' "\${3#AdminComment=}" >"\$T/admin-comment" ;; esac ;;
  "requeue \$SLURM_JOB_ID" | "requeuehold \$SLURM_JOB_ID")
    [ ! -e "\$T/requeue-fails" ] || { echo "Requested operation is presently disabled for job \$2" >&2; exit 1; }
    echo COMPLETING >"\$T/state" ;;
  *) echo "scontrol stand-in: unexpected call: \$*" >&2; exit 2 ;;
esac
SH
  cat >"$bin/squeue" <<SH
#!/bin/sh
T='$TEST_DIR'
"\$T/slurm-bin/log-call" squeue "\$@"
if [ "\$1 \$2" = "-h -w" ] && [ "\$4 \$5 \$6 \$7" = "-t all -o %A %T" ]; then
  [ "\$3" = "\${SLURMD_NODENAME:-}" ] || { echo "squeue: error: Invalid node name specified" >&2; exit 1; }
  if [ -e "\$T/node-jobs" ]; then cat "\$T/node-jobs"; elif [ -n "\${SLURM_JOB_ID:-}" ]; then echo "\$SLURM_JOB_ID RUNNING"; fi
  exit 0
fi
[ "\$1 \$2 \$3" = "-h -j \$SLURM_JOB_ID" ] || { echo "squeue stand-in: unexpected call: \$*" >&2; exit 2; }
state=\$(cat "\$T/state" 2>/dev/null || echo RUNNING)
[ "\$state" != invalid ] || { echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1; }
case \$5 in
  %T) echo "\$state" ;;
  %j) cat "\$T/name" 2>/dev/null; echo ;;
  '%b|%j')
    [ ! -e "\$T/gres-fails" ] || { echo "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" >&2; exit 1; }
    printf '%s|' "\$(cat "\$T/gres" 2>/dev/null || echo gres:bbnvme:64)"; cat "\$T/name" 2>/dev/null; echo ;;
  *) echo "squeue stand-in: unexpected format: \$5" >&2; exit 2 ;;
esac
SH
  cat >"$bin/sinfo" <<SH
#!/bin/sh
T='$TEST_DIR'
"\$T/slurm-bin/log-call" sinfo "\$@"
[ "\$*" = "-h -n \$SLURMD_NODENAME -o %E" ] || { echo "sinfo stand-in: unexpected call: \$*" >&2; exit 2; }
cat "\$T/node-reason" 2>/dev/null || echo none
SH
  cat >"$bin/scancel" <<SH
#!/bin/sh
'$TEST_DIR/slurm-bin/log-call' scancel "\$@"
SH
  cat >"$bin/logger" <<SH
#!/bin/sh
'$TEST_DIR/slurm-bin/log-call' logger "\$@"
eval "msg=\\\${\$#}"
printf '%s\n' "\$msg" >>'$TEST_DIR/syslog'
SH
  chmod 755 "$bin"/*
}

setup() {
  common_setup
  [ -n "$REAL_SCONTROL" ] || skip "needs Slurm's scontrol (show hostnames)"
  [ -d /usr/local/sbin ] || skip "needs /usr/local/sbin to mount the stand-ins over"
  U=$(test_user)
  mkdir -p "$TEST_DIR/pfs" "$TEST_DIR/slurmd"
  chown "$U" "$TEST_DIR/pfs"
  runuser -u "$U" -- sh -c "echo input >'$TEST_DIR/pfs/in.dat'"
  for node in n1 n2; do node_config "$node"; done
  fake_slurm
  JOB=10
  NODELIST='n[1-2]'
  SCRIPTS=$NODE_SCRIPTS
}

teardown() {
  common_teardown
}

# job_script LINE...: the batch script Slurm holds for the job.
job_script() {
  { echo '#!/bin/sh'; printf '%s\n' "$@"; echo 'srun ./app'; } >"$TEST_DIR/job.sh"
}

# slurmd SCRIPT NODE [VAR=VALUE...]: prolog or epilog as slurmd runs it on NODE for job $JOB of
# $NODELIST (root, its cwd, stdin /dev/null, its environment and nothing else; no fd 3 of bats),
# the node's BBKIT_CONFIG unless one is given. Extra variables go after Slurm's (they may
# replace them).
slurmd() {
  local script=$1 node=$2 ctx=prolog_slurmd
  shift 2
  [ "$script" = epilog ] && ctx=epilog_slurmd
  (cd "$TEST_DIR/slurmd" && unshare -m --propagation private sh -c \
    'mount --bind "$1" /usr/local/sbin || exit 99; shift; exec "$@"' sh "$TEST_DIR/slurm-bin" \
    env -i SLURM_JOB_ID="$JOB" SLURM_JOBID="$JOB" SLURM_JOB_USER="$U" SLURM_JOB_UID="$(id -u "$U")" \
    SLURM_JOB_GID="$(id -g "$U")" SLURMD_NODENAME="$node" SLURM_NODELIST="$NODELIST" \
    SLURM_CLUSTER_NAME=bbkit SLURM_CONF="$TEST_DIR/slurm.conf" SLURM_SCRIPT_CONTEXT=$ctx \
    BBKIT_CONFIG="$TEST_DIR/$node/bbkit.toml" BBKIT_BINDIR="$BBKIT_BIN" "$@" \
    "$SCRIPTS/$script" </dev/null 3>&-)
}

on() {  # on NODE COMMAND...: a tool as it runs on that node
  local node=$1
  shift
  BBKIT_CONFIG=$TEST_DIR/$node/bbkit.toml "$@"
}

# Slurm's commands the scripts called, one per line (arguments joined by '|'), without the
# script file's own name.
calls() { sed "s|$TEST_DIR|T|g" "$TEST_DIR/calls" 2>/dev/null || true; }

@test "a job without directives: the prolog exits 0 and makes nothing, asking Slurm for the script only" {
  job_script '#SBATCH -N 2'
  run slurmd prolog n1
  assert_success
  assert_output ''
  run on n1 bb-stat job "$JOB"
  assert_failure 66
  [ -z "$(ls -A "$TEST_DIR/n1/nvme/job")" ]
  run calls
  refute_output --partial requeue
  refute_output --partial update
  refute_output --partial scancel
  refute_output --partial logger
  # A job without a batch script (salloc, srun) has no directives.
  rm "$TEST_DIR/job.sh" "$TEST_DIR/calls"
  run slurmd prolog n1
  assert_success
  assert_output ''
  run calls
  assert_output --regexp '^scontrol\|write\|batch_script\|10\|/.*/bbkit-node-prolog\.10\.[^/]*/script$'
  [ "${#lines[@]}" -eq 1 ]
}

@test "a job with a buffer: each node's prolog sets up its part with the node's place; the epilog ends it" {
  job_script '#BB_LUA pool=nvme capacity=8MiB' \
    "#BB_LUA stage_in type=file source=$TEST_DIR/pfs/in.dat destination=in.dat" \
    "#BB_LUA stage_out type=directory source=out destination=$TEST_DIR/pfs/res-%x"
  echo 'sim' >"$TEST_DIR/name"
  for node in n1 n2; do
    run slurmd prolog "$node"
    assert_success
    assert_output ''
  done
  run on n2 bb-stat job "$JOB"
  assert_success
  assert_line --regexp '^node: +n2 \(2 of 2 of the job.s nodes\)$'
  assert_line --regexp '^state: +running$'
  run on n1 bb-stat job "$JOB"
  assert_line --regexp '^node: +n1 \(1 of 2 of the job.s nodes\)$'
  for node in n1 n2; do
    buf=$(bbdir "$TEST_DIR/$node/nvme/job/main.$JOB.1")
    [ "$(cat "$buf/in.dat")" = input ]
    runuser -u "$U" -- sh -c "mkdir '$buf/out' && echo 'result of $node' >'$buf/out/r'"
  done
  run calls
  assert_line "scontrol|show|hostnames|n[1-2]"
  assert_line "squeue|-h|-j|10|-o|%b|%j"
  refute_output --partial requeue
  refute_output --partial update
  for node in n1 n2; do
    run slurmd epilog "$node"
    assert_success
    assert_output ''
    run on "$node" bb-stat job "$JOB" --json
    assert_output --partial '"state": "complete"'
    run on "$node" bb-pool show nvme --json
    assert_output --partial '"used": 0'
  done
  [ "$(cat "$TEST_DIR/pfs/res-sim/n1/r")" = "result of n1" ]
  [ "$(cat "$TEST_DIR/pfs/res-sim/n2/r")" = "result of n2" ]
  run calls
  refute_output --partial requeue
  refute_output --partial update
  refute_output --partial logger
}

# The last AdminComment set, checked as one line ("bbkit: " and at most 480 bytes after it)
# starting with PREFIX.
assert_admin_comment() {
  local prefix=$1 comment
  [ -e "$TEST_DIR/admin-comment" ] || fail "no AdminComment was set"
  comment=$(cat "$TEST_DIR/admin-comment"; echo x)
  comment=${comment%x}
  [[ $comment != *$'\n'* ]] || fail "AdminComment of more than one line: $comment"
  [[ $comment =~ ^bbkit:\ (.*)$ ]] || fail "AdminComment without 'bbkit: ': $comment"
  [ "$(printf '%s' "${BASH_REMATCH[1]}" | wc -c)" -le 480 ] || fail "AdminComment over 480 bytes after 'bbkit: ': $comment"
  [[ $comment == "$prefix"* ]] || fail "AdminComment '$comment' does not start with '$prefix'"
}

@test "a source missing at run time is the job's fault: requeuehold, one-line AdminComment, syslog, exit 0" {
  job_script '#BB_LUA pool=nvme capacity=8MiB' \
    "#BB_LUA stage_in type=file source=$TEST_DIR/pfs/gone.dat destination=x"
  run slurmd prolog n1
  assert_success
  assert_output --regexp "^bbkit node prolog: job 10: node n1: bb-stage: .*$TEST_DIR/pfs/gone.dat"
  [ "${#lines[@]}" -eq 1 ]
  assert_admin_comment "bbkit: node n1: bb-stage: "
  run cat "$TEST_DIR/admin-comment"
  assert_output --partial "$TEST_DIR/pfs/gone.dat"
  run calls
  assert_line "scontrol|requeuehold|10"
  refute_line "scontrol|requeue|10"
  refute_line --partial scancel
  assert_line --regexp "^logger\|-t\|bbkit-node-prolog\|-p\|daemon.err\|job 10: node n1: bb-stage: "
  # The buffer reserved before the failure waits for the Epilog, which Slurm runs after the
  # requeue, and which ends it.
  run on n1 bb-stat job 10 --json
  assert_output --partial '"failure": "staging-in: '
  run slurmd epilog n1
  assert_success
  run on n1 bb-pool show nvme --json
  assert_output --partial '"used": 0'
}

@test "a pool drained on this node is no fault of the node: the job held with bbkit's reason, exit 0" {
  job_script '#BB_LUA pool=nvme capacity=8MiB'
  on n1 bb-pool drain nvme >/dev/null
  run slurmd prolog n1
  assert_success
  assert_output --regexp "^bbkit node prolog: job 10: node n1: bb-pool: .*draining"
  assert_admin_comment "bbkit: node n1: bb-pool: "
  run calls
  assert_line "scontrol|requeuehold|10"
  refute_output --partial scancel
  # The other node's pool is up: its part is set up.
  rm "$TEST_DIR/state"
  run slurmd prolog n2
  assert_success
  run on n2 bb-stat job 10 --json
  assert_output --partial '"state": "running"'
}

@test "short of space now (75): requeue without a hold, exit 0; a job Slurm will not requeue is cancelled" {
  job_script '#BB_LUA pool=nvme capacity=8MiB'
  printf '#!/bin/sh\n#BB_LUA pool=nvme capacity=60MiB\n' >"$TEST_DIR/big.sh"
  on n1 bb-pool alloc --job 11 --user "$U" --script "$TEST_DIR/big.sh" --node n1 --nodes n1 >/dev/null
  run slurmd prolog n1
  assert_success
  assert_admin_comment "bbkit: node n1: bb-pool: "
  run calls
  assert_line "scontrol|requeue|10"
  refute_line "scontrol|requeuehold|10"
  refute_output --partial scancel
  run on n1 bb-stat job 10
  assert_failure 66
  # Job 11's buffer, which Slurm no longer counts (job 11 is not on the node), is taken off
  # Slurm's count before the requeue: the job is not placed here again.
  run calls
  assert_line "scontrol|update|NodeName=n1|Gres=bbnvme:4"
  [ "$(cat "$TEST_DIR/node-gres")" = bbnvme:4 ]
  # sbatch --no-requeue: the requeue is refused while the job still waits: scancel.
  rm "$TEST_DIR/calls" "$TEST_DIR/state"
  touch "$TEST_DIR/requeue-fails"
  run slurmd prolog n1
  assert_success
  assert_output --partial "requeue: Requested operation is presently disabled for job 10"
  run calls
  assert_line "scontrol|requeue|10"
  assert_line "scancel|10"
}

@test "a job that is no longer running (COMPLETING, CANCELLED, gone) when the begin fails is left alone" {
  job_script '#BB_LUA pool=nvme capacity=8MiB' \
    "#BB_LUA stage_in type=file source=$TEST_DIR/pfs/gone.dat destination=x"
  for state in COMPLETING CANCELLED PENDING invalid; do
    rm -f "$TEST_DIR/calls"
    echo "$state" >"$TEST_DIR/state"
    run slurmd prolog n1
    assert_success
    [ "$state" = invalid ] && state=gone
    # A job slurmctld no longer knows is gone before the begin starts.
    assert_output --regexp "^bbkit node prolog: job 10 is $state on n1(: bb-stage: |$)"
    run calls
    refute_output --partial requeue
    refute_output --partial update
    refute_output --partial scancel
    slurmd epilog n1
  done
  assert_not_exist "$TEST_DIR/admin-comment"
}

@test "bbkit-job missing (127) or not executable (126): the node is broken, prolog and epilog fail" {
  # A copy of the installed scripts and their library, without bbkit-job beside them, then with
  # one that cannot run.
  local tree=$TEST_DIR/tree/share/bbkit/standalone
  mkdir -p "$tree/slurm-node"
  cp "$NODE_SCRIPTS/prolog" "$NODE_SCRIPTS/epilog" "$tree/slurm-node/"
  cp "$NODE_SCRIPTS/../bbkit-lib.sh" "$tree/"
  SCRIPTS=$tree/slurm-node
  job_script '#BB_LUA pool=nvme capacity=8MiB'
  for code in 127 126; do
    [ "$code" = 126 ] && install -m 644 "$NODE_SCRIPTS/../bbkit-job" "$tree/bbkit-job"
    rm -f "$TEST_DIR/calls" "$TEST_DIR/admin-comment"
    run "-$code" slurmd prolog n1
    assert_admin_comment "bbkit: node n1: "
    run calls
    refute_output --partial requeue
    run "-$code" slurmd epilog n1
    assert_failure "$status"
    assert_output --partial "bbkit node epilog: job 10: node n1: "
    assert_admin_comment "bbkit: node n1: "
  done
}

# Nothing on any node: no buffer, no record, and no file a shell would have made.
assert_nothing_made() {
  local node
  for node in n1 n2; do
    [ -z "$(ls -A "$TEST_DIR/$node/nvme/job")" ] || fail "a buffer on $node: $(ls -A "$TEST_DIR/$node/nvme/job")"
    run on "$node" bb-stat job "$JOB"
    assert_failure 66
  done
  [ -z "$(ls -A "$TEST_DIR/slurmd")" ] || fail "made in slurmd's cwd: $(ls -A "$TEST_DIR/slurmd")"
  assert_not_exist "$TEST_DIR/pwned"
}

@test "hostile SLURMD_NODENAME: never run, never a path; the job held with one line; nothing made" {
  job_script '#BB_LUA pool=nvme capacity=8MiB'
  local long
  long=$(printf 'x%.0s' $(seq 600))
  while IFS='|' read -r node message; do
    node=${node//\\n/$'\n'}
    rm -f "$TEST_DIR/calls" "$TEST_DIR/admin-comment" "$TEST_DIR/state"
    run slurmd prolog "$node" BBKIT_CONFIG="$TEST_DIR/n1/bbkit.toml"
    assert_success
    assert_admin_comment "bbkit: node "
    run cat "$TEST_DIR/admin-comment"
    assert_output --partial "bbkit-job: $message"
    run calls
    assert_line "scontrol|requeuehold|10"
    assert_nothing_made
  done <<EOF2
n1;touch ../pwned|invalid node name 'n1;touch ../pwned'
n1\$(touch ../pwned)|invalid node name 'n1\$(touch ../pwned)'
n1\`touch ../pwned\`|invalid node name 'n1\`touch ../pwned\`'
..|invalid node name '..'
../n1|invalid node name '../n1'
n1/../n2|invalid node name 'n1/../n2'
n1\nn2|invalid node name 'n1 n2'
n3|node 'n3' is not in --nodes
EOF2
  # A name of 1201 bytes with a newline: the AdminComment stays one line of 480 bytes.
  rm -f "$TEST_DIR/calls" "$TEST_DIR/admin-comment" "$TEST_DIR/state"
  run slurmd prolog "$long"$'\n'"$long" BBKIT_CONFIG="$TEST_DIR/n1/bbkit.toml"
  assert_success
  assert_admin_comment "bbkit: node ${long:0:475}"
  [ "$(wc -c <"$TEST_DIR/admin-comment")" -eq $((7 + 480)) ]
  run calls
  assert_line "scontrol|requeuehold|10"
  assert_nothing_made
}

@test "hostile SLURM_NODELIST: Slurm expands it, bbkit-job refuses what is not a node list; the job held, nothing made" {
  job_script '#BB_LUA pool=nvme capacity=8MiB'
  while IFS='|' read -r list message; do
    NODELIST=${list//\\n/$'\n'}
    rm -f "$TEST_DIR/calls" "$TEST_DIR/admin-comment" "$TEST_DIR/state"
    run slurmd prolog n1
    assert_success
    assert_admin_comment "bbkit: node n1: "
    run cat "$TEST_DIR/admin-comment"
    assert_output --partial "$message"
    run calls
    assert_line "scontrol|requeuehold|10"
    assert_nothing_made
  done <<EOF2
n[1-2];touch ../pwned|scontrol show hostnames n[1-2];touch ../pwned failed
n[1-2]\$(touch ../pwned)|scontrol show hostnames n[1-2]\$(touch ../pwned) failed
n1,..|bbkit-job: invalid node name '..'
n1,../n2|bbkit-job: invalid node name '../n2'
n1,n2/../n1|bbkit-job: invalid node name 'n2/../n1'
n[1-2]\nn3|scontrol show hostnames n[1-2] n3 failed
n[2-3]|bbkit-job: node 'n1' is not in --nodes
n[1-2],n1|bbkit-job: node 'n1' is twice in --nodes
EOF2
}

@test "a job of 5000 nodes: the prolog gives this node its place at once" {
  job_script '#BB_LUA pool=nvme capacity=8MiB'
  NODELIST='n[1-5000]'
  local start end
  start=$(date +%s%N)
  run slurmd prolog n4321 BBKIT_CONFIG="$TEST_DIR/n1/bbkit.toml"
  end=$(date +%s%N)
  assert_success
  echo "# prolog of a 5000-node job: $(((end - start) / 1000000)) ms" >&3
  [ $(((end - start) / 1000000000)) -lt 30 ]
  run on n1 bb-stat job 10
  assert_line --regexp '^node: +n4321 \(4321 of 5000 of the job.s nodes\)$'
  start=$(date +%s%N)
  run slurmd epilog n4321 BBKIT_CONFIG="$TEST_DIR/n1/bbkit.toml"
  end=$(date +%s%N)
  assert_success
  echo "# epilog: $(((end - start) / 1000000)) ms" >&3
  # One node too many is refused before anything is reserved.
  NODELIST='n[1-5000],n4321'
  run slurmd prolog n4321 BBKIT_CONFIG="$TEST_DIR/n1/bbkit.toml"
  assert_success
  run cat "$TEST_DIR/admin-comment"
  assert_output "bbkit: node n4321: bbkit-job: node 'n4321' is twice in --nodes"
}

@test "a hostile job name reaches bb-pool as one argument, never run; one a directive cannot hold is refused" {
  job_script '#BB_LUA pool=nvme capacity=8MiB'
  printf '%s' $'it\'s "x" $(touch ../pwned) `touch ../pwned`;touch ../pwned\nline 2' >"$TEST_DIR/name"
  run slurmd prolog n1
  assert_success
  run on n1 bb-stat job 10 --json
  assert_output --partial '"state": "running"'
  assert_not_exist "$TEST_DIR/pwned"
  [ -z "$(ls -A "$TEST_DIR/slurmd")" ]
  slurmd epilog n1
  # %x in a path: the name's newline cannot be written back into a directive line.
  JOB=11
  job_script '#BB_LUA pool=nvme capacity=8MiB' \
    "#BB_LUA stage_out type=directory source=out destination=$TEST_DIR/pfs/%x"
  run slurmd prolog n1
  assert_success
  assert_admin_comment "bbkit: node n1: bb-"
  run cat "$TEST_DIR/admin-comment"
  assert_output --partial "holds a control character"
  run calls
  assert_line "scontrol|requeuehold|11"
  assert_not_exist "$TEST_DIR/pwned"
  run on n1 bb-stat job 11
  assert_failure 66
}

@test "PATH and IFS from the environment are not used" {
  # Every command the scripts run, as an impostor that only logs its call.
  mkdir "$TEST_DIR/evil"
  for cmd in scontrol squeue scancel logger mktemp readlink dirname rm tr head tail paste wc \
    sleep kill cat setsid sh env printf echo id sudo bb-parse bb-pool bb-stage bb-stat; do
    printf '#!/bin/sh\necho "%s $*" >>%s/evil-calls\nexit 1\n' "$cmd" "$TEST_DIR" >"$TEST_DIR/evil/$cmd"
  done
  chmod 755 "$TEST_DIR"/evil/*
  job_script '#BB_LUA pool=nvme capacity=8MiB' \
    "#BB_LUA stage_in type=file source=$TEST_DIR/pfs/in.dat destination=in.dat"
  run slurmd prolog n2 PATH="$TEST_DIR/evil" IFS='/,n0123456789 '
  assert_success
  assert_output ''
  run on n2 bb-stat job 10
  assert_line --regexp '^node: +n2 \(2 of 2 of the job.s nodes\)$'
  assert_line --regexp '^state: +running$'
  run slurmd epilog n2 PATH="$TEST_DIR/evil" IFS='/,n0123456789 '
  assert_success
  run on n2 bb-stat job 10 --json
  assert_output --partial '"state": "complete"'
  assert_not_exist "$TEST_DIR/evil-calls"
}

@test "a hostile directive path in the batch script: refused or read as the user, the job held, nothing copied" {
  while IFS='|' read -r line message; do
    rm -f "$TEST_DIR/calls" "$TEST_DIR/admin-comment" "$TEST_DIR/state"
    job_script '#BB_LUA pool=nvme capacity=8MiB' "$line"
    run slurmd prolog n1
    assert_success
    assert_admin_comment "bbkit: node n1: bb-"
    run cat "$TEST_DIR/admin-comment"
    assert_output --partial "$message"
    run calls
    assert_line "scontrol|requeuehold|10"
    assert_not_exist "$TEST_DIR/pwned"
    [ -z "$(ls -A "$TEST_DIR/slurmd")" ]
    [ -z "$(find "$TEST_DIR/n1/nvme/job" -name secret)" ]
    slurmd epilog n1
    run on n1 bb-pool show nvme --json
    assert_output --partial '"used": 0'
  done <<EOF2
#BB_LUA stage_in type=file source=/etc/shadow destination=secret|cannot read: Permission denied
#BB_LUA stage_in type=file source=$TEST_DIR/pfs/in.dat destination=../../../secret|bb-parse: script line 3: destination '../../../secret' is outside the buffer
#BB_LUA stage_in type=file source=$TEST_DIR/pfs/\$(touch ../pwned) destination=secret|pwned
EOF2
}

@test "a long message: the AdminComment is one line of 480 bytes after 'bbkit: '" {
  local deep
  deep=$TEST_DIR/pfs/$(printf 'd%.0s' $(seq 200))/$(printf 'e%.0s' $(seq 200))/$(printf 'f%.0s' $(seq 200))
  job_script '#BB_LUA pool=nvme capacity=8MiB' "#BB_LUA stage_in type=file source=$deep/x destination=x"
  run slurmd prolog n1
  assert_success
  assert_admin_comment "bbkit: node n1: bb-stage: "
  [ "$(wc -c <"$TEST_DIR/admin-comment")" -eq $((7 + 480)) ]
  run calls
  assert_line "scontrol|requeuehold|10"
}

@test "epilog: a failed stage-out is the job's (exit 0, buffer and data kept, logged); 69 and 78 drain the node; no buffer costs nothing" {
  # No buffer on this node: no call to Slurm, nothing written.
  run slurmd epilog n1
  assert_success
  assert_output ''
  assert_not_exist "$TEST_DIR/calls"
  [ -z "$(ls -A "$TEST_DIR/n1/nvme/job")" ]

  mkdir -m 755 "$TEST_DIR/locked"
  job_script '#BB_LUA pool=nvme capacity=8MiB' \
    "#BB_LUA stage_out type=directory source=out destination=$TEST_DIR/locked/res"
  slurmd prolog n1
  buf=$(bbdir "$TEST_DIR/n1/nvme/job/main.10.1")
  runuser -u "$U" -- sh -c "mkdir '$buf/out' && echo result >'$buf/out/r'"
  run slurmd epilog n1
  assert_success
  assert_output --regexp "^bbkit node epilog: job 10: node n1: bb-stage: .*permission denied.* \(buffer and data kept\)$"
  [ "$(cat "$buf/out/r")" = result ]
  assert_admin_comment "bbkit: node n1: bb-stage: "
  run calls
  assert_line --regexp "^logger\|-t\|bbkit-node-epilog\|-p\|daemon.err\|job 10: node n1: bb-stage: "
  run on n1 bb-stat job 10
  assert_output --regexp "failure: +[0-9T:-]+ staging-out: "

  # 78: this node's bbkit.toml is broken; the buffer stays.
  cp "$TEST_DIR/n1/bbkit.toml" "$TEST_DIR/n1/good.toml"
  echo 'this is not toml' >>"$TEST_DIR/n1/bbkit.toml"
  run slurmd epilog n1
  assert_failure 78
  assert_output --partial "(buffer and data kept)"
  # A node name with a newline: the AdminComment is still one line.
  run slurmd epilog $'n1\nn1' BBKIT_CONFIG="$TEST_DIR/n1/bbkit.toml"
  assert_failure 78
  assert_admin_comment "bbkit: node n1 n1: bb-"
  cp "$TEST_DIR/n1/good.toml" "$TEST_DIR/n1/bbkit.toml"
  # 69: the pool is not mounted (its directory gone).
  mv "$TEST_DIR/n1/nvme" "$TEST_DIR/n1/nvme.away"
  run slurmd epilog n1
  assert_failure 69
  mv "$TEST_DIR/n1/nvme.away" "$TEST_DIR/n1/nvme"
  [ "$(cat "$buf/out/r")" = result ]
  # Delivered by an admin, the next end finishes.
  chown "$U" "$TEST_DIR/locked"
  on n1 bb-stage out --retry --job 10 >/dev/null
  run slurmd epilog n1
  assert_success
  [ "$(cat "$TEST_DIR/locked/res/n1/r")" = result ]
  run on n1 bb-pool show nvme --json
  assert_output --partial '"used": 0'
}

# ---- Blame from the node's health (bbkit(7), NODE-LOCAL POOLS, Node health) ------------------

# A copy of the node scripts and their library in $TEST_DIR/tree, root's, where bbkit-job is a
# stand-in: `begin` fails with the status in $TEST_DIR/begin-status and a tool's one line; the
# rest (health, end) is the real bbkit-job's.
standin_tree() {
  local tree=$TEST_DIR/tree/share/bbkit/standalone
  mkdir -p "$tree/slurm-node"
  cp "$NODE_SCRIPTS/prolog" "$NODE_SCRIPTS/epilog" "$tree/slurm-node/"
  cp "$NODE_SCRIPTS/../bbkit-lib.sh" "$tree/"
  cat >"$tree/bbkit-job" <<SH
#!/bin/sh
case \$1 in
  begin) s=\$(cat '$TEST_DIR/begin-status'); echo "bb-stage: the job's failure, exit status \$s" >&2; exit "\$s" ;;
  *) exec '$NODE_SCRIPTS/../bbkit-job' "\$@" ;;
esac
SH
  chmod 755 "$tree/bbkit-job"
  SCRIPTS=$tree/slurm-node
}

# The exit statuses a hunt tries: all of 1-255 but bbkit-job's own 126 and 127 in the full tier;
# in the submission tier, bbkit's documented ones and a few others at random.
hunted_statuses() {
  if [ "${BBKIT_TEST_TIER:-full}" = full ]; then
    seq 1 255 | grep -v -x -e 126 -e 127
  else
    { printf '%s\n' 1 2 64 65 66 69 70 73 74 75 77 78 137 255
      shuf -i 3-254 -n 4 | grep -v -x -e 126 -e 127; } | sort -n -u
  fi
}

@test "no exit status of a failing begin drains a healthy node; every status fails an unhealthy one" {
  standin_tree
  job_script '#BB_LUA pool=nvme capacity=8MiB'
  local code
  for code in $(hunted_statuses); do
    echo "$code" >"$TEST_DIR/begin-status"
    rm -f "$TEST_DIR/calls" "$TEST_DIR/state" "$TEST_DIR/admin-comment"
    run slurmd prolog n1
    [ "$status" -eq 0 ] || fail "begin's exit status $code drained a healthy node (prolog exit $status): $output"
    assert_admin_comment "bbkit: node n1: bb-stage: the job's failure, exit status $code"
    run calls
    if [ "$code" = 75 ]; then
      assert_line "scontrol|requeue|10"
    else
      assert_line "scontrol|requeuehold|10"
    fi
  done
  # The same failures on a node whose pool is not mounted: the node's, whatever the status.
  mv "$TEST_DIR/n1/nvme/.bbkit-pool" "$TEST_DIR/n1/marker"
  for code in 1 65 70 75 255; do
    echo "$code" >"$TEST_DIR/begin-status"
    rm -f "$TEST_DIR/calls" "$TEST_DIR/state" "$TEST_DIR/admin-comment"
    run slurmd prolog n1
    assert_failure 69
    assert_output --regexp "^bbkit node prolog: job 10: node n1: unhealthy: bb-pool: unhealthy: pool nvme: .*not mounted.* \(begin: bb-stage: the job's failure, exit status $code\)$"
    run calls
    refute_output --partial requeue
  done
}

@test "real node faults drain the node from prolog and epilog: pool not mounted, state directory open to others, bb-mover missing, a node script others may change" {
  job_script '#BB_LUA pool=nvme capacity=8MiB' \
    "#BB_LUA stage_in type=file source=$TEST_DIR/pfs/in.dat destination=in.dat"
  # The pool not mounted: its marker gone.
  mv "$TEST_DIR/n1/nvme/.bbkit-pool" "$TEST_DIR/n1/marker"
  run slurmd prolog n1
  assert_failure 69
  assert_output --partial "unhealthy: bb-pool: unhealthy: pool nvme: "
  run slurmd epilog n1
  assert_success  # no buffer was made: nothing to end
  mv "$TEST_DIR/n1/marker" "$TEST_DIR/n1/nvme/.bbkit-pool"
  # The state directory others may write.
  chmod 777 "$TEST_DIR/n1/state"
  rm -f "$TEST_DIR/calls"
  run slurmd prolog n1
  assert_failure 77
  run calls
  refute_output --partial requeue
  chmod 711 "$TEST_DIR/n1/state"
  # bb-mover missing: the tools copied without it, no libexec beside them.
  mkdir "$TEST_DIR/bin"
  cp "$BBKIT_BIN"/bb-* "$TEST_DIR/bin/"
  rm -f "$TEST_DIR/bin/bb-mover"
  rm -f "$TEST_DIR/calls"
  run slurmd prolog n1 BBKIT_BINDIR="$TEST_DIR/bin"
  assert_failure 69
  assert_output --partial "unhealthy: bb-pool: unhealthy: bb-mover: "
  run slurmd epilog n1 BBKIT_BINDIR="$TEST_DIR/bin"
  assert_success
  # A node script that others may change: the node is not in order, whatever the job did.
  standin_tree
  cp "$NODE_SCRIPTS/../bbkit-job" "$TEST_DIR/tree/share/bbkit/standalone/bbkit-job"
  chmod 0775 "$SCRIPTS/epilog"
  job_script '#BB_LUA pool=nvme capacity=8MiB' \
    "#BB_LUA stage_in type=file source=$TEST_DIR/pfs/gone.dat destination=x"
  rm -f "$TEST_DIR/calls"
  run slurmd prolog n1
  assert_failure 69
  assert_output --regexp "unhealthy: bb-pool: unhealthy: $SCRIPTS/epilog: .*writable by group or others"
  run calls
  refute_output --partial requeue
  chmod 0755 "$SCRIPTS/epilog"
  run slurmd epilog n1
  assert_success
}

@test "the user kills their own mover during the stage-in: the job is held, the node stays in service" {
  [ "$(BBKIT_FAULT=list bb-stage 2>/dev/null | wc -l)" -gt 0 ] || skip "needs crash injection (BBKIT_FAULT_INJECTION)"
  local i
  for i in $(seq 1 3); do echo "$i" >"$TEST_DIR/pfs/f$i"; done
  chown -R "$U" "$TEST_DIR/pfs"
  job_script '#BB_LUA pool=nvme capacity=8MiB' \
    "#BB_LUA stage_in type=directory source=$TEST_DIR/pfs destination=in"
  # The mover stops itself after its first file; the user's own kill -KILL ends it.
  slurmd prolog n1 BBKIT_FAULT=mover.file-copied:stop >"$TEST_DIR/prolog.out" 2>&1 &
  local prolog=$! mover=
  for i in $(seq 1 200); do
    mover=$(pgrep -u "$U" -x bb-mover || true)
    [ -n "$mover" ] && grep -q '^State:.*T' "/proc/$mover/status" 2>/dev/null && break
    sleep 0.1
  done
  [ -n "$mover" ] || fail "no stopped bb-mover of $U"
  runuser -u "$U" -- kill -KILL "$mover"
  wait "$prolog" || fail "the prolog failed (the node would drain): $(cat "$TEST_DIR/prolog.out")"
  run cat "$TEST_DIR/prolog.out"
  assert_output --regexp "^bbkit node prolog: job 10: node n1: bb-stage: "
  run calls
  assert_line "scontrol|requeuehold|10"
  run slurmd epilog n1
  assert_success
  run on n1 bb-pool health
  assert_success
}

# A job script from random parts a hostile user may choose: pools (node-local, shared, unknown,
# hostile), sizes (over the node's pool and over its GRES), sources and destinations (missing,
# unreadable, outside, a symlink loop, a fifo), job names, and the GRES Slurm reports.
random_job() {
  local pools=(nvme shared nope 'nvme;touch pwned' '' 'nvme capacity=1')
  local sizes=(1MiB 8MiB 64MiB 65MiB 1PiB 0 -1 abc '$(touch pwned)' 1e3)
  local sources=("$TEST_DIR/pfs/in.dat" "$TEST_DIR/pfs/gone" /etc/shadow "$TEST_DIR/pfs/loop"
    "$TEST_DIR/pfs/fifo" "$TEST_DIR/pfs/../../" '$(touch pwned)' "$TEST_DIR/pfs/in.dat;id")
  local dests=(in.dat ../escape /etc/passwd '$BB_JOB_DIR/../../x' "a b" '`touch pwned`')
  local names=(sim '$(touch pwned)' $'two\nlines' "$(printf 'x%.0s' $(seq 300))" '-rf' '%x%j')
  local grants=(gres:bbnvme:64 gres/bbnvme:1 N/A gres/gpu:2 'gres/bbnvme(CNT:' gres:bbnvme
    'gres/bbnvme:64,gres/bbnvme:64' '' 'gres/bbnvme:99999999999999999999999')
  local lines=("#BB_LUA pool=${pools[RANDOM % 6]} capacity=${sizes[RANDOM % 10]}")
  [ $((RANDOM % 3)) = 0 ] || lines+=("#BB_LUA stage_in type=$( ((RANDOM % 2)) && echo file || echo directory) source=${sources[RANDOM % 8]} destination=${dests[RANDOM % 6]}")
  [ $((RANDOM % 3)) = 0 ] || lines+=("#BB_LUA stage_out type=directory source=${dests[RANDOM % 6]} destination=${sources[RANDOM % 8]}")
  job_script "${lines[@]}"
  printf '%s' "${names[RANDOM % 6]}" >"$TEST_DIR/name"
  printf '%s' "${grants[RANDOM % 9]}" >"$TEST_DIR/gres"
}

@test "hostile jobs at random never drain a healthy node: the prolog and epilog exit 0, the node stays healthy" {
  # A shared pool in the node's bbkit.toml that is not node-local (nor set up here).
  printf '[[pool]]\nname = "shared"\npath = "%s/shared"\ncapacity = "1GiB"\n' "$TEST_DIR" >>"$TEST_DIR/n1/bbkit.toml"
  ln -s loop "$TEST_DIR/pfs/loop"
  mkfifo "$TEST_DIR/pfs/fifo"
  chown -h "$U" "$TEST_DIR/pfs/loop" "$TEST_DIR/pfs/fifo"
  local rounds=12 i
  [ "${BBKIT_TEST_TIER:-full}" != full ] || rounds=150
  for i in $(seq 1 "$rounds"); do
    random_job
    rm -f "$TEST_DIR/state" "$TEST_DIR/calls"
    run timeout 60 bash -c "$(declare -f slurmd); $(declare -p TEST_DIR JOB U NODELIST SCRIPTS BBKIT_BIN); slurmd prolog n1"
    [ "$status" -eq 0 ] || fail "round $i: prolog exit $status for: $(cat "$TEST_DIR/job.sh") name=$(cat "$TEST_DIR/name") $(cat "$TEST_DIR/gres"): $output"
    run slurmd epilog n1
    [ "$status" -eq 0 ] || fail "round $i: epilog exit $status for: $(cat "$TEST_DIR/job.sh"): $output"
    JOB=$((JOB + 1))
  done
  run on n1 bb-pool health --node-local
  assert_success
  assert_nothing_made_but_records
}

# Nothing a hostile line could have run: no pwned file anywhere it could land.
assert_nothing_made_but_records() {
  assert_not_exist "$TEST_DIR/pwned"
  assert_not_exist "$TEST_DIR/slurmd/pwned"
  [ -z "$(ls -A "$TEST_DIR/slurmd")" ] || fail "made in slurmd's cwd: $(ls -A "$TEST_DIR/slurmd")"
}

@test "Slurm's allocation is the law: a buffer over the job's GRES per node, or without any, is the job's error; the granted size runs" {
  job_script '#BB_LUA pool=nvme capacity=8MiB'
  echo gres:bbnvme:4 >"$TEST_DIR/gres"
  run slurmd prolog n1
  assert_success
  assert_admin_comment "bbkit: node n1: bb-pool: job 10 asks for 8MiB of pool 'nvme' but Slurm gave it 4 bbnvme on this node, 4MiB"
  run on n1 bb-stat job "$JOB"
  assert_failure 66
  # 23.11 and later write it gres/NAME:COUNT.
  echo gres/gpu:1,gres/bbnvme:8 >"$TEST_DIR/gres"
  rm -f "$TEST_DIR/state"
  run slurmd prolog n2
  assert_success
  assert_output ''
  run on n2 bb-stat job "$JOB" --json
  assert_output --partial '"state": "running"'
  slurmd epilog n2
  # No GRES at all (the request skipped cli_filter and job_submit).
  echo N/A >"$TEST_DIR/gres"
  rm -f "$TEST_DIR/state" "$TEST_DIR/calls"
  run slurmd prolog n1
  assert_success
  assert_admin_comment "bbkit: node n1: bb-pool: job 10 asks for 8MiB of pool 'nvme' but Slurm gave it no bbnvme GRES on this node"
  run calls
  assert_line "scontrol|requeuehold|10"
  # slurmctld does not answer: the job is held, the node stays in service.
  touch "$TEST_DIR/gres-fails"
  rm -f "$TEST_DIR/state" "$TEST_DIR/calls"
  run slurmd prolog n1
  assert_success
  assert_admin_comment "bbkit: node n1: squeue -j 10 failed: "
}

@test "counts agree: a kept buffer comes off Slurm's count of the node's GRES (the epilog's own job no longer counted), every other GRES kept; the healthcheck fixes a restored count and restores it once the buffer is ended" {
  mkdir -m 755 "$TEST_DIR/locked"
  job_script '#BB_LUA pool=nvme capacity=24MiB' \
    "#BB_LUA stage_out type=directory source=out destination=$TEST_DIR/locked/res"
  echo 'gpu:a100:2(S:0-1),bbnvme:64,lic:1K' >"$TEST_DIR/node-gres"
  slurmd prolog n1
  buf=$(bbdir "$TEST_DIR/n1/nvme/job/main.10.1")
  runuser -u "$U" -- sh -c "mkdir '$buf/out' && echo result >'$buf/out/r'"
  # Slurm lists the ending job (COMPLETING) and another job's GRES on this node.
  printf '10 COMPLETING\n12 RUNNING\n' >"$TEST_DIR/node-jobs"
  run slurmd epilog n1
  assert_success
  run calls
  assert_line "squeue|-h|-w|n1|-t|all|-o|%A %T"
  assert_line "scontrol|-o|show|node|n1"
  assert_line "scontrol|update|NodeName=n1|Gres=gpu:a100:2,bbnvme:40,lic:1024"
  assert_line --regexp "^logger\|-t\|bbkit-gres\|-p\|daemon.notice\|node n1: Slurm's GRES set to gpu:a100:2,bbnvme:40,lic:1024 \(was "
  run on n1 bb-pool check --slurm-jobs 12 --slurm-node-gres "$(cat "$TEST_DIR/node-gres")"
  assert_output --partial "stalled-stage: pool nvme: main.10.1: stage-out stopped"
  refute_output --partial gres-count
  # A reconfigure gives slurm.conf's count back: check names it, the healthcheck fixes it.
  echo 'gpu:a100:2(S:0-1),bbnvme:64,lic:1K' >"$TEST_DIR/node-gres"
  printf '' >"$TEST_DIR/node-jobs"
  run on n1 bb-pool check --slurm-jobs "" --slurm-node-gres "$(cat "$TEST_DIR/node-gres")"
  assert_failure 1
  assert_line --regexp "^gres-count: pool nvme: bbnvme: Slurm counts 64 units on this node, bbkit 40 \(24 held by no job Slurm has here\)$"
  run on n1 bb-stat gres --slurm-jobs "" --slurm-node-gres "$(cat "$TEST_DIR/node-gres")" --json
  assert_output --partial '"agrees": false'
  rm "$TEST_DIR/calls"
  run healthcheck n1
  assert_success
  [ "$(cat "$TEST_DIR/node-gres")" = gpu:a100:2,bbnvme:40,lic:1024 ]
  # Agreeing counts cost two lookups and no update.
  rm "$TEST_DIR/calls"
  run healthcheck n1
  assert_success
  run calls
  refute_output --partial "update|NodeName"
  # The administrator delivers and ends the buffer; the healthcheck gives the space back.
  chmod 1777 "$TEST_DIR/locked"
  on n1 bb-stage out --retry --job 10 >/dev/null
  on n1 bb-stage --job 10 end >/dev/null
  run healthcheck n1
  assert_success
  [ "$(cat "$TEST_DIR/node-gres")" = gpu:a100:2,bbnvme:64,lic:1024 ]
  # Slurm's answers in another form than its own: nothing is set, one line says why, and the
  # healthy node's healthcheck still exits 0 (a site's health program may drain on its status).
  rm -f "$TEST_DIR/node-update"
  echo 'bbnvme:64(CNT:3)' >"$TEST_DIR/node-gres"
  run healthcheck n1
  assert_success
  assert_output --regexp "^bbkit healthcheck: node n1: bb-stat: Slurm's GRES of this node, 'bbnvme:64\(CNT:3\)', is not a list Slurm prints"
  assert_not_exist "$TEST_DIR/node-update"
  # An administrator's reason naming a Gres= after the node's own: the node's own is read.
  echo 'gpu:2,bbnvme:64' >"$TEST_DIR/node-gres"
  printf 'disk check Gres=bbnvme:3' >"$TEST_DIR/node-reason"
  run healthcheck n1
  assert_success
  [ "$(cat "$TEST_DIR/node-gres")" = gpu:2,bbnvme:64 ]
  rm "$TEST_DIR/node-reason"
  # A count Slurm set to 0 is no longer printed: the pool's GRES is named again.
  on n1 bb-pool alloc --job 30 --user "$U" --script "$TEST_DIR/job.sh" --node n1 --nodes n1 >/dev/null
  echo 'gpu:2(S:0)' >"$TEST_DIR/node-gres"
  run healthcheck n1
  assert_success
  [ "$(cat "$TEST_DIR/node-gres")" = gpu:2,bbnvme:40 ]
  # Changed by an administrator between two looks: their update stands.
  echo 'gpu:2,bbnvme:64' >"$TEST_DIR/node-gres"
  echo 'gpu:4,bbnvme:64' >"$TEST_DIR/node-gres-then"
  run healthcheck n1
  assert_success
  assert_output --partial "its Gres= changed from gpu:2,bbnvme:64 to gpu:4,bbnvme:64 meanwhile: not updated"
  [ "$(cat "$TEST_DIR/node-gres")" = gpu:4,bbnvme:64 ]
  # A pool drained here: Slurm counts only what live jobs hold, none, until it is resumed.
  on n1 bb-teardown --job 30 >/dev/null
  on n1 bb-pool reap >/dev/null
  on n1 bb-pool drain nvme >/dev/null
  run healthcheck n1
  assert_success
  [ "$(cat "$TEST_DIR/node-gres")" = gpu:4,bbnvme:0 ]
  on n1 bb-pool resume nvme >/dev/null
  echo 'gpu:4' >"$TEST_DIR/node-gres"
  run healthcheck n1
  assert_success
  [ "$(cat "$TEST_DIR/node-gres")" = gpu:4,bbnvme:64 ]
}

@test "counts agree at random: whatever buffers are kept and whichever jobs Slurm lists, Slurm's count becomes the pool's units less what no listed job holds, and nothing else of the node's GRES changes" {
  local rounds=6 i j id state want held
  [ "${BBKIT_TEST_TIER:-full}" != full ] || rounds=40
  printf '#!/bin/sh\n#BB_LUA pool=nvme capacity=%sMiB\n' 3 >"$TEST_DIR/small.sh"
  for i in $(seq 1 "$rounds"); do
    # Up to 5 buffers of 3 MiB, each job listed by Slurm or not, in a random state.
    : >"$TEST_DIR/node-jobs"
    held=0
    for j in $(seq 1 $((RANDOM % 6))); do
      id=$((1000 * i + j))
      on n1 bb-pool alloc --job "$id" --user "$U" --script "$TEST_DIR/small.sh" --node n1 --nodes n1 >/dev/null
      state=$(printf '%s\n' RUNNING COMPLETING CONFIGURING SUSPENDED STOPPED REQUEUED COMPLETED CANCELLED FAILED PENDING "" | shuf -n 1)
      case $state in
        # Jobs that hold their GRES; Slurm releases them once a job starts completing.
        RUNNING | CONFIGURING | SUSPENDED | STOPPED) echo "$id $state" >>"$TEST_DIR/node-jobs" ;;
        "") held=$((held + 3)) ;;
        *) echo "$id $state" >>"$TEST_DIR/node-jobs"; held=$((held + 3)) ;;
      esac
    done
    echo "gpu:$((RANDOM % 9))(S:0),bbnvme:$((RANDOM % 2000))K,mps:$((RANDOM % 300))" >"$TEST_DIR/node-gres"
    want=$(sed -e "s/(S:0)//" -e "s/bbnvme:[0-9]*K/bbnvme:$((64 - held))/" -e 's/\(mps:[0-9]*\)/\1/' "$TEST_DIR/node-gres")
    run healthcheck n1
    [ "$status" -eq 0 ] || fail "round $i: healthcheck exit $status: $output"
    [ "$(cat "$TEST_DIR/node-gres")" = "$want" ] ||
      fail "round $i: Slurm's count $(cat "$TEST_DIR/node-gres"), want $want (jobs: $(paste -s -d, "$TEST_DIR/node-jobs"))"
    # Every buffer of the round ended: the whole pool is Slurm's again.
    for j in $(seq 1 5); do on n1 bb-teardown --job $((1000 * i + j)) >/dev/null 2>&1 || true; done
    on n1 bb-pool reap >/dev/null
  done
}

# healthcheck as slurmd runs it: root, SLURMD_NODENAME and nothing else of Slurm's (plus the
# node's BBKIT_CONFIG and the tools under test, as for the Prolog).
healthcheck() {
  local node=$1
  shift
  (cd "$TEST_DIR/slurmd" && unshare -m --propagation private sh -c \
    'mount --bind "$1" /usr/local/sbin || exit 99; shift; exec "$@"' sh "$TEST_DIR/slurm-bin" \
    env -i SLURMD_NODENAME="$node" BBKIT_CONFIG="$TEST_DIR/$node/bbkit.toml" BBKIT_BINDIR="$BBKIT_BIN" "$@" \
    "$SCRIPTS/healthcheck" </dev/null 3>&-)
}

@test "healthcheck drains an unhealthy node itself (Slurm drains nothing on its status) and resumes only a node it drained" {
  run healthcheck n1
  assert_success
  assert_output ''
  run calls
  assert_line "sinfo|-h|-n|n1|-o|%E"
  refute_output --partial "update|NodeName"
  # The pool not mounted: drained with the health check's line as the reason.
  mv "$TEST_DIR/n1/nvme/.bbkit-pool" "$TEST_DIR/n1/marker"
  run healthcheck n1
  assert_failure 69
  assert_output --regexp "^bbkit healthcheck: node n1: bbkit health: bb-pool: unhealthy: pool nvme: .*not mounted"
  run cat "$TEST_DIR/node-update"
  assert_line State=DRAIN
  assert_line --regexp "^Reason=bbkit health: bb-pool: unhealthy: pool nvme: "
  [ "$(wc -l <"$TEST_DIR/node-update")" -eq 2 ]
  # Mounted again: the node it drained comes back.
  mv "$TEST_DIR/n1/marker" "$TEST_DIR/n1/nvme/.bbkit-pool"
  run healthcheck n1
  assert_success
  run cat "$TEST_DIR/node-update"
  assert_output State=RESUME
  # A node drained by someone else stays drained.
  rm "$TEST_DIR/node-update"
  printf 'Prolog error' >"$TEST_DIR/node-reason"
  run healthcheck n1
  assert_success
  assert_not_exist "$TEST_DIR/node-update"
  printf 'bbkit healthx' >"$TEST_DIR/node-reason"
  run healthcheck n1
  assert_not_exist "$TEST_DIR/node-update"
  # A hostile node name reaches scontrol as one argument and the message as one line.
  mv "$TEST_DIR/n1/nvme/.bbkit-pool" "$TEST_DIR/n1/marker"
  run healthcheck $'n1\n$(touch pwned)' BBKIT_CONFIG="$TEST_DIR/n1/bbkit.toml"
  assert_failure 69
  [ "${#lines[@]}" -eq 1 ]
  assert_not_exist "$TEST_DIR/pwned"
  assert_not_exist "$TEST_DIR/slurmd/pwned"
}
