// Pre-run's job environment on the pool in standalone mode (bbkit(7), STANDALONE MODE WITH
// SLURM) and its removal at teardown, on a real pool and state directory (root is needed to
// hand the file to the job's user).
#include "bbkit/stage.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "bbkit/error.hpp"
#include "bbkit/pool.hpp"
#include "bbkit/teardown.hpp"
#include "code_of.hpp"

namespace fs = std::filesystem;
using namespace bbkit;

namespace {

class StageTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root to give buffers to users";
        char tmpl[] = "/tmp/bbkit-stage.XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        chmod(dir_.c_str(), 0755);
        fs::create_directory(dir_ + "/small");
        config_.state_dir = dir_ + "/state";
        config_.cluster = "t";
        config_.pools.push_back({"small", dir_ + "/small", 4096, 1024});
        config_.default_pool = "small";
        store_.emplace(config_);
        init_pool(*store_, config_, "small", "test");
        nobody_ = lookup_user("nobody");
    }
    void TearDown() override {
        store_.reset();
        if (!dir_.empty())
            fs::remove_all(dir_);
    }

    AllocResult alloc(std::uint64_t id) {
        AllocRequest r;
        r.job_id = id;
        r.user = nobody_;
        r.pool = "small";
        r.capacity = 1024;
        return allocate(*store_, config_, r, "test");
    }

    // The job's file in env/: the name its user's key gives it (t.ID.TAG), as root finds it.
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

    static std::string content(const std::string& path) {
        std::ifstream in(path);
        std::stringstream text;
        text << in.rdbuf();
        return text.str();
    }

    std::string dir_;
    Config config_;
    std::optional<StateStore> store_;
    User nobody_;
};

}  // namespace

TEST_F(StageTest, pre_run_in_standalone_mode_leaves_the_job_paths_for_the_users_tasks) {
    const AllocResult a = alloc(7);
    pre_run(*store_, config_, 7, "test");
    struct stat st {};
    ASSERT_EQ(lstat(env_file(7).c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_uid, nobody_.uid);
    EXPECT_EQ(st.st_gid, nobody_.gid);
    EXPECT_EQ(st.st_mode & 07777, 0400u);
    EXPECT_EQ(content(env_file(7)), job_paths(*store_, config_, 7));
    EXPECT_NE(content(env_file(7)).find("BB_JOB_DIR=" + a.path + "\n"), std::string::npos);
    ASSERT_EQ(lstat((dir_ + "/small/env").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 0u);
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
