// A pool's env/ (bbkit(7), FILES): the job environment files root writes for the job's user,
// through descriptors, never following what a user could plant; removal from trash/ and the
// measure of buffers. As root and as any user (job_user.hpp), whose pool it then is; what needs
// another user's files skips without root.
#include "bbkit/pool_dir.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bbkit/error.hpp"
#include "code_of.hpp"
#include "job_user.hpp"

namespace fs = std::filesystem;
using namespace bbkit;

namespace {

class PoolDirEnvTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char tmpl[] = "/tmp/bbkit-pooldir.XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        chmod(dir_.c_str(), 0755);
        fs::create_directory(dir_ + "/p");
        pool_ = {"p", dir_ + "/p", 4096, 1};
        PoolDir::init(pool_);
        user_ = unit::job_user();
    }
    void TearDown() override {
        if (!dir_.empty())
            fs::remove_all(dir_);
    }

    PoolDir open() const { return PoolDir::open(pool_, std::nullopt); }
    std::string env() const { return dir_ + "/p/env"; }

    static std::string content(const std::string& path) {
        std::ifstream in(path);
        std::stringstream text;
        text << in.rdbuf();
        return text.str();
    }

    std::string dir_;
    PoolConfig pool_;
    User user_;  // whom env files and buffers are for
};

// What needs root: a directory of another user's.
class PoolDirEnvRootTest : public PoolDirEnvTest {
  protected:
    void SetUp() override {
        if (!unit::as_root())
            GTEST_SKIP() << "needs root to give a directory to another user";
        PoolDirEnvTest::SetUp();
    }
};

}  // namespace

// Root's (for a process that is not root, its own: may_own_pools).
TEST_F(PoolDirEnvTest, init_creates_an_env_directory_of_the_pools_owner) {
    struct stat st {};
    ASSERT_EQ(lstat(env().c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_uid, geteuid());
    EXPECT_EQ(st.st_mode & 07777, 0711u);
}

TEST_F(PoolDirEnvTest, writes_the_file_for_the_user_mode_0400_and_replaces_it) {
    PoolDir dir = open();
    dir.write_job_environment("main.7", "A=1\n", user_.uid, user_.gid);
    dir.write_job_environment("main.7", "A=2\n", user_.uid, user_.gid);
    struct stat st {};
    ASSERT_EQ(lstat((env() + "/main.7").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, user_.uid);
    EXPECT_EQ(st.st_gid, user_.gid);
    EXPECT_EQ(st.st_mode & 07777, 0400u);
    EXPECT_EQ(content(env() + "/main.7"), "A=2\n");
    EXPECT_EQ(std::distance(fs::directory_iterator(env()), fs::directory_iterator()), 1);
}

TEST_F(PoolDirEnvTest, a_stale_temporary_file_is_replaced) {
    std::ofstream(env() + "/.main.7.tmp") << "junk";
    open().write_job_environment("main.7", "A=1\n", user_.uid, user_.gid);
    EXPECT_EQ(content(env() + "/main.7"), "A=1\n");
    EXPECT_FALSE(fs::exists(env() + "/.main.7.tmp"));
}

TEST_F(PoolDirEnvTest, a_symlink_at_the_file_name_is_replaced_not_followed) {
    std::ofstream(dir_ + "/target") << "keep";
    fs::create_symlink(dir_ + "/target", env() + "/main.7");
    open().write_job_environment("main.7", "A=1\n", user_.uid, user_.gid);
    EXPECT_EQ(content(dir_ + "/target"), "keep");
    EXPECT_FALSE(fs::is_symlink(env() + "/main.7"));
    EXPECT_EQ(content(env() + "/main.7"), "A=1\n");
}

TEST_F(PoolDirEnvTest, a_symlink_at_the_temporary_name_is_not_followed) {
    std::ofstream(dir_ + "/target") << "keep";
    fs::create_symlink(dir_ + "/target", env() + "/.main.7.tmp");
    open().write_job_environment("main.7", "A=1\n", user_.uid, user_.gid);
    EXPECT_EQ(content(dir_ + "/target"), "keep");
}

TEST_F(PoolDirEnvTest, an_env_symlink_is_refused_and_nothing_is_written_where_it_points) {
    fs::remove(env());
    fs::create_directory(dir_ + "/elsewhere");
    fs::create_directory_symlink(dir_ + "/elsewhere", env());
    PoolDir dir = open();
    EXPECT_EQ(code_of([&] { dir.write_job_environment("main.7", "A=1\n", user_.uid, user_.gid); }),
              ExitCode::no_perm);
    EXPECT_TRUE(fs::is_empty(dir_ + "/elsewhere"));
    EXPECT_EQ(code_of([&] { dir.remove_job_environment("main.7"); }), ExitCode::no_perm);
}

TEST_F(PoolDirEnvRootTest, an_env_directory_not_owned_by_root_is_refused) {
    ASSERT_EQ(chown(env().c_str(), 65534, 65534), 0);
    PoolDir dir = open();
    std::string message;
    EXPECT_EQ(code_of([&] { dir.write_job_environment("main.7", "A=1\n", user_.uid, user_.gid); },
                      &message),
              ExitCode::no_perm);
    EXPECT_NE(message.find("owned by uid 65534"), std::string::npos) << message;
    EXPECT_FALSE(fs::exists(env() + "/main.7"));
}

TEST_F(PoolDirEnvTest, an_env_directory_writable_by_others_is_refused) {
    fs::permissions(env(), fs::perms(0777));
    PoolDir dir = open();
    EXPECT_EQ(code_of([&] { dir.write_job_environment("main.7", "A=1\n", user_.uid, user_.gid); }),
              ExitCode::no_perm);
    EXPECT_FALSE(fs::exists(env() + "/main.7"));
}

TEST_F(PoolDirEnvTest, env_is_created_on_demand_for_an_older_pool) {
    fs::remove(env());
    PoolDir dir = open();
    dir.remove_job_environment("main.7");  // nothing there: no error, nothing created
    EXPECT_FALSE(fs::exists(env()));
    dir.write_job_environment("main.7", "A=1\n", user_.uid, user_.gid);
    struct stat st {};
    ASSERT_EQ(lstat(env().c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, geteuid());  // the pool owner's (root's, as root)
    EXPECT_EQ(st.st_mode & 07777, 0711u);
}

TEST_F(PoolDirEnvTest, remove_takes_the_file_and_a_missing_one_is_no_error) {
    PoolDir dir = open();
    dir.write_job_environment("main.7", "A=1\n", user_.uid, user_.gid);
    dir.remove_job_environment("main.7");
    EXPECT_FALSE(fs::exists(env() + "/main.7"));
    EXPECT_NO_THROW(dir.remove_job_environment("main.7"));
}

namespace {

// Removal from trash/ of directories holding more entries than one chunk of names
// (drain_directory): memory bounded, deadlines honoured in the middle of a directory.
class PoolDirRemovalTest : public PoolDirEnvTest {
  protected:
    std::string trash() const { return dir_ + "/p/trash"; }

    // `count` empty files in `directory`; returns `count`.
    static std::uint64_t fill(const std::string& directory, std::size_t count) {
        fs::create_directories(directory);
        for (std::size_t i = 0; i < count; ++i)
            std::ofstream(directory + "/checkpoint.rank" + std::to_string(i) + ".h5");
        return count;
    }

    static std::chrono::steady_clock::time_point in(std::chrono::seconds seconds) {
        return std::chrono::steady_clock::now() + seconds;
    }
};

// What needs root: entries of two other users, a file made immutable (CAP_LINUX_IMMUTABLE).
class PoolDirRemovalRootTest : public PoolDirRemovalTest {
  protected:
    static constexpr uid_t other = 54321;

    void SetUp() override {
        if (!unit::as_root())
            GTEST_SKIP() << "needs root to give files to other users and make one immutable";
        PoolDirRemovalTest::SetUp();
    }
};

}  // namespace

TEST_F(PoolDirRemovalTest, removes_a_directory_larger_than_a_chunk_and_counts_what_it_removed) {
    const std::string top = trash() + "/t.1";
    std::uint64_t entries = fill(top + "/flat", 3 * directory_chunk + 1) + 1;  // and flat/
    entries += fill(top + "/flat/sub", 5) + 1;
    entries += fill(top, 7) + 1;  // and t.1 itself
    const RemovalResult removal = open().remove_from_trash("t.1", in(std::chrono::seconds(60)));
    EXPECT_TRUE(removal.complete);
    EXPECT_TRUE(removal.kept.empty());
    EXPECT_EQ(removal.removed, entries);
    EXPECT_TRUE(fs::is_empty(trash()));
}

TEST_F(PoolDirRemovalTest, a_deadline_stops_it_inside_a_directory_and_the_next_call_finishes) {
    const std::string top = trash() + "/t.1";
    const std::uint64_t entries = fill(top + "/flat", 2 * directory_chunk) + 2;
    PoolDir dir = open();
    // Already past: the clock is read every 256 entries, so it stops after a few hundred.
    const RemovalResult first = dir.remove_from_trash("t.1", std::chrono::steady_clock::now());
    EXPECT_FALSE(first.complete);
    EXPECT_GT(first.removed, 0u);
    EXPECT_LT(first.removed, entries);
    EXPECT_TRUE(fs::exists(top + "/flat"));
    const RemovalResult second = dir.remove_from_trash("t.1", in(std::chrono::seconds(60)));
    EXPECT_TRUE(second.complete);
    EXPECT_EQ(first.removed + second.removed, entries);
    EXPECT_TRUE(fs::is_empty(trash()));
}

// Directories the owner could not delete are moved aside, not left to be read again and again;
// an empty one of another user is removed as the owner could.
TEST_F(PoolDirRemovalRootTest, entries_kept_aside_among_many_removable_ones_end_the_removal) {
    const std::string top = trash() + "/t.1";
    std::uint64_t entries = fill(top + "/flat", 2 * directory_chunk + 1) + 2;
    for (const char* name : {"a", "m", "z"}) {
        const std::string theirs = top + "/flat/theirs-" + name;
        fill(theirs, 2);
        for (const auto& entry : fs::directory_iterator(theirs))
            ASSERT_EQ(lchown(entry.path().c_str(), other, other), 0);
        ASSERT_EQ(lchown(theirs.c_str(), other, other), 0);
    }
    fs::create_directory(top + "/flat/empty-theirs");
    ASSERT_EQ(lchown((top + "/flat/empty-theirs").c_str(), other, other), 0);
    ++entries;
    for (const std::string& path : {top, top + "/flat"})
        ASSERT_EQ(lchown(path.c_str(), 65534, 65534), 0);
    const RemovalResult removal = open().remove_from_trash("t.1", in(std::chrono::seconds(60)));
    EXPECT_TRUE(removal.complete);
    EXPECT_EQ(removal.removed, entries);
    ASSERT_EQ(removal.kept.size(), 3u);
    for (const KeptEntry& kept : removal.kept) {
        EXPECT_EQ(kept.uid, other);
        EXPECT_EQ(kept.buffer_owner, 65534u);
        EXPECT_EQ(std::distance(fs::directory_iterator(dir_ + "/p/quarantine/" + kept.name),
                                fs::directory_iterator()),
                  2);
    }
    EXPECT_TRUE(fs::is_empty(trash()));
}

// A file nobody may remove (immutable) fails the removal with its name rather than being read
// again forever; the next call, once it can be removed, finishes.
TEST_F(PoolDirRemovalRootTest, an_entry_that_cannot_be_removed_fails_instead_of_looping) {
    const std::string top = trash() + "/t.1";
    fill(top + "/flat", directory_chunk + 1);
    const std::string pinned = top + "/flat/checkpoint.rank7.h5";
    if (std::system(("chattr +i '" + pinned + "' 2>/dev/null").c_str()) != 0)
        GTEST_SKIP() << "no chattr +i on this file system";
    std::string message;
    EXPECT_NE(
        code_of([&] { open().remove_from_trash("t.1", in(std::chrono::seconds(60))); }, &message),
        ExitCode::ok);
    std::system(("chattr -i '" + pinned + "'").c_str());
    EXPECT_NE(message.find("checkpoint.rank7.h5"), std::string::npos) << message;
    EXPECT_TRUE(fs::exists(pinned));
    EXPECT_TRUE(open().remove_from_trash("t.1", in(std::chrono::seconds(60))).complete);
}

// Trees deeper than removal descends are moved up into trash/ as pieces, removed in the same
// call and counted with the rest.
TEST_F(PoolDirRemovalTest, a_deep_tree_is_removed_through_pieces_and_counted) {
    std::string path = trash() + "/t.1";
    std::uint64_t entries = 1;
    for (int depth = 0; depth < 150; ++depth, ++entries)
        path += "/d";
    entries += fill(path, directory_chunk + 3);
    const RemovalResult removal = open().remove_from_trash("t.1", in(std::chrono::seconds(60)));
    EXPECT_TRUE(removal.complete);
    EXPECT_EQ(removal.removed, entries);
    EXPECT_TRUE(fs::is_empty(trash()));
}

TEST_F(PoolDirRemovalTest, progress_is_never_reported_for_a_removal_shorter_than_a_second) {
    fill(trash() + "/t.1", 300);
    int reports = 0;
    const RemovalResult removal =
        open().remove_from_trash("t.1", in(std::chrono::seconds(60)), PoolDir::Sync::now,
                                 [&](const RemovalProgress&) { ++reports; });
    EXPECT_TRUE(removal.complete);
    EXPECT_EQ(reports, 0);
}

namespace {

// Writes `bytes` of data into `path` (allocated, not sparse).
void write_bytes(const std::string& path, std::size_t bytes) {
    std::ofstream out(path, std::ios::binary);
    const std::string chunk(4096, 'x');
    for (std::size_t done = 0; done < bytes; done += chunk.size())
        out << chunk;
}

MeasureBudget plenty() {
    return MeasureBudget{1000000, std::chrono::steady_clock::now() + std::chrono::seconds(60)};
}

}  // namespace

// A transfer job's directory whose plan cannot be written (here: the file size limit; a full
// pool alike) is not left behind, root's, under the name the staging record holds: the rerun
// makes it again, whole, the user's (bbkit(7), STAGING ON TRANSFER NODES).
TEST_F(PoolDirEnvTest, a_transfer_directory_whose_plan_cannot_be_written_is_not_left_behind) {
    PoolDir pool = open();
    const auto previous = std::signal(SIGXFSZ, SIG_IGN);  // write(2) fails with EFBIG instead
    rlimit limit{};
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &limit), 0);
    rlimit small = limit;
    small.rlim_cur = 1000;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
    bool refused = false;
    try {
        pool.make_transfer_dir("k.in.00", std::string(5000, 'x'), getuid(), getgid());
    } catch (const Error& e) {
        refused = true;
        EXPECT_NE(std::string(e.what()).find("/transfer/k.in.00/plan"), std::string::npos)
            << e.what();
    }
    setrlimit(RLIMIT_FSIZE, &limit);
    std::signal(SIGXFSZ, previous);
    EXPECT_TRUE(refused);
    EXPECT_FALSE(fs::exists(dir_ + "/p/transfer/k.in.00"));
    EXPECT_EQ(pool.make_transfer_dir("k.in.00", "{}", getuid(), getgid()),
              dir_ + "/p/transfer/k.in.00");
    EXPECT_TRUE(static_cast<bool>(pool.open_transfer_dir("k.in.00", getuid())));
    EXPECT_EQ(content(dir_ + "/p/transfer/k.in.00/plan"), "{}");
}

TEST_F(PoolDirEnvTest, measure_counts_allocated_bytes_beneath_a_buffer) {
    PoolDir dir = open();
    dir.create_buffer_dir("job/main.1.1", geteuid(), getegid(), PoolDir::Creation::fresh).wait();
    fs::create_directories(dir_ + "/p/job/main.1.1/a/b");
    write_bytes(dir_ + "/p/job/main.1.1/a/b/f", 64 << 10);
    write_bytes(dir_ + "/p/job/main.1.1/g", 64 << 10);
    MeasureBudget budget = plenty();
    const DirectoryUsage usage = dir.measure("job/main.1.1", 1 << 30, budget);
    EXPECT_TRUE(usage.complete);
    EXPECT_FALSE(usage.over);
    EXPECT_GE(usage.bytes, 128u << 10);
    EXPECT_LT(usage.bytes, 256u << 10);
}

TEST_F(PoolDirEnvTest, measure_stops_once_over_the_limit) {
    PoolDir dir = open();
    dir.create_buffer_dir("job/main.2.1", geteuid(), getegid(), PoolDir::Creation::fresh).wait();
    for (int i = 0; i < 50; ++i)
        write_bytes(dir_ + "/p/job/main.2.1/f" + std::to_string(i), 64 << 10);
    MeasureBudget budget = plenty();
    const DirectoryUsage usage = dir.measure("job/main.2.1", 100 << 10, budget);
    EXPECT_TRUE(usage.over);
    EXPECT_FALSE(usage.complete);
    EXPECT_GT(usage.bytes, 100u << 10);
    EXPECT_GT(budget.entries, 1000000u - 50u);  // stopped after a few files, not all 50
}

TEST_F(PoolDirEnvTest, measure_counts_a_file_with_two_names_once) {
    PoolDir dir = open();
    dir.create_buffer_dir("job/main.3.1", geteuid(), getegid(), PoolDir::Creation::fresh).wait();
    write_bytes(dir_ + "/p/job/main.3.1/f", 64 << 10);
    fs::create_hard_link(dir_ + "/p/job/main.3.1/f", dir_ + "/p/job/main.3.1/g");
    MeasureBudget budget = plenty();
    const DirectoryUsage usage = dir.measure("job/main.3.1", 1 << 30, budget);
    EXPECT_GE(usage.bytes, 64u << 10);
    EXPECT_LT(usage.bytes, 128u << 10);
}

TEST_F(PoolDirEnvTest, measure_within_a_spent_budget_is_incomplete) {
    PoolDir dir = open();
    dir.create_buffer_dir("job/main.4.1", geteuid(), getegid(), PoolDir::Creation::fresh).wait();
    for (int i = 0; i < 10; ++i)
        write_bytes(dir_ + "/p/job/main.4.1/f" + std::to_string(i), 4096);
    MeasureBudget budget{3, std::chrono::steady_clock::now() + std::chrono::seconds(60)};
    const DirectoryUsage usage = dir.measure("job/main.4.1", 1 << 30, budget);
    EXPECT_FALSE(usage.complete);
    EXPECT_FALSE(usage.over);
    EXPECT_EQ(budget.entries, 0u);
}

TEST_F(PoolDirEnvTest, measure_of_a_missing_directory_is_empty) {
    MeasureBudget budget = plenty();
    const DirectoryUsage usage = open().measure("job/main.5.1", 0, budget);
    EXPECT_TRUE(usage.complete);
    EXPECT_EQ(usage.bytes, 0u);
}

TEST_F(PoolDirEnvTest, measure_never_follows_a_symlink) {
    PoolDir dir = open();
    dir.create_buffer_dir("job/main.6.1", geteuid(), getegid(), PoolDir::Creation::fresh).wait();
    fs::create_directory(dir_ + "/outside");
    write_bytes(dir_ + "/outside/big", 256 << 10);
    fs::create_directory_symlink(dir_ + "/outside", dir_ + "/p/job/main.6.1/link");
    MeasureBudget budget = plenty();
    const DirectoryUsage usage = dir.measure("job/main.6.1", 1 << 30, budget);
    EXPECT_LT(usage.bytes, 64u << 10);
}

TEST_F(PoolDirEnvTest, a_pool_without_quota_gives_buffers_no_limit) {
    const PoolDir dir = open();
    EXPECT_FALSE(dir.quota().enforced);
    EXPECT_FALSE(dir.limits_buffers());
}
