#include "bbkit/fsops.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>

#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"

namespace bbkit {
namespace {

// The way on after a failed step of a file write, for the errors it can name: a missing
// directory is no matter of space or permissions.
std::string write_hint(int err) {
    switch (err) {
        case ENOSPC:
        case EDQUOT:
            return " (check free space and quotas)";
        case EACCES:
        case EPERM:
        case EROFS:
            return " (check permissions and how the file system is mounted)";
        case ENOENT:
            return " (its directory is missing)";
        default:
            return {};
    }
}

// A failed step of a file write, through system_error with the way on for its errno.
[[noreturn]] void fail_write(const std::string& what, const std::string& path, int err) {
    throw system_error("cannot " + what + " " + path, err, write_hint(err));
}

std::string parent_of(const std::string& path) {
    const auto slash = path.rfind('/');
    if (slash == std::string::npos)
        return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_of(const std::string& path) {
    const auto slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The directory of `path`, for the *_at functions that do the work: a caller that names a file
// by its path trusts the directories on the way.
Fd open_parent(const std::string& path) {
    const std::string parent = parent_of(path);
    Fd fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd)
        fail_write("create", path, errno);
    return fd;
}

// What a temporary's name adds to the name it replaces: unique per process and call, so
// concurrent writers of one file never share a temporary. The pid makes it unique among live
// processes and the counter within one; the random start keeps a reused pid from meeting a
// temporary its predecessor left behind. getrandom, not std::random_device: that one probes the
// CPU with cpuid, which traps to the hypervisor on a VM (tens of microseconds in every short
// command that writes a snapshot).
std::string temporary_suffix() {
    static std::uint64_t next = [] {
        std::uint64_t seed = 0;
        if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof seed))
            seed = static_cast<std::uint64_t>(
                std::chrono::steady_clock::now().time_since_epoch().count());
        return seed;
    }();
    return ".tmp." + std::to_string(getpid()) + "." + std::to_string(next++ % 1000000007);
}

void write_all(int fd, const std::string& data, const std::string& path) {
    std::size_t done = 0;
    while (done < data.size()) {
        const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            fail_write("write", path, errno);
        done += static_cast<std::size_t>(n);
    }
}

// Removes the temporary file (`name` in the directory `dir`) unless the rename consumed it.
class TemporaryFile {
  public:
    TemporaryFile(int dir, std::string name, std::string what)
        : dir_(dir), name_(std::move(name)), what_(std::move(what)) {}
    TemporaryFile(const TemporaryFile&) = delete;
    TemporaryFile& operator=(const TemporaryFile&) = delete;
    ~TemporaryFile() {
        if (!name_.empty())
            ::unlinkat(dir_, name_.c_str(), 0);
    }
    const std::string& name() const { return name_; }
    const std::string& what() const { return what_; }  // its path, for messages
    void keep() { name_.clear(); }

  private:
    int dir_;
    std::string name_;
    std::string what_;
};

}  // namespace

Fd& Fd::operator=(Fd&& other) noexcept {
    if (this != &other)
        reset(other.release());
    return *this;
}

int Fd::release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
}

void Fd::reset(int fd) {
    // close() is not retried on EINTR: on Linux the descriptor is gone either way.
    if (fd_ >= 0)
        ::close(fd_);
    fd_ = fd;
}

void fsync_dir(const std::string& dir) {
    const Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd)
        fail_write("open directory", dir, errno);
    if (::fsync(fd.get()) != 0)
        fail_write("fsync directory", dir, errno);
}

PendingSync PendingSync::start(const std::vector<SyncTarget>& targets) {
    PendingSync pending;
    for (const SyncTarget& target : targets)
        if (::fsync(target.fd) != 0)
            pending.failures_.push_back({target.what, errno});
    return pending;
}

void PendingSync::wait() {
    if (failures_.empty())
        return;
    failed_ = true;
    const Failure& first = failures_.front();
    throw system_error("cannot sync " + first.what, first.error);
}

namespace {

// Puts `temporary` in place of `name` (in the directory `dir`; `what` is its path) without the
// write-back ext4 starts (auto_da_alloc) when a rename replaces an existing file, which costs a
// device write per call: the two names are swapped, then the old content, now under the
// temporary's name, is removed. Readers still see the old or the new file, never neither.
// Where the swap is not supported, or nothing is at `name` yet, a plain rename.
void swap_into_place(int dir, const TemporaryFile& temporary, const std::string& name,
                     const std::string& what) {
    const char* from = temporary.name().c_str();
    if (::renameat2(dir, from, dir, name.c_str(), RENAME_EXCHANGE) == 0) {
        if (::unlinkat(dir, from, 0) == 0 || errno == ENOENT)
            return;
        // Not a file (a directory planted at `name`): swap back and fail as rename would.
        const int error = errno;
        ::renameat2(dir, from, dir, name.c_str(), RENAME_EXCHANGE);
        fail_write("rename " + temporary.what() + " to", what, error);
    }
    if (errno != ENOENT && errno != EINVAL && errno != ENOSYS)
        fail_write("rename " + temporary.what() + " to", what, errno);
    if (::renameat(dir, from, dir, name.c_str()) != 0)
        fail_write("rename " + temporary.what() + " to", what, errno);
}

// What replace may put its file in place of: anything (the state's own files), nothing (a new
// output file), or only the file that was checked: its device, inode and modification time
// (an inode number freed meanwhile may be given to whatever takes the name next).
struct Placement {
    enum { anything, nothing, checked } over = anything;
    dev_t dev = 0;
    ino_t ino = 0;
    struct timespec mtime {};
};

// Puts the durable temporary in place as `placement` allows, else refuses and leaves the name
// as it is: a link for a new name (it fails over anything there), an exchange checked
// afterwards (swapped back when the name held another file by then) for a checked one.
void place_checked(int dir, const TemporaryFile& temporary, const std::string& name,
                   const std::string& what, Placement placement) {
    const char* from = temporary.name().c_str();
    if (placement.over == Placement::nothing) {
        if (::linkat(dir, from, dir, name.c_str(), 0) != 0) {
            if (errno == EEXIST)
                refuse_output(what, "it appeared while it was checked");
            fail_write("link " + temporary.what() + " to", what, errno);
        }
        ::unlinkat(dir, from, 0);
        return;
    }
    if (::renameat2(dir, from, dir, name.c_str(), RENAME_EXCHANGE) != 0) {
        if (errno != EINVAL && errno != ENOSYS)
            fail_write("rename " + temporary.what() + " to", what, errno);
        // No exchange on this file system: a plain rename, after the check just made.
        if (::renameat(dir, from, dir, name.c_str()) != 0)
            fail_write("rename " + temporary.what() + " to", what, errno);
        return;
    }
    // What the exchange took out of the name must be the checked file itself, still the
    // caller's one-named regular file, unmodified: anything else goes back.
    struct stat old {};
    const bool same = ::fstatat(dir, from, &old, AT_SYMLINK_NOFOLLOW) == 0 &&
                      S_ISREG(old.st_mode) && old.st_nlink == 1 && old.st_uid == ::geteuid() &&
                      old.st_dev == placement.dev && old.st_ino == placement.ino &&
                      old.st_mtim.tv_sec == placement.mtime.tv_sec &&
                      old.st_mtim.tv_nsec == placement.mtime.tv_nsec;
    if (!same) {
        ::renameat2(dir, from, dir, name.c_str(), RENAME_EXCHANGE);
        refuse_output(what, "it changed while it was checked");
    }
    ::unlinkat(dir, from, 0);
}

// `durable`: fsync the file before the rename and the directory after it.
void replace(int dir, const std::string& name, const std::string& data, mode_t mode,
             const std::string& what, FileOwner owner, bool durable, Placement placement = {}) {
    const std::string suffix = temporary_suffix();
    TemporaryFile temporary(dir, name + suffix, what + suffix);
    {
        const Fd fd(::openat(dir, temporary.name().c_str(),
                             O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode));
        if (!fd)
            fail_write("create", temporary.what(), errno);
        // Given away before it takes its name, so the name never shows another owner's file.
        if ((owner.uid != static_cast<uid_t>(-1) || owner.gid != static_cast<gid_t>(-1)) &&
            ::fchown(fd.get(), owner.uid, owner.gid) != 0)
            fail_write("set the owner of", temporary.what(), errno);
        // The umask (or a default ACL) may have taken bits away: they are put back, since it
        // must not change what readers are allowed. Only then: a chmod dirties the inode.
        struct stat st {};
        if (::fstat(fd.get(), &st) != 0 ||
            ((st.st_mode & 07777) != mode && ::fchmod(fd.get(), mode) != 0))
            fail_write("set the mode of", temporary.what(), errno);
        write_all(fd.get(), data, temporary.what());
        if (durable && ::fsync(fd.get()) != 0)
            fail_write("fsync", temporary.what(), errno);
    }
    if (durable && placement.over != Placement::anything) {
        place_checked(dir, temporary, name, what, placement);
    } else if (durable) {
        if (::renameat(dir, temporary.name().c_str(), dir, name.c_str()) != 0)
            fail_write("rename " + temporary.what() + " to", what, errno);
    } else {
        swap_into_place(dir, temporary, name, what);
    }
    temporary.keep();
    if (durable && ::fsync(dir) != 0)
        fail_write("fsync directory", parent_of(what), errno);
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& data, mode_t mode) {
    replace(open_parent(path).get(), base_of(path), data, mode, path, FileOwner{}, true);
}

OutputTarget output_target(const std::string& path) {
    OutputTarget target{open_parent(path), base_of(path), std::nullopt};
    struct stat st {};
    if (::fstatat(target.dir.get(), target.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno != ENOENT)
            fail_write("stat", path, errno);
        return target;
    }
    const char* why = S_ISLNK(st.st_mode)    ? "it is a symlink"
                      : !S_ISREG(st.st_mode) ? "it is not a regular file"
                      : st.st_nlink != 1     ? "it has other names (hard links)"
                                             : nullptr;
    if (why != nullptr)
        refuse_output(path, why);
    target.existing = st;
    return target;
}

bool standard_output(const std::string& option, const std::string& target) {
    if (target.empty() || target.back() == '/')
        throw Error(ExitCode::usage, option + " needs a file name, or - for standard output");
    return target == "-";
}

void refuse_output(const std::string& path, const std::string& why) {
    throw Error(ExitCode::exists, "refusing to write " + printable(path) + ": " + why +
                                      " (name a new file, or one this command wrote)");
}

Fd open_own_output(const OutputTarget& target, const std::string& path,
                   const std::function<bool(std::string_view head)>& ours) {
    const struct stat& st = *target.existing;
    if (st.st_uid != ::geteuid())
        refuse_output(path, "it belongs to uid " + std::to_string(st.st_uid));
    // Opened as a path only (nothing a device does on open), checked to be what was looked at,
    // and only then opened for reading and writing, through that very descriptor.
    const Fd found(
        ::openat(target.dir.get(), target.name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    struct stat now {};
    if (!found || ::fstat(found.get(), &now) != 0 || !S_ISREG(now.st_mode) ||
        now.st_dev != st.st_dev || now.st_ino != st.st_ino)
        refuse_output(path, "it changed while it was checked");
    Fd file(::open(("/proc/self/fd/" + std::to_string(found.get())).c_str(),
                   O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (!file)
        fail_write("open", path, errno);
    std::string head(4096, '\0');
    const ssize_t n = ::pread(file.get(), head.data(), head.size(), 0);
    if (n < 0)
        fail_write("read", path, errno);
    head.resize(static_cast<std::size_t>(n));
    if (!ours(head))
        refuse_output(path, "it is not a file this command wrote");
    return file;
}

void write_own_output(const std::string& path, const std::string& data, mode_t mode,
                      std::string_view first_line) {
    const OutputTarget target = output_target(path);
    Placement placement;
    placement.over = Placement::nothing;
    if (target.existing) {
        open_own_output(target, path, [&](std::string_view head) {
            return head.substr(0, first_line.size()) == first_line;
        });
        placement = {Placement::checked, target.existing->st_dev, target.existing->st_ino,
                     target.existing->st_mtim};
    }
    // The name may change hands from here on: the placement checks again (bbkit(7), exit 73).
    fault_point("output.checked");
    replace(target.dir.get(), target.name, data, mode, path, FileOwner{}, true, placement);
}

void replace_file(const std::string& path, const std::string& data, mode_t mode) {
    replace(open_parent(path).get(), base_of(path), data, mode, path, FileOwner{}, false);
}

void replace_file_at(int dir, const std::string& name, const std::string& data, mode_t mode,
                     const std::string& what, FileOwner owner) {
    replace(dir, name, data, mode, what, owner, false);
}

void link_file(const std::string& existing, const std::string& path) {
    const Fd dir = open_parent(path);
    const std::string suffix = temporary_suffix();
    TemporaryFile temporary(dir.get(), base_of(path) + suffix, path + suffix);
    if (::linkat(AT_FDCWD, existing.c_str(), dir.get(), temporary.name().c_str(), 0) != 0)
        fail_write("link " + existing + " to", temporary.what(), errno);
    swap_into_place(dir.get(), temporary, base_of(path), path);
    temporary.keep();
}

DirStream::DirStream(int fd) {
    const int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0)
        return;
    dir_ = fdopendir(copy);
    if (!dir_) {
        const int err = errno;
        close(copy);
        errno = err;
        return;
    }
    rewinddir(dir_);
}

DirStream::~DirStream() {
    if (dir_)
        closedir(dir_);
}

const dirent* DirStream::next() {
    errno = 0;
    while (const dirent* entry = readdir(dir_)) {
        const char* n = entry->d_name;
        if (!(n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0'))))
            return entry;
    }
    return nullptr;
}

void DirStream::rewind() {
    rewinddir(dir_);
}

std::vector<std::string> list_directory(int fd, const std::string& what) {
    DirStream stream(fd);
    if (!stream)
        throw system_error("cannot list " + what, errno);
    std::vector<std::string> names;
    while (const dirent* entry = stream.next())
        names.emplace_back(entry->d_name);
    if (errno != 0)
        throw system_error("cannot list " + what, errno);
    return names;
}

int drain_directory(int fd, const std::function<Drained(const std::string& name)>& act) {
    DirStream stream(fd);
    if (!stream)
        return errno;
    std::vector<std::string> chunk;
    chunk.reserve(directory_chunk);
    for (;;) {
        bool changed = false;
        bool at_end = false;
        while (!at_end) {
            chunk.clear();
            while (chunk.size() < directory_chunk) {
                const dirent* entry = stream.next();
                if (!entry) {
                    if (errno != 0)
                        return errno;
                    at_end = true;
                    break;
                }
                chunk.emplace_back(entry->d_name);
            }
            for (const std::string& name : chunk) {
                const Drained done = act(name);
                if (done == Drained::stop)
                    return 0;
                changed = changed || done == Drained::gone;
            }
        }
        if (!changed)
            return 0;
        stream.rewind();
    }
}

Fd open_beneath(int dirfd, const std::string& relative, int flags, const std::string& what,
                mode_t mode) {
    open_how how{};
    how.flags = static_cast<std::uint64_t>(flags | O_CLOEXEC | O_NOFOLLOW);
    how.mode = (flags & O_CREAT) ? mode : 0;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS;
    const long fd = syscall(SYS_openat2, dirfd, relative.c_str(), &how, sizeof how);
    if (fd < 0) {
        const int err = errno;
        if (err == ELOOP || err == EXDEV)
            throw Error(ExitCode::no_perm,
                        "refusing " + what + ": a symlink or mount point is in the way");
        // O_DIRECTORY | O_NOFOLLOW on a symlink as the last component fails as "not a
        // directory": say what it is.
        struct stat st {};
        if (err == ENOTDIR && fstatat(dirfd, relative.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISLNK(st.st_mode))
            throw Error(ExitCode::no_perm, "refusing " + what + ": a symlink is in the way");
        throw system_error("cannot open " + what, err);
    }
    return Fd(static_cast<int>(fd));
}

Fd open_state_file(const std::string& dir, const std::string& relative, int flags, mode_t mode) {
    const Fd top(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!top)
        throw system_error("cannot open " + dir, errno);
    return open_state_file_at(top.get(), relative, flags, dir + "/" + relative, mode);
}

Fd open_state_file_at(int dir, const std::string& relative, int flags, const std::string& what,
                      mode_t mode) {
    // Without blocking: a FIFO planted in the owner's directory would hold root's open (for
    // reading) until someone writes to it. Only a regular file or a directory is opened.
    Fd fd;
    try {
        fd = open_beneath(dir, relative, flags | O_NONBLOCK, what, mode);
    } catch (const Error&) {
        // A FIFO with no reader fails a write-only open (ENXIO): the same refusal.
        struct stat planted {};
        if (fstatat(dir, relative.c_str(), &planted, AT_SYMLINK_NOFOLLOW) == 0 &&
            !S_ISREG(planted.st_mode) && !S_ISDIR(planted.st_mode) && !S_ISLNK(planted.st_mode))
            throw Error(ExitCode::no_perm, "refusing " + what + ": not a regular file");
        throw;
    }
    struct stat st {};
    if (fstat(fd.get(), &st) != 0)
        throw system_error("cannot inspect " + what, errno);
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
        throw Error(ExitCode::no_perm, "refusing " + what + ": not a regular file");
    if (S_ISREG(st.st_mode) && st.st_nlink > 1)
        throw Error(ExitCode::no_perm, "refusing " + what + ": it has " +
                                           std::to_string(st.st_nlink) +
                                           " links (a hard link to a file elsewhere?)");
    if (!(flags & O_NONBLOCK)) {
        const int status = fcntl(fd.get(), F_GETFL);
        if (status < 0 || fcntl(fd.get(), F_SETFL, status & ~O_NONBLOCK) != 0)
            throw system_error("cannot open " + what, errno);
    }
    return fd;
}

bool raise_descriptor_limit() {
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max)
        return false;
    limit.rlim_cur = limit.rlim_max;
    return setrlimit(RLIMIT_NOFILE, &limit) == 0;
}

int remove_tree_beneath(int parent, const std::string& name) {
    if (unlinkat(parent, name.c_str(), 0) == 0 || errno == ENOENT)
        return 0;
    const int unlink_error = errno;
    if (unlink_error != EISDIR && unlink_error != EPERM)
        return unlink_error;
    open_how how{};
    how.flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS;
    const long raw = syscall(SYS_openat2, parent, name.c_str(), &how, sizeof how);
    if (raw < 0)
        return errno == ENOENT ? 0 : errno == ENOTDIR ? unlink_error : errno;
    const Fd dir(static_cast<int>(raw));
    struct stat st {};
    if (fstat(dir.get(), &st) == 0 && (st.st_mode & S_IRWXU) != S_IRWXU)
        fchmod(dir.get(), (st.st_mode & 07777) | S_IRWXU);
    int failed = 0;
    const int unread = drain_directory(dir.get(), [&](const std::string& child) {
        failed = remove_tree_beneath(dir.get(), child);
        return failed == 0 ? Drained::gone : Drained::stop;
    });
    if (failed != 0)
        return failed;
    if (unread != 0)
        return unread;
    if (unlinkat(parent, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
        return errno;
    return 0;
}

std::string read_all(int fd, const std::string& what, std::size_t limit) {
    std::string text;
    char buffer[65536];
    for (;;) {
        const std::size_t want = std::min(sizeof buffer, limit + 1 - text.size());
        const ssize_t n = ::read(fd, buffer, want);
        if (n == 0)
            return text;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            throw system_error("cannot read " + what, errno);
        text.append(buffer, static_cast<std::size_t>(n));
        if (text.size() > limit)
            throw Error(ExitCode::data,
                        what + " is larger than " + std::to_string(limit) + " bytes");
    }
}

std::optional<std::string> read_file(const std::string& path, const std::string& what,
                                     std::size_t limit, int flags) {
    return read_file_at(AT_FDCWD, path, what, limit, flags);
}

std::optional<std::string> read_file_at(int dir, const std::string& name, const std::string& what,
                                        std::size_t limit, int flags) {
    const Fd fd(::openat(dir, name.c_str(), O_RDONLY | O_CLOEXEC | flags));
    if (!fd) {
        if (errno == ENOENT)
            return std::nullopt;
        throw system_error("cannot open " + what, errno);
    }
    return read_all(fd.get(), what, limit);
}

}  // namespace bbkit
