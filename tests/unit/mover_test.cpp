#include "bbkit/mover.hpp"
#include "bbkit/process.hpp"
#include "bbkit/seal.hpp"
#include "bbkit/shard.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/mover/chunk_marks.hpp"
#include "move_test_support.hpp"

namespace bbkit {
namespace {

using namespace move_test;

// Everything cp -a keeps and a user may own. Owned by nobody, times set last.
void make_tricky_tree(const std::string& root) {
    ASSERT_EQ(mkdir(root.c_str(), 0755), 0);
    auto at = [&](const std::string& name) { return root + "/" + name; };
    write_file(at("plain"), "plain content\n");
    write_file(at("-leading-dash"), "dash");
    write_file(at("with space"), "space");
    write_file(at("new\nline"), "newline");
    write_file(at("tab\there"), "tab");
    write_file(at(std::string("bad\xff"
                              "utf8")),
               "invalid utf-8");
    write_file(at(std::string(255, 'n')), "long name");
    write_file(at("empty-file"), "");
    write_file(at("m0700"), "x", 0700);
    write_file(at("m0444"), "read only", 0444);
    write_file(at("suid"), "#!/bin/sh\n", 04755);
    write_file(at("sgid"), "#!/bin/sh\n", 02755);
    write_file(at("old"), "before 1970");
    write_file(at("future"), "after 2038");
    mkdir(at("sticky").c_str(), 0777);
    chmod(at("sticky").c_str(), 01777);
    mkdir(at("ro").c_str(), 0755);
    write_file(at("ro/inside"), "in a 0500 dir", 0600);
    mkdir(at("empty").c_str(), 0755);
    mkdir(at("sub").c_str(), 0750);
    mkdir(at("sub/emptier").c_str(), 0700);
    symlink("plain", at("rel").c_str());
    symlink("/etc/passwd", at("abs").c_str());
    symlink("nowhere/none", at("dangling").c_str());
    symlink("sub", at("dirlink").c_str());
    symlink("../plain", at("sub/up").c_str());
    // Sparse: data at the start, the middle and the end of 10 MiB; and a file of holes only.
    write_at(at("sparse"), 0, "head");
    write_at(at("sparse"), 5 << 20, std::string(8192, 'm'));
    write_at(at("sparse"), (10 << 20) - 4, "tail");
    write_file(at("allhole"), "");
    truncate(at("allhole").c_str(), 8 << 20);
    write_file(at("hl1"), "hard linked");
    link(at("hl1").c_str(), at("sub/hl2").c_str());
    mkfifo(at("fifo").c_str(), 0640);
    setxattr(at("plain").c_str(), "user.origin", "tricky", 6, 0);
    setxattr(at("sub").c_str(), "user.dir", "attr", 4, 0);
    write_file(at("acl"), "acl");
    mkdir(at("acldir").c_str(), 0750);
    const std::string acl = "setfacl -m u:1:r " + at("acl") + " && setfacl -d -m u:1:rx " +
                            at("acldir") + " && setfacl -m u:1:rx " + at("acldir");
    ASSERT_EQ(std::system(acl.c_str()), 0);
    std::string deep = at("deep");
    for (int level = 0; level < 40; ++level) {
        mkdir(deep.c_str(), 0755);
        deep += "/d" + std::to_string(level);
    }
    write_file(deep, "forty levels down");

    int counter = 0;
    for_each_entry(root, [&](const std::string& path) {
        lchown(path.c_str(), nobody, nogroup);
        ++counter;
        set_times(path, 1600000000 + counter, 123456789 - counter);
    });
    chmod(at("suid").c_str(), 04755);  // chown cleared them
    chmod(at("sgid").c_str(), 02755);
    set_times(at("old"), -1000000000, 5);
    set_times(at("future"), 4102444800 + 12345, 999999999);
    chmod(at("ro").c_str(), 0500);
    set_times(at("ro"), 1500000000, 1);
    lchown(root.c_str(), nobody, nogroup);
    set_times(root, 1400000000, 42);
}

TEST(mover, round_trip_as_the_user_keeps_everything_cp_a_keeps) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_tricky_tree(tmp / "src");
    mknod((tmp / "src/null").c_str(), S_IFCHR | 0666, makedev(1, 3));
    set_times(tmp / "src", 1400000000, 42);  // as make_tricky_tree left it
    const std::string buffer = make_buffer(tmp, "buffer");

    const Outcome in = move_as_nobody(plan_in(buffer, tmp / "src", "data"));
    ASSERT_EQ(in.code, 0) << in.message;
    ASSERT_EQ(in.warnings.size(), 1u);
    EXPECT_NE(in.warnings[0].find("skipped device node"), std::string::npos) << in.warnings[0];
    unlink((tmp / "src/null").c_str());
    set_times(tmp / "src", 1400000000, 42);  // as make_tricky_tree left it
    expect_same_tree(tmp / "src", buffer + "/data", nobody);

    mkdir((tmp / "out").c_str(), 0755);
    chown((tmp / "out").c_str(), nobody, nogroup);
    const Outcome out = move_as_nobody(plan_out(buffer, "data", tmp / "out/result"));
    ASSERT_EQ(out.code, 0) << out.message;
    expect_same_tree(tmp / "src", tmp / "out/result", nobody);
    EXPECT_FALSE(has_temporaries(tmp / "out"));
}

TEST(mover, one_thread_and_eight_threads_give_identical_trees) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_tricky_tree(tmp / "src");
    const std::string one = make_buffer(tmp, "one"), eight = make_buffer(tmp, "eight");
    MovePlan plan = plan_in(one, tmp / "src", "");
    plan.threads = 1;
    ASSERT_EQ(move_as_nobody(plan).code, 0);
    plan = plan_in(eight, tmp / "src", "");
    plan.threads = 8;
    ASSERT_EQ(move_as_nobody(plan).code, 0);
    // The buffer root keeps its own mode (bbkit owns it): compare what is inside.
    for (const std::string& name : list_dir(tmp / "src"))
        expect_same_tree(one + "/" + name, eight + "/" + name, nobody);
    EXPECT_EQ(list_dir(one), list_dir(tmp / "src"));
}

TEST(mover, files_and_renames_of_single_entries) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_tricky_tree(tmp / "src");
    const std::string buffer = make_buffer(tmp, "buffer");
    MovePlan plan = plan_in(buffer, tmp / "src/plain", "renamed", StageType::file);
    plan.entries.push_back({tmp / "src/rel", "links/", StageType::file});
    plan.entries.push_back({tmp / "src/sparse", "a/b/c/sparse", StageType::file});
    ASSERT_EQ(move_as_nobody(plan).code, 0);
    expect_same_tree(tmp / "src/plain", buffer + "/renamed");
    expect_same_tree(tmp / "src/rel", buffer + "/links/rel");
    expect_same_tree(tmp / "src/sparse", buffer + "/a/b/c/sparse");
}

TEST(mover, symlink_planted_in_buffer_never_redirects_a_stage_in) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_tricky_tree(tmp / "src");
    mkdir((tmp / "decoy").c_str(), 0777);
    const std::string buffer = make_buffer(tmp, "buffer");
    symlink("/etc", (buffer + "/etc").c_str());
    symlink((tmp / "decoy").c_str(), (buffer + "/decoy").c_str());
    // As root, so permissions cannot be what stops it.
    for (const MoveEntry& entry :
         std::vector<MoveEntry>{{tmp / "src/plain", "etc/bbkit-mover-test", StageType::file},
                                {tmp / "src/plain", "decoy/file", StageType::file},
                                {tmp / "src/plain", "decoy/deeper/file", StageType::file},
                                {tmp / "src", "decoy", StageType::directory},
                                {tmp / "src", "decoy/tree", StageType::directory}}) {
        MovePlan plan = plan_in(buffer, entry.source, entry.destination, entry.type);
        try {
            run_move(plan, nullptr);
            ADD_FAILURE() << "not refused: " << entry.destination;
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ExitCode::no_perm) << e.what();
            EXPECT_NE(std::string(e.what()).find(buffer + "/"), std::string::npos) << e.what();
        }
    }
    EXPECT_TRUE(list_dir(tmp / "decoy").empty());
    EXPECT_NE(access("/etc/bbkit-mover-test", F_OK), 0);
    struct stat st {};
    ASSERT_EQ(lstat((buffer + "/decoy").c_str(), &st), 0);
    EXPECT_TRUE(S_ISLNK(st.st_mode));
}

TEST(mover, symlink_planted_in_buffer_never_redirects_a_stage_out) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    mkdir((tmp / "decoy").c_str(), 0755);
    write_file(tmp / "decoy/secret", "not yours", 0600);
    const std::string buffer = make_buffer(tmp, "buffer");
    symlink((tmp / "decoy").c_str(), (buffer + "/results").c_str());
    mkdir((tmp / "out").c_str(), 0777);
    for (const MoveEntry& entry :
         std::vector<MoveEntry>{{"results/secret", tmp / "out/secret", StageType::file},
                                {"results", tmp / "out/tree", StageType::directory}}) {
        MovePlan plan = plan_out(buffer, entry.source, entry.destination, entry.type);
        try {
            run_move(plan, nullptr);
            ADD_FAILURE() << "not refused: " << entry.source;
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ExitCode::no_perm) << e.what();
        }
    }
    EXPECT_TRUE(list_dir(tmp / "out").empty());
    // A symlink as a single file is copied as what it is, never followed.
    ASSERT_EQ(
        run_move(plan_out(buffer, "results", tmp / "out/link", StageType::file), nullptr).files,
        1u);
    char target[4096] = {};
    EXPECT_GT(readlink((tmp / "out/link").c_str(), target, sizeof target), 0);
    EXPECT_EQ(std::string(target), tmp / "decoy");
}

TEST(mover, rerun_skips_complete_files_and_rewrites_changed_ones) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_tricky_tree(tmp / "src");
    const std::string buffer = make_buffer(tmp, "buffer");
    const Outcome first = move_as_nobody(plan_in(buffer, tmp / "src", "data"));
    ASSERT_EQ(first.code, 0) << first.message;
    EXPECT_GT(first.files, 20u);

    const Outcome again = move_as_nobody(plan_in(buffer, tmp / "src", "data"));
    ASSERT_EQ(again.code, 0) << again.message;
    EXPECT_EQ(again.files, 0u);
    EXPECT_EQ(again.bytes, 0u);
    EXPECT_EQ(again.skipped, first.files);

    // Same size, other mtime: rewritten; a partial copy from a crash is never taken as done.
    write_file(tmp / "src/plain", "PLAIN CONTENT\n");
    lchown((tmp / "src/plain").c_str(), nobody, nogroup);
    write_file(buffer + "/data/with space", "sp");  // truncated by a "crash"
    const Outcome third = move_as_nobody(plan_in(buffer, tmp / "src", "data"));
    ASSERT_EQ(third.code, 0) << third.message;
    EXPECT_EQ(third.files, 2u);
    expect_same_tree(tmp / "src", buffer + "/data", nobody);
}

TEST(mover, failed_stage_out_leaves_no_temporary_and_no_partial_file) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    mkdir((buffer + "/data").c_str(), 0755);
    mkdir((buffer + "/data/locked").c_str(), 0755);
    for (int i = 0; i < 50; ++i)
        write_file(buffer + "/data/f" + std::to_string(i), std::string(10000, 'x'));
    write_file(buffer + "/data/locked/g", "g");
    for_each_entry(buffer, [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    // The destination's "locked" directory belongs to root: the user cannot write into it.
    mkdir((tmp / "out").c_str(), 0755);
    chown((tmp / "out").c_str(), nobody, nogroup);
    mkdir((tmp / "out/locked").c_str(), 0755);

    const Outcome out = move_as_nobody(plan_out(buffer, "data", tmp / "out"));
    EXPECT_EQ(out.code, 77) << out.message;
    EXPECT_NE(out.message.find(tmp / "out/locked"), std::string::npos) << out.message;
    EXPECT_EQ(list_dir(tmp / "out"), std::vector<std::string>{"locked"});
    EXPECT_TRUE(list_dir(tmp / "out/locked").empty());

    // An unwritable destination directory from the start: named in the message.
    chown((tmp / "out").c_str(), 0, 0);
    const Outcome denied =
        move_as_nobody(plan_out(buffer, "data/f1", tmp / "out/f1", StageType::file));
    EXPECT_EQ(denied.code, 77) << denied.message;
    EXPECT_NE(denied.message.find("directory " + tmp / "out"), std::string::npos) << denied.message;
    EXPECT_EQ(list_dir(tmp / "out"), std::vector<std::string>{"locked"});
}

// Found by tests/fault/run: a stage-out mover killed before its renames left its
// temporaries in the user's destination, and the successful rerun kept them.
TEST(mover, stage_out_rerun_removes_temporaries_a_killed_run_left) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    mkdir((buffer + "/data").c_str(), 0755);
    write_file(buffer + "/data/result", "complete result");
    write_file(buffer + "/data/" + std::string(250, 'n'), "long name");
    for_each_entry(buffer, [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    mkdir((tmp / "out").c_str(), 0755);
    // What a killed run leaves: temporaries of the names being written, partial content.
    write_file(tmp / "out/.result.bbkit-0123456789abcdef0001", "comp");
    const std::string hashed = std::to_string(std::hash<std::string>{}(std::string(250, 'n')));
    write_file(tmp / "out/.bbkit-" + hashed + "-fedcba98765432100002", "lo");
    // Names that only look alike are the user's and stay.
    write_file(tmp / "out/.other.bbkit-0123456789abcdef0001", "other");
    write_file(tmp / "out/.result.bbkit-notours", "mine");
    chown((tmp / "out").c_str(), nobody, nogroup);
    for_each_entry(tmp / "out", [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });

    const Outcome out = move_as_nobody(plan_out(buffer, "data", tmp / "out"));
    ASSERT_EQ(out.code, 0) << out.message;
    EXPECT_EQ(read_file(tmp / "out/result"), "complete result");
    EXPECT_EQ(list_dir(tmp / "out"),
              (std::vector<std::string>{".other.bbkit-0123456789abcdef0001",
                                        ".result.bbkit-notours", std::string(250, 'n'), "result"}));
}

// Every failure of a move is typed by where it happened (error.hpp, FailureKind): what bb-stage
// decides on. Each way a move here fails, on either side and in either direction.
TEST(mover, each_failure_is_typed_by_the_side_it_happened_on) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    write_file(tmp / "file", "a file");
    mkdir((tmp / "dir").c_str(), 0755);
    write_file(tmp / "dir/f", std::string(8192, 'x'));
    const std::string buffer = make_buffer(tmp, "buffer");
    mkdir((buffer + "/data").c_str(), 0755);
    write_file(buffer + "/data/r", "result");
    symlink("/etc", (buffer + "/planted").c_str());
    MovePlan small = plan_in(buffer, tmp / "dir", "small");
    small.capacity = 4096;
    struct Case {
        const char* name;
        MovePlan plan;
        FailureKind kind;
        int err;  // 0: a refusal, no call failed
    };
    const std::vector<Case> cases = {
        {"missing source", plan_in(buffer, tmp / "absent", "a", StageType::file),
         FailureKind::source, ENOENT},
        {"a directory as type=file", plan_in(buffer, tmp / "dir", "d", StageType::file),
         FailureKind::source, 0},
        {"a file as type=directory", plan_in(buffer, tmp / "file", "d"), FailureKind::source, 0},
        {"a symlink planted in the buffer's way",
         plan_in(buffer, tmp / "file", "planted/x", StageType::file), FailureKind::destination, 0},
        {"over the capacity", small, FailureKind::capacity, 0},
        {"a missing buffer source", plan_out(buffer, "absent", tmp / "out/a", StageType::file),
         FailureKind::source, ENOENT},
        {"a symlink as the buffer's tree", plan_out(buffer, "planted", tmp / "out/t"),
         FailureKind::source, 0},
        {"a file where a destination directory goes", plan_out(buffer, "data", tmp / "file/d"),
         FailureKind::destination, 0},
    };
    for (const Case& c : cases) {
        try {
            run_move(c.plan, nullptr);
            ADD_FAILURE() << c.name << ": did not fail";
        } catch (const Error& e) {
            ASSERT_TRUE(e.failure()) << c.name << ": " << e.what();
            EXPECT_EQ(e.failure()->kind, c.kind) << c.name << ": " << e.what();
            if (c.err != 0) {
                EXPECT_EQ(e.failure()->err, c.err) << c.name << ": " << e.what();
            }
        }
    }
}

// No space: the pool's when the move writes into a buffer, the destination's when it writes
// out of one.
TEST(mover, no_space_is_the_pools_on_a_stage_in_and_the_destinations_on_a_stage_out) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    mkdir((tmp / "src").c_str(), 0755);
    write_file(tmp / "src/big", std::string(std::size_t{6} << 20, 'x'));
    const Mount small(tmp / "small", "mount -t tmpfs -o size=4m tmpfs " + tmp / "small");
    if (!small.ok())
        GTEST_SKIP() << "cannot mount tmpfs here";
    const std::string full = make_buffer(tmp, "small/buffer");
    try {
        run_move(plan_in(full, tmp / "src", "data"), nullptr);
        ADD_FAILURE() << "a stage-in into a full pool did not fail";
    } catch (const Error& e) {
        ASSERT_TRUE(e.failure()) << e.what();
        EXPECT_EQ(e.failure()->kind, FailureKind::pool_full) << e.what();
        EXPECT_EQ(e.failure()->err, ENOSPC) << e.what();
    }
    const std::string buffer = make_buffer(tmp, "buffer");
    run_move(plan_in(buffer, tmp / "src", "data"), nullptr);
    try {
        run_move(plan_out(buffer, "data", tmp / "small/out"), nullptr);
        ADD_FAILURE() << "a stage-out into a full file system did not fail";
    } catch (const Error& e) {
        ASSERT_TRUE(e.failure()) << e.what();
        EXPECT_EQ(e.failure()->kind, FailureKind::destination) << e.what();
        EXPECT_EQ(e.failure()->err, ENOSPC) << e.what();
    }
}

TEST(mover, sources_the_user_cannot_read_or_that_are_missing) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    write_file(tmp / "secret", "root only", 0600);
    const std::string buffer = make_buffer(tmp, "buffer");
    const Outcome denied = move_as_nobody(plan_in(buffer, tmp / "secret", "s", StageType::file));
    EXPECT_EQ(denied.code, 77) << denied.message;
    EXPECT_NE(denied.message.find(tmp / "secret"), std::string::npos) << denied.message;
    const Outcome missing = move_as_nobody(plan_in(buffer, tmp / "absent", "a", StageType::file));
    EXPECT_EQ(missing.code, 66) << missing.message;
    EXPECT_NE(missing.message.find(tmp / "absent"), std::string::npos) << missing.message;
    const Outcome climbing =
        move_as_nobody(plan_in(buffer, tmp / "secret", "../x", StageType::file));
    EXPECT_EQ(climbing.code, 65) << climbing.message;
    EXPECT_TRUE(list_dir(buffer).empty());
}

// A stage-out killed before its renames leaves `.NAME.bbkit-<20 hex>` files (and the short
// form `.bbkit-<tag>-<20 hex>` for names too long for that) beside the names it was writing.
// The rerun removes them; a source entry or another file that only looks like one is kept.
TEST(mover, rerun_removes_temporaries_of_a_killed_stage_out) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    mkdir((buffer + "/data").c_str(), 0755);
    mkdir((buffer + "/data/sub").c_str(), 0755);
    const std::string long_name(250, 'L');
    const std::string lookalike = ".a.bbkit-0123456789abcdef0099";  // a source entry
    write_file(buffer + "/data/a", "a");
    write_file(buffer + "/data/sub/b", "b");
    write_file(buffer + "/data/" + long_name, "long");
    write_file(buffer + "/data/" + lookalike, "source entry");
    for_each_entry(buffer, [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });

    // What the killed run left: its output directories and temporaries in them.
    const std::string out = tmp / "out";
    mkdir(out.c_str(), 0755);
    mkdir((out + "/sub").c_str(), 0755);
    const std::string tag = std::to_string(std::hash<std::string>{}(long_name));
    const std::vector<std::string> stale = {out + "/.a.bbkit-0123456789abcdef0001",
                                            out + "/sub/.b.bbkit-fedcba98765432100002",
                                            out + "/.bbkit-" + tag + "-0123456789abcdef0003"};
    for (const std::string& path : stale)
        write_file(path, "partial");
    // Not temporaries of this move: another name, a wrong suffix, a user's own file.
    const std::vector<std::string> others = {out + "/.other.bbkit-0123456789abcdef0004",
                                             out + "/.a.bbkit-0123456789ABCDEF0005",
                                             out + "/.a.bbkit-0123", out + "/a.bbkit-x"};
    for (const std::string& path : others)
        write_file(path, "mine");
    for_each_entry(out, [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    lchown(out.c_str(), nobody, nogroup);

    const Outcome rerun = move_as_nobody(plan_out(buffer, "data", out));
    ASSERT_EQ(rerun.code, 0) << rerun.message;
    for (const std::string& path : stale)
        EXPECT_NE(access(path.c_str(), F_OK), 0) << path << " left behind";
    for (const std::string& path : others)
        EXPECT_EQ(read_file(path), "mine") << path;
    EXPECT_EQ(read_file(out + "/" + lookalike), "source entry");
    EXPECT_EQ(read_file(out + "/sub/b"), "b");
    EXPECT_EQ(read_file(out + "/" + long_name), "long");
}

// The tricky tree staged into a buffer's "data" as nobody, and an empty "out" of nobody's to stage
// out into; returns the buffer.
std::string stage_in_tricky_tree(const TempDir& tmp) {
    make_tricky_tree(tmp / "src");
    const std::string buffer = make_buffer(tmp, "buffer");
    const Outcome in = move_as_nobody(plan_in(buffer, tmp / "src", "data"));
    EXPECT_EQ(in.code, 0) << in.message;
    mkdir((tmp / "out").c_str(), 0755);
    chown((tmp / "out").c_str(), nobody, nogroup);
    return buffer;
}

// A destination directory that does not exist is built under a temporary name beside it, with
// final names inside, and renamed into place whole: the result (mode and ns mtime of the top
// directory included) is the same with one syncfs or with an fsync per file and directory.
TEST(mover, stage_out_into_a_new_directory_renames_the_tree_into_place) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string buffer = stage_in_tricky_tree(tmp);
    for (const bool trust_syncfs : {true, false}) {
        const std::string name = trust_syncfs ? "syncfs" : "fsync";
        MovePlan plan = plan_out(buffer, "data", tmp / "out/" + name + "/result");
        plan.trust_syncfs = trust_syncfs;
        const Outcome out = move_as_nobody(plan);
        ASSERT_EQ(out.code, 0) << out.message;
        expect_same_tree(tmp / "src", tmp / "out/" + name + "/result", nobody);
        EXPECT_EQ(list_dir(tmp / "out/" + name), std::vector<std::string>{"result"});
        EXPECT_FALSE(has_temporaries(tmp / "out/" + name));
    }
}

// Two entries into the same new directory merge there as before (neither builds it aside).
TEST(mover, two_entries_into_one_new_directory_merge) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    mkdir((buffer + "/a").c_str(), 0755);
    mkdir((buffer + "/b").c_str(), 0755);
    write_file(buffer + "/a/x", "x");
    write_file(buffer + "/b/y", "y");
    for_each_entry(buffer, [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    mkdir((tmp / "out").c_str(), 0755);
    chown((tmp / "out").c_str(), nobody, nogroup);
    MovePlan plan = plan_out(buffer, "a", tmp / "out/merged");
    plan.entries.push_back({"b", tmp / "out/merged", StageType::directory});
    const Outcome out = move_as_nobody(plan);
    ASSERT_EQ(out.code, 0) << out.message;
    EXPECT_EQ(list_dir(tmp / "out/merged"), (std::vector<std::string>{"x", "y"}));
    EXPECT_EQ(list_dir(tmp / "out"), std::vector<std::string>{"merged"});
}

// Temporary directories left by a killed run are removed as the user: read-only directories
// in them are opened up first, and a symlink in them is removed, never followed. Lookalikes
// and temporaries of names this move does not write stay.
TEST(mover, stale_temporary_directories_are_removed_without_following_symlinks) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    mkdir((buffer + "/data").c_str(), 0755);
    mkdir((buffer + "/data/sub").c_str(), 0755);
    write_file(buffer + "/data/sub/b", "b");
    for_each_entry(buffer, [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    mkdir((tmp / "victim").c_str(), 0755);
    write_file(tmp / "victim/keep", "keep");
    const std::string out = tmp / "out";
    const std::string stale = out + "/.sub.bbkit-0123456789abcdef0001";
    const std::vector<std::string> kept = {out + "/.other.bbkit-0123456789abcdef0002",
                                           out + "/.sub.bbkit-notours"};
    mkdir(out.c_str(), 0755);
    mkdir(stale.c_str(), 0755);
    mkdir((stale + "/deeper").c_str(), 0755);
    write_file(stale + "/x", "partial");
    write_file(stale + "/deeper/y", "partial");
    symlink((tmp / "victim").c_str(), (stale + "/escape").c_str());
    for (const std::string& dir : kept)
        mkdir(dir.c_str(), 0755);
    for_each_entry(out, [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    lchown(out.c_str(), nobody, nogroup);
    for_each_entry(tmp / "victim",
                   [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    lchown((tmp / "victim").c_str(), nobody, nogroup);
    chmod((stale + "/deeper").c_str(), 0500);  // as a killed run leaves final modes
    chmod(stale.c_str(), 0555);

    const Outcome rerun = move_as_nobody(plan_out(buffer, "data", out));
    ASSERT_EQ(rerun.code, 0) << rerun.message;
    EXPECT_TRUE(rerun.warnings.empty()) << rerun.warnings[0];
    EXPECT_NE(access(stale.c_str(), F_OK), 0) << "stale temporary directory left";
    EXPECT_EQ(read_file(tmp / "victim/keep"), "keep");
    for (const std::string& dir : kept)
        EXPECT_EQ(access(dir.c_str(), F_OK), 0) << dir;
    EXPECT_EQ(read_file(out + "/sub/b"), "b");
}

#ifdef BBKIT_FAULT_INJECTION
std::vector<std::string> temporaries_in(const std::string& dir) {
    std::vector<std::string> found;
    for (const std::string& name : list_dir(dir))
        if (name.find(".bbkit-") != std::string::npos)
            found.push_back(name);
    return found;
}

// Killed while it writes into the temporary directory, or with the tree complete and synced
// just before its rename: no final name exists, only one temporary directory (the second run
// removed the first's), and the rerun completes and leaves none.
TEST(mover, stage_out_killed_before_its_directory_rename_shows_no_final_name) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string buffer = stage_in_tricky_tree(tmp);
    const MovePlan plan = plan_out(buffer, "data", tmp / "out/result");
    for (const std::string fault : {"mover.file-copied:5", "mover.before-dir-renames"}) {
        const Outcome killed = move_as_nobody(plan, fault.c_str());
        EXPECT_EQ(killed.code, 128) << fault << ": " << killed.message;
        EXPECT_NE(access((tmp / "out/result").c_str(), F_OK), 0) << fault;
        const std::vector<std::string> left = list_dir(tmp / "out");
        ASSERT_EQ(left.size(), 1u) << fault;
        EXPECT_EQ(left[0].rfind(".result.bbkit-", 0), 0u) << left[0];
        if (fault == "mover.before-dir-renames")  // complete, final modes and times included
            expect_same_tree(tmp / "src", tmp / "out/" + left[0], nobody);
    }
    const Outcome rerun = move_as_nobody(plan);
    ASSERT_EQ(rerun.code, 0) << rerun.message;
    expect_same_tree(tmp / "src", tmp / "out/result", nobody);
    EXPECT_EQ(list_dir(tmp / "out"), std::vector<std::string>{"result"});
}

// Into an existing destination: files go there under temporaries renamed one by one, a new
// subdirectory is built aside and renamed whole. Killed between the two, the files are in
// place and the subdirectory is not; the rerun (same boot) takes the subdirectory's tree over,
// copies nothing again and renames it into place.
TEST(mover, stage_out_into_an_existing_directory_resumes_after_a_kill) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    for (const std::string dir : {"data", "data/kept", "data/new", "data/new/deeper"})
        mkdir((buffer + "/" + dir).c_str(), 0755);
    for (const std::string file : {"f1", "f2", "kept/k", "new/g1", "new/g2", "new/deeper/h"})
        write_file(buffer + "/data/" + file, "new " + file);
    for_each_entry(buffer, [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    const std::string out = tmp / "out/result";
    mkdir((tmp / "out").c_str(), 0755);
    mkdir(out.c_str(), 0755);
    mkdir((out + "/kept").c_str(), 0755);
    write_file(out + "/f1", "old");
    for_each_entry(tmp / "out", [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    lchown((tmp / "out").c_str(), nobody, nogroup);

    const MovePlan plan = plan_out(buffer, "data", out);
    EXPECT_EQ(move_as_nobody(plan, "mover.before-dir-renames").code, 128);
    EXPECT_EQ(read_file(out + "/f1"), "new f1");
    EXPECT_EQ(read_file(out + "/kept/k"), "new kept/k");
    EXPECT_NE(access((out + "/new").c_str(), F_OK), 0);
    const std::vector<std::string> temps = temporaries_in(out);
    ASSERT_EQ(temps.size(), 1u);
    EXPECT_EQ(temps[0].rfind(".new.bbkit-", 0), 0u) << temps[0];

    const Outcome rerun = move_as_nobody(plan);
    ASSERT_EQ(rerun.code, 0) << rerun.message;
    EXPECT_EQ(rerun.skipped, 6u);  // f1, f2, kept/k, and new/g1, new/g2, new/deeper/h
    EXPECT_EQ(rerun.files, 0u);
    expect_same_tree(buffer + "/data", out, nobody);
    EXPECT_FALSE(has_temporaries(tmp / "out"));
}
#endif

TEST(mover, progress_reports_totals_and_ends_complete) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_tricky_tree(tmp / "src");
    const std::string buffer = make_buffer(tmp, "buffer");
    std::vector<MoveProgress> seen;
    run_move(plan_in(buffer, tmp / "src", "data"),
             [&](const MoveProgress& p) { seen.push_back(p); });
    ASSERT_FALSE(seen.empty());
    for (const MoveProgress& p : seen) {  // totals only grow while the walk counts
        EXPECT_LE(p.files_done, p.files_total);
        EXPECT_LE(p.bytes_done, p.bytes_total);
        EXPECT_LE(p.files_total, seen.back().files_total);
    }
    EXPECT_FALSE(seen.back().counting);
    EXPECT_EQ(seen.back().files_done, seen.back().files_total);
    EXPECT_EQ(seen.back().bytes_done, seen.back().bytes_total);
    EXPECT_GT(seen.back().bytes_total, 10u << 20);
}

// bb-mover's plan as the mover's entries: one group per buffer root; a persistent buffer the
// plan holds no root for is exit 66.
TEST(mover, entries_by_root_groups_stage_lines_by_their_buffer) {
    StagePlan plan;
    plan.direction = StageDirection::out;
    plan.job_root = "/bb/job";
    plan.persistent_roots["shared"] = "/bb/shared";
    StageDirective job;
    job.type = StageType::directory;
    job.source = "out";
    job.destination = "/home/alice/out";
    StageDirective shared = job;
    shared.buffer = "shared";
    shared.source = "results";
    plan.stages = {job, shared};
    auto groups = entries_by_root(plan);
    ASSERT_EQ(groups.size(), 2u);
    ASSERT_EQ(groups["/bb/job"].size(), 1u);
    EXPECT_EQ(groups["/bb/job"][0].source, "out");
    EXPECT_EQ(groups["/bb/job"][0].type, StageType::directory);
    ASSERT_EQ(groups["/bb/shared"].size(), 1u);
    EXPECT_EQ(groups["/bb/shared"][0].source, "results");

    shared.buffer = "gone";
    plan.stages = {shared};
    try {
        entries_by_root(plan);
        ADD_FAILURE() << "a persistent buffer without a root was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ExitCode::no_input) << e.what();
    }
}

// Stage-in expands a type=list file into its entries, under the line's destination.
TEST(mover, entries_by_root_expands_stage_in_lists) {
    TempDir tmp;
    write_file(tmp / "a", "a");
    mkdir((tmp / "d").c_str(), 0755);
    write_file(tmp / "list", tmp / "a" + " x/a\n" + tmp / "d" + " y\n");
    StagePlan plan;
    plan.direction = StageDirection::in;
    plan.job_root = "/bb/job";
    plan.capacity = 1 << 20;
    StageDirective list;
    list.type = StageType::list;
    list.source = tmp / "list";
    list.destination = "in";
    plan.stages = {list};
    auto groups = entries_by_root(plan);
    ASSERT_EQ(groups["/bb/job"].size(), 2u);
    EXPECT_EQ(groups["/bb/job"][0].source, tmp / "a");
    EXPECT_EQ(groups["/bb/job"][0].destination, "in/x/a");
    EXPECT_EQ(groups["/bb/job"][0].type, StageType::file);
    EXPECT_EQ(groups["/bb/job"][1].destination, "in/y");
    EXPECT_EQ(groups["/bb/job"][1].type, StageType::directory);
}

// A node-local buffer's lines (bbkit(7), NODE-LOCAL POOLS): a shard line's entries carry
// this node's share, a gather=nodes line lands under the node's name, a gather=merge line
// keeps what another node wrote.
TEST(mover, entries_by_root_places_a_node_local_buffers_lines) {
    TempDir tmp;
    mkdir((tmp / "in").c_str(), 0755);
    StagePlan plan;
    plan.direction = StageDirection::in;
    plan.job_root = "/bb/job";
    plan.capacity = 1 << 20;
    plan.nodes = JobNodes{"n2", 1, 3};
    StageDirective shard;
    shard.type = StageType::directory;
    shard.source = tmp / "in";
    shard.destination = "in";
    shard.distribute = Spread::shard;
    StageDirective copy = shard;
    copy.distribute = Spread::copy;
    plan.stages = {shard, copy};
    auto groups = entries_by_root(plan);
    ASSERT_EQ(groups["/bb/job"].size(), 2u);
    EXPECT_EQ(groups["/bb/job"][0].shard_index, 1u);
    EXPECT_EQ(groups["/bb/job"][0].shard_count, 3u);
    EXPECT_EQ(groups["/bb/job"][1].shard_count, 1u);

    plan.direction = StageDirection::out;
    StageDirective tree;
    tree.type = StageType::directory;
    tree.source = "out";
    tree.destination = "/lus/out";
    StageDirective file = tree;
    file.type = StageType::file;
    file.source = "log";
    file.destination = "/lus/logs/run.log";
    StageDirective merged = tree;
    merged.gather = Gather::merge;
    plan.stages = {tree, file, merged};
    groups = entries_by_root(plan);
    ASSERT_EQ(groups["/bb/job"].size(), 3u);
    EXPECT_EQ(groups["/bb/job"][0].destination, "/lus/out/n2");
    EXPECT_FALSE(groups["/bb/job"][0].keep_existing);
    EXPECT_EQ(groups["/bb/job"][1].destination, "/lus/logs/n2/run.log");
    EXPECT_EQ(groups["/bb/job"][2].destination, "/lus/out");
    EXPECT_TRUE(groups["/bb/job"][2].keep_existing);

    plan.nodes = JobNodes{};  // a buffer outside node-local pools: lines as written
    plan.stages = {tree};
    EXPECT_EQ(entries_by_root(plan)["/bb/job"][0].destination, "/lus/out");
}

// The tree the parts tests split: the tricky tree, 40 more files of sizes 0-3900 and a second
// name of sub/f7, whose part must carry both names.
void make_parts_tree(const std::string& src) {
    make_tricky_tree(src);
    for (int i = 0; i < 40; ++i) {
        const std::string f = src + "/sub/f" + std::to_string(i);
        write_file(f, std::string(i * 100, 'x'));
        lchown(f.c_str(), nobody, nogroup);
    }
    link((src + "/sub/f7").c_str(), (src + "/linked-f7").c_str());
}

// A transfer job's parts (bbkit(7), STAGING ON TRANSFER NODES) fill one buffer: for every
// count of parts, each part copies only its share, the shares add up to the whole tree with
// nothing copied twice, hard links stay whole (the share goes by inode), and the finishing
// mover of the whole plan copies nothing and leaves a tree cp -a would have made.
TEST(mover, a_transfer_jobs_parts_fill_one_buffer_with_the_whole_tree_once) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_parts_tree(tmp / "src");
    for (std::uint32_t parts = 1; parts <= 5; ++parts) {
        const std::string buffer = make_buffer(tmp, "buffer" + std::to_string(parts));
        std::uint64_t files = 0, bytes = 0;
        for (std::uint32_t part = 0; part < parts; ++part) {
            StagePlan stage;
            stage.direction = StageDirection::in;
            stage.job_root = buffer;
            stage.capacity = std::uint64_t{1} << 30;
            stage.part = part;
            stage.parts = parts;
            StageDirective tree;
            tree.type = StageType::directory;
            tree.source = tmp / "src";
            tree.destination = "data";
            stage.stages = {tree};
            MovePlan plan = plan_in(buffer, tmp / "src", "data");
            plan.entries = entries_by_root(stage).at(buffer);
            ASSERT_EQ(plan.entries.size(), 1u);
            EXPECT_EQ(plan.entries[0].shard_by_inode, parts > 1);
            const Outcome outcome = move_as_nobody(plan);
            ASSERT_EQ(outcome.code, 0) << outcome.message;
            EXPECT_EQ(outcome.skipped, 0u) << "part " << part << " of " << parts;
            files += outcome.files;
            bytes += outcome.bytes;
        }
        if (parts > 1) {  // the directories' modes and times are the finishing mover's
            struct stat ro {};
            ASSERT_EQ(lstat((buffer + "/data/ro").c_str(), &ro), 0);
            EXPECT_EQ(ro.st_mode & 07777, 0700u) << parts << " parts";
        }
        const Outcome whole = move_as_nobody(plan_in(buffer, tmp / "src", "data"));
        ASSERT_EQ(whole.code, 0) << whole.message;
        EXPECT_EQ(whole.files, 0u) << parts << " parts left something to the finishing mover";
        EXPECT_EQ(whole.skipped, files) << parts << " parts";
        expect_same_tree(tmp / "src", buffer + "/data", nobody);
        struct stat a {
        }, b{};
        ASSERT_EQ(lstat((buffer + "/data/sub/f7").c_str(), &a), 0);
        ASSERT_EQ(lstat((buffer + "/data/linked-f7").c_str(), &b), 0);
        EXPECT_EQ(a.st_ino, b.st_ino) << parts << " parts split a hard link";
        (void)bytes;
    }
}

// The same in the other direction: a stage-out's parts write the one tree out of the buffer,
// each its share (durable: every file under a temporary name, synced, renamed), into
// directories made in place that the finishing mover gives their modes and times. A part removes
// no temporary it finds (another part's, live, has the shape of a killed move's); the finishing
// mover, alone after the parts, removes what a killed part left.
TEST(mover, a_transfer_jobs_parts_stage_out_one_tree_whole_and_leave_each_others_temporaries) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_parts_tree(tmp / "src");
    set_times(tmp / "src/sub", 1400000000, 7);
    set_times(tmp / "src", 1400000000, 42);  // as make_tricky_tree left it
    const std::string buffer = make_buffer(tmp, "buffer");
    const Outcome in = move_as_nobody(plan_in(buffer, tmp / "src", "data"));
    ASSERT_EQ(in.code, 0) << in.message;
    mkdir((tmp / "out").c_str(), 0755);
    chown((tmp / "out").c_str(), nobody, nogroup);
    // Another part's temporary, live: its shape, the user's, for a name the tree has.
    const std::string other = ".f3.bbkit-" + std::string(28, 'a');
    for (std::uint32_t parts = 1; parts <= 5; ++parts) {
        const std::string out = tmp / ("out/result" + std::to_string(parts));
        if (parts > 1) {
            for (const std::string& d : {out, out + "/sub"}) {
                mkdir(d.c_str(), 0700);
                chown(d.c_str(), nobody, nogroup);
            }
            write_file(out + "/sub/" + other, "half");
            lchown((out + "/sub/" + other).c_str(), nobody, nogroup);
        }
        std::uint64_t files = 0;
        for (std::uint32_t part = 0; part < parts; ++part) {
            StagePlan stage;
            stage.direction = StageDirection::out;
            stage.job_root = buffer;
            stage.part = part;
            stage.parts = parts;
            StageDirective tree;
            tree.type = StageType::directory;
            tree.source = "data";
            tree.destination = out;
            stage.stages = {tree};
            MovePlan plan = plan_out(buffer, "data", out);
            plan.entries = entries_by_root(stage).at(buffer);
            ASSERT_EQ(plan.entries.size(), 1u);
            EXPECT_EQ(plan.entries[0].shard_by_inode, parts > 1);
            EXPECT_EQ(plan.entries[0].shared_directories, parts > 1);
            const Outcome outcome = move_as_nobody(plan);
            ASSERT_EQ(outcome.code, 0) << outcome.message;
            EXPECT_EQ(outcome.skipped, 0u) << "part " << part << " of " << parts;
            files += outcome.files;
            if (parts > 1) {
                EXPECT_EQ(access((out + "/sub/" + other).c_str(), F_OK), 0)
                    << "part " << part << " of " << parts << " removed another part's temporary";
            }
        }
        if (parts > 1) {
            struct stat ro {};
            ASSERT_EQ(lstat((out + "/ro").c_str(), &ro), 0);
            EXPECT_EQ(ro.st_mode & 07777, 0700u) << parts << " parts";
        }
        const Outcome whole = move_as_nobody(plan_out(buffer, "data", out));
        ASSERT_EQ(whole.code, 0) << whole.message;
        EXPECT_EQ(whole.files, 0u) << parts << " parts left something to the finishing mover";
        EXPECT_EQ(whole.skipped, files) << parts << " parts";
        expect_same_tree(tmp / "src", out, nobody);
        EXPECT_FALSE(has_temporaries(out)) << parts << " parts";
        struct stat a {
        }, b{};
        ASSERT_EQ(lstat((out + "/sub/f7").c_str(), &a), 0);
        ASSERT_EQ(lstat((out + "/linked-f7").c_str(), &b), 0);
        EXPECT_EQ(a.st_ino, b.st_ino) << parts << " parts split a hard link";
    }
}

// Stage-out lines recorded before bb-parse refused type=list are refused the same way (65);
// no path of a move may climb, outside the buffer either (directive.hpp's one '..' rule).
TEST(mover, stage_out_lists_and_climbing_paths_are_refused_as_bb_parse_refuses_them) {
    BBKIT_MOVES_AS_NOBODY();
    StagePlan plan;
    plan.direction = StageDirection::out;
    plan.job_root = "/bb/job";
    StageDirective list;
    list.type = StageType::list;
    list.source = "out";
    list.destination = "/home/alice/out";
    plan.stages = {list};
    try {
        entries_by_root(plan);
        ADD_FAILURE() << "a stage_out type=list record was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ExitCode::data) << e.what();
        EXPECT_NE(std::string(e.what()).find("stage_out type=list is not supported"),
                  std::string::npos)
            << e.what();
    }

    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    write_file(buffer + "/f", "f");
    for (const std::string& destination : {tmp / "out/../f", tmp / "out/.."}) {
        const Outcome out = move_as_nobody(plan_out(buffer, "f", destination, StageType::file));
        EXPECT_EQ(out.code, 65) << destination << ": " << out.message;
        EXPECT_NE(out.message.find("must not contain '..'"), std::string::npos) << out.message;
    }
}

// ---- streaming ------------------------------------------------------------------------------

// `dirs` directories of `per_dir` small files each (content names the file), owned by nobody.
void make_wide_tree(const std::string& root, int dirs, int per_dir) {
    mkdir(root.c_str(), 0755);
    for (int d = 0; d < dirs; ++d) {
        const std::string dir = root + "/d" + std::to_string(d);
        mkdir(dir.c_str(), 0755);
        for (int f = 0; f < per_dir; ++f)
            write_file(dir + "/f" + std::to_string(f), "file " + std::to_string(d * 1000 + f));
    }
    for_each_entry(root, [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    lchown(root.c_str(), nobody, nogroup);
}

// Batches of three entries: every directory's walk ends in some other batch than the one its
// files were copied in, hard links meet their first copy batches later, a 0500 directory is
// finished while its siblings are still being walked, and the result is what one batch gives.
TEST(mover, batches_of_three_entries_keep_everything_cp_a_keeps) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_tricky_tree(tmp / "src");
    const std::string buffer = make_buffer(tmp, "buffer");
    MovePlan in = plan_in(buffer, tmp / "src", "data");
    in.batch_entries = 3;
    const Outcome staged = move_as_nobody(in);
    ASSERT_EQ(staged.code, 0) << staged.message;
    expect_same_tree(tmp / "src", buffer + "/data", nobody);

    mkdir((tmp / "out").c_str(), 0755);
    chown((tmp / "out").c_str(), nobody, nogroup);
    for (const bool trust_syncfs : {true, false}) {
        const std::string dest = tmp / (trust_syncfs ? "out/syncfs" : "out/fsync");
        MovePlan out = plan_out(buffer, "data", dest);
        out.batch_entries = 3;
        out.trust_syncfs = trust_syncfs;
        const Outcome back = move_as_nobody(out);
        ASSERT_EQ(back.code, 0) << back.message;
        expect_same_tree(tmp / "src", dest, nobody);
    }
    EXPECT_FALSE(has_temporaries(tmp / "out"));
}

// Hard links whose names are far apart in the walk, more of them than the memory bound lets
// the move remember: the inodes met past the bound are copied on their own, recorded in an
// unnamed file, and linked at the end. Every pair is one inode again; a rerun links nothing
// twice and copies nothing.
TEST(mover, hard_links_past_the_memory_bound_are_linked_at_the_end) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string src = tmp / "src";
    const int pairs = 3000;
    mkdir(src.c_str(), 0755);
    mkdir((src + "/a").c_str(), 0755);
    mkdir((src + "/b").c_str(), 0755);
    for (int i = 0; i < pairs; ++i) {
        const std::string name = "/f" + std::to_string(i);
        write_file(src + "/a" + name, "linked " + std::to_string(i));
        link((src + "/a" + name).c_str(), (src + "/b" + name).c_str());
    }
    chmod((src + "/b").c_str(), 0555);  // a finished directory the links must still land in
    for_each_entry(src, [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    lchown(src.c_str(), nobody, nogroup);
    const std::string buffer = make_buffer(tmp, "buffer");
    MovePlan plan = plan_in(buffer, src, "data");
    plan.memory_limit = 1 << 20;  // room for about 500 pending links
    plan.batch_entries = 256;
    const Outcome first = move_as_nobody(plan);
    ASSERT_EQ(first.code, 0) << first.message;
    expect_same_tree(src, buffer + "/data", nobody);
    EXPECT_FALSE(has_temporaries(buffer + "/data/b"));

    const Outcome again = move_as_nobody(plan);
    ASSERT_EQ(again.code, 0) << again.message;
    EXPECT_EQ(again.files, 0u);
    expect_same_tree(src, buffer + "/data", nobody);
}

// A directory of more entries than a batch, staged in and out in batches of 100.
TEST(mover, a_directory_larger_than_a_batch_streams_through) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_wide_tree(tmp / "src", 3, 1000);
    const std::string buffer = make_buffer(tmp, "buffer");
    MovePlan in = plan_in(buffer, tmp / "src", "data");
    in.batch_entries = 100;
    std::vector<MoveProgress> seen;
    const MoveSummary summary = run_move(in, [&](const MoveProgress& p) { seen.push_back(p); });
    EXPECT_EQ(summary.files, 3000u);
    ASSERT_FALSE(seen.empty());
    EXPECT_EQ(seen.back().files_total, 3004u);  // the top, three directories, their files
    EXPECT_EQ(seen.back().files_done, 3004u);
    EXPECT_FALSE(seen.back().counting);
    expect_same_tree(tmp / "src", buffer + "/data", static_cast<uid_t>(-1));
}

// Hard links of a symlink and of a fifo stay links, as cp -a keeps them, in both directions.
TEST(mover, hard_linked_symlinks_and_fifos_stay_linked) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    mkdir((tmp / "src").c_str(), 0755);
    mkdir((tmp / "src/sub").c_str(), 0755);
    ASSERT_EQ(symlink("target", (tmp / "src/sym1").c_str()), 0);
    ASSERT_EQ(link((tmp / "src/sym1").c_str(), (tmp / "src/sub/sym2").c_str()), 0);
    ASSERT_EQ(mkfifo((tmp / "src/fifo1").c_str(), 0640), 0);
    ASSERT_EQ(link((tmp / "src/fifo1").c_str(), (tmp / "src/fifo2").c_str()), 0);
    for_each_entry(tmp / "src", [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    lchown((tmp / "src").c_str(), nobody, nogroup);
    auto same_inode = [](const std::string& a, const std::string& b) {
        struct stat x {
        }, y{};
        return lstat(a.c_str(), &x) == 0 && lstat(b.c_str(), &y) == 0 && x.st_ino == y.st_ino;
    };
    const std::string buffer = make_buffer(tmp, "buffer");
    const Outcome in = move_as_nobody(plan_in(buffer, tmp / "src", "data"));
    ASSERT_EQ(in.code, 0) << in.message;
    EXPECT_TRUE(same_inode(buffer + "/data/sym1", buffer + "/data/sub/sym2"));
    EXPECT_TRUE(same_inode(buffer + "/data/fifo1", buffer + "/data/fifo2"));
    mkdir((tmp / "out").c_str(), 0755);
    chown((tmp / "out").c_str(), nobody, nogroup);
    const std::string out_dir = tmp / "out/result";
    const Outcome out = move_as_nobody(plan_out(buffer, "data", out_dir));
    ASSERT_EQ(out.code, 0) << out.message;
    EXPECT_TRUE(same_inode(out_dir + "/sym1", out_dir + "/sub/sym2"));
    EXPECT_TRUE(same_inode(out_dir + "/fifo1", out_dir + "/fifo2"));
    // A rerun finds the links in place.
    const Outcome again = move_as_nobody(plan_in(buffer, tmp / "src", "data"));
    ASSERT_EQ(again.code, 0) << again.message;
    EXPECT_EQ(again.files, 0u);
}

// A stage-in into the job's buffer counts what it walks against the buffer's capacity: a tree
// that does not fit stops at the first file over it, with the measurement's own message, and
// what was copied before never exceeds the capacity. Without a capacity (a persistent buffer's
// move) the same tree goes through.
TEST(mover, a_tree_larger_than_the_capacity_stops_at_the_first_file_over_it) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_wide_tree(tmp / "src", 3, 1000);  // 3000 files of 6-9 bytes
    const std::string buffer = make_buffer(tmp, "buffer");
    MovePlan in = plan_in(buffer, tmp / "src", "data");
    in.batch_entries = 100;
    in.capacity = 5000;
    try {
        run_move(in, {});
        ADD_FAILURE() << "a tree over the capacity was copied";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ExitCode::data) << e.what();
        EXPECT_NE(std::string(e.what()).find("stage-in needs at least"), std::string::npos)
            << e.what();
        EXPECT_NE(std::string(e.what()).find("but the buffer holds "), std::string::npos)
            << e.what();
    }
    std::uint64_t copied = 0;
    for_each_entry(buffer, [&](const std::string& path) {
        struct stat st {};
        if (lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode))
            copied += static_cast<std::uint64_t>(st.st_size);
    });
    EXPECT_LE(copied, 5000u);
    in.capacity.reset();
    const MoveSummary rest = run_move(in, {});
    EXPECT_EQ(rest.files + rest.skipped, 3000u);  // what the refused move copied is kept
    in.capacity = 3000 * 9;                       // the whole tree fits: nothing refused
    EXPECT_EQ(run_move(in, {}).skipped, 3000u);
}

// The copy starts once a small first batch is walked, not a whole batch's worth, and the move
// says where its time went.
TEST(mover, the_summary_says_where_the_time_went) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_wide_tree(tmp / "src", 4, 1000);
    const std::string buffer = make_buffer(tmp, "buffer");
    MovePlan in = plan_in(buffer, tmp / "src", "data");
    in.threads = 3;
    std::vector<MoveProgress> seen;
    const MoveSummary summary = run_move(in, [&](const MoveProgress& p) { seen.push_back(p); });
    const MovePhases& p = summary.phases;
    EXPECT_EQ(p.threads, 3u);
    EXPECT_DOUBLE_EQ(p.seconds, summary.seconds);
    EXPECT_GT(p.walk, 0);
    EXPECT_GT(p.copy, 0);
    EXPECT_GT(p.busy, 0);
    EXPECT_LE(p.busy, p.threads * p.seconds);
    EXPECT_LE(p.before + p.after, p.seconds);
    EXPECT_LE(p.wait + p.copy + p.finish + p.sync, p.seconds * 1.001);
    EXPECT_GE(p.idle_share(), 0);
    EXPECT_LT(p.idle_share(), 1);
    // Nothing to copy: a rerun's time is all before its first copy or in its skips.
    const MoveSummary again = run_move(in, {});
    EXPECT_EQ(again.skipped, 4000u);
    EXPECT_LE(again.phases.before + again.phases.after, again.phases.seconds);
}

#ifdef BBKIT_FAULT_INJECTION
// Killed anywhere inside the streaming walk or between batches: the rerun copies no complete
// file again (stage-in writes final names, so what was written is skipped), leaves no
// temporary and gives the same tree.
TEST(mover, stage_in_killed_inside_the_stream_resumes_without_copying_again) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_wide_tree(tmp / "src", 6, 200);
    for (const std::string fault : {"mover.dirs-made:3", "mover.batch-walked:4",
                                    "mover.file-copied:500", "mover.batch-done:5"}) {
        const std::string buffer = make_buffer(tmp, "buffer-" + fault.substr(6, 9));
        MovePlan plan = plan_in(buffer, tmp / "src", "data");
        plan.batch_entries = 64;
        plan.threads = 2;
        const Outcome killed = move_as_nobody(plan, fault.c_str());
        EXPECT_EQ(killed.code, 128) << fault << ": " << killed.message;
        std::uint64_t complete = 0;
        for_each_entry(buffer + "/data", [&](const std::string& p) {
            struct stat st {};
            if (lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
                read_file(p).rfind("file ", 0) == 0 && st.st_mtim.tv_sec != 0) {
                struct stat source {};
                const std::string rel = p.substr(buffer.size() + 5);
                if (lstat((tmp / "src" + rel).c_str(), &source) == 0 &&
                    source.st_mtim.tv_nsec == st.st_mtim.tv_nsec &&
                    source.st_mtim.tv_sec == st.st_mtim.tv_sec)
                    ++complete;
            }
        });
        const Outcome rerun = move_as_nobody(plan);
        ASSERT_EQ(rerun.code, 0) << fault << ": " << rerun.message;
        EXPECT_EQ(rerun.skipped, complete) << fault;
        EXPECT_EQ(rerun.files + rerun.skipped, 1200u) << fault;
        expect_same_tree(tmp / "src", buffer + "/data", nobody);
        EXPECT_FALSE(has_temporaries(buffer)) << fault;
    }
}

// A large file's stage-in killed after some of its chunks: the rerun (same boot) copies only
// the chunks not marked on the destination, and the copy ends equal to its source, holes kept,
// with no marks left. A marked chunk is taken as done: one changed in between stays as the
// killed run left it, which is how this test sees that it was not copied again.
TEST(mover, a_large_file_killed_inside_resumes_from_its_marked_chunks) {
    BBKIT_MOVES_AS_NOBODY();
    constexpr off_t chunk = off_t{32} << 20;  // the mover's chunk
    TempDir tmp;
    mkdir((tmp / "src").c_str(), 0755);
    const std::string source = tmp / "src/big";
    std::string data;
    for (int c = 0; c < 4; ++c) {
        const std::string piece = dense_data(1 << 20, static_cast<unsigned>(c + 1));
        write_at(source, c * chunk, piece);
        data += piece;
    }
    ASSERT_EQ(truncate(source.c_str(), 4 * chunk - 4096), 0);
    lchown((tmp / "src").c_str(), nobody, nogroup);
    lchown(source.c_str(), nobody, nogroup);
    struct stat st {};
    ASSERT_EQ(lstat(source.c_str(), &st), 0);
    const std::string buffer = make_buffer(tmp, "buffer");
    MovePlan plan = plan_in(buffer, tmp / "src", "data");
    plan.threads = 2;
    const Outcome killed = move_as_nobody(plan, "mover.chunk-copied:2");
    ASSERT_EQ(killed.code, 128) << killed.message;
    const std::string copy = buffer + "/data/big";
    ChunkMarks marks(st, chunk, 4);
    {
        Fd fd(open(copy.c_str(), O_RDONLY | O_CLOEXEC));
        ASSERT_TRUE(fd);
        if (!marks.load(fd.get()) && errno == ENOTSUP)
            GTEST_SKIP() << "no user xattrs here";
    }
    ASSERT_GE(marks.count(), 2u);
    ASSERT_LT(marks.count(), 4u);
    std::size_t marked = 0;
    while (!marks.done(marked))
        ++marked;
    write_at(copy, static_cast<off_t>(marked) * chunk, "TAMPERED");
    const Outcome rerun = move_as_nobody(plan);
    ASSERT_EQ(rerun.code, 0) << rerun.message;
    const std::string got = read_file(copy);
    ASSERT_EQ(got.size(), static_cast<std::size_t>(4 * chunk - 4096));
    for (std::size_t c = 0; c < 4; ++c) {
        const std::string head = got.substr(c * chunk, 1 << 20);
        if (c == marked)
            EXPECT_EQ(head.substr(0, 8), "TAMPERED");
        else
            EXPECT_EQ(head, data.substr(c << 20, 1 << 20)) << "chunk " << c;
    }
    struct stat out {};
    ASSERT_EQ(lstat(copy.c_str(), &out), 0);
    EXPECT_EQ(out.st_mtim.tv_nsec, st.st_mtim.tv_nsec);
    EXPECT_LT(out.st_blocks * 512, 16 << 20);  // the holes stayed holes
    EXPECT_EQ(getxattr(copy.c_str(), ChunkMarks::attribute, nullptr, 0), -1);
    // Another rerun finds it complete.
    EXPECT_EQ(move_as_nobody(plan).skipped, 1u);
}

// A durable stage-out into a new directory killed after some batches: the rerun (same boot)
// takes the temporary tree over, skips what it holds, and renames it into place.
TEST(mover, stage_out_killed_between_batches_takes_its_tree_over) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_wide_tree(tmp / "src", 4, 100);
    const std::string buffer = make_buffer(tmp, "buffer");
    MovePlan in = plan_in(buffer, tmp / "src", "data");
    ASSERT_EQ(move_as_nobody(in).code, 0);
    mkdir((tmp / "out").c_str(), 0755);
    chown((tmp / "out").c_str(), nobody, nogroup);
    MovePlan out = plan_out(buffer, "data", tmp / "out/result");
    out.batch_entries = 50;
    const Outcome killed = move_as_nobody(out, "mover.batch-done:4");
    EXPECT_EQ(killed.code, 128) << killed.message;
    EXPECT_NE(access((tmp / "out/result").c_str(), F_OK), 0);
    ASSERT_EQ(list_dir(tmp / "out").size(), 1u);
    const Outcome rerun = move_as_nobody(out);
    ASSERT_EQ(rerun.code, 0) << rerun.message;
    EXPECT_GE(rerun.skipped, 150u);  // four batches of 50 entries, directories among them
    EXPECT_EQ(rerun.files + rerun.skipped, 400u);
    expect_same_tree(tmp / "src", tmp / "out/result", nobody);
    EXPECT_EQ(list_dir(tmp / "out"), std::vector<std::string>{"result"});
}

// A source file swapped for a FIFO after the walk saw it (the mover stopped between the walk
// of its batch and the copy) fails the move in one line, "it changed during the move", instead
// of waiting forever in open() for a writer that never comes.
TEST(mover, a_source_swapped_for_a_fifo_after_the_walk_fails_instead_of_blocking) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    mkdir((tmp / "src").c_str(), 0755);
    write_file(tmp / "src/a", "a");
    write_file(tmp / "src/b", "b");
    const std::string buffer = make_buffer(tmp, "buffer");
    const MovePlan plan = plan_in(buffer, tmp / "src", "data");
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        std::string report = "0 ";
        if (setgroups(0, nullptr) != 0 || setresgid(nogroup, nogroup, nogroup) != 0 ||
            setresuid(nobody, nobody, nobody) != 0)
            _exit(71);
        // Stopped once every entry is walked, before the batch holding them is handed to the
        // copy (after the hand-over the copy may finish both files before the stop lands).
        setenv("BBKIT_FAULT", "mover.walked:1:stop", 1);
        fault_rearm();
        try {
            run_move(plan, nullptr);
        } catch (const Error& e) {
            report = std::to_string(e.exit_status()) + " " + e.what();
        }
        (void)!write(fds[1], report.data(), report.size());
        _exit(0);
    }
    close(fds[1]);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, WUNTRACED), pid);
    ASSERT_TRUE(WIFSTOPPED(status));
    ASSERT_EQ(unlink((tmp / "src/b").c_str()), 0);
    ASSERT_EQ(mkfifo((tmp / "src/b").c_str(), 0644), 0);
    kill(pid, SIGCONT);
    bool exited = false;
    for (int i = 0; i < 200 && !exited; ++i) {  // 20 s
        exited = waitpid(pid, &status, WNOHANG) == pid;
        if (!exited)
            usleep(100 * 1000);
    }
    if (!exited) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    std::string report;
    char buf[4096];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;)
        report.append(buf, static_cast<std::size_t>(n));
    close(fds[0]);
    ASSERT_TRUE(exited) << "the mover blocked opening the FIFO";
    EXPECT_EQ(report.rfind("74 ", 0), 0u) << report;
    EXPECT_NE(report.find(tmp / "src/b: it changed during the move"), std::string::npos) << report;
}
#endif

// ---- entries that overlap, trees taken over, destinations inside the source ----------------

void own_all(const std::string& root) {
    for_each_entry(root, [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    lchown(root.c_str(), nobody, nogroup);
}

// A source file whose name merely looks like a temporary of another move ("an entry of the
// source with that name is kept"): a second entry into the same directory writes `f` there.
// cp -a A/. data/; cp -a B/. data/ keeps both. The old mover kept it (names.all covered every
// entry); the streaming one only asks the current entry's source.
const std::string lookalike = ".f.bbkit-0123456789abcdef0123";

TEST(mover, second_directory_entry_keeps_a_lookalike_the_first_wrote_stage_in) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    mkdir((tmp / "A").c_str(), 0755);
    mkdir((tmp / "B").c_str(), 0755);
    write_file(tmp / "A" + "/" + lookalike, "user data from A");
    write_file(tmp / "B/f", "f from B");
    own_all(tmp / "A");
    own_all(tmp / "B");
    const std::string buffer = make_buffer(tmp, "buffer");
    MovePlan plan = plan_in(buffer, tmp / "A", "data");
    plan.entries.push_back({tmp / "B", "data", StageType::directory});
    const Outcome out = move_as_nobody(plan);
    ASSERT_EQ(out.code, 0) << out.message;
    EXPECT_EQ(list_dir(buffer + "/data"), (std::vector<std::string>{lookalike, "f"}));
}

TEST(mover, file_entry_into_a_directory_keeps_a_lookalike_the_first_entry_wrote) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    mkdir((tmp / "A").c_str(), 0755);
    mkdir((tmp / "B").c_str(), 0755);
    write_file(tmp / "A" + "/" + lookalike, "user data from A");
    write_file(tmp / "B/f", "f from B");
    own_all(tmp / "A");
    own_all(tmp / "B");
    const std::string buffer = make_buffer(tmp, "buffer");
    MovePlan plan = plan_in(buffer, tmp / "A", "data");
    plan.entries.push_back({tmp / "B/f", "data/", StageType::file});
    const Outcome out = move_as_nobody(plan);
    ASSERT_EQ(out.code, 0) << out.message;
    EXPECT_EQ(list_dir(buffer + "/data"), (std::vector<std::string>{lookalike, "f"}));
}

TEST(mover, second_directory_entry_keeps_a_lookalike_the_first_wrote_stage_out) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    mkdir((buffer + "/A").c_str(), 0755);
    mkdir((buffer + "/B").c_str(), 0755);
    write_file(buffer + "/A/" + lookalike, "user data from A");
    write_file(buffer + "/B/f", "f from B");
    own_all(buffer);
    mkdir((tmp / "out").c_str(), 0755);
    chown((tmp / "out").c_str(), nobody, nogroup);
    MovePlan plan = plan_out(buffer, "A", tmp / "out/merged");
    plan.entries.push_back({"B", tmp / "out/merged", StageType::directory});
    const Outcome out = move_as_nobody(plan);
    ASSERT_EQ(out.code, 0) << out.message;
    EXPECT_EQ(list_dir(tmp / "out/merged"), (std::vector<std::string>{lookalike, "f"}));
}

// Overlapping entries: the first leaves a 0555 directory finished (its final mode applied
// when its batch ends) before the second writes into it. The old mover applied every
// directory's metadata at the end, so the second entry could still create there.
TEST(mover, later_entry_writes_into_a_read_only_directory_an_earlier_entry_made) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    mkdir((tmp / "A").c_str(), 0755);
    mkdir((tmp / "A/ro").c_str(), 0755);
    write_file(tmp / "A/ro/inside", "inside");
    write_file(tmp / "extra", "extra");
    own_all(tmp / "A");
    lchown((tmp / "extra").c_str(), nobody, nogroup);
    chmod((tmp / "A/ro").c_str(), 0555);
    const std::string buffer = make_buffer(tmp, "buffer");
    MovePlan plan = plan_in(buffer, tmp / "A", "data");
    plan.entries.push_back({tmp / "extra", "data/ro/extra", StageType::file});
    const Outcome out = move_as_nobody(plan);
    ASSERT_EQ(out.code, 0) << out.message;
    EXPECT_EQ(read_file(buffer + "/data/ro/extra"), "extra");
}

// The suffix of a temporary that a killed move of the buffer holding `token` made in this
// boot: the buffer's tag (16 digits, a keyed hash of the boot id), 8 digits per move, 4 per file.
std::string same_boot_suffix(const std::string& token = test_temp_token) {
    return to_hex(hmac_sha256(token, boot_id())).substr(0, 16) + "123456789abc";
}

// What older movers named a temporary of this boot: the boot id's hash (anyone may compute it),
// 8 digits per move, 4 per file.
std::string old_boot_suffix() {
    char s[32];
    std::snprintf(
        s, sizeof s, "%08llx%012llx",
        static_cast<unsigned long long>(std::hash<std::string>{}(boot_id()) & 0xffffffffu),
        0x123456789aULL);
    return s;
}

// A same-boot temporary beside a directory entry's new destination that is not a directory
// (a killed type=file stage-out of that name, or any file of that shape): the stale rule
// removes it; the adoption path instead fails the whole stage-out, every time.
TEST(mover, a_same_boot_file_temporary_beside_a_new_directory_does_not_fail_the_move) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    mkdir((buffer + "/data").c_str(), 0755);
    write_file(buffer + "/data/x", "x");
    own_all(buffer);
    const std::string out = tmp / "out";
    mkdir(out.c_str(), 0755);
    const std::string temp = out + "/.result.bbkit-" + same_boot_suffix();
    write_file(temp, "a temporary file of a killed type=file stage-out");
    own_all(out);
    const Outcome rerun = move_as_nobody(plan_out(buffer, "data", out + "/result"));
    ASSERT_EQ(rerun.code, 0) << rerun.message;
    EXPECT_EQ(read_file(out + "/result/x"), "x");
    EXPECT_NE(access(temp.c_str(), F_OK), 0);
}

// A same-boot temporary tree beside a new destination, left by a killed stage-out of some
// OTHER source (another job of the user, another buffer): adopting it publishes its files
// as part of a "new" destination that must equal the source (cp -a src/. dest/).
TEST(mover, an_adopted_tree_holds_only_what_the_source_has) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    mkdir((buffer + "/data").c_str(), 0755);
    write_file(buffer + "/data/x", "x");
    own_all(buffer);
    const std::string out = tmp / "out";
    mkdir(out.c_str(), 0755);
    const std::string temp = out + "/.result.bbkit-" + same_boot_suffix();
    mkdir(temp.c_str(), 0755);
    write_file(temp + "/left-by-the-killed-run", "not in this source");
    own_all(out);
    const Outcome rerun = move_as_nobody(plan_out(buffer, "data", out + "/result"));
    ASSERT_EQ(rerun.code, 0) << rerun.message;
    expect_same_tree(buffer + "/data", out + "/result", nobody);
}

// A temporary tree beside a new destination that the stage-out must not take over: it is
// built afresh, owned by the user with the source's mode, and holds only what the source has.
void expect_not_adopted(const std::string& name, uid_t owner, mode_t mode, bool with_token = true) {
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    mkdir((buffer + "/res").c_str(), 0700);
    write_file(buffer + "/res/x", "the user's result");
    own_all(buffer);
    chmod((buffer + "/res").c_str(), 0700);
    const std::string out = tmp / "out";
    mkdir(out.c_str(), 0775);
    chown(out.c_str(), nobody, nogroup);
    const std::string temp = out + "/" + name;
    mkdir(temp.c_str(), 0777);
    write_file(temp + "/planted", "not the user's");
    lchown(temp.c_str(), owner, owner);
    lchown((temp + "/planted").c_str(), owner, owner);
    chmod(temp.c_str(), mode);
    MovePlan move = plan_out(buffer, "res", out + "/res");
    if (!with_token)
        move.temp_token.clear();
    const Outcome rerun = move_as_nobody(move);
    ASSERT_EQ(rerun.code, 0) << rerun.message;
    struct stat st {};
    ASSERT_EQ(lstat((out + "/res").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, nobody) << name;
    EXPECT_EQ(st.st_mode & 07777, 0700u) << name;
    EXPECT_EQ(list_dir(out + "/res"), std::vector<std::string>{"x"}) << name;
    EXPECT_EQ(read_file(out + "/res/x"), "the user's result");
}

// Another user's tree in a directory both may write (group, not sticky), named as this
// buffer's killed stage-out would have named it (the name is public once such a tree exists),
// or as an older mover named temporaries (the boot's public hash): never taken over, and left
// to its owner.
TEST(mover, another_users_temporary_tree_is_neither_taken_over_nor_removed) {
    BBKIT_MOVES_AS_NOBODY();
    const uid_t other = 1;  // daemon
    for (const std::string& name :
         {".res.bbkit-" + same_boot_suffix(), ".res.bbkit-" + old_boot_suffix()})
        expect_not_adopted(name, other, 0777);
    TempDir tmp;  // and it stays where it was
    const std::string buffer = make_buffer(tmp, "buffer");
    mkdir((buffer + "/res").c_str(), 0700);
    own_all(buffer);
    const std::string out = tmp / "out";
    mkdir(out.c_str(), 0755);
    chown(out.c_str(), nobody, nogroup);
    const std::string temp = out + "/.res.bbkit-" + same_boot_suffix();
    mkdir(temp.c_str(), 0755);
    lchown(temp.c_str(), other, other);
    const Outcome rerun = move_as_nobody(plan_out(buffer, "res", out + "/res"));
    ASSERT_EQ(rerun.code, 0) << rerun.message;
    struct stat st {};
    ASSERT_EQ(lstat(temp.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, other);
}

// The user's own tree is taken over only when it carries this buffer's tag for this boot and is
// no more open than the mover makes one: not one opened to everyone (0777 for a 0700 source),
// nor one of an older mover (named for the boot only), of another buffer, or of a move whose
// plan carries no token.
TEST(mover, only_this_buffers_own_closed_temporary_tree_is_taken_over) {
    BBKIT_MOVES_AS_NOBODY();
    expect_not_adopted(".res.bbkit-" + same_boot_suffix(), nobody, 0777);
    expect_not_adopted(".res.bbkit-" + same_boot_suffix(), nobody, 0770);
    expect_not_adopted(".res.bbkit-" + old_boot_suffix(), nobody, 0700);
    expect_not_adopted(".res.bbkit-" + same_boot_suffix("ffeeddccbbaa99887766554433221100"), nobody,
                       0700);
    expect_not_adopted(".res.bbkit-" + same_boot_suffix(), nobody, 0700, false);
}

// The control: the same tree with the right tag, the user's and closed, is taken over (what it
// holds that the source lacks goes).
TEST(mover, the_users_own_tagged_tree_is_taken_over) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    mkdir((buffer + "/res").c_str(), 0700);
    write_file(buffer + "/res/x", "the user's result");
    own_all(buffer);
    const std::string out = tmp / "out";
    mkdir(out.c_str(), 0755);
    chown(out.c_str(), nobody, nogroup);
    const std::string temp = out + "/.res.bbkit-" + same_boot_suffix();
    mkdir(temp.c_str(), 02700);
    write_file(temp + "/x", "the user's result");
    own_all(out);
    chmod(temp.c_str(), 02700);
    struct stat before {};
    ASSERT_EQ(lstat(temp.c_str(), &before), 0);
    const Outcome rerun = move_as_nobody(plan_out(buffer, "res", out + "/res"));
    ASSERT_EQ(rerun.code, 0) << rerun.message;
    struct stat after {};
    ASSERT_EQ(lstat((out + "/res").c_str(), &after), 0);
    EXPECT_EQ(after.st_ino, before.st_ino);  // the same directory, renamed into place
    EXPECT_EQ(list_dir(out), std::vector<std::string>{"res"});
}

#ifdef BBKIT_FAULT_INJECTION
// The same through a real kill: stage-out of buffer/a killed between batches, then a plan
// (a later run, the directive edited, or another buffer of the user) from buffer/b to the
// same new destination.
TEST(mover, a_tree_killed_from_one_source_is_not_published_for_another) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    for (const char* d : {"/a", "/b"})
        mkdir((buffer + d).c_str(), 0755);
    for (int i = 0; i < 200; ++i)
        write_file(buffer + "/a/f" + std::to_string(i), "a" + std::to_string(i));
    write_file(buffer + "/b/only", "b");
    own_all(buffer);
    mkdir((tmp / "out").c_str(), 0755);
    chown((tmp / "out").c_str(), nobody, nogroup);
    MovePlan first = plan_out(buffer, "a", tmp / "out/result");
    first.batch_entries = 20;
    const Outcome killed = move_as_nobody(first, "mover.batch-done:3");
    ASSERT_EQ(killed.code, 128) << killed.message;
    const Outcome second = move_as_nobody(plan_out(buffer, "b", tmp / "out/result"));
    ASSERT_EQ(second.code, 0) << second.message;
    expect_same_tree(buffer + "/b", tmp / "out/result", nobody);
}
#endif

// Stage-out to a destination inside the source tree (the outside path names the buffer). The
// old mover walked everything before creating anything; the streaming walker creates the
// temporary tree inside the directory it is listing and walks into it.
TEST(mover, destination_inside_the_source_is_copied_once) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    mkdir((buffer + "/data").c_str(), 0755);
    write_file(buffer + "/data/x", "x");
    own_all(buffer);
    const Outcome out = move_as_nobody(plan_out(buffer, "data", buffer + "/data/copy"));
    ASSERT_EQ(out.code, 0) << out.message;
    EXPECT_EQ(list_dir(buffer + "/data/copy"), std::vector<std::string>{"x"});
}
// The same overlap with a writable directory: the earlier entry's directory got its final
// times when its batch ended; the later entry's create then changes them. The old mover
// applied every directory's times at the end: data/sub kept A/sub's mtime.
TEST(mover, later_entry_inside_an_earlier_entry_keeps_the_directory_times) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    mkdir((tmp / "A").c_str(), 0755);
    mkdir((tmp / "A/sub").c_str(), 0755);
    write_file(tmp / "A/sub/inside", "inside");
    write_file(tmp / "extra", "extra");
    own_all(tmp / "A");
    lchown((tmp / "extra").c_str(), nobody, nogroup);
    set_times(tmp / "A/sub", 1500000000, 7);
    const std::string buffer = make_buffer(tmp, "buffer");
    MovePlan plan = plan_in(buffer, tmp / "A", "data");
    plan.entries.push_back({tmp / "extra", "data/sub/extra", StageType::file});
    const Outcome out = move_as_nobody(plan);
    ASSERT_EQ(out.code, 0) << out.message;
    struct stat st {};
    ASSERT_EQ(lstat((buffer + "/data/sub").c_str(), &st), 0);
    EXPECT_EQ(st.st_mtim.tv_sec, 1500000000);
    EXPECT_EQ(st.st_mtim.tv_nsec, 7);
}

#ifdef BBKIT_FAULT_INJECTION
// Hard links past the memory bound in a stage-out into a new directory: the tree stays under
// its temporary name until the links are made, so a kill never shows it with a link split.
TEST(mover, a_new_destination_with_spilled_links_appears_only_with_its_links) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    for (const char* d : {"/data", "/data/a", "/data/b"})
        mkdir((buffer + d).c_str(), 0755);
    for (int i = 0; i < 200; ++i) {
        const std::string name = "/f" + std::to_string(i);
        write_file(buffer + "/data/a" + name, "linked " + std::to_string(i));
        link((buffer + "/data/a" + name).c_str(), (buffer + "/data/b" + name).c_str());
    }
    own_all(buffer);
    mkdir((tmp / "out").c_str(), 0755);
    chown((tmp / "out").c_str(), nobody, nogroup);
    for (const std::string fault : {"mover.renamed:1", "mover.batch-done:6"}) {
        const std::string dest = tmp / "out/" + fault.substr(6, 7);
        MovePlan plan = plan_out(buffer, "data", dest);
        plan.memory_limit = 64 << 10;  // room for a few dozen pending links
        plan.batch_entries = 50;
        const Outcome killed = move_as_nobody(plan, fault.c_str());
        EXPECT_EQ(killed.code, 128) << fault << ": " << killed.message;
        if (access(dest.c_str(), F_OK) == 0)  // absent, or complete with every link
            expect_same_tree(buffer + "/data", dest, nobody);
        const Outcome rerun = move_as_nobody(plan);
        ASSERT_EQ(rerun.code, 0) << rerun.message;
        expect_same_tree(buffer + "/data", dest, nobody);
    }
    EXPECT_EQ(list_dir(tmp / "out"), (std::vector<std::string>{"batch-d", "renamed"}));
}
#endif

// Warnings are kept up to a bound, whatever the number of files that cause one.
TEST(mover, warnings_stay_bounded_and_say_how_many_more) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string src = tmp / "src";
    mkdir(src.c_str(), 0755);
    for (int i = 0; i < 150; ++i)
        mkfifo((src + "/p" + std::to_string(i)).c_str(), 0644);
    for (int i = 0; i < 150; ++i)
        mknod((src + "/d" + std::to_string(i)).c_str(), S_IFCHR | 0644, makedev(1, 3));
    own_all(src);
    const std::string buffer = make_buffer(tmp, "buffer");
    const Outcome out = move_as_nobody(plan_in(buffer, src, "data"));
    ASSERT_EQ(out.code, 0) << out.message;
    ASSERT_EQ(out.warnings.size(), 101u);
    EXPECT_EQ(out.warnings.back(), "50 more warnings");
}

// A plan over two buffer roots reports one set of counters for the whole plan: the job
// buffer's move, then the persistent buffer's, its counters starting where the first ended.
// The measurement counts a hard-linked file once per name, the walks once: the final totals
// are the walks' and equal what was done.
TEST(mover, a_plan_over_two_roots_reports_its_counters_as_one) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string job_src = tmp / "job-src";
    const std::string shared_src = tmp / "shared-src";
    mkdir(job_src.c_str(), 0755);
    mkdir(shared_src.c_str(), 0755);
    write_file(job_src + "/a", std::string(100, 'a'));
    write_file(job_src + "/b", std::string(20, 'b'));
    ASSERT_EQ(link((job_src + "/a").c_str(), (job_src + "/a2").c_str()), 0);
    write_file(shared_src + "/c", std::string(3, 'c'));
    StagePlan plan;
    plan.direction = StageDirection::in;
    plan.job_root = make_buffer(tmp, "job");
    plan.persistent_roots["shared"] = make_buffer(tmp, "shared");
    plan.capacity = 1 << 20;
    plan.threads = 2;
    StageDirective job;
    job.type = StageType::directory;
    job.source = job_src;
    job.destination = "in";
    StageDirective shared = job;
    shared.buffer = "shared";
    shared.source = shared_src;
    plan.stages = {job, shared};

    std::vector<PlanProgress> reports;
    const MoveSummary summary =
        run_stage_plan(plan, [&](const PlanProgress& p) { reports.push_back(p); });
    EXPECT_EQ(summary.files, 4u);  // a, b, a2 (a link), c
    EXPECT_EQ(summary.bytes, 123u);
    ASSERT_FALSE(reports.empty());
    const PlanProgress& last = reports.back();
    EXPECT_EQ(last.phase, StagePhase::copying);
    // Entries: each root's directory "in" and the files below it.
    EXPECT_EQ(last.files_done, 6u);
    EXPECT_EQ(last.files_total, 6u);
    EXPECT_EQ(last.bytes_done, 123u);
    EXPECT_EQ(last.bytes_total, 123u);
    std::uint64_t files_done = 0, bytes_done = 0;
    for (const PlanProgress& p : reports) {
        EXPECT_GE(p.files_done, files_done);
        EXPECT_GE(p.bytes_done, bytes_done);
        EXPECT_LE(p.files_done, p.files_total);
        EXPECT_LE(p.bytes_done, p.bytes_total);
        files_done = p.files_done;
        bytes_done = p.bytes_done;
    }
    EXPECT_EQ(read_file(plan.persistent_roots["shared"] + "/in/c"), "ccc");
    struct stat a {
    }, a2{};
    ASSERT_EQ(lstat((plan.job_root + "/in/a").c_str(), &a), 0);
    ASSERT_EQ(lstat((plan.job_root + "/in/a2").c_str(), &a2), 0);
    EXPECT_EQ(a.st_ino, a2.st_ino);
}

// ---- node-local pools: sharded entries, entries that keep what is there ------------------

// Every non-directory below `root`, as paths relative to it, sorted.
std::vector<std::string> non_directories(const std::string& root) {
    std::vector<std::string> out;
    for_each_entry(root, [&](const std::string& path) {
        struct stat st {};
        if (lstat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
            out.push_back(path.substr(root.size() + 1));
    });
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<std::string> directories(const std::string& root) {
    std::vector<std::string> out;
    for_each_entry(root, [&](const std::string& path) {
        struct stat st {};
        if (lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
            out.push_back(path.substr(root.size() + 1));
    });
    std::sort(out.begin(), out.end());
    return out;
}

// About 500 non-directories in nested directories: files of several sizes, symlinks, fifos and
// hard-linked pairs whose names are judged each on its own. Owned by nobody, times set.
void make_shard_tree(const std::string& root) {
    ASSERT_EQ(mkdir(root.c_str(), 0755), 0);
    for (int d = 0; d < 10; ++d) {
        const std::string dir = root + "/d" + std::to_string(d);
        ASSERT_EQ(mkdir(dir.c_str(), 0750), 0);
        ASSERT_EQ(mkdir((dir + "/sub").c_str(), 0700), 0);
        for (int f = 0; f < 45; ++f)
            write_file(dir + "/f" + std::to_string(f), std::string(1 + d * 45 + f, 'x'));
        write_file(dir + "/sub/deep", "deep " + std::to_string(d));
        symlink(("f" + std::to_string(d)).c_str(), (dir + "/link").c_str());
        write_file(root + "/top" + std::to_string(d), "top " + std::to_string(d));
        ASSERT_EQ(link((root + "/top" + std::to_string(d)).c_str(), (dir + "/hard").c_str()), 0);
    }
    ASSERT_EQ(mkdir((root + "/empty").c_str(), 0755), 0);
    mkfifo((root + "/fifo").c_str(), 0640);
    mkfifo((root + "/d3/fifo").c_str(), 0600);
    for (int f = 0; f < 40; ++f)
        write_file(root + "/f" + std::to_string(f), "top file " + std::to_string(f));
    int counter = 0;
    for_each_entry(root, [&](const std::string& path) {
        lchown(path.c_str(), nobody, nogroup);
        ++counter;
        set_times(path, 1600000000 + counter, counter);
    });
    lchown(root.c_str(), nobody, nogroup);
}

std::string base_name(const std::string& path) {
    return path.substr(path.rfind('/') + 1);
}

std::uint64_t size_of(const std::string& path) {
    struct stat st {};
    return lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)
               ? static_cast<std::uint64_t>(st.st_size)
               : 0;
}

// What `count` shards of `src` wrote into dests[i]: each non-directory in exactly the shard its
// relative path hashes to (and nowhere else), the union the source, every directory in every
// shard with its mode and times, each copy the same as its source (hard-linked names whose
// shards differ are copies of their own).
void expect_sharded(const std::string& src, const std::vector<std::string>& dests) {
    const auto count = static_cast<std::uint32_t>(dests.size());
    const std::vector<std::string> all = non_directories(src);
    std::vector<std::string> seen;
    for (std::uint32_t i = 0; i < count; ++i) {
        for (const std::string& name : non_directories(dests[i])) {
            seen.push_back(name);
            EXPECT_EQ(shard_of(name, count), i) << name << " in shard " << i << " of " << count;
        }
        EXPECT_EQ(directories(dests[i]), directories(src)) << "shard " << i << " of " << count;
        for (const std::string& dir : directories(src)) {
            struct stat a {
            }, b{};
            ASSERT_EQ(lstat((src + "/" + dir).c_str(), &a), 0);
            ASSERT_EQ(lstat((dests[i] + "/" + dir).c_str(), &b), 0) << dir;
            EXPECT_EQ(a.st_mode, b.st_mode) << dir;
            EXPECT_EQ(a.st_mtim.tv_sec, b.st_mtim.tv_sec) << dir;
            EXPECT_EQ(a.st_mtim.tv_nsec, b.st_mtim.tv_nsec) << dir;
        }
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, all) << "over " << count << " shards";
    for (const std::string& name : all) {
        const std::string copy = dests[shard_of(name, count)] + "/" + name;
        struct stat a {
        }, b{};
        ASSERT_EQ(lstat((src + "/" + name).c_str(), &a), 0);
        ASSERT_EQ(lstat(copy.c_str(), &b), 0) << copy;
        EXPECT_EQ(a.st_mode, b.st_mode) << copy;
        EXPECT_EQ(a.st_mtim.tv_nsec, b.st_mtim.tv_nsec) << copy;
        if (S_ISREG(a.st_mode)) {
            EXPECT_EQ(read_file(src + "/" + name), read_file(copy)) << copy;
        }
    }
}

TEST(mover, sharded_stage_in_puts_each_file_in_exactly_one_shard) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_shard_tree(tmp / "src");
    const std::vector<std::string> all = non_directories(tmp / "src");
    ASSERT_GE(all.size(), 500u);
    const std::size_t dirs = directories(tmp / "src").size() + 1;  // and the entry's own
    bool split_links = false, kept_links = false;
    for (std::uint32_t count = 1; count <= 4; ++count) {
        std::vector<std::string> dests;
        for (std::uint32_t i = 0; i < count; ++i) {
            const std::string buffer =
                make_buffer(tmp, "buffer-" + std::to_string(count) + "-" + std::to_string(i));
            MovePlan in = plan_in(buffer, tmp / "src", "data");
            in.entries[0].shard_index = i;
            in.entries[0].shard_count = count;
            in.batch_entries = 64;
            MoveProgress last;
            const MoveSummary summary = run_move(in, [&](const MoveProgress& p) { last = p; });
            dests.push_back(buffer + "/data");
            // Counted: the directories and this shard's share only (the bytes of a hard-linked
            // file once, with the first of its names in the shard).
            std::uint64_t files = 0, bytes = 0;
            std::set<ino_t> inodes;
            for (const std::string& name : all) {
                struct stat st {};
                if (shard_of(name, count) != i || lstat((tmp / "src/" + name).c_str(), &st) != 0)
                    continue;
                ++files;
                if (inodes.insert(st.st_ino).second)
                    bytes += size_of(tmp / "src/" + name);
            }
            EXPECT_EQ(summary.files, files);
            EXPECT_EQ(summary.bytes, bytes);
            EXPECT_EQ(last.files_total, files + dirs);
            EXPECT_EQ(last.files_done, files + dirs);
            EXPECT_EQ(last.bytes_total, bytes);
        }
        expect_sharded(tmp / "src", dests);
        for (int d = 0; d < 10; ++d) {
            const std::string top = "top" + std::to_string(d);
            const std::string hard = "d" + std::to_string(d) + "/hard";
            struct stat a {
            }, b{};
            ASSERT_EQ(lstat((dests[shard_of(top, count)] + "/" + top).c_str(), &a), 0);
            ASSERT_EQ(lstat((dests[shard_of(hard, count)] + "/" + hard).c_str(), &b), 0);
            if (shard_of(top, count) == shard_of(hard, count)) {
                EXPECT_EQ(a.st_ino, b.st_ino) << hard << " over " << count << " shards";
                kept_links = true;
            } else {
                EXPECT_EQ(a.st_nlink, 1u);
                split_links = split_links || count > 1;
            }
        }
    }
    EXPECT_TRUE(kept_links && split_links);  // the tree exercises both
}

TEST(mover, sharded_stage_out_moves_each_file_from_exactly_one_shard) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    make_shard_tree(buffer + "/data");
    mkdir((tmp / "outs").c_str(), 0755);
    chown((tmp / "outs").c_str(), nobody, nogroup);
    for (const bool durable : {true, false}) {
        std::vector<std::string> dests;
        for (std::uint32_t i = 0; i < 3; ++i) {
            const std::string out =
                tmp / ("outs/" + std::to_string(durable) + "-" + std::to_string(i));
            MovePlan plan = plan_out(buffer, "data", out);
            plan.durable = durable;
            plan.entries[0].shard_index = i;
            plan.entries[0].shard_count = 3;
            const Outcome moved = move_as_nobody(plan);
            ASSERT_EQ(moved.code, 0) << moved.message;
            dests.push_back(out);
            EXPECT_FALSE(has_temporaries(out));
        }
        expect_sharded(buffer + "/data", dests);
    }
}

// type=file: the source's base name decides, whatever its directory or its destination; a
// file of another shard makes nothing on this one, not even the destination's parents.
TEST(mover, a_sharded_file_entry_hashes_its_base_name) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_shard_tree(tmp / "src");
    const std::vector<std::string> sources = {"d0/f1", "d1/f1", "d2/f5", "f30"};
    for (std::uint32_t i = 0; i < 2; ++i) {
        const std::string buffer = make_buffer(tmp, "buffer" + std::to_string(i));
        MovePlan in;
        in.buffer_root = buffer;
        for (std::size_t k = 0; k < sources.size(); ++k)
            in.entries.push_back({tmp / "src/" + sources[k], "files" + std::to_string(k) + "/copy",
                                  StageType::file, i, 2});
        std::uint64_t expected = 0;
        for (const std::string& source : sources)
            expected += shard_of(base_name(source), 2) == i ? 1 : 0;
        EXPECT_EQ(run_move(in, {}).files, expected);
        for (std::size_t k = 0; k < sources.size(); ++k) {
            const bool mine = shard_of(base_name(sources[k]), 2) == i;
            const std::string copy = buffer + "/files" + std::to_string(k);
            EXPECT_EQ(read_file(copy + "/copy"),
                      mine ? read_file(tmp / "src/" + sources[k]) : "<unreadable>")
                << sources[k] << " in shard " << i;
            EXPECT_EQ(access(copy.c_str(), F_OK) == 0, mine) << copy;
        }
    }
    EXPECT_EQ(shard_of("f1", 2), shard_of(base_name("d1/f1"), 2));
    EXPECT_NE(shard_of("f1", 2), shard_of("f5", 2));  // both shards receive something
}

// MovePlan::capacity holds what this shard receives, not the whole tree.
TEST(mover, the_capacity_counts_only_the_shard) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_wide_tree(tmp / "src", 3, 200);  // 600 files of 6-9 bytes
    std::uint64_t mine = 0, all = 0;
    for (const std::string& name : non_directories(tmp / "src")) {
        all += size_of(tmp / "src/" + name);
        if (shard_of(name, 4) == 1)
            mine += size_of(tmp / "src/" + name);
    }
    ASSERT_LT(mine, all / 2);
    const std::string buffer = make_buffer(tmp, "buffer");
    MovePlan in = plan_in(buffer, tmp / "src", "data");
    in.entries[0].shard_index = 1;
    in.entries[0].shard_count = 4;
    in.capacity = mine - 1;
    try {
        run_move(in, {});
        ADD_FAILURE() << "the shard was copied into less than it needs";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ExitCode::data) << e.what();
        EXPECT_NE(std::string(e.what()).find("stage-in needs at least"), std::string::npos)
            << e.what();
    }
    in.capacity = mine;
    const MoveSummary summary = run_move(in, {});
    std::uint64_t copied = 0;
    for (const std::string& name : non_directories(buffer + "/data")) {
        EXPECT_EQ(shard_of(name, 4), 1u) << name;
        copied += size_of(buffer + "/data/" + name);
    }
    EXPECT_EQ(copied, mine);
    EXPECT_GT(summary.files, 0u);
}

TEST(mover, invalid_shards_are_refused_before_anything_is_touched) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_wide_tree(tmp / "src", 1, 3);
    const std::string buffer = make_buffer(tmp, "buffer");
    struct Case {
        std::uint32_t index, count;
        const char* message;
    };
    for (const Case& c : {Case{0, 0, "invalid shard count 0: at least 1 is needed"},
                          Case{2, 2, "invalid shard index 2: not below the shard count 2"},
                          Case{7, 1, "invalid shard index 7: not below the shard count 1"}}) {
        MovePlan in = plan_in(buffer, tmp / "src", "data");
        in.entries.push_back({tmp / "src/d0/f0", "f0", StageType::file, c.index, c.count});
        const Outcome out = move_as_nobody(in);
        EXPECT_EQ(out.code, 65) << out.message;
        EXPECT_EQ(out.message, c.message);
        EXPECT_TRUE(list_dir(buffer).empty());
    }
}

// A node's results in buffer/data: a file, one in a subdirectory, a file every node has alike
// (same size and mtime), a symlink, a fifo and two hard-linked names.
void make_node_results(const std::string& buffer, const std::string& node) {
    const std::string data = buffer + "/data";
    mkdir(data.c_str(), 0755);
    mkdir((data + "/shared").c_str(), 0750);
    write_file(data + "/shared/" + node + ".txt", "result of " + node);
    write_file(data + "/r.dat", "r.dat of " + node);
    write_file(data + "/common", "the same everywhere");
    symlink("common", (data + "/link").c_str());
    mkfifo((data + "/fifo").c_str(), 0640);
    write_file(data + "/h1", "linked");
    link((data + "/h1").c_str(), (data + "/h2").c_str());
    own_all(data);
    for (const char* name : {"common", "link", "fifo", "h1"})
        set_times(data + "/" + name, 1700000000, 7);
    set_times(data + "/r.dat", node == "n1" ? 1700000001 : 1700000002, 0);
}

MovePlan merge_out(const std::string& buffer, const std::string& out, bool durable) {
    MovePlan plan = plan_out(buffer, "data", out);
    plan.durable = durable;
    plan.entries[0].keep_existing = true;
    return plan;
}

std::string refusal(const std::string& path) {
    return "exists (another node's result): " + path;
}

TEST(mover, keep_existing_refuses_another_writers_different_file) {
    BBKIT_MOVES_AS_NOBODY();
    for (const bool durable : {true, false}) {
        TempDir tmp;
        const std::string buffer = make_buffer(tmp, "buffer");
        make_node_results(buffer, "n1");
        mkdir((tmp / "out").c_str(), 0755);
        chown((tmp / "out").c_str(), nobody, nogroup);
        // Another node's r.dat: same size, other mtime.
        write_file(tmp / "out/r.dat", "r.dat of n2");
        set_times(tmp / "out/r.dat", 1700000002, 0);
        lchown((tmp / "out/r.dat").c_str(), nobody, nogroup);
        const Outcome out = move_as_nobody(merge_out(buffer, tmp / "out", durable));
        EXPECT_EQ(out.code, 73) << out.message;
        EXPECT_EQ(out.message, refusal(tmp / "out/r.dat"));
        EXPECT_EQ(read_file(tmp / "out/r.dat"), "r.dat of n2");
        EXPECT_FALSE(has_temporaries(tmp / "out"));

        // Another size, the same mtime: refused too. Without keep_existing it is replaced.
        write_file(tmp / "out/r.dat", "r.dat of node 2");
        set_times(tmp / "out/r.dat", 1700000001, 0);
        EXPECT_EQ(move_as_nobody(merge_out(buffer, tmp / "out", durable)).code, 73);
        EXPECT_EQ(read_file(tmp / "out/r.dat"), "r.dat of node 2");
        MovePlan replace = merge_out(buffer, tmp / "out", durable);
        replace.entries[0].keep_existing = false;
        const Outcome replaced = move_as_nobody(replace);
        ASSERT_EQ(replaced.code, 0) << replaced.message;
        EXPECT_EQ(read_file(tmp / "out/r.dat"), "r.dat of n1");
    }
}

// Each kind of non-directory taken by another writer is refused; a non-directory where a
// directory of the tree goes too.
TEST(mover, keep_existing_refuses_every_kind_taken_by_another_writer) {
    BBKIT_MOVES_AS_NOBODY();
    for (const bool durable : {true, false}) {
        for (const std::string name : {"link", "fifo", "h2", "shared"}) {
            TempDir tmp;
            const std::string buffer = make_buffer(tmp, "buffer");
            make_node_results(buffer, "n1");
            mkdir((tmp / "out").c_str(), 0755);
            write_file(tmp / ("out/" + name), "another node's");
            own_all(tmp / "out");
            const Outcome out = move_as_nobody(merge_out(buffer, tmp / "out", durable));
            EXPECT_EQ(out.code, 73) << name << ": " << out.message;
            EXPECT_EQ(out.message, refusal(tmp / ("out/" + name)));
            EXPECT_EQ(read_file(tmp / ("out/" + name)), "another node's");
            EXPECT_FALSE(has_temporaries(tmp / "out")) << name;
        }
    }
}

// A complete copy (what a rerun skips) is left as it is, whoever wrote it: even other bytes of
// the same size and mtime, which is all a rerun looks at.
TEST(mover, keep_existing_skips_what_is_already_complete) {
    BBKIT_MOVES_AS_NOBODY();
    for (const bool durable : {true, false}) {
        TempDir tmp;
        const std::string buffer = make_buffer(tmp, "buffer");
        make_node_results(buffer, "n1");
        mkdir((tmp / "out").c_str(), 0755);
        write_file(tmp / "out/common", "THE SAME EVERYWHERE");
        write_file(tmp / "out/h2", "LINKED");
        symlink("common", (tmp / "out/link").c_str());
        mkfifo((tmp / "out/fifo").c_str(), 0640);
        own_all(tmp / "out");
        for (const char* name : {"common", "h2", "link", "fifo"})
            set_times(tmp / "out/" + name, 1700000000, 7);
        const Outcome out = move_as_nobody(merge_out(buffer, tmp / "out", durable));
        ASSERT_EQ(out.code, 0) << out.message;
        EXPECT_EQ(out.skipped, 4u);
        EXPECT_EQ(out.files, 3u);  // r.dat, shared/n1.txt, h1
        EXPECT_EQ(read_file(tmp / "out/common"), "THE SAME EVERYWHERE");
        EXPECT_EQ(read_file(tmp / "out/h2"), "LINKED");
        EXPECT_EQ(access((tmp / "out/h1").c_str(), F_OK), 0);
        EXPECT_FALSE(has_temporaries(tmp / "out"));
        const Outcome again = move_as_nobody(merge_out(buffer, tmp / "out", durable));
        ASSERT_EQ(again.code, 0) << again.message;  // a rerun
        EXPECT_EQ(again.files, 0u);
    }
}

// Two nodes' results merge into one destination: directories merged, each node's files, the
// files alike on both nodes once.
TEST(mover, keep_existing_merges_two_nodes_into_one_tree) {
    BBKIT_MOVES_AS_NOBODY();
    for (const bool durable : {true, false}) {
        TempDir tmp;
        const std::string n1 = make_buffer(tmp, "n1");
        const std::string n2 = make_buffer(tmp, "n2");
        make_node_results(n1, "n1");
        make_node_results(n2, "n2");
        unlink((n2 + "/data/r.dat").c_str());
        mkdir((tmp / "out").c_str(), 0755);
        chown((tmp / "out").c_str(), nobody, nogroup);
        const Outcome first = move_as_nobody(merge_out(n1, tmp / "out/merged", durable));
        ASSERT_EQ(first.code, 0) << first.message;
        MovePlan second_plan = merge_out(n2, tmp / "out/merged", durable);
        second_plan.temp_token = "ffeeddccbbaa99887766554433221100";  // another node's buffer
        const Outcome second = move_as_nobody(second_plan);
        ASSERT_EQ(second.code, 0) << second.message;
        EXPECT_EQ(second.files, 1u);  // shared/n2.txt; the rest is n1's, alike
        EXPECT_EQ(list_dir(tmp / "out/merged/shared"),
                  (std::vector<std::string>{"n1.txt", "n2.txt"}));
        EXPECT_EQ(read_file(tmp / "out/merged/shared/n2.txt"), "result of n2");
        EXPECT_EQ(read_file(tmp / "out/merged/r.dat"), "r.dat of n1");
        EXPECT_FALSE(has_temporaries(tmp / "out"));
    }
}

// Another writer's live temporaries in a shared destination look like a killed move's: a
// keep_existing entry leaves them (only its own buffer's of this boot go).
TEST(mover, keep_existing_leaves_other_writers_temporaries) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    make_node_results(buffer, "n1");
    mkdir((tmp / "out").c_str(), 0755);
    const std::string theirs = ".r.dat.bbkit-0123456789abcdef0123456789ab";
    write_file(tmp / ("out/" + theirs), "another node, still writing");
    mkdir((tmp / "out/shared").c_str(), 0755);
    const std::string in_shared = ".n1.txt.bbkit-0123456789abcdef0123456789ab";
    write_file(tmp / ("out/shared/" + in_shared), "another node, still writing");
    own_all(tmp / "out");
    const Outcome kept = move_as_nobody(merge_out(buffer, tmp / "out", true));
    ASSERT_EQ(kept.code, 0) << kept.message;
    EXPECT_EQ(read_file(tmp / ("out/" + theirs)), "another node, still writing");
    EXPECT_EQ(read_file(tmp / ("out/shared/" + in_shared)), "another node, still writing");
    // Without keep_existing they are a killed move's, and go.
    MovePlan plain = merge_out(buffer, tmp / "out", true);
    plain.entries[0].keep_existing = false;
    ASSERT_EQ(move_as_nobody(plain).code, 0);
    EXPECT_EQ(read_file(tmp / ("out/" + theirs)), "<unreadable>");
}

#ifdef BBKIT_FAULT_INJECTION
// Runs `plan` as nobody with BBKIT_FAULT=`fault` (a :stop point), calls `meanwhile` while the
// move is stopped there, then lets it go on.
Outcome move_stopped(const MovePlan& plan, const char* fault,
                     const std::function<void()>& meanwhile) {
    int fds[2];
    if (pipe(fds) != 0)
        return {};
    const pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        std::string report = "0 ";
        if (setgroups(0, nullptr) != 0 || setresgid(nogroup, nogroup, nogroup) != 0 ||
            setresuid(nobody, nobody, nobody) != 0)
            _exit(71);
        setenv("BBKIT_FAULT", fault, 1);
        fault_rearm();
        try {
            const MoveSummary s = run_move(plan, nullptr);
            report += std::to_string(s.files) + " " + std::to_string(s.skipped);
        } catch (const Error& e) {
            report = std::to_string(e.exit_status()) + " " + e.what();
        }
        (void)!write(fds[1], report.data(), report.size());
        _exit(0);
    }
    close(fds[1]);
    int status = 0;
    Outcome out;
    if (waitpid(pid, &status, WUNTRACED) != pid || !WIFSTOPPED(status)) {
        out.message = "the move did not stop at " + std::string(fault);
        close(fds[0]);
        return out;
    }
    meanwhile();
    kill(pid, SIGCONT);
    std::string report;
    char buf[4096];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;)
        report.append(buf, static_cast<std::size_t>(n));
    close(fds[0]);
    waitpid(pid, &status, 0);
    const std::size_t blank = report.find(' ');
    out.code = std::atoi(report.substr(0, blank).c_str());
    out.message = report.substr(blank + 1);
    if (out.code == 0)
        std::sscanf(out.message.c_str(), "%lu %lu", &out.files, &out.skipped);
    return out;
}

// The check before the copy is not all: another writer's file that appears after it, before
// the temporary is renamed, is not replaced (RENAME_NOREPLACE); an identical one is kept.
TEST(mover, keep_existing_never_renames_over_a_file_that_appeared_meanwhile) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    make_node_results(buffer, "n1");
    mkdir((tmp / "out").c_str(), 0755);
    chown((tmp / "out").c_str(), nobody, nogroup);
    const Outcome refused =
        move_stopped(merge_out(buffer, tmp / "out", true), "mover.before-renames:1:stop", [&] {
            write_file(tmp / "out/r.dat", "another node's");
            lchown((tmp / "out/r.dat").c_str(), nobody, nogroup);
        });
    EXPECT_EQ(refused.code, 73) << refused.message;
    EXPECT_EQ(refused.message, refusal(tmp / "out/r.dat"));
    EXPECT_EQ(read_file(tmp / "out/r.dat"), "another node's");
    EXPECT_FALSE(has_temporaries(tmp / "out"));

    ASSERT_EQ(unlink((tmp / "out/r.dat").c_str()), 0);
    unlink((tmp / "out/common").c_str());  // where the failed move had put it already
    const Outcome alike =
        move_stopped(merge_out(buffer, tmp / "out", true), "mover.before-renames:1:stop", [&] {
            write_file(tmp / "out/common", "THE SAME EVERYWHERE");
            set_times(tmp / "out/common", 1700000000, 7);
            lchown((tmp / "out/common").c_str(), nobody, nogroup);
        });
    ASSERT_EQ(alike.code, 0) << alike.message;
    EXPECT_EQ(read_file(tmp / "out/common"), "THE SAME EVERYWHERE");
    EXPECT_EQ(read_file(tmp / "out/r.dat"), "r.dat of n1");
    EXPECT_FALSE(has_temporaries(tmp / "out"));
}

// A move that does not rename creates with O_EXCL: a file that appeared after the walk is not
// replaced.
TEST(mover, keep_existing_never_truncates_a_file_that_appeared_meanwhile) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    make_node_results(buffer, "n1");
    mkdir((tmp / "out").c_str(), 0755);
    chown((tmp / "out").c_str(), nobody, nogroup);
    const Outcome refused =
        move_stopped(merge_out(buffer, tmp / "out", false), "mover.walked:1:stop", [&] {
            write_file(tmp / "out/r.dat", "another node's");
            lchown((tmp / "out/r.dat").c_str(), nobody, nogroup);
        });
    EXPECT_EQ(refused.code, 73) << refused.message;
    EXPECT_EQ(refused.message, refusal(tmp / "out/r.dat"));
    EXPECT_EQ(read_file(tmp / "out/r.dat"), "another node's");
}

// Two nodes write into one new destination at once. A durable move builds no tree under a
// temporary name there: the one published second would find the first in its place.
TEST(mover, keep_existing_merges_with_a_node_writing_at_the_same_time) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string n1 = make_buffer(tmp, "n1");
    const std::string n2 = make_buffer(tmp, "n2");
    make_node_results(n1, "n1");
    make_node_results(n2, "n2");
    unlink((n2 + "/data/r.dat").c_str());
    mkdir((tmp / "out").c_str(), 0755);
    chown((tmp / "out").c_str(), nobody, nogroup);
    MovePlan second = merge_out(n2, tmp / "out/merged", true);
    second.temp_token = "ffeeddccbbaa99887766554433221100";  // another node's buffer
    Outcome during;
    const Outcome first =
        move_stopped(merge_out(n1, tmp / "out/merged", true), "mover.before-renames:1:stop",
                     [&] { during = move_as_nobody(second); });
    ASSERT_EQ(during.code, 0) << during.message;
    ASSERT_EQ(first.code, 0) << first.message;
    EXPECT_EQ(list_dir(tmp / "out"), std::vector<std::string>{"merged"});
    EXPECT_EQ(list_dir(tmp / "out/merged/shared"), (std::vector<std::string>{"n1.txt", "n2.txt"}));
    EXPECT_EQ(read_file(tmp / "out/merged/r.dat"), "r.dat of n1");
    EXPECT_EQ(read_file(tmp / "out/merged/common"), "the same everywhere");
    EXPECT_FALSE(has_temporaries(tmp / "out"));
}
#endif

}  // namespace
}  // namespace bbkit
