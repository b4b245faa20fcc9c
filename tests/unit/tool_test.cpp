#include "bbkit/tool.hpp"

#include <gtest/gtest.h>

#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bbkit/error.hpp"

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
