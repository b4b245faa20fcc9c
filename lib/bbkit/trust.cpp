#include "bbkit/trust.hpp"

#include <fcntl.h>
#include <grp.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bbkit/error.hpp"
#include "bbkit/user.hpp"

namespace bbkit {
namespace {

constexpr uid_t nobody = 65534;
constexpr int max_symlinks = 40;  // as the kernel's own limit on a path's symlinks

std::optional<uid_t> uid_from_text(const char* text) {
    if (text == nullptr || *text == '\0' || std::strlen(text) > 10)
        return std::nullopt;
    unsigned long long value = 0;
    for (const char* c = text; *c; ++c) {
        if (*c < '0' || *c > '9')
            return std::nullopt;
        value = value * 10 + static_cast<unsigned>(*c - '0');
    }
    if (value >= 4294967295ULL)
        return std::nullopt;
    return static_cast<uid_t>(value);
}

[[noreturn]] void untrusted(const std::string& what, const std::string& path,
                            const std::string& why, const std::string& fix) {
    throw Error(ExitCode::config,
                what + " " + path + " is not trusted: " + why +
                    " (root reads and runs only what nobody else can change: " + fix + ")");
}

// Walks `path` from the root the way the kernel resolves it, and checks that nobody but root
// can replace any entry on the way: every directory passed through is root-owned and not
// writable by group or others (or sticky, with the entry in it root-owned), and every symlink
// met is resolved the same way.
class PathCheck {
  public:
    PathCheck(std::string what, std::string original)
        : what_(std::move(what)), original_(std::move(original)) {}

    void run(const std::string& path) { walk(path, 0); }

  private:
    void check_directory(const std::string& dir, const struct stat& st) const {
        if (st.st_uid != 0)
            untrusted(what_, original_, dir + " is owned by uid " + std::to_string(st.st_uid),
                      "chown root " + dir);
        if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
            untrusted(what_, original_, dir + " is writable by group or others",
                      "chmod go-w " + dir);
    }

    // `entry` in `dir` (whose status is `dir_st`) can be replaced only by root.
    void check_entry(const std::string& dir, const struct stat& dir_st, const std::string& entry,
                     const struct stat& st) const {
        if ((dir_st.st_mode & (S_IWGRP | S_IWOTH)) && st.st_uid != 0)
            untrusted(what_, original_,
                      entry + " is owned by uid " + std::to_string(st.st_uid) + " in " + dir +
                          ", which others may write",
                      "chown root " + entry);
    }

    static struct stat status(const std::string& path, bool follow) {
        struct stat st {};
        const int rc = follow ? stat(path.c_str(), &st) : lstat(path.c_str(), &st);
        if (rc != 0)
            throw configuration_error(path, errno);
        return st;
    }

    static std::string joined(const std::string& dir, const std::string& name) {
        return dir == "/" ? "/" + name : dir + "/" + name;
    }

    static std::string parent_of(const std::string& dir) {
        const std::size_t slash = dir.rfind('/');
        return slash == 0 || slash == std::string::npos ? "/" : dir.substr(0, slash);
    }

    void walk(const std::string& path, int links) {
        if (path.empty() || path[0] != '/')
            untrusted(what_, original_, "it is not an absolute path", "name it from /");
        std::vector<std::string> names;
        for (std::size_t start = 1; start <= path.size();) {
            std::size_t end = path.find('/', start);
            if (end == std::string::npos)
                end = path.size();
            if (end > start)
                names.push_back(path.substr(start, end - start));
            start = end + 1;
        }
        std::string dir = "/";
        struct stat dir_st = status(dir, true);
        check_directory(dir, dir_st);
        for (std::size_t i = 0; i < names.size(); ++i) {
            const std::string& name = names[i];
            if (name == ".")
                continue;
            if (name == "..") {
                dir = parent_of(dir);
                dir_st = status(dir, true);
                continue;
            }
            const std::string entry = joined(dir, name);
            const bool last = i + 1 == names.size();
            struct stat st {};
            if (lstat(entry.c_str(), &st) != 0) {
                const int err = errno;
                throw configuration_error(original_ + ": cannot read " + what_, err);
            }
            check_entry(dir, dir_st, entry, st);
            if (S_ISLNK(st.st_mode)) {
                if (links >= max_symlinks)
                    untrusted(what_, original_, "too many symlinks", "name the file itself");
                char target[PATH_MAX];
                const ssize_t n = readlink(entry.c_str(), target, sizeof target - 1);
                if (n < 0)
                    throw configuration_error(what_ + " " + original_ + ": cannot read " + entry,
                                              errno);
                std::string next(target, static_cast<std::size_t>(n));
                if (next.empty() || next[0] != '/')
                    next = joined(dir, next);
                for (std::size_t k = i + 1; k < names.size(); ++k)
                    next += "/" + names[k];
                walk(next, links + 1);
                return;
            }
            if (!last) {
                if (!S_ISDIR(st.st_mode))
                    throw Error(ExitCode::config,
                                what_ + " " + original_ + ": " + entry + " is not a directory");
                check_directory(entry, st);
                dir = entry;
                dir_st = st;
                continue;
            }
            if (!S_ISREG(st.st_mode))
                untrusted(what_, original_, "it is not a regular file", "name a regular file");
            if (st.st_uid != 0)
                untrusted(what_, original_, "it is owned by uid " + std::to_string(st.st_uid),
                          "chown root " + entry);
            if (st.st_mode & (S_IWGRP | S_IWOTH))
                untrusted(what_, original_, "it is writable by group or others",
                          "chmod go-w " + entry);
        }
    }

    std::string what_;
    std::string original_;
};

// Switches the file system identity (and the groups) to a caller's for one scope.
class CallerFsIdentity {
  public:
    explicit CallerFsIdentity(const Caller& caller) {
        saved_groups_.resize(static_cast<std::size_t>(NGROUPS_MAX));
        const int n = getgroups(static_cast<int>(saved_groups_.size()), saved_groups_.data());
        saved_groups_.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
        std::vector<gid_t> groups{caller.gid};
        try {
            groups = lookup_user(std::to_string(caller.uid)).groups;
        } catch (const Error&) {
            // A caller without a passwd entry keeps only its primary group.
        }
        if (setgroups(groups.size(), groups.data()) != 0)
            throw system_error("cannot take the caller's groups", errno);
        setfsgid(caller.gid);
        setfsuid(caller.uid);
        if (static_cast<uid_t>(setfsuid(static_cast<uid_t>(-1))) != caller.uid ||
            static_cast<gid_t>(setfsgid(static_cast<gid_t>(-1))) != caller.gid) {
            restore();
            throw Error(ExitCode::no_perm, "cannot take the caller's file system identity");
        }
    }
    ~CallerFsIdentity() { restore(); }
    CallerFsIdentity(const CallerFsIdentity&) = delete;
    CallerFsIdentity& operator=(const CallerFsIdentity&) = delete;

  private:
    void restore() {
        setfsuid(geteuid());
        setfsgid(getegid());
        if (setgroups(saved_groups_.size(), saved_groups_.data()) != 0)
            std::abort();  // root's groups could not be restored: never go on with the wrong ones
    }

    std::vector<gid_t> saved_groups_;
};

}  // namespace

std::optional<Caller> less_privileged_caller() {
    if (geteuid() != 0)
        return std::nullopt;
    Caller caller;
    if (const char* sudo_uid = std::getenv("SUDO_UID"); sudo_uid != nullptr) {
        if (std::strcmp(sudo_uid, "0") == 0)
            return std::nullopt;
        caller.uid = uid_from_text(sudo_uid).value_or(nobody);
        caller.gid = uid_from_text(std::getenv("SUDO_GID")).value_or(nobody);
        if (const char* name = std::getenv("SUDO_USER"))
            caller.name = name;
        return caller;
    }
    if (getuid() == 0)
        return std::nullopt;
    caller.uid = getuid();
    caller.gid = getgid();
    return caller;
}

namespace {

// Error(no_perm) "refusing OPTION: running as root for uid N (NAME, through sudo), which WHY"
// when a less privileged caller runs the tool.
void refuse_for_caller(const std::string& option, const std::string& why) {
    const std::optional<Caller> caller = less_privileged_caller();
    if (!caller)
        return;
    throw Error(ExitCode::no_perm,
                "refusing " + option + ": running as root for uid " + std::to_string(caller->uid) +
                    (caller->name.empty() ? "" : " (" + caller->name + ", through sudo)") +
                    ", which " + why);
}

}  // namespace

void refuse_caller_file_choice(const std::string& option) {
    refuse_for_caller(option,
                      "may not choose the files root reads or writes (root's own "
                      "configuration, /etc/bbkit/bbkit.toml, is used)");
}

void refuse_caller_override(const std::string& option) {
    refuse_for_caller(option,
                      "may not override bbkit's safety checks (an administrator runs it as root)");
}

void drop_caller_environment() {
    if (!less_privileged_caller())
        return;
    // SLURM_CONF: the Slurm commands root runs read root's slurm.conf, never one the caller names
    // (sudo's env_reset drops it too, unless a site keeps it); root names it in slurm_conf.
    for (const char* name :
         {"BBKIT_CONFIG", "BBKIT_STATE_DIR", "BBKIT_FAULT", "BBKIT_FAULT_LOG", "SLURM_CONF"})
        unsetenv(name);
}

void check_root_controlled(const std::string& path, const std::string& what) {
    if (geteuid() != 0)
        return;
    std::string absolute = path;
    if (absolute.empty() || absolute[0] != '/') {
        char cwd[PATH_MAX];
        if (getcwd(cwd, sizeof cwd) == nullptr)
            throw configuration_error(path + ": cannot read " + what, errno);
        absolute = std::string(cwd) + "/" + path;
    }
    PathCheck(what, path).run(absolute);
}

Fd open_as_caller(const std::string& path) {
    const std::optional<Caller> caller = less_privileged_caller();
    int fd = -1;
    int err = 0;
    if (caller) {
        CallerFsIdentity as_caller(*caller);
        fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        err = errno;
    } else {
        fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        err = errno;
    }
    if (fd < 0)
        throw system_error("cannot read '" + path + "'", err);
    return Fd(fd);
}

}  // namespace bbkit
