// Data movement between a buffer and the outside, as the job's user (the caller has already
// dropped privileges: nothing here chowns to another user or assumes root).
//
// The buffer side is reached only through descriptors below the buffer root (openat2 with
// RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS): a symlink planted in the buffer can never redirect a
// write or a read outside it. The outside side uses ordinary paths with the user's permissions,
// never following a symlink in a final component. What `cp -a` keeps is kept: content, holes,
// modes (suid/sgid/sticky), ns atimes and mtimes, symlinks as symlinks, hard links within one
// move, fifos, user.* xattrs and POSIX ACLs, the group when the user may set it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bbkit/directive.hpp"
#include "bbkit/sources.hpp"
#include "bbkit/stage_plan.hpp"

namespace bbkit {

enum class MoveDirection { in, out };

// in:  source = absolute path outside, destination = relative to the buffer root.
// out: source = relative to the buffer root, destination = absolute path outside.
// type=file: one non-directory; a destination that is "", ends in '/' or is an existing
// directory receives it under the source's name. type=directory: the tree's contents go under
// destination (`cp -a src/. dest/`) and destination gets the source directory's mode and times
// (except the buffer root itself, whose mode bbkit owns). type=list must be expanded first.
// Missing parents of a destination are created.
//
// shard_index/shard_count (a sharded stage-in, bbkit(7) NODE-LOCAL POOLS): with a count above
// 1, a non-directory (file, symlink, fifo; each name of a hard-linked file on its own) is moved
// only when shard_of(its path below `source`, shard_count) == shard_index (shard.hpp; type=file:
// the source's base name); a type=file entry of another shard moves nothing, not even the
// destination's parents. The directories of a tree are made, with their modes and times, in
// every shard. What another shard receives is neither counted against MovePlan::capacity nor
// in the progress totals. A count of 1 moves everything. An index not below the count, or a
// count of 0, is refused before anything is touched: Error(data).
//
// keep_existing (a stage-out gathered by merging: several nodes write into one destination):
// a non-directory already at a destination name is never replaced. When it is already complete
// (what a rerun skips: a regular file of the same size and ns mtime, a symlink to the same
// target with the same ns mtime, a fifo of the same mode and ns mtime, the same inode for a
// hard link) it is skipped; otherwise the move fails with Error(exists),
// "exists (another node's result): PATH". The check cannot race: names are put in place by a
// rename that refuses to replace (RENAME_NOREPLACE, or a hard link and an unlink where the file
// system refuses that flag) or are created with O_EXCL, so a file that appears meanwhile is
// refused the same way. A non-directory where a directory of the tree goes is refused alike.
// Directories merge; a durable move builds no tree under a temporary name (every file gets its
// own temporary and rename), and removes only its own buffer's temporaries of this boot, never
// another writer's.
struct MoveEntry {
    std::string source;
    std::string destination;
    StageType type = StageType::file;
    std::uint32_t shard_index = 0;
    std::uint32_t shard_count = 1;  // 1: every file
    // A transfer job's part (StagePlan::part): a non-directory's share is decided by its inode
    // number as the listing gives it, not its name, so that every name of a hard-linked file
    // is in the same part and stays one file with several names in the buffer.
    bool shard_by_inode = false;
    // Other writers (the other parts of a transfer job) make and fill the same directories at
    // the same time: directories merge as for keep_existing (none is taken to be empty, none
    // built under a temporary name), no temporary found there is removed (another part's live
    // one looks like a killed move's), and their modes, times and xattrs are left to the one
    // mover of the whole plan that runs after every part (StagePlan::part), so that a
    // read-only directory is not closed to a part still writing into it.
    bool shared_directories = false;
    bool keep_existing = false;
};

struct MovePlan {
    MoveDirection direction = MoveDirection::in;
    std::string buffer_root;  // absolute; opened with O_NOFOLLOW
    std::vector<MoveEntry> entries;
    unsigned threads = 8;      // worker threads (files and chunks of large files)
    bool durable = false;      // stage-out: temp names, batched sync, rename, directory fsync
    bool direct_io = false;    // O_DIRECT for files >= 8 MiB (buffered where refused): less
                               // CPU, but latency-bound on a single virtio disk
    bool trust_syncfs = true;  // false: fsync each file (in parallel) instead of one syncfs
    // What the move's own structures may take (the walk's queue, hard links still to make):
    // the tree is walked, copied and finished in batches that fit, whatever its size.
    std::uint64_t memory_limit = std::uint64_t{256} << 20;
    std::size_t batch_entries = 0;  // entries a batch holds at most; 0: from memory_limit
    // A secret of the buffer's (Buffer::temp_token): a durable move's temporaries carry a tag
    // made from it and the boot, and a temporary tree is taken over only when it carries this
    // tag, belongs to the user and is no more open than the mover makes one. Empty: nothing is
    // taken over (bbkit(7), STAGING).
    std::string temp_token;
    // Stage-in into the job's buffer: its allocated bytes. The walk counts the apparent size of
    // every regular file (each name of a hard-linked one, as sources.hpp measures) and stops at
    // the first that takes the count over it, with require_fits's error (65), before that file
    // is handed to the copy: a tree that cannot fit never fills more than the buffer holds.
    std::optional<std::uint64_t> capacity;
};

struct MoveProgress {
    std::uint64_t files_done = 0, files_total = 0;  // every entry: files, dirs, links, fifos
    std::uint64_t bytes_done = 0, bytes_total = 0;  // apparent size of regular files
    bool counting = false;  // the walk (ahead of the copy) goes on: the totals may still grow
    bool syncing = false;   // waiting for the data to reach the disk
};

struct MoveSummary {
    std::uint64_t files = 0;            // files, symlinks, fifos, hard links written (not dirs)
    std::uint64_t bytes = 0;            // apparent bytes of the regular files written
    std::uint64_t skipped = 0;          // already complete: files of same size and ns mtime, and
                                        // links/fifos already in place
    std::vector<std::string> warnings;  // devices/sockets skipped, xattrs unsupported, ...
    double seconds = 0;
    MovePhases phases;  // where the time went (stage_plan.hpp)
};

// Copies every entry; returns only when done (and, when plan.durable, when every byte, name
// and directory is on disk). The walk streams: one thread walks the sources depth first and
// hands out batches of at most batch_entries entries, which the workers copy while the next
// is walked; a batch is finished (renames, hard links, the modes and times of the directories
// whose walk ended in it) before the next is copied. Memory stays within plan.memory_limit
// whatever the number of files (bbkit(7), STAGING: hard links beyond the bound are spilled to
// an unnamed file in the buffer). A rerun after success copies nothing; a rerun after a crash
// skips complete files, and a durable move killed in the same boot takes over the directory
// tree it was building under a temporary name (only its own: see MovePlan::temp_token). Entries
// whose destinations overlap run one after the other. `progress` is called from the calling thread,
// at most every ~100 ms and once at the end. Throws Error: no_input (66) for a missing source,
// no_perm (77) for an unreadable source, an unwritable destination or a symlink in the buffer's
// way, io (74) for ENOSPC/EIO and the like, data (65) for a source of the wrong type or an
// invalid shard, exists (73) for another writer's file in a keep_existing entry's way; each
// message names the path, and each Error carries its Failure (error.hpp): source or destination
// by the side it happened on, capacity past MovePlan::capacity, and, written into the buffer
// (direction in), ENOSPC as pool_full and EDQUOT (its project quota) as capacity. After a
// durable failure no temporary file is left and no final name holds a partial file.
MoveSummary run_move(const MovePlan& plan,
                     const std::function<void(const MoveProgress&)>& progress);

// A stage plan's lines as move entries, grouped by the buffer root they touch (the job's
// buffer, or a persistent buffer's). Stage-in: each line's own source is checked and type=list
// files are read, as the caller (who must already be the job's user), and file sources are
// counted against the job buffer's capacity (check_stage_in); the trees are counted by the
// moves' walks as they copy (MovePlan::capacity). Throws Error(no_input) for a persistent buffer
// the plan has no root for, and check_stage_in's and read_stage_list's errors (sources.hpp).
std::map<std::string, std::vector<MoveEntry>> entries_by_root(const StagePlan& plan);

// A whole stage plan's counters, over every buffer root it touches (bb-mover's progress lines).
// measuring: the walk counts and nothing is copied yet; copying (the totals still grow while
// the walk, ahead of the copy, goes on); syncing: the durable flush of a move.
struct PlanProgress {
    StagePhase phase = StagePhase::measuring;
    std::uint64_t files_done = 0, files_total = 0;
    std::uint64_t bytes_done = 0, bytes_total = 0;
};

// Carries out a stage plan as its user (the caller has become that user): entries_by_root,
// then one run_move per buffer root in turn with the plan's threads, durability, direct I/O,
// sync policy and memory bound, the job buffer's capacity on a stage-in's move into it.
// `progress` sees the whole plan's counters, whose totals grow as the walks count them.
// Returns the moves' summaries added up, their warnings in order. Throws what entries_by_root
// and run_move throw.
MoveSummary run_stage_plan(const StagePlan& plan,
                           const std::function<void(const PlanProgress&)>& progress);

// bb-mover's work as its report lines (stage_plan.hpp), each handed to `report`: run_stage_plan
// with a progress line per report, then a line per warning and the summary. A failure is
// reported as its typed error line (an exception other than Error as Error(software),
// "internal error: ..."), then thrown as an Error. The caller is the plan's user already.
void run_and_report(const StagePlan& plan, const std::function<void(const std::string&)>& report);

}  // namespace bbkit
