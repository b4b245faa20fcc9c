// bb-pool reconcile --slurm (bbkit(7), USE WITH SLURM and STANDALONE MODE): what Slurm's
// clients print, read as bbkit must, and which buffers are orphans. The clients are the real
// SlurmClients running `squeue` and `scontrol` from PATH: here small programs that print what
// a slurmctld in each situation prints (tests/slurm runs the real ones end to end).
#include "bbkit/reconcile.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bbkit/error.hpp"
#include "bbkit/pool.hpp"
#include "code_of.hpp"
#include "job_user.hpp"

namespace fs = std::filesystem;
using namespace bbkit;

namespace {

constexpr std::uint64_t KiB = 1024;

class ReconcileTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char tmpl[] = "/tmp/bbkit-reconcile.XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        chmod(dir_.c_str(), 0755);
        fs::create_directories(dir_ + "/small");
        fs::create_directories(dir_ + "/bin");
        config_.state_dir = dir_ + "/state";
        config_.state_owner = unit::state_owner();
        config_.cluster = "t";
        config_.mode = Mode::slurm;
        config_.pools.push_back({"small", dir_ + "/small", 16 * KiB, KiB});
        config_.default_pool = "small";
        store_.emplace(config_);
        init_pool(*store_, config_, "small", "test");
        user_ = unit::job_user();
        saved_path_ = std::getenv("PATH") ? std::getenv("PATH") : "";
        setenv("PATH", (dir_ + "/bin:" + saved_path_).c_str(), 1);
        // squeue prints squeue.out and exits with squeue.rc; scontrol prints scontrol.err on
        // stderr and exits with scontrol.rc. Each logs its arguments.
        program("squeue", "echo \"$@\" >>" + dir_ +
                              "/squeue.args\n"
                              "[ -f " +
                              dir_ + "/squeue.err ] && cat " + dir_ +
                              "/squeue.err >&2\n"
                              "[ -f " +
                              dir_ + "/squeue.out ] && cat " + dir_ +
                              "/squeue.out\n"
                              "exit $(cat " +
                              dir_ + "/squeue.rc 2>/dev/null || echo 0)\n");
        program("scontrol", "echo \"$@\" >>" + dir_ +
                                "/scontrol.args\n"
                                "[ -f " +
                                dir_ + "/scontrol.err ] && cat " + dir_ +
                                "/scontrol.err >&2\n"
                                "exit $(cat " +
                                dir_ + "/scontrol.rc 2>/dev/null || echo 0)\n");
    }
    void TearDown() override {
        if (!saved_path_.empty())
            setenv("PATH", saved_path_.c_str(), 1);
        store_.reset();
        if (!dir_.empty())
            fs::remove_all(dir_);
    }

    void program(const std::string& name, const std::string& body) {
        const std::string path = dir_ + "/bin/" + name;
        std::ofstream(path) << "#!/bin/sh\n" << body;
        chmod(path.c_str(), 0755);
    }
    void put(const std::string& name, const std::string& text) {
        std::ofstream(dir_ + "/" + name) << text;
    }
    // Slurm lists these jobs (squeue's fixed-width columns).
    void slurm_lists(const std::string& lines) { put("squeue.out", lines); }
    // scontrol show job answers for a job it does not hold, as Slurm does.
    void slurm_forgot_every_other_job() {
        put("scontrol.err", "slurm_load_jobs error: Invalid job id specified\n");
        put("scontrol.rc", "1\n");
    }
    std::string text(const std::string& name) const {
        std::ifstream in(dir_ + "/" + name);
        std::stringstream out;
        out << in.rdbuf();
        return out.str();
    }

    Buffer job(std::uint64_t id) {
        AllocRequest r;
        r.job_id = id;
        r.user = user_;
        r.pool = "small";
        r.capacity = KiB;
        return allocate(*store_, config_, r, "test").buffer;
    }
    BufferState state_of(const BufferKey& key) {
        ReadSnapshot snapshot(*store_);
        return snapshot.get_buffer(key).state;
    }
    void move(const BufferKey& key, std::initializer_list<BufferState> states) {
        WriteTransaction txn(*store_, "test");
        for (BufferState s : states)
            txn.transition(key, s);
        txn.commit();
    }

    std::string dir_;
    std::string saved_path_;
    Config config_;
    std::optional<StateStore> store_;
    User user_;
};

}  // namespace

TEST(SlurmJobStates, only_squeues_final_states_are_ended) {
    for (const char* ended : {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED",
                              "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "TIMEOUT"})
        EXPECT_TRUE(slurm_job_ended(ended)) << ended;
    for (const char* live : {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED",
                             "STAGE_OUT", "SUSPENDED", "cancelled", "", "CANCELLED+"})
        EXPECT_FALSE(slurm_job_ended(live)) << live;
}

TEST(SlurmJobStates, reasons_have_the_names_bb_pool_prints) {
    EXPECT_STREQ(to_string(OrphanReason::unknown_to_slurm), "unknown-to-slurm");
    EXPECT_STREQ(to_string(OrphanReason::pending_in_slurm), "pending-in-slurm");
    EXPECT_STREQ(to_string(OrphanReason::ended_in_slurm), "ended-in-slurm");
}

TEST_F(ReconcileTest, squeues_columns_are_read_with_or_without_a_burst_buffer_state) {
    slurm_lists(
        "7                       RUNNING                 running                 \n"
        "\n"
        "8                       PENDING                 \n");
    SlurmClients slurm;
    const std::map<std::uint64_t, SlurmJob> jobs = slurm.known_jobs();
    ASSERT_EQ(jobs.size(), 2u);
    EXPECT_EQ(jobs.at(7).state, "RUNNING");
    EXPECT_EQ(jobs.at(7).bb_state, "running");
    EXPECT_EQ(jobs.at(8).state, "PENDING");
    EXPECT_EQ(jobs.at(8).bb_state, "");
    EXPECT_EQ(text("squeue.args"),
              "--noheader --all --states=all "
              "--Format=JobID:24,State:24,BurstBufferState:24\n");
}

TEST_F(ReconcileTest, a_line_squeue_should_not_print_is_unavailable) {
    slurm_lists("7_[1-3] PENDING\n");
    std::string message;
    SlurmClients slurm;
    EXPECT_EQ(code_of([&] { slurm.known_jobs(); }, &message), ExitCode::unavailable);
    EXPECT_EQ(message,
              "cannot ask Slurm: squeue printed '7_[1-3] PENDING' where a job id was "
              "expected; nothing was torn down");
}

TEST_F(ReconcileTest, a_client_that_fails_is_missing_or_hangs_is_unavailable) {
    put("squeue.err", "slurm_load_jobs error: Unable to contact slurm controller\n");
    put("squeue.rc", "1\n");
    SlurmClients slurm;
    std::string message;
    EXPECT_EQ(code_of([&] { slurm.known_jobs(); }, &message), ExitCode::unavailable);
    EXPECT_EQ(message,
              "cannot ask Slurm: squeue failed (exit status 1: slurm_load_jobs error: "
              "Unable to contact slurm controller); nothing was torn down (is "
              "slurmctld up?)");
    put("scontrol.err", "slurm_load_jobs error: Socket timed out\n");
    put("scontrol.rc", "1\n");
    EXPECT_EQ(code_of([&] { slurm.knows(7); }, &message), ExitCode::unavailable);
    program("squeue", "exec sleep 30\n");
    SlurmClients quick(std::chrono::milliseconds(300));
    EXPECT_EQ(code_of([&] { quick.known_jobs(); }, &message), ExitCode::unavailable);
    EXPECT_NE(message.find("squeue failed (timed out"), std::string::npos) << message;
    fs::remove(dir_ + "/bin/squeue");
    setenv("PATH", (dir_ + "/bin").c_str(), 1);
    EXPECT_EQ(code_of([&] { slurm.known_jobs(); }, &message), ExitCode::unavailable);
    EXPECT_EQ(message, "cannot ask Slurm: squeue is not on PATH (install slurm-client)");
}

TEST_F(ReconcileTest, scontrol_knows_a_job_unless_it_says_the_id_is_invalid) {
    SlurmClients slurm;
    EXPECT_TRUE(slurm.knows(7));
    EXPECT_EQ(text("scontrol.args"), "--oneliner show job 7\n");
    slurm_forgot_every_other_job();
    EXPECT_FALSE(slurm.knows(8));
}

TEST_F(ReconcileTest, without_buffers_slurm_is_not_asked) {
    put("squeue.rc", "1\n");
    SlurmClients slurm;
    const ReconcileResult r = reconcile_slurm(*store_, config_, slurm, true, "test");
    EXPECT_EQ(r.checked, 0u);
    EXPECT_TRUE(r.orphans.empty());
    EXPECT_FALSE(fs::exists(dir_ + "/squeue.args"));
}

TEST_F(ReconcileTest, a_job_slurm_neither_lists_nor_knows_is_an_orphan_torn_down_on_request) {
    const Buffer gone = job(1);
    const Buffer listed = job(2);
    slurm_lists("2 RUNNING staged-in\n");
    slurm_forgot_every_other_job();
    SlurmClients slurm;
    ReconcileResult r = reconcile_slurm(*store_, config_, slurm, false, "test");
    EXPECT_EQ(r.checked, 2u);
    ASSERT_EQ(r.orphans.size(), 1u);
    EXPECT_EQ(r.orphans[0].buffer.key, gone.key);
    EXPECT_EQ(r.orphans[0].reason, OrphanReason::unknown_to_slurm);
    EXPECT_FALSE(r.orphans[0].torn_down);
    EXPECT_EQ(state_of(gone.key), BufferState::allocated);  // a dry run touches nothing
    EXPECT_EQ(text("scontrol.args"), "--oneliner show job 1\n");
    r = reconcile_slurm(*store_, config_, slurm, true, "bb-pool");
    ASSERT_EQ(r.orphans.size(), 1u);
    EXPECT_TRUE(r.orphans[0].torn_down);
    EXPECT_EQ(state_of(gone.key), BufferState::complete);
    EXPECT_EQ(state_of(listed.key), BufferState::allocated);
    EXPECT_EQ(r.count(OrphanReason::unknown_to_slurm), 1u);
    EXPECT_EQ(r.count(OrphanReason::pending_in_slurm), 0u);
}

// A job missing from squeue's list that scontrol still knows (it left the list meanwhile, or
// squeue hid it) is left alone.
TEST_F(ReconcileTest, a_job_scontrol_still_knows_is_no_orphan) {
    const Buffer b = job(1);
    slurm_lists("");
    SlurmClients slurm;
    const ReconcileResult r = reconcile_slurm(*store_, config_, slurm, true, "test");
    EXPECT_EQ(r.checked, 1u);
    EXPECT_TRUE(r.orphans.empty());
    EXPECT_EQ(state_of(b.key), BufferState::allocated);
}

TEST_F(ReconcileTest, a_job_pending_in_slurm_with_a_buffer_before_pre_run_lost_it) {
    const Buffer lost = job(1);
    const Buffer running = job(2);
    move(running.key, {BufferState::staged_in, BufferState::pre_run, BufferState::running});
    slurm_lists("1 PENDING pending\n2 RUNNING pending\n");
    SlurmClients slurm;
    const ReconcileResult r = reconcile_slurm(*store_, config_, slurm, true, "test");
    ASSERT_EQ(r.orphans.size(), 1u);
    EXPECT_EQ(r.orphans[0].buffer.key, lost.key);
    EXPECT_EQ(r.orphans[0].reason, OrphanReason::pending_in_slurm);
    EXPECT_EQ(state_of(lost.key), BufferState::complete);
    EXPECT_EQ(state_of(running.key), BufferState::running);  // past pre-run: never touched
}

TEST_F(ReconcileTest, an_ended_job_before_pre_run_is_an_orphan_in_standalone_mode_only) {
    const Buffer b = job(1);
    slurm_lists("1 CANCELLED\n");
    SlurmClients slurm;
    EXPECT_TRUE(reconcile_slurm(*store_, config_, slurm, true, "test").orphans.empty());
    EXPECT_EQ(state_of(b.key), BufferState::allocated);
    config_.mode = Mode::standalone;
    const ReconcileResult r = reconcile_slurm(*store_, config_, slurm, true, "test");
    ASSERT_EQ(r.orphans.size(), 1u);
    EXPECT_EQ(r.orphans[0].reason, OrphanReason::ended_in_slurm);
    EXPECT_EQ(state_of(b.key), BufferState::complete);
}

TEST_F(ReconcileTest, when_slurm_cannot_be_asked_nothing_is_touched) {
    const Buffer listed_gone = job(1);
    put("squeue.rc", "1\n");
    SlurmClients slurm;
    EXPECT_EQ(code_of([&] { reconcile_slurm(*store_, config_, slurm, true, "test"); }),
              ExitCode::unavailable);
    EXPECT_EQ(state_of(listed_gone.key), BufferState::allocated);
    // squeue answers, scontrol cannot: still nothing.
    fs::remove(dir_ + "/squeue.rc");
    slurm_lists("");
    put("scontrol.err", "slurm_load_jobs error: Unable to contact slurm controller\n");
    put("scontrol.rc", "1\n");
    EXPECT_EQ(code_of([&] { reconcile_slurm(*store_, config_, slurm, true, "test"); }),
              ExitCode::unavailable);
    EXPECT_EQ(state_of(listed_gone.key), BufferState::allocated);
}

TEST_F(ReconcileTest, another_clusters_buffers_are_not_checked) {
    Buffer theirs = Buffer::for_key(BufferKey::job("other", 1, 1));
    theirs.pool = "small";
    theirs.requested_bytes = theirs.allocated_bytes = KiB;
    theirs.uid = user_.uid;
    theirs.gid = user_.gid;
    theirs.user = user_.name;
    theirs.state = BufferState::allocating;
    {
        WriteTransaction txn(*store_, "test");
        txn.insert_buffer(theirs);
        txn.transition(theirs.key, BufferState::allocated);
        txn.commit();
    }
    slurm_forgot_every_other_job();
    SlurmClients slurm;
    const ReconcileResult r = reconcile_slurm(*store_, config_, slurm, true, "test");
    EXPECT_EQ(r.checked, 0u);
    EXPECT_TRUE(r.orphans.empty());
    EXPECT_EQ(state_of(theirs.key), BufferState::allocated);
}
