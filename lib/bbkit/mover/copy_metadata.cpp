#include "bbkit/mover/copy_metadata.hpp"

#include <fcntl.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "bbkit/error.hpp"
#include "bbkit/mover/common.hpp"

namespace bbkit {

using mover_internal::fail;
using mover_internal::fail_source;
using mover_internal::reason;

namespace {

bool xattr_copied(const char* name, bool directory) {
    return std::strncmp(name, "user.", 5) == 0 ||
           std::strcmp(name, "system.posix_acl_access") == 0 ||
           (directory && std::strcmp(name, "system.posix_acl_default") == 0);
}

}  // namespace

// No libacl needed: the kernel's xattr form of an ACL is the same on both sides.
bool copy_xattrs(int src, int dst, bool directory, const std::string& what,
                 const CopyWarning& warn) {
    std::string names(256, '\0');
    ssize_t n;
    while ((n = flistxattr(src, &names[0], names.size())) < 0 && errno == ERANGE)
        names.resize(names.size() * 4);
    if (n < 0) {
        if (errno == ENOTSUP || errno == EOPNOTSUPP)
            return false;
        fail_source("list the extended attributes for", what, errno);
    }
    bool written = false;
    std::string value;
    for (std::size_t at = 0; at < static_cast<std::size_t>(n);) {
        const char* name = names.c_str() + at;
        at += std::strlen(name) + 1;
        if (!xattr_copied(name, directory))
            continue;
        value.resize(256);
        ssize_t size;
        while ((size = fgetxattr(src, name, &value[0], value.size())) < 0 && errno == ERANGE)
            value.resize(value.size() * 4);
        if (size < 0) {
            if (errno == ENODATA)
                continue;  // removed meanwhile
            fail_source("read extended attribute " + std::string(name) + " for", what, errno);
        }
        if (fsetxattr(dst, name, value.data(), static_cast<std::size_t>(size), 0) == 0) {
            written = true;
            continue;
        }
        const int err = errno;
        if (err == ENOTSUP || err == EOPNOTSUPP || err == EPERM || err == EACCES)
            warn("extended attribute " + std::string(name) + " not kept on " + what + ": " +
                 reason(err));
        else
            fail("write extended attribute " + std::string(name) + " for", what, err);
    }
    return written;
}

void set_owner_mode_times(int fd, const struct stat& st, const std::string& what,
                          const CopyWarning& warn, bool gid_set, bool mode_set) {
    // The group only when the user may (a member of it); chown clears suid/sgid, so the mode
    // comes after it, and the times come last because every change above touches ctime only.
    if (!gid_set && fchown(fd, static_cast<uid_t>(-1), st.st_gid) != 0 && errno != EPERM)
        fail("set the group of", what, errno);
    if (!mode_set && fchmod(fd, st.st_mode & 07777) != 0) {
        if (errno != EPERM)
            fail("set the mode of", what, errno);
        warn("cannot set the mode of " + what + ": " + reason(errno));
    }
    const struct timespec times[2] = {st.st_atim, st.st_mtim};
    if (futimens(fd, times) != 0) {
        if (errno != EPERM)
            fail("set the times of", what, errno);
        warn("cannot set the times of " + what + ": " + reason(errno));
    }
}

void set_link_group_times(int dir, const std::string& name, const struct stat& st,
                          const std::string& what) {
    fchownat(dir, name.c_str(), static_cast<uid_t>(-1), st.st_gid,
             AT_SYMLINK_NOFOLLOW);  // best effort, as for files
    const struct timespec times[2] = {st.st_atim, st.st_mtim};
    if (utimensat(dir, name.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0)
        fail("set the times of", what, errno);
}

NewFileDefaults new_file_defaults(int dir) {
    NewFileDefaults defaults;
    struct stat st {};
    if (fstat(dir, &st) != 0)
        return defaults;
    defaults.gid = (st.st_mode & S_ISGID) ? st.st_gid : getegid();
    defaults.plain_modes = flistxattr(dir, nullptr, 0) == 0;
    return defaults;
}

// A plain mode given at creation is exact (the file is written through its descriptor whatever
// its mode); suid/sgid/sticky, bits the umask would remove and inherited ACLs need fchmod.
InitialMetadata initial_metadata(const struct stat& source, const NewFileDefaults* in_new_dir,
                                 mode_t umask) {
    InitialMetadata initial;
    if (in_new_dir == nullptr)
        return initial;
    const mode_t perm = source.st_mode & 0777;
    initial.gid_set = in_new_dir->gid == source.st_gid;
    if (in_new_dir->plain_modes && (source.st_mode & 07000) == 0 && (perm & umask) == 0) {
        initial.mode = perm;
        initial.mode_set = true;
    }
    return initial;
}

}  // namespace bbkit
