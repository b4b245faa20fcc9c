// What Slurm's burst_buffer/datawarp plugin reads from dw_wlm_cli, in the shape Cray's DataWarp
// Service printed it (bbkit(7), USE WITH SLURM (DATAWARP PLUGIN)): one JSON object with one key
// holding an array of objects, integers where the plugin reads numbers, and never an
// apostrophe (the plugin turns every ' into " before parsing).
//
// A bbkit buffer is one DataWarp session (token = job id or persistent name, id = its record
// id); a buffer with space is also one instance and one configuration with the same id. A job
// session without space (a job that only uses or creates persistent buffers) has neither.
#pragma once

#include <string>
#include <vector>

#include "bbkit/buffer.hpp"
#include "bbkit/views.hpp"

namespace bbkit {

// {"pools":[{"id","units":"bytes","granularity","quantity","free"}]}: every pool is Slurm's
// (persistent buffers are created through Slurm too), so quantity = total / granularity and
// free = (total - used - trash) / granularity, 0 unless the pool is up.
std::string dws_pools(const std::vector<PoolStatus>& pools);
// {"sessions":[{"id","created","owner","token","creator","expiration","expired","state"}]} for
// every buffer that exists (not pending, not ended).
std::string dws_sessions(const std::vector<BufferStatus>& buffers);
// {"instances":[{"id","capacity":{"bytes","nodes"},"links":{"session","configurations"},...}]}
std::string dws_instances(const std::vector<BufferStatus>& buffers);
// {"configurations":[{"id","links":{"instance"},"type","access_type","activs"}]}
std::string dws_configurations(const std::vector<BufferStatus>& buffers);
// real_size's answer for a job's buffer: {"capacity":<allocated bytes>,"units":"bytes"}; ""
// for a buffer that has ended (Slurm raises a job's size to the answer, so an ended
// incarnation's size must never reach a new job with the same id).
std::string dws_real_size(const Buffer& buffer);

// Whether DataWarp would list this buffer as a session: it exists (not pending) and has not
// ended.
bool is_dws_session(const Buffer& buffer);
// Whether the buffer is also a DataWarp instance and configuration: it has space of its own
// (a job session without space, datawarp mode's persistent-only jobs, has neither).
bool has_dws_instance(const Buffer& buffer);
// A configuration's activations: the jobs using a persistent buffer now, or 1 while a job's
// own buffer is in pre-run, running or post-run.
std::uint32_t activations_of(const Buffer& buffer);

}  // namespace bbkit
