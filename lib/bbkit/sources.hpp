// What a request's stage-in sources add up to, read with the caller's own permissions.
//
// Used at submit time (bb-parse --check-sources, run as the job's user) and before stage-in,
// so a missing or unreadable file is reported before any space or time is spent on it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bbkit/directive.hpp"

namespace bbkit {

struct SourceEntry {          // one source to copy, after expanding type=list files
    std::string source;       // absolute path outside the buffer
    std::string destination;  // relative to the buffer
    StageType type = StageType::file;
    Location where;
};

struct SourceTotals {
    std::vector<SourceEntry> entries;
    std::uint64_t bytes = 0;  // apparent size of every regular file (lstat, symlinks not followed)
    std::uint64_t files = 0;  // every entry copied: files, directories, links
    std::vector<Warning> skipped;  // stage lines whose symbols are not resolved yet
};

// Expands the list files of `stage_in` and measures every source. Throws Error(no_input) for a
// missing source, Error(no_perm) for one the caller cannot read or traverse, Error(data) for a
// malformed list file or a source of the wrong type; each message names the path and the line.
SourceTotals measure_sources(const std::vector<StageDirective>& stage_in);

// Reads a type=list file: one "source destination" pair a line (double quotes allowed, '#'
// comments and blank lines skipped); destinations are made relative to the buffer and checked
// with buffer_relative_path, then placed under `base` (the directive's destination).
std::vector<SourceEntry> read_stage_list(const StageDirective& list);

}  // namespace bbkit

namespace bbkit {

// Measures the stage-in lines as the caller and refuses what cannot fit: the bytes of the
// lines that go to the job's own buffer are checked against `job_capacity` (lines into
// persistent buffers and lines with unresolved symbols are measured or skipped, not counted).
SourceTotals measure_stage_in(const std::vector<StageDirective>& stage_in,
                              std::optional<std::uint64_t> job_capacity);

// Refuses a stage-in that cannot fit: Error(data) "stage-in needs X but the buffer holds Y".
void require_fits(std::uint64_t needed, std::uint64_t capacity);

}  // namespace bbkit
