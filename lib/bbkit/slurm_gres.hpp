// What Slurm allocated a job on each of its nodes: its TresPerNode as squeue's %b prints it
// ("gres:bbnvme:600", from 23.11 "gres/bbnvme:600"), which for a count-only GRES is what each
// node holds for the job, or a node's GRES as `scontrol show job -d` prints it on that node's
// line ("bbnvme(CNT:600)"). The law for a node-local pool's buffer on a node (bbkit(7),
// NODE-LOCAL POOLS): the node Prolog passes the text, the rule of what it grants is here.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace bbkit {

// The units of GRES `name` in Slurm's per-node GRES text: a comma-separated list of
// NAME[:TYPE](CNT:N), NAME[:TYPE](IDX:...) (one unit per index) or NAME[:TYPE]:N items, or
// squeue's gres:NAME[:TYPE][:N] and gres/NAME[:TYPE][:N] (no count: one), as the releases bbkit
// knows print them; "", "N/A" and "(null)" grant nothing. Items of other names, and other TRES
// ("cpu:2"), are skipped; those of `name` (any type) add up. Error(data) naming the text when
// it is not that form, or the counts do not fit in 64 bits.
std::uint64_t granted_units(const std::string& slurm_gres, const std::string& name);

// ---- a node's count (bbkit(7), NODE-LOCAL POOLS, Counts agree) -------------------------------

// One item of a node's GRES.
struct NodeGres {
    std::string name;
    std::string type;  // "" when untyped
    bool no_consume = false;
    std::uint64_t count = 0;
};

// A node's GRES as `scontrol show node` prints its Gres= (22.05 to 26.05): comma-separated
// NAME[:TYPE][:no_consume]:COUNT items, each maybe followed by its sockets "(S:0-1)" (a GRES
// whose count is 0 is not printed at all), COUNT in decimal or
// with a K, M, G, T or P suffix multiplying it by 1024 each ("1K" is 1024); "" and "(null)"
// are none. Error(data) naming the text when it is not that form.
std::vector<NodeGres> parse_node_gres(const std::string& text);
// The units of `name` (any type) among them; 0 when the node has none.
std::uint64_t node_gres_units(const std::vector<NodeGres>& gres, const std::string& name);
// The text `scontrol update NodeName=... Gres=` takes for them: NAME[:TYPE][:no_consume]:COUNT
// items in their order, counts in decimal, no sockets (the update replaces every GRES of the node,
// so none of them may be left out). "(null)" when there are none.
std::string node_gres_text(const std::vector<NodeGres>& gres);
// Jobs as `squeue -h -w NODE -o %A` lists them: decimal ids separated
// by newlines, commas or blanks ("" is none). Error(usage) naming the first that is not one.
std::set<std::uint64_t> parse_job_ids(const std::string& text);

}  // namespace bbkit
