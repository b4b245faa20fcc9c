// What a move's parts share (the walk, the copier, the finisher), named in one place with its
// locking rule. Set up before any starts and read-only after (no lock): the plan, the buffer's
// root, the two sides. Each part below guards itself: the queue (BatchQueue, its mutex), the
// counters (atomics), the warnings and the temporaries' names (their own), the open trees and
// what to sync (their own mutexes below). Nothing else is shared: the walk's state is the
// Walker's (walker.hpp), the copy's the Copier's, the finishing's the Finisher's, the worker
// threads' the WorkerPool's, and the nodes of a batch belong to whichever step holds it
// (mover_private.hpp).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "bbkit/fsops.hpp"
#include "bbkit/mover.hpp"
#include "bbkit/mover/batch_queue.hpp"
#include "bbkit/mover/move_types.hpp"
#include "bbkit/mover/tally.hpp"
#include "bbkit/mover/temp_names.hpp"

namespace bbkit::mover_internal {

// Temporary trees a durable move has made and not yet renamed into place: the walk adds each
// as it makes it, the copy takes it out once published, and after a failure takes all that
// are left, to remove them.
class OpenTrees {
  public:
    void add(std::shared_ptr<TempTree> tree) {
        std::lock_guard<std::mutex> lock(mutex_);
        trees_.insert(std::move(tree));
    }
    void remove(const std::shared_ptr<TempTree>& tree) {
        std::lock_guard<std::mutex> lock(mutex_);
        trees_.erase(tree);
    }
    std::set<std::shared_ptr<TempTree>> take_all() {
        std::lock_guard<std::mutex> lock(mutex_);
        return std::exchange(trees_, {});
    }

  private:
    std::mutex mutex_;
    std::set<std::shared_ptr<TempTree>> trees_;
};

// What a durable move syncs: one descriptor per destination file system, opened before
// anything is written there (since Linux 5.8 syncfs reports the writeback errors after that
// open), which the copy syncs after each batch while the walk may add more; and the directories
// outside the walked trees whose entries the move changed, synced once the walk has ended.
class SyncTargets {
  public:
    // A directory on the destination; its file system is watched when not yet.
    void watch(Fd dir) {
        struct stat st {};
        std::lock_guard<std::mutex> lock(mutex_);
        if (fstat(dir.get(), &st) == 0 && ids_.insert(st.st_dev).second)
            file_systems_.push_back(std::move(dir));
    }
    void add_dir(const std::string& dir) {
        std::lock_guard<std::mutex> lock(mutex_);
        dirs_.insert(dir);
    }
    // fn(fd) for each file system watched, holding the lock (no watch meanwhile).
    template <class Fn>
    void for_each_file_system(Fn fn) {
        std::lock_guard<std::mutex> lock(mutex_);
        for (const Fd& fd : file_systems_)
            fn(fd.get());
    }
    std::set<std::string> dirs() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return dirs_;
    }

  private:
    mutable std::mutex mutex_;
    std::vector<Fd> file_systems_;
    std::set<dev_t> ids_;
    std::set<std::string> dirs_;
};

struct MoveState {
    MoveState(const MovePlan& plan, Fd root, std::unique_ptr<Side> source,
              std::unique_ptr<Side> destination)
        : plan(plan),
          buffer_root(std::move(root)),
          src(std::move(source)),
          dst(std::move(destination)),
          temps(plan.temp_token) {}

    const MovePlan& plan;
    const Fd buffer_root;
    const std::unique_ptr<Side> src, dst;
    BatchQueue batches{queued_batches};
    MoveCounters counts;
    Warnings warnings;
    // This move's temporaries' names, under the buffer's tag for this boot: a temporary tree
    // of a move of this buffer killed in this boot holds what the page cache holds, which the
    // next move's sync makes durable (Walker::scan_stale_temps).
    TempNames temps;
    OpenTrees trees;
    SyncTargets syncs;
};

}  // namespace bbkit::mover_internal
