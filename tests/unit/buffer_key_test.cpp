// A buffer's key: its text form both ways, and the names and ids it is made of.
#include "bbkit/buffer_key.hpp"

#include <gtest/gtest.h>

#include "bbkit/error.hpp"

namespace bbkit {
namespace {

TEST(BufferKey, job_key_string_and_directory) {
    const BufferKey key = BufferKey::job("main", 42, 1);
    EXPECT_EQ(key.str(), "main.42.1");
    const std::string dir = key.new_directory();
    ASSERT_EQ(dir.size(), std::string("job/main.42.1.").size() + 16) << dir;
    EXPECT_EQ(dir.rfind("job/main.42.1.", 0), 0u) << dir;
    EXPECT_NE(key.new_directory(), dir);  // unguessable: a new one each time
    EXPECT_EQ(without_directory_token(dir.substr(4)), "main.42.1");
    EXPECT_EQ(key.kind(), BufferKind::job);
}

TEST(BufferKey, persistent_key_string_and_directory) {
    const BufferKey key = BufferKey::persistent("main", "alpha");
    EXPECT_EQ(key.str(), "main.p.alpha");
    const std::string dir = key.new_directory();
    EXPECT_EQ(dir.rfind("persistent/main.alpha.", 0), 0u) << dir;
    EXPECT_EQ(without_directory_token(dir.substr(11)), "main.alpha");
    EXPECT_EQ(without_directory_token("main.alpha"), "main.alpha");  // an older record's
    EXPECT_EQ(without_directory_token("main.42.1"), "main.42.1");
    EXPECT_EQ(key.kind(), BufferKind::persistent);
}

TEST(BufferKey, string_form_round_trips_even_with_dotted_clusters) {
    for (const BufferKey& key :
         {BufferKey::job("main", 42, 1), BufferKey::job("a.b", 4294967295ULL, 7),
          BufferKey::job("x.p", 1, 2), BufferKey::persistent("main", "alpha"),
          BufferKey::persistent("c.p", "p"), BufferKey::persistent("main", "run-1_x")})
        EXPECT_EQ(parse_buffer_key(key.str()), key) << key.str();
}

TEST(BufferKey, malformed_keys_are_refused) {
    for (const char* text : {"", "main", "main.42", ".42.1", "main.42.x", "main.p.", "main.p.12",
                             "main.042.1", "main.q.alpha", "main.p.a/b"}) {
        try {
            parse_buffer_key(text);
            ADD_FAILURE() << "accepted '" << text << "'";
        } catch (const Error& error) {
            EXPECT_EQ(error.code(), ExitCode::data);
        }
    }
}

TEST(BufferKey, persistent_names_are_restricted) {
    EXPECT_NO_THROW(check_persistent_name("alpha-1_B"));
    for (const char* name : {"", "123", "a.b", "a/b", "a b", "../x"})
        EXPECT_THROW(check_persistent_name(name), Error) << name;
    EXPECT_THROW(check_persistent_name(std::string(65, 'a')), Error);
}

TEST(ParseJobId, takes_slurms_whole_numbers_up_to_two_to_the_63rd_minus_one) {
    EXPECT_EQ(parse_job_id("42"), 42u);
    EXPECT_EQ(parse_job_id("9223372036854775807"), 9223372036854775807u);
    for (const char* text : {"", "-1", "4x", "9223372036854775808", " 1", "00000000000000000001"}) {
        try {
            parse_job_id(text, "array task id");
            ADD_FAILURE() << "accepted '" << text << "'";
        } catch (const Error& error) {
            EXPECT_EQ(error.code(), ExitCode::usage);
            EXPECT_NE(std::string(error.what()).find("array task id '"), std::string::npos);
        }
    }
}

}  // namespace
}  // namespace bbkit
