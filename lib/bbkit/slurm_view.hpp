// What Slurm's burst_buffer/lua plugin (22.05 and later) itself reads from a job's request, so
// that bbkit, in mode = "slurm", can refuse a request that Slurm would size or place
// differently from bbkit. Slurm splices --bb/--bbf text into the script after its first line,
// collects the lines starting with '#' + Directive up to the first line not starting with '#'
// (a trailing '\' joins the next directive line), and on each line takes the first
// "capacity=" substring as a size (lenient: "1.5G" is 1 byte, an unknown unit is ignored), the
// first "pool=" substring up to the next space as the pool, rounds each size up to its pool's
// granularity and adds them up; the last line's pool wins. burst_buffer.lua repeats the cheap
// part of this check in Lua at submit (slurm_bb_job_process).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bbkit/config.hpp"
#include "bbkit/directive.hpp"

namespace bbkit {

struct SlurmBufferLine {
    std::string text;                 // after the directive, continuations joined
    std::optional<std::string> pool;  // Slurm's pool= value; absent: Slurm refuses the job
    std::uint64_t size = 0;           // Slurm's number of bytes (0: Slurm refuses the job)
    bool nodes = false;               // Slurm read a node count
};

struct SlurmView {
    bool has_directive = false;
    std::vector<SlurmBufferLine> capacity_lines;  // the lines holding "capacity="
    std::optional<std::string> pool;              // the last capacity line's pool
    std::uint64_t total = 0;                      // sizes rounded to their pool's granularity
};

// The job text Slurm parses: the script with --bbf and then --bb text spliced in after its
// first line (or in front of it when it does not start with '#'), as sbatch and slurmctld do.
std::string slurm_job_text(const RequestText& text);

// Slurm's reading of `text` for `directive` (without '#'); granularities from `config`.
SlurmView slurm_view(const std::string& text, const std::string& directive, const Config& config);

// In Slurm mode: Error(data) "Slurm reads this request differently: ..." when Slurm's view of
// the request's capacity and pool differs from bbkit's parsed `request` (parse_request's answer
// for `text`); nothing in the other modes. Every caller that parses a job's request asks it.
void check_slurm_view(const RequestText& text, const Request& request, const Config& config);

}  // namespace bbkit
