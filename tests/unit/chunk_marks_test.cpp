#include "bbkit/mover/chunk_marks.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "bbkit/fsops.hpp"
#include "bbkit/process.hpp"

namespace bbkit {
namespace {

class ChunkMarksTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char pattern[] = "/var/tmp/bbkit-marks-XXXXXX";
        dir_ = mkdtemp(pattern);
        dst_ = Fd(open((dir_ + "/dst").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
        ASSERT_TRUE(dst_);
        if (fsetxattr(dst_.get(), "user.probe", "x", 1, 0) != 0 && errno == ENOTSUP)
            GTEST_SKIP() << "no user xattrs on " << dir_;
        source_.st_dev = 2049;
        source_.st_ino = 77;
        source_.st_size = off_t{5} << 25;
        source_.st_mtim = {1700000000, 123456789};
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }

    std::string attribute() const {
        std::string value(4096, '\0');
        const ssize_t n = fgetxattr(dst_.get(), ChunkMarks::attribute, value.data(), value.size());
        return n < 0 ? "" : value.substr(0, static_cast<std::size_t>(n));
    }

    std::string dir_;
    Fd dst_;
    struct stat source_ {};
};

TEST_F(ChunkMarksTest, a_fresh_destination_has_no_marks) {
    ChunkMarks marks(source_, off_t{1} << 25, 5);
    EXPECT_FALSE(marks.load(dst_.get()));
    EXPECT_EQ(marks.count(), 0u);
}

TEST_F(ChunkMarksTest, marked_chunks_are_found_again_by_a_rerun_of_the_same_source) {
    ChunkMarks first(source_, off_t{1} << 25, 5);
    first.mark(dst_.get(), 0);
    first.mark(dst_.get(), 2);
    first.mark(dst_.get(), 4);
    EXPECT_EQ(attribute(),
              "v1 " + boot_id() + " 2049:77 167772160 1700000000.123456789 33554432 51");
    ChunkMarks rerun(source_, off_t{1} << 25, 5);
    ASSERT_TRUE(rerun.load(dst_.get()));
    EXPECT_TRUE(rerun.done(0));
    EXPECT_FALSE(rerun.done(1));
    EXPECT_TRUE(rerun.done(2));
    EXPECT_FALSE(rerun.done(3));
    EXPECT_TRUE(rerun.done(4));
    EXPECT_FALSE(rerun.done(5));  // past the end
    EXPECT_EQ(rerun.count(), 3u);
}

TEST_F(ChunkMarksTest, another_source_a_changed_one_or_another_chunk_size_resumes_nothing) {
    ChunkMarks(source_, off_t{1} << 25, 5).mark(dst_.get(), 1);
    struct stat changed = source_;
    changed.st_mtim.tv_nsec += 1;
    EXPECT_FALSE(ChunkMarks(changed, off_t{1} << 25, 5).load(dst_.get()));
    changed = source_;
    changed.st_ino = 78;
    EXPECT_FALSE(ChunkMarks(changed, off_t{1} << 25, 5).load(dst_.get()));
    changed = source_;
    changed.st_size += 1;
    EXPECT_FALSE(ChunkMarks(changed, off_t{1} << 25, 6).load(dst_.get()));
    EXPECT_FALSE(ChunkMarks(source_, off_t{1} << 24, 10).load(dst_.get()));
    EXPECT_TRUE(ChunkMarks(source_, off_t{1} << 25, 5).load(dst_.get()));
}

TEST_F(ChunkMarksTest, marks_of_another_boot_or_malformed_ones_are_not_trusted) {
    ChunkMarks marks(source_, off_t{1} << 25, 5);
    std::string other_boot = marks.text();
    const std::string boot = boot_id();
    other_boot.replace(other_boot.find(boot), boot.size(), std::string(boot.size(), 'f'));
    other_boot.back() = 'f';
    ASSERT_EQ(fsetxattr(dst_.get(), ChunkMarks::attribute, other_boot.data(), other_boot.size(), 0),
              0);
    EXPECT_FALSE(marks.load(dst_.get()));
    for (std::string odd :
         {marks.text() + "0", marks.text().substr(0, marks.text().size() - 1),
          marks.text().substr(0, marks.text().size() - 2) + "zz", std::string()}) {
        ASSERT_EQ(fsetxattr(dst_.get(), ChunkMarks::attribute, odd.data(), odd.size(), 0), 0);
        EXPECT_FALSE(marks.load(dst_.get())) << odd;
        EXPECT_EQ(marks.count(), 0u) << odd;
    }
}

TEST_F(ChunkMarksTest, clear_leaves_no_attribute) {
    ChunkMarks marks(source_, off_t{1} << 25, 5);
    marks.mark(dst_.get(), 3);
    EXPECT_NE(attribute(), "");
    ChunkMarks::clear(dst_.get());
    EXPECT_EQ(attribute(), "");
    EXPECT_FALSE(marks.load(dst_.get()));
    ChunkMarks::clear(dst_.get());  // twice: nothing to do
}

}  // namespace
}  // namespace bbkit
