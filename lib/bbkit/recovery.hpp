// After a crash, a reboot or at any time: recover finishes or undoes what dead processes left
// half done; check compares the records with the pool directories; repair quarantines what
// does not belong (it moves things aside and records it, and never deletes).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "bbkit/config.hpp"
#include "bbkit/store.hpp"

namespace bbkit {

// recover's per-state table (printed in bbkit(7)): for buffers whose owner died (free run lock
// and dead recorded holder), `pending` leaves the queue, `allocating` is rolled forward when
// its directory exists (its project quota set again) and back when not, `staging-in`/
// `staging-out` are marked interrupted (data kept; a rerun resumes), `teardown`/`deleting`/
// `teardown-fail` are finished; dead waiters leave the queue, a pool's env/ file whose job has
// no live buffer there is removed, trash/ is reaped within `reap_budget`, and project limits
// left for buffers whose space was released are removed (bbkit(7), CAPACITY). Never replays Slurm's
// own restart rules. Returns one line per action.
std::vector<std::string> recover(StateStore& store, const Config& config,
                                 std::chrono::milliseconds reap_budget, const std::string& who);

// What check can find, in no particular order (check's own is its functions' order).
enum class FindingKind {
    orphan_directory,    // a directory in job/ or persistent/ that no record names
    missing_directory,   // a buffer whose directory is gone
    orphan_trash,        // an entry in trash/ that no record names
    reaped_unrecorded,   // a trash record whose entry is gone, its space still charged
    interrupted,         // an operation whose process died (or what recover did about one)
    over_commit,         // used + trash beyond the pool's capacity
    expired_persistent,  // a persistent buffer past its expiry
    stale_queue,         // a queued request whose waiter is gone
    pool_unavailable,    // a pool whose directory does not open as itself
    usage_mismatch,      // pool_usage's total unlike the sum of the rows
    kept_entry,          // what a teardown kept aside in quarantine/ for an administrator
    stalled_stage,       // a stage-in or stage-out nobody runs: failed, or its stager died
    stale_environment,   // a job's env/ file in a pool where the job has no live buffer
    forged_record,       // a record root did not write (its seal does not match): left alone
    over_capacity,       // a buffer whose files take more than its allocated bytes
    stale_quota,         // a project limit left for a buffer that is gone, or of no record
    unlimited_buffer,    // a buffer of a pool with project quotas whose directory has none
    foreign_schema,      // state.db's schema is not bbkit's (an object another account added,
                         // removed or changed, or a version older than root sealed)
    gres_count,          // Slurm counts a node-local pool's GRES on this node unlike bbkit
};
// The name bb-pool check prints and its --json holds: "orphan-directory", "stale-queue", ...
const char* to_string(FindingKind kind);

struct Finding {
    FindingKind kind = FindingKind::interrupted;
    std::string pool;
    std::string subject;  // a buffer key, or a path relative to the pool
    std::string detail;
    bool repaired = false;
};

// Lists every inconsistency; with `repair`, quarantines orphan directories and trash entries,
// closes records whose directory is gone, runs recover for interrupted operations, and
// records each repair in the audit log. A store opened with tolerate_foreign_schema whose
// schema is foreign gets only its foreign-schema findings; with `repair`, state.db is rebuilt
// from its sealed records (StateStore::rebuild_from_sealed_records) and the rest of the check
// runs on the rebuilt one.
std::vector<Finding> check(StateStore& store, const Config& config, bool repair,
                           const std::string& who);

// With the jobs Slurm has on this node and the node's Gres= (bb-stat gres, --slurm-jobs and
// --slurm-node-gres; both or neither, else Error(usage)): a gres-count finding for each
// node-local pool whose GRES Slurm counts unlike bbkit (bbkit(7), NODE-LOCAL POOLS, Counts
// agree). Never repaired here: the node scripts set Slurm's count. None without both.
std::vector<Finding> gres_count_findings(StateStore& store, const Config& config,
                                         const std::optional<std::string>& slurm_jobs,
                                         const std::optional<std::string>& node_gres);

// bb-pool check's exit status: 1 when a finding is left unrepaired, else 0 (bb-pool(1), EXIT
// STATUS): a report for cron, as diff(1)'s 1 is, not an error.
int check_status(const std::vector<Finding>& findings);

}  // namespace bbkit
