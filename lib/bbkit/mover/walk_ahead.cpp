#include "bbkit/mover/walk_ahead.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <utility>

namespace bbkit::mover_internal {
namespace {

// How often a thread that is a budget ahead looks whether the walk has caught up (walked()
// does not wake it: the walk pays one relaxed add per entry, nothing more).
constexpr auto catch_up_poll = std::chrono::milliseconds(5);

}  // namespace

WalkAhead::WalkAhead(unsigned threads, std::uint64_t budget, std::size_t max_queued)
    : budget_(budget), max_queued_(max_queued) {
    threads_.reserve(threads);
    try {
        for (unsigned i = 0; i < threads; ++i)
            threads_.emplace_back([this] { run(); });
    } catch (...) {  // no thread to spare: the walk reads alone
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stop_ = true;
        }
        changed_.notify_all();
        for (std::thread& t : threads_)
            t.join();
        threads_.clear();
    }
}

WalkAhead::~WalkAhead() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    changed_.notify_all();
    for (std::thread& t : threads_)
        t.join();
}

void WalkAhead::read(Fd dir) {
    if (!dir || threads_.empty())
        return;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stop_ || queue_.size() >= max_queued_)
            return;
        queue_.push_back(std::move(dir));
    }
    changed_.notify_one();
}

void WalkAhead::run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        changed_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_)
            return;
        Fd dir = std::move(queue_.front());
        queue_.pop_front();
        // A budget ahead of the walk: wait for it, rather than fill the caches with what it
        // will not reach for a long time.
        while (!stop_ && read_.load() > walked_.load(std::memory_order_relaxed) + budget_)
            changed_.wait_for(lock, catch_up_poll);
        if (stop_)
            return;
        lock.unlock();
        read_directory(std::move(dir));
        lock.lock();
    }
}

void WalkAhead::read_directory(Fd dir) {
    DirStream stream(dir.get());
    if (!stream)
        return;
    dir.reset();  // the stream holds its own descriptor
    std::uint64_t entries = 0;
    while (const dirent* entry = stream.next()) {
        const char* name = entry->d_name;
        if (std::strcmp(name, ".") == 0 || std::strcmp(name, "..") == 0)
            continue;
        ++entries;
        struct stat st {};
        if (fstatat(stream.fd(), name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode))
            continue;
        Fd sub(openat(stream.fd(), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        read(std::move(sub));
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (stop_)
                break;
        }
    }
    read_.fetch_add(entries);
}

}  // namespace bbkit::mover_internal
