// What Slurm allocated a job on one node, as `scontrol show job -d` prints it on the node's
// line ("Nodes=n1 CPU_IDs=0-1 Mem=0 GRES=bbnvme(CNT:600)"): the law for a node-local pool's
// buffer there (bbkit(7), NODE-LOCAL POOLS). The node Prolog passes the text after "GRES=";
// the rule of what it grants is here.
#pragma once

#include <cstdint>
#include <string>

namespace bbkit {

// The units of GRES `name` in Slurm's per-node GRES text: a comma-separated list of
// NAME[:TYPE](CNT:N), NAME[:TYPE](IDX:...) (one unit per index) or NAME[:TYPE]:N items, as the
// releases bbkit knows print them; "" and "(null)" grant nothing. Items of other names are
// skipped; those of `name` (any type) add up. Error(data) naming the text when it is not that
// form, or a count does not fit in 64 bits.
std::uint64_t granted_units(const std::string& slurm_gres, const std::string& name);

}  // namespace bbkit
