#include "bbkit/sources.hpp"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <utility>

#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"
#include "code_of.hpp"

namespace fs = std::filesystem;
using bbkit::code_of;
using bbkit::Error;
using bbkit::ExitCode;
using bbkit::StageDirective;
using bbkit::StageType;

namespace {

class Sources : public ::testing::Test {
  protected:
    void SetUp() override {
        char tmpl[] = "/tmp/bbkit-sources.XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir = tmpl;
    }
    void TearDown() override { fs::remove_all(dir); }

    std::string write(const std::string& name, const std::string& data) {
        const fs::path path = fs::path(dir) / name;
        fs::create_directories(path.parent_path());
        std::ofstream(path, std::ios::binary) << data;
        return path.string();
    }

    static StageDirective stage(StageType type, const std::string& source,
                                const std::string& dest) {
        StageDirective s;
        s.type = type;
        s.source = source;
        s.destination = dest;
        s.where.line = 7;
        return s;
    }

    // `levels` nested directories named `name` under dir/deep, each holding a 1-byte file.
    // Made relative to the open parent: the whole path may be longer than PATH_MAX.
    std::string make_deep_tree(int levels, const std::string& name) {
        bbkit::Fd parent(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        std::string next = "deep";
        for (int i = 0; i < levels; ++i) {
            if (mkdirat(parent.get(), next.c_str(), 0755) != 0)
                return "";
            bbkit::Fd child(openat(parent.get(), next.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
            bbkit::Fd file(openat(child.get(), "f", O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
            if (!child || !file || ::write(file.get(), "x", 1) != 1)
                return "";
            parent = std::move(child);
            next = name;
        }
        return dir + "/deep";
    }

    // Before TearDown: std::filesystem walks full paths, which a deep tree makes too long.
    void remove_deep_tree() {
        const bbkit::Fd top(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        EXPECT_EQ(bbkit::remove_tree_beneath(top.get(), "deep"), 0);
    }

    std::string dir;
};

// The exit code and message of `body` run in a child, which may change its identity or its
// limits for good (gtest assertions do not cross the fork).
std::pair<ExitCode, std::string> in_child(const std::function<void()>& body) {
    int fds[2];
    if (pipe(fds) != 0)
        return {ExitCode::software, "pipe"};
    const pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        std::string message;
        const ExitCode code = code_of(body, &message);
        (void)!write(fds[1], message.data(), message.size());
        _exit(static_cast<int>(code));
    }
    close(fds[1]);
    std::string message;
    char buf[4096];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;)
        message.append(buf, static_cast<std::size_t>(n));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    return {static_cast<ExitCode>(code), message};
}

void become_nobody_if_root() {
    if (geteuid() != 0)
        return;
    if (setgroups(0, nullptr) != 0 || setresgid(65534, 65534, 65534) != 0 ||
        setresuid(65534, 65534, 65534) != 0)
        throw Error(ExitCode::software, "cannot become nobody");
}

void limit_descriptors(rlim_t soft, rlim_t hard) {
    const rlimit limit{soft, hard};
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0)
        throw Error(ExitCode::software, "cannot set RLIMIT_NOFILE");
}

}  // namespace

TEST_F(Sources, sums_files_and_trees_without_following_symlinks) {
    const std::string a = write("a", std::string(100, 'x'));
    write("tree/b", std::string(20, 'y'));
    write("tree/sub/c", std::string(3, 'z'));
    fs::create_symlink("/usr", fs::path(dir) / "tree" / "link");  // would be huge if followed
    const auto totals = bbkit::measure_stage_in(
        {stage(StageType::file, a, "a"), stage(StageType::directory, dir + "/tree", "t")},
        std::nullopt);
    EXPECT_EQ(totals.bytes, 123u);
    EXPECT_EQ(totals.entries.size(), 2u);
}

TEST_F(Sources, missing_source_is_no_input_naming_path_and_line) {
    try {
        bbkit::measure_stage_in({stage(StageType::file, dir + "/nope", "x")}, std::nullopt);
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ExitCode::no_input);
        EXPECT_NE(std::string(e.what()).find(dir + "/nope"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("line 7"), std::string::npos);
    }
}

TEST_F(Sources, file_and_directory_types_must_match) {
    write("d/f", "1");
    EXPECT_EQ(code_of([&] {
                  bbkit::measure_stage_in({stage(StageType::file, dir + "/d", "x")}, std::nullopt);
              }),
              ExitCode::data);
    EXPECT_EQ(code_of([&] {
                  bbkit::measure_stage_in({stage(StageType::directory, dir + "/d/f", "x")},
                                          std::nullopt);
              }),
              ExitCode::data);
}

TEST_F(Sources, list_files_expand_under_the_directive_destination) {
    const std::string one = write("one", "1234");
    const std::string list =
        write("list", one + " in/one\n# comment\n\n\"" + one + "\" $BB_JOB_DIR/top\n");
    const auto entries = bbkit::read_stage_list(stage(StageType::list, list, "base"));
    ASSERT_EQ(entries.size(), 2u);
    EXPECT_EQ(entries[0].destination, "base/in/one");
    EXPECT_EQ(entries[1].destination, "top");
    const auto totals =
        bbkit::measure_stage_in({stage(StageType::list, list, "base")}, std::nullopt);
    EXPECT_EQ(totals.bytes, 8u);
}

TEST_F(Sources, list_lines_that_escape_or_are_malformed_are_refused) {
    const std::string one = write("one", "1");
    for (const std::string& line :
         {one + " ../up", one + " /etc/x", std::string("relative x"), one, one + " a b",
          one + " \"unterminated", dir + "/../" + one.substr(1) + " x"}) {
        const std::string list = write("bad", line + "\n");
        EXPECT_EQ(code_of([&] { bbkit::read_stage_list(stage(StageType::list, list, "d")); }),
                  ExitCode::data)
            << line;
    }
}

TEST_F(Sources, unresolved_lines_are_skipped_with_a_warning) {
    StageDirective s = stage(StageType::file, "/data/%j", "x");
    s.unresolved = true;
    const auto totals = bbkit::measure_stage_in({s}, std::nullopt);
    EXPECT_EQ(totals.bytes, 0u);
    ASSERT_EQ(totals.skipped.size(), 1u);
}

TEST(SourcesFit, refuses_more_than_the_buffer_holds) {
    EXPECT_NO_THROW(bbkit::require_fits(4096, 4096));
    try {
        bbkit::require_fits(4097, 4096);
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ExitCode::data);
        EXPECT_NE(std::string(e.what()).find("stage-in needs at least"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("(4097 bytes counted so far)"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("buffer holds 4KiB"), std::string::npos);
    }
}

TEST_F(Sources, a_source_over_the_capacity_stops_the_walk_before_the_next_line) {
    const std::string big = write("big", std::string(5000, 'x'));
    // Measured to the end, the missing second source would be the error (no_input).
    std::string message;
    EXPECT_EQ(code_of(
                  [&] {
                      bbkit::measure_stage_in({stage(StageType::file, big, "a"),
                                               stage(StageType::file, dir + "/missing", "b")},
                                              4096);
                  },
                  &message),
              ExitCode::data);
    EXPECT_NE(message.find("(5000 bytes counted so far)"), std::string::npos) << message;
}

TEST_F(Sources, a_tree_over_the_capacity_is_refused_after_counting_only_a_part) {
    for (int i = 0; i < 200; ++i)
        write("tree/d" + std::to_string(i) + "/f", std::string(1000, 'x'));
    std::string message;
    EXPECT_EQ(code_of(
                  [&] {
                      bbkit::measure_stage_in({stage(StageType::directory, dir + "/tree", "t")},
                                              2500);
                  },
                  &message),
              ExitCode::data);
    // Whatever the order of the walk, it stopped at the third file of 200.
    EXPECT_NE(message.find("stage-in needs at least 3KB (3000 bytes counted so far) but the "
                           "buffer holds 2500 (request a larger capacity)"),
              std::string::npos)
        << message;
}

TEST_F(Sources, a_wide_directory_is_measured_in_full) {
    // On tmpfs when there is one: removing 20,000 directories from a busy disk takes a minute.
    char tmpl[] = "/dev/shm/bbkit-sources.XXXXXX";
    const bool shm = mkdtemp(tmpl) != nullptr;
    const std::string wide = shm ? std::string(tmpl) : dir + "/wide";
    const std::unique_ptr<const char, void (*)(const char*)> removed(
        shm ? tmpl : nullptr, [](const char* path) { fs::remove_all(path); });
    ASSERT_TRUE(shm || mkdir(wide.c_str(), 0755) == 0);
    for (int i = 0; i < 20000; ++i)
        ASSERT_EQ(mkdir((wide + "/" + std::to_string(i)).c_str(), 0755), 0);
    std::ofstream(wide + "/7/f") << std::string(70, 'x');
    std::ofstream(wide + "/19999/f") << std::string(9, 'x');
    std::uint64_t last_files = 0, last_bytes = 0;
    const auto totals =
        bbkit::measure_stage_in({stage(StageType::directory, wide, "w")}, std::nullopt,
                                [&](std::uint64_t files, std::uint64_t bytes) {
                                    EXPECT_GE(files, last_files);
                                    EXPECT_GE(bytes, last_bytes);
                                    last_files = files;
                                    last_bytes = bytes;
                                });
    EXPECT_EQ(totals.files, 1u + 20000u + 2u);
    EXPECT_EQ(totals.bytes, 79u);
    EXPECT_LE(last_files, totals.files);
}

TEST_F(Sources, a_quick_measurement_reports_no_progress) {
    const std::string a = write("a", "1");
    int reports = 0;
    bbkit::measure_stage_in({stage(StageType::file, a, "a")}, 4096,
                            [&](std::uint64_t, std::uint64_t) { ++reports; });
    EXPECT_EQ(reports, 0);
}

TEST_F(Sources, a_deep_tree_longer_than_path_max_is_measured) {
    const std::string deep = make_deep_tree(300, std::string(30, 'n'));  // 9,300-byte path
    ASSERT_FALSE(deep.empty());
    const auto totals =
        bbkit::measure_stage_in({stage(StageType::directory, deep, "d")}, std::nullopt);
    EXPECT_EQ(totals.files, 600u);  // 300 directories, 300 files
    EXPECT_EQ(totals.bytes, 300u);
    remove_deep_tree();
}

TEST_F(Sources, a_deep_tree_raises_the_soft_descriptor_limit) {
    const std::string deep = make_deep_tree(300, "d");
    ASSERT_FALSE(deep.empty());
    rlimit limit{};
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
    if (limit.rlim_max < 400)
        GTEST_SKIP() << "hard RLIMIT_NOFILE below 400";
    const auto [code, message] = in_child([&] {
        limit_descriptors(64, limit.rlim_max);
        const auto totals =
            bbkit::measure_stage_in({stage(StageType::directory, deep, "d")}, std::nullopt);
        if (totals.files != 600)
            throw Error(ExitCode::software, "counted " + std::to_string(totals.files));
    });
    EXPECT_EQ(code, ExitCode::ok) << message;
    remove_deep_tree();
}

TEST_F(Sources, a_tree_deeper_than_the_descriptors_allow_is_refused_in_one_line) {
    const std::string deep = make_deep_tree(300, "d");
    ASSERT_FALSE(deep.empty());
    const auto [code, message] = in_child([&] {
        limit_descriptors(64, 64);
        bbkit::measure_stage_in({stage(StageType::directory, deep, "d")}, std::nullopt);
    });
    EXPECT_EQ(code, ExitCode::io) << message;
    EXPECT_NE(message.find("levels deep (raise the open-file limit, ulimit -n): Too many open "
                           "files"),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos);
    remove_deep_tree();
}

TEST_F(Sources, an_unreadable_subdirectory_is_refused_with_no_perm_naming_its_path) {
    ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
    write("tree/open/f", "1");
    write("tree/closed/f", "1");
    ASSERT_EQ(chmod((dir + "/tree/closed").c_str(), geteuid() == 0 ? 0700 : 0), 0);
    const auto [code, message] = in_child([&] {
        become_nobody_if_root();
        bbkit::measure_stage_in({stage(StageType::directory, dir + "/tree", "t")}, std::nullopt);
    });
    chmod((dir + "/tree/closed").c_str(), 0755);
    EXPECT_EQ(code, ExitCode::no_perm) << message;
    EXPECT_NE(message.find("'" + dir + "/tree/closed': cannot read"), std::string::npos) << message;
}

TEST_F(Sources, symlinks_are_counted_never_followed) {
    write("tree/f", std::string(5, 'x'));
    write("elsewhere/big", std::string(100000, 'x'));
    fs::create_symlink(dir + "/elsewhere", fs::path(dir) / "tree" / "to-dir");
    fs::create_symlink(".", fs::path(dir) / "tree" / "loop");
    fs::create_symlink(dir + "/elsewhere/big", fs::path(dir) / "tree" / "to-file");
    const auto totals =
        bbkit::measure_stage_in({stage(StageType::directory, dir + "/tree", "t")}, 4096);
    EXPECT_EQ(totals.files, 5u);  // the tree, f and three links
    EXPECT_EQ(totals.bytes, 5u);
}

TEST_F(Sources, only_lines_into_the_job_buffer_count_against_its_capacity) {
    const std::string big = write("big", std::string(3000, 'x'));
    StageDirective to_persistent = stage(StageType::file, big, "p");
    to_persistent.buffer = "shared";
    EXPECT_EQ(bbkit::measure_stage_in({to_persistent}, 1024).bytes, 3000u);
    EXPECT_EQ(code_of([&] { bbkit::measure_stage_in({stage(StageType::file, big, "j")}, 1024); }),
              ExitCode::data);
    EXPECT_EQ(bbkit::measure_stage_in({stage(StageType::file, big, "j")}, std::nullopt).bytes,
              3000u);
}
