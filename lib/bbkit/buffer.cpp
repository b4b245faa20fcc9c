#include "bbkit/buffer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "bbkit/error.hpp"
#include "bbkit/text.hpp"

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

// Keys are bbkit's own output, so a plain number is all that is accepted.
bool parse_number(const std::string& text, std::uint64_t max, std::uint64_t& out) {
    if (!all_digits(text) || text.size() > 20 || (text.size() > 1 && text[0] == '0'))
        return false;
    try {
        const unsigned long long value = std::stoull(text);
        if (value > max)
            return false;
        out = value;
        return true;
    } catch (const std::exception&) {
        return false;
    }
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

BufferKey BufferKey::job(std::string cluster, std::uint64_t job_id, std::uint32_t incarnation) {
    BufferKey key;
    key.cluster = std::move(cluster);
    key.job_id = job_id;
    key.incarnation = incarnation;
    return key;
}

BufferKey BufferKey::persistent(std::string cluster, std::string name) {
    check_persistent_name(name);
    BufferKey key;
    key.cluster = std::move(cluster);
    key.name = std::move(name);
    return key;
}

std::string BufferKey::str() const {
    if (kind() == BufferKind::persistent)
        return cluster + ".p." + name;
    return cluster + "." + std::to_string(job_id) + "." + std::to_string(incarnation);
}

// The whole key, cluster included: clusters sharing a pool never meet in one directory.
// Records keep the directory they were created with (older versions left the cluster out).
std::string BufferKey::directory() const {
    if (kind() == BufferKind::persistent)
        return "persistent/" + cluster + "." + name;
    return "job/" + str();
}

bool BufferKey::operator==(const BufferKey& other) const {
    return cluster == other.cluster && job_id == other.job_id && incarnation == other.incarnation &&
           name == other.name;
}

// Read from the right: cluster names may contain '.', persistent names and numbers may not.
BufferKey parse_buffer_key(const std::string& text) {
    const auto fail = [&]() -> BufferKey {
        throw Error(ExitCode::data, "invalid buffer key '" + text +
                                        "' (expected CLUSTER.JOBID.INCARNATION or CLUSTER.p.NAME)");
    };
    const auto last = text.rfind('.');
    if (last == std::string::npos || last == 0)
        return fail();
    const auto middle = text.rfind('.', last - 1);
    if (middle == std::string::npos || middle == 0)
        return fail();
    const std::string cluster = text.substr(0, middle);
    const std::string second = text.substr(middle + 1, last - middle - 1);
    const std::string third = text.substr(last + 1);
    std::uint64_t job_id = 0;
    std::uint64_t incarnation = 0;
    if (parse_number(second, UINT64_MAX, job_id) && parse_number(third, UINT32_MAX, incarnation))
        return BufferKey::job(cluster, job_id, static_cast<std::uint32_t>(incarnation));
    if (second == "p") {
        try {
            return BufferKey::persistent(cluster, third);
        } catch (const Error&) {
            return fail();
        }
    }
    return fail();
}

std::uint64_t parse_job_id(const std::string& text, const std::string& what) {
    constexpr std::uint64_t max_id = 0x7fffffffffffffffULL;  // SQLite integers are signed
    std::uint64_t id = 0;
    bool valid = !text.empty() && text.size() <= 19;
    for (char c : text) {
        if (!valid || c < '0' || c > '9') {
            valid = false;
            break;
        }
        id = id * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (!valid || id > max_id)
        throw Error(ExitCode::usage,
                    what + " '" + text + "' is not a number (Slurm's ids are whole numbers)");
    return id;
}

void check_persistent_name(const std::string& name) {
    const std::string what = "invalid persistent buffer name '" + name + "': ";
    if (name.empty() || name.size() > 64)
        throw Error(ExitCode::data, what + "it must be 1 to 64 characters long");
    const bool valid_chars = std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
    // No '/', '.' or '..': the name is a directory name under persistent/ and a file name
    // under env/ and run/.
    if (!valid_chars)
        throw Error(ExitCode::data, what + "use only letters, digits, '_' and '-'");
    if (std::isdigit(static_cast<unsigned char>(name[0])))
        throw Error(ExitCode::data,
                    what +
                        "it must not start with a digit (numeric names are reserved for job "
                        "buffers)");
    if (name[0] == '-')
        throw Error(ExitCode::data, what + "it must not start with '-'");
}

Buffer Buffer::for_key(const BufferKey& key) {
    Buffer buffer;
    buffer.key = key;
    buffer.directory = key.directory();
    return buffer;
}

}  // namespace bbkit
