// Pre-run's job environment on the pool in standalone mode (bbkit(7), STANDALONE MODE WITH
// SLURM) and its removal at teardown, on a real pool and state directory, as root and as any
// user (job_user.hpp); stage-in and stage-out with their move in this process, as any user
// (mover_runner.hpp), and what bb-stage decides on a failed move's kind.
#include "bbkit/stage.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "bbkit/error.hpp"
#include "bbkit/mover_runner.hpp"
#include "bbkit/pool.hpp"
#include "bbkit/teardown.hpp"
#include "bbkit/views.hpp"
#include "code_of.hpp"
#include "job_user.hpp"

namespace fs = std::filesystem;
using namespace bbkit;

namespace {

std::string content(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

class StageTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char tmpl[] = "/tmp/bbkit-stage.XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        chmod(dir_.c_str(), 0755);
        fs::create_directory(dir_ + "/small");
        config_.state_dir = dir_ + "/state";
        config_.state_owner = unit::state_owner();
        config_.cluster = "t";
        config_.pools.push_back({"small", dir_ + "/small", 4096, 1024});
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

    AllocResult alloc(std::uint64_t id) {
        AllocRequest r;
        r.job_id = id;
        r.user = user_;
        r.pool = "small";
        r.capacity = 1024;
        return allocate(*store_, config_, r, "test");
    }

    // The job's file in env/: the name its user's key gives it (t.ID.TAG), as the pool's owner
    // (root) finds it.
    std::string env_file(std::uint64_t id) const {
        const std::string legacy = "t." + std::to_string(id);
        std::error_code error;
        for (const auto& entry : fs::directory_iterator(dir_ + "/small/env", error)) {
            const std::string name = entry.path().filename().string();
            if (name.size() == legacy.size() + 33 && name.rfind(legacy + ".", 0) == 0)
                return entry.path().string();
        }
        return dir_ + "/small/env/" + legacy;
    }

    std::string dir_;
    Config config_;
    std::optional<StateStore> store_;
    User user_;
};

}  // namespace

TEST_F(StageTest, pre_run_in_standalone_mode_leaves_the_job_paths_for_the_users_tasks) {
    const AllocResult a = alloc(7);
    pre_run(*store_, config_, 7, "test");
    struct stat st {};
    ASSERT_EQ(lstat(env_file(7).c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_uid, user_.uid);
    EXPECT_EQ(st.st_gid, user_.gid);
    EXPECT_EQ(st.st_mode & 07777, 0400u);
    EXPECT_EQ(content(env_file(7)), job_paths(*store_, config_, 7));
    EXPECT_NE(content(env_file(7)).find("BB_JOB_DIR=" + a.path + "\n"), std::string::npos);
    ASSERT_EQ(lstat((dir_ + "/small/env").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, geteuid());  // the pool owner's (root's, as root)
    EXPECT_EQ(st.st_mode & 07777, 0711u);
}

TEST_F(StageTest, pre_run_in_slurm_mode_writes_nothing_on_the_pool) {
    config_.mode = Mode::slurm;
    alloc(7);
    pre_run(*store_, config_, 7, "test");
    EXPECT_FALSE(fs::exists(fs::symlink_status(env_file(7))));
}

TEST_F(StageTest, teardown_removes_the_jobs_environment) {
    alloc(7);
    pre_run(*store_, config_, 7, "test");
    ASSERT_TRUE(fs::exists(env_file(7)));
    teardown_job(*store_, config_, 7, TeardownOptions{}, "test");
    EXPECT_FALSE(fs::exists(fs::symlink_status(env_file(7))));
}

TEST_F(StageTest, teardown_without_an_environment_file_succeeds) {
    alloc(7);
    fs::remove(dir_ + "/small/env");  // a pool initialised before env/ existed
    EXPECT_TRUE(teardown_job(*store_, config_, 7, TeardownOptions{}, "test").found);
}

TEST_F(StageTest, pre_run_creates_env_on_a_pool_initialised_before_it_existed) {
    fs::remove(dir_ + "/small/env");
    alloc(7);
    pre_run(*store_, config_, 7, "test");
    EXPECT_TRUE(fs::exists(env_file(7)));
}

TEST_F(StageTest, pre_run_refuses_an_env_symlink_and_writes_nothing_where_it_points) {
    fs::remove(dir_ + "/small/env");
    fs::create_directory(dir_ + "/elsewhere");
    fs::create_directory_symlink(dir_ + "/elsewhere", dir_ + "/small/env");
    alloc(7);
    EXPECT_EQ(code_of([&] { pre_run(*store_, config_, 7, "test"); }), ExitCode::no_perm);
    EXPECT_TRUE(fs::is_empty(dir_ + "/elsewhere"));
    ReadSnapshot snapshot(*store_);
    EXPECT_EQ(snapshot.latest_job_buffer("t", 7)->state, BufferState::pre_run);
}

// Stage-in and stage-out through the library with the move run in this process
// (mover_runner.hpp): what bb-stage decides and records, without bb-mover.
namespace {

// A mover that says what a test tells it to: its report lines, then its outcome.
class ScriptedMover : public MoverRunner {
  public:
    ScriptedMover(std::vector<std::string> lines, ProcessOutcome outcome)
        : lines_(std::move(lines)), outcome_(outcome) {}
    ProcessOutcome run(const StagePlan&, std::chrono::seconds,
                       const std::function<void(const std::string&)>& on_line) const override {
        for (const std::string& line : lines_)
            on_line(line);
        return outcome_;
    }

  private:
    std::vector<std::string> lines_;
    ProcessOutcome outcome_;
};

ProcessOutcome exited(int status) {
    ProcessOutcome outcome;
    outcome.exit_code = status;
    return outcome;
}

class StageMoveTest : public ::testing::Test {
  protected:
    void SetUp() override {
        // As root and as any user (a pool of the caller's own: may_own_pools); the move runs
        // in this process, no bb-mover installed.
        char tmpl[] = "/tmp/bbkit-stage-move.XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        fs::create_directory(dir_ + "/pool");
        fs::create_directory(dir_ + "/pfs");
        config_.state_dir = dir_ + "/state";
        // The move runs as its caller, who must be the plan's user: root too, as root.
        config_.cluster = "t";
        config_.pools.push_back({"p", dir_ + "/pool", std::uint64_t{1} << 20, 1024});
        config_.default_pool = "p";
        // Whoever runs the test owns the state and the buffers, root too.
        me_ = lookup_user(std::to_string(geteuid()));
        config_.state_owner = me_.name;
        config_.allow_root = true;
        store_.emplace(config_);
        init_pool(*store_, config_, "p", "test");
        options_.mover = &in_process_;
    }
    void TearDown() override {
        store_.reset();
        if (!dir_.empty())
            fs::remove_all(dir_);
    }

    // A job buffer of `capacity` bytes whose request has these stage lines.
    void alloc(std::uint64_t id, const std::string& stage_lines, const std::string& capacity) {
        RequestText text;
        text.script = "#!/bin/sh\n#BB_LUA capacity=" + capacity + " pool=p\n" + stage_lines;
        JobContext job;
        job.user = me_.name;
        job.uid = me_.uid;
        const Request request = parse_request(text, config_, job);
        allocate(*store_, config_, job_alloc_request(request, id, me_), "test");
    }

    void write(const std::string& path, const std::string& text) const {
        fs::create_directories(fs::path(path).parent_path());
        std::ofstream(path) << text;
    }

    Buffer buffer(std::uint64_t id) {
        ReadSnapshot snapshot(*store_);
        return *snapshot.latest_job_buffer("t", id);
    }

    // The Error a stage throws (it must throw one).
    Error failed(const std::function<void()>& stage) {
        try {
            stage();
        } catch (const Error& e) {
            return e;
        }
        ADD_FAILURE() << "the stage did not fail";
        return Error(ExitCode::ok, "");
    }

    std::string dir_;
    Config config_;
    std::optional<StateStore> store_;
    User me_;
    MoverInProcess in_process_;
    StageOptions options_;
};

}  // namespace

TEST_F(StageMoveTest, stage_in_and_out_move_the_data_and_record_each_state) {
    write(dir_ + "/pfs/in/a", "alpha");
    write(dir_ + "/pfs/in/sub/b", "beta");
    alloc(3,
          "#BB_LUA stage_in type=directory source=" + dir_ + "/pfs/in destination=in\n" +
              "#BB_LUA stage_out type=directory source=out destination=" + dir_ + "/pfs/out\n",
          "64KiB");
    std::vector<StagingProgress> seen;
    options_.on_progress = [&](const StagingProgress& p) { seen.push_back(p); };
    const StageResult in = stage_in(*store_, config_, 3, options_, "test");
    EXPECT_EQ(in.files, 2u);
    EXPECT_EQ(in.bytes, 9u);
    ASSERT_TRUE(in.phases);
    ASSERT_FALSE(seen.empty());
    EXPECT_EQ(seen.back().bytes_done, 9u);
    const Buffer b = buffer(3);
    EXPECT_EQ(b.state, BufferState::staged_in);
    const std::string root = dir_ + "/pool/" + b.directory;
    EXPECT_EQ(content(root + "/in/sub/b"), "beta");

    pre_run(*store_, config_, 3, "test");
    write(root + "/out/result", "gamma");
    post_run(*store_, config_, 3, "test");
    const StageResult out = stage_out(*store_, config_, 3, options_, "test");
    EXPECT_EQ(out.files, 1u);
    EXPECT_EQ(buffer(3).state, BufferState::staged_out);
    EXPECT_EQ(content(dir_ + "/pfs/out/result"), "gamma");
    // Done is done: a second stage-out moves nothing.
    EXPECT_TRUE(stage_out(*store_, config_, 3, options_, "test").nothing_to_do);
}

TEST_F(StageMoveTest, a_missing_source_is_the_sources_failure_and_stays_recorded) {
    alloc(4, "#BB_LUA stage_in type=directory source=" + dir_ + "/pfs/gone destination=in\n",
          "64KiB");
    const Error e = failed([&] { stage_in(*store_, config_, 4, options_, "test"); });
    EXPECT_EQ(e.code(), ExitCode::no_input);
    ASSERT_TRUE(e.failure());
    EXPECT_EQ(e.failure()->kind, FailureKind::source);
    const Buffer b = buffer(4);
    EXPECT_EQ(b.state, BufferState::staging_in);
    EXPECT_EQ(b.reason, "BurstBufferOperation");
    EXPECT_NE(b.message.find(dir_ + "/pfs/gone"), std::string::npos) << b.message;
}

TEST_F(StageMoveTest, sources_over_the_capacity_are_the_capacitys_failure) {
    write(dir_ + "/pfs/big", std::string(8192, 'x'));
    alloc(5, "#BB_LUA stage_in type=file source=" + dir_ + "/pfs/big destination=big\n", "4KiB");
    const Error e = failed([&] { stage_in(*store_, config_, 5, options_, "test"); });
    EXPECT_EQ(e.code(), ExitCode::data);
    ASSERT_TRUE(e.failure());
    EXPECT_EQ(e.failure()->kind, FailureKind::capacity);
    EXPECT_EQ(buffer(5).state, BufferState::staging_in);
}

TEST_F(StageMoveTest, a_destination_that_cannot_be_made_keeps_the_data_and_says_retry) {
    alloc(6, "#BB_LUA stage_out type=directory source=out destination=" + dir_ + "/pfs/file/out\n",
          "64KiB");
    write(dir_ + "/pfs/file", "a file where a directory must go");
    pre_run(*store_, config_, 6, "test");
    write(dir_ + "/pool/" + buffer(6).directory + "/out/result", "kept");
    post_run(*store_, config_, 6, "test");
    const Error e = failed([&] { stage_out(*store_, config_, 6, options_, "test"); });
    ASSERT_TRUE(e.failure());
    EXPECT_EQ(e.failure()->kind, FailureKind::destination);
    EXPECT_NE(std::string(e.what()).find("bb-stage out --retry --job 6"), std::string::npos)
        << e.what();
    const Buffer b = buffer(6);
    EXPECT_EQ(b.state, BufferState::staging_out);
    EXPECT_EQ(content(dir_ + "/pool/" + b.directory + "/out/result"), "kept");
    // Only --retry runs it again.
    EXPECT_EQ(code_of([&] { stage_out(*store_, config_, 6, options_, "test"); }),
              ExitCode::unavailable);
}

TEST_F(StageMoveTest, the_way_on_follows_the_kind_never_the_words) {
    const std::string line = "#BB_LUA stage_in type=file source=" + dir_ + "/pfs/f destination=f\n";
    // A full pool whose words say nothing of space; a full buffer worded as a full disk.
    const ScriptedMover pool_full(
        {error_line(Error(ExitCode::io, "cannot write x: it went wrong",
                          Failure{FailureKind::pool_full, "write", "x", 0}))},
        exited(74));
    const ScriptedMover capacity(
        {error_line(Error(ExitCode::io, "cannot write y: no space left on device",
                          Failure{FailureKind::capacity, "write", "y", ENOSPC}))},
        exited(74));
    alloc(7, line, "64KiB");
    options_.mover = &pool_full;
    std::string text = failed([&] { stage_in(*store_, config_, 7, options_, "test"); }).what();
    EXPECT_NE(text.find("free space in pool 'p'"), std::string::npos) << text;
    EXPECT_EQ(text.find("capacity"), std::string::npos) << text;
    alloc(8, line, "64KiB");
    options_.mover = &capacity;
    const Error e = failed([&] { stage_in(*store_, config_, 8, options_, "test"); });
    ASSERT_TRUE(e.failure());
    text = e.what();
    EXPECT_NE(text.find("the files need more than the buffer's capacity of 64KiB"),
              std::string::npos)
        << text;
    EXPECT_EQ(text.find("free space in pool"), std::string::npos) << text;
    EXPECT_EQ(e.failure()->err, ENOSPC);
}

TEST_F(StageMoveTest, a_mover_ended_without_a_report_is_interrupted_or_internal) {
    const std::string line = "#BB_LUA stage_in type=file source=" + dir_ + "/pfs/f destination=f\n";
    ProcessOutcome killed;
    killed.signal = 9;
    const ScriptedMover signalled({}, killed);
    alloc(9, line, "64KiB");
    options_.mover = &signalled;
    Error e = failed([&] { stage_in(*store_, config_, 9, options_, "test"); });
    EXPECT_EQ(e.code(), ExitCode::software);
    EXPECT_STREQ(e.what(), "the mover was killed by signal 9");
    ASSERT_TRUE(e.failure());
    EXPECT_EQ(e.failure()->kind, FailureKind::interrupted);

    ProcessOutcome late;
    late.timed_out = true;
    const ScriptedMover slow({progress_line(1, 4, 10, 40)}, late);
    alloc(10, line, "64KiB");
    options_.mover = &slow;
    e = failed([&] { stage_in(*store_, config_, 10, options_, "test"); });
    EXPECT_EQ(e.code(), ExitCode::temp_fail);
    ASSERT_TRUE(e.failure());
    EXPECT_EQ(e.failure()->kind, FailureKind::interrupted);
    EXPECT_NE(buffer(10).message.find("timed out after"), std::string::npos);

    ProcessOutcome broken = exited(3);
    broken.last_stderr_line = "something broke";
    const ScriptedMover mute({}, broken);
    alloc(11, line, "64KiB");
    options_.mover = &mute;
    e = failed([&] { stage_in(*store_, config_, 11, options_, "test"); });
    EXPECT_EQ(e.code(), ExitCode::software);  // 3 is no sysexits code
    ASSERT_TRUE(e.failure());
    EXPECT_EQ(e.failure()->kind, FailureKind::internal);
    EXPECT_STREQ(e.what(), "something broke");

    // Ended well, yet no summary was read; ended badly with nothing said: a failure that says so,
    // never an empty message (a user once saw "bb-stage: " and nothing more).
    const ScriptedMover unsummed({progress_line(4, 4, 40, 40)}, exited(0));
    alloc(12, line, "64KiB");
    options_.mover = &unsummed;
    e = failed([&] { stage_in(*store_, config_, 12, options_, "test"); });
    EXPECT_EQ(e.code(), ExitCode::software);
    ASSERT_TRUE(e.failure());
    EXPECT_EQ(e.failure()->kind, FailureKind::internal);
    EXPECT_STREQ(
        e.what(),
        "the mover ended with exit status 0 but reported neither its summary nor an error");
    EXPECT_EQ(buffer(12).state, BufferState::staging_in);
    const ScriptedMover silent({}, exited(75));
    alloc(13, line, "64KiB");
    options_.mover = &silent;
    e = failed([&] { stage_in(*store_, config_, 13, options_, "test"); });
    EXPECT_EQ(e.code(), ExitCode::temp_fail);
    EXPECT_STREQ(
        e.what(),
        "the mover ended with exit status 75 but reported neither its summary nor an error");
}

namespace {

// A transfer job's runner as far as bb-stage sees it: where the job runs, and nothing else,
// while it is pending; the record is read back before the move ends.
class PlaceOnlyMover : public MoverRunner {
  public:
    explicit PlaceOnlyMover(std::function<void()> look) : look_(std::move(look)) {}
    ProcessOutcome run(const StagePlan&, std::chrono::seconds,
                       const std::function<void(const std::string&)>& on_line) const override {
        TransferPlace place;
        place.job_id = 1734;
        place.parts = {"part 0: not started"};
        on_line(transfer_line(place));
        look_();  // pending: no progress yet
        place.nodes = "x[1-3]";
        place.parts = {"part 0: 1/2 files, 1.0KiB of 2.0KiB"};
        on_line(transfer_line(place));
        look_();
        ProcessOutcome outcome;
        outcome.exit_code = 3;
        outcome.last_stderr_line = "ended here";
        return outcome;
    }

  private:
    std::function<void()> look_;
};

}  // namespace

// bb-stat job shows the transfer job as soon as it is submitted, and its nodes once Slurm
// places it, before any mover reports progress (a job may wait long in its partition's queue).
TEST_F(StageMoveTest, a_transfer_jobs_place_is_recorded_before_any_progress) {
    const std::string line = "#BB_LUA stage_in type=file source=" + dir_ + "/pfs/f destination=f\n";
    write(dir_ + "/pfs/f", "data");
    alloc(20, line, "64KiB");
    std::vector<std::optional<TransferPlace>> seen;
    const PlaceOnlyMover mover([&] {
        const auto record = read_progress(config_.state_dir, buffer(20).key);
        seen.push_back(record ? record->transfer : std::nullopt);
    });
    options_.mover = &mover;
    failed([&] { stage_in(*store_, config_, 20, options_, "test"); });
    ASSERT_EQ(seen.size(), 2u);
    ASSERT_TRUE(seen[0]);
    EXPECT_EQ(seen[0]->job_id, 1734u);
    EXPECT_EQ(seen[0]->nodes, "");
    ASSERT_TRUE(seen[1]);
    EXPECT_EQ(seen[1]->nodes, "x[1-3]");
}
