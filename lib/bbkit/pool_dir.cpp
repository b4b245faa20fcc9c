#include "bbkit/pool_dir.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <system_error>

#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/job_environment.hpp"
#include "bbkit/seal.hpp"
#include "bbkit/text.hpp"

namespace bbkit {
namespace {

constexpr mode_t traversable = 0711;  // users reach their own buffer, but cannot list others
constexpr mode_t private_dir = 0700;
// Deeper than this, a directory being removed is first moved up into trash/ as a piece of its
// own, so removal never holds more than this many directories open at once (two descriptors
// and one chunk of names each: see drain_directory).
constexpr int max_removal_depth = 64;
// How often a long removal reports where it stands.
constexpr auto removal_report_interval = std::chrono::seconds(1);

std::string new_uuid() {
    std::ifstream in("/proc/sys/kernel/random/uuid");
    std::string uuid;
    if (!(in >> uuid) || uuid.size() != 36)
        throw Error(ExitCode::software, "cannot make a pool UUID: /proc/sys/kernel/random/uuid");
    return uuid;
}

PoolMarker parse_marker(const Fd& owned, const std::string& pool_path);

std::optional<PoolMarker> read_marker(int rootfd, const std::string& pool_path) {
    const int fd = openat(rootfd, PoolDir::marker_file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return std::nullopt;
        throw system_error("cannot read " + pool_path + "/" + PoolDir::marker_file, errno);
    }
    return parse_marker(Fd(fd), pool_path);
}

// The marker's name= and uuid= lines, read from an open marker file.
PoolMarker parse_marker(const Fd& owned, const std::string& pool_path) {
    const int fd = owned.get();
    char buf[512];
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0)
        throw system_error("cannot read " + pool_path + "/" + PoolDir::marker_file, errno);
    std::istringstream text(std::string(buf, static_cast<std::size_t>(n)));
    PoolMarker marker;
    std::string line;
    while (std::getline(text, line)) {
        if (starts_with(line, "name="))
            marker.name = line.substr(5);
        if (starts_with(line, "uuid="))
            marker.uuid = line.substr(5);
    }
    return marker;
}

// Root's (may_own_pools) and writable only by its owner: nobody else may rename or replace
// what is in it.
void check_pool_owned(int fd, const std::string& path) {
    struct stat st {};
    if (fstat(fd, &st) != 0)
        throw system_error("cannot stat " + path, errno);
    if (!S_ISDIR(st.st_mode))
        throw Error(ExitCode::no_perm, path + " is not a directory");
    if (!may_own_pools(st.st_uid))
        throw Error(ExitCode::no_perm, "pool directory " + path + " is owned by uid " +
                                           std::to_string(st.st_uid) + ", not root (chown root " +
                                           path + ")");
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        throw Error(
            ExitCode::no_perm,
            "pool directory " + path + " is writable by group or others (chmod go-w " + path + ")");
}

Fd open_root(const std::string& path) {
    const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            throw Error(ExitCode::unavailable,
                        "pool directory " + path + " does not exist (not mounted?)");
        const int err = errno;
        // O_NOFOLLOW: a symlink someone could repoint never decides where buffers go.
        struct stat st {};
        if ((err == ELOOP || err == ENOTDIR) && lstat(path.c_str(), &st) == 0 &&
            S_ISLNK(st.st_mode))
            throw Error(ExitCode::config, "pool directory " + path +
                                              " is a symlink (name the directory it points to "
                                              "in the configuration)");
        throw system_error("cannot open pool directory " + path, err);
    }
    return Fd(fd);
}

// Creates (if missing) a root-owned subdirectory with `mode` and opens it.
Fd make_subdir(int rootfd, const std::string& pool_path, const char* name, mode_t mode) {
    if (mkdirat(rootfd, name, mode) != 0 && errno != EEXIST)
        throw system_error("cannot create " + pool_path + "/" + name, errno);
    Fd fd = open_beneath(rootfd, name, O_RDONLY | O_DIRECTORY, pool_path + "/" + name);
    // Fixed only when wrong: a chown or chmod changes the inode's ctime even when it changes
    // nothing else, which cost every call an inode write-back for two untouched directories.
    // A process that is not root gives nothing away: what it made is its own (may_own_pools).
    struct stat st {};
    if (fstat(fd.get(), &st) != 0 ||
        (geteuid() == 0 && (st.st_uid != 0 || st.st_gid != 0) && fchown(fd.get(), 0, 0) != 0) ||
        ((st.st_mode & 07777) != mode && fchmod(fd.get(), mode) != 0))
        throw system_error("cannot set owner and mode of " + pool_path + "/" + name, errno);
    return fd;
}

void fsync_fd(int fd, const std::string& what) {
    if (fsync(fd) != 0)
        throw system_error("cannot sync " + what, errno);
}

// Splits "job/main.42.1" into its two parts; anything else is a programming error.
std::pair<std::string, std::string> split_directory(const std::string& directory) {
    const std::size_t slash = directory.find('/');
    if (slash == std::string::npos || directory.find('/', slash + 1) != std::string::npos)
        throw Error(ExitCode::software, "bad buffer directory '" + directory + "'");
    return {directory.substr(0, slash), directory.substr(slash + 1)};
}

}  // namespace

bool may_own_pools(uid_t uid) {
    return uid == 0 || uid == geteuid();
}

std::string to_string(PoolAvailability availability) {
    switch (availability) {
        case PoolAvailability::up:
            return "up";
        case PoolAvailability::draining:
            return "draining";
        case PoolAvailability::unavailable:
            return "unavailable";
        case PoolAvailability::uninitialised:
            return "uninitialised";
    }
    return "unavailable";
}

PoolAvailability parse_pool_availability(const std::string& text) {
    for (PoolAvailability a : {PoolAvailability::up, PoolAvailability::draining,
                               PoolAvailability::unavailable, PoolAvailability::uninitialised})
        if (to_string(a) == text)
            return a;
    throw Error(ExitCode::data, "unknown pool availability '" + text + "'");
}

PoolAvailability pool_availability(const PoolConfig& pool,
                                   const std::optional<std::string>& recorded_uuid, bool draining,
                                   PoolAvailability when_unreadable) {
    if (!recorded_uuid)
        return PoolAvailability::uninitialised;
    const auto unreadable = [&](int err) {
        return err == EACCES || err == EPERM ? when_unreadable : PoolAvailability::unavailable;
    };
    const Fd root(open(pool.path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!root)
        return unreadable(errno);
    const Fd marker(openat(root.get(), PoolDir::marker_file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!marker)
        return unreadable(errno);
    try {
        const PoolMarker found = parse_marker(marker, pool.path);
        if (found.name != pool.name || found.uuid != *recorded_uuid)
            return PoolAvailability::unavailable;
    } catch (const Error&) {
        return PoolAvailability::unavailable;
    }
    return draining ? PoolAvailability::draining : PoolAvailability::up;
}

namespace {

PoolMarker init_pool_root(const PoolConfig& pool, bool new_marker) {
    Fd root = open_root(pool.path);
    check_pool_owned(root.get(), pool.path);
    require_pool_quota(pool, probe_pool_quota(pool, root.get()));  // before anything is written
    std::optional<PoolMarker> marker = read_marker(root.get(), pool.path);
    if (marker && marker->name != pool.name)
        throw Error(ExitCode::exists, pool.path + " already holds pool '" + marker->name +
                                          "' (its marker " + pool.path + "/" +
                                          PoolDir::marker_file + ")");
    make_subdir(root.get(), pool.path, "job", traversable);
    make_subdir(root.get(), pool.path, "persistent", traversable);
    make_subdir(root.get(), pool.path, "trash", private_dir);
    make_subdir(root.get(), pool.path, "quarantine", private_dir);
    // Users open their own file in env/ by name; listing it would tell them whose jobs run.
    make_subdir(root.get(), pool.path, PoolDir::env_subdir, traversable);
    if (!marker || new_marker) {
        marker = PoolMarker{pool.name, new_uuid()};
        write_file_atomically(pool.path + "/" + PoolDir::marker_file,
                              "name=" + marker->name + "\nuuid=" + marker->uuid + "\n", 0644);
    }
    fsync_fd(root.get(), pool.path);
    return *marker;
}

}  // namespace

PoolMarker PoolDir::init(const PoolConfig& pool) {
    return init_pool_root(pool, false);
}

PoolMarker PoolDir::init_new_marker(const PoolConfig& pool) {
    return init_pool_root(pool, true);
}

PoolDir PoolDir::open(const PoolConfig& pool, const std::optional<std::string>& expected_uuid) {
    PoolDir dir;
    dir.path_ = pool.path;
    dir.root_ = open_root(pool.path);
    std::optional<PoolMarker> marker = read_marker(dir.root_.get(), pool.path);
    if (!marker)
        throw Error(ExitCode::unavailable,
                    "pool '" + pool.name + "' at " + pool.path + " has no " + marker_file +
                        " marker (not mounted? mount it; if its file system was recreated, "
                        "bb-pool init --replace " +
                        pool.name + " closes the buffers that were on it)");
    if (marker->name != pool.name || (expected_uuid && marker->uuid != *expected_uuid))
        throw Error(ExitCode::unavailable, "pool '" + pool.name + "' at " + pool.path +
                                               " holds the marker of another pool ('" +
                                               marker->name + "' " + marker->uuid +
                                               ") (not mounted, or the wrong file system?)");
    dir.marker_ = *marker;
    dir.config_ = pool;
    check_pool_owned(dir.root_.get(), pool.path);
    dir.quota_ = probe_pool_quota(pool, dir.root_.get());
    dir.job_ = open_beneath(dir.root_.get(), "job", O_RDONLY | O_DIRECTORY, pool.path + "/job");
    check_pool_owned(dir.job_.get(), pool.path + "/job");
    dir.persistent_ = open_beneath(dir.root_.get(), "persistent", O_RDONLY | O_DIRECTORY,
                                   pool.path + "/persistent");
    check_pool_owned(dir.persistent_.get(), pool.path + "/persistent");
    dir.trash_ = make_subdir(dir.root_.get(), pool.path, "trash", private_dir);
    dir.quarantine_ = make_subdir(dir.root_.get(), pool.path, "quarantine", private_dir);
    return dir;
}

int PoolDir::subdir_fd(const std::string& subdir) const {
    if (subdir == "job")
        return job_.get();
    if (subdir == "persistent")
        return persistent_.get();
    if (subdir == "trash")
        return trash_.get();
    if (subdir == "quarantine")
        return quarantine_.get();
    throw Error(ExitCode::software, "no pool subdirectory '" + subdir + "'");
}

namespace {

bool is_empty_dir(int fd, const std::string& what) {
    return list_directory(fd, what).empty();
}

// Whether an existing buffer directory is what an interrupted allocation of this buffer can
// have left: made (root's and empty) or already handed over (uid's).
bool left_by_allocation(int fd, uid_t uid, const std::string& what) {
    struct stat st {};
    if (fstat(fd, &st) != 0)
        throw system_error("cannot stat " + what, errno);
    return st.st_uid == uid || (st.st_uid == 0 && is_empty_dir(fd, what));
}

}  // namespace

bool PoolDir::limits_buffers() const {
    return require_pool_quota(config_, quota_);
}

void PoolDir::release_project(std::uint32_t project) const {
    if (!quota_.enforced)
        return;
    try {
        project_quotas().remove_limits(project);
    } catch (const Error& e) {
        spdlog::warn("{} (bb-pool recover removes it)", e.what());
    }
}

namespace {

// Gives a new buffer directory, still root's, its project and limit (bbkit(7), CAPACITY). A
// fresh directory's project must hold nothing: anything in it is not this buffer's.
void apply_limit(const ProjectQuotas& quotas, int fd, const BufferLimit& limit, bool fresh,
                 const std::string& what) {
    if (fresh) {
        const ProjectUsage used = quotas.usage(limit.project);
        if (used.inodes != 0 || used.bytes != 0)
            throw Error(ExitCode::exists,
                        "cannot give " + what + " project " + std::to_string(limit.project) +
                            ": the project already holds " + std::to_string(used.inodes) +
                            " files (another state directory or tool uses these project ids: "
                            "give each its own quota_project_base)");
    }
    set_directory_project(fd, limit.project, what);
    quotas.set_limit(limit.project, limit.bytes);
}

}  // namespace

PendingSync PoolDir::create_buffer_dir(const std::string& directory, uid_t uid, gid_t gid,
                                       Creation creation, const std::optional<BufferLimit>& limit) {
    const auto [subdir, name] = split_directory(directory);
    const int parent = subdir_fd(subdir);
    const std::string what = path_ + "/" + directory;
    const auto taken = [&what]() {
        return Error(ExitCode::exists,
                     what +
                         " already exists and belongs to no allocation of this buffer "
                         "(another state directory sharing the pool under the same cluster "
                         "name?): nothing was changed in it (see bb-pool check)");
    };
    if (mkdirat(parent, name.c_str(), private_dir) != 0) {
        if (errno != EEXIST)
            throw system_error("cannot create buffer directory " + what, errno);
        if (creation == Creation::fresh)
            throw taken();
    }
    fault_point("dir.made");
    Fd fd;
    try {
        fd = open_beneath(parent, name, O_RDONLY | O_DIRECTORY, what);
    } catch (const Error& e) {
        throw Error(ExitCode::exists, what + " exists and is not a directory: " + e.what());
    }
    if (creation == Creation::resume && !left_by_allocation(fd.get(), uid, what))
        throw taken();
    if (limit) {
        try {
            apply_limit(project_quotas(), fd.get(), *limit, creation == Creation::fresh, what);
        } catch (const Error&) {
            if (creation == Creation::fresh)  // still root's and empty: nobody else's to keep
                unlinkat(parent, name.c_str(), AT_REMOVEDIR);
            throw;
        }
        fault_point("dir.quota");
    }
    if (fchown(fd.get(), uid, gid) != 0 || fchmod(fd.get(), private_dir) != 0)
        throw system_error("cannot hand " + what + " to uid " + std::to_string(uid), errno);
    fault_point("dir.owned");
    return PendingSync::start({{fd.get(), what}, {parent, path_ + "/" + subdir}});
}

bool PoolDir::exists(const std::string& directory) const {
    const auto [subdir, name] = split_directory(directory);
    struct stat st {};
    return fstatat(subdir_fd(subdir), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

bool PoolDir::move_to_trash(const std::string& directory, const std::string& trash_name,
                            Sync sync) {
    const auto [subdir, name] = split_directory(directory);
    const int parent = subdir_fd(subdir);
    if (renameat2(parent, name.c_str(), trash_.get(), trash_name.c_str(), RENAME_NOREPLACE) != 0) {
        if (errno == ENOENT)
            return false;
        throw system_error("cannot move " + path_ + "/" + directory + " to trash", errno);
    }
    fault_point("trash.renamed");
    if (sync == Sync::now)
        sync_removal(directory).wait();
    return true;
}

void PoolDir::remove_if_empty(const std::string& directory) {
    const auto [subdir, name] = split_directory(directory);
    if (unlinkat(subdir_fd(subdir), name.c_str(), AT_REMOVEDIR) == 0)
        fsync_fd(subdir_fd(subdir), path_ + "/" + subdir);
}

PendingSync PoolDir::sync_removal(const std::string& directory) {
    const auto [subdir, name] = split_directory(directory);
    return PendingSync::start(
        {{trash_.get(), path_ + "/trash"}, {subdir_fd(subdir), path_ + "/" + subdir}});
}

namespace {

// What a mount point found inside a buffer being removed says: bbkit removes only what is on
// the pool's own mount, so the entry (and the buffer's space) stays until someone unmounts it.
Error mount_in_the_way(const std::string& what) {
    return Error(ExitCode::io, "cannot remove " + what +
                                   ": a mount point (bbkit never removes across a mount; "
                                   "unmount it, then run bb-pool reap)");
}

// Empties and removes buffer directories in trash/ as root, within two limits (bbkit(7),
// SECURITY): it never leaves the pool's mount (a mount point inside a buffer stops the removal
// of that buffer), and it deletes only what the buffer's owner could delete themselves. A user
// may move into their buffer a directory of theirs that holds another user's directories;
// such a directory (not the owner's, not empty) is not entered but kept aside in quarantine/
// for an administrator, and bb-pool check reports it.
struct Remover {
    int trash_fd;
    int quarantine_fd;
    std::string trash_name;
    std::chrono::steady_clock::time_point deadline;
    RemovalResult& result;
    const std::string& pool;
    const RemovalProgressFn& progress;
    std::chrono::steady_clock::time_point next_report =
        std::chrono::steady_clock::now() + removal_report_interval;
    uid_t owner = 0;  // of the directory being removed: the buffer's owner
    unsigned long pieces = 0;
    unsigned long visited = 0;

    // The clock is read every 256 entries only: for the deadline, and for a progress report.
    bool out_of_time() {
        if ((++visited % 256) != 0)
            return false;
        const auto now = std::chrono::steady_clock::now();
        if (progress && now >= next_report) {
            progress({pool, trash_name, result.removed});
            next_report = now + removal_report_interval;
        }
        return now >= deadline;
    }

    // unlinkat, counting what it deleted. False with errno set when it failed (ENOENT too:
    // what someone else removed is not counted).
    bool delete_entry(int fd, const std::string& name, int flags) {
        if (unlinkat(fd, name.c_str(), flags) != 0)
            return false;
        ++result.removed;
        return true;
    }

    std::string piece_prefix() const { return trash_name + ".piece"; }

    // Opens the directory `name` of `fd` as the entry `st` described, without following a
    // symlink or entering another mount, and only if it is still that entry.
    Fd open_dir(int fd, const std::string& name, const struct stat& st, const std::string& what) {
        open_how how{};
        how.flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
        how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV;
        const long child = syscall(SYS_openat2, fd, name.c_str(), &how, sizeof how);
        if (child < 0 && errno == EXDEV)
            throw mount_in_the_way(what);
        if (child < 0)
            throw system_error("cannot open " + what, errno);
        Fd owned(static_cast<int>(child));
        struct stat now {};
        if (fstat(owned.get(), &now) != 0)
            throw system_error("cannot stat " + what, errno);
        if (now.st_ino != st.st_ino || now.st_dev != st.st_dev || now.st_uid != st.st_uid)
            throw Error(ExitCode::io, "cannot remove " + what + ": it changed while being removed");
        return owned;
    }

    // Moves a directory the owner could not empty into quarantine/, untouched.
    void keep(int fd, const std::string& name, const struct stat& st, const std::string& what) {
        const std::string aside = trash_name + ".kept." + std::to_string(result.kept.size() + 1) +
                                  "." + std::to_string(st.st_ino);
        if (renameat2(fd, name.c_str(), quarantine_fd, aside.c_str(), RENAME_NOREPLACE) != 0) {
            if (errno == EBUSY)
                throw mount_in_the_way(what);
            throw system_error("cannot move " + what + " to quarantine", errno);
        }
        result.kept.push_back({aside, st.st_uid, owner});
    }

    // Removes the entry `name` of the directory `fd` (the owner's); false when out of time.
    bool remove_entry(int fd, const std::string& name, int depth, const std::string& what) {
        struct stat st {};
        if (fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno == ENOENT)
                return true;
            throw system_error("cannot stat " + what, errno);
        }
        if (!S_ISDIR(st.st_mode)) {
            if (delete_entry(fd, name, 0) || errno == ENOENT)
                return true;
            if (errno == EBUSY)  // a file mounted over this one
                throw mount_in_the_way(what);
            throw system_error("cannot remove " + what, errno);
        }
        if (st.st_uid != owner) {
            // The owner may remove it only when it is empty: try just that.
            if (delete_entry(fd, name, AT_REMOVEDIR) || errno == ENOENT)
                return true;
            if (errno == ENOTEMPTY || errno == EEXIST) {
                keep(fd, name, st, what);
                return true;
            }
            if (errno == EBUSY)
                throw mount_in_the_way(what);
            throw system_error("cannot remove " + what, errno);
        }
        if (depth >= max_removal_depth) {
            // The piece's name carries the buffer's owner: what is found under it later is
            // judged against that owner, not against whoever owns what was moved.
            const std::string piece = piece_prefix() + std::to_string(++pieces) + "." +
                                      std::to_string(st.st_ino) + "." + std::to_string(owner);
            if (renameat(fd, name.c_str(), trash_fd, piece.c_str()) != 0)
                throw errno == EBUSY ? mount_in_the_way(what)
                                     : system_error("cannot move " + what + " up", errno);
            return true;
        }
        const Fd child = open_dir(fd, name, st, what);
        if (!empty_dir(child.get(), depth + 1, what))
            return false;
        if (!delete_entry(fd, name, AT_REMOVEDIR) && errno != ENOENT)
            throw system_error("cannot remove " + what, errno);
        return true;
    }

    // Empties the directory `fd` a chunk of names at a time; returns false when the deadline
    // stopped it (the next call goes on with what is left). Every entry it is given leaves the
    // directory (deleted, kept aside or moved up) or ends the removal with an error.
    bool empty_dir(int fd, int depth, const std::string& what) {
        bool finished = true;
        const int unread = drain_directory(fd, [&](const std::string& name) {
            if (out_of_time() || !remove_entry(fd, name, depth, what + "/" + name)) {
                finished = false;
                return Drained::stop;
            }
            fault_point("reap.partial");
            return Drained::gone;
        });
        if (unread != 0)
            throw system_error("cannot list " + what, unread);
        return finished;
    }

    // The buffer's owner recorded in a piece's name (see remove_entry); nullopt for a name
    // without one.
    std::optional<uid_t> owner_of_piece(const std::string& name) const {
        const std::string rest = name.substr(piece_prefix().size());  // N.INODE.UID
        const std::size_t first = rest.find('.');
        const std::size_t last = rest.rfind('.');
        if (first == std::string::npos || last == first)
            return std::nullopt;
        const std::string uid = rest.substr(last + 1);
        if (uid.empty() || uid.size() > 10 || uid.find_first_not_of("0123456789") != uid.npos)
            return std::nullopt;
        return static_cast<uid_t>(std::stoul(uid));
    }

    // Removes trash/<name>, a directory or anything else, as its owner could: the buffer's
    // directory's own owner (trash/ is root's: nobody else can have put an entry there), or
    // for a piece the owner its name records. True when it is gone.
    bool remove(const std::string& name, const std::string& what, bool piece = false) {
        struct stat st {};
        if (fstatat(trash_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno == ENOENT)
                return true;
            throw system_error("cannot stat " + what, errno);
        }
        if (!S_ISDIR(st.st_mode)) {
            if (!delete_entry(trash_fd, name, 0) && errno != ENOENT)
                throw system_error("cannot remove " + what, errno);
            return true;
        }
        owner = st.st_uid;
        if (piece)
            owner = owner_of_piece(name).value_or(st.st_uid);
        if (st.st_uid != owner) {  // swapped in before it was moved up: not the owner's
            if (delete_entry(trash_fd, name, AT_REMOVEDIR) || errno == ENOENT)
                return true;
            if (errno != ENOTEMPTY && errno != EEXIST)
                throw system_error("cannot remove " + what, errno);
            keep(trash_fd, name, st, what);
            return true;
        }
        const Fd fd = open_dir(trash_fd, name, st, what);
        // A user may still hold write access through an open descriptor; take it away.
        fchmod(fd.get(), private_dir);
        if (!empty_dir(fd.get(), 1, what))
            return false;
        if (!delete_entry(trash_fd, name, AT_REMOVEDIR) && errno != ENOENT)
            throw system_error("cannot remove " + what, errno);
        return true;
    }
};

}  // namespace

RemovalResult PoolDir::remove_from_trash(const std::string& trash_name,
                                         std::chrono::steady_clock::time_point deadline, Sync sync,
                                         const RemovalProgressFn& progress) {
    RemovalResult result;
    Remover remover{trash_.get(), quarantine_.get(), trash_name, deadline,
                    result,       marker_.name,      progress};
    const auto finish = [&](bool complete) {
        result.complete = complete;
        if (!result.kept.empty())
            fsync_fd(quarantine_.get(), path_ + "/quarantine");
        return result;
    };
    if (!remover.remove(trash_name, path_ + "/trash/" + trash_name))
        return finish(false);
    // Pieces moved up from deep trees; removing one may move up more, so trash/ is read until
    // a pass finds none (the other buffers' entries are left alone: they never make it read
    // trash/ again).
    bool finished = true;
    const int unread = drain_directory(trash_.get(), [&](const std::string& name) {
        if (name.rfind(remover.piece_prefix(), 0) != 0)
            return Drained::left;
        if (!remover.remove(name, path_ + "/trash/" + name, true)) {
            finished = false;
            return Drained::stop;
        }
        return Drained::gone;
    });
    if (unread != 0)
        throw system_error("cannot list " + path_ + "/trash", unread);
    if (!finished)
        return finish(false);
    if (sync == Sync::now)
        fsync_fd(trash_.get(), path_ + "/trash");
    return finish(true);
}

void PoolDir::quarantine(const std::string& relative, const std::string& name) {
    const auto [subdir, entry] = split_directory(relative);
    if (renameat2(subdir_fd(subdir), entry.c_str(), quarantine_.get(), name.c_str(),
                  RENAME_NOREPLACE) != 0)
        throw system_error("cannot move " + path_ + "/" + relative + " to quarantine", errno);
    fault_point("quarantine.renamed");
    fsync_fd(quarantine_.get(), path_ + "/quarantine");
    fsync_fd(subdir_fd(subdir), path_ + "/" + subdir);
}

namespace {

// A file's share of its allocated blocks: a file with several names is counted once in all.
std::uint64_t charged_bytes(const struct stat& st) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(st.st_blocks) * 512;
    if (S_ISDIR(st.st_mode) || st.st_nlink <= 1)
        return bytes;
    return bytes / st.st_nlink;
}

// The budget's clock is read every 256 entries only.
bool budget_spent(MeasureBudget& budget, std::uint64_t& seen) {
    if (budget.entries == 0)
        return true;
    --budget.entries;
    return (++seen % 256) == 0 && std::chrono::steady_clock::now() >= budget.deadline;
}

}  // namespace

DirectoryUsage PoolDir::measure(const std::string& directory, std::uint64_t stop_above,
                                MeasureBudget& budget) const {
    const auto [subdir, name] = split_directory(directory);
    const std::string what = path_ + "/" + directory;
    DirectoryUsage usage;
    struct stat top {};
    if (fstatat(subdir_fd(subdir), name.c_str(), &top, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno != ENOENT)
            throw system_error("cannot stat " + what, errno);
        usage.complete = true;
        return usage;
    }
    if (!S_ISDIR(top.st_mode)) {  // what a buffer's directory never is: counted all the same
        usage.bytes = charged_bytes(top);
        usage.over = usage.bytes > stop_above;
        usage.complete = !usage.over;
        return usage;
    }
    // One stream per level, each holding one descriptor: memory grows with depth only.
    std::vector<std::unique_ptr<DirStream>> levels;
    {
        const Fd fd = open_beneath(subdir_fd(subdir), name, O_RDONLY | O_DIRECTORY, what);
        levels.push_back(std::make_unique<DirStream>(fd.get()));
    }
    std::uint64_t seen = 0;
    bool too_deep = false;
    while (!levels.empty()) {
        if (usage.bytes > stop_above) {
            usage.over = true;
            return usage;
        }
        DirStream& dir = *levels.back();
        if (!dir)
            throw system_error("cannot list " + what, errno);
        errno = 0;
        const dirent* entry = dir.next();
        if (!entry) {
            if (errno != 0)
                throw system_error("cannot list " + what, errno);
            levels.pop_back();
            continue;
        }
        if (budget_spent(budget, seen))
            return usage;
        struct stat st {};
        if (fstatat(dir.fd(), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno == ENOENT)
                continue;
            throw system_error("cannot stat an entry of " + what, errno);
        }
        if (st.st_dev != top.st_dev)
            continue;  // a mount point: another file system's space
        usage.bytes += charged_bytes(st);
        if (!S_ISDIR(st.st_mode))
            continue;
        if (levels.size() >= static_cast<std::size_t>(max_removal_depth)) {
            too_deep = true;
            continue;
        }
        const Fd child(
            openat(dir.fd(), entry->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!child) {
            if (errno == ENOENT || errno == ENOTDIR)
                continue;  // gone or replaced meanwhile
            throw system_error("cannot open a directory in " + what, errno);
        }
        levels.push_back(std::make_unique<DirStream>(child.get()));
    }
    usage.over = usage.bytes > stop_above;
    usage.complete = !too_deep && !usage.over;
    return usage;
}

DirectoryProject PoolDir::project_of(const std::string& directory) const {
    const auto [subdir, name] = split_directory(directory);
    const std::string what = path_ + "/" + directory;
    const Fd fd = open_beneath(subdir_fd(subdir), name, O_RDONLY | O_DIRECTORY, what);
    return directory_project(fd.get(), what);
}

std::vector<std::string> PoolDir::list(const std::string& subdir) const {
    return list_directory(subdir_fd(subdir), path_ + "/" + subdir);
}

Fd PoolDir::env_dir(bool create) const {
    return root_subdir(env_subdir, create);
}

Fd PoolDir::root_subdir(const char* subdir, bool create) const {
    const std::string what = path_ + "/" + subdir;
    // Created beneath the open root, never by path; an existing entry is checked, not fixed:
    // whatever put it there is not bbkit.
    bool made = false;
    if (create) {
        made = mkdirat(root_.get(), subdir, traversable) == 0;
        if (!made && errno != EEXIST)
            throw system_error("cannot create " + what, errno);
    }
    struct stat st {};
    if (!create && fstatat(root_.get(), subdir, &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT)
        return Fd();
    Fd fd = open_beneath(root_.get(), subdir, O_RDONLY | O_DIRECTORY, what);
    if (made && fchmod(fd.get(), traversable) != 0)  // whatever the umask took away
        throw system_error("cannot set the mode of " + what, errno);
    check_pool_owned(fd.get(), what);
    return fd;
}

std::string PoolDir::make_transfer_dir(const std::string& name, const std::string& plan, uid_t uid,
                                       gid_t gid) {
    const Fd transfer = root_subdir(transfer_subdir, true);
    const std::string what = path_ + "/" + transfer_subdir + "/" + name;
    if (mkdirat(transfer.get(), name.c_str(), 0700) != 0)
        throw system_error("cannot create " + what, errno);
    // Root's until the plan is in it: the user gets the directory only once it is complete.
    const Fd dir = open_beneath(transfer.get(), name, O_RDONLY | O_DIRECTORY, what);
    const Fd fd(
        openat(dir.get(), "plan", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400));
    bool written = static_cast<bool>(fd);
    for (std::size_t done = 0; written && done < plan.size();) {
        const ssize_t n = write(fd.get(), plan.data() + done, plan.size() - done);
        written = n > 0;
        done += written ? static_cast<std::size_t>(n) : 0;
    }
    if (!written || fchown(fd.get(), uid, gid) != 0 || fchmod(fd.get(), 0400) != 0 ||
        fsync(fd.get()) != 0 || fchown(dir.get(), uid, gid) != 0 || fchmod(dir.get(), 0700) != 0 ||
        fsync(dir.get()) != 0) {
        const int err = errno;
        // Not left half made: a rerun would find root's directory under the recorded name
        // and refuse it as not the user's (open_transfer_dir). Best effort, nothing followed.
        unlinkat(dir.get(), "plan", 0);
        unlinkat(transfer.get(), name.c_str(), AT_REMOVEDIR);
        throw system_error("cannot write " + what + "/plan", err);
    }
    fsync_fd(transfer.get(), path_ + "/" + transfer_subdir);
    return what;
}

Fd PoolDir::open_transfer_dir(const std::string& name, uid_t uid) const {
    const Fd transfer = root_subdir(transfer_subdir, false);
    const std::string what = path_ + "/" + transfer_subdir + "/" + name;
    struct stat st {};
    if (!transfer ||
        (fstatat(transfer.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT))
        return Fd();
    Fd dir = open_beneath(transfer.get(), name, O_RDONLY | O_DIRECTORY, what);
    if (fstat(dir.get(), &st) != 0)
        throw system_error("cannot read " + what, errno);
    if (st.st_uid != uid)
        throw Error(ExitCode::no_perm, what + " is not the transfer job's user's (uid " +
                                           std::to_string(st.st_uid) + ")");
    return dir;
}

bool PoolDir::remove_transfer_dir(const std::string& name, const std::string& trash_name,
                                  std::chrono::steady_clock::time_point deadline) {
    const Fd transfer = root_subdir(transfer_subdir, false);
    if (!transfer)
        return true;
    if (renameat2(transfer.get(), name.c_str(), trash_.get(), trash_name.c_str(),
                  RENAME_NOREPLACE) != 0 &&
        errno != ENOENT)
        throw system_error(
            "cannot move " + path_ + "/" + transfer_subdir + "/" + name + " to trash", errno);
    return remove_from_trash(trash_name, deadline).complete;
}

void PoolDir::write_job_environment(const std::string& name, const std::string& text, uid_t uid,
                                    gid_t gid) {
    write_env_entry(name, text, uid, gid, true);
}

// env/<name> holding `text`, owned by uid:gid, mode 0400, durable: written to a temporary name
// and renamed over what is there (`replace`), or only where nothing is (false: returns false
// when something was).
bool PoolDir::write_env_entry(const std::string& name, const std::string& text, uid_t uid,
                              gid_t gid, bool replace) {
    const Fd dir = env_dir(true);
    const std::string what = path_ + "/" + env_subdir + "/" + name;
    // A key's writers may race (two jobs of a user at once): each its own temporary.
    const std::string temporary = "." + name + (replace ? "" : "." + random_hex(4)) + ".tmp";
    // Left by a crash: only root writes env/, so it is ours to remove.
    if (unlinkat(dir.get(), temporary.c_str(), 0) != 0 && errno != ENOENT)
        throw system_error("cannot remove " + what + "'s temporary file", errno);
    const Fd fd(openat(dir.get(), temporary.c_str(),
                       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400));
    if (!fd)
        throw system_error("cannot create " + what, errno);
    bool written = fchown(fd.get(), uid, gid) == 0 && fchmod(fd.get(), 0400) == 0;
    for (std::size_t done = 0; written && done < text.size();) {
        const ssize_t n = write(fd.get(), text.data() + done, text.size() - done);
        written = n > 0;
        done += written ? static_cast<std::size_t>(n) : 0;
    }
    if (!written || fsync(fd.get()) != 0) {
        const int err = errno;
        unlinkat(dir.get(), temporary.c_str(), 0);
        throw system_error("cannot write " + what, err);
    }
    if (renameat2(dir.get(), temporary.c_str(), dir.get(), name.c_str(),
                  replace ? 0 : RENAME_NOREPLACE) != 0) {
        const int err = errno;
        unlinkat(dir.get(), temporary.c_str(), 0);
        if (!replace && err == EEXIST)
            return false;
        throw system_error("cannot write " + what, err);
    }
    fsync_fd(dir.get(), path_ + "/" + env_subdir);
    return true;
}

std::string PoolDir::job_environment_key(uid_t uid, gid_t gid) {
    const std::string name = environment_key_name(uid);
    const std::string what = path_ + "/" + env_subdir + "/" + name;
    // The user's when it is a regular file of theirs holding a key: they may have changed it
    // (it is theirs), which only renames their own jobs' files.
    const auto read_key = [&]() -> std::optional<std::string> {
        const Fd dir = env_dir(true);
        const Fd fd(
            openat(dir.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
        if (!fd) {
            if (errno == ENOENT || errno == ELOOP)
                return std::nullopt;
            throw system_error("cannot read " + what, errno);
        }
        struct stat st {};
        if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != uid)
            return std::nullopt;
        try {
            return parse_user_key(read_all(fd.get(), what, 64));
        } catch (const Error&) {
            return std::nullopt;  // longer than a key: not one
        }
    };
    if (std::optional<std::string> key = read_key())
        return *key;
    const std::string key = new_user_key();
    struct stat st {};
    const bool absent = fstatat(env_dir(true).get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0;
    if (write_env_entry(name, key + "\n", uid, gid, !absent))
        return key;
    if (std::optional<std::string> theirs = read_key())  // another writer's, made meanwhile
        return *theirs;
    throw Error(ExitCode::io,
                "cannot make the key " + what + ": another process keeps replacing it");
}

std::vector<std::string> PoolDir::job_environments(const std::string& cluster,
                                                   std::uint64_t job_id) const {
    std::vector<std::string> names;
    for (const std::string& name : list_job_environments())
        if (environment_job_id(cluster, name) == job_id)
            names.push_back(name);
    return names;
}

std::vector<std::string> PoolDir::list_job_environments() const {
    const Fd dir = env_dir(false);
    if (!dir)
        return {};
    return list_directory(dir.get(), path_ + "/" + env_subdir);
}

void PoolDir::remove_job_environment(const std::string& name) {
    const Fd dir = env_dir(false);
    if (!dir)
        return;
    if (unlinkat(dir.get(), name.c_str(), 0) != 0 && errno != ENOENT)
        throw system_error("cannot remove " + path_ + "/" + env_subdir + "/" + name, errno);
}

}  // namespace bbkit
