// Who may create or destroy persistent buffers and use burst buffers: one rule for a job's
// directive and an admin's command, whoever asks (the unit tests run as root).
#include "bbkit/access.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "bbkit/error.hpp"

namespace bbkit {
namespace {

User user(const std::string& name, uid_t uid) {
    User u;
    u.name = name;
    u.uid = uid;
    u.gid = uid;
    return u;
}

// Makes the test process look like root acting for uid 998 through sudo, for its lifetime.
class ThroughSudo {
  public:
    ThroughSudo() {
        setenv("SUDO_UID", "998", 1);
        setenv("SUDO_GID", "998", 1);
        setenv("SUDO_USER", "slurm", 1);
    }
    ~ThroughSudo() {
        unsetenv("SUDO_UID");
        unsetenv("SUDO_GID");
        unsetenv("SUDO_USER");
    }
};

ExitCode code_of(const Config& config, const User& owner, PersistentRequest from) {
    try {
        check_may_manage_persistent(config, owner, from, "create");
        return ExitCode::ok;
    } catch (const Error& e) {
        return e.code();
    }
}

class Access : public ::testing::Test {
  protected:
    void SetUp() override {
        if (getuid() != 0)
            GTEST_SKIP() << "needs root";
        unsetenv("SUDO_UID");
    }
};

TEST_F(Access, root_itself_may_manage_persistent_buffers_by_command_for_anyone) {
    const Config config;
    EXPECT_TRUE(root_itself());
    EXPECT_EQ(code_of(config, user("alice", 1000), PersistentRequest::command), ExitCode::ok);
    EXPECT_EQ(code_of(config, user("root", 0), PersistentRequest::job), ExitCode::ok);
}

TEST_F(Access, a_users_job_needs_enable_persistent_even_when_root_runs_the_tool) {
    Config config;
    try {
        check_may_manage_persistent(config, user("alice", 1000), PersistentRequest::job, "destroy");
        FAIL() << "allowed";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ExitCode::no_perm);
        EXPECT_STREQ(e.what(),
                     "user alice may not destroy persistent burst buffers (EnablePersistent is "
                     "not set)");
    }
    config.flags.enable_persistent = true;
    EXPECT_EQ(code_of(config, user("alice", 1000), PersistentRequest::job), ExitCode::ok);
    config.deny_users = {"alice"};
    EXPECT_EQ(code_of(config, user("alice", 1000), PersistentRequest::job), ExitCode::no_perm);
}

// SlurmUser through sudo never has root's own authority, whatever owner it names: the parser
// and bb-pool alloc give the same answer, so a job accepted at submit is not refused at alloc.
TEST_F(Access, through_sudo_even_roots_job_and_an_admin_command_need_enable_persistent) {
    const ThroughSudo sudo;
    Config config;
    EXPECT_FALSE(root_itself());
    EXPECT_EQ(code_of(config, user("root", 0), PersistentRequest::job), ExitCode::no_perm);
    EXPECT_EQ(code_of(config, user("root", 0), PersistentRequest::command), ExitCode::no_perm);
    config.flags.enable_persistent = true;
    EXPECT_EQ(code_of(config, user("alice", 1000), PersistentRequest::command), ExitCode::ok);
    config.allow_root = false;
    EXPECT_EQ(code_of(config, user("root", 0), PersistentRequest::job), ExitCode::no_perm);
}

}  // namespace
}  // namespace bbkit
