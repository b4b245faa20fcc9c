#include "bbkit/mover/copy_metadata.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"
#include "move_test_support.hpp"

namespace bbkit {
namespace {

using namespace move_test;

const CopyWarning no_warnings = [](const std::string& w) { ADD_FAILURE() << "warning: " << w; };

TEST(copy_metadata, group_mode_and_nanosecond_times_are_carried) {
    TempDir tmp;
    write_file(tmp / "src", "x", 04750);
    chown((tmp / "src").c_str(), 0, nogroup);
    chmod((tmp / "src").c_str(), 04750);  // chown cleared suid
    set_times(tmp / "src", -1000000000, 5);
    write_file(tmp / "copy", "x", 0600);
    struct stat st {};
    ASSERT_EQ(stat((tmp / "src").c_str(), &st), 0);
    const Fd fd(open((tmp / "copy").c_str(), O_RDONLY | O_CLOEXEC));
    set_owner_mode_times(fd.get(), st, tmp / "copy", no_warnings);
    struct stat copy {};
    ASSERT_EQ(stat((tmp / "copy").c_str(), &copy), 0);
    EXPECT_EQ(copy.st_gid, nogroup);
    EXPECT_EQ(copy.st_mode & 07777, 04750u) << "the mode comes after chown, which clears suid";
    EXPECT_EQ(copy.st_mtim.tv_sec, -1000000000);
    EXPECT_EQ(copy.st_mtim.tv_nsec, 5);
    EXPECT_EQ(copy.st_atim.tv_nsec, 5);
}

// What creating the file already set is not set again: a group or mode preset stays as it is.
TEST(copy_metadata, what_creation_already_set_is_skipped) {
    TempDir tmp;
    write_file(tmp / "copy", "x", 0640);
    struct stat st {};
    ASSERT_EQ(stat((tmp / "copy").c_str(), &st), 0);
    struct stat wanted = st;
    wanted.st_mode = (st.st_mode & ~07777) | 0600;
    wanted.st_gid = nogroup;
    const Fd fd(open((tmp / "copy").c_str(), O_RDONLY | O_CLOEXEC));
    set_owner_mode_times(fd.get(), wanted, tmp / "copy", no_warnings, true, true);
    struct stat copy {};
    ASSERT_EQ(stat((tmp / "copy").c_str(), &copy), 0);
    EXPECT_EQ(copy.st_mode & 07777, 0640u);
    EXPECT_EQ(copy.st_gid, st.st_gid);
}

// Run as nobody on a file of root's: the group is left as it is, the mode and the times it may
// not set are warnings naming the file, not failures.
TEST(copy_metadata, what_the_user_may_not_set_is_a_warning) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    write_file(tmp / "copy", "x", 0666);
    struct stat wanted {};
    ASSERT_EQ(stat((tmp / "copy").c_str(), &wanted), 0);
    wanted.st_mode = (wanted.st_mode & ~07777) | 0600;
    wanted.st_gid = nogroup;
    wanted.st_mtim = {1600000000, 1};
    const pid_t pid = fork();
    if (pid == 0) {
        int warnings = 0;
        int code = 0;
        if (setresgid(nogroup, nogroup, nogroup) != 0 || setresuid(nobody, nobody, nobody) != 0)
            _exit(99);
        try {
            const Fd fd(open((tmp / "copy").c_str(), O_WRONLY | O_CLOEXEC));
            set_owner_mode_times(fd.get(), wanted, tmp / "copy", [&](const std::string& w) {
                if (w.find(tmp / "copy") != std::string::npos)
                    ++warnings;
            });
        } catch (const Error& e) {
            code = e.exit_status();
        }
        _exit(code != 0 ? code : warnings);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 2) << "a warning each for the mode and the times";
    struct stat copy {};
    ASSERT_EQ(stat((tmp / "copy").c_str(), &copy), 0);
    EXPECT_EQ(copy.st_mode & 07777, 0666u);
    EXPECT_EQ(copy.st_gid, 0u);
}

TEST(copy_metadata, user_xattrs_and_acls_are_copied_and_nothing_else) {
    if (geteuid() != 0)
        GTEST_SKIP() << "sets a trusted.* attribute, which only root may: needs root";
    TempDir tmp;
    write_file(tmp / "src", "x");
    write_file(tmp / "copy", "x");
    write_file(tmp / "bare", "x");
    ASSERT_EQ(setxattr((tmp / "src").c_str(), "user.origin", "here", 4, 0), 0);
    ASSERT_EQ(setxattr((tmp / "src").c_str(), "trusted.secret", "root", 4, 0), 0);
    ASSERT_EQ(std::system(("setfacl -m u:1:r " + tmp / "src").c_str()), 0)
        << "setfacl (package acl) is needed";
    const Fd src(open((tmp / "src").c_str(), O_RDONLY | O_CLOEXEC));
    const Fd dst(open((tmp / "copy").c_str(), O_RDONLY | O_CLOEXEC));
    EXPECT_TRUE(copy_xattrs(src.get(), dst.get(), false, tmp / "copy", no_warnings));
    const auto copied = xattrs_of(tmp / "copy");
    EXPECT_EQ(copied.count("user.origin"), 1u);
    EXPECT_EQ(copied.count("system.posix_acl_access"), 1u);
    EXPECT_EQ(copied, xattrs_of(tmp / "src"));
    char value[16];
    EXPECT_LT(getxattr((tmp / "copy").c_str(), "trusted.secret", value, sizeof value), 0);

    const Fd bare(open((tmp / "bare").c_str(), O_RDONLY | O_CLOEXEC));
    EXPECT_FALSE(copy_xattrs(bare.get(), dst.get(), false, tmp / "copy", no_warnings));
}

TEST(copy_metadata, a_symlink_gets_its_group_and_times_not_its_targets) {
    TempDir tmp;
    write_file(tmp / "target", "x");
    set_times(tmp / "target", 1500000000, 7);
    ASSERT_EQ(symlink("target", (tmp / "link").c_str()), 0);
    struct stat wanted {};
    ASSERT_EQ(lstat((tmp / "link").c_str(), &wanted), 0);
    wanted.st_gid = nogroup;
    wanted.st_atim = wanted.st_mtim = {1600000000, 123};
    const Fd dir(open(tmp.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    set_link_group_times(dir.get(), "link", wanted, tmp / "link");
    struct stat link {
    }, target{};
    ASSERT_EQ(lstat((tmp / "link").c_str(), &link), 0);
    ASSERT_EQ(stat((tmp / "target").c_str(), &target), 0);
    EXPECT_EQ(link.st_gid, nogroup);
    EXPECT_EQ(link.st_mtim.tv_sec, 1600000000);
    EXPECT_EQ(link.st_mtim.tv_nsec, 123);
    EXPECT_EQ(target.st_mtim.tv_nsec, 7);
}

TEST(copy_metadata, new_files_take_a_setgid_directorys_group_and_no_plain_mode_under_an_acl) {
    TempDir tmp;
    mkdir((tmp / "setgid").c_str(), 0777);
    chown((tmp / "setgid").c_str(), 0, nogroup);
    chmod((tmp / "setgid").c_str(), 02777);
    mkdir((tmp / "acl").c_str(), 0777);
    ASSERT_EQ(std::system(("setfacl -d -m u::rwx,g::rwx,o::--- " + tmp / "acl").c_str()), 0)
        << "setfacl (package acl) is needed";
    const Fd setgid(open((tmp / "setgid").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    const Fd acl(open((tmp / "acl").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    const NewFileDefaults in_setgid = new_file_defaults(setgid.get());
    EXPECT_EQ(in_setgid.gid, nogroup);
    EXPECT_TRUE(in_setgid.plain_modes);
    const NewFileDefaults in_acl = new_file_defaults(acl.get());
    EXPECT_EQ(in_acl.gid, getegid());
    EXPECT_FALSE(in_acl.plain_modes);
}

TEST(copy_metadata, initial_metadata_gives_a_plain_mode_only_where_it_is_exact) {
    struct stat source {};
    source.st_mode = S_IFREG | 0640;
    source.st_gid = nogroup;
    const NewFileDefaults plain{nogroup, true};
    const InitialMetadata exact = initial_metadata(source, &plain, 022);
    EXPECT_EQ(exact.mode, 0640u);
    EXPECT_TRUE(exact.mode_set);
    EXPECT_TRUE(exact.gid_set);

    const InitialMetadata masked = initial_metadata(source, &plain, 077);  // umask takes g+r
    EXPECT_EQ(masked.mode, 0600u);
    EXPECT_FALSE(masked.mode_set);
    source.st_mode = S_IFREG | 04755;  // suid needs fchmod after any chown
    EXPECT_FALSE(initial_metadata(source, &plain, 022).mode_set);
    source.st_mode = S_IFREG | 0640;
    const NewFileDefaults acl{0, false};
    const InitialMetadata under_acl = initial_metadata(source, &acl, 022);
    EXPECT_FALSE(under_acl.mode_set);
    EXPECT_FALSE(under_acl.gid_set);
    const InitialMetadata unknown = initial_metadata(source, nullptr, 022);
    EXPECT_EQ(unknown.mode, 0600u);
    EXPECT_FALSE(unknown.mode_set || unknown.gid_set);
}

// Files in directories the move creates get their mode and group at creation where that is
// certain, else by fchmod/fchown: the result is exact under an inherited default ACL (it would
// decide the mode), a setgid parent (it would decide the group) and a restrictive umask.
TEST(copy_metadata, modes_and_groups_are_exact_in_new_directories) {
    BBKIT_MOVES_AS_NOBODY();
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    mkdir((buffer + "/data").c_str(), 0755);
    mkdir((buffer + "/data/sub").c_str(), 0750);
    const std::vector<std::pair<std::string, mode_t>> files = {
        {"data/f644", 0644},    {"data/f640", 0640},     {"data/f600", 0600},
        {"data/f444", 0444},    {"data/sub/f755", 0755}, {"data/sub/f400", 0400},
        {"data/sub/f666", 0666}};
    for (const auto& [name, mode] : files)
        write_file(buffer + "/" + name, name, mode);
    for_each_entry(buffer, [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });

    // Destinations: setgid and owned by root's group; with a default ACL that masks out
    // "other"; and a plain one written under umask 077.
    for (const std::string dir : {"setgid", "acl", "plain"}) {
        mkdir((tmp / dir).c_str(), 0777);
        chmod((tmp / dir).c_str(), dir == "setgid" ? 02777 : 0777);
    }
    ASSERT_EQ(std::system(("setfacl -d -m u::rwx,g::rwx,o::--- " + tmp / "acl").c_str()), 0)
        << "setfacl (package acl) is needed";
    const mode_t old_mask = umask(077);
    for (const std::string dir : {"setgid", "acl", "plain"}) {
        const Outcome out = move_as_nobody(plan_out(buffer, "data", tmp / dir + "/data"));
        ASSERT_EQ(out.code, 0) << dir << ": " << out.message;
        for (const auto& [name, mode] : files) {
            struct stat st {};
            ASSERT_EQ(lstat((tmp / dir + "/" + name).c_str(), &st), 0) << dir << "/" << name;
            EXPECT_EQ(st.st_mode & 07777, mode) << dir << "/" << name;
            EXPECT_EQ(st.st_gid, nogroup) << dir << "/" << name;
            EXPECT_EQ(read_file(tmp / dir + "/" + name), name);
        }
    }
    umask(old_mask);
}
}  // namespace
}  // namespace bbkit
