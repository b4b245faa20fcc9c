// What a job's tasks read of its burst-buffer environment in standalone mode (bbkit(7),
// STANDALONE MODE WITH SLURM): pre-run leaves the job_paths() lines in each job's pool as
// env/<cluster>.<jobid>.<tag> (job_environment_name: the tag is the job's user's to compute,
// PoolDir::write_job_environment), because the compute nodes mount the pools but not the state
// directory. Reading it needs the configuration only, never the store.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bbkit/config.hpp"

namespace bbkit {

struct TaskEnvironment {
    std::string file;                                            // where it was read
    std::vector<std::pair<std::string, std::string>> variables;  // in the file's order
};

// The job's file in the configured pools (the newest when several pools hold one, as a crash
// can leave an older incarnation's behind), by the name the caller's key gives it (root lists
// env/), or the name it had before names had a tag. Opened without following a symlink at env/
// or at the file; a file that is not `caller`'s (any owner for root) is as good as absent, and
// one that is not a regular file is Error(no_perm) naming it. No pool holds one of the caller's:
// Error(no_input) "job N has no burst-buffer environment on any pool (...)", the same answer
// whether another user's job has one or not (bbkit(7), SECURITY). A malformed file:
// Error(data) naming it.
TaskEnvironment read_task_environment(const Config& config, std::uint64_t job_id, uid_t caller);

// The NAME=value lines of an environment file; NAME is a shell name ([A-Za-z_][A-Za-z0-9_]*,
// persistent buffer names keep their case), the value anything but a control character.
// Anything else, or no line at all: Error(data) naming `what`.
std::vector<std::pair<std::string, std::string>> parse_task_environment(const std::string& text,
                                                                        const std::string& what);

}  // namespace bbkit
