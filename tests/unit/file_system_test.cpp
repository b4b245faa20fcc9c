#include "bbkit/file_system.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

#include "bbkit/error.hpp"
#include "code_of.hpp"

namespace bbkit {
namespace {

TEST(FileSystemTest, network_and_cluster_magics_are_shared) {
    const std::pair<unsigned long, const char*> shared[] = {
        {0x6969, "nfs"},        {0xFF534D42, "cifs"},   {0xFE534D42, "smb2"}, {0x517B, "smb"},
        {0x0BD00BD0, "lustre"}, {0x47504653, "gpfs"},   {0x00C36400, "ceph"}, {0x01161970, "gfs2"},
        {0x7461636F, "ocfs2"},  {0x19830326, "beegfs"}, {0x01021997, "9p"},   {0x65735546, "fuse"},
    };
    for (const auto& [magic, name] : shared) {
        const FileSystemKind kind = file_system_kind_of_magic(magic);
        EXPECT_EQ(kind.name, name);
        EXPECT_TRUE(kind.shared) << name;
    }
}

TEST(FileSystemTest, local_magics_and_unknown_ones_are_local) {
    EXPECT_EQ(file_system_kind_of_magic(0xEF53).name, "ext4");
    EXPECT_FALSE(file_system_kind_of_magic(0xEF53).shared);
    EXPECT_FALSE(file_system_kind_of_magic(0x58465342).shared);  // xfs
    EXPECT_FALSE(file_system_kind_of_magic(0x01021994).shared);  // tmpfs
    const FileSystemKind unknown = file_system_kind_of_magic(0x12345678);
    EXPECT_EQ(unknown.name, "0x12345678");
    EXPECT_FALSE(unknown.shared);
}

TEST(FileSystemTest, a_missing_path_is_an_error) {
    EXPECT_EQ(code_of([] { file_system_kind("/nonexistent/bbkit-file-system-test"); }),
              ExitCode::no_input);
}

TEST(FileSystemTest, proc_is_known_by_its_magic_and_not_shared) {
    const FileSystemKind kind = file_system_kind("/proc");
    EXPECT_FALSE(kind.shared);
    EXPECT_TRUE(kind.local_locks.empty());
}

#ifdef BBKIT_FAULT_INJECTION
TEST(FileSystemTest, a_test_build_may_force_a_shared_answer) {
    ::setenv("BBKIT_TEST_SHARED_FS", "nfs", 1);
    const FileSystemKind kind = file_system_kind("/proc");
    ::unsetenv("BBKIT_TEST_SHARED_FS");
    EXPECT_EQ(kind.name, "nfs");
    EXPECT_TRUE(kind.shared);
}
#endif

}  // namespace
}  // namespace bbkit
