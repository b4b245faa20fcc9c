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
      progress_(progress),
      state_(start_move(plan)),
      src_(state_->src.get()),
      dst_(state_->dst.get()),
      batches_(state_->batches),
      counts_(state_->counts),
      warnings_(state_->warnings),
      temps_(state_->temps),
      walker_(*state_) {
    workers_.resize(std::max(1u, plan.threads));
    umask_ = umask(077);  // reading it means setting it: put it back at once
    umask(umask_);
}

void Mover::report(bool force) {
    const Clock::time_point now = Clock::now();
    if (!force && now - last_report_ < progress_interval)
        return;
    last_report_ = now;
    if (!progress_)
        return;
    progress_(counts_.progress(syncing_));
}

MoveSummary Mover::run() {
    const Clock::time_point start = start_ = Clock::now();
    std::thread walker;
    Batch running;
    auto stop_walker = [&] {
        batches_.stop();
        if (walker.joinable())
            walker.join();
    };
    try {
        walker = std::thread([this] { walker_.run(); });
        for (;;) {
            std::optional<Batch> next = batches_.take(progress_interval, [&] { report(false); });
            if (!next)
                break;
            running = std::move(*next);
            const Clock::time_point copying = Clock::now();
            copy_batch(running);
            const Clock::time_point finishing = Clock::now();
            copy_time_ += finishing - copying;
            const Clock::duration synced = sync_time_;
            finish_batch(running);
            finish_time_ += Clock::now() - finishing - (sync_time_ - synced);
            running = Batch{};
            batches_.release();
        }
        walker.join();
        if (std::exception_ptr walk_error = batches_.walk_error())
            std::rethrow_exception(walk_error);
        const Clock::time_point finishing = Clock::now();
        const Clock::duration synced = sync_time_;
        link_spilled();
        if (!deferred_tops_.empty()) {
            sync_file_systems();
            for (const std::shared_ptr<Dir>& dir : deferred_tops_)
                publish(*dir);
        }
        walker_.restore_reopened();
        finish_time_ += Clock::now() - finishing - (sync_time_ - synced);
    } catch (...) {
        std::exception_ptr error = std::current_exception();
        stop_walker();
        try {
            std::rethrow_exception(error);
        } catch (const CopyStopped&) {
            if (std::exception_ptr walk_error = batches_.walk_error())
                error = walk_error;  // the walk failed first: that is the reason
        } catch (...) {
        }
        remove_temps(&running);
        std::rethrow_exception(error);
    }
    fault_point("mover.before-dir-fsync");
    // The parents of the entries' destinations: new names (and trees renamed) in them.
    if (plan_.durable) {
        const Clock::time_point began = Clock::now();
        for (const std::string& dir : state_->syncs.dirs()) {
            const Fd fd = dst_->open_dir(dir);
            if (fsync(fd.get()) != 0)
                fail("sync directory", dst_->display(dir), errno);
        }
        sync_time_ += Clock::now() - began;
    }
    report(true);

    MoveSummary summary;
    summary.files = counts_.files_written.load();
    summary.bytes = counts_.bytes_written.load();
    summary.skipped = counts_.skipped.load();
    summary.warnings = warnings_.list();
    const Clock::time_point end = Clock::now();
    summary.seconds = seconds(end - start);
    summary.phases = phases(end);
    return summary;
}

MovePhases Mover::phases(Clock::time_point end) const {
    MovePhases p;
    p.walk = seconds(batches_.walk_time());
    p.wait = seconds(batches_.copy_waited());
    p.copy = seconds(copy_time_);
    p.finish = seconds(finish_time_);
    p.sync = seconds(sync_time_);
    p.threads = static_cast<unsigned>(workers_.size());
    p.seconds = seconds(end - start_);
    Clock::time_point first = end, last = start_;
    for (const Worker& worker : workers_) {
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
