// What the tests of a move share (mover_test, copy_file_test, copy_metadata_test): scratch
// trees, a tree comparison that checks everything `cp -a` keeps, and running a move as another
// user in a child process, as bb-mover would.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include <gtest/gtest.h>

#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/mover.hpp"

namespace bbkit::move_test {

constexpr uid_t nobody = 65534;
constexpr gid_t nogroup = 65534;

// A test whose point is a move as another user (root's files, moved by a process that drops to
// nobody, as bb-mover does for a job's user) needs root: without it, it says so and skips.
#define BBKIT_MOVES_AS_NOBODY() \
    if (::geteuid() != 0)       \
    GTEST_SKIP() << "moves root's files as nobody: needs root"

// A scratch directory everyone may traverse (the mover runs as nobody in most tests).
class TempDir {
  public:
    TempDir() {
        char pattern[] = "/tmp/bbkit-mover-XXXXXX";
        path_ = mkdtemp(pattern);
        chmod(path_.c_str(), 0755);
    }
    ~TempDir() {
        std::error_code ignored;  // never throws from a destructor (a test that failed midway)
        std::filesystem::remove_all(path_, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string operator/(const std::string& name) const { return path_ + "/" + name; }
    const std::string& path() const { return path_; }

  private:
    std::string path_;
};

inline void write_file(const std::string& path, const std::string& content, mode_t mode = 0644) {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << path;
    ASSERT_EQ(write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
    fchmod(fd, mode);
    close(fd);
}

inline void write_at(const std::string& path, off_t offset, const std::string& content) {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << path;
    ASSERT_EQ(pwrite(fd, content.data(), content.size(), offset),
              static_cast<ssize_t>(content.size()));
    close(fd);
}

inline std::string read_file(const std::string& path) {
    std::string data;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return "<unreadable>";
    char buf[1 << 16];
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;)
        data.append(buf, static_cast<std::size_t>(n));
    close(fd);
    return data;
}

inline std::vector<std::string> list_dir(const std::string& dir) {
    std::vector<std::string> names;
    DIR* d = opendir(dir.c_str());
    if (!d)
        return names;
    while (dirent* e = readdir(d))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
            names.emplace_back(e->d_name);
    closedir(d);
    std::sort(names.begin(), names.end());
    return names;
}

// Post-order over a tree (children before their directory), symlinks not followed.
inline void for_each_entry(const std::string& dir,
                           const std::function<void(const std::string&)>& fn) {
    for (const std::string& name : list_dir(dir)) {
        const std::string path = dir + "/" + name;
        struct stat st {};
        lstat(path.c_str(), &st);
        if (S_ISDIR(st.st_mode))
            for_each_entry(path, fn);
        fn(path);
    }
}

inline void set_times(const std::string& path, time_t sec, long nsec) {
    const struct timespec times[2] = {{sec, nsec}, {sec, nsec}};
    ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << path;
}

inline std::map<std::string, std::string> xattrs_of(const std::string& path) {
    std::map<std::string, std::string> out;
    char names[4096];
    const ssize_t n = llistxattr(path.c_str(), names, sizeof names);
    for (ssize_t at = 0; at < n; at += static_cast<ssize_t>(std::strlen(names + at)) + 1) {
        const std::string name = names + at;
        if (name.rfind("user.", 0) != 0 && name.rfind("system.posix_acl", 0) != 0)
            continue;
        char value[4096];
        const ssize_t size = lgetxattr(path.c_str(), name.c_str(), value, sizeof value);
        out[name] = size < 0 ? "<error>" : std::string(value, static_cast<std::size_t>(size));
    }
    return out;
}

// Compares two trees entry by entry: type, mode, ns mtime, content, link targets, holes,
// xattrs, and hard-link groups (same source inode <=> same copy inode). `owner` is checked
// when given.
inline void expect_same_tree(const std::string& a, const std::string& b, uid_t owner = -1) {
    std::map<ino_t, ino_t> links;
    std::function<void(const std::string&, const std::string&)> compare =
        [&](const std::string& x, const std::string& y) {
            struct stat sx {
            }, sy{};
            ASSERT_EQ(lstat(x.c_str(), &sx), 0) << x;
            ASSERT_EQ(lstat(y.c_str(), &sy), 0) << "missing copy " << y;
            EXPECT_EQ(sx.st_mode, sy.st_mode) << y;
            EXPECT_EQ(sx.st_mtim.tv_sec, sy.st_mtim.tv_sec) << y;
            EXPECT_EQ(sx.st_mtim.tv_nsec, sy.st_mtim.tv_nsec) << y;
            if (owner != static_cast<uid_t>(-1)) {
                EXPECT_EQ(sy.st_uid, owner) << y;
            }
            EXPECT_EQ(sx.st_gid, sy.st_gid) << y;
            if (!S_ISLNK(sx.st_mode)) {
                EXPECT_EQ(xattrs_of(x), xattrs_of(y)) << y;
            }
            if (S_ISREG(sx.st_mode)) {
                EXPECT_EQ(sx.st_size, sy.st_size) << y;
                EXPECT_LE(sy.st_blocks, sx.st_blocks + 8) << "holes filled in " << y;
                EXPECT_TRUE(read_file(x) == read_file(y)) << "content differs: " << y;
                if (sx.st_nlink > 1) {
                    EXPECT_EQ(sx.st_nlink, sy.st_nlink) << y;
                    auto [it, first] = links.emplace(sx.st_ino, sy.st_ino);
                    EXPECT_EQ(it->second, sy.st_ino) << "hard link split: " << y;
                }
            } else if (S_ISLNK(sx.st_mode)) {
                char tx[4096] = {}, ty[4096] = {};
                EXPECT_EQ(readlink(x.c_str(), tx, sizeof tx), readlink(y.c_str(), ty, sizeof ty));
                EXPECT_STREQ(tx, ty) << y;
            } else if (S_ISDIR(sx.st_mode)) {
                const auto nx = list_dir(x), ny = list_dir(y);
                EXPECT_EQ(nx, ny) << y;
                for (const std::string& name : nx)
                    compare(x + "/" + name, y + "/" + name);
            }
        };
    compare(a, b);
}

struct Outcome {
    int code = -1;  // 0, or the Error's exit status
    std::string message;
    std::uint64_t files = 0, bytes = 0, skipped = 0;
    std::vector<std::string> warnings;
};

// Runs the move in a child that has become nobody, as bb-mover would, and reports back
// through a pipe (gtest assertions do not cross a fork). `fault` arms BBKIT_FAULT in the child
// (test builds): a child killed there reports code 128.
inline Outcome move_as(uid_t uid, gid_t gid, const MovePlan& plan, const char* fault = nullptr) {
    int fds[2];
    if (pipe(fds) != 0)
        return {};
    const pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        std::string report;
        int code = 0;
        if (setgroups(0, nullptr) != 0 || setresgid(gid, gid, gid) != 0 ||
            setresuid(uid, uid, uid) != 0) {
            code = 71;
            report = "cannot drop privileges";
        } else {
            if (fault) {
                setenv("BBKIT_FAULT", fault, 1);
                fault_rearm();  // the parent may have read the setting already (one process)
            }
            try {
                const MoveSummary s = run_move(plan, nullptr);
                report = std::to_string(s.files) + " " + std::to_string(s.bytes) + " " +
                         std::to_string(s.skipped) + "\n";
                for (const std::string& w : s.warnings)
                    report += w + "\n";
            } catch (const Error& e) {
                code = e.exit_status();
                report = e.what();
            } catch (const std::exception& e) {
                code = 70;
                report = e.what();
            }
        }
        (void)!write(fds[1], report.data(), report.size());
        _exit(code);
    }
    close(fds[1]);
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;)
        text.append(buf, static_cast<std::size_t>(n));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    Outcome out;
    out.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    if (out.code != 0) {
        out.message = text;
        return out;
    }
    std::size_t line_end = text.find('\n');
    std::sscanf(text.substr(0, line_end).c_str(), "%lu %lu %lu", &out.files, &out.bytes,
                &out.skipped);
    while (line_end != std::string::npos && line_end + 1 < text.size()) {
        const std::size_t next = text.find('\n', line_end + 1);
        out.warnings.push_back(text.substr(line_end + 1, next - line_end - 1));
        line_end = next;
    }
    return out;
}

inline Outcome move_as_nobody(const MovePlan& plan, const char* fault = nullptr) {
    return move_as(nobody, nogroup, plan, fault);
}

inline std::string make_buffer(const TempDir& tmp, const std::string& name) {
    const std::string path = tmp / name;
    mkdir(path.c_str(), 0700);
    chown(path.c_str(), nobody, nogroup);
    return path;
}

inline MovePlan plan_in(const std::string& buffer, const std::string& source,
                        const std::string& destination, StageType type = StageType::directory) {
    MovePlan plan;
    plan.direction = MoveDirection::in;
    plan.buffer_root = buffer;
    plan.entries.push_back({source, destination, type});
    return plan;
}

// The Buffer::temp_token of the buffer every plan_out() stages from.
inline const std::string test_temp_token = "00112233445566778899aabbccddeeff";

inline MovePlan plan_out(const std::string& buffer, const std::string& source,
                         const std::string& destination, StageType type = StageType::directory) {
    MovePlan plan = plan_in(buffer, source, destination, type);
    plan.direction = MoveDirection::out;
    plan.durable = true;
    plan.temp_token = test_temp_token;  // one buffer's: a rerun takes its own trees over
    return plan;
}

inline bool has_temporaries(const std::string& dir) {
    bool found = false;
    for_each_entry(dir, [&](const std::string& path) {
        if (path.find(".bbkit-") != std::string::npos)
            found = true;
    });
    return found;
}

// A file system mounted for one test (tmpfs with a size, ramfs, an ext2 image on a loop
// device), detached at the end. ok() is false where this machine cannot mount it.
class Mount {
  public:
    Mount(const std::string& dir, const std::string& command) : dir_(dir) {
        mkdir(dir.c_str(), 0755);
        ok_ = std::system((command + " >/dev/null 2>&1").c_str()) == 0;
        if (ok_)
            chown(dir.c_str(), nobody, nogroup);
    }
    ~Mount() {
        if (ok_)
            umount2(dir_.c_str(), MNT_DETACH);
    }
    Mount(const Mount&) = delete;
    Mount& operator=(const Mount&) = delete;
    bool ok() const { return ok_; }

  private:
    std::string dir_;
    bool ok_ = false;
};

// Dense data of `size` bytes that differs at every 4 KiB block (a misplaced block shows).
inline std::string dense_data(std::size_t size, unsigned seed) {
    std::string data(size, '\0');
    for (std::size_t i = 0; i < size; i += 512)
        data[i] = static_cast<char>((i / 4096) * 31 + seed);
    if (size > 0)
        data[size - 1] = static_cast<char>(seed + 1);
    return data;
}

// Sources for the O_DIRECT paths: a chunked file (>= 64 MiB) and a one-worker file (8-64 MiB),
// both ending in a partial block, plus a small file that stays buffered.
inline void make_direct_sources(const std::string& src) {
    mkdir(src.c_str(), 0755);
    write_file(src + "/chunked", dense_data((std::size_t{70} << 20) + 4097, 3));
    write_file(src + "/single", dense_data((std::size_t{9} << 20) + 1, 5));
    write_file(src + "/small", "small\n");
    for_each_entry(src, [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    lchown(src.c_str(), nobody, nogroup);
}
}  // namespace bbkit::move_test
