#include "bbkit/file_system.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

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

TEST(FileSystemTest, local_magics_are_local_and_unknown_ones_are_neither) {
    EXPECT_EQ(file_system_kind_of_magic(0xEF53).name, "ext4");
    EXPECT_FALSE(file_system_kind_of_magic(0xEF53).shared);
    EXPECT_FALSE(file_system_kind_of_magic(0x58465342).shared);  // xfs
    EXPECT_FALSE(file_system_kind_of_magic(0x01021994).shared);  // tmpfs
    EXPECT_TRUE(file_system_kind_of_magic(0xEF53).known);
    const FileSystemKind unknown = file_system_kind_of_magic(0x12345678);
    EXPECT_EQ(unknown.name, "0x12345678");
    EXPECT_FALSE(unknown.known);  // the state directory refuses it unless state_journal says
}

TEST(FileSystemTest, a_missing_path_is_an_error) {
    EXPECT_EQ(code_of([] { file_system_kind("/nonexistent/bbkit-file-system-test"); }),
              ExitCode::no_input);
}

TEST(FileSystemTest, the_state_directorys_own_file_system_is_known_here) {
    const FileSystemKind kind = file_system_kind("/tmp");
    EXPECT_TRUE(kind.known) << kind.name;
    EXPECT_TRUE(kind.local_locks.empty()) << kind.local_locks;
}

// Every mount option that keeps locks on this host, for each file system whose options decide,
// in the super options (where NFS prints them) or the mount options; the others pass.
TEST(FileSystemTest, mount_options_that_keep_locks_local_are_found) {
    const auto line = [](const std::string& mount_options, const std::string& type,
                         const std::string& super_options) {
        return "36 25 0:53 / /var/lib/bbkit " + mount_options + " shared:1 - " + type +
               " server:/export " + super_options + "\n";
    };
    const std::vector<std::tuple<std::string, std::string, std::string, std::string>> cases = {
        // fs, mount options, super options, the answer
        {"nfs", "rw,relatime", "rw,vers=4.2,local_lock=none,addr=10.0.0.1", ""},
        {"nfs", "rw,relatime", "rw,vers=3,nolock,addr=10.0.0.1", "nolock"},
        {"nfs", "rw,relatime", "rw,vers=4.2,local_lock=flock", "local_lock=flock"},
        {"nfs", "rw,relatime", "rw,vers=4.2,local_lock=posix", "local_lock=posix"},
        {"nfs", "rw,relatime", "rw,vers=4.2,local_lock=all", "local_lock=all"},
        {"lustre", "rw,flock", "rw,flock,lazystatfs", ""},
        {"lustre", "rw,localflock", "rw,localflock", "localflock"},
        {"lustre", "rw", "rw,noflock", "noflock"},
        {"cifs", "rw", "rw,vers=3.1.1,nobrl,uid=0", "nobrl"},
        {"cifs", "rw", "rw,vers=3.1.1,uid=0", ""},
        {"smb2", "rw,nobrl", "rw", "nobrl"},
    };
    for (const auto& [fs, mount_options, super_options, want] : cases) {
        std::istringstream mountinfo("22 1 8:1 / / rw - ext4 /dev/sda1 rw,nolock\n" +
                                     line(mount_options, fs, super_options));
        EXPECT_EQ(local_lock_option(mountinfo, "0:53", fs), want) << fs << " " << super_options;
    }
    std::istringstream none("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n");
    EXPECT_NE(local_lock_option(none, "0:53", "nfs").find("no mount of device 0:53"),
              std::string::npos);
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
