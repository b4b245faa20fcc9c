// The history and accounting of buffers (bbkit(7), HISTORY AND ACCOUNTING): per user or pool,
// over a time range, the buffers held, the space held over time (GiB-hours), the stage runs
// with their bytes, files and times, and the failures; and a pool's use over time, for a plot.
// Read from state.db, so only by root and the state directory's owner.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bbkit/config.hpp"
#include "bbkit/store.hpp"

namespace bbkit {

struct AccountingReport {
    AccountingQuery query;
    TimePoint now{};
    std::vector<AccountingRow> rows;  // by name
    AccountingRow total;              // every row's sums ("" as its name)
};

// Error(usage) naming both times when the range [since, until) is empty: it ends before it
// starts.
void check_range(TimePoint since, TimePoint until);

// A GiB-hour: 2^30 bytes held for 3600 s.
double gib_hours(double byte_seconds);

// The accounting of `query` for `caller`: root and the state directory's owner read state.db
// (one read-only snapshot); anyone else is Error(no_perm) saying who may. A range that ends
// before it starts is Error(usage).
AccountingReport query_accounting(const Config& config, uid_t caller, const AccountingQuery& query);

// A pool's use over [since, until) in `slots` equal slots: each the mean bytes held in it (the
// space of the buffers held, weighted by the part of the slot they held it).
struct PoolUse {
    std::string pool;
    std::uint64_t capacity = 0;  // the pool's configured capacity
    TimePoint since{};
    TimePoint until{};
    std::vector<double> mean_bytes;  // one per slot
    double peak_bytes = 0;           // the highest slot's
};

// The pool a plot of `query` draws: its --pool, or the one pool configured; Error(usage) when
// neither says which.
std::string plotted_pool(const Config& config, const AccountingQuery& query);

// Error(no_input) for a pool not configured, Error(no_perm) as query_accounting. One pass over
// the holds that overlap the range, memory of the slots alone.
PoolUse query_pool_use(const Config& config, uid_t caller, const std::string& pool, TimePoint since,
                       TimePoint until, std::size_t slots);

}  // namespace bbkit
