// printable: what users chose, made safe to put on one line of a message, a log or a reason.
#include "bbkit/error.hpp"

#include <gtest/gtest.h>

using bbkit::printable;

TEST(Printable, leaves_ordinary_text_and_utf8_alone) {
    EXPECT_EQ(printable("/home/alice/in put/données.h5"), "/home/alice/in put/données.h5");
    EXPECT_EQ(printable(""), "");
}

TEST(Printable, writes_every_control_character_as_an_escape) {
    EXPECT_EQ(printable("a\nbb-stage: forged"), "a\\x0abb-stage: forged");
    EXPECT_EQ(printable("\r\t\x1b[2J\x7f"), "\\x0d\\x09\\x1b[2J\\x7f");
    EXPECT_EQ(printable(std::string("nul\0here", 8)), "nul\\x00here");
}

TEST(Printable, never_leaves_a_line_break_whatever_the_bytes) {
    std::string all;
    for (int c = 0; c < 256; ++c)
        all += static_cast<char>(c);
    const std::string out = printable(all);
    EXPECT_EQ(out.find('\n'), std::string::npos);
    EXPECT_EQ(out.find('\r'), std::string::npos);
    EXPECT_EQ(out.find('\0'), std::string::npos);
}

TEST(ExitCodeFor, one_answer_for_each_errno_whoever_asks) {
    using bbkit::ExitCode;
    EXPECT_EQ(bbkit::exit_code_for(EACCES), ExitCode::no_perm);
    EXPECT_EQ(bbkit::exit_code_for(EPERM), ExitCode::no_perm);
    EXPECT_EQ(bbkit::exit_code_for(ENOENT), ExitCode::no_input);
    EXPECT_EQ(bbkit::exit_code_for(ENOTDIR), ExitCode::no_input);
    EXPECT_EQ(bbkit::exit_code_for(EIO), ExitCode::io);
    EXPECT_EQ(bbkit::exit_code_for(ENOSPC), ExitCode::io);
}

TEST(SystemError, names_what_failed_and_why_with_the_errno_code) {
    const bbkit::Error e = bbkit::system_error("cannot open /x", EACCES);
    EXPECT_EQ(e.code(), bbkit::ExitCode::no_perm);
    EXPECT_STREQ(e.what(), "cannot open /x: Permission denied");
}
