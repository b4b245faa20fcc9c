#include "bbkit/teardown.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <map>
#include <optional>
#include <thread>

#include "bbkit/audit.hpp"
#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/pool.hpp"
#include "bbkit/publish.hpp"
#include "bbkit/run_lock.hpp"
#include "bbkit/size.hpp"
#include "bbkit/stage_plan.hpp"
#include "bbkit/transfer.hpp"
#include "bbkit/trust.hpp"

namespace bbkit {
namespace {

constexpr auto alloc_in_flight_wait = std::chrono::seconds(10);
constexpr auto run_lock_wait = std::chrono::seconds(10);

BufferState end_state(const BufferKey& key) {
    return key.kind() == BufferKind::job ? BufferState::complete : BufferState::deleted;
}

BufferState ending_state(const BufferKey& key) {
    return key.kind() == BufferKind::job ? BufferState::teardown : BufferState::deleting;
}

// Standalone mode: a job's results that only its buffer holds are never deleted by default
// (bbkit(7), STANDALONE MODE). In Slurm mode Slurm decides (its Flags=TeardownFailure).
// Returns the stage_out lines at risk that --force discards; throws without it.
std::vector<StageDirective> check_results_safe(const Config& config, const Buffer& b,
                                               const TeardownOptions& options) {
    if (config.mode != Mode::standalone)
        return {};
    std::vector<StageDirective> at_risk = unstaged_results(b);
    if (at_risk.empty() || options.force)
        return at_risk;
    std::string data;
    for (std::size_t i = 0; i < at_risk.size() && i < 3; ++i)
        data += (i ? ", " : "") + at_risk[i].destination;
    if (at_risk.size() > 3)
        data += " and " + std::to_string(at_risk.size() - 3) + " more";
    const std::string job = std::to_string(b.key.job_id);
    const bool failed = b.state == BufferState::staging_out && !b.message.empty();
    // bb-stage out takes a buffer past post-run only (65 before): what delivers them now.
    const bool after_the_job =
        b.state == BufferState::post_run || b.state == BufferState::staging_out;
    const std::string deliver = failed          ? "bb-stage out --retry --job " + job
                                : after_the_job ? "bb-stage out --job " + job
                                                : "bb-stage post-run --job " + job +
                                                      " then bb-stage out --job " + job +
                                                      " once the job has ended";
    throw Error(ExitCode::unavailable, "buffer " + b.key.str() + " holds job " + job +
                                           "'s results for " + data + ", not staged out (" +
                                           (failed ? "stage-out failed: " + b.message
                                                   : std::string("it is ") + to_string(b.state)) +
                                           "): deliver them with " + deliver +
                                           ", or discard them with bb-teardown --force --job " +
                                           job);
}

bool holder_alive(const Buffer& b) {
    return b.run_lock_holder && b.run_lock_holder->alive();
}

// Records this process as the one ending the buffer, in the transaction that starts the end:
// until it holds the run lock, recover and check must see a live owner, not a dead one.
void claim(WriteTransaction& txn, const BufferKey& key) {
    txn.set_run_lock_holder(key, ProcessId::self());
}

// Stops whoever stages this buffer: waits for it unless hurrying, then TERM, then KILL.
void stop_stager(StateStore& store, const Config& config, const BufferKey& key,
                 const TeardownOptions& options) {
    const std::optional<ProcessId> holder = RunLock::holder(run_lock_scope(store), key);
    if (!holder || *holder == ProcessId::self())
        return;
    if (!options.hurry && wait_for_exit(*holder, std::chrono::seconds(config.timeouts.other / 2)))
        return;
    spdlog::info("stopping pid {} that holds buffer {}", holder->pid, key.str());
    stop_process(*holder,
                 options.hurry ? std::chrono::milliseconds(1000) : std::chrono::milliseconds(5000));
}

// Removes the directory of buffer `key` from trash/ within `deadline`; `complete` when nothing
// of it is left there. What the buffer's owner could not have deleted is kept aside, audited
// and reported by bb-pool check, and no longer counts as the buffer's (bbkit(7), SECURITY).
RemovalResult remove_trashed(const Config& config, const BufferKey& key, PoolDir& dir,
                             const std::string& trash_name,
                             std::chrono::steady_clock::time_point deadline, PoolDir::Sync sync,
                             const RemovalProgressFn& progress, const std::string& who) {
    RemovalResult removal = dir.remove_from_trash(trash_name, deadline, sync, progress);
    spdlog::info("buffer {}: {} entries removed from {}/trash/{}{}", key.str(), removal.removed,
                 dir.path(), trash_name, removal.complete ? "" : ", the rest left for later");
    for (const KeptEntry& kept : removal.kept) {
        spdlog::warn(
            "buffer {}: kept {}/quarantine/{} (owned by uid {}, which the buffer's owner "
            "uid {} could not delete)",
            key.str(), dir.path(), kept.name, kept.uid, kept.buffer_owner);
        audit(config.state_dir, who, "kept",
              "buffer=" + key.str() + " entry=" + dir.path() + "/quarantine/" + kept.name +
                  " uid=" + std::to_string(kept.uid) +
                  " buffer_owner=" + std::to_string(kept.buffer_owner));
    }
    return removal;
}

// Removes one buffer's directory from trash/ within `deadline`; releases its space when done.
// Adds the entries it removed to `removed`, whether or not it finished.
bool reap_one(StateStore& store, const Config& config, const Buffer& b, PoolDir& dir,
              std::chrono::steady_clock::time_point deadline, const RemovalProgressFn& progress,
              std::uint64_t& removed, const std::string& who) {
    const RemovalResult removal = remove_trashed(config, b.key, dir, trash_name(b), deadline,
                                                 PoolDir::Sync::now, progress, who);
    removed += removal.removed;
    if (!removal.complete)
        return false;
    fault_point("reap.removed");
    WriteTransaction txn(store, who);
    txn.mark_reaped(b.key);
    publish(txn, store, config);
    txn.commit();
    // Only now: the limit bounded the directory while it waited in trash/.
    release_buffer_limit(configured_pool(config, b.pool), dir, b);
    return true;
}

}  // namespace

TeardownResult finish_teardown(StateStore& store, const Config& config, const BufferKey& key,
                               const TeardownOptions& options, const std::string& who) {
    stop_stager(store, config, key, options);
    RunLock lock = RunLock::acquire(run_lock_scope(store), key, run_lock_wait);
    fault_point("teardown.locked");
    Buffer b;
    std::optional<PoolDir> dir;
    std::optional<Error> unopened;  // a pool that cannot be opened fails the teardown below
    {
        ReadSnapshot snapshot(store);
        b = snapshot.get_buffer(key);
        try {
            dir.emplace(open_pool(snapshot, config, b.pool));
        } catch (const Error& e) {
            unopened = e;
        }
    }
    // The directory leaves job/ (or persistent/) for trash/, and is reaped right away within
    // the budget, so that one transaction both ends the buffer and releases its space. Neither
    // step is durable before `removed` is waited for, just before that commit: a crash before it
    // leaves the buffer in `teardown` (or `deleting`), which the next teardown or recover
    // finishes.
    bool reaped = false;
    std::uint64_t entries_removed = 0;
    PendingSync removed;  // the outcome of syncing trash/ and the parent, checked before commit
    const auto fail = [&](const Error& e) {
        WriteTransaction txn(store, who);
        if (key.kind() == BufferKind::job) {
            Buffer failed =
                txn.transition(key, BufferState::teardown_fail, "BurstBufferOperation", e.what());
            failed.failure = std::string("teardown: ") + e.what();
            failed.failed = std::chrono::system_clock::now();
            txn.update_buffer(failed);
        }
        publish(txn, store, config);
        txn.commit();
        audit(config.state_dir, who, "teardown-fail", "buffer=" + key.str() + " error=" + e.what());
        throw Error(e.code(),
                    "teardown of buffer " + key.str() + " failed: " + e.what() +
                        " (the space stays charged; fix the cause and run bb-teardown again)");
    };
    try {
        if (unopened)
            throw *unopened;
        // A stage on transfer nodes ends before its buffer does (bbkit(7), STAGING ON TRANSFER
        // NODES): no mover of the job may still write into a directory being removed.
        end_transfer_job(*dir, b, std::chrono::seconds(config.timeouts.other));
        if (!dir->move_to_trash(b.directory, trash_name(b), PoolDir::Sync::later))
            spdlog::info("buffer {}: directory {}/{} was already gone", key.str(), dir->path(),
                         b.directory);
        try {
            const RemovalResult removal =
                remove_trashed(config, key, *dir, trash_name(b),
                               std::chrono::steady_clock::now() + options.reap_budget,
                               PoolDir::Sync::later, options.on_progress, who);
            reaped = removal.complete;
            entries_removed = removal.removed;
        } catch (const Error& e) {
            spdlog::warn("buffer {} stays in trash for the reaper: {}", key.str(), e.what());
        }
        removed = dir->sync_removal(b.directory);
    } catch (const Error& e) {
        fail(e);
    }
    std::optional<Error> not_durable;
    {
        // Deferred: lost to a power cut, this leaves the state of teardown.trashed.
        WriteTransaction txn(store, who, WriteTransaction::Durability::deferred);
        b = txn.transition(key, end_state(key));
        b.run_lock_holder.reset();
        txn.set_run_lock_holder(key, std::nullopt);
        if (reaped)
            txn.mark_reaped(key);  // the bytes are gone: the space is free
        for (const std::string& name : recorded_persistent_uses(b)) {
            std::optional<Buffer> p = txn.find_buffer(BufferKey::persistent(config.cluster, name));
            if (p && p->use_count > 0 && !is_final(p->state)) {
                --p->use_count;
                txn.update_buffer(*p);
            }
        }
        publish(txn, store, config);
        try {
            removed.wait();  // the end is never recorded before the removal is durable
        } catch (const Error& e) {
            not_durable = e;  // rolled back below, then recorded as a failed teardown
        }
        if (!not_durable) {
            fault_point("teardown.trashed");
            txn.commit();
        }
    }
    if (not_durable)
        fail(*not_durable);
    fault_point("teardown.ended");
    if (reaped && dir)
        release_buffer_limit(configured_pool(config, b.pool), *dir, b);
    lock.remove_file();
    remove_env_files(store, key);
    if (key.kind() == BufferKind::job && dir) {
        // The tasks' copy on the pool (standalone mode; any mode, should the mode have changed).
        try {
            for (const std::string& name : dir->job_environments(key.cluster, key.job_id))
                dir->remove_job_environment(name);
        } catch (const Error& e) {
            spdlog::warn("buffer {}: {}", key.str(), e.what());
        }
    }
    audit(config.state_dir, who, key.kind() == BufferKind::job ? "teardown" : "destroy",
          "buffer=" + key.str() + " pool=" + b.pool +
              " bytes=" + std::to_string(b.allocated_bytes) +
              " entries_removed=" + std::to_string(entries_removed));
    return TeardownResult{true, key.str(), reaped, "", entries_removed};
}

TeardownResult teardown_job(StateStore& store, const Config& config, std::uint64_t job_id,
                            const TeardownOptions& options, const std::string& who) {
    if (options.force)
        refuse_caller_override("--force");
    const std::string job = "job " + std::to_string(job_id);
    const auto give_up = std::chrono::steady_clock::now() + alloc_in_flight_wait;
    BufferKey key;
    for (;;) {
        WriteTransaction txn(store, who);
        const std::optional<Buffer> b = txn.latest_job_buffer(config.cluster, job_id);
        if (!b)
            return TeardownResult{false, "", false, job + " has no burst buffer"};
        key = b->key;
        if (is_final(b->state))
            return TeardownResult{false, key.str(), b->reaped,
                                  job + "'s burst buffer is already torn down"};
        if (b->state == BufferState::pending) {  // still queued: it never held space
            txn.dequeue(key);
            txn.transition(key, BufferState::complete, "", "cancelled while waiting for space");
            txn.mark_reaped(key);
            publish(txn, store, config);
            txn.commit();
            audit(config.state_dir, who, "teardown", "buffer=" + key.str() + " (queued)");
            return TeardownResult{true, key.str(), true, job + " left the queue"};
        }
        if (b->state == BufferState::allocating && holder_alive(*b) &&
            std::chrono::steady_clock::now() < give_up) {
            txn.commit();  // let the allocation finish first: its directory must not be orphaned
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            continue;
        }
        if (b->state == BufferState::teardown && holder_alive(*b) &&
            !(*b->run_lock_holder == ProcessId::self()) &&
            std::chrono::steady_clock::now() < give_up) {
            txn.commit();  // another teardown is finishing it: wait rather than stop it
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            continue;
        }
        const std::vector<StageDirective> discarded = check_results_safe(config, *b, options);
        if (b->state != BufferState::teardown)
            txn.transition(key, BufferState::teardown);
        claim(txn, key);
        publish(txn, store, config);
        txn.commit();
        if (!discarded.empty()) {
            std::string lines;
            for (const StageDirective& s : discarded)
                lines += " stage_out=" + s.source + "->" + s.destination;
            audit(config.state_dir, who, "teardown-force",
                  "buffer=" + key.str() + " state=" + to_string(b->state) +
                      " discarded results not staged out:" + lines);
        }
        break;
    }
    fault_point("teardown.committed");
    return finish_teardown(store, config, key, options, who);
}

TeardownResult teardown_persistent(StateStore& store, const Config& config, const std::string& name,
                                   const TeardownOptions& options, const std::string& who) {
    if (options.force)
        refuse_caller_override("--force");
    const BufferKey key = BufferKey::persistent(config.cluster, name);
    {
        WriteTransaction txn(store, who);
        const std::optional<Buffer> b = txn.find_buffer(key);
        if (!b || is_final(b->state))
            return TeardownResult{false, key.str(), false,
                                  "persistent buffer '" + name + "' does not exist"};
        if (b->use_count > 0 && !options.force)
            throw Error(ExitCode::exists, "persistent buffer '" + name + "' is used by " +
                                              std::to_string(b->use_count) +
                                              " job(s) (use --force)");
        if (b->state == BufferState::allocating && holder_alive(*b))
            throw Error(ExitCode::temp_fail,
                        "persistent buffer '" + name + "' is being created (retry later)");
        if (b->state != BufferState::deleting)
            txn.transition(key, ending_state(key));
        claim(txn, key);
        publish(txn, store, config);
        txn.commit();
    }
    fault_point("teardown.committed");
    return finish_teardown(store, config, key, options, who);
}

ReapResult reap(StateStore& store, const Config& config, std::chrono::milliseconds budget,
                const std::string& who, const RemovalProgressFn& progress) {
    const auto deadline = std::chrono::steady_clock::now() + budget;
    ReapResult result;
    std::vector<Buffer> waiting;
    std::map<std::string, std::optional<PoolDir>> pools;
    {
        ReadSnapshot snapshot(store);
        BufferFilter filter;
        filter.in_trash_only = true;
        waiting = snapshot.list_buffers(filter);
        for (const Buffer& b : waiting) {
            if (pools.count(b.pool))
                continue;
            try {
                pools[b.pool].emplace(open_pool(snapshot, config, b.pool));
            } catch (const Error& e) {
                spdlog::warn("cannot reap in pool {}: {}", b.pool, e.what());
                pools[b.pool];
            }
        }
    }
    for (const Buffer& b : waiting) {
        std::optional<PoolDir>& dir = pools[b.pool];
        bool done = false;
        if (dir && std::chrono::steady_clock::now() < deadline) {
            try {
                done = reap_one(store, config, b, *dir, deadline, progress, result.entries_removed,
                                who);
            } catch (const Error& e) {
                spdlog::warn("cannot reap buffer {}: {}", b.key.str(), e.what());
            }
        }
        if (done) {
            ++result.reaped;
            result.bytes_released += b.allocated_bytes;
        } else {
            ++result.remaining;
        }
    }
    return result;
}

}  // namespace bbkit
