#!/usr/bin/env bats
# Node-local pools at the command line (bbkit(7), NODE-LOCAL POOLS): the configuration's keys,
# bb-parse's GRES, bb-pool alloc's place among the job's nodes, and stage-in and stage-out on
# several nodes. Each "node" here is what a compute node holds: its own bbkit.toml (the same
# text but for the paths), state directory and pool; the job's stage lines run on each in turn,
# as the Prologs and Epilogs of a real multi-node job do at once (tests/slurm/nodelocal.bats).

load common

on() {  # on NODE COMMAND...: the command as it runs on that node
  local node=$1
  shift
  BBKIT_CONFIG=$TEST_DIR/$node/bbkit.toml "$@"
}

setup() {
  common_setup
  U=$(test_user)
  mkdir -p "$TEST_DIR/pfs"
  chown "$U" "$TEST_DIR/pfs"
  for node in n1 n2 n3; do
    # Each node also has a pool that is not node-local.
    mkdir -p "$TEST_DIR/$node/shared"
    node_config "$node" '[[pool]]' 'name = "shared"' "path = \"$TEST_DIR/$node/shared\"" \
      'capacity = "64MiB"' 'granularity = "1MiB"'
    on "$node" bb-pool init shared >/dev/null
  done
  # The input: 300 files in a tree, a file of its own, an empty directory.
  runuser -u "$U" -- sh -c "mkdir -p '$TEST_DIR/pfs/in/a/b' '$TEST_DIR/pfs/in/empty' &&
    for i in \$(seq 1 300); do echo \"file \$i\" >'$TEST_DIR/pfs/in/a/b/f'\$i; done &&
    echo table >'$TEST_DIR/pfs/table.dat'"
}

teardown() {
  common_teardown
}

script() {  # script FILE LINE...: a job script with these directive lines
  local file=$1
  shift
  { echo '#!/bin/sh'; printf '%s\n' "$@"; } >"$file"
  chmod 644 "$file"
}

# The job's buffer directory on NODE.
buffer_on() {
  bbdir "$TEST_DIR/$1/nvme/job/main.$2.1"
}

@test "bb-parse reports the GRES a node-local request asks Slurm for, per node, in whole granules" {
  script "$TEST_DIR/job.sh" '#BB_LUA pool=nvme capacity=1500KiB'
  run on n1 bb-parse --script "$TEST_DIR/job.sh" --json
  assert_success
  assert_output --partial '"gres": "bbnvme:2"'
  assert_output --partial '"node_local": true'
  script "$TEST_DIR/shared.sh" '#BB_LUA pool=shared capacity=1500KiB'
  run on n1 bb-parse --script "$TEST_DIR/shared.sh" --json
  assert_success
  refute_output --partial '"gres"'
  # More than one node's pool holds: refused at submit, whatever the number of nodes.
  script "$TEST_DIR/big.sh" '#BB_LUA pool=nvme capacity=65MiB'
  run on n1 bb-parse --script "$TEST_DIR/big.sh" --json
  assert_failure 65
  assert_output --partial "capacity=65MiB can never be satisfied: pool 'nvme' holds only 64MiB"
  run on n1 bb-parse config
  assert_success
  assert_output --partial 'node_local = true'
  assert_output --partial 'gres = "bbnvme"'
}

@test "node_local and gres in bbkit.toml: refused outside standalone mode, for shared pools, and when not GRES names" {
  cfg=$TEST_DIR/n1/bbkit.toml
  sed -i 's/^mode = .*/mode = "slurm"/' "$cfg"
  run on n1 bb-parse config
  assert_failure 78
  assert_output --partial 'node_local: node-local pools need mode = "standalone"'
  sed -i 's/^mode = .*/mode = "standalone"/' "$cfg"
  printf 'gres = "bbshared"\n' >>"$cfg"  # the last pool is the shared one
  run on n1 bb-parse config
  assert_failure 78
  assert_output --partial 'gres: applies to node-local pools only'
  sed -i '$d' "$cfg"
  sed -i 's/^node_local = true/node_local = true\ngres = "bb;nvme"/' "$cfg"
  run on n1 bb-parse config
  assert_failure 78
  assert_output --partial "'bb;nvme' is not a GRES name"
  [ "${#lines[@]}" -eq 1 ]
}

@test "alloc records the node's place; --node without --nodes, a stranger, a bad name and a shared pool are refused" {
  script "$TEST_DIR/job.sh" '#BB_LUA pool=nvme capacity=8MiB'
  run on n2 bb-pool alloc --job 7 --user "$U" --script "$TEST_DIR/job.sh" --node n2 --nodes n1,n2,n3
  assert_success
  run on n2 bb-stat job 7
  assert_success
  assert_line --regexp '^node: +n2 \(2 of 3 of the job.s nodes\)$'
  run on n2 bb-stat job 7 --json
  assert_output --partial '"node": {'
  assert_output --partial '"index": 1'

  run on n1 bb-pool alloc --job 8 --user "$U" --script "$TEST_DIR/job.sh" --node n1
  assert_failure 64
  assert_output "bb-pool: --node and --nodes go together"
  run on n1 bb-pool alloc --job 8 --user "$U" --script "$TEST_DIR/job.sh" --node n9 --nodes n1,n2
  assert_failure 65
  assert_output "bb-pool: node 'n9' is not in the job's node list"
  run on n1 bb-pool alloc --job 8 --user "$U" --script "$TEST_DIR/job.sh" --node n1 --nodes 'n1,../../etc'
  assert_failure 65
  assert_output --partial "invalid node name '../../etc'"
  script "$TEST_DIR/shared.sh" '#BB_LUA pool=shared capacity=8MiB'
  run on n1 bb-pool alloc --job 8 --user "$U" --script "$TEST_DIR/shared.sh" --node n1 --nodes n1
  assert_failure 65
  assert_output "bb-pool: job 8 asks for pool 'shared', which is not node-local: a job's nodes reserve space in node-local pools only"
  # Nothing was reserved by the refusals.
  run on n1 bb-stat job 8
  assert_failure 66
  # Without --node: this host alone.
  run on n1 bb-pool alloc --job 9 --user "$U" --script "$TEST_DIR/job.sh"
  assert_success
  run on n1 bb-stat job 9
  assert_line --regexp "^node: +$(hostname -s) \(1 of 1 of the job.s nodes\)$"
}

@test "a node-local buffer never waits in the pool's queue: short, 75 at once" {
  script "$TEST_DIR/big.sh" '#BB_LUA pool=nvme capacity=40MiB'
  on n1 bb-pool alloc --job 1 --user "$U" --script "$TEST_DIR/big.sh" --node n1 --nodes n1 >/dev/null
  SECONDS=0
  run on n1 bb-pool alloc --job 2 --user "$U" --script "$TEST_DIR/big.sh" --node n1 --nodes n1 --wait 60
  assert_failure 75
  assert_output --partial "(node-local: Slurm counts this node's space otherwise; see bb-pool check)"
  [ "$SECONDS" -lt 30 ]
}

@test "distribute=shard: the nodes' files together are the input, each file once; copy gives every node all" {
  script "$TEST_DIR/job.sh" '#BB_LUA pool=nvme capacity=16MiB' \
    "#BB_LUA stage_in type=directory source=$TEST_DIR/pfs/in destination=\$BB_JOB_DIR/in distribute=shard" \
    "#BB_LUA stage_in type=file source=$TEST_DIR/pfs/table.dat destination=\$BB_JOB_DIR/table.dat"
  for node in n1 n2 n3; do
    on "$node" bb-pool alloc --job 5 --user "$U" --script "$TEST_DIR/job.sh" --node "$node" --nodes n1,n2,n3 >/dev/null
    run on "$node" bb-stage in --job 5
    assert_success
  done
  : >"$TEST_DIR/all"
  for node in n1 n2 n3; do
    buf=$(buffer_on "$node" 5)
    # Every node has the tree's directories and the copied file.
    [ -d "$buf/in/a/b" ] && [ -d "$buf/in/empty" ]
    [ "$(cat "$buf/table.dat")" = table ]
    count=$(find "$buf/in" -type f | wc -l)
    [ "$count" -gt 50 ] || fail "node $node got only $count of 300 files"
    (cd "$buf/in" && find . -type f -exec sh -c 'printf "%s %s\n" "$1" "$(cat "$1")"' _ {} \;) >>"$TEST_DIR/all"
  done
  sort "$TEST_DIR/all" >"$TEST_DIR/all.sorted"
  (cd "$TEST_DIR/pfs/in" && find . -type f -exec sh -c 'printf "%s %s\n" "$1" "$(cat "$1")"' _ {} \;) | sort >"$TEST_DIR/input"
  diff "$TEST_DIR/input" "$TEST_DIR/all.sorted"
}

@test "a shard counts against the node's buffer as it is copied, not the whole input" {
  runuser -u "$U" -- sh -c "mkdir '$TEST_DIR/pfs/big' && for i in 1 2 3 4 5 6; do head -c 1048576 /dev/zero >'$TEST_DIR/pfs/big/part'\$i; done"
  # 6 MiB of input into 4 MiB buffers: too much for one node, enough spread over three.
  script "$TEST_DIR/job.sh" '#BB_LUA pool=nvme capacity=4MiB' \
    "#BB_LUA stage_in type=directory source=$TEST_DIR/pfs/big destination=\$BB_JOB_DIR/big distribute=shard"
  run on n1 bb-parse --script "$TEST_DIR/job.sh" --check-sources --user "$U"
  assert_success
  for node in n1 n2 n3; do
    on "$node" bb-pool alloc --job 6 --user "$U" --script "$TEST_DIR/job.sh" --node "$node" --nodes n1,n2,n3 >/dev/null
    run on "$node" bb-stage in --job 6
    assert_success
  done
  [ "$(cat "$TEST_DIR"/n?/nvme/job/main.6.1*/big/* | wc -c)" -eq $((6 * 1048576)) ]
  # The same input on one node alone does not fit.
  on n1 bb-pool alloc --job 16 --user "$U" --script "$TEST_DIR/job.sh" --node n1 --nodes n1 >/dev/null
  run on n1 bb-stage in --job 16
  assert_failure 65
  assert_output --partial "but the buffer holds 4MiB"
}

@test "gather=nodes: each node's results land under its own name; gather=merge merges and never replaces another node's file" {
  script "$TEST_DIR/job.sh" '#BB_LUA pool=nvme capacity=8MiB' \
    "#BB_LUA stage_out type=directory source=\$BB_JOB_DIR/out destination=$TEST_DIR/pfs/results" \
    "#BB_LUA stage_out type=file source=\$BB_JOB_DIR/log destination=$TEST_DIR/pfs/logs/run.log" \
    "#BB_LUA stage_out type=directory source=\$BB_JOB_DIR/m destination=$TEST_DIR/pfs/merged gather=merge"
  for node in n1 n2; do
    on "$node" bb-pool alloc --job 4 --user "$U" --script "$TEST_DIR/job.sh" --node "$node" --nodes n1,n2 >/dev/null
    on "$node" bb-stage in --job 4 >/dev/null
    on "$node" bb-stage pre-run --job 4
    buf=$(buffer_on "$node" 4)
    runuser -u "$U" -- sh -c "mkdir -p '$buf/out/sub' '$buf/m' && echo $node >'$buf/out/sub/r' && echo log-$node >'$buf/log' && echo only-$node >'$buf/m/$node.txt' && echo same >'$buf/m/common'"
    touch -d '2026-01-01 00:00:00' "$buf/m/common"
  done
  for node in n1 n2; do
    run on "$node" bb-stage end --job 4
    assert_success
  done
  [ "$(cat "$TEST_DIR/pfs/results/n1/sub/r")" = n1 ]
  [ "$(cat "$TEST_DIR/pfs/results/n2/sub/r")" = n2 ]
  [ "$(cat "$TEST_DIR/pfs/logs/n1/run.log")" = log-n1 ]
  [ "$(cat "$TEST_DIR/pfs/logs/n2/run.log")" = log-n2 ]
  [ "$(cat "$TEST_DIR/pfs/merged/n1.txt")" = only-n1 ]
  [ "$(cat "$TEST_DIR/pfs/merged/n2.txt")" = only-n2 ]
  [ "$(cat "$TEST_DIR/pfs/merged/common")" = same ]  # identical on both: written once

  # A file of the same name but other contents on the second node: refused, the first kept,
  # the second node's buffer and data kept.
  for node in n1 n2; do
    on "$node" bb-pool alloc --job 14 --user "$U" --script "$TEST_DIR/job.sh" --node "$node" --nodes n1,n2 >/dev/null
    on "$node" bb-stage in --job 14 >/dev/null
    on "$node" bb-stage pre-run --job 14
    buf=$(buffer_on "$node" 14)
    runuser -u "$U" -- sh -c "mkdir -p '$buf/out' '$buf/m' && : >'$buf/log' && echo from-$node >'$buf/m/clash'"
  done
  rm -f "$TEST_DIR/pfs/merged/clash"
  run on n1 bb-stage end --job 14
  assert_success
  run on n2 bb-stage end --job 14
  assert_failure 73
  assert_output --partial "exists (another node's result): $TEST_DIR/pfs/merged/clash"
  [ "$(cat "$TEST_DIR/pfs/merged/clash")" = from-n1 ]
  [ "$(cat "$(buffer_on n2 14)/m/clash")" = from-n2 ]
  run on n2 bb-stat job 14
  assert_line --regexp '^state: +staging-out$'
}

@test "bb-stat gres: each node-local pool's count less what no job of Slurm's holds; bad lists and options are refused 64, a GRES text Slurm does not print 65" {
  script "$TEST_DIR/a.sh" '#BB_LUA pool=nvme capacity=10MiB'
  script "$TEST_DIR/b.sh" '#BB_LUA pool=nvme capacity=1500KiB'
  on n1 bb-pool alloc --job 7 --user "$U" --script "$TEST_DIR/a.sh" --node n1 --nodes n1 >/dev/null
  on n1 bb-pool alloc --job 8 --user "$U" --script "$TEST_DIR/b.sh" --node n1 --nodes n1 >/dev/null
  run on n1 bb-stat gres --slurm-jobs 7
  assert_success
  assert_line --regexp '^ *pool +gres +units +held +count +slurm$'
  assert_line --regexp '^ *nvme +bbnvme +64 +2 +62 +-$'
  refute_output --partial shared
  run on n1 bb-stat gres --slurm-jobs "" --slurm-node-gres 'gpu:2(S:0),bbnvme:64'
  assert_line --regexp '^ *nvme +bbnvme +64 +12 +52 +64\*$'
  run on n1 bb-stat gres --slurm-jobs "" --slurm-node-gres 'gpu:2(S:0),bbnvme:64' --slurm-update
  assert_success
  assert_output gpu:2,bbnvme:52
  run on n1 bb-stat gres --slurm-jobs $'7\n8' --slurm-node-gres bbnvme:64 --slurm-update
  assert_success
  assert_output ''
  run on n1 bb-stat gres --slurm-jobs 7,8 --slurm-node-gres bbnvme:64 --json
  assert_output --partial '"agrees": true'
  for args in "gres" "gres --slurm-jobs 7_1" "gres --slurm-jobs x;reboot" "gres --slurm-jobs 7 --slurm-update" \
    "gres --slurm-jobs 7 --slurm-node-gres bbnvme:6 --slurm-update --json" "pools --slurm-jobs 7" \
    "gres --slurm-jobs 7 --prometheus $TEST_DIR/p.prom" "gres extra --slurm-jobs 7" "--dwstat pools --slurm-jobs 7"; do
    # shellcheck disable=SC2086 # the words of each case
    run on n1 bb-stat $args
    assert_failure 64
    [ "${#lines[@]}" -eq 1 ] || fail "$args: $output"
  done
  assert_not_exist "$TEST_DIR/p.prom"
  for gres in 'bbnvme' 'bbnvme:6(CNT:6)' 'bbnvme:1,bbnvme:2' 'bbnvme:fast:6' 'bbnvme:6)'; do
    run on n1 bb-stat gres --slurm-jobs 7 --slurm-node-gres "$gres"
    assert_failure 65
    assert_output --regexp "^bb-stat: Slurm's GRES of this node, "
  done
  run on n1 bb-pool check --slurm-jobs 7
  assert_failure 64
  run on n1 bb-pool check --slurm-jobs 7_1 --slurm-node-gres bbnvme:64
  assert_failure 64
}
