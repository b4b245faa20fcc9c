#include "bbkit/recovery.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "bbkit/audit.hpp"
#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/pool.hpp"
#include "bbkit/publish.hpp"
#include "bbkit/run_lock.hpp"
#include "bbkit/size.hpp"
#include "bbkit/teardown.hpp"
#include "bbkit/views.hpp"

namespace bbkit {
namespace {

// Teardown or destroy has begun: the directory may be in its pool's job/ or already in trash/.
bool is_ending(BufferState state) {
    return state == BufferState::teardown || state == BufferState::deleting ||
           state == BufferState::teardown_fail;
}

// The whole content of a small file, or "" when it cannot be read.
std::string read_small_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return in ? text.str() : std::string();
}

// Nobody works on this buffer any more: its run lock is free and its recorded holder is dead.
bool owner_dead(const Config& config, const Buffer& b) {
    if (b.run_lock_holder && b.run_lock_holder->alive())
        return false;
    return !RunLock::holder(config.state_dir, b.key.str());
}

// The record as it is now, if it is still what `seen` (read earlier, outside any write
// transaction) showed and nobody else works on it; otherwise someone moved it on meanwhile (a
// waiter got its space and finished, a stager ended, an alloc was retried) and it is not
// recover's to touch. A claim this process made itself counts as nobody's.
std::optional<Buffer> still_abandoned(Transaction& txn, const Config& config, const Buffer& seen) {
    std::optional<Buffer> now = txn.find_buffer(seen.key);
    if (!now || now->state != seen.state)
        return std::nullopt;
    if (now->run_lock_holder && *now->run_lock_holder == ProcessId::self())
        return now;
    return owner_dead(config, *now) ? now : std::nullopt;
}

// Ends the record `seen` showed without touching its directory (there is none, or it is gone).
// False, and nothing changed, when the record moved on since (see still_abandoned).
bool close_record(StateStore& store, const Config& config, const Buffer& seen,
                  const std::string& why, const std::string& tool) {
    WriteTransaction txn(store, tool);
    const std::optional<Buffer> b = still_abandoned(txn, config, seen);
    if (!b)
        return false;
    const BufferKey& key = seen.key;
    if (b->state == BufferState::pending) {
        txn.dequeue(key.str());
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
                               const std::string& tool) {
    std::optional<PoolDir> dir;
    {
        // Claimed first, so an alloc retried meanwhile backs off ("being allocated by pid")
        // instead of making the directory while this decides there is none.
        WriteTransaction txn(store, tool);
        std::optional<Buffer> now = still_abandoned(txn, config, b);
        if (!now)
            return "";
        dir.emplace(open_pool(txn, config, b.pool));
        now->run_lock_holder = ProcessId::self();
        txn.update_buffer(*now);
        txn.commit();
    }
    if (!dir->exists(b.directory)) {
        if (!close_record(store, config, b, "allocation interrupted before its directory existed",
                          tool))
            return "";
        return b.key.str() + ": allocating -> rolled back (no directory)";
    }
    // Re-owned (the crash may have come first) and synced while the roll-forward works. A
    // directory this allocation cannot have made is left alone, for check to report.
    PendingSync durable;
    try {
        durable = dir->create_buffer_dir(b.directory, b.uid, b.gid, PoolDir::Creation::resume);
    } catch (const Error& e) {
        if (e.code() != ExitCode::exists)
            throw;
        if (!close_record(store, config, b, e.what(), tool))
            return "";
        return b.key.str() + ": allocating -> rolled back (its directory is not its own)";
    }
    std::vector<std::pair<std::string, std::string>> uses;
    {
        ReadSnapshot snapshot(store);
        uses =
            resolve_persistent_uses(snapshot, config, b.uid, b.user, recorded_persistent_uses(b));
    }
    complete_allocation(store, config, b.key, uses, durable, tool);
    return b.key.str() + ": allocating -> allocated (rolled forward)";
}

std::string mark_interrupted(StateStore& store, const Config& config, const Buffer& b,
                             const std::string& tool) {
    const std::string message =
        std::string(b.state == BufferState::staging_in ? "stage-in" : "stage-out") +
        " interrupted: the stager died (run bb-stage again to resume)";
    if (b.message == message)
        return "";
    WriteTransaction txn(store, tool);
    if (!still_abandoned(txn, config, b))
        return "";
    txn.transition(b.key, b.state, "BurstBufferOperation", message);
    Buffer updated = txn.get_buffer(b.key);
    updated.run_lock_holder.reset();
    txn.update_buffer(updated);
    publish(txn, store, config);
    txn.commit();
    return b.key.str() + ": " + to_string(b.state) + " marked interrupted (data kept)";
}

std::string finish_ending(StateStore& store, const Config& config, const Buffer& b,
                          const std::string& tool) {
    {
        // Claimed in one transaction, as a teardown claims it: a teardown or another recover
        // that started meanwhile keeps it (and is not stopped by this one).
        WriteTransaction txn(store, tool);
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
    finish_teardown(store, config, b.key, options, tool);
    return b.key.str() + ": " + to_string(b.state) + " -> finished";
}

}  // namespace

std::vector<std::string> recover(StateStore& store, const Config& config,
                                 std::chrono::milliseconds reap_budget, const std::string& tool) {
    std::vector<std::string> actions;
    std::vector<Buffer> live;
    {
        ReadSnapshot snapshot(store);
        BufferFilter filter;
        filter.live_only = true;
        live = snapshot.list_buffers(filter);
    }
    fault_point("recover.listed");
    for (const Buffer& b : live) {
        if (!owner_dead(config, b))
            continue;
        try {
            std::string action;
            switch (b.state) {
                case BufferState::pending:
                    if (close_record(store, config, b, "the waiting process died", tool))
                        action = b.key.str() + ": pending -> dropped from the queue (waiter died)";
                    break;
                case BufferState::allocating:
                    action = recover_allocating(store, config, b, tool);
                    break;
                case BufferState::staging_in:
                case BufferState::staging_out:
                    action = mark_interrupted(store, config, b, tool);
                    break;
                case BufferState::teardown:
                case BufferState::teardown_fail:
                case BufferState::deleting:
                    action = finish_ending(store, config, b, tool);
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
        WriteTransaction txn(store, tool);
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
                    job_environment(configured_pool(config, b.pool).path + "/" + b.directory,
                                    resolve_persistent_uses(snapshot, config, b.uid, b.user,
                                                            recorded_persistent_uses(b)));
                if (read_small_file(env_file_path(store, b.key)) != text ||
                    read_small_file(job_env_file_path(store, b.key)) != text) {
                    write_env_files(store, b.key, text);
                    actions.push_back(b.key.str() + ": env file rewritten");
                }
            } catch (const Error& e) {
                actions.push_back(b.key.str() + ": env file not rewritten: " + e.what());
            }
        }
    }
    {
        WriteTransaction txn(store, tool);
        publish_all(txn, store, config);
        txn.commit();
    }
    fault_point("recover.published");
    const ReapResult reaped = reap(store, config, reap_budget, tool);
    if (reaped.reaped)
        actions.push_back("reaped " + std::to_string(reaped.reaped) + " buffer(s), released " +
                          format_size(reaped.bytes_released));
    if (reaped.remaining)
        actions.push_back(std::to_string(reaped.remaining) +
                          " buffer(s) still in trash (run bb-pool reap)");
    if (!actions.empty())
        audit(config.state_dir, tool, "recover", std::to_string(actions.size()) + " action(s)");
    return actions;
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

}  // namespace

std::vector<Finding> check(StateStore& store, const Config& config, bool repair,
                           const std::string& tool) {
    std::vector<Finding> findings;
    if (repair) {
        for (const std::string& action : recover(store, config, std::chrono::seconds(5), tool))
            findings.push_back({"interrupted", "", action, "", true});
    }
    std::vector<Buffer> live, trashed;
    std::map<std::string, std::optional<PoolDir>> dirs;
    std::vector<PoolStatus> pools;
    std::map<std::string, std::uint64_t> summed;  // pool -> used bytes summed from the rows
    std::vector<QueueEntry> queued;
    {
        ReadSnapshot snapshot(store);
        BufferFilter filter;
        filter.live_only = true;
        live = snapshot.list_buffers(filter);
        filter = BufferFilter{};
        filter.in_trash_only = true;
        trashed = snapshot.list_buffers(filter);
        pools = pool_status(snapshot, config);
        for (const PoolConfig& pool : config.pools) {
            summed[pool.name] = snapshot.summed_used_bytes(pool.name);
            try {
                dirs[pool.name].emplace(open_pool(snapshot, config, pool.name));
            } catch (const Error& e) {
                dirs[pool.name];
                findings.push_back({"pool-unavailable", pool.name, pool.path, e.what(), false});
            }
            for (const QueueEntry& entry : snapshot.queue(pool.name))
                queued.push_back(entry);
        }
    }
    fault_point("check.listed");
    const auto now = std::chrono::system_clock::now();
    for (PoolStatus& pool : pools) {
        const std::uint64_t rows = summed[pool.name];
        if (pool.used == rows)
            continue;
        Finding f{"usage-mismatch", pool.name, pool.name,
                  "pool_usage holds " + std::to_string(pool.used) + " bytes but the buffers hold " +
                      std::to_string(rows),
                  false};
        if (repair) {
            WriteTransaction txn(store, tool);
            txn.recompute_used_bytes(pool.name);
            publish(txn, store, config);
            txn.commit();
            audit(config.state_dir, tool, "repair",
                  "pool=" + pool.name + " used bytes recomputed: " + std::to_string(rows));
            f.repaired = true;
        }
        findings.push_back(f);
        pool.used = rows;  // the over-commit check below goes by the rows
    }
    for (const PoolStatus& pool : pools)
        if (pool.used + pool.trash > pool.total)
            findings.push_back({"over-commit", pool.name, pool.name,
                                "used " + format_size(pool.used) + " + trash " +
                                    format_size(pool.trash) + " exceeds " + format_size(pool.total),
                                false});
    for (const QueueEntry& entry : queued)
        if (!entry.waiter.alive() && still_queued(store, entry))
            findings.push_back({"stale-queue", entry.pool, entry.key,
                                "waiter pid " + std::to_string(entry.waiter.pid) + " is gone",
                                false});

    std::map<std::string, std::set<std::string>> expected_dirs;   // pool -> "job/main.42.1"
    std::map<std::string, std::set<std::string>> expected_trash;  // pool -> trash names
    for (const Buffer& b : live) {
        if (b.state == BufferState::pending)
            continue;
        expected_dirs[b.pool].insert(b.directory);
        const bool in_flight = !owner_dead(config, b);
        if (b.key.kind() == BufferKind::persistent && b.expires && *b.expires < now)
            findings.push_back({"expired-persistent", b.pool, b.key.str(),
                                "expired; destroy it with bb-teardown --persistent " + b.key.name,
                                false});
        const bool ending = is_ending(b.state);
        if (!in_flight && (b.state == BufferState::allocating || ending) &&
            record_unchanged(store, b))
            findings.push_back(
                {"interrupted", b.pool, b.key.str(),
                 std::string(to_string(b.state)) + " with no live owner (run bb-pool recover)",
                 false});
        std::optional<PoolDir>& dir = dirs[b.pool];
        if (!dir || in_flight || b.state == BufferState::allocating || ending)
            continue;
        if (!dir->exists(b.directory)) {
            Finding f{"missing-directory", b.pool, b.key.str(),
                      dir->path() + "/" + b.directory + " is gone", false};
            if (!repair && !record_unchanged(store, b))
                continue;
            if (repair) {
                if (!close_record(store, config, b, "repair: its directory was gone", tool))
                    continue;  // a teardown moved it meanwhile
                fault_point("repair.closed");
                audit(config.state_dir, tool, "repair",
                      "closed buffer=" + b.key.str() + " (directory missing)");
                f.repaired = true;
            }
            findings.push_back(f);
        }
    }
    for (const Buffer& b : trashed) {
        expected_trash[b.pool].insert(trash_name(b));
        std::optional<PoolDir>& dir = dirs[b.pool];
        if (dir && !dir->exists("trash/" + trash_name(b))) {
            Finding f{"reaped-unrecorded", b.pool, b.key.str(),
                      "its trash entry is gone but the space is still charged", false};
            if (!record_unchanged(store, b))
                continue;  // a reap finished meanwhile
            if (repair) {
                WriteTransaction txn(store, tool);
                txn.mark_reaped(b.key);
                publish(txn, store, config);
                txn.commit();
                f.repaired = true;
            }
            findings.push_back(f);
        }
    }
    // Candidates first; they are confirmed against a fresh read, under the state lock when
    // repairing, because an alloc commits its record before it creates the directory.
    struct Candidate {
        std::string pool, subdir, name;
    };
    std::vector<Candidate> candidates;
    for (auto& [pool, dir] : dirs) {
        if (!dir)
            continue;
        // Another cluster's entries (a pool shared by clusters) are that cluster's to judge:
        // this state directory cannot know its records.
        for (const std::string subdir : {"job", "persistent", "trash"})
            for (const std::string& name : dir->list(subdir)) {
                const std::optional<std::string> cluster = cluster_of_entry(subdir, name);
                if (!cluster || *cluster == config.cluster)
                    candidates.push_back({pool, subdir, name});
            }
    }
    // What teardown kept aside rather than delete as root waits for an administrator; repair
    // never deletes, so it stays a finding until someone removes it by hand.
    for (auto& [pool, dir] : dirs) {
        if (!dir)
            continue;
        for (const std::string& name : dir->list("quarantine"))
            if (name.find(".kept.") != std::string::npos &&
                cluster_of_entry("quarantine", name) == config.cluster)
                findings.push_back({"kept-entry", pool, "quarantine/" + name,
                                    dir->path() + "/quarantine/" + name +
                                        " is another user's directory that a teardown did not "
                                        "delete as root (see the audit log; remove it by hand)",
                                    false});
    }
    std::optional<WriteTransaction> lock;
    if (repair)
        lock.emplace(store, tool);
    std::optional<ReadSnapshot> fresh;
    if (!repair)
        fresh.emplace(store);
    Transaction& txn =
        repair ? static_cast<Transaction&>(*lock) : static_cast<Transaction&>(*fresh);
    expected_dirs.clear();
    expected_trash.clear();
    BufferFilter filter;
    filter.live_only = true;
    for (const Buffer& b : txn.list_buffers(filter)) {
        expected_dirs[b.pool].insert(b.directory);
        // A teardown renames the directory into trash/ before it commits the end: between
        // the two the entry belongs to a live record, and repair must not take it away.
        if (is_ending(b.state))
            expected_trash[b.pool].insert(trash_name(b));
    }
    filter = BufferFilter{};
    filter.in_trash_only = true;
    for (const Buffer& b : txn.list_buffers(filter))
        expected_trash[b.pool].insert(trash_name(b));
    const std::string stamp = std::to_string(
        std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count());
    for (const Candidate& c : candidates) {
        const std::string relative = c.subdir + "/" + c.name;
        bool known = false;
        if (c.subdir == "trash") {
            for (const std::string& t : expected_trash[c.pool])
                if (c.name == t || c.name.rfind(t + ".piece", 0) == 0)
                    known = true;
        } else {
            known = expected_dirs[c.pool].count(relative) > 0;
        }
        PoolDir& dir = *dirs[c.pool];
        // Listed before the fresh read: a teardown or reap may have moved it away since.
        if (known || !dir.exists(relative))
            continue;
        Finding f{c.subdir == "trash" ? "orphan-trash" : "orphan-directory", c.pool, relative,
                  dir.path() + "/" + relative + " has no record", false};
        if (repair) {
            const std::string aside = c.subdir + "." + c.name + "." + stamp;
            dir.quarantine(relative, aside);
            audit(config.state_dir, tool, "repair",
                  "quarantined " + dir.path() + "/" + relative + " as quarantine/" + aside);
            f.repaired = true;
            f.detail += " (moved to quarantine/" + aside + ")";
        }
        findings.push_back(f);
    }
    if (repair) {
        lock->commit();
    }
    if (repair && std::any_of(findings.begin(), findings.end(),
                              [](const Finding& f) { return f.kind == "stale-queue"; })) {
        WriteTransaction txn(store, tool);
        txn.drop_dead_waiters();
        publish(txn, store, config);
        txn.commit();
        for (Finding& f : findings)
            if (f.kind == "stale-queue")
                f.repaired = true;
    }
    return findings;
}

}  // namespace bbkit
