// The edge every tool shares (bbkit(7), EXIT STATUS and SECURITY): run_tool's exit codes and
// one-line messages, the options a caller through sudo may not give, the configuration root
// trusts, and reading a job script within its limit with the caller's permissions. Real files
// under a root-owned temporary directory; the caller as sudo describes it (SUDO_UID).
#include "bbkit/tool.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bbkit/error.hpp"
#include "code_of.hpp"

namespace fs = std::filesystem;
using namespace bbkit;

namespace {

constexpr uid_t nobody = 65534;

class ToolTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root to own files as others";
        clear_environment();
        char tmpl[] = "/tmp/bbkit-tool.XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        chmod(dir_.c_str(), 0755);
        config_path_ = dir_ + "/bbkit.toml";
        std::ofstream(config_path_) << "state_dir = \"" << dir_ << "/state\"\n"
                                    << "[[pool]]\nname = \"nvme\"\npath = \"" << dir_
                                    << "/nvme\"\ncapacity = \"1GiB\"\ngranularity = \"1MiB\"\n";
        chmod(config_path_.c_str(), 0644);
    }
    void TearDown() override {
        clear_environment();
        if (!dir_.empty())
            fs::remove_all(dir_);
    }

    static void clear_environment() {
        for (const char* name :
             {"SUDO_UID", "SUDO_GID", "SUDO_USER", "BBKIT_CONFIG", "BBKIT_STATE_DIR"})
            unsetenv(name);
    }

    struct Run {
        int status = -1;
        std::string out;
        std::string err;
    };
    // run_tool("bb-test", ...) on `args` with the common options and a --job option, running
    // `body`; what it printed on stdout and stderr.
    Run run(std::vector<std::string> args, const std::function<int()>& body,
            std::optional<std::string>* job = nullptr) {
        CLI::App app("test tool", "bb-test");
        options_ = CommonOptions{};  // its options point into this run's app
        add_common_options(app, options_, true);
        std::optional<std::string> unused;
        app.add_option("--job", job ? *job : unused)->check(job_id_validator());
        args.insert(args.begin(), "bb-test");
        std::vector<char*> argv;
        for (std::string& a : args)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        ::testing::internal::CaptureStdout();
        ::testing::internal::CaptureStderr();
        Run r;
        r.status =
            run_tool("bb-test", app, static_cast<int>(args.size()), argv.data(), options_, body);
        r.out = ::testing::internal::GetCapturedStdout();
        r.err = ::testing::internal::GetCapturedStderr();
        return r;
    }

    // run_tool over `table` as bb-pool's and bb-stage's mains wire theirs: add_subcommands,
    // then run_subcommand as the body.
    Run run_table(std::vector<std::string> args, const std::vector<Subcommand>& table) {
        CLI::App app("test tool", "bb-test");
        app.require_subcommand(1);
        options_ = CommonOptions{};
        add_common_options(app, options_, true);
        args.insert(args.begin(), "bb-test");
        std::vector<char*> argv;
        for (std::string& a : args)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        const int argc = static_cast<int>(args.size());
        add_subcommands(app, argc, argv.data(), table);
        ::testing::internal::CaptureStdout();
        ::testing::internal::CaptureStderr();
        Run r;
        r.status = run_tool("bb-test", app, argc, argv.data(), options_,
                            [&] { return run_subcommand("bb-test", app, options_, table); });
        r.out = ::testing::internal::GetCapturedStdout();
        r.err = ::testing::internal::GetCapturedStderr();
        return r;
    }

    std::string file(const std::string& name, const std::string& text, uid_t uid = 0,
                     mode_t mode = 0644) {
        const std::string path = dir_ + "/" + name;
        std::ofstream(path) << text;
        EXPECT_EQ(chown(path.c_str(), uid, uid), 0);
        EXPECT_EQ(chmod(path.c_str(), mode), 0);
        return path;
    }

    std::string dir_;
    std::string config_path_;
    CommonOptions options_;
};

}  // namespace

TEST_F(ToolTest, the_bodys_status_is_the_tools_and_an_error_gives_its_code_and_one_line) {
    EXPECT_EQ(run({}, [] { return 3; }).status, 3);
    const Run r = run({}, []() -> int { throw Error(ExitCode::no_input, "no such buffer"); });
    EXPECT_EQ(r.status, 66);
    EXPECT_EQ(r.err, "bb-test: no such buffer\n");
    const Run multi =
        run({}, []() -> int { throw Error(ExitCode::data, "bad\nline\rfrom a user"); });
    EXPECT_EQ(multi.status, 65);
    EXPECT_EQ(multi.err.find('\n'), multi.err.size() - 1) << multi.err;
    EXPECT_EQ(multi.err.find('\r'), std::string::npos) << multi.err;
}

TEST_F(ToolTest, anything_else_thrown_is_an_internal_error) {
    const Run r = run({}, []() -> int { throw std::runtime_error("surprise"); });
    EXPECT_EQ(r.status, 70);
    EXPECT_EQ(r.err, "bb-test: internal error: surprise\n");
}

TEST_F(ToolTest, a_bad_command_line_is_a_usage_error_and_runs_nothing) {
    bool ran = false;
    const Run r = run({"--no-such-option"}, [&] {
        ran = true;
        return 0;
    });
    EXPECT_EQ(r.status, 64);
    EXPECT_FALSE(ran);
    EXPECT_EQ(r.err.rfind("bb-test: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("(see bb-test --help)"), std::string::npos) << r.err;
}

TEST_F(ToolTest, version_and_help_exit_0_without_the_body) {
    bool ran = false;
    const auto body = [&] {
        ran = true;
        return 9;
    };
    const Run version = run({"--version"}, body);
    EXPECT_EQ(version.status, 0);
    EXPECT_EQ(version.out, std::string("bbkit ") + BBKIT_VERSION + "\n");
    const Run help = run({"--help"}, body);
    EXPECT_EQ(help.status, 0);
    for (const char* option : {"--config", "--state-dir", "--verbose", "--quiet", "--version"})
        EXPECT_NE(help.out.find(option), std::string::npos) << option;
    EXPECT_FALSE(ran);
}

TEST_F(ToolTest, a_huge_message_keeps_its_start_and_end_in_one_bounded_line) {
    const std::string token(100000, 'a');
    const Run r =
        run({}, [&]() -> int { throw Error(ExitCode::data, "bad '" + token + "': fix it"); });
    EXPECT_EQ(r.status, 65);
    EXPECT_LT(r.err.size(), 1200u);
    EXPECT_EQ(r.err.rfind("bb-test: bad 'aaa", 0), 0u);
    EXPECT_NE(r.err.find(" bytes ...]"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("': fix it\n"), std::string::npos);
}

TEST_F(ToolTest, job_ids_are_digits_only_within_range) {
    std::optional<std::string> job;
    EXPECT_EQ(run(
                  {"--job", "42"}, [] { return 0; }, &job)
                  .status,
              0);
    EXPECT_EQ(job, std::string("42"));
    for (const char* bad : {" 7", "7x", "-1", "99999999999999999999", ""})
        EXPECT_EQ(run({"--job", bad}, [] { return 0; }).status, 64) << '"' << bad << '"';
}

TEST_F(ToolTest, a_word_is_on_the_command_line_only_as_a_whole_argument_after_the_program) {
    char prog[] = "reconcile", a[] = "pool", b[] = "--reconcile", c[] = "reconciled";
    char* argv[] = {prog, a, b, c, nullptr};
    EXPECT_FALSE(on_command_line(4, argv, "reconcile"));
    EXPECT_TRUE(on_command_line(4, argv, "pool"));
    EXPECT_TRUE(on_command_line(4, argv, "--reconcile"));
    EXPECT_FALSE(on_command_line(1, argv, "pool"));
}

// A tool's subcommands as a table (bb-pool's, bb-stage's): built in the table's order, the order
// --help lists them, each with its options only when its name is on the command line.
TEST(Subcommands, are_built_in_order_each_with_its_options_only_when_named) {
    bool flag = false;
    bool other = false;
    std::vector<Subcommand> table{{"one", "The first"}, {"two", "The second"}};
    table[0].add_options = [&](CLI::App& sub) { sub.add_flag("--flag", flag, "A flag"); };
    table[1].add_options = [&](CLI::App& sub) { sub.add_flag("--other", other, "Another"); };
    char prog[] = "bb-test", one[] = "one", option[] = "--flag";
    char* argv[] = {prog, one, option, nullptr};
    CLI::App app("test tool", "bb-test");
    add_subcommands(app, 3, argv, table);
    EXPECT_EQ(app.get_subcommand(0)->get_name(), "one");
    EXPECT_EQ(app.get_subcommand(0)->get_description(), "The first");
    EXPECT_EQ(app.get_subcommand(1)->get_name(), "two");
    EXPECT_EQ(app.get_subcommand(1)->get_description(), "The second");
    EXPECT_NE(app.get_subcommand("one")->get_option_no_throw("--flag"), nullptr);
    EXPECT_EQ(app.get_subcommand("two")->get_option_no_throw("--other"), nullptr);
    app.parse(3, argv);
    EXPECT_TRUE(flag);
    EXPECT_TRUE(app.get_subcommand("one")->parsed());
}

// The one selected runs with the configuration and the state opened as its row asks: a reading
// one read-only (it creates no state directory, and may not write), `who` naming the tool and the
// subcommand, its status the tool's.
TEST_F(ToolTest, the_selected_subcommand_runs_on_the_state_as_its_row_asks) {
    bool repair = false;
    std::string who;
    std::vector<Subcommand> table{{"init", "Writes"}, {"check", "Reads, writes with --repair"}};
    table[1].add_options = [&](CLI::App& sub) { sub.add_flag("--repair", repair, "Repair"); };
    table[1].reads = [&] { return !repair; };
    for (Subcommand& row : table)
        row.run = [&who](StateStore& store, const Config&, const std::string& name) {
            who = name;
            return static_cast<int>(code_of([&] { WriteTransaction txn(store, name); }));
        };
    const Run before = run_table({"--config", config_path_, "check"}, table);
    EXPECT_EQ(before.status, 66) << before.err;  // no state directory yet: a reader makes none
    EXPECT_FALSE(fs::exists(dir_ + "/state"));
    EXPECT_EQ(who, "");

    const Run init = run_table({"--config", config_path_, "init"}, table);
    EXPECT_EQ(init.status, 0) << init.err;  // it may write
    EXPECT_EQ(who, "bb-test init");
    EXPECT_TRUE(fs::is_directory(dir_ + "/state"));

    const Run check = run_table({"--config", config_path_, "check"}, table);
    EXPECT_EQ(check.status, static_cast<int>(ExitCode::software)) << check.err;  // read-only
    EXPECT_EQ(who, "bb-test check");
    EXPECT_EQ(run_table({"--config", config_path_, "check", "--repair"}, table).status, 0);
}

TEST_F(ToolTest, a_caller_through_sudo_may_not_name_a_file_root_reads) {
    setenv("SUDO_UID", "65534", 1);
    setenv("SUDO_GID", "65534", 1);
    bool ran = false;
    const auto body = [&] {
        ran = true;
        return 0;
    };
    for (const char* option : {"--config", "--state-dir"}) {
        const Run r = run({option, dir_ + "/x"}, body);
        EXPECT_EQ(r.status, 77) << option;
        EXPECT_EQ(r.err.rfind(std::string("bb-test: refusing ") + option, 0), 0u) << r.err;
    }
    EXPECT_FALSE(ran);
    EXPECT_EQ(run({"--verbose"}, body).status, 0);
    unsetenv("SUDO_UID");
    EXPECT_EQ(run({"--config", dir_ + "/x"}, [] { return 0; }).status, 0);  // root's own choice
}

TEST_F(ToolTest, a_caller_through_sudo_loses_the_variables_that_name_files) {
    setenv("SUDO_UID", "65534", 1);
    setenv("BBKIT_CONFIG", "/tmp/evil.toml", 1);
    setenv("BBKIT_STATE_DIR", "/tmp/evil", 1);
    const Run r = run({}, [] {
        return std::getenv("BBKIT_CONFIG") == nullptr && std::getenv("BBKIT_STATE_DIR") == nullptr
                   ? 0
                   : 1;
    });
    EXPECT_EQ(r.status, 0);
}

TEST_F(ToolTest, the_configuration_comes_from_the_option_the_variable_and_the_state_dir_after) {
    options_.config_path = config_path_;
    EXPECT_EQ(load_effective_config(options_).state_dir, dir_ + "/state");
    options_.state_dir = "/elsewhere";
    EXPECT_EQ(load_effective_config(options_).state_dir, "/elsewhere");
    options_ = {};
    setenv("BBKIT_CONFIG", config_path_.c_str(), 1);
    setenv("BBKIT_STATE_DIR", "/from/env", 1);
    const Config config = load_effective_config(options_);
    EXPECT_EQ(config.state_dir, "/from/env");
    ASSERT_EQ(config.pools.size(), 1u);
    EXPECT_EQ(config.pools[0].name, "nvme");
}

TEST_F(ToolTest, a_relative_state_directory_is_a_usage_error) {
    options_.config_path = config_path_;
    options_.state_dir = "state";
    std::string message;
    EXPECT_EQ(code_of([&] { load_effective_config(options_); }, &message), ExitCode::usage);
    EXPECT_EQ(message, "state directory 'state' is not an absolute path");
}

TEST_F(ToolTest, a_configuration_others_can_change_or_that_is_missing_or_malformed_is_78) {
    options_.config_path = config_path_;
    chmod(config_path_.c_str(), 0666);
    std::string message;
    EXPECT_EQ(code_of([&] { load_effective_config(options_); }, &message), ExitCode::config);
    EXPECT_NE(message.find("is not trusted"), std::string::npos) << message;
    options_.config_path = dir_ + "/missing.toml";
    EXPECT_EQ(code_of([&] { load_effective_config(options_); }), ExitCode::config);
    options_.config_path = file("broken.toml", "state_dir = [\n");
    EXPECT_EQ(code_of([&] { load_effective_config(options_); }), ExitCode::config);
}

TEST_F(ToolTest, a_script_is_read_whole_within_the_limit) {
    const std::string path = file("job.sh", "#!/bin/bash\n#BB_LUA capacity=1G\n");
    EXPECT_EQ(read_script_file(path, 64), "#!/bin/bash\n#BB_LUA capacity=1G\n");
    std::string message;
    EXPECT_EQ(code_of([&] { read_script_file(path, 10); }, &message), ExitCode::data);
    EXPECT_EQ(message, "cannot read job script '" + path +
                           "': 32 bytes, over the limit of 10 bytes ([limits] script_size in "
                           "bbkit.toml: shorten the script or raise the limit)");
}

TEST_F(ToolTest, a_pipe_past_the_limit_is_refused_without_reading_it_all) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const std::string chunk(4096, 'x');
    for (int i = 0; i < 8; ++i)  // 32 KiB, within the pipe's buffer
        ASSERT_EQ(write(fds[1], chunk.data(), chunk.size()), 4096);
    // The write end stays open (opening a pipe's read end waits for a writer): the refusal
    // cannot come from the end of the input.
    const std::string path = "/proc/self/fd/" + std::to_string(fds[0]);
    std::string message;
    EXPECT_EQ(code_of([&] { read_script_file(path, 1000, "directives file"); }, &message),
              ExitCode::data);
    EXPECT_NE(message.find("directives file '" + path + "': more than 1000 bytes"),
              std::string::npos)
        << message;
    close(fds[0]);
    close(fds[1]);
}

TEST_F(ToolTest, standard_input_is_read_when_the_path_is_a_dash) {
    const std::string path = file("stdin.sh", "#BB_LUA capacity=1G\n");
    const int saved = dup(STDIN_FILENO);
    const int fd = open(path.c_str(), O_RDONLY);
    dup2(fd, STDIN_FILENO);
    close(fd);
    std::string text, message;
    const ExitCode code = code_of([&] { text = read_script_file("-", 100); });
    lseek(STDIN_FILENO, 0, SEEK_SET);
    const ExitCode over = code_of([&] { read_script_file("-", 5); }, &message);
    dup2(saved, STDIN_FILENO);
    close(saved);
    EXPECT_EQ(code, ExitCode::ok);
    EXPECT_EQ(text, "#BB_LUA capacity=1G\n");
    EXPECT_EQ(over, ExitCode::data);
    EXPECT_EQ(message.rfind("cannot read job script from standard input: ", 0), 0u) << message;
}

TEST_F(ToolTest, a_script_is_read_with_the_callers_permissions) {
    const std::string roots = file("roots.sh", "secret\n", 0, 0600);
    const std::string theirs = file("theirs.sh", "#BB_LUA\n", nobody, 0400);
    EXPECT_EQ(read_script_file(roots, 100), "secret\n");  // root for itself
    setenv("SUDO_UID", "65534", 1);
    setenv("SUDO_GID", "65534", 1);
    std::string message;
    EXPECT_EQ(code_of([&] { read_script_file(roots, 100); }, &message), ExitCode::no_perm);
    EXPECT_EQ(message, "cannot read '" + roots + "': Permission denied");
    EXPECT_EQ(read_script_file(theirs, 100), "#BB_LUA\n");
    EXPECT_EQ(code_of([&] { read_script_file(dir_ + "/missing.sh", 100); }), ExitCode::no_input);
    // A symlink the caller planted to root's file is opened as the caller: still refused.
    fs::create_symlink(roots, dir_ + "/link.sh");
    EXPECT_EQ(code_of([&] { read_script_file(dir_ + "/link.sh", 100); }), ExitCode::no_perm);
}

// ---- run_tool's error report (bb-mover's report line) ----------------------------------------

namespace bbkit {
namespace {

// run_tool's outcome: its exit status, what it wrote on stderr, and what `report` was told.
struct Outcome {
    int status = -1;
    std::string stderr_text;
    std::vector<std::pair<int, std::string>> reported;
};

Outcome run(std::vector<std::string> args, const std::function<int()>& body,
            bool with_report = true) {
    CLI::App app{"bb-test"};
    CommonOptions options;
    std::vector<char*> argv;
    for (std::string& a : args)
        argv.push_back(a.data());
    Outcome outcome;
    std::ostringstream captured;
    std::streambuf* const saved = std::cerr.rdbuf(captured.rdbuf());
    ErrorReport report;
    if (with_report)
        report = [&](int status, const std::string& message) {
            outcome.reported.emplace_back(status, message);
        };
    outcome.status =
        run_tool("bb-test", app, static_cast<int>(argv.size()), argv.data(), options, body, report);
    std::cerr.rdbuf(saved);
    outcome.stderr_text = captured.str();
    return outcome;
}

TEST(RunTool, ReturnsTheBodysStatusAndReportsNothing) {
    const Outcome o = run({"bb-test"}, [] { return 0; });
    EXPECT_EQ(o.status, 0);
    EXPECT_EQ(o.stderr_text, "");
    EXPECT_TRUE(o.reported.empty());
}

TEST(RunTool, AnErrorExitsWithItsCodeAndIsReportedWithoutThePrefix) {
    const Outcome o = run({"bb-test"}, []() -> int {
        throw Error(ExitCode::io, "cannot write 'f': no space left on device");
    });
    EXPECT_EQ(o.status, 74);  // Error's code: system_error maps ENOSPC to 74 (bbkit(7))
    EXPECT_EQ(o.stderr_text, "bb-test: cannot write 'f': no space left on device\n");
    ASSERT_EQ(o.reported.size(), 1u);
    EXPECT_EQ(o.reported[0].first, 74);
    EXPECT_EQ(o.reported[0].second, "cannot write 'f': no space left on device");
}

TEST(RunTool, AnyOtherExceptionIsAnInternalError70) {
    const Outcome o = run({"bb-test"}, []() -> int { throw std::runtime_error("boom"); });
    EXPECT_EQ(o.status, 70);
    EXPECT_EQ(o.stderr_text, "bb-test: internal error: boom\n");
    ASSERT_EQ(o.reported.size(), 1u);
    EXPECT_EQ(o.reported[0], std::make_pair(70, std::string("internal error: boom")));
}

TEST(RunTool, AUsageErrorIs64NamesHelpAndNeverRunsTheBody) {
    bool ran = false;
    const Outcome o = run({"bb-test", "--no-such-option"}, [&] {
        ran = true;
        return 0;
    });
    EXPECT_FALSE(ran);
    EXPECT_EQ(o.status, 64);
    EXPECT_NE(o.stderr_text.find("--no-such-option"), std::string::npos);
    EXPECT_NE(o.stderr_text.find(" (see bb-test --help)\n"), std::string::npos);
    ASSERT_EQ(o.reported.size(), 1u);
    EXPECT_EQ(o.reported[0].first, 64);
    EXPECT_EQ("bb-test: " + o.reported[0].second + "\n", o.stderr_text);
}

TEST(RunTool, TheReportHasTheWholeMessageWhileStderrKeepsOneShortLine) {
    const std::string long_name(5000, 'x');
    const Outcome o =
        run({"bb-test"}, [&]() -> int { throw Error(ExitCode::data, "bad line\n" + long_name); });
    EXPECT_EQ(o.status, 65);
    ASSERT_EQ(o.reported.size(), 1u);
    EXPECT_EQ(o.reported[0].second, "bad line\n" + long_name);  // the reader quotes it
    EXPECT_LT(o.stderr_text.size(), 1200u);
    EXPECT_EQ(o.stderr_text.find('\n'), o.stderr_text.size() - 1);
    EXPECT_NE(o.stderr_text.find(" bytes ...]"), std::string::npos);
}

TEST(RunTool, WithoutAReportOnlyStderrIsWritten) {
    const Outcome o = run(
        {"bb-test"}, []() -> int { throw Error(ExitCode::no_input, "no such pool 'p'"); }, false);
    EXPECT_EQ(o.status, 66);
    EXPECT_EQ(o.stderr_text, "bb-test: no such pool 'p'\n");
    EXPECT_TRUE(o.reported.empty());
}

}  // namespace
}  // namespace bbkit
