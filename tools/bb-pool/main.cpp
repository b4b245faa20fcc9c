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
    std::optional<std::string> slurm_jobs;       // check: bbkit(7), NODE-LOCAL POOLS, Counts agree
    std::optional<std::string> slurm_node_gres;  // check
    bool release = false;                        // takeover
    bool holds = false;                          // takeover
};

void print(const nlohmann::json& value) {
    std::cout << json_text(value) << '\n';
}

// A subcommand: its options, added when its name is on the command line (on_command_line), and
// what it runs once they are parsed.
struct Subcommand {
    CLI::App* app = nullptr;
    bool reads = false;  // a reading command never creates state
    std::function<int(StateStore&, const Config&, const std::string& who)> run;
    StoreOptions store{};  // how it opens the state (read_only follows `reads`)
    // The flag without which the command only reads (check --repair, reconcile --apply): it
    // then opens the state as a reading command, on any controller (bbkit(7), STATE DIRECTORY).
    const bool* writes_with = nullptr;
};

// Whether a subcommand's name is on the command line: only then are its options added.
using Named = std::function<bool(const CLI::App*)>;

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

Subcommand add_list(CLI::App& app, Options& o, const Named& named) {
    CLI::App* list = app.add_subcommand("list", "Show every pool: total, used, trash, free, queue");
    if (named(list)) {
        list->add_option("--format", o.format,
                         "table (default) or slurm-lua (what slurm_bb_pools returns)")
            ->check(CLI::IsMember({"table", "slurm-lua"}));
        list->add_flag("--json", o.json, "Print JSON");
    }
    return {list, true, [&o](StateStore& store, const Config& config, const std::string&) {
                return print_pools(store, config, o, std::nullopt);
            }};
}

Subcommand add_show(CLI::App& app, Options& o, const Named& named) {
    CLI::App* show = app.add_subcommand("show", "Show one pool (all without POOL)");
    if (named(show)) {
        show->add_option("POOL", o.show_pool, "Pool name");
        show->add_option("--format", o.format, "table (default) or slurm-lua")
            ->check(CLI::IsMember({"table", "slurm-lua"}));
        show->add_flag("--json", o.json, "Print JSON");
    }
    return {show, true, [&o](StateStore& store, const Config& config, const std::string&) {
                return print_pools(store, config, o, o.show_pool);
            }};
}

Subcommand add_init(CLI::App& app, Options& o, const Named& named) {
    CLI::App* init =
        app.add_subcommand("init", "Write a pool's marker and create job/ persistent/ trash/");
    if (named(init)) {
        init->add_option("POOL", o.pool, "Pool name from the configuration")->required();
        init->add_flag("--replace", o.replace,
                       "The pool's file system was recreated (its data is gone): close its "
                       "buffers' records, release their space and write a new marker");
        init->add_flag("--json", o.json, "Print JSON");
    }
    return {init, false, [&o](StateStore& store, const Config& config, const std::string& who) {
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
            }};
}

Subcommand add_alloc(CLI::App& app, Options& o, const Named& named) {
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
        alloc->add_option("--slurm-gres", a.slurm_gres,
                          "Node-local pools under Slurm: the job's GRES on this node as "
                          "scontrol show job -d prints it; the buffer holds no more");
        alloc->add_flag("--json", o.json, "Print JSON");
    }
    return {
        alloc, false, [&o, wait](StateStore& store, const Config& config, const std::string& who) {
            AllocCommand& a = o.alloc;
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
        }};
}

// drain (`draining`) or resume.
Subcommand add_drain(CLI::App& app, Options& o, const Named& named, bool draining) {
    CLI::App* sub =
        draining ? app.add_subcommand("drain", "Stop new allocations from a pool")
                 : app.add_subcommand("resume", "Allow allocations from a drained pool again");
    if (named(sub))
        sub->add_option("POOL", o.pool, "Pool name")->required();
    return {sub, false,
            [&o, draining](StateStore& store, const Config& config, const std::string& who) {
                set_draining(store, config, o.pool, draining, who);
                std::cout << "pool " << o.pool << (draining ? " draining" : " resumed") << "\n";
                return 0;
            }};
}

Subcommand add_check(CLI::App& app, Options& o, const Named& named) {
    CLI::App* check_cmd = app.add_subcommand(
        "check", "Compare records with the pool directories, buffers with their capacity");
    if (named(check_cmd)) {
        check_cmd->add_flag(
            "--repair", o.repair,
            "Quarantine what does not belong, close dead records, remove stale project limits");
        check_cmd->add_flag("--json", o.json, "Print JSON");
        CLI::Option* jobs = check_cmd->add_option(
            "--slurm-jobs", o.slurm_jobs,
            "With --slurm-node-gres: the jobs holding GRES on this node (squeue -h -w "
            "NODE -t running,configuring,suspended -o %A; \"\" for none), to compare "
            "Slurm's count of each node-local pool's GRES with bbkit's (gres-count)");
        jobs->type_name("IDS");
        check_cmd
            ->add_option("--slurm-node-gres", o.slurm_node_gres,
                         "With --slurm-jobs: this node's Gres= as scontrol show node prints it")
            ->type_name("GRES")
            ->needs(jobs);
        jobs->needs(check_cmd->get_option("--slurm-node-gres"));
    }
    StoreOptions store;
    store.tolerate_foreign_schema = true;  // listed as foreign-schema, rebuilt by --repair
    return {check_cmd, false,
            [&o](StateStore& store, const Config& config, const std::string& who) {
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
            },
            store, &o.repair};
}

Subcommand add_health(CLI::App& app, Options& o, const Named& named) {
    CLI::App* health_cmd = app.add_subcommand(
        "health", "Check what no job controls: pools mounted and in order, state, bb-mover");
    if (named(health_cmd)) {
        health_cmd->add_option("POOL", o.health.pools, "Pools to check (default: every one)");
        health_cmd->add_flag("--node-local", o.health.node_local_only,
                             "Without POOL: the node-local pools only");
        health_cmd
            ->add_option("--trust", o.health.trusted_files,
                         "A program or script that must be root's alone (repeatable)")
            ->allow_extra_args(false);
        health_cmd->add_flag("--json", o.json, "Print JSON");
    }
    return {health_cmd, true, [&o](StateStore& store, const Config& config, const std::string&) {
                const HealthReport report = check_health(store, config, o.health);
                if (o.json)
                    print(health_json(report));
                else
                    std::cout << health_text(report);
                require_healthy(report);
                return 0;
            }};
}

Subcommand add_migrate(CLI::App& app, Options& o, const Named& named) {
    CLI::App* migrate_cmd = app.add_subcommand(
        "migrate", "Bring state.db to this bbkit's schema, sealing the records of an old one");
    if (named(migrate_cmd))
        migrate_cmd->add_flag("--json", o.json, "Print JSON");
    StoreOptions store;
    store.migrate_unsealed = true;  // the store's opening migrates; this only reports
    return {migrate_cmd, false,
            [&o](StateStore& store, const Config&, const std::string&) {
                const std::size_t sealed = store.sealed_by_migration();
                if (o.json)
                    print({{"schema", state_schema_version()}, {"sealed", sealed}});
                else
                    std::cout << "state.db at schema " << state_schema_version() << ", " << sealed
                              << " record(s) sealed\n";
                return 0;
            },
            store};
}

Subcommand add_recover(CLI::App& app, Options& o, const Named& named) {
    CLI::App* recover_cmd =
        app.add_subcommand("recover", "Finish or undo what dead processes left half done");
    if (named(recover_cmd))
        recover_cmd->add_flag("--json", o.json, "Print JSON");
    return {recover_cmd, false,
            [&o](StateStore& store, const Config& config, const std::string& who) {
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
            }};
}

Subcommand add_reap(CLI::App& app, Options& o, const Named& named) {
    CLI::App* reap_cmd = app.add_subcommand("reap", "Empty trash/ and release that space");
    if (named(reap_cmd)) {
        reap_cmd->add_option("--budget", o.budget, "Seconds to spend at most (default 60)")
            ->check(CLI::PositiveNumber);
        reap_cmd->add_flag("--json", o.json, "Print JSON");
    }
    return {reap_cmd, false, [&o](StateStore& store, const Config& config, const std::string& who) {
                bool shown = false;  // a progress line to end before anything else is printed
                RemovalProgressFn progress;
                if (isatty(STDERR_FILENO))
                    progress = [&shown](const RemovalProgress& p) {
                        std::cerr << removal_progress_line(p) << std::flush;
                        shown = true;
                    };
                const auto budget =
                    std::chrono::milliseconds(static_cast<long long>(o.budget * 1000));
                const ReapResult r = reap(store, config, budget, who, progress);
                if (shown)
                    std::cerr << '\n';
                if (o.json)
                    print(reap_json(r));
                else
                    std::cout << reap_text(r);
                return 0;
            }};
}

Subcommand add_reconcile(CLI::App& app, Options& o, const Named& named) {
    CLI::App* reconcile_cmd = app.add_subcommand(
        "reconcile", "List (--apply: tear down) buffers whose jobs the scheduler no longer knows");
    if (named(reconcile_cmd)) {
        reconcile_cmd->add_flag("--slurm", o.slurm,
                                "Ask Slurm (squeue, scontrol) which jobs it knows");
        reconcile_cmd->add_flag("--apply", o.apply, "Tear those buffers down (default: only list)");
        reconcile_cmd->add_flag("--json", o.json, "Print JSON");
    }
    return {reconcile_cmd,
            false,
            [&o](StateStore& store, const Config& config, const std::string& who) {
                if (!o.slurm)
                    throw Error(ExitCode::usage, "reconcile needs --slurm (the scheduler to ask)");
                SlurmClients slurm;
                const ReconcileResult result = reconcile_slurm(store, config, slurm, o.apply, who);
                if (o.json)
                    print(reconcile_json(result, o.apply));
                else
                    std::cout << reconcile_text(result, o.apply);
                return static_cast<int>(result.status());  // a failed teardown is named above
            },
            {},
            &o.apply};
}

Subcommand add_takeover(CLI::App& app, Options& o, const Named& named) {
    CLI::App* takeover_cmd = app.add_subcommand(
        "takeover", "Make this host the only writer of a state directory controllers share");
    if (named(takeover_cmd)) {
        takeover_cmd->add_flag("--release", o.release,
                               "Forget this host's claim (SlurmctldPrimaryOffProg)");
        takeover_cmd->add_flag("--holds", o.holds,
                               "Only say whether this host may write: 0 yes, 69 no");
        takeover_cmd->add_flag("--json", o.json, "Print JSON");
    }
    return {takeover_cmd, false,
            [&o](StateStore& store, const Config& config, const std::string& who) {
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
            },
            [] {
                StoreOptions store;
                store.takes_over = true;  // the one writer that opens without the claim
                return store;
            }()};
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
    const Named named = [&](const CLI::App* sub) {
        return on_command_line(argc, argv, sub->get_name().c_str());
    };
    // In the order --help lists them.
    const std::vector<Subcommand> subcommands{
        add_list(app, o, named),    add_show(app, o, named),        add_init(app, o, named),
        add_alloc(app, o, named),   add_drain(app, o, named, true), add_drain(app, o, named, false),
        add_check(app, o, named),   add_health(app, o, named),      add_recover(app, o, named),
        add_reap(app, o, named),    add_reconcile(app, o, named),   add_migrate(app, o, named),
        add_takeover(app, o, named)};

    return run_tool(tool, app, argc, argv, common, [&]() -> int {
        const Config config = load_effective_config(common);
        for (const Subcommand& sub : subcommands) {
            if (!sub.app->parsed())
                continue;
            StoreOptions store_options = sub.store;
            store_options.read_only = sub.reads || (sub.writes_with && !*sub.writes_with);
            StateStore store(config, store_options);
            return sub.run(store, config, tool + " " + sub.app->get_name());
        }
        throw Error(ExitCode::software, "no subcommand to run");  // require_subcommand(1)
    });
}
