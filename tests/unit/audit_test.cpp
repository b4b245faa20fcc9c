// The audit log (bbkit(7), FILES: log/audit.log): one line per privileged action, appended
// whole by concurrent writers, never written through what the state owner planted, and never
// fatal to the action it records.
#include "bbkit/audit.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <vector>

#include "bbkit/store.hpp"
#include "code_of.hpp"

namespace fs = std::filesystem;
using namespace bbkit;

namespace {

class AuditTest : public ::testing::Test {
  protected:
    void SetUp() override {
        unsetenv("SUDO_UID");
        unsetenv("SUDO_USER");
        char tmpl[] = "/tmp/bbkit-audit.XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        chmod(dir_.c_str(), 0755);
        config_.state_dir = dir_ + "/state";
        config_.state_owner = geteuid() == 0 ? "root" : std::to_string(geteuid());
        StateStore store(config_);  // the state directory with its log/
        log_ = config_.state_dir + "/log/audit.log";
    }
    void TearDown() override {
        unsetenv("SUDO_UID");
        unsetenv("SUDO_USER");
        if (!dir_.empty())
            fs::remove_all(dir_);
    }

    std::vector<std::string> lines(const std::string& path) const {
        std::ifstream in(path);
        std::vector<std::string> out;
        for (std::string line; std::getline(in, line);)
            out.push_back(line);
        return out;
    }

    // This host's name, as a regular expression matches it literally.
    static std::string host() {
        char name[HOST_NAME_MAX + 1] = {};
        gethostname(name, sizeof name - 1);
        return std::regex_replace(std::string(name), std::regex(R"([.^$|()\[\]{}*+?\\])"),
                                  R"(\$&)");
    }

    std::string dir_;
    std::string log_;
    Config config_;
};

}  // namespace

TEST_F(AuditTest, one_line_says_when_who_what_and_on_which_buffer) {
    audit(config_.state_dir, "bb-pool", "alloc", "buffer=main.42.1 pool=nvme");
    const std::vector<std::string> got = lines(log_);
    ASSERT_EQ(got.size(), 1u);
    const std::regex shape(
        "\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ uid=" + std::to_string(getuid()) +
        " host=" + host() + " pid=" + std::to_string(getpid()) +
        " tool=bb-pool action=alloc buffer=main\\.42\\.1 pool=nvme");
    EXPECT_TRUE(std::regex_match(got[0], shape)) << got[0];
    struct stat st {};
    ASSERT_EQ(stat(log_.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
}

TEST_F(AuditTest, lines_are_appended_and_sudos_caller_is_named) {
    audit(config_.state_dir, "bb-pool", "alloc", "buffer=main.1.1");
    setenv("SUDO_UID", "1234", 1);
    setenv("SUDO_USER", "slurm", 1);
    audit(config_.state_dir, "bb-teardown", "teardown", "buffer=main.1.1");
    const std::vector<std::string> got = lines(log_);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_NE(got[0].find("action=alloc"), std::string::npos) << got[0];
    EXPECT_EQ(got[0].find("sudo_uid"), std::string::npos) << got[0];
    EXPECT_NE(got[1].find(" sudo_uid=1234 sudo_user=slurm host=" + host() + " pid="),
              std::string::npos)
        << got[1];
    EXPECT_NE(got[1].find("tool=bb-teardown action=teardown"), std::string::npos) << got[1];
}

// A user's text (a persistent name, an error message) or a hostile SUDO_USER cannot forge a
// second record.
TEST_F(AuditTest, a_newline_in_the_details_or_the_callers_name_stays_in_one_line) {
    setenv("SUDO_UID", "1234", 1);
    setenv("SUDO_USER", "eve\n2026-01-01T00:00:00Z uid=0", 1);
    audit(config_.state_dir, "bb-pool", "alloc", "error=x\n2026-01-01T00:00:00Z uid=0 forged");
    const std::vector<std::string> got = lines(log_);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_NE(got[0].find("forged"), std::string::npos) << got[0];
}

TEST_F(AuditTest, concurrent_writers_never_interleave_within_a_line) {
    constexpr int writers = 4;
    constexpr int each = 50;
    const std::string padding(300, 'p');
    std::vector<pid_t> children;
    for (int w = 0; w < writers; ++w) {
        const pid_t pid = fork();
        if (pid == 0) {
            for (int i = 0; i < each; ++i)
                audit(config_.state_dir, "bb-pool", "alloc",
                      "writer=" + std::to_string(w) + " n=" + std::to_string(i) + " " + padding);
            _exit(0);
        }
        children.push_back(pid);
    }
    for (const pid_t pid : children) {
        int status = 0;
        waitpid(pid, &status, 0);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    const std::vector<std::string> got = lines(log_);
    ASSERT_EQ(got.size(), static_cast<std::size_t>(writers * each));
    const std::regex whole(".* tool=bb-pool action=alloc writer=\\d n=\\d+ p{300}");
    for (const std::string& line : got)
        EXPECT_TRUE(std::regex_match(line, whole)) << line;
}

TEST_F(AuditTest, a_log_that_cannot_be_written_does_not_fail_the_action) {
    EXPECT_NO_THROW(audit(dir_ + "/missing", "bb-pool", "alloc", "buffer=main.1.1"));
    EXPECT_FALSE(fs::exists(dir_ + "/missing"));  // nothing made where nothing was
    fs::remove_all(config_.state_dir + "/log");
    EXPECT_NO_THROW(audit(config_.state_dir, "bb-pool", "alloc", "buffer=main.1.1"));
    EXPECT_FALSE(fs::exists(config_.state_dir + "/log"));
}

// log/ is the state owner's: a symlink or a hard link planted as audit.log must not make root
// append to another file.
TEST_F(AuditTest, a_link_planted_as_the_log_is_never_written_through) {
    const std::string target = dir_ + "/target";
    std::ofstream(target) << "root's\n";
    fs::create_symlink(target, log_);
    EXPECT_NO_THROW(audit(config_.state_dir, "bb-pool", "alloc", "buffer=main.1.1"));
    EXPECT_EQ(lines(target), std::vector<std::string>{"root's"});
    fs::remove(log_);
    fs::create_hard_link(target, log_);
    EXPECT_NO_THROW(audit(config_.state_dir, "bb-pool", "alloc", "buffer=main.1.1"));
    EXPECT_EQ(lines(target), std::vector<std::string>{"root's"});
}
