// Ending buffers (bbkit(7), BUFFER STATES and STANDALONE MODE): teardown of job and persistent
// buffers, what it refuses and to whom, a teardown that fails and is finished later, a stager
// stopped, a symlink planted by the user, and the reaper's budget. On a real pool and state
// directory, as root and as any user (job_user.hpp); the basic teardown and reap paths are in
// pool_test.cpp, which allocates.
#include "bbkit/teardown.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bbkit/error.hpp"
#include "bbkit/pool.hpp"
#include "bbkit/run_lock.hpp"
#include "bbkit/stage_plan.hpp"
#include "bbkit/views.hpp"
#include "code_of.hpp"
#include "job_user.hpp"

namespace fs = std::filesystem;
using namespace bbkit;

namespace {

constexpr std::uint64_t KiB = 1024;

class TeardownTest : public ::testing::Test {
  protected:
    void SetUp() override {
        unsetenv("SUDO_UID");
        char tmpl[] = "/tmp/bbkit-teardown.XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        chmod(dir_.c_str(), 0755);
        fs::create_directory(dir_ + "/small");
        config_.state_dir = dir_ + "/state";
        config_.state_owner = unit::state_owner();
        config_.cluster = "t";
        config_.pools.push_back({"small", dir_ + "/small", 4 * KiB, KiB});
        config_.default_pool = "small";
        store_.emplace(config_);
        init_pool(*store_, config_, "small", "test");
        user_ = unit::job_user();
    }
    void TearDown() override {
        unsetenv("SUDO_UID");
        store_.reset();
        if (!dir_.empty())
            fs::remove_all(dir_);
    }

    AllocResult job(std::uint64_t id, const std::string& staging = "{}") {
        AllocRequest r;
        r.job_id = id;
        r.user = user_;
        r.pool = "small";
        r.capacity = KiB;
        r.staging = staging;
        return allocate(*store_, config_, r, "test");
    }
    AllocResult persistent(const std::string& name) {
        config_.flags.enable_persistent =
            true;  // root needs it not; a caller that is not root does
        AllocRequest r;
        r.persistent_name = name;
        r.user = unit::root_or_caller();
        r.pool = "small";
        r.capacity = KiB;
        return allocate(*store_, config_, r, "test");
    }

    Buffer buffer(const BufferKey& key) {
        ReadSnapshot snapshot(*store_);
        return snapshot.get_buffer(key);
    }
    void move(const BufferKey& key, std::initializer_list<BufferState> states) {
        WriteTransaction txn(*store_, "test");
        for (BufferState s : states)
            txn.transition(key, s);
        txn.commit();
    }
    PoolStatus status() {
        ReadSnapshot snapshot(*store_);
        return pool_status(snapshot, config_).at(0);
    }
    std::string audit_log() const {
        std::ifstream in(config_.state_dir + "/log/audit.log");
        std::stringstream text;
        text << in.rdbuf();
        return text.str();
    }

    std::string dir_;
    Config config_;
    std::optional<StateStore> store_;
    User user_;
};

// Root's own: a caller through sudo is root's (less_privileged_caller).
class TeardownRootTest : public TeardownTest {
  protected:
    void SetUp() override {
        if (!unit::as_root())
            GTEST_SKIP() << "needs root, run for a caller through sudo";
        TeardownTest::SetUp();
    }
};

// A job whose results (a stage_out line) are only in its buffer.
std::string results_to(const std::string& destination) {
    Request request;
    StageDirective out;
    out.type = StageType::directory;
    out.source = "$BB_JOB_DIR/out";
    out.destination = destination;
    request.stage_out.push_back(out);
    return staging_record(request);
}

}  // namespace

TEST_F(TeardownTest, an_unknown_or_ended_buffer_is_a_note_not_an_error) {
    TeardownResult t = teardown_job(*store_, config_, 9, {}, "test");
    EXPECT_FALSE(t.found);
    EXPECT_EQ(t.note, "job 9 has no burst buffer");
    job(1);
    EXPECT_TRUE(teardown_job(*store_, config_, 1, {}, "test").found);
    t = teardown_job(*store_, config_, 1, {}, "test");
    EXPECT_FALSE(t.found);
    EXPECT_EQ(t.key, "t.1.1");
    EXPECT_EQ(t.note, "job 1's burst buffer is already torn down");
    t = teardown_persistent(*store_, config_, "nothing", {}, "test");
    EXPECT_FALSE(t.found);
    EXPECT_EQ(t.note, "persistent buffer 'nothing' does not exist");
}

TEST_F(TeardownTest, a_job_ends_complete_its_directory_and_env_files_gone_and_audited) {
    const AllocResult r = job(1);
    ASSERT_TRUE(fs::exists(config_.state_dir + "/env/t.1.env"));
    const TeardownResult t = teardown_job(*store_, config_, 1, {}, "bb-teardown");
    EXPECT_TRUE(t.found);
    EXPECT_TRUE(t.reaped);
    EXPECT_EQ(buffer(r.buffer.key).state, BufferState::complete);
    EXPECT_FALSE(fs::exists(r.path));
    EXPECT_FALSE(fs::exists(config_.state_dir + "/env/t.1.env"));
    EXPECT_FALSE(fs::exists(config_.state_dir + "/env/t.1.1.env"));
    EXPECT_FALSE(fs::exists(config_.state_dir + "/run/t.1.1.lock"));
    EXPECT_NE(
        audit_log().find("tool=bb-teardown action=teardown buffer=t.1.1 pool=small bytes=1024"),
        std::string::npos)
        << audit_log();
}

// bb-pool alloc --wait: a request still in the queue leaves it, never having held space.
TEST_F(TeardownTest, a_queued_request_leaves_the_queue) {
    Buffer b = Buffer::for_key(BufferKey::job("t", 5, 1));
    b.pool = "small";
    b.requested_bytes = b.allocated_bytes = KiB;
    b.uid = user_.uid;
    b.gid = user_.gid;
    b.user = user_.name;
    b.state = BufferState::pending;
    {
        WriteTransaction txn(*store_, "test");
        txn.insert_buffer(b);
        txn.commit();
    }
    const TeardownResult t = teardown_job(*store_, config_, 5, {}, "test");
    EXPECT_TRUE(t.found);
    EXPECT_TRUE(t.reaped);
    EXPECT_EQ(t.note, "job 5 left the queue");
    EXPECT_EQ(buffer(b.key).state, BufferState::complete);
    EXPECT_EQ(status().used, 0u);
}

TEST_F(TeardownTest, a_persistent_buffer_in_use_is_destroyed_only_with_force) {
    const AllocResult p = persistent("shared");
    {
        WriteTransaction txn(*store_, "test");
        Buffer b = txn.get_buffer(p.buffer.key);
        b.use_count = 2;
        txn.update_buffer(b);
        txn.commit();
    }
    std::string message;
    EXPECT_EQ(
        code_of([&] { teardown_persistent(*store_, config_, "shared", {}, "test"); }, &message),
        ExitCode::exists);
    EXPECT_EQ(message, "persistent buffer 'shared' is used by 2 job(s) (use --force)");
    EXPECT_EQ(buffer(p.buffer.key).state, BufferState::allocated);
    EXPECT_TRUE(fs::exists(p.path));
    TeardownOptions force;
    force.force = true;
    const TeardownResult t = teardown_persistent(*store_, config_, "shared", force, "test");
    EXPECT_TRUE(t.found);
    EXPECT_EQ(buffer(p.buffer.key).state, BufferState::deleted);
    EXPECT_FALSE(fs::exists(p.path));
    EXPECT_NE(audit_log().find("action=destroy buffer=t.p.shared"), std::string::npos);
}

// SlurmUser through sudo gets the teardown Slurm asks for, never --force.
TEST_F(TeardownRootTest, force_is_refused_to_a_caller_through_sudo_and_changes_nothing) {
    const AllocResult r = job(1);
    setenv("SUDO_UID", "65534", 1);
    TeardownOptions force;
    force.force = true;
    EXPECT_EQ(code_of([&] { teardown_job(*store_, config_, 1, force, "test"); }),
              ExitCode::no_perm);
    EXPECT_EQ(code_of([&] { teardown_persistent(*store_, config_, "any", force, "test"); }),
              ExitCode::no_perm);
    EXPECT_EQ(buffer(r.buffer.key).state, BufferState::allocated);
    EXPECT_TRUE(fs::exists(r.path));
    EXPECT_TRUE(teardown_job(*store_, config_, 1, {}, "test").found);  // without it: done
}

// The way on the refusal names must be one that works in the buffer's state: bb-stage out
// refuses a buffer before post-run (65), so a running job's is told to run post-run first.
TEST_F(TeardownTest, a_running_jobs_results_are_kept_with_a_way_on_that_works_now) {
    config_.mode = Mode::standalone;
    const AllocResult r = job(1, results_to("/pfs/results"));
    move(r.buffer.key, {BufferState::staged_in, BufferState::pre_run, BufferState::running});
    std::string message;
    EXPECT_EQ(code_of([&] { teardown_job(*store_, config_, 1, {}, "test"); }, &message),
              ExitCode::unavailable);
    EXPECT_EQ(message,
              "buffer t.1.1 holds job 1's results for /pfs/results, not staged out (it is "
              "running): deliver them with bb-stage post-run --job 1 then bb-stage out --job 1 "
              "once the job has ended, or discard them with bb-teardown --force --job 1");
    EXPECT_EQ(buffer(r.buffer.key).state, BufferState::running);
}

TEST_F(TeardownTest, standalone_results_not_staged_out_are_kept_unless_forced) {
    config_.mode = Mode::standalone;
    const AllocResult r = job(1, results_to("/pfs/results"));
    move(r.buffer.key, {BufferState::staged_in, BufferState::post_run});
    std::ofstream(r.path + "/result") << "only here";
    std::string message;
    EXPECT_EQ(code_of([&] { teardown_job(*store_, config_, 1, {}, "test"); }, &message),
              ExitCode::unavailable);
    EXPECT_EQ(message,
              "buffer t.1.1 holds job 1's results for /pfs/results, not staged out (it is "
              "post-run): deliver them with bb-stage out --job 1, or discard them with "
              "bb-teardown --force --job 1");
    EXPECT_EQ(buffer(r.buffer.key).state, BufferState::post_run);
    EXPECT_TRUE(fs::exists(r.path + "/result"));
    TeardownOptions force;
    force.force = true;
    EXPECT_TRUE(teardown_job(*store_, config_, 1, force, "test").found);
    EXPECT_EQ(buffer(r.buffer.key).state, BufferState::complete);
    EXPECT_FALSE(fs::exists(r.path));
    // In Slurm mode Slurm decides: the same buffer goes without --force.
    config_.mode = Mode::slurm;
    const AllocResult s = job(2, results_to("/pfs/results"));
    move(s.buffer.key, {BufferState::staged_in, BufferState::post_run});
    EXPECT_TRUE(teardown_job(*store_, config_, 2, {}, "test").found);
}

// The user owns the buffer directory and may plant a symlink in it (or swap a subdirectory for
// one): teardown removes the link, never what it points at.
TEST_F(TeardownTest, a_symlink_the_user_planted_is_removed_not_followed) {
    const std::string outside = dir_ + "/outside";
    fs::create_directories(outside + "/sub");
    std::ofstream(outside + "/sub/precious") << "root's";
    const AllocResult r = job(1);
    fs::create_symlink(outside, r.path + "/escape");
    fs::create_directory(r.path + "/dir");
    fs::create_symlink(outside + "/sub/precious", r.path + "/dir/file-link");
    for (const char* name : {"escape", "dir", "dir/file-link"})
        ASSERT_EQ(lchown((r.path + "/" + name).c_str(), user_.uid, user_.gid), 0);
    const TeardownResult t = teardown_job(*store_, config_, 1, {}, "test");
    EXPECT_TRUE(t.reaped);
    EXPECT_FALSE(fs::exists(r.path));
    EXPECT_TRUE(fs::is_empty(dir_ + "/small/trash"));
    EXPECT_TRUE(fs::is_empty(dir_ + "/small/quarantine"));  // all of it was the user's
    std::ifstream in(outside + "/sub/precious");
    std::string text;
    in >> text;
    EXPECT_EQ(text, "root's");
}

// A pool that cannot be opened (its marker gone: not mounted) fails the teardown, which keeps
// the space charged as teardown-fail; once the pool is back, teardown finishes it.
TEST_F(TeardownTest, a_failed_teardown_keeps_the_space_and_is_finished_later) {
    const AllocResult r = job(1);
    const std::string marker = dir_ + "/small/.bbkit-pool";
    fs::rename(marker, dir_ + "/marker");
    std::string message;
    const ExitCode code = code_of([&] { teardown_job(*store_, config_, 1, {}, "test"); }, &message);
    EXPECT_EQ(code, ExitCode::unavailable) << message;
    EXPECT_EQ(message.rfind("teardown of buffer t.1.1 failed: ", 0), 0u) << message;
    EXPECT_NE(message.find("(the space stays charged; fix the cause and run bb-teardown again)"),
              std::string::npos)
        << message;
    const Buffer failed = buffer(r.buffer.key);
    EXPECT_EQ(failed.state, BufferState::teardown_fail);
    EXPECT_EQ(failed.failure.rfind("teardown: ", 0), 0u) << failed.failure;
    EXPECT_TRUE(fs::exists(r.path));
    EXPECT_NE(audit_log().find("action=teardown-fail buffer=t.1.1"), std::string::npos);
    fs::rename(dir_ + "/marker", marker);
    EXPECT_EQ(status().used, KiB);
    const TeardownResult t = teardown_job(*store_, config_, 1, {}, "test");
    EXPECT_TRUE(t.found);
    EXPECT_EQ(buffer(r.buffer.key).state, BufferState::complete);
    EXPECT_EQ(status().used, 0u);
    EXPECT_EQ(status().free, 4 * KiB);
}

TEST_F(TeardownTest, finish_teardown_ends_a_buffer_left_in_teardown) {
    const AllocResult r = job(1);
    move(r.buffer.key, {BufferState::teardown});
    const TeardownResult t = finish_teardown(*store_, config_, r.buffer.key, {}, "recover");
    EXPECT_TRUE(t.found);
    EXPECT_TRUE(t.reaped);
    EXPECT_EQ(buffer(r.buffer.key).state, BufferState::complete);
    EXPECT_FALSE(fs::exists(r.path));
    EXPECT_EQ(status().used, 0u);
}

// A stager holds run/<key>.lock; a hurried teardown stops it rather than wait.
TEST_F(TeardownTest, a_hurried_teardown_stops_the_stager_holding_the_buffer) {
    const AllocResult r = job(1);
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    const pid_t stager = fork();
    if (stager == 0) {
        close(ready[0]);
        RunLock lock = RunLock::acquire(RunLockScope{config_.state_dir, std::nullopt}, r.buffer.key,
                                        std::chrono::seconds(5));
        (void)!write(ready[1], "x", 1);
        for (;;)
            pause();
    }
    close(ready[1]);
    char byte = 0;
    ASSERT_EQ(read(ready[0], &byte, 1), 1);
    close(ready[0]);
    TeardownOptions hurry;
    hurry.hurry = true;
    const auto started = std::chrono::steady_clock::now();
    const TeardownResult t = teardown_job(*store_, config_, 1, hurry, "test");
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
    int status = 0;
    ASSERT_EQ(waitpid(stager, &status, 0), stager);
    EXPECT_TRUE(WIFSIGNALED(status));
    EXPECT_TRUE(t.found);
    EXPECT_EQ(buffer(r.buffer.key).state, BufferState::complete);
}

// reap works within its budget: none leaves the buffer in trash/, still charged.
TEST_F(TeardownTest, the_reaper_releases_space_only_once_the_directory_is_gone) {
    const AllocResult r = job(1);
    // More entries than the remover handles between two looks at the clock (256).
    for (int i = 0; i < 600; ++i)
        std::ofstream(r.path + "/f" + std::to_string(i)) << i;
    TeardownOptions later;
    later.reap_budget = std::chrono::milliseconds(0);
    const TeardownResult t = teardown_job(*store_, config_, 1, later, "test");
    ASSERT_TRUE(t.found);
    ASSERT_FALSE(t.reaped);
    EXPECT_EQ(status().trash, KiB);
    ReapResult none = reap(*store_, config_, std::chrono::milliseconds(0), "test");
    EXPECT_EQ(none.reaped, 0u);
    EXPECT_EQ(none.remaining, 1u);
    EXPECT_EQ(status().trash, KiB);
    const ReapResult done = reap(*store_, config_, std::chrono::seconds(10), "test");
    EXPECT_EQ(done.reaped, 1u);
    EXPECT_EQ(done.remaining, 0u);
    EXPECT_EQ(done.bytes_released, KiB);
    EXPECT_GE(t.entries_removed + done.entries_removed, 600u);
    EXPECT_EQ(status().trash, 0u);
    EXPECT_TRUE(fs::is_empty(dir_ + "/small/trash"));
}
