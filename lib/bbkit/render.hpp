// How bbkit shows its values: stable JSON for scripts and short text for people.
// The JSON field names are documented in the man pages; change them only with them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bbkit/config.hpp"
#include "bbkit/directive.hpp"
#include "bbkit/file_system.hpp"
#include "bbkit/health.hpp"
#include "bbkit/pool.hpp"
#include "bbkit/reconcile.hpp"
#include "bbkit/recovery.hpp"
#include "bbkit/size.hpp"
#include "bbkit/sources.hpp"
#include "bbkit/stage.hpp"
#include "bbkit/store.hpp"
#include "bbkit/teardown.hpp"
#include "bbkit/views.hpp"

namespace bbkit {

// JSON text for output. Paths may hold bytes that are not UTF-8 (names are byte strings); JSON
// cannot, so such bytes print as U+FFFD instead of failing. Data that must survive byte for byte
// travels hex-encoded (see stage_plan).
std::string json_text(const nlohmann::json& value, int indent = 2);

// One column of a table for people.
struct Column {
    std::string header;
    // Every cell (the header too) is padded to this width, and a longer one overflows it, as
    // printf's %10s does; nullopt: the width of the column's widest cell.
    std::optional<std::size_t> width = std::nullopt;
    bool left = false;      // aligned left; right otherwise
    std::string gap = " ";  // what separates it from the column before
};
// The header line, then one line per row (one cell per column): every table bbkit prints,
// bb-pool list's and bb-stat's alike.
std::string text_table(const std::vector<Column>& columns,
                       const std::vector<std::vector<std::string>>& rows);

// bb-parse size: {"bytes", "nodes", "rounded", "text", "rounded_text"}.
nlohmann::json size_json(const Size& size, std::uint64_t rounded);
std::string size_text(const Size& size, std::uint64_t rounded);

nlohmann::json request_json(const Request& request);
std::string request_text(const Request& request);

nlohmann::json sources_json(const SourceTotals& totals);
std::string sources_text(const SourceTotals& totals);

// With `fs`, the state directory's file system too (JSON: state_dir_file_system, name and
// shared; text: a comment line "# state_dir file system: NAME (shared|local)"), which
// install-slurm reads (bbkit(7), STATE DIRECTORY).
nlohmann::json config_json(const Config& config, const FileSystemKind* fs = nullptr);
// The effective configuration as TOML that bbkit reads back unchanged.
std::string config_text(const Config& config, const FileSystemKind* fs = nullptr);

// bb-pool list / show: one row per pool.
std::string pool_list_text(const std::vector<PoolStatus>& pools);
// "pool P replaced (uuid U, was V): closed N buffers, released SIZE", one line per closed key.
std::string replace_text(const ReplaceResult& result);
// bb-stage paths --json: the KEY=VALUE lines as one object {"BB_JOB_DIR": "...", ...}.
nlohmann::json paths_json(const std::string& lines);
// "1 file", "2 files": `count` and the noun, plural unless it is one.
std::string counted(std::uint64_t count, const std::string& singular, const std::string& plural);

// bb-pool alloc: {"key", "job_id" | "name", "incarnation", "pool", "user", "requested",
// "allocated", "path", "state", "existed"}.
nlohmann::json alloc_json(const AllocResult& result);
std::string alloc_text(const AllocResult& result);

nlohmann::json findings_json(const std::vector<Finding>& findings);
std::string findings_text(const std::vector<Finding>& findings);

// bb-pool health: {"healthy", "pools", "draining", "faults": [{"subject", "problem"}]}; the text
// has a line per pool ("pool nvme: ok", "... draining") and one per fault ("SUBJECT: fault: ...").
nlohmann::json health_json(const HealthReport& report);
std::string health_text(const HealthReport& report);

// bb-pool reconcile: {"checked", "applied", "orphans": [{"key", "job_id", "user", "uid", "pool",
// "allocated", "state", "torn_down", "reason", "note"}]}.
nlohmann::json reconcile_json(const ReconcileResult& result, bool applied);
std::string reconcile_text(const ReconcileResult& result, bool applied);

// bb-teardown: {"found", "key", "reaped", "entries_removed", "note"}; the text ends with the
// entries removed, when there were any.
nlohmann::json teardown_json(const TeardownResult& result);
std::string teardown_text(const TeardownResult& result);

// bb-pool takeover: {"state_dir", "epoch", "host", "since", "changed", "before": null |
// {"epoch", "host", "since"}}; the text is one line ("took state directory D over as epoch N
// from HOST (epoch M, since T)", or "this host already holds D as epoch N").
nlohmann::json takeover_json(const Takeover& takeover, const std::string& state_dir);
std::string takeover_text(const Takeover& takeover, const std::string& state_dir);
// bb-pool takeover --holds: {"state_dir", "holds", "token", "claim": null | {...}}; one line.
nlohmann::json claim_status_json(const ClaimStatus& status, const std::string& state_dir);
std::string claim_status_text(const ClaimStatus& status, const std::string& state_dir);

// bb-pool reap: {"reaped", "remaining", "bytes_released", "entries_removed"}.
nlohmann::json reap_json(const ReapResult& result);
std::string reap_text(const ReapResult& result);
// "reaping POOL/TRASH-NAME: 1,234,567 entries removed", carriage-returned for a terminal.
std::string removal_progress_line(const RemovalProgress& progress);

// bb-stage in/out: {"key", "nothing_to_do", "files", "bytes", "skipped", "seconds", "mb_per_s",
// "warnings"}.
nlohmann::json stage_result_json(const StageResult& result);
nlohmann::json end_result_json(const EndResult& result);
std::string end_result_text(const EndResult& result);
std::string stage_result_text(const StageResult& result, const std::string& phase);
// "12,034/100,000 entries, 1.2MiB/9.8MiB, 3,400 entries/s, 2.1MiB/s, ETA 26 s (copying)": the
// counters, then each of the rates, the ETA and the phase that is known. Without `live` the
// counters only: the last record of a stage that ended or whose stager is gone has no pace.
std::string progress_text(const StagingProgress& progress, bool live = true);
// Where a stage's time went, one line: "walk 0.52 s, wait 0.01 s, copy 4.10 s, finish 0.30 s,
// sync 0.80 s; serial 0.07 s of 5.73 s (1.2%); workers idle 23% (8 threads)".
std::string phases_text(const MovePhases& phases);
// One carriage-returned progress bar line for a terminal, progress_text after the bar.
std::string progress_bar(const StagingProgress& progress);

}  // namespace bbkit
