#include "bbkit/run_lock.hpp"

#include <spdlog/spdlog.h>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "bbkit/error.hpp"
#include "bbkit/store.hpp"
#include "bbkit/text.hpp"

namespace bbkit {

RunLockScope run_lock_scope(StateStore& store) {
    return RunLockScope{store.dir(), store.claim_epoch()};
}

std::string run_lock_name(const RunLockScope& scope, const std::string& name) {
    return "run/" + name + (scope.epoch ? "@" + std::to_string(*scope.epoch) : "") + ".lock";
}

namespace {

std::string lock_name(const RunLockScope& scope, const BufferKey& key) {
    return run_lock_name(scope, key.str());
}

std::string lock_path(const RunLockScope& scope, const BufferKey& key) {
    return scope.state_dir + "/" + lock_name(scope, key);
}

// Through open_state_file: run/ is the state owner's (bbkit(7), SECURITY).
Fd open_lock_file(const RunLockScope& scope, const BufferKey& key) {
    return open_state_file(scope.state_dir, lock_name(scope, key), O_RDWR | O_CREAT, 0600);
}

// The holder ("pid start_time") is an extended attribute of the lock file: ext4 keeps a small one
// in the inode, so the file never gets a data block. Written as content, a block was allocated
// at each lock and freed with the file: about 0.2 ms of a teardown. Content is the fallback
// where user xattrs are not supported (and what older versions wrote).
constexpr const char* holder_attribute = "user.bbkit.holder";

std::optional<ProcessId> parse_holder(const char* text, ssize_t n) {
    if (n <= 0)
        return std::nullopt;
    std::istringstream in(std::string(text, static_cast<std::size_t>(n)));
    ProcessId id;
    if (!(in >> id.pid >> id.start_time) || id.pid <= 0)
        return std::nullopt;
    return id;
}

std::optional<ProcessId> read_holder(int fd) {
    char buf[64] = {};
    const ssize_t n = fgetxattr(fd, holder_attribute, buf, sizeof buf - 1);
    if (n >= 0)
        return parse_holder(buf, n);
    return parse_holder(buf, pread(fd, buf, sizeof buf - 1, 0));
}

void write_holder(int fd) {
    const ProcessId self = ProcessId::self();
    const std::string text =
        std::to_string(self.pid) + " " + std::to_string(self.start_time) + "\n";
    if (fsetxattr(fd, holder_attribute, text.data(), text.size(), 0) == 0)
        return;
    if (errno != ENOTSUP && errno != EOPNOTSUPP && errno != EPERM)
        throw system_error("cannot record run lock holder", errno);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text.data(), text.size(), 0) < 0)
        throw system_error("cannot record run lock holder", errno);
}

}  // namespace

std::optional<RunLock> RunLock::try_acquire(const RunLockScope& scope, const BufferKey& key) {
    const std::string path = lock_path(scope, key);
    // A teardown removes the file while it holds the lock (remove_file): a process that opened
    // it before and locked it after holds a file nobody else can see, and opens it again.
    for (int attempt = 0; attempt < 100; ++attempt) {
        Fd fd = open_lock_file(scope, key);
        if (flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
            if (errno == EWOULDBLOCK)
                return std::nullopt;
            throw system_error("cannot lock " + path, errno);
        }
        struct stat held {};
        struct stat named {};
        if (fstat(fd.get(), &held) != 0)
            throw system_error("cannot inspect " + path, errno);
        if (lstat(path.c_str(), &named) != 0 || named.st_ino != held.st_ino ||
            named.st_dev != held.st_dev)
            continue;
        // A process that began before the first claim holds the plain lock, and writes on once
        // its host takes the claim: seen on this host, it excludes the claim's processes too.
        // (One on another host is fenced at its next write, and never seen here.)
        if (scope.epoch) {
            const std::optional<ProcessId> before = holder(RunLockScope{scope.state_dir, {}}, key);
            if (before && !(*before == ProcessId::self()))
                return std::nullopt;
        }
        write_holder(fd.get());
        return RunLock(std::move(fd), path, scope, key.str());
    }
    throw Error(ExitCode::temp_fail, "cannot lock " + path + ": it keeps being removed");
}

RunLock RunLock::acquire(const RunLockScope& scope, const BufferKey& key,
                         std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        if (std::optional<RunLock> lock = try_acquire(scope, key))
            return std::move(*lock);
        if (std::chrono::steady_clock::now() >= deadline)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::string who = "another process";
    if (std::optional<ProcessId> h = holder(scope, key))
        who = "pid " + std::to_string(h->pid);
    throw Error(ExitCode::temp_fail,
                "buffer " + key.str() + " is busy: " + who + " holds its run lock (retry later)");
}

namespace {

// Whether process `pid` has the file `held` open. The holder written into a lock file is only
// a claim: the file lies in run/, which the state owner can write, and a teardown as root stops
// the holder. A process that really holds the lock has the file open; no other party can make
// someone else's process open it (bbkit(7), SECURITY).
bool has_open(pid_t pid, const struct stat& held) {
    const std::string fds = "/proc/" + std::to_string(pid) + "/fd";
    DIR* dir = opendir(fds.c_str());
    if (dir == nullptr)
        return false;
    bool found = false;
    while (const dirent* entry = readdir(dir)) {
        if (entry->d_name[0] == '.')
            continue;
        struct stat st {};
        if (fstatat(dirfd(dir), entry->d_name, &st, 0) == 0 && st.st_dev == held.st_dev &&
            st.st_ino == held.st_ino) {
            found = true;
            break;
        }
    }
    closedir(dir);
    return found;
}

std::optional<ProcessId> holder_of(const std::string& state_dir, const std::string& name) {
    Fd fd;
    try {
        fd = open_state_file(state_dir, name, O_RDONLY);
    } catch (const Error&) {
        return std::nullopt;
    }
    if (flock(fd.get(), LOCK_SH | LOCK_NB) == 0)
        return std::nullopt;  // nobody holds it
    const std::optional<ProcessId> claimed = read_holder(fd.get());
    struct stat held {};
    if (!claimed || fstat(fd.get(), &held) != 0 || !has_open(claimed->pid, held))
        return std::nullopt;
    return claimed;
}

}  // namespace

std::optional<ProcessId> RunLock::holder(const RunLockScope& scope, const BufferKey& key) {
    if (std::optional<ProcessId> h = holder_of(scope.state_dir, lock_name(scope, key)))
        return h;
    if (scope.epoch)  // one from before the first claim (try_acquire)
        return holder_of(scope.state_dir, lock_name(RunLockScope{scope.state_dir, {}}, key));
    return std::nullopt;
}

void RunLock::remove_file() {
    if (!fd_)
        return;
    // Beneath run/ opened as open_state_file opens: the state owner's directory is never
    // followed anywhere else (bbkit(7), SECURITY).
    Fd run;
    try {
        run = open_state_file(scope_.state_dir, "run", O_RDONLY | O_DIRECTORY);
    } catch (const Error& e) {
        spdlog::warn("cannot remove run lock {}: {}", path_, e.what());
        return;
    }
    const std::string own = path_.substr(path_.rfind('/') + 1);
    if (unlinkat(run.get(), own.c_str(), 0) != 0 && errno != ENOENT)
        spdlog::warn("cannot remove run lock {}: {}", path_, std::strerror(errno));
    if (!scope_.epoch)
        return;
    // The buffer's locks of older epochs (and the plain one, from before any claim): one a
    // process still holds stays with it (a controller cut off); the others are what a
    // failover left.
    const std::string prefix = key_ + "@";
    std::vector<std::string> older{key_ + ".lock"};
    const int listing = dup(run.get());
    if (DIR* dir = listing < 0 ? nullptr : fdopendir(listing)) {
        while (const dirent* entry = readdir(dir)) {
            const std::string name = entry->d_name;
            if (starts_with(name, prefix) && name != own)
                older.push_back(name);
        }
        closedir(dir);
    } else if (listing >= 0) {
        close(listing);
    }
    for (const std::string& name : older) {
        try {
            Fd fd = open_state_file_at(run.get(), name, O_RDONLY, "run/" + name);
            if (flock(fd.get(), LOCK_EX | LOCK_NB) == 0 &&
                unlinkat(run.get(), name.c_str(), 0) != 0 && errno != ENOENT)
                spdlog::warn("cannot remove run lock run/{}: {}", name, std::strerror(errno));
        } catch (const Error&) {
            // Gone already, or not a plain file with one link: left alone.
        }
    }
}

}  // namespace bbkit
