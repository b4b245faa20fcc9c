// bb-pool reconcile --slurm: the job buffers whose jobs Slurm no longer knows (a teardown that
// Slurm gave up on, a slurmctld state lost or reset), those of jobs whose buffer Slurm lost
// (a slurmctld killed before it saved its burst-buffer state: the job pends with
// BurstBufferState=pending while bbkit still holds the space it waits for), and in standalone
// mode those of jobs that ended before they ran whose EpilogSlurmctld never ended the buffer
// (Slurm kills a cancelled job's epilog with its prolog), found by asking Slurm, and on request
// torn down. Conservative: a job Slurm lists is touched only in those two cases, and when Slurm
// cannot be asked nothing is touched at all.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bbkit/buffer.hpp"
#include "bbkit/config.hpp"
#include "bbkit/error.hpp"
#include "bbkit/slurm_client.hpp"  // slurm_job_ended
#include "bbkit/store.hpp"

namespace bbkit {

// What Slurm says of one job it lists.
struct SlurmJob {
    std::string state;     // squeue's job state: "PENDING", "COMPLETING", "CANCELLED", ...
    std::string bb_state;  // its BurstBufferState ("pending", "staging-in", ...; empty if none)
};

// Which jobs Slurm knows, and whether it knows one job. The real one runs Slurm's clients.
class SlurmJobs {
  public:
    virtual ~SlurmJobs() = default;
    // Every job id slurmctld still holds, in any state. Error(unavailable) when it cannot say.
    virtual std::map<std::uint64_t, SlurmJob> known_jobs() = 0;
    // false only when Slurm answers that the job id is invalid; Error(unavailable) when it
    // cannot answer.
    virtual bool knows(std::uint64_t job_id) = 0;
};

// Slurm's clients from PATH: `squeue --noheader --all --states=all
// --Format=JobID:24,State:24,BurstBufferState:24` for the list,
// `scontrol --oneliner show job ID` to confirm each job missing from it ("Invalid job id").
// The environment (SLURM_CONF) is passed on. Each call is bounded by `timeout`.
class SlurmClients : public SlurmJobs {
  public:
    explicit SlurmClients(std::chrono::milliseconds timeout = std::chrono::seconds(60));
    std::map<std::uint64_t, SlurmJob> known_jobs() override;
    bool knows(std::uint64_t job_id) override;

  private:
    std::chrono::milliseconds timeout_;
};

// Why reconcile found a buffer.
enum class OrphanReason {
    unknown_to_slurm,  // neither squeue lists the job nor scontrol knows it
    pending_in_slurm,  // Slurm lists the job with BurstBufferState pending: it lost the buffer
    ended_in_slurm,    // standalone mode: the job ended before it ran, its buffer not ended
};

const char* to_string(OrphanReason reason);  // "unknown-to-slurm", ...

struct ReconcileEntry {
    Buffer buffer;
    bool torn_down = false;
    std::string note;  // why it was not torn down, or teardown's note
    OrphanReason reason = OrphanReason::unknown_to_slurm;
    std::optional<ExitCode> failure;  // the code of its teardown's error, when one failed
};

struct ReconcileResult {
    std::size_t checked = 0;              // live job buffers of this cluster
    std::vector<ReconcileEntry> orphans;  // in the order found
    std::size_t count(OrphanReason reason) const;
    // bb-pool reconcile's exit status: the code of the first teardown that failed, the others
    // having gone on (bbkit(7), EXIT STATUS); ok when none did. A buffer found already torn
    // down, as bb-teardown says of one, is no failure.
    ExitCode status() const;
};

// Lists the live job buffers of config.cluster whose job ids Slurm neither lists nor knows, and
// those in allocated, staging-in or staged-in whose job Slurm lists with BurstBufferState
// pending (Slurm sets staging-in before it calls setup, so pending with a buffer means it lost
// the buffer: the job waits for space bbkit holds for it, and will be set up again once free);
// with `apply`, tears each down (hurry: nothing of its job needs it). Slurm is asked before
// anything is touched: any failure to ask is Error(unavailable) and nothing changes. In
// standalone mode (bbkit's EpilogSlurmctld ends each buffer) also those in allocated,
// staging-in or staged-in whose job Slurm lists as ended (slurm_job_ended): the job never got
// to pre-run, so nothing of it is in the buffer, and the epilog that should have ended it did
// not (Slurm's flush of a job cancelled while CONFIGURING kills the epilog it has just started).
// A teardown that fails is reported in its entry and the others go on.
ReconcileResult reconcile_slurm(StateStore& store, const Config& config, SlurmJobs& slurm,
                                bool apply, const std::string& who);

}  // namespace bbkit
