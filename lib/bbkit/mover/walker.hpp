// The walk of a move: its own thread goes through every entry's source depth first, one open
// directory per level, makes the destination's directories (under a temporary tree's name when
// durable), takes over or removes what a killed move left, meets hard links, counts the
// capacity, and hands the entries to the copy in batches (BatchQueue) that fit the memory
// bound. Everything here is the walk's alone; what it shares with the copy is MoveState's
// (move_state.hpp). Files: walk.cpp (the walk, entries, batches), directories.cpp (the
// destination's directories), temporaries.cpp (a killed move's temporaries).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bbkit/mover.hpp"
#include "bbkit/mover/link_table.hpp"
#include "bbkit/mover/move_state.hpp"
#include "bbkit/mover/walk_ahead.hpp"

namespace bbkit::mover_internal {

class Walker {
  public:
    explicit Walker(MoveState& state);

    // The walk, on its own thread: every entry, then the last batch; its end (or the failure
    // that ended it) reaches the copy through the queue (BatchQueue::finish).
    void run();
    // Once the walk has ended: the directories an earlier entry finished that a later one
    // wrote into get their mode and times back (the copy's last step but the syncs).
    void restore_reopened();
    // Once the walk has ended: the hard links met past the memory bound, if any (LinkTable).
    LinkSpill* link_spill() const { return links_.spill(); }

  private:
    // walk.cpp
    void walk_entry(const MoveEntry& entry);
    void walk_tree(const std::shared_ptr<Dir>& top);
    void open_frame(Frame& frame, int parent_fd);
    void close_frame(Frame& frame);
    void add_node(const std::string& src, const std::string& dst, const struct stat& st,
                  const std::shared_ptr<Dir>& parent);
    void account(std::size_t bytes);
    void hand_over();
    void drain();
    bool overlaps_earlier(const std::string& dst) const;
    bool inside_earlier(const std::string& path) const;
    void reopen_earlier(const std::string& dst);
    void note_lookalike(const std::string& dst);
    bool kept_lookalike(const std::string& path) const;
    void prune_adopted(Frame& frame);
    bool in_shard(std::string_view relative) const;
    // The same for MoveEntry::shard_by_inode: by the inode the listing gives.
    bool in_shard(ino_t inode) const;
    void check_stopped() const { state_.batches.check_stopped(); }
    // directories.cpp
    void make_parents(const std::string& path);
    void watch_file_system(const std::string& dir);
    std::shared_ptr<Dir> make_dir(const std::string& src, const std::string& dst,
                                  const struct stat& st, const Dir* parent, std::string adopt);
    void learn_new_dir(Dir& dir) {
        dir.new_files = new_file_defaults(dst_->open_dir(dir.at, true).get());
    }
    // temporaries.cpp
    bool can_adopt(const std::string& temp, const struct stat& st, const struct stat& source) const;
    bool owned(int dir, const std::string& name) const;
    bool may_remove_stale(const std::string& temp) const;
    void scan_stale_temps(Frame& frame);
    std::vector<std::pair<std::string, std::string>>& temps_beside(const std::string& dir);
    void remove_stale(const std::string& dir, int fd, const std::string& name);

    MoveState& state_;
    // Short names for the shared parts the walk uses most (MoveState's).
    const MovePlan& plan_;
    const Side* src_;
    const Side* dst_;
    MoveCounters& counts_;
    Warnings& warnings_;
    TempNames& temps_;

    std::size_t batch_entries_ = max_batch_entries;
    std::size_t batch_bytes_ = 0;
    std::size_t batch_limit_ = 0;  // the batch being filled: doubles from the first's to the max
    Batch batch_;
    const MoveEntry* entry_ = nullptr;  // the entry being walked
    // How much of a walked source path is the entry's source root (and its '/'): the rest is
    // what a sharded entry hashes (shard.hpp).
    std::size_t shard_prefix_ = 0;
    std::set<std::string> entry_tops_;  // destination of each entry walked so far
    bool covers_all_ = false;           // an entry's destination was the whole buffer or "/"
    bool overlapping_ = false;          // the entry being walked overlaps an earlier one
    // Destinations written so far whose names look like temporaries (the user's own files):
    // a later entry into the same directory must not take them for a killed move's.
    std::set<std::string> lookalikes_;
    bool lookalikes_overflow_ = false;
    // The entry's destination directory, never walked as a source (a destination inside the
    // source would otherwise be walked while it is being written).
    dev_t top_dev_ = 0;
    ino_t top_ino_ = 0;
    // Directories an earlier entry finished that a later one writes into: their mode and times
    // as that entry left them, put back at the end.
    std::map<std::string, struct stat> reopened_;
    // The temporaries of other moves beside entries' destinations, listed once per directory.
    std::map<std::string, std::vector<std::pair<std::string, std::string>>> entry_temps_;
    LinkTable links_;
    std::uint64_t capacity_counted_ = 0;  // see MovePlan::capacity
    std::unique_ptr<WalkAhead> ahead_;    // reads directories ahead of the walk (run())
    uid_t uid_;                           // the user the move runs as
};

}  // namespace bbkit::mover_internal
