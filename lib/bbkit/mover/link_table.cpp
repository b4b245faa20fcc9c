#include "bbkit/mover/link_table.hpp"

#include <utility>

namespace bbkit::mover_internal {

LinkTable::Met LinkTable::meet(const struct stat& st, const std::string& dst,
                               const std::shared_ptr<TempTree>& tree, const std::string& reached_at,
                               LinkTarget& target) {
    auto& by_inode = links_[static_cast<std::uint64_t>(st.st_dev)];
    const auto found = by_inode.find(static_cast<std::uint64_t>(st.st_ino));
    if (found != by_inode.end()) {
        target = found->second;
        if (--found->second.remaining == 0) {  // every name met: forget the inode
            bytes_ -= entry_overhead + found->second.dst.size();
            by_inode.erase(found);
        }
        return Met::later;
    }
    if (!overflow_ && bytes_ + entry_overhead + dst.size() <= memory_limit_ / 4) {
        by_inode.emplace(static_cast<std::uint64_t>(st.st_ino),
                         LinkTarget{dst, tree, st.st_nlink - 1});
        bytes_ += entry_overhead + dst.size();
        return Met::first;
    }
    // Past the bound, every new inode is copied on its own and recorded on disk (never half in
    // memory, half on disk: one inode's names must all meet in one place). The records go to an
    // unnamed file on the buffer's file system, either way.
    typed(spill_kind_, "write", what_, [&] {
        if (!spill_)
            spill_ = std::make_unique<LinkSpill>(spill_dir_, what_,
                                                 static_cast<std::size_t>(memory_limit_ / 8));
        overflow_ = true;
        spill_->add(st.st_dev, st.st_ino, reached_at);
    });
    return Met::spilled;
}

}  // namespace bbkit::mover_internal
