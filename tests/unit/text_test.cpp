// The shared number rules: digits only, and no value past the caller's maximum.
#include "bbkit/text.hpp"

#include <gtest/gtest.h>

#include <cstdint>

using bbkit::all_digits;
using bbkit::parse_decimal;

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
