// bb-parse: parses a job's burst-buffer request, sizes and the configuration.
#include <iostream>

#include "bbkit/config.hpp"
#include "bbkit/directive.hpp"
#include "bbkit/error.hpp"
#include "bbkit/render.hpp"
#include "bbkit/size.hpp"
#include "bbkit/slurm_view.hpp"
#include "bbkit/sources.hpp"
#include "bbkit/state_dir.hpp"
#include "bbkit/tool.hpp"
#include "bbkit/user.hpp"

namespace {

using namespace bbkit;

struct RequestOptions {
    std::optional<std::string> script;
    std::optional<std::string> bb;
    std::optional<std::string> bbf;
    JobContext job;
    bool json = false;
    bool emit_script = false;
    bool check_sources = false;
    bool symbols_replaced = false;
};

struct SizeOptions {
    std::string expression;
    std::optional<std::string> granularity;
    bool json = false;
};

void print_json(const nlohmann::json& value) {
    std::cout << json_text(value) << '\n';
}

int run_size(const SizeOptions& options) {
    const Size size = parse_size(options.expression);
    const std::uint64_t granularity =
        options.granularity ? parse_capacity(*options.granularity) : 1;
    const std::uint64_t rounded = size.nodes ? size.value : round_up(size.value, granularity);
    if (options.json)
        print_json(size_json(size, rounded));
    else
        std::cout << size_text(size, rounded);
    return 0;
}

int run_config(const CommonOptions& common, bool json) {
    const Config config = load_effective_config(common);
    const FileSystemKind fs = state_dir_file_system(config);
    if (json)
        print_json(config_json(config, &fs));
    else
        std::cout << config_text(config, &fs);
    return 0;
}

int run_request(const CommonOptions& common, RequestOptions& options) {
    if (!options.script && !options.bb && !options.bbf)
        throw Error(ExitCode::usage,
                    "nothing to parse: give --script FILE, --bb TEXT or --bbf FILE");
    const Config config = load_effective_config(common);
    RequestText text;
    if (options.script)
        text.script = read_script_file(*options.script, config.limits.script_size);
    if (options.bb)
        text.bb = *options.bb;
    if (options.bbf)
        text.bbf = read_script_file(*options.bbf, config.limits.script_size, "directives file");
    text.symbols_replaced = options.symbols_replaced;
    const Request request = parse_request(text, config, options.job);
    check_slurm_view(text, request, config);

    if (options.emit_script) {
        for (const std::string& line : canonical_lines(request, config))
            std::cout << line << '\n';
        return 0;
    }
    std::optional<SourceTotals> totals;
    if (options.check_sources) {
        act_as_user(options.job.user, "--check-sources");
        const std::optional<std::uint64_t> capacity =
            request.job_buffer ? std::optional<std::uint64_t>(request.job_buffer->allocated)
                               : std::nullopt;
        totals = measure_stage_in(request.stage_in, capacity);
    }
    if (options.json) {
        nlohmann::json out = request_json(request);
        if (totals)
            out["sources"] = sources_json(*totals);
        print_json(out);
    } else {
        std::cout << request_text(request);
        if (totals)
            std::cout << sources_text(*totals);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"bb-parse: parse and validate burst-buffer requests, sizes and bbkit.toml"};
    app.require_subcommand(0, 1);
    app.fallthrough();
    CommonOptions common;
    add_common_options(app, common, false);

    RequestOptions request;
    app.add_option("--script", request.script,
                   "Job script to read ('-' for standard input; at most [limits] script_size)");
    app.add_option("--bb", request.bb, "Directives or the short form, as sbatch --bb takes them");
    app.add_option("--bbf", request.bbf, "File of directives, as sbatch --bbf takes it");
    app.add_option("--job-id", request.job.job_id, "Job id (for %j and %A)");
    app.add_option("--user", request.job.user,
                   "Job user, name or uid (for %u and the user checks)");
    app.add_option("--array-job-id", request.job.array_job_id, "Array master job id (for %A)");
    app.add_option("--array-task-id", request.job.array_task_id, "Array task id (for %a and %b)");
    app.add_option("--workdir", request.job.workdir, "Job working directory (for %d)");
    app.add_option("--job-name", request.job.job_name, "Job name (for %x)");
    app.add_flag("--symbols-replaced", request.symbols_replaced,
                 "The scheduler replaced the %-symbols already: read the text as it is");
    app.add_flag("--json", request.json, "Print the normalized request as JSON");
    app.add_flag("--emit-script", request.emit_script, "Print the canonical directive lines");
    app.add_flag("--check-sources", request.check_sources,
                 "Check, as the job's user, that every stage-in source is readable and fits");

    SizeOptions size;
    CLI::App* size_cmd =
        app.add_subcommand("size", "Parse a size; print bytes, rounded bytes, form");
    size_cmd->add_option("EXPR", size.expression, "Size such as 100GiB, 4GB, 1200 or 2N")
        ->required();
    size_cmd->add_option("--granularity", size.granularity, "Round up to a multiple of this size");
    size_cmd->add_flag("--json", size.json, "Print JSON: bytes, nodes, rounded, text");

    bool config_json_flag = false;
    CLI::App* config_cmd = app.add_subcommand("config", "Print the effective configuration");
    config_cmd->add_flag("--json", config_json_flag, "Print JSON");

    return run_tool("bb-parse", app, argc, argv, common, [&]() -> int {
        if (*size_cmd)
            return run_size(size);
        if (*config_cmd)
            return run_config(common, config_json_flag);
        return run_request(common, request);
    });
}
