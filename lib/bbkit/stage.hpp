// The job-side phases of a buffer: stage-in, pre-run, post-run, stage-out and its paths.
// bb-stage holds the buffer's run lock while it works and runs the data movement in bb-mover,
// a separate program that becomes the job's user before it touches any user path.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "bbkit/config.hpp"
#include "bbkit/mover_runner.hpp"
#include "bbkit/stage_plan.hpp"
#include "bbkit/staging_progress.hpp"
#include "bbkit/store.hpp"

namespace bbkit {

struct StageOptions {
    bool retry = false;  // stage-out: run again after a failure an admin has fixed
    // Each report of the mover, with the rate and ETA the progress record gets (progress bars).
    std::function<void(const StagingProgress&)> on_progress;
    // What runs the move (mover_runner.hpp); null: bb-mover, found (find_mover) before the
    // buffer changes state, so that a missing or untrusted one changes nothing.
    const MoverRunner* mover = nullptr;
};

struct StageResult {
    std::string key;
    bool nothing_to_do = false;  // already done (a second run copies nothing)
    std::string note;            // why nothing was done, when that is not obvious
    std::uint64_t files = 0, bytes = 0, skipped = 0;
    double seconds = 0;
    std::optional<MovePhases> phases;  // the mover's (stage_plan.hpp); absent when nothing ran
    std::vector<std::string> warnings;
};

// allocated -> staging-in -> staged-in. As the user, each line's source is checked first, and
// the mover's walk counts the trees against the buffer's capacity while it copies, stopping at
// the first file over it (Error(data) "stage-in needs at least X ... but the buffer holds Y";
// mover.hpp, MovePlan::capacity). A failure keeps staging-in with reason
// BurstBufferOperation and the mover's message; in standalone mode with TeardownFailure the
// buffer is then torn down. A timeout stops the mover and is recorded. The error thrown says
// the way on by the failure's kind (error.hpp, FailureKind), which it carries: the buffer's
// capacity, the pool's space, or the source.
StageResult stage_in(StateStore& store, const Config& config, std::uint64_t job_id,
                     const StageOptions& options, const std::string& who);

// post-run -> staging-out -> staged-out, durable before it is recorded. A failure keeps the
// buffer and its data in staging-out; only `retry` runs it again from there. A job whose last
// incarnation reached staged-out and has been torn down since has nothing to do, with a note:
// a restarted slurmctld replays the stage-out it had not yet recorded as done.
StageResult stage_out(StateStore& store, const Config& config, std::uint64_t job_id,
                      const StageOptions& options, const std::string& who);

// Whether stage_in (direction in) or stage_out would find nothing to do, without doing
// anything or taking the run lock: their result, note included, when the stage is done (the
// same states count as done); Error(temp_fail) while another process holds the buffer's run
// lock; else the error the stage itself would give, or Error(data) when it still has work.
// Slurm 24.05+ asks this after data_in and data_out (slurm_bb_test_data_in/out).
StageResult check_stage(StateStore& store, const Config& config, std::uint64_t job_id,
                        StageDirection direction);

// staged-in -> pre-run -> running (allocated -> staged-in first when nothing is staged in), and
// running -> post-run, each running the configured admin hook (pre_run, post_run) with the
// `other` timeout; a failing hook fails the phase with the last line of its stderr.
void pre_run(StateStore& store, const Config& config, std::uint64_t job_id, const std::string& who);
// post_run returns a note when there was nothing to do because the job's last incarnation went
// through post-run and has been torn down since (replayed by a restarted slurmctld).
std::string post_run(StateStore& store, const Config& config, std::uint64_t job_id,
                     const std::string& who);

struct EndResult {
    std::string key;   // the buffer ended; "" when the job had none left
    std::string note;  // why there was nothing to do
    bool ran = false;  // the job ran: post-run and stage-out went first
    StageResult stage_out;
    bool reaped = false;  // its space is released already
};

// A job's end when no scheduler plugin sequences it (bbkit(7), STANDALONE MODE): post-run if
// the job is running, stage-out, and teardown once the stage-out succeeded; a buffer whose job
// never ran is torn down at once, stopping its stager. A failed stage-out throws its error and
// keeps the buffer and its data (bb-stage out --retry, then end again). No live buffer: a note.
EndResult end_job(StateStore& store, const Config& config, std::uint64_t job_id,
                  const std::string& who);

// The KEY=VALUE lines of the job's environment (see job_environment).
std::string job_paths(StateStore& store, const Config& config, std::uint64_t job_id);

// Writes the lines into `path`: a missing file is created 0600; an existing one (Slurm's path
// file, made empty by the caller's slurmctld) is truncated and written in place, never
// replaced, when it is the caller's, has one name and is empty or holds such lines; anything
// else (a symlink, a device, a FIFO, another user's file, other content) is refused (fsops.hpp,
// open_own_output; exit 73).
void write_paths_file(const std::string& path, const std::string& lines);

}  // namespace bbkit
