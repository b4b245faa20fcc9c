// Users as the system knows them, and the one way bbkit becomes one.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bbkit/identity.hpp"

namespace bbkit {

// The largest valid uid: (uid_t)-1 means "no change" to the system calls, never a user.
constexpr std::uint64_t max_uid = 4294967294;

struct User {
    std::string name;
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> groups;  // supplementary groups, primary included (unless skipped)
};

// Whether lookup_user() fills User::groups. Only becoming the user needs them, and
// getgrouplist reads every group of the system, so identity checks skip it.
enum class UserGroups { load, skip };

// Looks up a user by name or numeric uid. Throws Error(no_input) when there is none.
User lookup_user(const std::string& name_or_uid, UserGroups groups = UserGroups::load);

// Whether `candidate` (a name or a numeric uid, as written in bbkit.toml) denotes `user`.
bool user_matches(const User& user, const std::string& candidate);

struct Config;

// Makes sure what follows runs with `name`'s permissions: as root, becomes that user for good
// (`name` is then required: Error(usage) naming `what`); as anyone else, `name` must be the
// caller (Error(no_perm)).
void act_as_user(const std::optional<std::string>& name, const std::string& what);

// Becomes `user` for good: setgroups, setresgid, setresuid, then verifies that root cannot be
// regained. Throws Error(no_perm) and changes nothing observable when any step fails. Call it
// only in a single-threaded process, before opening any user path.
void become_user(const User& user);

// What a process becomes to run as `user` (identity.hpp; process.hpp, ProcessSpec::identity).
Identity identity_of(const User& user);

}  // namespace bbkit
