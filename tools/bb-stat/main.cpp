// bb-stat: shows pools and burst buffers as dwstat and `scontrol show burst` do, as JSON, and
// as Prometheus text for node_exporter's textfile collector.
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "bbkit/accounting.hpp"
#include "bbkit/config.hpp"
#include "bbkit/dws_render.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/history_render.hpp"
#include "bbkit/render.hpp"
#include "bbkit/stat_render.hpp"
#include "bbkit/stat_request.hpp"
#include "bbkit/task_environment.hpp"
#include "bbkit/text.hpp"
#include "bbkit/tool.hpp"
#include "bbkit/views.hpp"

namespace {

using namespace bbkit;

void print_json(const nlohmann::json& value) {
    std::cout << json_text(value) << '\n';
}

void print_view(const StatRequest& request, const StatusSnapshot& snapshot, const Config& config,
                bool json) {
    switch (request.view) {
        case StatView::pools:
            if (json)
                print_json(pools_json(snapshot.pools));
            else
                std::cout << pools_table(snapshot.pools);
            return;
        case StatView::buffers: {
            const auto now = std::chrono::system_clock::now();
            if (json)
                print_json(buffers_json(snapshot, now));
            else
                std::cout << buffers_table(snapshot, now);
            return;
        }
        case StatView::sessions:
            if (json)
                print_json(sessions_json(snapshot.buffers));
            else
                std::cout << sessions_table(snapshot.buffers);
            return;
        case StatView::instances:
            if (json)
                print_json(instances_json(snapshot.buffers));
            else
                std::cout << instances_table(snapshot.buffers);
            return;
        case StatView::configurations:
            if (json)
                print_json(configurations_json(snapshot.buffers));
            else
                std::cout << configurations_table(snapshot.buffers);
            return;
        case StatView::activations:
            if (json)
                print_json(activations_json(snapshot.buffers));
            else
                std::cout << activations_table(snapshot.buffers);
            return;
        case StatView::burst:
            if (json)
                print_json(burst_json(snapshot, config));
            else
                std::cout << burst_text(snapshot, config);
            return;
        case StatView::job:
        case StatView::env:
        case StatView::gres:
        case StatView::history:
            return;  // printed by run()
    }
}

// A node's node-local pools against Slurm's count of their GRES (bbkit(7), NODE-LOCAL POOLS,
// Counts agree): the table, its JSON, or the Gres= text that makes Slurm's count bbkit's
// (nothing when they agree).
void print_gres(const StatRequest& request, const StatusSnapshot& snapshot, const Config& config,
                const StatOptions& options) {
    const std::vector<GresCount> counts =
        gres_counts(snapshot, config, request.live_jobs, options.slurm_node_gres);
    if (options.slurm_update) {
        if (const auto text = gres_update_text(counts, *options.slurm_node_gres))
            std::cout << *text << '\n';
    } else if (options.json) {
        print_json(gres_json(counts));
    } else {
        std::cout << gres_table(counts);
    }
}

// What Slurm's burst_buffer/datawarp plugin reads from dw_wlm_cli (dws_render.hpp).
void print_dws(const StatRequest& request, const StatusSnapshot& snapshot,
               const std::optional<JobStatus>& job) {
    switch (request.view) {
        case StatView::pools:
            std::cout << dws_pools(snapshot.pools) << '\n';
            return;
        case StatView::sessions:
            std::cout << dws_sessions(snapshot.buffers) << '\n';
            return;
        case StatView::instances:
            std::cout << dws_instances(snapshot.buffers) << '\n';
            return;
        case StatView::configurations:
            std::cout << dws_configurations(snapshot.buffers) << '\n';
            return;
        case StatView::job:
            if (const std::string answer = dws_real_size(job->status.buffer); !answer.empty())
                std::cout << answer << '\n';
            return;
        default:
            return;  // refused by check_dws
    }
}

void print_job(const JobStatus& job, bool json) {
    const auto now = std::chrono::system_clock::now();
    if (json)
        print_json(job_json(job, now));
    else
        std::cout << job_text(job, now);
}

// Runs as the job's user on a compute node (a TaskProlog): the pools and the configuration
// only, never the state directory, which is the controller's.
int run_env(const Config& config, const StatRequest& request, const StatOptions& options) {
    const TaskEnvironment env = read_task_environment(config, request.job_id, geteuid());
    if (options.json)
        print_json(task_environment_json(env));
    else
        std::cout << task_environment_text(env, options.shell);
    return 0;
}

// The accounting of the range, and with --plot the picture of a pool's use (--pool, or the
// one pool configured).
int show_history(const Config& config, const StatRequest& request, const StatOptions& options) {
    const AccountingReport report = query_accounting(config, geteuid(), request.accounting);
    if (options.plot) {
        const std::string pool = plotted_pool(config, request.accounting);
        const PoolUse use = query_pool_use(config, geteuid(), pool, request.accounting.since,
                                           request.accounting.until, plot_slots);
        write_plot(*options.plot, pool_use_svg(use));
        if (standard_output("--plot", *options.plot))
            return 0;
    }
    if (options.json)
        print_json(history_json(report));
    else
        std::cout << history_text(report);
    return 0;
}

int show(const Config& config, const StatRequest& request, const StatOptions& options) {
    if (request.view == StatView::history)
        return show_history(config, request, options);
    const StatusAnswer answer = query_status(config, geteuid(), status_query(request, options));
    if (request.dwstat_view) {
        // DataWarp's dwstat, exactly: every table it is asked for from one snapshot read once
        // (Slurm gives `scontrol show dwstat` 2 s).
        std::cout << dwstat_text(*request.dwstat_view, answer.snapshot);
        return 0;
    }
    if (options.prometheus)
        write_prometheus(*options.prometheus, prometheus_text(answer.snapshot, config));
    if (!request.print_view)
        return 0;
    if (options.dws)
        print_dws(request, answer.snapshot, answer.job);
    else if (request.view == StatView::gres)
        print_gres(request, answer.snapshot, config, options);
    else if (answer.job)
        print_job(*answer.job, options.json);
    else
        print_view(request, answer.snapshot, config, options.json);
    return 0;
}

// --watch: the view again every N seconds, as watch(1) shows squeue, until interrupted; at a
// terminal each replaces the last, elsewhere each follows the last after a line with its time.
int watch(const Config& config, const StatRequest& request, const StatOptions& options) {
    const bool terminal = isatty(STDOUT_FILENO) == 1;
    for (;;) {
        const std::string time = slurm_time(std::chrono::system_clock::now());
        if (terminal)
            std::cout << "\033[H\033[2J";
        std::cout << "Every " << *options.watch << "s: bb-stat " << join(options.words, " ") << "  "
                  << time << "\n\n";
        show(config, request, options);
        std::cout << (terminal ? "" : "\n") << std::flush;
        sleep(*options.watch);
    }
}

int run(const CommonOptions& common, const StatOptions& options) {
    const StatRequest request = parse_stat_request(options);
    const Config config = load_effective_config(common);
    if (request.view == StatView::env)
        return run_env(config, request, options);
    if (options.watch)
        return watch(config, request, options);
    return show(config, request, options);
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{
        "bb-stat: show burst-buffer pools and buffers (dwstat tables, scontrol show burst, JSON, "
        "Prometheus)"};
    CommonOptions common;
    add_common_options(app, common, true);

    StatOptions options;
    app.add_option("VIEW", options.words,
                   "pools (default), buffers, sessions, instances, configurations, burst, job "
                   "ID, env ID, gres, or history");
    app.add_flag("--json", options.json, "Print the view as JSON");
    app.add_option("--watch", options.watch,
                   "Print the view again every SECONDS (1 to 3600) until interrupted, as watch(1) "
                   "does: at a terminal each replaces the last")
        ->type_name("SECONDS");
    app.add_flag("--dws", options.dws,
                 "Print the view as DataWarp's dw_wlm_cli answers Slurm's datawarp plugin: pools, "
                 "sessions, instances, configurations, or job ID (real_size)");
    app.add_flag("--dwstat", options.dwstat,
                 "Print the view exactly as DataWarp's dwstat did (pools, sessions, instances, "
                 "configurations, activations, or most and all for every table from one "
                 "snapshot): for scripts written for DataWarp and scontrol show dwstat");
    app.add_flag("--shell", options.shell,
                 "env: print export NAME='value' lines quoted for eval in sh");
    app.add_option("--for-uid", options.for_uid,
                   "Show only what user UID may see: with the PrivateData flag, their own "
                   "buffers (root and the state directory's owner see all). For a privileged "
                   "caller answering for a user, as burst_buffer.lua does for scontrol show "
                   "bbstat; it never shows more than the caller may see")
        ->type_name("UID");
    app.add_flag("--for-anyone", options.for_anyone,
                 "Show only what any user may see: with PrivateData, pools and no buffer. For a "
                 "caller that cannot tell who asks (scontrol show dwstat)");
    app.add_option("--slurm-jobs", options.slurm_jobs,
                   "gres: the jobs holding GRES on this node (squeue -h -w NODE -t "
                   "running,configuring,suspended -o %A; \"\" for none): their buffers are "
                   "in Slurm's count")
        ->type_name("IDS");
    app.add_option("--slurm-node-gres", options.slurm_node_gres,
                   "gres: this node's Gres= as scontrol show node prints it, to compare with")
        ->type_name("GRES");
    app.add_flag("--slurm-update", options.slurm_update,
                 "gres: print only the Gres= for scontrol update NodeName=NODE that makes "
                 "Slurm's counts bbkit's (nothing when they agree)");
    app.add_option("--since", options.since,
                   "history: from TIME (sacct's forms: YYYY-MM-DD[THH:MM[:SS]], "
                   "now[-COUNT[seconds|minutes|hours|days|weeks]], today, @SECONDS; default "
                   "today)")
        ->type_name("TIME");
    app.add_option("--until", options.until, "history: up to TIME (default now)")
        ->type_name("TIME");
    app.add_option("--by", options.by, "history: one row per user (the default) or per pool")
        ->type_name("user|pool");
    app.add_option("--user", options.user, "history: only this user's buffers")->type_name("NAME");
    app.add_option("--pool", options.pool, "history: only this pool's buffers")->type_name("POOL");
    add_file_option(app, common, "--plot", options.plot,
                    "history: draw the pool's use over the range (--pool, or the one pool) as "
                    "SVG to FILE, or to standard output for -; FILE must be new or a picture "
                    "bb-stat drew (refused through sudo)")
        ->type_name("FILE");
    add_file_option(app, common, "--prometheus", options.prometheus,
                    "Write metrics in Prometheus text format to FILE, atomically, or to standard "
                    "output for -; FILE must be new or a metrics file bb-stat wrote (prints the "
                    "view only when one is named; refused through sudo)")
        ->type_name("FILE");
    app.footer(
        "Views:\n"
        "  pools           dwstat's pool table: pool units quantity free gran (the default)\n"
        "  buffers         every live buffer: job, user, pool, size, state, age and the\n"
        "                  reason it is there (its place in the pool's queue, a stalled\n"
        "                  or failed stage, Slurm's reason); then each pool's waiting jobs\n"
        "  sessions        dwstat sessions: one per live buffer\n"
        "  instances       dwstat instances: one per live buffer with space\n"
        "  configurations  dwstat configurations: one per live buffer with space\n"
        "  activations     dwstat activations: configurations in use by running jobs\n"
        "  burst           the exact layout of Slurm's `scontrol show burst`\n"
        "  job ID          one job's buffer: state, Slurm reason, queue position, sizes\n"
        "                  (used: from its project quota, root only), directory,\n"
        "                  per-phase timings, staging progress\n"
        "  env ID          standalone mode, for a TaskProlog: the job's environment\n"
        "                  (BB_JOB_DIR, DW_JOB_STRIPED, ...) as export NAME=value lines,\n"
        "                  read from its pool's env/ as the job's user, without the state\n"
        "                  directory (--shell: quoted for eval)\n"
        "  gres            on a node: each node-local pool's GRES units, those held by no\n"
        "                  job of --slurm-jobs (kept buffers, persistent, trash), the count\n"
        "                  Slurm should hold (for a draining pool, only what its jobs hold)\n"
        "                  and with --slurm-node-gres Slurm's ('*': it differs);\n"
        "                  --slurm-update: only the Gres= that makes Slurm's count bbkit's\n"
        "  history         what each user (--by pool: each pool) held and staged from\n"
        "                  --since to --until: buffers, GiB-hours, stage-in and stage-out\n"
        "                  runs with size, files, mean and longest time, failed buffers\n"
        "                  (root and the state directory's owner; --plot: a pool's use)\n"
        "The state directory's owner and root read the database; other users read public/.\n");

    return run_tool("bb-stat", app, argc, argv, common,
                    [&]() -> int { return run(common, options); });
}
