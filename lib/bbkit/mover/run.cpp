#include "bbkit/mover/mover_private.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/fsops.hpp"

namespace bbkit {
namespace mover_internal {

namespace {

// The plan checked, its buffer's root opened and the two sides of the move: what the walk and
// the copy share from the start.
std::unique_ptr<MoveState> start_move(const MovePlan& plan) {
    for (const MoveEntry& entry : plan.entries) {
        if (entry.shard_count == 0)
            throw Error(ExitCode::data, "invalid shard count 0: at least 1 is needed");
        if (entry.shard_index >= entry.shard_count)
            throw Error(ExitCode::data, "invalid shard index " + std::to_string(entry.shard_index) +
                                            ": not below the shard count " +
                                            std::to_string(entry.shard_count));
    }
    const bool in = plan.direction == MoveDirection::in;
    Fd root(::open(plan.buffer_root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!root)
        fail_as(in ? FailureKind::destination : FailureKind::source, "open buffer directory",
                plan.buffer_root, errno);
    auto buffer = std::make_unique<Side>(true, root.get(), plan.buffer_root,
                                         in ? FailureKind::destination : FailureKind::source);
    auto outside =
        std::make_unique<Side>(false, -1, "", in ? FailureKind::source : FailureKind::destination);
    if (in)
        return std::make_unique<MoveState>(plan, std::move(root), std::move(outside),
                                           std::move(buffer));
    return std::make_unique<MoveState>(plan, std::move(root), std::move(buffer),
                                       std::move(outside));
}

}  // namespace

Mover::Mover(const MovePlan& plan, const std::function<void(const MoveProgress&)>& progress)
    : plan_(plan),
      state_(start_move(plan)),
      reporter_(progress, state_->counts),
      walker_(*state_),
      pool_(plan.threads, state_->batches, reporter_),
      copier_(*state_, pool_),
      finisher_(*state_, pool_, reporter_) {}

MoveSummary Mover::run() {
    const Clock::time_point start = start_ = Clock::now();
    std::thread walker;
    Batch running;
    BatchQueue& batches = state_->batches;
    auto stop_walker = [&] {
        batches.stop();
        if (walker.joinable())
            walker.join();
    };
    try {
        walker = std::thread([this] { walker_.run(); });
        for (;;) {
            std::optional<Batch> next =
                batches.take(progress_interval, [&] { reporter_.report(false); });
            if (!next)
                break;
            running = std::move(*next);
            const Clock::time_point copying = Clock::now();
            copier_.copy(running);
            const Clock::time_point finishing = Clock::now();
            copy_time_ += finishing - copying;
            const Clock::duration synced = finisher_.sync_time();
            finisher_.finish(running);
            finish_time_ += Clock::now() - finishing - (finisher_.sync_time() - synced);
            running = Batch{};
            batches.release();
        }
        walker.join();
        if (std::exception_ptr walk_error = batches.walk_error())
            std::rethrow_exception(walk_error);
        const Clock::time_point finishing = Clock::now();
        const Clock::duration synced = finisher_.sync_time();
        finisher_.finish_move(walker_.link_spill());
        walker_.restore_reopened();
        finish_time_ += Clock::now() - finishing - (finisher_.sync_time() - synced);
    } catch (...) {
        std::exception_ptr error = std::current_exception();
        stop_walker();
        try {
            std::rethrow_exception(error);
        } catch (const CopyStopped&) {
            if (std::exception_ptr walk_error = batches.walk_error())
                error = walk_error;  // the walk failed first: that is the reason
        } catch (...) {
        }
        finisher_.remove_temps(&running);
        std::rethrow_exception(error);
    }
    fault_point("mover.before-dir-fsync");
    // The parents of the entries' destinations: new names (and trees renamed) in them.
    if (plan_.durable)
        finisher_.sync_parents();
    reporter_.report(true);

    const MoveCounters& counts = state_->counts;
    MoveSummary summary;
    summary.files = counts.files_written.load();
    summary.bytes = counts.bytes_written.load();
    summary.skipped = counts.skipped.load();
    summary.warnings = state_->warnings.list();
    const Clock::time_point end = Clock::now();
    summary.seconds = seconds(end - start);
    summary.phases = phases(end);
    return summary;
}

MovePhases Mover::phases(Clock::time_point end) const {
    MovePhases p;
    const BatchQueue& batches = state_->batches;
    p.walk = seconds(batches.walk_time());
    p.wait = seconds(batches.copy_waited());
    p.copy = seconds(copy_time_);
    p.finish = seconds(finish_time_);
    p.sync = seconds(finisher_.sync_time());
    p.threads = static_cast<unsigned>(pool_.workers().size());
    p.seconds = seconds(end - start_);
    Clock::time_point first = end, last = start_;
    for (const Worker& worker : pool_.workers()) {
        p.busy += seconds(worker.busy);
        if (worker.first_copy != Clock::time_point{}) {
            first = std::min(first, worker.first_copy);
            last = std::max(last, worker.last_copy);
        }
    }
    p.before = seconds(first - start_);
    p.after = first == end ? 0 : seconds(end - last);
    return p;
}

}  // namespace mover_internal

MoveSummary run_move(const MovePlan& plan,
                     const std::function<void(const MoveProgress&)>& progress) {
    try {
        mover_internal::Mover mover(plan, progress);
        return mover.run();
    } catch (Error& e) {
        // Written into a buffer (a stage-in), no space is the pool's file system full, and a
        // quota exceeded is the buffer's own project quota, its capacity (bbkit(7), CAPACITY).
        std::optional<Failure> failure = e.failure();
        if (plan.direction == MoveDirection::in && failure &&
            failure->kind == FailureKind::destination &&
            (failure->err == ENOSPC || failure->err == EDQUOT)) {
            failure->kind = failure->err == EDQUOT ? FailureKind::capacity : FailureKind::pool_full;
            e.set_failure(*failure);
        }
        throw;
    }
}

}  // namespace bbkit
