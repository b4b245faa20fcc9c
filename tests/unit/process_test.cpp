#include "bbkit/process.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "code_of.hpp"

using namespace bbkit;
using namespace std::chrono_literals;

namespace {

ProcessSpec shell(const std::string& script) {
    ProcessSpec spec;
    spec.path = "/bin/sh";
    spec.args = {"-c", script};
    return spec;
}

TEST(ProcessId, self_is_alive_and_a_reused_pid_is_not) {
    const ProcessId self = ProcessId::self();
    EXPECT_EQ(self.pid, getpid());
    EXPECT_NE(self.start_time, 0u);
    EXPECT_TRUE(self.alive());
    EXPECT_FALSE((ProcessId{self.pid, self.start_time + 1}).alive());
    EXPECT_FALSE((ProcessId{0, 0}).alive());
}

}  // namespace

TEST(Process, reports_exit_code_and_last_stderr_line) {
    const ProcessOutcome o =
        run_process(shell("echo first >&2; echo 'the real cause' >&2; exit 3"));
    EXPECT_EQ(o.exit_code, 3);
    EXPECT_FALSE(o.timed_out);
    EXPECT_EQ(o.last_stderr_line, "the real cause");
}

TEST(Process, feeds_stdin_and_reads_stdout_lines) {
    ProcessSpec spec = shell("cat; echo end");
    spec.stdin_data = "a\nb\n";
    std::vector<std::string> lines;
    spec.on_stdout_line = [&](const std::string& line) { lines.push_back(line); };
    EXPECT_EQ(run_process(spec).exit_code, 0);
    EXPECT_EQ(lines, (std::vector<std::string>{"a", "b", "end"}));
}

TEST(Process, clean_environment_holds_only_what_is_given) {
    ProcessSpec spec = shell("test -z \"$HOME\" && test \"$BBKIT_JOB_ID\" = 42");
    spec.env = {{"BBKIT_JOB_ID", "42"}};
    EXPECT_EQ(run_process(spec).exit_code, 0);
}

TEST(Process, timeout_terms_then_kills) {
    ProcessSpec spec = shell("trap '' TERM; sleep 30");
    spec.timeout = 2s;  // time for sh to set its trap even on a loaded machine
    spec.grace = 200ms;
    const auto start = std::chrono::steady_clock::now();
    const ProcessOutcome o = run_process(spec);
    EXPECT_TRUE(o.timed_out);
    EXPECT_EQ(o.signal, 9);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

// The child's last line can come after a line its caller takes seconds over (a mover's progress
// line is a state write on a busy disk; its summary follows): every line is handled, however
// long after the child's exit.
TEST(Process, every_line_is_handled_however_slow_the_caller) {
    ProcessSpec spec = shell("echo progress; echo summary; exit 0");
    std::vector<std::string> lines;
    spec.on_stdout_line = [&](const std::string& line) {
        if (lines.empty())
            std::this_thread::sleep_for(3500ms);  // past the silence after which pipes are left
        lines.push_back(line);
    };
    EXPECT_EQ(run_process(spec).exit_code, 0);
    EXPECT_EQ(lines, (std::vector<std::string>{"progress", "summary"}));
}

// ... and a grandchild that writes after a slow line still ends the wait once it falls silent.
TEST(Process, a_slow_caller_and_a_grandchild_holding_the_pipe_do_not_hang_us) {
    ProcessSpec spec = shell("echo one; (sleep 1; echo late; sleep 20) & exit 0");
    std::vector<std::string> lines;
    spec.on_stdout_line = [&](const std::string& line) {
        if (lines.empty())
            std::this_thread::sleep_for(2500ms);
        lines.push_back(line);
    };
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(run_process(spec).exit_code, 0);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 15s);
    EXPECT_EQ(lines, (std::vector<std::string>{"one", "late"}));
}

TEST(Process, a_grandchild_holding_the_pipes_does_not_hang_us) {
    const auto start = std::chrono::steady_clock::now();
    const ProcessOutcome o = run_process(shell("sleep 20 & exit 0"));
    EXPECT_EQ(o.exit_code, 0);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST(Process, a_missing_program_is_reported) {
    ProcessSpec spec;
    spec.path = "/nonexistent/hook";
    bool threw = false;
    int code = 0;
    try {
        code = run_process(spec).exit_code;
    } catch (const std::exception&) {
        threw = true;
    }
    EXPECT_TRUE(threw || code != 0);
}

// exec's errno gives the code, as any failed call's (bbkit(7), EXIT STATUS).
TEST(Process, a_program_that_cannot_be_started_fails_with_its_errnos_code) {
    char path[] = "/tmp/bbkit-process-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, "#!/bin/sh\n", 10), 10);
    close(fd);
    ASSERT_EQ(chmod(path, 0644), 0);  // no execute bit, which even root needs
    ProcessSpec spec;
    spec.path = path;
    std::string message;
    EXPECT_EQ(code_of([&] { run_process(spec); }, &message), ExitCode::no_perm);
    EXPECT_EQ(message, "cannot start " + std::string(path) + ": Permission denied");
    std::remove(path);
    EXPECT_EQ(code_of([&] { run_process(spec); }, &message), ExitCode::no_input);
    EXPECT_EQ(message, "cannot start " + std::string(path) + ": No such file or directory");
}
