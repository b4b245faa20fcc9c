// run/<key>.lock: held (flock) by the one process staging or tearing down a buffer. The file
// names its holder (pid and start time) so that a teardown can stop a live stager through a
// pidfd, and never signals a process that merely reuses the pid of a dead one.
// Where controllers share the state directory and one holds the claim (bbkit(7), STATE
// DIRECTORY, "Controller failover"), the locks are those of the claim's epoch N,
// run/<key>@N.lock: a stager of an older epoch, on a controller cut off but alive, keeps its
// lock and blocks nothing, since it can no longer write state.db; the new controller's own
// processes still exclude each other.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "bbkit/buffer.hpp"
#include "bbkit/fsops.hpp"

namespace bbkit {

class StateStore;

// Where a process's run locks are: the state directory, and the epoch of the controller claim
// they belong to (none without a claim). StateStore::claim_epoch says which.
struct RunLockScope {
    std::string state_dir;
    std::optional<std::int64_t> epoch;
};
RunLockScope run_lock_scope(StateStore& store);

// A run lock's file name under the state directory: run/<key>.lock, or run/<key>@<epoch>.lock.
std::string run_lock_name(const RunLockScope& scope, const std::string& name);

class RunLock {
  public:
    // Takes the buffer's run lock without waiting; nullopt when another process holds it.
    static std::optional<RunLock> try_acquire(const RunLockScope& scope, const BufferKey& key);
    // Waits up to `timeout`; Error(temp_fail) naming the holder when it does not get the lock.
    static RunLock acquire(const RunLockScope& scope, const BufferKey& key,
                           std::chrono::milliseconds timeout);
    // The process holding the lock now, if any: the holder the file names, and only when that
    // process has the file open (the name alone is the state owner's to write).
    static std::optional<ProcessId> holder(const RunLockScope& scope, const BufferKey& key);
    // Removes the lock file while holding it, once the buffer is over (one file per buffer
    // would otherwise stay in run/ for good), and the buffer's lock files of older epochs that
    // nobody holds. Whoever waits for it then locks a new file.
    void remove_file();

    RunLock(RunLock&&) = default;
    RunLock& operator=(RunLock&&) = default;

  private:
    RunLock(Fd fd, std::string path, RunLockScope scope, std::string key)
        : fd_(std::move(fd)),
          path_(std::move(path)),
          scope_(std::move(scope)),
          key_(std::move(key)) {}
    Fd fd_;
    std::string path_;
    RunLockScope scope_;
    std::string key_;
};

}  // namespace bbkit
