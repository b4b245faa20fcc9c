// bb-stage: stage-in, pre-run, post-run, stage-out and the job's paths.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "bbkit/error.hpp"
#include "bbkit/render.hpp"
#include "bbkit/stage.hpp"
#include "bbkit/store.hpp"
#include "bbkit/tool.hpp"

int main(int argc, char** argv) {
    using namespace bbkit;
    CLI::App app{"bb-stage: move a job's data in and out of its burst buffer"};
    app.require_subcommand(1);
    app.fallthrough();
    CommonOptions common;
    add_common_options(app, common, true);
    std::uint64_t job_id = 0;
    bool json = false, progress = false, retry = false, check = false;
    std::optional<std::string> output;
    app.add_option("--job", job_id, "Job id")->required()->check(job_id_validator());
    app.add_flag("--json", json, "Print a JSON summary");
    CLI::App* in = app.add_subcommand("in", "Stage in: allocated -> staging-in -> staged-in");
    CLI::App* out =
        app.add_subcommand("out", "Stage out: post-run -> staging-out -> staged-out (durable)");
    CLI::Option* retry_opt =
        out->add_flag("--retry", retry, "Run a failed stage-out again, after fixing its cause");
    for (CLI::App* sub : {in, out}) {
        sub->add_flag("--progress", progress, "Progress bar with rate and ETA on a terminal");
        CLI::Option* check_opt = sub->add_flag(
            "--check", check, "Only tell whether the stage is done: 0 done, 75 running elsewhere");
        if (sub == out)
            check_opt->excludes(retry_opt);
    }
    CLI::App* pre =
        app.add_subcommand("pre-run", "staged-in -> pre-run -> running, with the pre_run hook");
    CLI::App* post = app.add_subcommand(
        "post-run", "running (or staged-in, never pre-run) -> post-run, with the post_run hook");
    CLI::App* end = app.add_subcommand(
        "end", "Standalone job end: post-run if running, stage-out, teardown once staged out");
    CLI::App* paths =
        app.add_subcommand("paths", "Print the job's environment: BB_JOB_DIR=..., DW_...");
    add_file_option(*paths, common, "--output", output,
                    "Write the lines to FILE (Slurm's path file) instead; refused through sudo");

    return run_tool("bb-stage", app, argc, argv, common, [&]() -> int {
        const Config config = load_effective_config(common);
        StoreOptions store_options;
        // Reading commands never create state.
        store_options.read_only = paths->parsed() || check;
        StateStore store(config, store_options);
        const std::string who = "bb-stage " + app.get_subcommands().front()->get_name();
        if (*paths) {
            const std::string lines = job_paths(store, config, job_id);
            if (output)
                write_paths_file(*output, lines);
            else if (json)
                std::cout << json_text(paths_json(lines)) << '\n';
            else
                std::cout << lines;
            return 0;
        }
        if (*pre) {
            pre_run(store, config, job_id, who);
            return 0;
        }
        if (*post) {
            const std::string note = post_run(store, config, job_id, who);
            if (!note.empty())
                std::cout << "note: " << note << '\n';
            return 0;
        }
        if (*end) {
            const EndResult ended = end_job(store, config, job_id, who);
            if (json)
                std::cout << json_text(end_result_json(ended)) << '\n';
            else
                std::cout << end_result_text(ended);
            return 0;
        }
        if (check) {
            const StageResult done =
                check_stage(store, config, job_id, *in ? StageDirection::in : StageDirection::out);
            if (json)
                std::cout << json_text(stage_result_json(done)) << '\n';
            else
                std::cout << (*in ? "stage-in" : "stage-out") << " of " << done.key << ": done"
                          << (done.note.empty() ? "" : " (" + done.note + ")") << '\n';
            return 0;
        }
        StageOptions options;
        options.retry = retry;
        const bool bar = progress && isatty(STDERR_FILENO);
        if (bar)
            options.on_progress = [](const StagingProgress& p) {
                std::cerr << progress_bar(p) << std::flush;
            };
        const StageResult result = *in ? stage_in(store, config, job_id, options, who)
                                       : stage_out(store, config, job_id, options, who);
        if (bar)
            std::cerr << '\n';
        for (const std::string& w : result.warnings)
            std::cerr << "bb-stage: warning: " << bbkit::printable(w) << '\n';
        if (json)
            std::cout << json_text(stage_result_json(result)) << '\n';
        else
            std::cout << stage_result_text(result, *in ? "stage-in" : "stage-out");
        return 0;
    });
}
