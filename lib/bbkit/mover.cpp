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
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "bbkit/copy_file.hpp"
#include "bbkit/copy_metadata.hpp"
#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/mover_internal.hpp"
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
    // Created directories: what a file created in it gets by itself.
    NewFileDefaults new_files;
    // Files: what creating it already got right (set by create_destination).
    InitialMetadata initial;
};

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
    };
    CachedDir src_dir, dst_dir;
    CopyBuffers buffers;
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
    // What a file created in this new directory gets by itself, so files can skip
    // fchown/fchmod (copy_metadata.hpp).
    void learn_new_dir(Node& node) {
        node.new_files = new_file_defaults(dst_->open_dir(node.at, true).get());
    }
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
    FileCopy file_copy(const Node& node) const {
        return FileCopy{node.st, src_->display(node.src), dst_->display(node.dst)};
    }
    bool open_file(Node& node, const FileCopy& file, Worker& worker, FilePair& pair);
    Fd create_destination(Node& node, int dir, const std::string& name);
    void finish_file(const Node& node, const FileCopy& file, const FilePair& pair, bool truncate);
    void copy_symlink(Node& node, Worker& worker);
    void copy_fifo(Node& node, Worker& worker);
    void place(Node& node, int dir, const std::string& name);
    std::string temp_name(const std::string& name);
    // finish
    void link_hard_links(bool temp_trees);
    void apply_dir_metadata(const Node& node, bool sync);
    void apply_dirs_metadata(bool temp_trees);
    void publish_dir(Node& node);
    void remove_temps() noexcept;

    template <class Fn>
    void run_parallel(std::size_t count, Fn fn);
    void report(bool force);
    void warn(const std::string& message);
    void check_stopped() const {
        if (stop_.load(std::memory_order_relaxed))
            throw CopyStopped{};
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
    const CopyWarning warning_ = [this](const std::string& message) { warn(message); };

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
    node.initial = initial_metadata(
        node.st, in_new_dir(node) ? &nodes_[node.parent].new_files : nullptr, umask_);
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
    Node& node = nodes_[task.node];
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
        copy_xattrs(src.get(), dst.get(), true, shown, warning_);
        set_owner_mode_times(dst.get(), node.st, shown, warning_);
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
        measure_stage_in(plan.stages, plan.capacity);
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

}  // namespace bbkit
