#include "bbkit/pool.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "bbkit/access.hpp"
#include "bbkit/audit.hpp"
#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/job_environment.hpp"
#include "bbkit/job_nodes.hpp"
#include "bbkit/publish.hpp"
#include "bbkit/run_lock.hpp"
#include "bbkit/size.hpp"
#include "bbkit/slurm_gres.hpp"
#include "bbkit/slurm_view.hpp"
#include "bbkit/stage_plan.hpp"
#include "bbkit/text.hpp"
#include "bbkit/trust.hpp"

namespace bbkit {
namespace {

constexpr auto queue_poll = std::chrono::milliseconds(100);

std::string describe(const AllocRequest& r) {
    return r.job_id ? "job " + std::to_string(*r.job_id)
                    : "persistent buffer " + *r.persistent_name;
}

bool same_request(const Buffer& b, const AllocRequest& r, std::uint64_t allocated) {
    return b.pool == r.pool && b.requested_bytes == r.capacity && b.allocated_bytes == allocated &&
           b.uid == r.user.uid && b.access == r.access && b.type == r.type &&
           b.staging == r.staging;
}

// The live record this request would collide with, if any.
std::optional<Buffer> live_buffer(Transaction& txn, const Config& config, const AllocRequest& r) {
    std::optional<Buffer> b =
        r.job_id ? txn.latest_job_buffer(config.cluster, *r.job_id)
                 : txn.find_buffer(BufferKey::persistent(config.cluster, *r.persistent_name));
    if (b && is_final(b->state))
        return std::nullopt;
    return b;
}

std::string buffer_dir_path(const PoolConfig& pool, const Buffer& b) {
    return pool.path + "/" + b.directory;
}

std::vector<std::pair<std::string, std::string>> check_uses(Transaction& txn, const Config& config,
                                                            const AllocRequest& r) {
    return resolve_persistent_uses(txn, config, r.user.uid, r.user.name, r.uses_persistent);
}

void check_capacity_fits_at_all(const PoolConfig& pool, const AllocRequest& r,
                                std::uint64_t allocated) {
    if (allocated > pool.capacity)
        throw Error(ExitCode::data, describe(r) + " needs " + format_size(allocated) +
                                        " from pool '" + pool.name + "', which holds only " +
                                        format_size(pool.capacity) +
                                        " in total: it can never be satisfied");
}

void check_user_limit(Transaction& txn, const Config& config, const AllocRequest& r,
                      std::uint64_t allocated) {
    if (slurm_drives(config.mode) || !config.limits.user_capacity)
        return;
    const std::uint64_t held = txn.used_bytes_of_user(r.user.uid);
    if (held + allocated > *config.limits.user_capacity)
        throw Error(ExitCode::temp_fail,
                    "user " + r.user.name + " holds " + format_size(held) + " and " + describe(r) +
                        " needs " + format_size(allocated) + ": over limits.user_capacity " +
                        format_size(*config.limits.user_capacity) +
                        " (BurstBufferResources; retry later)");
}

enum class Grant { now, wait };

// Strict FIFO, as Slurm: a request behind others waits even when it would fit.
Grant capacity_decision(Transaction& txn, const PoolConfig& pool, const BufferKey& key,
                        std::uint64_t allocated, std::uint64_t& free) {
    const std::uint64_t taken = txn.used_bytes(pool.name) + txn.trash_bytes(pool.name);
    free = taken >= pool.capacity ? 0 : pool.capacity - taken;
    const std::optional<QueueEntry> head = txn.queue_head(pool.name);
    const bool behind_others = head && head->key != key.str();
    return (allocated <= free && !behind_others) ? Grant::now : Grant::wait;
}

Buffer new_record(const Config& config, const AllocRequest& r, const BufferKey& key,
                  std::uint64_t allocated, BufferState state) {
    Buffer b = Buffer::for_key(key);
    b.pool = r.pool;
    b.requested_bytes = r.capacity;
    b.allocated_bytes = allocated;
    b.uid = r.user.uid;
    b.gid = r.user.gid;
    b.user = r.user.name;
    b.owner = r.persistent_name ? r.user.name : "";
    b.state = state;
    b.access = r.access;
    b.type = r.type;
    b.staging = r.staging;
    b.expires = r.expires;
    b.run_lock_holder = ProcessId::self();
    if (state == BufferState::pending)
        b.reason = "BurstBufferResources";
    (void)config;
    return b;
}

// Gives up a queued request: leaves the queue and closes its pending record.
void leave_queue(StateStore& store, const Config& config, const BufferKey& key,
                 const std::string& who) {
    WriteTransaction txn(store, who);
    txn.dequeue(key);
    if (std::optional<Buffer> b = txn.find_buffer(key); b && b->state == BufferState::pending) {
        txn.transition(key, BufferState::complete, "BurstBufferResources",
                       "gave up waiting for space");
        txn.mark_reaped(key);
    }
    publish(txn, store, config);
    txn.commit();
}

struct Reserved {
    Buffer buffer;
    bool existed = false;  // live and past `allocating`: nothing to do
    bool resumed = false;  // an `allocating` record whose process died: its directory may exist
    std::vector<std::pair<std::string, std::string>> uses;
    std::optional<PoolDir> dir;  // opened and checked in the transaction that reserved
};

// The first transaction: the record as `allocating` (or the existing buffer). Loops while the
// request waits in the queue.
Reserved reserve(StateStore& store, const Config& config, const AllocRequest& r,
                 const PoolConfig& pool, std::uint64_t allocated, const std::string& who) {
    const auto deadline =
        std::chrono::steady_clock::now() + r.wait.value_or(std::chrono::milliseconds(0));
    std::optional<BufferKey> queued;
    try {
        for (;;) {
            WriteTransaction txn(store, who);
            PoolDir dir = open_pool(txn, config, r.pool);  // marker and ownership checks
            const std::optional<PoolRecord> record = txn.find_pool(r.pool);
            if (record->draining)
                throw Error(ExitCode::unavailable,
                            "pool '" + r.pool +
                                "' is draining: no new allocations (bb-pool resume " + r.pool +
                                ")");
            std::optional<Buffer> live = live_buffer(txn, config, r);
            if (live && live->state != BufferState::pending) {
                if (!same_request(*live, r, allocated))
                    throw Error(ExitCode::exists,
                                describe(r) + " already has a different buffer (" +
                                    live->key.str() + ", " + to_string(live->state) + ", pool " +
                                    live->pool + ", " + format_size(live->allocated_bytes) +
                                    "): tear it down first");
                if (live->state == BufferState::allocating && live->run_lock_holder &&
                    live->run_lock_holder->alive() &&
                    !(*live->run_lock_holder == ProcessId::self()))
                    throw Error(ExitCode::temp_fail,
                                describe(r) + " is being allocated by pid " +
                                    std::to_string(live->run_lock_holder->pid) + " (retry later)");
                Reserved out{*live, live->state != BufferState::allocating,
                             live->state == BufferState::allocating, check_uses(txn, config, r),
                             std::move(dir)};
                if (!out.existed) {
                    // Resuming an allocation whose process died: claimed, so a recover that
                    // runs meanwhile leaves it alone.
                    out.buffer.run_lock_holder = ProcessId::self();
                    txn.set_run_lock_holder(out.buffer.key, out.buffer.run_lock_holder);
                }
                txn.commit();
                return out;
            }
            // A pool that may not run without project quotas refuses before anything is
            // recorded (a resumed allocation is refused by buffer_limit).
            if (!queued && pool.quota_missing == QuotaMissing::refuse)
                dir.limits_buffers();
            if (live && live->run_lock_holder && live->run_lock_holder->alive() &&
                !(*live->run_lock_holder == ProcessId::self()))
                throw Error(ExitCode::temp_fail,
                            describe(r) + " is already waiting for space (pid " +
                                std::to_string(live->run_lock_holder->pid) + ")");
            const BufferKey key =
                live ? live->key
                     : (r.job_id ? BufferKey::job(config.cluster, *r.job_id,
                                                  txn.next_incarnation(config.cluster, *r.job_id))
                                 : BufferKey::persistent(config.cluster, *r.persistent_name));
            std::vector<std::pair<std::string, std::string>> uses = check_uses(txn, config, r);
            txn.drop_dead_waiters();
            std::uint64_t free = 0;
            const Grant grant = capacity_decision(txn, pool, key, allocated, free);
            if (config.mode == Mode::standalone)
                check_user_limit(txn, config, r, allocated);
            if (grant == Grant::wait && slurm_drives(config.mode)) {
                spdlog::warn(
                    "pool {} over-committed: {} needs {} and {} is free (Slurm decided; see "
                    "bb-pool check)",
                    pool.name, describe(r), format_size(allocated), format_size(free));
            } else if (grant == Grant::wait) {
                if (!r.wait)
                    throw Error(
                        ExitCode::temp_fail,
                        "pool '" + pool.name + "' has " + format_size(free) + " free and " +
                            describe(r) + " needs " + format_size(allocated) +
                            (txn.queue_length(pool.name)
                                 ? " behind " + std::to_string(txn.queue_length(pool.name)) +
                                       " queued request(s)"
                                 : "") +
                            (pool.node_local
                                 ? " (node-local: Slurm counts this node's space otherwise; see "
                                   "bb-pool check)"
                                 : " (BurstBufferResources; retry later or use --wait)"));
                if (!live) {
                    Buffer pending = new_record(config, r, key, allocated, BufferState::pending);
                    txn.insert_buffer(pending);
                } else if (!queued) {
                    txn.set_run_lock_holder(live->key, ProcessId::self());
                }
                if (!txn.queue_position(key))
                    txn.enqueue(pool.name, key, allocated, ProcessId::self());
                queued = key;
                publish(txn, store, config);
                txn.commit();
                fault_point("alloc.queued");
                if (std::chrono::steady_clock::now() >= deadline)
                    throw Error(ExitCode::temp_fail, "timed out waiting for space in pool '" +
                                                         pool.name + "' (BurstBufferResources)");
                std::this_thread::sleep_for(queue_poll);
                continue;
            }
            Buffer b;
            if (live) {
                txn.dequeue(key);
                b = txn.transition(key, BufferState::allocating);
                b.run_lock_holder = ProcessId::self();
                txn.set_run_lock_holder(key, b.run_lock_holder);
            } else {
                b = new_record(config, r, key, allocated, BufferState::allocating);
                txn.insert_buffer(b);
            }
            txn.commit();
            return Reserved{b, false, false, uses, std::move(dir)};
        }
    } catch (...) {
        if (queued)
            leave_queue(store, config, *queued, who);
        throw;
    }
}

// Undoes a reservation whose directory could not be made: the record ends, nothing to reap.
void roll_back(StateStore& store, const Config& config, const Buffer& b, const std::string& why,
               const std::string& who) {
    WriteTransaction txn(store, who);
    const BufferState end =
        b.key.kind() == BufferKind::job ? BufferState::complete : BufferState::deleted;
    txn.transition(b.key, end, "BurstBufferOperation", why);
    txn.mark_reaped(b.key);
    publish(txn, store, config);
    txn.commit();
}

bool ended_meanwhile(StateStore& store, const BufferKey& key) {
    ReadSnapshot snapshot(store);
    const std::optional<Buffer> now = snapshot.find_buffer(key);
    return now && is_final(now->state);
}

}  // namespace

const PoolConfig& configured_pool(const Config& config, const std::string& name) {
    if (const PoolConfig* pool = config.find_pool(name))
        return *pool;
    throw Error(ExitCode::no_input, "unknown pool '" + name + "' (see bb-pool list)");
}

PoolMarker init_pool(StateStore& store, const Config& config, const std::string& name,
                     const std::string& who) {
    const PoolConfig& pool = configured_pool(config, name);
    WriteTransaction txn(store, who);
    if (std::optional<PoolRecord> known = txn.find_pool(name); known && known->path == pool.path) {
        // Re-initialising must never re-mark a different file system mounted at the old path.
        try {
            PoolDir::open(pool, known->uuid);
        } catch (const Error& e) {
            struct stat st {};
            // A root that is there but lacks its marker: say how to bring the pool back.
            if (e.code() != ExitCode::unavailable || ::lstat(pool.path.c_str(), &st) != 0 ||
                !S_ISDIR(st.st_mode))
                throw;
            throw Error(ExitCode::unavailable,
                        "cannot initialise pool '" + name + "': " + pool.path +
                            " lacks its marker (uuid " + known->uuid +
                            "): not mounted, or its file system was recreated (mount it; if it "
                            "was recreated and its data is gone: bb-pool init --replace " +
                            name + ")");
        }
    }
    const PoolMarker marker = PoolDir::init(pool);
    txn.put_pool(PoolRecord{name, pool.path, marker.uuid, false});
    publish(txn, store, config);
    txn.commit();
    audit(store.dir(), who, "init", "pool=" + name + " path=" + pool.path + " uuid=" + marker.uuid);
    return marker;
}

namespace {

const std::string replaced_reason = "pool replaced: its file system was recreated";

// Takes the run locks of the pool's live buffers that `held` does not hold yet, without
// waiting: a live stager, teardown, allocation or queued waiter makes the replace refuse.
void lock_live_buffers(Transaction& txn, const RunLockScope& scope, const std::string& pool,
                       std::map<std::string, RunLock>& held) {
    BufferFilter filter;
    filter.live_only = true;
    filter.pool = pool;
    for (const Buffer& b : txn.list_buffers(filter)) {
        const std::string key = b.key.str();
        const auto refuse = [&](const std::string& why) {
            throw Error(ExitCode::unavailable, "cannot replace pool '" + pool + "': buffer " + key +
                                                   " " + why +
                                                   " (wait for it to finish, or stop it, and "
                                                   "run bb-pool init --replace again)");
        };
        if (b.run_lock_holder && b.run_lock_holder->alive() &&
            !(*b.run_lock_holder == ProcessId::self()))
            refuse("is " + std::string(to_string(b.state)) + " by live pid " +
                   std::to_string(b.run_lock_holder->pid));
        if (b.state == BufferState::pending)
            for (const QueueEntry& entry : txn.queue(pool))
                if (entry.key == key && entry.waiter.alive())
                    refuse("is waited for by live pid " + std::to_string(entry.waiter.pid));
        if (held.count(key))
            continue;
        std::optional<RunLock> lock = RunLock::try_acquire(scope, b.key);
        if (!lock) {
            const std::optional<ProcessId> holder = RunLock::holder(scope, b.key);
            refuse("is held by " +
                   (holder ? "live pid " + std::to_string(holder->pid) : "another process") +
                   " (staging or teardown)");
        }
        held.emplace(key, std::move(*lock));
    }
}

// Closes one record whose data is gone, through the transition table's own steps.
void close_lost_buffer(WriteTransaction& txn, const Config& config, const Buffer& b) {
    using S = BufferState;
    const BufferKey& key = b.key;
    if (b.key.kind() == BufferKind::job) {
        if (b.state == S::pending)
            txn.dequeue(key);
        else if (b.state != S::teardown)
            txn.transition(key, S::teardown, "", replaced_reason);
        txn.transition(key, S::complete, "", replaced_reason);
        for (const std::string& name : recorded_persistent_uses(b)) {
            std::optional<Buffer> p = txn.find_buffer(BufferKey::persistent(config.cluster, name));
            if (p && p->use_count > 0 && !is_final(p->state)) {
                --p->use_count;
                txn.update_buffer(*p);
            }
        }
    } else {
        if (b.state == S::allocated)
            txn.transition(key, S::deleting, "", replaced_reason);
        txn.transition(key, S::deleted, "", replaced_reason);
    }
    txn.mark_reaped(key);  // nothing is left on the new file system: the space is free
}

}  // namespace

std::chrono::milliseconds parse_wait(const std::string& seconds, unsigned queue_seconds) {
    if (seconds == "default")
        return std::chrono::seconds(queue_seconds);
    if (seconds.empty() || seconds == "none")  // "no limit": a year outlasts any job's wait
        return std::chrono::milliseconds(std::chrono::hours(24 * 365));
    std::size_t used = 0;
    double value = -1;
    try {
        value = std::stod(seconds, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != seconds.size() || !(value >= 0) || value > 1e9)
        throw Error(ExitCode::usage, "--wait " + seconds +
                                         ": not a number of seconds (give SECONDS, default for "
                                         "timeouts.queue, or none for no limit)");
    return std::chrono::milliseconds(static_cast<long long>(value * 1000));
}

ReplaceResult replace_pool(StateStore& store, const Config& config, const std::string& name,
                           const std::string& who) {
    const PoolConfig& pool = configured_pool(config, name);
    std::map<std::string, RunLock> held;  // lock order: run locks, then the state lock
    const RunLockScope scope = run_lock_scope(store);
    {
        ReadSnapshot snapshot(store);
        lock_live_buffers(snapshot, scope, name, held);
    }
    WriteTransaction txn(store, who);
    const std::optional<PoolRecord> record = txn.find_pool(name);
    if (!record || record->path != pool.path)
        throw Error(ExitCode::unavailable, "cannot replace pool '" + name +
                                               "': it was never initialised at " + pool.path +
                                               " (run bb-pool init " + name + ")");
    if (pool_availability(pool, record->uuid, false) != PoolAvailability::unavailable)
        throw Error(ExitCode::exists, "cannot replace pool '" + name + "': " + pool.path +
                                          " holds its recorded marker (uuid " + record->uuid +
                                          "), so its buffers are there (--replace is only for a "
                                          "file system that was recreated)");
    lock_live_buffers(txn, scope, name, held);  // buffers added since the snapshot
    BufferFilter live;
    live.live_only = true;
    live.pool = name;
    const std::vector<Buffer> buffers = txn.list_buffers(live);
    for (const Buffer& b : buffers) {
        struct stat st {};
        if (!b.directory.empty() && ::lstat((pool.path + "/" + b.directory).c_str(), &st) == 0)
            throw Error(ExitCode::exists,
                        "cannot replace pool '" + name + "': " + pool.path + "/" + b.directory +
                            " of buffer " + b.key.str() +
                            " still exists (the file system was not recreated: mount the "
                            "right one, or tear the buffer down)");
    }
    ReplaceResult result;
    result.old_uuid = record->uuid;
    for (const Buffer& b : buffers) {
        close_lost_buffer(txn, config, b);
        result.closed.push_back(b.key.str());
        if (holds_space(b.state))
            result.bytes_released += b.allocated_bytes;
    }
    BufferFilter trashed;
    trashed.in_trash_only = true;
    trashed.pool = name;
    for (const Buffer& b : txn.list_buffers(trashed)) {
        txn.mark_reaped(b.key);  // its trash/ went with the old file system
        result.bytes_released += b.allocated_bytes;
    }
    result.marker = PoolDir::init_new_marker(pool);
    // Killed here, nothing is committed and the new marker differs from the recorded one: the
    // pool stays unavailable and init --replace runs again from the start.
    fault_point("replace.marker-written");
    PoolRecord updated = *record;
    updated.uuid = result.marker.uuid;
    txn.put_pool(updated);
    txn.touch_pools();
    publish(txn, store, config);
    txn.commit();
    for (const Buffer& b : buffers) {
        remove_env_files(store, b.key);
        audit(store.dir(), who, "replace",
              "buffer=" + b.key.str() + " pool=" + name +
                  " bytes=" + std::to_string(b.allocated_bytes) + " state=" + to_string(b.state));
    }
    for (auto& [key, lock] : held)
        lock.remove_file();
    audit(store.dir(), who, "init",
          "pool=" + name + " path=" + pool.path + " uuid=" + result.marker.uuid +
              " replaced=" + result.old_uuid + " closed=" + std::to_string(buffers.size()));
    return result;
}

PoolDir open_pool(Transaction& txn, const Config& config, const std::string& name) {
    const PoolConfig& pool = configured_pool(config, name);
    const std::optional<PoolRecord> record = txn.find_pool(name);
    if (!record)
        throw Error(ExitCode::unavailable,
                    "pool '" + name + "' is not initialised (run bb-pool init " + name + ")");
    return PoolDir::open(pool, record->uuid);
}

void set_draining(StateStore& store, const Config& config, const std::string& name, bool draining,
                  const std::string& who) {
    configured_pool(config, name);
    WriteTransaction txn(store, who);
    if (!txn.find_pool(name))
        throw Error(ExitCode::unavailable,
                    "pool '" + name + "' is not initialised (run bb-pool init " + name + ")");
    txn.set_draining(name, draining);
    publish(txn, store, config);
    txn.commit();
    audit(store.dir(), who, draining ? "drain" : "resume", "pool=" + name);
}

AllocRequest job_alloc_request(const Request& request, std::uint64_t job_id, const User& user) {
    if (!request.job_buffer)
        throw Error(ExitCode::data,
                    "job " + std::to_string(job_id) +
                        " requests no burst-buffer capacity (no capacity= on a directive)");
    AllocRequest r;
    r.job_id = job_id;
    r.user = user;
    r.pool = request.job_buffer->pool;
    r.capacity = request.job_buffer->capacity;
    r.access = request.job_buffer->access;
    r.type = request.job_buffer->type;
    r.staging = staging_record(request);
    for (const PersistentUse& use : request.use)
        r.uses_persistent.push_back(use.name);
    return r;
}

namespace {

// Slurm's datawarp plugin runs setup for every burst-buffer job, also for one that asks for no
// space of its own (it only uses or creates persistent buffers): such a job gets a session of
// 0 bytes in `pool` (Slurm's pool argument, else default_pool), which
// records the persistent buffers it uses for paths, pre-run and teardown.
AllocRequest session_request(const Config& config, const Request& request, std::uint64_t job_id,
                             const User& user, const std::optional<std::string>& pool) {
    AllocRequest r;
    r.job_id = job_id;
    r.user = user;
    if (pool)
        r.pool = *pool;
    else if (config.default_pool)
        r.pool = *config.default_pool;  // datawarp mode has one when a pool is configured
    else
        throw Error(ExitCode::config, "no pool is configured");
    configured_pool(config, r.pool);
    r.capacity = 0;
    r.staging = staging_record(request);
    for (const PersistentUse& use : request.use)
        r.uses_persistent.push_back(use.name);
    return r;
}

// One synthesized directive line, parsed like a job's: the command line obeys script rules.
Request parse_synthesized(const Config& config, const std::string& body, const JobContext& job) {
    RequestText text;
    text.command_line = "#" + config.directives.front() + " " + body;
    // No check_slurm_view: Slurm never reads this line, bbkit wrote it from option values.
    return parse_request(text, config, job);
}

std::string key_value(const std::string& key, const std::optional<std::string>& value) {
    if (!value)
        return "";
    if (value->find_first_of("\"\\\n") != std::string::npos)
        throw Error(ExitCode::usage,
                    "--" + key + " '" + *value + "' holds a quote, backslash or newline");
    return " " + key + "=\"" + *value + "\"";
}

}  // namespace

TimePoint parse_local_time(const std::string& text) {
    for (const char* format : {"%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"}) {
        std::tm tm{};
        const char* end = strptime(text.c_str(), format, &tm);
        if (end && *end == '\0') {
            tm.tm_isdst = -1;
            const std::time_t t = std::mktime(&tm);
            if (t != static_cast<std::time_t>(-1))
                return std::chrono::system_clock::from_time_t(t);
        }
    }
    throw Error(ExitCode::usage,
                "invalid date '" + text + "' (use YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS)");
}

namespace {

// Slurm's allocation is the law on the node: a buffer holds no more units of the pool's GRES
// than Slurm gave the job here (a request that skipped the submit-time checks gets none).
void check_granted(const PoolConfig& pool, const AllocRequest& r, const std::string& slurm_gres) {
    const std::uint64_t granted = granted_units(slurm_gres, pool.gres);
    const std::uint64_t needed = round_up(r.capacity, pool.granularity) / pool.granularity;
    if (needed <= granted)
        return;
    if (granted == 0)
        throw Error(ExitCode::data, describe(r) + " asks for " + format_size(r.capacity) +
                                        " of pool '" + pool.name + "' but Slurm gave it no " +
                                        pool.gres +
                                        " GRES on this node (its request skipped "
                                        "the submit-time checks)");
    throw Error(ExitCode::data, describe(r) + " asks for " + format_size(r.capacity) +
                                    " of pool '" + pool.name + "' but Slurm gave it " +
                                    std::to_string(granted) + " " + pool.gres + " on this node, " +
                                    format_size(granted * pool.granularity) +
                                    " (its request or GRES changed after the submit-time checks)");
}

}  // namespace

AllocRequest build_alloc_request(const Config& config, const AllocCommand& c) {
    if (c.persistent) {
        if (!c.capacity)
            throw Error(ExitCode::usage, "--persistent needs --capacity");
        const std::string body = "create_persistent" + key_value("name", c.persistent) +
                                 key_value("capacity", c.capacity) + key_value("pool", c.pool) +
                                 key_value("access", c.access) + key_value("type", c.type);
        const Request request = parse_synthesized(config, body, JobContext{});
        const PersistentCreate& create = request.create.at(0);
        AllocRequest r;
        r.persistent_name = create.name;
        r.user = lookup_user(c.owner.value_or("root"), UserGroups::skip);
        r.pool = create.pool;
        r.capacity = create.capacity;
        r.access = create.access;
        r.type = create.type;
        if (c.expires)
            r.expires = parse_local_time(*c.expires);
        r.wait = c.wait;
        return r;
    }
    if (!c.job_id)
        throw Error(ExitCode::usage, "give --job ID or --persistent NAME");
    if (!c.user)
        throw Error(ExitCode::usage, "--job needs --user (the job's user)");
    const User user = lookup_user(*c.user, UserGroups::skip);
    JobContext job = c.job;
    job.job_id = std::to_string(*c.job_id);
    job.user = user.name;
    job.uid = user.uid;
    Request request;
    if (c.text.script || c.text.bb || c.text.bbf) {
        request = parse_request(c.text, config, job);
        check_slurm_view(c.text, request, config);
    }
    // In datawarp mode the size is Slurm's alone (setup's): a job buffer line Slurm did not
    // count never gets space.
    if (config.mode == Mode::datawarp && !c.capacity) {
        if (request.job_buffer)
            throw Error(ExitCode::data,
                        "job " + job.job_id.value() + " asks for " +
                            format_size(request.job_buffer->capacity) + " (" +
                            to_string(request.job_buffer->where.origin) + " line " +
                            std::to_string(request.job_buffer->where.line) +
                            ") but Slurm granted no space (in datawarp mode the size is "
                            "setup's --capacity)");
        AllocRequest r = session_request(config, request, *c.job_id, user, c.pool);
        r.wait = c.wait;
        return r;
    }
    if (c.capacity || !request.job_buffer) {
        if (!c.capacity)
            throw Error(ExitCode::data,
                        "job " + job.job_id.value() +
                            " requests no capacity (give --capacity or a capacity= directive)");
        const Request line = parse_synthesized(
            config,
            "jobdw" + key_value("capacity", c.capacity) + key_value("pool", c.pool) +
                key_value("access_mode", c.access) + key_value("type", c.type),
            job);
        request.job_buffer = line.job_buffer;
    } else if (c.pool && *c.pool != request.job_buffer->pool) {
        throw Error(ExitCode::usage, "--pool " + *c.pool + " differs from the script's pool " +
                                         request.job_buffer->pool);
    }
    AllocRequest r = job_alloc_request(request, *c.job_id, user);
    r.wait = c.wait;
    if (c.node.has_value() != c.nodes.has_value())
        throw Error(ExitCode::usage, "--node and --nodes go together");
    const PoolConfig& pool = configured_pool(config, r.pool);
    if (pool.node_local) {
        const JobNodes nodes = c.node ? job_nodes(*c.node, *c.nodes) : this_host_alone();
        r.staging = staging_record(request, nodes);
        r.wait.reset();
        if (c.slurm_gres)
            check_granted(pool, r, *c.slurm_gres);
    } else if (c.node || c.slurm_gres) {
        // On a job's nodes only node-local pools are reserved: another pool's buffer there
        // would be one per node, outside Slurm's count (bbkit(7), NODE-LOCAL POOLS).
        throw Error(ExitCode::data, describe(r) + " asks for pool '" + r.pool +
                                        "', which is not node-local: a job's nodes reserve "
                                        "space in node-local pools only");
    }
    return r;
}

AllocResult allocate(StateStore& store, const Config& config, const AllocRequest& r,
                     const std::string& who) {
    const PoolConfig& pool = configured_pool(config, r.pool);
    if (r.capacity == 0 && !(r.job_id && config.mode == Mode::datawarp))
        throw Error(ExitCode::data, describe(r) + " requests no capacity");
    if (r.persistent_name) {
        check_persistent_name(*r.persistent_name);
        // In datawarp mode Slurm's create_persistent asks on behalf of a job's user: the
        // owner's rights count as for a job's directive, whoever runs the tool.
        check_may_manage_persistent(
            config, r.user,
            config.mode == Mode::datawarp ? PersistentRequest::job : PersistentRequest::command,
            "create");
    }
    const std::uint64_t allocated = round_up(r.capacity, pool.granularity);
    check_capacity_fits_at_all(pool, r, allocated);

    Reserved reserved = reserve(store, config, r, pool, allocated, who);
    Buffer& b = reserved.buffer;
    fault_point("alloc.reserved");
    if (reserved.existed)
        return AllocResult{b, buffer_dir_path(pool, b), true};

    std::optional<PoolDir>& dir = reserved.dir;
    // Synced here; a failure is reported by wait(), before the second transaction commits.
    PendingSync durable;
    try {
        durable = dir->create_buffer_dir(
            b.directory, b.uid, b.gid,
            reserved.resumed ? PoolDir::Creation::resume : PoolDir::Creation::fresh,
            buffer_limit(pool, *dir, b));
    } catch (const Error& e) {
        roll_back(store, config, b, e.what(), who);
        throw;
    }

    try {
        b = complete_allocation(store, config, b.key, reserved.uses, durable, who);
    } catch (const Error& e) {
        // A teardown that stopped waiting for this allocation ended the record meanwhile: the
        // directory made above belongs to no record now.
        if (ended_meanwhile(store, b.key)) {
            dir->remove_if_empty(b.directory);
            throw Error(ExitCode::no_input, describe(r) + ": buffer " + b.key.str() +
                                                " was torn down while it was being allocated");
        }
        if (durable.failed())  // as when the directory cannot be made at all
            roll_back(store, config, b, e.what(), who);
        throw;
    }
    return AllocResult{b, buffer_dir_path(pool, b), false};
}

std::optional<BufferLimit> buffer_limit(const PoolConfig& pool, const PoolDir& dir,
                                        const Buffer& buffer) {
    if (pool.quota == QuotaMode::none || !dir.limits_buffers())
        return std::nullopt;
    return BufferLimit{buffer_project(pool, buffer.record_id),
                       std::max<std::uint64_t>(buffer.allocated_bytes, 1)};
}

void release_buffer_limit(const PoolConfig& pool, const PoolDir& dir, const Buffer& buffer) {
    if (pool.quota == QuotaMode::none || buffer.record_id <= 0)
        return;
    try {
        dir.release_project(buffer_project(pool, buffer.record_id));
    } catch (const Error& e) {
        spdlog::warn("buffer {}: {}", buffer.key.str(), e.what());
    }
}

std::vector<std::pair<std::string, std::string>> resolve_persistent_uses(
    Transaction& txn, const Config& config, uid_t uid, const std::string& user,
    const std::vector<std::string>& names) {
    std::vector<std::pair<std::string, std::string>> found;
    for (const std::string& name : names) {
        const std::optional<Buffer> p =
            txn.find_buffer(BufferKey::persistent(config.cluster, name));
        if (!p || p->state != BufferState::allocated)
            throw Error(ExitCode::no_input,
                        "persistent buffer '" + name + "' does not exist" +
                            (p ? " (it is " + std::string(to_string(p->state)) + ")" : ""));
        if (uid != 0 && p->uid != uid)
            throw Error(ExitCode::no_perm, "persistent buffer '" + name + "' belongs to " +
                                               p->owner + ", not to " + user);
        found.emplace_back(name, configured_pool(config, p->pool).path + "/" + p->directory);
    }
    return found;
}

std::vector<std::string> recorded_persistent_uses(const Buffer& buffer) {
    return recorded_persistent_uses(buffer.staging);
}

Buffer complete_allocation(StateStore& store, const Config& config, const BufferKey& key,
                           const std::vector<std::pair<std::string, std::string>>& uses,
                           PendingSync& directory_durable, const std::string& who) {
    // Deferred: lost to a power cut, this leaves the state of alloc.dir-durable (recover rolls
    // it forward and rewrites the env files).
    WriteTransaction txn(store, who, WriteTransaction::Durability::deferred);
    txn.touch_pools();  // reserve() committed the space as `allocating` without publishing it
    Buffer b = txn.transition(key, BufferState::allocated);
    b.run_lock_holder.reset();
    txn.set_run_lock_holder(key, std::nullopt);
    for (const auto& use : uses) {
        Buffer p = txn.get_buffer(BufferKey::persistent(config.cluster, use.first));
        ++p.use_count;
        txn.update_buffer(p);
    }
    const PoolConfig& pool = configured_pool(config, b.pool);
    // Not fsync'd: recover rewrites env files from the records after a crash.
    if (key.kind() == BufferKind::job)
        write_env_files(store, key, job_environment(b, buffer_dir_path(pool, b), uses));
    fault_point("alloc.env-written");
    publish(txn, store, config);
    try {
        directory_durable.wait();  // `allocated` is never recorded before its directory is durable
    } catch (const Error&) {
        remove_env_files(store, key);
        throw;  // the transaction rolls back; .unsettled settles what publish wrote
    }
    fault_point("alloc.dir-durable");
    txn.commit();
    fault_point("alloc.done");
    audit(store.dir(), who, "alloc",
          "buffer=" + b.key.str() + " user=" + b.user + " pool=" + b.pool +
              " bytes=" + std::to_string(b.allocated_bytes));
    return b;
}

std::string job_environment(const Buffer& job, const std::string& buffer_path,
                            const std::vector<std::pair<std::string, std::string>>& persistent) {
    auto line = [](const std::string& key, const std::string& value) {
        if (value.find_first_of(std::string("\n\0", 2)) != std::string::npos)
            throw Error(ExitCode::data, "environment value of " + key + " holds a newline or NUL");
        return key + "=" + value + "\n";
    };
    std::string out;
    if (!is_session_only(job))
        out = line("BB_JOB_DIR", buffer_path) + line("DW_JOB_STRIPED", buffer_path) +
              line("DW_JOB_PRIVATE", buffer_path);
    for (const auto& [name, path] : persistent) {
        out += line("DW_PERSISTENT_STRIPED_" + persistent_variable_form(name), path);
    }
    return out;
}

namespace {

std::string base_name(const std::string& path) {
    return path.substr(path.rfind('/') + 1);
}

// The state directory's env/, opened beneath it without following a symlink: the state owner
// may rename it or put a symlink in its place while root writes there (bbkit(7), SECURITY), so
// root names its files only relative to this descriptor.
Fd open_env_dir(const StateStore& store) {
    const Fd state(::open(store.dir().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!state)
        throw system_error("cannot open the state directory " + store.dir(), errno);
    return open_beneath(state.get(), "env", O_RDONLY | O_DIRECTORY, store.path("env"));
}

}  // namespace

void write_env_files(const StateStore& store, const BufferKey& key, const std::string& text) {
    const Fd env = open_env_dir(store);
    const std::string own = base_name(buffer_environment_path(store.dir(), key));
    // The state owner and env/'s group (SlurmUser's, for burst_buffer.lua) read it; nobody else.
    replace_file_at(env.get(), own, text, 0640, store.path("env/" + own));
    if (key.kind() != BufferKind::job)
        return;
    // The job's name for the same file: a second file cost a data block written and, at
    // teardown, one freed. A new link under a temporary name takes the job's name in one rename.
    const std::string job = base_name(job_environment_path(store.dir(), key.cluster, key.job_id));
    const std::string tmp = job + ".new." + std::to_string(::getpid());
    ::unlinkat(env.get(), tmp.c_str(), 0);
    if (::linkat(env.get(), own.c_str(), env.get(), tmp.c_str(), 0) != 0 ||
        ::renameat(env.get(), tmp.c_str(), env.get(), job.c_str()) != 0) {
        const int err = errno;
        ::unlinkat(env.get(), tmp.c_str(), 0);
        throw system_error("cannot link " + store.path("env/" + job), err);
    }
}

std::optional<std::string> read_env_file(const std::string& path) {
    constexpr std::size_t max_env_file_bytes = 1 << 20;  // a few lines per buffer and use
    try {
        return read_file(path, path, max_env_file_bytes, O_NOFOLLOW);
    } catch (const Error&) {
        return std::nullopt;
    }
}

void remove_env_files(const StateStore& store, const BufferKey& key) {
    Fd env;
    try {
        env = open_env_dir(store);
    } catch (const Error&) {
        return;  // no env/ of root's to remove anything from
    }
    const std::string own = base_name(buffer_environment_path(store.dir(), key));
    if (key.kind() == BufferKind::job) {
        // The job's name is removed only while it is this buffer's file: a link to it, or (as
        // older versions wrote it) a copy with the same content.
        constexpr std::size_t limit = 1 << 20;
        const std::string job =
            base_name(job_environment_path(store.dir(), key.cluster, key.job_id));
        struct stat mine {};
        struct stat theirs {};
        const bool linked = ::fstatat(env.get(), own.c_str(), &mine, AT_SYMLINK_NOFOLLOW) == 0 &&
                            ::fstatat(env.get(), job.c_str(), &theirs, AT_SYMLINK_NOFOLLOW) == 0 &&
                            mine.st_ino == theirs.st_ino && mine.st_dev == theirs.st_dev;
        const auto read = [&](const std::string& name) -> std::optional<std::string> {
            try {
                return read_file_at(env.get(), name, name, limit, O_NOFOLLOW | O_NONBLOCK);
            } catch (const Error&) {
                return std::nullopt;
            }
        };
        if (linked) {
            ::unlinkat(env.get(), job.c_str(), 0);
        } else if (const std::optional<std::string> text = read(own); text && read(job) == text) {
            ::unlinkat(env.get(), job.c_str(), 0);
        }
    }
    ::unlinkat(env.get(), own.c_str(), 0);
}

std::string trash_name(const Buffer& buffer) {
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(buffer.created.time_since_epoch());
    return buffer.key.str() + "." + std::to_string(ns.count());
}

std::optional<std::string> cluster_of_entry(const std::string& subdir, const std::string& name,
                                            const std::string& own_cluster) {
    const auto cluster_of_key = [](const std::string& key) -> std::optional<std::string> {
        try {
            return parse_buffer_key(key).cluster;
        } catch (const Error&) {
            return std::nullopt;
        }
    };
    if (subdir == "job")
        return cluster_of_key(without_directory_token(name));
    if (subdir == "persistent") {  // CLUSTER.NAME[.TOKEN], NAME may hold '.' (buffer_key.hpp)
        if (name.size() > own_cluster.size() + 1 && starts_with(name, own_cluster + "."))
            return own_cluster;
        std::string plain = without_directory_token(name);
        if (plain.find('.') == std::string::npos)  // an older CLUSTER.NAME of a hex-like name
            plain = name;
        const std::size_t dot = plain.rfind('.');
        if (dot == std::string::npos || dot == 0)
            return std::nullopt;
        return plain.substr(0, dot);
    }
    if (subdir != "trash" && subdir != "quarantine")
        return std::nullopt;
    // A trash name is KEY.NANOSECONDS, then ".pieceN.INODE" for a piece; kept entries are
    // "TRASHNAME.kept.N.INODE" in quarantine/.
    std::string trashed = name;
    for (const char* suffix : {".kept.", ".piece"})
        if (const std::size_t at = trashed.find(suffix); at != std::string::npos)
            trashed.resize(at);
    const std::size_t dot = trashed.rfind('.');
    if (dot == std::string::npos)
        return std::nullopt;
    return cluster_of_key(trashed.substr(0, dot));
}

}  // namespace bbkit
