// The names of a job's environment files, the one place that makes them (bbkit(7), FILES).
//
// Two directories hold them. The state directory's env/ holds each buffer's lines for Slurm:
// burst_buffer.lua's slurm_bb_paths, which runs inside slurmctld and may not fork, opens the
// job-level name itself, so the Lua builds that one name again; tests/cli/slurm-scripts.bats
// checks it against what the tools write. A pool's env/ holds, in standalone mode, the job's
// lines for its tasks, under a name only the job's user (and root) can compute.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "bbkit/buffer_key.hpp"

namespace bbkit {

// <state_dir>/env/<key>.env: a buffer's own environment file ("main.42.1.env").
std::string buffer_environment_path(const std::string& state_dir, const BufferKey& key);

// <state_dir>/env/<cluster>.<jobid>.env: the same lines under the job's name, for its current
// incarnation ("main.42.env"), which slurm_bb_paths opens knowing only the job id.
std::string job_environment_path(const std::string& state_dir, const std::string& cluster,
                                 std::uint64_t job_id);

// The names in a pool's env/. A job's environment file is "<cluster>.<jobid>.<tag>": the tag,
// seal.hpp's user_tag of "<cluster>.<jobid>" under the key of the job's user (env/<uid>.key,
// theirs alone to read; new_user_key, parse_user_key). Only that user can name the file, and
// root, who lists env/: nobody else can learn whether the job has one (env/ is 0711).
std::string job_environment_name(const std::string& cluster, std::uint64_t job_id,
                                 const std::string& user_key);
// What the file was named before it had a tag: "<cluster>.<jobid>" (still read and removed).
std::string legacy_job_environment_name(const std::string& cluster, std::uint64_t job_id);
// A user's key file in env/: "<uid>.key".
std::string environment_key_name(uid_t uid);
// The job an entry of env/ is the environment file of, for `cluster` (tagged or legacy name);
// nullopt for anything else (another cluster's, a key, a temporary).
std::optional<std::uint64_t> environment_job_id(const std::string& cluster,
                                                const std::string& name);

}  // namespace bbkit
