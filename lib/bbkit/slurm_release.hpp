// The Slurm release a site runs (bbkit.toml's slurm_release, "YY.MM") and what bbkit reproduces
// differently from one release to the next: the layout of `scontrol show burst` (bbkit(7),
// Slurm releases). Every "which release prints what" rule is here.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace bbkit {

struct SlurmRelease {
    unsigned year = 0;   // 24 for 24.11
    unsigned month = 0;  // 11 for 24.11
};

bool operator==(SlurmRelease a, SlurmRelease b);
bool operator<(SlurmRelease a, SlurmRelease b);

// "24.11".
std::string to_string(SlurmRelease release);

// The releases whose layout bbkit knows, oldest first: 20.11 to 26.05.
const std::vector<SlurmRelease>& known_slurm_releases();

// "YY.MM" naming a known release. Error(config) for anything else: another shape ("24.5",
// "24.11.5"), a release before 20.11, or one bbkit does not know.
SlurmRelease parse_slurm_release(const std::string& text);

// Slurm's default PollInterval (burst_buffer.conf), in seconds.
constexpr unsigned default_poll_interval = 15;

// What tells one release's `scontrol show burst` from another's, in the part bbkit prints.
struct BurstLayout {
    std::string pool_key;  // "AltPoolName" up to 20.11, "PoolName" from 21.08
    bool poll_interval;    // a "PollInterval=N" line after "Flags=", from 24.05
};

// The layout of `release`; without one, the newest release's.
BurstLayout burst_layout(const std::optional<SlurmRelease>& release);

// sbatch's --export for a job that starts with nothing of anyone's environment (a transfer job,
// bbkit(7), STAGING ON TRANSFER NODES): "NIL" from 24.11, whose sbatch has it (there "NONE"
// also loads the user's login environment on the node, as --get-user-env does, running their
// shell's startup files, and Slurm holds the job when that fails or takes over 8 s); "NONE"
// before, which 22.05 documents as ignoring --get-user-env. Without a release, the newest's.
std::string empty_export(const std::optional<SlurmRelease>& release);

}  // namespace bbkit
