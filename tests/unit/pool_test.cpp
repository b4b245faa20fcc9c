// Capacity accounting, the alloc crash protocol, teardown into trash, the reaper and recover,
// on a real pool directory and state directory, as root and as any user (job_user.hpp); what
// needs another user's files (PoolRootTest) skips without root.
#include "bbkit/pool.hpp"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "bbkit/error.hpp"
#include "bbkit/publish.hpp"
#include "bbkit/recovery.hpp"
#include "bbkit/run_lock.hpp"
#include "bbkit/stage.hpp"
#include "bbkit/teardown.hpp"
#include "bbkit/views.hpp"
#include "code_of.hpp"
#include "job_user.hpp"

namespace fs = std::filesystem;
using namespace bbkit;

namespace {

constexpr std::uint64_t KiB = 1024;

class PoolTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char tmpl[] = "/tmp/bbkit-pool.XXXXXX";
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
        store_.reset();
        if (!dir_.empty())
            fs::remove_all(dir_);
    }

    AllocRequest job(std::uint64_t id, std::uint64_t bytes) const {
        AllocRequest r;
        r.job_id = id;
        r.user = user_;
        r.pool = "small";
        r.capacity = bytes;
        return r;
    }

    // Records an `allocating` job buffer of the user's, as an allocator that died leaves it (its
    // recorded directory is `directory` when given).
    Buffer insert_allocating(std::uint64_t id, const std::string& directory = "") {
        Buffer b = Buffer::for_key(BufferKey::job("t", id, 1));
        if (!directory.empty())
            b.directory = directory;
        b.pool = "small";
        b.requested_bytes = b.allocated_bytes = KiB;
        b.uid = user_.uid;
        b.gid = user_.gid;
        b.user = user_.name;
        b.state = BufferState::allocating;
        b.run_lock_holder = ProcessId{999999, 1};
        WriteTransaction txn(*store_, "test");
        txn.insert_buffer(b);
        txn.commit();
        return b;
    }

    PoolStatus status() {
        ReadSnapshot snapshot(*store_);
        return pool_status(snapshot, config_).at(0);
    }

    std::string dir_;
    Config config_;
    std::optional<StateStore> store_;
    User user_;
};

// What needs root: files of a third user in a buffer, a directory the buffer's user must not be
// handed.
class PoolRootTest : public PoolTest {
  protected:
    void SetUp() override {
        if (!unit::as_root())
            GTEST_SKIP() << "needs root to give files to another user";
        PoolTest::SetUp();
    }
};

}  // namespace

TEST_F(PoolTest, alloc_rounds_up_and_hands_the_directory_to_the_user) {
    const AllocResult r = allocate(*store_, config_, job(1, 1500), "test");
    EXPECT_EQ(r.buffer.allocated_bytes, 2 * KiB);
    EXPECT_EQ(r.buffer.state, BufferState::allocated);
    struct stat st {};
    ASSERT_EQ(stat(r.path.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, user_.uid);
    EXPECT_EQ(st.st_mode & 07777, 0700u);
    EXPECT_EQ(status().used, 2 * KiB);
    EXPECT_EQ(status().free, 2 * KiB);
}

TEST_F(PoolTest, identical_alloc_is_idempotent_and_different_one_is_refused) {
    allocate(*store_, config_, job(1, KiB), "test");
    EXPECT_TRUE(allocate(*store_, config_, job(1, KiB), "test").already_existed);
    EXPECT_EQ(status().used, KiB);
    EXPECT_EQ(code_of([&] { allocate(*store_, config_, job(1, 2 * KiB), "test"); }),
              ExitCode::exists);
}

TEST_F(PoolTest, full_pool_is_temp_fail_and_too_large_is_data) {
    allocate(*store_, config_, job(1, 3 * KiB), "test");
    EXPECT_EQ(code_of([&] { allocate(*store_, config_, job(2, 2 * KiB), "test"); }),
              ExitCode::temp_fail);
    EXPECT_EQ(code_of([&] { allocate(*store_, config_, job(3, 5 * KiB), "test"); }),
              ExitCode::data);
    EXPECT_EQ(status().used, 3 * KiB);
}

TEST_F(PoolTest, slurm_mode_never_refuses_for_capacity) {
    config_.mode = Mode::slurm;
    allocate(*store_, config_, job(1, 3 * KiB), "test");
    EXPECT_NO_THROW(allocate(*store_, config_, job(2, 2 * KiB), "test"));
    EXPECT_EQ(status().used, 5 * KiB);  // over-committed, as Slurm decided
    const auto findings = check(*store_, config_, false, "test");
    ASSERT_FALSE(findings.empty());
    EXPECT_EQ(findings.front().kind, FindingKind::over_commit);
}

TEST_F(PoolTest, datawarp_mode_gives_a_job_without_space_a_session_of_zero_bytes) {
    AllocRequest persistent;
    persistent.persistent_name = "ps";
    persistent.user = user_;
    persistent.pool = "small";
    persistent.capacity = KiB;
    config_.flags.enable_persistent = true;
    allocate(*store_, config_, persistent, "test");

    AllocCommand command;
    command.job_id = 7;
    command.user = user_.name;
    command.text.bb = "#DW persistentdw name=ps";
    EXPECT_EQ(code_of([&] { build_alloc_request(config_, command); }), ExitCode::data);

    config_.mode = Mode::datawarp;
    config_.directives = datawarp_directives();
    const AllocRequest session = build_alloc_request(config_, command);
    EXPECT_EQ(session.capacity, 0u);
    EXPECT_EQ(session.pool, "small");
    const AllocResult r = allocate(*store_, config_, session, "test");
    EXPECT_TRUE(is_session_only(r.buffer));
    EXPECT_EQ(r.buffer.allocated_bytes, 0u);
    EXPECT_EQ(status().used, KiB);  // the persistent buffer's only
    {
        ReadSnapshot snapshot(*store_);
        EXPECT_EQ(snapshot.get_buffer(BufferKey::persistent("t", "ps")).use_count, 1u);
    }
    std::string ps_dir;
    {
        ReadSnapshot snapshot(*store_);
        ps_dir = snapshot.get_buffer(BufferKey::persistent("t", "ps")).directory;
    }
    EXPECT_EQ(ps_dir.rfind("persistent/t.ps.", 0), 0u) << ps_dir;
    EXPECT_EQ(job_paths(*store_, config_, 7),
              "DW_PERSISTENT_STRIPED_ps=" + dir_ + "/small/" + ps_dir + "\n");
    // Space comes from Slurm alone: a script asking for some without --capacity gets none.
    AllocCommand asks = command;
    asks.job_id = 9;
    asks.text.bb = "#DW jobdw capacity=2KiB";
    EXPECT_EQ(code_of([&] { build_alloc_request(config_, asks); }), ExitCode::data);
    asks.capacity = "1KiB";
    EXPECT_EQ(build_alloc_request(config_, asks).capacity, KiB);
    // Persistent buffers are created for jobs' users: the owner's rights count, even for root.
    config_.flags.enable_persistent = false;
    AllocRequest theirs = persistent;
    theirs.persistent_name = "theirs";
    EXPECT_EQ(code_of([&] { allocate(*store_, config_, theirs, "test"); }), ExitCode::no_perm);
    // Outside datawarp mode a job buffer still needs space.
    config_.mode = Mode::slurm;
    EXPECT_EQ(code_of([&] { allocate(*store_, config_, job(8, 0), "test"); }), ExitCode::data);
}

TEST_F(PoolTest, user_capacity_limits_standalone_users) {
    config_.limits.user_capacity = 2 * KiB;
    allocate(*store_, config_, job(1, 2 * KiB), "test");
    EXPECT_EQ(code_of([&] { allocate(*store_, config_, job(2, KiB), "test"); }),
              ExitCode::temp_fail);
}

TEST_F(PoolTest, draining_pool_refuses_new_buffers) {
    set_draining(*store_, config_, "small", true, "test");
    EXPECT_EQ(code_of([&] { allocate(*store_, config_, job(1, KiB), "test"); }),
              ExitCode::unavailable);
    set_draining(*store_, config_, "small", false, "test");
    EXPECT_NO_THROW(allocate(*store_, config_, job(1, KiB), "test"));
}

TEST_F(PoolTest, teardown_moves_to_trash_and_reap_releases) {
    const AllocResult r = allocate(*store_, config_, job(1, 2 * KiB), "test");
    std::ofstream(r.path + "/data") << "x";
    TeardownOptions options;
    options.reap_budget = std::chrono::milliseconds(0);  // leave it to the reaper
    const TeardownResult t = teardown_job(*store_, config_, 1, options, "test");
    EXPECT_TRUE(t.found);
    EXPECT_FALSE(fs::exists(r.path));
    EXPECT_EQ(status().used, 0u);
    if (!t.reaped) {
        EXPECT_EQ(status().trash, 2 * KiB);  // still charged until the bytes are gone
        const ReapResult reaped = reap(*store_, config_, std::chrono::seconds(5), "test");
        EXPECT_EQ(reaped.reaped, 1u);
    }
    EXPECT_EQ(status().trash, 0u);
    EXPECT_EQ(status().free, 4 * KiB);
    EXPECT_FALSE(teardown_job(*store_, config_, 1, options, "test").found);
}

TEST_F(PoolTest, teardown_within_budget_ends_and_releases_in_one_transaction) {
    const AllocResult r = allocate(*store_, config_, job(1, 2 * KiB), "test");
    fs::create_directories(r.path + "/a/b");
    std::ofstream(r.path + "/a/b/data") << "x";
    const TeardownResult t = teardown_job(*store_, config_, 1, {}, "test");
    EXPECT_TRUE(t.reaped);
    EXPECT_FALSE(fs::exists(r.path));
    EXPECT_TRUE(fs::is_empty(dir_ + "/small/trash"));
    EXPECT_EQ(status().trash, 0u);
    EXPECT_EQ(status().free, 4 * KiB);
    ReadSnapshot snapshot(*store_);
    const std::vector<HistoryEntry> h = snapshot.history(r.buffer.key);
    ASSERT_GE(h.size(), 2u);
    EXPECT_EQ(h[h.size() - 2].to, BufferState::teardown);
    EXPECT_EQ(h.back().to, BufferState::complete);
}

// A user can move into their buffer a directory of theirs that holds another user's
// directories (same file system): root removes only what the owner could have removed.
TEST_F(PoolRootTest, teardown_keeps_aside_what_the_buffers_owner_could_not_delete) {
    constexpr uid_t other = 54321;
    const AllocResult r = allocate(*store_, config_, job(1, 2 * KiB), "test");
    fs::create_directories(r.path + "/proj/theirs/deeper");
    std::ofstream(r.path + "/proj/theirs/deeper/file") << "theirs";
    fs::create_directory(r.path + "/proj/empty-theirs");
    std::ofstream(r.path + "/proj/their-file") << "a name in the owner's directory";
    ASSERT_EQ(chown((r.path + "/proj").c_str(), user_.uid, user_.gid), 0);
    for (const char* name :
         {"theirs", "theirs/deeper", "theirs/deeper/file", "empty-theirs", "their-file"})
        ASSERT_EQ(chown((r.path + "/proj/" + name).c_str(), other, other), 0);
    const TeardownResult t = teardown_job(*store_, config_, 1, {}, "test");
    EXPECT_TRUE(t.reaped);  // nothing of the buffer is left in trash/
    EXPECT_TRUE(fs::is_empty(dir_ + "/small/trash"));
    std::vector<fs::path> kept;
    for (const auto& entry : fs::directory_iterator(dir_ + "/small/quarantine"))
        kept.push_back(entry.path());
    ASSERT_EQ(kept.size(), 1u);
    EXPECT_NE(kept[0].filename().string().find(".kept."), std::string::npos);
    struct stat st {};
    ASSERT_EQ(stat(kept[0].c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, other);
    std::ifstream in(kept[0] / "deeper" / "file");
    std::string text;
    in >> text;
    EXPECT_EQ(text, "theirs");
    const std::vector<Finding> findings = check(*store_, config_, true, "test");
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_EQ(findings[0].kind, FindingKind::kept_entry);
    EXPECT_FALSE(findings[0].repaired);  // repair never deletes
    EXPECT_TRUE(fs::exists(kept[0] / "deeper" / "file"));
    std::ifstream audit_log(config_.state_dir + "/log/audit.log");
    std::stringstream audit_text;
    audit_text << audit_log.rdbuf();
    EXPECT_NE(audit_text.str().find("action=kept buffer=t.1.1"), std::string::npos);
}

// A piece (a deep directory moved up into trash/ on the way) is judged against the buffer's
// owner its name records: one that is someone else's was swapped in, and is kept aside.
TEST_F(PoolRootTest, reap_keeps_a_piece_that_is_not_the_buffers_owners) {
    constexpr uid_t other = 54321;
    const AllocResult r = allocate(*store_, config_, job(1, 2 * KiB), "test");
    const std::string piece =
        dir_ + "/small/trash/" + trash_name(r.buffer) + ".piece1.42." + std::to_string(user_.uid);
    fs::create_directories(piece + "/inner");
    std::ofstream(piece + "/inner/file") << "someone else's";
    for (const std::string& path : {piece, piece + "/inner", piece + "/inner/file"})
        ASSERT_EQ(chown(path.c_str(), other, other), 0);
    const TeardownResult t = teardown_job(*store_, config_, 1, {}, "test");
    EXPECT_TRUE(t.reaped);
    EXPECT_TRUE(fs::is_empty(dir_ + "/small/trash"));
    bool kept = false;
    for (const auto& entry : fs::recursive_directory_iterator(dir_ + "/small/quarantine"))
        kept = kept || entry.path().filename() == "file";
    EXPECT_TRUE(kept);
}

TEST_F(PoolTest, a_teardown_killed_before_its_last_commit_is_finished_by_recover) {
    // Killed after the rename into trash/ (or after the reap too), before the commit: the
    // record says teardown and the directory is in trash/ or already gone.
    for (const bool reaped_before_kill : {false, true}) {
        const std::uint64_t id = reaped_before_kill ? 2 : 1;
        const AllocResult r = allocate(*store_, config_, job(id, KiB), "test");
        {
            WriteTransaction txn(*store_, "test");
            txn.transition(r.buffer.key, BufferState::teardown);
            txn.commit();
        }
        const std::string trashed = dir_ + "/small/trash/" + trash_name(r.buffer);
        fs::rename(r.path, trashed);
        if (reaped_before_kill)
            fs::remove(trashed);
        EXPECT_EQ(status().used, KiB);  // still charged
        recover(*store_, config_, std::chrono::seconds(5), "test");
        ReadSnapshot snapshot(*store_);
        const Buffer b = snapshot.get_buffer(r.buffer.key);
        EXPECT_EQ(b.state, BufferState::complete);
        EXPECT_TRUE(b.reaped);
        EXPECT_FALSE(fs::exists(trashed));
        EXPECT_EQ(pool_status(snapshot, config_).at(0).free, 4 * KiB);
    }
}

TEST_F(PoolTest, pools_json_follows_every_change_of_space) {
    // publish() recomputes pools.json only in transactions that change space: the file must
    // still match the records after each step.
    const auto matches = [&](const char* step) {
        std::ifstream in(config_.state_dir + "/pools.json");
        std::stringstream file;
        file << in.rdbuf();
        ReadSnapshot snapshot(*store_);
        EXPECT_EQ(file.str(), slurm_pools_json(snapshot, config_) + "\n") << step;
    };
    const AllocResult r = allocate(*store_, config_, job(1, 2 * KiB), "test");
    matches("after alloc");
    {
        WriteTransaction txn(*store_, "test");
        txn.transition(r.buffer.key, BufferState::staging_in);
        EXPECT_FALSE(txn.pools_touched());  // space held before and after
        publish(txn, *store_, config_);
        txn.commit();
    }
    matches("after a transition that keeps the space");
    teardown_job(*store_, config_, 1, {}, "test");
    matches("after teardown");
    EXPECT_EQ(status().free, 4 * KiB);
}

TEST_F(PoolTest, alloc_after_teardown_is_a_new_incarnation) {
    allocate(*store_, config_, job(7, KiB), "test");
    teardown_job(*store_, config_, 7, {}, "test");
    const AllocResult again = allocate(*store_, config_, job(7, KiB), "test");
    EXPECT_EQ(again.buffer.key.incarnation, 2u);
    EXPECT_EQ(again.buffer.directory.rfind("job/t.7.2.", 0), 0u) << again.buffer.directory;
    EXPECT_TRUE(fs::exists(dir_ + "/small/" + again.buffer.directory));
}

TEST_F(PoolTest, two_clusters_sharing_a_pool_never_share_a_buffer_directory) {
    Config other = config_;
    other.cluster = "u";
    other.state_dir = dir_ + "/state-u";
    StateStore other_store(other);
    init_pool(other_store, other, "small", "test");
    const AllocResult mine = allocate(*store_, config_, job(4242, KiB), "test");
    std::ofstream(mine.path + "/data") << "cluster t's";
    AllocRequest theirs = job(4242, KiB);
    theirs.user = unit::root_or_caller();
    const AllocResult other_buffer = allocate(other_store, other, theirs, "test");
    EXPECT_EQ(mine.path.rfind(dir_ + "/small/job/t.4242.1.", 0), 0u) << mine.path;
    EXPECT_EQ(other_buffer.path.rfind(dir_ + "/small/job/u.4242.1.", 0), 0u) << other_buffer.path;
    teardown_job(other_store, other, 4242, {}, "test");
    struct stat st {};
    ASSERT_EQ(stat((mine.path + "/data").c_str(), &st), 0);
    ASSERT_EQ(stat(mine.path.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, user_.uid);
}

TEST_F(PoolTest, check_repair_leaves_another_clusters_buffers_on_a_shared_pool_alone) {
    Config other = config_;
    other.cluster = "u";
    other.state_dir = dir_ + "/state-u";
    other.flags.enable_persistent = true;  // root needs it not; a caller that is not root does
    StateStore other_store(other);
    init_pool(other_store, other, "small", "test");
    const AllocResult theirs = allocate(other_store, other, job(7, KiB), "test");
    AllocRequest persistent;
    persistent.persistent_name = "shared";
    persistent.user = unit::root_or_caller();
    persistent.pool = "small";
    persistent.capacity = KiB;
    const AllocResult shared = allocate(other_store, other, persistent, "test");
    // What the other cluster's teardowns leave in trash/ and quarantine/.
    fs::create_directory(dir_ + "/small/trash/u.8.1.1700000000000000000");
    fs::create_directory(dir_ + "/small/quarantine/u.8.1.1700000000000000000.kept.1.99");
    const std::vector<Finding> findings = check(*store_, config_, true, "test");
    EXPECT_TRUE(findings.empty()) << to_string(findings.front().kind) << " "
                                  << findings.front().subject;
    EXPECT_TRUE(fs::exists(theirs.path));
    EXPECT_TRUE(fs::exists(shared.path));
    EXPECT_TRUE(fs::exists(dir_ + "/small/trash/u.8.1.1700000000000000000"));
    EXPECT_EQ(
        std::distance(fs::directory_iterator(dir_ + "/small/quarantine"), fs::directory_iterator{}),
        1);
    EXPECT_EQ(cluster_of_entry("job", "a.b.7.1", "t"), "a.b");
    EXPECT_EQ(cluster_of_entry("job", "a.b.7.1.0123456789abcdef", "t"), "a.b");
    EXPECT_EQ(cluster_of_entry("persistent", "a.b.run-1.0123456789abcdef", "t"), "a.b");
    EXPECT_EQ(cluster_of_entry("persistent", "main.abcdef0123456789", "t"), "main");  // older
    EXPECT_EQ(cluster_of_entry("job", "7.1", "t"), std::nullopt);  // named before clusters were
    EXPECT_EQ(cluster_of_entry("trash", "u.p.x.123.piece2.99.65534", "t"), "u");
    EXPECT_EQ(cluster_of_entry("trash", "u.p.climate.v2.123", "t"), "u");
    EXPECT_EQ(cluster_of_entry("quarantine", "u.8.1.123.kept.1.99", "t"), "u");
    // A persistent name may hold '.': this cluster's own entries are told by their prefix.
    EXPECT_EQ(cluster_of_entry("persistent", "t.climate.v2", "t"), "t");
    EXPECT_EQ(cluster_of_entry("persistent", "t.climate.v2.0123456789abcdef", "t"), "t");
    EXPECT_EQ(cluster_of_entry("persistent", "u.shared", "t"), "u");
    EXPECT_EQ(cluster_of_entry("persistent", "u.shared.0123456789abcdef", "t"), "u");
}

TEST_F(PoolRootTest, alloc_never_adopts_a_directory_that_is_already_there) {
    // As another state directory with the same cluster name (or anyone) could have left it,
    // under the name a buffer got before names had a random part: the new buffer's directory
    // is another, and the one that was there is left as it was, for check to report.
    const std::string taken = dir_ + "/small/job/t.9.1";
    fs::create_directory(taken);
    std::ofstream(taken + "/secret") << "not the new owner's";
    chmod(taken.c_str(), 0700);
    const AllocResult result = allocate(*store_, config_, job(9, KiB), "test");
    EXPECT_NE(result.path, taken);
    EXPECT_EQ(result.path.rfind(taken + ".", 0), 0u) << result.path;
    struct stat st {};
    ASSERT_EQ(stat(taken.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 0u);  // never chowned to the new buffer's user
    EXPECT_TRUE(fs::exists(taken + "/secret"));
    const auto findings = check(*store_, config_, false, "test");
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_EQ(findings[0].kind, FindingKind::orphan_directory);
    EXPECT_EQ(findings[0].subject, "job/t.9.1");
}

TEST_F(PoolRootTest, recover_rolls_back_an_allocation_whose_directory_is_not_its_own) {
    const Buffer half = insert_allocating(6);
    const std::string foreign = dir_ + "/small/" + half.directory;
    fs::create_directory(foreign);
    std::ofstream(foreign + "/data") << "someone else's";
    chown(foreign.c_str(), 1, 1);
    recover(*store_, config_, std::chrono::seconds(1), "test");
    ReadSnapshot snapshot(*store_);
    EXPECT_EQ(snapshot.get_buffer(half.key).state, BufferState::complete);
    struct stat st {};
    ASSERT_EQ(stat(foreign.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 1u);
    EXPECT_TRUE(fs::exists(foreign + "/data"));
}

TEST_F(PoolTest, a_buffer_recorded_with_the_old_directory_name_keeps_working) {
    // Versions before the cluster was part of the name recorded "job/ID.INCARNATION".
    const Buffer old = insert_allocating(5, "job/5.1");
    {
        WriteTransaction txn(*store_, "test");
        txn.transition(old.key, BufferState::allocated);
        txn.commit();
    }
    fs::create_directory(dir_ + "/small/job/5.1");
    chown((dir_ + "/small/job/5.1").c_str(), user_.uid, user_.gid);
    EXPECT_TRUE(check(*store_, config_, false, "test").empty());
    teardown_job(*store_, config_, 5, {}, "test");
    EXPECT_FALSE(fs::exists(dir_ + "/small/job/5.1"));
    EXPECT_TRUE(check(*store_, config_, false, "test").empty());
}

TEST_F(PoolTest, recover_rolls_a_dead_allocation_forward_when_its_directory_exists) {
    // Records an allocator left behind when it died: one whose directory was made, one not.
    const Buffer half = insert_allocating(2);
    fs::create_directory(dir_ + "/small/" + half.directory);
    const Buffer gone = insert_allocating(3);
    const auto actions = recover(*store_, config_, std::chrono::seconds(1), "test");
    ReadSnapshot snapshot(*store_);
    EXPECT_EQ(snapshot.get_buffer(half.key).state, BufferState::allocated);
    EXPECT_EQ(snapshot.get_buffer(gone.key).state, BufferState::complete);
    struct stat st {};
    ASSERT_EQ(stat((dir_ + "/small/" + half.directory).c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, user_.uid);  // re-owned: the crash may have come before fchown
    EXPECT_EQ(pool_status(snapshot, config_).at(0).used, KiB);
    EXPECT_GE(actions.size(), 2u);
}

TEST_F(PoolTest, a_missing_marker_makes_the_pool_unavailable) {
    fs::rename(dir_ + "/small/.bbkit-pool", dir_ + "/marker");
    EXPECT_EQ(code_of([&] { allocate(*store_, config_, job(1, KiB), "test"); }),
              ExitCode::unavailable);
}

TEST_F(PoolTest, check_repair_quarantines_orphans_and_never_deletes) {
    fs::create_directory(dir_ + "/small/job/55.1");
    std::ofstream(dir_ + "/small/job/55.1/keep") << "data";
    auto findings = check(*store_, config_, false, "test");
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_EQ(findings[0].kind, FindingKind::orphan_directory);
    findings = check(*store_, config_, true, "test");
    EXPECT_TRUE(findings.back().repaired);
    bool kept = false;
    for (const auto& entry : fs::recursive_directory_iterator(dir_ + "/small/quarantine"))
        kept = kept || entry.path().filename() == "keep";
    EXPECT_TRUE(kept);
    EXPECT_TRUE(check(*store_, config_, false, "test").empty());
}

// pool_usage is kept by bbkit's writes; a figure that drifted from the rows (a hand-edited
// state.db) is a finding, and --repair recomputes it from the rows.
TEST_F(PoolTest, check_finds_and_repairs_a_used_figure_that_differs_from_the_rows) {
    allocate(*store_, config_, job(1, KiB), "test");
    allocate(*store_, config_, job(2, 2 * KiB), "test");
    EXPECT_TRUE(check(*store_, config_, false, "test").empty());
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((config_.state_dir + "/state.db").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "UPDATE pool_usage SET used = 1", nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
    auto findings = check(*store_, config_, false, "test");
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_EQ(findings[0].kind, FindingKind::usage_mismatch);
    EXPECT_EQ(findings[0].detail, "pool_usage holds 1 bytes but the buffers hold 3072");
    EXPECT_FALSE(findings[0].repaired);
    findings = check(*store_, config_, true, "test");
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_TRUE(findings[0].repaired);
    EXPECT_EQ(status().used, 3 * KiB);
    EXPECT_TRUE(check(*store_, config_, false, "test").empty());
}

// Found by tests/fault/stress: a teardown between its rename into trash/ and its commit made
// check report its trash entry as an orphan, and check --repair quarantine it.
TEST_F(PoolTest, check_leaves_the_trash_entry_of_a_teardown_in_flight_alone) {
    const AllocResult a = allocate(*store_, config_, job(7, KiB), "test");
    {
        WriteTransaction txn(*store_, "test");
        Buffer b = txn.transition(a.buffer.key, BufferState::teardown);
        b.run_lock_holder = ProcessId::self();  // the teardown is alive and working
        txn.update_buffer(b);
        txn.commit();
    }
    PoolDir dir = PoolDir::open(config_.pools.at(0), std::nullopt);
    ASSERT_TRUE(dir.move_to_trash(a.buffer.directory, trash_name(a.buffer)));
    EXPECT_TRUE(check(*store_, config_, false, "test").empty());
    for (const Finding& f : check(*store_, config_, true, "test"))
        EXPECT_NE(f.kind, FindingKind::orphan_trash) << f.subject;
    EXPECT_TRUE(dir.exists("trash/" + trash_name(a.buffer)));
    EXPECT_TRUE(fs::is_empty(dir_ + "/small/quarantine"));
}

TEST_F(PoolTest, environment_lines_name_every_buffer_path) {
    Buffer job = Buffer::for_key(BufferKey::job("main", 1, 1));
    job.requested_bytes = 1 << 20;
    const std::string env =
        job_environment(job, "/bb/job/1.1", {{"my-data", "/bb/persistent/my-data"}});
    EXPECT_EQ(env,
              "BB_JOB_DIR=/bb/job/1.1\nDW_JOB_STRIPED=/bb/job/1.1\nDW_JOB_PRIVATE=/bb/job/1.1\n"
              "DW_PERSISTENT_STRIPED_my_data=/bb/persistent/my-data\n");
    EXPECT_THROW(job_environment(job, "/bb/a\nb", {}), Error);
}

TEST_F(PoolTest, a_session_without_space_has_only_its_persistent_buffers_in_its_environment) {
    Buffer job = Buffer::for_key(BufferKey::job("main", 1, 1));
    job.requested_bytes = 0;
    EXPECT_EQ(job_environment(job, "/bb/job/1.1", {{"ps", "/bb/persistent/ps"}}),
              "DW_PERSISTENT_STRIPED_ps=/bb/persistent/ps\n");
    EXPECT_EQ(job_environment(job, "/bb/job/1.1", {}), "");
}

TEST_F(PoolTest, job_level_env_file_follows_the_current_incarnation) {
    auto read = [](const std::string& path) {
        std::ifstream in(path);
        std::ostringstream text;
        text << in.rdbuf();
        return text.str();
    };
    const std::string job_level = dir_ + "/state/env/t.7.env";
    const AllocResult first = allocate(*store_, config_, job(7, KiB), "test");
    EXPECT_EQ(read(job_level), read(dir_ + "/state/env/t.7.1.env"));
    EXPECT_NE(read(job_level).find("BB_JOB_DIR=" + first.path + "\n"), std::string::npos);
    EXPECT_TRUE(fs::equivalent(job_level, dir_ + "/state/env/t.7.1.env")) << "one file, two names";
    EXPECT_EQ(fs::hard_link_count(job_level), 2u);
    // A copy with the same content, as older versions wrote it, goes with its buffer too.
    const std::string text = read(job_level);
    fs::remove(job_level);
    std::ofstream(job_level) << text;
    ASSERT_FALSE(fs::equivalent(job_level, dir_ + "/state/env/t.7.1.env"));
    teardown_job(*store_, config_, 7, {}, "test");
    EXPECT_FALSE(fs::exists(job_level));
    EXPECT_FALSE(fs::exists(dir_ + "/state/env/t.7.1.env"));
    const AllocResult second = allocate(*store_, config_, job(7, KiB), "test");
    EXPECT_NE(read(job_level).find(second.path + "\n"), std::string::npos);
    // Removing an older incarnation's files leaves the current one's job-level copy.
    remove_env_files(*store_, BufferKey::job("t", 7, 1));
    EXPECT_TRUE(fs::exists(job_level));
    // recover rebuilds a lost copy.
    fs::remove(job_level);
    recover(*store_, config_, std::chrono::seconds(1), "test");
    EXPECT_NE(read(job_level).find(second.path + "\n"), std::string::npos);
}

// ---- availability and init --replace ------------------------------------------------------

namespace {

// Empties the pool's directory as a reformat or a tmpfs after a reboot would.
void wipe(const std::string& path) {
    for (const auto& entry : fs::directory_iterator(path))
        fs::remove_all(entry.path());
}

std::string marker_uuid(const std::string& path) {
    std::ifstream in(path + "/.bbkit-pool");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("uuid=", 0) == 0)
            return line.substr(5);
    return "";
}

}  // namespace

TEST_F(PoolTest, availability_follows_the_marker_and_the_drain_flag) {
    EXPECT_EQ(status().availability, PoolAvailability::up);
    set_draining(*store_, config_, "small", true, "test");
    EXPECT_EQ(status().availability, PoolAvailability::draining);
    set_draining(*store_, config_, "small", false, "test");
    fs::remove(dir_ + "/small/.bbkit-pool");
    EXPECT_EQ(status().availability, PoolAvailability::unavailable);
    std::ofstream(dir_ + "/small/.bbkit-pool") << "name=small\nuuid=not-the-recorded-one\n";
    EXPECT_EQ(status().availability, PoolAvailability::unavailable);
    EXPECT_EQ(pool_availability(config_.pools[0], std::nullopt, false),
              PoolAvailability::uninitialised);
    EXPECT_EQ(pool_availability({"gone", dir_ + "/nothing", KiB, KiB}, std::string("x"), false),
              PoolAvailability::unavailable);
}

TEST_F(PoolTest, slurm_pools_json_reports_no_free_space_unless_up) {
    PoolStatus pool = status();
    EXPECT_NE(slurm_pools_json({pool}).find("\"free\":4"), std::string::npos);
    for (PoolAvailability a : {PoolAvailability::draining, PoolAvailability::unavailable,
                               PoolAvailability::uninitialised}) {
        pool = status();
        pool.availability = a;
        pool.draining = a == PoolAvailability::draining;
        pool.initialized = a != PoolAvailability::uninitialised;
        EXPECT_NE(slurm_pools_json({pool}).find("\"free\":0"), std::string::npos) << to_string(a);
    }
}

TEST_F(PoolTest, replace_closes_lost_records_releases_space_and_writes_a_new_uuid) {
    allocate(*store_, config_, job(1, KiB), "test");
    allocate(*store_, config_, job(2, KiB), "test");
    TeardownOptions options;
    options.reap_budget = std::chrono::milliseconds(0);
    teardown_job(*store_, config_, 2, options, "test");
    const std::string old_uuid = marker_uuid(dir_ + "/small");
    wipe(dir_ + "/small");
    EXPECT_EQ(status().availability, PoolAvailability::unavailable);
    EXPECT_EQ(code_of([&] { init_pool(*store_, config_, "small", "test"); }),
              ExitCode::unavailable);

    const ReplaceResult r = replace_pool(*store_, config_, "small", "test");
    EXPECT_EQ(r.old_uuid, old_uuid);
    EXPECT_NE(r.marker.uuid, old_uuid);
    EXPECT_EQ(marker_uuid(dir_ + "/small"), r.marker.uuid);
    ASSERT_EQ(r.closed.size(), 1u);
    EXPECT_EQ(r.closed[0], "t.1.1");
    const PoolStatus after = status();
    EXPECT_EQ(after.availability, PoolAvailability::up);
    EXPECT_EQ(after.used, 0u);
    EXPECT_EQ(after.trash, 0u);
    EXPECT_EQ(after.free, 4 * KiB);
    EXPECT_TRUE(fs::is_directory(dir_ + "/small/job"));
    EXPECT_TRUE(fs::is_directory(dir_ + "/small/quarantine"));
    {
        ReadSnapshot snapshot(*store_);
        const Buffer b = snapshot.get_buffer(BufferKey::job("t", 1, 1));
        EXPECT_EQ(b.state, BufferState::complete);
        EXPECT_TRUE(b.reaped);
        EXPECT_EQ(snapshot.find_pool("small")->uuid, r.marker.uuid);
    }
    EXPECT_FALSE(teardown_job(*store_, config_, 1, options, "test").found);
    EXPECT_NO_THROW(allocate(*store_, config_, job(3, KiB), "test"));
}

TEST_F(PoolTest, replace_refuses_a_pool_whose_marker_or_directories_are_in_place) {
    allocate(*store_, config_, job(1, KiB), "test");
    EXPECT_EQ(code_of([&] { replace_pool(*store_, config_, "small", "test"); }), ExitCode::exists);
    fs::remove(dir_ + "/small/.bbkit-pool");
    EXPECT_EQ(code_of([&] { replace_pool(*store_, config_, "small", "test"); }),
              ExitCode::exists);  // job/t.1.1 is still there: not a recreated file system
    EXPECT_EQ(status().used, KiB);
    EXPECT_EQ(code_of([&] { replace_pool(*store_, config_, "nope", "test"); }), ExitCode::no_input);
}

TEST_F(PoolTest, replace_refuses_while_a_buffers_run_lock_is_held) {
    allocate(*store_, config_, job(1, KiB), "test");
    wipe(dir_ + "/small");
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        // Holds the run lock as a stager would, until killed.
        std::optional<RunLock> lock = RunLock::try_acquire(
            RunLockScope{config_.state_dir, std::nullopt}, parse_buffer_key("t.1.1"));
        std::ofstream(dir_ + "/held") << (lock ? "yes" : "no");
        pause();
        _exit(0);
    }
    for (int i = 0; i < 500 && !fs::exists(dir_ + "/held"); ++i)
        usleep(10000);
    EXPECT_EQ(code_of([&] { replace_pool(*store_, config_, "small", "test"); }),
              ExitCode::unavailable);
    EXPECT_EQ(status().used, KiB);
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    EXPECT_NO_THROW(replace_pool(*store_, config_, "small", "test"));
    EXPECT_EQ(status().used, 0u);
}

TEST_F(PoolTest, wait_without_a_value_is_no_limit_and_garbage_is_a_usage_error) {
    EXPECT_GE(parse_wait("", 600), std::chrono::hours(24 * 300));
    EXPECT_GE(parse_wait("none", 600), std::chrono::hours(24 * 300));
    EXPECT_EQ(parse_wait("1.5", 600), std::chrono::milliseconds(1500));
    EXPECT_EQ(parse_wait("0", 600), std::chrono::milliseconds(0));
    for (const char* bad : {"abc", "-1", "1x", "nan", "Default"})
        EXPECT_EQ(code_of([&] { parse_wait(bad, 600); }), ExitCode::usage) << bad;
}

TEST_F(PoolTest, wait_default_is_the_configured_queue_timeout) {
    EXPECT_EQ(parse_wait("default", 7), std::chrono::seconds(7));
    EXPECT_EQ(parse_wait("default", Timeouts{}.queue), std::chrono::seconds(600));
}

namespace {

// Slurm's allocation is the law on a node (bbkit(7), NODE-LOCAL POOLS): a node-local buffer
// holds no more units of its GRES than Slurm's per-node text grants, and none without; on a
// job's nodes another pool is the job's error. Every request size around the grant, with the
// grant in each form scontrol prints.
TEST_F(PoolTest, a_node_local_buffer_holds_no_more_than_slurm_granted_on_the_node) {
    config_.mode = Mode::standalone;
    config_.pools.front().node_local = true;
    config_.pools.front().gres = "bbnvme";
    AllocCommand command;
    command.job_id = 11;
    command.user = "nobody";
    command.node = "n1";
    command.nodes = "n1,n2";
    for (const char* form : {"bbnvme(CNT:2)", "gres:bbnvme:2", "gres/gpu:1,gres/bbnvme:x:2"}) {
        for (std::uint64_t bytes = 1; bytes <= 4 * KiB; bytes += 511) {
            command.capacity = std::to_string(bytes);
            command.slurm_gres = form;
            std::string message;
            const ExitCode code = code_of([&] { build_alloc_request(config_, command); }, &message);
            if (bytes <= 2 * KiB)
                EXPECT_EQ(code, ExitCode::ok) << form << " " << bytes << ": " << message;
            else
                EXPECT_EQ(code, ExitCode::data) << form << " " << bytes;
            if (code == ExitCode::data) {
                EXPECT_NE(message.find("but Slurm gave it 2 bbnvme on this node, 2KiB"),
                          std::string::npos)
                    << message;
            }
        }
    }
    command.capacity = "1KiB";
    for (const char* none : {"", "N/A", "gres/gpu:4"}) {
        command.slurm_gres = none;
        std::string message;
        EXPECT_EQ(code_of([&] { build_alloc_request(config_, command); }, &message),
                  ExitCode::data);
        EXPECT_NE(message.find("Slurm gave it no bbnvme GRES on this node"), std::string::npos)
            << message;
    }
    command.slurm_gres.reset();
    EXPECT_NO_THROW(build_alloc_request(config_, command));
    // A pool that is not node-local, on a job's nodes: the job's error, whatever Slurm gave.
    config_.pools.front().node_local = false;
    command.slurm_gres = "bbnvme:4";
    EXPECT_EQ(code_of([&] { build_alloc_request(config_, command); }), ExitCode::data);
    command.slurm_gres.reset();
    std::string message;
    EXPECT_EQ(code_of([&] { build_alloc_request(config_, command); }, &message), ExitCode::data);
    EXPECT_NE(message.find("which is not node-local"), std::string::npos) << message;
}

}  // namespace
