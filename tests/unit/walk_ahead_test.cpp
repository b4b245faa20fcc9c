#include "bbkit/mover/walk_ahead.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace bbkit::mover_internal {
namespace {

class WalkAheadTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char pattern[] = "/tmp/bbkit-ahead-XXXXXX";
        root_ = mkdtemp(pattern);
    }
    void TearDown() override {
        chmod((root_ + "/locked").c_str(), 0700);
        std::filesystem::remove_all(root_);
    }

    // `dirs` directories of `files` empty files each, under root_/tree.
    void make_tree(int dirs, int files) {
        mkdir((root_ + "/tree").c_str(), 0755);
        for (int d = 0; d < dirs; ++d) {
            const std::string dir = root_ + "/tree/d" + std::to_string(d);
            mkdir(dir.c_str(), 0755);
            for (int f = 0; f < files; ++f)
                close(open((dir + "/f" + std::to_string(f)).c_str(), O_WRONLY | O_CREAT, 0644));
        }
    }

    Fd open_dir(const std::string& path) {
        return Fd(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    }

    static bool wait_for(const WalkAhead& ahead, std::uint64_t entries) {
        for (int i = 0; i < 400 && ahead.entries_read() < entries; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        return ahead.entries_read() >= entries;
    }

    std::string root_;
};

TEST_F(WalkAheadTest, reads_a_whole_tree_once_the_walk_keeps_up) {
    make_tree(8, 50);
    WalkAhead ahead(3);
    ahead.walked(1000);  // a walk far ahead: no budget to wait for
    ahead.read(open_dir(root_ + "/tree"));
    EXPECT_TRUE(wait_for(ahead, 8 + 8 * 50)) << ahead.entries_read();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(ahead.entries_read(), 8u + 8 * 50);  // each entry once
}

TEST_F(WalkAheadTest, stays_within_its_budget_ahead_of_the_walk) {
    make_tree(20, 100);
    WalkAhead ahead(2, 150);
    ahead.read(open_dir(root_ + "/tree"));
    // The top (20 entries), then whole directories while under the budget: at most the budget
    // plus one directory per thread beyond it.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_LE(ahead.entries_read(), 150u + 2 * 100);
    EXPECT_GE(ahead.entries_read(), 120u);
    ahead.walked(2020);  // the walk catches up: the rest is read
    EXPECT_TRUE(wait_for(ahead, 20 + 20 * 100)) << ahead.entries_read();
}

TEST_F(WalkAheadTest,
       never_follows_a_symlink_nor_blocks_on_a_fifo_nor_fails_on_a_locked_directory) {
    make_tree(1, 3);
    const std::string tree = root_ + "/tree";
    mkdir((root_ + "/outside").c_str(), 0755);
    for (int f = 0; f < 50; ++f)
        close(open((root_ + "/outside/o" + std::to_string(f)).c_str(), O_WRONLY | O_CREAT, 0644));
    ASSERT_EQ(symlink((root_ + "/outside").c_str(), (tree + "/link").c_str()), 0);
    ASSERT_EQ(mkfifo((tree + "/fifo").c_str(), 0600), 0);
    ASSERT_EQ(mkdir((tree + "/locked").c_str(), 0000), 0);
    ASSERT_EQ(symlink((tree + "/locked").c_str(), (root_ + "/locked").c_str()), 0);
    WalkAhead ahead(2);
    ahead.walked(1000);
    ahead.read(open_dir(tree));
    // tree: d0, link, fifo, locked (4); d0: 3 files; nothing of outside/; locked/ unreadable to
    // nobody but root, which reads its nothing.
    EXPECT_TRUE(wait_for(ahead, 7)) << ahead.entries_read();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(ahead.entries_read(), 7u);
}

TEST_F(WalkAheadTest, stops_promptly_with_work_left) {
    make_tree(50, 200);
    const auto started = std::chrono::steady_clock::now();
    {
        WalkAhead ahead(2, 100);
        ahead.read(open_dir(root_ + "/tree"));
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }  // waiting on the budget, with directories queued
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(2));
}

TEST_F(WalkAheadTest, a_bad_descriptor_or_no_threads_is_nothing_to_do) {
    make_tree(1, 1);
    WalkAhead none(0);
    none.read(open_dir(root_ + "/tree"));
    none.read(Fd());
    EXPECT_EQ(none.entries_read(), 0u);
}

}  // namespace
}  // namespace bbkit::mover_internal
