#include "bbkit/health.hpp"

#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>

#include "bbkit/error.hpp"
#include "bbkit/mover_runner.hpp"
#include "bbkit/pool.hpp"
#include "bbkit/size.hpp"
#include "bbkit/trust.hpp"

namespace bbkit {

namespace {

// The file system under `path` is mounted writable; its size in bytes through `total`.
std::optional<std::string> file_system_problem(const std::string& path, std::uint64_t& total) {
    struct statvfs fs {};
    if (::statvfs(path.c_str(), &fs) != 0)
        return "statvfs " + printable(path) + ": " + std::strerror(errno);
    total = static_cast<std::uint64_t>(fs.f_blocks) * fs.f_frsize;
    if ((fs.f_flag & ST_RDONLY) != 0)
        return "the file system of " + printable(path) + " is mounted read-only";
    return std::nullopt;
}

std::vector<const PoolConfig*> pools_in_scope(const Config& config, const HealthScope& scope) {
    std::vector<const PoolConfig*> pools;
    if (!scope.pools.empty()) {
        for (const std::string& name : scope.pools)
            pools.push_back(&configured_pool(config, name));
        return pools;
    }
    for (const PoolConfig& pool : config.pools)
        if (!scope.node_local_only || pool.node_local)
            pools.push_back(&pool);
    if (pools.empty())
        throw Error(ExitCode::data, scope.node_local_only
                                        ? "the configuration has no node-local pool to check"
                                        : "the configuration has no pool to check");
    return pools;
}

void check_pool(ReadSnapshot& snapshot, const Config& config, const PoolConfig& pool,
                HealthReport& report) {
    const std::string subject = "pool " + pool.name;
    report.pools.push_back(pool.name);
    const std::optional<PoolRecord> record = snapshot.find_pool(pool.name);
    if (record && record->draining)
        report.draining.push_back(pool.name);
    try {
        // Initialised here, the marker of the recorded UUID in place, job/ and persistent/
        // root's and closed to others.
        open_pool(snapshot, config, pool.name);
    } catch (const Error& e) {
        report.faults.push_back({subject, e.what()});
        return;
    }
    std::uint64_t total = 0;
    if (const auto problem = file_system_problem(pool.path, total)) {
        report.faults.push_back({subject, *problem});
        return;
    }
    if (total < pool.capacity)
        report.faults.push_back({subject, "its file system holds " + format_size(total) +
                                              ", less than the pool's capacity " +
                                              format_size(pool.capacity) +
                                              " (another file system mounted there?)"});
}

}  // namespace

HealthReport check_health(StateStore& store, const Config& config, const HealthScope& scope) {
    HealthReport report;
    const std::vector<const PoolConfig*> pools = pools_in_scope(config, scope);
    {
        ReadSnapshot snapshot(store);
        for (const PoolConfig* pool : pools)
            check_pool(snapshot, config, *pool, report);
    }
    std::uint64_t total = 0;
    if (const auto problem = file_system_problem(config.state_dir, total))
        report.faults.push_back({"state directory", *problem});
    try {
        find_mover();
    } catch (const Error& e) {
        report.faults.push_back({"bb-mover", e.what()});
    }
    for (const std::string& file : scope.trusted_files) {
        try {
            check_root_controlled(file, "a node script");
        } catch (const Error& e) {
            report.faults.push_back({printable(file), e.what()});
        }
    }
    return report;
}

void require_healthy(const HealthReport& report) {
    if (report.healthy())
        return;
    const HealthFault& first = report.faults.front();
    throw Error(ExitCode::unavailable, "unhealthy: " + first.subject + ": " + first.problem);
}

}  // namespace bbkit
