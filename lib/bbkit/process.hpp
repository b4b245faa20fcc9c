// Running other programs: admin hooks and the mover. The only file that includes
// boost/process.hpp (it is slow to compile). Children stay in the caller's process group, so
// Slurm's kill of a hook's group reaches them too.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace bbkit {

struct ProcessSpec {
    std::string path;  // absolute; never looked up on PATH
    std::vector<std::string> args;
    // With `clean_env`, the child sees only `env` (plus a safe PATH); otherwise `env` is added to
    // the caller's environment.
    std::map<std::string, std::string> env;
    bool clean_env = true;
    std::string stdin_data;
    std::chrono::milliseconds timeout{std::chrono::hours(24)};
    std::chrono::milliseconds grace{5000};                   // after SIGTERM, before SIGKILL
    std::function<void(const std::string&)> on_stdout_line;  // called from a reader thread
};

struct ProcessOutcome {
    int exit_code = -1;  // -1 when killed by a signal
    int signal = 0;
    bool timed_out = false;
    std::string last_stderr_line;
};

// Starts the program and waits for it, up to `timeout`: then SIGTERM, `grace`, SIGKILL.
// Throws Error(software) when it cannot be started.
ProcessOutcome run_process(const ProcessSpec& spec);

}  // namespace bbkit
