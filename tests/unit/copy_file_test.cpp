#include "bbkit/mover/copy_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bbkit/error.hpp"
#include "move_test_support.hpp"

namespace bbkit {
namespace {

using namespace move_test;

struct Copied {
    int code = 0;  // 0, or the Error's exit status
    std::string message;
    bool created = false;  // open_pair called `create`
};

// Copies `src` to `dst` the way a mover worker does (open_pair, size, copy_data, finish_file),
// in this process, in pieces of [0, cut) and [cut, size) when `cut` is given.
Copied copy_one(const std::string& src, const std::string& dst, bool direct_io = false,
                off_t cut = 0) {
    Copied out;
    try {
        FileCopy file;
        if (lstat(src.c_str(), &file.st) != 0)
            throw Error(ExitCode::no_input, "no source " + src);
        file.from = src;
        file.to = dst;
        const Fd dir(open(std::filesystem::path(src).parent_path().c_str(),
                          O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        const FilePair pair =
            open_pair(file, dir.get(), std::filesystem::path(src).filename(), direct_io, [&] {
                out.created = true;
                return Fd(open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
            });
        size_destination(file, pair.dst.get(), pair.direct && !is_sparse(file.st));
        CopyBuffers buffers;
        const std::atomic<bool> stop{false};
        const off_t size = file.st.st_size;
        for (const auto& [from, to] :
             cut > 0 ? std::vector<std::pair<off_t, off_t>>{{0, cut}, {cut, size}}
                     : std::vector<std::pair<off_t, off_t>>{{0, size}})
            copy_data(file, pair.src.get(), pair.dst.get(), from, to, pair.direct, cut > 0, buffers,
                      stop);
        finish_file(file, pair.src.get(), pair.dst.get(), true, InitialMetadata{}, false,
                    [](const std::string&) {});
    } catch (const Error& e) {
        out.code = e.exit_status();
        out.message = e.what();
    }
    return out;
}

TEST(copy_file, a_sparse_file_copies_byte_exact_and_keeps_its_holes) {
    TempDir tmp;
    const std::string src = tmp / "sparse";
    write_at(src, 0, "head");
    write_at(src, 5 << 20, std::string(8192, 'm'));
    write_at(src, (12 << 20) - 4, "tail");
    const Copied copied = copy_one(src, tmp / "copy");
    ASSERT_EQ(copied.code, 0) << copied.message;
    EXPECT_TRUE(read_file(src) == read_file(tmp / "copy"));
    struct stat a {
    }, b{};
    ASSERT_EQ(stat(src.c_str(), &a), 0);
    ASSERT_EQ(stat((tmp / "copy").c_str(), &b), 0);
    EXPECT_EQ(a.st_size, b.st_size);
    EXPECT_LE(b.st_blocks, a.st_blocks + 8) << "holes filled";
}

TEST(copy_file, a_large_dense_file_copies_byte_exact_in_pieces) {
    TempDir tmp;
    const std::string src = tmp / "dense";
    write_file(src, dense_data((std::size_t{20} << 20) + 4097, 7));
    for (const off_t cut : {off_t{0}, off_t{9} << 20}) {
        const std::string dst = tmp / ("copy" + std::to_string(cut));
        const Copied copied = copy_one(src, dst, false, cut);
        ASSERT_EQ(copied.code, 0) << copied.message;
        EXPECT_TRUE(read_file(src) == read_file(dst)) << "cut at " << cut;
    }
}

// O_DIRECT where the file system allows it, buffered where it does not: byte exact either way,
// the padding of the last partial block cut off.
TEST(copy_file, direct_io_copies_an_unaligned_tail_exactly) {
    TempDir tmp;
    const std::string src = tmp / "single";
    write_file(src, dense_data((std::size_t{9} << 20) + 1, 5));
    const Copied copied = copy_one(src, tmp / "copy", true);
    ASSERT_EQ(copied.code, 0) << copied.message;
    EXPECT_TRUE(read_file(src) == read_file(tmp / "copy"));
}

// A symlink where a file was walked is never followed, and nothing is created.
TEST(copy_file, a_source_that_is_a_symlink_is_refused) {
    TempDir tmp;
    write_file(tmp / "target", "secret");
    ASSERT_EQ(symlink((tmp / "target").c_str(), (tmp / "link").c_str()), 0);
    FileCopy file;
    ASSERT_EQ(stat((tmp / "target").c_str(), &file.st), 0);  // what the walk saw before a swap
    file.from = tmp / "link";
    file.to = tmp / "copy";
    const Fd dir(open(tmp.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    bool created = false;
    try {
        open_pair(file, dir.get(), "link", false, [&] {
            created = true;
            return Fd();
        });
        ADD_FAILURE() << "a symlink was opened";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ExitCode::no_perm) << e.what();
        EXPECT_NE(std::string(e.what()).find(tmp / "link"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(created);
}

TEST(copy_file, a_source_that_is_no_longer_a_file_is_refused) {
    TempDir tmp;
    FileCopy file;
    mkdir((tmp / "dir").c_str(), 0755);
    ASSERT_EQ(stat((tmp / "dir").c_str(), &file.st), 0);
    file.from = tmp / "dir";
    const Fd dir(open(tmp.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    try {
        open_pair(file, dir.get(), "dir", false, [] { return Fd(); });
        ADD_FAILURE() << "a directory was copied as a file";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ExitCode::io) << e.what();
        EXPECT_NE(std::string(e.what()).find("changed during the move"), std::string::npos);
    }
}

// A source written while it was copied: the copy is refused (exit 74), not reported done.
TEST(copy_file, a_source_changed_during_the_copy_is_refused) {
    TempDir tmp;
    write_file(tmp / "src", "before");
    FileCopy file;
    ASSERT_EQ(stat((tmp / "src").c_str(), &file.st), 0);
    file.from = tmp / "src";
    file.to = tmp / "copy";
    const Fd src(open((tmp / "src").c_str(), O_RDONLY | O_CLOEXEC));
    const Fd dst(open((tmp / "copy").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    write_at(tmp / "src", 6, " and after");
    try {
        finish_file(file, src.get(), dst.get(), true, InitialMetadata{}, false,
                    [](const std::string&) {});
        ADD_FAILURE() << "a changed source was reported copied";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ExitCode::io) << e.what();
        EXPECT_NE(std::string(e.what()).find("changed while it was copied"), std::string::npos);
    }
}

TEST(copy_file, a_complete_copy_has_the_same_size_and_nanosecond_mtime) {
    TempDir tmp;
    write_file(tmp / "src", "content");
    write_file(tmp / "copy", "content");
    set_times(tmp / "src", 1600000000, 123456789);
    set_times(tmp / "copy", 1600000000, 123456789);
    struct stat st {};
    ASSERT_EQ(stat((tmp / "src").c_str(), &st), 0);
    const Fd dir(open(tmp.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    EXPECT_TRUE(is_complete_copy(dir.get(), "copy", st));
    set_times(tmp / "copy", 1600000000, 123456788);
    EXPECT_FALSE(is_complete_copy(dir.get(), "copy", st));
    write_file(tmp / "copy", "content!");
    set_times(tmp / "copy", 1600000000, 123456789);
    EXPECT_FALSE(is_complete_copy(dir.get(), "copy", st));
    EXPECT_FALSE(is_complete_copy(dir.get(), "absent", st));
}

// Another worker failed: a copy stops at its next piece, as CopyStopped (not an error).
TEST(copy_file, a_copy_stops_once_another_worker_failed) {
    TempDir tmp;
    write_file(tmp / "src", dense_data(std::size_t{1} << 20, 1));
    FileCopy file;
    ASSERT_EQ(stat((tmp / "src").c_str(), &file.st), 0);
    const Fd src(open((tmp / "src").c_str(), O_RDONLY | O_CLOEXEC));
    const Fd dst(open((tmp / "copy").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    CopyBuffers buffers;
    const std::atomic<bool> stop{true};
    EXPECT_THROW(
        copy_data(file, src.get(), dst.get(), 0, file.st.st_size, false, false, buffers, stop),
        CopyStopped);
}

// A failed stage-out of a file leaves neither its temporary nor a partial final name.
TEST(copy_file, a_failed_copy_leaves_no_partial_destination) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_direct_sources(tmp / "src");
    const Mount small(tmp / "small", "mount -t tmpfs -o size=4m tmpfs " + tmp / "small");
    if (!small.ok())
        GTEST_SKIP() << "cannot mount tmpfs here";
    const std::string buffer = make_buffer(tmp, "buffer");
    ASSERT_EQ(move_as_nobody(plan_in(buffer, tmp / "src", "data")).code, 0);
    const Outcome failed =
        move_as_nobody(plan_out(buffer, "data/single", tmp / "small/single", StageType::file));
    EXPECT_EQ(failed.code, 74) << failed.message;
    EXPECT_NE(failed.message.find(tmp / "small/single"), std::string::npos) << failed.message;
    EXPECT_EQ(list_dir(tmp / "small"), std::vector<std::string>{});
}

// 200 MiB, mostly holes, with data across chunk boundaries and an unaligned end; plus a dense
// 70 MiB file. Copied buffered and with O_DIRECT, threads sharing each file's chunks.
TEST(copy_file, large_files_are_copied_in_chunks) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    mkdir((tmp / "src").c_str(), 0755);
    const std::string big = tmp / "src/big";
    for (off_t at : {off_t{0}, (off_t{32} << 20) - 3000, off_t{100} << 20, off_t{150} << 20})
        write_at(big, at, std::string(1 << 20, static_cast<char>('a' + at % 23)));
    truncate(big.c_str(), (off_t{200} << 20) + 123);
    std::string dense(70 << 20, '\0');
    for (std::size_t i = 0; i < dense.size(); i += 4093)
        dense[i] = static_cast<char>(i * 7);
    write_file(tmp / "src/dense", dense);
    for_each_entry(tmp / "src", [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    lchown((tmp / "src").c_str(), nobody, nogroup);

    for (bool direct : {false, true}) {
        const std::string buffer = make_buffer(tmp, direct ? "direct" : "buffered");
        MovePlan plan = plan_in(buffer, tmp / "src", "data");
        plan.direct_io = direct;
        const Outcome in = move_as_nobody(plan);
        ASSERT_EQ(in.code, 0) << in.message;
        expect_same_tree(tmp / "src", buffer + "/data", nobody);
        struct stat st {};
        ASSERT_EQ(stat((buffer + "/data/big").c_str(), &st), 0);
        EXPECT_LT(st.st_blocks * 512, 16 << 20) << "holes filled";
    }
}

// Dense files of unaligned sizes go through O_DIRECT for all but their last partial block; the
// destination's blocks are reserved first and the padding past the end is cut off.
TEST(copy_file, direct_io_copies_unaligned_tails_exactly) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_direct_sources(tmp / "src");
    const std::string buffer = make_buffer(tmp, "buffer");
    MovePlan in = plan_in(buffer, tmp / "src", "data");
    in.direct_io = true;
    const Outcome copied = move_as_nobody(in);
    ASSERT_EQ(copied.code, 0) << copied.message;
    EXPECT_EQ(copied.files, 3u);
    expect_same_tree(tmp / "src", buffer + "/data", nobody);
    EXPECT_EQ(read_file(buffer + "/data/chunked"), read_file(tmp / "src/chunked"));
    EXPECT_EQ(read_file(buffer + "/data/single"), read_file(tmp / "src/single"));

    mkdir((tmp / "out").c_str(), 0755);
    chown((tmp / "out").c_str(), nobody, nogroup);
    MovePlan out = plan_out(buffer, "data", tmp / "out/data");
    out.direct_io = true;
    const Outcome back = move_as_nobody(out);
    ASSERT_EQ(back.code, 0) << back.message;
    expect_same_tree(tmp / "src", tmp / "out/data", nobody);
    EXPECT_EQ(read_file(tmp / "out/data/chunked"), read_file(tmp / "src/chunked"));
    EXPECT_FALSE(has_temporaries(tmp / "out"));
}

// ramfs refuses O_DIRECT: the copy goes buffered, whole and exact.
TEST(copy_file, direct_io_refused_by_the_file_system_falls_back_to_buffered) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_direct_sources(tmp / "src");
    const Mount ramfs(tmp / "ramfs", "mount -t ramfs ramfs " + tmp / "ramfs");
    if (!ramfs.ok())
        GTEST_SKIP() << "cannot mount ramfs here";
    const std::string buffer = make_buffer(tmp, "ramfs/buffer");
    MovePlan plan = plan_in(buffer, tmp / "src", "data");
    plan.direct_io = true;
    const Outcome in = move_as_nobody(plan);
    ASSERT_EQ(in.code, 0) << in.message;
    expect_same_tree(tmp / "src", buffer + "/data", nobody);
    EXPECT_EQ(read_file(buffer + "/data/chunked"), read_file(tmp / "src/chunked"));
}

// ext2 (no extents) cannot reserve blocks with fallocate: the destination gets a plain size.
TEST(copy_file, direct_io_where_blocks_cannot_be_reserved) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_direct_sources(tmp / "src");
    const std::string image = tmp / "ext2.img";
    const Mount ext2(tmp / "ext2", "truncate -s 256M " + image + " && mkfs.ext2 -q -F " + image +
                                       " && mount -o loop " + image + " " + tmp / "ext2");
    if (!ext2.ok())
        GTEST_SKIP() << "cannot make and loop-mount an ext2 image here (mkfs.ext2, loop devices)";
    const std::string buffer = make_buffer(tmp, "ext2/buffer");
    MovePlan plan = plan_in(buffer, tmp / "src", "data");
    plan.direct_io = true;
    const Outcome in = move_as_nobody(plan);
    ASSERT_EQ(in.code, 0) << in.message;
    // ext2 counts its indirect blocks in st_blocks: compare what a copy must keep.
    for (const std::string name : {"chunked", "single", "small"}) {
        struct stat a {
        }, b{};
        ASSERT_EQ(stat((tmp / "src/" + name).c_str(), &a), 0);
        ASSERT_EQ(stat((buffer + "/data/" + name).c_str(), &b), 0);
        EXPECT_EQ(a.st_size, b.st_size) << name;
        EXPECT_EQ(a.st_mode, b.st_mode) << name;
        EXPECT_EQ(a.st_mtim.tv_nsec, b.st_mtim.tv_nsec) << name;
        EXPECT_EQ(read_file(tmp / "src/" + name), read_file(buffer + "/data/" + name)) << name;
    }
}

// Files are copied in parallel, so the file that meets a full file system first may be either
// large one: a failure names whichever it was.
bool names_a_large_file(const std::string& message, const std::string& dir) {
    return message.find(dir + "/chunked") != std::string::npos ||
           message.find(dir + "/single") != std::string::npos;
}

// A destination too small for a file fails when its blocks are reserved (exit 74, naming the
// file); a stage-out leaves no temporary and no final name behind.
TEST(copy_file, direct_io_on_a_full_file_system_fails_cleanly) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    make_direct_sources(tmp / "src");
    const Mount small(tmp / "small", "mount -t tmpfs -o size=16m tmpfs " + tmp / "small");
    if (!small.ok())
        GTEST_SKIP() << "cannot mount tmpfs here";
    const std::string buffer = make_buffer(tmp, "small/buffer");
    MovePlan plan = plan_in(buffer, tmp / "src", "data");
    plan.direct_io = true;
    const Outcome in = move_as_nobody(plan);
    EXPECT_EQ(in.code, 74) << in.message;
    EXPECT_TRUE(names_a_large_file(in.message, buffer + "/data")) << in.message;
    EXPECT_NE(in.message.find("no space left on device"), std::string::npos) << in.message;

    const std::string full = make_buffer(tmp, "buffer");
    ASSERT_EQ(move_as_nobody(plan_in(full, tmp / "src", "data")).code, 0);
    MovePlan out = plan_out(full, "data", tmp / "small/out");
    out.direct_io = true;
    const Outcome failed = move_as_nobody(out);
    EXPECT_EQ(failed.code, 74) << failed.message;
    EXPECT_TRUE(names_a_large_file(failed.message, tmp / "small/out")) << failed.message;
    EXPECT_FALSE(has_temporaries(tmp / "small"));
    EXPECT_EQ(list_dir(tmp / "small/out"), std::vector<std::string>{});
}
}  // namespace
}  // namespace bbkit
