// What bb-stage hands to bb-mover on its standard input: who to become, which buffer roots,
// and the stage lines to carry out. bb-mover answers on its standard output with lines that
// stage_plan also reads and writes, so both sides agree on one format.
#pragma once

#include <sys/types.h>

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bbkit/buffer.hpp"
#include "bbkit/directive.hpp"
#include "bbkit/error.hpp"
#include "bbkit/job_nodes.hpp"
#include "bbkit/user.hpp"

namespace bbkit {

enum class StageDirection { in, out };
const char* to_string(StageDirection direction);

struct StagePlan {
    StageDirection direction = StageDirection::in;
    User user;             // bb-mover becomes this user before opening any user path
    std::string job_root;  // the job buffer's absolute directory
    std::map<std::string, std::string> persistent_roots;  // name -> absolute directory
    std::uint64_t capacity = 0;  // stage-in: the job buffer's allocated bytes
    std::vector<StageDirective> stages;
    unsigned threads = 1;
    bool durable = false;  // stage-out: bytes on disk before success is reported
    bool direct_io = false;
    bool trust_syncfs = true;  // false: fsync each staged-out file instead of one syncfs
    std::uint64_t memory_limit = std::uint64_t{256} << 20;  // [limits] mover_memory
    // The job buffer's Buffer::temp_token: the secret a durable move's temporaries are tagged
    // with, so that only this buffer's own killed move is ever taken over (bbkit(7), STAGING).
    std::string temp_token;
    // A node-local pool's buffer: this node among the job's (job_nodes.hpp), which decides
    // a distribute=shard line's share and a gather=nodes line's destination.
    JobNodes nodes;
    // A stage spread over a transfer job's nodes (bbkit(7), STAGING ON TRANSFER NODES): this
    // part among `parts`, each moving the share shard.hpp's rule gives it of every line (a line
    // already sharded over a node-local job's nodes keeps that). 1 part: everything.
    std::uint32_t part = 0;
    std::uint32_t parts = 1;
};

std::string plan_to_json(const StagePlan& plan);
StagePlan plan_from_json(const std::string& text);  // Error(data) when malformed

// A transfer job's plan file (bbkit(7), STAGING ON TRANSFER NODES), read by its mover as the
// job's user: never as root (Error(no_perm): root's mover takes its plan on standard input
// from bb-stage), a regular file of at most 64 MiB, no symlink followed.
std::string read_transfer_plan(const std::string& path);
// Sets the plan's part from Slurm's step task (SLURM_PROCID of SLURM_NTASKS); Error(usage),
// one line, outside a step or when they are not numbers in range.
void set_part_of_step(StagePlan& plan);

// What bb-pool alloc records with a job's buffer (Buffer::staging): its stage lines, byte for
// byte, and the persistent buffers it uses.
// A node-local pool's buffer also records the node it is on among the job's nodes.
std::string staging_record(const Request& request,
                           const std::optional<JobNodes>& nodes = std::nullopt);
// The node a buffer's staging record names; nullopt for a buffer outside node-local pools.
std::optional<JobNodes> recorded_nodes(const std::string& staging_json);
std::vector<StageDirective> recorded_stages(const std::string& staging_json,
                                            StageDirection direction);
std::vector<std::string> recorded_persistent_uses(const std::string& staging_json);

// A stage running as a Slurm job on transfer nodes (bbkit(7), STAGING ON TRANSFER NODES), as
// the buffer's sealed staging record keeps it, so that a rerun of the stage (a restarted
// slurmctld) finds the job instead of starting a second, and a teardown cancels it.
struct TransferRecord {
    StageDirection direction = StageDirection::in;
    // Its directory under the pool's transfer/ ("KEY.in.HEX"), which also names the job
    // ("bbkit.DIRECTORY") before its id is known.
    std::string directory;
    std::uint64_t job_id = 0;  // 0: being submitted (the id not yet recorded)
    std::uint32_t parts = 1;
};
std::optional<TransferRecord> recorded_transfer(const std::string& staging_json);
// The staging record with `transfer` in it, or without one when nullopt.
std::string with_transfer(const std::string& staging_json,
                          const std::optional<TransferRecord>& transfer);

// The stage_out lines whose data only `b` holds now: its job ran (running, post-run or
// staging-out) and its stage-out has not succeeded. Empty for a job that never ran (nothing of
// its making is in the buffer), for a staged-out buffer and for persistent buffers
// (bbkit(7), STANDALONE MODE: what bb-teardown protects).
std::vector<StageDirective> unstaged_results(const Buffer& b);

// What a mover is doing: walking the sources to count files and bytes (the totals still grow),
// copying, or the durable flush at the end.
enum class StagePhase { measuring, copying, syncing };
const char* to_string(StagePhase phase);
std::optional<StagePhase> parse_stage_phase(const std::string& text);  // nullopt when unknown

// Where a move's time went (bb-mover's summary, bb-stage --json, bb-stat job), in seconds of
// wall time. The walk runs on its own thread ahead of the copy (`walk`: its working time, not
// the time it waits for the copy to take a batch); the copy waits for it only when it has
// nothing walked to copy (`wait`). Workers copy batches in parallel (`copy`); between
// batches the copy's own thread renames, links and gives directories their modes and times
// (`finish`) while the workers wait; `sync` is the durable flush (syncfs, fsync). `before` and
// `after`: from the move's start to its first copy, and from its last copy's end to its own
// end: the serial share of a move is (before + after) / seconds.
struct MovePhases {
    double walk = 0, wait = 0, copy = 0, finish = 0, sync = 0;
    double before = 0, after = 0;
    double busy = 0;       // worker-seconds spent copying, over every worker
    unsigned threads = 0;  // workers
    double seconds = 0;    // the whole move
    // The workers' idle share of the move: 1 - busy / (threads * seconds); 0 when unknown.
    double idle_share() const;
    // Adds a later move of the same plan: its times add up, `before` stays the first's and
    // `after` becomes the later one's.
    void append(const MovePhases& later);
};

// Where a stage on transfer nodes runs (bbkit(7), STAGING ON TRANSFER NODES): its transfer
// job, the job's nodes as Slurm lists them ("" while it pends), and each part's last progress
// in words. What bb-stage's transfer runner reports and the progress record keeps.
struct TransferPlace {
    std::uint64_t job_id = 0;
    std::string nodes;
    std::vector<std::string> parts;
};
// At most this many parts, each of at most this many bytes, are read back (a record is a hint).
constexpr std::size_t max_place_parts = 64;
constexpr std::size_t max_place_text = 256;
nlohmann::json transfer_place_json(const TransferPlace& place);
// nullopt unless `value` is such an object within those bounds.
std::optional<TransferPlace> transfer_place_from_json(const nlohmann::json& value);

// bb-mover's report lines.
struct MoverReport {
    enum class Kind { progress, summary, error, warning, transfer, unknown } kind = Kind::unknown;
    StagePhase phase = StagePhase::copying;
    std::uint64_t files_done = 0, files_total = 0, bytes_done = 0, bytes_total = 0;
    std::uint64_t files = 0, bytes = 0, skipped = 0;
    double seconds = 0;
    std::optional<MovePhases> phases;  // summary: absent from an older mover's
    int exit_code = 0;
    std::string message;
    // error: why, typed (error.hpp's Failure: its kind, operation, path, errno; kind internal
    // for an error that came from no move); absent from an older mover's line.
    std::optional<Failure> failure;
    std::optional<TransferPlace> transfer;  // transfer: where the stage runs
};
// "progress FILES_DONE FILES_TOTAL BYTES_DONE BYTES_TOTAL PHASE". A line without the phase (an
// older mover, which only reported while copying) reads as copying; one with a phase this
// reader does not know, or anything after it, is Kind::unknown: its counters may mean
// something else.
std::string progress_line(std::uint64_t files_done, std::uint64_t files_total,
                          std::uint64_t bytes_done, std::uint64_t bytes_total,
                          StagePhase phase = StagePhase::copying);
// "summary FILES BYTES SKIPPED SECONDS walk=S wait=S copy=S finish=S sync=S before=S after=S
// busy=S threads=N": an older bb-stage reads the four first and ignores the rest.
std::string summary_line(std::uint64_t files, std::uint64_t bytes, std::uint64_t skipped,
                         double seconds, const MovePhases& phases);
// "error CODE {"message":M,"kind":K,"operation":O,"path":P,"errno":"ENOSPC"}": the kind
// always, the call's operation, path and errno (by name) when the error has them (an Error
// without a Failure is kind internal). An older mover's "error CODE M" (M a JSON string)
// reads with its message and no failure.
std::string error_line(const Error& error);
std::string warning_line(const std::string& message);
// "transfer {"job":ID,"nodes":"n[1-3]","parts":["part 0: ...", ...]}": the transfer runner's
// own line (transfer.hpp), never a mover's.
std::string transfer_line(const TransferPlace& place);
MoverReport parse_report(const std::string& line);

}  // namespace bbkit
