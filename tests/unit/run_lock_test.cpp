#include "bbkit/run_lock.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace bbkit {
namespace {

class RunLockTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char pattern[] = "/tmp/bbkit-runlock-XXXXXX";
        ASSERT_NE(mkdtemp(pattern), nullptr);
        dir_ = pattern;
        ASSERT_EQ(::mkdir((dir_ + "/run").c_str(), 0700), 0);
    }
    void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }

    std::string file() const { return dir_ + "/run/main.1.1.lock"; }
    // The locks without a controller claim, and those of claim epoch N.
    RunLockScope plain() const { return RunLockScope{dir_, std::nullopt}; }
    RunLockScope epoch(std::int64_t n) const { return RunLockScope{dir_, n}; }

    std::string dir_;
};

TEST_F(RunLockTest, one_holder_at_a_time_and_it_is_named) {
    std::optional<RunLock> first = RunLock::try_acquire(plain(), parse_buffer_key("main.1.1"));
    ASSERT_TRUE(first);
    EXPECT_FALSE(RunLock::try_acquire(plain(), parse_buffer_key("main.1.1")))
        << "a second open file cannot take it";
    const std::optional<ProcessId> holder = RunLock::holder(plain(), parse_buffer_key("main.1.1"));
    ASSERT_TRUE(holder);
    EXPECT_EQ(*holder, ProcessId::self());
    first.reset();
    EXPECT_FALSE(RunLock::holder(plain(), parse_buffer_key("main.1.1")));
}

TEST_F(RunLockTest, the_holder_is_an_attribute_and_the_file_stays_empty) {
    std::optional<RunLock> lock = RunLock::try_acquire(plain(), parse_buffer_key("main.1.1"));
    ASSERT_TRUE(lock);
    char value[64] = {};
    if (getxattr(file().c_str(), "user.bbkit.holder", value, sizeof value - 1) < 0)
        GTEST_SKIP() << "no user xattrs on " << dir_ << ": the holder is the file's content";
    const ProcessId self = ProcessId::self();
    EXPECT_EQ(std::string(value),
              std::to_string(self.pid) + " " + std::to_string(self.start_time) + "\n");
    struct stat st {};
    ASSERT_EQ(::stat(file().c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 0);
    EXPECT_EQ(st.st_blocks, 0) << "no data block to free when the file goes";
}

TEST_F(RunLockTest, a_holder_written_as_content_is_still_read) {
    // What earlier versions wrote, held here through a second open file.
    const int fd = ::open(file().c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(flock(fd, LOCK_EX), 0);
    const ProcessId self = ProcessId::self();
    const std::string text =
        std::to_string(self.pid) + " " + std::to_string(self.start_time) + "\n";
    ASSERT_EQ(pwrite(fd, text.data(), text.size(), 0), static_cast<ssize_t>(text.size()));
    const std::optional<ProcessId> holder = RunLock::holder(plain(), parse_buffer_key("main.1.1"));
    ASSERT_TRUE(holder);
    EXPECT_EQ(*holder, self);
    ::close(fd);
}

TEST_F(RunLockTest, remove_file_takes_the_file_away_and_the_next_holder_makes_a_new_one) {
    std::optional<RunLock> lock = RunLock::try_acquire(plain(), parse_buffer_key("main.1.1"));
    ASSERT_TRUE(lock);
    struct stat before {};
    ASSERT_EQ(::stat(file().c_str(), &before), 0);
    lock->remove_file();
    EXPECT_NE(::access(file().c_str(), F_OK), 0);
    lock.reset();
    std::optional<RunLock> next = RunLock::try_acquire(plain(), parse_buffer_key("main.1.1"));
    ASSERT_TRUE(next);
    EXPECT_EQ(::access(file().c_str(), F_OK), 0);
}

// Processes that take the lock, check that nobody else is inside, and remove the file before
// they let go: whoever opened the file before a removal and locked it after must not count as
// a holder next to the one that locked the new file.
TEST_F(RunLockTest, removing_the_file_while_others_wait_keeps_one_holder_at_a_time) {
    const std::string inside = dir_ + "/inside";
    constexpr int processes = 4;
    constexpr int rounds = 300;
    std::vector<pid_t> children;
    for (int p = 0; p < processes; ++p) {
        const pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            int status = 0;
            for (int i = 0; i < rounds && status == 0; ++i) {
                try {
                    // Spinning, not acquire()'s 50 ms polls: a waiter must often open the file
                    // just before the holder removes it.
                    std::optional<RunLock> lock;
                    while (!(lock = RunLock::try_acquire(plain(), parse_buffer_key("main.1.1"))))
                        continue;
                    // O_EXCL: fails if another holder is inside right now.
                    const int fd = ::open(inside.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
                    if (fd < 0) {
                        status = 3;
                        break;
                    }
                    ::close(fd);
                    ::usleep(100);
                    ::unlink(inside.c_str());
                    lock->remove_file();
                } catch (...) {
                    status = 4;
                }
            }
            _exit(status);
        }
        children.push_back(pid);
    }
    for (pid_t pid : children) {
        int status = 0;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
            << "a child saw another holder inside (3) or failed (4): status " << status;
    }
}

// A stager of an older epoch, on a controller cut off but alive, keeps its lock: the processes of
// the new claim neither wait for it nor see it, and still exclude each other. Every pair of a
// claim's epoch (1..3) and another (none: the owner removed the claim; 1..3), in both orders.
TEST_F(RunLockTest, a_holder_of_another_epoch_neither_blocks_nor_is_seen) {
    const std::vector<RunLockScope> scopes{plain(), epoch(1), epoch(2), epoch(3)};
    const BufferKey key = parse_buffer_key("main.1.1");
    for (const RunLockScope& old : scopes)
        for (const RunLockScope& now : scopes) {
            if (old.epoch == now.epoch || !old.epoch)
                continue;
            std::optional<RunLock> fenced = RunLock::try_acquire(old, key);
            ASSERT_TRUE(fenced);
            EXPECT_FALSE(RunLock::holder(now, key)) << "the holder of another epoch is not seen";
            std::optional<RunLock> current = RunLock::try_acquire(now, key);
            ASSERT_TRUE(current) << "the holder of another epoch blocks nobody";
            EXPECT_FALSE(RunLock::try_acquire(now, key)) << "one holder at a time within an epoch";
            EXPECT_EQ(*RunLock::holder(now, key), ProcessId::self());
        }
}

// A process that began before the first claim holds the plain lock and writes on once its host
// takes the claim: on this host it still excludes the claim's processes, which see it.
TEST_F(RunLockTest, a_holder_from_before_the_first_claim_here_excludes_the_claims_processes) {
    int ready[2];
    int done[2];
    ASSERT_EQ(pipe(ready), 0);
    ASSERT_EQ(pipe(done), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        std::optional<RunLock> lock = RunLock::try_acquire(plain(), parse_buffer_key("main.1.1"));
        char c = lock ? 'y' : 'n';
        if (write(ready[1], &c, 1) != 1 || read(done[0], &c, 1) != 1)
            _exit(2);
        _exit(0);
    }
    char c = 0;
    ASSERT_EQ(read(ready[0], &c, 1), 1);
    ASSERT_EQ(c, 'y');
    const BufferKey key = parse_buffer_key("main.1.1");
    EXPECT_FALSE(RunLock::try_acquire(epoch(1), key));
    const std::optional<ProcessId> seen = RunLock::holder(epoch(1), key);
    ASSERT_TRUE(seen);
    EXPECT_EQ(seen->pid, child);
    ASSERT_EQ(write(done[1], "x", 1), 1);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(RunLock::try_acquire(epoch(1), key)) << "free once the old holder is gone";
    for (int fd : {ready[0], ready[1], done[0], done[1]})
        ::close(fd);
}

TEST_F(RunLockTest, epoch_locks_are_named_after_their_epoch) {
    EXPECT_EQ(run_lock_name(plain(), "main.1.1"), "run/main.1.1.lock");
    EXPECT_EQ(run_lock_name(epoch(12), "main.1.1"), "run/main.1.1@12.lock");
    EXPECT_EQ(run_lock_name(epoch(3), "slot.in.0"), "run/slot.in.0@3.lock");
}

// The end of a buffer removes its lock files of older epochs that nobody holds; one a fenced
// process still holds stays with it, and another buffer's are never touched.
TEST_F(RunLockTest, remove_file_sweeps_the_older_epochs_nobody_holds) {
    const BufferKey key = parse_buffer_key("main.1.1");
    { std::optional<RunLock> gone = RunLock::try_acquire(plain(), key); }
    { std::optional<RunLock> gone = RunLock::try_acquire(epoch(1), key); }
    std::optional<RunLock> fenced = RunLock::try_acquire(epoch(2), key);
    ASSERT_TRUE(fenced);
    {
        std::optional<RunLock> other =
            RunLock::try_acquire(epoch(1), parse_buffer_key("main.11.1"));
    }
    std::optional<RunLock> lock = RunLock::try_acquire(epoch(3), key);
    ASSERT_TRUE(lock);
    lock->remove_file();
    const auto there = [this](const std::string& name) {
        return ::access((dir_ + "/run/" + name).c_str(), F_OK) == 0;
    };
    EXPECT_FALSE(there("main.1.1.lock"));
    EXPECT_FALSE(there("main.1.1@1.lock"));
    EXPECT_TRUE(there("main.1.1@2.lock")) << "held by a process of epoch 2";
    EXPECT_FALSE(there("main.1.1@3.lock"));
    EXPECT_TRUE(there("main.11.1@1.lock")) << "another buffer's";
}

// run/ is the state owner's: a symlink planted there in place of the directory is never
// followed when the lock files go.
TEST_F(RunLockTest, remove_file_never_follows_a_planted_run_directory) {
    const BufferKey key = parse_buffer_key("main.1.1");
    std::optional<RunLock> lock = RunLock::try_acquire(epoch(2), key);
    ASSERT_TRUE(lock);
    const std::string elsewhere = dir_ + "/elsewhere";
    ASSERT_EQ(::mkdir(elsewhere.c_str(), 0700), 0);
    for (const char* name : {"main.1.1@2.lock", "main.1.1@1.lock", "main.1.1.lock"})
        ::close(::open((elsewhere + "/" + name).c_str(), O_CREAT | O_WRONLY, 0600));
    ASSERT_EQ(::rename((dir_ + "/run").c_str(), (dir_ + "/run.real").c_str()), 0);
    ASSERT_EQ(::symlink(elsewhere.c_str(), (dir_ + "/run").c_str()), 0);
    lock->remove_file();
    for (const char* name : {"main.1.1@2.lock", "main.1.1@1.lock", "main.1.1.lock"})
        EXPECT_EQ(::access((elsewhere + "/" + name).c_str(), F_OK), 0) << name;
}

}  // namespace
}  // namespace bbkit
