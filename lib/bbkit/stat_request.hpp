// What bb-stat is asked for: its view words (VIEW [ID]) and the options each view goes with,
// checked before anything is read (bb-stat(1)), and what is read for them. Every refusal is
// Error(usage), exit 64.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bbkit/store.hpp"
#include "bbkit/views.hpp"

namespace bbkit {

enum class StatView {
    pools,
    buffers,
    sessions,
    instances,
    configurations,
    activations,
    burst,
    job,
    env,
    gres,
    history
};

// bb-stat's command line as given: the words and the options that change what is shown.
struct StatOptions {
    std::vector<std::string> words;
    bool json = false;
    bool dws = false;
    bool shell = false;
    bool for_anyone = false;
    bool dwstat = false;
    std::optional<std::string> prometheus;
    std::optional<uid_t> for_uid;
    // gres: the jobs Slurm has on this node (parse_job_ids), the node's Gres= as scontrol
    // prints it, and whether to print only the Gres= text that makes Slurm's counts bbkit's.
    std::optional<std::string> slurm_jobs;
    std::optional<std::string> slurm_node_gres;
    bool slurm_update = false;
    // --watch: print the view again every this many seconds until interrupted.
    std::optional<unsigned> watch;
    // history: the range (sacct's time forms, parse_time_spec), the grouping (user or pool),
    // only one user's or pool's buffers, and the file (or - for standard output) for an SVG of
    // a pool's use.
    std::optional<std::string> since;
    std::optional<std::string> until;
    std::optional<std::string> by;
    std::optional<std::string> user;
    std::optional<std::string> pool;
    std::optional<std::string> plot;
};

struct StatRequest {
    StatView view = StatView::pools;  // the default when no word is given
    bool explicit_view = false;       // a word was given (with --prometheus, print it too)
    bool print_view = true;           // false: --prometheus without a word writes the metrics only
    std::uint64_t job_id = 0;         // job and env
    std::set<std::uint64_t> live_jobs;  // gres: --slurm-jobs
    // With --dwstat: the one of dwstat_views() to print ("pools" without a word); `view` is
    // then unused.
    std::optional<std::string> dwstat_view;
    // history: what to read (since: the start of today and until: now unless given), and for
    // --plot the pool to draw (--pool, or the one pool configured: run_history decides).
    AccountingQuery accounting;
};

// The request `options` make at `now`, or Error(usage) naming what is wrong: an unknown view,
// a view with an argument it does not take or without the job ID it needs, or options that do
// not go together (--dws with --json, --shell but for env, --for-uid with --for-anyone, gres
// without --slurm-jobs, history's options with another view, ...).
StatRequest parse_stat_request(const StatOptions& options,
                               TimePoint now = std::chrono::system_clock::now());

// What bb-stat reads for `request` (parse_stat_request's of `options`), for query_status: the
// pools alone for the pools view (Slurm's datawarp plugin asks every 30 s) and dwstat's pools,
// nothing but the job's buffer for `job ID`, everything for the other views and the metrics,
// which add the project usage; --for-uid and --for-anyone as given. The env view reads no state
// (read_task_environment): nothing.
StatusQuery status_query(const StatRequest& request, const StatOptions& options);

}  // namespace bbkit
