// bb-stat's views for people and monitors: dwstat's tables, `scontrol show burst`, one job's
// buffer and Prometheus text, each with its JSON form. What they show comes from views.hpp.
//
// The JSON field names are documented in bb-stat(1); change them only with it.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bbkit/buffer.hpp"
#include "bbkit/config.hpp"
#include "bbkit/task_environment.hpp"
#include "bbkit/time_spec.hpp"  // slurm_time
#include "bbkit/views.hpp"

namespace bbkit {

// dwstat's tables: right-aligned columns, sizes in Slurm's printed form. Session, instance and
// configuration ids are the buffers' record ids (the ones dw_wlm_cli gives Slurm).
std::string pools_table(const std::vector<PoolStatus>& pools);
// bb-stat gres: one row per node-local pool, pool gres units held count slurm (slurm "-" when
// the node's GRES were not given, "*" after it when it differs from count).
std::string gres_table(const std::vector<GresCount>& counts);
nlohmann::json gres_json(const std::vector<GresCount>& counts);
// `bb-stat buffers`: every live buffer, oldest first, with its job (or persistent name), user,
// pool, size, state, age and why it is where it is (buffer_reason); then, for each pool with a
// queue, the jobs waiting for its space in order. What an administrator reads first, as
// squeue's REASON column.
std::string buffers_table(const StatusSnapshot& snapshot, TimePoint now);
nlohmann::json buffers_json(const StatusSnapshot& snapshot, TimePoint now);
// Why a buffer is where it is, in one line: a stalled stage and the way on, a pending one's
// place in its pool's queue, a failure, else Slurm's reason ("" for none).
std::string buffer_reason(const BufferStatus& status);
// A duration as people read it at a glance: "45s", "12m05s", "3h04m", "2d04h".
std::string age_text(std::chrono::seconds age);
std::string sessions_table(const std::vector<BufferStatus>& buffers);
std::string instances_table(const std::vector<BufferStatus>& buffers);
std::string configurations_table(const std::vector<BufferStatus>& buffers);
// One row per configuration a job activates while it uses its buffers (pre-run to post-run):
// its own buffer and each persistent buffer it uses; activ numbers the rows shown.
std::string activations_table(const std::vector<BufferStatus>& buffers);
nlohmann::json activations_json(const std::vector<BufferStatus>& buffers);
nlohmann::json sessions_json(const std::vector<BufferStatus>& buffers);
nlohmann::json instances_json(const std::vector<BufferStatus>& buffers);
nlohmann::json configurations_json(const std::vector<BufferStatus>& buffers);
// What DataWarp's dwstat printed, exactly (bb-stat --dwstat, for the dwstat that Slurm's
// datawarp plugin runs): its columns (pools without bbkit's state column), sizes with two
// decimals in the largest binary unit (7.28TiB, 1GiB), intact/public words, and for an empty
// table the line DataWarp printed instead ("no sessions", "no scratch, cache, swap
// configurations"). `view` is pools, sessions, instances, configurations, activations, or most
// and all (every table, a blank line between); Error(usage) for anything else.
std::string dwstat_text(const std::string& view, const StatusSnapshot& snapshot);
const std::vector<std::string>& dwstat_views();
std::string dwstat_size(std::uint64_t bytes);
// dwstat's state flags, e.g. "CA---" (see bb-stat(1)).
std::string dwstat_state(const Buffer& buffer);

// `scontrol show burst` of the lua plugin, byte for byte, with Name=bbkit, in the layout of the
// configuration's slurm_release (slurm_release.hpp). The JSON is the same whatever the release,
// with each pool's availability.
std::string burst_text(const StatusSnapshot& snapshot, const Config& config);
nlohmann::json burst_json(const StatusSnapshot& snapshot, const Config& config);

// `bb-stat job ID`; `now` ends the current phase's duration.
std::string job_text(const JobStatus& job, TimePoint now);
nlohmann::json job_json(const JobStatus& job, TimePoint now);

// `bb-stat env ID`: Slurm's TaskProlog form, "export NAME=value" (the value taken verbatim to
// the end of the line); with `shell`, "export NAME='value'" for eval in sh; as JSON, an object
// of the variables.
std::string task_environment_text(const TaskEnvironment& env, bool shell);
nlohmann::json task_environment_json(const TaskEnvironment& env);

// The text exposition format for node_exporter's textfile collector: pools, buffers by state
// and, unless PrivateData, each buffer's allocated (and, where known, used) bytes.
std::string prometheus_text(const StatusSnapshot& snapshot, const Config& config);

// Where `bb-stat --prometheus TARGET` puts prometheus_text: standard output for "-", else the
// file TARGET, atomically, and only a new file or one it wrote before (fsops.hpp,
// write_own_output: its first line begins "# HELP bbkit_").
void write_prometheus(const std::string& target, const std::string& text);

}  // namespace bbkit
