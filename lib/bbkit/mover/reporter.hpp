// A move's progress as the caller sees it (run_move's callback, mover.hpp): the counters, and
// whether the move waits in syncfs, at most every progress_interval unless forced. Used by the
// calling thread only (the executor's: it reports while the workers copy and while it
// finishes); the workers never report.
#pragma once

#include <functional>

#include "bbkit/mover.hpp"
#include "bbkit/mover/move_types.hpp"
#include "bbkit/mover/tally.hpp"

namespace bbkit::mover_internal {

class Reporter {
  public:
    Reporter(const std::function<void(const MoveProgress&)>& progress, const MoveCounters& counts)
        : progress_(progress), counts_(counts) {}

    void report(bool force) {
        const Clock::time_point now = Clock::now();
        if (!force && now - last_ < progress_interval)
            return;
        last_ = now;
        if (progress_)
            progress_(counts_.progress(syncing_));
    }
    // Around a wait in syncfs: a progress report says so (a long sync is not a stall).
    void set_syncing(bool syncing) { syncing_ = syncing; }

  private:
    const std::function<void(const MoveProgress&)>& progress_;
    const MoveCounters& counts_;
    Clock::time_point last_{};
    bool syncing_ = false;
};

}  // namespace bbkit::mover_internal
