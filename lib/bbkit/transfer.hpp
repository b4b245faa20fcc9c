// Stages on transfer nodes (bbkit(7), STAGING ON TRANSFER NODES): the move of a pool with
// staging = "slurm" runs as a Slurm job of the buffer's user in the pool's transfer partition,
// spread over up to transfer_nodes nodes, never on the host that runs the hooks and never as
// root. bb-stage keeps its run lock and every decision (stage.hpp): this runner only starts
// the job, or finds the one its sealed record names, and turns the movers' reports, which they
// write into the job's directory in the pool, back into report lines.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bbkit/buffer.hpp"
#include "bbkit/config.hpp"
#include "bbkit/mover_runner.hpp"
#include "bbkit/pool_dir.hpp"
#include "bbkit/stage_plan.hpp"
#include "bbkit/store.hpp"

namespace bbkit {

// What Slurm says of a transfer job (scontrol show job): its state, its nodes, its exit code.
struct TransferJobState {
    bool known = false;     // Slurm knows the job
    std::string state;      // JobState: PENDING, RUNNING, COMPLETED, ...
    std::string nodes;      // NodeList ("(null)" while pending)
    std::string exit_code;  // ExitCode: "0:0"
    std::uint64_t uid = 0;  // UserId's number
    std::string name;       // JobName
    unsigned restarts = 0;  // Restarts: how often Slurm requeued it
};

// Slurm's answer about a job, from `scontrol --oneliner show job` (`lines`, its output):
// Error(data) for output that is not one.
TransferJobState parse_transfer_job(const std::vector<std::string>& lines);

// The job's name for a transfer directory: "bbkit." + directory (TransferRecord::directory).
std::string transfer_job_name(const std::string& directory);

// The batch script of a transfer job: `parts` movers in one step (`srun`, the controller's
// srun; a task per node, each its part of the plan, reports in report.RUN.TASK, RUN Slurm's
// restart count), then, over more than one part and once each part reported its summary, one
// mover of the whole plan (report.RUN.finish), which finds every file in place and gives the
// directories their times and modes once every part has written into them. The job runs
// with nothing of anyone's environment (empty_export): the script sets its own PATH.
std::string transfer_script(const std::string& mover, const std::string& srun, std::uint32_t parts,
                            StageDirection direction, const std::string& key);

// The movers' reports of one run of the job (its Slurm restart count: a requeued job's movers
// write report.RUN.PART and report.RUN.finish of their own) as one mover's lines: each file
// read from where it was left (one that shrank is read again from its start), summed.
class TransferReports {
  public:
    using Clock = std::chrono::steady_clock;
    // `since`: when this run's reports are first looked for (the start of every mover's silence).
    TransferReports(std::uint32_t parts, unsigned run, Clock::time_point since = Clock::now());
    unsigned run() const { return run_; }
    // Reads what the files in `dir` (the transfer directory, open) gained since the last call,
    // only regular files of `uid` with one name; a line longer than 64 KiB is dropped. Returns
    // whether anything changed; `now` is when (a file that grew ends its mover's silence).
    bool read(int dir, uid_t uid, Clock::time_point now = Clock::now());
    // How long the quietest mover still due to report has written nothing, at `now`: each part
    // without a summary, and the finishing mover (over more than one part) once every part has
    // one, counted from its last report's growth, or from the last part's for the finishing
    // mover; zero when none is due.
    Clock::duration silence(Clock::time_point now) const;
    // One progress line summing the parts' last ones (progress_line's form).
    std::string progress() const;
    // Every part and the finishing mover (over more than one part) reported a summary: one
    // summary line of them all (files, bytes and skips of the parts, `seconds` the wall time).
    std::optional<std::string> summary(double seconds) const;
    // The first error line a part or the finishing mover reported, as it reported it.
    std::optional<std::string> error() const;
    // Each part's last progress ("part 0: 12/40 files, 1.2 GiB ...") for bb-stat job.
    std::vector<std::string> parts_text() const;

  private:
    struct Part {
        Clock::time_point grew;  // when its report last grew (the run's start before it did)
        std::uint64_t offset = 0;
        std::string partial;  // a line not yet ended
        bool overlong = false;
        std::optional<MoverReport> progress, summary;
        std::optional<std::string> error;
    };
    bool read_one(int dir, const std::string& name, uid_t uid, Part& part, Clock::time_point now);
    unsigned run_;
    std::vector<Part> parts_;
    Part finish_;
};

// How long bb-stage waits after asking Slurm about its transfer job before it asks again
// (bbkit(7), STAGING ON TRANSFER NODES): Slurm is asked only what the reports cannot say, that
// the job ended without them. 5 s while the answer is in doubt (no answer, one saying the job
// ended, which must be confirmed, or a mover still due that has been silent for 5 s); 30 s
// while the job waits (slurm_job_waits), 5 s once something says it started (to learn
// where); 60 s while every mover still due reports (a mover killed goes silent). `answered`:
// the last ask got an answer, `job`; `silence`: TransferReports::silence; `reported`: a report
// grew since, or Slurm's batch.out changed.
std::chrono::seconds slurm_ask_interval(bool answered, const TransferJobState& job,
                                        std::chrono::steady_clock::duration silence, bool reported);

// Once every part has reported its summary: whether the transfer job is cancelled now. It ends
// by itself when its last mover has finished (Slurm then records it COMPLETED), so a job still
// running is given `transfer_end_grace` to; one waiting (requeued after its last mover finished)
// would run again, and is cancelled at once, as is one that outstays the grace. `waited`: since
// the summary.
constexpr std::chrono::seconds transfer_end_grace{20};
bool cancel_after_summary(const TransferJobState& job, std::chrono::steady_clock::duration waited);

// Runs a stage's move as a transfer job (MoverRunner). `b` is the buffer as the stage entered
// its working state, under the run lock the caller holds; `mover` the path of bb-mover on the
// transfer nodes (the same installation as this host's).
class TransferRunner : public MoverRunner {
  public:
    TransferRunner(StateStore& store, const Config& config, Buffer b, std::string mover,
                   std::string who);
    // A job the record names and Slurm still runs is waited for, not started again; one that
    // ended is judged by its reports (a complete set is the stage's success); otherwise a new
    // job is submitted as the user (sbatch run as them, the name recorded before, the id after
    // it is known). A complete set of reports is the stage's success at once; a part's error
    // becomes the stage's once Slurm says the job ended (a requeued job, whose node failed,
    // starts its movers and their reports again); a job that ended without either fails the
    // stage with Slurm's state. Progress and place lines come as the reports grow; Slurm is
    // asked as slurm_ask_interval says; at `timeout` the job is cancelled.
    ProcessOutcome run(const StagePlan& plan, std::chrono::seconds timeout,
                       const std::function<void(const std::string&)>& on_line) const override;

  private:
    StateStore& store_;
    const Config& config_;
    Buffer buffer_;
    std::string mover_;
    std::string who_;
};

// A buffer's recorded transfer job at its end (bb-teardown): cancelled when Slurm still has it
// (scancel; only a job of the recorded name and user), waited for up to `wait` to be gone from
// its nodes, and its directory in `dir` (the buffer's pool) removed. Error(unavailable) when
// Slurm cannot be asked or the job outlives `wait`: the buffer must not be removed under a
// mover still writing into it.
void end_transfer_job(PoolDir& dir, const Buffer& b, std::chrono::seconds wait);

}  // namespace bbkit
