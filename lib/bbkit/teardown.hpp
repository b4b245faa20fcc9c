// Ending buffers: teardown (stop the stager, move the directory into the pool's trash/,
// record the end) and the reaper that empties trash/ and only then releases the space.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "bbkit/config.hpp"
#include "bbkit/pool_dir.hpp"
#include "bbkit/store.hpp"

namespace bbkit {

struct TeardownResult {
    bool found = false;  // false: unknown or already torn down (a note, exit 0)
    std::string key;
    bool reaped = false;  // the directory is gone and its space released already
    std::string note;
    std::uint64_t entries_removed = 0;  // by the reap within the budget (files and directories)
};

struct TeardownOptions {
    bool hurry = false;  // do not wait for a running stager: stop it now
    // Persistent buffers: destroy even while jobs use it. Job buffers in standalone mode: tear
    // down even though the job's results are not staged out (audited).
    bool force = false;
    // How long teardown may spend reaping before it leaves the rest to bb-pool reap.
    std::chrono::milliseconds reap_budget{2000};
    RemovalProgressFn on_progress;  // a reap that lasts: once a second (PoolDir::remove_from_trash)
};

// Tears down the newest incarnation of a job's buffer. Commits `teardown`, stops a live
// stager through a pidfd, renames the directory into trash/ (never following a symlink),
// commits `complete`, then reaps within the budget. A rename that fails leaves `teardown-fail`
// (still charged) and throws. Unknown or already ended: found = false. In standalone mode a
// buffer holding results not staged out (unstaged_results) is Error(unavailable) naming them,
// unless `force`.
TeardownResult teardown_job(StateStore& store, const Config& config, std::uint64_t job_id,
                            const TeardownOptions& options, const std::string& who);

// The same for a persistent buffer (`deleting` -> `deleted`); in use: Error(exists) unless
// `force`.
TeardownResult teardown_persistent(StateStore& store, const Config& config, const std::string& name,
                                   const TeardownOptions& options, const std::string& who);

// Finishes a buffer found in `teardown` or `teardown-fail` (recover uses it). `reaped` when its
// directory was reaped within the budget (its space is released).
TeardownResult finish_teardown(StateStore& store, const Config& config, const BufferKey& key,
                               const TeardownOptions& options, const std::string& who);

struct ReapResult {
    std::size_t reaped = 0;     // directories removed and released
    std::size_t remaining = 0;  // still in trash/ when the budget ran out or removal failed
    std::uint64_t bytes_released = 0;
    std::uint64_t entries_removed = 0;  // files and directories, those of `remaining` buffers too
};

// Empties trash/ of every pool until `budget` is spent; the space of a buffer is released
// only once its directory is gone. `progress` as for PoolDir::remove_from_trash, per buffer.
ReapResult reap(StateStore& store, const Config& config, std::chrono::milliseconds budget,
                const std::string& who, const RemovalProgressFn& progress = nullptr);

}  // namespace bbkit
