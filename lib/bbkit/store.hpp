// The state: a SQLite database (state.db) in the state directory (state_dir.hpp: its owner,
// layout and lock) holding buffers, pools, queues and history. Every write happens inside a
// WriteTransaction, which holds <state>/lock (flock) and a SQLite write transaction; readers
// take a ReadSnapshot and never wait for writers. A kill -9 at any instant leaves the last
// committed state.
// Open a StateStore after fork(), never before: a SQLite connection must not cross a fork.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bbkit/buffer.hpp"
#include "bbkit/config.hpp"
#include "bbkit/store_schema.hpp"  // state_schema_version()

namespace bbkit {

struct StoreOptions {
    // How long a writer waits for <state>/lock before Error(temp_fail) naming the holder.
    std::chrono::milliseconds lock_timeout{10000};
    // For commands that only read (bb-stat, bb-pool list and show, bb-stage paths): nothing is
    // created or changed. A missing state directory or state.db is Error(no_input) naming it;
    // an older schema is Error(config) (any writing command migrates it); a WriteTransaction
    // is Error(software). See bbkit(7), STATE DIRECTORY.
    bool read_only = false;
    // bb-pool migrate: root may seal the rows of a database from before seals whose owner is
    // not root (bbkit(7), SECURITY). Refused all the same where root's ledger says it sealed
    // this state directory before.
    bool migrate_unsealed = false;
    // bb-pool check: a database whose schema root would refuse (a foreign object, a version
    // older than root sealed) is opened, with nothing migrated, so that foreign_schema() can
    // list why and rebuild_from_sealed_records() can replace it.
    bool tolerate_foreign_schema = false;
    // For a writing command (not read_only), where state.db holds a controller claim: unless
    // this host holds it, the store does not open (Error(unavailable), after waiting up to
    // timeouts.takeover seconds for this host's takeover, as WriteTransaction does), so that
    // a command of a host that does not hold the state directory changes nothing, in state.db
    // or in the pools. Only bb-pool takeover opens without (bbkit(7), STATE DIRECTORY).
    bool takes_over = false;
    // For a pass over many rows (bb-stat history): state.db is read with read() only, not
    // mapped, so that the process's memory is SQLite's page cache whatever the file's size.
    bool no_mmap = false;
};

// Which host may write a state directory that controllers share (bbkit(7), STATE DIRECTORY,
// "Controller failover"): the claim bb-pool takeover writes into state.db. `epoch` counts the
// takeovers. Once a claim exists, a process writes only while this host's ControllerToken is
// its epoch; without one (a single controller, or none took over yet) nothing is checked.
struct ControllerClaim {
    std::int64_t epoch = 0;
    std::string host;  // gethostname() of the taker, as it wrote it: printable() it
    TimePoint since{};
};

// "HOST (epoch N, since 2026-11-29 04:46:05)", the host printable().
std::string to_string(const ControllerClaim& claim);

// What StateStore::take_over did.
struct Takeover {
    std::optional<ControllerClaim> before;
    ControllerClaim now;
    bool changed = false;  // false: this host already held the current claim
};

// Whether this host may write the state directory (bb-pool takeover --holds): it holds the
// claim (its token is the claim's epoch), or there is no claim.
struct ClaimStatus {
    std::optional<ControllerClaim> claim;
    std::optional<std::int64_t> token;  // this host's, root's file: none for others
    bool holds = false;
};

struct PoolRecord {
    std::string name;
    std::string path;
    std::string uuid;  // from the pool's .bbkit-pool marker
    bool draining = false;
};

struct QueueEntry {
    std::int64_t seq = 0;  // FIFO order within a pool
    std::string pool;
    std::string key;  // BufferKey::str() of the request
    std::uint64_t requested_bytes = 0;
    ProcessId waiter;
    TimePoint enqueued{};
};

struct HistoryEntry {
    std::string key;
    std::optional<BufferState> from;  // none for the record's creation
    BufferState to = BufferState::allocating;
    TimePoint time{};
    std::string who;  // the WriteTransaction's holder, e.g. "bb-pool alloc"
    std::string reason;
};

// One stage-in or stage-out as it ended, kept for the accounting (bbkit(7), HISTORY AND
// ACCOUNTING): its files and bytes are what it moved, all of them or, failed, up to its last
// progress.
struct StageRun {
    bool stage_in = true;
    TimePoint started{};
    TimePoint ended{};
    std::uint64_t files = 0;
    std::uint64_t bytes = 0;
    bool failed = false;
};

// bb-stat history: what the buffers of each user or pool held and staged within [since, until).
enum class AccountingGroup { user, pool };
struct AccountingQuery {
    TimePoint since{};
    TimePoint until{};
    AccountingGroup by = AccountingGroup::user;
    std::optional<std::string> user;  // only this user's buffers
    std::optional<std::string> pool;  // only this pool's
};
struct StageTotals {
    std::uint64_t runs = 0;
    std::uint64_t failed = 0;
    std::uint64_t files = 0;
    std::uint64_t bytes = 0;
    double seconds = 0;      // all runs' time
    double max_seconds = 0;  // the longest run's
};
struct AccountingRow {
    std::string name;                  // the user's, or the pool's
    std::uint64_t buffers = 0;         // held space at some time within the range
    std::uint64_t failed_buffers = 0;  // of those, the ones with a failure recorded
    double byte_seconds = 0;           // their bytes times the time held within the range
    StageTotals in;                    // stage runs that ended within the range
    StageTotals out;
};

// What rebuild_from_sealed_records() carried into the new state.db.
struct RebuildResult {
    std::size_t carried = 0;   // buffer records sealed by root, carried whole
    std::size_t left_out = 0;  // rows whose seal did not match, left in the old file
    std::string unreadable;    // why no row of the old file could be read ("" when they could)
    std::string kept_as;       // the old state.db's new name in the state directory
};

struct BufferFilter {
    bool live_only = false;  // not complete or deleted
    std::optional<std::string> pool;
    std::optional<uid_t> uid;
    std::optional<BufferState> state;
    bool in_trash_only = false;  // final but not yet reaped: what the reaper works through
};

class StateStore {
  public:
    // Opens config.state_dir, creating it (mode 0711: others may reach public/ only) and its
    // subdirectories when missing, and state.db with the current schema. The directory must be
    // owned by config.state_owner and be neither readable nor writable by group or others (search
    // permission alone is allowed, so that non-owners can reach public/): otherwise Error(no_perm)
    // naming it and the fix. The caller must be the owner or root. A corrupt state.db is
    // Error(config). With options.read_only nothing is created (see StoreOptions).
    explicit StateStore(const Config& config, StoreOptions options = {});
    ~StateStore();
    StateStore(const StateStore&) = delete;
    StateStore& operator=(const StateStore&) = delete;

    const std::string& dir() const;
    std::string path(const std::string& relative) const;  // dir() + "/" + relative
    // Whether this connection syncs every commit now (synchronous=FULL); false only inside a
    // WriteTransaction opened with Durability::deferred. Only the unit tests ask: the setting
    // belongs to this connection, so nothing outside it can see that a deferred commit left it
    // FULL again, which the crash protocol relies on (ARCHITECTURE.md, Invariants).
    bool syncs_commits() const;

    // What root refused in this database's schema (one line each, naming the object), when it
    // was opened with tolerate_foreign_schema; empty otherwise.
    const std::vector<std::string>& foreign_schema() const;
    // How many rows of a database from before seals this open sealed (migrate_unsealed).
    std::size_t sealed_by_migration() const;

    // bb-pool check --repair of a foreign schema (bbkit(7), SECURITY): under the state lock,
    // writes a new state.db with bbkit's schema, the pools `pools` (from root's configuration
    // and the pools' markers; no drain flag) and every buffer record whose seal matches,
    // carried whole (nothing unsealed: no other row, no history, no queue), then moves the old
    // state.db (and its WAL) aside as state.db.foreign.TIME and puts the new one in its place.
    // Root with its key only, else Error(no_perm). This store reads the old file afterwards:
    // open a new StateStore.
    RebuildResult rebuild_from_sealed_records(const std::vector<PoolRecord>& pools,
                                              const std::string& who);

    // bb-pool takeover (bbkit(7), STATE DIRECTORY, "Controller failover"): makes this host the
    // state directory's only writer. Unless this host already holds the current claim, writes
    // a claim of the next epoch naming this host, then this host's ControllerToken; from that
    // commit on, every write of a process that held or waited for an older claim, here or on
    // any other host, is refused. Root only, else Error(no_perm). Error(config) when root's key
    // here is not the one that sealed the records (each controller needs the same key).
    Takeover take_over(const std::string& who);
    // bb-pool takeover --release (SlurmctldPrimaryOffProg): this host's token is forgotten, so
    // nothing on it writes until it takes the state directory over again. state.db is not
    // changed. Root only, else Error(no_perm).
    void release_controller();
    ClaimStatus claim_status();
    // The controller epoch whose run locks this process takes and looks at (bbkit(7), STATE
    // DIRECTORY, "Controller failover"): a writer's, the claim it writes under; a reader's, the
    // claim state.db holds now; none without a claim. A process of an older epoch, fenced, may
    // still hold its lock on a host cut off: the holder of the claim never waits for it.
    std::optional<std::int64_t> claim_epoch();

    struct Impl;  // store.cpp's; public only so that its helpers can name it

  private:
    std::unique_ptr<Impl> impl_;
    friend class Transaction;
    friend class WriteTransaction;
    friend class ReadSnapshot;
};

// Reads, common to both kinds of transaction. One transaction per StateStore at a time.
class Transaction {
  public:
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;

    std::optional<Buffer> find_buffer(const BufferKey& key);
    Buffer get_buffer(const BufferKey& key);  // Error(no_input) when there is none
    // The highest incarnation of that job, live or not.
    std::optional<Buffer> latest_job_buffer(const std::string& cluster, std::uint64_t job_id);
    // The record with that id (Buffer::record_id), whatever its state; none for a row whose
    // seal does not match (forged_records).
    std::optional<Buffer> find_buffer_by_record(std::int64_t record_id);
    std::uint32_t next_incarnation(const std::string& cluster, std::uint64_t job_id);
    std::vector<Buffer> list_buffers(const BufferFilter& filter = {});
    std::map<BufferState, std::size_t> count_by_state();

    // Derived from the buffer rows of this snapshot. used_bytes reads pool_usage, which
    // WriteTransaction updates in the statement sequence that changes a row's pool, state or
    // size (and recompute_used_bytes, for check --repair); summed_used_bytes sums the rows.
    std::uint64_t used_bytes(const std::string& pool);         // states that hold_space()
    std::uint64_t summed_used_bytes(const std::string& pool);  // the same, summed: O(live)
    std::uint64_t trash_bytes(const std::string& pool);        // final, not yet reaped
    std::uint64_t used_bytes_of_user(uid_t uid);               // all pools, states that hold space

    std::optional<PoolRecord> find_pool(const std::string& name);

    std::vector<QueueEntry> queue(const std::string& pool);  // FIFO order
    std::optional<QueueEntry> queue_head(const std::string& pool);
    std::optional<std::size_t> queue_position(const BufferKey& key);  // 1 = head
    std::size_t queue_length(const std::string& pool);

    std::vector<HistoryEntry> history(const BufferKey& key);  // oldest first

    // The accounting of `query` (bb-stat history), one row per user or pool with a buffer or
    // a stage run within the range, by name; a buffer still held counts as held until `now`.
    // Reads the records as the state owner keeps them (not the seals: root acts on none of it)
    // in one pass over the buffers held and one over the stage runs within the range, each
    // through its index, in memory bounded by the number of groups.
    std::vector<AccountingRow> accounting(const AccountingQuery& query, TimePoint now);
    // Each buffer of `pool` that held space within [since, until): from when to when (a buffer
    // still held: until `now`) and its allocated bytes, in no particular order, one row at a
    // time (bb-stat history --plot).
    void for_each_hold(const std::string& pool, TimePoint since, TimePoint until, TimePoint now,
                       const std::function<void(TimePoint, TimePoint, std::uint64_t)>& fn);

    // The claim of the controller that may write; none until a bb-pool takeover.
    std::optional<ControllerClaim> controller();

    // The rows whose seal does not match root's key (bbkit(7), SECURITY): root acts on none
    // of them (find_buffer refuses them with Error(no_perm), list_buffers leaves them out).
    // Their values are the forger's: report them, keep away from what they name, never act
    // on them. Empty unless this process checks seals (root, with a state owner not root).
    std::vector<Buffer> forged_records();

    // ---- read-only queries added for status views (lib/bbkit/status.*) ----
    // The part of used_bytes(pool) held by persistent buffers: Slurm does not own that space,
    // so slurm_bb_pools leaves it out of the pool's quantity.
    std::uint64_t persistent_used_bytes(const std::string& pool);
    // ---- end of status additions ----

  protected:
    explicit Transaction(StateStore& store);
    ~Transaction() = default;
    StateStore::Impl& impl_;
};

// A consistent snapshot (a deferred SQLite read transaction in WAL mode): takes no flock and
// never waits for a writer.
class ReadSnapshot : public Transaction {
  public:
    explicit ReadSnapshot(StateStore& store);
    ~ReadSnapshot();
};

// Holds <state>/lock (bounded wait; Error(temp_fail) "state directory ... is locked by pid N
// (who) since T") and a SQLite write transaction. Where state.db holds a controller claim, the
// transaction opens only for a process of the host that holds it (ControllerClaim): a process
// that began while this host held an older claim is refused at once, Error(unavailable); one
// that began
// while this host held none waits up to timeouts.takeover seconds for this host's takeover
// (Slurm starts a new primary's recovery hooks before its SlurmctldPrimaryOnProg), then is
// refused the same way. Nothing is visible to others until commit();
// the destructor rolls back an uncommitted transaction. The lock is released after commit.
class WriteTransaction : public Transaction {
  public:
    // How commit() makes the transaction durable. `now`: the WAL is synced before commit()
    // returns (synchronous=FULL). `deferred` is only for the last step of an operation whose
    // earlier, synced steps already let recover finish it (an `allocating` record whose
    // directory is durable rolls forward to allocated; a teardown whose directory is durably
    // in trash/ is finished): the commit is written to the WAL (synchronous=NORMAL, which
    // still syncs around checkpoints) and made durable by the next synced commit, so a power
    // cut may undo this step and leave what recover completes; a killed process loses nothing
    // (the kernel has the write). It saves one device flush per alloc and per teardown.
    enum class Durability { now, deferred };

    // `who` names the holder in lock messages and history: "bb-pool alloc".
    WriteTransaction(StateStore& store, std::string who, Durability durability = Durability::now);
    ~WriteTransaction();
    void commit();

    // Inserts a new record in state pending or allocating (its creation is recorded in
    // history). Error(exists) when that key has a record (a live one, for persistent names).
    void insert_buffer(Buffer& buffer);
    // Rewrites the record's fields except key, state, creation and transition times.
    // Error(software) if buffer.state differs from the stored state: use transition().
    void update_buffer(const Buffer& buffer);
    // check_transition(), then the new state, reason, message and entry time, plus a history
    // row. Error(no_input) for an unknown key, Error(data) for an illegal transition.
    Buffer transition(const BufferKey& key, BufferState to, const std::string& reason = "",
                      const std::string& message = "");
    // Records (or, with nullopt, clears) the process that works on the buffer, as
    // update_buffer() with only run_lock_holder changed would. Error(no_input) for an unknown key.
    void set_run_lock_holder(const BufferKey& key, const std::optional<ProcessId>& holder);
    // The buffer's directory has left trash/: its space stops counting. Only for final states.
    void mark_reaped(const BufferKey& key);
    // Keeps `run`, a stage of the buffer's that ended, for the accounting. Error(no_input) for an
    // unknown key.
    void record_stage_run(const BufferKey& key, const StageRun& run);

    // Inserts or updates (path, uuid) a pool; the draining flag of an existing row is kept.
    void put_pool(const PoolRecord& pool);
    // Sets pool_usage from the rows again (check --repair, after a finding of a mismatch).
    void recompute_used_bytes(const std::string& pool);
    void set_draining(const std::string& pool, bool draining);  // Error(no_input) if unknown

    // Appends to the pool's FIFO. Error(exists) when that key is already queued.
    QueueEntry enqueue(const std::string& pool, const BufferKey& key, std::uint64_t requested_bytes,
                       const ProcessId& waiter);
    bool dequeue(const BufferKey& key);  // false when it was not queued
    std::vector<QueueEntry> drop_dead_waiters();

    const std::string& who() const { return who_; }

    // What this transaction changed, so that publish() rewrites only those snapshots: the keys
    // (BufferKey::str()) of buffers inserted, updated, transitioned, reaped, queued or dequeued,
    // and the pools whose queue lost an entry (every request behind it moved up).
    const std::set<std::string>& touched_keys() const { return touched_keys_; }
    const std::set<std::string>& touched_queues() const { return touched_queues_; }

    // Whether this transaction changed what the pool views show (space held or in trash, a
    // queue, draining, a pool): publish() recomputes pools.json (a sum over every live buffer)
    // only then. touch_pools() marks a change that an earlier transaction committed without
    // publishing it.
    bool pools_touched() const { return pools_touched_; }
    void touch_pools() { pools_touched_ = true; }

  private:
    void restore_durability();
    // dequeue() by the key's text as the queue stores it: a row whose key does not parse (a
    // hand-edited database) is removed all the same.
    bool dequeue_text(const std::string& key);

    std::string who_;
    Durability durability_;
    bool committed_ = false;
    bool pools_touched_ = false;
    std::set<std::string> touched_keys_;
    std::set<std::string> touched_queues_;
};

}  // namespace bbkit
