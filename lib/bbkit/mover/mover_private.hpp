// The Mover behind run_move (mover.hpp): a move's parts, and the executor's loop over them. It
// owns what the parts share (MoveState: the walk and the copy hand batches over through it) and
// the parts, each of which owns its own state: the walk (Walker, on its own thread), the
// worker threads (WorkerPool), the copy of a batch (Copier), what makes it final (Finisher),
// the progress reports (Reporter). Its loop, in run.cpp: take a batch, copy it, finish it;
// then finish the move, or after a failure stop the walk and remove the temporaries
// (ARCHITECTURE.md, "The mover's parts").
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "bbkit/mover.hpp"
#include "bbkit/mover/copier.hpp"
#include "bbkit/mover/finisher.hpp"
#include "bbkit/mover/move_state.hpp"
#include "bbkit/mover/move_types.hpp"
#include "bbkit/mover/reporter.hpp"
#include "bbkit/mover/walker.hpp"
#include "bbkit/mover/worker_pool.hpp"

namespace bbkit::mover_internal {

class Mover {
  public:
    Mover(const MovePlan& plan, const std::function<void(const MoveProgress&)>& progress);
    MoveSummary run();

  private:
    MovePhases phases(Clock::time_point end) const;
    static double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

    const MovePlan& plan_;
    const std::unique_ptr<MoveState> state_;  // shared by the parts below
    Reporter reporter_;
    Walker walker_;  // its state is its own; run() reads it only once its thread has ended
    WorkerPool pool_;
    Copier copier_;
    Finisher finisher_;

    // Phase times (MovePhases): the executor's own; the walk's and the copy's waits are the
    // queue's (BatchQueue), the syncs the finisher's.
    Clock::time_point start_{};
    Clock::duration copy_time_{}, finish_time_{};
};

}  // namespace bbkit::mover_internal
