#include "bbkit/mover/batch_queue.hpp"

#include <utility>

namespace bbkit::mover_internal {

Clock::duration BatchQueue::wait(std::unique_lock<std::mutex>& lock,
                                 const std::function<bool()>& ready) {
    const Clock::time_point began = Clock::now();
    changed_.wait(lock, [&] { return ready() || stopped(); });
    return Clock::now() - began;
}

void BatchQueue::push(Batch batch) {
    std::unique_lock<std::mutex> lock(mutex_);
    walk_idle_ += wait(lock, [&] { return queue_.size() < capacity_; });
    check_stopped();
    queue_.push_back(std::move(batch));
    changed_.notify_all();
}

void BatchQueue::drain() {
    std::unique_lock<std::mutex> lock(mutex_);
    walk_idle_ += wait(lock, [&] { return queue_.empty() && !busy_; });
    check_stopped();
}

void BatchQueue::finish(std::exception_ptr error, Clock::duration walked) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error) {
        walk_error_ = std::move(error);
        stop_ = true;
    }
    walk_time_ = walked > walk_idle_ ? walked - walk_idle_ : Clock::duration{};
    finished_ = true;
    changed_.notify_all();
}

std::optional<Batch> BatchQueue::take(Clock::duration tick, const std::function<void()>& waiting) {
    std::unique_lock<std::mutex> lock(mutex_);
    const Clock::time_point began = Clock::now();
    while (queue_.empty() && !finished_) {
        changed_.wait_for(lock, tick);
        lock.unlock();
        waiting();
        lock.lock();
    }
    copy_waited_ += Clock::now() - began;
    if (queue_.empty())
        return std::nullopt;
    Batch batch = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    changed_.notify_all();
    return batch;
}

void BatchQueue::release() {
    std::lock_guard<std::mutex> lock(mutex_);
    busy_ = false;
    changed_.notify_all();
}

void BatchQueue::stop() {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    changed_.notify_all();
}

std::exception_ptr BatchQueue::walk_error() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return walk_error_;
}

Clock::duration BatchQueue::walk_time() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return walk_time_;
}

Clock::duration BatchQueue::copy_waited() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return copy_waited_;
}

}  // namespace bbkit::mover_internal
