// bb-stat history (bbkit(7), HISTORY AND ACCOUNTING): the accounting as a table for people, as
// JSON for scripts, and a pool's use over time as an SVG picture.
//
// The JSON field names are documented in bb-stat(1); change them only with it.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "bbkit/accounting.hpp"

namespace bbkit {

// A line with the range, then one row per user (or pool): BUFFERS, GIB-HOURS, the stage-ins'
// and stage-outs' runs, size, files, mean and longest time, FAILED (buffers with a failure
// recorded; failed stage runs are in the JSON); then a TOTAL row. "no buffers in the range"
// for none.
std::string history_text(const AccountingReport& report);
// {"since", "until", "by", "user", "pool", "rows": [{"name", "buffers", "failed_buffers",
// "gib_hours", "stage_in": {"runs", "failed", "files", "bytes", "seconds", "max_seconds"},
// "stage_out": {...}}], "total": {...}}; times in Slurm's form.
nlohmann::json history_json(const AccountingReport& report);

// The slots a plot divides its range into: one step of the chart each.
constexpr std::size_t plot_slots = 140;

// What an SVG of bb-stat's begins with: write_own_output replaces only a file that does.
extern const std::string_view pool_use_first_line;
// The pool's mean use per slot as a filled step chart under a line at its capacity, with the
// range and the peak written on it: a standalone SVG document (no script, no external
// reference).
std::string pool_use_svg(const PoolUse& use);

// Writes `svg` to `target` as write_own_output does (a new file, or a picture bb-stat drew), or
// to standard output for "-".
void write_plot(const std::string& target, const std::string& svg);

}  // namespace bbkit
