#include "bbkit/state_dir.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "bbkit/error.hpp"
#include "code_of.hpp"

namespace bbkit {
namespace {

class StateDirTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char pattern[] = "/tmp/bbkit-state-dir-XXXXXX";
        ASSERT_NE(mkdtemp(pattern), nullptr);
        root_ = pattern;
        config_.state_dir = root_ + "/state";
        config_.state_owner = geteuid() == 0 ? "root" : std::to_string(geteuid());
    }
    void TearDown() override { std::system(("rm -rf '" + root_ + "'").c_str()); }

    bool exists(const std::string& relative) const {
        struct stat st {};
        return lstat((config_.state_dir + relative).c_str(), &st) == 0;
    }

    std::string lock_record() const {
        std::ifstream in(config_.state_dir + "/lock");
        return std::string(std::istreambuf_iterator<char>(in), {});
    }

    std::string root_;
    Config config_;
};

TEST_F(StateDirTest, a_writer_sets_it_up_and_gets_the_lock_file) {
    const Fd lock = open_state_dir(config_, false);
    EXPECT_TRUE(lock);
    for (const char* name :
         {"", "/lock", "/state.db", "/env", "/public", "/run", "/progress", "/log"})
        EXPECT_TRUE(exists(name)) << name;
    EXPECT_FALSE(open_state_dir(config_, true));  // a reader never holds the lock file
}

TEST_F(StateDirTest, a_reader_creates_nothing) {
    EXPECT_EQ(code_of([&] { open_state_dir(config_, true); }), ExitCode::no_input);
    EXPECT_FALSE(exists(""));
    ASSERT_EQ(mkdir(config_.state_dir.c_str(), 0711), 0);
    std::string message;
    EXPECT_EQ(code_of([&] { open_state_dir(config_, true); }, &message), ExitCode::no_input);
    EXPECT_NE(message.find("state.db: it does not exist"), std::string::npos) << message;
    EXPECT_FALSE(exists("/state.db"));
    EXPECT_FALSE(exists("/lock"));
}

// flock belongs to an open file: a second open of the lock file waits as another process would.
TEST_F(StateDirTest, the_lock_names_its_holder_to_whoever_waits) {
    const Fd first = open_state_dir(config_, false);
    const Fd second(open((config_.state_dir + "/lock").c_str(), O_RDWR | O_CLOEXEC));
    ASSERT_TRUE(second);
    {
        const StateLock held =
            StateLock::acquire(first, config_.state_dir, std::chrono::milliseconds(100), "holder");
        EXPECT_EQ(lock_record().size(), 256u);
        std::string message;
        EXPECT_EQ(code_of(
                      [&] {
                          StateLock::acquire(second, config_.state_dir,
                                             std::chrono::milliseconds(100), "waiter");
                      },
                      &message),
                  ExitCode::temp_fail);
        EXPECT_NE(message.find("state directory " + config_.state_dir + " is locked by pid " +
                               std::to_string(getpid()) + " (holder) since "),
                  std::string::npos)
            << message;
    }
    EXPECT_EQ(lock_record(), std::string(255, ' ') + "\n");
    EXPECT_NO_THROW(
        StateLock::acquire(second, config_.state_dir, std::chrono::milliseconds(100), "waiter"));
}

}  // namespace
}  // namespace bbkit
