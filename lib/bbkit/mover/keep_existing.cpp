#include "bbkit/mover/keep_existing.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <string>

#include "bbkit/error.hpp"
#include "bbkit/mover/common.hpp"

namespace bbkit::mover_internal {

namespace {

// A symlink's target; "" when it cannot be read (never equal to a real one, which is never
// empty).
std::string link_target(int dir, const std::string& name) {
    char target[PATH_MAX + 1];
    const ssize_t n = readlinkat(dir, name.c_str(), target, sizeof target);
    return n <= 0 || static_cast<std::size_t>(n) >= sizeof target
               ? std::string()
               : std::string(target, static_cast<std::size_t>(n));
}

}  // namespace

void refuse_taken(const Side& dst, int dir, const std::string& name, const std::string& path) {
    struct stat st {};
    if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT)
            return;
        fail("stat", dst.display(path), errno);
    }
    if (S_ISDIR(st.st_mode))
        fail("replace", dst.display(path), EISDIR);
    throw taken_by_another(dst.display(path));
}

bool same_as_source(const Node& node, int dir, const std::string& name, int copy_dir,
                    const std::string& copy) {
    struct stat st {};
    if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !same_mtime(st, node.st))
        return false;
    switch (node.st.st_mode & S_IFMT) {
        case S_IFREG:
            return S_ISREG(st.st_mode) && st.st_size == node.st.st_size;
        case S_IFIFO:
            return st.st_mode == node.st.st_mode;
        case S_IFLNK: {
            if (!S_ISLNK(st.st_mode))
                return false;
            const std::string target = link_target(dir, name);
            return !target.empty() && target == link_target(copy_dir, copy);
        }
        default:
            return false;
    }
}

// The file systems that refuse RENAME_NOREPLACE (NFS among them) get a hard link and an
// unlink, which refuse a taken name just the same.
void put_without_replacing(const Side& dst, MoveCounters& counts, Node& node, int dir,
                           const std::string& name) {
    const std::string temp = node.temp;
    int rc = renameat2(dir, temp.c_str(), dir, name.c_str(), RENAME_NOREPLACE);
    if (rc != 0 && errno == EINVAL) {
        rc = linkat(dir, temp.c_str(), dir, name.c_str(), 0);
        if (rc == 0 && unlinkat(dir, temp.c_str(), 0) != 0)
            fail("remove", dst.display(dst.join(parent_path(node), temp)), errno);
    }
    if (rc == 0) {
        node.temp.clear();
        return;
    }
    const int err = errno;
    const bool complete = err == EEXIST && same_as_source(node, dir, name, dir, temp);
    unlinkat(dir, temp.c_str(), 0);
    node.temp.clear();
    if (complete) {
        counts.files_written.fetch_sub(1);
        if (node.kind == Kind::file)
            counts.bytes_written.fetch_sub(static_cast<std::uint64_t>(node.st.st_size));
        counts.skipped.fetch_add(1);
        return;
    }
    if (err == EEXIST)
        refuse_taken(dst, dir, name, node.dst);
    fail("rename into place", dst.display(node.dst), err);
}

}  // namespace bbkit::mover_internal
