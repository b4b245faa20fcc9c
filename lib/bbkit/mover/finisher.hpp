// What makes a copied batch final (the executor's second step), and the move's end: the
// temporaries of a durable move take their names once synced, hard links are made, the
// directories whose walk ended get their modes and times (post-order), temporary trees are
// renamed into place; after the last batch the spilled hard links and the trees they held
// back, then the parents of the entries' destinations synced. After a failure it removes every
// temporary left. Its own state: the trees held back to the end, the time spent in syncs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bbkit/mover/link_spill.hpp"
#include "bbkit/mover/move_state.hpp"
#include "bbkit/mover/move_types.hpp"
#include "bbkit/mover/reporter.hpp"
#include "bbkit/mover/worker_pool.hpp"

namespace bbkit::mover_internal {

class Finisher {
  public:
    Finisher(MoveState& state, WorkerPool& pool, Reporter& reporter);

    // After the copy of a batch (Copier::copy).
    void finish(Batch& batch);
    // After the last batch, once the walk has ended: the links spilled past the memory bound
    // (null: none), then the trees that waited for them.
    void finish_move(LinkSpill* spill);
    // A durable move's last step: the directories outside the walked trees whose entries
    // changed.
    void sync_parents();
    // After a failure: no temporary of this move is left (the files of the batch being
    // finished, null for none, and trees not yet in place).
    void remove_temps(Batch* batch) noexcept;
    // Spent waiting in syncfs and fsync of the parents (MovePhases::sync).
    Clock::duration sync_time() const { return sync_time_; }

  private:
    void sync_file_systems();
    void make_link(Node& node);
    void apply_dir_metadata(const Dir& dir, bool sync);
    void publish(Dir& dir);
    void link_spilled(LinkSpill& spill);

    MoveState& state_;
    const MovePlan& plan_;
    const Side& src_;
    const Side& dst_;
    MoveCounters& counts_;
    Warnings& warnings_;
    WorkerPool& pool_;
    Reporter& reporter_;
    std::vector<std::shared_ptr<Dir>> deferred_tops_;  // see TempTree::deferred
    Clock::duration sync_time_{};
};

}  // namespace bbkit::mover_internal
