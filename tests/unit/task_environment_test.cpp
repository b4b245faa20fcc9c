// bb-stat env's reading of a job's environment from its pool (bbkit(7), STANDALONE MODE WITH
// SLURM): only the caller's own regular file, never through a symlink, and only well-formed
// NAME=value lines. Read as root, as any user (job_user.hpp, whose pools they then are) and, in
// TaskEnvironmentRootTest, as the user root becomes.
#include "bbkit/task_environment.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "bbkit/error.hpp"
#include "bbkit/job_environment.hpp"
#include "bbkit/pool_dir.hpp"
#include "bbkit/stat_render.hpp"
#include "code_of.hpp"
#include "job_user.hpp"

namespace fs = std::filesystem;
using namespace bbkit;

namespace {

constexpr uid_t nobody = 65534;

class TaskEnvironmentTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char tmpl[] = "/tmp/bbkit-taskenv.XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        chmod(dir_.c_str(), 0755);
        config_.cluster = "t";
        for (const char* name : {"a", "b"}) {
            fs::create_directory(dir_ + "/" + name);
            config_.pools.push_back({name, dir_ + "/" + name, 4096, 1});
            PoolDir::init(config_.pools.back());
        }
        user_ = unit::job_user();
    }
    void TearDown() override {
        if (!dir_.empty())
            fs::remove_all(dir_);
    }

    // The job's file: the user's, or `uid`'s (group `uid` too) when given.
    void write(const std::string& pool, const std::string& text,
               std::optional<uid_t> uid = std::nullopt) {
        const gid_t gid = uid ? static_cast<gid_t>(*uid) : user_.gid;
        PoolDir::open(*config_.find_pool(pool), std::nullopt)
            .write_job_environment("t.7", text, uid.value_or(user_.uid), gid);
    }
    std::string file(const std::string& pool) const { return dir_ + "/" + pool + "/env/t.7"; }

    // The exit code of reading job 7 as `uid` (in a child that becomes it).
    int code_as(uid_t uid) {
        const pid_t child = fork();
        if (child == 0) {
            if (setgid(uid) != 0 || setuid(uid) != 0)
                _exit(99);
            std::string message;
            const ExitCode code =
                code_of([&] { read_task_environment(config_, 7, uid); }, &message);
            if (code != ExitCode::ok)
                std::fprintf(stderr, "as uid %u: %s\n", unsigned(uid), message.c_str());
            _exit(static_cast<int>(code));
        }
        int status = 0;
        waitpid(child, &status, 0);
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }

    std::string dir_;
    Config config_;
    User user_;
};

// Read as the job's user and as another, in a child that becomes them.
class TaskEnvironmentRootTest : public TaskEnvironmentTest {
  protected:
    void SetUp() override {
        if (!unit::as_root())
            GTEST_SKIP() << "needs root to hand files to users and become them";
        TaskEnvironmentTest::SetUp();
    }
};

}  // namespace

TEST_F(TaskEnvironmentRootTest, reads_the_users_own_file_as_that_user) {
    write("b", "BB_JOB_DIR=/x/job/t.7.1\nDW_PERSISTENT_STRIPED_my_data=/x/p\n");
    EXPECT_EQ(code_as(nobody), 0);
    const TaskEnvironment env = read_task_environment(config_, 7, 0);
    EXPECT_EQ(env.file, file("b"));
    ASSERT_EQ(env.variables.size(), 2u);
    EXPECT_EQ(env.variables[0],
              std::make_pair(std::string("BB_JOB_DIR"), std::string("/x/job/t.7.1")));
    EXPECT_EQ(env.variables[1].first, "DW_PERSISTENT_STRIPED_my_data");
}

TEST_F(TaskEnvironmentTest, no_file_on_any_pool_is_no_input) {
    std::string message;
    EXPECT_EQ(code_of([&] { read_task_environment(config_, 7, 0); }, &message), ExitCode::no_input);
    EXPECT_NE(message.find("job 7 has no burst-buffer environment on any pool"), std::string::npos);
    fs::remove(dir_ + "/a/env");  // a pool initialised before env/ existed holds nothing
    EXPECT_EQ(code_of([&] { read_task_environment(config_, 7, 0); }), ExitCode::no_input);
}

// Another user's file answers as no file at all: nobody learns that another user's job has one
// (bbkit(7), SECURITY).
TEST_F(TaskEnvironmentRootTest, another_users_file_is_as_absent) {
    write("a", "BB_JOB_DIR=/x\n", 0);  // root's: nobody may not read it
    EXPECT_EQ(code_as(nobody), static_cast<int>(ExitCode::no_input));
    fs::permissions(file("a"), fs::perms(0444));  // readable, still not theirs
    EXPECT_EQ(code_as(nobody), static_cast<int>(ExitCode::no_input));
}

// What pre-run writes: env/t.7.<tag>, the tag from the user's key (env/<uid>.key, theirs,
// 0400). The user finds it, root finds it (it lists env/), another user neither finds it nor
// could name it; the key is made once and kept.
TEST_F(TaskEnvironmentRootTest, a_tagged_file_is_found_by_its_user_and_root_only) {
    PoolDir pool = PoolDir::open(*config_.find_pool("a"), std::nullopt);
    const std::string key = pool.job_environment_key(nobody, nobody);
    EXPECT_EQ(pool.job_environment_key(nobody, nobody), key);
    const std::string name = job_environment_name("t", 7, key);
    ASSERT_EQ(name.rfind("t.7.", 0), 0u) << name;
    EXPECT_EQ(name.size(), 4u + 32u);
    pool.write_job_environment(name, "BB_JOB_DIR=/x/job/t.7.1.0123456789abcdef\n", nobody, nobody);
    struct stat st {};
    ASSERT_EQ(lstat((dir_ + "/a/env/" + environment_key_name(nobody)).c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, nobody);
    EXPECT_EQ(st.st_mode & 07777, 0400u);
    EXPECT_EQ(code_as(nobody), 0);
    EXPECT_EQ(read_task_environment(config_, 7, 0).file, dir_ + "/a/env/" + name);
    EXPECT_EQ(code_as(1), static_cast<int>(ExitCode::no_input));
    EXPECT_EQ(pool.job_environments("t", 7), std::vector<std::string>{name});
    EXPECT_EQ(environment_job_id("t", name), std::optional<std::uint64_t>(7));
}

TEST_F(TaskEnvironmentTest, a_symlink_at_the_file_is_refused) {
    std::ofstream(dir_ + "/planted") << "BB_JOB_DIR=/evil\n";
    fs::create_symlink(dir_ + "/planted", file("a"));
    EXPECT_EQ(code_of([&] { read_task_environment(config_, 7, 0); }), ExitCode::no_perm);
}

TEST_F(TaskEnvironmentTest, a_symlinked_env_directory_is_refused) {
    fs::remove(dir_ + "/a/env");
    fs::create_directory(dir_ + "/elsewhere");
    std::ofstream(dir_ + "/elsewhere/t.7") << "BB_JOB_DIR=/evil\n";
    fs::create_directory_symlink(dir_ + "/elsewhere", dir_ + "/a/env");
    EXPECT_EQ(code_of([&] { read_task_environment(config_, 7, 0); }), ExitCode::no_perm);
}

TEST_F(TaskEnvironmentTest, an_env_directory_others_may_write_is_refused) {
    write("a", "BB_JOB_DIR=/x\n");
    fs::permissions(dir_ + "/a/env", fs::perms(0777));
    EXPECT_EQ(code_of([&] { read_task_environment(config_, 7, 0); }), ExitCode::no_perm);
}

TEST_F(TaskEnvironmentTest, not_a_regular_file_is_refused) {
    ASSERT_EQ(mkfifo(file("a").c_str(), 0600), 0);
    EXPECT_EQ(code_of([&] { read_task_environment(config_, 7, 0); }), ExitCode::no_perm);
}

TEST_F(TaskEnvironmentTest, the_newest_of_two_pools_wins) {
    write("a", "BB_JOB_DIR=/old\n");
    struct timespec old[2] = {{1000, 0}, {1000, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, file("a").c_str(), old, AT_SYMLINK_NOFOLLOW), 0);
    write("b", "BB_JOB_DIR=/new\n");
    EXPECT_EQ(read_task_environment(config_, 7, 0).variables.at(0).second, "/new");
}

TEST(ParseTaskEnvironment, rejects_malformed_lines_naming_the_file) {
    for (const char* bad : {"", "no equals\n", "=x\n", "1A=x\n", "A-B=x\n", "A B=x\n", "A=x\rB\n",
                            "A=x\n\nB=y\n", "export A=x\n"}) {
        std::string message;
        EXPECT_EQ(code_of([&] { parse_task_environment(bad, "/p/env/t.7"); }, &message),
                  ExitCode::data)
            << bad;
        EXPECT_NE(message.find("/p/env/t.7"), std::string::npos) << message;
    }
}

TEST(ParseTaskEnvironment, takes_values_verbatim) {
    const auto vars = parse_task_environment("A=x=y z\n_b2=\nC='q'", "f");
    ASSERT_EQ(vars.size(), 3u);
    EXPECT_EQ(vars[0].second, "x=y z");
    EXPECT_EQ(vars[1].first, "_b2");
    EXPECT_EQ(vars[1].second, "");
    EXPECT_EQ(vars[2].second, "'q'");
}

TEST(TaskEnvironmentText, is_the_task_prolog_form_or_quoted_for_sh) {
    TaskEnvironment env;
    env.variables = {{"BB_JOB_DIR", "/bb/job/t.7.1"}, {"X", "it's $HOME"}};
    EXPECT_EQ(task_environment_text(env, false),
              "export BB_JOB_DIR=/bb/job/t.7.1\nexport X=it's $HOME\n");
    EXPECT_EQ(task_environment_text(env, true),
              "export BB_JOB_DIR='/bb/job/t.7.1'\nexport X='it'\\''s $HOME'\n");
    EXPECT_EQ(task_environment_json(env).dump(),
              R"({"BB_JOB_DIR":"/bb/job/t.7.1","X":"it's $HOME"})");
}
