// Burst-buffer directives: job scripts, --bb and --bbf text -> one normalized Request.
//
// Both dialects are read from the leading comment block of a script: Slurm lua style
// (`#BB_LUA pool=p capacity=100GiB`, plus bbkit's `stage_in`, `stage_out` and `use_persistent`
// lines) and DataWarp style (`#DW jobdw`, `#DW stage_in/stage_out`, `#DW persistentdw`,
// `#BB create_persistent`, `#BB destroy_persistent`). Which prefixes count comes from the
// configuration. Symbols (%% %A %a %b %d %j %u %x) are replaced in each value after the line is
// split into tokens, so a job name can never inject a key, unless the scheduler replaced them
// already (RequestText::symbols_replaced). Every error names the line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bbkit/config.hpp"

namespace bbkit {

// What is known about the job when its request is parsed. Anything absent leaves the symbols
// that need it unreplaced (with a warning) and skips the checks that need it.
struct JobContext {
    std::optional<std::string> job_id;
    std::optional<std::string> array_job_id;
    std::optional<std::string> array_task_id;
    std::optional<std::string> user;  // name; its uid is looked up for the user checks
    std::optional<unsigned> uid;      // when known without a passwd lookup
    std::optional<std::string> workdir;
    std::optional<std::string> job_name;
};

// Where a directive line came from, for messages and JSON.
// command_line: a line bbkit writes from option values (bb-pool alloc --capacity ...).
enum class Origin { script, bb_option, bbf_file, command_line };
const char* to_string(Origin origin);  // "script", "--bb", "--bbf", "command line"

struct Location {
    Origin origin = Origin::script;
    int line = 0;  // 1-based line within its origin
};

struct JobBufferRequest {
    std::string pool;                // resolved (default pool applied)
    std::uint64_t capacity = 0;      // bytes requested
    std::uint64_t allocated = 0;     // rounded up to the pool's granularity
    std::string access = "striped";  // striped | private (one directory either way)
    std::string type = "scratch";
    Location where;
    // A node-local pool's buffer (bbkit(7), NODE-LOCAL POOLS): capacity and allocated are per
    // node, and Slurm schedules them as the GRES `gres` (the pool's), `gres_count` granules.
    bool node_local = false;
    std::string gres;
    std::uint64_t gres_count = 0;
};

enum class StageType { file, directory, list };
const char* to_string(StageType type);

// The stage type `name` names: file, directory or list. Throws Error(data) for any other word.
// The one reading of a stage type, for directives and for stage lines recorded by bb-pool.
StageType parse_stage_type(const std::string& name);

// Refuses a type its direction cannot carry: type=list only stages in (bb-parse(1)). Throws
// Error(data) "stage_out type=list is not supported (...)".
void check_stage_type(StageType type, bool stage_in);

// The components of `path` without empty and "." ones. A ".." component is refused with
// Error(data) `climbing` (the caller's message naming the path): a path that never climbs is
// safe without knowing what the symlinks below it are. The one ".." rule for directives, list
// files and the mover's paths.
std::vector<std::string> path_components(const std::string& path, const std::string& climbing);

// Stage lines of a node-local pool's job buffer (bbkit(7), NODE-LOCAL POOLS): how a stage_in
// line's input is spread over the job's nodes (every node gets all of it, or its share of the
// files) and where each node's stage_out results land (DESTINATION/<node>/, or merged into
// DESTINATION itself).
enum class Spread { copy, shard };
enum class Gather { nodes, merge };
const char* to_string(Spread spread);
const char* to_string(Gather gather);
Spread parse_spread(const std::string& name);  // Error(data) for another word
Gather parse_gather(const std::string& name);  // Error(data) for another word

struct StageDirective {
    StageType type = StageType::file;
    // stage_in: source is an absolute path outside, destination is relative to the buffer.
    // stage_out: source is relative to the buffer, destination is an absolute path outside.
    std::string source;
    std::string destination;
    std::string buffer;       // "" = the job's buffer, else the persistent buffer's name
    bool unresolved = false;  // a symbol could not be replaced yet (no job context)
    Location where;
    // distribute= (stage_in) and gather= (stage_out) as the line gave them; only lines of a
    // node-local pool's job buffer may (the defaults: copy, nodes).
    std::optional<Spread> distribute;
    std::optional<Gather> gather;
};

struct PersistentCreate {
    std::string name;
    std::string pool;
    std::uint64_t capacity = 0;
    std::uint64_t allocated = 0;
    std::string access = "striped";
    std::string type = "scratch";
    Location where;
};

struct PersistentDestroy {
    std::string name;
    bool hurry = false;
    Location where;
};

struct PersistentUse {
    std::string name;
    Location where;
};

struct Warning {
    Location where;
    std::string message;
};

struct Request {
    bool has_directive = false;  // at least one directive (a bare `#BB_LUA` counts)
    std::optional<JobBufferRequest> job_buffer;
    std::vector<StageDirective> stage_in;
    std::vector<StageDirective> stage_out;
    std::vector<PersistentCreate> create;
    std::vector<PersistentDestroy> destroy;
    std::vector<PersistentUse> use;
    std::vector<Warning> warnings;
};

struct RequestText {
    std::optional<std::string> script;  // a whole job script (may end with NUL bytes)
    std::optional<std::string> bb;      // --bb TEXT: directives or the short form
    std::optional<std::string> bbf;     // contents of --bbf FILE
    // One directive line bbkit writes from a tool's options: its errors name "command line".
    std::optional<std::string> command_line;
    // The scheduler already replaced the symbols: Slurm's datawarp plugin hands setup and the
    // stages a copy of the directives with %% %A %a %b %d %j %u %x replaced, and a `\\` left
    // where it stopped. Such text is read as it is: no second replacement, `\\` kept.
    bool symbols_replaced = false;
};

// Parses and validates against the configuration. Throws Error(usage) for a job, array job or
// array task id that is not a number, Error(data) for an invalid request (in Slurm mode also
// for --bb's short form, which Slurm's lua plugin does not read), Error(no_input) for an
// unknown pool or user, Error(no_perm) for a user who may not use burst buffers or may not
// create/destroy persistent ones. Whether Slurm reads a job's request the same is the caller's
// next question (check_slurm_view): lines bbkit writes itself need not ask it.
Request parse_request(const RequestText& text, const Config& config, const JobContext& job);

// The canonical directive lines for a request (bb-parse --emit-script).
std::vector<std::string> canonical_lines(const Request& request, const Config& config);

// Checks that `path` (after symbol replacement) names something inside a buffer and returns
// it relative to the buffer root ("" for the root itself). Accepts relative paths and the
// $BB_JOB_DIR, $DW_JOB_STRIPED, $DW_JOB_PRIVATE and $DW_PERSISTENT_STRIPED_<name> prefixes
// (the last sets `buffer` to <name>). Throws Error(data) for anything resolving outside.
std::string buffer_relative_path(const std::string& path, std::string& buffer);

}  // namespace bbkit
