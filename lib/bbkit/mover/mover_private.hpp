// The Mover behind run_move (mover.hpp): the copy of a move (the executor: the calling thread
// and its workers) and the owner of the rest, the walk (Walker, on its own thread) and what the
// two share (MoveState). Private to lib/bbkit/mover/; the copy's files: batches.cpp (a batch on
// the workers, then finished), copy_entries.cpp (one entry), finish.cpp (syncs, links,
// directories' metadata, trees into place) and run.cpp (set-up, run(), progress)
// (ARCHITECTURE.md).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/mover.hpp"
#include "bbkit/mover/chunk_marks.hpp"
#include "bbkit/mover/common.hpp"
#include "bbkit/mover/copy_file.hpp"
#include "bbkit/mover/copy_metadata.hpp"
#include "bbkit/mover/link_spill.hpp"
#include "bbkit/mover/move_state.hpp"
#include "bbkit/mover/move_types.hpp"
#include "bbkit/mover/walker.hpp"

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

struct Task {
    Node* node = nullptr;
    off_t offset = 0, length = 0;
    std::shared_ptr<SharedFile> shared;  // set for the chunks of a large file
};

class Mover {
  public:
    Mover(const MovePlan& plan, const std::function<void(const MoveProgress&)>& progress);
    MoveSummary run();

  private:
    // copy (the executor: the calling thread and the workers): batches.cpp, then each entry
    // in copy_entries.cpp
    void run_batch(Batch& batch);
    void copy_batch(Batch& batch);
    void finish_batch(Batch& batch);
    void run_task(const Task& task, Worker& worker);
    void copy_small_file(Node& node, Worker& worker);
    void copy_chunk(const Task& task, Worker& worker);
    void read_ahead(const std::vector<Task>& tasks, std::size_t first, std::size_t last,
                    Worker& worker);
    FileCopy file_copy(const Node& node) const {
        return FileCopy{node.st, src_->display(node.src), dst_->display(node.dst)};
    }
    std::string parent_path(const Node& node) const {
        return node.parent ? node.parent->at : split_last(node.dst).first;
    }
    bool open_file(Node& node, const FileCopy& file, Worker& worker, FilePair& pair,
                   ChunkMarks* marks = nullptr);
    Fd resumable_destination(Node& node, int dir, const std::string& name, ChunkMarks& marks);
    Fd create_destination(Node& node, int dir, const std::string& name);
    void finish_file(const Node& node, const FileCopy& file, const FilePair& pair, bool truncate);
    void copy_symlink(Node& node, Worker& worker);
    void copy_fifo(Node& node, Worker& worker);
    void place(Node& node, int dir, const std::string& name);
    // keep_existing: copy_entries.cpp
    void refuse_taken(int dir, const std::string& name, const std::string& dst) const;
    bool same_as_source(const Node& node, int dir, const std::string& name, int copy_dir,
                        const std::string& copy) const;
    void put_without_replacing(Node& node, int dir, const std::string& name);
    // finish: finish.cpp
    void sync_file_systems();
    void make_link(Node& node);
    void apply_dir_metadata(const Dir& dir, bool sync);
    void publish(Dir& dir);
    void link_spilled();
    void remove_temps(Batch* batch) noexcept;

    // run.cpp (run_parallel: batches.cpp)
    template <class Fn>
    void run_parallel(std::size_t count, Fn fn);
    void report(bool force);
    MovePhases phases(Clock::time_point end) const;
    static double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
    void check_stopped() const { batches_.check_stopped(); }

    const MovePlan& plan_;
    const std::function<void(const MoveProgress&)>& progress_;
    const std::unique_ptr<MoveState> state_;  // shared with the walk
    // Short names for the shared parts the copy uses most (MoveState's).
    const Side* src_;
    const Side* dst_;
    BatchQueue& batches_;
    MoveCounters& counts_;
    Warnings& warnings_;
    TempNames& temps_;
    Walker walker_;  // its state is its own; run() reads it only once its thread has ended

    std::vector<Worker> workers_;
    std::vector<std::shared_ptr<Dir>> deferred_tops_;  // see TempTree::deferred

    // Phase times (MovePhases): the executor's own; the walk's and the copy's waits are the
    // queue's (BatchQueue).
    Clock::time_point start_{};
    Clock::duration copy_time_{}, finish_time_{}, sync_time_{};
    Clock::time_point last_report_{};
    bool syncing_ = false;  // the calling thread's: it waits in syncfs
    mode_t umask_ = 077;    // the process's, read once
};

}  // namespace bbkit::mover_internal
