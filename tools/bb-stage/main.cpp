// bb-stage: stage-in, pre-run, post-run, stage-out and the job's paths.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/render.hpp"
#include "bbkit/stage.hpp"
#include "bbkit/store.hpp"
#include "bbkit/tool.hpp"

namespace {

using namespace bbkit;

const std::string tool = "bb-stage";

struct Options {
    std::uint64_t job_id = 0;
    bool json = false;
    bool progress = false;              // in, out
    bool retry = false;                 // out
    bool check = false;                 // in, out
    std::optional<std::string> output;  // paths
};

void print(const nlohmann::json& value) {
    std::cout << json_text(value) << '\n';
}

// in or out: the copy (bb-mover), or with --check whether it is done.
Subcommand stage_command(Options& o, StageDirection direction) {
    const bool in = direction == StageDirection::in;
    Subcommand command =
        in ? Subcommand{"in", "Stage in: allocated -> staging-in -> staged-in"}
           : Subcommand{"out", "Stage out: post-run -> staging-out -> staged-out (durable)"};
    command.add_options = [&o, in](CLI::App& sub) {
        CLI::Option* retry = nullptr;
        if (!in)
            retry = sub.add_flag("--retry", o.retry,
                                 "Run a failed stage-out again, after fixing its cause");
        sub.add_flag("--progress", o.progress, "Progress bar with rate and ETA on a terminal");
        CLI::Option* check =
            sub.add_flag("--check", o.check,
                         "Only tell whether the stage is done: 0 done, 75 running elsewhere");
        if (retry != nullptr)
            check->excludes(retry);
    };
    command.reads = [&o] { return o.check; };
    command.run = [&o, direction, in](StateStore& store, const Config& config,
                                      const std::string& who) {
        const char* stage = in ? "stage-in" : "stage-out";
        if (o.check) {
            const StageResult done = check_stage(store, config, o.job_id, direction);
            if (o.json)
                print(stage_result_json(done));
            else
                std::cout << stage << " of " << done.key << ": done"
                          << (done.note.empty() ? "" : " (" + done.note + ")") << '\n';
            return 0;
        }
        StageOptions options;
        options.retry = o.retry;
        const bool bar = o.progress && isatty(STDERR_FILENO);
        if (bar)
            options.on_progress = [](const StagingProgress& p) {
                std::cerr << progress_bar(p) << std::flush;
            };
        const StageResult result = in ? stage_in(store, config, o.job_id, options, who)
                                      : stage_out(store, config, o.job_id, options, who);
        if (bar)
            std::cerr << '\n';
        for (const std::string& w : result.warnings)
            std::cerr << tool << ": warning: " << printable(w) << '\n';
        if (o.json)
            print(stage_result_json(result));
        else
            std::cout << stage_result_text(result, stage);
        return 0;
    };
    return command;
}

Subcommand pre_run_command(Options& o) {
    Subcommand command{"pre-run", "staged-in -> pre-run -> running, with the pre_run hook"};
    command.run = [&o](StateStore& store, const Config& config, const std::string& who) {
        pre_run(store, config, o.job_id, who);
        return 0;
    };
    return command;
}

Subcommand post_run_command(Options& o) {
    Subcommand command{"post-run",
                       "running (or staged-in, never pre-run) -> post-run, with the post_run hook"};
    command.run = [&o](StateStore& store, const Config& config, const std::string& who) {
        const std::string note = post_run(store, config, o.job_id, who);
        if (!note.empty())
            std::cout << "note: " << note << '\n';
        return 0;
    };
    return command;
}

Subcommand end_command(Options& o) {
    Subcommand command{
        "end", "Standalone job end: post-run if running, stage-out, teardown once staged out"};
    command.run = [&o](StateStore& store, const Config& config, const std::string& who) {
        const EndResult ended = end_job(store, config, o.job_id, who);
        if (o.json)
            print(end_result_json(ended));
        else
            std::cout << end_result_text(ended);
        return 0;
    };
    return command;
}

Subcommand paths_command(Options& o, CommonOptions& common) {
    Subcommand command{"paths", "Print the job's environment: BB_JOB_DIR=..., DW_..."};
    command.add_options = [&o, &common](CLI::App& sub) {
        add_file_option(
            sub, common, "--output", o.output,
            "Write the lines to FILE (Slurm's path file) instead, or - for standard output; "
            "FILE must be new, empty or such lines of the caller's; refused through sudo");
    };
    command.reads = [] { return true; };
    command.run = [&o](StateStore& store, const Config& config, const std::string&) {
        const std::string lines = job_paths(store, config, o.job_id);
        if (o.output && !standard_output("--output", *o.output))
            write_paths_file(*o.output, lines);
        else if (o.json)
            print(paths_json(lines));
        else
            std::cout << lines;
        return 0;
    };
    return command;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"bb-stage: move a job's data in and out of its burst buffer"};
    app.require_subcommand(1);
    app.fallthrough();
    CommonOptions common;
    add_common_options(app, common, true);
    Options o;
    app.add_option("--job", o.job_id, "Job id")->required()->check(job_id_validator());
    app.add_flag("--json", o.json, "Print a JSON summary");
    // In the order --help lists them.
    const std::vector<Subcommand> subcommands{stage_command(o, StageDirection::in),
                                              stage_command(o, StageDirection::out),
                                              pre_run_command(o),
                                              post_run_command(o),
                                              end_command(o),
                                              paths_command(o, common)};
    add_subcommands(app, argc, argv, subcommands);

    return run_tool(tool, app, argc, argv, common,
                    [&] { return run_subcommand(tool, app, common, subcommands); });
}
