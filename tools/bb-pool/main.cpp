// bb-pool: capacity pools and the buffers reserved from them.
#include <unistd.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "bbkit/error.hpp"
#include "bbkit/health.hpp"
#include "bbkit/monitor.hpp"
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
    HealthScope health;
    bool monitor = false;  // health: bbkit(7), HEALTH AND MONITORING
    bool no_timers = false;
    std::optional<std::string> slurm_jobs;       // check: bbkit(7), NODE-LOCAL POOLS, Counts agree
    std::optional<std::string> slurm_node_gres;  // check
    bool release = false;                        // takeover
    bool holds = false;                          // takeover
    CLI::Option* wait_option = nullptr;          // alloc --wait, which may come without a value
};

void print(const nlohmann::json& value) {
    std::cout << json_text(value) << '\n';
}

// Subcommand::reads of a command that only reads, whatever its options.
bool always() {
    return true;
}

int print_pools(StateStore& store, const Config& config, const Options& o,
                const std::optional<std::string>& only) {
    std::vector<PoolStatus> pools;
    {
        ReadSnapshot snapshot(store);
        pools = pool_status(snapshot, config);
        if (only) {
            configured_pool(config, *only);
            std::vector<PoolStatus> selected;
            for (const PoolStatus& p : pools)
                if (p.name == *only)
                    selected.push_back(p);
            pools = selected;
        }
    }
    if (o.format == "slurm-lua") {
        std::cout << slurm_pools_json(pools) << '\n';
    } else if (o.json) {
        const nlohmann::json out = pools_json(pools);
        print(only ? out.at(0) : out);
    } else {
        std::cout << pool_list_text(pools);
    }
    return 0;
}

Subcommand list_command(Options& o) {
    Subcommand command{"list", "Show every pool: total, used, trash, free, queue"};
    command.add_options = [&o](CLI::App& sub) {
        sub.add_option("--format", o.format,
                       "table (default) or slurm-lua (what slurm_bb_pools returns)")
            ->check(CLI::IsMember({"table", "slurm-lua"}));
        sub.add_flag("--json", o.json, "Print JSON");
    };
    command.reads = always;
    command.run = [&o](StateStore& store, const Config& config, const std::string&) {
        return print_pools(store, config, o, std::nullopt);
    };
    return command;
}

Subcommand show_command(Options& o) {
    Subcommand command{"show", "Show one pool (all without POOL)"};
    command.add_options = [&o](CLI::App& sub) {
        sub.add_option("POOL", o.show_pool, "Pool name");
        sub.add_option("--format", o.format, "table (default) or slurm-lua")
            ->check(CLI::IsMember({"table", "slurm-lua"}));
        sub.add_flag("--json", o.json, "Print JSON");
    };
    command.reads = always;
    command.run = [&o](StateStore& store, const Config& config, const std::string&) {
        return print_pools(store, config, o, o.show_pool);
    };
    return command;
}

Subcommand init_command(Options& o) {
    Subcommand command{"init", "Write a pool's marker and create job/ persistent/ trash/"};
    command.add_options = [&o](CLI::App& sub) {
        sub.add_option("POOL", o.pool, "Pool name from the configuration")->required();
        sub.add_flag("--replace", o.replace,
                     "The pool's file system was recreated (its data is gone): close its "
                     "buffers' records, release their space and write a new marker");
        sub.add_flag("--json", o.json, "Print JSON");
    };
    command.run = [&o](StateStore& store, const Config& config, const std::string& who) {
        if (o.replace) {
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
        const PoolMarker marker = init_pool(store, config, o.pool, who);
        if (o.json)
            print({{"pool", marker.name}, {"uuid", marker.uuid}});
        else
            std::cout << "pool " << marker.name << " ready (uuid " << marker.uuid << ")\n";
        return 0;
    };
    return command;
}

Subcommand alloc_command(Options& o) {
    Subcommand command{"alloc", "Reserve a buffer for a job or a persistent buffer"};
    command.add_options = [&o](CLI::App& sub) {
        AllocCommand& a = o.alloc;
        sub.add_option("--job", o.job_id, "Job id")->check(job_id_validator());
        sub.add_option("--user", a.user, "The job's user (name or uid)");
        sub.add_option("--pool", a.pool, "Pool (default: the request's, then default_pool)");
        sub.add_option("--capacity", a.capacity,
                       "Size, e.g. 100GiB (rounded up to the granularity)");
        sub.add_option("--script", a.text.script,
                       "Job script whose directives give pool, capacity and staging");
        sub.add_option("--bb", a.text.bb, "Directives as sbatch --bb takes them");
        sub.add_flag("--symbols-replaced", a.text.symbols_replaced,
                     "The scheduler replaced the %-symbols already: read the text as it is");
        sub.add_option("--job-name", a.job.job_name, "Job name (for %x in the directives)");
        sub.add_option("--workdir", a.job.workdir, "Job working directory (for %d)");
        sub.add_option("--array-job-id", a.job.array_job_id, "Array master job id (for %A)");
        sub.add_option("--array-task-id", a.job.array_task_id, "Array task id (for %a)");
        sub.add_option("--persistent", a.persistent, "Create a persistent buffer of this name");
        sub.add_option("--owner", a.owner, "Persistent buffer owner (default root)");
        sub.add_option("--access", a.access, "striped or private (one directory either way)");
        sub.add_option("--type", a.type, "scratch");
        sub.add_option("--expires", a.expires, "Persistent buffer expiry: YYYY-MM-DD[THH:MM:SS]");
        o.wait_option =
            sub.add_option("--wait", o.wait,
                           "Short of space: wait in the pool's FIFO queue (SECONDS; default = "
                           "timeouts.queue; none or no value = no limit)")
                ->expected(0, 1);
        sub.add_option("--node", a.node,
                       "Node-local pools: this node's name (with --nodes; default: this host)");
        sub.add_option("--nodes", a.nodes,
                       "Node-local pools: the job's nodes, comma-separated, in the "
                       "scheduler's order (for distribute=shard and gather=nodes)");
        sub.add_option("--slurm-gres", a.slurm_gres,
                       "Node-local pools under Slurm: the job's GRES on this node as "
                       "scontrol show job -d prints it; the buffer holds no more");
        sub.add_flag("--json", o.json, "Print JSON");
    };
    command.run = [&o](StateStore& store, const Config& config, const std::string& who) {
        AllocCommand& a = o.alloc;
        a.job_id = o.job_id;
        if (a.text.script)
            a.text.script = read_script_file(*a.text.script, config.limits.script_size);
        if (o.wait_option != nullptr && o.wait_option->count() > 0)
            a.wait = parse_wait(o.wait.empty() ? "" : o.wait.front(), config.timeouts.queue);
        const AllocResult result = allocate(store, config, build_alloc_request(config, a), who);
        if (o.json)
            print(alloc_json(result));
        else
            std::cout << alloc_text(result);
        return 0;
    };
    return command;
}

// drain (`draining`) or resume.
Subcommand drain_command(Options& o, bool draining) {
    Subcommand command = draining
                             ? Subcommand{"drain", "Stop new allocations from a pool"}
                             : Subcommand{"resume", "Allow allocations from a drained pool again"};
    command.add_options = [&o](CLI::App& sub) {
        sub.add_option("POOL", o.pool, "Pool name")->required();
    };
    command.run = [&o, draining](StateStore& store, const Config& config, const std::string& who) {
        set_draining(store, config, o.pool, draining, who);
        std::cout << "pool " << o.pool << (draining ? " draining" : " resumed") << "\n";
        return 0;
    };
    return command;
}

Subcommand check_command(Options& o) {
    Subcommand command{"check",
                       "Compare records with the pool directories, buffers with their capacity"};
    command.add_options = [&o](CLI::App& sub) {
        sub.add_flag(
            "--repair", o.repair,
            "Quarantine what does not belong, close dead records, remove stale project limits");
        sub.add_flag("--json", o.json, "Print JSON");
        CLI::Option* jobs = sub.add_option(
            "--slurm-jobs", o.slurm_jobs,
            "With --slurm-node-gres: the jobs holding GRES on this node (squeue -h -w "
            "NODE -t running,configuring,suspended -o %A; \"\" for none), to compare "
            "Slurm's count of each node-local pool's GRES with bbkit's (gres-count)");
        jobs->type_name("IDS");
        sub.add_option("--slurm-node-gres", o.slurm_node_gres,
                       "With --slurm-jobs: this node's Gres= as scontrol show node prints it")
            ->type_name("GRES")
            ->needs(jobs);
        jobs->needs(sub.get_option("--slurm-node-gres"));
    };
    // Without --repair it only reads: on any controller (bbkit(7), STATE DIRECTORY).
    command.reads = [&o] { return !o.repair; };
    command.store.tolerate_foreign_schema = true;  // listed as foreign-schema, rebuilt by --repair
    command.run = [&o](StateStore& store, const Config& config, const std::string& who) {
        // Slurm's counts first: a malformed list refuses before anything is repaired.
        std::vector<Finding> gres =
            gres_count_findings(store, config, o.slurm_jobs, o.slurm_node_gres);
        std::vector<Finding> findings = check(store, config, o.repair, who);
        findings.insert(findings.end(), gres.begin(), gres.end());
        if (o.json)
            print(findings_json(findings));
        else
            std::cout << findings_text(findings);
        return check_status(findings);
    };
    return command;
}

Subcommand health_command(Options& o) {
    Subcommand command{"health",
                       "Check what no job controls: pools mounted and in order, state, bb-mover"};
    command.add_options = [&o](CLI::App& sub) {
        sub.add_option("POOL", o.health.pools, "Pools to check (default: every one)");
        sub.add_flag("--node-local", o.health.node_local_only,
                     "Without POOL: the node-local pools only");
        sub.add_option("--trust", o.health.trusted_files,
                       "A program or script that must be root's alone (repeatable)")
            ->allow_extra_args(false);
        sub.add_flag("--monitor", o.monitor,
                     "Everything a monitoring system watches (also bb-pool check's findings, "
                     "failed teardowns, bbkit's systemd timers), as a monitoring plugin: first "
                     "line BBKIT OK|WARNING|CRITICAL, exit 0, 1, 2 (3: unknown)");
        sub.add_flag("--slurm", o.slurm,
                     "With --monitor: also the job buffers Slurm no longer knows or lost "
                     "(squeue, as bb-pool reconcile --slurm)");
        sub.add_flag("--no-timers", o.no_timers, "With --monitor: leave systemd's timers out");
        sub.add_flag("--json", o.json, "Print JSON");
    };
    command.reads = always;
    command.run = [&o](StateStore& store, const Config& config, const std::string&) {
        check_monitor_options(o.monitor, o.slurm || o.no_timers);
        if (o.monitor) {
            MonitorOptions options;
            options.health = o.health;
            options.timers = !o.no_timers;
            std::optional<SlurmClients> slurm;
            if (o.slurm)
                options.slurm = &slurm.emplace();
            const MonitorReport report = monitor(store, config, options);
            if (o.json)
                print(monitor_json(report));
            else
                std::cout << monitor_text(report);
            return static_cast<int>(report.state());
        }
        const HealthReport report = check_health(store, config, o.health);
        if (o.json)
            print(health_json(report));
        else
            std::cout << health_text(report);
        require_healthy(report);
        return 0;
    };
    return command;
}

Subcommand migrate_command(Options& o) {
    Subcommand command{"migrate",
                       "Bring state.db to this bbkit's schema, sealing the records of an old one"};
    command.add_options = [&o](CLI::App& sub) { sub.add_flag("--json", o.json, "Print JSON"); };
    command.store.migrate_unsealed = true;  // the store's opening migrates; this only reports
    command.run = [&o](StateStore& store, const Config&, const std::string&) {
        const std::size_t sealed = store.sealed_by_migration();
        if (o.json)
            print({{"schema", state_schema_version()}, {"sealed", sealed}});
        else
            std::cout << "state.db at schema " << state_schema_version() << ", " << sealed
                      << " record(s) sealed\n";
        return 0;
    };
    return command;
}

Subcommand recover_command(Options& o) {
    Subcommand command{"recover", "Finish or undo what dead processes left half done"};
    command.add_options = [&o](CLI::App& sub) { sub.add_flag("--json", o.json, "Print JSON"); };
    command.run = [&o](StateStore& store, const Config& config, const std::string& who) {
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
    };
    return command;
}

Subcommand reap_command(Options& o) {
    Subcommand command{"reap", "Empty trash/ and release that space"};
    command.add_options = [&o](CLI::App& sub) {
        sub.add_option("--budget", o.budget, "Seconds to spend at most (default 60)")
            ->check(CLI::PositiveNumber);
        sub.add_flag("--json", o.json, "Print JSON");
    };
    command.run = [&o](StateStore& store, const Config& config, const std::string& who) {
        bool shown = false;  // a progress line to end before anything else is printed
        RemovalProgressFn progress;
        if (isatty(STDERR_FILENO))
            progress = [&shown](const RemovalProgress& p) {
                std::cerr << removal_progress_line(p) << std::flush;
                shown = true;
            };
        const auto budget = std::chrono::milliseconds(static_cast<long long>(o.budget * 1000));
        const ReapResult r = reap(store, config, budget, who, progress);
        if (shown)
            std::cerr << '\n';
        if (o.json)
            print(reap_json(r));
        else
            std::cout << reap_text(r);
        return 0;
    };
    return command;
}

Subcommand reconcile_command(Options& o) {
    Subcommand command{
        "reconcile", "List (--apply: tear down) buffers whose jobs the scheduler no longer knows"};
    command.add_options = [&o](CLI::App& sub) {
        sub.add_flag("--slurm", o.slurm, "Ask Slurm (squeue, scontrol) which jobs it knows");
        sub.add_flag("--apply", o.apply, "Tear those buffers down (default: only list)");
        sub.add_flag("--json", o.json, "Print JSON");
    };
    // Without --apply it only reads: on any controller (bbkit(7), STATE DIRECTORY).
    command.reads = [&o] { return !o.apply; };
    command.run = [&o](StateStore& store, const Config& config, const std::string& who) {
        if (!o.slurm)
            throw Error(ExitCode::usage, "reconcile needs --slurm (the scheduler to ask)");
        SlurmClients slurm;
        const ReconcileResult result = reconcile_slurm(store, config, slurm, o.apply, who);
        if (o.json)
            print(reconcile_json(result, o.apply));
        else
            std::cout << reconcile_text(result, o.apply);
        return static_cast<int>(result.status());  // a failed teardown is named above
    };
    return command;
}

Subcommand takeover_command(Options& o) {
    Subcommand command{"takeover",
                       "Make this host the only writer of a state directory controllers share"};
    command.add_options = [&o](CLI::App& sub) {
        sub.add_flag("--release", o.release, "Forget this host's claim (SlurmctldPrimaryOffProg)");
        sub.add_flag("--holds", o.holds, "Only say whether this host may write: 0 yes, 69 no");
        sub.add_flag("--json", o.json, "Print JSON");
    };
    command.store.takes_over = true;  // the one writer that opens without the claim
    command.run = [&o](StateStore& store, const Config& config, const std::string& who) {
        if (o.release && o.holds)
            throw Error(ExitCode::usage, "takeover: --release and --holds are exclusive");
        if (o.holds || o.release) {
            if (o.release)
                store.release_controller();
            const ClaimStatus status = store.claim_status();
            if (o.json)
                print(claim_status_json(status, config.state_dir));
            else
                std::cout << claim_status_text(status, config.state_dir);
            return status.holds || o.release ? 0 : static_cast<int>(ExitCode::unavailable);
        }
        const Takeover t = store.take_over(who);
        if (o.json)
            print(takeover_json(t, config.state_dir));
        else
            std::cout << takeover_text(t, config.state_dir);
        return 0;
    };
    return command;
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
    // In the order --help lists them.
    const std::vector<Subcommand> subcommands{
        list_command(o),        show_command(o),         init_command(o),      alloc_command(o),
        drain_command(o, true), drain_command(o, false), check_command(o),     health_command(o),
        recover_command(o),     reap_command(o),         reconcile_command(o), migrate_command(o),
        takeover_command(o)};
    add_subcommands(app, argc, argv, subcommands);

    return run_tool(tool, app, argc, argv, common,
                    [&] { return run_subcommand(tool, app, common, subcommands); });
}
