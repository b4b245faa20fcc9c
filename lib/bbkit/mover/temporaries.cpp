#include "bbkit/mover/walker.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"

namespace bbkit::mover_internal {

// Whether a temporary tree `temp` (its lstat `st`) of a killed move may be taken over for a
// source directory (its stat `source`). Only where one syncfs makes everything in it durable:
// a file a killed run completed but never fsync'd would otherwise be published as it is. And
// only this buffer's own (its tag: see temp_tag), never for a keep_existing entry or a transfer
// job's part (neither builds a tree under a temporary name: see make_dir), a directory of the
// user's, no more open than the mover makes one (the source's mode, the owner's rwx while it
// is built, a set-group-ID bit inherited from the parent): anyone who could write in it may
// have put anything there (bbkit(7), STAGING).
bool Walker::can_adopt(const std::string& temp, const struct stat& st,
                       const struct stat& source) const {
    if (!plan_.durable || !plan_.trust_syncfs || !temps_.tagged_ours(temp) ||
        entry_->keep_existing || entry_->shared_directories)
        return false;
    const mode_t allowed = (source.st_mode & 07777) | S_IRWXU | S_ISGID;
    return S_ISDIR(st.st_mode) && st.st_uid == uid_ && (st.st_mode & 07777 & ~allowed) == 0;
}

// Whether `name` in `dir` belongs to the user: a killed move's temporary is removed only then.
// Another user's file that merely has the shape (in a directory others may write) is theirs.
bool Walker::owned(int dir, const std::string& name) const {
    struct stat st {};
    return fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_uid == uid_;
}

// Whether a temporary of another move may be removed as stale. The destination of a
// keep_existing entry is shared with other writers (other nodes merging into it), and that of a
// transfer job's part with the other parts: their live temporaries look like a killed move's.
// Only this buffer's own of this boot are stale for a keep_existing entry (each node's buffer
// has a token of its own); a part removes none, since the other parts are movers of the same
// buffer, in the same boot where nodes share a host. What a killed part left is the finishing
// mover's to remove: it runs after every part, alone (StagePlan::part).
bool Walker::may_remove_stale(const std::string& temp) const {
    if (entry_->shared_directories)
        return false;
    return !entry_->keep_existing || temps_.tagged_ours(temp);
}

// Removes a temporary a killed move left (a file, or a whole tree without following a symlink).
void Walker::remove_stale(const std::string& dir, int fd, const std::string& name) {
    if (const int err = remove_tree_beneath(fd, name); err != 0)
        warnings_.add("cannot remove the stale temporary " + dst_->display(dst_->join(dir, name)) +
                      ": " + reason(err));
}

// The temporaries of other moves in `dir` (the parent of entries' destinations), listed once
// per move: (entry, owner).
std::vector<std::pair<std::string, std::string>>& Walker::temps_beside(const std::string& dir) {
    const auto found = entry_temps_.find(dir);
    if (found != entry_temps_.end())
        return found->second;
    auto& temps = entry_temps_[dir];
    Fd fd;
    try {
        fd = dst_->open_dir(dir);
    } catch (const Error&) {
        return temps;  // the copy itself reports what is wrong with this directory
    }
    DirStream stream(fd.get());
    while (stream) {
        const dirent* entry = stream.next();
        if (entry == nullptr)
            break;
        const std::string owner = temp_owner(entry->d_name);
        if (!owner.empty() && !temps_.ours(entry->d_name) && owned(fd.get(), entry->d_name))
            temps.emplace_back(entry->d_name, owner);
    }
    return temps;
}

// A move killed before its renames (stage-out, or symlinks and fifos of a stage-in) left its
// temporaries beside the names it was writing: files, and whole directory trees a durable move
// was building. In a destination directory that existed before this move, those made for a
// name this move writes there are removed, except a tree of a move killed in this boot, which
// the directory of that name takes over: what it holds is what the page cache holds, made
// durable by this move's sync before the tree is renamed into place (after a reboot it may
// hold torn files, so it goes). An entry of the source that merely looks like a temporary is
// kept, as is anything else.
void Walker::scan_stale_temps(Frame& frame) {
    const Dir& dir = *frame.dir;
    Fd fd;
    try {
        fd = dst_->open_dir(dir.at);
    } catch (const Error&) {
        return;  // the copy itself reports what is wrong with this directory
    }
    std::vector<std::string> stale;
    {
        DirStream stream(fd.get());
        while (stream) {
            const dirent* entry = stream.next();
            if (entry == nullptr)
                break;
            const std::string name = entry->d_name;
            const std::string owner = temp_owner(name);
            if (owner.empty() || temps_.ours(name) || kept_lookalike(dst_->join(dir.dst, name)) ||
                !may_remove_stale(name))
                continue;
            struct stat st {};
            if (fstatat(frame.fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
                continue;  // a source entry of that name: the user's, copied like any other
            struct stat temp {};
            if (fstatat(fd.get(), name.c_str(), &temp, AT_SYMLINK_NOFOLLOW) != 0 ||
                temp.st_uid != uid_)
                continue;  // gone, or somebody else's: neither removed nor taken over
            if (owner[0] == '#') {
                frame.tagged[owner].push_back(name);
                continue;
            }
            if (fstatat(frame.fd(), owner.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
                continue;  // not a name this move writes here
            if (S_ISDIR(st.st_mode) && frame.adoptable.count(owner) == 0 &&
                can_adopt(name, temp, st)) {
                frame.adoptable[owner] = name;
                continue;
            }
            stale.push_back(name);
        }
    }
    for (const std::string& name : stale)
        remove_stale(dir.at, fd.get(), name);
}

}  // namespace bbkit::mover_internal
