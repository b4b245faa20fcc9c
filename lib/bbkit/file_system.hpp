// What kind of file system holds a path, by the magic number statfs(2) reports: whether other
// hosts may reach the same files (a network or cluster file system), where SQLite's WAL is not
// safe and the state directory switches to a rollback journal (bbkit(7), STATE DIRECTORY).
#pragma once

#include <string>

namespace bbkit {

struct FileSystemKind {
    std::string name;     // "nfs", "ext4", ...; the magic in hex when bbkit does not know it
    bool shared = false;  // a network or cluster file system (or FUSE: its locking is unknown)
    // An NFS mount option under which locks exclude only processes of this host ("nolock",
    // "local_lock=flock", ...): "" when locks reach the server.
    std::string local_locks;
};

// The kind of the file system holding `path` (followed if a symlink); for NFS, its mount's
// options from /proc/self/mountinfo too. A failed statfs is
// system_error's. In a test build (BBKIT_FAULT_INJECTION), BBKIT_TEST_SHARED_FS=NAME makes
// every answer that of a shared file system called NAME, so that the unit tests can exercise
// the settings of a network file system on a local disk; a release build never reads it.
FileSystemKind file_system_kind(const std::string& path);
// The same for a file system by its statfs f_type (what the answer above is made of).
FileSystemKind file_system_kind_of_magic(unsigned long magic);

}  // namespace bbkit
