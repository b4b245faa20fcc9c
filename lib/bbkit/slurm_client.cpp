#include "bbkit/slurm_client.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "bbkit/error.hpp"

namespace bbkit {

std::string slurm_program(const std::string& program) {
    const char* path = std::getenv("PATH");
    std::istringstream dirs(path ? path : "");
    for (std::string dir; std::getline(dirs, dir, ':');) {
        if (dir.empty() || dir[0] != '/')
            continue;
        const std::string candidate = dir + "/" + program;
        if (access(candidate.c_str(), X_OK) == 0)
            return candidate;
    }
    throw Error(ExitCode::unavailable,
                "cannot ask Slurm: " + program + " is not on PATH (install slurm-client)");
}

SlurmOutput run_slurm(const std::string& program, const SlurmCall& call) {
    ProcessSpec spec;
    spec.path = slurm_program(program);
    spec.args = call.args;
    spec.timeout = call.timeout;
    spec.stdin_data = call.stdin_data;
    spec.identity = call.identity;
    // As the caller: SLURM_CONF and friends. As a user: nothing of root's but where
    // slurm.conf is.
    spec.clean_env = call.identity.has_value();
    if (spec.clean_env)
        if (const char* conf = std::getenv("SLURM_CONF"))
            spec.env["SLURM_CONF"] = conf;
    SlurmOutput out;
    spec.on_stdout_line = [&out](const std::string& line) { out.lines.push_back(line); };
    out.outcome = run_process(spec);
    return out;
}

std::string slurm_failure(const std::string& program, const ProcessOutcome& o) {
    std::string why = o.timed_out ? "timed out"
                      : o.signal  ? "killed by signal " + std::to_string(o.signal)
                                  : "exit status " + std::to_string(o.exit_code);
    if (!o.last_stderr_line.empty())
        why += ": " + o.last_stderr_line;
    return "cannot ask Slurm: " + program + " failed (" + why + ")";
}

bool slurm_job_ended(const std::string& state) {
    // Slurm's final base states as squeue prints them; a job with a flag that still matters
    // (COMPLETING, REQUEUED, SPECIAL_EXIT, STAGE_OUT, ...) is shown by the flag instead.
    static const std::vector<std::string> ended = {"BOOT_FAIL", "CANCELLED",     "COMPLETED",
                                                   "DEADLINE",  "FAILED",        "NODE_FAIL",
                                                   "PREEMPTED", "OUT_OF_MEMORY", "TIMEOUT"};
    return std::find(ended.begin(), ended.end(), state) != ended.end();
}

bool slurm_job_waits(const std::string& state) {
    // Queued, held, requeued or suspended, as squeue prints them: none of its tasks runs.
    static const std::vector<std::string> waiting = {"PENDING",       "CONFIGURING", "REQUEUED",
                                                     "REQUEUE_HOLD",  "REQUEUE_FED", "SPECIAL_EXIT",
                                                     "RESV_DEL_HOLD", "SUSPENDED",   "STOPPED"};
    return std::find(waiting.begin(), waiting.end(), state) != waiting.end();
}

}  // namespace bbkit
