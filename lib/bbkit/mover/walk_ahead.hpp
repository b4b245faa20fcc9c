// Several directories read at once, ahead of the mover's one walker (ARCHITECTURE.md,
// lib/bbkit/mover/). The walk stays one thread (its order decides batches, overlaps, temporary
// trees and hard links), but on a cold cache most of its time is the disk: reading each
// directory's blocks and each entry's inode, one request at a time. WalkAhead's threads read
// the same tree breadth first from where the walk is, each a directory at a time (its names, and
// each entry's inode through fstatat), so that the walk finds them in the kernel's caches and
// keeps a machine's many workers fed. Nothing it reads is kept: it only warms the caches, and
// its errors are ignored (the walk meets and reports them itself).
//
// Bounded: at most `budget` entries read ahead of what the walk has reported (walked()), and at
// most `max_queued` directories (open descriptors) waiting; past that a directory is left to the
// walk alone. Directories are opened beneath the one given, by name, never through a symlink
// (O_NOFOLLOW), so it never leaves the tree it was given.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "bbkit/fsops.hpp"

namespace bbkit::mover_internal {

class WalkAhead {
  public:
    WalkAhead(unsigned threads, std::uint64_t budget = std::uint64_t{1} << 16,
              std::size_t max_queued = 256);
    WalkAhead(const WalkAhead&) = delete;
    WalkAhead& operator=(const WalkAhead&) = delete;
    ~WalkAhead();  // stops the threads and waits for them

    // Reads the tree below `dir` (a descriptor of its own: it is closed when done).
    void read(Fd dir);
    // The walk has met `entries` more entries.
    void walked(std::uint64_t entries = 1) {
        walked_.fetch_add(entries, std::memory_order_relaxed);
    }
    // Entries read ahead so far (tests).
    std::uint64_t entries_read() const { return read_.load(); }

  private:
    void run();
    void read_directory(Fd dir);

    const std::uint64_t budget_;
    const std::size_t max_queued_;
    std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<Fd> queue_;
    bool stop_ = false;
    std::atomic<std::uint64_t> read_{0}, walked_{0};
    std::vector<std::thread> threads_;
};

}  // namespace bbkit::mover_internal
