#include "bbkit/seal.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace bbkit {
namespace {

TEST(Seal, sha256_matches_the_fips_examples) {
    EXPECT_EQ(to_hex(sha256("")),
              "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(to_hex(sha256("abc")),
              "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    EXPECT_EQ(to_hex(sha256(std::string(1000000, 'a'))),
              "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Seal, a_message_of_55_56_and_64_bytes_pads_right) {
    // 55 bytes fit the length in one block; 56 and 64 need a second.
    EXPECT_EQ(to_hex(sha256(std::string(55, 'a'))),
              "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
    EXPECT_EQ(to_hex(sha256(std::string(56, 'a'))),
              "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
    EXPECT_EQ(to_hex(sha256(std::string(64, 'a'))),
              "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

// The primitives are libsodium's: these vectors check the wiring (lengths, an empty input, a
// key longer than the block), not libsodium.
TEST(Seal, hmac_matches_rfc_4231) {
    // Test cases 1, 2 and 6 (a key longer than the block).
    EXPECT_EQ(to_hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")),
              "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    EXPECT_EQ(to_hex(hmac_sha256("Jefe", "what do ya want for nothing?")),
              "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    EXPECT_EQ(to_hex(hmac_sha256(std::string(131, '\xaa'),
                                 "Test Using Larger Than Block-Size Key - Hash Key First")),
              "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(Seal, hmac_takes_an_empty_key_and_an_empty_message) {
    EXPECT_EQ(to_hex(hmac_sha256("", "")),
              "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
    EXPECT_EQ(to_hex(hmac_sha256(std::string_view{}, std::string_view{})),
              "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

TEST(Seal, hmac_takes_keys_of_any_length_around_the_block) {
    // libsodium's one-shot crypto_auth_hmacsha256 takes 32-byte keys only; the streaming form
    // bbkit uses takes any. 64 bytes is the block: a longer key is hashed first.
    EXPECT_EQ(to_hex(hmac_sha256(std::string(32, 'k'), "row")),
              "a67e6dab53a1c09d5f5addb0ec4302a94eefbf1471158cd3ffdf09c31b0c859b");
    EXPECT_EQ(to_hex(hmac_sha256(std::string(63, 'k'), "row")),
              "336eb6e0ebb40de07de0131491f57139e642a9bfa86e229d442e2b63c1fda6a3");
    EXPECT_EQ(to_hex(hmac_sha256(std::string(64, 'k'), "row")),
              "35b1ac4b69fb44991c512d79d0c1470a0248fc4d5b3a4e2c2e9b4b606c355931");
    EXPECT_EQ(to_hex(hmac_sha256(std::string(65, 'k'), "row")),
              "259fdccc9a00dc1c7c629499e126d20b70080a7662fb037359fc27e8cb387086");
}

TEST(Seal, random_tokens_are_hex_of_the_asked_length_and_differ) {
    std::set<std::string> seen;
    for (int i = 0; i < 100; ++i) {
        const std::string t = random_hex(16);
        ASSERT_EQ(t.size(), 32u);
        EXPECT_EQ(t.find_first_not_of("0123456789abcdef"), std::string::npos) << t;
        seen.insert(t);
    }
    EXPECT_EQ(seen.size(), 100u);
}

TEST(Seal, a_new_user_key_is_what_a_key_file_may_hold_and_never_the_same) {
    const std::string key = new_user_key();
    EXPECT_EQ(key.size(), 32u);
    EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos) << key;
    EXPECT_EQ(parse_user_key(key + "\n"), key);
    EXPECT_NE(new_user_key(), key);
}

TEST(Seal, only_32_lower_case_hex_digits_and_one_newline_are_a_user_key) {
    const std::string key = "0123456789abcdef0123456789abcdef";
    EXPECT_EQ(parse_user_key(key + "\n"), key);
    EXPECT_EQ(parse_user_key(key), key);
    for (const std::string& bad : {std::string(), std::string("\n"), key.substr(1), key + "0",
                                   key + "\n\n", std::string("0123456789ABCDEF0123456789abcdef"),
                                   std::string("0123456789abcdeg0123456789abcdef"), " " + key})
        EXPECT_EQ(parse_user_key(bad), std::nullopt) << '"' << bad << '"';
}

TEST(Seal, a_user_tag_is_32_hex_digits_of_the_keyed_hash) {
    const std::string key = "0123456789abcdef0123456789abcdef";
    const std::string tag = user_tag(key, "main.7");
    EXPECT_EQ(tag, to_hex(hmac_sha256(key, "main.7")).substr(0, 32));
    EXPECT_TRUE(is_user_tag(tag));
    EXPECT_NE(user_tag(key, "main.8"), tag);
    EXPECT_NE(user_tag("fedcba9876543210fedcba9876543210", "main.7"), tag);
    for (const std::string& bad :
         {std::string(), tag.substr(1), tag + "0", std::string("0123456789ABCDEF0123456789abcdef")})
        EXPECT_FALSE(is_user_tag(bad)) << bad;
}

TEST(Seal, same_secret_compares_whole_strings) {
    EXPECT_TRUE(same_secret("abc", "abc"));
    EXPECT_FALSE(same_secret("abc", "abd"));
    EXPECT_FALSE(same_secret("abc", "ab"));
    EXPECT_TRUE(same_secret("", ""));
}

TEST(Seal, same_secret_refuses_a_prefix_or_an_extension_of_the_secret) {
    const std::string seal = to_hex(hmac_sha256("key", "row"));
    EXPECT_TRUE(same_secret(seal, seal));
    EXPECT_FALSE(same_secret(seal, seal.substr(0, seal.size() - 1)));
    EXPECT_FALSE(same_secret(seal.substr(0, seal.size() - 1), seal));
    EXPECT_FALSE(same_secret(seal, seal + "0"));
    EXPECT_FALSE(same_secret(seal, ""));
    EXPECT_FALSE(same_secret("", seal));
    EXPECT_FALSE(same_secret(std::string_view{}, "a"));
    EXPECT_TRUE(same_secret(std::string_view{}, ""));
    // A NUL inside counts like any byte, not as an end.
    EXPECT_FALSE(same_secret(std::string("ab\0c", 4), std::string("ab\0d", 4)));
    EXPECT_FALSE(same_secret(std::string("ab\0", 3), "ab"));
}

}  // namespace
}  // namespace bbkit
