#include "bbkit/tool.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "bbkit/buffer.hpp"
#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"

namespace bbkit {
namespace {

void setup_logging(const std::string& tool, const CommonOptions& options) {
    auto logger = spdlog::stderr_color_mt(tool);
    logger->set_pattern("%n: %^%l%$: %v");
    spdlog::level::level_enum level = spdlog::level::warn;
    if (options.quiet)
        level = spdlog::level::err;
    if (options.verbose == 1)
        level = spdlog::level::info;
    if (options.verbose == 2)
        level = spdlog::level::debug;
    if (options.verbose >= 3)
        level = spdlog::level::trace;
    logger->set_level(level);
    spdlog::set_default_logger(logger);
}

// Messages echo the offending token, which hostile input can make megabytes long: keep the
// start (what failed) and the end (what to do) of a long one.
std::string bounded(const std::string& message) {
    constexpr std::size_t keep = 480;
    if (message.size() <= 2 * keep + 64)
        return message;
    return message.substr(0, keep) + "[... " + std::to_string(message.size() - 2 * keep) +
           " bytes ...]" + message.substr(message.size() - keep);
}

}  // namespace

void add_common_options(CLI::App& app, CommonOptions& options, bool with_state_dir) {
    app.set_version_flag("--version", std::string("bbkit ") + BBKIT_VERSION);
    app.add_option("--config", options.config_path,
                   "Configuration file (default: $BBKIT_CONFIG, then /etc/bbkit/bbkit.toml)");
    if (with_state_dir)
        app.add_option(
            "--state-dir", options.state_dir,
            "State directory (default: $BBKIT_STATE_DIR, then state_dir of the configuration)");
    app.add_flag("-v,--verbose", options.verbose, "More log output on stderr (repeatable)");
    app.add_flag("-q,--quiet", options.quiet, "Only errors on stderr");
}

CLI::Validator job_id_validator() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            try {
                parse_job_id(text);
            } catch (const Error& e) {
                return e.what();
            }
            return "";
        },
        "JOBID");
}

bool on_command_line(int argc, char** argv, const char* word) {
    for (int i = 1; i < argc; ++i)
        if (std::strcmp(argv[i], word) == 0)
            return true;
    return false;
}

Config load_effective_config(const CommonOptions& options) {
    Config config = load_config(locate_config(options.config_path));
    if (options.state_dir) {
        config.state_dir = *options.state_dir;
    } else if (const char* env = std::getenv("BBKIT_STATE_DIR"); env && *env) {
        config.state_dir = env;
    }
    if (config.state_dir.empty() || config.state_dir[0] != '/')
        throw Error(ExitCode::usage,
                    "state directory '" + config.state_dir + "' is not an absolute path");
    return config;
}

int run_tool(const std::string& tool, CLI::App& app, int argc, char** argv,
             const CommonOptions& options, const std::function<int()>& body) {
    if (fault_list_requested()) {  // for tests/fault/run: see bbkit(7), CRASH INJECTION
        for (const FaultPointInfo& point : fault_points())
            std::cout << point.name << '\t' << point.where << '\n';
        return 0;
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::Success& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::cerr << tool << ": " << bounded(e.what()) << " (see " << tool << " --help)\n";
        return static_cast<int>(ExitCode::usage);
    }
    setup_logging(tool, options);
    try {
        return body();
    } catch (const Error& e) {
        std::cerr << tool << ": " << bounded(e.what()) << '\n';
        return e.exit_status();
    } catch (const std::exception& e) {
        std::cerr << tool << ": internal error: " << bounded(e.what()) << '\n';
        return static_cast<int>(ExitCode::software);
    }
}

std::string read_input_file(const std::string& path) {
    std::ostringstream data;
    if (path == "-") {
        data << std::cin.rdbuf();
        return data.str();
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        const int err = errno;
        const ExitCode code =
            (err == EACCES || err == EPERM) ? ExitCode::no_perm : ExitCode::no_input;
        throw Error(code, "cannot read '" + path + "': " + std::strerror(err));
    }
    data << in.rdbuf();
    if (in.bad())
        throw Error(ExitCode::io, "cannot read '" + path + "': read error");
    return data.str();
}

}  // namespace bbkit
