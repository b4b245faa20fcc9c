// What bb-stat, bb-pool list and Slurm's slurm_bb_pools see: pool and buffer status computed
// from one transaction, the snapshots published for readers who may not open the database,
// and their renderings (dwstat tables, `scontrol show burst`, JSON, Prometheus text).
//
// The JSON field names are documented in bb-stat(1); change them only with it.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bbkit/buffer.hpp"
#include "bbkit/config.hpp"
#include "bbkit/pool_dir.hpp"
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
};

// Everything the views render; read from the database (owner) or from public/ (others).
struct StatusSnapshot {
    std::vector<PoolStatus> pools;      // configuration order
    std::vector<BufferStatus> buffers;  // live buffers (not complete or deleted), oldest first
    std::map<BufferState, std::size_t> counts;  // buffers per state
};

// Staging progress, written by the stager to <state>/progress/<key> (not in the database).
struct StagingProgress {
    std::uint64_t files_done = 0;
    std::uint64_t files_total = 0;
    std::uint64_t bytes_done = 0;
    std::uint64_t bytes_total = 0;
};

// One job's buffer with what `bb-stat job ID` adds to it.
struct JobStatus {
    BufferStatus status;
    std::optional<StagingProgress> progress;
};

// Per configured pool, in configuration order, with each pool's availability read from its
// marker now.
std::vector<PoolStatus> pool_status(Transaction& txn, const Config& config);
// Pools, live buffers and counts of all records, from one snapshot.
StatusSnapshot read_status(Transaction& txn, const Config& config);
// What a user who is not the state directory's owner may see: public/pools.json and every
// public/buffers/<uid>/<key>.json they may read (only their own with PrivateData; directories
// they cannot enter are skipped). Availability is read from the markers again, as the caller
// may (the published one when the caller may not read a pool root). Error(unavailable) when nothing
// was published yet, Error(no_perm) when public/pools.json exists but may not be read, Error(data)
// when a file is not what publish() writes.
StatusSnapshot read_public_status(const Config& config, uid_t uid);

// Root and the state directory's owner: they read the database and see every buffer.
bool privileged_viewer(const Config& config, uid_t viewer);
// Slurm's PrivateData for burst buffers: with the PrivateData flag a user sees only their own
// buffers, root and the state directory's owner see all; without it everyone sees all.
bool may_see(const Config& config, uid_t viewer, const Buffer& buffer);
// Keeps what `viewer` may see of a snapshot (pool totals are everyone's; the counts become
// those of the buffers kept): for a privileged caller answering for a user (`scontrol show
// bbstat` runs as SlurmUser). Never shows more than the snapshot held.
void restrict_to_viewer(StatusSnapshot& snapshot, const Config& config, uid_t viewer);

// The newest incarnation of `job_id` in `cluster`, with staging progress (progress only when
// `state_dir` is given and readable). Error(no_input) "no burst buffer for job N", also when
// `viewer` is given and may not see it (the same answer: nobody learns it exists).
JobStatus job_status(Transaction& txn, const Config& config, std::uint64_t job_id,
                     std::optional<uid_t> viewer = std::nullopt);
JobStatus job_status(const StatusSnapshot& snapshot, const Config& config, std::uint64_t job_id,
                     std::optional<uid_t> viewer = std::nullopt);

// <state>/progress/<key>; nullopt when absent, unreadable or not the expected JSON object.
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

// Brings the snapshots up to date with what `txn` changed, in O(changes), not O(buffers):
// <state>/pools.json and public/pools.json (0644, rewritten only when their content changed),
// then public/buffers/<uid>/<key>.json (0644) of each key in txn.touched_keys() (and of the
// requests behind a dequeued one): written while the buffer is live, removed once it is final.
// Each <uid>/ directory is 0755 and owned like public/, or with PrivateData 0700 and owned by
// that uid (when the state directory belongs to root). Nothing is fsync'd: the snapshots are
// regenerated from state.db. When public/.settings (layout version, PrivateData, pool paths,
// boot id) does not match, it calls publish_all() instead. Writers call it inside each write
// transaction, before commit; the next publish repairs what a rollback leaves behind.
// Throws Error(io) / Error(no_perm).
void publish(WriteTransaction& txn, const StateStore& store, const Config& config);
// The full resync, O(live buffers): rewrites every live buffer's file, removes every other file
// and directory under public/buffers/ and layout 1's public/buffers*.json, then writes
// public/.settings.
void publish_all(WriteTransaction& txn, const StateStore& store, const Config& config);

// ---- renderings ----------------------------------------------------------------------------

// Slurm's time form in local time: 2021-08-11T10:13:38.
std::string slurm_time(TimePoint time);

nlohmann::json pool_status_json(const PoolStatus& pool);
PoolStatus pool_status_from_json(const nlohmann::json& json);  // Error(data) when malformed
nlohmann::json buffer_status_json(const BufferStatus& status);
BufferStatus buffer_status_from_json(const nlohmann::json& json);  // Error(data) when malformed

// dwstat's tables: right-aligned columns, sizes in Slurm's printed form.
std::string pools_table(const std::vector<PoolStatus>& pools);
std::string sessions_table(const std::vector<BufferStatus>& buffers);
std::string instances_table(const std::vector<BufferStatus>& buffers);
std::string configurations_table(const std::vector<BufferStatus>& buffers);
nlohmann::json sessions_json(const std::vector<BufferStatus>& buffers);
nlohmann::json instances_json(const std::vector<BufferStatus>& buffers);
nlohmann::json configurations_json(const std::vector<BufferStatus>& buffers);
// dwstat's state flags, e.g. "CA---" (see bb-stat(1)).
std::string dwstat_state(const Buffer& buffer);

// `scontrol show burst` of the lua plugin, byte for byte, with Name=bbkit.
std::string burst_text(const StatusSnapshot& snapshot, const Config& config);
nlohmann::json burst_json(const StatusSnapshot& snapshot, const Config& config);

// `bb-stat job ID`; `now` ends the current phase's duration.
std::string job_text(const JobStatus& job, TimePoint now);
nlohmann::json job_json(const JobStatus& job, TimePoint now);

// The text exposition format for node_exporter's textfile collector.
std::string prometheus_text(const StatusSnapshot& snapshot);

}  // namespace bbkit
