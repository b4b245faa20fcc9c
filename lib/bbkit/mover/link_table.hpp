// The hard links a move meets (bbkit(7), STAGING): a file with several names is copied once
// and its other names linked to that copy. The table remembers each multiply-linked inode's
// first copy until all its names are met, within a quarter of the move's memory bound; past
// it, every new such inode is copied on its own and recorded in a LinkSpill, whose links are
// made at the very end. Used by the walk alone: no lock.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "bbkit/mover/link_spill.hpp"
#include "bbkit/mover/move_types.hpp"

namespace bbkit::mover_internal {

class LinkTable {
  public:
    // The spill's unnamed file goes in the directory `spill_dir` (the buffer's root, `what` in
    // messages), made on the first inode past the bound; a failure to write it is of
    // `spill_kind` (where the move writes into the buffer: the destination's).
    LinkTable(int spill_dir, std::string what, std::uint64_t memory_limit, FailureKind spill_kind)
        : spill_dir_(spill_dir),
          what_(std::move(what)),
          memory_limit_(memory_limit),
          spill_kind_(spill_kind) {}

    enum class Met {
        first,    // copy it; later names link to it (remembered: `dst` and `tree`)
        later,    // link it to `target`'s copy
        spilled,  // copy it; recorded (as `reached_at`) for the links made at the end
    };
    // A name of the multiply-linked inode `st` whose copy goes to `dst` (in the temporary tree
    // `tree`, if any; reached at `reached_at` until the end of the move).
    Met meet(const struct stat& st, const std::string& dst, const std::shared_ptr<TempTree>& tree,
             const std::string& reached_at, LinkTarget& target);

    // The spill, if the bound was ever passed: its links are the move's last step.
    LinkSpill* spill() const { return spill_.get(); }
    // What the remembered first copies take now (entries' overhead and paths).
    std::size_t bytes() const { return bytes_; }

  private:
    int spill_dir_;
    std::string what_;
    std::uint64_t memory_limit_;
    FailureKind spill_kind_;
    std::unordered_map<std::uint64_t, std::unordered_map<std::uint64_t, LinkTarget>> links_;
    std::size_t bytes_ = 0;
    bool overflow_ = false;  // never half in memory, half on disk: once spilling, always
    std::unique_ptr<LinkSpill> spill_;
};

}  // namespace bbkit::mover_internal
