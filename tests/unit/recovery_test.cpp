// check's findings, one kind at a time, on a real pool directory and state directory, as root
// and as any user (job_user.hpp); recover's own table is tested in pool_test.cpp.
#include "bbkit/recovery.hpp"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "bbkit/pool.hpp"
#include "bbkit/pool_dir.hpp"
#include "bbkit/teardown.hpp"
#include "bbkit/user.hpp"
#include "job_user.hpp"

namespace bbkit {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t KiB = 1024;

class CheckTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char tmpl[] = "/tmp/bbkit-check.XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
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
        store_.reset();
        if (!dir_.empty())
            fs::remove_all(dir_);
    }

    AllocResult allocate_job(std::uint64_t id, std::uint64_t bytes = KiB) {
        AllocRequest r;
        r.job_id = id;
        r.user = user_;
        r.pool = "small";
        r.capacity = bytes;
        return allocate(*store_, config_, r, "test");
    }

    // The only finding of a check (without repair), which must be of `kind`.
    Finding only_finding(FindingKind kind) {
        const std::vector<Finding> findings = check(*store_, config_, false, "test");
        EXPECT_EQ(findings.size(), 1u);
        for (const Finding& f : findings)
            EXPECT_EQ(f.kind, kind) << to_string(f.kind) << ": " << f.subject;
        return findings.empty() ? Finding{} : findings.front();
    }

    std::string dir_;
    Config config_;
    std::optional<StateStore> store_;
    User user_;
};

TEST(FindingKind, prints_the_names_scripts_match) {
    const std::vector<std::pair<FindingKind, std::string>> names{
        {FindingKind::orphan_directory, "orphan-directory"},
        {FindingKind::missing_directory, "missing-directory"},
        {FindingKind::orphan_trash, "orphan-trash"},
        {FindingKind::reaped_unrecorded, "reaped-unrecorded"},
        {FindingKind::interrupted, "interrupted"},
        {FindingKind::over_commit, "over-commit"},
        {FindingKind::expired_persistent, "expired-persistent"},
        {FindingKind::stale_queue, "stale-queue"},
        {FindingKind::pool_unavailable, "pool-unavailable"},
        {FindingKind::usage_mismatch, "usage-mismatch"},
        {FindingKind::kept_entry, "kept-entry"},
        {FindingKind::stale_environment, "stale-environment"}};
    for (const auto& [kind, name] : names)
        EXPECT_EQ(to_string(kind), name);
}

TEST_F(CheckTest, an_environment_file_without_a_live_buffer_is_stale_and_repair_removes_it) {
    allocate_job(1);
    allocate_job(2);
    teardown_job(*store_, config_, 2, TeardownOptions{}, "test");
    PoolDir dir = PoolDir::open(config_.pools.at(0), std::nullopt);
    const std::string env = dir_ + "/small/env/";
    for (const char* name : {"t.1", "t.2", "t.3", "other.4"})
        dir.write_job_environment(name, "BB_JOB_DIR=/x\n", user_.uid, user_.gid);
    std::vector<std::string> stale;
    for (const Finding& f : check(*store_, config_, false, "test")) {
        EXPECT_EQ(f.kind, FindingKind::stale_environment) << f.subject;
        stale.push_back(f.subject);
    }
    std::sort(stale.begin(), stale.end());
    EXPECT_EQ(stale, (std::vector<std::string>{"env/t.2", "env/t.3"}));
    for (const Finding& f : check(*store_, config_, true, "test"))
        EXPECT_TRUE(f.repaired) << f.subject;
    EXPECT_TRUE(fs::exists(env + "t.1"));
    EXPECT_FALSE(fs::exists(env + "t.2"));
    EXPECT_FALSE(fs::exists(env + "t.3"));
    EXPECT_TRUE(fs::exists(env + "other.4"));  // another cluster's
    EXPECT_TRUE(check(*store_, config_, false, "test").empty());
}

TEST_F(CheckTest, recover_removes_an_environment_file_a_killed_teardown_left) {
    allocate_job(1);
    allocate_job(2);
    teardown_job(*store_, config_, 2, TeardownOptions{}, "test");
    PoolDir dir = PoolDir::open(config_.pools.at(0), std::nullopt);
    for (const char* name : {"t.1", "t.2"})  // t.2: as if killed after its teardown's commit
        dir.write_job_environment(name, "BB_JOB_DIR=/x\n", user_.uid, user_.gid);
    const std::vector<std::string> actions =
        recover(*store_, config_, std::chrono::seconds(1), "test");
    EXPECT_TRUE(std::any_of(actions.begin(), actions.end(), [](const std::string& a) {
        return a.find("/env/t.2: removed") != std::string::npos;
    }));
    EXPECT_TRUE(fs::exists(dir_ + "/small/env/t.1"));
    EXPECT_FALSE(fs::exists(dir_ + "/small/env/t.2"));
    EXPECT_TRUE(recover(*store_, config_, std::chrono::seconds(1), "test").empty());
}

TEST_F(CheckTest, env_itself_is_nothing_odd) {
    allocate_job(1);
    fs::remove(dir_ + "/small/env");  // nor its absence (a pool initialised before it)
    EXPECT_TRUE(check(*store_, config_, false, "test").empty());
}

TEST_F(CheckTest, a_consistent_pool_has_no_findings) {
    allocate_job(1);
    EXPECT_TRUE(check(*store_, config_, false, "test").empty());
}

TEST_F(CheckTest, a_directory_without_a_record_is_an_orphan_directory_that_repair_sets_aside) {
    fs::create_directory(dir_ + "/small/job/t.9.1");
    const Finding f = only_finding(FindingKind::orphan_directory);
    EXPECT_EQ(f.pool, "small");
    EXPECT_EQ(f.subject, "job/t.9.1");
    const std::vector<Finding> repaired = check(*store_, config_, true, "test");
    ASSERT_EQ(repaired.size(), 1u);
    EXPECT_TRUE(repaired[0].repaired);
    EXPECT_FALSE(fs::exists(dir_ + "/small/job/t.9.1"));
    EXPECT_FALSE(fs::is_empty(dir_ + "/small/quarantine"));
}

TEST_F(CheckTest, a_trash_entry_without_a_record_is_orphan_trash) {
    fs::create_directory(dir_ + "/small/trash/t.9.1.1700000000000000000");
    EXPECT_EQ(only_finding(FindingKind::orphan_trash).subject, "trash/t.9.1.1700000000000000000");
}

TEST_F(CheckTest, a_buffer_whose_directory_is_gone_is_a_missing_directory_that_repair_closes) {
    const AllocResult a = allocate_job(1);
    fs::remove_all(a.path);
    EXPECT_EQ(only_finding(FindingKind::missing_directory).subject, "t.1.1");
    const std::vector<Finding> repaired = check(*store_, config_, true, "test");
    ASSERT_EQ(repaired.size(), 1u);
    EXPECT_TRUE(repaired[0].repaired);
    EXPECT_TRUE(check(*store_, config_, false, "test").empty());
}

TEST_F(CheckTest, a_trash_record_whose_entry_is_gone_is_reaped_unrecorded) {
    const AllocResult a = allocate_job(1);
    {
        WriteTransaction txn(*store_, "test");
        txn.transition(a.buffer.key, BufferState::teardown);
        txn.transition(a.buffer.key, BufferState::complete);  // in trash/ until reaped
        txn.commit();
    }
    fs::remove_all(a.path);  // and not in trash/ either
    EXPECT_EQ(only_finding(FindingKind::reaped_unrecorded).subject, "t.1.1");
}

TEST_F(CheckTest, an_allocation_whose_process_died_is_interrupted) {
    Buffer b = Buffer::for_key(BufferKey::job("t", 3, 1));
    b.pool = "small";
    b.requested_bytes = b.allocated_bytes = KiB;
    b.uid = user_.uid;
    b.gid = user_.gid;
    b.user = user_.name;
    b.state = BufferState::allocating;
    b.run_lock_holder = ProcessId{999999, 1};
    {
        WriteTransaction txn(*store_, "test");
        txn.insert_buffer(b);
        txn.commit();
    }
    const Finding f = only_finding(FindingKind::interrupted);
    EXPECT_EQ(f.subject, "t.3.1");
    EXPECT_EQ(f.detail, "allocating with no live owner (run bb-pool recover)");
}

TEST_F(CheckTest, more_held_than_the_capacity_is_an_over_commit) {
    config_.mode = Mode::slurm;  // Slurm decides; bbkit never refuses for capacity then
    allocate_job(1, 3 * KiB);
    allocate_job(2, 2 * KiB);
    EXPECT_EQ(only_finding(FindingKind::over_commit).detail, "used 5KiB + trash 0 exceeds 4KiB");
}

TEST_F(CheckTest, a_persistent_buffer_past_its_expiry_is_expired_persistent) {
    config_.flags.enable_persistent = true;  // root needs it not; a caller that is not root does
    AllocRequest r;
    r.persistent_name = "old";
    r.user = unit::root_or_caller();
    r.pool = "small";
    r.capacity = KiB;
    const AllocResult a = allocate(*store_, config_, r, "test");
    {
        WriteTransaction txn(*store_, "test");
        Buffer b = txn.get_buffer(a.buffer.key);
        b.expires = std::chrono::system_clock::now() - std::chrono::hours(1);
        txn.update_buffer(b);
        txn.commit();
    }
    const Finding f = only_finding(FindingKind::expired_persistent);
    EXPECT_EQ(f.detail, "expired; destroy it with bb-teardown --persistent old");
}

TEST_F(CheckTest, a_queued_request_whose_waiter_died_is_a_stale_queue) {
    Buffer b = Buffer::for_key(BufferKey::job("t", 4, 1));
    b.pool = "small";
    b.requested_bytes = b.allocated_bytes = KiB;
    b.uid = user_.uid;
    b.gid = user_.gid;
    b.user = user_.name;
    b.state = BufferState::pending;
    {
        WriteTransaction txn(*store_, "test");
        txn.insert_buffer(b);
        txn.enqueue("small", b.key, KiB, ProcessId{999999, 1});
        txn.commit();
    }
    const Finding f = only_finding(FindingKind::stale_queue);
    EXPECT_EQ(f.subject, "t.4.1");
    EXPECT_EQ(f.detail, "waiter pid 999999 is gone");
}

TEST_F(CheckTest, a_pool_whose_marker_is_gone_is_unavailable) {
    fs::remove(dir_ + "/small/.bbkit-pool");
    const Finding f = only_finding(FindingKind::pool_unavailable);
    EXPECT_EQ(f.pool, "small");
    EXPECT_EQ(f.subject, dir_ + "/small");
}

TEST_F(CheckTest, a_used_figure_unlike_the_rows_is_a_usage_mismatch) {
    allocate_job(1);
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((config_.state_dir + "/state.db").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "UPDATE pool_usage SET used = 1", nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
    EXPECT_EQ(only_finding(FindingKind::usage_mismatch).detail,
              "pool_usage holds 1 bytes but the buffers hold 1024");
}

TEST_F(CheckTest, what_a_teardown_kept_aside_is_a_kept_entry_that_repair_never_removes) {
    fs::create_directory(dir_ + "/small/quarantine/t.8.1.1700000000000000000.kept.1.99");
    EXPECT_EQ(only_finding(FindingKind::kept_entry).subject,
              "quarantine/t.8.1.1700000000000000000.kept.1.99");
    const std::vector<Finding> after_repair = check(*store_, config_, true, "test");
    ASSERT_EQ(after_repair.size(), 1u);
    EXPECT_FALSE(after_repair[0].repaired);
    EXPECT_TRUE(fs::exists(dir_ + "/small/quarantine/t.8.1.1700000000000000000.kept.1.99"));
}

// Findings come in check's order: the pools', then each live buffer's, then the directories'.
TEST_F(CheckTest, findings_keep_checks_order) {
    const AllocResult a = allocate_job(1);
    fs::remove_all(a.path);
    fs::create_directory(dir_ + "/small/job/t.9.1");
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((config_.state_dir + "/state.db").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "UPDATE pool_usage SET used = 1", nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
    std::vector<FindingKind> kinds;
    for (const Finding& f : check(*store_, config_, false, "test"))
        kinds.push_back(f.kind);
    EXPECT_EQ(kinds,
              (std::vector<FindingKind>{FindingKind::usage_mismatch, FindingKind::missing_directory,
                                        FindingKind::orphan_directory}));
}

}  // namespace
}  // namespace bbkit
