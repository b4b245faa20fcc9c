#include "bbkit/mover/walker.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bbkit/directive.hpp"
#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"

namespace bbkit::mover_internal {

// ---- directories --------------------------------------------------------------------------

// mkdir -p for the directories above `path`: in the buffer one component at a time beneath
// the root; outside with ordinary paths (the user's own symlinks on the way are followed).
void Walker::make_parents(const std::string& path) {
    const std::string parent = split_last(path).first;
    state_.syncs.add_dir(parent);
    const std::vector<std::string> parts =
        path_components(parent, dst_->display(parent) + " must not contain '..'");
    std::string so_far = dst_->in_buffer() ? "" : "/";
    Fd dir;
    if (dst_->in_buffer()) {
        const int fd = fcntl(state_.buffer_root.get(), F_DUPFD_CLOEXEC, 0);
        if (fd < 0)
            fail("open", plan_.buffer_root, errno);
        dir = Fd(fd);
    }
    for (const std::string& part : parts) {
        const std::string up = so_far;
        so_far = dst_->join(so_far, part);
        if (dst_->in_buffer()) {
            struct stat st {};
            if (mkdirat(dir.get(), part.c_str(), 0700) == 0)
                state_.syncs.add_dir(up);
            else if (errno != EEXIST)
                fail("create directory", dst_->display(so_far), errno);
            else if (fstatat(dir.get(), part.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                     S_ISLNK(st.st_mode))
                throw refusal(FailureKind::destination, ExitCode::no_perm,
                              "refusing " + dst_->display(so_far) + ": a symlink is in the way",
                              dst_->display(so_far));
            dir = typed(FailureKind::destination, "open", dst_->display(so_far), [&] {
                return open_beneath(dir.get(), part, O_RDONLY | O_DIRECTORY, dst_->display(so_far));
            });
            continue;
        }
        struct stat st {};
        if (stat(so_far.c_str(), &st) == 0) {
            if (!S_ISDIR(st.st_mode))
                throw refusal(
                    FailureKind::destination, ExitCode::io,
                    "cannot create directories under " + so_far + ": it is not a directory",
                    so_far);
            continue;
        }
        if (errno != ENOENT)
            fail("open directory", so_far, errno);
        if (mkdir(so_far.c_str(), 0777) == 0)
            state_.syncs.add_dir(up);
        else if (errno != EEXIST)
            fail("create directory", so_far, errno);
    }
}

// A descriptor on each destination file system, opened before anything is written there:
// since Linux 5.8 syncfs reports the writeback errors that happened after this open.
void Walker::watch_file_system(const std::string& dir) {
    if (!plan_.durable || !plan_.trust_syncfs)
        return;
    state_.syncs.watch(dst_->open_dir(dir));
}

// Makes (or finds) the destination of a walked directory, writable for now. `parent` is the
// directory it was walked from (null for an entry's top); `adopt`, a temporary tree of a move
// killed in this boot that this directory takes over.
std::shared_ptr<Dir> Walker::make_dir(const std::string& src, const std::string& dst,
                                      const struct stat& st, const Dir* parent, std::string adopt) {
    note_lookalike(dst);
    auto dir = std::make_shared<Dir>();
    dir->src = src;
    dir->dst = dst;
    dir->at = dst;
    dir->st = st;
    dir->keep_metadata = dst_->in_buffer() && dst.empty();
    if (dir->keep_metadata)
        return dir;
    dir->metadata_left = entry_->shared_directories;
    const std::string parent_at = parent ? parent->at : split_last(dst).first;
    const std::string name = split_last(dst).second;
    const std::string shown = dst_->display(dst);
    const Fd pdir = dst_->open_dir(parent_at);
    dir->at = dst_->join(parent_at, name);
    if (parent)
        dir->tree = parent->tree;
    if (parent && parent->created) {  // nothing can be in the way in a directory made just now
        if (mkdirat(pdir.get(), name.c_str(), 0700) != 0)
            fail("create directory", shown, errno);
        dir->created = true;
        learn_new_dir(*dir);
        return dir;
    }
    struct stat existing {};
    const bool absent =
        fstatat(pdir.get(), name.c_str(), &existing, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT;
    // Other writers may fill the directories of a keep_existing entry at the same time (nodes
    // merging into one destination), and of a transfer job's part (the other parts): a
    // directory made here is not taken to be empty, and none
    // is built under a temporary name, whose rename into place would fail where another writer
    // made the directory first.
    const bool shared = entry_->keep_existing || entry_->shared_directories;
    // A durable move builds a directory that does not exist under a temporary name (or goes on
    // with the one a move killed in this boot was building) and renames it into place once
    // everything in it is durable. Not where a non-directory is replaced.
    if (plan_.durable && !dir->tree && absent && !shared) {
        auto tree = std::make_shared<TempTree>();
        tree->dst = dst;
        struct stat temp_st {};
        if (!adopt.empty() &&
            (fstatat(pdir.get(), adopt.c_str(), &temp_st, AT_SYMLINK_NOFOLLOW) != 0 ||
             !can_adopt(adopt, temp_st, st))) {
            if (owned(pdir.get(), adopt))  // changed since it was listed
                remove_stale(parent_at, pdir.get(), adopt);
            adopt.clear();
        }
        if (!adopt.empty()) {
            tree->temp = adopt;
            tree->adopted = true;
            if ((temp_st.st_mode & S_IRWXU) != S_IRWXU &&
                fchmodat(pdir.get(), adopt.c_str(), (temp_st.st_mode & 07777) | S_IRWXU, 0) != 0)
                fail("make", dst_->display(dst_->join(parent_at, adopt)), errno, " writable");
        } else {
            tree->temp = temps_.name(name);
            if (mkdirat(pdir.get(), tree->temp.c_str(), 0700) != 0)
                fail("create directory", shown, errno);
            dir->created = true;
        }
        tree->at = dst_->join(parent_at, tree->temp);
        dir->at = tree->at;
        dir->tree = tree;
        dir->top = true;
        state_.trees.add(tree);
        if (dir->created)
            learn_new_dir(*dir);
        return dir;
    }
    if (!adopt.empty())  // its final name exists after all: the old tree is stale
        remove_stale(parent_at, pdir.get(), adopt);
    if (absent && mkdirat(pdir.get(), name.c_str(), 0700) == 0) {
        if (shared)
            return dir;
        dir->created = true;
        learn_new_dir(*dir);
        return dir;
    }
    if (absent && errno != EEXIST)
        fail("create directory", shown, errno);
    if (fstatat(pdir.get(), name.c_str(), &existing, AT_SYMLINK_NOFOLLOW) != 0)
        fail("stat", shown, errno);
    if (S_ISLNK(existing.st_mode))
        throw refusal(FailureKind::destination, ExitCode::no_perm,
                      "refusing " + shown + ": a symlink is in the way", shown);
    if (!S_ISDIR(existing.st_mode)) {
        if (shared)
            throw taken_by_another(shown);
        if (unlinkat(pdir.get(), name.c_str(), 0) != 0 || mkdirat(pdir.get(), name.c_str(), 0700))
            fail("replace", shown, errno, " with a directory");
        dir->created = true;
        learn_new_dir(*dir);
        return dir;
    }
    // Kept from an earlier run, it may already carry a read-only final mode: open it up until
    // its metadata is applied again at the end. (It was just seen to be a directory; only the
    // user could swap it, and only against themself.)
    if ((existing.st_mode & S_IRWXU) != S_IRWXU &&
        fchmodat(pdir.get(), name.c_str(), (existing.st_mode & 07777) | S_IRWXU, 0) != 0)
        fail("make", shown, errno, " writable");
    return dir;
}

}  // namespace bbkit::mover_internal
