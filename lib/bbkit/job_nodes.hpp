// A job's place among its nodes when its buffer is in a node-local pool (bbkit(7), NODE-LOCAL
// POOLS): each node runs the tools against its own pool, and knows which node it is of how
// many, so that a stage-in can give it its share of the input (shard.hpp's rule) and a
// stage-out can put its results under its own name.
#pragma once
#include <cstdint>
#include <string>
#include "bbkit/directive.hpp"

namespace bbkit {

struct JobNodes {
    std::string name;         // this node's name, as the scheduler calls it
    std::uint32_t index = 0;  // its position in the job's node list (Slurm's order)
    std::uint32_t count = 1;  // how many nodes the job has
};

// Node names become path components (DESTINATION/<node>/): letters, digits, '.', '_', '-',
// starting with a letter or digit, at most 64 characters; a job has at most 65536 nodes.
constexpr std::size_t max_node_name = 64;
constexpr std::uint32_t max_job_nodes = 65536;

// `node` among `nodes` (comma-separated, in the job's order, each once). Throws Error(data),
// one line, for an invalid or repeated name, too many nodes, or a node not in the list.
JobNodes job_nodes(const std::string& node, const std::string& nodes);

// This host alone: its short host name (up to the first '.'), node 0 of 1. Throws
// Error(data) when that name is not a valid node name.
JobNodes this_host_alone();

// Where a node's copy of a gather=nodes stage_out line lands: a directory's tree under
// DESTINATION/<node>/, a file at dirname(DESTINATION)/<node>/basename(DESTINATION).
std::string gathered_destination(const std::string& destination, StageType type,
                                 const std::string& node);

}  // namespace bbkit
