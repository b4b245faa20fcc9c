// bb-pool: capacity pools and the buffers reserved from them.
#include <unistd.h>

#include <iostream>

#include "bbkit/error.hpp"
#include "bbkit/pool.hpp"
#include "bbkit/reconcile.hpp"
#include "bbkit/recovery.hpp"
#include "bbkit/render.hpp"
#include "bbkit/store.hpp"
#include "bbkit/teardown.hpp"
#include "bbkit/tool.hpp"
#include "bbkit/views.hpp"

namespace {

using namespace bbkit;

const std::string tool = "bb-pool";

struct Options {
    bool json = false;
    std::string format = "table";
    std::string pool;
    std::optional<std::string> show_pool;
    AllocCommand alloc;
    std::optional<std::uint64_t> job_id;
    std::vector<std::string> wait;
    bool repair = false;
    double budget = 60;
    bool slurm = false;
    bool apply = false;
    bool replace = false;
};

void print(const nlohmann::json& value) {
    std::cout << json_text(value) << '\n';
}

int run_list(StateStore& store, const Config& config, const Options& o, bool one) {
    std::vector<PoolStatus> pools;
    std::string slurm;
    {
        ReadSnapshot snapshot(store);
        pools = pool_status(snapshot, config);
        if (one) {
            configured_pool(config, *o.show_pool);
            std::vector<PoolStatus> selected;
            for (const PoolStatus& p : pools)
                if (p.name == *o.show_pool)
                    selected.push_back(p);
            pools = selected;
        }
    }
    if (o.format == "slurm-lua") {
        std::cout << slurm_pools_json(pools) << '\n';
    } else if (o.json) {
        const nlohmann::json out = pools_json(pools);
        print(one ? out.at(0) : out);
    } else {
        std::cout << pool_list_text(pools);
    }
    return 0;
}

int run_check(StateStore& store, const Config& config, const Options& o) {
    const std::vector<Finding> findings = check(store, config, o.repair, tool + " check");
    if (o.json)
        print(findings_json(findings));
    else
        std::cout << findings_text(findings);
    return check_status(findings);
}

int run_reconcile(StateStore& store, const Config& config, const Options& o,
                  const std::string& who) {
    if (!o.slurm)
        throw Error(ExitCode::usage, "reconcile needs --slurm (the scheduler to ask)");
    SlurmClients slurm;
    const ReconcileResult result = reconcile_slurm(store, config, slurm, o.apply, who);
    if (o.json) {
        print(reconcile_json(result, o.apply));
    } else {
        std::cout << reconcile_text(result, o.apply);
    }
    return static_cast<int>(result.status());  // a failed teardown is named above
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"bb-pool: burst-buffer capacity pools and the buffers reserved from them"};
    app.require_subcommand(1);
    app.fallthrough();
    CommonOptions common;
    add_common_options(app, common, true);
    Options o;
    app.add_flag("--json", o.json, "Print JSON");

    // Each subcommand's options only when its name is on the command line (on_command_line).
    const auto named = [&](CLI::App* sub) {
        return on_command_line(argc, argv, sub->get_name().c_str());
    };
    CLI::App* list = app.add_subcommand("list", "Show every pool: total, used, trash, free, queue");
    if (named(list)) {
        list->add_option("--format", o.format,
                         "table (default) or slurm-lua (what slurm_bb_pools returns)")
            ->check(CLI::IsMember({"table", "slurm-lua"}));
        list->add_flag("--json", o.json, "Print JSON");
    }
    CLI::App* show = app.add_subcommand("show", "Show one pool (all without POOL)");
    if (named(show)) {
        show->add_option("POOL", o.show_pool, "Pool name");
        show->add_option("--format", o.format, "table (default) or slurm-lua")
            ->check(CLI::IsMember({"table", "slurm-lua"}));
        show->add_flag("--json", o.json, "Print JSON");
    }

    CLI::App* init =
        app.add_subcommand("init", "Write a pool's marker and create job/ persistent/ trash/");
    if (named(init)) {
        init->add_option("POOL", o.pool, "Pool name from the configuration")->required();
        init->add_flag("--replace", o.replace,
                       "The pool's file system was recreated (its data is gone): close its "
                       "buffers' records, release their space and write a new marker");
        init->add_flag("--json", o.json, "Print JSON");
    }

    CLI::App* alloc =
        app.add_subcommand("alloc", "Reserve a buffer for a job or a persistent buffer");
    AllocCommand& a = o.alloc;
    CLI::Option* wait = nullptr;
    if (named(alloc)) {
        alloc->add_option("--job", o.job_id, "Job id")->check(job_id_validator());
        alloc->add_option("--user", a.user, "The job's user (name or uid)");
        alloc->add_option("--pool", a.pool, "Pool (default: the request's, then default_pool)");
        alloc->add_option("--capacity", a.capacity,
                          "Size, e.g. 100GiB (rounded up to the granularity)");
        alloc->add_option("--script", a.text.script,
                          "Job script whose directives give pool, capacity and staging");
        alloc->add_option("--bb", a.text.bb, "Directives as sbatch --bb takes them");
        alloc->add_flag("--symbols-replaced", a.text.symbols_replaced,
                        "The scheduler replaced the %-symbols already: read the text as it is");
        alloc->add_option("--job-name", a.job.job_name, "Job name (for %x in the directives)");
        alloc->add_option("--workdir", a.job.workdir, "Job working directory (for %d)");
        alloc->add_option("--array-job-id", a.job.array_job_id, "Array master job id (for %A)");
        alloc->add_option("--array-task-id", a.job.array_task_id, "Array task id (for %a)");
        alloc->add_option("--persistent", a.persistent, "Create a persistent buffer of this name");
        alloc->add_option("--owner", a.owner, "Persistent buffer owner (default root)");
        alloc->add_option("--access", a.access, "striped or private (one directory either way)");
        alloc->add_option("--type", a.type, "scratch");
        alloc->add_option("--expires", a.expires,
                          "Persistent buffer expiry: YYYY-MM-DD[THH:MM:SS]");
        wait = alloc
                   ->add_option("--wait", o.wait,
                                "Short of space: wait in the pool's FIFO queue (SECONDS; default = "
                                "timeouts.queue; none or no value = no limit)")
                   ->expected(0, 1);
        alloc->add_option("--node", a.node,
                          "Node-local pools: this node's name (with --nodes; default: this host)");
        alloc->add_option("--nodes", a.nodes,
                          "Node-local pools: the job's nodes, comma-separated, in the "
                          "scheduler's order (for distribute=shard and gather=nodes)");
        alloc->add_flag("--json", o.json, "Print JSON");
    }

    CLI::App* drain = app.add_subcommand("drain", "Stop new allocations from a pool");
    if (named(drain))
        drain->add_option("POOL", o.pool, "Pool name")->required();
    CLI::App* resume = app.add_subcommand("resume", "Allow allocations from a drained pool again");
    if (named(resume))
        resume->add_option("POOL", o.pool, "Pool name")->required();

    CLI::App* check_cmd = app.add_subcommand(
        "check", "Compare records with the pool directories, buffers with their capacity");
    if (named(check_cmd)) {
        check_cmd->add_flag(
            "--repair", o.repair,
            "Quarantine what does not belong, close dead records, remove stale project limits");
        check_cmd->add_flag("--json", o.json, "Print JSON");
    }
    CLI::App* recover_cmd =
        app.add_subcommand("recover", "Finish or undo what dead processes left half done");
    if (named(recover_cmd))
        recover_cmd->add_flag("--json", o.json, "Print JSON");
    CLI::App* reap_cmd = app.add_subcommand("reap", "Empty trash/ and release that space");
    if (named(reap_cmd)) {
        reap_cmd->add_option("--budget", o.budget, "Seconds to spend at most (default 60)")
            ->check(CLI::PositiveNumber);
        reap_cmd->add_flag("--json", o.json, "Print JSON");
    }
    CLI::App* reconcile_cmd = app.add_subcommand(
        "reconcile", "List (--apply: tear down) buffers whose jobs the scheduler no longer knows");
    if (named(reconcile_cmd)) {
        reconcile_cmd->add_flag("--slurm", o.slurm,
                                "Ask Slurm (squeue, scontrol) which jobs it knows");
        reconcile_cmd->add_flag("--apply", o.apply, "Tear those buffers down (default: only list)");
        reconcile_cmd->add_flag("--json", o.json, "Print JSON");
    }

    return run_tool(tool, app, argc, argv, common, [&]() -> int {
        const Config config = load_effective_config(common);
        StoreOptions store_options;
        store_options.read_only = *list || *show;  // reading commands never create state
        StateStore store(config, store_options);
        const std::string who = tool + " " + app.get_subcommands().front()->get_name();
        if (*list)
            return run_list(store, config, o, false);
        if (*show)
            return run_list(store, config, o, o.show_pool.has_value());
        if (*init && o.replace) {
            const ReplaceResult r = replace_pool(store, config, o.pool, who);
            if (o.json)
                print({{"pool", r.marker.name},
                       {"uuid", r.marker.uuid},
                       {"replaced_uuid", r.old_uuid},
                       {"closed", r.closed},
                       {"bytes_released", r.bytes_released}});
            else
                std::cout << replace_text(r);
            return 0;
        }
        if (*init) {
            const PoolMarker marker = init_pool(store, config, o.pool, who);
            if (o.json)
                print({{"pool", marker.name}, {"uuid", marker.uuid}});
            else
                std::cout << "pool " << marker.name << " ready (uuid " << marker.uuid << ")\n";
            return 0;
        }
        if (*alloc) {
            a.job_id = o.job_id;
            if (a.text.script)
                a.text.script = read_script_file(*a.text.script, config.limits.script_size);
            if (wait != nullptr && wait->count() > 0)
                a.wait = parse_wait(o.wait.empty() ? "" : o.wait.front(), config.timeouts.queue);
            const AllocResult result = allocate(store, config, build_alloc_request(config, a), who);
            if (o.json)
                print(alloc_json(result));
            else
                std::cout << alloc_text(result);
            return 0;
        }
        if (*drain || *resume) {
            set_draining(store, config, o.pool, drain->parsed(), who);
            std::cout << "pool " << o.pool << (drain->parsed() ? " draining" : " resumed") << "\n";
            return 0;
        }
        if (*check_cmd)
            return run_check(store, config, o);
        if (*reconcile_cmd)
            return run_reconcile(store, config, o, who);
        if (*recover_cmd) {
            const std::vector<std::string> actions =
                recover(store, config, std::chrono::seconds(10), who);
            if (o.json) {
                print(actions);
            } else {
                for (const std::string& line : actions)
                    std::cout << line << '\n';
                if (actions.empty())
                    std::cout << "nothing to recover\n";
            }
            return 0;
        }
        bool shown = false;  // a progress line to end before anything else is printed
        RemovalProgressFn progress;
        if (isatty(STDERR_FILENO))
            progress = [&shown](const RemovalProgress& p) {
                std::cerr << removal_progress_line(p) << std::flush;
                shown = true;
            };
        const ReapResult r =
            reap(store, config, std::chrono::milliseconds(static_cast<long long>(o.budget * 1000)),
                 who, progress);
        if (shown)
            std::cerr << '\n';
        if (o.json)
            print(reap_json(r));
        else
            std::cout << reap_text(r);
        return 0;
    });
}
