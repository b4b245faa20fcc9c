#include "bbkit/access.hpp"

#include <unistd.h>

#include <algorithm>

#include "bbkit/error.hpp"
#include "bbkit/trust.hpp"

namespace bbkit {

void check_may_use_burst_buffers(const Config& config, const User& user) {
    const std::string who = "user " + user.name + " may not use burst buffers";
    if (user.uid == 0 && !config.allow_root)
        throw Error(ExitCode::no_perm, who + " (allow_root = false)");
    const auto matches = [&](const std::string& c) { return user_matches(user, c); };
    const auto& allow = config.allow_users;
    if (!allow.empty() && std::none_of(allow.begin(), allow.end(), matches))
        throw Error(ExitCode::no_perm, who + " (not in allow_users)");
    const auto& deny = config.deny_users;
    if (std::any_of(deny.begin(), deny.end(), matches))
        throw Error(ExitCode::no_perm, who + " (listed in deny_users)");
}

bool root_itself() {
    return getuid() == 0 && !less_privileged_caller();
}

void check_may_manage_persistent(const Config& config, const User& owner, PersistentRequest from,
                                 const std::string& verb) {
    if (root_itself() && (from == PersistentRequest::command || owner.uid == 0))
        return;
    if (!config.flags.enable_persistent)
        throw Error(ExitCode::no_perm, "user " + owner.name + " may not " + verb +
                                           " persistent burst buffers (EnablePersistent is not "
                                           "set)");
    check_may_use_burst_buffers(config, owner);
}

bool privileged_viewer(const Config& config, uid_t viewer) {
    if (viewer == 0)
        return true;
    if (config.state_owner == "root" || config.state_owner == "0")
        return false;
    try {
        return lookup_user(config.state_owner).uid == viewer;
    } catch (const Error&) {
        return false;  // an owner that does not resolve privileges nobody
    }
}

bool buffers_are_public(const Config& config) {
    return !config.flags.private_data;
}

bool may_see(const Config& config, uid_t viewer, const Buffer& buffer) {
    return buffers_are_public(config) || buffer.uid == viewer || privileged_viewer(config, viewer);
}

}  // namespace bbkit
