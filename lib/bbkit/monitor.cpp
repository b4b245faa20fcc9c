#include "bbkit/monitor.hpp"

#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "bbkit/error.hpp"
#include "bbkit/process.hpp"
#include "bbkit/recovery.hpp"
#include "bbkit/text.hpp"

namespace bbkit {

namespace {

// A finding that says bbkit cannot be trusted to work at all is critical; the rest need an
// administrator but leave the pools in service.
MonitorState finding_state(FindingKind kind) {
    switch (kind) {
        case FindingKind::pool_unavailable:
        case FindingKind::foreign_schema:
        case FindingKind::forged_record:
        case FindingKind::over_commit:
            return MonitorState::critical;
        default:
            return MonitorState::warning;
    }
}

// systemd runs here (sd_booted(3)'s rule).
bool systemd_running() {
    return access("/run/systemd/system", F_OK) == 0;
}

const char* systemctl_path() {
    return access("/usr/bin/systemctl", X_OK) == 0 ? "/usr/bin/systemctl" : "/bin/systemctl";
}

void add_timers(MonitorReport& report) {
    if (!systemd_running()) {
        report.timers = "not checked: systemd is not running here";
        return;
    }
    ProcessSpec spec;
    spec.path = systemctl_path();
    spec.args = {"show", "--property=Id,LoadState,ActiveState,Result"};
    for (const std::string& timer : bbkit_timers()) {
        spec.args.push_back(timer);
        spec.args.push_back(timer.substr(0, timer.size() - 6) + ".service");
    }
    spec.timeout = std::chrono::seconds(30);
    std::string text;
    spec.on_stdout_line = [&](const std::string& line) { text += line + "\n"; };
    const ProcessOutcome outcome = run_process(spec);
    if (outcome.exit_code != 0) {
        report.timers = "not checked: systemctl show failed";
        report.items.push_back({MonitorState::unknown, "timers",
                                "systemctl show failed: " + outcome.last_stderr_line});
        return;
    }
    const std::vector<MonitorItem> items = timer_items(parse_unit_states(text));
    report.items.insert(report.items.end(), items.begin(), items.end());
}

void add_slurm(MonitorReport& report, StateStore& store, const Config& config, SlurmJobs& slurm) {
    try {
        const ReconcileResult result =
            reconcile_slurm(store, config, slurm, false, "bb-pool health");
        for (const ReconcileEntry& entry : result.orphans)
            report.items.push_back(
                {MonitorState::warning,
                 std::string(to_string(entry.reason)) + " " + entry.buffer.key.str(),
                 "job " + std::to_string(entry.buffer.key.job_id) + "'s buffer in pool " +
                     entry.buffer.pool +
                     (entry.reason == OrphanReason::pending_in_slurm
                          ? ": Slurm lost it and the job waits for its space"
                          : ": Slurm no longer holds the job") +
                     " (bb-pool reconcile --slurm --apply)"});
    } catch (const Error& error) {
        report.items.push_back({MonitorState::unknown, "slurm", error.what()});
    }
}

}  // namespace

const char* to_string(MonitorState state) {
    switch (state) {
        case MonitorState::ok:
            return "OK";
        case MonitorState::warning:
            return "WARNING";
        case MonitorState::critical:
            return "CRITICAL";
        case MonitorState::unknown:
            break;
    }
    return "UNKNOWN";
}

std::vector<UnitState> parse_unit_states(const std::string& text) {
    std::vector<UnitState> units;
    UnitState unit;
    bool open = false;
    std::istringstream lines(text);
    std::string line;
    const auto close = [&] {
        if (open)
            units.push_back(unit);
        unit = UnitState{};
        open = false;
    };
    while (std::getline(lines, line)) {
        if (line.empty()) {
            close();
            continue;
        }
        const auto eq = line.find('=');
        if (eq == std::string::npos)
            continue;
        const std::string name = line.substr(0, eq);
        const std::string value = line.substr(eq + 1);
        open = true;
        if (name == "Id")
            unit.id = value;
        else if (name == "LoadState")
            unit.load_state = value;
        else if (name == "ActiveState")
            unit.active_state = value;
        else if (name == "Result")
            unit.result = value;
    }
    close();
    return units;
}

const std::vector<std::string>& bbkit_timers() {
    static const std::vector<std::string> timers{"bbkit-check.timer", "bbkit-metrics.timer",
                                                 "bbkit-reap.timer", "bbkit-reconcile.timer"};
    return timers;
}

std::vector<MonitorItem> timer_items(const std::vector<UnitState>& units) {
    std::vector<MonitorItem> items;
    for (const UnitState& unit : units) {
        const bool timer = ends_with(unit.id, ".timer");
        if (unit.load_state != "loaded") {
            if (timer)
                items.push_back({MonitorState::warning, unit.id,
                                 "not installed (" + unit.load_state +
                                     "): what it runs must be run some other way"});
            continue;
        }
        if (timer && unit.active_state != "active")
            items.push_back({MonitorState::critical, unit.id,
                             "loaded but " + unit.active_state +
                                 ": nothing runs it (systemctl enable --now " + unit.id + ")"});
        if (!timer && !unit.result.empty() && unit.result != "success")
            items.push_back(
                {MonitorState::warning, unit.id,
                 "its last run failed (" + unit.result + "; journalctl -u " + unit.id + ")"});
    }
    return items;
}

// How bad a state is: unknown (a part could not be checked) above warning, below critical.
int severity(MonitorState state) {
    switch (state) {
        case MonitorState::ok:
            return 0;
        case MonitorState::warning:
            return 1;
        case MonitorState::unknown:
            return 2;
        case MonitorState::critical:
            break;
    }
    return 3;
}

MonitorState MonitorReport::state() const {
    MonitorState worst = MonitorState::ok;
    for (const MonitorItem& item : items)
        if (severity(item.state) > severity(worst))
            worst = item.state;
    return worst;
}

void check_monitor_options(bool monitor, bool extras) {
    if (extras && !monitor)
        throw Error(ExitCode::usage, "--slurm and --no-timers go with --monitor");
}

MonitorReport monitor(StateStore& store, const Config& config, const MonitorOptions& options) {
    MonitorReport report;
    const HealthReport health = check_health(store, config, options.health);
    report.pools = health.pools.size();
    for (const HealthFault& fault : health.faults)
        report.items.push_back({MonitorState::critical, fault.subject, fault.problem});
    for (const std::string& pool : health.draining)
        report.items.push_back(
            {MonitorState::ok, "pool " + pool, "draining (bb-pool resume " + pool + " ends it)"});
    const std::vector<Finding> findings = check(store, config, false, "bb-pool health");
    report.findings = findings.size();
    for (const Finding& finding : findings) {
        if (finding.kind == FindingKind::stalled_stage)
            ++report.stalled_stages;
        report.items.push_back({finding_state(finding.kind),
                                std::string(to_string(finding.kind)) + " " + finding.subject,
                                finding.detail});
    }
    {
        ReadSnapshot txn(store);
        BufferFilter live;
        live.live_only = true;
        for (const Buffer& b : txn.list_buffers(live)) {
            ++report.live_buffers;
            if (b.state == BufferState::teardown_fail) {
                ++report.failed_teardowns;
                report.items.push_back(
                    {MonitorState::warning, "teardown-fail " + b.key.str(),
                     (b.failure.empty() ? std::string("its teardown failed") : b.failure) +
                         " (bb-teardown again, or bb-pool check --repair)"});
            }
        }
    }
    if (options.timers)
        add_timers(report);
    else
        report.timers = "not checked (--no-timers)";
    if (options.slurm)
        add_slurm(report, store, config, *options.slurm);
    std::stable_sort(report.items.begin(), report.items.end(),
                     [](const MonitorItem& a, const MonitorItem& b) {
                         return severity(a.state) > severity(b.state);
                     });
    return report;
}

std::string monitor_text(const MonitorReport& report) {
    std::ostringstream out;
    const MonitorState state = report.state();
    out << "BBKIT " << to_string(state) << " - ";
    std::size_t problems = 0;
    for (const MonitorItem& item : report.items)
        if (item.state != MonitorState::ok)
            ++problems;
    if (problems == 0)
        out << report.pools << " pool" << (report.pools == 1 ? "" : "s") << " in service, "
            << report.live_buffers << " live buffer" << (report.live_buffers == 1 ? "" : "s");
    else
        out << report.items.front().subject << ": " << report.items.front().problem
            << (problems > 1 ? " (and " + std::to_string(problems - 1) + " more)" : "");
    out << " | pools=" << report.pools << " buffers=" << report.live_buffers
        << " stalled=" << report.stalled_stages << " teardown_failed=" << report.failed_teardowns
        << " findings=" << report.findings << '\n';
    for (const MonitorItem& item : report.items)
        out << to_string(item.state) << ": " << item.subject << ": " << item.problem << '\n';
    out << "timers: " << report.timers << '\n';
    return out.str();
}

nlohmann::json monitor_json(const MonitorReport& report) {
    nlohmann::json items = nlohmann::json::array();
    for (const MonitorItem& item : report.items)
        items.push_back({{"state", to_string(item.state)},
                         {"subject", item.subject},
                         {"problem", item.problem}});
    return {{"state", to_string(report.state())},
            {"items", items},
            {"pools", report.pools},
            {"live_buffers", report.live_buffers},
            {"stalled_stages", report.stalled_stages},
            {"failed_teardowns", report.failed_teardowns},
            {"findings", report.findings},
            {"timers", report.timers}};
}

}  // namespace bbkit
