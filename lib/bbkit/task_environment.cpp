#include "bbkit/task_environment.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <optional>
#include <vector>

#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/job_environment.hpp"
#include "bbkit/pool_dir.hpp"
#include "bbkit/seal.hpp"

namespace bbkit {
namespace {

// job_paths() writes a few short lines; anything near this is not bbkit's.
constexpr std::size_t max_environment_bytes = 64 * 1024;

bool is_name(const std::string& name) {
    if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0])))
        return false;
    for (const char c : name)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_')
            return false;
    return true;
}

bool exists_here(int dirfd, const std::string& name) {
    struct stat st {};
    if (fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
        return true;
    if (errno == ENOENT)
        return false;
    return true;  // let the open say why
}

bool newer(const struct stat& a, const struct stat& b) {
    return a.st_mtim.tv_sec != b.st_mtim.tv_sec ? a.st_mtim.tv_sec > b.st_mtim.tv_sec
                                                : a.st_mtim.tv_nsec > b.st_mtim.tv_nsec;
}

struct Found {
    Fd fd;
    std::string path;
    struct stat st {};
};

// env/<name>, opened without following a symlink: nullopt when it is not there, or not a
// regular file of the caller's (any owner for root). Another user's file answers as a missing
// one: nobody learns that another user's job has one (bbkit(7), SECURITY).
std::optional<Found> open_entry(int env, const std::string& env_path, const std::string& name,
                                uid_t caller) {
    Found found;
    found.path = env_path + "/" + name;
    if (fstatat(env, name.c_str(), &found.st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT)
            return std::nullopt;
        throw system_error("cannot stat " + found.path, errno);
    }
    if (caller != 0 && found.st.st_uid != caller)
        return std::nullopt;
    // O_NONBLOCK: a FIFO planted there must not hang the job's start.
    found.fd = open_beneath(env, name, O_RDONLY | O_NONBLOCK, found.path);
    if (fstat(found.fd.get(), &found.st) != 0)
        throw system_error("cannot stat " + found.path, errno);
    if (caller != 0 && found.st.st_uid != caller)
        return std::nullopt;
    if (!S_ISREG(found.st.st_mode))
        throw Error(ExitCode::no_perm, "refusing " + found.path + ": not a regular file");
    return found;
}

// The names the job's file may have in env/ for this caller: the one its key names (a user
// reads their own key; root lists env/, which only root may), and the name it had before.
std::vector<std::string> candidate_names(int env, const std::string& env_path,
                                         const std::string& cluster, std::uint64_t job_id,
                                         uid_t caller) {
    if (caller == 0) {
        std::vector<std::string> names;
        const Fd listed(openat(env, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        if (!listed)
            throw system_error("cannot list " + env_path, errno);
        for (const std::string& name : list_directory(listed.get(), env_path))
            if (environment_job_id(cluster, name) == job_id)
                names.push_back(name);
        return names;
    }
    std::vector<std::string> names;
    if (std::optional<Found> key =
            open_entry(env, env_path, environment_key_name(caller), caller)) {
        std::optional<std::string> text;
        try {
            text = parse_user_key(read_all(key->fd.get(), key->path, 64));
        } catch (const Error&) {
            // Not a key (the user's file, which they may have changed): no tagged name.
        }
        if (text)
            names.push_back(job_environment_name(cluster, job_id, *text));
    }
    names.push_back(legacy_job_environment_name(cluster, job_id));
    return names;
}

// The job's file in one pool: nullopt when the pool, its env/ or the file is not there (or is
// not the caller's).
std::optional<Found> open_in_pool(const PoolConfig& pool, const std::string& cluster,
                                  std::uint64_t job_id, uid_t caller) {
    // An unmounted or unreadable pool holds nothing for this job.
    const Fd root(open(pool.path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!root)
        return std::nullopt;
    const std::string env_path = pool.path + "/" + PoolDir::env_subdir;
    if (!exists_here(root.get(), PoolDir::env_subdir))
        return std::nullopt;
    // O_PATH: env/ is 0711, a user may search it but not read (list) it; root reopens it to.
    const Fd env = open_beneath(root.get(), PoolDir::env_subdir, O_PATH | O_DIRECTORY, env_path);
    struct stat dir {};
    if (fstat(env.get(), &dir) != 0)
        throw system_error("cannot stat " + env_path, errno);
    // Only root may put files there: what is in it is what pre-run wrote (or, for a caller that
    // is not root, a pool of its own: may_own_pools).
    if (!S_ISDIR(dir.st_mode) || !may_own_pools(dir.st_uid) || (dir.st_mode & (S_IWGRP | S_IWOTH)))
        throw Error(ExitCode::no_perm,
                    "refusing " + env_path + ": not a directory only root may write");
    std::optional<Found> newest;
    for (const std::string& name : candidate_names(env.get(), env_path, cluster, job_id, caller)) {
        std::optional<Found> found = open_entry(env.get(), env_path, name, caller);
        if (found && (!newest || newer(found->st, newest->st)))
            newest = std::move(found);
    }
    return newest;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> parse_task_environment(const std::string& text,
                                                                        const std::string& what) {
    std::vector<std::pair<std::string, std::string>> variables;
    std::size_t start = 0;
    unsigned line_number = 0;
    while (start < text.size()) {
        ++line_number;
        std::size_t end = text.find('\n', start);
        if (end == std::string::npos)
            end = text.size();
        const std::string line = text.substr(start, end - start);
        start = end + 1;
        const std::size_t equals = line.find('=');
        const auto malformed = [&](const std::string& why) {
            return Error(ExitCode::data, what + ":" + std::to_string(line_number) +
                                             ": malformed environment line (" + why + ")");
        };
        if (equals == std::string::npos)
            throw malformed("no NAME=value");
        const std::string name = line.substr(0, equals);
        if (!is_name(name))
            throw malformed("'" + printable(name) + "' is not a variable name");
        const std::string value = line.substr(equals + 1);
        for (const char c : value)
            if (is_control(c))
                throw malformed("a control character in the value of " + name);
        variables.emplace_back(name, value);
    }
    if (variables.empty())
        throw Error(ExitCode::data, what + " holds no environment");
    return variables;
}

TaskEnvironment read_task_environment(const Config& config, std::uint64_t job_id, uid_t caller) {
    std::optional<Found> newest;
    for (const PoolConfig& pool : config.pools) {
        std::optional<Found> found = open_in_pool(pool, config.cluster, job_id, caller);
        if (found && (!newest || newer(found->st, newest->st)))
            newest = std::move(found);
    }
    if (!newest)
        throw Error(ExitCode::no_input,
                    "job " + std::to_string(job_id) +
                        " has no burst-buffer environment on any pool (no buffer, not yet past "
                        "pre-run, or not standalone mode)");
    TaskEnvironment env;
    env.file = newest->path;
    env.variables = parse_task_environment(
        read_all(newest->fd.get(), newest->path, max_environment_bytes), newest->path);
    return env;
}

}  // namespace bbkit
