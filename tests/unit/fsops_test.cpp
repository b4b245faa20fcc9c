#include "bbkit/fsops.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "bbkit/error.hpp"
#include "code_of.hpp"

namespace bbkit {
namespace {

class FsopsTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char pattern[] = "/tmp/bbkit-fsops-XXXXXX";
        ASSERT_NE(mkdtemp(pattern), nullptr);
        dir_ = pattern;
    }
    void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }

    std::string read(const std::string& path) {
        std::ifstream in(path);
        std::stringstream text;
        text << in.rdbuf();
        return text.str();
    }
    std::vector<std::string> entries() {
        std::vector<std::string> names;
        DIR* d = opendir(dir_.c_str());
        while (dirent* e = readdir(d))
            if (e->d_name[0] != '.')
                names.push_back(e->d_name);
        closedir(d);
        return names;
    }

    std::string dir_;
};

TEST_F(FsopsTest, writes_content_with_the_mode_whatever_the_umask) {
    const mode_t old = umask(077);
    write_file_atomically(dir_ + "/pools.json", "{\"pools\":[]}\n", 0644);
    umask(old);
    EXPECT_EQ(read(dir_ + "/pools.json"), "{\"pools\":[]}\n");
    struct stat st {};
    ASSERT_EQ(stat((dir_ + "/pools.json").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0644u);
}

TEST_F(FsopsTest, replaces_an_existing_file_and_leaves_no_temporary) {
    write_file_atomically(dir_ + "/a.env", "OLD=1\n", 0600);
    write_file_atomically(dir_ + "/a.env", "NEW=2\n", 0600);
    EXPECT_EQ(read(dir_ + "/a.env"), "NEW=2\n");
    EXPECT_EQ(entries(), std::vector<std::string>{"a.env"});
}

TEST_F(FsopsTest, writes_empty_and_large_files) {
    write_file_atomically(dir_ + "/empty", "", 0600);
    EXPECT_EQ(read(dir_ + "/empty"), "");
    const std::string big(3 * 1024 * 1024 + 7, 'x');
    write_file_atomically(dir_ + "/big", big, 0600);
    EXPECT_EQ(read(dir_ + "/big"), big);
}

TEST_F(FsopsTest, failure_names_the_path_and_leaves_nothing) {
    try {
        write_file_atomically(dir_ + "/missing/pools.json", "x", 0644);
        FAIL() << "no error";
    } catch (const Error& error) {
        EXPECT_EQ(error.code(), ExitCode::no_input);  // ENOENT, as exit_code_for says
        EXPECT_NE(std::string(error.what()).find(dir_ + "/missing/pools.json"), std::string::npos)
            << error.what();
        // The way on fits the error: a missing directory is no matter of space.
        EXPECT_EQ(std::string(error.what()),
                  "cannot create " + dir_ +
                      "/missing/pools.json: No such file or directory (its "
                      "directory is missing)");
    }
    EXPECT_TRUE(entries().empty());
}

TEST_F(FsopsTest, rename_over_a_directory_fails_and_removes_the_temporary) {
    ASSERT_EQ(mkdir((dir_ + "/target").c_str(), 0700), 0);
    EXPECT_THROW(write_file_atomically(dir_ + "/target", "x", 0600), Error);
    EXPECT_EQ(entries(), std::vector<std::string>{"target"});
}

// replace_file swaps names instead of renaming over the old file (see fsops.hpp).
// An output file a command line names is written only where nothing is, or over what the
// command wrote itself; every other kind of thing there is refused (73) and kept as it was.
TEST_F(FsopsTest, write_own_output_replaces_only_a_file_it_wrote) {
    const std::string mine = dir_ + "/mine";
    write_own_output(mine, "# HELP bbkit_x 1\n", 0644, "# HELP bbkit_");
    write_own_output(mine, "# HELP bbkit_x 2\n", 0644, "# HELP bbkit_");
    EXPECT_EQ(read(mine), "# HELP bbkit_x 2\n");

    std::ofstream(dir_ + "/other") << "root:x:0:0::/root:/bin/sh\n";
    std::ofstream(dir_ + "/short") << "# HE";
    std::ofstream(dir_ + "/linked") << "# HELP bbkit_x 1\n";
    ASSERT_EQ(link((dir_ + "/linked").c_str(), (dir_ + "/linked2").c_str()), 0);
    ASSERT_EQ(symlink(mine.c_str(), (dir_ + "/symlink").c_str()), 0);
    ASSERT_EQ(symlink("/dev/stdout", (dir_ + "/stdout").c_str()), 0);
    ASSERT_EQ(mkfifo((dir_ + "/fifo").c_str(), 0600), 0);
    ASSERT_EQ(mkdir((dir_ + "/dir").c_str(), 0700), 0);
    for (const char* name : {"other", "short", "linked", "symlink", "stdout", "fifo", "dir"}) {
        const std::string path = dir_ + "/" + name;
        struct stat before {
        }, after{};
        ASSERT_EQ(lstat(path.c_str(), &before), 0);
        std::string message;
        EXPECT_EQ(
            code_of([&] { write_own_output(path, "new\n", 0644, "# HELP bbkit_"); }, &message),
            ExitCode::exists)
            << name;
        EXPECT_EQ(message.rfind("refusing to write " + path + ": it ", 0), 0u) << message;
        ASSERT_EQ(lstat(path.c_str(), &after), 0);
        EXPECT_EQ(after.st_ino, before.st_ino) << name;
        EXPECT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec) << name;
    }
    EXPECT_EQ(read(mine), "# HELP bbkit_x 2\n");
    EXPECT_EQ(read(dir_ + "/other"), "root:x:0:0::/root:/bin/sh\n");
}

TEST_F(FsopsTest, replace_file_swaps_in_the_new_content_and_leaves_no_temporary) {
    replace_file(dir_ + "/pools.json", "one\n", 0644);
    EXPECT_EQ(read(dir_ + "/pools.json"), "one\n");
    std::ifstream old_reader(dir_ + "/pools.json");  // a reader of the old file keeps it
    replace_file(dir_ + "/pools.json", "two\n", 0600);
    EXPECT_EQ(read(dir_ + "/pools.json"), "two\n");
    std::string line;
    std::getline(old_reader, line);
    EXPECT_EQ(line, "one");
    struct stat st {};
    ASSERT_EQ(stat((dir_ + "/pools.json").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    EXPECT_EQ(entries(), std::vector<std::string>{"pools.json"});
}

TEST_F(FsopsTest, replace_file_over_a_directory_fails_and_leaves_the_directory) {
    ASSERT_EQ(mkdir((dir_ + "/target").c_str(), 0700), 0);
    ASSERT_EQ(close(open((dir_ + "/target/inside").c_str(), O_CREAT | O_WRONLY, 0600)), 0);
    try {
        replace_file(dir_ + "/target", "x", 0600);
        FAIL() << "no error";
    } catch (const Error& error) {
        EXPECT_EQ(error.code(), ExitCode::io);
        EXPECT_NE(std::string(error.what()).find(dir_ + "/target"), std::string::npos);
    }
    EXPECT_EQ(entries(), std::vector<std::string>{"target"});
    struct stat st {};
    ASSERT_EQ(stat((dir_ + "/target/inside").c_str(), &st), 0);
}

TEST_F(FsopsTest, fsync_dir_of_a_missing_directory_is_no_input) {
    EXPECT_NO_THROW(fsync_dir(dir_));
    try {
        fsync_dir(dir_ + "/nope");
        FAIL() << "no error";
    } catch (const Error& error) {
        EXPECT_EQ(error.code(), ExitCode::no_input);
    }
}

int threads_of_this_process() {
    int count = 0;
    DIR* d = opendir("/proc/self/task");
    while (dirent* e = readdir(d))
        count += e->d_name[0] != '.';
    closedir(d);
    return count;
}

TEST_F(FsopsTest, pending_sync_syncs_at_once_in_the_calling_thread) {
    const int before = threads_of_this_process();
    int a = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int b = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(a, 0);
    ASSERT_GE(b, 0);
    PendingSync pending = PendingSync::start({{a, dir_}, {b, "/tmp"}});
    EXPECT_EQ(threads_of_this_process(), before);
    close(a);  // synced already: the caller may close its own descriptors
    close(b);
    PendingSync moved(std::move(pending));
    EXPECT_NO_THROW(moved.wait());
    EXPECT_FALSE(moved.failed());
}

TEST_F(FsopsTest, pending_sync_names_what_failed_only_when_waited_for) {
    int pipe_fds[2];
    ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);  // fsync of a pipe fails with EINVAL
    int d = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    PendingSync pending = PendingSync::start({{d, dir_}, {pipe_fds[0], "the pipe"}});
    EXPECT_FALSE(pending.failed());
    try {
        pending.wait();
        FAIL() << "no error";
    } catch (const Error& error) {
        EXPECT_EQ(error.code(), ExitCode::io);
        EXPECT_EQ(std::string(error.what()), "cannot sync the pipe: Invalid argument");
    }
    EXPECT_TRUE(pending.failed());
    {
        // Dropped without wait(): the outcome is discarded.
        PendingSync dropped = PendingSync::start({{pipe_fds[1], "the other end"}});
    }
    close(d);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
}

TEST(Fd, closes_once_and_moves) {
    int raw = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(raw, 0);
    {
        Fd fd(raw);
        Fd moved(std::move(fd));
        EXPECT_FALSE(fd);
        EXPECT_EQ(moved.get(), raw);
        Fd assigned;
        assigned = std::move(moved);
        EXPECT_EQ(assigned.get(), raw);
        EXPECT_NE(fcntl(raw, F_GETFD), -1);
    }
    EXPECT_EQ(fcntl(raw, F_GETFD), -1);  // closed when the last owner went away
}

TEST(Fd, release_gives_up_ownership) {
    int raw = open("/dev/null", O_RDONLY | O_CLOEXEC);
    {
        Fd fd(raw);
        EXPECT_EQ(fd.release(), raw);
    }
    EXPECT_NE(fcntl(raw, F_GETFD), -1);
    close(raw);
}

TEST_F(FsopsTest, list_directory_names_every_entry_but_dot_and_dot_dot) {
    ASSERT_EQ(mkdir((dir_ + "/sub").c_str(), 0700), 0);
    write_file_atomically(dir_ + "/..a", "x", 0600);
    const Fd fd(open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    std::vector<std::string> names = list_directory(fd.get(), dir_);
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"..a", "sub"}));
    // The caller's descriptor keeps working: the listing read a duplicate from its start.
    EXPECT_EQ(list_directory(fd.get(), dir_).size(), 2u);
}

TEST_F(FsopsTest, read_file_is_bounded_and_says_what_it_read) {
    write_file_atomically(dir_ + "/f", "12345", 0600);
    EXPECT_EQ(read_file(dir_ + "/f", "f", 5), std::optional<std::string>("12345"));
    EXPECT_EQ(read_file(dir_ + "/none", "none", 5), std::nullopt);
    try {
        read_file(dir_ + "/f", "the list", 4);
        FAIL() << "no error";
    } catch (const Error& error) {
        EXPECT_EQ(error.code(), ExitCode::data);
        EXPECT_STREQ(error.what(), "the list is larger than 4 bytes");
    }
}

// The directory another party may rename and replace with a symlink between two writes: what
// replace_file_at writes lands in the directory it was given, never where the link points.
TEST_F(FsopsTest, replace_file_at_writes_in_the_directory_it_holds_whatever_its_path_becomes) {
    ASSERT_EQ(mkdir((dir_ + "/public").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((dir_ + "/outside").c_str(), 0700), 0);
    const Fd fd(open((dir_ + "/public").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_EQ(rename((dir_ + "/public").c_str(), (dir_ + "/moved").c_str()), 0);
    ASSERT_EQ(symlink("outside", (dir_ + "/public").c_str()), 0);
    replace_file_at(fd.get(), "pools.json", "one\n", 0644, dir_ + "/public/pools.json");
    replace_file_at(fd.get(), "pools.json", "two\n", 0600, dir_ + "/public/pools.json");
    EXPECT_EQ(read(dir_ + "/moved/pools.json"), "two\n");
    struct stat st {};
    ASSERT_EQ(stat((dir_ + "/moved/pools.json").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    DIR* outside = opendir((dir_ + "/outside").c_str());
    int count = 0;
    while (readdir(outside))
        ++count;
    closedir(outside);
    EXPECT_EQ(count, 2) << "only . and ..";
}

TEST_F(FsopsTest, replace_file_at_gives_the_file_its_owner_before_its_name) {
    if (geteuid() != 0)
        GTEST_SKIP() << "giving a file away needs root";
    const Fd fd(open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    replace_file_at(fd.get(), "1017.key", "k\n", 0400, dir_ + "/1017.key", FileOwner{1017, 1018});
    struct stat st {};
    ASSERT_EQ(stat((dir_ + "/1017.key").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 1017u);
    EXPECT_EQ(st.st_gid, 1018u);
    EXPECT_EQ(st.st_mode & 07777, 0400u);
    EXPECT_EQ(entries(), std::vector<std::string>{"1017.key"});
}

TEST_F(FsopsTest, read_file_at_reads_in_the_directory_and_refuses_a_symlink_when_asked) {
    write_file_atomically(dir_ + "/f", "12345", 0600);
    ASSERT_EQ(symlink("f", (dir_ + "/link").c_str()), 0);
    const Fd fd(open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    EXPECT_EQ(read_file_at(fd.get(), "f", "f", 5), std::optional<std::string>("12345"));
    EXPECT_EQ(read_file_at(fd.get(), "none", "none", 5), std::nullopt);
    EXPECT_EQ(read_file_at(fd.get(), "link", "link", 5), std::optional<std::string>("12345"));
    EXPECT_THROW(read_file_at(fd.get(), "link", "link", 5, O_NOFOLLOW), Error);
}

TEST_F(FsopsTest, open_state_file_at_refuses_a_second_link_and_a_symlink) {
    ASSERT_EQ(mkdir((dir_ + "/log").c_str(), 0700), 0);
    write_file_atomically(dir_ + "/precious", "x", 0600);
    ASSERT_EQ(link((dir_ + "/precious").c_str(), (dir_ + "/log/audit.log").c_str()), 0);
    ASSERT_EQ(symlink("../precious", (dir_ + "/log/other").c_str()), 0);
    const Fd fd(open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    for (const char* name : {"log/audit.log", "log/other"}) {
        try {
            open_state_file_at(fd.get(), name, O_WRONLY | O_APPEND, name);
            FAIL() << name;
        } catch (const Error& error) {
            EXPECT_EQ(error.code(), ExitCode::no_perm) << error.what();
        }
    }
    EXPECT_TRUE(open_state_file_at(fd.get(), "log/new", O_WRONLY | O_CREAT, "log/new", 0600));
}

// The state owner may plant a FIFO (or a socket) where root opens a state file: root's open
// returns at once and refuses it, for reading, writing or both, as every caller opens.
TEST_F(FsopsTest, open_state_file_refuses_a_planted_fifo_without_waiting) {
    ASSERT_EQ(mkdir((dir_ + "/run").c_str(), 0700), 0);
    ASSERT_EQ(mkfifo((dir_ + "/run/main.1.1.lock").c_str(), 0600), 0);
    for (int flags : {O_RDONLY, O_WRONLY | O_APPEND, O_RDWR | O_CREAT}) {
        try {
            open_state_file(dir_, "run/main.1.1.lock", flags, 0600);
            FAIL() << "opened a FIFO with flags " << flags;
        } catch (const Error& error) {
            EXPECT_EQ(error.code(), ExitCode::no_perm) << error.what();
            EXPECT_NE(std::string(error.what()).find("not a regular file"), std::string::npos)
                << error.what();
        }
    }
    // A regular file opened for reading blocks as its caller asked (O_NONBLOCK cleared), and
    // O_APPEND stays.
    write_file_atomically(dir_ + "/run/plain", "x", 0600);
    const Fd fd = open_state_file(dir_, "run/plain", O_WRONLY | O_APPEND);
    EXPECT_EQ(fcntl(fd.get(), F_GETFL) & (O_NONBLOCK | O_APPEND), O_APPEND);
}

TEST_F(FsopsTest, open_beneath_refuses_a_symlink_on_the_way) {
    ASSERT_EQ(mkdir((dir_ + "/real").c_str(), 0700), 0);
    ASSERT_EQ(symlink("real", (dir_ + "/link").c_str()), 0);
    const Fd root(open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    EXPECT_TRUE(open_beneath(root.get(), "real", O_RDONLY | O_DIRECTORY, "real"));
    try {
        open_beneath(root.get(), "link", O_RDONLY | O_DIRECTORY, "link");
        FAIL() << "followed the symlink";
    } catch (const Error& error) {
        EXPECT_EQ(error.code(), ExitCode::no_perm);
    }
    EXPECT_THROW(open_beneath(root.get(), "../x", O_RDONLY, "up"), Error);
}

TEST_F(FsopsTest, remove_tree_beneath_removes_the_tree_but_never_what_a_symlink_names) {
    ASSERT_EQ(mkdir((dir_ + "/keep").c_str(), 0700), 0);
    write_file_atomically(dir_ + "/keep/precious", "x", 0600);
    ASSERT_EQ(mkdir((dir_ + "/tree").c_str(), 0700), 0);
    ASSERT_EQ(mkdir((dir_ + "/tree/ro").c_str(), 0700), 0);
    write_file_atomically(dir_ + "/tree/ro/f", "x", 0600);
    ASSERT_EQ(chmod((dir_ + "/tree/ro").c_str(), 0500), 0);
    ASSERT_EQ(symlink("../keep", (dir_ + "/tree/link").c_str()), 0);
    const Fd root(open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    EXPECT_EQ(remove_tree_beneath(root.get(), "tree"), 0);
    EXPECT_EQ(remove_tree_beneath(root.get(), "tree"), 0);  // already gone
    EXPECT_EQ(entries(), std::vector<std::string>{"keep"});
    EXPECT_EQ(read_file(dir_ + "/keep/precious", "precious", 10), std::optional<std::string>("x"));
}

// Entries the caller leaves end the draining (no endless rereading); entries that arrive while
// it runs are found by reading again; memory is one chunk of names.
TEST_F(FsopsTest, drain_directory_reads_again_until_a_pass_changes_nothing) {
    const std::size_t files = 2 * directory_chunk + 1;
    for (std::size_t i = 0; i < files; ++i)
        std::ofstream(dir_ + "/f" + std::to_string(i));
    for (const char* name : {"keep-a", "keep-b"})
        std::ofstream(dir_ + "/" + name);
    const Fd dir(open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    std::map<std::string, int> given;
    bool arrived = false;
    EXPECT_EQ(drain_directory(dir.get(),
                              [&](const std::string& name) {
                                  ++given[name];
                                  if (!arrived) {  // a late-comer, after the reading began
                                      arrived = true;
                                      std::ofstream(dir_ + "/late");
                                  }
                                  if (name.rfind("keep-", 0) == 0)
                                      return Drained::left;
                                  EXPECT_EQ(unlinkat(dir.get(), name.c_str(), 0), 0) << name;
                                  return Drained::gone;
                              }),
              0);
    EXPECT_EQ(entries().size(), 2u);
    EXPECT_EQ(given.count("late"), 1u);
    EXPECT_GE(given["keep-a"], 1);
    EXPECT_LE(given["keep-a"], 3);  // a pass, another after a change, one that changes nothing
    for (std::size_t i = 0; i < files; ++i)
        EXPECT_EQ(given["f" + std::to_string(i)], 1);
}

TEST_F(FsopsTest, drain_directory_stops_when_told) {
    for (int i = 0; i < 20; ++i)
        std::ofstream(dir_ + "/f" + std::to_string(i));
    const Fd dir(open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    int calls = 0;
    EXPECT_EQ(drain_directory(
                  dir.get(),
                  [&](const std::string&) { return ++calls == 5 ? Drained::stop : Drained::gone; }),
              0);
    EXPECT_EQ(calls, 5);
    EXPECT_EQ(entries().size(), 20u);
}

TEST_F(FsopsTest, remove_tree_beneath_removes_a_directory_larger_than_a_chunk) {
    ASSERT_EQ(mkdir((dir_ + "/tree").c_str(), 0700), 0);
    ASSERT_EQ(mkdir((dir_ + "/tree/flat").c_str(), 0700), 0);
    for (std::size_t i = 0; i < 3 * directory_chunk + 1; ++i)
        std::ofstream(dir_ + "/tree/flat/f" + std::to_string(i));
    ASSERT_EQ(mkdir((dir_ + "/tree/flat/sub").c_str(), 0500), 0);
    const Fd root(open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    EXPECT_EQ(remove_tree_beneath(root.get(), "tree"), 0);
    EXPECT_TRUE(entries().empty());
}

}  // namespace
}  // namespace bbkit
