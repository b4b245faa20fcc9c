// What bb-stat, bb-pool list and Slurm's slurm_bb_pools see: pool and buffer status computed
// from one transaction (the state directory's owner and root) or read back from the snapshots
// publish() leaves in public/ (everyone else), and the JSON form those snapshots are written in.
// Rendering them for people is stat_render.hpp's; writing public/ is publish.hpp's.
//
// The JSON field names are documented in bb-stat(1); change them only with it.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bbkit/access.hpp"
#include "bbkit/buffer.hpp"
#include "bbkit/config.hpp"
#include "bbkit/pool_dir.hpp"
#include "bbkit/project_quota.hpp"
#include "bbkit/staging_progress.hpp"
#include "bbkit/store.hpp"

namespace bbkit {

// One configured pool, in bytes. free is the real free space (it stays so while the pool is
// not up: only the Slurm JSON reports 0 then).
struct PoolStatus {
    std::string name;
    std::string path;
    std::uint64_t total = 0;
    std::uint64_t used = 0;   // buffers that hold space (Transaction::used_bytes)
    std::uint64_t trash = 0;  // torn down, waiting for the reaper (Transaction::trash_bytes)
    std::uint64_t free = 0;   // max(0, total - used - trash)
    std::uint64_t granularity = 1;
    std::uint64_t persistent = 0;  // the part of `used` held by persistent buffers
    std::size_t queued = 0;
    bool draining = false;
    bool initialized = false;  // bb-pool init has recorded it in the state database
    std::string uuid;          // the recorded marker's UUID ("" before bb-pool init)
    // From the marker on disk when the snapshot was read (pool_availability()).
    PoolAvailability availability = PoolAvailability::uninitialised;
};

// A buffer as status views show it.
struct BufferStatus {
    Buffer buffer;
    std::string path;                           // absolute: pool path + "/" + directory
    std::optional<std::size_t> queue_position;  // pending buffers: 1 = head of the queue
    // The space its files take as its project quota counts it (bbkit(7), CAPACITY): known only
    // to root, for a pool that enforces project quotas, and only where read_project_usage or
    // job_status read it. Never published in public/.
    std::optional<std::uint64_t> used_bytes;
};

// Everything the views render; read from the database (owner) or from public/ (others).
struct StatusSnapshot {
    std::vector<PoolStatus> pools;      // configuration order
    std::vector<BufferStatus> buffers;  // live buffers (not complete or deleted), oldest first
    std::map<BufferState, std::size_t> counts;  // buffers per state
};

// One job's buffer with what `bb-stat job ID` adds to it.
struct JobStatus {
    BufferStatus status;
    std::optional<StagingProgress> progress;
};

// The largest snapshot or progress file a reader accepts; a larger one is Error(data).
constexpr std::size_t max_published_bytes = std::size_t{64} << 20;

// Per configured pool, in configuration order, with each pool's availability read from its
// marker now.
std::vector<PoolStatus> pool_status(Transaction& txn, const Config& config);
// `buffer` with its absolute path and, while pending, its place in its pool's queue.
BufferStatus buffer_status(Transaction& txn, const Config& config, Buffer buffer);
// Pools, live buffers and counts of all records, from one snapshot.
StatusSnapshot read_status(Transaction& txn, const Config& config);
// What a user who is not the state directory's owner may see: public/pools.json and every
// public/buffers/<uid>/<key>.json they may read, or with PrivateData their own only, from the
// directory their key names (public_directory_name). Availability is read from the markers again,
// as the caller may (the published one when the caller may not read a pool root).
// Error(unavailable) when nothing was published yet, Error(no_perm) when public/pools.json exists
// but may not be read, Error(data) when a file is not what publish() writes.
StatusSnapshot read_public_status(const Config& config, uid_t uid);

// Keeps what `viewer` may see of a snapshot (pool totals are everyone's; the counts become
// those of the buffers kept): for a privileged caller answering for a user (`scontrol show
// bbstat` runs as SlurmUser). Never shows more than the snapshot held.
void restrict_to_viewer(StatusSnapshot& snapshot, const Config& config, uid_t viewer);
// Keeps what any user may see, for a caller that cannot tell who asks (`scontrol show dwstat`
// passes no uid): everything, or with PrivateData the pools only.
void restrict_to_anyone(StatusSnapshot& snapshot, const Config& config);

// The newest incarnation of `job_id` in `cluster`, with staging progress (progress only when
// `state_dir` is given and readable) and, reading the database, its project usage. Error(no_input)
// "no burst buffer for job N", also when `viewer` is given and may not see it (the same answer:
// nobody learns it exists).
JobStatus job_status(Transaction& txn, const Config& config, std::uint64_t job_id,
                     std::optional<uid_t> viewer = std::nullopt);
JobStatus job_status(const StatusSnapshot& snapshot, const Config& config, std::uint64_t job_id,
                     std::optional<uid_t> viewer = std::nullopt);

// Fills BufferStatus::used_bytes of the buffers that hold space from their pools' project
// quotas (one quotactl per buffer; nothing for a pool without them or a caller who is not root).
void read_project_usage(StatusSnapshot& snapshot, const Config& config);

// ---- what a reader sees, read from where it may read ---------------------------------------

// What a reader asks of the state: bb-stat's views, its dwstat tables, its metrics.
struct StatusQuery {
    // What is read from the database: the pools alone (pool_status), the pools with the live
    // buffers and counts (read_status), or neither (one job's buffer alone, `job_id`).
    enum class Scope { none, pools, all };
    Scope scope = Scope::all;
    std::optional<std::uint64_t> job_id;  // also this job's buffer (job_status)
    bool project_usage = false;           // the buffers' project usage too (read_project_usage)
    std::optional<uid_t> for_uid;         // keep what this user may see (restrict_to_viewer)
    bool for_anyone = false;              // keep what any user may see (restrict_to_anyone)
};

struct StatusAnswer {
    StatusSnapshot snapshot;
    std::optional<JobStatus> job;  // when StatusQuery::job_id was given
};

// What `caller` may see of what `query` asks, decided in this one place: root and the state
// directory's owner (privileged_viewer) read the database, in one read-only snapshot; everyone
// else reads public/ (read_public_status, whatever the scope; project usage is root's) and
// never needs the database. Then only what `for_uid`, or anyone, may see is kept. A job's
// buffer asked for anyone is, with PrivateData, Error(no_input) "no burst buffer for job N", as
// for a job without one: nobody learns whether it has one. Errors as job_status, read_status
// and read_public_status give them (a reader's StateStore: no_input without a state directory).
StatusAnswer query_status(const Config& config, uid_t caller, const StatusQuery& query);

// <state>/progress/<key> (not in the database); nullopt when absent, unreadable or not a
// progress record (parse_progress_record).
std::optional<StagingProgress> read_progress(const std::string& state_dir, const BufferKey& key);

// Slurm's reason for a buffer: the recorded one (BurstBufferOperation after a failure), else
// BurstBufferResources while pending, BurstBufferStageIn while staging in, else "None".
std::string slurm_reason(const Buffer& buffer);

// Exactly what Slurm 22.05's slurm_bb_pools expects: {"pools":[{"id","quantity","granularity",
// "free"}]}, integers only, counted in granules. quantity = floor((total - persistent - trash)
// / granularity), free = floor((total - used - trash) / granularity), both clamped at 0, and
// free = 0 unless the pool is up: while it drains, before bb-pool init, or while it is
// unavailable (its marker missing or different). With no pools: {"pools":[]}.
std::string slurm_pools_json(const std::vector<PoolStatus>& pools);
std::string slurm_pools_json(Transaction& txn, const Config& config);

// ---- a node-local pool's GRES count (bbkit(7), NODE-LOCAL POOLS, Counts agree) -------------

// What Slurm should count of a node-local pool's GRES on this node, in units (granules).
struct GresCount {
    std::string pool;
    std::string gres;
    std::uint64_t units = 0;  // the pool's whole count (gres_count: gres.conf's)
    // Units no job Slurm has on the node holds through its GRES: buffers kept after their job
    // (a failed stage-out or teardown), persistent buffers, and trash/ not yet reaped.
    std::uint64_t held = 0;
    // units - held (0 at least): the count Slurm should hold; for a pool draining or not in
    // place, no more than its live jobs' buffers hold (no new buffer fits there)
    std::uint64_t count = 0;
    std::optional<std::uint64_t> slurm;  // Slurm's count of the node, when its GRES were given
    bool agrees() const { return !slurm || *slurm == count; }
};

// Each node-local pool's, in configuration order, from a snapshot with its buffers
// (read_status). `live_jobs`: the jobs Slurm has on this node now (running, configuring,
// completing, suspended), whose buffers Slurm counts through their GRES. `node_gres`: the node's
// Gres= as `scontrol show node` prints it (parse_node_gres), when known. Error(data) when it is
// malformed or holds more than one item of a pool's GRES (bbkit's is one untyped item).
std::vector<GresCount> gres_counts(const StatusSnapshot& snapshot, const Config& config,
                                   const std::set<std::uint64_t>& live_jobs,
                                   const std::optional<std::string>& node_gres);
// The node's Gres= for `scontrol update NodeName=... Gres=` with every pool's GRES at its
// count and every other GRES as it is (node_gres_text), a pool's GRES the text lacks added
// (Slurm prints none whose count is 0); nullopt when every count agrees.
std::optional<std::string> gres_update_text(const std::vector<GresCount>& counts,
                                            const std::string& node_gres);

// ---- the names in public/ (bbkit(7), FILES) ------------------------------------------------

// With PrivateData, public/buffers/ (mode 0711: nobody else lists it) holds, for each user who
// has had a buffer, their key file public_key_name (theirs, mode 0400, holding a seal.hpp user
// key) and the directory of their buffers' files, public_directory_name: a user_tag of their uid
// under that key, which only they and root can compute. Both stay once made, so that nothing
// another user can reach changes with that user's buffers.
std::string public_key_name(uid_t uid);  // "<uid>.key"
std::string public_directory_name(uid_t uid, const std::string& user_key);
// The key in `uid`'s key file in the open public/buffers/ (`dir`), when it is a regular file of
// theirs holding one; nullopt otherwise (missing, unreadable, someone else's, or changed by its
// user into something else). Never follows a symlink nor waits on a fifo.
std::optional<std::string> read_public_key(int buffers, const std::string& dir, uid_t uid);

// ---- the JSON of public/ and of --json ----------------------------------------------------

nlohmann::json pool_status_json(const PoolStatus& pool);
PoolStatus pool_status_from_json(const nlohmann::json& json);  // Error(data) when malformed
// The pools as public/pools.json, `bb-stat --json` and `bb-pool list --json` hold them.
nlohmann::json pools_json(const std::vector<PoolStatus>& pools);
nlohmann::json buffer_status_json(const BufferStatus& status);
BufferStatus buffer_status_from_json(const nlohmann::json& json);  // Error(data) when malformed

}  // namespace bbkit
