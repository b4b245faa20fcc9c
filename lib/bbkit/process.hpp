// Processes: naming one so that a reused pid is never mistaken for it, stopping one, and
// running other programs (admin hooks and the mover). process.cpp is the only file that
// includes boost/process.hpp (it is slow to compile). Children stay in the caller's process
// group, so Slurm's kill of a hook's group reaches them too.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bbkit/identity.hpp"

namespace bbkit {

// A process, named so that a reused pid is never mistaken for it.
struct ProcessId {
    pid_t pid = 0;
    std::uint64_t start_time = 0;  // /proc/<pid>/stat field 22 (clock ticks since boot)

    static ProcessId self();
    // The process with that pid now, if any (start_time 0 when it does not exist).
    static ProcessId of(pid_t pid);
    // Whether this very process (same pid and start time) still exists.
    bool alive() const;
    bool operator==(const ProcessId& other) const {
        return pid == other.pid && start_time == other.start_time;
    }
};

// This boot's id (/proc/sys/kernel/random/boot_id), "unknown" where it cannot be read: what
// page-cache contents and snapshots written without fsync are only good for.
const std::string& boot_id();

// Stops `process` if it still is that process: SIGTERM through a pidfd, up to `grace` for it
// to exit, then SIGKILL. Returns false when it was already gone.
bool stop_process(const ProcessId& process, std::chrono::milliseconds grace);

// Waits up to `timeout` for `process` to exit on its own; true when it is gone.
bool wait_for_exit(const ProcessId& process, std::chrono::milliseconds timeout);

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
    // Who the child becomes before it executes the program (switch_identity; user.hpp,
    // identity_of); it exits 126 when it cannot. Unset: the caller's identity.
    std::optional<Identity> identity;
};

struct ProcessOutcome {
    int exit_code = -1;  // -1 when killed by a signal
    int signal = 0;
    bool timed_out = false;
    std::string last_stderr_line;
};

// Starts the program and waits for it, up to `timeout`: then SIGTERM, `grace`, SIGKILL.
// Throws system_error's Error (error.hpp) when it cannot be started, e.g. 77 for a file it may
// not execute.
ProcessOutcome run_process(const ProcessSpec& spec);

}  // namespace bbkit
