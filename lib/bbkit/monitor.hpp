// bb-pool health --monitor: everything a monitoring system should watch, in one answer with the
// monitoring-plugin convention that Nagios, Icinga, Zabbix and Checkmk read (bbkit(7), HEALTH
// AND MONITORING): the node's health (pools, state directory, bb-mover), what bb-pool check
// finds (stalled stages, interrupted operations, counts that differ), buffers whose teardown
// failed, the systemd timers that keep bbkit tidy, and with Slurm the job buffers Slurm no
// longer knows.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bbkit/config.hpp"
#include "bbkit/health.hpp"
#include "bbkit/reconcile.hpp"
#include "bbkit/store.hpp"

namespace bbkit {

// The plugin convention's states, which are its exit statuses.
enum class MonitorState { ok = 0, warning = 1, critical = 2, unknown = 3 };
const char* to_string(MonitorState state);  // "OK", "WARNING", "CRITICAL", "UNKNOWN"
// From least to most: ok, warning, unknown (a part could not be checked), critical.
int severity(MonitorState state);

struct MonitorItem {
    MonitorState state = MonitorState::warning;
    std::string subject;  // "pool nvme", "stalled-stage main.5.1", "bbkit-reap.timer"
    std::string problem;  // one line
};

// A systemd unit as `systemctl show` describes it.
struct UnitState {
    std::string id;
    std::string load_state;    // "loaded", "not-found", ...
    std::string active_state;  // "active", "inactive", "failed", ...
    std::string result;        // "success", "exit-code", ...
};
// `systemctl show --property=Id,LoadState,ActiveState,Result UNIT...`'s output: a block of
// NAME=VALUE lines per unit, blocks separated by an empty line.
std::vector<UnitState> parse_unit_states(const std::string& text);

// bbkit's timers (share/bbkit/systemd) and what each finding about them means: a timer not
// loaded is not installed (warning: a site may run the commands otherwise), one loaded but not
// active runs nothing (critical), a service whose last run failed is a warning.
const std::vector<std::string>& bbkit_timers();
std::vector<MonitorItem> timer_items(const std::vector<UnitState>& units);

struct MonitorOptions {
    HealthScope health;
    // Ask systemd for the timers (only where it runs: /run/systemd/system exists).
    bool timers = true;
    // The job buffers Slurm no longer knows or lost (reconcile_slurm, without tearing down).
    SlurmJobs* slurm = nullptr;
};

struct MonitorReport {
    std::vector<MonitorItem> items;  // worst first
    std::size_t pools = 0;
    std::size_t live_buffers = 0;
    std::size_t stalled_stages = 0;
    std::size_t failed_teardowns = 0;
    std::size_t findings = 0;        // bb-pool check's
    std::string timers = "checked";  // or why they were not
    MonitorState state() const;      // the worst item's (severity); ok with none
};

// bb-pool health's options: --slurm and --no-timers (`extras`) go with --monitor only, else
// Error(usage).
void check_monitor_options(bool monitor, bool extras);

// Reads only (a snapshot and the directories bb-pool check reads); Slurm is asked when given
// (an answer it cannot give is an UNKNOWN item, not an error).
MonitorReport monitor(StateStore& store, const Config& config, const MonitorOptions& options);

// The plugin's output: "BBKIT STATE - summary | perfdata" on its first line, then one line per
// item, worst first.
std::string monitor_text(const MonitorReport& report);
// {"state", "items": [{"state", "subject", "problem"}], "pools", "live_buffers",
// "stalled_stages", "failed_teardowns", "findings", "timers"}
nlohmann::json monitor_json(const MonitorReport& report);

}  // namespace bbkit
