// A user's ids as the kernel takes them, and the one way bbkit's processes become a user
// (user.hpp's become_user, and a child of run_process with ProcessSpec::identity).
#pragma once

#include <sys/types.h>

#include <vector>

namespace bbkit {

struct Identity {
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> groups;  // supplementary groups
};

// setgroups, setresgid, setresuid, then a check that root cannot be regained. Nothing when the
// process already is that non-root user. No allocation and no exception, so a forked child may
// call it: nullptr on success, else the step that failed ("setgroups", ...), with errno set.
const char* switch_identity(const Identity& identity) noexcept;

}  // namespace bbkit
