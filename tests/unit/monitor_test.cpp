#include "bbkit/monitor.hpp"

#include <gtest/gtest.h>

namespace bbkit {
namespace {

// What systemd 252 (Debian 12) prints for `systemctl show
// --property=Id,LoadState,ActiveState,Result UNIT...`: the properties in its own order, a blank
// line between units, Result only for units that have one.
const char* const systemctl_show =
    "Result=success\n"
    "Id=bbkit-reap.timer\n"
    "LoadState=loaded\n"
    "ActiveState=active\n"
    "\n"
    "Result=exit-code\n"
    "Id=bbkit-reap.service\n"
    "LoadState=loaded\n"
    "ActiveState=failed\n"
    "\n"
    "Result=success\n"
    "Id=bbkit-check.timer\n"
    "LoadState=loaded\n"
    "ActiveState=inactive\n"
    "\n"
    "Id=bbkit-reconcile.timer\n"
    "LoadState=not-found\n"
    "ActiveState=inactive\n";

TEST(Monitor, reads_systemctl_show_blocks) {
    const std::vector<UnitState> units = parse_unit_states(systemctl_show);
    ASSERT_EQ(units.size(), 4u);
    EXPECT_EQ(units[0].id, "bbkit-reap.timer");
    EXPECT_EQ(units[1].result, "exit-code");
    EXPECT_EQ(units[2].active_state, "inactive");
    EXPECT_EQ(units[3].load_state, "not-found");
    EXPECT_EQ(units[3].result, "");
    EXPECT_TRUE(parse_unit_states("").empty());
    EXPECT_EQ(parse_unit_states("\n\nId=x.timer\n\n\n").size(), 1u);
}

TEST(Monitor, a_stopped_timer_is_critical_a_missing_one_or_a_failed_run_a_warning) {
    const std::vector<MonitorItem> items = timer_items(parse_unit_states(systemctl_show));
    ASSERT_EQ(items.size(), 3u);
    EXPECT_EQ(items[0].state, MonitorState::warning);
    EXPECT_EQ(items[0].subject, "bbkit-reap.service");
    EXPECT_EQ(items[0].problem,
              "its last run failed (exit-code; journalctl -u bbkit-reap.service)");
    EXPECT_EQ(items[1].state, MonitorState::critical);
    EXPECT_EQ(items[1].problem,
              "loaded but inactive: nothing runs it (systemctl enable --now bbkit-check.timer)");
    EXPECT_EQ(items[2].state, MonitorState::warning);
    EXPECT_EQ(items[2].subject, "bbkit-reconcile.timer");
    // Every timer bbkit ships is asked for.
    EXPECT_EQ(bbkit_timers().size(), 4u);
}

TEST(Monitor, the_first_line_follows_the_plugin_convention) {
    MonitorReport report;
    report.pools = 2;
    report.live_buffers = 1;
    EXPECT_EQ(report.state(), MonitorState::ok);
    std::string text = monitor_text(report);
    EXPECT_EQ(text.substr(0, text.find('\n')),
              "BBKIT OK - 2 pools in service, 1 live buffer | pools=2 buffers=1 stalled=0 "
              "teardown_failed=0 findings=0");
    report.items = {{MonitorState::critical, "pool nvme", "not mounted"},
                    {MonitorState::warning, "stalled-stage main.5.1", "stage-in failed"},
                    {MonitorState::ok, "pool ssd", "draining"}};
    report.stalled_stages = 1;
    EXPECT_EQ(report.state(), MonitorState::critical);
    text = monitor_text(report);
    EXPECT_EQ(text.substr(0, text.find('\n')),
              "BBKIT CRITICAL - pool nvme: not mounted (and 1 more) | pools=2 buffers=1 "
              "stalled=1 teardown_failed=0 findings=0");
    EXPECT_NE(text.find("\nWARNING: stalled-stage main.5.1: stage-in failed\n"), std::string::npos);
    EXPECT_NE(text.find("\ntimers: checked\n"), std::string::npos);
    EXPECT_EQ(monitor_json(report)["state"], "CRITICAL");
    // Unknown ranks between warning and critical.
    report.items.push_back({MonitorState::unknown, "slurm", "squeue failed"});
    EXPECT_EQ(report.state(), MonitorState::critical);
    report.items.erase(report.items.begin());
    EXPECT_EQ(report.state(), MonitorState::unknown);
}

}  // namespace
}  // namespace bbkit
