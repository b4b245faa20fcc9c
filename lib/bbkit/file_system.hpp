// What kind of file system holds a path, by the magic number statfs(2) reports: whether other
// hosts may reach the same files (a network or cluster file system), where SQLite's WAL is not
// safe and the state directory switches to a rollback journal (bbkit(7), STATE DIRECTORY).
#pragma once

#include <istream>
#include <string>

namespace bbkit {

struct FileSystemKind {
    std::string name;     // "nfs", "ext4", ...; the magic in hex when bbkit does not know it
    bool shared = false;  // a network or cluster file system (or FUSE: its locking is unknown)
    // Why locks on it may exclude only processes of this host: a mount option ("nolock",
    // "local_lock=flock", Lustre's "localflock", CIFS's "nobrl"), a mount not found, or a file
    // system whose daemon decides (FUSE, BeeGFS, 9p: locks_unknown); "" when they reach the
    // server.
    std::string local_locks;
    bool locks_unknown = false;  // FUSE, BeeGFS, 9p: a site may vouch for them (state_journal)
    bool known = true;           // false: a magic bbkit does not know (name is its hex)
    std::string unreachable;     // state_dir_file_system: why statfs failed ("" when it did not)
};

// From /proc/self/mountinfo's lines (`mountinfo`), the option of the mount of `device`
// ("MAJOR:MINOR") of file system `fs` (a name file_system_kind gives) that keeps its locks on
// this host, "" when none does, or why it could not tell (no such mount).
std::string local_lock_option(std::istream& mountinfo, const std::string& device,
                              const std::string& fs);

// The kind of the file system holding `path` (followed if a symlink); for NFS, its mount's
// options from /proc/self/mountinfo too. A failed statfs is
// system_error's. In a test build (BBKIT_FAULT_INJECTION), BBKIT_TEST_SHARED_FS=NAME makes
// every answer that of a shared file system called NAME, so that the unit tests can exercise
// the settings of a network file system on a local disk; a release build never reads it.
FileSystemKind file_system_kind(const std::string& path);
// The same for a file system by its statfs f_type (what the answer above is made of).
FileSystemKind file_system_kind_of_magic(unsigned long magic);

}  // namespace bbkit
