// The edge every bbkit tool shares: the common options, logging to stderr, turning an error into
// "bb-TOOL: message" plus its exit code, in this one place, and a tool's subcommands as a table.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bbkit/config.hpp"
#include "bbkit/store.hpp"

namespace bbkit {

struct CommonOptions {
    std::optional<std::string> config_path;
    std::optional<std::string> state_dir;
    int verbose = 0;
    bool quiet = false;
    // Options naming a file root reads or writes: refused when root acts for a less
    // privileged caller (bbkit(7), SECURITY).
    std::vector<const CLI::Option*> file_options;
};

// Adds --config, --state-dir (when `with_state_dir`), -v/--verbose, -q/--quiet and --version.
void add_common_options(CLI::App& app, CommonOptions& options, bool with_state_dir);

// Adds an option naming a file the tool writes (or `app`'s subcommand reads as root); it is
// refused, exit 77, when root runs the tool for a less privileged caller (sudo).
CLI::Option* add_file_option(CLI::App& app, CommonOptions& options, const std::string& name,
                             std::optional<std::string>& target, const std::string& help);

// Checks a --job value with parse_job_id (CLI11 alone would accept " 7" and turn
// "99999999999999999999" into 2^64-1).
CLI::Validator job_id_validator();

// Whether `word` is one of the arguments: a tool with many subcommands adds a subcommand's
// options only when its name is on the command line (CLI11 selects a subcommand only by its
// exact name). Building all of bb-pool's took a third of `bb-pool --version`'s instructions.
bool on_command_line(int argc, char** argv, const char* word);

// One subcommand of a tool that acts on the state (bb-pool's, bb-stage's): a row of the table
// its main is, which add_subcommands builds and run_subcommand runs.
struct Subcommand {
    Subcommand(std::string name, std::string description)
        : name(std::move(name)), description(std::move(description)) {}

    std::string name;         // as typed, and as --help lists it
    std::string description;  // its line in --help
    // Adds its options to `sub`, its CLI11 app. Called only when `name` is on the command line
    // (on_command_line): a tool builds the options of the one subcommand it runs.
    std::function<void(CLI::App& sub)> add_options;
    // Whether it only reads, as the command line asks (bb-pool check without --repair, bb-stage
    // in --check): it then opens the state read-only, as every reader does, on any controller
    // (bbkit(7), STATE DIRECTORY). Unset: it writes.
    std::function<bool()> reads;
    StoreOptions store{};  // how else it opens the state (read_only follows `reads`)
    // What it runs once the command line is parsed. `who` ("bb-pool alloc") is what the
    // history and the audit log record.
    std::function<int(StateStore& store, const Config& config, const std::string& who)> run;
};

// Adds `table`'s subcommands to `app`, in the table's order (the order --help lists them), each
// with its options only when its name is one of `argv`.
void add_subcommands(CLI::App& app, int argc, char** argv, const std::vector<Subcommand>& table);

// Runs the subcommand of `table` that `app`'s command line selected: loads the configuration
// (load_effective_config), opens the state as the subcommand asks, and returns what it returns,
// `who` being "TOOL NAME". Error(software) when none was selected (require_subcommand(1)).
int run_subcommand(const std::string& tool, const CLI::App& app, const CommonOptions& options,
                   const std::vector<Subcommand>& table);

// Loads the configuration the options point at (--config, $BBKIT_CONFIG, /etc/bbkit/bbkit.toml)
// and applies --state-dir / $BBKIT_STATE_DIR. As root, the file must be one only root can
// change (check_root_controlled).
Config load_effective_config(const CommonOptions& options);

// Told of the error that ends a tool, besides its "bb-TOOL: message" line on stderr: the exit
// status and the message without the prefix, whole (stderr's line is shortened when long).
// bb-mover reports it to bb-stage on its standard output as well (stage_plan.hpp).
using ErrorReport = std::function<void(int status, const std::string& message)>;

// Parses the command line and runs `body`; returns the process exit status. CLI11 errors exit
// 64 (0 for --help/--version); bbkit::Error exits with its code; anything else exits 70
// (bbkit(7), EXIT STATUS). Each error is one line on stderr, after `report` is told of it.
int run_tool(const std::string& tool, CLI::App& app, int argc, char** argv,
             const CommonOptions& options, const std::function<int()>& body,
             const ErrorReport& report = {});

// Reads a job script (`what`: "job script", "directives file") whole ("-" is standard input),
// with the caller's permissions when root runs for a less privileged caller (open_as_caller),
// the one place a tool reads one. More than `limit` bytes ([limits] script_size) is
// Error(data) naming the size and the limit, decided from the size of a regular file before
// any byte is read, and as soon as a pipe or device passes the limit: memory and time stay
// bounded whatever the file. Other errors name the path, with exit_code_for's code (66, 77, 74).
std::string read_script_file(const std::string& path, std::uint64_t limit,
                             const std::string& what = "job script");

}  // namespace bbkit
