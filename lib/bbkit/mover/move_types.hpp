// What the parts of a move hand each other: the two sides it works on, the walk's directories
// and entries, the batches the walk hands to the copy, and the temporary trees a durable move
// builds. Values and their few rules, no behaviour of a part (ARCHITECTURE.md, the mover).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/mover/common.hpp"
#include "bbkit/mover/copy_metadata.hpp"

namespace bbkit::mover_internal {

using Clock = std::chrono::steady_clock;

// Progress is reported at most this often (run_move, mover.hpp).
constexpr auto progress_interval = std::chrono::milliseconds(100);
// Files at least this large are split into chunks so several workers (and several requests in
// flight on the device) share one file; below it a file is one worker's job. A stage-in marks
// each chunk done on the destination (chunk_marks.hpp).
constexpr off_t large_file = off_t{64} << 20;
constexpr off_t chunk_bytes = off_t{32} << 20;
// Small files up to this size are read ahead a run at a time (Copier::read_ahead).
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
            return typed(kind_, "open", display(path), [&] {
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
    bool keep_metadata = false;  // the buffer root: bbkit owns its mode
    // A transfer job's part (MoveEntry::shared_directories): the finishing mover's to give
    // its mode, times and xattrs, once no part writes into it any more.
    bool metadata_left = false;
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
// The destination directory a node is written in, reached where it is now (through its
// temporary tree until that is in place).
inline std::string parent_path(const Node& node) {
    return node.parent ? node.parent->at : split_last(node.dst).first;
}

// A directory being walked: its source stream, and the stale temporaries of a killed move in
// its destination that a source name may own.
struct Frame {
    std::shared_ptr<Dir> dir;
    std::unique_ptr<DirStream> stream;  // the source directory (its fd() for *at calls)
    int fd() const { return stream->fd(); }
    std::map<std::string, std::vector<std::string>> tagged;  // long names' tags -> temporaries
    std::map<std::string, std::string> adoptable;            // name -> its temporary tree
};

}  // namespace bbkit::mover_internal
