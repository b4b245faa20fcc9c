#include "bbkit/identity.hpp"

#include <grp.h>
#include <unistd.h>

#include <cerrno>

namespace bbkit {

const char* switch_identity(const Identity& identity) noexcept {
    if (getuid() == identity.uid && geteuid() == identity.uid && getgid() == identity.gid &&
        getegid() == identity.gid && identity.uid != 0)
        return nullptr;  // already that user (e.g. bb-parse run by the submitting user)
    if (setgroups(identity.groups.size(), identity.groups.data()) != 0)
        return "setgroups";
    if (setresgid(identity.gid, identity.gid, identity.gid) != 0)
        return "setresgid";
    if (setresuid(identity.uid, identity.uid, identity.uid) != 0)
        return "setresuid";
    // A partial drop must never go unnoticed: regaining root has to fail now.
    if (identity.uid != 0 && (setuid(0) == 0 || seteuid(0) == 0)) {
        errno = EPERM;
        return "root could be regained";
    }
    return nullptr;
}

}  // namespace bbkit
