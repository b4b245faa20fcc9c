#include "bbkit/mover/mover_private.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "bbkit/fault.hpp"

namespace bbkit::mover_internal {

// ---- batches ------------------------------------------------------------------------------

namespace {

// Small files are handed out in runs of this many from one directory, runs of different
// directories in turn: workers then create in different directories (a create holds its
// directory's lock, and on a cold cache may wait for an inode table read while holding it),
// and each keeps its cached directory descriptors for a whole run.
constexpr std::size_t files_per_run = 16;

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

// Runs fn(i, worker) for every i below `count` on the worker threads while the calling thread
// reports progress; the first failure stops the rest from starting and is rethrown.
template <class Fn>
void Mover::run_parallel(std::size_t count, Fn fn) {
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
                report(false);
                lock.lock();
            }
        } catch (...) {
            batches_.stop();  // a throwing progress callback: let the workers wind down
            throw;
        }
    }
    if (error)
        std::rethrow_exception(error);
    check_stopped();  // the walker failed meanwhile
}

// Chunks of large files first, in walk order (each large file is shared by all workers at
// once, so only a few files are open at any time), then the small files in runs of one
// directory, directories in turn: workers then create in different directories (a create
// holds its directory's lock, and on a cold cache may wait for an inode table read while
// holding it), and each keeps its cached directory descriptors for a whole run.
void Mover::copy_batch(Batch& batch) {
    std::vector<Task> tasks;
    std::vector<std::pair<std::size_t, std::size_t>> runs;  // [first, last) of tasks
    std::map<const Dir*, std::vector<Node*>> by_dir;
    std::vector<const Dir*> dir_order;
    for (Node& node : batch.nodes) {
        if (node.kind == Kind::hard_link)
            continue;
        if (node.kind != Kind::file || node.st.st_size < large_file) {
            auto [it, first] = by_dir.try_emplace(node.parent.get());
            if (first)
                dir_order.push_back(node.parent.get());
            it->second.push_back(&node);
            continue;
        }
        auto shared = std::make_shared<SharedFile>();
        const std::size_t chunks =
            static_cast<std::size_t>((node.st.st_size + chunk_bytes - 1) / chunk_bytes);
        shared->remaining = chunks;
        for (std::size_t c = 0; c < chunks; ++c) {
            const off_t offset = static_cast<off_t>(c) * chunk_bytes;
            runs.emplace_back(tasks.size(), tasks.size() + 1);
            tasks.push_back(
                Task{&node, offset, std::min(chunk_bytes, node.st.st_size - offset), shared});
        }
    }
    std::vector<std::pair<const std::vector<Node*>*, std::size_t>> active;
    for (const Dir* dir : dir_order)
        active.emplace_back(&by_dir[dir], 0);
    while (!active.empty()) {
        for (auto& [files, cursor] : active) {
            const std::size_t end = std::min(files->size(), cursor + files_per_run);
            const std::size_t first = tasks.size();
            for (; cursor < end; ++cursor)
                tasks.push_back(Task{(*files)[cursor], 0, 0, nullptr});
            runs.emplace_back(first, tasks.size());
        }
        active.erase(std::remove_if(active.begin(), active.end(),
                                    [](const auto& a) { return a.second >= a.first->size(); }),
                     active.end());
    }
    run_parallel(runs.size(), [&](std::size_t r, Worker& worker) {
        const Clock::time_point began = Clock::now();
        if (worker.first_copy == Clock::time_point{})
            worker.first_copy = began;
        read_ahead(tasks, runs[r].first, runs[r].second, worker);
        for (std::size_t t = runs[r].first; t < runs[r].second; ++t) {
            check_stopped();
            run_task(tasks[t], worker);
        }
        worker.last_copy = Clock::now();
        worker.busy += worker.last_copy - began;
    });
}

// The small files of a run (one source directory) have their data read ahead, all at once,
// before the first is copied: on a cold cache each worker then waits for the disk once per run
// rather than once per file. Best effort: a file that cannot be opened here is left to the
// copy, which reports why. Never follows a symlink or blocks on a fifo put in a file's place.
void Mover::read_ahead(const std::vector<Task>& tasks, std::size_t first, std::size_t last,
                       Worker& worker) {
    if (last - first < 2)
        return;
    for (std::size_t t = first; t < last; ++t) {
        const Node& node = *tasks[t].node;
        if (tasks[t].shared || node.kind != Kind::file || node.st.st_size <= 0 ||
            node.st.st_size > read_ahead_max)
            continue;
        const auto [parent, name] = split_last(node.src);
        const Fd fd(openat(worker.src_dir.get(*src_, parent), name.c_str(),
                           O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
        if (fd)
            posix_fadvise(fd.get(), 0, node.st.st_size, POSIX_FADV_WILLNEED);
    }
}

// After the copy of a batch: its temporaries take their final names once durable, its hard
// links are made, then the directories whose walk ended in it get their modes and times
// (a 0500 directory had to stay writable while filled), post-order so a directory is final
// only after everything below it. Temporary trees complete in this batch are synced and
// renamed into place before the directories around them are finished (a rename changes its
// parent's times).
void Mover::finish_batch(Batch& batch) {
    const bool durable = plan_.durable;
    if (durable) {
        std::vector<Node*> pending;
        bool links_to_unsynced = false;  // a final name would reach data not yet durable
        for (Node& node : batch.nodes) {
            if (!node.temp.empty())
                pending.push_back(&node);
            if (node.kind == Kind::hard_link && !in_temp_tree(node) && node.link.tree &&
                !node.link.tree->published)
                links_to_unsynced = true;
        }
        fault_point("mover.before-syncfs");
        if (!pending.empty() || links_to_unsynced)
            sync_file_systems();
        fault_point("mover.before-renames");
        // Every temporary now holds durable bytes: only now may it take its final name.
        run_parallel(pending.size(), [&](std::size_t i, Worker& worker) {
            Node& node = *pending[i];
            const std::string name = split_last(node.dst).second;
            const int dir = worker.dst_dir.get(*dst_, parent_path(node));
            if (node.keep_existing) {
                put_without_replacing(node, dir, name);
            } else {
                if (renameat(dir, node.temp.c_str(), dir, name.c_str()) != 0)
                    fail("rename into place", dst_->display(node.dst), errno);
                node.temp.clear();
            }
            fault_point("mover.renamed");
        });
    }
    for (Node& node : batch.nodes)
        if (node.kind == Kind::hard_link)
            make_link(node);
    bool tops = false;
    for (const std::shared_ptr<Dir>& dir : batch.closed) {
        if (dir->tree) {
            apply_dir_metadata(*dir, durable && !plan_.trust_syncfs);
            if (dir->top && dir->tree->deferred)
                deferred_tops_.push_back(dir);
            else
                tops = tops || dir->top;
        }
    }
    if (durable) {
        fault_point("mover.before-dir-renames");
        if (tops) {
            sync_file_systems();
            for (const std::shared_ptr<Dir>& dir : batch.closed)
                if (dir->top && !dir->tree->deferred)
                    publish(*dir);
        }
    }
    fault_point("mover.before-dir-metadata");
    for (const std::shared_ptr<Dir>& dir : batch.closed)
        if (!dir->tree)
            apply_dir_metadata(*dir, durable);
    // Directories were replaced or renamed: no descriptor cached by path outlives its batch.
    for (Worker& worker : workers_) {
        worker.src_dir.forget();
        worker.dst_dir.forget();
    }
    fault_point("mover.batch-done");
}

}  // namespace bbkit::mover_internal
