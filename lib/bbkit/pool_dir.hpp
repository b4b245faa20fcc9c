// A pool on disk: its root, the marker that proves it is the right file system, and the only
// code that creates, moves and removes buffer directories.
//
// Everything below a pool root is reached through descriptors with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV): users own their buffer directories and may plant
// symlinks in them, so no path is ever resolved by name from the root, and ownership is set
// with fchown on an open descriptor, never by path.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bbkit/config.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/project_quota.hpp"

namespace bbkit {

// Whether `uid` may own a pool's own directories (its root, job/, persistent/, trash/,
// quarantine/, env/), which nobody else may then rearrange: root; or, for a process that is
// not root, itself. Such a process cannot hand a directory to another user, so a pool of its
// own puts nobody but it at risk (the unit tests run so, as any user). For root the answer is
// root alone (bbkit(7), SECURITY).
bool may_own_pools(uid_t uid);

struct PoolMarker {
    std::string name;
    std::string uuid;
};

// What bb-pool list and bb-stat show for a pool (bbkit(7), POOL AVAILABILITY).
enum class PoolAvailability {
    up,             // initialised, its marker in place, taking allocations
    draining,       // marker in place, no new allocations (bb-pool drain)
    unavailable,    // root missing or not a directory, marker missing or another's: not mounted
    uninitialised,  // never bb-pool init'ed: the state records no marker
};
std::string to_string(PoolAvailability availability);
// Error(data) for a word that is none of the above.
PoolAvailability parse_pool_availability(const std::string& text);

// Reads the pool's marker (one open and one read) and compares it with `recorded_uuid`, the
// state's (nullopt before bb-pool init: uninitialised). A caller that may not read the root or
// the marker (a user reading public/) gets `when_unreadable`. Never throws for the pool's
// state: an unexpected error is unavailable.
PoolAvailability pool_availability(
    const PoolConfig& pool, const std::optional<std::string>& recorded_uuid, bool draining,
    PoolAvailability when_unreadable = PoolAvailability::unavailable);

// A directory that removal kept aside in quarantine/ rather than delete as root.
struct KeptEntry {
    std::string name;  // in quarantine/: "<trash name>.kept.<n>.<inode>"
    uid_t uid;         // its owner
    uid_t buffer_owner;
};

struct RemovalResult {
    bool complete = false;
    std::vector<KeptEntry> kept;
    std::uint64_t removed = 0;  // entries deleted by this call: files, symlinks, directories
};

// Where a long removal stands, for a progress line.
struct RemovalProgress {
    std::string pool;
    std::string trash_name;
    std::uint64_t removed = 0;  // entries deleted so far by this call
};
using RemovalProgressFn = std::function<void(const RemovalProgress&)>;

// The project quota a new buffer directory gets (bbkit(7), CAPACITY).
struct BufferLimit {
    std::uint32_t project = 0;
    std::uint64_t bytes = 0;  // > 0: a limit of 0 would mean none
};

// How much a bounded measurement of buffers may still do (PoolDir::measure): the entries it may
// still look at and when it must stop, whatever the number of buffers measured with it.
struct MeasureBudget {
    std::uint64_t entries = 0;
    std::chrono::steady_clock::time_point deadline;
};

// What a buffer directory holds, counted as its file system charges it (allocated blocks; a
// file with several names counts its share under each).
struct DirectoryUsage {
    std::uint64_t bytes = 0;
    bool over = false;      // counting stopped once `bytes` went past the limit it was given
    bool complete = false;  // every entry was counted (not stopped by over, budget or depth)
};

class PoolDir {
  public:
    static constexpr const char* env_subdir = "env";
    static constexpr const char* transfer_subdir = "transfer";

    static constexpr const char* marker_file = ".bbkit-pool";

    // Writes the marker (name and a new UUID) into an existing root-owned directory and
    // creates job/, persistent/, trash/, quarantine/ and env/. Idempotent: an existing marker of
    // the same pool is kept; one naming another pool is Error(exists).
    static PoolMarker init(const PoolConfig& pool);
    // For bb-pool init --replace: the same, but always a new marker with a new UUID (one of
    // the same pool with another UUID is replaced; another pool's is still Error(exists)).
    static PoolMarker init_new_marker(const PoolConfig& pool);

    // Opens a pool and checks it: the marker must exist and name this pool (and carry
    // `expected_uuid` when given), else Error(unavailable) "... not mounted?"; the root, job/
    // and persistent/ must be root-owned directories not writable by group or others, else
    // Error(no_perm) naming the directory.
    static PoolDir open(const PoolConfig& pool, const std::optional<std::string>& expected_uuid);

    const PoolMarker& marker() const { return marker_; }
    const std::string& path() const { return path_; }

    // How create_buffer_dir treats a directory that is already there.
    enum class Creation {
        fresh,   // a new record: any existing entry is Error(exists), and is left untouched
        resume,  // an `allocating` record whose process died: only what that process can
                 // have left is taken (root's and empty, or already uid's); else Error(exists)
    };

    // Creates `directory` ("job/main.42.1" or "persistent/main.alpha") owned by uid:gid, mode
    // 0700, and syncs it and its entry: the result's wait() reports a failed sync, and must
    // come before anything records the directory as made. Never adopts a directory that
    // another buffer, cluster or user made (see Creation); bb-pool check reports such an
    // entry as an orphan.
    //
    // With `limit`, the directory gets its project and hard limit before it is handed over
    // (see project_quota.hpp): a fresh one only when the project holds nothing yet, else
    // Error(exists) (another state directory or tool uses that project id) and the empty
    // directory is removed again.
    [[nodiscard]] PendingSync create_buffer_dir(const std::string& directory, uid_t uid, gid_t gid,
                                                Creation creation,
                                                const std::optional<BufferLimit>& limit = {});

    // Where the pool stands with project quotas (probed when it was opened).
    const PoolQuota& quota() const { return quota_; }
    // The pool's project quotas; only meaningful when quota().enforced.
    ProjectQuotas project_quotas() const { return ProjectQuotas(root_.get(), path_); }
    // Whether new buffers get a project quota, by the pool's rule (require_pool_quota): throws
    // for a pool that refuses to run without, warns for one that does not.
    bool limits_buffers() const;
    // Removes a project's limits, when the pool enforces project quotas; errors are logged,
    // not thrown (bb-pool recover and check --repair remove what is left).
    void release_project(std::uint32_t project) const;

    // The project of `directory` (job/... or persistent/...), opened beneath the pool.
    DirectoryProject project_of(const std::string& directory) const;

    // Counts what `directory` (job/... or persistent/...) holds beneath it (its own blocks
    // are not counted), depth first with one open
    // directory per level, never following a symlink nor leaving the pool's mount; counting
    // stops once more than `stop_above` bytes are counted, when `budget` is spent (each entry
    // takes one from it) or 64 levels down. A directory that is gone counts as empty.
    DirectoryUsage measure(const std::string& directory, std::uint64_t stop_above,
                           MeasureBudget& budget) const;
    bool exists(const std::string& directory) const;
    // Removes `directory` if it is still an empty directory (an allocation whose record was
    // ended meanwhile); anything in it stays for check to report. Durable.
    void remove_if_empty(const std::string& directory);

    // Whether a change is made durable before the call returns (`now`), or left for one
    // sync_removal() that covers several changes (`later`): each directory sync is a device
    // flush, and teardown's rename and removal need only be durable before its next commit.
    enum class Sync { now, later };

    // Renames `directory` to trash/<trash_name> (the entry itself: a symlink planted in its
    // place is moved, never followed) and, with Sync::now, makes both entries durable.
    // Returns false when the directory was already gone.
    bool move_to_trash(const std::string& directory, const std::string& trash_name,
                       Sync sync = Sync::now);

    // Removes trash/<trash_name> (and the pieces it was split into) until `deadline`, as the
    // buffer's owner could (bbkit(7), SECURITY): without following symlinks, never across a
    // mount point (Error(io) naming it: the entry stays until it is unmounted), and keeping
    // aside in quarantine/ a non-empty directory that the owner does not own. `complete` when
    // nothing of it is left in trash/ (durable with Sync::now). Its memory does not depend on
    // the number of entries (see drain_directory); a deadline that stops it in the middle of a
    // directory leaves the rest for the next call. `progress`, when given, is called from the
    // calling thread once a second while the removal runs (never for one that takes less).
    RemovalResult remove_from_trash(const std::string& trash_name,
                                    std::chrono::steady_clock::time_point deadline,
                                    Sync sync = Sync::now,
                                    const RemovalProgressFn& progress = nullptr);

    // Makes durable what Sync::later left: the entries of trash/ and of `directory`'s parent
    // (job/ or persistent/). The result's wait() reports a failed sync.
    [[nodiscard]] PendingSync sync_removal(const std::string& directory);

    // Moves `relative` (e.g. "job/main.17.2") aside into quarantine/<name>; never deletes.
    void quarantine(const std::string& relative, const std::string& name);

    // The entry names of job/, persistent/ or trash/.
    std::vector<std::string> list(const std::string& subdir) const;

    // A job's environment for its tasks in standalone mode (bbkit(7), FILES): env/<name> (see
    // job_environment.hpp), owned by uid:gid, mode 0400, in the root-owned env/ the user
    // cannot write, so only the job's user reads it and nobody but root replaces it. Written to
    // a temporary name and renamed over the old one, both durable. env/ is created when missing
    // (pools initialised before it existed); one that is a symlink, not a directory, not root's
    // or writable by group or others is Error(no_perm), and nothing is written.
    void write_job_environment(const std::string& name, const std::string& text, uid_t uid,
                               gid_t gid);
    // Removes env/<name>; a missing file or env/ is no error.
    void remove_job_environment(const std::string& name);
    // The key of user `uid` in env/ (environment_key_name): the one there when it is a regular
    // file of theirs holding a key, else a new random one written as write_job_environment
    // writes a file (a key another writer made meanwhile wins: it is read back).
    std::string job_environment_key(uid_t uid, gid_t gid);
    // The environment files of (cluster, job_id) in env/, tagged or legacy (environment_job_id).
    std::vector<std::string> job_environments(const std::string& cluster,
                                              std::uint64_t job_id) const;
    // The names in env/ (none when it is missing); env/ is checked as for writing.
    std::vector<std::string> list_job_environments() const;

    // A transfer job's directory (bbkit(7), STAGING ON TRANSFER NODES): transfer/<name>, made
    // by root with `plan` in it (mode 0400), then given to uid:gid (mode 0700), where the
    // job's movers, as the user, write their reports. transfer/ is root's, made when missing
    // and checked as env/ is. Returns the directory's absolute path; Error(exists) when there
    // is one of that name.
    std::string make_transfer_dir(const std::string& name, const std::string& plan, uid_t uid,
                                  gid_t gid);
    // transfer/<name>, opened without following a symlink: an empty Fd when it is missing,
    // Error(no_perm) when it is not uid's.
    Fd open_transfer_dir(const std::string& name, uid_t uid) const;
    // Moves transfer/<name> to trash/<trash_name> and removes it there as remove_from_trash
    // does (as its owner could). True when nothing of it is left.
    bool remove_transfer_dir(const std::string& name, const std::string& trash_name,
                             std::chrono::steady_clock::time_point deadline);

  private:
    PoolDir() = default;
    // A root-owned subdirectory of the pool's root (env/, transfer/): opened and checked;
    // created first when `create`. An empty Fd when it is missing.
    Fd root_subdir(const char* subdir, bool create) const;
    int subdir_fd(const std::string& subdir) const;
    bool write_env_entry(const std::string& name, const std::string& text, uid_t uid, gid_t gid,
                         bool replace);
    // env/, opened and checked; created first when `create`. An empty Fd when it is missing.
    Fd env_dir(bool create) const;

    std::string path_;
    PoolMarker marker_;
    PoolConfig config_;
    PoolQuota quota_;
    Fd root_, job_, persistent_, trash_, quarantine_;
};

}  // namespace bbkit
