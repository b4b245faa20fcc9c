// The Mover behind run_move (mover.hpp): its class, and the structures and helpers its files
// share. Private to lib/bbkit/mover/, where each concern of the Mover is one file: walk.cpp,
// directories.cpp, temporaries.cpp, batches.cpp, copy_entries.cpp, finish.cpp and run.cpp
// (ARCHITECTURE.md).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
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
#include "bbkit/mover/batch_queue.hpp"
#include "bbkit/mover/chunk_marks.hpp"
#include "bbkit/mover/common.hpp"
#include "bbkit/mover/copy_file.hpp"
#include "bbkit/mover/copy_metadata.hpp"
#include "bbkit/mover/link_spill.hpp"
#include "bbkit/mover/link_table.hpp"
#include "bbkit/mover/move_types.hpp"
#include "bbkit/mover/tally.hpp"
#include "bbkit/mover/temp_names.hpp"
#include "bbkit/mover/walk_ahead.hpp"

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
    // walk (the walker thread): walk.cpp
    void walk();
    void walk_entry(const MoveEntry& entry);
    void walk_tree(const std::shared_ptr<Dir>& top);
    void open_frame(Frame& frame, int parent_fd);
    void close_frame(Frame& frame);
    void add_node(const std::string& src, const std::string& dst, const struct stat& st,
                  const std::shared_ptr<Dir>& parent);
    void account(std::size_t bytes);
    void hand_over();
    void drain();
    bool overlaps_earlier(const std::string& dst) const;
    bool inside_earlier(const std::string& path) const;
    void reopen_earlier(const std::string& dst);
    void restore_reopened();
    void note_lookalike(const std::string& dst);
    bool kept_lookalike(const std::string& path) const;
    void prune_adopted(Frame& frame);
    bool in_shard(std::string_view relative) const;
    // directories: directories.cpp
    void make_parents(const std::string& path);
    void watch_file_system(const std::string& dir);
    std::shared_ptr<Dir> make_dir(const std::string& src, const std::string& dst,
                                  const struct stat& st, const Dir* parent, std::string adopt);
    void learn_new_dir(Dir& dir) {
        dir.new_files = new_file_defaults(dst_->open_dir(dir.at, true).get());
    }
    // temporaries: temporaries.cpp
    bool can_adopt(const std::string& temp, const struct stat& st, const struct stat& source) const;
    bool owned(int dir, const std::string& name) const;
    bool may_remove_stale(const std::string& temp) const;
    void scan_stale_temps(Frame& frame);
    std::vector<std::pair<std::string, std::string>>& temps_beside(const std::string& dir);
    void remove_stale(const std::string& dir, int fd, const std::string& name);
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
    Fd buffer_root_;
    std::unique_ptr<Side> src_, dst_;
    std::vector<Worker> workers_;
    std::size_t batch_entries_ = max_batch_entries;
    std::size_t batch_bytes_ = 0;
    std::size_t batch_limit_ = 0;  // the batch being filled: doubles from the first's to the max

    // The walker's own.
    Batch batch_;
    const MoveEntry* entry_ = nullptr;  // the entry being walked
    // How much of a walked source path is the entry's source root (and its '/'): the rest is
    // what a sharded entry hashes (shard.hpp).
    std::size_t shard_prefix_ = 0;
    std::set<std::string> entry_tops_;  // destination of each entry walked so far
    bool covers_all_ = false;           // an entry's destination was the whole buffer or "/"
    bool overlapping_ = false;          // the entry being walked overlaps an earlier one
    // Destinations written so far whose names look like temporaries (the user's own files):
    // a later entry into the same directory must not take them for a killed move's.
    std::set<std::string> lookalikes_;
    bool lookalikes_overflow_ = false;
    // The entry's destination directory, never walked as a source (a destination inside the
    // source would otherwise be walked while it is being written).
    dev_t top_dev_ = 0;
    ino_t top_ino_ = 0;
    // Directories an earlier entry finished that a later one writes into: their mode and times
    // as that entry left them, put back at the end.
    std::map<std::string, struct stat> reopened_;
    std::vector<std::shared_ptr<Dir>> deferred_tops_;  // the executor's: see TempTree::deferred
    std::map<std::string, std::vector<std::pair<std::string, std::string>>> entry_temps_;
    std::optional<LinkTable> links_;      // made once the buffer's root is open
    std::uint64_t capacity_counted_ = 0;  // see MovePlan::capacity
    std::unique_ptr<WalkAhead> ahead_;    // reads directories ahead of the walk (run())

    // Between the walker and the executor: the batches, the move's stop, the walk's end.
    BatchQueue batches_{queued_batches};
    std::mutex trees_mutex_;
    std::set<std::shared_ptr<TempTree>> open_trees_;  // not yet published
    std::mutex sync_mutex_;
    std::vector<Fd> file_systems_;  // one descriptor per destination file system
    std::set<dev_t> file_system_ids_;
    std::set<std::string> dirs_to_sync_;  // destination directories outside the walked trees

    // Phase times (MovePhases): the executor's own; the walk's and the copy's waits are the
    // queue's (BatchQueue).
    Clock::time_point start_{};
    Clock::duration copy_time_{}, finish_time_{}, sync_time_{};

    MoveCounters counts_;
    Clock::time_point last_report_{};
    bool syncing_ = false;  // the calling thread's: it waits in syncfs

    Warnings warnings_;

    mode_t umask_ = 077;  // the process's, read once
    uid_t uid_ = 0;       // the user the move runs as
    // This move's temporaries' names, under the buffer's tag for this boot: a temporary tree
    // of a move of this buffer killed in this boot holds what the page cache holds, which the
    // next move's sync makes durable (see scan_stale_temps).
    TempNames temps_;
};

}  // namespace bbkit::mover_internal
