// printable: what users chose, made safe to put on one line of a message, a log or a reason;
// and the one errno rule with the wordings a failed system call reaches the user in.
#include "bbkit/error.hpp"

#include <gtest/gtest.h>

#include <cerrno>

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

TEST(SystemError, a_hint_ends_the_message) {
    const bbkit::Error e =
        bbkit::system_error("cannot write /x", ENOSPC, " (check free space and permissions)");
    EXPECT_EQ(e.code(), bbkit::ExitCode::io);
    EXPECT_STREQ(e.what(),
                 "cannot write /x: No space left on device (check free space and permissions)");
}

TEST(ConfigurationError, words_it_as_system_error_and_is_78_whatever_the_errno) {
    for (const int err : {EACCES, EPERM, ENOENT, ENOTDIR, EIO}) {
        const bbkit::Error e = bbkit::configuration_error("cannot open /s/lock", err, " (hint)");
        EXPECT_EQ(e.code(), bbkit::ExitCode::config) << err;
        EXPECT_STREQ(e.what(), bbkit::system_error("cannot open /s/lock", err, " (hint)").what());
    }
}

TEST(MoverError, says_cannot_and_a_lower_case_reason_with_the_errno_code) {
    using bbkit::FailureKind;
    const bbkit::Error e = bbkit::mover_error(FailureKind::source, "read", "/x", ENOENT);
    EXPECT_EQ(e.code(), bbkit::ExitCode::no_input);
    EXPECT_STREQ(e.what(), "cannot read /x: no such file or directory");
    EXPECT_EQ(bbkit::mover_error(FailureKind::destination, "create", "/y", EACCES).code(),
              bbkit::ExitCode::no_perm);
    EXPECT_EQ(bbkit::mover_reason(ENOSPC), "no space left on device");
    EXPECT_EQ(bbkit::mover_reason(EDQUOT), "disk quota exceeded");
}

TEST(MoverError, carries_its_failure_typed_and_words_a_call_without_a_path) {
    using bbkit::FailureKind;
    const bbkit::Error link =
        bbkit::mover_error(FailureKind::destination, "link", "/a", EEXIST, " to /b");
    EXPECT_STREQ(link.what(), "cannot link /a to /b: file exists");
    ASSERT_TRUE(link.failure());
    EXPECT_EQ(link.failure()->kind, FailureKind::destination);
    EXPECT_EQ(link.failure()->operation, "link");
    EXPECT_EQ(link.failure()->path, "/a");
    EXPECT_EQ(link.failure()->err, EEXIST);
    const bbkit::Error sync =
        bbkit::mover_error(FailureKind::destination, "sync the destination file system", "", EIO);
    EXPECT_STREQ(sync.what(), "cannot sync the destination file system: input/output error");
    EXPECT_EQ(sync.failure()->operation, "sync");  // the verb alone
    EXPECT_FALSE(bbkit::Error(bbkit::ExitCode::io, "plain").failure());
}

TEST(ErrnoName, names_each_errno_and_reads_the_name_back) {
    EXPECT_EQ(bbkit::errno_name(ENOSPC), "ENOSPC");
    EXPECT_EQ(bbkit::errno_name(EDQUOT), "EDQUOT");
    for (int err = 1; err < 134; ++err)
        EXPECT_EQ(bbkit::errno_from_name(bbkit::errno_name(err)), err) << err;
    EXPECT_EQ(bbkit::errno_name(4000), "E4000");  // none the C library names
    EXPECT_EQ(bbkit::errno_from_name("E4000"), 4000);
    EXPECT_EQ(bbkit::errno_from_name("ENOTHING"), 0);
    EXPECT_EQ(bbkit::errno_from_name(""), 0);
}

TEST(FailureKind, each_kind_reads_back_from_its_name) {
    using bbkit::FailureKind;
    for (FailureKind kind :
         {FailureKind::source, FailureKind::destination, FailureKind::capacity,
          FailureKind::pool_full, FailureKind::interrupted, FailureKind::internal})
        EXPECT_EQ(bbkit::parse_failure_kind(bbkit::to_string(kind)), kind);
    EXPECT_EQ(bbkit::to_string(FailureKind::pool_full), std::string("pool-full"));
    EXPECT_FALSE(bbkit::parse_failure_kind("pool_full"));
}
