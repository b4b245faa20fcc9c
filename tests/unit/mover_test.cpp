#include "bbkit/mover.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"

namespace bbkit {
namespace {

constexpr uid_t nobody = 65534;
constexpr gid_t nogroup = 65534;

// A scratch directory everyone may traverse (the mover runs as nobody in most tests).
class TempDir {
  public:
    TempDir() {
        char pattern[] = "/tmp/bbkit-mover-XXXXXX";
        path_ = mkdtemp(pattern);
        chmod(path_.c_str(), 0755);
    }
    ~TempDir() { std::filesystem::remove_all(path_); }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string operator/(const std::string& name) const { return path_ + "/" + name; }
    const std::string& path() const { return path_; }

  private:
    std::string path_;
};

void write_file(const std::string& path, const std::string& content, mode_t mode = 0644) {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << path;
    ASSERT_EQ(write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
    fchmod(fd, mode);
    close(fd);
}

void write_at(const std::string& path, off_t offset, const std::string& content) {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << path;
    ASSERT_EQ(pwrite(fd, content.data(), content.size(), offset),
              static_cast<ssize_t>(content.size()));
    close(fd);
}

std::string read_file(const std::string& path) {
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

std::vector<std::string> list_dir(const std::string& dir) {
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
void for_each_entry(const std::string& dir, const std::function<void(const std::string&)>& fn) {
    for (const std::string& name : list_dir(dir)) {
        const std::string path = dir + "/" + name;
        struct stat st {};
        lstat(path.c_str(), &st);
        if (S_ISDIR(st.st_mode))
            for_each_entry(path, fn);
        fn(path);
    }
}

void set_times(const std::string& path, time_t sec, long nsec) {
    const struct timespec times[2] = {{sec, nsec}, {sec, nsec}};
    ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << path;
}

// Everything cp -a keeps and a user may own. Owned by nobody, times set last.
void make_tricky_tree(const std::string& root) {
    ASSERT_EQ(mkdir(root.c_str(), 0755), 0);
    auto at = [&](const std::string& name) { return root + "/" + name; };
    write_file(at("plain"), "plain content\n");
    write_file(at("-leading-dash"), "dash");
    write_file(at("with space"), "space");
    write_file(at("new\nline"), "newline");
    write_file(at("tab\there"), "tab");
    write_file(at(std::string("bad\xff"
                              "utf8")),
               "invalid utf-8");
    write_file(at(std::string(255, 'n')), "long name");
    write_file(at("empty-file"), "");
    write_file(at("m0700"), "x", 0700);
    write_file(at("m0444"), "read only", 0444);
    write_file(at("suid"), "#!/bin/sh\n", 04755);
    write_file(at("sgid"), "#!/bin/sh\n", 02755);
    write_file(at("old"), "before 1970");
    write_file(at("future"), "after 2038");
    mkdir(at("sticky").c_str(), 0777);
    chmod(at("sticky").c_str(), 01777);
    mkdir(at("ro").c_str(), 0755);
    write_file(at("ro/inside"), "in a 0500 dir", 0600);
    mkdir(at("empty").c_str(), 0755);
    mkdir(at("sub").c_str(), 0750);
    mkdir(at("sub/emptier").c_str(), 0700);
    symlink("plain", at("rel").c_str());
    symlink("/etc/passwd", at("abs").c_str());
    symlink("nowhere/none", at("dangling").c_str());
    symlink("sub", at("dirlink").c_str());
    symlink("../plain", at("sub/up").c_str());
    // Sparse: data at the start, the middle and the end of 10 MiB; and a file of holes only.
    write_at(at("sparse"), 0, "head");
    write_at(at("sparse"), 5 << 20, std::string(8192, 'm'));
    write_at(at("sparse"), (10 << 20) - 4, "tail");
    write_file(at("allhole"), "");
    truncate(at("allhole").c_str(), 8 << 20);
    write_file(at("hl1"), "hard linked");
    link(at("hl1").c_str(), at("sub/hl2").c_str());
    mkfifo(at("fifo").c_str(), 0640);
    setxattr(at("plain").c_str(), "user.origin", "tricky", 6, 0);
    setxattr(at("sub").c_str(), "user.dir", "attr", 4, 0);
    write_file(at("acl"), "acl");
    mkdir(at("acldir").c_str(), 0750);
    const std::string acl = "setfacl -m u:1:r " + at("acl") + " && setfacl -d -m u:1:rx " +
                            at("acldir") + " && setfacl -m u:1:rx " + at("acldir");
    ASSERT_EQ(std::system(acl.c_str()), 0);
    std::string deep = at("deep");
    for (int level = 0; level < 40; ++level) {
        mkdir(deep.c_str(), 0755);
        deep += "/d" + std::to_string(level);
    }
    write_file(deep, "forty levels down");

    int counter = 0;
    for_each_entry(root, [&](const std::string& path) {
        lchown(path.c_str(), nobody, nogroup);
        ++counter;
        set_times(path, 1600000000 + counter, 123456789 - counter);
    });
    chmod(at("suid").c_str(), 04755);  // chown cleared them
    chmod(at("sgid").c_str(), 02755);
    set_times(at("old"), -1000000000, 5);
    set_times(at("future"), 4102444800 + 12345, 999999999);
    chmod(at("ro").c_str(), 0500);
    set_times(at("ro"), 1500000000, 1);
    lchown(root.c_str(), nobody, nogroup);
    set_times(root, 1400000000, 42);
}

std::map<std::string, std::string> xattrs_of(const std::string& path) {
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
void expect_same_tree(const std::string& a, const std::string& b, uid_t owner = -1) {
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
Outcome move_as(uid_t uid, gid_t gid, const MovePlan& plan, const char* fault = nullptr) {
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

Outcome move_as_nobody(const MovePlan& plan, const char* fault = nullptr) {
    return move_as(nobody, nogroup, plan, fault);
}

std::string make_buffer(const TempDir& tmp, const std::string& name) {
    const std::string path = tmp / name;
    mkdir(path.c_str(), 0700);
    chown(path.c_str(), nobody, nogroup);
    return path;
}

MovePlan plan_in(const std::string& buffer, const std::string& source,
                 const std::string& destination, StageType type = StageType::directory) {
    MovePlan plan;
    plan.direction = MoveDirection::in;
    plan.buffer_root = buffer;
    plan.entries.push_back({source, destination, type});
    return plan;
}

MovePlan plan_out(const std::string& buffer, const std::string& source,
                  const std::string& destination, StageType type = StageType::directory) {
    MovePlan plan = plan_in(buffer, source, destination, type);
    plan.direction = MoveDirection::out;
    plan.durable = true;
    return plan;
}

bool has_temporaries(const std::string& dir) {
    bool found = false;
    for_each_entry(dir, [&](const std::string& path) {
        if (path.find(".bbkit-") != std::string::npos)
            found = true;
    });
    return found;
}

TEST(mover, round_trip_as_the_user_keeps_everything_cp_a_keeps) {
    TempDir tmp;
    make_tricky_tree(tmp / "src");
    mknod((tmp / "src/null").c_str(), S_IFCHR | 0666, makedev(1, 3));
    set_times(tmp / "src", 1400000000, 42);  // as make_tricky_tree left it
    const std::string buffer = make_buffer(tmp, "buffer");

    const Outcome in = move_as_nobody(plan_in(buffer, tmp / "src", "data"));
    ASSERT_EQ(in.code, 0) << in.message;
    ASSERT_EQ(in.warnings.size(), 1u);
    EXPECT_NE(in.warnings[0].find("skipped device node"), std::string::npos) << in.warnings[0];
    unlink((tmp / "src/null").c_str());
    set_times(tmp / "src", 1400000000, 42);  // as make_tricky_tree left it
    expect_same_tree(tmp / "src", buffer + "/data", nobody);

    mkdir((tmp / "out").c_str(), 0755);
    chown((tmp / "out").c_str(), nobody, nogroup);
    const Outcome out = move_as_nobody(plan_out(buffer, "data", tmp / "out/result"));
    ASSERT_EQ(out.code, 0) << out.message;
    expect_same_tree(tmp / "src", tmp / "out/result", nobody);
    EXPECT_FALSE(has_temporaries(tmp / "out"));
}

TEST(mover, one_thread_and_eight_threads_give_identical_trees) {
    TempDir tmp;
    make_tricky_tree(tmp / "src");
    const std::string one = make_buffer(tmp, "one"), eight = make_buffer(tmp, "eight");
    MovePlan plan = plan_in(one, tmp / "src", "");
    plan.threads = 1;
    ASSERT_EQ(move_as_nobody(plan).code, 0);
    plan = plan_in(eight, tmp / "src", "");
    plan.threads = 8;
    ASSERT_EQ(move_as_nobody(plan).code, 0);
    // The buffer root keeps its own mode (bbkit owns it): compare what is inside.
    for (const std::string& name : list_dir(tmp / "src"))
        expect_same_tree(one + "/" + name, eight + "/" + name, nobody);
    EXPECT_EQ(list_dir(one), list_dir(tmp / "src"));
}

TEST(mover, files_and_renames_of_single_entries) {
    TempDir tmp;
    make_tricky_tree(tmp / "src");
    const std::string buffer = make_buffer(tmp, "buffer");
    MovePlan plan = plan_in(buffer, tmp / "src/plain", "renamed", StageType::file);
    plan.entries.push_back({tmp / "src/rel", "links/", StageType::file});
    plan.entries.push_back({tmp / "src/sparse", "a/b/c/sparse", StageType::file});
    ASSERT_EQ(move_as_nobody(plan).code, 0);
    expect_same_tree(tmp / "src/plain", buffer + "/renamed");
    expect_same_tree(tmp / "src/rel", buffer + "/links/rel");
    expect_same_tree(tmp / "src/sparse", buffer + "/a/b/c/sparse");
}

TEST(mover, symlink_planted_in_buffer_never_redirects_a_stage_in) {
    TempDir tmp;
    make_tricky_tree(tmp / "src");
    mkdir((tmp / "decoy").c_str(), 0777);
    const std::string buffer = make_buffer(tmp, "buffer");
    symlink("/etc", (buffer + "/etc").c_str());
    symlink((tmp / "decoy").c_str(), (buffer + "/decoy").c_str());
    // As root, so permissions cannot be what stops it.
    for (const MoveEntry& entry :
         std::vector<MoveEntry>{{tmp / "src/plain", "etc/bbkit-mover-test", StageType::file},
                                {tmp / "src/plain", "decoy/file", StageType::file},
                                {tmp / "src/plain", "decoy/deeper/file", StageType::file},
                                {tmp / "src", "decoy", StageType::directory},
                                {tmp / "src", "decoy/tree", StageType::directory}}) {
        MovePlan plan = plan_in(buffer, entry.source, entry.destination, entry.type);
        try {
            run_move(plan, nullptr);
            ADD_FAILURE() << "not refused: " << entry.destination;
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ExitCode::no_perm) << e.what();
            EXPECT_NE(std::string(e.what()).find(buffer + "/"), std::string::npos) << e.what();
        }
    }
    EXPECT_TRUE(list_dir(tmp / "decoy").empty());
    EXPECT_NE(access("/etc/bbkit-mover-test", F_OK), 0);
    struct stat st {};
    ASSERT_EQ(lstat((buffer + "/decoy").c_str(), &st), 0);
    EXPECT_TRUE(S_ISLNK(st.st_mode));
}

TEST(mover, symlink_planted_in_buffer_never_redirects_a_stage_out) {
    TempDir tmp;
    mkdir((tmp / "decoy").c_str(), 0755);
    write_file(tmp / "decoy/secret", "not yours", 0600);
    const std::string buffer = make_buffer(tmp, "buffer");
    symlink((tmp / "decoy").c_str(), (buffer + "/results").c_str());
    mkdir((tmp / "out").c_str(), 0777);
    for (const MoveEntry& entry :
         std::vector<MoveEntry>{{"results/secret", tmp / "out/secret", StageType::file},
                                {"results", tmp / "out/tree", StageType::directory}}) {
        MovePlan plan = plan_out(buffer, entry.source, entry.destination, entry.type);
        try {
            run_move(plan, nullptr);
            ADD_FAILURE() << "not refused: " << entry.source;
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ExitCode::no_perm) << e.what();
        }
    }
    EXPECT_TRUE(list_dir(tmp / "out").empty());
    // A symlink as a single file is copied as what it is, never followed.
    ASSERT_EQ(
        run_move(plan_out(buffer, "results", tmp / "out/link", StageType::file), nullptr).files,
        1u);
    char target[4096] = {};
    EXPECT_GT(readlink((tmp / "out/link").c_str(), target, sizeof target), 0);
    EXPECT_EQ(std::string(target), tmp / "decoy");
}

TEST(mover, rerun_skips_complete_files_and_rewrites_changed_ones) {
    TempDir tmp;
    make_tricky_tree(tmp / "src");
    const std::string buffer = make_buffer(tmp, "buffer");
    const Outcome first = move_as_nobody(plan_in(buffer, tmp / "src", "data"));
    ASSERT_EQ(first.code, 0) << first.message;
    EXPECT_GT(first.files, 20u);

    const Outcome again = move_as_nobody(plan_in(buffer, tmp / "src", "data"));
    ASSERT_EQ(again.code, 0) << again.message;
    EXPECT_EQ(again.files, 0u);
    EXPECT_EQ(again.bytes, 0u);
    EXPECT_EQ(again.skipped, first.files);

    // Same size, other mtime: rewritten; a partial copy from a crash is never taken as done.
    write_file(tmp / "src/plain", "PLAIN CONTENT\n");
    lchown((tmp / "src/plain").c_str(), nobody, nogroup);
    write_file(buffer + "/data/with space", "sp");  // truncated by a "crash"
    const Outcome third = move_as_nobody(plan_in(buffer, tmp / "src", "data"));
    ASSERT_EQ(third.code, 0) << third.message;
    EXPECT_EQ(third.files, 2u);
    expect_same_tree(tmp / "src", buffer + "/data", nobody);
}

TEST(mover, failed_stage_out_leaves_no_temporary_and_no_partial_file) {
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    mkdir((buffer + "/data").c_str(), 0755);
    mkdir((buffer + "/data/locked").c_str(), 0755);
    for (int i = 0; i < 50; ++i)
        write_file(buffer + "/data/f" + std::to_string(i), std::string(10000, 'x'));
    write_file(buffer + "/data/locked/g", "g");
    for_each_entry(buffer, [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    // The destination's "locked" directory belongs to root: the user cannot write into it.
    mkdir((tmp / "out").c_str(), 0755);
    chown((tmp / "out").c_str(), nobody, nogroup);
    mkdir((tmp / "out/locked").c_str(), 0755);

    const Outcome out = move_as_nobody(plan_out(buffer, "data", tmp / "out"));
    EXPECT_EQ(out.code, 77) << out.message;
    EXPECT_NE(out.message.find(tmp / "out/locked"), std::string::npos) << out.message;
    EXPECT_EQ(list_dir(tmp / "out"), std::vector<std::string>{"locked"});
    EXPECT_TRUE(list_dir(tmp / "out/locked").empty());

    // An unwritable destination directory from the start: named in the message.
    chown((tmp / "out").c_str(), 0, 0);
    const Outcome denied =
        move_as_nobody(plan_out(buffer, "data/f1", tmp / "out/f1", StageType::file));
    EXPECT_EQ(denied.code, 77) << denied.message;
    EXPECT_NE(denied.message.find("directory " + tmp / "out"), std::string::npos) << denied.message;
    EXPECT_EQ(list_dir(tmp / "out"), std::vector<std::string>{"locked"});
}

// Found by tests/fault/run: a stage-out mover killed before its renames left its
// temporaries in the user's destination, and the successful rerun kept them.
TEST(mover, stage_out_rerun_removes_temporaries_a_killed_run_left) {
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    mkdir((buffer + "/data").c_str(), 0755);
    write_file(buffer + "/data/result", "complete result");
    write_file(buffer + "/data/" + std::string(250, 'n'), "long name");
    for_each_entry(buffer, [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    mkdir((tmp / "out").c_str(), 0755);
    // What a killed run leaves: temporaries of the names being written, partial content.
    write_file(tmp / "out/.result.bbkit-0123456789abcdef0001", "comp");
    const std::string hashed = std::to_string(std::hash<std::string>{}(std::string(250, 'n')));
    write_file(tmp / "out/.bbkit-" + hashed + "-fedcba98765432100002", "lo");
    // Names that only look alike are the user's and stay.
    write_file(tmp / "out/.other.bbkit-0123456789abcdef0001", "other");
    write_file(tmp / "out/.result.bbkit-notours", "mine");
    chown((tmp / "out").c_str(), nobody, nogroup);
    for_each_entry(tmp / "out", [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });

    const Outcome out = move_as_nobody(plan_out(buffer, "data", tmp / "out"));
    ASSERT_EQ(out.code, 0) << out.message;
    EXPECT_EQ(read_file(tmp / "out/result"), "complete result");
    EXPECT_EQ(list_dir(tmp / "out"),
              (std::vector<std::string>{".other.bbkit-0123456789abcdef0001",
                                        ".result.bbkit-notours", std::string(250, 'n'), "result"}));
}

TEST(mover, sources_the_user_cannot_read_or_that_are_missing) {
    TempDir tmp;
    write_file(tmp / "secret", "root only", 0600);
    const std::string buffer = make_buffer(tmp, "buffer");
    const Outcome denied = move_as_nobody(plan_in(buffer, tmp / "secret", "s", StageType::file));
    EXPECT_EQ(denied.code, 77) << denied.message;
    EXPECT_NE(denied.message.find(tmp / "secret"), std::string::npos) << denied.message;
    const Outcome missing = move_as_nobody(plan_in(buffer, tmp / "absent", "a", StageType::file));
    EXPECT_EQ(missing.code, 66) << missing.message;
    EXPECT_NE(missing.message.find(tmp / "absent"), std::string::npos) << missing.message;
    const Outcome climbing =
        move_as_nobody(plan_in(buffer, tmp / "secret", "../x", StageType::file));
    EXPECT_EQ(climbing.code, 65) << climbing.message;
    EXPECT_TRUE(list_dir(buffer).empty());
}

// 200 MiB, mostly holes, with data across chunk boundaries and an unaligned end; plus a dense
// 70 MiB file. Copied buffered and with O_DIRECT, threads sharing each file's chunks.
TEST(mover, large_files_are_copied_in_chunks) {
    TempDir tmp;
    mkdir((tmp / "src").c_str(), 0755);
    const std::string big = tmp / "src/big";
    for (off_t at : {off_t{0}, (off_t{32} << 20) - 3000, off_t{100} << 20, off_t{150} << 20})
        write_at(big, at, std::string(1 << 20, static_cast<char>('a' + at % 23)));
    truncate(big.c_str(), (off_t{200} << 20) + 123);
    std::string dense(70 << 20, '\0');
    for (std::size_t i = 0; i < dense.size(); i += 4093)
        dense[i] = static_cast<char>(i * 7);
    write_file(tmp / "src/dense", dense);
    for_each_entry(tmp / "src", [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    lchown((tmp / "src").c_str(), nobody, nogroup);

    for (bool direct : {false, true}) {
        const std::string buffer = make_buffer(tmp, direct ? "direct" : "buffered");
        MovePlan plan = plan_in(buffer, tmp / "src", "data");
        plan.direct_io = direct;
        const Outcome in = move_as_nobody(plan);
        ASSERT_EQ(in.code, 0) << in.message;
        expect_same_tree(tmp / "src", buffer + "/data", nobody);
        struct stat st {};
        ASSERT_EQ(stat((buffer + "/data/big").c_str(), &st), 0);
        EXPECT_LT(st.st_blocks * 512, 16 << 20) << "holes filled";
    }
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
std::string dense_data(std::size_t size, unsigned seed) {
    std::string data(size, '\0');
    for (std::size_t i = 0; i < size; i += 512)
        data[i] = static_cast<char>((i / 4096) * 31 + seed);
    if (size > 0)
        data[size - 1] = static_cast<char>(seed + 1);
    return data;
}

// Sources for the O_DIRECT paths: a chunked file (>= 64 MiB) and a one-worker file (8-64 MiB),
// both ending in a partial block, plus a small file that stays buffered.
void make_direct_sources(const std::string& src) {
    mkdir(src.c_str(), 0755);
    write_file(src + "/chunked", dense_data((std::size_t{70} << 20) + 4097, 3));
    write_file(src + "/single", dense_data((std::size_t{9} << 20) + 1, 5));
    write_file(src + "/small", "small\n");
    for_each_entry(src, [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    lchown(src.c_str(), nobody, nogroup);
}

// Dense files of unaligned sizes go through O_DIRECT for all but their last partial block; the
// destination's blocks are reserved first and the padding past the end is cut off.
TEST(mover, direct_io_copies_unaligned_tails_exactly) {
    TempDir tmp;
    make_direct_sources(tmp / "src");
    const std::string buffer = make_buffer(tmp, "buffer");
    MovePlan in = plan_in(buffer, tmp / "src", "data");
    in.direct_io = true;
    const Outcome copied = move_as_nobody(in);
    ASSERT_EQ(copied.code, 0) << copied.message;
    EXPECT_EQ(copied.files, 3u);
    expect_same_tree(tmp / "src", buffer + "/data", nobody);
    EXPECT_EQ(read_file(buffer + "/data/chunked"), read_file(tmp / "src/chunked"));
    EXPECT_EQ(read_file(buffer + "/data/single"), read_file(tmp / "src/single"));

    mkdir((tmp / "out").c_str(), 0755);
    chown((tmp / "out").c_str(), nobody, nogroup);
    MovePlan out = plan_out(buffer, "data", tmp / "out/data");
    out.direct_io = true;
    const Outcome back = move_as_nobody(out);
    ASSERT_EQ(back.code, 0) << back.message;
    expect_same_tree(tmp / "src", tmp / "out/data", nobody);
    EXPECT_EQ(read_file(tmp / "out/data/chunked"), read_file(tmp / "src/chunked"));
    EXPECT_FALSE(has_temporaries(tmp / "out"));
}

// ramfs refuses O_DIRECT: the copy goes buffered, whole and exact.
TEST(mover, direct_io_refused_by_the_file_system_falls_back_to_buffered) {
    TempDir tmp;
    make_direct_sources(tmp / "src");
    const Mount ramfs(tmp / "ramfs", "mount -t ramfs ramfs " + tmp / "ramfs");
    if (!ramfs.ok())
        GTEST_SKIP() << "cannot mount ramfs here";
    const std::string buffer = make_buffer(tmp, "ramfs/buffer");
    MovePlan plan = plan_in(buffer, tmp / "src", "data");
    plan.direct_io = true;
    const Outcome in = move_as_nobody(plan);
    ASSERT_EQ(in.code, 0) << in.message;
    expect_same_tree(tmp / "src", buffer + "/data", nobody);
    EXPECT_EQ(read_file(buffer + "/data/chunked"), read_file(tmp / "src/chunked"));
}

// ext2 (no extents) cannot reserve blocks with fallocate: the destination gets a plain size.
TEST(mover, direct_io_where_blocks_cannot_be_reserved) {
    TempDir tmp;
    make_direct_sources(tmp / "src");
    const std::string image = tmp / "ext2.img";
    const Mount ext2(tmp / "ext2", "truncate -s 256M " + image + " && mkfs.ext2 -q -F " + image +
                                       " && mount -o loop " + image + " " + tmp / "ext2");
    if (!ext2.ok())
        GTEST_SKIP() << "cannot make and loop-mount an ext2 image here (mkfs.ext2, loop devices)";
    const std::string buffer = make_buffer(tmp, "ext2/buffer");
    MovePlan plan = plan_in(buffer, tmp / "src", "data");
    plan.direct_io = true;
    const Outcome in = move_as_nobody(plan);
    ASSERT_EQ(in.code, 0) << in.message;
    // ext2 counts its indirect blocks in st_blocks: compare what a copy must keep.
    for (const std::string name : {"chunked", "single", "small"}) {
        struct stat a {
        }, b{};
        ASSERT_EQ(stat((tmp / "src/" + name).c_str(), &a), 0);
        ASSERT_EQ(stat((buffer + "/data/" + name).c_str(), &b), 0);
        EXPECT_EQ(a.st_size, b.st_size) << name;
        EXPECT_EQ(a.st_mode, b.st_mode) << name;
        EXPECT_EQ(a.st_mtim.tv_nsec, b.st_mtim.tv_nsec) << name;
        EXPECT_EQ(read_file(tmp / "src/" + name), read_file(buffer + "/data/" + name)) << name;
    }
}

// A destination too small for a file fails when its blocks are reserved (exit 74, naming the
// file); a stage-out leaves no temporary and no final name behind.
TEST(mover, direct_io_on_a_full_file_system_fails_cleanly) {
    TempDir tmp;
    make_direct_sources(tmp / "src");
    const Mount small(tmp / "small", "mount -t tmpfs -o size=16m tmpfs " + tmp / "small");
    if (!small.ok())
        GTEST_SKIP() << "cannot mount tmpfs here";
    const std::string buffer = make_buffer(tmp, "small/buffer");
    MovePlan plan = plan_in(buffer, tmp / "src", "data");
    plan.direct_io = true;
    const Outcome in = move_as_nobody(plan);
    EXPECT_EQ(in.code, 74) << in.message;
    EXPECT_NE(in.message.find(buffer + "/data/chunked"), std::string::npos) << in.message;
    EXPECT_NE(in.message.find("no space left on device"), std::string::npos) << in.message;

    const std::string full = make_buffer(tmp, "buffer");
    ASSERT_EQ(move_as_nobody(plan_in(full, tmp / "src", "data")).code, 0);
    MovePlan out = plan_out(full, "data", tmp / "small/out");
    out.direct_io = true;
    const Outcome failed = move_as_nobody(out);
    EXPECT_EQ(failed.code, 74) << failed.message;
    EXPECT_NE(failed.message.find(tmp / "small/out/chunked"), std::string::npos) << failed.message;
    EXPECT_FALSE(has_temporaries(tmp / "small"));
    EXPECT_EQ(list_dir(tmp / "small/out"), std::vector<std::string>{});
}

// A stage-out killed before its renames leaves `.NAME.bbkit-<20 hex>` files (and the short
// form `.bbkit-<tag>-<20 hex>` for names too long for that) beside the names it was writing.
// The rerun removes them; a source entry or another file that only looks like one is kept.
TEST(mover, rerun_removes_temporaries_of_a_killed_stage_out) {
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    mkdir((buffer + "/data").c_str(), 0755);
    mkdir((buffer + "/data/sub").c_str(), 0755);
    const std::string long_name(250, 'L');
    const std::string lookalike = ".a.bbkit-0123456789abcdef0099";  // a source entry
    write_file(buffer + "/data/a", "a");
    write_file(buffer + "/data/sub/b", "b");
    write_file(buffer + "/data/" + long_name, "long");
    write_file(buffer + "/data/" + lookalike, "source entry");
    for_each_entry(buffer, [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });

    // What the killed run left: its output directories and temporaries in them.
    const std::string out = tmp / "out";
    mkdir(out.c_str(), 0755);
    mkdir((out + "/sub").c_str(), 0755);
    const std::string tag = std::to_string(std::hash<std::string>{}(long_name));
    const std::vector<std::string> stale = {out + "/.a.bbkit-0123456789abcdef0001",
                                            out + "/sub/.b.bbkit-fedcba98765432100002",
                                            out + "/.bbkit-" + tag + "-0123456789abcdef0003"};
    for (const std::string& path : stale)
        write_file(path, "partial");
    // Not temporaries of this move: another name, a wrong suffix, a user's own file.
    const std::vector<std::string> others = {out + "/.other.bbkit-0123456789abcdef0004",
                                             out + "/.a.bbkit-0123456789ABCDEF0005",
                                             out + "/.a.bbkit-0123", out + "/a.bbkit-x"};
    for (const std::string& path : others)
        write_file(path, "mine");
    for_each_entry(out, [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    lchown(out.c_str(), nobody, nogroup);

    const Outcome rerun = move_as_nobody(plan_out(buffer, "data", out));
    ASSERT_EQ(rerun.code, 0) << rerun.message;
    for (const std::string& path : stale)
        EXPECT_NE(access(path.c_str(), F_OK), 0) << path << " left behind";
    for (const std::string& path : others)
        EXPECT_EQ(read_file(path), "mine") << path;
    EXPECT_EQ(read_file(out + "/" + lookalike), "source entry");
    EXPECT_EQ(read_file(out + "/sub/b"), "b");
    EXPECT_EQ(read_file(out + "/" + long_name), "long");
}

// Files in directories the move creates get their mode and group at creation where that is
// certain, else by fchmod/fchown: the result is exact under an inherited default ACL (it would
// decide the mode), a setgid parent (it would decide the group) and a restrictive umask.
TEST(mover, modes_and_groups_are_exact_in_new_directories) {
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

// The tricky tree staged into a buffer's "data" as nobody, and an empty "out" of nobody's to stage
// out into; returns the buffer.
std::string stage_in_tricky_tree(const TempDir& tmp) {
    make_tricky_tree(tmp / "src");
    const std::string buffer = make_buffer(tmp, "buffer");
    const Outcome in = move_as_nobody(plan_in(buffer, tmp / "src", "data"));
    EXPECT_EQ(in.code, 0) << in.message;
    mkdir((tmp / "out").c_str(), 0755);
    chown((tmp / "out").c_str(), nobody, nogroup);
    return buffer;
}

// A destination directory that does not exist is built under a temporary name beside it, with
// final names inside, and renamed into place whole: the result (mode and ns mtime of the top
// directory included) is the same with one syncfs or with an fsync per file and directory.
TEST(mover, stage_out_into_a_new_directory_renames_the_tree_into_place) {
    TempDir tmp;
    const std::string buffer = stage_in_tricky_tree(tmp);
    for (const bool trust_syncfs : {true, false}) {
        const std::string name = trust_syncfs ? "syncfs" : "fsync";
        MovePlan plan = plan_out(buffer, "data", tmp / "out/" + name + "/result");
        plan.trust_syncfs = trust_syncfs;
        const Outcome out = move_as_nobody(plan);
        ASSERT_EQ(out.code, 0) << out.message;
        expect_same_tree(tmp / "src", tmp / "out/" + name + "/result", nobody);
        EXPECT_EQ(list_dir(tmp / "out/" + name), std::vector<std::string>{"result"});
        EXPECT_FALSE(has_temporaries(tmp / "out/" + name));
    }
}

// Two entries into the same new directory merge there as before (neither builds it aside).
TEST(mover, two_entries_into_one_new_directory_merge) {
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    mkdir((buffer + "/a").c_str(), 0755);
    mkdir((buffer + "/b").c_str(), 0755);
    write_file(buffer + "/a/x", "x");
    write_file(buffer + "/b/y", "y");
    for_each_entry(buffer, [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    mkdir((tmp / "out").c_str(), 0755);
    chown((tmp / "out").c_str(), nobody, nogroup);
    MovePlan plan = plan_out(buffer, "a", tmp / "out/merged");
    plan.entries.push_back({"b", tmp / "out/merged", StageType::directory});
    const Outcome out = move_as_nobody(plan);
    ASSERT_EQ(out.code, 0) << out.message;
    EXPECT_EQ(list_dir(tmp / "out/merged"), (std::vector<std::string>{"x", "y"}));
    EXPECT_EQ(list_dir(tmp / "out"), std::vector<std::string>{"merged"});
}

// Temporary directories left by a killed run are removed as the user: read-only directories
// in them are opened up first, and a symlink in them is removed, never followed. Lookalikes
// and temporaries of names this move does not write stay.
TEST(mover, stale_temporary_directories_are_removed_without_following_symlinks) {
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    mkdir((buffer + "/data").c_str(), 0755);
    mkdir((buffer + "/data/sub").c_str(), 0755);
    write_file(buffer + "/data/sub/b", "b");
    for_each_entry(buffer, [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    mkdir((tmp / "victim").c_str(), 0755);
    write_file(tmp / "victim/keep", "keep");
    const std::string out = tmp / "out";
    const std::string stale = out + "/.sub.bbkit-0123456789abcdef0001";
    const std::vector<std::string> kept = {out + "/.other.bbkit-0123456789abcdef0002",
                                           out + "/.sub.bbkit-notours"};
    mkdir(out.c_str(), 0755);
    mkdir(stale.c_str(), 0755);
    mkdir((stale + "/deeper").c_str(), 0755);
    write_file(stale + "/x", "partial");
    write_file(stale + "/deeper/y", "partial");
    symlink((tmp / "victim").c_str(), (stale + "/escape").c_str());
    for (const std::string& dir : kept)
        mkdir(dir.c_str(), 0755);
    for_each_entry(out, [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    lchown(out.c_str(), nobody, nogroup);
    for_each_entry(tmp / "victim",
                   [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    lchown((tmp / "victim").c_str(), nobody, nogroup);
    chmod((stale + "/deeper").c_str(), 0500);  // as a killed run leaves final modes
    chmod(stale.c_str(), 0555);

    const Outcome rerun = move_as_nobody(plan_out(buffer, "data", out));
    ASSERT_EQ(rerun.code, 0) << rerun.message;
    EXPECT_TRUE(rerun.warnings.empty()) << rerun.warnings[0];
    EXPECT_NE(access(stale.c_str(), F_OK), 0) << "stale temporary directory left";
    EXPECT_EQ(read_file(tmp / "victim/keep"), "keep");
    for (const std::string& dir : kept)
        EXPECT_EQ(access(dir.c_str(), F_OK), 0) << dir;
    EXPECT_EQ(read_file(out + "/sub/b"), "b");
}

#ifdef BBKIT_FAULT_INJECTION
std::vector<std::string> temporaries_in(const std::string& dir) {
    std::vector<std::string> found;
    for (const std::string& name : list_dir(dir))
        if (name.find(".bbkit-") != std::string::npos)
            found.push_back(name);
    return found;
}

// Killed while it writes into the temporary directory, or with the tree complete and synced
// just before its rename: no final name exists, only one temporary directory (the second run
// removed the first's), and the rerun completes and leaves none.
TEST(mover, stage_out_killed_before_its_directory_rename_shows_no_final_name) {
    TempDir tmp;
    const std::string buffer = stage_in_tricky_tree(tmp);
    const MovePlan plan = plan_out(buffer, "data", tmp / "out/result");
    for (const std::string fault : {"mover.file-copied:5", "mover.before-dir-renames"}) {
        const Outcome killed = move_as_nobody(plan, fault.c_str());
        EXPECT_EQ(killed.code, 128) << fault << ": " << killed.message;
        EXPECT_NE(access((tmp / "out/result").c_str(), F_OK), 0) << fault;
        const std::vector<std::string> left = list_dir(tmp / "out");
        ASSERT_EQ(left.size(), 1u) << fault;
        EXPECT_EQ(left[0].rfind(".result.bbkit-", 0), 0u) << left[0];
        if (fault == "mover.before-dir-renames")  // complete, final modes and times included
            expect_same_tree(tmp / "src", tmp / "out/" + left[0], nobody);
    }
    const Outcome rerun = move_as_nobody(plan);
    ASSERT_EQ(rerun.code, 0) << rerun.message;
    expect_same_tree(tmp / "src", tmp / "out/result", nobody);
    EXPECT_EQ(list_dir(tmp / "out"), std::vector<std::string>{"result"});
}

// Into an existing destination: files go there under temporaries renamed one by one, a new
// subdirectory is built aside and renamed whole. Killed between the two, the files are in
// place and the subdirectory is not; the rerun skips the files and rebuilds the subdirectory.
TEST(mover, stage_out_into_an_existing_directory_resumes_after_a_kill) {
    TempDir tmp;
    const std::string buffer = make_buffer(tmp, "buffer");
    for (const std::string dir : {"data", "data/kept", "data/new", "data/new/deeper"})
        mkdir((buffer + "/" + dir).c_str(), 0755);
    for (const std::string file : {"f1", "f2", "kept/k", "new/g1", "new/g2", "new/deeper/h"})
        write_file(buffer + "/data/" + file, "new " + file);
    for_each_entry(buffer, [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    const std::string out = tmp / "out/result";
    mkdir((tmp / "out").c_str(), 0755);
    mkdir(out.c_str(), 0755);
    mkdir((out + "/kept").c_str(), 0755);
    write_file(out + "/f1", "old");
    for_each_entry(tmp / "out", [](const std::string& p) { lchown(p.c_str(), nobody, nogroup); });
    lchown((tmp / "out").c_str(), nobody, nogroup);

    const MovePlan plan = plan_out(buffer, "data", out);
    EXPECT_EQ(move_as_nobody(plan, "mover.before-dir-renames").code, 128);
    EXPECT_EQ(read_file(out + "/f1"), "new f1");
    EXPECT_EQ(read_file(out + "/kept/k"), "new kept/k");
    EXPECT_NE(access((out + "/new").c_str(), F_OK), 0);
    const std::vector<std::string> temps = temporaries_in(out);
    ASSERT_EQ(temps.size(), 1u);
    EXPECT_EQ(temps[0].rfind(".new.bbkit-", 0), 0u) << temps[0];

    const Outcome rerun = move_as_nobody(plan);
    ASSERT_EQ(rerun.code, 0) << rerun.message;
    EXPECT_EQ(rerun.skipped, 3u);  // f1, f2, kept/k
    EXPECT_EQ(rerun.files, 3u);    // new/g1, new/g2, new/deeper/h
    expect_same_tree(buffer + "/data", out, nobody);
    EXPECT_FALSE(has_temporaries(tmp / "out"));
}
#endif

TEST(mover, progress_reports_totals_and_ends_complete) {
    TempDir tmp;
    make_tricky_tree(tmp / "src");
    const std::string buffer = make_buffer(tmp, "buffer");
    std::vector<MoveProgress> seen;
    run_move(plan_in(buffer, tmp / "src", "data"),
             [&](const MoveProgress& p) { seen.push_back(p); });
    ASSERT_FALSE(seen.empty());
    EXPECT_EQ(seen.front().files_total, seen.back().files_total);
    EXPECT_EQ(seen.back().files_done, seen.back().files_total);
    EXPECT_EQ(seen.back().bytes_done, seen.back().bytes_total);
    EXPECT_GT(seen.back().bytes_total, 10u << 20);
}

}  // namespace
}  // namespace bbkit
