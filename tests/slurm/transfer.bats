#!/usr/bin/env bats
# Staging on transfer nodes (bbkit(7), STAGING ON TRANSFER NODES) on a real multi-node Slurm
# cluster (nodes.bash): slurmctld on the host runs burst_buffer/lua and bbkit's hooks, as
# install-slurm installs them; the nodes n1..n3 form the partition "xfer" (and the default
# partition the jobs run in). Pool "xfer" (staging = "slurm", transfer_nodes = 3) is a directory
# of the host's that every node sees at the same path, as a site's shared file system. Each
# scenario asserts on Slurm's own view of the transfer jobs (squeue) and on the files. Every
# line seen is kept in build/tests/slurm/transcript-transfer.txt.

BBKIT_SLURM_TRANSCRIPT=${BBKIT_SLURM_TRANSCRIPT:-$BBKIT_BUILD_DIR/tests/slurm/transcript-transfer.txt}
# shellcheck disable=SC2034 # read by harness.bash and nodes.bash
HARNESS_MODE=slurm
# shellcheck disable=SC2034 # read by nodes.bash
NODE_COUNT=3
# shellcheck disable=SC2034 # read by nodes.bash
# A node whose slurmd is gone is down after 10 s (scenario d), not Slurm's default 300.
NODE_SLURM_EXTRA="PartitionName=xfer Nodes=n1,n2,n3 MaxTime=INFINITE State=UP
SlurmdTimeout=10"
# shellcheck disable=SC2034 # read by nodes.bash
NODE_BEFORE_START=install_transfer_bbkit
load nodes

# bbkit.toml in Slurm mode with the one pool, initialised, and the hooks installed next to
# slurm.conf (before slurmctld starts: start_nodes runs it).
install_transfer_bbkit() {
  mkdir -m 0755 "$SLURM_DIR/pools/xfer"
  cat >"$BBKIT_CONFIG" <<EOF
state_dir = "$SLURM_DIR/bbkit/state"
mode = "slurm"
directives = ["BB_LUA"]
cluster = "e2e"
state_group = "slurm"
slurm_release = "$(slurm_release)"

[timeouts]
stage_in = 240
stage_out = 240
other = 100
validate = 4

[[pool]]
name = "xfer"
path = "$SLURM_DIR/pools/xfer"
capacity = "256MiB"
granularity = "1MiB"
staging = "slurm"
transfer_partition = "xfer"
transfer_nodes = 3
EOF
  chmod 0644 "$BBKIT_CONFIG"
  bb-pool init xfer >/dev/null || return 1
  install_bbkit_scripts root
}

setup_file() {
  mkdir -p "$(dirname "$TRANSCRIPT")"
  : >"$TRANSCRIPT"
  start_nodes
}

teardown_file() {
  finish_nodes
}

setup() {
  skip_without_nodes
  scenario_setup
}

teardown() {
  [ -z "${NODES_SKIP:-}" ] || return 0
  unslow_node
  scenario_teardown
}

# The transfer jobs Slurm knows of the buffer of job JOB ("ID|NAME|USER|PARTITION|STATE|NODES"
# lines, in submission order).
transfer_jobs() {
  squeue -h --states=all -o '%i|%j|%u|%P|%T|%N' | grep -E "^[0-9]+\|bbkit\.e2e\.$1\." | sort -n
}

# A tree of NFILES files of a few KiB, some hard-linked, and one larger file, the test user's.
make_input() {
  local dir=$1 files=$2 i
  mkdir -p "$dir/tree/a/b" "$dir/tree/c"
  for ((i = 0; i < files; i++)); do
    head -c $((1000 + i % 100 * 37)) /dev/urandom >"$dir/tree/$([ $((i % 3)) = 0 ] && echo a/b || echo c)/f$i"
  done
  ln "$dir/tree/c/f1" "$dir/tree/a/linked-f1"
  head -c 5000000 /dev/urandom >"$dir/big.dat"
  chown -R "$SLURM_TEST_USER:" "$dir"
}

# Stops the transfer job's three movers (seen from the host, in the nodes' namespaces), each as
# soon as it shows: the stage then lasts as long as the scenario needs. The nodes are slowed
# first so that the movers are caught mid-copy. Waiting for all three to run at once instead
# missed them (in the full matrix, and alone on 22.05): the parts' steps start one after
# another at 5% of a CPU, and one part's mover can end before the last one starts.
# scenario_teardown resumes whatever is left paused.
pause_movers() {
  # The test user's bb-mover processes: no other suite's (each has a user of its own).
  # A bound, not a timing: at 5% of a CPU for three nodes, on a host that runs other suites,
  # three slurmstepd and their movers take their time to start.
  local deadline=$((SECONDS + 180)) p
  PAUSED_PIDS=
  while [ "$(printf '%s' "$PAUSED_PIDS" | wc -w)" -lt 3 ]; do
    [ "$SECONDS" -lt "$deadline" ] || {
      fail "the transfer job's three movers did not all run within 180 s (paused: ${PAUSED_PIDS:-none})"
      return 1
    }
    for p in $(pgrep -u "$TEST_UID" -x bb-mover); do
      case " $PAUSED_PIDS" in *" $p "*) continue ;; esac
      kill -STOP "$p" 2>/dev/null && PAUSED_PIDS="$PAUSED_PIDS$p "
    done
    sleep 0.05
  done
  PAUSED_PIDS=${PAUSED_PIDS% }
  transcript "root# kill -STOP $PAUSED_PIDS   # the transfer job's 3 movers"
}

resume_movers() {
  # shellcheck disable=SC2086 # a list of pids
  kill -CONT $PAUSED_PIDS 2>/dev/null || true
  transcript "root# kill -CONT $PAUSED_PIDS"
  PAUSED_PIDS=
}

# The pool has nothing allocated and no transfer directory is left.
assert_pool_clean() {
  local left
  wait_until 60 "pool xfer to be free" sh -c "bb-pool list | awk '\$1 == \"xfer\" { exit \$3 != \"0\" }'"
  left=$(find "$SLURM_DIR/pools/xfer/transfer" -mindepth 1 -maxdepth 1 2>/dev/null)
  [ -z "$left" ] || fail "transfer directories left: $left"
}

# A job that only stages in a tree of 3000 files (its script does nothing), submitted with the
# nodes slowed to 5% of a CPU, its three movers caught and paused (pause_movers).
stage_in_paused() {
  slow_node n1 5 n2 n3
  submit_stage_in "$1"
  pause_movers
}

# Submits a job that only stages in a tree of 3000 files (its script does nothing): JOB.
submit_stage_in() {
  local name=$1 script
  make_input "$DATA_DIR/$name" 3000
  script=$(job_script "$name.sh" "#SBATCH --job-name=transfer-$name" \
    '#BB_LUA pool=xfer capacity=64MiB' \
    "#BB_LUA stage_in type=directory source=$DATA_DIR/$name/tree destination=\$BB_JOB_DIR/tree" <<'EOF2'
true
EOF2
)
  submit "$script"
  assert_equal "$status" 0
}

# Kills job JOB's bb-stage in (the stager under Slurm's hook).
kill_stager() {
  local stager
  stager=$(pgrep -f -- "bb-stage .*--job $1 in\$" | head -n 1)
  [ -n "$stager" ] || fail "no bb-stage in for job $1"
  kill -KILL "$stager"
  transcript "root# kill -KILL $stager   # bb-stage in of job $1"
}

# An administrator's bb-stage in of job JOB, run again: it succeeds through one transfer job,
# COMPLETED on the three nodes.
rerun_stage_in() {
  slurm_run bb-stage --job "$1" in
  assert_equal "$status" 0
  assert_output --partial "stage-in of e2e.$1."
  mapfile -t jobs < <(transfer_jobs "$1")
  assert_equal "${#jobs[@]}" 1
  [[ ${jobs[0]} =~ \|COMPLETED\|n\[1-3\]$ ]] || fail "the transfer job: ${jobs[0]}"
}

# bats test_tags=smoke
@test "a. a stage-in and a stage-out each spread over three transfer nodes: each a job of the user in partition xfer; the job reads its input, the output lands, hard links stay" {
  local script sum
  make_input "$DATA_DIR/a" 60
  sum=$(cd "$DATA_DIR/a/tree" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
  script=$(job_script a.sh "#SBATCH --job-name=transfer-a" \
    '#BB_LUA pool=xfer capacity=32MiB' \
    "#BB_LUA stage_in type=directory source=$DATA_DIR/a/tree destination=\$BB_JOB_DIR/tree" \
    "#BB_LUA stage_in type=file source=$DATA_DIR/a/big.dat destination=\$BB_JOB_DIR/big.dat" \
    "#BB_LUA stage_out type=directory source=\$BB_JOB_DIR/out destination=$DATA_DIR/a/out" <<'EOF2'
cd "$BB_JOB_DIR/tree"
mkdir "$BB_JOB_DIR/out"
find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1 >"$BB_JOB_DIR/out/tree.sha256"
stat -c %i c/f1 a/linked-f1 | uniq | wc -l >"$BB_JOB_DIR/out/inodes"
sha256sum <"$BB_JOB_DIR/big.dat" | cut -d' ' -f1 >"$BB_JOB_DIR/out/big.sha256"
cp -a "$BB_JOB_DIR/tree" "$BB_JOB_DIR/out/copy"
EOF2
)
  submit "$script"
  assert_equal "$status" 0
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 240
  assert_equal "$(cat "$DATA_DIR/a/out/tree.sha256")" "$sum"
  assert_equal "$(cat "$DATA_DIR/a/out/inodes")" 1
  assert_equal "$(cat "$DATA_DIR/a/out/big.sha256")" "$(sha256sum <"$DATA_DIR/a/big.dat" | cut -d' ' -f1)"
  # The stage-out brought the tree back whole, its hard link a link still.
  diff -r "$DATA_DIR/a/tree" "$DATA_DIR/a/out/copy" || fail "the staged-out tree differs"
  assert_equal "$(stat -c %i "$DATA_DIR/a/out/copy/c/f1")" "$(stat -c %i "$DATA_DIR/a/out/copy/a/linked-f1")"
  # Slurm's own record: two transfer jobs of the user in xfer, each on the three nodes.
  slurm_run squeue -h --states=all -o '%i|%j|%u|%P|%T|%N'
  mapfile -t jobs < <(transfer_jobs "$JOB")
  assert_equal "${#jobs[@]}" 2
  [[ ${jobs[0]} =~ \|bbkit\.e2e\.$JOB\.[0-9]+\.in\.[0-9a-f]+\|$SLURM_TEST_USER\|xfer\|COMPLETED\|n\[1-3\]$ ]] ||
    fail "stage-in transfer job: ${jobs[0]}"
  [[ ${jobs[1]} =~ \|bbkit\.e2e\.$JOB\.[0-9]+\.out\.[0-9a-f]+\|$SLURM_TEST_USER\|xfer\|COMPLETED\|n\[1-3\]$ ]] ||
    fail "stage-out transfer job: ${jobs[1]}"
  assert_pool_clean
}

@test "b. scancel during a stage-in on the transfer nodes: the transfer job is cancelled before the buffer goes, nothing is left" {
  local xfer
  stage_in_paused b
  xfer=$(transfer_jobs "$JOB" | head -n 1 | cut -d'|' -f1)
  [ -n "$xfer" ] || fail "no transfer job for job $JOB"
  slurm_run -u scancel "$JOB"
  wait_teardown_after_cancel "$JOB" 120
  wait_until 120 "transfer job $xfer to be cancelled" sh -c "squeue -h --states=all -j $xfer -o '%T' | grep -qx CANCELLED"
  assert_pool_clean
  [ -z "$(pgrep -u "$TEST_UID" -x bb-mover)" ] || fail "movers still run after the teardown"
}

@test "c. slurmctld killed and restarted during a stage-in on the transfer nodes: the buffer Slurm purges has its transfer job cancelled before it goes; one transfer job per buffer, the job completes" {
  local script line inc state last=''
  make_input "$DATA_DIR/c" 3000
  slow_node n1 5 n2 n3
  script=$(job_script c.sh "#SBATCH --job-name=transfer-c" \
    '#BB_LUA pool=xfer capacity=64MiB' \
    "#BB_LUA stage_in type=directory source=$DATA_DIR/c/tree destination=\$BB_JOB_DIR/tree" <<'EOF2'
test -f "$BB_JOB_DIR/tree/a/linked-f1"
EOF2
)
  submit "$script"
  assert_equal "$status" 0
  pause_movers
  # Crash once Slurm's saved state has the job in staging-in and its buffer (slurm.bats g says
  # why: a crash before that is one Slurm cannot recover a buffer from).
  touch "$JOBS_DIR/c.saved"
  slurm_run scontrol update JobId="$JOB" Comment=staging-in-saved
  wait_until 20 "slurmctld to save the job" test "$SLURM_DIR/state/job_state" -nt "$JOBS_DIR/c.saved"
  wait_until 40 "slurmctld to save its burst-buffer state" test "$SLURM_DIR/state/burst_buffer_lua_state" -nt "$JOBS_DIR/c.sh"
  restart_slurmctld "SIGKILL during the stage-in of job $JOB on the transfer nodes" KILL
  resume_movers
  unslow_node
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 300
  # Slurm 22.05 purges a recovered pending job's buffer and stages a new one ("_recover_job_bb:
  # Purging buffer for pending JobId"); a release that replays the stage instead finds its job.
  # Either way: one transfer job per buffer incarnation, each earlier one cancelled by its
  # buffer's teardown, the last one completed.
  slurm_run squeue -h --states=all -o '%i|%j|%u|%P|%T|%N'
  mapfile -t jobs < <(transfer_jobs "$JOB")
  [ "${#jobs[@]}" -ge 1 ] || fail "no transfer job"
  for line in "${jobs[@]}"; do
    inc=$(cut -d'|' -f2 <<<"$line" | cut -d. -f4)
    state=$(cut -d'|' -f5 <<<"$line")
    [ "$inc" != "$last" ] || fail "two transfer jobs for buffer incarnation $inc: ${jobs[*]}"
    last=$inc
    if [ "$line" = "${jobs[-1]}" ]; then
      assert_equal "$state" COMPLETED
    else
      assert_equal "$state" CANCELLED
    fi
  done
  assert_pool_clean
}

@test "d. a transfer node killed mid-copy: Slurm requeues the transfer job, which copies the rest once the node is back; the stage completes once, with the data whole" {
  local script xfer p sum
  make_input "$DATA_DIR/d" 3000
  sum=$(cd "$DATA_DIR/d/tree" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
  slow_node n1 5 n2 n3
  script=$(job_script d.sh "#SBATCH --job-name=transfer-d" \
    '#BB_LUA pool=xfer capacity=64MiB' \
    "#BB_LUA stage_in type=directory source=$DATA_DIR/d/tree destination=\$BB_JOB_DIR/tree" <<EOF2
cd "\$BB_JOB_DIR/tree"
test "\$(find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)" = $sum
EOF2
)
  submit "$script"
  assert_equal "$status" 0
  pause_movers
  xfer=$(transfer_jobs "$JOB" | head -n 1 | cut -d'|' -f1)
  # n2 dies: its slurmd and every process of its namespaces (its part's mover among them).
  kill_node_slurmd n2
  for p in $(ip netns pids "$(node_netns n2)"); do kill -KILL "$p" 2>/dev/null || true; done
  transcript "root# (every process of n2 killed)"
  resume_movers
  wait_until 120 "Slurm to requeue transfer job $xfer" sh -c "squeue -h -j $xfer -o '%T' | grep -qx PENDING"
  unslow_node
  restart_node n2
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 600
  slurm_run scontrol show job "$JOB"
  assert_output --partial "ExitCode=0:0"
  mapfile -t jobs < <(transfer_jobs "$JOB")
  assert_equal "${#jobs[@]}" 1
  assert_pool_clean
}

@test "e. the stager killed while its transfer job runs: the job is held; bb-stage in, run again, finds the transfer job and waits for it, never a second" {
  stage_in_paused e
  kill_stager "$JOB"
  wait_job "$JOB" 'JobState=PENDING Reason=burst_buffer/lua:.*slurm_bb_data_in' 60
  resume_movers
  unslow_node
  # An administrator resumes the stalled stage: the recorded transfer job is the one waited for.
  rerun_stage_in "$JOB"
  slurm_run bb-stat job "$JOB"
  assert_output --partial "staged-in"
  # Slurm 22.05 does not stage a held job again on release: the job is cancelled here.
  slurm_run -u scancel "$JOB"
  wait_teardown_after_cancel "$JOB" 120
  assert_pool_clean
}

# A job whose stage-in brings a tree of FILES files and whose stage-out takes it back to
# DATA_DIR/NAME/out; the nodes are slowed once the job's script runs (its marker), so that the
# stage-out's three movers are caught mid-copy (pause_movers).
stage_out_job() {
  local name=$1 files=$2 script
  make_input "$DATA_DIR/$name" "$files"
  script=$(job_script "$name.sh" "#SBATCH --job-name=transfer-$name" \
    '#BB_LUA pool=xfer capacity=64MiB' \
    "#BB_LUA stage_in type=directory source=$DATA_DIR/$name/tree destination=\$BB_JOB_DIR/tree" \
    "#BB_LUA stage_out type=directory source=\$BB_JOB_DIR/tree destination=$DATA_DIR/$name/out" <<EOF2
touch "$JOBS_DIR/$name.ran"
sleep 4
EOF2
)
  submit "$script"
  assert_equal "$status" 0
  wait_until 240 "job $JOB to run" test -e "$JOBS_DIR/$name.ran"
  slow_node n1 5 n2 n3
  pause_movers
}

# Every file the stage-out put at its final name under DATA_DIR/NAME/out is whole (the source's
# bytes): a stopped stage-out leaves no torn file behind a real name.
assert_no_torn_output() {
  local name=$1 f
  while IFS= read -r -d '' f; do
    cmp -s "$DATA_DIR/$name/out/$f" "$DATA_DIR/$name/tree/$f" || fail "torn or foreign output: out/$f"
  done < <(cd "$DATA_DIR/$name/out" && find . -type f ! -name '.*.bbkit-*' -print0)
}

@test "f. scancel --hurry during a stage-out on the transfer nodes: the transfer job is cancelled before the buffer goes; what landed is whole, nothing is left" {
  local xfer
  stage_out_job f 3000
  xfer=$(transfer_jobs "$JOB" | grep -F '.out.' | cut -d'|' -f1)
  [ -n "$xfer" ] || fail "no stage-out transfer job for job $JOB"
  slurm_run -u scancel --hurry "$JOB"
  wait_until 120 "transfer job $xfer to be cancelled" sh -c "squeue -h --states=all -j $xfer -o '%T' | grep -qx CANCELLED"
  wait_job "$JOB" 'BurstBufferState=complete' 120
  assert_pool_clean
  [ -z "$(pgrep -u "$TEST_UID" -x bb-mover)" ] || fail "movers still run after the teardown"
  assert_no_torn_output f
}

@test "g. slurmctld killed and restarted during a stage-out on the transfer nodes: the stage-out Slurm runs again finds the transfer job, never a second; the output is whole" {
  stage_out_job g 3000
  # Crash once Slurm's saved state has the job in stage-out (its job state newer than the
  # job's start) and the buffer in its list (saved every 30 s when it changed: newer than the
  # job script, made before the buffer).
  wait_until 40 "slurmctld to save the job" test "$SLURM_DIR/state/job_state" -nt "$JOBS_DIR/g.ran"
  wait_until 60 "slurmctld to save its burst-buffer state" test "$SLURM_DIR/state/burst_buffer_lua_state" -nt "$JOBS_DIR/g.sh"
  restart_slurmctld "SIGKILL during the stage-out of job $JOB on the transfer nodes" KILL
  resume_movers
  unslow_node
  wait_job "$JOB" 'JobState=COMPLETED .*BurstBufferState=complete' 300
  diff -r "$DATA_DIR/g/tree" "$DATA_DIR/g/out" || fail "the staged-out tree differs"
  slurm_run squeue -h --states=all -o '%i|%j|%u|%P|%T|%N'
  mapfile -t jobs < <(transfer_jobs "$JOB" | grep -F '.out.')
  assert_equal "${#jobs[@]}" 1
  [[ ${jobs[0]} =~ \|COMPLETED\|n\[1-3\]$ ]] || fail "the stage-out transfer job: ${jobs[0]}"
  assert_pool_clean
}

@test "h. the user kills their own mover on a transfer node: the stage fails with Slurm's state of the transfer job and the job is held with bbkit's reason; no node is drained" {
  local xfer victim
  stage_in_paused h
  xfer=$(transfer_jobs "$JOB" | head -n 1 | cut -d'|' -f1)
  victim=${PAUSED_PIDS%% *}
  # One part's mover, the user's own process, killed by the user.
  slurm_run -u kill -KILL "$victim"
  assert_equal "$status" 0
  resume_movers
  unslow_node
  wait_job "$JOB" "JobState=PENDING Reason=burst_buffer/lua:.*slurm_bb_data_in.*:_bb-stage:_transfer_job_${xfer}_ended_FAILED_.*_before_every_part_reported_its_summary" 240
  slurm_run squeue -h --states=all -j "$xfer" -o '%T'
  assert_output FAILED
  slurm_run sinfo -h -N -p xfer -o '%N %T'
  refute_output --partial drain
  refute_output --partial down
  slurm_run -u scancel --hurry "$JOB"
  wait_teardown_after_cancel "$JOB" 120
  assert_pool_clean
}

# Submits held jobs of root's named "filler" until Slurm has given out the id before ID (one
# at a time: slurmctld gives ids in order), starting after LAST (the last id given out).
fill_ids_before() {
  local want=$1 last=$2
  while [ "$last" -lt $((want - 1)) ]; do
    last=$(sbatch --parsable --hold --job-name=filler --wrap true) || fail "sbatch of a filler failed"
    last=${last%%;*}
    [ "$last" -lt "$want" ] || fail "Slurm gave id $last, past $want"
  done
}

@test "i. a controller that lost its state gives the recorded transfer jobs' ids to other jobs: bb-stage neither waits for one nor cancels one; a rerun stages with a job of its own, a teardown leaves the other job alone" {
  local main=() x=() m id more
  # Two buffers, each with a transfer job on record that cannot end on its own: the first
  # one's movers paused; the second waits for the nodes the first holds or, where a node has a
  # core for each, runs with its movers paused too.
  stage_in_paused i1
  main+=("$JOB")
  submit_stage_in i2
  main+=("$JOB")
  wait_until 120 "job $JOB's transfer job" sh -c "squeue -h --states=all -o '%j' | grep -q '^bbkit\.e2e\.$JOB\.'"
  id=$(transfer_jobs "$JOB" | head -n 1 | cut -d'|' -f1)
  wait_until 180 "transfer job $id to wait for the nodes, or its movers to run" \
    sh -c "squeue -h -j $id -o '%T %r' | grep -qE '^PENDING (Resources|Priority)\$' || [ \"\$(pgrep -c -u $TEST_UID -x bb-mover)\" -ge 6 ]"
  more=$(pgrep -u "$TEST_UID" -x bb-mover | grep -vxF -f <(tr ' ' '\n' <<<"$PAUSED_PIDS" | sed '/^$/d') | tr '\n' ' ' || true)
  if [ -n "${more// /}" ]; then
    # shellcheck disable=SC2086 # a list of pids
    kill -STOP $more
    PAUSED_PIDS="$PAUSED_PIDS $more"
    transcript "root# kill -STOP $more   # transfer job $id's movers"
  fi
  for m in "${main[@]}"; do
    id=$(transfer_jobs "$m" | head -n 1 | cut -d'|' -f1)
    [ -n "$id" ] || fail "no transfer job for job $m"
    x+=("$id")
    # The id in the buffer's record (bb-stat job shows it once recorded).
    wait_until 60 "job $m's record to name transfer job $id" sh -c "bb-stat job $m | grep -q 'job $id '"
    kill_stager "$m"
  done
  # The controller comes back without its StateSaveLocation: every job forgotten, ids given out
  # again from the first.
  stop_slurmctld KILL
  rm -rf "${SLURM_DIR:?}/state/"*
  transcript "root# rm -rf $SLURM_DIR/state/*   # slurmctld's whole saved state lost"
  start_slurmctld
  # The nodes, registering, are told to kill the jobs Slurm no longer knows (the movers stay
  # paused until then: resumed, they could finish the copy and leave nothing to run again).
  # Each job's slurmstepd ends once Slurm has its end: nothing of theirs reaches the new jobs.
  unslow_node
  wait_until 180 "the forgotten transfer jobs to be gone from the nodes" \
    sh -c "! pgrep -u $TEST_UID -x bb-mover && ! pgrep -f 'slurmstepd: \[(${x[0]}|${x[1]})\.'"
  PAUSED_PIDS=
  # The transfer jobs' ids go to the user's own held jobs, "stranger", in the order Slurm gives
  # ids (either stager may have submitted first).
  local last=0
  for id in $(printf '%s\n' "${x[@]}" | sort -n); do
    fill_ids_before "$id" "$last"
    slurm_run -u sbatch --parsable --hold --job-name=stranger --wrap true
    assert_equal "$status" 0
    assert_equal "${output%%;*}" "$id"
    last=$id
  done
  # The first stage run again: the record's id is now a stranger's, which is not waited for;
  # the stage gets a transfer job of its own.
  rerun_stage_in "${main[0]}"
  # The second buffer's teardown, its record naming the other stranger's id, cancels nothing.
  slurm_run bb-teardown --job "${main[1]}"
  assert_equal "$status" 0
  for id in "${x[@]}"; do
    slurm_run squeue -h -j "$id" -o '%j|%T|%r'
    assert_output 'stranger|PENDING|JobHeldUser'
  done
  slurm_run bb-teardown --job "${main[0]}"
  assert_equal "$status" 0
  assert_pool_clean
  scancel --name=filler 2>/dev/null || true
}
