// bbkit.toml: the site's configuration, read once and validated completely.
//
// Lookup order: --config FILE, then $BBKIT_CONFIG, then /etc/bbkit/bbkit.toml. Unknown keys and
// wrong types are errors naming the key and the line (ExitCode::config), as Slurm makes an
// unknown burst_buffer.conf option fatal. This header does not include toml11: only config.cpp
// does (it is slow to compile).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bbkit/slurm_release.hpp"

namespace bbkit {

// Who drives a buffer's life (bbkit(7), MODES): the tools' callers (prolog/epilog scripts, an
// admin), Slurm's burst_buffer/lua plugin through burst_buffer.lua, or Slurm's
// burst_buffer/datawarp plugin through bbkit's dw_wlm_cli.
enum class Mode { standalone, slurm, datawarp };

// A pool's `staging`: which host's mover a stage of its buffers runs (PoolConfig::staging).
enum class PoolStaging { controller, slurm };

// How state.db journals (bbkit(7), STATE DIRECTORY): by its file system (automatic: WAL on a
// local disk, a rollback journal on a network or cluster one), or as the site says: rollback
// for a shared file system bbkit does not recognise, wal refused where other hosts share it.
enum class StateJournal { automatic, wal, rollback };

// Whether slurmctld drives the lifecycle (either plugin): then Slurm owns capacity decisions
// and failure policy, and bbkit records, moves data and never contradicts it.
bool slurm_drives(Mode mode);

// The directive prefixes Slurm's datawarp plugin reads: #DW for job buffers, staging and
// persistent use, #BB for persistent creation and destruction.
inline const std::vector<std::string>& datawarp_directives() {
    static const std::vector<std::string> words{"DW", "BB"};
    return words;
}

// Slurm's maximum for burst-buffer timeouts; larger values are refused.
constexpr unsigned max_timeout_seconds = 2073600;

// Whether a pool's buffers get a project quota (bbkit(7), CAPACITY).
enum class QuotaMode { none, project };
// What init and alloc do when a pool asks for project quotas its file system does not enforce.
enum class QuotaMissing { refuse, warn };

// A buffer's project id is quota_project_base + its record id; ids above this are refused.
constexpr std::uint32_t max_project_id = 4294967294U;  // (uint32_t)-1 is no valid project

struct PoolConfig {
    std::string name;
    std::string path;               // absolute; holds bbkit's marker file
    std::uint64_t capacity = 0;     // bytes, > 0
    std::uint64_t granularity = 1;  // bytes, >= 1, <= capacity
    bool direct_io = false;         // movers copy large files with O_DIRECT (far less CPU, opt-in)
    bool syncfs = true;             // false: fsync each staged-out file, for file systems whose
                         // syncfs(2) does not flush everything (some network file systems)
    QuotaMode quota = QuotaMode::none;
    QuotaMissing quota_missing = QuotaMissing::refuse;
    std::uint32_t quota_project_base = 2000000000;  // project ids base+1 ... max_project_id
    // A pool on every compute node's own storage (bbkit(7), NODE-LOCAL POOLS): each node runs
    // the tools against its own copy of it; Slurm schedules its space as the GRES `gres`, one
    // unit per granule (standalone mode only).
    bool node_local = false;
    std::string gres = "bbnvme";
    // Where the stages of its buffers move the data (bbkit(7), STAGING ON TRANSFER NODES):
    // controller, bb-stage's own bb-mover on the host that runs the hooks; slurm, a Slurm job
    // of the buffer's user in `transfer_partition`, spread over up to `transfer_nodes` nodes.
    PoolStaging staging = PoolStaging::controller;
    std::string transfer_partition{};
    std::uint32_t transfer_nodes = 1;
};

// transfer_nodes' bound: one stage's parts (a Slurm job of that many nodes).
constexpr std::uint32_t max_transfer_nodes = 64;

// A node-local pool's GRES count on each node: whole granules of its capacity.
std::uint64_t gres_count(const PoolConfig& pool);

struct Timeouts {  // seconds; Slurm's defaults
    unsigned stage_in = 86400;
    unsigned stage_out = 86400;
    unsigned other = 300;
    unsigned validate = 5;
    unsigned queue = 600;  // bb-pool alloc --wait default: how long to wait in a pool's FIFO queue
    // How long a writer waits for this host to take a shared state directory over (StateStore)
    unsigned takeover = 60;
};

struct Limits {
    unsigned stage_concurrency = 128;  // stagers per stage at once (Slurm 22.05: 128)
    unsigned mover_threads = 8;        // I/O threads shared by all movers
    std::uint64_t mover_memory = std::uint64_t{256} << 20;  // bytes one mover's structures may take
    std::optional<std::uint64_t> user_capacity;  // bytes; absent = unlimited (standalone mode)
    // The largest job script (or --bbf file) a tool reads: Slurm's max_script_size default.
    std::uint64_t script_size = std::uint64_t{4} << 20;
};

// burst_buffer.conf's Flags that bbkit honours.
struct Flags {
    bool enable_persistent = false;  // users (not only root) may create/destroy persistent buffers
    bool private_data = false;       // users see only their own buffers
    bool teardown_failure = false;   // tear down after a failed stage (standalone mode)
};

struct Config {
    std::string source;  // the file it was read from ("" for built-in defaults)
    std::string state_dir = "/var/lib/bbkit";
    std::string state_owner = "root";
    // Root's key for the records' seals (bbkit(7), SECURITY): beside the configuration file
    // unless `record_key` says otherwise; /etc/bbkit/record.key for the built-in defaults.
    std::string record_key;
    std::string state_group;  // may read env/ (SlurmUser's group); "" = leave env/'s group as is
    StateJournal state_journal = StateJournal::automatic;
    Mode mode = Mode::standalone;
    std::string cluster = "main";
    std::vector<std::string> directives{"BB_LUA", "DW", "BB"};  // without the leading '#'
    std::optional<std::string> default_pool;
    Flags flags;
    std::vector<std::string> allow_users;  // names or numeric uids; exclusive with deny_users
    std::vector<std::string> deny_users;
    bool allow_root = false;
    Timeouts timeouts;
    Limits limits;
    std::vector<PoolConfig> pools;
    std::map<std::string, std::string> hooks;  // phase -> absolute path of an admin script
    // The Slurm release the site runs, whose `scontrol show burst` bb-stat burst reproduces;
    // absent: the newest layout bbkit knows.
    std::optional<SlurmRelease> slurm_release;
    unsigned poll_interval = default_poll_interval;  // burst_buffer.conf's PollInterval, seconds
    // Where the Slurm commands the tools run (sbatch, squeue, scontrol) read slurm.conf: root's
    // choice, as SLURM_CONF; "" = a root caller's own SLURM_CONF, else Slurm's default place.
    std::string slurm_conf;

    const PoolConfig* find_pool(const std::string& name) const;
};

// The hook phases [hooks] accepts.
const std::vector<std::string>& hook_phases();

// The file to read: `cli_path` when given, then $BBKIT_CONFIG, then /etc/bbkit/bbkit.toml.
std::string locate_config(const std::optional<std::string>& cli_path);

// Parses and validates TOML text; `source_name` appears in error messages.
// Throws Error(config) naming the key and line of the first problem.
Config parse_config(const std::string& text, const std::string& source_name);

// Reads and parses a file; a missing or unreadable file is Error(config) naming it.
Config load_config(const std::string& path);

const char* to_string(Mode mode);
const char* to_string(StateJournal journal);  // "auto", "wal", "rollback"
const char* to_string(QuotaMode mode);        // "none", "project"
const char* to_string(QuotaMissing missing);  // "refuse", "warn"

// The flags as burst_buffer.conf writes them, in Slurm's order ("DisablePersistent", ...).
std::vector<std::string> flag_names(const Flags& flags);

}  // namespace bbkit
