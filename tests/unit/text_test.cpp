// The shared number rules (digits only, and no value past the caller's maximum) and the small
// string helpers.
#include "bbkit/text.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

using bbkit::all_digits;
using bbkit::ends_with;
using bbkit::join;
using bbkit::lower;
using bbkit::parse_decimal;
using bbkit::shell_quoted;
using bbkit::starts_with;
using bbkit::trim;

TEST(AllDigits, takes_ascii_digits_only) {
    EXPECT_TRUE(all_digits("0"));
    EXPECT_TRUE(all_digits("0042"));
    EXPECT_FALSE(all_digits(""));
    EXPECT_FALSE(all_digits("-1"));
    EXPECT_FALSE(all_digits("+1"));
    EXPECT_FALSE(all_digits(" 1"));
    EXPECT_FALSE(all_digits("1a"));
    EXPECT_FALSE(all_digits("\xd9\xa1"));  // ARABIC-INDIC DIGIT ONE
}

TEST(ParseDecimal, stops_at_the_maximum_without_overflowing) {
    EXPECT_EQ(parse_decimal("4294967295", UINT32_MAX), 4294967295u);
    EXPECT_EQ(parse_decimal("4294967296", UINT32_MAX), std::nullopt);
    EXPECT_EQ(parse_decimal("18446744073709551615"), UINT64_MAX);
    EXPECT_EQ(parse_decimal("18446744073709551616"), std::nullopt);
    EXPECT_EQ(parse_decimal("99999999999999999999999"), std::nullopt);
    EXPECT_EQ(parse_decimal("007"), 7u);
    EXPECT_EQ(parse_decimal(""), std::nullopt);
    EXPECT_EQ(parse_decimal("1 "), std::nullopt);
}

TEST(Join, puts_the_separator_between_parts_only) {
    EXPECT_EQ(join({}, ", "), "");
    EXPECT_EQ(join({"a"}, ", "), "a");
    EXPECT_EQ(join({"a", "b", "c"}, "/"), "a/b/c");
    EXPECT_EQ(join({"", "b"}, ","), ",b");
}

TEST(Lower, lowers_ascii_letters_only) {
    EXPECT_EQ(lower("GiB"), "gib");
    EXPECT_EQ(lower("Enable_Persistent"), "enable_persistent");
    EXPECT_EQ(lower("\xc3\x89t\xc3\xa9"), "\xc3\x89t\xc3\xa9");  // bytes past ASCII kept
}

TEST(StartsWith, compares_the_leading_bytes) {
    EXPECT_TRUE(starts_with("#!/bin/sh", "#!"));
    EXPECT_TRUE(starts_with("abc", ""));
    EXPECT_TRUE(starts_with("abc", "abc"));
    EXPECT_FALSE(starts_with("ab", "abc"));
    EXPECT_FALSE(starts_with("xabc", "abc"));
}

TEST(EndsWith, compares_the_trailing_bytes) {
    EXPECT_TRUE(ends_with("main.7.1.json", ".json"));
    EXPECT_TRUE(ends_with("abc", ""));
    EXPECT_TRUE(ends_with(".json", ".json"));
    EXPECT_FALSE(ends_with("json", ".json"));
    EXPECT_FALSE(ends_with("main.7.1.json.tmp", ".json"));
    EXPECT_FALSE(ends_with("", "x"));
}

TEST(Trim, removes_ascii_blanks_at_both_ends_only) {
    EXPECT_EQ(trim("  #BB_LUA pool=p \t\r"), "#BB_LUA pool=p");
    EXPECT_EQ(trim("a b"), "a b");
    EXPECT_EQ(trim("\v\f\na\n"), "a");
    EXPECT_EQ(trim(" \t "), "");
    EXPECT_EQ(trim(""), "");
    const std::string no_break_space = "\xc2\xa0";  // a blank in UTF-8, kept
    EXPECT_EQ(trim(no_break_space + "a" + no_break_space), no_break_space + "a" + no_break_space);
}

TEST(ShellQuoted, is_one_literal_word) {
    EXPECT_EQ(shell_quoted(""), "''");
    EXPECT_EQ(shell_quoted("/usr/bin/srun"), "'/usr/bin/srun'");
    EXPECT_EQ(shell_quoted("it's $HOME `x`"), "'it'\\''s $HOME `x`'");
}
