#include "bbkit/project_quota.hpp"

#include <fcntl.h>
#include <linux/dqblk_xfs.h>
#include <linux/fs.h>
#include <linux/quota.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "bbkit/error.hpp"

#ifndef SYS_quotactl_fd
#define SYS_quotactl_fd 443  // Linux 5.14, every architecture
#endif

namespace bbkit {
namespace {

constexpr std::uint64_t quota_block = 1024;  // the unit of if_dqblk's space limits

long quotactl_on(int fd, int command, std::uint32_t id, void* data) {
    return syscall(SYS_quotactl_fd, fd, QCMD(command, PRJQUOTA), id, data);
}

ProjectUsage usage_of(const if_dqblk& q) {
    return ProjectUsage{q.dqb_curspace, q.dqb_curinodes, q.dqb_bhardlimit * quota_block};
}

}  // namespace

std::uint32_t buffer_project(const PoolConfig& pool, std::int64_t record_id) {
    const std::uint64_t id = std::uint64_t{pool.quota_project_base} +
                             static_cast<std::uint64_t>(record_id < 0 ? 0 : record_id);
    if (record_id <= 0 || id > max_project_id)
        throw Error(ExitCode::config,
                    "buffer record " + std::to_string(record_id) + " has no project id in pool '" +
                        pool.name + "': quota_project_base " +
                        std::to_string(pool.quota_project_base) + " leaves ids up to " +
                        std::to_string(max_project_id) + " (lower quota_project_base)");
    return static_cast<std::uint32_t>(id);
}

std::optional<std::int64_t> record_of_project(const PoolConfig& pool, std::uint32_t project) {
    if (project <= pool.quota_project_base || project > max_project_id)
        return std::nullopt;
    return static_cast<std::int64_t>(project - pool.quota_project_base);
}

std::string ProjectQuotas::why_not_enforced() const {
    fs_quota_statv state{};
    state.qs_version = FS_QSTATV_VERSION1;
    if (quotactl_on(fd_, Q_XGETQSTATV, 0, &state) != 0) {
        const int err = errno;
        if (err == ENOSYS || err == EOPNOTSUPP || err == ENOTTY)
            return "its file system has no quota support (" + std::string(std::strerror(err)) +
                   ": ext4 needs mkfs.ext4 -O quota,project and -o prjquota, XFS -o pquota, both "
                   "a kernel built with quota support)";
        return "cannot read its quota state: " + std::string(std::strerror(err));
    }
    if (!(state.qs_flags & FS_QUOTA_PDQ_ACCT))
        return "its file system does not account project quotas (ext4: mkfs.ext4 -O "
               "quota,project and mount -o prjquota; XFS: mount -o pquota)";
    if (!(state.qs_flags & FS_QUOTA_PDQ_ENFD))
        return "its file system accounts project quotas but does not enforce them (mount it with "
               "prjquota (ext4) or pquota (XFS))";
    return "";
}

ProjectUsage ProjectQuotas::usage(std::uint32_t project) const {
    if_dqblk q{};
    if (quotactl_on(fd_, Q_GETQUOTA, project, &q) != 0) {
        if (errno == ENOENT)  // XFS: no entry yet
            return ProjectUsage{};
        throw system_error(
            "cannot read the quota of project " + std::to_string(project) + " on " + what_, errno);
    }
    return usage_of(q);
}

void ProjectQuotas::set_limit(std::uint32_t project, std::uint64_t bytes) const {
    if_dqblk q{};
    q.dqb_bhardlimit = (bytes + quota_block - 1) / quota_block;
    q.dqb_bsoftlimit = 0;
    q.dqb_valid = QIF_BLIMITS;
    if (quotactl_on(fd_, Q_SETQUOTA, project, &q) != 0)
        throw system_error(
            "cannot set the quota of project " + std::to_string(project) + " on " + what_, errno);
}

void ProjectQuotas::remove_limits(std::uint32_t project) const {
    if_dqblk q{};
    q.dqb_valid = QIF_LIMITS;
    if (quotactl_on(fd_, Q_SETQUOTA, project, &q) != 0 && errno != ENOENT)
        throw system_error(
            "cannot remove the quota of project " + std::to_string(project) + " on " + what_,
            errno);
}

std::optional<std::pair<std::uint32_t, ProjectUsage>> ProjectQuotas::next(
    std::uint32_t from) const {
    if_nextdqblk q{};
    if (quotactl_on(fd_, Q_GETNEXTQUOTA, from, &q) != 0) {
        if (errno == ENOENT || errno == ESRCH)
            return std::nullopt;
        throw system_error("cannot list the project quotas on " + what_, errno);
    }
    if_dqblk one{};
    one.dqb_bhardlimit = q.dqb_bhardlimit;
    one.dqb_curspace = q.dqb_curspace;
    one.dqb_curinodes = q.dqb_curinodes;
    return std::make_pair(q.dqb_id, usage_of(one));
}

DirectoryProject directory_project(int fd, const std::string& what) {
    fsxattr attr{};
    if (ioctl(fd, FS_IOC_FSGETXATTR, &attr) != 0)
        throw system_error("cannot read the project of " + what, errno);
    return DirectoryProject{attr.fsx_projid, (attr.fsx_xflags & FS_XFLAG_PROJINHERIT) != 0};
}

void set_directory_project(int fd, std::uint32_t project, const std::string& what) {
    fsxattr attr{};
    if (ioctl(fd, FS_IOC_FSGETXATTR, &attr) != 0)
        throw system_error("cannot read the project of " + what, errno);
    if (attr.fsx_projid == project && (attr.fsx_xflags & FS_XFLAG_PROJINHERIT))
        return;
    attr.fsx_projid = project;
    attr.fsx_xflags |= FS_XFLAG_PROJINHERIT;
    if (ioctl(fd, FS_IOC_FSSETXATTR, &attr) != 0)
        throw system_error("cannot give " + what + " project " + std::to_string(project), errno);
}

PoolQuota probe_pool_quota(const PoolConfig& pool, int root_fd) {
    if (pool.quota == QuotaMode::none)
        return PoolQuota{};
    const std::string why = ProjectQuotas(root_fd, pool.path).why_not_enforced();
    return PoolQuota{why.empty(), why};
}

bool require_pool_quota(const PoolConfig& pool, const PoolQuota& quota) {
    if (pool.quota == QuotaMode::none || quota.enforced)
        return quota.enforced;
    if (pool.quota_missing == QuotaMissing::refuse)
        throw Error(ExitCode::unavailable,
                    "pool '" + pool.name + "' at " + pool.path +
                        " cannot limit its buffers: " + quota.why_not +
                        " (or set quota_missing = \"warn\" in bbkit.toml to run without limits)");
    spdlog::warn(
        "pool '{}' at {}: buffers get no project quota: {} (quota_missing = \"warn\": capacity is "
        "not enforced)",
        pool.name, pool.path, quota.why_not);
    return false;
}

std::optional<std::uint64_t> ProjectUsageReader::used_bytes(const Buffer& buffer) {
    const PoolConfig* pool = config_.find_pool(buffer.pool);
    if (!pool || pool->quota != QuotaMode::project || buffer.record_id <= 0)
        return std::nullopt;
    auto [it, fresh] = pools_.try_emplace(pool->name);
    Pool& p = it->second;
    if (fresh) {
        p.root.reset(open(pool->path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        p.readable = p.root && ProjectQuotas(p.root.get(), pool->path).why_not_enforced().empty();
    }
    if (!p.readable)
        return std::nullopt;
    try {
        return ProjectQuotas(p.root.get(), pool->path)
            .usage(buffer_project(*pool, buffer.record_id))
            .bytes;
    } catch (const Error&) {
        p.readable = false;  // not root: the next buffers of this pool are not tried
        return std::nullopt;
    }
}

}  // namespace bbkit
