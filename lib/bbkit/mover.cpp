#include "bbkit/mover.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
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
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/pool_dir.hpp"

namespace bbkit {
namespace {

using Clock = std::chrono::steady_clock;

// Files at least this large are split into chunks so several workers (and several requests in
// flight on the device) share one file; below it a file is one worker's job.
constexpr off_t large_file = off_t{64} << 20;
constexpr off_t chunk_bytes = off_t{32} << 20;
// One copy_file_range/pread/pwrite at a time moves at most this much: small enough to check
// for cancellation and drop cache often, large enough to keep the device busy.
constexpr std::size_t piece_bytes = std::size_t{8} << 20;
// O_DIRECT pays one synchronous round trip per request: only worth it for big files.
constexpr off_t direct_min_size = off_t{8} << 20;
constexpr off_t direct_align = 4096;
// O_DIRECT pieces in flight per worker (asynchronous reads and writes): one synchronous
// request at a time leaves this disk idle between a read and its write.
constexpr unsigned direct_depth = 6;
constexpr std::size_t direct_piece = std::size_t{4} << 20;  // the disk's largest request
// Small files are handed out in runs of this many from one directory, runs of different
// directories in turn: workers then create in different directories (a create holds its
// directory's lock, and on a cold cache may wait for an inode table read while holding it),
// and each keeps its cached directory descriptors for a whole run.
constexpr std::size_t files_per_run = 16;
constexpr std::size_t max_warnings = 100;
constexpr auto progress_interval = std::chrono::milliseconds(100);

std::string reason(int err) {
    std::string text = std::strerror(err);
    if (!text.empty())
        text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
    return text;
}

[[noreturn]] void fail(const std::string& what, int err) {
    throw Error(exit_code_for(err), "cannot " + what + ": " + reason(err));
}

// Thrown inside a worker when another worker already failed: not an error of its own.
struct Stopped {};

// "a/b" -> {"a", "b"}, "b" -> {"", "b"}, "/b" -> {"/", "b"}.
std::pair<std::string, std::string> split_last(const std::string& path) {
    const auto slash = path.rfind('/');
    if (slash == std::string::npos)
        return {"", path};
    return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

std::vector<std::string> components(const std::string& path) {
    std::vector<std::string> parts;
    std::size_t start = 0;
    while (start <= path.size()) {
        std::size_t end = path.find('/', start);
        if (end == std::string::npos)
            end = path.size();
        std::string part = path.substr(start, end - start);
        if (!part.empty() && part != ".")
            parts.push_back(std::move(part));
        start = end + 1;
    }
    return parts;
}

// Buffer paths are relative and may not climb (".." could only lead out of the buffer);
// outside paths are absolute and ordinary, but never end in "..".
std::string normalize(const std::string& path, bool in_buffer, const std::string& what) {
    if (!in_buffer && (path.empty() || path[0] != '/'))
        throw Error(ExitCode::data, what + " '" + path + "' is not an absolute path");
    std::string out = in_buffer ? "" : "/";
    const std::vector<std::string> parts = components(path);
    for (std::size_t i = 0; i < parts.size(); ++i) {
        if (parts[i] == ".." && (in_buffer || i + 1 == parts.size()))
            throw Error(ExitCode::data, what + " '" + path + "' " +
                                            (in_buffer ? "leaves the buffer" : "ends in .."));
        if (!out.empty() && out != "/")
            out += '/';
        out += parts[i];
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

enum class Kind { directory, file, symlink, fifo, hard_link };

constexpr std::size_t no_parent = static_cast<std::size_t>(-1);

struct Node {
    Kind kind = Kind::file;
    std::string src, dst;  // paths on their sides
    struct stat st {};
    std::size_t link_to = 0;         // hard_link: the node whose copy this name links to
    std::size_t parent = no_parent;  // the directory node this entry was walked from
    int depth = 0;                   // directories: metadata is applied deepest first
    bool keep_metadata = false;      // the buffer root: bbkit owns its mode
    std::string temp;                // durable moves: the name written before the rename
    bool created = false;            // directories: made by this move, so nothing is in them yet
    // Directories of a durable move that did not exist: the top one is made under a temporary
    // name, everything below it under final names, and the whole tree is renamed into place
    // after the sync (one rename instead of one per file). `at` is where a directory is
    // reached until then (its final path for every other directory).
    bool temp_tree = false;
    std::string at;
    // Created directories: the group a new file in it gets, and whether a file created with
    // mode M gets exactly M minus the umask (no inherited default ACL decides instead).
    gid_t new_file_gid = 0;
    bool plain_modes = false;
    // Files: what creating it already got right (set by create_destination).
    bool gid_set = false, mode_set = false;
};

struct AlignedFree {
    void operator()(char* p) const { std::free(p); }
};

char* aligned_buffer(std::size_t bytes) {
    void* p = nullptr;
    if (posix_memalign(&p, direct_align, bytes) != 0)
        throw Error(ExitCode::software, "out of memory for an I/O buffer");
    return static_cast<char*>(p);
}

// A kernel AIO context (io_setup): with O_DIRECT, reads and writes are queued to the device
// and complete without a thread waiting on each one.
class AioContext {
  public:
    AioContext() = default;
    AioContext(const AioContext&) = delete;
    AioContext& operator=(const AioContext&) = delete;
    AioContext(AioContext&& other) noexcept : ctx_(std::exchange(other.ctx_, 0)) {}
    AioContext& operator=(AioContext&&) = delete;
    ~AioContext() {
        if (ctx_ != 0)
            syscall(SYS_io_destroy, ctx_);
    }
    // false when the kernel offers none (ENOSYS, or EAGAIN once fs.aio-max-nr is used up).
    bool open(unsigned depth) {
        if (ctx_ == 0 && syscall(SYS_io_setup, depth, &ctx_) != 0)
            ctx_ = 0;
        return ctx_ != 0;
    }
    // 0 or an errno.
    int submit(iocb* cb) {
        iocb* list[1] = {cb};
        for (;;) {
            if (syscall(SYS_io_submit, ctx_, 1, list) == 1)
                return 0;
            if (errno != EINTR && errno != EAGAIN)
                return errno;
        }
    }
    // Waits for at least one completion; returns how many were stored.
    long wait(io_event* events, long max) {
        for (;;) {
            const long n = syscall(SYS_io_getevents, ctx_, 1, max, events, nullptr);
            if (n >= 0)
                return n;
            if (errno != EINTR)
                throw Error(ExitCode::io, "cannot wait for I/O: " + reason(errno));
        }
    }

  private:
    aio_context_t ctx_ = 0;
};

// What one worker thread keeps between items: an I/O buffer and the last parent directories
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
    };
    CachedDir src_dir, dst_dir;
    std::unique_ptr<char, AlignedFree> buffer;
    AioContext aio;
    bool aio_tried = false;
    std::unique_ptr<char, AlignedFree> direct_buffers;  // direct_depth pieces

    char* io_buffer() {
        if (!buffer)
            buffer.reset(aligned_buffer(piece_bytes));
        return buffer.get();
    }
    // The asynchronous O_DIRECT pipeline, or null where the kernel has no AIO to give.
    AioContext* direct_pipeline() {
        if (!aio_tried) {
            aio_tried = true;
            if (aio.open(direct_depth))
                direct_buffers.reset(aligned_buffer(direct_depth * direct_piece));
        }
        return direct_buffers ? &aio : nullptr;
    }
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
    bool direct = false;
    Fd src, dst;
    std::atomic<std::size_t> remaining{0};
};

struct Task {
    std::size_t node = 0;
    off_t offset = 0, length = 0;
    std::shared_ptr<SharedFile> shared;  // set for the chunks of a large file
};

class Mover {
  public:
    Mover(const MovePlan& plan, const std::function<void(const MoveProgress&)>& progress);
    MoveSummary run();

  private:
    // walk
    void add_entry(const MoveEntry& entry);
    void add_node(const std::string& src, const std::string& dst, const struct stat& st, int depth,
                  std::size_t parent);
    void walk_dir(int fd, const std::string& src, const std::string& dst, int depth,
                  std::size_t self);
    // create directories
    void make_parents(const std::string& path);
    void ensure_dir(Node& node);
    void learn_new_dir(Node& node);
    bool in_new_dir(const Node& node) const {
        return node.parent != no_parent && nodes_[node.parent].created;
    }
    bool in_temp_tree(const Node& node) const {
        return node.parent != no_parent && nodes_[node.parent].temp_tree;
    }
    // The directory that holds `node` during the move (a path through a temporary directory
    // until that is renamed into place).
    std::string parent_path(const Node& node) const {
        return node.parent != no_parent ? nodes_[node.parent].at : split_last(node.dst).first;
    }
    void remove_stale_temps();
    // copy
    void run_task(const Task& task, Worker& worker);
    void copy_small_file(Node& node, Worker& worker);
    void copy_chunk(const Task& task, Worker& worker);
    bool open_pair(Node& node, Worker& worker, Fd& src, Fd& dst, bool& direct);
    Fd create_destination(Node& node, int dir, const std::string& name);
    void size_destination(const Node& node, int fd, bool reserve);
    void copy_data(const Node& node, int in, int out, off_t from, off_t to, bool direct,
                   bool drop_cache, Worker& worker);
    void copy_extent(const Node& node, int in, int out, off_t from, off_t to, bool direct,
                     bool drop_cache, Worker& worker);
    bool copy_direct_pipelined(const Node& node, int in, int out, off_t from, off_t to,
                               Worker& worker);
    void finish_file(Node& node, int src, int dst, bool truncate);
    void check_unchanged(const Node& node, int src);
    void copy_symlink(Node& node, Worker& worker);
    void copy_fifo(Node& node, Worker& worker);
    void place(Node& node, int dir, const std::string& name);
    std::string temp_name(const std::string& name);
    // finish
    void link_hard_links(bool temp_trees);
    void apply_dir_metadata(const Node& node, bool sync);
    void apply_dirs_metadata(bool temp_trees);
    void publish_dir(Node& node);
    bool copy_xattrs(int src, int dst, bool directory, const std::string& what);
    void set_owner_mode_times(int fd, const struct stat& st, const std::string& what,
                              bool gid_set = false, bool mode_set = false);
    void remove_temps() noexcept;

    template <class Fn>
    void run_parallel(std::size_t count, Fn fn);
    void report(bool force);
    void warn(const std::string& message);
    void check_stopped() const {
        if (stop_.load(std::memory_order_relaxed))
            throw Stopped{};
    }

    const MovePlan& plan_;
    const std::function<void(const MoveProgress&)>& progress_;
    Fd buffer_root_;
    std::unique_ptr<Side> src_, dst_;
    std::vector<Node> nodes_;
    std::vector<std::string> entry_tops_;  // destination of each entry's top node
    std::map<std::pair<dev_t, ino_t>, std::size_t> inodes_;
    std::vector<Worker> workers_;
    std::set<std::string> dirs_to_sync_;  // destination directories outside the trees
    std::set<std::string> shared_dirs_;   // destination directories of more than one node

    std::atomic<bool> stop_{false};
    std::atomic<std::uint64_t> files_done_{0}, bytes_done_{0};
    std::atomic<std::uint64_t> files_written_{0}, bytes_written_{0}, skipped_{0};
    std::uint64_t files_total_ = 0, bytes_total_ = 0;
    Clock::time_point last_report_{};

    std::mutex warnings_mutex_;
    std::vector<std::string> warnings_;
    std::set<std::string> warned_;
    std::size_t warnings_dropped_ = 0;

    mode_t umask_ = 077;  // the process's, read once
    std::uint64_t temp_prefix_ = 0;
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
    umask_ = umask(077);  // reading it means setting it: put it back at once
    umask(umask_);
    temp_prefix_ = std::random_device{}();
    temp_prefix_ = (temp_prefix_ << 32) ^ std::random_device{}() ^ static_cast<unsigned>(getpid());
}

void Mover::warn(const std::string& message) {
    std::lock_guard<std::mutex> lock(warnings_mutex_);
    if (!warned_.insert(message).second)
        return;
    if (warnings_.size() < max_warnings)
        warnings_.push_back(message);
    else
        ++warnings_dropped_;
}

void Mover::report(bool force) {
    const Clock::time_point now = Clock::now();
    if (!force && now - last_report_ < progress_interval)
        return;
    last_report_ = now;
    if (progress_)
        progress_(MoveProgress{files_done_.load(), files_total_, bytes_done_.load(), bytes_total_});
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
        } catch (const Stopped&) {
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
}

// ---- walk -------------------------------------------------------------------------------

void Mover::add_entry(const MoveEntry& entry) {
    const std::string src = normalize(entry.source, src_->in_buffer(), "source");
    bool into = entry.destination.empty() || entry.destination.back() == '/';
    std::string dst = normalize(entry.destination, dst_->in_buffer(), "destination");
    const std::string shown = src_->display(src);
    struct stat st {};
    if (!src_->stat_entry(src, st))
        throw Error(ExitCode::no_input, "cannot read " + shown + ": no such file or directory");
    switch (entry.type) {
        case StageType::directory: {
            if (S_ISLNK(st.st_mode) && src_->in_buffer())
                throw Error(ExitCode::no_perm, "refusing " + shown + ": it is a symlink");
            if (!S_ISDIR(st.st_mode))
                throw Error(ExitCode::data, shown + " is not a directory (type=directory)");
            entry_tops_.push_back(dst);
            add_node(src, dst, st, 0, no_parent);
            break;
        }
        case StageType::file: {
            if (S_ISDIR(st.st_mode))
                throw Error(ExitCode::data, shown + " is a directory (use type=directory)");
            struct stat existing {};
            if (!into && dst_->stat_entry(dst, existing) && S_ISDIR(existing.st_mode))
                into = true;
            if (into)
                dst = dst_->join(dst, split_last(src).second);
            entry_tops_.push_back(dst);
            add_node(src, dst, st, 0, no_parent);
            break;
        }
        case StageType::list:
            throw Error(ExitCode::software, "type=list entries must be expanded before moving");
    }
}

void Mover::add_node(const std::string& src, const std::string& dst, const struct stat& st,
                     int depth, std::size_t parent) {
    Node node;
    node.src = src;
    node.dst = dst;
    node.st = st;
    node.depth = depth;
    node.parent = parent;
    const mode_t type = st.st_mode & S_IFMT;
    if (type == S_IFDIR) {
        node.kind = Kind::directory;
        node.keep_metadata = dst_->in_buffer() && dst.empty();
        const std::size_t self = nodes_.size();
        nodes_.push_back(std::move(node));
        ++files_total_;
        walk_dir(-1, src, dst, depth, self);
        return;
    }
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
    if (st.st_nlink > 1) {
        const auto [it, first] =
            inodes_.emplace(std::make_pair(st.st_dev, st.st_ino), nodes_.size());
        if (!first) {
            node.kind = Kind::hard_link;
            node.link_to = it->second;
        }
    }
    if (node.kind == Kind::file)
        bytes_total_ += static_cast<std::uint64_t>(st.st_size);
    ++files_total_;
    nodes_.push_back(std::move(node));
}

void Mover::walk_dir(int parent, const std::string& src, const std::string& dst, int depth,
                     std::size_t self) {
    Fd dir;
    if (parent < 0) {
        dir = src_->open_dir(src, true);
    } else {
        const int fd = openat(parent, split_last(src).second.c_str(),
                              O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            fail("open directory " + src_->display(src), errno);
        dir = Fd(fd);
    }
    DirStream stream(dir.get());
    if (!stream)
        fail("list " + src_->display(src), errno);
    std::vector<std::string> names;
    while (const dirent* entry = stream.next())
        names.emplace_back(entry->d_name);
    if (errno != 0)
        fail("list " + src_->display(src), errno);
    for (const std::string& name : names) {
        const std::string child_src = src_->join(src, name);
        const std::string child_dst = dst_->join(dst, name);
        struct stat st {};
        if (fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
            fail("stat " + src_->display(child_src), errno);
        if (S_ISDIR(st.st_mode)) {
            Node node;
            node.kind = Kind::directory;
            node.src = child_src;
            node.dst = child_dst;
            node.st = st;
            node.depth = depth + 1;
            node.parent = self;
            const std::size_t child = nodes_.size();
            nodes_.push_back(std::move(node));
            ++files_total_;
            walk_dir(dir.get(), child_src, child_dst, depth + 1, child);
        } else {
            add_node(child_src, child_dst, st, depth + 1, self);
        }
    }
}

// ---- directories --------------------------------------------------------------------------

// mkdir -p for the directories above `path`: in the buffer one component at a time beneath
// the root; outside with ordinary paths (the user's own symlinks on the way are followed).
void Mover::make_parents(const std::string& path) {
    const std::string parent = split_last(path).first;
    dirs_to_sync_.insert(parent);
    const std::vector<std::string> parts = components(parent);
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

void Mover::ensure_dir(Node& node) {
    node.at = node.dst;
    if (node.keep_metadata)
        return;
    const std::string parent = parent_path(node);
    const std::string name = split_last(node.dst).second;
    const std::string shown = dst_->display(node.dst);
    const Fd dir = dst_->open_dir(parent);
    if (in_temp_tree(node)) {  // nothing can be in the way in a directory made just now
        if (mkdirat(dir.get(), name.c_str(), 0700) != 0)
            fail("create directory " + shown, errno);
        node.at = dst_->join(parent, name);
        node.created = node.temp_tree = true;
        learn_new_dir(node);
        return;
    }
    // A durable move builds a directory that does not exist under a temporary name and renames
    // it into place once everything in it is durable: no per-file temporary and rename inside
    // it, and no final name below it before it is complete. Not for a destination that two
    // entries share (each would build its own tree), nor where a non-directory is replaced.
    struct stat st {};
    if (plan_.durable && shared_dirs_.count(node.dst) == 0 &&
        fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT) {
        const std::string temp = temp_name(name);
        if (mkdirat(dir.get(), temp.c_str(), 0700) != 0)
            fail("create directory " + shown, errno);
        node.temp = temp;
        node.at = dst_->join(parent, temp);
        node.created = node.temp_tree = true;
        learn_new_dir(node);
        return;
    }
    if (mkdirat(dir.get(), name.c_str(), 0700) == 0) {
        node.created = true;
        learn_new_dir(node);
        return;
    }
    if (errno != EEXIST)
        fail("create directory " + shown, errno);
    if (fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
        fail("stat " + shown, errno);
    if (S_ISLNK(st.st_mode))
        throw Error(ExitCode::no_perm, "refusing " + shown + ": a symlink is in the way");
    if (!S_ISDIR(st.st_mode)) {
        if (unlinkat(dir.get(), name.c_str(), 0) != 0 || mkdirat(dir.get(), name.c_str(), 0700))
            fail("replace " + shown + " with a directory", errno);
        node.created = true;
        learn_new_dir(node);
        return;
    }
    // Kept from an earlier run, it may already carry a read-only final mode: open it up until
    // its metadata is applied again at the end. (It was just seen to be a directory; only the
    // user could swap it, and only against themself.)
    if ((st.st_mode & S_IRWXU) != S_IRWXU &&
        fchmodat(dir.get(), name.c_str(), (st.st_mode & 07777) | S_IRWXU, 0) != 0)
        fail("make " + shown + " writable", errno);
}

// What a file created in this new directory gets by itself: the directory's group if it is
// setgid, else ours; and its mode minus the umask unless the directory inherited any extended
// attribute (a default ACL would decide the mode instead). Files then skip fchown/fchmod.
void Mover::learn_new_dir(Node& node) {
    const Fd fd = dst_->open_dir(node.at, true);
    struct stat st {};
    if (fstat(fd.get(), &st) != 0)
        return;
    node.new_file_gid = (st.st_mode & S_ISGID) ? st.st_gid : getegid();
    node.plain_modes = flistxattr(fd.get(), nullptr, 0) == 0;
}

// ---- temporaries --------------------------------------------------------------------------

constexpr std::size_t temp_suffix_digits = 20;  // 16 hex digits per move, 4 per file

std::string long_name_tag(const std::string& name) {
    return std::to_string(std::hash<std::string>{}(name));
}

std::string Mover::temp_name(const std::string& name) {
    char suffix[40];
    std::snprintf(suffix, sizeof suffix, "%016llx%04llx",
                  static_cast<unsigned long long>(temp_prefix_),
                  static_cast<unsigned long long>(temp_counter_.fetch_add(1) & 0xffff));
    std::string temp = "." + name + ".bbkit-" + suffix;
    if (temp.size() <= NAME_MAX)
        return temp;
    // A long name leaves no room for a suffix: a short name still unique within this move.
    return ".bbkit-" + long_name_tag(name) + "-" + suffix;
}

// The name a temporary of temp_name() was made for: "" when `entry` is not shaped like one;
// a hash tag ("#" + tag) for the short form of long names.
std::string temp_owner(const std::string& entry) {
    const std::size_t suffix = temp_suffix_digits;
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

// A move killed before its renames (stage-out, or symlinks and fifos of a stage-in) left its
// temporaries beside the names it was writing: files, and whole directories a durable move was
// building. In every destination directory that existed before this move, removes those made
// for a name this move writes there (the contents of a temporary directory were never synced,
// so nothing in it is reused); an entry of the source that merely looks like a temporary is
// kept, as is anything else, and so are the temporary directories this move just made.
void Mover::remove_stale_temps() {
    struct Names {
        std::set<std::string> all, written;  // every name moved there; owners of temporaries
        std::set<std::string> ours;          // temporary directories of this move
    };
    std::map<std::string, Names> dirs;
    for (const Node& node : nodes_) {
        if (in_new_dir(node) || (node.kind == Kind::directory && node.keep_metadata))
            continue;
        const auto [parent, name] = split_last(node.dst);
        Names& names = dirs[parent];
        names.all.insert(name);
        names.written.insert(name);
        names.written.insert("#" + long_name_tag(name));
        if (node.kind == Kind::directory && !node.temp.empty())
            names.ours.insert(node.temp);
    }
    for (const auto& [path, names] : dirs) {
        Fd dir;
        try {
            dir = dst_->open_dir(path);
        } catch (const Error&) {
            continue;  // the copy itself reports what is wrong with this directory
        }
        std::vector<std::string> stale;
        {
            DirStream stream(dir.get());
            if (!stream)
                continue;
            while (const dirent* entry = stream.next()) {
                if (names.all.count(entry->d_name) != 0 || names.ours.count(entry->d_name) != 0)
                    continue;
                const std::string owner = temp_owner(entry->d_name);
                if (!owner.empty() && names.written.count(owner) != 0)
                    stale.emplace_back(entry->d_name);
            }
        }
        for (const std::string& name : stale) {
            if (const int err = remove_tree_beneath(dir.get(), name); err != 0)
                warn("cannot remove the stale temporary " + dst_->display(dst_->join(path, name)) +
                     ": " + reason(err));
        }
    }
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
    // In a new directory without inherited ACLs a plain mode can be given at creation (the
    // file is written through this descriptor whatever its mode); else 0600 until fchmod.
    mode_t mode = 0600;
    node.mode_set = node.gid_set = false;
    if (in_new_dir(node)) {
        const Node& parent = nodes_[node.parent];
        const mode_t perm = node.st.st_mode & 0777;
        node.gid_set = parent.new_file_gid == node.st.st_gid;
        if (parent.plain_modes && (node.st.st_mode & 07000) == 0 && (perm & umask_) == 0) {
            mode = perm;
            node.mode_set = true;
        }
    }
    const int fd =
        openat(dir, target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
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

// Gives the destination its full size before chunks or O_DIRECT pieces land at their offsets.
// `reserve` (dense files written with O_DIRECT) allocates the blocks up front: ext4 then lets
// direct writes to one file run in parallel, where writes that allocate take the inode lock
// exclusively one at a time, and a full file system fails here, before any copying. A file
// system that cannot reserve gets a plain size.
void Mover::size_destination(const Node& node, int fd, bool reserve) {
    if (reserve) {
        if (fallocate(fd, 0, 0, node.st.st_size) == 0)
            return;
        const int err = errno;
        if (err != EOPNOTSUPP && err != ENOSYS && err != EINVAL)
            fail("write " + dst_->display(node.dst), err);
    }
    if (ftruncate(fd, node.st.st_size) != 0)
        fail("write " + dst_->display(node.dst), errno);
}

bool same_mtime(const struct stat& a, const struct stat& b) {
    return a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec;
}

// Opens the source and creates the destination; false when the destination is already
// complete (same size and ns mtime: a rerun after success or a crash).
bool Mover::open_pair(Node& node, Worker& worker, Fd& src, Fd& dst, bool& direct) {
    const auto [src_parent, src_name] = split_last(node.src);
    const std::string dst_name = split_last(node.dst).second;
    const int dst_dir = worker.dst_dir.get(*dst_, parent_path(node));
    // A directory this move created holds nothing yet: no earlier copy to look for.
    struct stat existing {};
    if (!in_new_dir(node) &&
        fstatat(dst_dir, dst_name.c_str(), &existing, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISREG(existing.st_mode) && existing.st_size == node.st.st_size &&
        same_mtime(existing, node.st))
        return false;
    const int src_dir = worker.src_dir.get(*src_, src_parent);
    direct = plan_.direct_io && node.st.st_size >= direct_min_size;
    const int flags = O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC;
    int fd = openat(src_dir, src_name.c_str(), flags | (direct ? O_DIRECT : 0));
    if (fd < 0 && direct && errno == EINVAL) {  // the file system refuses O_DIRECT
        direct = false;
        fd = openat(src_dir, src_name.c_str(), flags);
    }
    if (fd < 0)
        fail("read " + src_->display(node.src), errno == ELOOP ? EACCES : errno);
    src = Fd(fd);
    struct stat now {};
    if (fstat(src.get(), &now) != 0 || !S_ISREG(now.st_mode))
        throw Error(ExitCode::io,
                    "cannot read " + src_->display(node.src) + ": it changed during the move");
    dst = create_destination(node, dst_dir, dst_name);
    if (direct) {
        const int fl = fcntl(dst.get(), F_GETFL);
        if (fl < 0 || fcntl(dst.get(), F_SETFL, fl | O_DIRECT) != 0) {
            // The destination refuses O_DIRECT: reopen the source buffered as well.
            direct = false;
            fd = openat(src_dir, src_name.c_str(), flags);
            if (fd < 0)
                fail("read " + src_->display(node.src), errno);
            src = Fd(fd);
        }
    }
    return true;
}

void Mover::run_task(const Task& task, Worker& worker) {
    Node& node = nodes_[task.node];
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
        case Kind::directory:
        case Kind::hard_link:
            return;
    }
    files_done_.fetch_add(1);
}

bool is_sparse(const struct stat& st) {
    return static_cast<off_t>(st.st_blocks) * 512 < st.st_size;
}

void Mover::copy_small_file(Node& node, Worker& worker) {
    Fd src, dst;
    bool direct = false;
    const auto size = static_cast<std::uint64_t>(node.st.st_size);
    if (!open_pair(node, worker, src, dst, direct)) {
        skipped_.fetch_add(1);
    } else {
        const bool sparse = is_sparse(node.st);
        if (sparse || direct)
            size_destination(node, dst.get(), direct && !sparse);
        if (node.st.st_size > 0)
            copy_data(node, src.get(), dst.get(), 0, node.st.st_size, direct, false, worker);
        finish_file(node, src.get(), dst.get(), direct);
        fault_point("mover.file-copied");
        files_written_.fetch_add(1);
        bytes_written_.fetch_add(size);
    }
    bytes_done_.fetch_add(size);
    files_done_.fetch_add(1);
}

void Mover::copy_chunk(const Task& task, Worker& worker) {
    Node& node = nodes_[task.node];
    SharedFile& file = *task.shared;
    {
        std::lock_guard<std::mutex> lock(file.mutex);
        if (file.failed)
            throw Stopped{};  // the worker that opened it reports why
        if (!file.opened) {
            // Once only: a second attempt would make a second temporary.
            file.failed = true;
            file.skip = !open_pair(node, worker, file.src, file.dst, file.direct);
            // Full size first: chunks write at their own offsets, holes stay holes.
            if (!file.skip)
                size_destination(node, file.dst.get(), file.direct && !is_sparse(node.st));
            file.opened = true;
            file.failed = false;
        }
    }
    if (!file.skip)
        copy_data(node, file.src.get(), file.dst.get(), task.offset, task.offset + task.length,
                  file.direct, true, worker);
    bytes_done_.fetch_add(static_cast<std::uint64_t>(task.length));
    if (file.remaining.fetch_sub(1) != 1)
        return;
    if (file.skip) {
        skipped_.fetch_add(1);
    } else {
        finish_file(node, file.src.get(), file.dst.get(), true);
        files_written_.fetch_add(1);
        bytes_written_.fetch_add(static_cast<std::uint64_t>(node.st.st_size));
    }
    file.src.reset();
    file.dst.reset();
    files_done_.fetch_add(1);
}

// Copies the data of [from, to), skipping holes when the source has any.
void Mover::copy_data(const Node& node, int in, int out, off_t from, off_t to, bool direct,
                      bool drop_cache, Worker& worker) {
    if (!is_sparse(node.st)) {
        copy_extent(node, in, out, from, to, direct, drop_cache, worker);
        return;
    }
    for (off_t pos = from; pos < to;) {
        const off_t data = lseek(in, pos, SEEK_DATA);
        if (data < 0 && errno == ENXIO)
            return;  // only a hole is left
        if (data < 0)
            fail("read " + src_->display(node.src), errno);
        if (data >= to)
            return;
        off_t hole = lseek(in, data, SEEK_HOLE);
        if (hole < 0)
            fail("read " + src_->display(node.src), errno);
        hole = std::min(hole, to);
        copy_extent(node, in, out, data, hole, direct, drop_cache, worker);
        pos = hole;
    }
}

bool copy_file_range_unsupported(int err) {
    return err == EXDEV || err == EINVAL || err == ENOSYS || err == EOPNOTSUPP || err == EBADF;
}

bool is_write_error(int err) {
    return err == ENOSPC || err == EDQUOT || err == EFBIG || err == EROFS;
}

void Mover::copy_extent(const Node& node, int in, int out, off_t from, off_t to, bool direct,
                        bool drop_cache, Worker& worker) {
    if (direct) {
        // O_DIRECT wants aligned offsets and lengths; extents come from chunk boundaries and
        // SEEK_DATA/SEEK_HOLE (block-aligned), so rounding only ever adds bytes of the same
        // file, and the padding past the end is cut by the final ftruncate.
        from -= from % direct_align;
        to += (direct_align - to % direct_align) % direct_align;
        if (copy_direct_pipelined(node, in, out, from, to, worker))
            return;
    }
    bool use_copy_file_range = !direct;
    for (off_t pos = from; pos < to;) {
        check_stopped();
        const std::size_t want = static_cast<std::size_t>(std::min<off_t>(piece_bytes, to - pos));
        ssize_t n = -1;
        if (use_copy_file_range) {
            loff_t in_off = pos, out_off = pos;
            n = copy_file_range(in, &in_off, out, &out_off, want, 0);
            if (n < 0 && copy_file_range_unsupported(errno)) {
                use_copy_file_range = false;
                continue;
            }
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0) {
                const int err = errno;
                if (is_write_error(err))
                    fail("write " + dst_->display(node.dst), err);
                fail("copy " + src_->display(node.src) + " to " + dst_->display(node.dst), err);
            }
        } else {
            char* buffer = worker.io_buffer();
            n = pread(in, buffer, want, pos);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                fail("read " + src_->display(node.src), errno);
            std::size_t length = static_cast<std::size_t>(n);
            if (direct && length % direct_align != 0) {  // end of file: pad to a whole block
                const std::size_t padded = length + (direct_align - length % direct_align);
                std::memset(buffer + length, 0, padded - length);
                length = padded;
            }
            for (std::size_t done = 0; done < length;) {
                const ssize_t w =
                    pwrite(out, buffer + done, length - done, pos + static_cast<off_t>(done));
                if (w < 0 && errno == EINTR)
                    continue;
                if (w < 0)
                    fail("write " + dst_->display(node.dst), errno);
                done += static_cast<std::size_t>(w);
            }
            if (direct && static_cast<std::size_t>(n) < want)
                return;  // end of file: the next offset would not be aligned
        }
        if (n == 0)
            return;  // the source shrank; the final ftruncate restores the walked size
        if (drop_cache) {
            // Big buffered copies: start writeback now and let go of the source's pages, so
            // the page cache does not grow (fresh guest memory is expensive to touch here).
            sync_file_range(out, pos, n, SYNC_FILE_RANGE_WRITE);
            posix_fadvise(in, pos, n, POSIX_FADV_DONTNEED);
            if (pos >= static_cast<off_t>(piece_bytes))
                posix_fadvise(out, pos - static_cast<off_t>(piece_bytes), piece_bytes,
                              POSIX_FADV_DONTNEED);
        }
        pos += n;
        fault_point("mover.mid-copy");
    }
}

// O_DIRECT copy of the aligned range [from, to) with direct_depth pieces in flight: each read
// is queued as a slot frees up, and its write as soon as the read completes. The piece that
// meets the end of the file is padded to a whole block (the final ftruncate cuts it). Returns
// false, having copied nothing, where no AIO context is available.
bool Mover::copy_direct_pipelined(const Node& node, int in, int out, off_t from, off_t to,
                                  Worker& worker) {
    AioContext* aio = worker.direct_pipeline();
    if (!aio)
        return false;
    enum class State { idle, reading, writing };
    struct Slot {
        char* data = nullptr;
        off_t pos = 0;
        std::size_t length = 0;
        State state = State::idle;
        iocb cb{};
    };
    Slot slots[direct_depth];
    for (unsigned i = 0; i < direct_depth; ++i)
        slots[i].data = worker.direct_buffers.get() + i * direct_piece;
    unsigned busy = 0;
    off_t next = from;
    bool end = false;      // a read came back short: the file ends there
    bool stopped = false;  // another worker failed
    int error = 0;
    std::string error_what;
    auto failed = [&](int err, const std::string& what) {
        if (error == 0) {
            error = err;
            error_what = what;
        }
    };
    auto submit = [&](Slot& slot, State state) {
        slot.cb = iocb{};
        slot.cb.aio_data = reinterpret_cast<std::uint64_t>(&slot);
        slot.cb.aio_lio_opcode = state == State::reading ? IOCB_CMD_PREAD : IOCB_CMD_PWRITE;
        slot.cb.aio_fildes = static_cast<std::uint32_t>(state == State::reading ? in : out);
        slot.cb.aio_buf = reinterpret_cast<std::uint64_t>(slot.data);
        slot.cb.aio_nbytes = slot.length;
        slot.cb.aio_offset = slot.pos;
        const int err = aio->submit(&slot.cb);
        if (err != 0) {
            failed(err, state == State::reading ? "read " + src_->display(node.src)
                                                : "write " + dst_->display(node.dst));
            slot.state = State::idle;
            return;
        }
        slot.state = state;
        ++busy;
    };
    io_event events[direct_depth];
    for (;;) {
        if (stop_.load(std::memory_order_relaxed))
            stopped = true;
        for (Slot& slot : slots) {
            if (slot.state != State::idle || end || stopped || error != 0 || next >= to)
                continue;
            slot.pos = next;
            slot.length = static_cast<std::size_t>(std::min<off_t>(direct_piece, to - next));
            next += static_cast<off_t>(slot.length);
            submit(slot, State::reading);
        }
        if (busy == 0)
            break;
        const long n = aio->wait(events, direct_depth);
        for (long e = 0; e < n; ++e) {
            Slot& slot = *reinterpret_cast<Slot*>(events[e].data);
            const long long res = events[e].res;
            --busy;
            const State was = slot.state;
            slot.state = State::idle;
            if (was == State::reading) {
                if (res < 0) {
                    failed(static_cast<int>(-res), "read " + src_->display(node.src));
                    continue;
                }
                auto got = static_cast<std::size_t>(res);
                if (got < slot.length) {
                    end = true;  // the source shrank or this is its last block
                    if (got == 0)
                        continue;
                    const std::size_t padded =
                        got + (direct_align - got % direct_align) % direct_align;
                    std::memset(slot.data + got, 0, padded - got);
                    slot.length = padded;
                }
                if (error == 0 && !stopped)
                    submit(slot, State::writing);
                continue;
            }
            if (res < 0) {
                failed(static_cast<int>(-res), "write " + dst_->display(node.dst));
                continue;
            }
            // A short write (rare: a full disk midway) finishes synchronously or fails there.
            for (auto done = static_cast<std::size_t>(res); done < slot.length && error == 0;) {
                const ssize_t w = pwrite(out, slot.data + done, slot.length - done,
                                         slot.pos + static_cast<off_t>(done));
                if (w < 0 && errno == EINTR)
                    continue;
                if (w <= 0)
                    failed(w < 0 ? errno : ENOSPC, "write " + dst_->display(node.dst));
                else
                    done += static_cast<std::size_t>(w);
            }
        }
    }
    // Nothing is in flight any more: the buffers and descriptors may go.
    if (error != 0)
        fail(error_what, error);
    if (stopped)
        throw Stopped{};
    return true;
}

void Mover::set_owner_mode_times(int fd, const struct stat& st, const std::string& what,
                                 bool gid_set, bool mode_set) {
    // The group only when the user may (a member of it); chown clears suid/sgid, so the mode
    // comes after it, and the times come last because every change above touches ctime only.
    if (!gid_set && fchown(fd, static_cast<uid_t>(-1), st.st_gid) != 0 && errno != EPERM)
        fail("set the group of " + what, errno);
    if (!mode_set && fchmod(fd, st.st_mode & 07777) != 0) {
        if (errno != EPERM)
            fail("set the mode of " + what, errno);
        warn("cannot set the mode of " + what + ": " + reason(errno));
    }
    const struct timespec times[2] = {st.st_atim, st.st_mtim};
    if (futimens(fd, times) != 0) {
        if (errno != EPERM)
            fail("set the times of " + what, errno);
        warn("cannot set the times of " + what + ": " + reason(errno));
    }
}

// A source written, truncated or replaced while it was copied leaves a copy that is neither its
// old nor its new content: the move fails (exit 74) rather than report such a file done, and the
// copy keeps a fresh mtime so a rerun copies it again. ctime catches a change that restored the
// size and the mtime.
void Mover::check_unchanged(const Node& node, int src) {
    struct stat now {};
    if (fstat(src, &now) != 0)
        fail("read " + src_->display(node.src), errno);
    if (now.st_ino != node.st.st_ino || now.st_dev != node.st.st_dev ||
        now.st_size != node.st.st_size || !same_mtime(now, node.st) ||
        now.st_ctim.tv_sec != node.st.st_ctim.tv_sec ||
        now.st_ctim.tv_nsec != node.st.st_ctim.tv_nsec)
        throw Error(ExitCode::io, "cannot copy " + src_->display(node.src) +
                                      ": it changed while it was copied (rerun when the source "
                                      "is no longer being written)");
}

void Mover::finish_file(Node& node, int src, int dst, bool truncate) {
    const std::string shown = dst_->display(node.dst);
    check_unchanged(node, src);
    if (truncate && ftruncate(dst, node.st.st_size) != 0)
        fail("write " + shown, errno);
    // An ACL written to it rewrites the group bits of its mode: then fchmod as always.
    const bool acl_or_xattr = copy_xattrs(src, dst, false, shown);
    set_owner_mode_times(dst, node.st, shown, node.gid_set, node.mode_set && !acl_or_xattr);
    if (plan_.durable && !plan_.trust_syncfs && fsync(dst) != 0)
        fail("write " + shown, errno);
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
    fchownat(dst_dir, temp.c_str(), static_cast<uid_t>(-1), node.st.st_gid,
             AT_SYMLINK_NOFOLLOW);  // best effort, as for files
    const struct timespec times[2] = {node.st.st_atim, node.st.st_mtim};
    if (utimensat(dst_dir, temp.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0)
        fail("set the times of " + dst_->display(node.dst), errno);
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
    set_owner_mode_times(fd, node.st, shown);
    place(node, dst_dir, dst_name);
    files_written_.fetch_add(1);
}

bool xattr_copied(const char* name, bool directory) {
    return std::strncmp(name, "user.", 5) == 0 ||
           std::strcmp(name, "system.posix_acl_access") == 0 ||
           (directory && std::strcmp(name, "system.posix_acl_default") == 0);
}

// user.* attributes and POSIX ACLs, as raw bytes (no libacl needed: the kernel's xattr form
// of an ACL is the same on both sides).
bool Mover::copy_xattrs(int src, int dst, bool directory, const std::string& what) {
    std::string names(256, '\0');
    ssize_t n;
    while ((n = flistxattr(src, &names[0], names.size())) < 0 && errno == ERANGE)
        names.resize(names.size() * 4);
    if (n < 0) {
        if (errno == ENOTSUP || errno == EOPNOTSUPP)
            return false;
        fail("list the extended attributes for " + what, errno);
    }
    bool written = false;
    std::string value;
    for (std::size_t at = 0; at < static_cast<std::size_t>(n);) {
        const char* name = names.c_str() + at;
        at += std::strlen(name) + 1;
        if (!xattr_copied(name, directory))
            continue;
        value.resize(256);
        ssize_t size;
        while ((size = fgetxattr(src, name, &value[0], value.size())) < 0 && errno == ERANGE)
            value.resize(value.size() * 4);
        if (size < 0) {
            if (errno == ENODATA)
                continue;  // removed meanwhile
            fail("read extended attribute " + std::string(name) + " for " + what, errno);
        }
        if (fsetxattr(dst, name, value.data(), static_cast<std::size_t>(size), 0) == 0) {
            written = true;
            continue;
        }
        const int err = errno;
        if (err == ENOTSUP || err == EOPNOTSUPP || err == EPERM || err == EACCES)
            warn("extended attribute " + std::string(name) + " not kept on " + what + ": " +
                 reason(err));
        else
            fail("write extended attribute " + std::string(name) + " for " + what, err);
    }
    return written;
}

// ---- finishing ----------------------------------------------------------------------------

// `temp_trees`: the links inside directory trees still under a temporary name (made before the
// sync, with final names, like the files beside them); else every other link, once the files
// are in place. A link's target is reached where it is now: under its temporary name until
// that is renamed.
void Mover::link_hard_links(bool temp_trees) {
    std::map<std::string, Fd> dirs;
    auto dir_of = [&](const std::string& parent) {
        auto it = dirs.find(parent);
        if (it == dirs.end())
            it = dirs.emplace(parent, dst_->open_dir(parent)).first;
        return it->second.get();
    };
    for (Node& node : nodes_) {
        if (node.kind != Kind::hard_link || in_temp_tree(node) != temp_trees)
            continue;
        const Node& target = nodes_[node.link_to];
        const std::string link_name = split_last(node.dst).second;
        const std::string target_name =
            target.temp.empty() ? split_last(target.dst).second : target.temp;
        const int link_dir = dir_of(parent_path(node));
        const int target_dir = dir_of(parent_path(target));
        struct stat a {
        }, b{};
        const bool fresh = in_new_dir(node);
        if (!fresh && fstatat(link_dir, link_name.c_str(), &a, AT_SYMLINK_NOFOLLOW) == 0 &&
            fstatat(target_dir, target_name.c_str(), &b, AT_SYMLINK_NOFOLLOW) == 0 &&
            a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
            skipped_.fetch_add(1);
        } else {
            if (!fresh && unlinkat(link_dir, link_name.c_str(), 0) != 0 && errno != ENOENT)
                fail("replace " + dst_->display(node.dst), errno);
            if (linkat(target_dir, target_name.c_str(), link_dir, link_name.c_str(), 0) != 0)
                fail("link " + dst_->display(node.dst) + " to " + dst_->display(target.dst), errno);
            files_written_.fetch_add(1);
        }
        files_done_.fetch_add(1);
        report(false);
    }
}

void Mover::apply_dir_metadata(const Node& node, bool sync) {
    if (!node.keep_metadata) {
        const Fd src = src_->open_dir(node.src, true);
        const Fd dst = dst_->open_dir(node.at, true);
        const std::string shown = dst_->display(node.dst);
        copy_xattrs(src.get(), dst.get(), true, shown);
        set_owner_mode_times(dst.get(), node.st, shown);
        if (sync && fsync(dst.get()) != 0)
            fail("sync directory " + shown, errno);
    } else if (sync && fsync(buffer_root_.get()) != 0) {
        fail("sync directory " + plan_.buffer_root, errno);
    }
    files_done_.fetch_add(1);
}

// Directory modes and times come last (a 0500 directory had to stay writable while filled),
// deepest first so a directory is final only after everything below it. `temp_trees`: the
// directories of trees still under a temporary name, before the sync that covers them (each is
// fsync'd where syncfs is not trusted); else the others, each fsync'd (renames landed in them).
void Mover::apply_dirs_metadata(bool temp_trees) {
    const bool sync = plan_.durable && (!temp_trees || !plan_.trust_syncfs);
    int deepest = 0;
    for (const Node& node : nodes_)
        deepest = std::max(deepest, node.depth);
    for (int depth = deepest; depth >= 0; --depth) {
        std::vector<std::size_t> level;
        for (std::size_t i = 0; i < nodes_.size(); ++i)
            if (nodes_[i].kind == Kind::directory && nodes_[i].depth == depth &&
                nodes_[i].temp_tree == temp_trees)
                level.push_back(i);
        run_parallel(level.size(),
                     [&](std::size_t i, Worker&) { apply_dir_metadata(nodes_[level[i]], sync); });
    }
}

// Renames a directory tree built under a temporary name into place. Never over anything: a
// directory that appeared there meanwhile is not replaced (where the file system cannot refuse
// a replacement, a plain rename still fails over anything but an empty directory).
void Mover::publish_dir(Node& node) {
    const auto [parent, name] = split_last(node.dst);
    const std::string shown = dst_->display(node.dst);
    const Fd dir = dst_->open_dir(parent);
    int rc = renameat2(dir.get(), node.temp.c_str(), dir.get(), name.c_str(), RENAME_NOREPLACE);
    if (rc != 0 && errno == EINVAL)
        rc = renameat(dir.get(), node.temp.c_str(), dir.get(), name.c_str());
    if (rc != 0)
        fail("rename into place " + shown, errno);
    node.temp.clear();
    fault_point("mover.renamed");
    // A rename changes the ctime of what it moves, not its mtime, on the file systems known
    // here; should one differ, the times are set again and made durable.
    struct stat st {};
    if (fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        !same_mtime(st, node.st)) {
        const Fd fd = dst_->open_dir(node.dst, true);
        const struct timespec times[2] = {node.st.st_atim, node.st.st_mtim};
        if (futimens(fd.get(), times) != 0 || fsync(fd.get()) != 0)
            fail("set the times of " + shown, errno);
    }
}

// After a failure: no temporary of this move is left (files, and trees not yet in place).
void Mover::remove_temps() noexcept {
    for (Node& node : nodes_) {
        if (node.temp.empty())
            continue;
        try {
            const Fd dir = dst_->open_dir(parent_path(node));
            if (node.kind == Kind::directory)
                remove_tree_beneath(dir.get(), node.temp);
            else
                unlinkat(dir.get(), node.temp.c_str(), 0);
        } catch (...) {
        }
        node.temp.clear();
    }
}

MoveSummary Mover::run() {
    const Clock::time_point start = Clock::now();
    for (const MoveEntry& entry : plan_.entries)
        add_entry(entry);
    report(true);
    fault_point("mover.walked");

    for (const std::string& top : entry_tops_)
        make_parents(top);
    if (plan_.durable) {
        std::set<std::string> seen;
        for (const Node& node : nodes_)
            if (node.kind == Kind::directory && !seen.insert(node.dst).second)
                shared_dirs_.insert(node.dst);
    }
    // A descriptor on each destination file system, opened before any data is written: since
    // Linux 5.8 syncfs reports the writeback errors that happened after this open.
    std::vector<Fd> file_systems;
    if (plan_.durable && plan_.trust_syncfs) {
        std::set<dev_t> seen;
        for (const std::string& dir : dirs_to_sync_) {
            Fd fd = dst_->open_dir(dir);
            struct stat st {};
            if (fstat(fd.get(), &st) == 0 && seen.insert(st.st_dev).second)
                file_systems.push_back(std::move(fd));
        }
    }

    try {
        // Directories first, parents before children (the walk's order), all writable for now.
        for (Node& node : nodes_) {
            if (node.kind == Kind::directory) {
                ensure_dir(node);
                report(false);
            }
        }
        remove_stale_temps();
        fault_point("mover.dirs-made");

        // Chunks of large files first, in walk order (each large file is shared by all workers
        // at once, so only a few files are open at any time), then the small files in runs.
        std::vector<Task> tasks;
        std::vector<std::pair<std::size_t, std::size_t>> runs;   // [first, last) of tasks
        std::map<std::size_t, std::vector<std::size_t>> by_dir;  // parent -> small nodes
        std::vector<std::size_t> dir_order;
        for (std::size_t i = 0; i < nodes_.size(); ++i) {
            const Node& node = nodes_[i];
            if (node.kind == Kind::directory || node.kind == Kind::hard_link)
                continue;
            if (node.kind != Kind::file || node.st.st_size < large_file) {
                auto [it, first] = by_dir.try_emplace(node.parent);
                if (first)
                    dir_order.push_back(node.parent);
                it->second.push_back(i);
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
                    Task{i, offset, std::min(chunk_bytes, node.st.st_size - offset), shared});
            }
        }
        // One run of each directory in turn; directories drop out as they run dry.
        std::vector<std::pair<const std::vector<std::size_t>*, std::size_t>> active;
        for (const std::size_t dir : dir_order)
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
        by_dir.clear();
        run_parallel(runs.size(), [&](std::size_t r, Worker& worker) {
            for (std::size_t t = runs[r].first; t < runs[r].second; ++t) {
                check_stopped();
                run_task(tasks[t], worker);
            }
        });
        tasks.clear();
        // Trees under a temporary name are completed before the sync, so it covers all of them.
        link_hard_links(true);
        apply_dirs_metadata(true);

        fault_point("mover.before-syncfs");
        if (plan_.durable) {
            for (const Fd& fd : file_systems)
                if (syncfs(fd.get()) != 0)
                    fail("sync the destination file system", errno);
            fault_point("mover.before-renames");
            // Every temporary now holds durable bytes: only now may it take its final name.
            std::vector<std::size_t> pending, trees;
            for (std::size_t i = 0; i < nodes_.size(); ++i) {
                if (!nodes_[i].temp.empty())
                    (nodes_[i].kind == Kind::directory ? trees : pending).push_back(i);
            }
            run_parallel(pending.size(), [&](std::size_t i, Worker& worker) {
                Node& node = nodes_[pending[i]];
                const std::string name = split_last(node.dst).second;
                const int dir = worker.dst_dir.get(*dst_, parent_path(node));
                if (renameat(dir, node.temp.c_str(), dir, name.c_str()) != 0)
                    fail("rename into place " + dst_->display(node.dst), errno);
                node.temp.clear();
                fault_point("mover.renamed");
            });
            fault_point("mover.before-dir-renames");
            for (const std::size_t i : trees)
                publish_dir(nodes_[i]);
            // Everything is reached under its final name from here on.
            for (Node& node : nodes_)
                if (node.kind == Kind::directory)
                    node.at = node.dst;
        }
    } catch (...) {
        remove_temps();
        throw;
    }
    link_hard_links(false);
    fault_point("mover.before-dir-metadata");
    apply_dirs_metadata(false);
    fault_point("mover.before-dir-fsync");
    // The parents of the entries' destinations: new names (and trees renamed) in them.
    if (plan_.durable) {
        for (const std::string& dir : dirs_to_sync_) {
            const Fd fd = dst_->open_dir(dir);
            if (fsync(fd.get()) != 0)
                fail("sync directory " + dst_->display(dir), errno);
        }
    }
    report(true);

    MoveSummary summary;
    summary.files = files_written_.load();
    summary.bytes = bytes_written_.load();
    summary.skipped = skipped_.load();
    summary.warnings = warnings_;
    if (warnings_dropped_ > 0)
        summary.warnings.push_back(std::to_string(warnings_dropped_) + " more warnings");
    summary.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return summary;
}

}  // namespace

MoveSummary run_move(const MovePlan& plan,
                     const std::function<void(const MoveProgress&)>& progress) {
    Mover mover(plan, progress);
    return mover.run();
}

}  // namespace bbkit
