#include "bbkit/buffer.hpp"

#include "bbkit/error.hpp"

namespace bbkit {
namespace {

using S = BufferState;

struct StateName {
    BufferState state;
    const char* name;
};

const StateName state_names[] = {
    {S::pending, "pending"},         {S::allocating, "allocating"},
    {S::allocated, "allocated"},     {S::staging_in, "staging-in"},
    {S::staged_in, "staged-in"},     {S::pre_run, "pre-run"},
    {S::running, "running"},         {S::post_run, "post-run"},
    {S::staging_out, "staging-out"}, {S::staged_out, "staged-out"},
    {S::teardown, "teardown"},       {S::teardown_fail, "teardown-fail"},
    {S::complete, "complete"},       {S::deleting, "deleting"},
    {S::deleted, "deleted"},
};

constexpr bool job = true;
constexpr bool persistent = true;
constexpr bool no = false;

// The lifecycle of bbkit(7), BUFFER STATES. Self-transitions are reruns: a stage or teardown
// interrupted by a crash is run again from the state it had committed.
const std::vector<Transition> table = {
    // alloc: queued requests wait as pending; alloc's crash protocol passes through allocating.
    {S::pending, S::allocating, "alloc", job, no},
    {S::pending, S::complete, "teardown", job, no},  // cancelled or gave up while queued
    {S::allocating, S::allocated, "alloc", job, persistent},
    {S::allocating, S::complete, "recover", job, no},        // rolled back: no directory
    {S::allocating, S::deleted, "recover", no, persistent},  // rolled back: no directory
    {S::allocating, S::teardown, "teardown", job, no},       // cancelled while half made
    // stage-in; a job without stage-in lines goes straight to staged-in, so every job that
    // runs has passed staged-in (one path to pre-run, one timestamp for bb-stat's timings).
    {S::allocated, S::staging_in, "stage-in", job, no},
    {S::allocated, S::staged_in, "stage-in", job, no},
    {S::staging_in, S::staging_in, "stage-in", job, no},
    {S::staging_in, S::staged_in, "stage-in", job, no},
    {S::staged_in, S::pre_run, "pre-run", job, no},
    {S::pre_run, S::running, "pre-run", job, no},
    {S::running, S::post_run, "post-run", job, no},
    // Slurm's datawarp plugin runs a job without #DW options (its only lines are #BB
    // create_persistent or destroy_persistent) from staged-in, with no paths and no pre_run,
    // and still calls post_run when it ends (bbkit(7), USE WITH SLURM (DATAWARP PLUGIN)).
    {S::staged_in, S::post_run, "post-run", job, no},
    // stage-out; likewise a job without stage-out lines goes straight to staged-out.
    {S::post_run, S::staging_out, "stage-out", job, no},
    {S::post_run, S::staged_out, "stage-out", job, no},
    {S::staging_out, S::staging_out, "stage-out", job, no},
    {S::staging_out, S::staged_out, "stage-out", job, no},
    // teardown: from any live state (cancel, failure, or the normal end after staged-out).
    {S::allocated, S::teardown, "teardown", job, no},
    {S::staging_in, S::teardown, "teardown", job, no},
    {S::staged_in, S::teardown, "teardown", job, no},
    {S::pre_run, S::teardown, "teardown", job, no},
    {S::running, S::teardown, "teardown", job, no},
    {S::post_run, S::teardown, "teardown", job, no},
    {S::staging_out, S::teardown, "teardown", job, no},
    {S::staged_out, S::teardown, "teardown", job, no},
    {S::teardown, S::teardown, "teardown", job, no},
    {S::teardown, S::complete, "teardown", job, no},
    {S::teardown, S::teardown_fail, "teardown", job, no},
    {S::teardown_fail, S::teardown, "teardown", job, no},  // retry; still charged meanwhile
    // persistent buffers: created by alloc --persistent, removed by teardown --persistent.
    {S::allocated, S::deleting, "destroy", no, persistent},
    {S::deleting, S::deleting, "destroy", no, persistent},
    {S::deleting, S::deleted, "destroy", no, persistent},
};

bool legal_for(const Transition& t, BufferKind kind) {
    return kind == BufferKind::job ? t.job : t.persistent;
}

}  // namespace

const char* to_string(BufferState state) {
    for (const StateName& entry : state_names)
        if (entry.state == state)
            return entry.name;
    return "unknown";
}

BufferState parse_buffer_state(const std::string& text) {
    for (const StateName& entry : state_names)
        if (text == entry.name)
            return entry.state;
    throw Error(ExitCode::data, "unknown buffer state '" + text + "'");
}

const std::vector<BufferState>& all_buffer_states() {
    static const std::vector<BufferState> states = [] {
        std::vector<BufferState> all;
        for (const StateName& entry : state_names)
            all.push_back(entry.state);
        return all;
    }();
    return states;
}

bool holds_space(BufferState state) {
    return state != S::pending && !is_final(state);
}

bool is_final(BufferState state) {
    return state == S::complete || state == S::deleted;
}

const std::vector<Transition>& transition_table() {
    return table;
}

const Transition& check_transition(BufferKind kind, BufferState from, BufferState to,
                                   const std::string& what) {
    std::string legal;
    for (const Transition& t : table) {
        if (t.from != from || !legal_for(t, kind))
            continue;
        if (t.to == to)
            return t;
        legal += std::string(legal.empty() ? "" : ", ") + to_string(t.to);
    }
    throw Error(ExitCode::data, what + " is " + to_string(from) + ", cannot become " +
                                    to_string(to) + " (from " + to_string(from) +
                                    " it can become " +
                                    (legal.empty() ? "nothing: it is over" : legal) + ")");
}

Buffer Buffer::for_key(const BufferKey& key) {
    Buffer buffer;
    buffer.key = key;
    buffer.directory = key.new_directory();
    return buffer;
}

bool stage_stalled(const Buffer& b) {
    if (b.state != BufferState::staging_in && b.state != BufferState::staging_out)
        return false;
    return !(b.run_lock_holder && b.run_lock_holder->alive());
}

std::string stalled_stage_text(const Buffer& b) {
    if (!stage_stalled(b))
        return "";
    const bool in = b.state == BufferState::staging_in;
    const std::string job = b.key.kind() == BufferKind::job ? std::to_string(b.key.job_id) : "";
    const std::string phase = in ? "stage-in" : "stage-out";
    std::string why;
    if (b.run_lock_holder)
        why = "its stager (pid " + std::to_string(b.run_lock_holder->pid) +
              ") is gone without a word (killed?)";
    else if (!b.message.empty())
        why = "it failed: " + b.message;
    else
        why = "no stager runs it";
    return phase + " stopped: " + why + "; the data is kept (" +
           (in ? "bb-stage --job " + job + " in resumes it, bb-teardown --job " + job + " ends it"
               : "bb-stage --job " + job + " out --retry delivers it, bb-teardown --force --job " +
                     job + " discards it") +
           ")";
}

std::string token_of(const Buffer& b) {
    return b.key.kind() == BufferKind::job ? std::to_string(b.key.job_id) : b.key.name;
}

bool is_session_only(const Buffer& b) {
    return b.key.kind() == BufferKind::job && b.requested_bytes == 0;
}

}  // namespace bbkit
