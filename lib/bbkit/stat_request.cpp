#include "bbkit/stat_request.hpp"

#include <algorithm>
#include <utility>

#include "bbkit/accounting.hpp"
#include "bbkit/buffer_key.hpp"
#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/slurm_gres.hpp"
#include "bbkit/stat_render.hpp"
#include "bbkit/time_spec.hpp"

namespace bbkit {
namespace {

StatRequest parse_words(const std::vector<std::string>& words) {
    StatRequest request;
    if (words.empty())
        return request;
    request.explicit_view = true;
    const std::string& word = words[0];
    const std::vector<std::pair<std::string, StatView>> views{
        {"pools", StatView::pools},
        {"buffers", StatView::buffers},
        {"sessions", StatView::sessions},
        {"instances", StatView::instances},
        {"configurations", StatView::configurations},
        {"activations", StatView::activations},
        {"burst", StatView::burst},
        {"job", StatView::job},
        {"env", StatView::env},
        {"gres", StatView::gres},
        {"history", StatView::history}};
    const auto known = std::find_if(views.begin(), views.end(),
                                    [&](const auto& view) { return view.first == word; });
    if (known == views.end())
        throw Error(ExitCode::usage, "unknown view '" + word +
                                         "' (pools, buffers, sessions, instances, "
                                         "configurations, activations, burst, job ID, env ID, "
                                         "gres or history)");
    request.view = known->second;
    if (request.view != StatView::job && request.view != StatView::env) {
        if (words.size() > 1)
            throw Error(ExitCode::usage,
                        "'" + word + "' takes no argument, got '" + words[1] + "'");
        return request;
    }
    if (words.size() != 2)
        throw Error(ExitCode::usage, word + " needs exactly one job ID");
    request.job_id = parse_job_id(words[1], "job ID");
    return request;
}

// DataWarp's dwstat takes one of its own views: most and all, but no burst, job or env.
StatRequest parse_dwstat(const StatOptions& options) {
    if (options.json || options.dws || options.shell || options.prometheus || options.slurm_jobs ||
        options.slurm_node_gres || options.slurm_update || options.since || options.until ||
        options.by || options.user || options.pool || options.plot)
        throw Error(ExitCode::usage,
                    "--dwstat goes with neither --json, --dws, --shell, --prometheus nor the "
                    "gres and history views' options");
    if (options.for_uid && options.for_anyone)
        throw Error(ExitCode::usage, "give --for-uid or --for-anyone, not both");
    if (options.words.size() > 1)
        throw Error(ExitCode::usage,
                    "--dwstat takes one view, got '" + printable(options.words[1]) + "' too");
    const std::string view = options.words.empty() ? "pools" : options.words[0];
    const std::vector<std::string>& views = dwstat_views();
    if (std::find(views.begin(), views.end(), view) == views.end())
        throw Error(ExitCode::usage, "unknown dwstat view '" + printable(view) +
                                         "' (pools, sessions, instances, configurations, "
                                         "activations, most or all)");
    StatRequest request;
    request.explicit_view = !options.words.empty();
    request.dwstat_view = view;
    return request;
}

// --dws prints what dw_wlm_cli answers Slurm's datawarp plugin, for the views it asks for.
void check_dws(const StatRequest& request, const StatOptions& options) {
    if (!options.dws)
        return;
    if (options.json || options.prometheus)
        throw Error(ExitCode::usage, "--dws goes with neither --json nor --prometheus");
    const StatView v = request.view;
    if (v != StatView::pools && v != StatView::sessions && v != StatView::instances &&
        v != StatView::configurations && v != StatView::job)
        throw Error(ExitCode::usage,
                    "--dws shows pools, sessions, instances, configurations or job ID");
}

// gres (bbkit(7), NODE-LOCAL POOLS, Counts agree) needs the jobs Slurm has on the node, and
// its options go with no other view.
StatRequest check_gres(StatRequest request, const StatOptions& options) {
    const bool gres_options = options.slurm_jobs || options.slurm_node_gres || options.slurm_update;
    if (request.view != StatView::gres) {
        if (gres_options)
            throw Error(ExitCode::usage,
                        "--slurm-jobs, --slurm-node-gres and --slurm-update go with the gres "
                        "view only");
        return request;
    }
    if (options.prometheus || options.for_uid || options.for_anyone || options.dws)
        throw Error(ExitCode::usage,
                    "gres takes neither --prometheus, --for-uid, --for-anyone nor --dws");
    if (!options.slurm_jobs)
        throw Error(ExitCode::usage,
                    "gres needs --slurm-jobs: the jobs holding GRES on this node (squeue -h "
                    "-w NODE -t running,configuring,suspended -o %A; \"\" for none)");
    if (options.slurm_update && (!options.slurm_node_gres || options.json))
        throw Error(ExitCode::usage,
                    "--slurm-update needs --slurm-node-gres and goes without --json");
    request.live_jobs = parse_job_ids(*options.slurm_jobs);
    return request;
}

// history (bbkit(7), HISTORY AND ACCOUNTING) reads state.db for its range: its options go with
// no other view, and it goes with none of the options that answer Slurm or a user.
StatRequest check_history(StatRequest request, const StatOptions& options, TimePoint now) {
    const bool history_options = options.since || options.until || options.by || options.user ||
                                 options.pool || options.plot;
    if (request.view != StatView::history) {
        if (history_options)
            throw Error(ExitCode::usage,
                        "--since, --until, --by, --user, --pool and --plot go with the history "
                        "view only");
        return request;
    }
    if (options.prometheus || options.for_uid || options.for_anyone || options.dws)
        throw Error(ExitCode::usage,
                    "history takes neither --prometheus, --for-uid, --for-anyone nor --dws");
    AccountingQuery& query = request.accounting;
    query.since = options.since ? parse_time_spec(*options.since, now) : start_of_day(now);
    query.until = options.until ? parse_time_spec(*options.until, now) : now;
    check_range(query.since, query.until);
    if (options.by && *options.by != "user" && *options.by != "pool")
        throw Error(ExitCode::usage,
                    "--by takes user or pool, got '" + printable(*options.by) + "'");
    query.by = options.by && *options.by == "pool" ? AccountingGroup::pool : AccountingGroup::user;
    query.user = options.user;
    query.pool = options.pool;
    if (options.plot && options.watch)
        throw Error(ExitCode::usage, "--plot writes one picture: it goes without --watch");
    if (options.plot && standard_output("--plot", *options.plot) && options.json)
        throw Error(ExitCode::usage,
                    "--plot - writes the picture to standard output: it goes without --json");
    return request;
}

// --watch refreshes a view for a person at a terminal, as watch(1) does squeue: one to 3600 s,
// and neither for what programs read once (--dws, --dwstat, --prometheus) nor the env and gres
// views, which answer a script.
void check_watch(const StatRequest& request, const StatOptions& options) {
    if (!options.watch)
        return;
    if (*options.watch < 1 || *options.watch > 3600)
        throw Error(ExitCode::usage,
                    "--watch takes 1 to 3600 seconds, got " + std::to_string(*options.watch));
    if (options.dws || options.dwstat || options.prometheus || request.view == StatView::env ||
        request.view == StatView::gres)
        throw Error(ExitCode::usage,
                    "--watch goes with neither --dws, --dwstat, --prometheus nor the env and "
                    "gres views");
}

}  // namespace

StatRequest parse_stat_request(const StatOptions& options, TimePoint now) {
    if (options.dwstat) {
        const StatRequest request = parse_dwstat(options);
        check_watch(request, options);
        return request;
    }
    StatRequest request = parse_words(options.words);
    if (options.shell && request.view != StatView::env)
        throw Error(ExitCode::usage, "--shell goes with the env view only");
    if (request.view == StatView::env &&
        (options.prometheus || options.for_uid || options.for_anyone || options.dws))
        throw Error(ExitCode::usage,
                    "env takes neither --prometheus, --for-uid, --for-anyone nor --dws");
    if (options.for_uid && options.for_anyone)
        throw Error(ExitCode::usage, "give --for-uid or --for-anyone, not both");
    check_dws(request, options);
    request = check_gres(request, options);
    request = check_history(request, options, now);
    if (options.prometheus && standard_output("--prometheus", *options.prometheus) &&
        request.explicit_view)
        throw Error(ExitCode::usage,
                    "--prometheus - writes the metrics to standard output: name no view with it");
    request.print_view = request.explicit_view || !options.prometheus;
    check_watch(request, options);
    return request;
}

StatusQuery status_query(const StatRequest& request, const StatOptions& options) {
    using Scope = StatusQuery::Scope;
    StatusQuery query;
    query.for_uid = options.for_uid;
    query.for_anyone = options.for_anyone;
    if (request.dwstat_view) {  // every table asked for, from one snapshot
        query.scope = *request.dwstat_view == "pools" ? Scope::pools : Scope::all;
        return query;
    }
    if (request.view == StatView::env) {
        query.scope = Scope::none;
        return query;
    }
    query.project_usage = options.prometheus.has_value();
    if (request.view == StatView::job)
        query.job_id = request.job_id;
    if (request.view == StatView::pools && !options.prometheus)
        query.scope = Scope::pools;
    else if (request.view == StatView::job && !options.prometheus)
        query.scope = Scope::none;
    return query;
}

}  // namespace bbkit
