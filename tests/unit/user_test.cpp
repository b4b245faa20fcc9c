// Users as the system knows them, and becoming one for good (bbkit(7), SECURITY): real passwd
// entries (root, nobody), real identity changes in a child process.
#include "bbkit/user.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

#include "bbkit/error.hpp"
#include "code_of.hpp"

using namespace bbkit;

namespace {

constexpr uid_t nobody = 65534;

class UserTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root to change identity";
    }
};

}  // namespace

TEST(UserLookupTest, a_name_and_its_uid_find_the_same_user) {
    const User by_name = lookup_user("nobody");
    const User by_uid = lookup_user(std::to_string(by_name.uid));
    EXPECT_EQ(by_uid.name, "nobody");
    EXPECT_EQ(by_uid.uid, by_name.uid);
    EXPECT_EQ(by_uid.gid, by_name.gid);
    EXPECT_EQ(lookup_user("0").name, "root");
    EXPECT_EQ(lookup_user("root").uid, 0u);
}

TEST(UserLookupTest, groups_are_loaded_only_when_asked_and_hold_the_primary_group) {
    const User loaded = lookup_user("root");
    EXPECT_NE(std::find(loaded.groups.begin(), loaded.groups.end(), loaded.gid),
              loaded.groups.end());
    EXPECT_TRUE(lookup_user("root", UserGroups::skip).groups.empty());
}

TEST(UserLookupTest, an_unknown_user_is_no_input_naming_it) {
    std::string message;
    EXPECT_EQ(code_of([] { lookup_user("bbkit-no-such-user"); }, &message), ExitCode::no_input);
    EXPECT_EQ(message, "no such user 'bbkit-no-such-user'");
    EXPECT_EQ(code_of([] { lookup_user("3999999999"); }), ExitCode::no_input);  // no entry
    EXPECT_EQ(code_of([] { lookup_user(""); }), ExitCode::no_input);
    // Past the largest uid: (uid_t)-1 is never a user, so the digits are looked up as a name.
    EXPECT_EQ(code_of([] { lookup_user("4294967295"); }), ExitCode::no_input);
    EXPECT_EQ(code_of([] { lookup_user("18446744073709551616"); }), ExitCode::no_input);
}

TEST(UserLookupTest, a_candidate_matches_by_name_or_by_number_only) {
    const User user = lookup_user("nobody", UserGroups::skip);
    EXPECT_TRUE(user_matches(user, "nobody"));
    EXPECT_TRUE(user_matches(user, std::to_string(user.uid)));
    EXPECT_FALSE(user_matches(user, "Nobody"));
    EXPECT_FALSE(user_matches(user, "nobody "));
    EXPECT_FALSE(user_matches(user, "0"));
    EXPECT_FALSE(user_matches(user, std::to_string(user.uid + 4294967296ULL)));  // no wrapping
    EXPECT_FALSE(user_matches(user, ""));
}

// code_of_as(0, 0, ...) runs the body as root in a child, which may then drop root for good.
TEST_F(UserTest, becoming_a_user_takes_every_id_and_root_cannot_be_regained) {
    const User target = lookup_user("nobody");
    std::string message;
    EXPECT_EQ(code_of_as(
                  0, 0,
                  [&] {
                      become_user(target);
                      uid_t r = 0, e = 0, s = 0;
                      gid_t gr = 0, ge = 0, gs = 0;
                      getresuid(&r, &e, &s);
                      getresgid(&gr, &ge, &gs);
                      if (r != target.uid || e != target.uid || s != target.uid ||
                          gr != target.gid || ge != target.gid || gs != target.gid)
                          throw Error(ExitCode::software, "ids not all the user's");
                      if (setuid(0) == 0 || seteuid(0) == 0)
                          throw Error(ExitCode::software, "root regained");
                      std::vector<gid_t> groups(static_cast<std::size_t>(getgroups(0, nullptr)));
                      getgroups(static_cast<int>(groups.size()), groups.data());
                      std::sort(groups.begin(), groups.end());
                      std::vector<gid_t> expected = target.groups;
                      std::sort(expected.begin(), expected.end());
                      if (groups != expected)
                          throw Error(ExitCode::software, "groups not the user's");
                  },
                  &message),
              ExitCode::ok)
        << message;
}

TEST_F(UserTest, an_unprivileged_process_cannot_become_another_user) {
    const User root = lookup_user("root");
    std::string message;
    EXPECT_EQ(code_of_as(
                  nobody, nobody, [&] { become_user(root); }, &message),
              ExitCode::no_perm);
    EXPECT_EQ(message.rfind("cannot become user 'root': setgroups", 0), 0u) << message;
}

TEST_F(UserTest, acting_as_a_user_as_root_needs_the_user_and_becomes_them) {
    std::string message;
    EXPECT_EQ(code_of_as(
                  0, 0, [] { act_as_user(std::nullopt, "checking sources"); }, &message),
              ExitCode::usage);
    EXPECT_EQ(message.rfind("checking sources as root needs --user", 0), 0u) << message;
    EXPECT_EQ(code_of_as(0, 0,
                         [] {
                             act_as_user(std::string("nobody"), "checking sources");
                             if (geteuid() != nobody || getuid() != nobody)
                                 throw Error(ExitCode::software, "still root");
                         }),
              ExitCode::ok);
    EXPECT_EQ(code_of_as(0, 0, [] { act_as_user(std::string("bbkit-no-such-user"), "x"); }),
              ExitCode::no_input);
}

TEST_F(UserTest, acting_as_a_user_as_anyone_else_must_be_that_user) {
    EXPECT_EQ(code_of_as(nobody, nobody, [] { act_as_user(std::nullopt, "x"); }), ExitCode::ok);
    EXPECT_EQ(code_of_as(nobody, nobody, [] { act_as_user(std::string("nobody"), "x"); }),
              ExitCode::ok);
    EXPECT_EQ(code_of_as(nobody, nobody, [] { act_as_user(std::to_string(nobody), "x"); }),
              ExitCode::ok);
    std::string message;
    EXPECT_EQ(
        code_of_as(
            nobody, nobody, [] { act_as_user(std::string("root"), "checking sources"); }, &message),
        ExitCode::no_perm);
    EXPECT_EQ(message, "checking sources for user 'root' must run as that user or as root");
}
