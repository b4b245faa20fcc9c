// Who a root tool acts for, and which files root trusts (bbkit(7), SECURITY): real files and
// directories under a root-owned temporary directory, owned and moded as an attacker would
// leave them; the less privileged caller as sudo describes it (SUDO_UID) or as a real uid.
#include "bbkit/trust.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "bbkit/error.hpp"
#include "code_of.hpp"

namespace fs = std::filesystem;
using namespace bbkit;

namespace {

constexpr uid_t nobody = 65534;

class TrustTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root to own files as others";
        clear_environment();
        char tmpl[] = "/tmp/bbkit-trust.XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        chmod(dir_.c_str(), 0755);
    }
    void TearDown() override {
        clear_environment();
        if (!dir_.empty())
            fs::remove_all(dir_);
    }

    static void clear_environment() {
        for (const char* name : {"SUDO_UID", "SUDO_GID", "SUDO_USER", "BBKIT_CONFIG",
                                 "BBKIT_STATE_DIR", "BBKIT_FAULT", "BBKIT_FAULT_LOG"})
            unsetenv(name);
    }
    static void as_sudo_caller(const char* uid = "65534", const char* user = "nobody") {
        setenv("SUDO_UID", uid, 1);
        setenv("SUDO_GID", uid, 1);
        if (user != nullptr)
            setenv("SUDO_USER", user, 1);
    }

    // A file under the temporary directory, owned by `uid` with `mode`.
    std::string file(const std::string& name, uid_t uid = 0, mode_t mode = 0644,
                     const std::string& text = "x\n") {
        const std::string path = dir_ + "/" + name;
        fs::create_directories(fs::path(path).parent_path());
        std::ofstream(path) << text;
        EXPECT_EQ(chown(path.c_str(), uid, uid), 0);
        EXPECT_EQ(chmod(path.c_str(), mode), 0);
        return path;
    }
    std::string directory(const std::string& name, uid_t uid = 0, mode_t mode = 0755) {
        const std::string path = dir_ + "/" + name;
        fs::create_directories(path);
        EXPECT_EQ(chown(path.c_str(), uid, uid), 0);
        EXPECT_EQ(chmod(path.c_str(), mode), 0);
        return path;
    }

    // The exit code of check_root_controlled, and its message in `message`.
    ExitCode check(const std::string& path, std::string* message = nullptr) {
        return code_of([&] { check_root_controlled(path, "configuration"); }, message);
    }

    std::string dir_;
};

}  // namespace

TEST_F(TrustTest, root_itself_is_no_less_privileged_caller) {
    EXPECT_EQ(less_privileged_caller(), std::nullopt);
    setenv("SUDO_UID", "0", 1);  // root through sudo is still root
    EXPECT_EQ(less_privileged_caller(), std::nullopt);
}

TEST_F(TrustTest, sudos_caller_is_taken_from_its_variables) {
    as_sudo_caller("1234", "alice");
    setenv("SUDO_GID", "100", 1);
    const std::optional<Caller> caller = less_privileged_caller();
    ASSERT_TRUE(caller);
    EXPECT_EQ(caller->uid, 1234u);
    EXPECT_EQ(caller->gid, 100u);
    EXPECT_EQ(caller->name, "alice");
}

TEST_F(TrustTest, a_malformed_sudo_uid_is_taken_as_nobody_never_as_root) {
    for (const char* uid : {"", "abc", "-1", "4294967295", "99999999999", "0x10", " 5"}) {
        setenv("SUDO_UID", uid, 1);
        unsetenv("SUDO_GID");
        const std::optional<Caller> caller = less_privileged_caller();
        ASSERT_TRUE(caller) << uid;
        EXPECT_EQ(caller->uid, nobody) << uid;
        EXPECT_EQ(caller->gid, nobody) << uid;
    }
}

TEST_F(TrustTest, a_setuid_style_real_uid_is_a_caller_and_a_plain_user_is_none) {
    // Real uid nobody, effective root: as a setuid-root tool would run.
    EXPECT_EQ(code_of_as(0, 0,
                         [] {
                             if (setresuid(nobody, 0, 0) != 0)
                                 throw Error(ExitCode::software, "setresuid");
                             const std::optional<Caller> caller = less_privileged_caller();
                             if (!caller || caller->uid != nobody || !caller->name.empty())
                                 throw Error(ExitCode::software, "caller not nobody");
                         }),
              ExitCode::ok);
    // Not root at all: nothing to lend, whatever sudo's variables say.
    as_sudo_caller();
    EXPECT_EQ(code_of_as(nobody, nobody,
                         [] {
                             if (less_privileged_caller())
                                 throw Error(ExitCode::software, "a caller");
                         }),
              ExitCode::ok);
}

TEST_F(TrustTest, a_caller_may_choose_no_file_and_no_override) {
    EXPECT_NO_THROW(refuse_caller_file_choice("--config"));
    EXPECT_NO_THROW(refuse_caller_override("--force"));
    as_sudo_caller("1234", "alice");
    std::string message;
    EXPECT_EQ(code_of([] { refuse_caller_file_choice("--config"); }, &message), ExitCode::no_perm);
    EXPECT_EQ(message.rfind("refusing --config: running as root for uid 1234 (alice, through "
                            "sudo), which may not choose the files root reads or writes",
                            0),
              0u)
        << message;
    EXPECT_EQ(code_of([] { refuse_caller_override("--force"); }, &message), ExitCode::no_perm);
    EXPECT_NE(message.find("may not override bbkit's safety checks"), std::string::npos) << message;
    unsetenv("SUDO_USER");
    code_of([] { refuse_caller_override("--force"); }, &message);
    EXPECT_EQ(message.find("through sudo"), std::string::npos) << message;
}

TEST_F(TrustTest, a_callers_file_naming_variables_are_dropped_and_others_kept) {
    setenv("BBKIT_CONFIG", "/tmp/evil.toml", 1);
    setenv("BBKIT_STATE_DIR", "/tmp/evil", 1);
    drop_caller_environment();  // root's own: kept
    EXPECT_STREQ(std::getenv("BBKIT_CONFIG"), "/tmp/evil.toml");
    as_sudo_caller();
    setenv("BBKIT_FAULT", "alloc.env-written", 1);
    setenv("BBKIT_FAULT_LOG", "/tmp/evil.log", 1);
    setenv("SLURM_CONF", "/tmp/evil/slurm.conf", 1);  // what root's squeue and scontrol would read
    drop_caller_environment();
    for (const char* name :
         {"BBKIT_CONFIG", "BBKIT_STATE_DIR", "BBKIT_FAULT", "BBKIT_FAULT_LOG", "SLURM_CONF"})
        EXPECT_EQ(std::getenv(name), nullptr) << name;
    EXPECT_NE(std::getenv("PATH"), nullptr);
    EXPECT_STREQ(std::getenv("SUDO_UID"), "65534");
}

TEST_F(TrustTest, a_root_owned_file_in_root_owned_directories_is_trusted) {
    directory("etc");
    EXPECT_EQ(check(file("etc/bbkit.toml")), ExitCode::ok);
    // /tmp itself is world-writable but sticky, and the entry in it is root's.
    EXPECT_EQ(check(dir_ + "/./etc/../etc/bbkit.toml"), ExitCode::ok);
}

TEST_F(TrustTest, a_relative_path_is_checked_from_the_working_directory) {
    const std::string path = file("bbkit.toml", nobody);
    const fs::path before = fs::current_path();
    fs::current_path(dir_);
    std::string message;
    const ExitCode code = check("bbkit.toml", &message);
    fs::current_path(before);
    EXPECT_EQ(code, ExitCode::config);
    EXPECT_EQ(message.rfind("configuration bbkit.toml is not trusted: it is owned by uid 65534", 0),
              0u)
        << message;
}

TEST_F(TrustTest, a_file_others_own_or_may_write_is_a_configuration_error) {
    std::string message;
    EXPECT_EQ(check(file("owned", nobody), &message), ExitCode::config);
    EXPECT_NE(message.find("it is owned by uid 65534"), std::string::npos) << message;
    EXPECT_NE(message.find("chown root " + dir_ + "/owned"), std::string::npos) << message;
    EXPECT_EQ(check(file("group-writable", 0, 0664), &message), ExitCode::config);
    EXPECT_NE(message.find("it is writable by group or others"), std::string::npos) << message;
    EXPECT_EQ(check(file("world-writable", 0, 0646)), ExitCode::config);
}

TEST_F(TrustTest, a_directory_on_the_way_others_own_or_may_write_is_a_configuration_error) {
    directory("theirs", nobody);
    file("theirs/bbkit.toml");
    std::string message;
    EXPECT_EQ(check(dir_ + "/theirs/bbkit.toml", &message), ExitCode::config);
    EXPECT_NE(message.find(dir_ + "/theirs is owned by uid 65534"), std::string::npos) << message;
    directory("open", 0, 0777);
    file("open/bbkit.toml");
    EXPECT_EQ(check(dir_ + "/open/bbkit.toml", &message), ExitCode::config);
    EXPECT_NE(message.find(dir_ + "/open is writable by group or others"), std::string::npos)
        << message;
    // Sticky: others may write it, but not replace root's entry in it.
    directory("sticky", 0, 01777);
    EXPECT_EQ(check(file("sticky/bbkit.toml")), ExitCode::ok);
    EXPECT_EQ(check(file("sticky/planted.toml", nobody)), ExitCode::config);
}

TEST_F(TrustTest, a_symlink_is_followed_and_its_target_checked_too) {
    const std::string target = file("theirs.toml", nobody);
    fs::create_symlink(target, dir_ + "/link.toml");
    std::string message;
    EXPECT_EQ(check(dir_ + "/link.toml", &message), ExitCode::config);
    EXPECT_NE(message.find("it is owned by uid 65534"), std::string::npos) << message;
    // A relative link to a trusted file is as good as the file.
    file("real.toml");
    fs::create_symlink("real.toml", dir_ + "/relative.toml");
    EXPECT_EQ(check(dir_ + "/relative.toml"), ExitCode::ok);
    // A symlink someone else planted in a sticky directory may be swapped by them.
    directory("sticky", 0, 01777);
    fs::create_symlink(dir_ + "/real.toml", dir_ + "/sticky/link.toml");
    ASSERT_EQ(lchown((dir_ + "/sticky/link.toml").c_str(), nobody, nobody), 0);
    EXPECT_EQ(check(dir_ + "/sticky/link.toml", &message), ExitCode::config);
    EXPECT_NE(message.find("is owned by uid 65534 in " + dir_ + "/sticky"), std::string::npos)
        << message;
}

TEST_F(TrustTest, a_symlink_loop_is_refused_not_followed_forever) {
    fs::create_symlink(dir_ + "/b", dir_ + "/a");
    fs::create_symlink(dir_ + "/a", dir_ + "/b");
    std::string message;
    EXPECT_EQ(check(dir_ + "/a", &message), ExitCode::config);
    EXPECT_NE(message.find("too many symlinks"), std::string::npos) << message;
}

TEST_F(TrustTest, a_missing_file_or_one_that_is_not_a_regular_file_is_a_configuration_error) {
    std::string message;
    EXPECT_EQ(check(dir_ + "/missing.toml", &message), ExitCode::config);
    EXPECT_NE(message.find("cannot read configuration"), std::string::npos) << message;
    EXPECT_EQ(check(directory("dir.toml")), ExitCode::config);
    file("plain");
    EXPECT_EQ(check(dir_ + "/plain/bbkit.toml", &message), ExitCode::config);
    EXPECT_NE(message.find("is not a directory"), std::string::npos) << message;
}

TEST_F(TrustTest, a_process_that_is_not_root_lends_no_privilege_and_checks_nothing) {
    const std::string path = file("theirs.toml", nobody, 0666);
    EXPECT_EQ(code_of_as(nobody, nobody, [&] { check_root_controlled(path, "configuration"); }),
              ExitCode::ok);
}

TEST_F(TrustTest, a_file_is_opened_with_the_callers_permissions) {
    const std::string roots = file("roots", 0, 0600, "secret\n");
    const std::string theirs = file("theirs", nobody, 0400, "theirs\n");
    EXPECT_TRUE(open_as_caller(roots));  // root for itself
    std::vector<gid_t> groups(static_cast<std::size_t>(getgroups(0, nullptr)));
    groups.resize(
        static_cast<std::size_t>(getgroups(static_cast<int>(groups.size()), groups.data())));
    as_sudo_caller();
    std::string message;
    EXPECT_EQ(code_of([&] { open_as_caller(roots); }, &message), ExitCode::no_perm);
    EXPECT_EQ(message, "cannot read '" + roots + "': Permission denied");
    EXPECT_TRUE(open_as_caller(theirs));
    EXPECT_EQ(code_of([&] { open_as_caller(dir_ + "/missing"); }), ExitCode::no_input);
    // Root's own identity and groups are back after each open.
    EXPECT_TRUE(Fd(open(roots.c_str(), O_RDONLY | O_CLOEXEC)));
    std::vector<gid_t> after(groups.size() + 1);
    after.resize(static_cast<std::size_t>(getgroups(static_cast<int>(after.size()), after.data())));
    EXPECT_EQ(after, groups);
}
