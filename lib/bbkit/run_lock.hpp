// run/<key>.lock: held (flock) by the one process staging or tearing down a buffer. The file
// names its holder (pid and start time) so that a teardown can stop a live stager through a
// pidfd, and never signals a process that merely reuses the pid of a dead one.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "bbkit/buffer.hpp"
#include "bbkit/fsops.hpp"

namespace bbkit {

class RunLock {
  public:
    // Takes <state_dir>/run/<key>.lock without waiting; nullopt when another process holds it.
    static std::optional<RunLock> try_acquire(const std::string& state_dir, const BufferKey& key);
    // Waits up to `timeout`; Error(temp_fail) naming the holder when it does not get the lock.
    static RunLock acquire(const std::string& state_dir, const BufferKey& key,
                           std::chrono::milliseconds timeout);
    // The process holding the lock now, if any: the holder the file names, and only when that
    // process has the file open (the name alone is the state owner's to write).
    static std::optional<ProcessId> holder(const std::string& state_dir, const BufferKey& key);
    // Removes the lock file while holding it, once the buffer is over (one file per buffer
    // would otherwise stay in run/ for good). Whoever waits for it then locks a new file.
    void remove_file();

    RunLock(RunLock&&) = default;
    RunLock& operator=(RunLock&&) = default;

  private:
    RunLock(Fd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
    Fd fd_;
    std::string path_;
};

}  // namespace bbkit
