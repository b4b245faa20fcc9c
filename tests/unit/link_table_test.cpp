// The hard links a move meets, alone: a first copy, its later names, the inode forgotten when
// every name was met, and the spill past the bound, once spilling always.
#include "bbkit/mover/link_table.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace bbkit::mover_internal {
namespace {

struct stat inode(ino_t ino, nlink_t links) {
    struct stat st {};
    st.st_dev = 1;
    st.st_ino = ino;
    st.st_nlink = links;
    return st;
}

class LinkTableTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char tmpl[] = "/tmp/bbkit-link-table.XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        fd_ = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(fd_, 0);
    }
    void TearDown() override {
        close(fd_);
        rmdir(dir_.c_str());
    }
    std::string dir_;
    int fd_ = -1;
};

TEST_F(LinkTableTest, later_names_link_to_the_first_and_the_inode_is_forgotten_after_the_last) {
    LinkTable table(fd_, dir_, std::uint64_t{1} << 20, FailureKind::destination);
    LinkTarget target;
    EXPECT_EQ(table.meet(inode(7, 3), "a", nullptr, "a", target), LinkTable::Met::first);
    const std::size_t remembered = table.bytes();
    EXPECT_GT(remembered, 0u);
    EXPECT_EQ(table.meet(inode(7, 3), "b", nullptr, "b", target), LinkTable::Met::later);
    EXPECT_EQ(target.dst, "a");
    EXPECT_EQ(table.meet(inode(7, 3), "c", nullptr, "c", target), LinkTable::Met::later);
    EXPECT_EQ(target.dst, "a");
    EXPECT_EQ(table.bytes(), 0u);  // three names met of three: forgotten
    // The same inode number on another device is another file.
    struct stat other = inode(7, 2);
    other.st_dev = 2;
    EXPECT_EQ(table.meet(other, "d", nullptr, "d", target), LinkTable::Met::first);
    EXPECT_EQ(table.spill(), nullptr);
}

TEST_F(LinkTableTest, past_a_quarter_of_the_bound_every_new_inode_is_spilled) {
    // A bound whose quarter holds one entry (its overhead and a short path).
    LinkTable table(fd_, dir_, 4 * (entry_overhead + 8), FailureKind::destination);
    LinkTarget target;
    EXPECT_EQ(table.meet(inode(1, 2), "one", nullptr, "one", target), LinkTable::Met::first);
    EXPECT_EQ(table.meet(inode(2, 2), "two", nullptr, "two", target), LinkTable::Met::spilled);
    ASSERT_NE(table.spill(), nullptr);
    // A remembered inode still links; once the table is short again, new ones still spill
    // (one inode's names must all meet in one place).
    EXPECT_EQ(table.meet(inode(1, 2), "one-b", nullptr, "one-b", target), LinkTable::Met::later);
    EXPECT_EQ(table.meet(inode(3, 2), "three", nullptr, "three", target), LinkTable::Met::spilled);
    EXPECT_EQ(table.meet(inode(2, 2), "two-b", nullptr, "two-b", target), LinkTable::Met::spilled);
    EXPECT_EQ(table.spill()->size(), 3u);
    std::vector<std::pair<std::string, std::string>> links;
    table.spill()->for_each_link([&](const std::string& first, const std::string& other) {
        links.emplace_back(first, other);
    });
    ASSERT_EQ(links.size(), 1u);
    EXPECT_EQ(links[0], std::make_pair(std::string("two"), std::string("two-b")));
}

}  // namespace
}  // namespace bbkit::mover_internal
