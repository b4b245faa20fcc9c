// The copy's worker threads and what each keeps between items (Worker): the copier's entries
// and the finisher's renames run on them, while the calling thread reports progress. A pool
// lives as long as its move; its threads only as long as one run().
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "bbkit/fsops.hpp"
#include "bbkit/mover/batch_queue.hpp"
#include "bbkit/mover/copy_file.hpp"
#include "bbkit/mover/move_types.hpp"
#include "bbkit/mover/reporter.hpp"

namespace bbkit::mover_internal {

// What one worker thread keeps between items: its I/O buffers and the last parent directories
// it opened (files of one directory tend to be handed out together).
struct Worker {
    struct CachedDir {
        std::string path;
        Fd fd;
        bool valid = false;
        int get(const Side& side, const std::string& p) {
            if (valid && path == p)
                return fd.get();
            valid = false;
            fd = side.open_dir(p);
            path = p;
            valid = true;
            return fd.get();
        }
        void forget() { valid = false, fd.reset(), path.clear(); }
    };
    CachedDir src_dir, dst_dir;
    CopyBuffers buffers;
    // Where its time went (MovePhases): copying, and its first and last copy (unset: none).
    Clock::duration busy{};
    Clock::time_point first_copy{}, last_copy{};
};

class WorkerPool {
  public:
    WorkerPool(unsigned threads, BatchQueue& batches, Reporter& reporter);

    // fn(i, worker) for every i below `count`, on up to one thread per worker, while the
    // calling thread reports progress. The first failure stops the move (the rest do not
    // start) and is rethrown here; a move stopped meanwhile (the walk failed) throws
    // CopyStopped.
    void run(std::size_t count, const std::function<void(std::size_t, Worker&)>& fn);
    // Directories were replaced or renamed: no descriptor cached by path outlives its batch.
    void forget_dirs();
    const std::vector<Worker>& workers() const { return workers_; }

  private:
    std::vector<Worker> workers_;
    BatchQueue& batches_;
    Reporter& reporter_;
};

}  // namespace bbkit::mover_internal
