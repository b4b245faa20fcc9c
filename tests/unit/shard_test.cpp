// The sharding rule of a node-local stage-in: FNV-1a 64 of the relative path, mixed by
// MurmurHash3's finalizer, modulo the count.
// The expected values were computed apart from bbkit (a few lines of Python over the bytes).
#include "bbkit/shard.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

using bbkit::fnv1a_64;
using bbkit::shard_of;

TEST(Shard, fnv1a_64_matches_the_published_vectors) {
    EXPECT_EQ(fnv1a_64(""), 14695981039346656037u);       // the offset basis
    EXPECT_EQ(fnv1a_64("a"), 12638187200555641996u);      // 0xaf63dc4c8601ec8c
    EXPECT_EQ(fnv1a_64("foobar"), 9625390261332436968u);  // 0x85944171f73967e8
}

TEST(Shard, hashes_the_bytes_as_they_are) {
    EXPECT_EQ(fnv1a_64("a/b.dat"), 4117987947879284142u);
    EXPECT_EQ(fnv1a_64("input.dat"), 2706010564846450092u);
    EXPECT_EQ(fnv1a_64("d\xc3\xa9j\xc3\xa0/\xc3\xbf"), 17377217855442755551u);  // UTF-8
    EXPECT_EQ(fnv1a_64(std::string("x\xffy")), 13948396922932177635u);          // not UTF-8
    EXPECT_EQ(fnv1a_64(std::string("a\0b", 3)), fnv1a_64(std::string("a\0b", 3)));
    EXPECT_NE(fnv1a_64(std::string("a\0b", 3)), fnv1a_64("ab"));
}

TEST(Shard, is_the_mixed_hash_modulo_the_count) {
    struct Case {
        const char* path;
        std::uint32_t by2, by3, by4, by7;
    };
    const Case cases[] = {
        {"", 0, 2, 2, 1},        {"a", 1, 2, 3, 1},         {"foobar", 1, 1, 3, 3},
        {"a/b.dat", 0, 2, 2, 0}, {"input.dat", 1, 0, 3, 6}, {"x\xffy", 1, 1, 3, 4},
    };
    for (const Case& c : cases) {
        EXPECT_EQ(shard_of(c.path, 2), c.by2) << c.path;
        EXPECT_EQ(shard_of(c.path, 3), c.by3) << c.path;
        EXPECT_EQ(shard_of(c.path, 4), c.by4) << c.path;
        EXPECT_EQ(shard_of(c.path, 7), c.by7) << c.path;
    }
}

TEST(Shard, one_shard_or_none_is_shard_zero) {
    EXPECT_EQ(shard_of("", 1), 0u);
    EXPECT_EQ(shard_of("a/b.dat", 1), 0u);
    EXPECT_EQ(shard_of("a/b.dat", 0), 0u);
}

TEST(Shard, mix_64_is_murmur3s_finalizer) {
    EXPECT_EQ(bbkit::mix_64(0), 0u);
    EXPECT_EQ(bbkit::mix_64(fnv1a_64("")), 17280346270528514342u);
    EXPECT_EQ(bbkit::mix_64(fnv1a_64("a/b.dat")), 3615454014498179126u);
}

// Names that differ in one even character: plain FNV-1a's lowest bit is the same for all of
// them, so two nodes would get all or nothing; mixed, both get some.
TEST(Shard, names_differing_in_one_even_character_spread_over_two_nodes) {
    int on_first = 0;
    for (const char* name : {"rank0.dat", "rank2.dat", "rank4.dat", "rank6.dat", "rank8.dat",
                             "rankB.dat", "rankD.dat", "rankF.dat"})
        on_first += shard_of(name, 2) == 0;
    EXPECT_GT(on_first, 0);
    EXPECT_LT(on_first, 8);
}
