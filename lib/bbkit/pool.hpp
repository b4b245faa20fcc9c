// Capacity pools: initialising them, draining them, and reserving space for a buffer with
// the crash protocol of bbkit(7), CRASHES (record `allocating` -> directory -> `allocated`).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bbkit/buffer.hpp"
#include "bbkit/config.hpp"
#include "bbkit/directive.hpp"
#include "bbkit/pool_dir.hpp"
#include "bbkit/store.hpp"
#include "bbkit/user.hpp"

namespace bbkit {

// The pool's configuration, or Error(no_input) "unknown pool".
const PoolConfig& configured_pool(const Config& config, const std::string& name);

// Writes the pool's marker and subdirectories and records the pool (name, path, UUID).
// Idempotent. Error(unavailable) when the directory is missing.
PoolMarker init_pool(StateStore& store, const Config& config, const std::string& name,
                     const std::string& who);

struct ReplaceResult {
    PoolMarker marker;                // the new one
    std::string old_uuid;             // the one the state recorded
    std::vector<std::string> closed;  // BufferKey::str() of every record closed
    std::uint64_t bytes_released = 0;
};

// bb-pool init --replace (bb-pool(1)): for a pool whose file system was recreated, so that its
// marker is missing or carries another UUID than recorded. Under each live buffer's run lock
// and the state lock it closes every record of the pool (job buffers -> complete, persistent
// ones -> deleted, through the transition table; their space and trash released, env files
// removed, one audit line each, action=replace), writes a new marker and records it.
// Error(no_input) for an unknown pool; Error(unavailable) before bb-pool init, or while a
// buffer of the pool is being staged, torn down, allocated or waited for by a live process;
// Error(exists) when the recorded marker is in place or a buffer's directory still exists (the
// file system was not recreated: nothing is closed).
ReplaceResult replace_pool(StateStore& store, const Config& config, const std::string& name,
                           const std::string& who);

// Opens the pool's directory and checks it against the recorded marker (see PoolDir::open);
// Error(unavailable) "... is not initialised (run bb-pool init P)" before bb-pool init.
PoolDir open_pool(Transaction& txn, const Config& config, const std::string& name);

// No new allocations while draining (Error(unavailable)); existing buffers are untouched.
void set_draining(StateStore& store, const Config& config, const std::string& name, bool draining,
                  const std::string& who);

struct AllocRequest {
    std::optional<std::uint64_t> job_id;         // a job buffer, or
    std::optional<std::string> persistent_name;  // a persistent buffer
    User user;                                   // the job's user / the persistent owner
    std::string pool;
    std::uint64_t capacity = 0;  // bytes requested; rounded up to the pool's granularity
    std::string access = "striped";
    std::string type = "scratch";
    std::string staging = "{}";                // the parsed request (JSON text), for bb-stage
    std::vector<std::string> uses_persistent;  // persistent buffers the job uses
    std::optional<TimePoint> expires;          // persistent buffers
    // Standalone mode, short of space: join the pool's FIFO queue and wait this long.
    std::optional<std::chrono::milliseconds> wait;
};

// A job buffer request from a parsed job request: pool and capacity from its job buffer line,
// the staging lines and persistent uses recorded. Error(data) when it asks for no space.
AllocRequest job_alloc_request(const Request& request, std::uint64_t job_id, const User& user);

// What bb-pool alloc was told, before it is checked. The values go through the directive
// parser, so a size, pool, access or type from the command line obeys the same rules as one
// in a job script.
struct AllocCommand {
    std::optional<std::uint64_t> job_id;
    std::optional<std::string> persistent;
    std::optional<std::string> user;   // job buffers: the job's user (required)
    std::optional<std::string> owner;  // persistent buffers: the owner (default root)
    std::optional<std::string> pool;
    std::optional<std::string> capacity;
    std::optional<std::string> access;
    std::optional<std::string> type;
    std::optional<std::string> expires;  // YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS, local time
    RequestText text;                    // --script / --bb: the job's directives
    JobContext job;                      // symbols for the directives
    std::optional<std::chrono::milliseconds> wait;
    // A node-local pool's job buffer: this node and the job's nodes, comma-separated
    // (job_nodes.hpp); both or neither (then this host alone).
    std::optional<std::string> node;
    std::optional<std::string> nodes;
    // A node-local pool's job buffer under Slurm: the job's GRES per node as Slurm holds it
    // (squeue's TresPerNode, or a node's line of `scontrol show job -d`; slurm_gres.hpp). The
    // buffer may hold no more units of the pool's GRES: Slurm's allocation is the law.
    std::optional<std::string> slurm_gres;
};

// A node-local pool's buffer never waits in the pool's queue: Slurm placed the job where its
// GRES was free, so a shortage here is bbkit's count and Slurm's apart (75 at once). With
// --node, a pool that is not node-local is the job's error (Error(data), before anything is
// reserved), as is a request larger than `slurm_gres` grants (none granted included).
AllocRequest build_alloc_request(const Config& config, const AllocCommand& command);

// bb-pool alloc --wait's value: SECONDS (a non-negative number), "none" or "" (--wait alone)
// for no limit, or "default" for timeouts.queue (`queue_seconds`, what the standalone prologs
// use). Error(usage) naming the text otherwise.
std::chrono::milliseconds parse_wait(const std::string& seconds, unsigned queue_seconds);

// YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS] in local time; Error(usage) naming the text otherwise.
TimePoint parse_local_time(const std::string& text);

struct AllocResult {
    Buffer buffer;
    std::string path;              // absolute directory
    bool already_existed = false;  // an identical live buffer was returned (idempotent)
};

// Reserves the rounded capacity and creates the buffer's directory, owned by the user, mode
// 0700. An identical request for a live buffer returns it; a different one is Error(exists);
// a request after the buffer ended starts a new incarnation. Standalone mode, short of space:
// Error(temp_fail) with reason BurstBufferResources, or with `wait` the FIFO queue. Slurm
// mode never refuses for capacity (Slurm decided): an over-commit is logged and left to check.
// Larger than the pool's total: Error(data) "can never be satisfied". Draining or unmounted:
// Error(unavailable). Over limits.user_capacity (standalone): Error(temp_fail).
AllocResult allocate(StateStore& store, const Config& config, const AllocRequest& request,
                     const std::string& who);

// The project quota a buffer's directory gets when it is made (bbkit(7), CAPACITY): none when
// the pool has quota = "none" or runs without (quota_missing = "warn", which logs why); project
// buffer_project(), limit its allocated bytes (1 KiB for a session of 0 bytes, so that it holds
// nothing). Error(unavailable) for a pool that refuses to run without (require_pool_quota).
std::optional<BufferLimit> buffer_limit(const PoolConfig& pool, const PoolDir& dir,
                                        const Buffer& buffer);

// Removes the limit buffer_limit gave, once the buffer's directory is reaped and its space
// released; a failure is logged and left to bb-pool recover and check --repair.
void release_buffer_limit(const PoolConfig& pool, const PoolDir& dir, const Buffer& buffer);

// The persistent buffers a job uses, as (name, absolute path): each must exist, be allocated
// and belong to the user (root may use any). Error(no_input) / Error(no_perm) otherwise.
std::vector<std::pair<std::string, std::string>> resolve_persistent_uses(
    Transaction& txn, const Config& config, uid_t uid, const std::string& user,
    const std::vector<std::string>& names);

// The persistent buffers a job's recorded request uses (from Buffer::staging).
std::vector<std::string> recorded_persistent_uses(const Buffer& buffer);

// The last step of the alloc protocol, once the directory exists: `allocating` ->
// `allocated`, use counts of the persistent buffers used, the env file, pools.json. It checks
// `directory_durable` (the sync of the directory and its entry) before its commit; if that
// sync failed, nothing is committed, the env files are removed and the error is
// thrown (directory_durable.failed() then says so). Also how recover rolls an interrupted
// allocation forward.
Buffer complete_allocation(StateStore& store, const Config& config, const BufferKey& key,
                           const std::vector<std::pair<std::string, std::string>>& uses,
                           PendingSync& directory_durable, const std::string& who);

// The KEY=VALUE lines of a job buffer's environment: BB_JOB_DIR, DW_JOB_STRIPED,
// DW_JOB_PRIVATE (at `buffer_path`; none for a session without space, which a job that only
// uses persistent buffers has in datawarp mode), and DW_PERSISTENT_STRIPED_<name> for each
// persistent buffer used ('-' in names becomes '_'). Values are checked: no newline or NUL.
std::string job_environment(const Buffer& job, const std::string& buffer_path,
                            const std::vector<std::pair<std::string, std::string>>& persistent);

// Writes a buffer's env file and, for a job's, its job-level name (buffer_environment_path and
// job_environment_path, job_environment.hpp; not fsync'd: recover rewrites both).
void write_env_files(const StateStore& store, const BufferKey& key, const std::string& text);

// The content of an env file, or std::nullopt when it is missing or cannot be read.
std::optional<std::string> read_env_file(const std::string& path);

// Removes a buffer's env file, and the job-level copy when it still holds this incarnation's
// lines (a newer incarnation's copy stays).
void remove_env_files(const StateStore& store, const BufferKey& key);

// Where a buffer's directory goes in trash/: unique per record, even for a reused name.
std::string trash_name(const Buffer& buffer);

// The cluster an entry of a pool's job/, persistent/, trash/ or quarantine/ was named for by
// the names above (pieces and kept entries included); nullopt when its name names none (older
// directories, or anything else). Clusters sharing a pool leave each other's entries alone.
std::optional<std::string> cluster_of_entry(const std::string& subdir, const std::string& name,
                                            const std::string& own_cluster);

}  // namespace bbkit
