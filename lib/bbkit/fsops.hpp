// File operations that must survive a crash at any instant: owned descriptors and atomic
// replacement of small files, durable (env files, markers) or not (snapshots).
#pragma once

#include <dirent.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bbkit {

// An owned file descriptor: closed exactly once, never leaked by an exception.
class Fd {
  public:
    Fd() = default;
    explicit Fd(int fd) : fd_(fd) {}
    Fd(Fd&& other) noexcept : fd_(other.release()) {}
    Fd& operator=(Fd&& other) noexcept;
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    ~Fd() { reset(); }

    int get() const { return fd_; }
    explicit operator bool() const { return fd_ >= 0; }
    int release();
    void reset(int fd = -1);

  private:
    int fd_ = -1;
};

// A directory stream over a duplicate of `fd` (the caller keeps its own descriptor and its
// offset), or over a path; `dir` is null when it could not be opened (errno says why). The one
// way bbkit lists a directory: closed exactly once, "." and ".." never returned.
class DirStream {
  public:
    explicit DirStream(int fd);
    DirStream(const DirStream&) = delete;
    DirStream& operator=(const DirStream&) = delete;
    ~DirStream();

    explicit operator bool() const { return dir_ != nullptr; }
    // The stream's own descriptor, for *at() calls on its entries (the caller may then close
    // the one it was made from: a walk holds one descriptor per level, not two).
    int fd() const { return dir_ ? dirfd(dir_) : -1; }
    // The next entry, or null at the end (or on a read error: errno is then non-zero).
    const dirent* next();
    // Back to the first entry, reading the directory as it is now.
    void rewind();

  private:
    DIR* dir_ = nullptr;
};

// The names in the directory `fd`, from its start. Throws system_error("cannot list " + what).
// All of them at once: for a directory a user fills (a buffer's), see drain_directory.
std::vector<std::string> list_directory(int fd, const std::string& what);

// How many names drain_directory reads before it acts on them: its memory, whatever the number
// of entries.
constexpr std::size_t directory_chunk = 1024;

// What drain_directory's caller did with an entry it was given.
enum class Drained {
    gone,  // removed or moved elsewhere: the directory changed
    left,  // not the caller's to take: it stays
    stop,  // the caller is done (out of time, or failed): drain_directory returns at once
};

// Gives `act` the entries of the directory `fd` for a caller that removes or moves away what
// it is given, reading at most directory_chunk names before acting on them and then reading
// on from there, so that a directory of millions of files costs one chunk of memory rather than
// millions of names. When the end is reached after a pass that changed the directory, it reads
// it again from the start (a file system may skip entries while a directory changes, and new
// ones may have come), until a pass changes nothing: entries that are `left` end it, never loop
// it. Returns 0, or the errno of a failed read.
int drain_directory(int fd, const std::function<Drained(const std::string& name)>& act);

// Opens `relative` beneath the directory `dirfd` without following any symlink or leaving the
// file system: bbkit's containment primitive wherever a less privileged party controls the
// tree (a pool's buffers, a user's stage tree). Throws Error(no_perm) when a symlink or a
// mount point is in the way, else system_error("cannot open " + what).
Fd open_beneath(int dirfd, const std::string& relative, int flags, const std::string& what,
                mode_t mode = 0);

// Removes `name` in the directory `parent` and, if it is a directory, everything beneath it,
// never following a symlink nor crossing into another file system; a directory without its
// owner's rwx bits gets them first. Returns 0 (also when `name` is already gone) or the errno
// of the first failure, leaving the rest in place. Directories are read with drain_directory:
// its memory does not grow with their number of entries.
int remove_tree_beneath(int parent, const std::string& name);

// Raises the soft RLIMIT_NOFILE to the hard one, for the rest of the process: a walk holds one
// directory open per level, and the usual soft limit (1024) is far below the hard one. False
// when it already is at the hard limit or may not be raised.
bool raise_descriptor_limit();

// Opens `relative` beneath the directory `dir` (itself never a symlink) for root, where a less
// privileged party owns `dir` (the state directory: its owner is not trusted with root's
// files, bbkit(7) SECURITY): open_beneath's rules, and a regular file must have exactly one
// link, so that a hard link planted to a file elsewhere is never written through. Errors as
// open_beneath's; a second link is Error(no_perm).
Fd open_state_file(const std::string& dir, const std::string& relative, int flags, mode_t mode = 0);

// open_state_file's rules beneath the open directory `dir` (the state directory, or one opened
// beneath it), for a caller that holds it open: `what` names the file in errors.
Fd open_state_file_at(int dir, const std::string& relative, int flags, const std::string& what,
                      mode_t mode = 0);

// Everything read from `fd` (from its offset) to the end, at most `limit` bytes: more is
// Error(data) "<what> is larger than <limit> bytes"; a failed read is
// system_error("cannot read " + what).
std::string read_all(int fd, const std::string& what, std::size_t limit);

// The content of the file `path` (read_all's rules; opening it follows read_all's errors, with
// `flags` added to O_RDONLY | O_CLOEXEC). std::nullopt when it does not exist.
std::optional<std::string> read_file(const std::string& path, const std::string& what,
                                     std::size_t limit, int flags = 0);
// The same for `name` in the open directory `dir` (one component; pass O_NOFOLLOW to refuse a
// symlink, O_NONBLOCK not to wait on a fifo).
std::optional<std::string> read_file_at(int dir, const std::string& name, const std::string& what,
                                        std::size_t limit, int flags = 0);

// Replaces `path` with `data`: a temporary file in the same directory is written with `mode`,
// fsync'd and renamed over `path`, then the directory is fsync'd. Readers see the old or the
// new content, never a mix; after return the new content survives a power cut.
// Throws Error(io) naming the path.
void write_file_atomically(const std::string& path, const std::string& data, mode_t mode);

// Writes `data` to `path`, a file a command line named, as write_file_atomically does, but
// never in place of what the caller did not write: an existing `path` must be a regular file of
// the caller's (its effective uid) with one name, whose first line begins with `first_line` (a
// file of this kind written before). Anything else there, a symlink such as /dev/stdout, a
// device, a FIFO, a directory, a second name of another file, someone else's file or a file of
// other content (/etc/passwd), is refused with Error(exists, one line) and left as it is
// (bbkit(7), SECURITY).
void write_own_output(const std::string& path, const std::string& data, mode_t mode,
                      std::string_view first_line);

// An output file a command line names (`path`): its directory, open, its name there, and the
// file when it exists, which must be a regular file with one name (looked at without following
// a symlink or opening it); anything else is refused through refuse_output. What
// write_own_output and every other output file of a tool start from.
struct OutputTarget {
    Fd dir;
    std::string name;
    std::optional<struct stat> existing;
};
OutputTarget output_target(const std::string& path);

// The existing output file of `target` (which output_target found), opened for reading and
// writing once it is checked: the caller's (effective uid), still the file that was looked at
// (opened as a path first, so no device or FIFO is ever opened), and, by its first bytes
// (`head`, up to 4 KiB), one this command wrote (`ours`). Anything else is refused
// (refuse_output).
Fd open_own_output(const OutputTarget& target, const std::string& path,
                   const std::function<bool(std::string_view head)>& ours);

// Whether an output file option's value names standard output ("-"); an empty name, or one
// ending in '/', names no file and is a usage error (64) naming `option`.
bool standard_output(const std::string& option, const std::string& target);

// Refuses to write the output file `path` (Error(exists), one line saying `why`).
[[noreturn]] void refuse_output(const std::string& path, const std::string& why);

// Replaces `path` with `data` like write_file_atomically, but without any fsync: readers see the
// old or the new content, never a mix, yet a power cut may lose the change (or leave the file
// empty). For snapshots that are regenerated from state.db (pools.json, public/), where an
// fsync per write would dominate the cost of every operation. An existing file is replaced by
// swapping names (RENAME_EXCHANGE) and removing the old one, which spares the device write ext4
// starts when a rename replaces a file. Throws Error(io) naming the path; a directory at `path`
// is left as it is.
void replace_file(const std::string& path, const std::string& data, mode_t mode);

// Who a file replace_file_at makes belongs to; -1 keeps the writer's uid or gid.
struct FileOwner {
    uid_t uid = static_cast<uid_t>(-1);
    gid_t gid = static_cast<gid_t>(-1);
};

// replace_file within the open directory `dir`, where `name` (one component) is replaced
// whatever the path to `dir` becomes meanwhile: for a directory another party may rename or
// swap for a symlink (the state owner's public/, bbkit(7) SECURITY). The temporary is created
// without following a symlink and given `owner` before it takes `name`. `what` names the file
// in errors.
void replace_file_at(int dir, const std::string& name, const std::string& data, mode_t mode,
                     const std::string& what, FileOwner owner = {});

// Puts a second name of the file `existing` (same directory's file system) in place of `path`,
// as replace_file would put new content there: a hard link, so no data is written and no
// block allocated; like replace_file, not durable. Throws Error(io) naming the paths.
void link_file(const std::string& existing, const std::string& path);

// Makes the directory entries of `dir` (creations, renames) durable. Throws Error(io).
void fsync_dir(const std::string& dir);

// What to fsync and how to name it in an error.
struct SyncTarget {
    int fd;
    std::string what;
};

// The fsyncs of a step whose outcome is needed later: start() syncs each target at once and
// keeps what failed; wait() throws the first failure as Error(io) naming what failed, so
// whatever may be recorded only once they are durable (a commit) calls wait() first, and a
// failure surfaces where the caller can undo its step. They run in the calling thread, one after
// the other: on this kind of VM, handing them to helper threads (to merge their device flushes
// and overlap a transaction's work) cost more in thread starts and idle-vCPU wake-ups than it
// saved (interleaved A/B in bench/README.md: teardown 7% and alloc 2% slower with threads).
class PendingSync {
  public:
    PendingSync() = default;
    static PendingSync start(const std::vector<SyncTarget>& targets);

    void wait();
    // Whether wait() found a failure.
    bool failed() const { return failed_; }

  private:
    struct Failure {
        std::string what;
        int error;
    };
    std::vector<Failure> failures_;
    bool failed_ = false;
};

}  // namespace bbkit
