#include "bbkit/mover/link_spill.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "bbkit/error.hpp"

namespace bbkit {
namespace {

class SpillDir : public ::testing::Test {
  protected:
    void SetUp() override {
        char pattern[] = "/tmp/bbkit-spill-XXXXXX";
        path_ = mkdtemp(pattern);
        dir_ = Fd(open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        ASSERT_TRUE(dir_);
    }
    void TearDown() override { std::filesystem::remove_all(path_); }

    std::vector<std::pair<std::string, std::string>> links_of(LinkSpill& spill) {
        std::vector<std::pair<std::string, std::string>> links;
        spill.for_each_link([&](const std::string& first, const std::string& other) {
            links.emplace_back(first, other);
        });
        return links;
    }

    std::string path_;
    Fd dir_;
};

TEST_F(SpillDir, groups_each_inode_with_its_first_path_in_the_order_added) {
    LinkSpill spill(dir_.get(), path_, 1 << 20);
    spill.add(1, 7, "a/x");
    spill.add(1, 3, "a/y");
    spill.add(2, 7, "other/device");  // same inode number, another file system
    spill.add(1, 7, "b/x");
    spill.add(1, 9, "alone");
    spill.add(1, 7, "c/x");
    spill.add(1, 3, "b/y");
    EXPECT_EQ(spill.size(), 7u);
    const std::vector<std::pair<std::string, std::string>> expected = {
        {"a/y", "b/y"}, {"a/x", "b/x"}, {"a/x", "c/x"}};
    EXPECT_EQ(links_of(spill), expected);
}

// Far more records than its memory: sorted runs written to the unnamed file and merged back,
// with the same answer as in memory, and nothing named left in the directory.
TEST_F(SpillDir, merges_runs_larger_than_its_memory) {
    LinkSpill spill(dir_.get(), path_, 1 << 20);  // runs of about 512 KiB
    const int inodes = 20000;
    std::map<std::uint64_t, std::vector<std::string>> expected;
    for (int round = 0; round < 3; ++round) {
        for (int i = inodes - 1; i >= 0; --i) {
            if (round == 2 && i % 2 == 1)
                continue;
            const std::string path =
                "dir" + std::to_string(round) + "/" + std::string(40, 'p') + std::to_string(i);
            spill.add(5, static_cast<ino_t>(i), path);
            expected[static_cast<std::uint64_t>(i)].push_back(path);
        }
    }
    std::vector<std::pair<std::string, std::string>> want;
    for (const auto& [inode, paths] : expected)
        for (std::size_t k = 1; k < paths.size(); ++k)
            want.emplace_back(paths[0], paths[k]);
    EXPECT_EQ(links_of(spill), want);
    EXPECT_TRUE(std::filesystem::is_empty(path_));
}

TEST_F(SpillDir, a_path_longer_than_a_read_buffer_comes_back_whole) {
    LinkSpill spill(dir_.get(), path_, 1 << 20);
    const std::string deep = std::string(200000, 'd');
    for (int i = 0; i < 10000; ++i)
        spill.add(1, static_cast<ino_t>(i % 3), i == 5000 ? deep : "p" + std::to_string(i));
    std::size_t seen = 0;
    bool found = false;
    spill.for_each_link([&](const std::string&, const std::string& other) {
        ++seen;
        found = found || other == deep;
    });
    EXPECT_EQ(seen, 9997u);
    EXPECT_TRUE(found);
}

TEST(link_spill, a_directory_that_cannot_hold_unnamed_files_is_an_error) {
    const Fd proc(open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    try {
        LinkSpill spill(proc.get(), "/proc", 1 << 20);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("cannot create an unnamed file in /proc"),
                  std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace bbkit
