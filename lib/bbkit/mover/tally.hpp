// What a move has counted and done, and what it warns of. The walk adds to the totals; the
// workers and the executor add to what is done, written and skipped; the executor reads them
// for the progress reports and the summary (mover.hpp). Counters are atomic, read and written
// without a lock; the warnings take their own.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "bbkit/mover.hpp"
#include "bbkit/mover/copy_metadata.hpp"

namespace bbkit::mover_internal {

struct MoveCounters {
    std::atomic<bool> walk_done{false};  // the totals are final
    // Every entry (files, directories, links, fifos); the bytes of regular files.
    std::atomic<std::uint64_t> files_total{0}, bytes_total{0};
    std::atomic<std::uint64_t> files_done{0}, bytes_done{0};
    // Written by this move (not directories), and found complete already.
    std::atomic<std::uint64_t> files_written{0}, bytes_written{0}, skipped{0};

    MoveProgress progress(bool syncing) const {
        return MoveProgress{files_done.load(),  files_total.load(), bytes_done.load(),
                            bytes_total.load(), !walk_done.load(),  syncing};
    }
};

// A move's warnings, from any thread: each message once, at most `max_kept` of them (memory
// stays bounded); the others are counted.
class Warnings {
  public:
    static constexpr std::size_t max_kept = 100;

    void add(const std::string& message);
    // In the order first given, then "N more warnings" when some were not kept.
    std::vector<std::string> list() const;
    // add() as copy_file and copy_metadata take it.
    const CopyWarning& callback() const { return callback_; }

  private:
    mutable std::mutex mutex_;
    std::vector<std::string> kept_;
    std::set<std::string> seen_;
    std::size_t dropped_ = 0;
    const CopyWarning callback_ = [this](const std::string& message) { add(message); };
};

}  // namespace bbkit::mover_internal
