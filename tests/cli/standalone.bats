#!/usr/bin/env bats
# Standalone mode's promises at the command line (bbkit(7), STANDALONE MODE): bb-teardown keeps
# results that are not staged out unless --force, bb-stage end sequences a job's end, and a
# failed or killed stage stays visible in bb-stat job and bb-pool check, even after teardown.

load common

setup() {
  staging_setup
  mkdir -m 755 "$TEST_DIR/locked"
}
teardown() {
  [ -z "${stager:-}" ] || kill -9 "$stager" 2>/dev/null || true
  common_teardown
}

as_user() { runuser -u "$U" -- "$@"; }

# Job $1 with a stage-out of its buffer's out/ into $2, run to post-run with a result written.
ran_job() {
  bb-pool alloc --job "$1" --user "$U" --bb "#BB_LUA pool=nvme capacity=1G #BB_LUA stage_out type=directory source=out destination=$2" >/dev/null
  bb-stage in --job "$1" >/dev/null
  bb-stage pre-run --job "$1"
  local buf
  buf=$(bbdir "$TEST_DIR/nvme/job/main.$1.1")
  as_user sh -c "mkdir '$buf/out' && echo result >'$buf/out/r'"
}

@test "bb-teardown refuses a buffer whose results are not staged out, naming them, and keeps them" {
  ran_job 40 "$TEST_DIR/pfs/res"
  run bb-teardown --job 40
  assert_failure 69
  assert_output --partial "main.40.1 holds job 40's results for $TEST_DIR/pfs/res"
  assert_output --partial "it is running"
  assert_output --partial "bb-teardown --force --job 40"
  [ "${#lines[@]}" -eq 1 ]
  [ "$(cat "$(bbdir $TEST_DIR/nvme/job/main.40.1)/out/r")" = result ]
  run bb-stat job 40 --json
  assert_output --partial '"state": "running"'
}

@test "a failed stage-out keeps the data through bb-teardown; --retry delivers, then teardown ends it" {
  ran_job 41 "$TEST_DIR/locked/res"
  bb-stage post-run --job 41
  run bb-stage out --job 41
  assert_failure 77
  run bb-teardown --job 41
  assert_failure 69
  assert_output --partial "stage-out failed: "
  assert_output --partial "bb-stage out --retry --job 41"
  chown "$U" "$TEST_DIR/locked"
  bb-stage out --retry --job 41 >/dev/null
  [ "$(cat "$TEST_DIR/locked/res/r")" = result ]
  run bb-teardown --job 41
  assert_success
  assert_output --partial "torn down: main.41.1"
}

@test "bb-teardown --force discards them and the audit log says so" {
  ran_job 42 "$TEST_DIR/pfs/res"
  run bb-teardown --force --job 42
  assert_success
  assert_not_exist "$(bbdir $TEST_DIR/nvme/job/main.42.1)"
  grep -q "teardown-force.*buffer=main.42.1.*stage_out=out->$TEST_DIR/pfs/res" "$TEST_DIR/state/log/audit.log"
}

@test "a job that never ran, or that has no stage-out, is torn down without --force" {
  bb-pool alloc --job 43 --user "$U" --bb "#BB_LUA capacity=1G #BB_LUA stage_out type=directory source=out destination=$TEST_DIR/pfs/res" >/dev/null
  run bb-teardown --job 43
  assert_success
  bb-pool alloc --job 44 --user "$U" --capacity 1G >/dev/null
  bb-stage in --job 44 >/dev/null
  bb-stage pre-run --job 44
  run bb-teardown --job 44
  assert_success
}

@test "Slurm mode: Slurm's teardown stands" {
  write_config 'mode = "slurm"'
  ran_job 45 "$TEST_DIR/pfs/res"
  run bb-teardown --job 45
  assert_success
}

@test "bb-stage end: post-run, stage-out and teardown for a job that ran" {
  ran_job 46 "$TEST_DIR/pfs/res"
  run bb-stage --job 46 end
  assert_success
  assert_output --partial "stage-out of main.46.1: 1 file written"
  assert_output --partial "torn down: main.46.1"
  [ "$(cat "$TEST_DIR/pfs/res/r")" = result ]
  run bb-stage --job 46 end
  assert_success
  assert_output --partial "note: job 46's burst buffer is already torn down"
  run bb-stage --job 99 end --json
  assert_success
  assert_output --partial '"note": "job 99 has no burst buffer"'
}

@test "bb-stage end: a failed stage-out keeps buffer and data; after --retry, end finishes" {
  ran_job 47 "$TEST_DIR/locked/res"
  run bb-stage --job 47 end
  assert_failure 77
  assert_output --partial "the data is kept in the buffer"
  [ "$(cat "$(bbdir $TEST_DIR/nvme/job/main.47.1)/out/r")" = result ]
  run bb-stat job 47
  assert_output --regexp "failure: +[0-9T:-]+ staging-out: cannot create directory $TEST_DIR/locked/res: permission denied"
  run bb-pool check
  assert_output --partial "stalled-stage"
  assert_output --partial "bb-stage --job 47 out --retry delivers it, bb-teardown --force --job 47 discards it"
  run bb-stage --job 47 end
  assert_failure 69
  chown "$U" "$TEST_DIR/locked"
  bb-stage out --retry --job 47 >/dev/null
  run bb-stage --job 47 end
  assert_success
  assert_output --partial "torn down: main.47.1"
  [ "$(cat "$TEST_DIR/locked/res/r")" = result ]
}

@test "bb-stage end: a job that never ran is torn down at once, its running stage-in stopped" {
  as_user fallocate -l 3G "$TEST_DIR/pfs/big"
  bb-pool alloc --job 48 --user "$U" --bb "#BB_LUA capacity=4G #BB_LUA stage_in type=file source=$TEST_DIR/pfs/big destination=big" >/dev/null
  sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
  bb-stage in --job 48 >/dev/null 2>&1 &
  stager=$!
  for _ in $(seq 200); do [ -e "$(bbdir $TEST_DIR/nvme/job/main.48.1)/big" ] || ls -A "$(bbdir $TEST_DIR/nvme/job/main.48.1)" | grep -q . && break; sleep 0.05; done
  run bb-stage --job 48 end
  assert_success
  assert_output --partial "torn down: main.48.1"
  wait "$stager" || true
  stager=
  run bb-stat job 48 --json
  assert_output --partial '"state": "complete"'
}

@test "a killed stage-in: bb-stat job names the dead stager, bb-pool check reports it, teardown keeps the failure" {
  as_user mkdir "$TEST_DIR/pfs/many"
  as_user sh -c "cd '$TEST_DIR/pfs/many' && for i in \$(seq 200); do head -c 100000 /dev/urandom >f\$i; done"
  bb-pool alloc --job 49 --user "$U" --bb "#BB_LUA capacity=1G #BB_LUA stage_in type=directory source=$TEST_DIR/pfs/many destination=m" >/dev/null
  if [ -n "$(BBKIT_FAULT=list bb-pool)" ]; then
    BBKIT_FAULT="mover.file-copied:10:stop" bb-stage in --job 49 >/dev/null 2>&1 &
  else
    bb-stage in --job 49 >/dev/null 2>&1 &
  fi
  stager=$!
  for _ in $(seq 400); do [ -d "$(bbdir $TEST_DIR/nvme/job/main.49.1)/m" ] && break; sleep 0.02; done
  pid=$stager
  kill -9 "$stager"; wait "$stager" || true
  stager=
  # Without crash injection (the sanitizer build) the copy may have finished first.
  bb-stat job 49 --json | grep -q '"state": "staging-in"' || skip "the stage-in ended before the kill"
  run bb-stat job 49
  assert_output --partial "state:      staging-in"
  assert_output --partial "stager:     none: stage-in stopped: its stager (pid $pid) is gone"
  run bb-pool check
  assert_output --partial "stalled-stage"
  assert_output --partial "bb-stage --job 49 in resumes it"
  bb-pool recover >/dev/null
  run bb-stat job 49
  assert_output --regexp "failure: +[0-9T:-]+ staging-in: stage-in interrupted: the stager died"
  bb-teardown --job 49 >/dev/null
  run bb-stat job 49 --json
  assert_output --partial '"state": "complete"'
  assert_output --partial '"failure": "staging-in: stage-in interrupted'
}

@test "TeardownFailure after a failed stage-in: the failure survives the teardown" {
  write_config 'flags = ["TeardownFailure"]'
  bb-pool alloc --job 50 --user "$U" --bb "#BB_LUA capacity=1G #BB_LUA stage_in type=file source=$TEST_DIR/pfs/missing destination=x" >/dev/null
  run bb-stage in --job 50
  assert_failure
  run bb-stat job 50
  assert_output --partial "state:      complete"
  assert_output --regexp "failure: +[0-9T:-]+ staging-in: .*$TEST_DIR/pfs/missing"
}

# bbkit-job of the installed tree.
bbkit_job() { "${BBKIT_BIN_DIR:?the suites run against the installed tree}/../share/bbkit/standalone/bbkit-job" "$@"; }

@test "bbkit-job begin: --node and --nodes of a node-local buffer are checked before anything is reserved (64, one line)" {
  printf '[[pool]]\nname = "local"\npath = "%s/local"\ncapacity = "10GiB"\ngranularity = "1GiB"\nnode_local = true\n' "$TEST_DIR" >>"$TEST_DIR/bbkit.toml"
  mkdir "$TEST_DIR/local"
  bb-pool init local >/dev/null
  printf '#!/bin/sh\n#BB_LUA pool=local capacity=1G\n' >"$TEST_DIR/job.sh"
  local many
  while IFS='|' read -r node nodes message; do
    run bbkit_job begin --node "$node" --nodes "$nodes" 70 "$U" "$TEST_DIR/job.sh"
    assert_failure 64
    assert_output "bbkit-job: $message"
  done <<EOF2
n1||--node and --nodes go together
|n1,n2|--node and --nodes go together
-n1|-n1,n2|invalid node name '-n1' (expected 1-64 letters, digits, '.', '_', '-', a letter or digit first)
n1|n1,n 2|invalid node name 'n 2' (expected 1-64 letters, digits, '.', '_', '-', a letter or digit first)
n1|n1,,n2|invalid node name '' (expected 1-64 letters, digits, '.', '_', '-', a letter or digit first)
n1|n1,n2/x|invalid node name 'n2/x' (expected 1-64 letters, digits, '.', '_', '-', a letter or digit first)
n1|n1,$(printf 'a%.0s' $(seq 65))|invalid node name '$(printf 'a%.0s' $(seq 65))' (expected 1-64 letters, digits, '.', '_', '-', a letter or digit first)
n3|n1,n2|node 'n3' is not in --nodes
n1|n1,n2,n1|node 'n1' is twice in --nodes
EOF2
  run bbkit_job begin --node n1 --nodes "$(printf 'n1\nn2')" 70 "$U" "$TEST_DIR/job.sh"
  assert_failure 64
  assert_output "bbkit-job: invalid --nodes (a newline in it)"
  run bbkit_job begin --node "$(printf 'n1\nn2')" --nodes n1,n2 70 "$U" "$TEST_DIR/job.sh"
  assert_failure 64
  assert_output --partial "bbkit-job: invalid node name 'n1"
  # A job of 20000 nodes is checked at once (no quadratic loop in sh).
  many=$(seq -f 'n%g' 1 20000 | paste -s -d, -)
  run timeout 10 "${BBKIT_BIN_DIR}/../share/bbkit/standalone/bbkit-job" begin --node n19999 --nodes "$many,n7" 70 "$U" "$TEST_DIR/job.sh"
  assert_failure 64
  assert_output "bbkit-job: node 'n7' is twice in --nodes"
  run bbkit_job begin --node n1 --nodes n1 70 "$U" "$TEST_DIR/job.sh" name extra
  assert_failure 64
  assert_output --partial "usage: bbkit-job begin [--node NAME --nodes LIST [--slurm-gres GRES]] JOB USER SCRIPT"
  run bbkit_job begin --bogus n1 70 "$U" "$TEST_DIR/job.sh"
  assert_failure 64
  run bb-pool show local --json
  assert_output --partial '"used": 0'
  [ -z "$(ls "$TEST_DIR/local/job")" ]
  # A job without directives never fails for a node name it does not use.
  printf '#!/bin/sh\necho no buffer\n' >"$TEST_DIR/plain.sh"
  run bbkit_job begin --node 'bad name' --nodes 'bad name' 72 "$U" "$TEST_DIR/plain.sh"
  assert_success
}

@test "bbkit-job begin --node --nodes for a pool that is not node-local: the job's error (65), nothing reserved" {
  printf '#!/bin/sh\n#BB_LUA pool=nvme capacity=1G\n' >"$TEST_DIR/job.sh"
  run bbkit_job begin --node n2.example --nodes n1,n2.example,n_3 71 "$U" "$TEST_DIR/job.sh" name
  assert_failure 65
  assert_output "bb-pool: job 71 asks for pool 'nvme', which is not node-local: a job's nodes reserve space in node-local pools only"
  run bb-stat job 71
  assert_failure 66
  run bb-pool show nvme --json
  assert_output --partial '"used": 0'
  # --slurm-gres goes with --node only.
  run bbkit_job begin --slurm-gres gres:bbnvme:1 71 "$U" "$TEST_DIR/job.sh"
  assert_failure 64
  assert_output "bbkit-job: --slurm-gres goes with --node and --nodes"
}
