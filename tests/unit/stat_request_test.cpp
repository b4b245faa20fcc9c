#include "bbkit/stat_request.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "bbkit/time_spec.hpp"
#include "code_of.hpp"

namespace bbkit {
namespace {

StatOptions words(std::vector<std::string> w) {
    StatOptions options;
    options.words = std::move(w);
    return options;
}

// The usage error `options` make, its message in `message`.
ExitCode refused(const StatOptions& options, std::string* message = nullptr) {
    return code_of([&] { parse_stat_request(options); }, message);
}

TEST(StatRequest, NoWordIsThePoolsViewNotNamed) {
    const StatRequest r = parse_stat_request(StatOptions{});
    EXPECT_EQ(r.view, StatView::pools);
    EXPECT_FALSE(r.explicit_view);
    EXPECT_FALSE(r.dwstat_view);
}

TEST(StatRequest, EveryViewByItsName) {
    const std::vector<std::pair<std::string, StatView>> views{
        {"pools", StatView::pools},
        {"sessions", StatView::sessions},
        {"instances", StatView::instances},
        {"configurations", StatView::configurations},
        {"activations", StatView::activations},
        {"burst", StatView::burst}};
    for (const auto& [name, view] : views) {
        const StatRequest r = parse_stat_request(words({name}));
        EXPECT_EQ(r.view, view) << name;
        EXPECT_TRUE(r.explicit_view) << name;
    }
}

TEST(StatRequest, JobAndEnvTakeOneJobId) {
    const StatRequest job = parse_stat_request(words({"job", "42"}));
    EXPECT_EQ(job.view, StatView::job);
    EXPECT_EQ(job.job_id, 42u);
    const StatRequest env = parse_stat_request(words({"env", "7"}));
    EXPECT_EQ(env.view, StatView::env);
    EXPECT_EQ(env.job_id, 7u);
}

TEST(StatRequest, HistoryDefaultsToTodayByUserAndReadsItsRange) {
    const TimePoint now = std::chrono::system_clock::from_time_t(1764000000);
    StatRequest r = parse_stat_request(words({"history"}), now);
    EXPECT_EQ(r.view, StatView::history);
    EXPECT_EQ(r.accounting.since, start_of_day(now));
    EXPECT_EQ(r.accounting.until, now);
    EXPECT_EQ(r.accounting.by, AccountingGroup::user);
    StatOptions options = words({"history"});
    options.since = "now-7days";
    options.until = "@1763990000";
    options.by = "pool";
    options.user = "alice";
    options.pool = "nvme";
    r = parse_stat_request(options, now);
    EXPECT_EQ(r.accounting.since, now - std::chrono::hours(24 * 7));
    EXPECT_EQ(r.accounting.until, std::chrono::system_clock::from_time_t(1763990000));
    EXPECT_EQ(r.accounting.by, AccountingGroup::pool);
    EXPECT_EQ(r.accounting.user, "alice");
    EXPECT_EQ(r.accounting.pool, "nvme");
}

// Every history option with every other view, and every option history does not take: 64.
TEST(StatRequest, HistoryOptionsGoWithHistoryAlone) {
    const std::vector<std::function<void(StatOptions&)>> history_options{
        [](StatOptions& o) { o.since = "today"; }, [](StatOptions& o) { o.until = "now"; },
        [](StatOptions& o) { o.by = "user"; },     [](StatOptions& o) { o.user = "alice"; },
        [](StatOptions& o) { o.pool = "nvme"; },   [](StatOptions& o) { o.plot = "x.svg"; }};
    for (const char* view : {"pools", "buffers", "sessions", "burst", "activations"})
        for (const auto& set : history_options) {
            StatOptions options = words({view});
            set(options);
            EXPECT_EQ(refused(options), ExitCode::usage) << view;
            options.words.clear();
            options.dwstat = true;
            EXPECT_EQ(refused(options), ExitCode::usage) << view;
        }
    const std::vector<std::function<void(StatOptions&)>> other_options{
        [](StatOptions& o) { o.prometheus = "-"; },
        [](StatOptions& o) { o.for_uid = 0; },
        [](StatOptions& o) { o.for_anyone = true; },
        [](StatOptions& o) { o.dws = true; },
        [](StatOptions& o) { o.shell = true; },
        [](StatOptions& o) { o.slurm_jobs = ""; },
        [](StatOptions& o) { o.by = "job"; },
        [](StatOptions& o) { o.since = "soon"; },
        [](StatOptions& o) {
            o.plot = "-";
            o.json = true;
        },
        [](StatOptions& o) {
            o.plot = "x.svg";
            o.watch = 5;
        },
        [](StatOptions& o) {
            o.since = "now";
            o.until = "now-1";
        }};
    for (const auto& set : other_options) {
        StatOptions options = words({"history"});
        set(options);
        EXPECT_EQ(refused(options), ExitCode::usage);
    }
    EXPECT_EQ(refused(words({"history", "extra"})), ExitCode::usage);
}

TEST(StatRequest, UnknownViewNamesTheViews) {
    std::string message;
    EXPECT_EQ(refused(words({"frobnicate"}), &message), ExitCode::usage);
    EXPECT_EQ(message,
              "unknown view 'frobnicate' (pools, buffers, sessions, instances, "
              "configurations, activations, burst, job ID, env ID, gres or history)");
    EXPECT_EQ(refused(words({"POOLS"})), ExitCode::usage);  // names are exact
    EXPECT_EQ(refused(words({"most"})), ExitCode::usage);   // dwstat's, with --dwstat only
}

TEST(StatRequest, ViewsOtherThanJobAndEnvTakeNoArgument) {
    std::string message;
    EXPECT_EQ(refused(words({"pools", "extra"}), &message), ExitCode::usage);
    EXPECT_EQ(message, "'pools' takes no argument, got 'extra'");
}

TEST(StatRequest, JobNeedsExactlyOneNumericId) {
    std::string message;
    EXPECT_EQ(refused(words({"job"}), &message), ExitCode::usage);
    EXPECT_EQ(message, "job needs exactly one job ID");
    EXPECT_EQ(refused(words({"env", "1", "2"})), ExitCode::usage);
    EXPECT_EQ(refused(words({"job", "abc"}), &message), ExitCode::usage);
    EXPECT_NE(message.find("'abc' is not a number"), std::string::npos) << message;
    EXPECT_EQ(refused(words({"job", " 7"})), ExitCode::usage);
    EXPECT_EQ(refused(words({"job", "99999999999999999999"})), ExitCode::usage);
}

TEST(StatRequest, OptionsGoWithTheirViewsOnly) {
    StatOptions shell = words({"pools"});
    shell.shell = true;
    std::string message;
    EXPECT_EQ(refused(shell, &message), ExitCode::usage);
    EXPECT_EQ(message, "--shell goes with the env view only");
    shell.words = {"env", "3"};
    EXPECT_EQ(parse_stat_request(shell).view, StatView::env);

    StatOptions env = words({"env", "3"});
    env.prometheus = "/tmp/metrics.prom";
    EXPECT_EQ(refused(env, &message), ExitCode::usage);
    EXPECT_EQ(message, "env takes neither --prometheus, --for-uid, --for-anyone nor --dws");
    env.prometheus.reset();
    env.for_uid = 1000;
    EXPECT_EQ(refused(env), ExitCode::usage);

    StatOptions both;
    both.for_uid = 1000;
    both.for_anyone = true;
    EXPECT_EQ(refused(both, &message), ExitCode::usage);
    EXPECT_EQ(message, "give --for-uid or --for-anyone, not both");
}

TEST(StatRequest, DwsShowsWhatDwWlmCliAnswers) {
    StatOptions dws = words({"job", "5"});
    dws.dws = true;
    EXPECT_EQ(parse_stat_request(dws).job_id, 5u);
    dws.words = {"burst"};
    std::string message;
    EXPECT_EQ(refused(dws, &message), ExitCode::usage);
    EXPECT_EQ(message, "--dws shows pools, sessions, instances, configurations or job ID");
    dws.words = {"sessions"};
    dws.json = true;
    EXPECT_EQ(refused(dws, &message), ExitCode::usage);
    EXPECT_EQ(message, "--dws goes with neither --json nor --prometheus");
}

TEST(StatRequest, DwstatTakesOneOfItsOwnViews) {
    StatOptions dwstat;
    dwstat.dwstat = true;
    EXPECT_EQ(parse_stat_request(dwstat).dwstat_view, "pools");
    for (const char* view : {"sessions", "activations", "most", "all"}) {
        dwstat.words = {view};
        EXPECT_EQ(parse_stat_request(dwstat).dwstat_view, view);
    }
    std::string message;
    dwstat.words = {"burst"};
    EXPECT_EQ(refused(dwstat, &message), ExitCode::usage);
    EXPECT_EQ(message,
              "unknown dwstat view 'burst' (pools, sessions, instances, configurations, "
              "activations, most or all)");
    dwstat.words = {"ses\nsions"};
    EXPECT_EQ(refused(dwstat, &message), ExitCode::usage);
    EXPECT_EQ(message.find('\n'), std::string::npos);  // printable: one line
    dwstat.words = {"sessions", "extra"};
    EXPECT_EQ(refused(dwstat, &message), ExitCode::usage);
    EXPECT_EQ(message, "--dwstat takes one view, got 'extra' too");
    dwstat.words = {"sessions"};
    dwstat.json = true;
    EXPECT_EQ(refused(dwstat), ExitCode::usage);
    dwstat.json = false;
    dwstat.for_uid = 0;
    dwstat.for_anyone = true;
    EXPECT_EQ(refused(dwstat), ExitCode::usage);
}

// gres (bbkit(7), NODE-LOCAL POOLS, Counts agree): the jobs Slurm has on the node are needed,
// its options go with no other view, and --slurm-update prints text for scontrol only.
TEST(StatRequest, GresNeedsSlurmsJobsAndItsOptionsGoWithItAlone) {
    StatOptions o = words({"gres"});
    EXPECT_EQ(refused(o), ExitCode::usage);
    o.slurm_jobs = "12\n7,7 9";
    const StatRequest r = parse_stat_request(o);
    EXPECT_EQ(r.view, StatView::gres);
    EXPECT_EQ(r.live_jobs, (std::set<std::uint64_t>{7, 9, 12}));
    o.slurm_update = true;
    EXPECT_EQ(refused(o), ExitCode::usage);  // without --slurm-node-gres
    o.slurm_node_gres = "bbnvme:1K";
    EXPECT_NO_THROW(parse_stat_request(o));
    o.json = true;
    EXPECT_EQ(refused(o), ExitCode::usage);
    o.json = false;
    for (auto bad : {"7_1", "x", "0", "7;8"}) {
        StatOptions b = o;
        b.slurm_jobs = bad;
        EXPECT_EQ(refused(b), ExitCode::usage) << bad;
    }
    StatOptions other = words({"pools"});
    other.slurm_jobs = "";
    EXPECT_EQ(refused(other), ExitCode::usage);
    StatOptions dwstat = words({"pools"});
    dwstat.dwstat = true;
    dwstat.slurm_node_gres = "bbnvme:1";
    EXPECT_EQ(refused(dwstat), ExitCode::usage);
    StatOptions prom = o;
    prom.prometheus = "/tmp/p";
    EXPECT_EQ(refused(prom), ExitCode::usage);
}

// ---- what is read for a request -------------------------------------------------------------

using Scope = StatusQuery::Scope;

// The query bb-stat makes for `options` (parse_stat_request first, as bb-stat does).
StatusQuery query(const StatOptions& options) {
    return status_query(parse_stat_request(options), options);
}

TEST(StatusQuery, ThePoolsViewReadsThePoolsAloneAndTheMetricsEverything) {
    const StatusQuery pools = query(StatOptions{});
    EXPECT_EQ(pools.scope, Scope::pools);
    EXPECT_FALSE(pools.job_id);
    EXPECT_FALSE(pools.project_usage);
    StatOptions metrics;
    metrics.prometheus = "/tmp/metrics.prom";
    const StatusQuery with_metrics = query(metrics);
    EXPECT_EQ(with_metrics.scope, Scope::all);
    EXPECT_TRUE(with_metrics.project_usage);
    for (const char* view : {"sessions", "instances", "configurations", "activations", "burst"})
        EXPECT_EQ(query(words({view})).scope, Scope::all) << view;
}

TEST(StatusQuery, AJobsViewReadsTheJobsBufferAloneUnlessMetricsAreWritten) {
    const StatusQuery job = query(words({"job", "42"}));
    EXPECT_EQ(job.scope, Scope::none);
    EXPECT_EQ(job.job_id, 42u);
    StatOptions metrics = words({"job", "42"});
    metrics.prometheus = "/tmp/metrics.prom";
    const StatusQuery with_metrics = query(metrics);
    EXPECT_EQ(with_metrics.scope, Scope::all);
    EXPECT_EQ(with_metrics.job_id, 42u);
    EXPECT_TRUE(with_metrics.project_usage);
}

TEST(StatusQuery, TheEnvViewReadsNoState) {
    const StatusQuery env = query(words({"env", "7"}));
    EXPECT_EQ(env.scope, Scope::none);
    EXPECT_FALSE(env.job_id);
}

TEST(StatusQuery, DwstatReadsThePoolsAloneOrEveryTableFromOneSnapshot) {
    StatOptions dwstat;
    dwstat.dwstat = true;
    EXPECT_EQ(query(dwstat).scope, Scope::pools);
    for (const char* view : {"sessions", "most", "all"}) {
        dwstat.words = {view};
        const StatusQuery q = query(dwstat);
        EXPECT_EQ(q.scope, Scope::all) << view;
        EXPECT_FALSE(q.job_id) << view;
        EXPECT_FALSE(q.project_usage) << view;
    }
}

TEST(StatusQuery, ForUidAndForAnyoneAreCarriedAsGiven) {
    StatOptions for_uid = words({"sessions"});
    for_uid.for_uid = 1017;
    EXPECT_EQ(query(for_uid).for_uid, 1017u);
    EXPECT_FALSE(query(for_uid).for_anyone);
    StatOptions for_anyone;
    for_anyone.dwstat = true;
    for_anyone.for_anyone = true;
    EXPECT_TRUE(query(for_anyone).for_anyone);
    EXPECT_FALSE(query(for_anyone).for_uid);
}

TEST(StatRequest, WithPrometheusAViewIsPrintedOnlyWhenNamed) {
    EXPECT_TRUE(parse_stat_request(StatOptions{}).print_view);
    StatOptions metrics;
    metrics.prometheus = "/tmp/metrics.prom";
    EXPECT_FALSE(parse_stat_request(metrics).print_view);
    metrics.words = {"pools"};
    EXPECT_TRUE(parse_stat_request(metrics).print_view);
}

}  // namespace
}  // namespace bbkit
