#include "bbkit/reconcile.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <sstream>

#include "bbkit/error.hpp"
#include "bbkit/process.hpp"
#include "bbkit/teardown.hpp"

namespace bbkit {
namespace {

// The absolute path of a program found on PATH; Error(unavailable) when there is none.
std::string on_path(const std::string& program) {
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

struct Output {
    ProcessOutcome outcome;
    std::vector<std::string> lines;
};

Output run_client(const std::string& program, const std::vector<std::string>& args,
                  std::chrono::milliseconds timeout) {
    ProcessSpec spec;
    spec.path = on_path(program);
    spec.args = args;
    spec.clean_env = false;  // SLURM_CONF and friends
    spec.timeout = timeout;
    Output out;
    spec.on_stdout_line = [&out](const std::string& line) { out.lines.push_back(line); };
    out.outcome = run_process(spec);
    return out;
}

std::string failure(const std::string& program, const ProcessOutcome& o) {
    std::string why = o.timed_out ? "timed out"
                      : o.signal  ? "killed by signal " + std::to_string(o.signal)
                                  : "exit status " + std::to_string(o.exit_code);
    if (!o.last_stderr_line.empty())
        why += ": " + o.last_stderr_line;
    return "cannot ask Slurm: " + program + " failed (" + why +
           "); nothing was torn down (is slurmctld up?)";
}

bool all_digits(const std::string& s) {
    return !s.empty() && s.size() <= 19 &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

SlurmClients::SlurmClients(std::chrono::milliseconds timeout) : timeout_(timeout) {}

std::vector<std::uint64_t> SlurmClients::known_jobs() {
    const Output out = run_client(
        "squeue", {"--noheader", "--all", "--states=all", "--format=%A"}, timeout_);
    if (out.outcome.exit_code != 0)
        throw Error(ExitCode::unavailable, failure("squeue", out.outcome));
    std::vector<std::uint64_t> jobs;
    for (std::string line : out.lines) {
        line.erase(std::remove_if(line.begin(), line.end(), [](char c) { return c == ' '; }),
                   line.end());
        if (line.empty())
            continue;
        if (!all_digits(line))
            throw Error(ExitCode::unavailable, "cannot ask Slurm: squeue printed '" + line +
                                                   "' where a job id was expected; nothing was "
                                                   "torn down");
        jobs.push_back(std::stoull(line));
    }
    return jobs;
}

bool SlurmClients::knows(std::uint64_t job_id) {
    const Output out =
        run_client("scontrol", {"--oneliner", "show", "job", std::to_string(job_id)}, timeout_);
    if (out.outcome.exit_code == 0)
        return true;
    if (out.outcome.last_stderr_line.find("Invalid job id") != std::string::npos)
        return false;
    throw Error(ExitCode::unavailable, failure("scontrol", out.outcome));
}

ReconcileResult reconcile_slurm(StateStore& store, const Config& config, SlurmJobs& slurm,
                                bool apply, const std::string& tool) {
    std::vector<Buffer> live;
    {
        ReadSnapshot snapshot(store);
        BufferFilter filter;
        filter.live_only = true;
        for (const Buffer& b : snapshot.list_buffers(filter))
            if (b.key.kind() == BufferKind::job && b.key.cluster == config.cluster)
                live.push_back(b);
    }
    ReconcileResult result;
    result.checked = live.size();
    if (live.empty())
        return result;
    // Ask everything first: a failure here leaves every buffer as it is.
    const std::vector<std::uint64_t> listed = slurm.known_jobs();
    const std::set<std::uint64_t> known(listed.begin(), listed.end());
    std::vector<Buffer> orphans;
    for (const Buffer& b : live)
        if (known.count(b.key.job_id) == 0 && !slurm.knows(b.key.job_id))
            orphans.push_back(b);
    for (const Buffer& b : orphans) {
        ReconcileEntry entry{b, false, ""};
        if (apply) {
            try {
                TeardownOptions options;
                options.hurry = true;  // its job is gone: nothing to wait for
                const TeardownResult t = teardown_job(store, config, b.key.job_id, options, tool);
                entry.torn_down = t.found;
                entry.note = t.note;
            } catch (const Error& e) {
                entry.note = e.what();
                spdlog::warn("buffer {}: teardown failed: {}", b.key.str(), e.what());
            }
        }
        result.orphans.push_back(entry);
    }
    return result;
}

}  // namespace bbkit
