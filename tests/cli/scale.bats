#!/usr/bin/env bats
# Scale: bb-mover streams a tree in batches, so the memory it needs does not grow with the number
# of files. 200,000 small files are staged in and out under a virtual-memory limit (`ulimit -v`,
# which bb-stage and the mover it starts inherit) that a mover holding the whole tree cannot
# live with.

load common

# 600,000 files are written and removed: in memory (tmpfs) when there is one, where it takes
# seconds rather than minutes on a virtual disk. The file system does not change what the
# mover holds in memory.
setup() {
  [ -d /dev/shm ] && [ -w /dev/shm ] && BATS_TMPDIR=/dev/shm
  staging_setup
}
teardown() { common_teardown; }

# The limit, in KiB (210 MiB). Measured with this tree (RelWithDebInfo, 8 mover threads,
# glibc 2.36), bb-mover's VmPeak and VmHWM without a limit, and under which `ulimit -v` it
# finishes:
#   streaming mover: VmPeak 150,568 KiB, VmHWM ~52,000 KiB, stage-in and stage-out alike;
#     finishes under 156,000 KiB, not under 148,000 (a thread stack cannot be mapped). Its need
#     is fixed, whatever the tree: 9 thread stacks of 8 MiB and a second malloc arena that glibc
#     reserves as 64 MiB after probing for 128 MiB. The limit is 1.38x the 156,000 it needs.
#   whole-tree mover (before the streaming walk): VmPeak 900,396 KiB, VmHWM 221,232 KiB (the
#     tree alone is more than the limit); under this limit it fails with std::bad_alloc within
#     seconds, stage-in and stage-out; it fails even under 300,000 KiB.
# bb-stage runs under the same limit: it peaks at 156,096 KiB unlimited (arenas for its reader
# threads), at 90,832 under a limit.
# The names are long (65 and 246 characters) because the whole-tree mover's cost per file grows
# with the path while the streaming mover's batches are bounded: with 5-character names the
# whole-tree mover needed only ~195,000 KiB for 200,000 files, too close to the streaming one's
# fixed 156,000 for a limit to part them with a margin.
limit_kib=215040
files_per_dir=1000
dirs=200

# Writes the tree as the user: $dirs directories of $files_per_dir files, each holding "D/F\n".
make_wide_tree() {
  runuser -u "$U" -- /usr/bin/python3 - "$1" "$dirs" "$files_per_dir" <<'EOF'
import os, sys
root, dirs, files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for d in range(dirs):
    path = os.path.join(root, "d%03d-" % d + "D" * 60)
    os.makedirs(path)
    for f in range(files):
        with open(os.path.join(path, "f%04d-" % f + "F" * 240), "w") as out:
            out.write("%d/%d\n" % (d, f))
EOF
}

# Runs `bb-stage ARGS...` under the limit, after checking the limit is in force.
stage_limited() {
  bash -c 'ulimit -v "$1" && [ "$(ulimit -v)" = "$1" ] || exit 99; shift; exec bb-stage "$@"' \
    - "$limit_kib" "$@"
}

# Checks the tree at $1 is complete, a few files' contents, and that no temporary is left.
check_wide_tree() {
  [ "$(find "$1" -type f | wc -l)" = $((dirs * files_per_dir)) ]
  [ "$(find "$1" -mindepth 1 -type d | wc -l)" = "$dirs" ]
  local d f d_f
  for d_f in 0/0 57/999 123/456 199/999; do
    d=${d_f%/*} f=${d_f#*/}
    [ "$(cat "$1/$(printf 'd%03d-' "$d")$(printf 'D%.0s' {1..60})/$(printf 'f%04d-' "$f")$(printf 'F%.0s' {1..240})")" = "$d_f" ]
  done
  [ "$(stat -c %U "$1/$(printf 'd199-')$(printf 'D%.0s' {1..60})")" = "$U" ]
  [ -z "$(find "$1" -name '*.bbkit-*' | head -1)" ]
}

@test "200,000 files stage in and out in bounded memory under ulimit -v" {
  [ "${BBKIT_SANITIZE:-}" != 1 ] || skip "AddressSanitizer reserves terabytes of address space"
  make_wide_tree "$TEST_DIR/pfs/input"
  { echo '#!/bin/bash'
    echo '#BB_LUA capacity=1G'
    echo "#BB_LUA stage_in type=directory source=$TEST_DIR/pfs/input destination=input"
    echo "#BB_LUA stage_out type=directory source=input destination=$TEST_DIR/pfs/results"
    echo 'srun app'; } >"$TEST_DIR/job.sh"
  bb-pool alloc --job 41 --user "$U" --script "$TEST_DIR/job.sh" >/dev/null

  run stage_limited in --job 41
  assert_success
  buf="$(bbdir $TEST_DIR/nvme/job/main.41.1)"
  check_wide_tree "$buf/input"

  bb-stage pre-run --job 41
  bb-stage post-run --job 41
  run stage_limited out --job 41
  assert_success
  check_wide_tree "$TEST_DIR/pfs/results"
  [ -z "$(find "$TEST_DIR/pfs" -maxdepth 1 -name '.*bbkit-*')" ]
  run bb-stat job 41 --json
  assert_output --partial '"state": "staged-out"'
}
