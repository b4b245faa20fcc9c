#include "bbkit/size.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "bbkit/error.hpp"
#include "source_file.hpp"

using bbkit::Error;
using bbkit::ExitCode;
using bbkit::format_size;
using bbkit::parse_capacity;
using bbkit::parse_config_size;
using bbkit::parse_size;
using bbkit::round_up;

namespace {

constexpr std::uint64_t KiB = 1024ULL;
constexpr std::uint64_t MiB = KiB * 1024;
constexpr std::uint64_t GiB = MiB * 1024;
constexpr std::uint64_t TiB = GiB * 1024;
constexpr std::uint64_t PiB = TiB * 1024;

// Expects parse_size(text) to fail with exit 65 and a message naming the token.
void expect_rejected(const std::string& text, const std::string& why) {
    try {
        parse_size(text);
        FAIL() << "accepted '" << text << "'";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ExitCode::data) << text;
        const std::string msg = e.what();
        EXPECT_NE(msg.find("'" + text + "'"), std::string::npos) << msg;
        EXPECT_NE(msg.find(why), std::string::npos) << msg;
    }
}

}  // namespace

TEST(Size, plain_number_is_bytes) {
    EXPECT_EQ(parse_size("1200").value, 1200u);
    EXPECT_FALSE(parse_size("1200").nodes);
}

TEST(Size, iec_units_are_powers_of_1024) {
    EXPECT_EQ(parse_size("1K").value, KiB);
    EXPECT_EQ(parse_size("1KiB").value, KiB);
    EXPECT_EQ(parse_size("3M").value, 3 * MiB);
    EXPECT_EQ(parse_size("3MiB").value, 3 * MiB);
    EXPECT_EQ(parse_size("1G").value, GiB);
    EXPECT_EQ(parse_size("2TiB").value, 2 * TiB);
    EXPECT_EQ(parse_size("5P").value, 5 * PiB);
    EXPECT_EQ(parse_size("5PiB").value, 5 * PiB);
}

TEST(Size, si_units_are_powers_of_1000) {
    EXPECT_EQ(parse_size("1KB").value, 1000u);
    EXPECT_EQ(parse_size("4MB").value, 4000000u);
    EXPECT_EQ(parse_size("32GB").value, 32000000000u);
    EXPECT_EQ(parse_size("1TB").value, 1000000000000u);
    EXPECT_EQ(parse_size("2PB").value, 2000000000000000u);
}

TEST(Size, units_are_case_insensitive) {
    EXPECT_EQ(parse_size("1g").value, GiB);
    EXPECT_EQ(parse_size("1gib").value, GiB);
    EXPECT_EQ(parse_size("1gb").value, 1000000000u);
    EXPECT_EQ(parse_size("1Gb").value, 1000000000u);
    EXPECT_EQ(parse_size("1kIb").value, KiB);
}

TEST(Size, node_suffixes_give_node_counts) {
    for (const char* text : {"4N", "4n", "4node", "4nodes", "4NODES"}) {
        const bbkit::Size s = parse_size(text);
        EXPECT_TRUE(s.nodes) << text;
        EXPECT_EQ(s.value, 4u) << text;
    }
}

TEST(Size, rejects_decimals) {
    expect_rejected("1.5G", "decimals");
    expect_rejected("3.5TB", "decimals");
    expect_rejected("1,5G", "decimals");
}

TEST(Size, rejects_unknown_suffixes) {
    expect_rejected("1B", "unknown unit");
    expect_rejected("2E", "unknown unit");
    expect_rejected("2EiB", "unknown unit");
    expect_rejected("1GiBs", "unknown unit");
    expect_rejected("1Kx", "unknown unit");
}

TEST(Size, rejects_zero_negative_blank_and_garbage) {
    expect_rejected("0", "zero");
    expect_rejected("0G", "zero");
    expect_rejected("-1G", "negative");
    expect_rejected("+1G", "sign");
    expect_rejected("1 G", "blank");
    expect_rejected("G", "whole number");
    expect_rejected(" 1G", "whole number");
    expect_rejected("1G ", "unexpected character");
    expect_rejected("", "empty");
}

TEST(Size, rejects_values_of_2_pow_63_and_more) {
    EXPECT_EQ(parse_size("9223372036854775807").value, bbkit::max_size);
    expect_rejected("9223372036854775808", "too large");
    expect_rejected("99999999999999999999999", "too large");
    expect_rejected("8192P", "too large");  // exactly 2^63
    EXPECT_EQ(parse_size("8191P").value, 8191 * PiB);
}

TEST(Size, capacity_refuses_node_counts) {
    EXPECT_EQ(parse_capacity("100GiB"), 100 * GiB);
    try {
        parse_capacity("4N");
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ExitCode::data);
        EXPECT_NE(std::string(e.what()).find("node count is not a capacity"), std::string::npos);
    }
}

TEST(Size, rounds_up_to_granularity) {
    EXPECT_EQ(round_up(1, 200 * GiB), 200 * GiB);
    EXPECT_EQ(round_up(200 * GiB, 200 * GiB), 200 * GiB);
    EXPECT_EQ(round_up(200 * GiB + 1, 200 * GiB), 400 * GiB);
    EXPECT_EQ(round_up(999, 1000), 1000u);
    EXPECT_EQ(round_up(1001, 1000), 2000u);
    EXPECT_EQ(round_up(7, 1), 7u);
    EXPECT_EQ(round_up(7, 0), 7u);
}

TEST(Size, rounding_past_the_limit_is_an_error) {
    EXPECT_THROW(round_up(bbkit::max_size, 1000), Error);
    EXPECT_EQ(round_up(bbkit::max_size, 1), bbkit::max_size);
}

TEST(Size, prints_largest_exact_unit_iec_first) {
    // The forms of Slurm's `scontrol show burst` examples.
    EXPECT_EQ(format_size(1200 * GiB), "1200GiB");
    EXPECT_EQ(format_size(250 * KiB), "250KiB");
    EXPECT_EQ(format_size(4000000000ULL), "4GB");
    EXPECT_EQ(format_size(1000256000ULL), "1000256KB");
    EXPECT_EQ(format_size(1200), "1200");
    EXPECT_EQ(format_size(0), "0");
    EXPECT_EQ(format_size(5800 * GiB), "5800GiB");
    EXPECT_EQ(format_size(10000 * KiB), "10000KiB");
    EXPECT_EQ(format_size(GiB), "1GiB");
    EXPECT_EQ(format_size(1024 * GiB), "1TiB");
    EXPECT_EQ(format_size(1000), "1KB");
    EXPECT_EQ(format_size(1024000), "1000KiB");  // IEC wins when both divide
    EXPECT_EQ(format_size(1), "1");
    EXPECT_EQ(format_size(3 * PiB), "3PiB");
    EXPECT_EQ(format_size(2000000000000000ULL), "2PB");
}

TEST(Size, approximate_form_has_one_decimal_below_100_of_the_unit) {
    using bbkit::approximate_size;
    EXPECT_EQ(approximate_size(0), "0B");
    EXPECT_EQ(approximate_size(1023), "1023B");
    EXPECT_EQ(approximate_size(KiB), "1.0KiB");
    EXPECT_EQ(approximate_size(1258291), "1.2MiB");
    EXPECT_EQ(approximate_size(240 * GiB + 1), "240GiB");
    EXPECT_EQ(approximate_size(5 * PiB), "5.0PiB");
    EXPECT_EQ(approximate_size(~0ULL), "16.0EiB");
}

TEST(Size, prints_node_counts_with_n) {
    EXPECT_EQ(format_size(parse_size("4nodes")), "4N");
}

TEST(Size, printed_form_parses_back_to_the_same_bytes) {
    for (std::uint64_t v : std::initializer_list<std::uint64_t>{1, 1000, 1024, 1000256000,
                                                                1200 * GiB, 7 * PiB, 123456789})
        EXPECT_EQ(parse_size(format_size(v)).value, v) << v;
}

// The table burst_buffer.lua's size parser is tested against too (tests/slurm-lua/
// size-cases.lua): both must give the same answer on every line.
TEST(SizeCases, shared_table_with_the_slurm_lua_parser) {
    std::ifstream in(bbkit::unit::source_file("tests/data/size-cases.tsv"));
    ASSERT_TRUE(in) << "tests/data/size-cases.tsv is missing";
    std::string line;
    int cases = 0;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#')
            continue;
        const std::size_t close = line.find("\"\t", 1);
        ASSERT_TRUE(line[0] == '"' && close != std::string::npos) << "malformed line: " << line;
        std::string text = line.substr(1, close - 1);
        for (std::size_t at; (at = text.find("\\t")) != std::string::npos;)
            text.replace(at, 2, "\t");
        const std::string expected = line.substr(close + 2);
        ++cases;
        if (expected == "error") {
            EXPECT_THROW(parse_capacity(text), Error) << "'" << text << "'";
        } else {
            try {
                EXPECT_EQ(std::to_string(parse_capacity(text)), expected) << "'" << text << "'";
            } catch (const Error& e) {
                ADD_FAILURE() << "'" << text << "' refused: " << e.what();
            }
        }
    }
    EXPECT_GT(cases, 40);
}

// Every two-letter unit a configuration may hold: with an upper-case B, powers of 1000 (as
// Slurm reads it); with a lower-case b, refused (bits in common use), naming both readings.
TEST(size, config_sizes_refuse_bits_and_bare_numbers_where_a_unit_is_needed) {
    const std::string prefixes = "kKmMgGtTpP";
    std::uint64_t si = 1;
    for (std::size_t i = 0; i < prefixes.size(); ++i) {
        if (i % 2 == 0)
            si *= 1000;
        const std::string upper(1, prefixes[i | 1]);
        EXPECT_EQ(parse_config_size("3" + std::string(1, prefixes[i]) + "B", true), 3 * si);
        const std::string bits = "3" + std::string(1, prefixes[i]) + "b";
        try {
            parse_config_size(bits, true);
            ADD_FAILURE() << "accepted " << bits;
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ExitCode::data);
            EXPECT_EQ(std::string(e.what()), "invalid size '" + bits + "': '" + bits.substr(1) +
                                                 "' reads as bits; write 3" + upper +
                                                 "B (powers of 1000) or 3" + upper +
                                                 "iB (powers of 1024)");
        }
    }
    EXPECT_EQ(parse_config_size("100kib", true), 100 * KiB);
    EXPECT_EQ(parse_config_size("100g", true), 100 * GiB);
    EXPECT_EQ(parse_config_size("1", false), 1U);
    try {
        parse_config_size("100", true);
        ADD_FAILURE() << "accepted a bare number";
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()),
                  "invalid size '100': no unit, which would mean 100 bytes (write 100GiB, "
                  "100TiB or the like)");
    }
    // What parse_capacity refuses stays refused, with its own words.
    EXPECT_THROW(parse_config_size("4N", true), Error);
    EXPECT_THROW(parse_config_size("1.5GiB", false), Error);
}
