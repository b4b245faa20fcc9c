// The names of a move's temporaries, alone: whose a name is, and that nobody without the
// buffer's token can make one a move would take for its buffer's.
#include "bbkit/mover/temp_names.hpp"

#include <gtest/gtest.h>
#include <limits.h>

#include <set>
#include <string>

namespace bbkit::mover_internal {
namespace {

TEST(TempNames, a_temporary_names_its_owner_and_is_this_moves) {
    TempNames move("00112233445566778899aabbccddeeff");
    const std::string temp = move.name("result.dat");
    EXPECT_EQ(temp_owner(temp), "result.dat");
    EXPECT_TRUE(move.ours(temp));
    EXPECT_TRUE(move.tagged_ours(temp));
    std::set<std::string> names;
    for (int i = 0; i < 1000; ++i)
        names.insert(move.name("x"));
    EXPECT_EQ(names.size(), 1000u);  // unique within the move
}

TEST(TempNames, another_move_of_the_buffer_shares_the_tag_not_the_prefix) {
    const std::string token = "00112233445566778899aabbccddeeff";
    TempNames killed(token), rerun(token), other("ffeeddccbbaa99887766554433221100"), no_token("");
    const std::string temp = killed.name("tree");
    EXPECT_FALSE(rerun.ours(temp));
    EXPECT_TRUE(rerun.tagged_ours(temp));  // this buffer's, this boot: may be taken over
    EXPECT_FALSE(other.tagged_ours(temp));
    EXPECT_FALSE(no_token.tagged_ours(temp));
    EXPECT_FALSE(TempNames("").tagged_ours(no_token.name("tree")));  // random: never again
}

TEST(TempNames, a_long_name_gets_the_short_form_with_its_tag) {
    TempNames move("00112233445566778899aabbccddeeff");
    const std::string name(NAME_MAX - 3, 'n');
    const std::string temp = move.name(name);
    EXPECT_LE(temp.size(), static_cast<std::size_t>(NAME_MAX));
    EXPECT_EQ(temp_owner(temp), "#" + long_name_tag(name));
    EXPECT_TRUE(move.ours(temp));
}

TEST(TempNames, names_that_only_look_alike_have_no_owner) {
    for (const std::string& name :
         {std::string("plain"), std::string(".x.bbkit-"), std::string(".x.bbkit-ZZZZ"),
          std::string("x.bbkit-0123456789abcdef0123456789ab"),
          std::string(".x.bbkit-0123456789ABCDEF0123456789AB"),
          std::string(".bbkit-notdigits-0123456789abcdef0123456789ab")})
        EXPECT_EQ(temp_owner(name), "") << name;
    // An older bbkit's 20-digit suffix still names its owner (removed, never taken over).
    EXPECT_EQ(temp_owner(".x.bbkit-0123456789abcdef0123"), "x");
}

TEST(TempNames, the_tag_is_the_tokens_for_this_boot) {
    EXPECT_EQ(temp_tag("00112233445566778899aabbccddeeff"),
              temp_tag("00112233445566778899aabbccddeeff"));
    EXPECT_NE(temp_tag("00112233445566778899aabbccddeeff"),
              temp_tag("ffeeddccbbaa99887766554433221100"));
    EXPECT_NE(temp_tag(""), temp_tag(""));  // no token: random each time
    EXPECT_EQ(temp_tag("").size(), 16u);
}

}  // namespace
}  // namespace bbkit::mover_internal
