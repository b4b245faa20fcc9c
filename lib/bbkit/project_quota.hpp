// Project quotas: what makes a buffer's capacity a limit of the file system rather than a
// number in the records (bbkit(7), CAPACITY).
//
// A pool with `quota = "project"` (bbkit.toml(5)) gives each buffer directory a project of its
// own, quota_project_base + the buffer's record id, marked to be inherited by everything created
// beneath it, with a hard limit of its allocated bytes: set before the directory is handed to its
// user and removed once the reaper has removed the directory. Everything goes through the kernel
// directly: FS_IOC_FSGETXATTR/FS_IOC_FSSETXATTR on the directory and quotactl_fd(2) on PRJQUOTA
// (ext4 mounted with prjquota, XFS with pquota; Linux 5.14 or later).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "bbkit/buffer.hpp"
#include "bbkit/config.hpp"
#include "bbkit/fsops.hpp"

namespace bbkit {

// The project of a buffer: pool.quota_project_base + record_id. Error(config) when it would be
// above max_project_id (a base too high for the records this state directory holds).
std::uint32_t buffer_project(const PoolConfig& pool, std::int64_t record_id);
// The record id a project id of `pool` stands for; nullopt outside the pool's range.
std::optional<std::int64_t> record_of_project(const PoolConfig& pool, std::uint32_t project);

// What one project holds and may hold, in bytes (limit 0: none).
struct ProjectUsage {
    std::uint64_t bytes = 0;
    std::uint64_t inodes = 0;
    std::uint64_t byte_limit = 0;
};

// The project quotas of the file system an open descriptor is on. Reading a project's usage
// needs CAP_SYS_ADMIN, as every call here but enforced().
class ProjectQuotas {
  public:
    // `fd` stays the caller's; `what` names the file system in messages (the pool's path).
    ProjectQuotas(int fd, std::string what) : fd_(fd), what_(std::move(what)) {}

    // "" when the file system enforces project quotas; otherwise why not, for a message
    // ("it was mounted without prjquota (ext4) or pquota (XFS)", "no quota support: ...").
    std::string why_not_enforced() const;

    // A project without an entry reads as all zero.
    ProjectUsage usage(std::uint32_t project) const;
    // A hard limit on the project's space, rounded up to the kernel's 1 KiB unit.
    void set_limit(std::uint32_t project, std::uint64_t bytes) const;
    // No limit on space or inodes any more: the file system drops the entry once it is empty.
    void remove_limits(std::uint32_t project) const;
    // The first project at or after `from` that has an entry (usage or limits), if any.
    std::optional<std::pair<std::uint32_t, ProjectUsage>> next(std::uint32_t from) const;

  private:
    int fd_;
    std::string what_;
};

// The directory `fd`'s project id and whether what is created in it inherits it.
struct DirectoryProject {
    std::uint32_t project = 0;
    bool inherited = false;
};
DirectoryProject directory_project(int fd, const std::string& what);
// Gives the directory `fd` the project and FS_XFLAG_PROJINHERIT (as root: the kernel lets an
// owner change them too, bbkit(7), SECURITY).
void set_directory_project(int fd, std::uint32_t project, const std::string& what);

// Where a pool stands with project quotas, probed on its root.
struct PoolQuota {
    bool enforced = false;  // buffers get limits
    std::string why_not;    // when the pool asks for them and its file system lacks them
};

// Probes `root_fd` (the pool's root) when the pool asks for project quotas: enforced, or why
// not. For a pool with quota = "none", not enforced and nothing to say.
PoolQuota probe_pool_quota(const PoolConfig& pool, int root_fd);

// The pool's rule for init and alloc: with quota = "project" and a file system that lacks
// enforced project quotas, quota_missing = "refuse" is Error(unavailable) naming the pool, why
// and what to do; "warn" logs a warning and goes on without limits. Returns whether buffers get
// limits.
bool require_pool_quota(const PoolConfig& pool, const PoolQuota& quota);

// Buffers' space in use as their projects count it, for the views: each pool is opened and
// probed once. nullopt for a buffer whose pool has no enforced project quota, or when the caller
// may not read it (only root may): bbkit(7), CAPACITY.
class ProjectUsageReader {
  public:
    explicit ProjectUsageReader(const Config& config) : config_(config) {}
    std::optional<std::uint64_t> used_bytes(const Buffer& buffer);

  private:
    struct Pool {
        Fd root;
        bool readable = false;
    };
    const Config& config_;
    std::map<std::string, Pool> pools_;
};

}  // namespace bbkit
