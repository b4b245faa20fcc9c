// What Slurm allocated a job on each of its nodes: its TresPerNode as squeue's %b prints it
// ("gres:bbnvme:600", from 23.11 "gres/bbnvme:600"), which for a count-only GRES is what each
// node holds for the job, or a node's GRES as `scontrol show job -d` prints it on that node's
// line ("bbnvme(CNT:600)"). The law for a node-local pool's buffer on a node (bbkit(7),
// NODE-LOCAL POOLS): the node Prolog passes the text, the rule of what it grants is here.
#pragma once

#include <cstdint>
#include <string>

namespace bbkit {

// The units of GRES `name` in Slurm's per-node GRES text: a comma-separated list of
// NAME[:TYPE](CNT:N), NAME[:TYPE](IDX:...) (one unit per index) or NAME[:TYPE]:N items, or
// squeue's gres:NAME[:TYPE][:N] and gres/NAME[:TYPE][:N] (no count: one), as the releases bbkit
// knows print them; "", "N/A" and "(null)" grant nothing. Items of other names, and other TRES
// ("cpu:2"), are skipped; those of `name` (any type) add up. Error(data) naming the text when
// it is not that form, or the counts do not fit in 64 bits.
std::uint64_t granted_units(const std::string& slurm_gres, const std::string& name);

}  // namespace bbkit
