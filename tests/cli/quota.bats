#!/usr/bin/env bats
# Capacity enforced (bbkit(7), CAPACITY): pools on real loop-mounted file systems, ext4 made
# with -O quota,project and mounted prjquota, XFS mounted pquota, and plain ones. A test that
# needs enforced project quotas skips, saying why, where the kernel cannot mount them (one
# built without CONFIG_QFMT_V2 or CONFIG_XFS_QUOTA); the others run on plain mounts. Under
# BBKIT_QUOTA_REQUIRED=1 (tests/quota-kernel, which runs the suite in a kernel that has them)
# such a skip is a failure.

load common

setup() {
  common_setup
  U=$(test_user)
  MOUNTS=()
  mkdir -p "$TEST_DIR/images" "$TEST_DIR/pfs"
  chmod 755 "$TEST_DIR/pfs"
  chown "$U" "$TEST_DIR/pfs"
}

teardown() {
  local m
  for m in "${MOUNTS[@]}"; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
  common_teardown
}

as_user() { runuser -u "$U" -- "$@"; }

# Skips, saying why, where the kernel cannot mount what a test needs; fails where it must.
kernel_lacks() {
  [ "${BBKIT_QUOTA_REQUIRED:-}" = 1 ] && fail "BBKIT_QUOTA_REQUIRED=1: $*"
  skip "$*"
}

# Makes an image of KIND (ext4-quota, xfs, ext4-plain) and mounts it at $TEST_DIR/q with the
# options that enable project quotas (none for ext4-plain, WITHOUT for a plain mount of a quota
# image). Returns 1, with the reason in $why, when the kernel refuses.
mount_pool() {
  local kind=$1 without=${2:-} image="$TEST_DIR/images/$1.img" options=loop
  mkdir -p "$TEST_DIR/q"
  case $kind in
    ext4-quota)
      truncate -s 32M "$image"
      mkfs.ext4 -q -F -O quota,project -I 256 "$image" >/dev/null 2>&1 || { why="mkfs.ext4 -O quota,project failed"; return 1; }
      [ -n "$without" ] || options=loop,prjquota ;;
    xfs)
      command -v mkfs.xfs >/dev/null || { why="mkfs.xfs is not installed (xfsprogs)"; return 1; }
      truncate -s 300M "$image"
      mkfs.xfs -q -f "$image" >/dev/null 2>&1 || { why="mkfs.xfs failed"; return 1; }
      [ -n "$without" ] || options=loop,pquota ;;
    ext4-plain)
      truncate -s 48M "$image"
      mkfs.ext4 -q -F "$image" >/dev/null 2>&1 || { why="mkfs.ext4 failed"; return 1; } ;;
  esac
  if ! out=$(mount -o "$options" "$image" "$TEST_DIR/q" 2>&1); then
    why="cannot mount $kind with -o $options: $(dmesg 2>/dev/null | tail -1 | sed 's/^\[[^]]*\] //')"
    [ "$why" != "cannot mount $kind with -o $options: " ] || why+=${out%%$'\n'*}
    return 1
  fi
  MOUNTS+=("$TEST_DIR/q")
  chmod 755 "$TEST_DIR/q"
}

# A pool with quota = "project" on a file system that enforces it, or the test skips.
quota_pool() {
  local kind=${1:-ext4-quota}
  mount_pool "$kind" || kernel_lacks "no project quotas here: $why"
  quota_config project refuse
  bb-pool init q >/dev/null
}

# bbkit.toml with one pool q at $TEST_DIR/q: quota = $1, quota_missing = $2.
quota_config() {
  cat >"$TEST_DIR/bbkit.toml" <<EOF
state_dir = "$TEST_DIR/state"
default_pool = "q"
allow_root = true
[[pool]]
name = "q"
path = "$TEST_DIR/q"
capacity = "1GiB"
granularity = "1MiB"
quota = "$1"
quota_missing = "$2"
quota_project_base = 3000000
EOF
  export BBKIT_CONFIG="$TEST_DIR/bbkit.toml"
}

record_id() { sqlite3 "$TEST_DIR/state/state.db" "SELECT id FROM buffers WHERE job_id=$1 ORDER BY incarnation DESC LIMIT 1"; }
state_of() { sqlite3 "$TEST_DIR/state/state.db" "SELECT state FROM buffers WHERE job_id=$1 ORDER BY incarnation DESC LIMIT 1"; }

# "LIMIT USED" of project ID on the file system of PATH, in bytes, read with quotactl_fd(2)
# (Q_GETQUOTA on PRJQUOTA): what bbkit set, read by another way than bbkit's.
project_quota() {
  python3 - "$1" "$2" <<'EOF'
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
buf = ctypes.create_string_buffer(72)  # struct if_dqblk
cmd = (0x800007 << 8) | 2              # QCMD(Q_GETQUOTA, PRJQUOTA)
L = ctypes.c_long
if libc.syscall(L(443), L(fd), L(cmd), L(int(sys.argv[2])), buf) != 0:
    err = ctypes.get_errno()
    if err == 2:  # no entry: nothing used, no limit
        print(0, 0); sys.exit(0)
    sys.exit("quotactl_fd: " + os.strerror(err))
bhard, bsoft, curspace = struct.unpack_from("QQQ", buf, 0)
print(bhard * 1024, curspace)
EOF
}

# The project id of PATH (lsattr -p reads FS_IOC_FSGETXATTR).
project_of() { lsattr -d -p "$1" | awk '{print $1}'; }

# --- what runs on any kernel that can loop-mount ---------------------------------------------

@test "quota_missing = refuse: init of a pool on a file system without project quotas fails in one line" {
  mount_pool ext4-plain || kernel_lacks "$why"
  quota_config project refuse
  run bb-pool init q
  assert_failure 69
  [ "${#lines[@]}" -eq 1 ]
  assert_output --regexp "^bb-pool: pool 'q' at $TEST_DIR/q cannot limit its buffers: .*\(or set quota_missing = \"warn\" in bbkit.toml to run without limits\)$"
  assert_not_exist "$TEST_DIR/q/.bbkit-pool"
}

@test "quota_missing = refuse: alloc in such a pool fails in one line and records nothing" {
  mount_pool ext4-plain || kernel_lacks "$why"
  quota_config none refuse
  bb-pool init q >/dev/null
  quota_config project refuse
  run bb-pool alloc --job 5 --user "$U" --capacity 1MiB
  assert_failure 69
  [ "${#lines[@]}" -eq 1 ]
  assert_output --partial "bb-pool: pool 'q' at $TEST_DIR/q cannot limit its buffers"
  [ -z "$(record_id 5)" ]
  [ -z "$(ls -A "$TEST_DIR/q/job")" ]
}

@test "quota_missing = warn: the pool runs unlimited, and check reports 20 MB written into 1 MiB" {
  mount_pool ext4-plain 2>/dev/null || mount_pool xfs || kernel_lacks "$why"
  quota_config project warn
  run bb-pool init q
  assert_success
  assert_output --partial "buffers get no project quota"
  run bb-pool alloc --job 6 --user "$U" --capacity 1MiB
  d=$(bbdir "$TEST_DIR/q/job/main.6.1")
  assert_success
  assert_output --partial "quota_missing = \"warn\": capacity is not enforced"
  as_user dd if=/dev/zero of="$d/big" bs=1M count=20 status=none
  run bb-pool check
  assert_failure 1
  assert_output --partial "over-capacity"
  assert_output --partial "main.6.1"
  assert_output --partial "holds more than its 1MiB"
  run bb-pool check --json
  assert_output --partial '"kind": "over-capacity"'
  # Check reports, never deletes the job's data.
  run bb-pool check --repair
  assert_failure 1
  [ -f "$d/big" ]
}

@test "a buffer within its capacity is no finding; one over it is found whatever its depth" {
  quota_config none refuse
  mkdir -p "$TEST_DIR/q"
  bb-pool init q >/dev/null
  bb-pool alloc --job 7 --user "$U" --capacity 2MiB >/dev/null
  bb-pool alloc --job 8 --user "$U" --capacity 1MiB >/dev/null
  d7=$(bbdir "$TEST_DIR/q/job/main.7.1") d8=$(bbdir "$TEST_DIR/q/job/main.8.1")
  as_user dd if=/dev/urandom of="$d7/ok" bs=1M count=1 status=none
  as_user mkdir -p "$d8/a/b/c"
  as_user dd if=/dev/urandom of="$d8/a/b/c/deep" bs=1M count=2 status=none
  run bb-pool check
  assert_failure 1
  assert_output --partial "main.8.1"
  refute_output --partial "main.7.1"
}

@test "without project quotas bb-stat job shows no usage and Prometheus only allocated bytes" {
  quota_config none refuse
  mkdir -p "$TEST_DIR/q"
  bb-pool init q >/dev/null
  bb-pool alloc --job 9 --user "$U" --capacity 1MiB >/dev/null
  run bb-stat job 9
  assert_success
  refute_output --partial "used:"
  run bb-stat job 9 --json
  assert_output --partial '"used_bytes": null'
  bb-stat --prometheus "$TEST_DIR/m.prom"
  grep -qx 'bbkit_buffer_bytes{pool="q",buffer="main.9.1",kind="allocated"} 1048576' "$TEST_DIR/m.prom"
  ! grep -q '^bbkit_buffer_bytes.*kind="used"' "$TEST_DIR/m.prom"
}

@test "the job user can change its own files' project id on this kernel (bbkit(7), SECURITY)" {
  # XFS keeps project ids without quotas enabled: the kernel's rule is the same with them.
  mount_pool xfs without || kernel_lacks "$why"
  quota_config none refuse
  bb-pool init q >/dev/null
  bb-pool alloc --job 10 --user "$U" --capacity 1MiB >/dev/null
  d=$(bbdir "$TEST_DIR/q/job/main.10.1")
  as_user sh -c "echo data >'$d/f'"
  chattr -p 4242 "$d/f"
  [ "$(project_of "$d/f")" = 4242 ]
  run runuser -u "$U" -- chattr -p 0 "$d/f"
  assert_success
  [ "$(project_of "$d/f")" = 0 ]
}

# --- what needs a kernel that enforces project quotas -----------------------------------------

# The smoke scenario: what the submission tier runs of this suite (tests/CMakeLists.txt).
# bats test_tags=smoke
@test "ext4: a job user writing past its capacity gets EDQUOT" {
  quota_pool ext4-quota
  bb-pool alloc --job 11 --user "$U" --capacity 1MiB >/dev/null
  d=$(bbdir "$TEST_DIR/q/job/main.11.1")
  id=$(( 3000000 + $(record_id 11) ))
  [ "$(project_of "$d")" = "$id" ]
  lsattr -d "$d" | grep -q P  # FS_XFLAG_PROJINHERIT
  [ "$(project_quota "$TEST_DIR/q" "$id" | cut -d' ' -f1)" = 1048576 ]
  run runuser -u "$U" -- dd if=/dev/zero of="$d/big" bs=1M count=20 status=none
  assert_failure
  assert_output --partial "Disk quota exceeded"
  [ "$(stat -c %s "$d/big")" -le 1048576 ]
}

@test "xfs: a job user writing past its capacity gets ENOSPC, the pool keeps its space" {
  quota_pool xfs
  bb-pool alloc --job 12 --user "$U" --capacity 1MiB >/dev/null
  d=$(bbdir "$TEST_DIR/q/job/main.12.1")
  id=$(( 3000000 + $(record_id 12) ))
  [ "$(project_quota "$TEST_DIR/q" "$id" | cut -d' ' -f1)" = 1048576 ]
  run runuser -u "$U" -- dd if=/dev/zero of="$d/big" bs=1M count=20 status=none
  assert_failure
  # XFS reports a project's limit as ENOSPC, not EDQUOT (bbkit(7), CAPACITY) ...
  assert_output --partial "No space left on device"
  [ "$(stat -c %s "$d/big")" -le 1048576 ]
  # ... while the file system itself has room: the limit stopped the job.
  [ "$(df -B1 --output=avail "$TEST_DIR/q" | tail -n 1)" -gt 100000000 ]
}

@test "a stage-in that does not fit its quota fails in one line, the buffer kept staging-in" {
  quota_pool ext4-quota
  # Exactly the capacity: the measurement lets it through, the directories' own blocks do not.
  as_user mkdir -p "$TEST_DIR/pfs/in/sub"
  as_user dd if=/dev/urandom of="$TEST_DIR/pfs/in/sub/data" bs=1M count=1 status=none
  bb-pool alloc --job 13 --user "$U" --bb "#BB_LUA capacity=1MiB pool=q #BB_LUA stage_in type=directory source=$TEST_DIR/pfs/in destination=in" >/dev/null
  run bb-stage in --job 13
  assert_failure 74
  [ "${#lines[@]}" -eq 1 ]
  assert_output --regexp "^bb-stage: .*[Dd]isk quota exceeded"
  # The buffer is full, not the pool: the way on says so.
  assert_output --partial "the files need more than the buffer's capacity of 1MiB"
  refute_output --partial "free space in pool"
  [ "$(state_of 13)" = staging-in ]
  run bb-stat job 13 --json
  assert_output --partial "quota exceeded"
  bb-teardown --job 13 >/dev/null
}

@test "xfs: a stage-in past its capacity says the buffer's capacity, not the pool" {
  quota_pool xfs
  # 400 files of 100 bytes fit the measurement (apparent sizes); their blocks, 4 KiB each, take
  # them past the limit, which XFS answers with ENOSPC, as a full file system: the pool has
  # room, the buffer none.
  as_user mkdir -p "$TEST_DIR/pfs/in"
  as_user sh -c 'for i in $(seq 400); do head -c 100 /dev/zero >"$1/f$i"; done' sh "$TEST_DIR/pfs/in"
  bb-pool alloc --job 15 --user "$U" --bb "#BB_LUA capacity=1MiB pool=q #BB_LUA stage_in type=directory source=$TEST_DIR/pfs/in destination=in" >/dev/null
  run bb-stage in --job 15
  assert_failure 74
  [ "${#lines[@]}" -eq 1 ]
  assert_output --regexp "^bb-stage: .*[Nn]o space left on device"
  assert_output --partial "the files need more than the buffer's capacity of 1MiB"
  refute_output --partial "free space in pool"
  [ "$(state_of 15)" = staging-in ]
  bb-teardown --job 15 >/dev/null
}

@test "usage shows in bb-stat job and the Prometheus file" {
  quota_pool ext4-quota
  bb-pool alloc --job 14 --user "$U" --capacity 4MiB >/dev/null
  d=$(bbdir "$TEST_DIR/q/job/main.14.1")
  as_user dd if=/dev/urandom of="$d/f" bs=1M count=2 status=none
  sync
  run bb-stat job 14
  assert_output --regexp "used: +2[0-9]{6} bytes \(project quota\)"
  used=$(bb-stat job 14 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["used_bytes"])')
  [ "$used" -ge 2097152 ] && [ "$used" -lt 2200000 ]
  bb-stat --prometheus "$TEST_DIR/m.prom"
  grep -q "^bbkit_buffer_bytes{pool=\"q\",buffer=\"main.14.1\",kind=\"used\"} $used$" "$TEST_DIR/m.prom"
}

@test "teardown removes the limit once the directory is reaped" {
  quota_pool ext4-quota
  bb-pool alloc --job 15 --user "$U" --capacity 1MiB >/dev/null
  d=$(bbdir "$TEST_DIR/q/job/main.15.1")
  id=$(( 3000000 + $(record_id 15) ))
  as_user sh -c "echo data >'$d/f'"
  bb-teardown --job 15 >/dev/null
  assert_not_exist "$d"
  [ "$(project_quota "$TEST_DIR/q" "$id")" = "0 0" ]
  run bb-pool check
  assert_success
}

@test "recover rolls an allocation killed after its limit forward, limit in place" {
  quota_pool ext4-quota
  run env BBKIT_FAULT=dir.quota bb-pool alloc --job 16 --user "$U" --capacity 1MiB
  d=$(bbdir "$TEST_DIR/q/job/main.16.1")
  assert_failure
  [ "$(state_of 16)" = allocating ]
  id=$(( 3000000 + $(record_id 16) ))
  [ "$(stat -c %u "$d")" = 0 ]  # not handed over yet
  run bb-pool recover
  assert_success
  assert_output --partial "main.16.1: allocating -> allocated (rolled forward)"
  [ "$(stat -c %U "$d")" = "$U" ]
  [ "$(project_of "$d")" = "$id" ]
  [ "$(project_quota "$TEST_DIR/q" "$id" | cut -d' ' -f1)" = 1048576 ]
  run bb-pool check
  assert_success
}

@test "a limit left by a teardown killed after its commit: check reports it, recover removes it" {
  quota_pool ext4-quota
  bb-pool alloc --job 17 --user "$U" --capacity 1MiB >/dev/null
  id=$(( 3000000 + $(record_id 17) ))
  run env BBKIT_FAULT=teardown.ended bb-teardown --job 17
  assert_failure
  [ "$(state_of 17)" = complete ]
  [ "$(project_quota "$TEST_DIR/q" "$id" | cut -d' ' -f1)" = 1048576 ]
  run bb-pool check
  assert_failure 1
  assert_output --partial "stale-quota"
  run bb-pool recover
  assert_output --partial "project $id's limit removed"
  [ "$(project_quota "$TEST_DIR/q" "$id" | cut -d' ' -f1)" = 0 ]
  run bb-pool check
  assert_success
}

@test "a hostile job user escapes its limit by changing its files' project id; check finds it" {
  quota_pool ext4-quota
  bb-pool alloc --job 18 --user "$U" --capacity 1MiB >/dev/null
  d=$(bbdir "$TEST_DIR/q/job/main.18.1")
  as_user sh -c "touch '$d/f'"
  run runuser -u "$U" -- chattr -p 0 "$d/f"
  assert_success  # the kernel lets the owner (bbkit(7), SECURITY)
  as_user dd if=/dev/zero of="$d/f" bs=1M count=4 status=none
  run bb-pool check
  assert_failure 1
  assert_output --partial "over-capacity"
  assert_output --partial "moved out of its project"
  run runuser -u "$U" -- chattr -p 0 "$d"
  run bb-pool check
  assert_output --partial "unlimited-buffer"
}

@test "a project id that already holds files is refused: 73, the directory removed" {
  quota_pool ext4-quota
  bb-pool alloc --job 19 --user "$U" --capacity 1MiB >/dev/null
  next=$(( 3000000 + $(record_id 19) + 1 ))
  mkdir "$TEST_DIR/q/other" && touch "$TEST_DIR/q/other/f"
  chattr -p "$next" "$TEST_DIR/q/other/f"
  run bb-pool alloc --job 20 --user "$U" --capacity 1MiB
  assert_failure 73
  [ "${#lines[@]}" -eq 1 ]
  assert_output --partial "project $next: the project already holds 1 files"
  [ -z "$(ls -d "$TEST_DIR"/q/job/main.20.1* 2>/dev/null)" ]
}
