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

enum class BufferKind { job, persistent };

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

// (cluster, job id, incarnation) or (cluster, persistent name).
struct BufferKey {
    std::string cluster;
    std::uint64_t job_id = 0;
    std::uint32_t incarnation = 0;
    std::string name;  // non-empty exactly for persistent buffers

    static BufferKey job(std::string cluster, std::uint64_t job_id, std::uint32_t incarnation);
    // Throws Error(data) when `name` is not a valid persistent buffer name.
    static BufferKey persistent(std::string cluster, std::string name);

    BufferKind kind() const { return name.empty() ? BufferKind::job : BufferKind::persistent; }
    // Used in file names (env/<key>.env, run/<key>.lock): "main.42.1", "main.p.alpha".
    std::string str() const;
    // The directory a new buffer gets, relative to its pool: "job/main.42.1",
    // "persistent/main.alpha" (cluster first; a record keeps the one it was created with).
    std::string directory() const;

    bool operator==(const BufferKey& other) const;
    bool operator!=(const BufferKey& other) const { return !(*this == other); }
};

// Inverse of BufferKey::str(). Throws Error(data) naming `text`.
BufferKey parse_buffer_key(const std::string& text);

// Persistent names: 1 to 64 letters, digits, '_' and '-', not starting with a digit (Slurm
// reserves numeric names for job buffers) or '-'. Throws Error(data) naming the name. The one
// rule for every tool and the directive parser.
void check_persistent_name(const std::string& name);

// A Slurm job id (also an array job or task id) as text: digits only, at most 2^63-1, so it is
// stored as it was given. Throws Error(usage) naming `what` ("job id") otherwise.
std::uint64_t parse_job_id(const std::string& text, const std::string& what = "job id");

struct Buffer {
    BufferKey key;
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
    std::string directory;                     // relative to the pool root: key.directory()
    std::string access;                        // striped | private (one directory either way)
    std::string type;                          // scratch
    std::string staging;                       // the parsed staging directives, JSON text
    std::string owner;                         // persistent buffers: the owning user
    std::optional<TimePoint> expires;          // persistent buffers
    std::uint32_t use_count = 0;               // persistent buffers: jobs using it now
    TimePoint created{};
    std::optional<ProcessId> run_lock_holder;  // the stager or teardown holding run/<key>.lock
    bool reaped = false;  // final and its directory is gone from trash/ (space released)

    static Buffer for_key(const BufferKey& key);  // directory filled in, the rest default
};

}  // namespace bbkit
