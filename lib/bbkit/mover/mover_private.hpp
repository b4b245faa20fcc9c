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
#include "bbkit/mover/walk_ahead.hpp"

namespace bbkit::mover_internal {

using Clock = std::chrono::steady_clock;

// Progress is reported at most this often (run_move, mover.hpp).
constexpr auto progress_interval = std::chrono::milliseconds(100);
// Files at least this large are split into chunks so several workers (and several requests in
// flight on the device) share one file; below it a file is one worker's job. A stage-in marks
// each chunk done on the destination (chunk_marks.hpp).
constexpr off_t large_file = off_t{64} << 20;
constexpr off_t chunk_bytes = off_t{32} << 20;
// Small files up to this size are read ahead a run at a time (Mover::read_ahead).
constexpr off_t read_ahead_max = off_t{1} << 20;

// "a/b" -> {"a", "b"}, "b" -> {"", "b"}, "/b" -> {"/", "b"}.
inline std::pair<std::string, std::string> split_last(const std::string& path) {
    const auto slash = path.rfind('/');
    if (slash == std::string::npos)
        return {"", path};
    return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// One side of a move: the buffer (descriptors beneath its root, never a symlink) or the
// outside (plain paths, the user's own permissions).
class Side {
  public:
    Side(bool in_buffer, int root, std::string root_path, FailureKind kind)
        : in_buffer_(in_buffer), root_(root), root_path_(std::move(root_path)), kind_(kind) {}

    bool in_buffer() const { return in_buffer_; }
    // What a failure here is: FailureKind::source or FailureKind::destination.
    FailureKind kind() const { return kind_; }
    int root() const { return root_; }

    std::string display(const std::string& path) const {
        if (!in_buffer_)
            return path;
        return path.empty() ? root_path_ : root_path_ + "/" + path;
    }

    std::string join(const std::string& dir, const std::string& name) const {
        if (in_buffer_)
            return dir.empty() ? name : dir + "/" + name;
        return dir == "/" ? "/" + name : dir + "/" + name;
    }

    // Opens a directory; `nofollow` refuses a symlink as the last component outside (the
    // buffer side never follows any symlink at all).
    Fd open_dir(const std::string& path, bool nofollow = false) const {
        if (in_buffer_) {
            return typed(kind_, display(path), [&] {
                return open_beneath(root_, path.empty() ? "." : path, O_RDONLY | O_DIRECTORY,
                                    display(path));
            });
        }
        const int fd =
            ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0));
        if (fd < 0)
            fail_as(kind_, "open directory", path, errno);
        return Fd(fd);
    }

    // lstat; false when the path (or one of its parents) does not exist.
    bool stat_entry(const std::string& path, struct stat& st) const {
        if (in_buffer_ && path.empty()) {
            if (fstat(root_, &st) != 0)
                fail_as(kind_, "stat", root_path_, errno);
            return true;
        }
        const auto [parent, name] = split_last(path);
        Fd dir;
        try {
            dir = open_dir(parent);
        } catch (const Error& e) {
            if (e.code() == ExitCode::no_input)
                return false;
            throw;
        }
        if (fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
            return true;
        if (errno == ENOENT || errno == ENOTDIR)
            return false;
        fail_as(kind_, "stat", display(path), errno);
    }

  private:
    bool in_buffer_;
    int root_;
    std::string root_path_;
    FailureKind kind_;
};

enum class Kind { file, symlink, fifo, hard_link };

// Entries a batch holds at most, and what one costs besides its two paths (the node, its task,
// the allocator's share): a batch is closed at whichever bound it reaches first.
constexpr std::size_t max_batch_entries = 16384;
constexpr std::size_t entry_overhead = 512;
// The first batch is this small, and each next one twice the last up to the bound: the copy
// starts once a few entries are walked, not a whole batch (the time before the first byte is
// serial), and later batches are large enough that finishing them costs little.
constexpr std::size_t first_batch_entries = 256;
// Batches alive at once: one being walked, one queued, one being copied.
constexpr std::size_t queued_batches = 1;

// A directory tree a durable move builds under a temporary name beside its final one, and
// renames into place once everything in it is durable: no temporary and rename per file in
// it, and no final name below it before it is complete.
struct TempTree {
    std::string dst;   // its final path
    std::string at;    // where it is reached until then: its parent joined with `temp`
    std::string temp;  // the temporary name in the parent
    bool published = false;
    bool adopted = false;  // a killed move's, taken over: it may hold what the source lacks
    // Holds files whose hard links are made at the very end (LinkSpill): renamed into place
    // only after them. Set by the walker while the tree is still open, read after it closed.
    std::atomic<bool> deferred{false};
};

// A destination directory, alive while its entries are walked or waiting to be copied.
struct Dir {
    std::string src, dst;  // paths on their sides
    std::string at;        // where it is reached now (through its temporary tree, if any)
    struct stat st {};
    bool keep_metadata = false;      // the buffer root: bbkit owns its mode
    bool created = false;            // made by this move, so nothing is in it yet
    std::shared_ptr<TempTree> tree;  // the temporary tree it is in (or the top of)
    bool top = false;                // it is the top of `tree`
    NewFileDefaults new_files;       // created directories: what a file made in it gets
};

// Where the first copy of a multiply-linked file is.
struct LinkTarget {
    std::string dst;
    std::shared_ptr<TempTree> tree;
    nlink_t remaining = 0;  // names of the inode not met yet (the map forgets it at 0)
};

struct Node {
    Kind kind = Kind::file;
    std::string src, dst;  // paths on their sides
    struct stat st {};
    std::shared_ptr<Dir> parent;  // null for an entry of type=file (its parent is not walked)
    std::string temp;             // durable moves: the name written before the rename
    InitialMetadata initial;      // files: what creating it already got right
    LinkTarget link;              // hard_link: the copy this name links to
    bool keep_existing = false;   // its entry's (MoveEntry::keep_existing)
};

// What the walk hands to the copy at once.
struct Batch {
    std::vector<Node> nodes;
    // Directories whose walk ended while this batch was filled, deepest first: their modes and
    // times are applied once the batch is copied.
    std::vector<std::shared_ptr<Dir>> closed;
    std::size_t bytes = 0;  // estimated memory
};

// A keep_existing entry's refusal of what another writer put at a name (MoveEntry).
inline Error taken_by_another(const std::string& shown) {
    return refusal(FailureKind::destination, ExitCode::exists,
                   "exists (another node's result): " + shown, shown);
}

inline bool in_new_dir(const Node& node) {
    return node.parent && node.parent->created;
}
inline bool in_temp_tree(const Node& node) {
    return node.parent && node.parent->tree;
}

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

// A directory being walked: its source stream, and the stale temporaries of a killed move in
// its destination that a source name may own.
struct Frame {
    std::shared_ptr<Dir> dir;
    std::unique_ptr<DirStream> stream;  // the source directory (its fd() for *at calls)
    int fd() const { return stream->fd(); }
    std::map<std::string, std::vector<std::string>> tagged;  // long names' tags -> temporaries
    std::map<std::string, std::string> adoptable;            // name -> its temporary tree
};

// The names of temporaries (temporaries.cpp).
std::string long_name_tag(const std::string& name);
std::string temp_owner(const std::string& entry);
std::string temp_tag(const std::string& token);

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
    std::string temp_name(const std::string& name);
    bool ours(const std::string& temp) const;
    bool tagged_ours(const std::string& temp) const;
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
    void warn(const std::string& message);
    void check_stopped() const {
        if (stop_.load(std::memory_order_relaxed))
            throw CopyStopped{};
    }

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
    std::unordered_map<std::uint64_t, std::unordered_map<std::uint64_t, LinkTarget>> links_;
    std::size_t link_bytes_ = 0;
    bool link_overflow_ = false;
    std::unique_ptr<LinkSpill> spill_;
    std::uint64_t capacity_counted_ = 0;  // see MovePlan::capacity
    std::unique_ptr<WalkAhead> ahead_;    // reads directories ahead of the walk (run())

    // Between the walker and the executor.
    std::mutex queue_mutex_;
    std::condition_variable queue_changed_;
    std::deque<Batch> queue_;
    bool walk_finished_ = false;  // no more batches will come
    bool busy_ = false;           // the executor holds a batch
    std::exception_ptr walk_error_;
    std::mutex trees_mutex_;
    std::set<std::shared_ptr<TempTree>> open_trees_;  // not yet published
    std::mutex sync_mutex_;
    std::vector<Fd> file_systems_;  // one descriptor per destination file system
    std::set<dev_t> file_system_ids_;
    std::set<std::string> dirs_to_sync_;  // destination directories outside the walked trees

    // Phase times (MovePhases). The walker's is written before walk_finished_ is set; the
    // others are the executor's own.
    Clock::time_point start_{};
    Clock::duration walk_time_{}, wait_time_{}, copy_time_{}, finish_time_{}, sync_time_{};
    Clock::duration walk_idle_{};  // the walker's own: waiting for the copy to take a batch

    std::atomic<bool> stop_{false};
    std::atomic<bool> walk_done_{false};
    std::atomic<std::uint64_t> files_done_{0}, bytes_done_{0};
    std::atomic<std::uint64_t> files_total_{0}, bytes_total_{0};
    std::atomic<std::uint64_t> files_written_{0}, bytes_written_{0}, skipped_{0};
    Clock::time_point last_report_{};
    bool syncing_ = false;  // the calling thread's: it waits in syncfs

    std::mutex warnings_mutex_;
    std::vector<std::string> warnings_;
    std::set<std::string> warned_;
    std::size_t warnings_dropped_ = 0;
    const CopyWarning warning_ = [this](const std::string& message) { warn(message); };

    mode_t umask_ = 077;       // the process's, read once
    uid_t uid_ = 0;            // the user the move runs as
    std::string temp_tag_;     // see temp_tag()
    std::string temp_prefix_;  // the tag and this move's own 8 digits
    std::atomic<std::uint64_t> temp_counter_{0};
};

}  // namespace bbkit::mover_internal
