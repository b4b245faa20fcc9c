#include "bbkit/mover/worker_pool.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

namespace bbkit::mover_internal {

namespace {

// Joins every thread it started, whatever happens.
class ThreadGroup {
  public:
    ThreadGroup() = default;
    ThreadGroup(const ThreadGroup&) = delete;
    ThreadGroup& operator=(const ThreadGroup&) = delete;
    ~ThreadGroup() {
        for (std::thread& t : threads_)
            t.join();
    }
    template <class F>
    void start(F&& f) {
        threads_.emplace_back(std::forward<F>(f));
    }

  private:
    std::vector<std::thread> threads_;
};

}  // namespace

WorkerPool::WorkerPool(unsigned threads, BatchQueue& batches, Reporter& reporter)
    : workers_(std::max(1u, threads)), batches_(batches), reporter_(reporter) {}

void WorkerPool::run(std::size_t count, const std::function<void(std::size_t, Worker&)>& fn) {
    if (count == 0)
        return;
    std::atomic<std::size_t> next{0};
    std::mutex mutex;
    std::condition_variable done;
    std::exception_ptr error;
    std::size_t running = std::min<std::size_t>(workers_.size(), count);
    auto body = [&](Worker& worker) {
        try {
            while (!batches_.stopped()) {
                const std::size_t i = next.fetch_add(1);
                if (i >= count)
                    break;
                fn(i, worker);
            }
        } catch (const CopyStopped&) {
        } catch (...) {
            std::lock_guard<std::mutex> lock(mutex);
            if (!error)
                error = std::current_exception();
            batches_.stop();
        }
        std::lock_guard<std::mutex> lock(mutex);
        --running;
        done.notify_all();
    };
    {
        ThreadGroup group;
        const std::size_t n = running;
        for (std::size_t k = 0; k < n; ++k)
            group.start([&body, &worker = workers_[k]] { body(worker); });
        try {
            std::unique_lock<std::mutex> lock(mutex);
            while (running > 0) {
                done.wait_for(lock, progress_interval);
                lock.unlock();
                reporter_.report(false);
                lock.lock();
            }
        } catch (...) {
            batches_.stop();  // a throwing progress callback: let the workers wind down
            throw;
        }
    }
    if (error)
        std::rethrow_exception(error);
    batches_.check_stopped();  // the walker failed meanwhile
}

void WorkerPool::forget_dirs() {
    for (Worker& worker : workers_) {
        worker.src_dir.forget();
        worker.dst_dir.forget();
    }
}

}  // namespace bbkit::mover_internal
