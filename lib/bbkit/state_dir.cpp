#include "bbkit/state_dir.hpp"

#include <fcntl.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <sstream>
#include <thread>

#include "bbkit/error.hpp"
#include "bbkit/process.hpp"
#include "bbkit/text.hpp"
#include "bbkit/user.hpp"

namespace bbkit {

namespace {

// Who may use the state directory: its owner or root (root alone when the owner is root).
Error not_the_owner(const std::string& dir, const std::string& owner_name) {
    return Error(ExitCode::no_perm,
                 "state directory " + dir + " belongs to " + owner_name + " (run this as " +
                     (owner_name == "root" ? std::string("root") : owner_name + " or root") + ")");
}

// Torn-down directories wait in each pool's own trash/ (a rename cannot cross file systems),
// and quarantined ones in the pool's quarantine/, so neither is here.
const char* const subdirectories[] = {"env", "public", "run", "progress", "log"};

constexpr std::size_t lock_record_size = 256;

std::string octal_mode(mode_t mode) {
    char text[8];
    std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
    return text;
}

// ---- the lock -------------------------------------------------------------------------------

std::string describe_holder(int fd) {
    char buffer[512];
    const ssize_t n = ::pread(fd, buffer, sizeof buffer - 1, 0);
    if (n <= 0)
        return "another process";
    std::istringstream fields(std::string(buffer, static_cast<std::size_t>(n)));
    long pid = 0;
    std::uint64_t start = 0;
    std::int64_t since = 0;
    std::string who;
    if (!(fields >> pid >> start >> since) || pid <= 0)
        return "another process";  // blank: released, or not yet written by the new holder
    std::getline(fields >> std::ws, who);
    who.erase(who.find_last_not_of(' ') + 1);
    return "pid " + std::to_string(pid) + (who.empty() ? "" : " (" + who + ")") + " since " +
           local_time(since);
}

// ---- the directory --------------------------------------------------------------------------

uid_t owner_uid_of(const Config& config) {
    if (config.state_owner == "root" || config.state_owner == "0")
        return 0;
    return lookup_user(config.state_owner).uid;
}

void check_owned(const std::string& path, const struct stat& st, uid_t owner,
                 const std::string& owner_name) {
    if (st.st_uid != owner)
        throw Error(ExitCode::no_perm, "state directory " + path + " is owned by uid " +
                                           std::to_string(st.st_uid) + ", not by " + owner_name +
                                           " (chown " + owner_name + " " + path +
                                           ", or set state_owner)");
}

// Setting up the state directory, a failed call is a configuration error whatever its errno
// (configuration_error, bbkit(7) EXIT STATUS); an owner or mode bbkit refuses is its own 77.

// The directory at `path` itself, never what a symlink there points to: the state owner (not
// root) owns the state directory and could swap an entry between a check and a change of mode
// or owner, so root changes them only through this descriptor.
Fd open_directory_entry(const std::string& path, const struct stat* expected) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0)
        throw configuration_error("cannot open directory " + path, errno, " (is it a symlink?)");
    if (expected && (st.st_ino != expected->st_ino || st.st_dev != expected->st_dev))
        throw Error(ExitCode::no_perm, path + " changed while bbkit set it up (retry)");
    return fd;
}

// Creates `path` as a directory if missing; returns its status.
struct stat ensure_directory(const std::string& path, mode_t mode, uid_t owner) {
    struct stat st {};
    // Looked at first: a mkdir of an existing directory takes its parent's inode lock, which
    // every tool call would otherwise take six times.
    if (::lstat(path.c_str(), &st) != 0) {
        if (::mkdir(path.c_str(), mode) == 0) {
            const Fd fd = open_directory_entry(path, nullptr);
            // chmod: the umask must not decide who can read the state.
            if (::fchmod(fd.get(), mode) != 0 ||
                (geteuid() != owner && ::fchown(fd.get(), owner, static_cast<gid_t>(-1)) != 0))
                throw configuration_error("cannot set up directory " + path, errno);
        } else if (errno != EEXIST) {
            throw configuration_error("cannot create state directory " + path, errno,
                                      " (create its parent, or set state_dir)");
        }
        if (::lstat(path.c_str(), &st) != 0)
            throw configuration_error("cannot inspect " + path, errno);
    }
    if (!S_ISDIR(st.st_mode))
        throw Error(ExitCode::config,
                    path + " is not a directory (move it aside so bbkit can create it)");
    return st;
}

// The state owner may have put anything at `path` (bbkit(7), SECURITY): root opens no symlink,
// and gives the owner nothing but a regular file of one link, so that a hard link planted to a
// file elsewhere is never opened for writing nor chowned.
Fd open_owned_file(const std::string& path, uid_t owner) {
    Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600));
    if (!fd)
        throw configuration_error("cannot open " + path, errno,
                                  " (check the state directory's owner and mode)");
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0)
        throw configuration_error("cannot inspect " + path, errno);
    if (!S_ISREG(st.st_mode) || st.st_nlink != 1)
        throw Error(ExitCode::no_perm, path +
                                           " is not a regular file of one link: it was planted "
                                           "outside bbkit, so root does not use it (bbkit(7), "
                                           "SECURITY; move it aside)");
    if (st.st_uid != owner && geteuid() == 0 &&
        ::fchown(fd.get(), owner, static_cast<gid_t>(-1)) != 0)
        throw configuration_error("cannot chown " + path, errno);
    return fd;
}

// The group config.state_group names, or nullopt when it names none.
std::optional<gid_t> state_group_of(const Config& config) {
    if (config.state_group.empty())
        return std::nullopt;
    if (const std::optional<std::uint64_t> gid =
            parse_decimal(config.state_group, std::numeric_limits<gid_t>::max()))
        return static_cast<gid_t>(*gid);
    if (const struct group* g = ::getgrnam(config.state_group.c_str()))
        return g->gr_gid;
    throw Error(ExitCode::config, "state_group '" + config.state_group +
                                      "' is not a group on this host (groupadd it, or change "
                                      "state_group in the configuration)");
}

// env/: its group (state_group, SlurmUser's) may enter it and read the env files, which it
// passes on to the files created in it (setgid); nobody else can even learn which exist.
void set_up_env_directory(const std::string& path, const struct stat& st,
                          std::optional<gid_t> group) {
    constexpr mode_t env_mode = 02710;
    const bool regroup = group && st.st_gid != *group;
    if (!regroup && (st.st_mode & 07777) == env_mode)
        return;
    const Fd fd = open_directory_entry(path, &st);
    if (regroup && ::fchown(fd.get(), static_cast<uid_t>(-1), *group) != 0)
        throw configuration_error("cannot give " + path + " to group " + std::to_string(*group),
                                  errno);
    if (::fchmod(fd.get(), env_mode) != 0)
        throw configuration_error("cannot set the mode of " + path, errno);
}

void set_up_directory(const std::string& dir, uid_t owner, const std::string& owner_name,
                      std::optional<gid_t> env_group) {
    if (geteuid() != owner && geteuid() != 0)
        throw not_the_owner(dir, owner_name);
    // 0711: others may reach public/ (and nothing else: every other entry is 0700 or 0600).
    const struct stat st = ensure_directory(dir, 0711, owner);
    check_owned(dir, st, owner, owner_name);
    // Search permission alone lets non-owners reach public/; reading or writing does not.
    if ((st.st_mode & 066) != 0)
        throw Error(ExitCode::no_perm,
                    "state directory " + dir + " has mode " + octal_mode(st.st_mode) +
                        ": group or others may read or write it (chmod 0711 " + dir + ")");
    for (const char* name : subdirectories) {
        const std::string path = dir + "/" + name;
        const bool env = std::string(name) == "env";
        const mode_t mode = std::string(name) == "public" ? 0755 : env ? 0710 : 0700;
        struct stat st = ensure_directory(path, mode, owner);
        check_owned(path, st, owner, owner_name);
        if (env)
            set_up_env_directory(path, st, env_group);
    }
}

// What a reading command checks instead of set_up_directory: the same owner and mode rules,
// but a missing directory is an answer (66), never something to create (bbkit(7), STATE
// DIRECTORY).
void check_existing_directory(const std::string& dir, uid_t owner, const std::string& owner_name) {
    if (geteuid() != owner && geteuid() != 0)
        throw not_the_owner(dir, owner_name);
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0) {
        if (errno == ENOENT)
            throw Error(ExitCode::no_input,
                        "cannot read state directory " + dir +
                            ": it does not exist (check state_dir and --state-dir; bb-pool init "
                            "creates it)");
        throw system_error("cannot inspect state directory " + dir, errno);
    }
    if (!S_ISDIR(st.st_mode))
        throw Error(ExitCode::config, "cannot read state directory " + dir +
                                          ": not a directory (check state_dir and --state-dir)");
    check_owned(dir, st, owner, owner_name);
    if ((st.st_mode & 066) != 0)
        throw Error(ExitCode::no_perm,
                    "state directory " + dir + " has mode " + octal_mode(st.st_mode) +
                        ": group or others may read or write it (chmod 0711 " + dir + ")");
    const std::string db = dir + "/state.db";
    if (::lstat(db.c_str(), &st) != 0 && errno == ENOENT)
        throw Error(ExitCode::no_input, "cannot read " + db +
                                            ": it does not exist (check state_dir and "
                                            "--state-dir; bb-pool init creates it)");
}

}  // namespace

Fd open_state_dir(const Config& config, bool read_only) {
    const std::string& dir = config.state_dir;
    const uid_t owner = owner_uid_of(config);
    if (read_only) {
        state_group_of(config);  // a misconfigured state_group is an error for readers too
        check_existing_directory(dir, owner, config.state_owner);
        return Fd();
    }
    set_up_directory(dir, owner, config.state_owner, state_group_of(config));
    Fd lock_fd = open_owned_file(dir + "/lock", owner);
    // Created here so its owner and mode are ours; SQLite gives -wal and -shm the same ones.
    open_owned_file(dir + "/state.db", owner);
    return lock_fd;
}

FileSystemKind state_dir_file_system(const Config& config) {
    std::string where = config.state_dir;
    struct stat st {};
    while (::stat(where.c_str(), &st) != 0 && errno == ENOENT && where.size() > 1) {
        const std::size_t slash = where.rfind('/');
        where = slash == 0 || slash == std::string::npos ? "/" : where.substr(0, slash);
    }
    try {
        return file_system_kind(where);
    } catch (const Error& e) {
        // Not reachable by this caller: what the directory's own check then says is the
        // clearer message (open_state_dir), so nothing is judged here.
        FileSystemKind unreachable;
        unreachable.name = "unknown";
        unreachable.unreachable = e.what();
        return unreachable;
    }
}

sqlite::Journal state_journal(const Config& config, FileSystemKind* fs) {
    const FileSystemKind kind = state_dir_file_system(config);
    if (fs != nullptr)
        *fs = kind;
    if (!kind.unreachable.empty())  // open_state_dir refuses it, naming why
        return config.state_journal == StateJournal::rollback ? sqlite::Journal::rollback
                                                              : sqlite::Journal::wal;
    const bool vouched = kind.locks_unknown && config.state_journal == StateJournal::rollback;
    if (kind.shared && !kind.local_locks.empty() && !vouched)
        throw Error(
            ExitCode::config,
            "state directory " + config.state_dir + " is on " + kind.name + " with " +
                kind.local_locks +
                ": its locks may keep out no other host, so two hosts could write "
                "state.db at once (" +
                (kind.locks_unknown ? std::string("once you know its locks reach every host, set "
                                                  "state_journal = \"rollback\"")
                                    : std::string("mount it with locks that reach the server")) +
                "; bbkit(7), STATE DIRECTORY)");
    if (kind.shared && config.state_journal == StateJournal::wal)
        throw Error(ExitCode::config,
                    "state directory " + config.state_dir + " is on a network file system (" +
                        kind.name +
                        "), where SQLite's WAL is not safe: remove state_journal = \"wal\" "
                        "(bbkit(7), STATE DIRECTORY)");
    if (!kind.known && config.state_journal == StateJournal::automatic)
        throw Error(ExitCode::config,
                    "state directory " + config.state_dir +
                        " is on a file system bbkit does not "
                        "know (statfs magic " +
                        kind.name +
                        "): set state_journal = \"wal\" if only this host ever opens it, or "
                        "\"rollback\" if other hosts share it (bbkit(7), STATE DIRECTORY)");
    return kind.shared || config.state_journal == StateJournal::rollback ? sqlite::Journal::rollback
                                                                         : sqlite::Journal::wal;
}

// The record always has the same length and is overwritten in place, blank once released: a
// truncate and a new block per transaction cost more than the transaction's own statements.
StateLock::StateLock(int fd, const std::string& who) : fd_(fd) {
    const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
    std::string holder = std::to_string(getpid()) + " " +
                         std::to_string(ProcessId::self().start_time) + " " + std::to_string(now) +
                         " " + who;
    write_record(std::move(holder));
}

StateLock::~StateLock() {
    if (fd_ >= 0) {
        write_record("");
        ::flock(fd_, LOCK_UN);
    }
}

// Informational only (for waiters' messages), so neither failure nor fsync matters.
void StateLock::write_record(std::string text) const {
    text.resize(lock_record_size - 1, ' ');
    text += '\n';
    if (::pwrite(fd_, text.data(), text.size(), 0) < 0) {
    }
}

StateLock StateLock::acquire(const Fd& lock_fd, const std::string& dir,
                             std::chrono::milliseconds timeout, const std::string& who) {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + timeout;
    auto pause = std::chrono::microseconds(200);
    while (::flock(lock_fd.get(), LOCK_EX | LOCK_NB) != 0) {
        if (errno == EINTR)
            continue;
        if (errno != EWOULDBLOCK)
            throw system_error("cannot lock " + dir + "/lock", errno);
        if (Clock::now() >= deadline) {
            const auto waited = std::chrono::duration<double>(timeout).count();
            std::ostringstream seconds;
            seconds << waited;
            throw Error(ExitCode::temp_fail,
                        "state directory " + dir + " is locked by " +
                            describe_holder(lock_fd.get()) + ": gave up after " + seconds.str() +
                            " s (retry later; if that process hangs, stop it)");
        }
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(10000));
    }
    return StateLock(lock_fd.get(), who);
}

}  // namespace bbkit
