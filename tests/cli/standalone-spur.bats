#!/usr/bin/env bats
# share/bbkit/standalone/spur/{job_submit,prolog_slurmctld,epilog_slurmctld}, run as Spur's hook
# runner runs them (bbkit(7), SPUR): job_submit through /proc/self/fd/N of the file spurctld
# opened and checked, from /tmp, with no arguments, spurctld's environment plus SPUR_JOB_USER,
# SPUR_JOB_UID, SPUR_JOB_GID, SPUR_JOB_PARTITION and SPUR_SCRIPT_CONTEXT, the job spec as JSON
# on standard input, killed after 30 s; 0 with nothing on standard output accepts, anything else
# rejects with standard error as the reason. prolog_slurmctld and epilog_slurmctld from the
# job's working directory, with spurctld's environment plus the SPUR_JOB_* variables, standard
# output discarded, standard error logged. Today's Spur passes no job script to
# prolog_slurmctld; the hand-over bbkit(7) SPUR proposes (SPUR_JOB_SCRIPT, a copy only spurctld
# can change) is run here as spurctld would run it.

load common

setup() {
  staging_setup
  SPUR_DIR=${BBKIT_BIN_DIR:?the suites run against the installed tree}/../share/bbkit/standalone/spur
  BBKIT_JOB=$BBKIT_BIN_DIR/../share/bbkit/standalone/bbkit-job
  UID_U=$(id -u "$U")
  GID_U=$(id -g "$U")
  # spurctld's own spool: root's, where it would write the scripts it hands over.
  SPOOL=$TEST_DIR/spurctld
  mkdir -m 700 "$SPOOL"
  mkdir -m 755 "$TEST_DIR/tmp"
  as_user mkdir "$TEST_DIR/pfs/input"
  as_user sh -c "printf 'data\n' >'$TEST_DIR/pfs/input/in.txt'"
}
teardown() { common_teardown; }

as_user() { runuser -u "$U" -- "$@"; }

# job SCRIPT_LINE...: a batch script (shebang, the lines, a command) in $TEST_DIR/job.sh.
job() {
  { echo '#!/bin/sh'; for l in "$@"; do printf '%s\n' "$l"; done; echo 'echo computing'; } \
    >"$TEST_DIR/job.sh"
}

# spec [BB [JQ-FILTER]]: Spur's JobSpec as serde_json writes it (no trailing newline), the
# script $TEST_DIR/job.sh, --bb BB (null when empty); JQ-FILTER changes it further.
spec() {
  jq -cj --rawfile script "$TEST_DIR/job.sh" --arg bb "${1:-}" --arg user "$U" \
    --argjson uid "$UID_U" --argjson gid "$GID_U" --arg wd "$TEST_DIR/pfs" \
    '{name: "bbjob", partition: "batch", account: null, user: $user, uid: $uid, gid: $gid,
      num_nodes: 1, num_tasks: 1, tasks_per_node: null, cpus_per_task: 1, gres: [],
      script: $script, argv: [], script_args: [], work_dir: $wd, stdout_path: null,
      environment: {PATH: "/home/user/bin:/usr/bin"}, qos: null, priority: null,
      dependency: [], requeue: false, exclusive: false, hold: false, interactive: false,
      srun_job: false, mail_type: [], comment: null,
      burst_buffer: (if $bb == "" then null else $bb end), begin_time: null}
     | '"${2:-.}" -n
}

# submit SPEC: job_submit as run_submit_hook runs it; the user and uid in its environment are the
# spec's, as spurctld takes them from it. Standard output and error apart: $output is standard
# error, $stdout_text standard output.
submit() {
  local user uid gid
  user=$(printf '%s' "$1" | jq -r '.user // ""' 2>/dev/null || true)
  uid=$(printf '%s' "$1" | jq -r '.uid // 0' 2>/dev/null || true)
  gid=$(printf '%s' "$1" | jq -r '.gid // 0' 2>/dev/null || true)
  submit_as "$user" "$uid" "$gid" "$1"
}
submit_as() {
  printf '%s' "$4" >"$TEST_DIR/stdin.json"
  run env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TMPDIR="$TEST_DIR/tmp" \
    BBKIT_CONFIG="$BBKIT_CONFIG" SPUR_JOB_USER="$1" SPUR_JOB_UID="$2" SPUR_JOB_GID="$3" \
    SPUR_JOB_PARTITION=batch SLURM_JOB_PARTITION=batch SPUR_SCRIPT_CONTEXT=job_submit \
    bash -c 'cd /tmp && exec 9<"$1" && exec timeout 30 /proc/self/fd/9 <"$2" 2>"$3"' - \
    "$SPUR_DIR/job_submit" "$TEST_DIR/stdin.json" "$TEST_DIR/stderr"
  stdout_text=$output
  output=$(cat "$TEST_DIR/stderr")
  mapfile -t lines <"$TEST_DIR/stderr"
}

# accepted / rejected: what spurctld would make of the last submit.
accepted() {
  [ "$status" -eq 0 ] || { echo "rejected ($status): $output" >&2; return 1; }
  [ -z "$stdout_text" ] || { echo "standard output would modify the job: $stdout_text" >&2; return 1; }
}
rejected() {  # [REASON-PART]
  [ "$status" -ne 0 ] || { echo "accepted: $output" >&2; return 1; }
  [ -z "$stdout_text" ]
  [ "${#lines[@]}" -eq 1 ] || { echo "not one line: $output" >&2; return 1; }
  [[ "${lines[0]}" == bbkit-spur-job-submit:* ]]
  [ -z "${1:-}" ] || assert_output --partial "$1"
}

# hook NAME [VAR=VALUE...]: prolog_slurmctld or epilog_slurmctld as run_hook runs it for job
# $JOB: spurctld's environment, the SPUR_JOB_* variables, from the job's working directory (a
# directory of the user's), standard input spurctld's (/dev/null), standard output discarded.
# $output is standard error.
hook() {
  local name=$1
  shift
  run env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root BBKIT_CONFIG="$BBKIT_CONFIG" \
    SPUR_JOB_ID="$JOB" SLURM_JOB_ID="$JOB" SPUR_JOB_USER="$U" SPUR_JOB_UID="$UID_U" \
    SPUR_JOB_GID="$GID_U" SPUR_JOB_WORK_DIR="$TEST_DIR/pfs" SPUR_JOB_PARTITION=batch \
    SLURM_JOB_PARTITION=batch SPUR_JOB_NODELIST=n1 SLURM_JOB_NODELIST=n1 SPUR_CPUS_ON_NODE=1 \
    SLURM_CPUS_ON_NODE=1 SPUR_JOB_GPUS= SPUR_JOB_MEMORY_MB=0 SPUR_SCRIPT_CONTEXT="$name" "$@" \
    sh -c 'cd "$1" && shift && exec "$@" </dev/null 2>&1 >/dev/null' - "$TEST_DIR/pfs" \
    "$SPUR_DIR/$name"
}

# handover: the copy of job.sh spurctld would write for the job and name in SPUR_JOB_SCRIPT.
handover() {
  install -m 600 -o root -g root "$TEST_DIR/job.sh" "$SPOOL/$JOB.sh"
  echo "SPUR_JOB_SCRIPT=$SPOOL/$JOB.sh"
}

# wait_state JOB STATE: until bbkit's record of JOB is in STATE (20 s at most).
wait_state() {
  local _
  for _ in $(seq 1 800); do
    bb-stat job "$1" --json 2>/dev/null | grep -q "\"state\": \"$2\"" && return 0
    sleep 0.025
  done
  echo "job $1 was never $2" >&2
  return 1
}

# many_inputs: 20000 small files in the stage-in source, a stage-in that takes a while.
many_inputs() {
  as_user sh -c "cd '$TEST_DIR/pfs/input' && i=0 && while [ \$i -lt 20000 ]; do i=\$((i + 1)); echo \$i >f\$i; done"
}

no_buffers() {
  run bb-pool show nvme --json
  assert_output --partial '"used": 0'
  [ -z "$(ls "$TEST_DIR/nvme/job")" ]
}

stage_in() { printf '#BB_LUA stage_in type=directory source=%s/pfs/input destination=$BB_JOB_DIR/input' "$TEST_DIR"; }

@test "spur programs are installed executable, root-owned, not group/other writable, POSIX sh" {
  for s in job_submit prolog_slurmctld epilog_slurmctld; do
    # spurctld's own check of a hook (open_secure_hook_file): owned by root or its user, not
    # group- or world-writable.
    real=$(readlink -f "$SPUR_DIR/$s")
    [ -x "$real" ]
    [ "$(stat -c %u "$real")" = 0 ]
    [ $(( $(stat -c %#a "$real") & 022 )) -eq 0 ]
    [ "$(head -n 1 "$real")" = '#!/bin/sh' ]
    sh -n "$real"
  done
}

@test "job_submit: a job asking for no burst buffer, or without a script (srun), is accepted silently" {
  job '#SBATCH -N 1'
  submit "$(spec)"
  accepted
  assert_output ""
  submit "$(spec '' '.script = null')"
  accepted
  assert_output ""
  no_buffers
}

@test "job_submit: a request that Spur and bbkit read alike is accepted, nothing written" {
  job "#BB_LUA pool=nvme capacity=2GiB" "$(stage_in)"
  for bb in 'capacity=2GiB' 'capacity=2G' ' capacity=2gib ;' 'capacity= 2GiB' ';capacity=2GIB;;'; do
    submit "$(spec "$bb")"
    accepted
    assert_output ""
  done
  # 1500MiB is 1.46 GiB: Spur counts whole GiB, rounded up.
  job "#BB_LUA pool=nvme capacity=1500MiB"
  submit "$(spec 'capacity=2GiB')"
  accepted
  no_buffers
  [ -z "$(ls "$TEST_DIR/tmp")" ]
}

@test "job_submit: sizes Spur would misread are refused, the unit made explicit" {
  job "#BB_LUA pool=nvme capacity=1TB"
  while IFS='|' read -r bb reason; do
    submit "$(spec "$bb")"
    rejected "$reason"
  done <<'EOF'
capacity=1TB|Spur ignores the unit and would count 1 GiB
capacity=1TiB|Spur ignores the unit and would count 1 GiB
capacity=100GB|Spur ignores the unit and would count 100 GiB
capacity=2048MiB|Spur ignores the unit and would count 2048 GiB
capacity=100|has no unit: Spur counts GiB, bbkit would read bytes; write capacity=100GiB
capacity=1.5|Spur reads only the leading digits
capacity=1.5GiB|Spur reads only the leading digits
capacity=-1|Spur reads only the leading digits
capacity=-1GiB|Spur reads only the leading digits
capacity=+2GiB|Spur reads only the leading digits
capacity=1 GiB|Spur reads only the leading digits
capacity="2GiB"|Spur reads only the leading digits
capacity=GiB|Spur would count no capacity
capacity=|has no size
capacity=0GiB|without leading zeros
capacity=02GiB|without leading zeros
capacity=8589934592GiB|bb-parse
capacity=99999999999999999999GiB|too large
capacity=184467440737095516160GiB|too large
capacity=2GiB;capacity=2GiB|twice
Capacity=2GiB|Spur ignores it
capacity:2GiB|Spur ignores it
EOF
  no_buffers
}

@test "job_submit: Spur's count and bbkit's request must agree, or both be absent" {
  job "#BB_LUA pool=nvme capacity=2GiB"
  submit "$(spec)"
  rejected "but --bb has no capacity=: Spur would not count it; add --bb capacity=2GiB"
  submit "$(spec 'capacity=3GiB')"
  rejected "give --bb capacity=2GiB"
  job '#SBATCH -N 1'
  submit "$(spec 'capacity=2GiB')"
  rejected "the script asks bbkit for nothing"
  submit "$(spec 'capacity=2GiB' '.script = null')"
  rejected "the script asks bbkit for nothing"
}

@test "job_submit: stage_in:/stage_out: commands are refused and never run" {
  job "#BB_LUA pool=nvme capacity=2GiB"
  for bb in "capacity=2GiB;stage_in:touch $TEST_DIR/ran" "stage_out:touch $TEST_DIR/ran" \
    "capacity=2GiB; stage_in: cp -r /etc/shadow $TEST_DIR/ran"; do
    submit "$(spec "$bb")"
    rejected "bbkit runs no command a user wrote"
  done
  [ ! -e "$TEST_DIR/ran" ]
}

@test "job_submit: a newline, quotes or NUL in --bb or the spec: one line, refused, nothing run" {
  job "#BB_LUA pool=nvme capacity=2GiB"
  for bb in $'capacity=2GiB\nstage_in:touch '"$TEST_DIR/ran" $'capacity=2GiB\r' \
    $'capacity=2GiB\tx' 'capacity=2GiB";"stage_in:touch '"$TEST_DIR"'/ran' \
    "capacity=2GiB';touch $TEST_DIR/ran;'" \
    '$(touch '"$TEST_DIR"'/ran)'; do
    submit "$(spec "$bb")"
    rejected
  done
  submit "$(spec 'capacity=2GiB' '.burst_buffer = "capacity=2GiB\u0000;stage_in:x"')"
  rejected "not printable ASCII"
  [ ! -e "$TEST_DIR/ran" ]
}

@test "job_submit: a spec that is not Spur's JSON is refused with one line" {
  job "#BB_LUA pool=nvme capacity=2GiB"
  for bad in '' ' ' 'not json' '[1,2]' '{"user": "x"}' '{"user": 1, "uid": 1}' \
    "$(spec 'capacity=2GiB')$(spec 'capacity=2GiB')" \
    "$(spec 'capacity=2GiB' '.uid = "0"')" "$(spec 'capacity=2GiB' '.burst_buffer = ["capacity=2GiB"]')" \
    "$(spec 'capacity=2GiB' '.script = {"a": 1}')"; do
    submit_as "$U" "$UID_U" "$GID_U" "$bad"
    rejected "not Spur's JSON"
  done
}

@test "job_submit: an unknown user, a uid that is not the user's, a mismatch with the environment" {
  job "#BB_LUA pool=nvme capacity=2GiB"
  submit "$(spec 'capacity=2GiB' '.user = "no-such-user-bbkit" | .uid = 4000000')"
  rejected "user 'no-such-user-bbkit' does not exist on this host"
  submit "$(spec 'capacity=2GiB' '.uid = 0')"
  rejected "is uid $UID_U on this host, not 0 as the job says"
  submit "$(spec 'capacity=2GiB' '.uid = 1.5')"
  rejected "is not a uid"
  submit "$(spec 'capacity=2GiB' '.user = "-r"')"
  rejected "is not a user name"
  submit_as root 0 0 "$(spec 'capacity=2GiB')"
  rejected "is not the one spurctld names (root, uid 0)"
  # A job without a request is none of bbkit's business, whoever sends it.
  job '#SBATCH -N 1'
  submit "$(spec '' '.user = "no-such-user-bbkit" | .uid = 4000000')"
  accepted
}

@test "job_submit: the directives are checked by bb-parse as the user: its reason, one line" {
  job "#BB_LUA pool=nvme capacity=1.5G"
  submit "$(spec 'capacity=2GiB')"
  rejected "bbkit-spur-job-submit: bb-parse: script line 2: "
  job "#BB_LUA pool=nosuch capacity=2GiB"
  submit "$(spec 'capacity=2GiB')"
  rejected "bb-parse:"
  job "#BB_LUA pool=nvme capacity=2GiB" \
    "#BB_LUA stage_in type=file source=$TEST_DIR/pfs/missing destination=in"
  submit "$(spec 'capacity=2GiB')"
  rejected "bb-parse:"
  # Readable by root, not by the user: refused as the user would be.
  mkdir -m 700 "$TEST_DIR/secret"
  echo x >"$TEST_DIR/secret/f"
  job "#BB_LUA pool=nvme capacity=2GiB" \
    "#BB_LUA stage_in type=file source=$TEST_DIR/secret/f destination=in"
  submit "$(spec 'capacity=2GiB')"
  rejected "bb-parse:"
  write_config "deny_users = [\"$U\"]"
  job "#BB_LUA pool=nvme capacity=2GiB"
  submit "$(spec 'capacity=2GiB')"
  rejected "bb-parse:"
  no_buffers
}

@test "job_submit: a source the user makes fail or stall does not get a wrong --bb through" {
  # A symbolic-link loop as a stage-in source: bb-parse as the user exits 74 (ELOOP).
  ln -s loop "$TEST_DIR/pfs/loop"
  job "#BB_LUA pool=nvme capacity=50GiB" \
    "#BB_LUA stage_in type=file source=$TEST_DIR/pfs/loop/x destination=in"
  submit "$(spec 'capacity=1GiB')"
  rejected "give --bb capacity=50GiB"
  submit "$(spec 'capacity=50GiB')"
  rejected "bb-parse:"
  assert_output --partial "Too many levels of symbolic links"
  # A list file that never ends (a FIFO nobody writes) would stall the sources' check until its
  # 20 s cut: Spur's count is held to the script's request before that check starts.
  mkfifo "$TEST_DIR/pfs/list"
  chmod 644 "$TEST_DIR/pfs/list"
  job "#BB_LUA pool=nvme capacity=3GiB" \
    "#BB_LUA stage_in type=list source=$TEST_DIR/pfs/list destination=in"
  submit "$(spec 'capacity=1GiB')"
  rejected "give --bb capacity=3GiB"
  no_buffers
}

@test "job_submit: a script over [limits] script_size is refused from its size" {
  sized_script "$TEST_DIR/job.sh" 4194305 "#BB_LUA pool=nvme capacity=2GiB"
  submit "$(spec 'capacity=2GiB')"
  rejected "over the limit of 4194304 bytes"
}

@test "job_submit: when bbkit's configuration cannot be read, the job goes on with a logged line" {
  job "#BB_LUA pool=nvme capacity=2GiB"
  BBKIT_CONFIG=$TEST_DIR/nonexistent.toml submit "$(spec 'capacity=2GiB')"
  accepted
  assert_output --partial "bbkit-spur-job-submit: burst-buffer request not checked: "
  # Spur's own misreading is refused without any configuration.
  BBKIT_CONFIG=$TEST_DIR/nonexistent.toml submit "$(spec 'capacity=2TB')"
  rejected "Spur ignores the unit"
}

@test "job_submit: concurrent submits each get their own answer, nothing left behind" {
  job "#BB_LUA pool=nvme capacity=2GiB" "$(stage_in)"
  good=$(spec 'capacity=2GiB')
  bad=$(spec 'capacity=2TB')
  for i in $(seq 1 16); do
    if [ $((i % 2)) = 0 ]; then s=$good; else s=$bad; fi
    printf '%s' "$s" >"$TEST_DIR/in.$i"
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin TMPDIR="$TEST_DIR/tmp" BBKIT_CONFIG="$BBKIT_CONFIG" \
      SPUR_JOB_USER="$U" SPUR_JOB_UID="$UID_U" SPUR_SCRIPT_CONTEXT=job_submit \
      sh -c '"$1" <"$2" >"$3.out" 2>"$3.err"; echo $? >"$3.rc"' - "$SPUR_DIR/job_submit" \
      "$TEST_DIR/in.$i" "$TEST_DIR/r.$i" &
  done
  wait
  for i in $(seq 1 16); do
    [ ! -s "$TEST_DIR/r.$i.out" ]
    if [ $((i % 2)) = 0 ]; then
      [ "$(cat "$TEST_DIR/r.$i.rc")" = 0 ] && [ ! -s "$TEST_DIR/r.$i.err" ]
    else
      [ "$(cat "$TEST_DIR/r.$i.rc")" = 1 ] && [ "$(wc -l <"$TEST_DIR/r.$i.err")" = 1 ]
    fi
  done
  [ -z "$(ls "$TEST_DIR/tmp")" ]
}

@test "prolog_slurmctld with today's Spur (no script passed): the job runs, one line says why nothing was set up" {
  JOB=41
  hook prolog_slurmctld
  assert_success
  assert_output "bbkit-spur-prolog-slurmctld: job 41: spurctld passes no job script (SPUR_JOB_SCRIPT): a burst-buffer request cannot be seen (bbkit(7), SPUR)"
  no_buffers
}

@test "the hand-over: prolog stages in, the job reads BB_JOB_DIR itself, the epilog stages out" {
  JOB=42
  job "#BB_LUA pool=nvme capacity=1GiB" "$(stage_in)" \
    "#BB_LUA stage_out type=directory source=\$BB_JOB_DIR/output destination=$TEST_DIR/pfs/results"
  hook prolog_slurmctld "$(handover)"
  assert_success
  assert_output ""
  buf="$(bbdir $TEST_DIR/nvme/job/main.42.1)"
  [ "$(cat "$buf/input/in.txt")" = data ]
  # Spur's task_prolog cannot set the job's environment: the job asks bbkit-job env.
  run as_user env SPUR_JOB_ID=42 sh -c "cd '$TEST_DIR/pfs' &&
    eval \"\$('$BBKIT_JOB' env \"\$SPUR_JOB_ID\" --shell)\" && mkdir \"\$BB_JOB_DIR/output\" &&
    tr a-z A-Z <\"\$BB_JOB_DIR/input/in.txt\" >\"\$BB_JOB_DIR/output/r.txt\" && echo \"dir=\$BB_JOB_DIR\""
  assert_success
  assert_output "dir=$buf"
  hook epilog_slurmctld
  assert_success
  [ "$(cat "$TEST_DIR/pfs/results/r.txt")" = DATA ]
  [ "$(stat -c %U "$TEST_DIR/pfs/results/r.txt")" = "$U" ]
  no_buffers
}

@test "prolog_slurmctld: a hand-over the user could have changed is refused, nothing run" {
  JOB=43
  job "#BB_LUA pool=nvme capacity=1GiB"
  # A symlink planted in spurctld's spool, to the user's own file.
  as_user cp "$TEST_DIR/job.sh" "$TEST_DIR/pfs/mine.sh"
  ln -s "$TEST_DIR/pfs/mine.sh" "$SPOOL/43.sh"
  hook prolog_slurmctld SPUR_JOB_SCRIPT="$SPOOL/43.sh"
  assert_failure 1
  assert_output --partial "is not a regular file (a symbolic link or missing)"
  # The user's file, or root's in a directory the user may write, or a relative name.
  hook prolog_slurmctld SPUR_JOB_SCRIPT="$TEST_DIR/pfs/mine.sh"
  assert_failure 1
  assert_output --partial "is not spurctld's"
  install -m 600 "$TEST_DIR/job.sh" "$TEST_DIR/pfs/root.sh"
  hook prolog_slurmctld SPUR_JOB_SCRIPT="$TEST_DIR/pfs/root.sh"
  assert_failure 1
  assert_output --partial "which others may change"
  install -m 666 "$TEST_DIR/job.sh" "$SPOOL/43.sh.w"
  hook prolog_slurmctld SPUR_JOB_SCRIPT="$SPOOL/43.sh.w"
  assert_failure 1
  assert_output --partial "is not spurctld's"
  hook prolog_slurmctld SPUR_JOB_SCRIPT=mine.sh
  assert_failure 1
  assert_output --partial "is not an absolute path"
  hook prolog_slurmctld SPUR_JOB_SCRIPT="$SPOOL/none.sh"
  assert_failure 1
  [ "${#lines[@]}" -eq 1 ]
  no_buffers
}

@test "prolog_slurmctld: an unknown user, a uid that is not the user's, a bad job id, the wrong hook" {
  job "#BB_LUA pool=nvme capacity=1GiB"
  JOB=44
  hook prolog_slurmctld "$(handover)" SPUR_JOB_USER=4000000 SPUR_JOB_UID=4000000
  assert_failure 1
  assert_output "bbkit-spur-prolog-slurmctld: job 44: user '4000000' does not exist on this host"
  hook prolog_slurmctld "$(handover)" SPUR_JOB_UID=0
  assert_failure 1
  assert_output --partial "is uid $UID_U on this host, not 0"
  for bad in '' 0 044 -1 '44;id' '4294967296' $'44\nbb-stage: forged' '$(id)'; do
    JOB=$bad
    hook prolog_slurmctld SPUR_JOB_SCRIPT="$SPOOL/x"
    assert_failure 1
    [ "${#lines[@]}" -eq 1 ]
    hook epilog_slurmctld
    assert_failure 1
    [ "${#lines[@]}" -eq 1 ]
  done
  JOB=44
  run env -i SPUR_JOB_ID=44 SPUR_SCRIPT_CONTEXT=prolog_slurmd "$SPUR_DIR/prolog_slurmctld"
  assert_failure 1
  assert_output --partial "install it as prolog_slurmctld"
  no_buffers
}

@test "prolog_slurmctld: a full pool exits 75 (Spur retries next cycle), and succeeds once there is room" {
  write_config '[timeouts]' 'queue = 1'
  bb-pool alloc --job 1 --user "$U" --pool small --capacity 4K >/dev/null
  JOB=45
  job "#BB_LUA pool=small capacity=4K"
  hook prolog_slurmctld "$(handover)"
  assert_failure 75
  [[ "${lines[-1]}" == bb-pool:* ]]
  bb-teardown --job 1 >/dev/null
  bb-pool reap >/dev/null
  hook prolog_slurmctld "$(handover)"
  assert_success
  ls "$TEST_DIR/small/job" | grep -q '^main\.45\.'
  hook epilog_slurmctld
  assert_success
}

@test "prolog_slurmctld killed during its stage-in: the next cycle's run resumes and completes" {
  JOB=46
  many_inputs
  job "#BB_LUA pool=nvme capacity=1GiB" "$(stage_in)"
  script=$(handover)
  setsid env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin BBKIT_CONFIG="$BBKIT_CONFIG" SPUR_JOB_ID=46 \
    SPUR_JOB_USER="$U" SPUR_JOB_UID="$UID_U" SPUR_SCRIPT_CONTEXT=prolog_slurmctld "$script" \
    "$SPUR_DIR/prolog_slurmctld" </dev/null >/dev/null 2>&1 &
  pid=$!
  wait_state 46 staging-in
  # spurctld restarted, or an admin's kill: the prolog and everything it started.
  kill -KILL -- -"$pid"
  wait "$pid" || true
  run bb-stat job 46 --json
  assert_output --partial '"state": "staging-in"'
  hook prolog_slurmctld "$script"
  assert_success
  buf="$(bbdir $TEST_DIR/nvme/job/main.46.1)"
  [ "$(ls "$buf/input" | wc -l)" -eq 20001 ]
  [ "$(cat "$buf/input/f20000")" = 20000 ]
  hook epilog_slurmctld
  assert_success
  no_buffers
}

@test "epilog_slurmctld: the job cancelled while its prolog stages in ends the buffer" {
  JOB=47
  many_inputs
  job "#BB_LUA pool=nvme capacity=1GiB" "$(stage_in)"
  script=$(handover)
  env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin BBKIT_CONFIG="$BBKIT_CONFIG" SPUR_JOB_ID=47 \
    SPUR_JOB_USER="$U" SPUR_JOB_UID="$UID_U" SPUR_SCRIPT_CONTEXT=prolog_slurmctld "$script" \
    "$SPUR_DIR/prolog_slurmctld" </dev/null >/dev/null 2>&1 &
  pid=$!
  wait_state 47 staging-in
  # spurctld runs the epilog of a cancelled pending job at once, without waiting for the prolog.
  hook epilog_slurmctld
  assert_success
  # The prolog's stage-in was stopped: it fails (Spur, the job cancelled, ignores it).
  run wait "$pid"
  assert_failure
  bb-pool reap >/dev/null
  no_buffers
}

@test "epilog_slurmctld: a job without a buffer is nothing to do; a failed stage-out keeps the data" {
  JOB=48
  hook epilog_slurmctld
  assert_success
  assert_output ""
  JOB=49
  mkdir -m 700 "$TEST_DIR/locked"
  job "#BB_LUA pool=nvme capacity=1GiB" \
    "#BB_LUA stage_out type=directory source=out destination=$TEST_DIR/locked/res"
  hook prolog_slurmctld "$(handover)"
  assert_success
  buf="$(bbdir $TEST_DIR/nvme/job/main.49.1)"
  as_user sh -c "mkdir '$buf/out' && printf 'precious\n' >'$buf/out/r.txt'"
  hook epilog_slurmctld
  assert_failure
  [[ "${lines[-1]}" == bb-* ]]
  [ "$(cat "$buf/out/r.txt")" = precious ]
  [ ! -e "$TEST_DIR/locked/res" ]
}
