// The hand-off between a move's walk and its copy: batches walked and not yet taken, at most
// `capacity` of them; whether the copy holds one; the walk's end and the failure that ended
// it; and the stop every thread of the move obeys. One mutex guards all of it; the stop flag is
// also read without it, by the copy's workers between files (stopped()). The walk waits here
// when it is ahead (the queue is full) and the copy when it is (the queue is empty): the times
// each waited are what MovePhases reports (stage_plan.hpp).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>

#include "bbkit/mover/copy_file.hpp"
#include "bbkit/mover/move_types.hpp"

namespace bbkit::mover_internal {

class BatchQueue {
  public:
    explicit BatchQueue(std::size_t capacity) : capacity_(capacity) {}

    // The walk: queues `batch`, waiting while `capacity` batches wait already. Throws
    // CopyStopped (copy_file.hpp) once the move is stopped.
    void push(Batch batch);
    // The walk: waits until every batch queued is taken and released (copied and finished).
    // Throws CopyStopped once the move is stopped.
    void drain();
    // The walk, at its end: no batch comes any more. `error`, when set, is why the walk ended
    // early: kept for walk_error() and the move stopped. `walked`: the walk's time, less what
    // it waited here.
    void finish(std::exception_ptr error, Clock::duration walked);

    // The copy: the next batch, in the order pushed (the copy holds it until release()); none
    // when the walk has finished and every batch was taken. While it waits, `waiting` is
    // called every `tick` (progress reports).
    std::optional<Batch> take(Clock::duration tick, const std::function<void()>& waiting);
    // The copy: the batch taken is copied and finished.
    void release();

    // Anyone: stops the move; push() and drain() throw CopyStopped from now on.
    void stop();
    bool stopped() const { return stop_.load(std::memory_order_relaxed); }
    // What copy_file's loops poll (copy_file.hpp).
    const std::atomic<bool>& stop_flag() const { return stop_; }
    // Throws CopyStopped when stopped: for the loops of the walk and the workers.
    void check_stopped() const {
        if (stopped())
            throw CopyStopped{};
    }

    // Once the walk has finished: what ended it early (null when it ended by itself), and its
    // working time.
    std::exception_ptr walk_error() const;
    Clock::duration walk_time() const;
    // The copy's time waiting in take().
    Clock::duration copy_waited() const;

  private:
    Clock::duration wait(std::unique_lock<std::mutex>& lock, const std::function<bool()>& ready);

    const std::size_t capacity_;
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<Batch> queue_;
    bool finished_ = false;  // the walk has ended: no batch comes any more
    bool busy_ = false;      // the copy holds a batch
    std::exception_ptr walk_error_;
    std::atomic<bool> stop_{false};
    Clock::duration walk_idle_{};  // the walk's waits in push() and drain()
    Clock::duration walk_time_{};
    Clock::duration copy_waited_{};
};

}  // namespace bbkit::mover_internal
