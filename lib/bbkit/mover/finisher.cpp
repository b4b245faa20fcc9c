#include "bbkit/mover/finisher.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "bbkit/fault.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/mover/common.hpp"
#include "bbkit/mover/keep_existing.hpp"

namespace bbkit::mover_internal {

namespace {

// The path a link target is reached at now: through its temporary tree until that is in place.
std::string current_path(const LinkTarget& target) {
    if (!target.tree || target.tree->published)
        return target.dst;
    return target.tree->at + target.dst.substr(target.tree->dst.size());
}

}  // namespace

Finisher::Finisher(MoveState& state, WorkerPool& pool, Reporter& reporter)
    : state_(state),
      plan_(state.plan),
      src_(*state.src),
      dst_(*state.dst),
      counts_(state.counts),
      warnings_(state.warnings),
      pool_(pool),
      reporter_(reporter) {}

// After the copy of a batch: its temporaries take their final names once durable, its hard
// links are made, then the directories whose walk ended in it get their modes and times
// (a 0500 directory had to stay writable while filled), post-order so a directory is final
// only after everything below it. Temporary trees complete in this batch are synced and
// renamed into place before the directories around them are finished (a rename changes its
// parent's times).
void Finisher::finish(Batch& batch) {
    const bool durable = plan_.durable;
    if (durable) {
        std::vector<Node*> pending;
        bool links_to_unsynced = false;  // a final name would reach data not yet durable
        for (Node& node : batch.nodes) {
            if (!node.temp.empty())
                pending.push_back(&node);
            if (node.kind == Kind::hard_link && !in_temp_tree(node) && node.link.tree &&
                !node.link.tree->published)
                links_to_unsynced = true;
        }
        fault_point("mover.before-syncfs");
        if (!pending.empty() || links_to_unsynced)
            sync_file_systems();
        fault_point("mover.before-renames");
        // Every temporary now holds durable bytes: only now may it take its final name.
        pool_.run(pending.size(), [&](std::size_t i, Worker& worker) {
            Node& node = *pending[i];
            const std::string name = split_last(node.dst).second;
            const int dir = worker.dst_dir.get(dst_, parent_path(node));
            if (node.keep_existing) {
                put_without_replacing(dst_, counts_, node, dir, name);
            } else {
                if (renameat(dir, node.temp.c_str(), dir, name.c_str()) != 0)
                    fail("rename into place", dst_.display(node.dst), errno);
                node.temp.clear();
            }
            fault_point("mover.renamed");
        });
    }
    for (Node& node : batch.nodes)
        if (node.kind == Kind::hard_link)
            make_link(node);
    bool tops = false;
    for (const std::shared_ptr<Dir>& dir : batch.closed) {
        if (dir->tree) {
            apply_dir_metadata(*dir, durable && !plan_.trust_syncfs);
            if (dir->top && dir->tree->deferred)
                deferred_tops_.push_back(dir);
            else
                tops = tops || dir->top;
        }
    }
    if (durable) {
        fault_point("mover.before-dir-renames");
        if (tops) {
            sync_file_systems();
            for (const std::shared_ptr<Dir>& dir : batch.closed)
                if (dir->top && !dir->tree->deferred)
                    publish(*dir);
        }
    }
    fault_point("mover.before-dir-metadata");
    for (const std::shared_ptr<Dir>& dir : batch.closed)
        if (!dir->tree)
            apply_dir_metadata(*dir, durable);
    pool_.forget_dirs();
    fault_point("mover.batch-done");
}

void Finisher::finish_move(LinkSpill* spill) {
    if (spill)
        link_spilled(*spill);
    if (!deferred_tops_.empty()) {
        sync_file_systems();
        for (const std::shared_ptr<Dir>& dir : deferred_tops_)
            publish(*dir);
    }
}

void Finisher::sync_parents() {
    const Clock::time_point began = Clock::now();
    for (const std::string& dir : state_.syncs.dirs()) {
        const Fd fd = dst_.open_dir(dir);
        if (fsync(fd.get()) != 0)
            fail("sync directory", dst_.display(dir), errno);
    }
    sync_time_ += Clock::now() - began;
}

void Finisher::sync_file_systems() {
    bool any = false;
    Clock::time_point began{};
    state_.syncs.for_each_file_system([&](int fd) {
        if (!any) {
            any = true;
            reporter_.set_syncing(true);
            reporter_.report(true);
            began = Clock::now();
        }
        if (syncfs(fd) != 0)
            fail("sync the destination file system", "", errno);
    });
    if (!any)
        return;
    sync_time_ += Clock::now() - began;
    reporter_.set_syncing(false);
}

// A hard link to the first copy of its inode, reached where it is now (through its
// temporary tree until that is renamed).
void Finisher::make_link(Node& node) {
    const std::string link_name = split_last(node.dst).second;
    const auto [target_parent, target_name] = split_last(current_path(node.link));
    const Fd link_dir = dst_.open_dir(parent_path(node));
    const Fd target_dir = dst_.open_dir(target_parent);
    struct stat a {
    }, b{};
    const bool fresh = in_new_dir(node);
    if (!fresh && fstatat(link_dir.get(), link_name.c_str(), &a, AT_SYMLINK_NOFOLLOW) == 0 &&
        fstatat(target_dir.get(), target_name.c_str(), &b, AT_SYMLINK_NOFOLLOW) == 0 &&
        a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
        counts_.skipped.fetch_add(1);
    } else if (node.keep_existing) {
        // Nothing is removed: a name taken by a complete copy of the source is kept, anything
        // else refused; linkat refuses a name taken meanwhile.
        if (linkat(target_dir.get(), target_name.c_str(), link_dir.get(), link_name.c_str(), 0) ==
            0) {
            counts_.files_written.fetch_add(1);
        } else if (errno != EEXIST) {
            fail("link", dst_.display(node.dst), errno, " to " + dst_.display(node.link.dst));
        } else if (same_as_source(node, link_dir.get(), link_name, target_dir.get(), target_name)) {
            counts_.skipped.fetch_add(1);
        } else {
            refuse_taken(dst_, link_dir.get(), link_name, node.dst);
            fail("link", dst_.display(node.dst), EEXIST);
        }
    } else {
        if (!fresh && unlinkat(link_dir.get(), link_name.c_str(), 0) != 0 && errno != ENOENT)
            fail("replace", dst_.display(node.dst), errno);
        if (linkat(target_dir.get(), target_name.c_str(), link_dir.get(), link_name.c_str(), 0) !=
            0)
            fail("link", dst_.display(node.dst), errno, " to " + dst_.display(node.link.dst));
        counts_.files_written.fetch_add(1);
    }
    counts_.files_done.fetch_add(1);
    reporter_.report(false);
}

void Finisher::apply_dir_metadata(const Dir& dir, bool sync) {
    if (dir.metadata_left) {
        // Another part may still write into it: a read-only mode now would lock it out.
    } else if (!dir.keep_metadata) {
        const Fd src = src_.open_dir(dir.src, true);
        const Fd dst = dst_.open_dir(dir.at, true);
        const std::string shown = dst_.display(dir.dst);
        copy_xattrs(src.get(), dst.get(), true, shown, warnings_.callback());
        set_owner_mode_times(dst.get(), dir.st, shown, warnings_.callback());
        if (sync && fsync(dst.get()) != 0)
            fail("sync directory", shown, errno);
    } else if (sync && fsync(state_.buffer_root.get()) != 0) {
        fail("sync directory", plan_.buffer_root, errno);
    }
    counts_.files_done.fetch_add(1);
    reporter_.report(false);
}

// Renames a directory tree built under a temporary name into place. Never over anything: a
// directory that appeared there meanwhile is not replaced (where the file system cannot refuse
// a replacement, a plain rename still fails over anything but an empty directory).
void Finisher::publish(Dir& dir) {
    TempTree& tree = *dir.tree;
    const auto [parent, name] = split_last(tree.dst);
    const std::string shown = dst_.display(tree.dst);
    const Fd pdir = dst_.open_dir(parent);
    int rc = renameat2(pdir.get(), tree.temp.c_str(), pdir.get(), name.c_str(), RENAME_NOREPLACE);
    if (rc != 0 && errno == EINVAL)
        rc = renameat(pdir.get(), tree.temp.c_str(), pdir.get(), name.c_str());
    if (rc != 0)
        fail("rename into place", shown, errno);
    tree.published = true;
    dir.at = dir.dst;
    state_.trees.remove(dir.tree);
    fault_point("mover.renamed");
    // A rename changes the ctime of what it moves, not its mtime, on the file systems known
    // here; should one differ, the times are set again and made durable.
    struct stat st {};
    if (fstatat(pdir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        !same_mtime(st, dir.st)) {
        const Fd fd = dst_.open_dir(dir.dst, true);
        const struct timespec times[2] = {dir.st.st_atim, dir.st.st_mtim};
        if (futimens(fd.get(), times) != 0 || fsync(fd.get()) != 0)
            fail("set the times of", shown, errno);
    }
}

// The multiply-linked files met past the memory bound were copied each on its own: now that
// every name is in place, each later name of an inode becomes a link to its first (a link
// under a temporary name renamed over the copy, so the name never goes missing). The
// directory keeps its mode and times.
void Finisher::link_spilled(LinkSpill& spill) {
    spill.for_each_link([&](const std::string& first, const std::string& other) {
        state_.batches.check_stopped();
        const auto [first_parent, first_name] = split_last(first);
        const auto [other_parent, other_name] = split_last(other);
        const Fd from = dst_.open_dir(first_parent);
        const Fd to = dst_.open_dir(other_parent, true);
        const std::string shown = dst_.display(other);
        struct stat a {
        }, b{}, dir{};
        if (fstatat(from.get(), first_name.c_str(), &a, AT_SYMLINK_NOFOLLOW) != 0)
            fail("stat", dst_.display(first), errno);
        if (fstatat(to.get(), other_name.c_str(), &b, AT_SYMLINK_NOFOLLOW) == 0 &&
            a.st_dev == b.st_dev && a.st_ino == b.st_ino)
            return;  // linked by an earlier run
        if (fstat(to.get(), &dir) != 0)
            fail("stat", dst_.display(other_parent), errno);
        const bool writable = (dir.st_mode & S_IRWXU) == S_IRWXU;
        if (!writable && fchmod(to.get(), (dir.st_mode & 07777) | S_IRWXU) != 0)
            fail("make", dst_.display(other_parent), errno, " writable");
        const std::string temp = state_.temps.name(other_name);
        if (linkat(from.get(), first_name.c_str(), to.get(), temp.c_str(), 0) != 0)
            fail("link", shown, errno, " to " + dst_.display(first));
        if (renameat(to.get(), temp.c_str(), to.get(), other_name.c_str()) != 0) {
            const int err = errno;
            unlinkat(to.get(), temp.c_str(), 0);
            fail("replace", shown, err);
        }
        const struct timespec times[2] = {dir.st_atim, dir.st_mtim};
        if ((!writable && fchmod(to.get(), dir.st_mode & 07777) != 0) ||
            futimens(to.get(), times) != 0)
            fail("restore the mode and times of", dst_.display(other_parent), errno);
        if (plan_.durable && fsync(to.get()) != 0)
            fail("sync directory", dst_.display(other_parent), errno);
        reporter_.report(false);
    });
}

// After a failure: no temporary of this move is left (the files of the batch being finished,
// and trees not yet in place).
void Finisher::remove_temps(Batch* batch) noexcept {
    if (batch != nullptr) {
        for (Node& node : batch->nodes) {
            if (node.temp.empty())
                continue;
            try {
                const Fd dir = dst_.open_dir(parent_path(node));
                unlinkat(dir.get(), node.temp.c_str(), 0);
            } catch (...) {
            }
            node.temp.clear();
        }
    }
    const std::set<std::shared_ptr<TempTree>> trees = state_.trees.take_all();
    for (const std::shared_ptr<TempTree>& tree : trees) {
        try {
            const Fd dir = dst_.open_dir(split_last(tree->dst).first);
            remove_tree_beneath(dir.get(), tree->temp);
        } catch (...) {
        }
    }
}

}  // namespace bbkit::mover_internal
