#include "bbkit/accounting.hpp"

#include <algorithm>
#include <chrono>

#include "bbkit/access.hpp"
#include "bbkit/error.hpp"
#include "bbkit/time_spec.hpp"
#include "bbkit/user.hpp"

namespace bbkit {

namespace {

// Only root and the state owner read state.db; public/ keeps no history.
void require_reader(const Config& config, uid_t caller) {
    if (!privileged_viewer(config, caller))
        throw Error(ExitCode::no_perm,
                    "the history is read from state.db: run this as root or as the state "
                    "directory's owner (" +
                        config.state_owner + ")");
}

void add(StageTotals& sum, const StageTotals& part) {
    sum.runs += part.runs;
    sum.failed += part.failed;
    sum.files += part.files;
    sum.bytes += part.bytes;
    sum.seconds += part.seconds;
    sum.max_seconds = std::max(sum.max_seconds, part.max_seconds);
}

double seconds_between(TimePoint from, TimePoint to) {
    return std::chrono::duration<double>(to - from).count();
}

}  // namespace

void check_range(TimePoint since, TimePoint until) {
    if (until <= since)
        throw Error(ExitCode::usage, "the range ends (--until " + slurm_time(until) +
                                         ") before it starts (--since " + slurm_time(since) + ")");
}

double gib_hours(double byte_seconds) {
    return byte_seconds / (1024.0 * 1024.0 * 1024.0) / 3600.0;
}

AccountingReport query_accounting(const Config& config, uid_t caller,
                                  const AccountingQuery& query) {
    check_range(query.since, query.until);
    require_reader(config, caller);
    AccountingReport report;
    report.query = query;
    report.now = std::chrono::system_clock::now();
    StoreOptions read_only;
    read_only.read_only = true;
    read_only.no_mmap = true;
    StateStore store(config, read_only);
    ReadSnapshot txn(store);
    report.rows = txn.accounting(query, report.now);
    for (const AccountingRow& row : report.rows) {
        report.total.buffers += row.buffers;
        report.total.failed_buffers += row.failed_buffers;
        report.total.byte_seconds += row.byte_seconds;
        add(report.total.in, row.in);
        add(report.total.out, row.out);
    }
    return report;
}

std::string plotted_pool(const Config& config, const AccountingQuery& query) {
    if (query.pool)
        return *query.pool;
    if (config.pools.size() == 1)
        return config.pools.front().name;
    throw Error(ExitCode::usage, "--plot draws one pool: name it with --pool");
}

PoolUse query_pool_use(const Config& config, uid_t caller, const std::string& pool, TimePoint since,
                       TimePoint until, std::size_t slots) {
    check_range(since, until);
    const PoolConfig* configured = config.find_pool(pool);
    if (configured == nullptr)
        throw Error(ExitCode::no_input, "unknown pool '" + pool + "' (see bb-pool list)");
    require_reader(config, caller);
    PoolUse use;
    use.pool = pool;
    use.capacity = configured->capacity;
    use.since = since;
    use.until = until;
    slots = std::max<std::size_t>(slots, 1);
    const double width = seconds_between(since, until) / static_cast<double>(slots);
    // Byte-seconds per slot: a hold adds its part of the first and last slots it touches, and
    // its bytes per second to the slots between through a difference array (rate[i] holds the
    // change of the rate at slot i), so that a hold costs the same whatever its length.
    std::vector<double> held(slots, 0.0);
    std::vector<double> rate(slots + 1, 0.0);
    const auto slot_of = [&](double offset) {
        return std::min(slots - 1, static_cast<std::size_t>(std::max(0.0, offset / width)));
    };
    StoreOptions read_only;
    read_only.read_only = true;
    read_only.no_mmap = true;
    StateStore store(config, read_only);
    ReadSnapshot txn(store);
    txn.for_each_hold(pool, since, until, std::chrono::system_clock::now(),
                      [&](TimePoint from, TimePoint to, std::uint64_t bytes) {
                          const double begin = std::max(0.0, seconds_between(since, from));
                          const double end =
                              std::min(seconds_between(since, until), seconds_between(since, to));
                          if (end <= begin || bytes == 0)
                              return;
                          const auto b = static_cast<double>(bytes);
                          const std::size_t first = slot_of(begin);
                          const std::size_t last = slot_of(end);
                          if (first == last) {
                              held[first] += b * (end - begin);
                              return;
                          }
                          held[first] += b * (static_cast<double>(first + 1) * width - begin);
                          held[last] += b * (end - static_cast<double>(last) * width);
                          rate[first + 1] += b;
                          rate[last] -= b;
                      });
    use.mean_bytes.resize(slots);
    double running = 0;
    for (std::size_t i = 0; i < slots; ++i) {
        running += rate[i];
        use.mean_bytes[i] = (held[i] + running * width) / width;
        use.peak_bytes = std::max(use.peak_bytes, use.mean_bytes[i]);
    }
    return use;
}

}  // namespace bbkit
