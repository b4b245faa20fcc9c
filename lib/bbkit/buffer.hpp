// A burst buffer's record and its lifecycle: Slurm's state names and the one table of legal
// transitions (printed in bbkit(7)).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bbkit/buffer_key.hpp"
#include "bbkit/process.hpp"

namespace bbkit {

using TimePoint = std::chrono::system_clock::time_point;

// Slurm's names, exactly (to_string gives them: "staging-in", "teardown-fail", ...).
enum class BufferState {
    pending,  // waiting in a pool's queue; holds no space
    allocating,
    allocated,
    staging_in,
    staged_in,
    pre_run,
    running,
    post_run,
    staging_out,
    staged_out,
    teardown,
    teardown_fail,
    complete,  // job buffers end here
    deleting,
    deleted,  // persistent buffers end here
};

const char* to_string(BufferState state);
// Throws Error(data) naming `text` when it is not one of Slurm's state names.
BufferState parse_buffer_state(const std::string& text);
const std::vector<BufferState>& all_buffer_states();

// Whether a buffer in this state is charged to its pool: allocating through teardown-fail and
// deleting. A torn-down buffer whose directory waits in trash/ is charged as trash instead.
bool holds_space(BufferState state);
// complete and deleted: the buffer is over; a new alloc for that job starts a new incarnation.
bool is_final(BufferState state);

struct Transition {
    BufferState from;
    BufferState to;
    const char* operation;  // what performs it: "alloc", "stage-in", "teardown", "recover", ...
    bool job;               // legal for job buffers
    bool persistent;        // legal for persistent buffers
};

// Every legal transition, in lifecycle order. Creation (pending or allocating) is not a
// transition: it is StateStore's insert.
const std::vector<Transition>& transition_table();

// Returns the table entry, or throws Error(data) "<what> is <from>, cannot become <to> (...)"
// naming both states and the states that are legal from `from`.
const Transition& check_transition(BufferKind kind, BufferState from, BufferState to,
                                   const std::string& what = "buffer");

struct Buffer {
    BufferKey key;
    // The record's row in state.db, fixed for its life (0 before it is stored): DataWarp's
    // session, instance and configuration id (bbkit(7), USE WITH SLURM (DATAWARP PLUGIN)).
    std::int64_t record_id = 0;
    std::string pool;
    std::uint64_t requested_bytes = 0;
    std::uint64_t allocated_bytes = 0;  // rounded to the pool's granularity; what is charged
    uid_t uid = 0;
    gid_t gid = 0;
    std::string user;
    BufferState state = BufferState::allocating;
    std::string reason;   // Slurm's reason: BurstBufferResources, BurstBufferOperation, ...
    std::string message;  // detail shown with the reason
    std::map<BufferState, TimePoint> entered;  // when the buffer last entered each state
    std::string directory;                     // relative to the pool root: key.new_directory()
    std::string access;                        // striped | private (one directory either way)
    std::string type;                          // scratch
    std::string staging;                       // the parsed staging directives, JSON text
    std::string owner;                         // persistent buffers: the owning user
    std::optional<TimePoint> expires;          // persistent buffers
    std::uint32_t use_count = 0;               // persistent buffers: jobs using it now
    TimePoint created{};
    std::optional<ProcessId> run_lock_holder;  // the stager or teardown holding run/<key>.lock
    bool reaped = false;  // final and its directory is gone from trash/ (space released)
    // The last phase that failed and why ("stage-out: cannot open ..."), and when; kept
    // whatever state follows, so the reason outlives a teardown (bbkit(7), BUFFER STATES).
    std::string failure;
    std::optional<TimePoint> failed;
    // A secret of the buffer's own (random hex, set when the record is created): the mover's
    // temporary names carry it, so nobody else can plant one it would adopt (bbkit(7),
    // STAGING). Empty in records made before schema 6 until their next stage gives them one.
    std::string temp_token;

    static Buffer for_key(const BufferKey& key);  // directory filled in, the rest default
};

// What Slurm and DataWarp show for a buffer: its job's id, or a persistent buffer's name
// (JobID= or Name=, dwstat's token).
std::string token_of(const Buffer& b);

// A job buffer of 0 bytes: a session without space of its own, for a job that only uses or
// creates persistent buffers (datawarp mode). It has a directory like every buffer, but no
// BB_JOB_DIR or DW_JOB_* variables and no DataWarp instance.
bool is_session_only(const Buffer& b);

// A stage-in or stage-out that nobody runs any more: its stager failed (Buffer::failure says
// why) or died without a word (killed: the record still names it). bb-stat job and bb-pool
// check show it; bb-stage resumes it, bb-teardown ends it.
bool stage_stalled(const Buffer& b);
// Why, in one line, with the way on; "" when the stage is not stalled.
std::string stalled_stage_text(const Buffer& b);

}  // namespace bbkit
