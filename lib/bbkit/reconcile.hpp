// bb-pool reconcile --slurm: the job buffers whose jobs Slurm no longer knows (a teardown that
// Slurm gave up on, a slurmctld state lost or reset), found by asking Slurm, and on request
// torn down. Conservative: a job Slurm still lists, in any state, is never touched, and when
// Slurm cannot be asked nothing is touched at all.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "bbkit/buffer.hpp"
#include "bbkit/config.hpp"
#include "bbkit/store.hpp"

namespace bbkit {

// Which jobs Slurm knows, and whether it knows one job. The real one runs Slurm's clients.
class SlurmJobs {
  public:
    virtual ~SlurmJobs() = default;
    // Every job id slurmctld still holds, in any state. Error(unavailable) when it cannot say.
    virtual std::vector<std::uint64_t> known_jobs() = 0;
    // false only when Slurm answers that the job id is invalid; Error(unavailable) when it
    // cannot answer.
    virtual bool knows(std::uint64_t job_id) = 0;
};

// Slurm's clients from PATH: `squeue --noheader --all --states=all --format=%A` for the list,
// `scontrol --oneliner show job ID` to confirm each job missing from it ("Invalid job id").
// The environment (SLURM_CONF) is passed on. Each call is bounded by `timeout`.
class SlurmClients : public SlurmJobs {
  public:
    explicit SlurmClients(std::chrono::milliseconds timeout = std::chrono::seconds(60));
    std::vector<std::uint64_t> known_jobs() override;
    bool knows(std::uint64_t job_id) override;

  private:
    std::chrono::milliseconds timeout_;
};

struct ReconcileEntry {
    Buffer buffer;
    bool torn_down = false;
    std::string note;  // why it was not torn down, or teardown's note
};

struct ReconcileResult {
    std::size_t checked = 0;               // live job buffers of this cluster
    std::vector<ReconcileEntry> orphans;   // those whose jobs Slurm does not know
};

// Lists the live job buffers of config.cluster whose job ids Slurm neither lists nor knows;
// with `apply`, tears each down (hurry: its job is gone). Slurm is asked before anything is
// touched: any failure to ask is Error(unavailable) and nothing changes. A teardown that fails
// is reported in its entry and the others go on.
ReconcileResult reconcile_slurm(StateStore& store, const Config& config, SlurmJobs& slurm,
                                bool apply, const std::string& tool);

}  // namespace bbkit
