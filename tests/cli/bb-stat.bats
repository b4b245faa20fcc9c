#!/usr/bin/env bats
# bb-stat: every view, the exit codes, public/ for non-owners, and the metrics file.

load common

setup() {
  common_setup
  bb-pool recover >/dev/null  # a writing command creates the state directory
}
teardown() { common_teardown; }

needs_bb_pool() {
  command -v bb-pool >/dev/null || skip "needs bb-pool"
  mkdir -p "$TEST_DIR/nvme" "$TEST_DIR/small"
  bb-pool init nvme
  bb-pool init small
}

# Lets other users reach public/ (search permission only; the store allows exactly that).
open_state_dir() { chmod 0711 "$TEST_DIR/state"; }

# --- common conventions ------------------------------------------------------------------

@test "help lists every view and option of the man page" {
  run bb-stat --help
  assert_success
  for word in pools buffers sessions instances configurations burst job env history \
              --json --watch --shell --prometheus --config --state-dir --verbose --quiet --version \
              --since --until --by --user --pool --plot; do
    assert_output --partial -- "$word"
    grep -q -- "${word//-/\\\\-}" "$BBKIT_SOURCE_DIR/man/man1/bb-stat.1" || fail "man page lacks $word"
  done
}

@test "version prints bbkit and the version" {
  run bb-stat --version
  assert_success
  assert_output --regexp '^bbkit [0-9]+\.[0-9]+\.[0-9]+$'
}

@test "unknown word is a usage error with exit 64" {
  run bb-stat frobnicate
  assert_failure 64
  assert_output "bb-stat: unknown view 'frobnicate' (pools, buffers, sessions, instances, configurations, activations, burst, job ID, env ID, gres or history)"
}

@test "job without a numeric ID and extra words are usage errors" {
  run bb-stat job
  assert_failure 64
  run bb-stat job abc
  assert_failure 64
  assert_output --partial "'abc' is not a number"
  run bb-stat pools extra
  assert_failure 64
}

@test "unknown option is a usage error" {
  run bb-stat --no-such-option
  assert_failure 64
}

# --- views on an empty state directory ----------------------------------------------------

@test "no argument prints dwstat's pool table" {
  run bb-stat
  assert_success
  assert_equal "${lines[0]}" " pool units quantity   free gran         state"
  assert_equal "${lines[1]}" " nvme bytes   100GiB 100GiB 1GiB uninitialised"
  assert_equal "${lines[2]}" "small bytes     4KiB   4KiB 1KiB uninitialised"
  assert_equal "${#lines[@]}" 3
  run bb-stat pools
  assert_success
  assert_equal "${lines[0]}" " pool units quantity   free gran         state"
}

@test "pools --json has the documented fields in bytes" {
  run bb-stat --json
  assert_success
  echo "$output" | grep -q '"name": "nvme"'
  echo "$output" | grep -q '"total": 107374182400'
  echo "$output" | grep -q '"free": 107374182400'
  echo "$output" | grep -q '"granularity": 1073741824'
  for field in path used trash queued draining; do
    echo "$output" | grep -q "\"$field\": " || fail "no $field"
  done
}

@test "sessions, instances and configurations print dwstat's headers" {
  run bb-stat sessions
  assert_success
  assert_output "sess state token creator owner created expiration nodes"
  run bb-stat instances
  assert_success
  assert_output "inst state sess bytes nodes created expiration intact label public confs"
  run bb-stat configurations
  assert_success
  assert_output "conf state inst type access_type activs"
  run bb-stat sessions --json
  assert_success
  assert_output "[]"
}

@test "buffers lists every live buffer with its reason, and each pool's waiting jobs in order" {
  needs_bb_pool
  run bb-stat buffers
  assert_success
  assert_output "job  user  pool  size  state  age  reason"
  user=$(id -un)
  bb-pool alloc --job 1 --user "$user" --pool small --capacity 3K >/dev/null
  bb-pool alloc --job 2 --user "$user" --pool small --capacity 2K --wait 20 >/dev/null 2>&1 &
  w2=$!
  for _ in $(seq 100); do bb-stat buffers | grep -q '^pool small: 1 waiting: 2$' && break; sleep 0.1; done
  # 1K would fit beside job 1, but waits behind the queue's head.
  bb-pool alloc --job 3 --user "$user" --pool small --capacity 1K --wait 20 >/dev/null 2>&1 &
  w3=$!
  for _ in $(seq 100); do bb-stat buffers | grep -q '^pool small: 2 waiting: 2 3$' && break; sleep 0.1; done
  run bb-stat buffers
  assert_success
  assert_line --index 0 --regexp '^job +user +pool +size +state +age +reason$'
  assert_line --regexp "^  1  $user\($(id -u)\) +small +3KiB +allocated +[0-9]+s\$"
  assert_line --regexp "^  2  $user\($(id -u)\) +small +2KiB +pending +[0-9]+s +waiting for space in small, 1 \(next\) in its queue\$"
  assert_line --regexp "^  3  .* +pending +[0-9]+s +waiting for space in small, 2 in its queue\$"
  assert_line "pool small: 2 waiting: 2 3"
  run bb-stat buffers --json
  assert_success
  run jq -c '[.buffers[] | [.job_id, .state, .queue_position]], .waiting' <<<"$output"
  assert_line --index 0 '[[1,"allocated",null],[2,"pending",1],[3,"pending",2]]'
  assert_line --index 1 '{"small":["2","3"]}'
  bb-teardown --job 1 >/dev/null
  wait "$w2" "$w3"
  run bb-stat buffers
  refute_output --partial waiting
  assert_line --regexp "^  2 .* +allocated +"
}

@test "--watch prints the view again every SECONDS after a line with its time, until interrupted" {
  run timeout 2.5 bb-stat pools --watch 1
  [ "$status" -eq 124 ] || fail "bb-stat --watch ended by itself ($status): $output"
  [ "$(grep -c '^Every 1s: bb-stat pools  [0-9T:-]*$' <<<"$output")" -ge 2 ] || fail "$output"
  [ "$(grep -cE '^ *pool +units +quantity +free +gran' <<<"$output")" -ge 2 ] || fail "$output"
  for bad in "--watch 0" "--watch 3601" "--watch soon" "--watch 1 --dws" "--watch 1 --dwstat" \
    "--watch 1 --prometheus -" "env 5 --watch 1" "gres --slurm-jobs '' --watch 1"; do
    eval "run bb-stat $bad"
    [ "$status" -eq 64 ] || fail "bb-stat $bad: $status $output"
  done
}

@test "burst prints scontrol show burst's header lines, in the newest layout without slurm_release" {
  run bb-stat burst
  assert_success
  assert_equal "${lines[0]}" "Name=bbkit DefaultPool=nvme Granularity=1 TotalSpace=0 FreeSpace=0 UsedSpace=0"
  assert_equal "${lines[1]}" "  PoolName[0]=nvme Granularity=1GiB TotalSpace=100GiB FreeSpace=100GiB UsedSpace=0"
  assert_equal "${lines[2]}" "  PoolName[1]=small Granularity=1KiB TotalSpace=4KiB FreeSpace=4KiB UsedSpace=0"
  assert_equal "${lines[3]}" "  Flags=DisablePersistent"
  assert_equal "${lines[4]}" "  PollInterval=15"
  assert_equal "${lines[5]}" "  StageInTimeout=86400 StageOutTimeout=86400 ValidateTimeout=5 OtherTimeout=300"
  assert_equal "${lines[6]}" "  GetSysState=(null)"
  assert_equal "${lines[7]}" "  GetSysStatus=(null)"
  assert_equal "${#lines[@]}" 8
}

@test "burst follows bbkit.toml's slurm_release: PollInterval from 24.05, AltPoolName up to 20.11" {
  write_config 'slurm_release = "22.05"' 'poll_interval = 30'
  run bb-stat burst
  assert_success
  assert_equal "${lines[1]}" "  PoolName[0]=nvme Granularity=1GiB TotalSpace=100GiB FreeSpace=100GiB UsedSpace=0"
  assert_equal "${lines[3]}" "  Flags=DisablePersistent"
  assert_equal "${lines[4]}" "  StageInTimeout=86400 StageOutTimeout=86400 ValidateTimeout=5 OtherTimeout=300"
  refute_output --partial PollInterval
  assert_equal "${#lines[@]}" 7
  write_config 'slurm_release = "24.11"' 'poll_interval = 30'
  run bb-stat burst
  assert_equal "${lines[3]}" "  Flags=DisablePersistent"
  assert_equal "${lines[4]}" "  PollInterval=30"
  assert_equal "${#lines[@]}" 8
  write_config 'slurm_release = "20.11"'
  run bb-stat burst
  assert_equal "${lines[1]}" "  AltPoolName[0]=nvme Granularity=1GiB TotalSpace=100GiB FreeSpace=100GiB UsedSpace=0"
  assert_equal "${lines[2]}" "  AltPoolName[1]=small Granularity=1KiB TotalSpace=4KiB FreeSpace=4KiB UsedSpace=0"
  # The JSON is the same whatever the release.
  run bb-stat burst --json
  assert_output --partial '"poll_interval": 15'
  write_config 'slurm_release = "24.08"'
  run bb-stat burst
  assert_failure 78
  assert_output --partial "slurm_release: '24.08' is no Slurm release bbkit knows"
}

@test "burst follows the configuration's flags and timeouts" {
  write_config 'flags = ["PrivateData", "TeardownFailure"]' '[timeouts]' 'stage_in = 300' 'other = 120'
  run bb-stat burst
  assert_success
  assert_line "  Flags=DisablePersistent,PrivateData,TeardownFailure"
  assert_line "  StageInTimeout=300 StageOutTimeout=86400 ValidateTimeout=5 OtherTimeout=120"
}

@test "burst --json names the pools and flags" {
  run bb-stat burst --json
  assert_success
  echo "$output" | grep -q '"name": "bbkit"'
  echo "$output" | grep -q '"default_pool": "nvme"'
  echo "$output" | grep -q '"DisablePersistent"'
}

@test "unknown job exits 66 with one line" {
  run bb-stat job 42
  assert_failure 66
  assert_output "bb-stat: no burst buffer for job 42"
}

@test "--prometheus writes the metrics file and prints nothing" {
  run bb-stat --prometheus "$TEST_DIR/bbkit.prom"
  assert_success
  assert_output ""
  assert_file_exists "$TEST_DIR/bbkit.prom"
  grep -qx '# TYPE bbkit_pool_bytes gauge' "$TEST_DIR/bbkit.prom"
  grep -qx 'bbkit_pool_bytes{pool="nvme",kind="total"} 107374182400' "$TEST_DIR/bbkit.prom"
  grep -qx 'bbkit_pool_bytes{pool="small",kind="free"} 4096' "$TEST_DIR/bbkit.prom"
  grep -qx 'bbkit_buffers{state="allocated"} 0' "$TEST_DIR/bbkit.prom"
  grep -qx 'bbkit_pool_queue_length{pool="nvme"} 0' "$TEST_DIR/bbkit.prom"
  grep -qx 'bbkit_pool_draining{pool="nvme"} 0' "$TEST_DIR/bbkit.prom"
  [ "$(stat -c %a "$TEST_DIR/bbkit.prom")" = 644 ]
  ! ls "$TEST_DIR" | grep -q 'bbkit.prom.tmp'
}

@test "the shipped alert rules and dashboard name only metrics and labels bb-stat writes" {
  needs_bb_pool
  run bb-stat --prometheus -
  assert_success
  metrics=$output
  local dir=$BBKIT_SOURCE_DIR/share/bbkit/monitoring
  [ -n "${BBKIT_BIN_DIR:-}" ] && dir=$BBKIT_BIN_DIR/../share/bbkit/monitoring
  # Every selector bbkit_NAME{key=...} of the rules' expressions and the dashboard's targets.
  run python3 - "$dir/bbkit.rules.yml" "$dir/bbkit-dashboard.json" <<'PY'
import json, re, sys, yaml
rules = yaml.safe_load(open(sys.argv[1]))
exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
assert all("alert" in r and "annotations" in r for g in rules["groups"] for r in g["rules"])
dash = json.load(open(sys.argv[2]))
exprs += [t["expr"] for p in dash["panels"] for t in p["targets"]]
for expr in exprs:
    for name, labels in re.findall(r"\b(bbkit_[a-z_]+)(\{[^}]*\})?", expr):
        keys = re.findall(r"([a-z_]+)\s*(?:=~|!=|!~|=)", labels)
        print(name, " ".join(keys))
PY
  assert_success
  [ "${#lines[@]}" -ge 10 ] || fail "too few selectors: $output"
  local line name keys key
  for line in "${lines[@]}"; do
    read -r name keys <<<"$line"
    grep -qx "# TYPE $name gauge" <<<"$metrics" || fail "$name is named but bb-stat writes no such metric"
    for key in $keys; do
      grep -q "^$name{\(.*,\)\?$key=" <<<"$metrics" || fail "$name has no label $key"
    done
  done
}

@test "--prometheus with a view also prints the view" {
  run bb-stat burst --prometheus "$TEST_DIR/m.prom"
  assert_success
  assert_line --index 0 --partial "Name=bbkit"
  assert_file_exists "$TEST_DIR/m.prom"
}

@test "--prometheus into a missing directory fails with 66 (ENOENT, as every tool maps it)" {
  run bb-stat --prometheus "$TEST_DIR/missing/m.prom"
  assert_failure 66
  assert_output --partial "bb-stat: "
}

@test "--prometheus - writes the metrics to standard output, no file named -, and takes no view" {
  cd "$TEST_DIR"
  run bb-stat --prometheus -
  assert_success
  assert_line '# TYPE bbkit_pool_bytes gauge'
  [ ! -e "$TEST_DIR/-" ]
  run bb-stat burst --prometheus -
  assert_failure 64
  assert_output "bb-stat: --prometheus - writes the metrics to standard output: name no view with it"
  run bb-stat --prometheus ""
  assert_failure 64
  run bb-stat --prometheus "$TEST_DIR/"
  assert_failure 64
  assert_output "bb-stat: --prometheus needs a file name, or - for standard output"
}

# Every kind of thing a root tool could find at the path it is told to write, but did not write
# itself (bbkit(7), SECURITY): each is refused with 73 and left exactly as it was.
plant_output_targets() {
  local d=$1
  mkdir -p "$d"
  echo "the target's own" >"$d/target"
  ln -s "$d/target" "$d/symlink"
  ln -s /dev/stdout "$d/stdout"
  ln -s "$d/missing" "$d/dangling"
  mkfifo "$d/fifo"
  mknod "$d/device" c 1 3  # a second /dev/null
  mkdir "$d/directory"
  echo "two names" >"$d/linked"
  ln "$d/linked" "$d/linked2"
  echo "root:x:0:0:root:/root:/bin/bash" >"$d/passwd"
  bb-stat --prometheus "$d/theirs"
  chown nobody "$d/theirs"
}
output_target_state() {
  local d=$1 f
  ls -A "$d"
  for f in "$d"/*; do
    printf '%s %s\n' "$f" "$(stat -c '%F %i %h %U %s %Y' "$f")"
    [ ! -f "$f" ] || [ -p "$f" ] || md5sum <"$f"
  done
}

@test "--prometheus replaces no file it did not write: symlinks, devices, FIFOs, directories, hard links, another's file, other content" {
  plant_output_targets "$TEST_DIR/t"
  before=$(output_target_state "$TEST_DIR/t")
  local name
  for name in symlink stdout dangling fifo device directory linked passwd theirs; do
    run timeout 20 bb-stat --prometheus "$TEST_DIR/t/$name"
    assert_failure 73
    assert_output --regexp "^bb-stat: refusing to write $TEST_DIR/t/$name: it (is a symlink|is not a regular file|has other names \(hard links\)|belongs to uid [0-9]+|is not a file this command wrote) \(name a new file, or one this command wrote\)$"
  done
  [ "$(output_target_state "$TEST_DIR/t")" = "$before" ]
  # What it wrote itself, it replaces (a textfile collector's file, rewritten every minute).
  bb-stat --prometheus "$TEST_DIR/t/mine"
  inode=$(stat -c %i "$TEST_DIR/t/mine")
  run bb-stat --prometheus "$TEST_DIR/t/mine"
  assert_success
  [ "$(stat -c %i "$TEST_DIR/t/mine")" != "$inode" ]  # renamed over, atomically
  grep -qx '# TYPE bbkit_pool_bytes gauge' "$TEST_DIR/t/mine"
}

# The race the check cannot close by itself: the name changes hands after it was checked and
# before the file takes it (BBKIT_FAULT=output.checked:stop holds bb-stat exactly there). Each
# kind of thing put there, over a new name and over bb-stat's own earlier file, is left as it
# became, the file it may point at untouched, with exit 73.
@test "--prometheus: a name that changes hands between its check and the placement is left as it became, exit 73" {
  # The list names the point (without crash injection bb-stat ignores BBKIT_FAULT and prints
  # its pools view instead: not a list).
  BBKIT_FAULT=list bb-stat 2>/dev/null | grep -q '^output\.checked' || skip "built without fault injection"
  local victim=$TEST_DIR/victim start kind t pid status
  echo precious >"$victim"
  for start in new existing; do
    for kind in symlink fifo directory hardlink other-user other-content; do
      t=$TEST_DIR/race-$start-$kind.prom
      [ "$start" = new ] || bb-stat --prometheus "$t"
      BBKIT_FAULT=output.checked:stop bb-stat --prometheus "$t" 2>"$TEST_DIR/err" &
      pid=$!
      for _ in $(seq 200); do
        grep -q '^State:.*T' "/proc/$pid/status" 2>/dev/null && break
        sleep 0.02
      done
      grep -q '^State:.*T' "/proc/$pid/status" || fail "$start/$kind: bb-stat did not stop at output.checked"
      rm -f "$t"
      case $kind in
        symlink) ln -s "$victim" "$t" ;;
        fifo) mkfifo "$t" ;;
        directory) mkdir "$t" ;;
        hardlink) ln "$victim" "$t" ;;
        other-user) echo '# HELP bbkit_x planted' >"$t" && chown nobody "$t" ;;
        other-content) echo 'not metrics' >"$t" ;;
      esac
      kill -CONT "$pid"
      status=0
      wait "$pid" || status=$?
      [ "$status" -eq 73 ] || fail "$start/$kind: exit $status: $(cat "$TEST_DIR/err")"
      grep -q "^bb-stat: refusing to write $t: it \(appeared\|changed\) while it was checked" "$TEST_DIR/err" ||
        fail "$start/$kind: $(cat "$TEST_DIR/err")"
      [ "$(cat "$victim")" = precious ] || fail "$start/$kind: the victim changed"
      case $kind in
        symlink) [ "$(readlink "$t")" = "$victim" ] ;;
        fifo) [ -p "$t" ] ;;
        directory) [ -d "$t" ] && [ -z "$(ls -A "$t")" ] ;;
        hardlink) [ "$(stat -c %i "$t")" = "$(stat -c %i "$victim")" ] ;;
        other-user) [ "$(stat -c %U "$t")" = nobody ] && [ "$(cat "$t")" = '# HELP bbkit_x planted' ] ;;
        other-content) [ "$(cat "$t")" = 'not metrics' ] ;;
      esac || fail "$start/$kind: what was put there did not stay"
      [ -z "$(ls -A "$TEST_DIR" | grep -F "race-$start-$kind.prom." || true)" ] || fail "$start/$kind: a temporary was left"
      rm -rf "$t"
    done
  done
}

@test "--state-dir overrides the configuration" {
  bb-pool --state-dir "$TEST_DIR/other" recover >/dev/null
  run bb-stat --state-dir "$TEST_DIR/other"
  assert_success
  assert_file_exists "$TEST_DIR/other/state.db"
}

@test "a missing state directory is 66 and bb-stat creates nothing" {
  run bb-stat --state-dir "$TEST_DIR/typo"
  assert_failure 66
  assert_equal "${#lines[@]}" 1
  assert_output --partial "$TEST_DIR/typo: it does not exist"
  assert_not_exist "$TEST_DIR/typo"
  for view in burst sessions "job 7"; do
    run bb-stat --state-dir "$TEST_DIR/typo" $view
    assert_failure 66
  done
  run bb-stat --state-dir "$TEST_DIR/typo" --prometheus "$TEST_DIR/metrics"
  assert_failure 66
  assert_not_exist "$TEST_DIR/typo"
  assert_not_exist "$TEST_DIR/metrics"
}

@test "a state directory without state.db is 66 and stays empty" {
  mkdir -m 0711 "$TEST_DIR/empty"
  run bb-stat --state-dir "$TEST_DIR/empty"
  assert_failure 66
  assert_output --partial "state.db: it does not exist"
  [ -z "$(ls -A "$TEST_DIR/empty")" ]
}

@test "bb-stat leaves the state directory as it was" {
  needs_bb_pool
  local before after
  before=$(cd "$TEST_DIR/state" && find . -printf '%p %s %T@\n' | grep -v -e state.db -e '\.shm' | sort)
  bb-stat >/dev/null
  bb-stat burst >/dev/null
  bb-stat --json >/dev/null
  after=$(cd "$TEST_DIR/state" && find . -printf '%p %s %T@\n' | grep -v -e state.db -e '\.shm' | sort)
  assert_equal "$after" "$before"
}

# --- other users --------------------------------------------------------------------------

@test "a non-owner never opens the database and needs published status" {
  local user; user=$(test_user)
  rm "$TEST_DIR/state/public/pools.json"  # as before the first publish
  open_state_dir
  run runuser -u "$user" -- bb-stat
  assert_failure 69
  assert_output --partial "no status published"
  [ "$(stat -c %U "$TEST_DIR/state/state.db")" = root ]
}

@test "a non-owner cannot read a state directory without search permission" {
  local user; user=$(test_user)
  bb-stat >/dev/null
  chmod 0700 "$TEST_DIR/state"
  run runuser -u "$user" -- bb-stat
  assert_failure 77
  assert_output --partial "chmod 0711"
}

@test "a non-owner reads pools and everyone's buffers from public/" {
  local user; user=$(test_user)
  needs_bb_pool
  bb-pool alloc --job 1 --user root --pool nvme --capacity 1GiB
  bb-pool alloc --job 2 --user "$user" --pool nvme --capacity 2GiB
  open_state_dir
  uid=$(id -u "$user")
  [ "$(stat -c '%a %u' "$TEST_DIR/state/public/buffers/$uid")" = "755 0" ]
  [ "$(stat -c '%a %u' "$TEST_DIR/state/public/buffers/$uid/main.2.1.json")" = "644 0" ]
  run runuser -u "$user" -- bb-stat
  assert_success
  assert_line " nvme bytes   100GiB 97GiB 1GiB    up"
  run runuser -u "$user" -- bb-stat sessions
  assert_success
  assert_equal "${#lines[@]}" 3
  run runuser -u "$user" -- bb-stat job 1
  assert_success
  assert_line --partial "allocated"
}

# PrivateData, job 1's buffer root's and job 2's the test user's ($user, $uid).
private_pair() {
  write_config 'flags = ["PrivateData"]'
  user=$(test_user)
  needs_bb_pool
  bb-pool alloc --job 1 --user root --pool nvme --capacity 1GiB
  bb-pool alloc --job 2 --user "$user" --pool nvme --capacity 2GiB
  open_state_dir
  uid=$(id -u "$user")
}

# With PrivateData: the directory of UID's files in public/buffers/, named by their key.
own_directory() {
  local key
  key=$(cat "$TEST_DIR/state/public/buffers/$1.key")
  printf '%s/public/buffers/%s\n' "$TEST_DIR/state" \
    "$(printf '%s' "public/buffers/$1" | openssl dgst -sha256 -hmac "$key" -r | cut -c1-32)"
}

@test "with PrivateData a non-owner sees only their own buffers" {
  private_pair
  [ "$(stat -c '%a %u' "$TEST_DIR/state/public/buffers")" = "711 0" ]
  [ "$(stat -c '%a %u' "$TEST_DIR/state/public/buffers/$uid.key")" = "400 $uid" ]
  [ "$(stat -c '%a %u' "$(own_directory "$uid")")" = "700 $uid" ]
  [ "$(stat -c '%a %u' "$(own_directory 0)")" = "700 0" ]
  assert_file_not_exists "$TEST_DIR/state/public/buffers/$uid"
  run runuser -u "$user" -- cat "$TEST_DIR/state/public/buffers/0.key"
  assert_failure
  run runuser -u "$user" -- cat "$(own_directory 0)/main.1.1.json"
  assert_failure
  run runuser -u "$user" -- bb-stat sessions
  assert_success
  assert_equal "${#lines[@]}" 2
  assert_output --partial "$uid"
  run runuser -u "$user" -- bb-stat job 1
  assert_failure 66
  run runuser -u "$user" -- bb-stat job 2
  assert_success
}

@test "--for-uid shows what that user may see, and never more than the caller may" {
  private_pair
  # root answering for the user: their buffer only, pool totals for all.
  run bb-stat sessions --for-uid "$uid"
  assert_success
  assert_equal "${#lines[@]}" 2
  assert_output --partial "$uid"
  run bb-stat burst --for-uid "$uid"
  assert_success
  assert_output --partial "JobID=2 "
  refute_output --partial "JobID=1 "
  assert_output --partial "UsedSpace=3GiB"
  run bb-stat job 1 --for-uid "$uid"
  assert_failure 66
  assert_output "bb-stat: no burst buffer for job 1"
  run bb-stat job 2 --for-uid "$uid" --json
  assert_success
  # Root and the owner see all; so does everyone without PrivateData.
  run bb-stat sessions --for-uid 0
  assert_equal "${#lines[@]}" 3
  write_config
  run bb-stat sessions --for-uid "$uid"
  assert_equal "${#lines[@]}" 3
  write_config 'flags = ["PrivateData"]'
  bb-pool drain small  # any write resyncs public/
  # A user answering for root still sees only their own.
  run runuser -u "$user" -- bb-stat sessions --for-uid 0
  assert_success
  assert_equal "${#lines[@]}" 2
  run bb-stat --for-uid nobody
  assert_failure 64
}

# What another user may try under PrivateData: every view answers for root's job 1 as for a job
# that has no buffer at all (9), in the same words and exit status, and the pool's directories
# tell nothing: the names of buffer directories and environment files cannot be guessed, so
# stat(1) of the old, predictable names finds nothing whether or not the job has a buffer.
@test "with PrivateData another user's job is answered as a job without a buffer, everywhere" {
  write_config 'flags = ["PrivateData"]'
  U=$(test_user)
  env_job 1 "#BB_LUA pool=nvme capacity=1G"
  chmod 0711 "$TEST_DIR/state"
  other=$(test_user bbkit-test-other)
  for view in "job" "env"; do
    run runuser -u "$other" -- bb-stat "$view" 1
    foreign_status=$status foreign_output=$output
    run runuser -u "$other" -- bb-stat "$view" 9
    assert_equal "$foreign_status" "$status"
    assert_equal "$foreign_output" "${output//9/1}"
    assert_equal "$status" 66
  done
  run runuser -u "$other" -- bb-stat job 1 --json
  assert_failure 66
  run runuser -u "$other" -- bb-stat burst
  assert_success
  refute_output --partial "JobID=1 "
  run bb-stat job 1 --for-anyone
  foreign_output=$output
  run bb-stat job 9 --for-anyone
  assert_equal "$foreign_output" "${output//9/1}"
  # The names: neither the directory nor the environment file is where anyone could guess.
  for guess in "$TEST_DIR/nvme/job/main.1.1" "$TEST_DIR/nvme/env/main.1"; do
    run runuser -u "$other" -- stat "$guess"
    assert_failure
    assert_output --partial "No such file or directory"
  done
  run runuser -u "$other" -- ls "$TEST_DIR/nvme/job" "$TEST_DIR/nvme/env"
  assert_failure
  # The owner still finds both.
  run runuser -u "$U" -- bb-stat env 1
  assert_success
  assert_line "export BB_JOB_DIR=$(bbdir "$TEST_DIR/nvme/job/main.1.1")"
  run runuser -u "$U" -- bb-stat job 1
  assert_success
}

# What another user can learn of public/ under PrivateData, by stat(1) of every name they can
# try (the old layout's public/buffers/UID and bookkeeping included): size, links, owner, mode,
# mtime and ctime to the nanosecond. public/ and public/pools.json are left out: they change with
# the pools' totals, whoever's buffer changed them, which bb-stat shows everyone anyway.
reachable_by() {
  local who=$1 uid=$2 name
  for name in public/buffers "public/buffers/$uid" "public/buffers/$uid.key" public/.owner \
    public/.owner/settings public/.owner/unsettled public/.settings public/.unsettled; do
    runuser -u "$who" -- stat -c '%n %i %a %u %s %h %.9Y %.9Z' "$TEST_DIR/state/$name" 2>&1 || true
  done
}

@test "with PrivateData another user learns nothing from public/ of who has a buffer or when it changed" {
  write_config 'flags = ["PrivateData"]'
  U=$(test_user)
  other=$(test_user bbkit-test-other)
  uid=$(id -u "$U")
  command -v bb-teardown >/dev/null || skip "needs bb-teardown"
  needs_bb_pool
  open_state_dir
  # The user's first buffer makes their key (bbkit(7), SECURITY: it tells that they once had a
  # buffer here, never whether they have one or when it changed).
  bb-pool alloc --job 1 --user "$U" --pool nvme --capacity 1GiB
  bb-teardown --job 1
  run runuser -u "$other" -- ls "$TEST_DIR/state/public/buffers"
  assert_failure
  assert_output --partial "Permission denied"
  before=$(reachable_by "$other" "$uid")
  sleep 0.05
  bb-pool alloc --job 2 --user "$U" --pool nvme --capacity 1GiB
  assert_equal "$(reachable_by "$other" "$uid")" "$before"
  run runuser -u "$U" -- bb-stat sessions
  assert_success
  assert_equal "${#lines[@]}" 2
  run runuser -u "$U" -- bb-stat job 2
  assert_success
  run runuser -u "$other" -- bb-stat sessions
  assert_success
  assert_equal "${#lines[@]}" 1
  sleep 0.05
  bb-pool alloc --job 3 --user "$U" --pool nvme --capacity 1GiB
  bb-teardown --job 2
  assert_equal "$(reachable_by "$other" "$uid")" "$before"
  sleep 0.05
  bb-teardown --job 3
  assert_equal "$(reachable_by "$other" "$uid")" "$before"
  run runuser -u "$U" -- bb-stat sessions
  assert_equal "${#lines[@]}" 1
}

@test "turning PrivateData on or off takes effect at the next write" {
  local user; user=$(test_user)
  needs_bb_pool
  bb-pool alloc --job 1 --user root --pool nvme --capacity 1GiB
  bb-pool alloc --job 2 --user "$user" --pool nvme --capacity 2GiB
  open_state_dir
  uid=$(id -u "$user")
  run runuser -u "$user" -- bb-stat sessions
  assert_equal "${#lines[@]}" 3
  write_config 'flags = ["PrivateData"]'
  bb-pool drain small  # any write resyncs public/
  [ "$(stat -c '%a %u' "$(own_directory "$uid")")" = "700 $uid" ]
  assert_file_not_exists "$TEST_DIR/state/public/buffers/$uid"
  run runuser -u "$user" -- bb-stat sessions
  assert_success
  assert_equal "${#lines[@]}" 2
  write_config
  bb-pool resume small
  [ "$(stat -c '%a %u' "$TEST_DIR/state/public/buffers/$uid")" = "755 0" ]
  assert_file_not_exists "$TEST_DIR/state/public/buffers/$uid.key"
  run runuser -u "$user" -- bb-stat sessions
  assert_equal "${#lines[@]}" 3
}

@test "a torn-down buffer leaves public/ at once" {
  local user; user=$(test_user)
  command -v bb-teardown >/dev/null || skip "needs bb-teardown"
  needs_bb_pool
  bb-pool alloc --job 2 --user "$user" --pool nvme --capacity 2GiB
  uid=$(id -u "$user")
  assert_file_exists "$TEST_DIR/state/public/buffers/$uid/main.2.1.json"
  bb-teardown --job 2
  assert_file_not_exists "$TEST_DIR/state/public/buffers/$uid/main.2.1.json"
  open_state_dir
  run runuser -u "$user" -- bb-stat sessions
  assert_success
  assert_equal "${#lines[@]}" 1
}

# --- with buffers (bb-pool alloc) ----------------------------------------------------------

@test "burst lists allocated buffers and per-user use" {
  needs_bb_pool
  bb-pool alloc --job 42 --user root --pool small --capacity 1K
  run bb-stat burst
  assert_success
  assert_line "  PoolName[1]=small Granularity=1KiB TotalSpace=4KiB FreeSpace=3KiB UsedSpace=1KiB"
  assert_line "  Allocated Buffers:"
  assert_line --regexp '^    JobID=42 CreateTime=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8} Pool=small Size=1KiB State=allocated UserID=root\(0\)$'
  assert_line "  Per User Buffer Use:"
  assert_line "    UserID=root(0) Used=1KiB"
}

@test "job shows state, reason, sizes and directory" {
  needs_bb_pool
  bb-pool alloc --job 7 --user root --pool nvme --capacity 3G
  run bb-stat job 7
  assert_success
  assert_line "state:      allocated"
  assert_line "requested:  3GiB"
  assert_line "directory:  $(bbdir $TEST_DIR/nvme/job/main.7.1)"
  run bb-stat job 7 --json
  assert_success
  echo "$output" | grep -q '"allocated": 3221225472'
  echo "$output" | grep -q '"phases": \['
}

@test "pools.json is Slurm's format in granules after an alloc" {
  needs_bb_pool
  bb-pool alloc --job 1 --user root --pool small --capacity 1K
  run cat "$TEST_DIR/state/pools.json"
  assert_output '{"pools":[{"free":100,"granularity":1073741824,"id":"nvme","quantity":100},{"free":3,"granularity":1024,"id":"small","quantity":4}]}'
  [ "$(stat -c %a "$TEST_DIR/state/pools.json")" = 644 ]
}

@test "--prometheus counts buffers by state" {
  needs_bb_pool
  bb-pool alloc --job 1 --user root --pool small --capacity 1K
  run bb-stat --prometheus "$TEST_DIR/m.prom"
  assert_success
  grep -qx 'bbkit_buffers{state="allocated"} 1' "$TEST_DIR/m.prom"
  grep -qx 'bbkit_pool_bytes{pool="small",kind="used"} 1024' "$TEST_DIR/m.prom"
}

# --- availability -----------------------------------------------------------------------------

@test "every view shows up, draining and unavailable pools" {
  needs_bb_pool >/dev/null
  bb-pool drain small >/dev/null
  rm "$TEST_DIR/nvme/.bbkit-pool"
  run bb-stat
  assert_success
  assert_line --regexp '^ *nvme bytes .* unavailable$'
  assert_line --regexp '^ *small bytes .* draining$'
  # Slurm's lines have no such field (scripts grep them): burst --json has it.
  run bb-stat burst
  assert_line "  PoolName[0]=nvme Granularity=1GiB TotalSpace=100GiB FreeSpace=100GiB UsedSpace=0"
  refute_output --partial Availability
  run bb-stat burst --json
  assert_output --partial '"availability": "unavailable"'
  run bb-stat --json
  assert_output --partial '"availability": "draining"'
  bb-stat --prometheus "$TEST_DIR/metrics"
  grep -qx 'bbkit_pool_availability{pool="nvme",availability="unavailable"} 1' "$TEST_DIR/metrics"
  grep -qx 'bbkit_pool_availability{pool="nvme",availability="up"} 0' "$TEST_DIR/metrics"
  grep -qx 'bbkit_pool_availability{pool="small",availability="draining"} 1' "$TEST_DIR/metrics"
  bb-pool resume small >/dev/null
  run bb-stat
  assert_line --regexp '^ *small bytes .* up$'
}

@test "a non-owner sees a pool unmounted since the last write as unavailable" {
  local user; user=$(test_user)
  needs_bb_pool >/dev/null
  open_state_dir
  run runuser -u "$user" -- bb-stat --json
  assert_success
  assert_output --partial '"availability": "up"'
  grep -q '"availability": "up"' "$TEST_DIR/state/public/pools.json"
  rm "$TEST_DIR/nvme/.bbkit-pool"
  run runuser -u "$user" -- bb-stat
  assert_success
  assert_line --regexp '^ *nvme bytes .* unavailable$'
}

@test "job shows the stager's progress record: counters, and rates and ETA while it runs" {
  needs_bb_pool >/dev/null
  bb-pool alloc --job 8 --user root --capacity 1G >/dev/null
  record="$TEST_DIR/state/progress/main.8.1"
  printf '%s\n' '{"direction":"in","phase":"copying","files_done":12034,"files_total":100000,"bytes_done":1258291,"bytes_total":10276045,"files_per_second":3400.0,"bytes_per_second":2202009.0,"eta_seconds":26,"started":1700000000,"updated":1700000012,"pid":4242}' >"$record"
  run bb-stat job 8
  assert_success
  # Allocated, not staging: the record is a past stage's, shown without a pace.
  assert_line "progress:   12,034/100,000 entries, 1.2MiB/9.8MiB"
  run bb-stat job 8 --json
  assert_success
  python3 -c '
import json, sys
p = json.load(sys.stdin)["progress"]
assert p["direction"] == "in" and p["phase"] == "copying", p
assert p["files_done"] == 12034 and p["bytes_total"] == 10276045, p
assert p["files_per_second"] == 3400 and p["bytes_per_second"] == 2202009, p
assert p["eta_seconds"] == 26 and p["pid"] == 4242, p
assert p["started"].startswith("2023-11-1") and "T" in p["updated"], p
' <<<"$output"
}

@test "job reads an older stager's record, and ignores a malformed one" {
  needs_bb_pool >/dev/null
  bb-pool alloc --job 8 --user root --capacity 1G >/dev/null
  record="$TEST_DIR/state/progress/main.8.1"
  printf '{"files_done": 3, "files_total": 10, "bytes_done": 1024, "bytes_total": 4096}\n' >"$record"
  run bb-stat job 8
  assert_success
  assert_line "progress:   3/10 entries, 1.0KiB/4.0KiB"
  run bb-stat job 8 --json
  assert_output --partial '"phase": "copying"'
  assert_output --partial '"eta_seconds": null'
  for garbage in '' '{' '[1]' '{"files_done": "3"}' \
      '{"files_done": 1, "files_total": 2, "bytes_done": 3, "bytes_total": 4, "phase": ["x"], "pid": -1}'; do
    printf '%s' "$garbage" >"$record"
    run bb-stat job 8
    assert_success
    if [[ $garbage == *bytes_total* ]]; then
      assert_line "progress:   1/2 entries, 3B/4B"
    else
      refute_output --partial "progress:"
    fi
  done
  head -c 100000 /dev/zero | tr '\0' '[' >"$record"
  run bb-stat job 8 --json
  assert_success
  assert_output --partial '"progress": null'
}

@test "job --json gives times as ISO 8601 strings" {
  needs_bb_pool >/dev/null
  bb-pool alloc --job 9 --user root --capacity 1G >/dev/null
  run bb-stat job 9 --json
  assert_success
  assert_output --regexp '"created": "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"'
  assert_output --regexp '"allocated": "[0-9]{4}-[0-9]{2}-[0-9]{2}T'
  assert_output --regexp '"entered": "[0-9]{4}-'
  refute_output --regexp '"(created|entered)": [0-9]'
}

# --- env: a job's environment for its tasks (standalone mode) ---------------------------------

# A job of the test user ($U) through alloc --script, stage-in and pre-run, as the standalone
# prologs run them; the state directory then closed to everyone but root, as a compute node
# that cannot reach it.
env_job() {
  local id=$1; shift
  mkdir -p "$TEST_DIR/nvme" "$TEST_DIR/small"
  bb-pool init nvme >/dev/null
  printf '#!/bin/sh\n' >"$TEST_DIR/job$id.sh"
  printf '%s\n' "$@" >>"$TEST_DIR/job$id.sh"
  bb-pool alloc --job "$id" --user "$U" --script "$TEST_DIR/job$id.sh" --wait default >/dev/null
  bb-stage in --job "$id" >/dev/null
  bb-stage pre-run --job "$id" >/dev/null
  chmod 0700 "$TEST_DIR/state"
}

# envfile POOL JOB: job JOB's environment file in POOL's env/ (main.JOB.TAG), as root lists it.
envfile() {
  local f
  for f in "$TEST_DIR/$1/env/main.$2".????????????????????????????????; do
    [ -e "$f" ] && { echo "$f"; return 0; }
  done
  echo "$TEST_DIR/$1/env/main.$2"
}

@test "env prints the job's paths as TaskProlog exports for its user, without the state directory" {
  U=$(test_user)
  env_job 31 "#BB_LUA pool=nvme capacity=1G"
  [ "$(stat -c '%U %a' "$(envfile nvme 31)")" = "$U 400" ]
  [ "$(stat -c '%U %a' "$TEST_DIR/nvme/env/$(id -u "$U").key")" = "$U 400" ]
  [ ! -e "$TEST_DIR/nvme/env/main.31" ]  # the name its user's key gives it, nobody else can
  [ "$(stat -c '%U %a' "$TEST_DIR/nvme/env")" = "root 711" ]
  run runuser -u "$U" -- bb-stat env 31
  assert_success
  assert_line "export BB_JOB_DIR=$(bbdir $TEST_DIR/nvme/job/main.31.1)"
  assert_line "export DW_JOB_STRIPED=$(bbdir $TEST_DIR/nvme/job/main.31.1)"
  [ "$(chmod 0711 "$TEST_DIR/state" && bb-stage paths --job 31 | sed 's/^/export /')" = "$output" ] ||
    fail "not the lines of bb-stage paths"
  chmod 0700 "$TEST_DIR/state"
  run runuser -u "$U" -- bb-stat env 31 --json
  assert_success
  assert_output --partial "\"BB_JOB_DIR\": \"$(bbdir $TEST_DIR/nvme/job/main.31.1)\""
}

@test "env --shell evals in sh" {
  U=$(test_user)
  env_job 32 "#BB_LUA pool=nvme capacity=1G"
  run runuser -u "$U" -- sh -c 'eval "$(bb-stat env 32 --shell)" && printf "%s\n" "$BB_JOB_DIR"'
  assert_success
  assert_output "$(bbdir $TEST_DIR/nvme/job/main.32.1)"
}

@test "env: another user's job answers as a job without a buffer, 66 and the same words" {
  U=$(test_user)
  env_job 33 "#BB_LUA pool=nvme capacity=1G"
  run runuser -u nobody -- bb-stat env 33
  assert_failure 66
  assert_output "bb-stat: job 33 has no burst-buffer environment on any pool (no buffer, not yet past pre-run, or not standalone mode)"
  run runuser -u "$U" -- bb-stat env 99
  assert_failure 66
  assert_output "bb-stat: job 99 has no burst-buffer environment on any pool (no buffer, not yet past pre-run, or not standalone mode)"
}

@test "env is gone after teardown (66)" {
  U=$(test_user)
  env_job 34 "#BB_LUA pool=nvme capacity=1G"
  chmod 0711 "$TEST_DIR/state"
  [ -e "$(envfile nvme 34)" ]
  bb-teardown --job 34 >/dev/null
  assert_not_exist "$(envfile nvme 34)"
  run runuser -u "$U" -- bb-stat env 34
  assert_failure 66
}

@test "env of a #DW job names its persistent buffers" {
  U=$(test_user)
  mkdir -p "$TEST_DIR/nvme" && bb-pool init nvme >/dev/null
  bb-pool alloc --persistent x --capacity 1G --owner "$U" >/dev/null
  env_job 35 "#DW jobdw capacity=1G" "#DW persistentdw name=x"
  run runuser -u "$U" -- bb-stat env 35
  assert_success
  assert_line "export DW_JOB_STRIPED=$(bbdir $TEST_DIR/nvme/job/main.35.1)"
  assert_line "export DW_PERSISTENT_STRIPED_x=$(bbdir $TEST_DIR/nvme/persistent/main.x)"
}

@test "env is not written in Slurm mode" {
  U=$(test_user)
  write_config 'mode = "slurm"'
  env_job 36 "#BB_LUA pool=nvme capacity=1G"
  assert_not_exist "$(envfile nvme 36)"
  run runuser -u "$U" -- bb-stat env 36
  assert_failure 66
}

@test "env: a malformed file is 65 naming it; usage errors are 64" {
  U=$(test_user)
  env_job 37 "#BB_LUA pool=nvme capacity=1G"
  file=$(envfile nvme 37)
  chmod 0600 "$file"
  printf 'BB_JOB_DIR=/x\nnot a line\n' >"$file"
  run runuser -u "$U" -- bb-stat env 37
  assert_failure 65
  assert_output --partial "$file"
  run bb-stat env
  assert_failure 64
  run bb-stat env 37 --prometheus "$TEST_DIR/m.prom"
  assert_failure 64
  run bb-stat pools --shell
  assert_failure 64
}

# --- history: the accounting (bbkit(7), HISTORY AND ACCOUNTING) -------------------------------

# A job of the test user ($U) with a stage-in of a real file and a stage-out, then torn down.
history_job() {
  local id=$1
  mkdir -p "$TEST_DIR/nvme" "$TEST_DIR/small" "$TEST_DIR/pfs$id"
  bb-pool init nvme >/dev/null
  chown "$U" "$TEST_DIR/pfs$id"
  runuser -u "$U" -- sh -c "head -c 300000 /dev/zero >'$TEST_DIR/pfs$id/in.dat'"
  cat >"$TEST_DIR/job$id.sh" <<SCRIPT
#!/bin/sh
#BB_LUA pool=nvme capacity=1G
#BB_LUA stage_in source=$TEST_DIR/pfs$id/in.dat destination=\$BB_JOB_DIR/in.dat type=file
#BB_LUA stage_out source=\$BB_JOB_DIR/in.dat destination=$TEST_DIR/pfs$id/out.dat type=file
SCRIPT
  bb-pool alloc --job "$id" --user "$U" --script "$TEST_DIR/job$id.sh" --wait default >/dev/null
  bb-stage in --job "$id" >/dev/null
  bb-stage pre-run --job "$id" >/dev/null
  bb-stage post-run --job "$id" >/dev/null
  bb-stage out --job "$id" >/dev/null
  bb-teardown --job "$id" >/dev/null
}

@test "history sums what each user held and staged, as a table and as JSON" {
  U=$(test_user)
  local started=$SECONDS
  history_job 41
  history_job 42
  local held=$((SECONDS - started + 1))
  run bb-stat history
  assert_success
  assert_line --index 0 --regexp "^history from [0-9-]{10}T00:00:00 to [0-9T:-]{19} by user\$"
  assert_line --index 1 --regexp '^USER +BUFFERS +GIB-HOURS +IN +IN-SIZE +IN-FILES +IN-MEAN +IN-MAX +OUT +OUT-SIZE +OUT-FILES +OUT-MEAN +OUT-MAX +FAILED$'
  # GiB-hours depend on how long the two 1-GiB buffers lived (seconds here, more under the
  # sanitizers on a loaded host): at most 1 GiB each for the time both jobs took.
  assert_line --regexp "^$U +2 +[0-9]+\.[0-9]{2} +2 +586KiB +2 .* 2 +586KiB +2 .* 0\$"
  assert_line --regexp '^TOTAL +2 '
  run bb-stat history --json
  assert_success
  run jq -e --argjson bound "$(awk -v s="$held" 'BEGIN { printf "%.6f", 2 * s / 3600 }')" \
    '.rows[0].gib_hours >= 0 and .rows[0].gib_hours <= $bound' <<<"$output"
  assert_success
  run bb-stat history --json --by pool
  assert_success
  run jq -c '[.by, (.rows[] | [.name, .buffers, .stage_in.runs, .stage_in.bytes, .stage_in.files, .stage_out.bytes, .stage_in.failed]), .total.buffers]' <<<"$output"
  assert_output '["pool",["nvme",2,2,600000,2,600000,0],2]'
  # A range before them holds nothing; one user's filter keeps only theirs.
  run bb-stat history --since 2001-01-01 --until 2001-01-02
  assert_success
  assert_line --index 1 "no buffers in the range"
  run bb-stat history --user nobody-at-all --since now-1hour
  assert_line --index 1 "no buffers in the range"
  run bb-stat history --user "$U" --since "@$(($(date +%s) - 3600))" --json
  run jq -r '.rows[0].name' <<<"$output"
  assert_output "$U"
}

@test "history counts a failed stage and the buffer that failed" {
  U=$(test_user)
  mkdir -p "$TEST_DIR/nvme"
  bb-pool init nvme >/dev/null
  failed_stage_in 5
  run bb-stat history --json
  run jq -c '[.rows[0].failed_buffers, .rows[0].stage_in.runs, .rows[0].stage_in.failed]' <<<"$output"
  assert_output '[1,1,1]'
}

@test "history refuses bad times, ranges, groupings and options of other views, exit 64" {
  for bad in "--since yesterday" "--since now-7fortnights" "--until 2026-02-30" \
    "--since now --until now-1day" "--by job" "--plot" "pools --since today" \
    "buffers --by user" "history --prometheus -" "history --for-uid 0" "history --dws" \
    "--dwstat --since today" "history --plot - --json"; do
    case $bad in --*) eval "run bb-stat history $bad" ;; *) eval "run bb-stat $bad" ;; esac
    [ "$status" -eq 64 ] || fail "bb-stat $bad: $status $output"
    [ "${#lines[@]}" -eq 1 ] || fail "bb-stat $bad: more than one line: $output"
  done
  run bb-stat history --since yesterday
  assert_output "bb-stat: 'yesterday' is not a time: write YYYY-MM-DD[THH:MM[:SS]], now[-COUNT[seconds|minutes|hours|days|weeks]], today or @SECONDS"
  run bb-stat history --since now --until now-1day
  assert_output --regexp '^bb-stat: the range ends \(--until [0-9T:-]+\) before it starts \(--since [0-9T:-]+\)$'
}

@test "history is root's and the state owner's: anyone else gets 77 and no rows" {
  U=$(test_user)
  open_state_dir
  run runuser -u "$U" -- bb-stat history
  assert_failure 77
  assert_output "bb-stat: the history is read from state.db: run this as root or as the state directory's owner (root)"
}

@test "history --plot draws a pool's use as SVG, replaces only its own picture, and - prints it" {
  U=$(test_user)
  history_job 43
  run bb-stat history --plot - --pool nvme --since now-1hour
  assert_success
  assert_line --index 0 --regexp '^<!-- bbkit pool use: nvme from '
  assert_output --partial '<svg xmlns="http://www.w3.org/2000/svg"'
  assert_output --partial 'capacity 100GiB'
  refute_output --partial 'USER'
  # Two pools configured: which one must be said.
  run bb-stat history --plot "$TEST_DIR/use.svg"
  assert_failure 64
  assert_output "bb-stat: --plot draws one pool: name it with --pool"
  run bb-stat history --plot "$TEST_DIR/use.svg" --pool nope
  assert_failure 66
  bb-stat history --plot "$TEST_DIR/use.svg" --pool nvme >/dev/null
  grep -q '</svg>' "$TEST_DIR/use.svg"
  bb-stat history --plot "$TEST_DIR/use.svg" --pool nvme >/dev/null  # its own: replaced
  # Anything else there is left as it is.
  echo "precious" >"$TEST_DIR/other.txt"
  ln -s "$TEST_DIR/other.txt" "$TEST_DIR/link.svg"
  for target in other.txt link.svg; do
    run bb-stat history --plot "$TEST_DIR/$target" --pool nvme
    assert_failure 73
  done
  [ "$(cat "$TEST_DIR/other.txt")" = precious ]
  [ -L "$TEST_DIR/link.svg" ]
}
