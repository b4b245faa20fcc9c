// A pool's env/ (bbkit(7), FILES): the job environment files root writes for the job's user,
// through descriptors, never following what a user could plant.
#include "bbkit/pool_dir.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "bbkit/error.hpp"
#include "code_of.hpp"

namespace fs = std::filesystem;
using namespace bbkit;

namespace {

class PoolDirEnvTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root to hand files to users";
        char tmpl[] = "/tmp/bbkit-pooldir.XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        chmod(dir_.c_str(), 0755);
        fs::create_directory(dir_ + "/p");
        pool_ = {"p", dir_ + "/p", 4096, 1};
        PoolDir::init(pool_);
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
};

}  // namespace

TEST_F(PoolDirEnvTest, init_creates_a_root_owned_env_directory) {
    struct stat st {};
    ASSERT_EQ(lstat(env().c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_uid, 0u);
    EXPECT_EQ(st.st_mode & 07777, 0711u);
}

TEST_F(PoolDirEnvTest, writes_the_file_for_the_user_mode_0400_and_replaces_it) {
    PoolDir dir = open();
    dir.write_job_environment("main.7", "A=1\n", 65534, 65534);
    dir.write_job_environment("main.7", "A=2\n", 65534, 65534);
    struct stat st {};
    ASSERT_EQ(lstat((env() + "/main.7").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 65534u);
    EXPECT_EQ(st.st_gid, 65534u);
    EXPECT_EQ(st.st_mode & 07777, 0400u);
    EXPECT_EQ(content(env() + "/main.7"), "A=2\n");
    EXPECT_EQ(std::distance(fs::directory_iterator(env()), fs::directory_iterator()), 1);
}

TEST_F(PoolDirEnvTest, a_stale_temporary_file_is_replaced) {
    std::ofstream(env() + "/.main.7.tmp") << "junk";
    open().write_job_environment("main.7", "A=1\n", 65534, 65534);
    EXPECT_EQ(content(env() + "/main.7"), "A=1\n");
    EXPECT_FALSE(fs::exists(env() + "/.main.7.tmp"));
}

TEST_F(PoolDirEnvTest, a_symlink_at_the_file_name_is_replaced_not_followed) {
    std::ofstream(dir_ + "/target") << "keep";
    fs::create_symlink(dir_ + "/target", env() + "/main.7");
    open().write_job_environment("main.7", "A=1\n", 65534, 65534);
    EXPECT_EQ(content(dir_ + "/target"), "keep");
    EXPECT_FALSE(fs::is_symlink(env() + "/main.7"));
    EXPECT_EQ(content(env() + "/main.7"), "A=1\n");
}

TEST_F(PoolDirEnvTest, a_symlink_at_the_temporary_name_is_not_followed) {
    std::ofstream(dir_ + "/target") << "keep";
    fs::create_symlink(dir_ + "/target", env() + "/.main.7.tmp");
    open().write_job_environment("main.7", "A=1\n", 65534, 65534);
    EXPECT_EQ(content(dir_ + "/target"), "keep");
}

TEST_F(PoolDirEnvTest, an_env_symlink_is_refused_and_nothing_is_written_where_it_points) {
    fs::remove(env());
    fs::create_directory(dir_ + "/elsewhere");
    fs::create_directory_symlink(dir_ + "/elsewhere", env());
    PoolDir dir = open();
    EXPECT_EQ(code_of([&] { dir.write_job_environment("main.7", "A=1\n", 65534, 65534); }),
              ExitCode::no_perm);
    EXPECT_TRUE(fs::is_empty(dir_ + "/elsewhere"));
    EXPECT_EQ(code_of([&] { dir.remove_job_environment("main.7"); }), ExitCode::no_perm);
}

TEST_F(PoolDirEnvTest, an_env_directory_not_owned_by_root_is_refused) {
    ASSERT_EQ(chown(env().c_str(), 65534, 65534), 0);
    PoolDir dir = open();
    std::string message;
    EXPECT_EQ(
        code_of([&] { dir.write_job_environment("main.7", "A=1\n", 65534, 65534); }, &message),
        ExitCode::no_perm);
    EXPECT_NE(message.find("owned by uid 65534"), std::string::npos) << message;
    EXPECT_FALSE(fs::exists(env() + "/main.7"));
}

TEST_F(PoolDirEnvTest, an_env_directory_writable_by_others_is_refused) {
    fs::permissions(env(), fs::perms(0777));
    PoolDir dir = open();
    EXPECT_EQ(code_of([&] { dir.write_job_environment("main.7", "A=1\n", 65534, 65534); }),
              ExitCode::no_perm);
    EXPECT_FALSE(fs::exists(env() + "/main.7"));
}

TEST_F(PoolDirEnvTest, env_is_created_on_demand_for_an_older_pool) {
    fs::remove(env());
    PoolDir dir = open();
    dir.remove_job_environment("main.7");  // nothing there: no error, nothing created
    EXPECT_FALSE(fs::exists(env()));
    dir.write_job_environment("main.7", "A=1\n", 65534, 65534);
    struct stat st {};
    ASSERT_EQ(lstat(env().c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 0u);
    EXPECT_EQ(st.st_mode & 07777, 0711u);
}

TEST_F(PoolDirEnvTest, remove_takes_the_file_and_a_missing_one_is_no_error) {
    PoolDir dir = open();
    dir.write_job_environment("main.7", "A=1\n", 65534, 65534);
    dir.remove_job_environment("main.7");
    EXPECT_FALSE(fs::exists(env() + "/main.7"));
    EXPECT_NO_THROW(dir.remove_job_environment("main.7"));
}
