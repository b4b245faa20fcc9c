// The copy of a batch (the executor's first step): its entries on the worker threads, large
// files' chunks first, then small files in runs of one directory; symlinks and fifos made.
// A durable move writes each entry under a temporary name (outside a temporary tree), which
// the finisher gives its final name once durable (finisher.hpp); otherwise entries take their
// names here. What it keeps is its own and read-only once made; what it writes it shares
// through MoveState (its counters, warnings, temporaries' names) and the nodes of the batch.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bbkit/fsops.hpp"
#include "bbkit/mover/chunk_marks.hpp"
#include "bbkit/mover/copy_file.hpp"
#include "bbkit/mover/move_state.hpp"
#include "bbkit/mover/move_types.hpp"
#include "bbkit/mover/worker_pool.hpp"

namespace bbkit::mover_internal {

// A large file copied by several workers: opened by the first chunk, finished by the last.
struct SharedFile {
    std::mutex mutex;
    bool opened = false;
    bool failed = false;  // opening or sizing it failed
    bool skip = false;
    FilePair pair;
    std::atomic<std::size_t> remaining{0};
    // A stage-in's: the chunks copied, marked on the destination as they are done, and those a
    // killed run marked, which a rerun does not copy again (chunk_marks.hpp). Null otherwise.
    std::unique_ptr<ChunkMarks> marks;
};

// One item of a worker: a small file, symlink or fifo, or one chunk of a large file.
struct Task {
    Node* node = nullptr;
    off_t offset = 0, length = 0;
    std::shared_ptr<SharedFile> shared;  // set for the chunks of a large file
};

class Copier {
  public:
    Copier(MoveState& state, WorkerPool& pool);

    // Every entry of the batch but its hard links (the finisher's), on the pool's workers.
    void copy(Batch& batch);

  private:
    void read_ahead(const std::vector<Task>& tasks, std::size_t first, std::size_t last,
                    Worker& worker);
    void run_task(const Task& task, Worker& worker);
    void copy_small_file(Node& node, Worker& worker);
    void copy_chunk(const Task& task, Worker& worker);
    void copy_symlink(Node& node, Worker& worker);
    void copy_fifo(Node& node, Worker& worker);
    FileCopy file_copy(const Node& node) const {
        return FileCopy{node.st, src_.display(node.src), dst_.display(node.dst)};
    }
    bool open_file(Node& node, const FileCopy& file, Worker& worker, FilePair& pair,
                   ChunkMarks* marks = nullptr);
    Fd resumable_destination(Node& node, int dir, const std::string& name, ChunkMarks& marks);
    Fd create_destination(Node& node, int dir, const std::string& name);
    void finish_file(const Node& node, const FileCopy& file, const FilePair& pair, bool truncate);
    void place(Node& node, int dir, const std::string& name);

    const MovePlan& plan_;
    const Side& src_;
    const Side& dst_;
    BatchQueue& batches_;
    MoveCounters& counts_;
    Warnings& warnings_;
    TempNames& temps_;
    WorkerPool& pool_;
    mode_t umask_ = 077;  // the process's, read once
};

}  // namespace bbkit::mover_internal
