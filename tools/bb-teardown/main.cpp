// bb-teardown: ends a job's burst buffer or destroys a persistent one.
#include <unistd.h>

#include <iostream>

#include "bbkit/error.hpp"
#include "bbkit/render.hpp"
#include "bbkit/store.hpp"
#include "bbkit/teardown.hpp"
#include "bbkit/tool.hpp"

int main(int argc, char** argv) {
    using namespace bbkit;
    CLI::App app{"bb-teardown: end a job's burst buffer or destroy a persistent one"};
    CommonOptions common;
    add_common_options(app, common, true);
    std::optional<std::uint64_t> job_id;
    std::optional<std::string> persistent;
    TeardownOptions options;
    bool json = false;
    CLI::Option* job_opt =
        app.add_option("--job", job_id, "Job id whose buffer ends")->check(job_id_validator());
    CLI::Option* persistent_opt =
        app.add_option("--persistent", persistent, "Persistent buffer to destroy");
    job_opt->excludes(persistent_opt);
    app.add_flag("--hurry", options.hurry, "Do not wait for a running stager: stop it now");
    app.add_flag("--force", options.force,
                 "Destroy a persistent buffer even while jobs use it; in standalone mode, end a "
                 "job's buffer although its results are not staged out (audited)");
    app.add_flag("--json", json, "Print JSON");

    return run_tool("bb-teardown", app, argc, argv, common, [&]() -> int {
        if (!job_id && !persistent)
            throw Error(ExitCode::usage, "give --job ID or --persistent NAME");
        const Config config = load_effective_config(common);
        StateStore store(config);
        bool shown = false;  // a progress line to end before anything else is printed
        if (isatty(STDERR_FILENO))
            options.on_progress = [&shown](const RemovalProgress& p) {
                std::cerr << removal_progress_line(p) << std::flush;
                shown = true;
            };
        const TeardownResult result =
            job_id ? teardown_job(store, config, *job_id, options, "bb-teardown")
                   : teardown_persistent(store, config, *persistent, options, "bb-teardown");
        if (shown)
            std::cerr << '\n';
        if (json)
            std::cout << json_text(teardown_json(result)) << '\n';
        else
            std::cout << teardown_text(result);
        return 0;
    });
}
