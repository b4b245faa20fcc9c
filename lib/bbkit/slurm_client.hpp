// Slurm's client programs (squeue, scontrol, sbatch, scancel) run as bbkit asks them: found on
// PATH (root's: sudo's secure_path, a unit's Environment=), with the caller's environment for
// SLURM_CONF and friends, or as a user, and each failure said once, the same way.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "bbkit/process.hpp"

namespace bbkit {

// The absolute path of `program` on PATH; Error(unavailable) "cannot ask Slurm: sbatch is not on
// PATH (install slurm-client)" when there is none.
std::string slurm_program(const std::string& program);

struct SlurmOutput {
    ProcessOutcome outcome;
    std::vector<std::string> lines;  // standard output
};

struct SlurmCall {
    std::vector<std::string> args;
    std::chrono::milliseconds timeout{std::chrono::seconds(30)};
    std::string stdin_data;
    // Run as this user (ProcessSpec::identity) with an environment of SLURM_CONF alone (when
    // the caller has it) and a safe PATH; unset: as the caller, with the caller's environment.
    std::optional<Identity> identity;
};

SlurmOutput run_slurm(const std::string& program, const SlurmCall& call);

// Whether squeue's (or scontrol's) job state is a final one (COMPLETED, CANCELLED, FAILED,
// TIMEOUT, ...): the job will never run again and its epilog is over (COMPLETING is not final).
bool slurm_job_ended(const std::string& state);

// Whether squeue's (or scontrol's) job state is one where none of the job's tasks runs and the
// job is not over: pending, configuring, requeued, held or suspended.
bool slurm_job_waits(const std::string& state);

// "cannot ask Slurm: PROGRAM failed (exit status 1: its last line of standard error)".
std::string slurm_failure(const std::string& program, const ProcessOutcome& outcome);

}  // namespace bbkit
