// The state directory as files (bbkit(7), STATE DIRECTORY): its owner, its modes and its
// subdirectories, set up by a writing command and only checked by a reading one, and
// <state>/lock, the flock every write transaction holds (ARCHITECTURE.md, "One writer at a
// time"). What state.db holds is the store's.
//
// Layout: lock, state.db (+ -wal and -shm on a local disk, -journal on a network file system),
// env/ public/ run/ progress/ log/ (trash/ and
// quarantine/ live in each pool, where a rename can reach them).
#pragma once

#include <chrono>
#include <string>
#include <utility>

#include "bbkit/config.hpp"
#include "bbkit/file_system.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/sqlite.hpp"

namespace bbkit {

// For a writer: creates config.state_dir (mode 0711: others may reach public/ only) and its
// subdirectories when missing, gives env/ to config.state_group, and opens (creating them,
// mode 0600) state.db and the lock file, which it returns. The directory must be owned by
// config.state_owner and be neither readable nor writable by group or others, else
// Error(no_perm) naming it and the fix; the caller must be the owner or root. A system call
// that fails while setting it up is configuration_error's (bbkit(7), EXIT STATUS).
// With `read_only` nothing is created or changed: the same owner and mode rules are checked, a
// missing directory or state.db is Error(no_input) naming it, and the Fd returned is empty.
Fd open_state_dir(const Config& config, bool read_only);

// The journal state.db takes in config.state_dir (bbkit(7), STATE DIRECTORY): WAL on a local
// disk, a rollback journal where other hosts may share the files (file_system_kind) or where
// state_journal = "rollback". Error(config) for a directory on a network or cluster file system
// with state_journal = "wal", or on an NFS mount whose locks stay on this host (nolock,
// local_lock): neither bbkit's lock nor SQLite's would keep another host out. `fs` is set to
// what the file system is. A missing directory is judged by its nearest existing parent.
sqlite::Journal state_journal(const Config& config, FileSystemKind* fs = nullptr);
// What state_journal judges by: the file system of config.state_dir, or of its nearest existing
// parent while it does not exist (bb-parse config prints it for install-slurm).
FileSystemKind state_dir_file_system(const Config& config);

// Holds flock(LOCK_EX) on the lock file while alive, its holder named in the file (pid, start
// time, since when, who) for the messages of those who wait; blank once released.
class StateLock {
  public:
    // Waits at most `timeout` for the lock on `lock_fd` (open_state_dir's, for the state
    // directory `dir`). Past it, Error(temp_fail) "state directory DIR is locked by pid N (who)
    // since T: gave up after S s (retry later; ...)". `who` names this holder: "bb-pool alloc".
    static StateLock acquire(const Fd& lock_fd, const std::string& dir,
                             std::chrono::milliseconds timeout, const std::string& who);

    StateLock(StateLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
    StateLock& operator=(StateLock&& other) noexcept {
        std::swap(fd_, other.fd_);
        return *this;
    }
    StateLock(const StateLock&) = delete;
    StateLock& operator=(const StateLock&) = delete;
    ~StateLock();

  private:
    StateLock(int fd, const std::string& who);
    void write_record(std::string text) const;

    int fd_ = -1;
};

}  // namespace bbkit
