// Whom the unit tests that allocate give buffers to, and who owns their state directory.
//
// Root hands a buffer to its job's user, never to itself (Slurm refuses burst buffers to uid
// 0): as root, the tests' user is nobody, as before. A process that is not root can hand a
// directory to nobody else, and keeps a state directory and pools of its own (pool_dir.hpp,
// may_own_pools): as anyone else, the tests' user and state owner are the caller. So a fixture
// that allocates runs as root and as any user; a test whose point needs root (a file handed to
// a third user, a seal or key only root holds, a change of identity, sudo's caller) sits in a
// fixture that skips without it.
#pragma once

#include <unistd.h>

#include <string>

#include "bbkit/user.hpp"

namespace bbkit::unit {

inline bool as_root() {
    return ::geteuid() == 0;
}

// The user buffers are allocated for: nobody as root, else the caller.
inline User job_user() {
    return lookup_user(as_root() ? "nobody" : std::to_string(::geteuid()));
}

// An owner the tests used root for (a persistent buffer an administrator made, another
// cluster's job): root as root, else the caller, the only user it can give a buffer to.
inline User root_or_caller() {
    return lookup_user(std::to_string(::geteuid()));
}

// Config::state_owner: root, or the caller.
inline std::string state_owner() {
    return as_root() ? "root" : std::to_string(::geteuid());
}

}  // namespace bbkit::unit
