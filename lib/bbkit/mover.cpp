#include "bbkit/mover.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include "bbkit/copy_file.hpp"
#include "bbkit/copy_metadata.hpp"
#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/link_spill.hpp"
#include "bbkit/mover_internal.hpp"
#include "bbkit/process.hpp"
#include "bbkit/seal.hpp"
#include "bbkit/sources.hpp"

namespace bbkit {
namespace {

using mover_internal::fail;
using mover_internal::reason;
using mover_internal::same_mtime;

using Clock = std::chrono::steady_clock;

// Files at least this large are split into chunks so several workers (and several requests in
// flight on the device) share one file; below it a file is one worker's job.
constexpr off_t large_file = off_t{64} << 20;
constexpr off_t chunk_bytes = off_t{32} << 20;
// Small files are handed out in runs of this many from one directory, runs of different
// directories in turn: workers then create in different directories (a create holds its
// directory's lock, and on a cold cache may wait for an inode table read while holding it),
// and each keeps its cached directory descriptors for a whole run.
constexpr std::size_t files_per_run = 16;
constexpr std::size_t max_warnings = 100;
constexpr auto progress_interval = std::chrono::milliseconds(100);

// "a/b" -> {"a", "b"}, "b" -> {"", "b"}, "/b" -> {"/", "b"}.
std::pair<std::string, std::string> split_last(const std::string& path) {
    const auto slash = path.rfind('/');
    if (slash == std::string::npos)
        return {"", path};
    return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// Buffer paths are relative, outside paths absolute; neither may climb (directive.hpp's rule:
// in the buffer ".." could only lead out of it).
std::string normalize(const std::string& path, bool in_buffer, const std::string& what) {
    if (!in_buffer && (path.empty() || path[0] != '/'))
        throw Error(ExitCode::data, what + " '" + path + "' is not an absolute path");
    std::string out = in_buffer ? "" : "/";
    const std::string shown = what + " '" + path + "'";
    for (const std::string& part : path_components(
             path, shown + (in_buffer ? " leaves the buffer" : " must not contain '..'"))) {
        if (!out.empty() && out != "/")
            out += '/';
        out += part;
    }
    return out;
}

// One side of a move: the buffer (descriptors beneath its root, never a symlink) or the
// outside (plain paths, the user's own permissions).
class Side {
  public:
    Side(bool in_buffer, int root, std::string root_path)
        : in_buffer_(in_buffer), root_(root), root_path_(std::move(root_path)) {}

    bool in_buffer() const { return in_buffer_; }
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
            return open_beneath(root_, path.empty() ? "." : path, O_RDONLY | O_DIRECTORY,
                                display(path));
        }
        const int fd =
            ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0));
        if (fd < 0)
            fail("open directory " + path, errno);
        return Fd(fd);
    }

    // lstat; false when the path (or one of its parents) does not exist.
    bool stat_entry(const std::string& path, struct stat& st) const {
        if (in_buffer_ && path.empty()) {
            if (fstat(root_, &st) != 0)
                fail("stat " + root_path_, errno);
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
        fail("stat " + display(path), errno);
    }

  private:
    bool in_buffer_;
    int root_;
    std::string root_path_;
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
};

// What the walk hands to the copy at once.
struct Batch {
    std::vector<Node> nodes;
    // Directories whose walk ended while this batch was filled, deepest first: their modes and
    // times are applied once the batch is copied.
    std::vector<std::shared_ptr<Dir>> closed;
    std::size_t bytes = 0;  // estimated memory
};

bool in_new_dir(const Node& node) {
    return node.parent && node.parent->created;
}
bool in_temp_tree(const Node& node) {
    return node.parent && node.parent->tree;
}

// The path a link target is reached at now: through its temporary tree until that is in place.
std::string current_path(const LinkTarget& target) {
    if (!target.tree || target.tree->published)
        return target.dst;
    return target.tree->at + target.dst.substr(target.tree->dst.size());
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

// A large file copied by several workers: opened by the first chunk, finished by the last.
struct SharedFile {
    std::mutex mutex;
    bool opened = false;
    bool failed = false;  // opening or sizing it failed
    bool skip = false;
    FilePair pair;
    std::atomic<std::size_t> remaining{0};
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

// A temporary's suffix: the buffer's tag for this boot (16 hex digits, see temp_tag), 8 per
// move and 4 per file. Older movers wrote 20 (the boot's public hash, 8 per move, 4 per
// file): their temporaries are still recognised, and removed, never taken over.
constexpr std::size_t temp_tag_digits = 16;
constexpr std::size_t temp_prefix_digits = temp_tag_digits + 8;
constexpr std::size_t temp_suffix_digits = temp_prefix_digits + 4;
constexpr std::size_t old_temp_suffix_digits = 20;

std::string long_name_tag(const std::string& name) {
    return std::to_string(std::hash<std::string>{}(name));
}

// The name a temporary of temp_name() was made for, with a suffix of `suffix` digits: "" when
// `entry` is not shaped like one; a hash tag ("#" + tag) for the short form of long names.
std::string temp_owner(const std::string& entry, std::size_t suffix) {
    const std::string marker = ".bbkit-";
    if (entry.size() <= 1 + marker.size() + suffix || entry[0] != '.')
        return "";
    for (std::size_t i = entry.size() - suffix; i < entry.size(); ++i)
        if (!std::isxdigit(static_cast<unsigned char>(entry[i])) ||
            std::isupper(static_cast<unsigned char>(entry[i])))
            return "";
    const std::string head = entry.substr(0, entry.size() - suffix);  // ".NAME.bbkit-"
    if (head.size() > 1 + marker.size() &&
        head.compare(head.size() - marker.size(), marker.size(), marker) == 0)
        return head.substr(1, head.size() - 1 - marker.size());
    // ".bbkit-TAG-"
    if (head.compare(0, marker.size(), marker) == 0 && head.back() == '-' &&
        head.size() > marker.size() + 1) {
        const std::string tag = head.substr(marker.size(), head.size() - marker.size() - 1);
        if (std::all_of(tag.begin(), tag.end(),
                        [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
            return "#" + tag;
    }
    return "";
}

// Either suffix length: the digits before the suffix end in '-', which no suffix holds, so a
// name has at most one reading.
std::string temp_owner(const std::string& entry) {
    std::string owner = temp_owner(entry, temp_suffix_digits);
    return owner.empty() ? temp_owner(entry, old_temp_suffix_digits) : owner;
}

// What opens the suffix of every temporary a move of this buffer makes in this boot: a keyed
// hash of the boot id under the buffer's secret token. The boot id is public, the token is
// not: nobody else can name a temporary this buffer's next move would take over (bbkit(7),
// STAGING). Without a token, a random tag that no move will ever take over.
std::string temp_tag(const std::string& token) {
    if (token.empty())
        return random_hex(temp_tag_digits / 2);
    return to_hex(hmac_sha256(token, boot_id())).substr(0, temp_tag_digits);
}

class Mover {
  public:
    Mover(const MovePlan& plan, const std::function<void(const MoveProgress&)>& progress);
    MoveSummary run();

  private:
    // walk (the walker thread)
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
    // directories
    void make_parents(const std::string& path);
    void watch_file_system(const std::string& dir);
    std::shared_ptr<Dir> make_dir(const std::string& src, const std::string& dst,
                                  const struct stat& st, const Dir* parent, std::string adopt);
    void learn_new_dir(Dir& dir) {
        dir.new_files = new_file_defaults(dst_->open_dir(dir.at, true).get());
    }
    // temporaries
    std::string temp_name(const std::string& name);
    bool ours(const std::string& temp) const;
    bool tagged_ours(const std::string& temp) const;
    bool can_adopt(const std::string& temp, const struct stat& st, const struct stat& source) const;
    bool owned(int dir, const std::string& name) const;
    void scan_stale_temps(Frame& frame);
    std::vector<std::pair<std::string, std::string>>& temps_beside(const std::string& dir);
    void remove_stale(const std::string& dir, int fd, const std::string& name);
    // copy (the executor: the calling thread and the workers)
    void run_batch(Batch& batch);
    void copy_batch(Batch& batch);
    void finish_batch(Batch& batch);
    void run_task(const Task& task, Worker& worker);
    void copy_small_file(Node& node, Worker& worker);
    void copy_chunk(const Task& task, Worker& worker);
    FileCopy file_copy(const Node& node) const {
        return FileCopy{node.st, src_->display(node.src), dst_->display(node.dst)};
    }
    std::string parent_path(const Node& node) const {
        return node.parent ? node.parent->at : split_last(node.dst).first;
    }
    bool open_file(Node& node, const FileCopy& file, Worker& worker, FilePair& pair);
    Fd create_destination(Node& node, int dir, const std::string& name);
    void finish_file(const Node& node, const FileCopy& file, const FilePair& pair, bool truncate);
    void copy_symlink(Node& node, Worker& worker);
    void copy_fifo(Node& node, Worker& worker);
    void place(Node& node, int dir, const std::string& name);
    // finish
    void sync_file_systems();
    void make_link(Node& node);
    void apply_dir_metadata(const Dir& dir, bool sync);
    void publish(Dir& dir);
    void link_spilled();
    void remove_temps(Batch* batch) noexcept;

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

Mover::Mover(const MovePlan& plan, const std::function<void(const MoveProgress&)>& progress)
    : plan_(plan), progress_(progress) {
    const int fd =
        ::open(plan.buffer_root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        fail("open buffer directory " + plan.buffer_root, errno);
    buffer_root_ = Fd(fd);
    auto buffer = std::make_unique<Side>(true, buffer_root_.get(), plan.buffer_root);
    auto outside = std::make_unique<Side>(false, -1, "");
    if (plan.direction == MoveDirection::in) {
        src_ = std::move(outside);
        dst_ = std::move(buffer);
    } else {
        src_ = std::move(buffer);
        dst_ = std::move(outside);
    }
    workers_.resize(std::max(1u, plan.threads));
    // A sixteenth of the bound per batch: three batches alive, the hard links a quarter, the
    // workers' buffers and the allocator's slack the rest.
    batch_bytes_ = static_cast<std::size_t>(std::max<std::uint64_t>(plan.memory_limit / 16, 1));
    batch_entries_ = plan.batch_entries > 0 ? plan.batch_entries : max_batch_entries;
    batch_limit_ = std::min(first_batch_entries, batch_entries_);
    umask_ = umask(077);  // reading it means setting it: put it back at once
    umask(umask_);
    uid_ = geteuid();
    // The buffer's tag for this boot first: a temporary tree of a move of this buffer killed in
    // this boot holds what the page cache holds, which the next move's sync makes durable (see
    // scan_stale_temps).
    temp_tag_ = temp_tag(plan.temp_token);
    temp_prefix_ = temp_tag_ + random_hex(4);
}

void Mover::warn(const std::string& message) {
    std::lock_guard<std::mutex> lock(warnings_mutex_);
    if (warnings_.size() >= max_warnings) {  // nothing more is kept: memory stays bounded
        ++warnings_dropped_;
        return;
    }
    if (warned_.insert(message).second)
        warnings_.push_back(message);
}

void Mover::report(bool force) {
    const Clock::time_point now = Clock::now();
    if (!force && now - last_report_ < progress_interval)
        return;
    last_report_ = now;
    if (!progress_)
        return;
    progress_(MoveProgress{files_done_.load(), files_total_.load(), bytes_done_.load(),
                           bytes_total_.load(), !walk_done_.load(), syncing_});
}

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
            while (!stop_.load()) {
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
            stop_ = true;
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
            stop_ = true;  // a throwing progress callback: let the workers wind down
            throw;
        }
    }
    if (error)
        std::rethrow_exception(error);
    check_stopped();  // the walker failed meanwhile
}

// ---- walk -------------------------------------------------------------------------------

// The walker thread: every entry depth first, in batches; the last batch, or the failure that
// ended the walk, reaches the executor through the queue.
void Mover::walk() {
    const Clock::time_point began = Clock::now();
    try {
        for (const MoveEntry& entry : plan_.entries) {
            check_stopped();
            walk_entry(entry);
        }
        walk_done_ = true;
        fault_point("mover.walked");
        hand_over();
    } catch (const CopyStopped&) {
    } catch (...) {
        std::lock_guard<std::mutex> lock(queue_mutex_);
        walk_error_ = std::current_exception();
        stop_ = true;
    }
    std::lock_guard<std::mutex> lock(queue_mutex_);
    walk_time_ = Clock::now() - began;
    walk_finished_ = true;
    queue_changed_.notify_all();
}

// An entry whose destination is, holds or is inside an earlier one's waits until everything
// before it is copied and in place: it then finds those directories where they belong and
// merges into them, instead of building a second temporary tree for the same name.
bool Mover::inside_earlier(const std::string& path) const {
    if (covers_all_)
        return true;
    for (std::string p = path; !p.empty() && p != "/";) {
        if (entry_tops_.count(p) != 0)
            return true;
        const std::size_t slash = p.rfind('/');
        if (slash == std::string::npos)
            break;
        p.resize(slash == 0 ? 1 : slash);
    }
    return false;
}

bool Mover::overlaps_earlier(const std::string& dst) const {
    if (entry_tops_.empty() && !covers_all_)
        return false;
    if (dst.empty() || dst == "/" || inside_earlier(dst))
        return true;
    const std::string below = dst + "/";
    const auto next = entry_tops_.lower_bound(below);
    return next != entry_tops_.end() && next->compare(0, below.size(), below) == 0;
}

// The directories above `dst` that an earlier entry finished (their final mode and times are
// applied when their walk ends): opened up while this entry writes into them, their mode and
// times put back at the end.
void Mover::reopen_earlier(const std::string& dst) {
    for (std::string dir = split_last(dst).first; inside_earlier(dir);
         dir = split_last(dir).first) {
        struct stat st {};
        if (reopened_.count(dir) == 0 && dst_->stat_entry(dir, st) && S_ISDIR(st.st_mode)) {
            reopened_.emplace(dir, st);
            if ((st.st_mode & S_IRWXU) != S_IRWXU) {
                const Fd fd = dst_->open_dir(dir, true);
                if (fchmod(fd.get(), (st.st_mode & 07777) | S_IRWXU) != 0)
                    fail("make " + dst_->display(dir) + " writable", errno);
            }
        }
        if (dir.empty() || dir == "/")
            break;
    }
}

void Mover::restore_reopened() {
    std::vector<std::pair<std::string, struct stat>> dirs(reopened_.begin(), reopened_.end());
    std::sort(dirs.begin(), dirs.end(),
              [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    for (const auto& [dir, st] : dirs) {
        const Fd fd = dst_->open_dir(dir, true);
        const struct timespec times[2] = {st.st_atim, st.st_mtim};
        if (fchmod(fd.get(), st.st_mode & 07777) != 0 || futimens(fd.get(), times) != 0)
            fail("restore the mode and times of " + dst_->display(dir), errno);
        if (plan_.durable && fsync(fd.get()) != 0)
            fail("sync directory " + dst_->display(dir), errno);
    }
}

// Names shaped like temporaries that this move writes are the user's: kept from every later
// stale-temporary pass (within a bound; past it, overlapping entries remove none at all).
void Mover::note_lookalike(const std::string& dst) {
    if (temp_owner(split_last(dst).second).empty())
        return;
    if (lookalikes_.size() < 65536)
        lookalikes_.insert(dst);
    else
        lookalikes_overflow_ = true;
}

bool Mover::kept_lookalike(const std::string& path) const {
    return lookalikes_.count(path) != 0 || (lookalikes_overflow_ && overlapping_);
}

void Mover::walk_entry(const MoveEntry& entry) {
    const std::string src = normalize(entry.source, src_->in_buffer(), "source");
    bool into = entry.destination.empty() || entry.destination.back() == '/';
    std::string dst = normalize(entry.destination, dst_->in_buffer(), "destination");
    const std::string shown = src_->display(src);
    struct stat st {};
    if (!src_->stat_entry(src, st))
        throw Error(ExitCode::no_input, "cannot read " + shown + ": no such file or directory");
    switch (entry.type) {
        case StageType::directory:
            if (S_ISLNK(st.st_mode) && src_->in_buffer())
                throw Error(ExitCode::no_perm, "refusing " + shown + ": it is a symlink");
            if (!S_ISDIR(st.st_mode))
                throw Error(ExitCode::data, shown + " is not a directory (type=directory)");
            break;
        case StageType::file: {
            if (S_ISDIR(st.st_mode))
                throw Error(ExitCode::data, shown + " is a directory (use type=directory)");
            struct stat existing {};
            if (!into && dst_->stat_entry(dst, existing) && S_ISDIR(existing.st_mode))
                into = true;
            if (into)
                dst = dst_->join(dst, split_last(src).second);
            break;
        }
        case StageType::list:
            throw Error(ExitCode::software, "type=list entries must be expanded before moving");
    }
    overlapping_ = overlaps_earlier(dst);
    if (overlapping_) {
        drain();
        reopen_earlier(dst);
    }
    entry_tops_.insert(dst);
    covers_all_ = covers_all_ || dst.empty() || dst == "/";
    make_parents(dst);
    const auto [parent, name] = split_last(dst);
    watch_file_system(parent);

    // Temporaries a killed move left beside this entry's destination.
    std::string adopt;
    if (!(dst_->in_buffer() && dst.empty())) {
        auto& temps = temps_beside(parent);
        const std::string tag = "#" + long_name_tag(name);
        for (auto it = temps.begin(); it != temps.end();) {
            if ((it->second != name && it->second != tag) ||
                kept_lookalike(dst_->join(parent, it->first))) {
                ++it;
                continue;
            }
            const Fd dir = dst_->open_dir(parent);
            struct stat temp {};
            if (entry.type == StageType::directory && adopt.empty() && it->second == name &&
                fstatat(dir.get(), it->first.c_str(), &temp, AT_SYMLINK_NOFOLLOW) == 0 &&
                can_adopt(it->first, temp, st))
                adopt = it->first;
            else
                remove_stale(parent, dir.get(), it->first);
            it = temps.erase(it);
        }
    }
    if (entry.type == StageType::directory) {
        const std::shared_ptr<Dir> top = make_dir(src, dst, st, nullptr, adopt);
        ++files_total_;
        struct stat made {};
        if (fstat(dst_->open_dir(top->at, true).get(), &made) == 0) {
            top_dev_ = made.st_dev;
            top_ino_ = made.st_ino;
        }
        walk_tree(top);
        top_dev_ = 0;
        top_ino_ = 0;
    } else {
        add_node(src, dst, st, nullptr);
    }
}

void Mover::open_frame(Frame& frame, int parent_fd) {
    const Dir& dir = *frame.dir;
    Fd fd;
    if (parent_fd < 0) {
        fd = src_->open_dir(dir.src, true);
    } else {
        fd = Fd(openat(parent_fd, split_last(dir.src).second.c_str(),
                       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!fd)
            fail("open directory " + src_->display(dir.src), errno);
    }
    frame.stream = std::make_unique<DirStream>(fd.get());
    if (!*frame.stream)
        fail("list " + src_->display(dir.src), errno);
    if (dir.created)
        return;
    if (dir.tree && dir.tree->adopted)
        prune_adopted(frame);
    else
        scan_stale_temps(frame);
}

// A directory of a tree taken over from a killed move holds what that move wrote, which may
// not be this source's (another source, an edited request): whatever the source does not have
// there, or has as another kind (a directory against anything else), goes.
void Mover::prune_adopted(Frame& frame) {
    const Dir& dir = *frame.dir;
    const Fd fd = dst_->open_dir(dir.at);
    DirStream stream(fd.get());
    while (stream) {
        const dirent* entry = stream.next();
        if (entry == nullptr)
            break;
        const std::string name = entry->d_name;
        if (!temp_owner(name).empty() && ours(name))
            continue;
        struct stat in_source {
        }, here{};
        if (fstatat(fd.get(), name.c_str(), &here, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (fstatat(frame.fd(), name.c_str(), &in_source, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISDIR(in_source.st_mode) == S_ISDIR(here.st_mode))
            continue;
        remove_stale(dir.at, fd.get(), name);
    }
}

// A directory's walk ended: temporary trees nobody took over go, and its metadata waits for
// the end of this batch's copy.
void Mover::close_frame(Frame& frame) {
    if (!frame.adoptable.empty()) {
        const Fd dir = dst_->open_dir(frame.dir->at);
        for (const auto& [name, temp] : frame.adoptable)
            remove_stale(frame.dir->at, dir.get(), temp);
    }
    batch_.closed.push_back(frame.dir);
    account(entry_overhead + frame.dir->src.size() + frame.dir->dst.size());
}

// Depth first with one open directory per level: memory grows with the depth, never with the
// number of entries in a directory.
void Mover::walk_tree(const std::shared_ptr<Dir>& top) {
    std::vector<Frame> stack;
    stack.emplace_back();
    stack.back().dir = top;
    open_frame(stack.back(), -1);
    while (!stack.empty()) {
        check_stopped();
        Frame& frame = stack.back();
        const dirent* entry = frame.stream->next();
        if (entry == nullptr) {
            if (errno != 0)
                fail("list " + src_->display(frame.dir->src), errno);
            close_frame(frame);
            stack.pop_back();
            continue;
        }
        const std::string name = entry->d_name;
        if (!frame.tagged.empty()) {
            const auto tagged = frame.tagged.find("#" + long_name_tag(name));
            if (tagged != frame.tagged.end()) {
                const Fd dir = dst_->open_dir(frame.dir->at);
                for (const std::string& temp : tagged->second)
                    remove_stale(frame.dir->at, dir.get(), temp);
                frame.tagged.erase(tagged);
            }
        }
        const std::string child_src = src_->join(frame.dir->src, name);
        const std::string child_dst = dst_->join(frame.dir->dst, name);
        struct stat st {};
        if (fstatat(frame.fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
            fail("stat " + src_->display(child_src), errno);
        if (!S_ISDIR(st.st_mode)) {
            add_node(child_src, child_dst, st, frame.dir);
            continue;
        }
        if (st.st_dev == top_dev_ && st.st_ino == top_ino_)
            continue;  // the destination itself, inside the source: not copied into itself
        std::string adopt;
        if (const auto it = frame.adoptable.find(name); it != frame.adoptable.end()) {
            adopt = it->second;
            frame.adoptable.erase(it);
        }
        Frame child;
        child.dir = make_dir(child_src, child_dst, st, frame.dir.get(), adopt);
        ++files_total_;
        const int parent_fd = frame.fd();
        open_frame(child, parent_fd);
        stack.push_back(std::move(child));
        fault_point("mover.dirs-made");
    }
}

void Mover::add_node(const std::string& src, const std::string& dst, const struct stat& st,
                     const std::shared_ptr<Dir>& parent) {
    Node node;
    node.src = src;
    node.dst = dst;
    node.st = st;
    node.parent = parent;
    const mode_t type = st.st_mode & S_IFMT;
    if (type == S_IFREG)
        node.kind = Kind::file;
    else if (type == S_IFLNK)
        node.kind = Kind::symlink;
    else if (type == S_IFIFO)
        node.kind = Kind::fifo;
    else {
        warn("skipped " + std::string(type == S_IFSOCK ? "socket " : "device node ") +
             src_->display(src));
        return;
    }
    note_lookalike(dst);
    std::size_t bytes = entry_overhead + src.size() + dst.size();
    if (node.kind == Kind::file && st.st_nlink > 1) {
        auto& by_inode = links_[static_cast<std::uint64_t>(st.st_dev)];
        const auto found = by_inode.find(static_cast<std::uint64_t>(st.st_ino));
        if (found != by_inode.end()) {
            node.kind = Kind::hard_link;
            node.link = found->second;
            bytes += node.link.dst.size();
            if (--found->second.remaining == 0) {  // every name met: forget the inode
                link_bytes_ -= entry_overhead + found->second.dst.size();
                by_inode.erase(found);
            }
        } else if (!link_overflow_ &&
                   link_bytes_ + entry_overhead + dst.size() <= plan_.memory_limit / 4) {
            std::shared_ptr<TempTree> tree = parent ? parent->tree : nullptr;
            by_inode.emplace(static_cast<std::uint64_t>(st.st_ino),
                             LinkTarget{dst, std::move(tree), st.st_nlink - 1});
            link_bytes_ += entry_overhead + dst.size();
        } else {
            // Past the bound, every new inode is copied on its own and recorded on disk (never
            // half in memory, half on disk: one inode's names must all meet in one place).
            // The records go to an unnamed file on the buffer's file system, either way.
            if (!spill_)
                spill_ =
                    std::make_unique<LinkSpill>(buffer_root_.get(), plan_.buffer_root,
                                                static_cast<std::size_t>(plan_.memory_limit / 8));
            link_overflow_ = true;
            // Where it is reached until the very end: its tree stays under its temporary
            // name until the links are made (TempTree::deferred).
            if (parent && parent->tree)
                parent->tree->deferred = true;
            spill_->add(st.st_dev, st.st_ino,
                        parent ? dst_->join(parent->at, split_last(dst).second) : dst);
        }
    }
    if (plan_.capacity && type == S_IFREG) {
        capacity_counted_ += static_cast<std::uint64_t>(st.st_size);
        require_fits(capacity_counted_, *plan_.capacity);
    }
    if (node.kind == Kind::file)
        bytes_total_ += static_cast<std::uint64_t>(st.st_size);
    ++files_total_;
    batch_.nodes.push_back(std::move(node));
    account(bytes);
}

void Mover::account(std::size_t bytes) {
    batch_.bytes += bytes;
    if (batch_.nodes.size() + batch_.closed.size() >= batch_limit_ || batch_.bytes >= batch_bytes_)
        hand_over();
}

// Queues the batch being filled (waiting while the queue is full) and starts a new one.
void Mover::hand_over() {
    if (batch_.nodes.empty() && batch_.closed.empty())
        return;
    std::unique_lock<std::mutex> lock(queue_mutex_);
    queue_changed_.wait(lock, [&] { return queue_.size() < queued_batches || stop_.load(); });
    check_stopped();
    queue_.push_back(std::move(batch_));
    batch_ = Batch{};
    batch_limit_ = std::min(batch_limit_ * 2, batch_entries_);
    queue_changed_.notify_all();
    lock.unlock();
    fault_point("mover.batch-walked");
}

// Waits until everything walked so far is copied and finished.
void Mover::drain() {
    hand_over();
    std::unique_lock<std::mutex> lock(queue_mutex_);
    queue_changed_.wait(lock, [&] { return (queue_.empty() && !busy_) || stop_.load(); });
    check_stopped();
}

// ---- directories --------------------------------------------------------------------------

// mkdir -p for the directories above `path`: in the buffer one component at a time beneath
// the root; outside with ordinary paths (the user's own symlinks on the way are followed).
void Mover::make_parents(const std::string& path) {
    const std::string parent = split_last(path).first;
    std::lock_guard<std::mutex> lock(sync_mutex_);
    dirs_to_sync_.insert(parent);
    const std::vector<std::string> parts =
        path_components(parent, dst_->display(parent) + " must not contain '..'");
    std::string so_far = dst_->in_buffer() ? "" : "/";
    Fd dir;
    if (dst_->in_buffer()) {
        const int fd = fcntl(buffer_root_.get(), F_DUPFD_CLOEXEC, 0);
        if (fd < 0)
            fail("open " + plan_.buffer_root, errno);
        dir = Fd(fd);
    }
    for (const std::string& part : parts) {
        const std::string up = so_far;
        so_far = dst_->join(so_far, part);
        if (dst_->in_buffer()) {
            struct stat st {};
            if (mkdirat(dir.get(), part.c_str(), 0700) == 0)
                dirs_to_sync_.insert(up);
            else if (errno != EEXIST)
                fail("create directory " + dst_->display(so_far), errno);
            else if (fstatat(dir.get(), part.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                     S_ISLNK(st.st_mode))
                throw Error(ExitCode::no_perm,
                            "refusing " + dst_->display(so_far) + ": a symlink is in the way");
            dir = open_beneath(dir.get(), part, O_RDONLY | O_DIRECTORY, dst_->display(so_far));
            continue;
        }
        struct stat st {};
        if (stat(so_far.c_str(), &st) == 0) {
            if (!S_ISDIR(st.st_mode))
                throw Error(ExitCode::io, "cannot create directories under " + so_far +
                                              ": it is not a directory");
            continue;
        }
        if (errno != ENOENT)
            fail("open directory " + so_far, errno);
        if (mkdir(so_far.c_str(), 0777) == 0)
            dirs_to_sync_.insert(up);
        else if (errno != EEXIST)
            fail("create directory " + so_far, errno);
    }
}

// A descriptor on each destination file system, opened before anything is written there:
// since Linux 5.8 syncfs reports the writeback errors that happened after this open.
void Mover::watch_file_system(const std::string& dir) {
    if (!plan_.durable || !plan_.trust_syncfs)
        return;
    Fd fd = dst_->open_dir(dir);
    struct stat st {};
    std::lock_guard<std::mutex> lock(sync_mutex_);
    if (fstat(fd.get(), &st) == 0 && file_system_ids_.insert(st.st_dev).second)
        file_systems_.push_back(std::move(fd));
}

// Makes (or finds) the destination of a walked directory, writable for now. `parent` is the
// directory it was walked from (null for an entry's top); `adopt`, a temporary tree of a move
// killed in this boot that this directory takes over.
std::shared_ptr<Dir> Mover::make_dir(const std::string& src, const std::string& dst,
                                     const struct stat& st, const Dir* parent, std::string adopt) {
    note_lookalike(dst);
    auto dir = std::make_shared<Dir>();
    dir->src = src;
    dir->dst = dst;
    dir->at = dst;
    dir->st = st;
    dir->keep_metadata = dst_->in_buffer() && dst.empty();
    if (dir->keep_metadata)
        return dir;
    const std::string parent_at = parent ? parent->at : split_last(dst).first;
    const std::string name = split_last(dst).second;
    const std::string shown = dst_->display(dst);
    const Fd pdir = dst_->open_dir(parent_at);
    dir->at = dst_->join(parent_at, name);
    if (parent)
        dir->tree = parent->tree;
    if (parent && parent->created) {  // nothing can be in the way in a directory made just now
        if (mkdirat(pdir.get(), name.c_str(), 0700) != 0)
            fail("create directory " + shown, errno);
        dir->created = true;
        learn_new_dir(*dir);
        return dir;
    }
    struct stat existing {};
    const bool absent =
        fstatat(pdir.get(), name.c_str(), &existing, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT;
    // A durable move builds a directory that does not exist under a temporary name (or goes on
    // with the one a move killed in this boot was building) and renames it into place once
    // everything in it is durable. Not where a non-directory is replaced.
    if (plan_.durable && !dir->tree && absent) {
        auto tree = std::make_shared<TempTree>();
        tree->dst = dst;
        struct stat temp_st {};
        if (!adopt.empty() &&
            (fstatat(pdir.get(), adopt.c_str(), &temp_st, AT_SYMLINK_NOFOLLOW) != 0 ||
             !can_adopt(adopt, temp_st, st))) {
            if (owned(pdir.get(), adopt))  // changed since it was listed
                remove_stale(parent_at, pdir.get(), adopt);
            adopt.clear();
        }
        if (!adopt.empty()) {
            tree->temp = adopt;
            tree->adopted = true;
            if ((temp_st.st_mode & S_IRWXU) != S_IRWXU &&
                fchmodat(pdir.get(), adopt.c_str(), (temp_st.st_mode & 07777) | S_IRWXU, 0) != 0)
                fail("make " + dst_->display(dst_->join(parent_at, adopt)) + " writable", errno);
        } else {
            tree->temp = temp_name(name);
            if (mkdirat(pdir.get(), tree->temp.c_str(), 0700) != 0)
                fail("create directory " + shown, errno);
            dir->created = true;
        }
        tree->at = dst_->join(parent_at, tree->temp);
        dir->at = tree->at;
        dir->tree = tree;
        dir->top = true;
        {
            std::lock_guard<std::mutex> lock(trees_mutex_);
            open_trees_.insert(tree);
        }
        if (dir->created)
            learn_new_dir(*dir);
        return dir;
    }
    if (!adopt.empty())  // its final name exists after all: the old tree is stale
        remove_stale(parent_at, pdir.get(), adopt);
    if (absent && mkdirat(pdir.get(), name.c_str(), 0700) == 0) {
        dir->created = true;
        learn_new_dir(*dir);
        return dir;
    }
    if (absent && errno != EEXIST)
        fail("create directory " + shown, errno);
    if (fstatat(pdir.get(), name.c_str(), &existing, AT_SYMLINK_NOFOLLOW) != 0)
        fail("stat " + shown, errno);
    if (S_ISLNK(existing.st_mode))
        throw Error(ExitCode::no_perm, "refusing " + shown + ": a symlink is in the way");
    if (!S_ISDIR(existing.st_mode)) {
        if (unlinkat(pdir.get(), name.c_str(), 0) != 0 || mkdirat(pdir.get(), name.c_str(), 0700))
            fail("replace " + shown + " with a directory", errno);
        dir->created = true;
        learn_new_dir(*dir);
        return dir;
    }
    // Kept from an earlier run, it may already carry a read-only final mode: open it up until
    // its metadata is applied again at the end. (It was just seen to be a directory; only the
    // user could swap it, and only against themself.)
    if ((existing.st_mode & S_IRWXU) != S_IRWXU &&
        fchmodat(pdir.get(), name.c_str(), (existing.st_mode & 07777) | S_IRWXU, 0) != 0)
        fail("make " + shown + " writable", errno);
    return dir;
}

// ---- temporaries --------------------------------------------------------------------------

std::string Mover::temp_name(const std::string& name) {
    char counter[8];
    std::snprintf(counter, sizeof counter, "%04llx",
                  static_cast<unsigned long long>(temp_counter_.fetch_add(1) & 0xffff));
    const std::string suffix = temp_prefix_ + counter;
    std::string temp = "." + name + ".bbkit-" + suffix;
    if (temp.size() <= NAME_MAX)
        return temp;
    // A long name leaves no room for a suffix: a short name still unique within this move.
    return ".bbkit-" + long_name_tag(name) + "-" + suffix;
}

// This move's own temporaries carry its 24-digit prefix.
bool Mover::ours(const std::string& temp) const {
    return temp.size() > temp_suffix_digits &&
           temp.compare(temp.size() - temp_suffix_digits, temp_prefix_digits, temp_prefix_) == 0;
}

// A temporary of this buffer's moves in this boot.
bool Mover::tagged_ours(const std::string& temp) const {
    return temp.size() > temp_suffix_digits &&
           temp.compare(temp.size() - temp_suffix_digits, temp_tag_digits, temp_tag_) == 0;
}

// Whether a temporary tree `temp` (its lstat `st`) of a killed move may be taken over for a
// source directory (its stat `source`). Only where one syncfs makes everything in it durable:
// a file a killed run completed but never fsync'd would otherwise be published as it is. And
// only this buffer's own (its tag: see temp_tag), a directory of the user's, no more open than
// the mover makes one (the source's mode, the owner's rwx while it is built, a set-group-ID
// bit inherited from the parent): anyone who could write in it may have put anything there
// (bbkit(7), STAGING).
bool Mover::can_adopt(const std::string& temp, const struct stat& st,
                      const struct stat& source) const {
    if (!plan_.durable || !plan_.trust_syncfs || !tagged_ours(temp))
        return false;
    const mode_t allowed = (source.st_mode & 07777) | S_IRWXU | S_ISGID;
    return S_ISDIR(st.st_mode) && st.st_uid == uid_ && (st.st_mode & 07777 & ~allowed) == 0;
}

// Whether `name` in `dir` belongs to the user: a killed move's temporary is removed only then.
// Another user's file that merely has the shape (in a directory others may write) is theirs.
bool Mover::owned(int dir, const std::string& name) const {
    struct stat st {};
    return fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_uid == uid_;
}

// Removes a temporary a killed move left (a file, or a whole tree without following a symlink).
void Mover::remove_stale(const std::string& dir, int fd, const std::string& name) {
    if (const int err = remove_tree_beneath(fd, name); err != 0)
        warn("cannot remove the stale temporary " + dst_->display(dst_->join(dir, name)) + ": " +
             reason(err));
}

// The temporaries of other moves in `dir` (the parent of entries' destinations), listed once
// per move: (entry, owner).
std::vector<std::pair<std::string, std::string>>& Mover::temps_beside(const std::string& dir) {
    const auto found = entry_temps_.find(dir);
    if (found != entry_temps_.end())
        return found->second;
    auto& temps = entry_temps_[dir];
    Fd fd;
    try {
        fd = dst_->open_dir(dir);
    } catch (const Error&) {
        return temps;  // the copy itself reports what is wrong with this directory
    }
    DirStream stream(fd.get());
    while (stream) {
        const dirent* entry = stream.next();
        if (entry == nullptr)
            break;
        const std::string owner = temp_owner(entry->d_name);
        if (!owner.empty() && !ours(entry->d_name) && owned(fd.get(), entry->d_name))
            temps.emplace_back(entry->d_name, owner);
    }
    return temps;
}

// A move killed before its renames (stage-out, or symlinks and fifos of a stage-in) left its
// temporaries beside the names it was writing: files, and whole directory trees a durable move
// was building. In a destination directory that existed before this move, those made for a
// name this move writes there are removed, except a tree of a move killed in this boot, which
// the directory of that name takes over: what it holds is what the page cache holds, made
// durable by this move's sync before the tree is renamed into place (after a reboot it may
// hold torn files, so it goes). An entry of the source that merely looks like a temporary is
// kept, as is anything else.
void Mover::scan_stale_temps(Frame& frame) {
    const Dir& dir = *frame.dir;
    Fd fd;
    try {
        fd = dst_->open_dir(dir.at);
    } catch (const Error&) {
        return;  // the copy itself reports what is wrong with this directory
    }
    std::vector<std::string> stale;
    {
        DirStream stream(fd.get());
        while (stream) {
            const dirent* entry = stream.next();
            if (entry == nullptr)
                break;
            const std::string name = entry->d_name;
            const std::string owner = temp_owner(name);
            if (owner.empty() || ours(name) || kept_lookalike(dst_->join(dir.dst, name)))
                continue;
            struct stat st {};
            if (fstatat(frame.fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
                continue;  // a source entry of that name: the user's, copied like any other
            struct stat temp {};
            if (fstatat(fd.get(), name.c_str(), &temp, AT_SYMLINK_NOFOLLOW) != 0 ||
                temp.st_uid != uid_)
                continue;  // gone, or somebody else's: neither removed nor taken over
            if (owner[0] == '#') {
                frame.tagged[owner].push_back(name);
                continue;
            }
            if (fstatat(frame.fd(), owner.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
                continue;  // not a name this move writes here
            if (S_ISDIR(st.st_mode) && frame.adoptable.count(owner) == 0 &&
                can_adopt(name, temp, st)) {
                frame.adoptable[owner] = name;
                continue;
            }
            stale.push_back(name);
        }
    }
    for (const std::string& name : stale)
        remove_stale(dir.at, fd.get(), name);
}

// ---- copying ----------------------------------------------------------------------------

// Creates the file that receives the copy: under a temporary name for durable moves (except in
// a directory tree that is renamed into place whole), else under its final name after removing
// what an earlier run left (which may be read-only).
Fd Mover::create_destination(Node& node, int dir, const std::string& name) {
    const std::string shown = dst_->display(node.dst);
    std::string target = name;
    if (plan_.durable && !in_temp_tree(node)) {
        target = temp_name(name);
    } else if (!in_new_dir(node) && unlinkat(dir, name.c_str(), 0) != 0 && errno != ENOENT) {
        fail("replace " + shown, errno);
    }
    node.initial =
        initial_metadata(node.st, in_new_dir(node) ? &node.parent->new_files : nullptr, umask_);
    const int fd = openat(dir, target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                          node.initial.mode);
    if (fd < 0) {
        const int err = errno;
        const std::string parent = dst_->display(split_last(node.dst).first);
        throw Error(exit_code_for(err) == ExitCode::no_input ? ExitCode::io : exit_code_for(err),
                    "cannot create " + shown + " in directory " + parent + ": " + reason(err));
    }
    if (target != name)
        node.temp = target;
    return Fd(fd);
}

// Opens the source and creates the destination; false when the destination is already
// complete (a rerun after success or a crash).
bool Mover::open_file(Node& node, const FileCopy& file, Worker& worker, FilePair& pair) {
    const auto [src_parent, src_name] = split_last(node.src);
    const std::string dst_name = split_last(node.dst).second;
    const int dst_dir = worker.dst_dir.get(*dst_, parent_path(node));
    // A directory this move created holds nothing yet: no earlier copy to look for.
    if (!in_new_dir(node) && is_complete_copy(dst_dir, dst_name, node.st))
        return false;
    const int src_dir = worker.src_dir.get(*src_, src_parent);
    pair = open_pair(file, src_dir, src_name, plan_.direct_io,
                     [&] { return create_destination(node, dst_dir, dst_name); });
    return true;
}

void Mover::finish_file(const Node& node, const FileCopy& file, const FilePair& pair,
                        bool truncate) {
    bbkit::finish_file(file, pair.src.get(), pair.dst.get(), truncate, node.initial,
                       plan_.durable && !plan_.trust_syncfs, warning_);
}

void Mover::run_task(const Task& task, Worker& worker) {
    Node& node = *task.node;
    switch (node.kind) {
        case Kind::file:
            if (task.shared)
                copy_chunk(task, worker);
            else
                copy_small_file(node, worker);
            return;
        case Kind::symlink:
            copy_symlink(node, worker);
            break;
        case Kind::fifo:
            copy_fifo(node, worker);
            break;
        case Kind::hard_link:
            return;
    }
    files_done_.fetch_add(1);
}

void Mover::copy_small_file(Node& node, Worker& worker) {
    FilePair pair;
    const auto size = static_cast<std::uint64_t>(node.st.st_size);
    const FileCopy file = file_copy(node);
    if (!open_file(node, file, worker, pair)) {
        skipped_.fetch_add(1);
    } else {
        const bool sparse = is_sparse(node.st);
        if (sparse || pair.direct)
            size_destination(file, pair.dst.get(), pair.direct && !sparse);
        if (node.st.st_size > 0)
            copy_data(file, pair.src.get(), pair.dst.get(), 0, node.st.st_size, pair.direct, false,
                      worker.buffers, stop_);
        finish_file(node, file, pair, pair.direct);
        fault_point("mover.file-copied");
        files_written_.fetch_add(1);
        bytes_written_.fetch_add(size);
    }
    bytes_done_.fetch_add(size);
    files_done_.fetch_add(1);
}

void Mover::copy_chunk(const Task& task, Worker& worker) {
    Node& node = *task.node;
    const FileCopy copy = file_copy(node);
    SharedFile& file = *task.shared;
    {
        std::lock_guard<std::mutex> lock(file.mutex);
        if (file.failed)
            throw CopyStopped{};  // the worker that opened it reports why
        if (!file.opened) {
            // Once only: a second attempt would make a second temporary.
            file.failed = true;
            file.skip = !open_file(node, copy, worker, file.pair);
            // Full size first: chunks write at their own offsets, holes stay holes.
            if (!file.skip)
                size_destination(copy, file.pair.dst.get(),
                                 file.pair.direct && !is_sparse(node.st));
            file.opened = true;
            file.failed = false;
        }
    }
    if (!file.skip)
        copy_data(copy, file.pair.src.get(), file.pair.dst.get(), task.offset,
                  task.offset + task.length, file.pair.direct, true, worker.buffers, stop_);
    bytes_done_.fetch_add(static_cast<std::uint64_t>(task.length));
    if (file.remaining.fetch_sub(1) != 1)
        return;
    if (file.skip) {
        skipped_.fetch_add(1);
    } else {
        finish_file(node, copy, file.pair, true);
        files_written_.fetch_add(1);
        bytes_written_.fetch_add(static_cast<std::uint64_t>(node.st.st_size));
    }
    file.pair.src.reset();
    file.pair.dst.reset();
    files_done_.fetch_add(1);
}

// Puts a symlink or fifo made under a temporary name in place; durable moves rename later,
// together with the files.
void Mover::place(Node& node, int dir, const std::string& name) {
    if (plan_.durable || node.temp.empty())
        return;
    if (renameat(dir, node.temp.c_str(), dir, name.c_str()) != 0) {
        const int err = errno;
        unlinkat(dir, node.temp.c_str(), 0);
        fail("replace " + dst_->display(node.dst), err);
    }
    node.temp.clear();
}

void Mover::copy_symlink(Node& node, Worker& worker) {
    const auto [src_parent, src_name] = split_last(node.src);
    const std::string dst_name = split_last(node.dst).second;
    const int src_dir = worker.src_dir.get(*src_, src_parent);
    std::string target(static_cast<std::size_t>(std::max<off_t>(node.st.st_size, 255)) + 1, '\0');
    for (;;) {
        const ssize_t n = readlinkat(src_dir, src_name.c_str(), &target[0], target.size());
        if (n < 0)
            fail("read symlink " + src_->display(node.src), errno);
        if (static_cast<std::size_t>(n) < target.size()) {
            target.resize(static_cast<std::size_t>(n));
            break;
        }
        target.resize(target.size() * 2);
    }
    const int dst_dir = worker.dst_dir.get(*dst_, parent_path(node));
    const bool fresh = in_new_dir(node);
    struct stat existing {};
    if (!fresh && fstatat(dst_dir, dst_name.c_str(), &existing, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISLNK(existing.st_mode) && same_mtime(existing, node.st)) {
        std::string current(target.size() + 1, '\0');
        const ssize_t n = readlinkat(dst_dir, dst_name.c_str(), &current[0], current.size());
        if (n >= 0 && static_cast<std::size_t>(n) == target.size() &&
            current.compare(0, target.size(), target) == 0) {
            skipped_.fetch_add(1);
            return;
        }
    }
    // Under its final name at once where nothing can be replaced and no rename is batched.
    const bool direct_name = fresh && (!plan_.durable || in_temp_tree(node));
    const std::string temp = direct_name ? dst_name : temp_name(dst_name);
    if (symlinkat(target.c_str(), dst_dir, temp.c_str()) != 0)
        fail("create " + dst_->display(node.dst), errno);
    if (!direct_name)
        node.temp = temp;
    set_link_group_times(dst_dir, temp, node.st, dst_->display(node.dst));
    place(node, dst_dir, dst_name);
    files_written_.fetch_add(1);
}

void Mover::copy_fifo(Node& node, Worker& worker) {
    const std::string dst_name = split_last(node.dst).second;
    const int dst_dir = worker.dst_dir.get(*dst_, parent_path(node));
    const bool fresh = in_new_dir(node);
    struct stat existing {};
    if (!fresh && fstatat(dst_dir, dst_name.c_str(), &existing, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISFIFO(existing.st_mode) && existing.st_mode == node.st.st_mode &&
        same_mtime(existing, node.st)) {
        skipped_.fetch_add(1);
        return;
    }
    const bool direct_name = fresh && (!plan_.durable || in_temp_tree(node));
    const std::string temp = direct_name ? dst_name : temp_name(dst_name);
    const std::string shown = dst_->display(node.dst);
    if (mkfifoat(dst_dir, temp.c_str(), 0600) != 0)
        fail("create " + shown, errno);
    if (!direct_name)
        node.temp = temp;
    // Opening for reading without blocking works on a fifo with no writer; metadata then
    // goes through the descriptor, never through a name that could be swapped.
    const int fd = openat(dst_dir, temp.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        fail("open " + shown, errno);
    const Fd owned(fd);
    set_owner_mode_times(fd, node.st, shown, warning_);
    place(node, dst_dir, dst_name);
    files_written_.fetch_add(1);
}

// ---- batches ------------------------------------------------------------------------------

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
        for (std::size_t t = runs[r].first; t < runs[r].second; ++t) {
            check_stopped();
            run_task(tasks[t], worker);
        }
        worker.last_copy = Clock::now();
        worker.busy += worker.last_copy - began;
    });
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
            if (renameat(dir, node.temp.c_str(), dir, name.c_str()) != 0)
                fail("rename into place " + dst_->display(node.dst), errno);
            node.temp.clear();
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

// ---- finishing ----------------------------------------------------------------------------

void Mover::sync_file_systems() {
    std::lock_guard<std::mutex> lock(sync_mutex_);
    if (file_systems_.empty())
        return;
    syncing_ = true;
    report(true);
    const Clock::time_point began = Clock::now();
    for (const Fd& fd : file_systems_)
        if (syncfs(fd.get()) != 0)
            fail("sync the destination file system", errno);
    sync_time_ += Clock::now() - began;
    syncing_ = false;
}

// A hard link to the first copy of its inode, reached where it is now (through its
// temporary tree until that is renamed).
void Mover::make_link(Node& node) {
    const std::string link_name = split_last(node.dst).second;
    const auto [target_parent, target_name] = split_last(current_path(node.link));
    const Fd link_dir = dst_->open_dir(parent_path(node));
    const Fd target_dir = dst_->open_dir(target_parent);
    struct stat a {
    }, b{};
    const bool fresh = in_new_dir(node);
    if (!fresh && fstatat(link_dir.get(), link_name.c_str(), &a, AT_SYMLINK_NOFOLLOW) == 0 &&
        fstatat(target_dir.get(), target_name.c_str(), &b, AT_SYMLINK_NOFOLLOW) == 0 &&
        a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
        skipped_.fetch_add(1);
    } else {
        if (!fresh && unlinkat(link_dir.get(), link_name.c_str(), 0) != 0 && errno != ENOENT)
            fail("replace " + dst_->display(node.dst), errno);
        if (linkat(target_dir.get(), target_name.c_str(), link_dir.get(), link_name.c_str(), 0) !=
            0)
            fail("link " + dst_->display(node.dst) + " to " + dst_->display(node.link.dst), errno);
        files_written_.fetch_add(1);
    }
    files_done_.fetch_add(1);
    report(false);
}

void Mover::apply_dir_metadata(const Dir& dir, bool sync) {
    if (!dir.keep_metadata) {
        const Fd src = src_->open_dir(dir.src, true);
        const Fd dst = dst_->open_dir(dir.at, true);
        const std::string shown = dst_->display(dir.dst);
        copy_xattrs(src.get(), dst.get(), true, shown, warning_);
        set_owner_mode_times(dst.get(), dir.st, shown, warning_);
        if (sync && fsync(dst.get()) != 0)
            fail("sync directory " + shown, errno);
    } else if (sync && fsync(buffer_root_.get()) != 0) {
        fail("sync directory " + plan_.buffer_root, errno);
    }
    files_done_.fetch_add(1);
    report(false);
}

// Renames a directory tree built under a temporary name into place. Never over anything: a
// directory that appeared there meanwhile is not replaced (where the file system cannot refuse
// a replacement, a plain rename still fails over anything but an empty directory).
void Mover::publish(Dir& dir) {
    TempTree& tree = *dir.tree;
    const auto [parent, name] = split_last(tree.dst);
    const std::string shown = dst_->display(tree.dst);
    const Fd pdir = dst_->open_dir(parent);
    int rc = renameat2(pdir.get(), tree.temp.c_str(), pdir.get(), name.c_str(), RENAME_NOREPLACE);
    if (rc != 0 && errno == EINVAL)
        rc = renameat(pdir.get(), tree.temp.c_str(), pdir.get(), name.c_str());
    if (rc != 0)
        fail("rename into place " + shown, errno);
    tree.published = true;
    dir.at = dir.dst;
    {
        std::lock_guard<std::mutex> lock(trees_mutex_);
        open_trees_.erase(dir.tree);
    }
    fault_point("mover.renamed");
    // A rename changes the ctime of what it moves, not its mtime, on the file systems known
    // here; should one differ, the times are set again and made durable.
    struct stat st {};
    if (fstatat(pdir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        !same_mtime(st, dir.st)) {
        const Fd fd = dst_->open_dir(dir.dst, true);
        const struct timespec times[2] = {dir.st.st_atim, dir.st.st_mtim};
        if (futimens(fd.get(), times) != 0 || fsync(fd.get()) != 0)
            fail("set the times of " + shown, errno);
    }
}

// The multiply-linked files met past the memory bound were copied each on its own: now that
// every name is in place, each later name of an inode becomes a link to its first (a link
// under a temporary name renamed over the copy, so the name never goes missing). The
// directory keeps its mode and times.
void Mover::link_spilled() {
    if (!spill_)
        return;
    spill_->for_each_link([&](const std::string& first, const std::string& other) {
        check_stopped();
        const auto [first_parent, first_name] = split_last(first);
        const auto [other_parent, other_name] = split_last(other);
        const Fd from = dst_->open_dir(first_parent);
        const Fd to = dst_->open_dir(other_parent, true);
        const std::string shown = dst_->display(other);
        struct stat a {
        }, b{}, dir{};
        if (fstatat(from.get(), first_name.c_str(), &a, AT_SYMLINK_NOFOLLOW) != 0)
            fail("stat " + dst_->display(first), errno);
        if (fstatat(to.get(), other_name.c_str(), &b, AT_SYMLINK_NOFOLLOW) == 0 &&
            a.st_dev == b.st_dev && a.st_ino == b.st_ino)
            return;  // linked by an earlier run
        if (fstat(to.get(), &dir) != 0)
            fail("stat " + dst_->display(other_parent), errno);
        const bool writable = (dir.st_mode & S_IRWXU) == S_IRWXU;
        if (!writable && fchmod(to.get(), (dir.st_mode & 07777) | S_IRWXU) != 0)
            fail("make " + dst_->display(other_parent) + " writable", errno);
        const std::string temp = temp_name(other_name);
        if (linkat(from.get(), first_name.c_str(), to.get(), temp.c_str(), 0) != 0)
            fail("link " + shown + " to " + dst_->display(first), errno);
        if (renameat(to.get(), temp.c_str(), to.get(), other_name.c_str()) != 0) {
            const int err = errno;
            unlinkat(to.get(), temp.c_str(), 0);
            fail("replace " + shown, err);
        }
        const struct timespec times[2] = {dir.st_atim, dir.st_mtim};
        if ((!writable && fchmod(to.get(), dir.st_mode & 07777) != 0) ||
            futimens(to.get(), times) != 0)
            fail("restore the mode and times of " + dst_->display(other_parent), errno);
        if (plan_.durable && fsync(to.get()) != 0)
            fail("sync directory " + dst_->display(other_parent), errno);
        report(false);
    });
}

// After a failure: no temporary of this move is left (the files of the batch being finished,
// and trees not yet in place).
void Mover::remove_temps(Batch* batch) noexcept {
    if (batch != nullptr) {
        for (Node& node : batch->nodes) {
            if (node.temp.empty())
                continue;
            try {
                const Fd dir = dst_->open_dir(parent_path(node));
                unlinkat(dir.get(), node.temp.c_str(), 0);
            } catch (...) {
            }
            node.temp.clear();
        }
    }
    std::set<std::shared_ptr<TempTree>> trees;
    {
        std::lock_guard<std::mutex> lock(trees_mutex_);
        trees.swap(open_trees_);
    }
    for (const std::shared_ptr<TempTree>& tree : trees) {
        try {
            const Fd dir = dst_->open_dir(split_last(tree->dst).first);
            remove_tree_beneath(dir.get(), tree->temp);
        } catch (...) {
        }
    }
}

MoveSummary Mover::run() {
    const Clock::time_point start = start_ = Clock::now();
    std::thread walker;
    Batch running;
    auto stop_walker = [&] {
        {
            std::lock_guard<std::mutex> lock(queue_mutex_);
            stop_ = true;
            queue_changed_.notify_all();
        }
        if (walker.joinable())
            walker.join();
    };
    try {
        walker = std::thread([this] { walk(); });
        for (;;) {
            {
                std::unique_lock<std::mutex> lock(queue_mutex_);
                const Clock::time_point waiting = Clock::now();
                while (queue_.empty() && !walk_finished_) {
                    queue_changed_.wait_for(lock, progress_interval);
                    lock.unlock();
                    report(false);
                    lock.lock();
                }
                wait_time_ += Clock::now() - waiting;
                if (queue_.empty())
                    break;
                running = std::move(queue_.front());
                queue_.pop_front();
                busy_ = true;
                queue_changed_.notify_all();
            }
            const Clock::time_point copying = Clock::now();
            copy_batch(running);
            const Clock::time_point finishing = Clock::now();
            copy_time_ += finishing - copying;
            const Clock::duration synced = sync_time_;
            finish_batch(running);
            finish_time_ += Clock::now() - finishing - (sync_time_ - synced);
            running = Batch{};
            std::lock_guard<std::mutex> lock(queue_mutex_);
            busy_ = false;
            queue_changed_.notify_all();
        }
        walker.join();
        if (walk_error_)
            std::rethrow_exception(walk_error_);
        const Clock::time_point finishing = Clock::now();
        const Clock::duration synced = sync_time_;
        link_spilled();
        if (!deferred_tops_.empty()) {
            sync_file_systems();
            for (const std::shared_ptr<Dir>& dir : deferred_tops_)
                publish(*dir);
        }
        restore_reopened();
        finish_time_ += Clock::now() - finishing - (sync_time_ - synced);
    } catch (...) {
        std::exception_ptr error = std::current_exception();
        stop_walker();
        try {
            std::rethrow_exception(error);
        } catch (const CopyStopped&) {
            if (walk_error_)
                error = walk_error_;  // the walk failed first: that is the reason
        } catch (...) {
        }
        remove_temps(&running);
        std::rethrow_exception(error);
    }
    fault_point("mover.before-dir-fsync");
    // The parents of the entries' destinations: new names (and trees renamed) in them.
    if (plan_.durable) {
        const Clock::time_point began = Clock::now();
        for (const std::string& dir : dirs_to_sync_) {
            const Fd fd = dst_->open_dir(dir);
            if (fsync(fd.get()) != 0)
                fail("sync directory " + dst_->display(dir), errno);
        }
        sync_time_ += Clock::now() - began;
    }
    report(true);

    MoveSummary summary;
    summary.files = files_written_.load();
    summary.bytes = bytes_written_.load();
    summary.skipped = skipped_.load();
    summary.warnings = warnings_;
    if (warnings_dropped_ > 0)
        summary.warnings.push_back(std::to_string(warnings_dropped_) + " more warnings");
    const Clock::time_point end = Clock::now();
    summary.seconds = seconds(end - start);
    summary.phases = phases(end);
    return summary;
}

MovePhases Mover::phases(Clock::time_point end) const {
    MovePhases p;
    p.walk = seconds(walk_time_);
    p.wait = seconds(wait_time_);
    p.copy = seconds(copy_time_);
    p.finish = seconds(finish_time_);
    p.sync = seconds(sync_time_);
    p.threads = static_cast<unsigned>(workers_.size());
    p.seconds = seconds(end - start_);
    Clock::time_point first = end, last = start_;
    for (const Worker& worker : workers_) {
        p.busy += seconds(worker.busy);
        if (worker.first_copy != Clock::time_point{}) {
            first = std::min(first, worker.first_copy);
            last = std::max(last, worker.last_copy);
        }
    }
    p.before = seconds(first - start_);
    p.after = first == end ? 0 : seconds(end - last);
    return p;
}

}  // namespace

MoveSummary run_move(const MovePlan& plan,
                     const std::function<void(const MoveProgress&)>& progress) {
    Mover mover(plan, progress);
    return mover.run();
}

namespace {

std::string root_of(const StagePlan& plan, const StageDirective& stage) {
    if (stage.buffer.empty())
        return plan.job_root;
    const auto root = plan.persistent_roots.find(stage.buffer);
    if (root == plan.persistent_roots.end())
        throw Error(ExitCode::no_input,
                    "persistent buffer '" + stage.buffer + "' is not available to this job");
    return root->second;
}

}  // namespace

std::map<std::string, std::vector<MoveEntry>> entries_by_root(const StagePlan& plan) {
    std::map<std::string, std::vector<MoveEntry>> groups;
    if (plan.direction == StageDirection::in) {
        check_stage_in(plan.stages, plan.capacity);
        for (const StageDirective& stage : plan.stages) {
            std::vector<SourceEntry> expanded;
            if (stage.type == StageType::list)
                expanded = read_stage_list(stage);
            else
                expanded.push_back({stage.source, stage.destination, stage.type, stage.where});
            for (const SourceEntry& e : expanded)
                groups[root_of(plan, stage)].push_back({e.source, e.destination, e.type});
        }
        return groups;
    }
    for (const StageDirective& stage : plan.stages) {
        check_stage_type(stage.type, false);  // lines recorded before bb-parse refused it
        groups[root_of(plan, stage)].push_back({stage.source, stage.destination, stage.type});
    }
    return groups;
}

MoveSummary run_stage_plan(const StagePlan& plan,
                           const std::function<void(const PlanProgress&)>& progress) {
    const auto groups = entries_by_root(plan);
    MoveSummary total;
    // What the roots already moved counted: the next root's counters start from there.
    std::uint64_t base_files = 0, base_bytes = 0;
    std::size_t left = groups.size();
    for (const auto& [root, entries] : groups) {
        --left;
        MovePlan move;
        move.direction =
            plan.direction == StageDirection::in ? MoveDirection::in : MoveDirection::out;
        move.buffer_root = root;
        move.entries = entries;
        move.threads = plan.threads;
        move.durable = plan.durable;
        move.direct_io = plan.direct_io;
        move.trust_syncfs = plan.trust_syncfs;
        move.memory_limit = plan.memory_limit;
        move.temp_token = plan.temp_token;
        if (plan.direction == StageDirection::in && root == plan.job_root)
            move.capacity = plan.capacity;
        MoveProgress last;
        MoveSummary summary = run_move(move, [&](const MoveProgress& p) {
            last = p;
            PlanProgress plan_progress;
            plan_progress.files_done = base_files + p.files_done;
            plan_progress.bytes_done = base_bytes + p.bytes_done;
            plan_progress.files_total = base_files + p.files_total;
            plan_progress.bytes_total = base_bytes + p.bytes_total;
            const bool started = plan_progress.files_done > 0 || plan_progress.bytes_done > 0;
            plan_progress.phase = p.syncing  ? StagePhase::syncing
                                  : !started ? StagePhase::measuring
                                             : StagePhase::copying;
            progress(plan_progress);
        });
        total.files += summary.files;
        total.bytes += summary.bytes;
        total.skipped += summary.skipped;
        total.seconds += summary.seconds;
        total.phases.append(summary.phases);
        std::move(summary.warnings.begin(), summary.warnings.end(),
                  std::back_inserter(total.warnings));
        base_files += last.files_total;  // a move's last report is its complete count
        base_bytes += last.bytes_total;
    }
    return total;
}

}  // namespace bbkit
