#include "bbkit/recovery.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <set>

#include "bbkit/audit.hpp"
#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/job_environment.hpp"
#include "bbkit/pool.hpp"
#include "bbkit/project_quota.hpp"
#include "bbkit/publish.hpp"
#include "bbkit/record_seal.hpp"
#include "bbkit/run_lock.hpp"
#include "bbkit/size.hpp"
#include "bbkit/slurm_gres.hpp"
#include "bbkit/teardown.hpp"
#include "bbkit/text.hpp"
#include "bbkit/views.hpp"

namespace bbkit {
namespace {

// Teardown or destroy has begun: the directory may be in its pool's job/ or already in trash/.
bool is_ending(BufferState state) {
    return state == BufferState::teardown || state == BufferState::deleting ||
           state == BufferState::teardown_fail;
}

// Nobody works on this buffer any more: its run lock is free and its recorded holder is dead.
bool owner_dead(StateStore& store, const Buffer& b) {
    if (b.run_lock_holder && b.run_lock_holder->alive())
        return false;
    return !RunLock::holder(run_lock_scope(store), b.key);
}

// The record as it is now, if it is still what `seen` (read earlier, outside any write
// transaction) showed and nobody else works on it; otherwise someone moved it on meanwhile (a
// waiter got its space and finished, a stager ended, an alloc was retried) and it is not
// recover's to touch. A claim this process made itself counts as nobody's.
std::optional<Buffer> still_abandoned(Transaction& txn, StateStore& store, const Buffer& seen) {
    std::optional<Buffer> now = txn.find_buffer(seen.key);
    if (!now || now->state != seen.state)
        return std::nullopt;
    if (now->run_lock_holder && *now->run_lock_holder == ProcessId::self())
        return now;
    return owner_dead(store, *now) ? now : std::nullopt;
}

// Ends the record `seen` showed without touching its directory (there is none, or it is gone).
// False, and nothing changed, when the record moved on since (see still_abandoned).
bool close_record(StateStore& store, const Config& config, const Buffer& seen,
                  const std::string& why, const std::string& who) {
    WriteTransaction txn(store, who);
    const std::optional<Buffer> b = still_abandoned(txn, store, seen);
    if (!b)
        return false;
    const BufferKey& key = seen.key;
    if (b->state == BufferState::pending) {
        txn.dequeue(key);
    } else if (key.kind() == BufferKind::job && b->state != BufferState::teardown &&
               b->state != BufferState::allocating) {
        txn.transition(key, BufferState::teardown, "BurstBufferOperation", why);
    } else if (key.kind() == BufferKind::persistent && b->state == BufferState::allocated) {
        txn.transition(key, BufferState::deleting, "BurstBufferOperation", why);
    }
    txn.transition(key,
                   key.kind() == BufferKind::job ? BufferState::complete : BufferState::deleted,
                   "BurstBufferOperation", why);
    txn.mark_reaped(key);
    publish(txn, store, config);
    txn.commit();
    return true;
}

std::string recover_allocating(StateStore& store, const Config& config, const Buffer& b,
                               const std::string& who) {
    std::optional<PoolDir> dir;
    {
        // Claimed first, so an alloc retried meanwhile backs off ("being allocated by pid")
        // instead of making the directory while this decides there is none.
        WriteTransaction txn(store, who);
        std::optional<Buffer> now = still_abandoned(txn, store, b);
        if (!now)
            return "";
        dir.emplace(open_pool(txn, config, b.pool));
        now->run_lock_holder = ProcessId::self();
        txn.update_buffer(*now);
        txn.commit();
    }
    if (!dir->exists(b.directory)) {
        if (!close_record(store, config, b, "allocation interrupted before its directory existed",
                          who))
            return "";
        return b.key.str() + ": allocating -> rolled back (no directory)";
    }
    // Re-owned (the crash may have come first) and synced while the roll-forward works. A
    // directory this allocation cannot have made is left alone, for check to report.
    PendingSync durable;
    try {
        durable = dir->create_buffer_dir(b.directory, b.uid, b.gid, PoolDir::Creation::resume,
                                         buffer_limit(configured_pool(config, b.pool), *dir, b));
    } catch (const Error& e) {
        if (e.code() != ExitCode::exists)
            throw;
        if (!close_record(store, config, b, e.what(), who))
            return "";
        return b.key.str() + ": allocating -> rolled back (its directory is not its own)";
    }
    std::vector<std::pair<std::string, std::string>> uses;
    {
        ReadSnapshot snapshot(store);
        uses =
            resolve_persistent_uses(snapshot, config, b.uid, b.user, recorded_persistent_uses(b));
    }
    complete_allocation(store, config, b.key, uses, durable, who);
    return b.key.str() + ": allocating -> allocated (rolled forward)";
}

std::string mark_interrupted(StateStore& store, const Config& config, const Buffer& b,
                             const std::string& who) {
    const std::string message =
        std::string(b.state == BufferState::staging_in ? "stage-in" : "stage-out") +
        " interrupted: the stager died (run bb-stage again to resume)";
    if (b.message == message)
        return "";
    WriteTransaction txn(store, who);
    if (!still_abandoned(txn, store, b))
        return "";
    txn.transition(b.key, b.state, "BurstBufferOperation", message);
    Buffer updated = txn.get_buffer(b.key);
    updated.run_lock_holder.reset();
    updated.failure = std::string(to_string(b.state)) + ": " + message;
    updated.failed = std::chrono::system_clock::now();
    txn.update_buffer(updated);
    publish(txn, store, config);
    txn.commit();
    return b.key.str() + ": " + to_string(b.state) + " marked interrupted (data kept)";
}

std::string finish_ending(StateStore& store, const Config& config, const Buffer& b,
                          const std::string& who) {
    {
        // Claimed in one transaction, as a teardown claims it: a teardown or another recover
        // that started meanwhile keeps it (and is not stopped by this one).
        WriteTransaction txn(store, who);
        Buffer now = txn.get_buffer(b.key);
        if (now.state != b.state || (now.run_lock_holder && now.run_lock_holder->alive()))
            return "";
        if (b.state == BufferState::teardown_fail)
            now = txn.transition(b.key, BufferState::teardown, "", "retried by recover");
        now.run_lock_holder = ProcessId::self();
        txn.update_buffer(now);
        txn.commit();
    }
    TeardownOptions options;
    options.hurry = true;
    finish_teardown(store, config, b.key, options, who);
    return b.key.str() + ": " + to_string(b.state) + " -> finished";
}

}  // namespace

namespace {

// The names in `dir`'s env/ (standalone mode, bbkit(7) FILES) of this cluster's jobs that have
// no live buffer in `pool`: a teardown killed between its commit and the file's removal. Safe
// to remove under the state lock: a new incarnation's pre-run writes the file only while its
// buffer is live. Other clusters' names and the writer's temporaries (".NAME.tmp") are left.
std::vector<std::string> stale_environment_names(Transaction& txn, const Config& config,
                                                 const std::string& pool, const PoolDir& dir) {
    std::vector<std::string> stale;
    for (const std::string& name : dir.list_job_environments()) {
        const std::optional<std::uint64_t> job_id = environment_job_id(config.cluster, name);
        if (!job_id)
            continue;
        const std::optional<Buffer> b = txn.latest_job_buffer(config.cluster, *job_id);
        if (!b || is_final(b->state) || b->pool != pool)
            stale.push_back(name);
    }
    return stale;
}

// A project limit in a pool's range (bbkit(7), CAPACITY) that no buffer needs any more.
struct StaleLimit {
    std::uint32_t project = 0;
    std::string subject;  // the buffer's key, or "project N"
    std::string detail;
    bool removable = false;  // its record is final and its space released
};

// The limits on the pool's file system in its project range whose buffer is gone: a crash
// between the reap's commit and the limit's removal left them. A project whose id no record of
// this state directory holds is reported but never touched: it may be another's.
std::vector<StaleLimit> stale_limits(Transaction& txn, const PoolConfig& pool, const PoolDir& dir) {
    std::vector<StaleLimit> stale;
    if (pool.quota == QuotaMode::none || !dir.quota().enforced)
        return stale;
    const ProjectQuotas quotas = dir.project_quotas();
    std::uint32_t from = pool.quota_project_base + 1;
    while (const auto entry = quotas.next(from)) {
        const auto [project, usage] = *entry;
        const std::optional<std::int64_t> record = record_of_project(pool, project);
        if (!record)
            break;  // past the range
        if (usage.byte_limit != 0) {
            const std::optional<Buffer> b = txn.find_buffer_by_record(*record);
            const std::string id = "project " + std::to_string(project);
            if (!b)
                stale.push_back({project, id,
                                 id + " on " + dir.path() + " has a limit of " +
                                     format_size(usage.byte_limit) + " but record " +
                                     std::to_string(*record) +
                                     " does not exist (another state directory's? remove the "
                                     "limit by hand if not)",
                                 false});
            else if (is_final(b->state) && b->reaped)
                stale.push_back({project, b->key.str(),
                                 id + " on " + dir.path() + " still has the limit of buffer " +
                                     b->key.str() + ", which is gone",
                                 true});
        }
        if (project == max_project_id)
            break;
        from = project + 1;
    }
    return stale;
}

// Removes the limits stale_limits finds removable; one action line each.
void remove_stale_limits(StateStore& store, const Config& config,
                         std::vector<std::string>& actions) {
    ReadSnapshot snapshot(store);
    for (const PoolConfig& pool : config.pools) {
        if (pool.quota == QuotaMode::none)
            continue;
        try {
            PoolDir dir = open_pool(snapshot, config, pool.name);
            for (const StaleLimit& limit : stale_limits(snapshot, pool, dir))
                if (limit.removable) {
                    dir.project_quotas().remove_limits(limit.project);
                    actions.push_back(limit.subject + ": project " + std::to_string(limit.project) +
                                      "'s limit removed in pool " + pool.name +
                                      " (its buffer is gone)");
                }
        } catch (const Error& e) {
            if (e.code() != ExitCode::unavailable)  // an unmounted pool: check reports it
                actions.push_back("pool " + pool.name +
                                  ": project limits not checked: " + e.what());
        }
    }
}

}  // namespace

std::vector<std::string> recover(StateStore& store, const Config& config,
                                 std::chrono::milliseconds reap_budget, const std::string& who) {
    std::vector<std::string> actions;
    std::vector<Buffer> live;
    {
        ReadSnapshot snapshot(store);
        BufferFilter filter;
        filter.live_only = true;
        live = snapshot.list_buffers(filter);
        for (const Buffer& b : snapshot.forged_records())
            spdlog::warn("{}", forged_record_error(b.key.str()).what());
    }
    fault_point("recover.listed");
    for (const Buffer& b : live) {
        if (!owner_dead(store, b))
            continue;
        try {
            std::string action;
            switch (b.state) {
                case BufferState::pending:
                    if (close_record(store, config, b, "the waiting process died", who))
                        action = b.key.str() + ": pending -> dropped from the queue (waiter died)";
                    break;
                case BufferState::allocating:
                    action = recover_allocating(store, config, b, who);
                    break;
                case BufferState::staging_in:
                case BufferState::staging_out:
                    action = mark_interrupted(store, config, b, who);
                    break;
                case BufferState::teardown:
                case BufferState::teardown_fail:
                case BufferState::deleting:
                    action = finish_ending(store, config, b, who);
                    break;
                default:
                    break;
            }
            if (!action.empty()) {
                actions.push_back(action);
                fault_point("recover.action");
            }
        } catch (const Error& e) {
            actions.push_back(b.key.str() + ": not recovered: " + e.what());
        }
    }
    {
        WriteTransaction txn(store, who);
        for (const QueueEntry& dropped : txn.drop_dead_waiters())
            actions.push_back(dropped.key + ": dead waiter pid " +
                              std::to_string(dropped.waiter.pid) + " left the queue");
        publish(txn, store, config);
        txn.commit();
    }
    fault_point("recover.queue");
    // Env files and public/ are written without fsync: rebuild them from the records.
    {
        ReadSnapshot snapshot(store);
        BufferFilter filter;
        filter.live_only = true;
        for (const Buffer& b : snapshot.list_buffers(filter)) {
            if (b.key.kind() != BufferKind::job || b.state == BufferState::pending ||
                b.state == BufferState::allocating || !holds_space(b.state))
                continue;
            try {
                const std::string text =
                    job_environment(b, configured_pool(config, b.pool).path + "/" + b.directory,
                                    resolve_persistent_uses(snapshot, config, b.uid, b.user,
                                                            recorded_persistent_uses(b)));
                if (read_env_file(buffer_environment_path(store.dir(), b.key)) != text ||
                    read_env_file(job_environment_path(store.dir(), b.key.cluster, b.key.job_id)) !=
                        text) {
                    write_env_files(store, b.key, text);
                    actions.push_back(b.key.str() + ": env file rewritten");
                }
            } catch (const Error& e) {
                actions.push_back(b.key.str() + ": env file not rewritten: " + e.what());
            }
        }
    }
    {
        WriteTransaction txn(store, who);
        publish_all(txn, store, config);
        txn.commit();
    }
    fault_point("recover.published");
    {
        WriteTransaction txn(store, who);
        for (const PoolConfig& pool : config.pools) {
            try {
                PoolDir dir = open_pool(txn, config, pool.name);
                for (const std::string& name :
                     stale_environment_names(txn, config, pool.name, dir)) {
                    dir.remove_job_environment(name);
                    actions.push_back(dir.path() + "/env/" + name +
                                      ": removed (its job has no live buffer in pool " + pool.name +
                                      ")");
                }
            } catch (const Error&) {
                // An unavailable pool or a tampered env/: check reports it.
            }
        }
        txn.commit();
    }
    const ReapResult reaped = reap(store, config, reap_budget, who);
    if (reaped.reaped)
        actions.push_back("reaped " + std::to_string(reaped.reaped) + " buffer(s), released " +
                          format_size(reaped.bytes_released));
    if (reaped.remaining)
        actions.push_back(std::to_string(reaped.remaining) +
                          " buffer(s) still in trash (run bb-pool reap)");
    remove_stale_limits(store, config, actions);
    if (!actions.empty())
        audit(config.state_dir, who, "recover", std::to_string(actions.size()) + " action(s)");
    return actions;
}

const char* to_string(FindingKind kind) {
    switch (kind) {
        case FindingKind::orphan_directory:
            return "orphan-directory";
        case FindingKind::missing_directory:
            return "missing-directory";
        case FindingKind::orphan_trash:
            return "orphan-trash";
        case FindingKind::reaped_unrecorded:
            return "reaped-unrecorded";
        case FindingKind::interrupted:
            return "interrupted";
        case FindingKind::stalled_stage:
            return "stalled-stage";
        case FindingKind::over_commit:
            return "over-commit";
        case FindingKind::expired_persistent:
            return "expired-persistent";
        case FindingKind::stale_queue:
            return "stale-queue";
        case FindingKind::pool_unavailable:
            return "pool-unavailable";
        case FindingKind::usage_mismatch:
            return "usage-mismatch";
        case FindingKind::kept_entry:
            return "kept-entry";
        case FindingKind::stale_environment:
            return "stale-environment";
        case FindingKind::forged_record:
            return "forged-record";
        case FindingKind::over_capacity:
            return "over-capacity";
        case FindingKind::stale_quota:
            return "stale-quota";
        case FindingKind::unlimited_buffer:
            return "unlimited-buffer";
        case FindingKind::foreign_schema:
            return "foreign-schema";
        case FindingKind::gres_count:
            return "gres-count";
    }
    return "unknown";
}

namespace {

// Check reads one snapshot, then looks at processes and directories; an operation that ended in
// between (a teardown finished, a waiter got its space) would be reported once though all is
// well. A finding about a record is confirmed against a fresh read: the record must still be as
// the snapshot showed it.
bool record_unchanged(StateStore& store, const Buffer& seen) {
    ReadSnapshot fresh(store);
    const std::optional<Buffer> now = fresh.find_buffer(seen.key);
    return now && now->state == seen.state && now->reaped == seen.reaped &&
           now->run_lock_holder == seen.run_lock_holder;
}

bool still_queued(StateStore& store, const QueueEntry& seen) {
    ReadSnapshot fresh(store);
    for (const QueueEntry& entry : fresh.queue(seen.pool))
        if (entry.seq == seen.seq && entry.waiter == seen.waiter)
            return true;
    return false;
}

// One run of check: where it looks, whether it repairs, and who it says did.
struct CheckRun {
    StateStore& store;
    const Config& config;
    bool repair;
    const std::string& who;
};

// What check compares, read from one snapshot, with each pool's directory opened from it.
struct Survey {
    std::vector<Buffer> live, trashed;
    std::map<std::string, std::optional<PoolDir>> dirs;  // empty: the pool did not open
    std::map<std::string, std::string> unopened;         // pool -> why it did not open
    std::vector<PoolStatus> pools;
    std::map<std::string, std::uint64_t> summed;  // pool -> used bytes summed from the rows
    std::vector<QueueEntry> queued;
};

Survey survey(StateStore& store, const Config& config) {
    Survey s;
    ReadSnapshot snapshot(store);
    BufferFilter filter;
    filter.live_only = true;
    s.live = snapshot.list_buffers(filter);
    filter = BufferFilter{};
    filter.in_trash_only = true;
    s.trashed = snapshot.list_buffers(filter);
    s.pools = pool_status(snapshot, config);
    for (const PoolConfig& pool : config.pools) {
        s.summed[pool.name] = snapshot.summed_used_bytes(pool.name);
        try {
            s.dirs[pool.name].emplace(open_pool(snapshot, config, pool.name));
        } catch (const Error& e) {
            s.dirs[pool.name];
            s.unopened[pool.name] = e.what();
        }
        for (const QueueEntry& entry : snapshot.queue(pool.name))
            s.queued.push_back(entry);
    }
    return s;
}

using Findings = std::vector<Finding>;

// repair runs recover first: each of its actions is an interrupted operation finished or undone.
void recovered(const CheckRun& run, Findings& findings) {
    for (const std::string& action :
         recover(run.store, run.config, std::chrono::seconds(5), run.who))
        findings.push_back({FindingKind::interrupted, "", action, "", true});
}

// A pool whose directory did not open (not mounted, another file system's marker).
void pool_unavailable(const CheckRun& run, const Survey& s, Findings& findings) {
    for (const PoolConfig& pool : run.config.pools)
        if (const auto it = s.unopened.find(pool.name); it != s.unopened.end())
            findings.push_back(
                {FindingKind::pool_unavailable, pool.name, pool.path, it->second, false});
}

// pool_usage's running total against the sum over the buffers' rows; repair recomputes it.
// Either way the over-commit check after it goes by the rows.
void usage_mismatch(const CheckRun& run, Survey& s, Findings& findings) {
    for (PoolStatus& pool : s.pools) {
        const std::uint64_t rows = s.summed[pool.name];
        if (pool.used == rows)
            continue;
        Finding f{FindingKind::usage_mismatch, pool.name, pool.name,
                  "pool_usage holds " + std::to_string(pool.used) + " bytes but the buffers hold " +
                      std::to_string(rows),
                  false};
        if (run.repair) {
            WriteTransaction txn(run.store, run.who);
            txn.recompute_used_bytes(pool.name);
            publish(txn, run.store, run.config);
            txn.commit();
            audit(run.config.state_dir, run.who, "repair",
                  "pool=" + pool.name + " used bytes recomputed: " + std::to_string(rows));
            f.repaired = true;
        }
        findings.push_back(f);
        pool.used = rows;
    }
}

// More held than the pool has: used and trash together beyond its capacity.
void over_commit(const Survey& s, Findings& findings) {
    for (const PoolStatus& pool : s.pools)
        if (pool.used + pool.trash > pool.total)
            findings.push_back({FindingKind::over_commit, pool.name, pool.name,
                                "used " + format_size(pool.used) + " + trash " +
                                    format_size(pool.trash) + " exceeds " + format_size(pool.total),
                                false});
}

// A queued request whose waiting process is gone; repair drops it at the end (see
// drop_stale_queue).
void stale_queue(const CheckRun& run, const Survey& s, Findings& findings) {
    for (const QueueEntry& entry : s.queued)
        if (!entry.waiter.alive() && still_queued(run.store, entry))
            findings.push_back({FindingKind::stale_queue, entry.pool, entry.key,
                                "waiter pid " + std::to_string(entry.waiter.pid) + " is gone",
                                false});
}

// A persistent buffer past its expiry, which only its owner's destroy ends.
std::optional<Finding> expired_persistent(const Buffer& b, TimePoint now) {
    if (b.key.kind() != BufferKind::persistent || !b.expires || *b.expires >= now)
        return std::nullopt;
    return Finding{FindingKind::expired_persistent, b.pool, b.key.str(),
                   "expired; destroy it with bb-teardown --persistent " + b.key.name, false};
}

// An allocation or a teardown whose process died; recover finishes or undoes it.
std::optional<Finding> interrupted(const CheckRun& run, const Buffer& b, bool in_flight) {
    if (in_flight || (b.state != BufferState::allocating && !is_ending(b.state)) ||
        !record_unchanged(run.store, b))
        return std::nullopt;
    return Finding{FindingKind::interrupted, b.pool, b.key.str(),
                   std::string(to_string(b.state)) + " with no live owner (run bb-pool recover)",
                   false};
}

// A stage nobody runs: its data waits for an operator (bb-stage again, or bb-teardown); repair
// leaves it, recover only records why when the stager died without a word.
std::optional<Finding> stalled_stage(const CheckRun& run, const Buffer& b) {
    const std::string text = stalled_stage_text(b);
    if (text.empty() || !record_unchanged(run.store, b))
        return std::nullopt;
    return Finding{FindingKind::stalled_stage, b.pool, b.key.str(), text, false};
}

// A settled buffer whose directory is gone; repair closes its record.
std::optional<Finding> missing_directory(const CheckRun& run, const Buffer& b, const PoolDir& dir) {
    if (dir.exists(b.directory))
        return std::nullopt;
    Finding f{FindingKind::missing_directory, b.pool, b.key.str(),
              dir.path() + "/" + b.directory + " is gone", false};
    if (!run.repair)
        return record_unchanged(run.store, b) ? std::optional<Finding>(f) : std::nullopt;
    if (!close_record(run.store, run.config, b, "repair: its directory was gone", run.who))
        return std::nullopt;  // a teardown moved it meanwhile
    fault_point("repair.closed");
    audit(run.config.state_dir, run.who, "repair",
          "closed buffer=" + b.key.str() + " (directory missing)");
    f.repaired = true;
    return f;
}

// The live buffers' findings, buffer by buffer in record order: expired-persistent, interrupted,
// stalled-stage, missing-directory.
void live_buffers(const CheckRun& run, Survey& s, TimePoint now, Findings& findings) {
    for (const Buffer& b : s.live) {
        if (b.state == BufferState::pending)
            continue;
        const bool in_flight = !owner_dead(run.store, b);
        if (std::optional<Finding> f = expired_persistent(b, now))
            findings.push_back(*f);
        if (std::optional<Finding> f = interrupted(run, b, in_flight))
            findings.push_back(*f);
        if (std::optional<Finding> f = stalled_stage(run, b))
            findings.push_back(*f);
        const std::optional<PoolDir>& dir = s.dirs[b.pool];
        if (!dir || in_flight || b.state == BufferState::allocating || is_ending(b.state))
            continue;
        if (std::optional<Finding> f = missing_directory(run, b, *dir))
            findings.push_back(*f);
    }
}

// How much of the buffers' files one check may count, all buffers together (bbkit(7),
// CAPACITY): the rest is left unmeasured, and said so in the log.
constexpr std::uint64_t measure_entries = 2000000;
constexpr auto measure_time = std::chrono::seconds(20);

// Whether a buffer's directory settled: made and not being moved away. A session of 0 bytes
// (datawarp mode) holds nothing of its own to measure.
bool settled(const Buffer& b) {
    return b.state != BufferState::pending && b.state != BufferState::allocating &&
           !is_ending(b.state) && !b.directory.empty() && !is_session_only(b);
}

// A buffer whose files take more than its capacity: its project's usage where the pool enforces
// project quotas (above the limit only when the limit came late or root wrote), else, and for
// files moved out of the project by their owner (bbkit(7), SECURITY), a bounded count of its
// directory that stops as soon as it is over. Report only: the data is the job's.
void over_capacity(const CheckRun& run, Survey& s, Findings& findings) {
    MeasureBudget budget{measure_entries, std::chrono::steady_clock::now() + measure_time};
    std::size_t unmeasured = 0;
    for (const Buffer& b : s.live) {
        const std::optional<PoolDir>& dir = s.dirs[b.pool];
        const PoolConfig* pool = run.config.find_pool(b.pool);
        if (!dir || !pool || !settled(b))
            continue;
        try {
            const bool quota = pool->quota == QuotaMode::project && dir->quota().enforced;
            std::string detail;
            if (quota) {
                const ProjectUsage used =
                    dir->project_quotas().usage(buffer_project(*pool, b.record_id));
                if (used.bytes > b.allocated_bytes)
                    detail = "its project " + std::to_string(buffer_project(*pool, b.record_id)) +
                             " holds " + std::to_string(used.bytes) + " bytes, over its " +
                             format_size(b.allocated_bytes);
            }
            if (detail.empty()) {
                const DirectoryUsage used = dir->measure(b.directory, b.allocated_bytes, budget);
                if (used.over)
                    detail = dir->path() + "/" + b.directory + " holds more than its " +
                             format_size(b.allocated_bytes) + " (" + std::to_string(used.bytes) +
                             " bytes counted before stopping)" +
                             (quota ? ": files moved out of its project by their owner" : "");
                else if (!used.complete)
                    ++unmeasured;
            }
            if (!detail.empty() && record_unchanged(run.store, b))
                findings.push_back(
                    {FindingKind::over_capacity, b.pool, b.key.str(), detail, false});
        } catch (const Error& e) {
            spdlog::info("buffer {}: usage not measured: {}", b.key.str(), e.what());
            ++unmeasured;
        }
    }
    if (unmeasured)
        spdlog::info("{} buffer(s) not measured completely (the count's bound: {} entries, {} s)",
                     unmeasured, measure_entries, measure_time.count());
}

// A buffer of a pool that enforces project quotas whose directory lacks its project or limit:
// made before quota = "project" was set, or while the file system ran without (quota_missing =
// "warn"), or changed by its owner. Nothing limits it; repair leaves it (files already in it
// keep their project: only a new buffer is limited).
void unlimited_buffer(const CheckRun& run, Survey& s, Findings& findings) {
    for (const Buffer& b : s.live) {
        const std::optional<PoolDir>& dir = s.dirs[b.pool];
        const PoolConfig* pool = run.config.find_pool(b.pool);
        if (!dir || !pool || pool->quota == QuotaMode::none || !dir->quota().enforced ||
            !settled(b))
            continue;
        try {
            const std::uint32_t project = buffer_project(*pool, b.record_id);
            const DirectoryProject has = dir->project_of(b.directory);
            const ProjectUsage limit = dir->project_quotas().usage(project);
            std::string why;
            if (has.project != project || !has.inherited)
                why = "its directory is in project " + std::to_string(has.project) +
                      (has.inherited ? "" : " without inheritance") + ", not " +
                      std::to_string(project);
            else if (limit.byte_limit == 0)
                why = "project " + std::to_string(project) + " has no limit";
            if (!why.empty() && record_unchanged(run.store, b))
                findings.push_back({FindingKind::unlimited_buffer, b.pool, b.key.str(),
                                    why + ": nothing limits what it holds", false});
        } catch (const Error& e) {
            if (dir->exists(b.directory))
                findings.push_back({FindingKind::unlimited_buffer, b.pool, b.key.str(),
                                    std::string("cannot read its project: ") + e.what(), false});
        }
    }
}

// Limits left for buffers that are gone (stale_limits); repair removes them (as recover does,
// which repair runs first).
void stale_quota(const CheckRun& run, Survey& s, Findings& findings) {
    ReadSnapshot fresh(run.store);
    for (const PoolConfig& pool : run.config.pools) {
        const std::optional<PoolDir>& dir = s.dirs[pool.name];
        if (!dir)
            continue;
        try {
            for (const StaleLimit& limit : stale_limits(fresh, pool, *dir)) {
                Finding f{FindingKind::stale_quota, pool.name, limit.subject, limit.detail, false};
                if (run.repair && limit.removable) {
                    dir->project_quotas().remove_limits(limit.project);
                    audit(run.config.state_dir, run.who, "repair",
                          "removed the limit of project " + std::to_string(limit.project) +
                              " pool=" + pool.name);
                    f.repaired = true;
                }
                findings.push_back(f);
            }
        } catch (const Error& e) {
            findings.push_back({FindingKind::stale_quota, pool.name, pool.path, e.what(), false});
        }
    }
}

// A buffer in trash whose entry is gone while its space is still charged; repair records the
// reap.
void reaped_unrecorded(const CheckRun& run, Survey& s, Findings& findings) {
    for (const Buffer& b : s.trashed) {
        const std::optional<PoolDir>& dir = s.dirs[b.pool];
        if (!dir || dir->exists("trash/" + trash_name(b)))
            continue;
        Finding f{FindingKind::reaped_unrecorded, b.pool, b.key.str(),
                  "its trash entry is gone but the space is still charged", false};
        if (!record_unchanged(run.store, b))
            continue;  // a reap finished meanwhile
        if (run.repair) {
            WriteTransaction txn(run.store, run.who);
            txn.mark_reaped(b.key);
            publish(txn, run.store, run.config);
            txn.commit();
            f.repaired = true;
        }
        findings.push_back(f);
    }
}

// What teardown kept aside rather than delete as root waits for an administrator; repair
// never deletes, so it stays a finding until someone removes it by hand.
void kept_entry(const CheckRun& run, Survey& s, Findings& findings) {
    for (auto& [pool, dir] : s.dirs) {
        if (!dir)
            continue;
        for (const std::string& name : dir->list("quarantine"))
            if (name.find(".kept.") != std::string::npos &&
                cluster_of_entry("quarantine", name, run.config.cluster) == run.config.cluster)
                findings.push_back({FindingKind::kept_entry, pool, "quarantine/" + name,
                                    dir->path() + "/quarantine/" + name +
                                        " is another user's directory that a teardown did not "
                                        "delete as root (see the audit log; remove it by hand)",
                                    false});
    }
}

// An entry of a pool's job/, persistent/ or trash/ that may belong to no record.
struct Candidate {
    std::string pool, subdir, name;
};

std::vector<Candidate> orphan_candidates(const Config& config, Survey& s) {
    std::vector<Candidate> candidates;
    for (auto& [pool, dir] : s.dirs) {
        if (!dir)
            continue;
        // Another cluster's entries (a pool shared by clusters) are that cluster's to judge:
        // this state directory cannot know its records.
        for (const std::string subdir : {"job", "persistent", "trash"})
            for (const std::string& name : dir->list(subdir)) {
                const std::optional<std::string> cluster =
                    cluster_of_entry(subdir, name, config.cluster);
                if (!cluster || *cluster == config.cluster)
                    candidates.push_back({pool, subdir, name});
            }
    }
    return candidates;
}

// The entries the records account for, per pool: "job/main.42.1" and the like, and trash names.
struct Expected {
    std::map<std::string, std::set<std::string>> dirs, trash;
};

Expected expected_entries(Transaction& txn) {
    Expected expected;
    BufferFilter filter;
    filter.live_only = true;
    for (const Buffer& b : txn.list_buffers(filter)) {
        expected.dirs[b.pool].insert(b.directory);
        // A teardown renames the directory into trash/ before it commits the end: between
        // the two the entry belongs to a live record, and repair must not take it away.
        if (is_ending(b.state))
            expected.trash[b.pool].insert(trash_name(b));
    }
    filter = BufferFilter{};
    filter.in_trash_only = true;
    for (const Buffer& b : txn.list_buffers(filter))
        expected.trash[b.pool].insert(trash_name(b));
    // What a forged record names is left where it is, whatever it names (bbkit(7), SECURITY).
    for (const Buffer& b : txn.forged_records()) {
        expected.dirs[b.pool].insert(b.directory);
        expected.trash[b.pool].insert(trash_name(b));
    }
    return expected;
}

// An orphan candidate still there (listed before the fresh read: a teardown or reap may have
// moved it away since); repair quarantines it as <subdir>.<name>.<stamp>.
std::optional<Finding> orphan(const CheckRun& run, PoolDir& dir, const Candidate& c,
                              FindingKind kind, const std::string& stamp) {
    const std::string relative = c.subdir + "/" + c.name;
    if (!dir.exists(relative))
        return std::nullopt;
    Finding f{kind, c.pool, relative, dir.path() + "/" + relative + " has no record", false};
    if (run.repair) {
        const std::string aside = c.subdir + "." + c.name + "." + stamp;
        dir.quarantine(relative, aside);
        audit(run.config.state_dir, run.who, "repair",
              "quarantined " + dir.path() + "/" + relative + " as quarantine/" + aside);
        f.repaired = true;
        f.detail += " (moved to quarantine/" + aside + ")";
    }
    return f;
}

const std::set<std::string>& expected_in(const std::map<std::string, std::set<std::string>>& map,
                                         const std::string& pool) {
    static const std::set<std::string> none;
    const auto it = map.find(pool);
    return it == map.end() ? none : it->second;
}

// A directory in job/ or persistent/ that no live record names.
std::optional<Finding> orphan_directory(const CheckRun& run, PoolDir& dir, const Candidate& c,
                                        const Expected& expected, const std::string& stamp) {
    if (expected_in(expected.dirs, c.pool).count(c.subdir + "/" + c.name))
        return std::nullopt;
    return orphan(run, dir, c, FindingKind::orphan_directory, stamp);
}

// An entry in trash/ that is neither a recorded trash entry nor a piece of one.
std::optional<Finding> orphan_trash(const CheckRun& run, PoolDir& dir, const Candidate& c,
                                    const Expected& expected, const std::string& stamp) {
    for (const std::string& t : expected_in(expected.trash, c.pool))
        if (c.name == t || starts_with(c.name, t + ".piece"))
            return std::nullopt;
    return orphan(run, dir, c, FindingKind::orphan_trash, stamp);
}

// The fresh read a finding is confirmed against: under the state lock when repairing (what
// it repairs must not change meanwhile, and done() commits), else a plain snapshot.
class ConfirmingRead {
  public:
    explicit ConfirmingRead(const CheckRun& run) {
        if (run.repair)
            lock_.emplace(run.store, run.who);
        else
            fresh_.emplace(run.store);
    }
    Transaction& txn() {
        return lock_ ? static_cast<Transaction&>(*lock_) : static_cast<Transaction&>(*fresh_);
    }
    void done() {
        if (lock_)
            lock_->commit();
    }

  private:
    std::optional<WriteTransaction> lock_;
    std::optional<ReadSnapshot> fresh_;
};

// The candidates, in listing order, confirmed against a fresh read: under the state lock when
// repairing, because an alloc commits its record before it creates the directory.
void orphans(const CheckRun& run, Survey& s, const std::vector<Candidate>& candidates,
             TimePoint now, Findings& findings) {
    ConfirmingRead read(run);
    Transaction& txn = read.txn();
    const Expected expected = expected_entries(txn);
    const std::string stamp = std::to_string(
        std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count());
    for (const Candidate& c : candidates) {
        PoolDir& dir = *s.dirs[c.pool];
        const std::optional<Finding> f = c.subdir == "trash"
                                             ? orphan_trash(run, dir, c, expected, stamp)
                                             : orphan_directory(run, dir, c, expected, stamp);
        if (f)
            findings.push_back(*f);
    }
    read.done();
}

// A job's environment file that stale_environment_names finds (recover removes them, so this
// sees one only when recover has not run since), confirmed under the state lock when
// repairing, which removes it.
void stale_environment(const CheckRun& run, Survey& s, Findings& findings) {
    ConfirmingRead read(run);
    Transaction& txn = read.txn();
    for (auto& [pool, dir] : s.dirs) {
        if (!dir)
            continue;
        std::vector<std::string> names;
        try {
            names = stale_environment_names(txn, run.config, pool, *dir);
        } catch (const Error& e) {
            findings.push_back({FindingKind::stale_environment, pool, "env", e.what(), false});
            continue;
        }
        for (const std::string& name : names) {
            const std::string path = dir->path() + "/env/" + name;
            Finding f{FindingKind::stale_environment, pool, "env/" + name,
                      path + " belongs to no live buffer of its job in this pool", false};
            if (run.repair) {
                dir->remove_job_environment(name);
                audit(run.config.state_dir, run.who, "repair", "removed " + path);
                f.repaired = true;
                f.detail += " (removed)";
            }
            findings.push_back(f);
        }
    }
    read.done();
}

// Records root did not write: reported, never repaired (an administrator restores state.db
// or removes the row; bbkit(7), SECURITY).
void forged_records(const CheckRun& run, Findings& findings) {
    ReadSnapshot snapshot(run.store);
    for (const Buffer& b : snapshot.forged_records())
        findings.push_back({FindingKind::forged_record, b.pool, b.key.str(),
                            "its record in state.db does not carry root's seal (changed outside "
                            "bbkit): root leaves it and what it names alone",
                            false});
}

// Repair of the stale-queue findings, last: the waiters still dead are dropped at once.
void drop_stale_queue(const CheckRun& run, Findings& findings) {
    const auto stale = [](const Finding& f) { return f.kind == FindingKind::stale_queue; };
    if (std::none_of(findings.begin(), findings.end(), stale))
        return;
    WriteTransaction txn(run.store, run.who);
    txn.drop_dead_waiters();
    publish(txn, run.store, run.config);
    txn.commit();
    for (Finding& f : findings)
        if (stale(f))
            f.repaired = true;
}

// The foreign-schema findings of a store opened with tolerate_foreign_schema and, with
// `repair`, the rebuild that answers them: the pools root's configuration names (with the uuid
// of the marker each has now), and every record that carries root's seal.
std::vector<Finding> foreign_schema_findings(StateStore& store, const Config& config, bool repair,
                                             const std::string& who) {
    std::vector<Finding> findings;
    for (const std::string& line : store.foreign_schema())
        findings.push_back({FindingKind::foreign_schema, "", "state.db", line, false});
    if (!repair)
        return findings;
    std::vector<PoolRecord> pools;
    for (const PoolConfig& pool : config.pools) {
        try {
            pools.push_back(
                {pool.name, pool.path, PoolDir::open(pool, std::nullopt).marker().uuid, false});
        } catch (const Error& e) {
            spdlog::warn(
                "pool {} is not registered in the rebuilt state.db: {} (run bb-pool init "
                "{} once it is back)",
                pool.name, e.what(), pool.name);
        }
    }
    const RebuildResult rebuilt = store.rebuild_from_sealed_records(pools, who);
    const std::string detail =
        "state.db rebuilt from " + std::to_string(rebuilt.carried) + " sealed record(s), " +
        std::to_string(rebuilt.left_out) + " row(s) without root's seal left out" +
        (rebuilt.unreadable.empty() ? "" : " (no row could be read: " + rebuilt.unreadable + ")") +
        "; the old file is " + rebuilt.kept_as + "; pools are registered again undrained";
    audit(store.dir(), who, "rebuild", detail);
    for (Finding& f : findings)
        f.repaired = true;
    findings.push_back({FindingKind::foreign_schema, "", "state.db", detail, true});
    return findings;
}

}  // namespace

std::vector<Finding> check(StateStore& store, const Config& config, bool repair,
                           const std::string& who) {
    if (!store.foreign_schema().empty()) {
        std::vector<Finding> findings = foreign_schema_findings(store, config, repair, who);
        if (!repair)
            return findings;
        StateStore rebuilt(config);
        for (Finding& f : check(rebuilt, config, repair, who))
            findings.push_back(std::move(f));
        return findings;
    }
    const CheckRun run{store, config, repair, who};
    Findings findings;
    if (repair)
        recovered(run, findings);
    Survey s = survey(store, config);
    fault_point("check.listed");
    const auto now = std::chrono::system_clock::now();
    pool_unavailable(run, s, findings);
    usage_mismatch(run, s, findings);
    over_commit(s, findings);
    stale_queue(run, s, findings);
    live_buffers(run, s, now, findings);
    over_capacity(run, s, findings);
    unlimited_buffer(run, s, findings);
    stale_quota(run, s, findings);
    reaped_unrecorded(run, s, findings);
    const std::vector<Candidate> candidates = orphan_candidates(config, s);
    kept_entry(run, s, findings);
    orphans(run, s, candidates, now, findings);
    stale_environment(run, s, findings);
    forged_records(run, findings);
    if (repair)
        drop_stale_queue(run, findings);
    return findings;
}

std::vector<Finding> gres_count_findings(StateStore& store, const Config& config,
                                         const std::optional<std::string>& slurm_jobs,
                                         const std::optional<std::string>& node_gres) {
    if (!slurm_jobs && !node_gres)
        return {};
    if (!slurm_jobs || !node_gres)
        throw Error(ExitCode::usage, "give --slurm-jobs and --slurm-node-gres together");
    const std::set<std::uint64_t> live_jobs = parse_job_ids(*slurm_jobs);
    parse_node_gres(*node_gres);  // refused before anything else is done
    if (!store.foreign_schema().empty())
        return {};  // its foreign-schema findings say what to do first
    StatusSnapshot snapshot;
    {
        ReadSnapshot txn(store);
        snapshot = read_status(txn, config);
    }
    std::vector<Finding> findings;
    for (const GresCount& c : gres_counts(snapshot, config, live_jobs, node_gres))
        if (!c.agrees())
            findings.push_back({FindingKind::gres_count, c.pool, c.gres,
                                "Slurm counts " + std::to_string(*c.slurm) +
                                    " units on this node, bbkit " + std::to_string(c.count) + " (" +
                                    std::to_string(c.held) + " held by no job Slurm has here)"});
    return findings;
}

int check_status(const std::vector<Finding>& findings) {
    const bool open =
        std::any_of(findings.begin(), findings.end(), [](const Finding& f) { return !f.repaired; });
    return open ? 1 : 0;
}

}  // namespace bbkit
