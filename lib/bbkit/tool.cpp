#include "bbkit/tool.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bbkit/buffer.hpp"
#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/text.hpp"
#include "bbkit/trust.hpp"

namespace bbkit {
namespace {

// Log lines carry file names and users' text: each record is written as one line (see
// printable), whatever its payload holds.
class OneLineSink : public spdlog::sinks::sink {
  public:
    explicit OneLineSink(std::shared_ptr<spdlog::sinks::sink> inner) : inner_(std::move(inner)) {}
    void log(const spdlog::details::log_msg& msg) override {
        const std::string text = printable({msg.payload.data(), msg.payload.size()});
        spdlog::details::log_msg copy = msg;
        copy.payload = text;
        inner_->log(copy);
    }
    void flush() override { inner_->flush(); }
    void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
    void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
        inner_->set_formatter(std::move(formatter));
    }

  private:
    std::shared_ptr<spdlog::sinks::sink> inner_;
};

void setup_logging(const std::string& tool, const CommonOptions& options) {
    auto logger = std::make_shared<spdlog::logger>(
        tool,
        std::make_shared<OneLineSink>(std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
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
// start (what failed) and the end (what to do) of a long one. They are the last line a tool
// prints, which the Slurm hooks show as the job's reason: one line, whatever the token held.
std::string bounded(const std::string& raw) {
    constexpr std::size_t keep = 480;
    const std::string message = printable(raw);
    if (message.size() <= 2 * keep + 64)
        return message;
    return message.substr(0, keep) + "[... " + std::to_string(message.size() - 2 * keep) +
           " bytes ...]" + message.substr(message.size() - keep);
}

// The error goes last, after whatever the tool already printed on stdout.
std::ostream& error_stream() {
    std::cout.flush();
    return std::cerr;
}

}  // namespace

void add_common_options(CLI::App& app, CommonOptions& options, bool with_state_dir) {
    app.set_version_flag("--version", std::string("bbkit ") + BBKIT_VERSION);
    add_file_option(app, options, "--config", options.config_path,
                    "Configuration file (default: $BBKIT_CONFIG, then /etc/bbkit/bbkit.toml)");
    if (with_state_dir)
        add_file_option(
            app, options, "--state-dir", options.state_dir,
            "State directory (default: $BBKIT_STATE_DIR, then state_dir of the configuration)");
    app.add_flag("-v,--verbose", options.verbose, "More log output on stderr (repeatable)");
    app.add_flag("-q,--quiet", options.quiet, "Only errors on stderr");
}

CLI::Option* add_file_option(CLI::App& app, CommonOptions& options, const std::string& name,
                             std::optional<std::string>& target, const std::string& help) {
    CLI::Option* option = app.add_option(name, target, help);
    options.file_options.push_back(option);
    return option;
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

void add_subcommands(CLI::App& app, int argc, char** argv, const std::vector<Subcommand>& table) {
    for (const Subcommand& row : table) {
        CLI::App* sub = app.add_subcommand(row.name, row.description);
        if (row.add_options && on_command_line(argc, argv, row.name.c_str()))
            row.add_options(*sub);
    }
}

int run_subcommand(const std::string& tool, const CLI::App& app, const CommonOptions& options,
                   const std::vector<Subcommand>& table) {
    for (const Subcommand& row : table) {
        if (!app.get_subcommand(row.name)->parsed())
            continue;
        const Config config = load_effective_config(options);
        StoreOptions store_options = row.store;
        store_options.read_only = row.reads && row.reads();
        StateStore store(config, store_options);
        return row.run(store, config, tool + " " + row.name);
    }
    throw Error(ExitCode::software, "no subcommand to run");
}

Config load_effective_config(const CommonOptions& options) {
    const std::string path = locate_config(options.config_path);
    check_root_controlled(path, "configuration");
    Config config = load_config(path);
    if (options.state_dir) {
        config.state_dir = *options.state_dir;
    } else if (const char* env = std::getenv("BBKIT_STATE_DIR"); env && *env) {
        config.state_dir = env;
    }
    if (config.state_dir.empty() || config.state_dir[0] != '/')
        throw Error(ExitCode::usage,
                    "state directory '" + config.state_dir + "' is not an absolute path");
    // The Slurm commands the tool runs read root's choice (run_slurm passes SLURM_CONF on).
    if (!config.slurm_conf.empty())
        setenv("SLURM_CONF", config.slurm_conf.c_str(), 1);
    return config;
}

namespace {

// A tool of subcommands given a word that is none of them ("bb-pool lst"): said so, with the
// ones it has, instead of whatever else CLI11 found missing first ("A subcommand is required",
// "--job is required").
std::optional<std::string> unknown_subcommand(const CLI::App& app) {
    const std::vector<const CLI::App*> all =
        app.get_subcommands([](const CLI::App*) { return true; });
    if (all.empty())
        return std::nullopt;
    for (const CLI::App* sub : all)
        if (sub->parsed())
            return std::nullopt;
    for (const std::string& word : app.remaining()) {
        if (word.empty() || word[0] == '-')
            continue;
        std::vector<std::string> names;
        for (const CLI::App* sub : all)
            names.push_back(sub->get_name());
        return "unknown subcommand '" + printable(word) + "' (" + join(names, ", ") + ")";
    }
    return std::nullopt;
}

}  // namespace

int run_tool(const std::string& tool, CLI::App& app, int argc, char** argv,
             const CommonOptions& options, const std::function<int()>& body,
             const ErrorReport& report) {
    // `hint` follows the message whole: a long message is shortened, never what to do.
    // An error without words is a defect elsewhere; it still reaches the caller as a line.
    const auto fail = [&](ExitCode code, const std::string& said, const std::string& hint = "") {
        const std::string message =
            said.empty() ? "failed (exit " + std::to_string(static_cast<int>(code)) +
                               ") with an empty error message (an internal error: please report)"
                         : said;
        if (report)
            report(static_cast<int>(code), message + hint);
        error_stream() << tool << ": " << bounded(message) << hint << '\n';
        return static_cast<int>(code);
    };
    drop_caller_environment();
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
        return fail(ExitCode::usage, unknown_subcommand(app).value_or(e.what()),
                    " (see " + tool + " --help)");
    }
    setup_logging(tool, options);
    try {
        for (const CLI::Option* option : options.file_options)
            if (option->count() > 0)
                refuse_caller_file_choice(option->get_name());
        return body();
    } catch (const Error& e) {
        return fail(e.code(), e.what());
    } catch (const std::exception& e) {
        return fail(ExitCode::software, std::string("internal error: ") + e.what());
    }
}

std::string read_script_file(const std::string& path, std::uint64_t limit,
                             const std::string& what) {
    const std::string named =
        path == "-" ? what + " from standard input" : what + " '" + path + "'";
    const auto too_large = [&](const std::string& size) {
        return Error(ExitCode::data, "cannot read " + named + ": " + size + ", over the limit of " +
                                         std::to_string(limit) +
                                         " bytes ([limits] script_size in bbkit.toml: shorten "
                                         "the script or raise the limit)");
    };
    Fd owned;
    if (path != "-")
        owned = open_as_caller(path);
    const int fd = path == "-" ? STDIN_FILENO : owned.get();
    struct stat st {};
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        static_cast<std::uint64_t>(st.st_size) > limit)
        throw too_large(std::to_string(st.st_size) + " bytes");
    try {
        return read_all(fd, named, static_cast<std::size_t>(limit));
    } catch (const Error& e) {
        if (e.code() == ExitCode::data)  // read_all's only data error: past the limit
            throw too_large("more than " + std::to_string(limit) + " bytes");
        throw;
    }
}

}  // namespace bbkit
