// What a request's stage-in sources add up to, read with the caller's own permissions.
//
// Used at submit time (bb-parse --check-sources, run as the job's user), so a missing or
// unreadable file is reported before any space or time is spent on it, and (the lines' own
// sources only: check_stage_in) before stage-in.
#pragma once

#include <cstdint>
#include <functional>
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

// Reads a type=list file: one "source destination" pair a line (double quotes allowed, '#'
// comments and blank lines skipped); destinations are made relative to the buffer and checked
// with buffer_relative_path, then placed under `base` (the directive's destination).
std::vector<SourceEntry> read_stage_list(const StageDirective& list);

// Told, while sources are measured, the entries and bytes counted so far: at most every 100 ms
// and not in the first 100 ms, so a quick measurement reports nothing. An exception it throws
// stops the walk and propagates.
using SourceProgress = std::function<void(std::uint64_t files, std::uint64_t bytes)>;

// Expands the list files of `stage_in` and measures every source as the caller. Throws
// Error(no_input) for a missing source, Error(no_perm) for one the caller cannot read or
// traverse, Error(data) for a malformed list file or a source of the wrong type; each message
// names the path and the line.
//
// A directory is walked depth-first without following symlinks, holding one open directory
// stream (a descriptor and its buffer) per level: memory grows with a tree's depth, never with
// its width or its number of files. When a deep tree runs out of descriptors, the soft
// RLIMIT_NOFILE is raised to the hard limit (for the rest of the process); a tree deeper than
// that allows is Error(io) "... cannot open directory N levels deep ...: Too many open files".
//
// With a `job_capacity` it also refuses what cannot fit: the bytes of the lines that go to the
// job's own buffer are checked against it as they are counted, and the walk stops at the first
// file that takes them over it (require_fits's error), so a tree far too large is refused
// without walking all of it. Those lines are measured first; lines into persistent buffers and
// distribute=shard lines (whose share of each node only the nodes know) come after them and do
// not count against it; lines with unresolved symbols are skipped.
SourceTotals measure_stage_in(const std::vector<StageDirective>& stage_in,
                              std::optional<std::uint64_t> job_capacity,
                              const SourceProgress& progress = {});

// What measure_stage_in checks of each line's own source (it exists, has the line's type, the
// caller may read it; list files read), with the regular-file sources counted against
// `job_capacity`, but no directory walked: its cost grows with the lines, never with the trees.
// Before a stage-in, so that the mover starts copying at once and counts the trees as it walks
// them (MovePlan::capacity): a line's own problem is still reported before anything is copied.
// `entries`, `files` and `bytes` cover what was looked at; `skipped` as measure_stage_in's.
SourceTotals check_stage_in(const std::vector<StageDirective>& stage_in,
                            std::optional<std::uint64_t> job_capacity);

// Refuses `counted` bytes of stage-in (all of the sources, or those counted before the walk
// stopped) when they are more than `capacity`: Error(data) "stage-in needs at least X (N bytes
// counted so far) but the buffer holds Y (request a larger capacity)".
void require_fits(std::uint64_t counted, std::uint64_t capacity);

}  // namespace bbkit
