#include "bbkit/reconcile.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <sstream>

#include "bbkit/error.hpp"
#include "bbkit/process.hpp"
#include "bbkit/slurm_client.hpp"
#include "bbkit/teardown.hpp"
#include "bbkit/text.hpp"

namespace bbkit {
namespace {

SlurmOutput run_client(const std::string& program, const std::vector<std::string>& args,
                       std::chrono::milliseconds timeout) {
    SlurmCall call;
    call.args = args;
    call.timeout = timeout;
    return run_slurm(program, call);
}

std::string failure(const std::string& program, const ProcessOutcome& o) {
    return slurm_failure(program, o) + "; nothing was torn down (is slurmctld up?)";
}

}  // namespace

const char* to_string(OrphanReason reason) {
    switch (reason) {
        case OrphanReason::unknown_to_slurm:
            return "unknown-to-slurm";
        case OrphanReason::pending_in_slurm:
            return "pending-in-slurm";
        case OrphanReason::ended_in_slurm:
            return "ended-in-slurm";
    }
    return "unknown-to-slurm";
}

SlurmClients::SlurmClients(std::chrono::milliseconds timeout) : timeout_(timeout) {}

std::map<std::uint64_t, SlurmJob> SlurmClients::known_jobs() {
    const SlurmOutput out = run_client(
        "squeue",
        {"--noheader", "--all", "--states=all", "--Format=JobID:24,State:24,BurstBufferState:24"},
        timeout_);
    if (out.outcome.exit_code != 0)
        throw Error(ExitCode::unavailable, failure("squeue", out.outcome));
    std::map<std::uint64_t, SlurmJob> jobs;
    for (const std::string& line : out.lines) {
        std::istringstream fields(line);
        std::string id;
        SlurmJob job_info;
        if (!(fields >> id))
            continue;
        fields >> job_info.state >> job_info.bb_state;  // no BurstBufferState without a buffer
        const std::optional<std::uint64_t> job = parse_decimal(id);
        if (!job)
            throw Error(ExitCode::unavailable, "cannot ask Slurm: squeue printed '" + line +
                                                   "' where a job id was expected; nothing was "
                                                   "torn down");
        jobs[*job] = job_info;
    }
    return jobs;
}

bool SlurmClients::knows(std::uint64_t job_id) {
    const SlurmOutput out =
        run_client("scontrol", {"--oneliner", "show", "job", std::to_string(job_id)}, timeout_);
    if (out.outcome.exit_code == 0)
        return true;
    if (out.outcome.last_stderr_line.find("Invalid job id") != std::string::npos)
        return false;
    throw Error(ExitCode::unavailable, failure("scontrol", out.outcome));
}

ReconcileResult reconcile_slurm(StateStore& store, const Config& config, SlurmJobs& slurm,
                                bool apply, const std::string& who) {
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
    const std::map<std::uint64_t, SlurmJob> listed = slurm.known_jobs();
    std::vector<std::pair<Buffer, OrphanReason>> orphans;
    for (const Buffer& b : live) {
        const auto found = listed.find(b.key.job_id);
        const bool before_pre_run = b.state == BufferState::allocated ||
                                    b.state == BufferState::staging_in ||
                                    b.state == BufferState::staged_in;
        if (found == listed.end()) {
            if (!slurm.knows(b.key.job_id))
                orphans.emplace_back(b, OrphanReason::unknown_to_slurm);
        } else if (before_pre_run && found->second.bb_state == "pending") {
            orphans.emplace_back(b, OrphanReason::pending_in_slurm);
        } else if (before_pre_run && config.mode == Mode::standalone &&
                   slurm_job_ended(found->second.state)) {
            orphans.emplace_back(b, OrphanReason::ended_in_slurm);
        }
    }
    for (const auto& [b, reason] : orphans) {
        ReconcileEntry entry{b, false, "", reason, std::nullopt};
        if (apply) {
            try {
                TeardownOptions options;
                options.hurry = true;  // its job is gone: nothing to wait for
                const TeardownResult t = teardown_job(store, config, b.key.job_id, options, who);
                entry.torn_down = t.found;
                entry.note = t.note;
            } catch (const Error& e) {
                entry.note = e.what();
                entry.failure = e.code();
                spdlog::warn("buffer {}: teardown failed: {}", b.key.str(), e.what());
            }
        }
        result.orphans.push_back(entry);
    }
    return result;
}

ExitCode ReconcileResult::status() const {
    for (const ReconcileEntry& e : orphans)
        if (e.failure)
            return *e.failure;
    return ExitCode::ok;
}

std::size_t ReconcileResult::count(OrphanReason reason) const {
    return static_cast<std::size_t>(
        std::count_if(orphans.begin(), orphans.end(),
                      [reason](const ReconcileEntry& e) { return e.reason == reason; }));
}

}  // namespace bbkit
