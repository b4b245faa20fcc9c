// What a move keeps of a file besides its bytes: the group (when the user may set it), the mode
// with its suid, sgid and sticky bits, nanosecond atime and mtime, user.* xattrs and POSIX ACLs
// (bb-stage(1)). Never the owner: a move runs as the job's user (mover.hpp).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <functional>
#include <string>

namespace bbkit {

// Receives what a copy could not keep but need not fail for ("cannot set the mode of ...").
using CopyWarning = std::function<void(const std::string&)>;

// Copies user.* xattrs and the access ACL (and the default ACL when `directory`) from `src` to
// `dst`, as raw bytes; returns whether any was written (an ACL rewrites the group bits of the
// mode). An attribute the destination refuses is a warning naming `what`; a file system
// without xattrs on the source is nothing to copy. Throws Error for any other failure.
bool copy_xattrs(int src, int dst, bool directory, const std::string& what,
                 const CopyWarning& warn);

// Gives `fd` the group, mode and times of `st`, in that order (chown clears suid/sgid; every
// change touches ctime only). A group the user may not set is left as it is; a mode or times
// refused with EPERM are a warning. `gid_set` / `mode_set`: creating the file already got them
// right (initial_metadata). Throws Error naming `what` for any other failure.
void set_owner_mode_times(int fd, const struct stat& st, const std::string& what,
                          const CopyWarning& warn, bool gid_set = false, bool mode_set = false);

// A symlink's group (best effort) and times, by name in `dir` (a symlink has no descriptor to
// set them through and no mode). Throws Error naming `what` when the times cannot be set.
void set_link_group_times(int dir, const std::string& name, const struct stat& st,
                          const std::string& what);

// What a file created in a directory gets by itself: the directory's group if it is setgid,
// else the creator's; and whether its mode is exactly the one asked for minus the umask (false
// when the directory carries any extended attribute: an inherited default ACL would decide).
struct NewFileDefaults {
    gid_t gid = 0;
    bool plain_modes = false;
};
NewFileDefaults new_file_defaults(int dir);

// The mode to create a copy of `source` with, and what that creation already gets right, so
// that set_owner_mode_times can skip it. `in_new_dir`: the defaults of the directory it is
// created in when the move created that directory (else nothing is known: 0600, then fchmod).
struct InitialMetadata {
    mode_t mode = 0600;
    bool gid_set = false, mode_set = false;
};
InitialMetadata initial_metadata(const struct stat& source, const NewFileDefaults* in_new_dir,
                                 mode_t umask);

}  // namespace bbkit
