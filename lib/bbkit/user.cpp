#include "bbkit/user.hpp"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "bbkit/config.hpp"
#include "bbkit/error.hpp"
#include "bbkit/identity.hpp"
#include "bbkit/text.hpp"

namespace bbkit {
namespace {

std::vector<gid_t> groups_of(const char* name, gid_t gid) {
    int count = 32;
    std::vector<gid_t> groups(static_cast<std::size_t>(count));
    while (getgrouplist(name, gid, groups.data(), &count) < 0) {
        groups.resize(static_cast<std::size_t>(count) * 2);
        count = static_cast<int>(groups.size());
    }
    groups.resize(static_cast<std::size_t>(count));
    return groups;
}

}  // namespace

User lookup_user(const std::string& name_or_uid, UserGroups groups) {
    std::vector<char> buf(16384);
    passwd entry{};
    passwd* found = nullptr;
    int rc = 0;
    if (const std::optional<std::uint64_t> uid = parse_decimal(name_or_uid, max_uid)) {
        rc = getpwuid_r(static_cast<uid_t>(*uid), &entry, buf.data(), buf.size(), &found);
    } else {
        rc = getpwnam_r(name_or_uid.c_str(), &entry, buf.data(), buf.size(), &found);
    }
    if (rc != 0)
        throw system_error("cannot look up user '" + name_or_uid + "'", rc);
    if (found == nullptr)
        throw Error(ExitCode::no_input, "no such user '" + name_or_uid + "'");
    User user;
    user.name = found->pw_name;
    user.uid = found->pw_uid;
    user.gid = found->pw_gid;
    if (groups == UserGroups::load)
        user.groups = groups_of(found->pw_name, found->pw_gid);
    return user;
}

bool user_matches(const User& user, const std::string& candidate) {
    if (all_digits(candidate))
        return parse_decimal(candidate, max_uid) == std::uint64_t{user.uid};
    return candidate == user.name;
}

Identity identity_of(const User& user) {
    return Identity{user.uid, user.gid, user.groups};
}

void become_user(const User& user) {
    if (const char* step = switch_identity(identity_of(user)))
        throw system_error("cannot become user '" + user.name + "': " + step, errno);
}

void act_as_user(const std::optional<std::string>& name, const std::string& what) {
    if (geteuid() == 0) {
        if (!name)
            throw Error(ExitCode::usage, what +
                                             " as root needs --user (it runs with the job user's "
                                             "permissions, never root's)");
        become_user(lookup_user(*name));
        return;
    }
    if (!name)
        return;
    const User user = lookup_user(*name);
    if (user.uid != geteuid())
        throw Error(ExitCode::no_perm,
                    what + " for user '" + user.name + "' must run as that user or as root");
}

}  // namespace bbkit
