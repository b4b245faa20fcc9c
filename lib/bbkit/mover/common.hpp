// What every part of a move shares (the Mover's files walk and finish, copy_file.cpp copies a
// file's bytes, copy_metadata.cpp its group, mode, times and xattrs): the wording of a failed
// system call (error.hpp's, for the mover) and one rule for "the same modification time". Not
// a contract: only files under lib/bbkit/mover/ include it (ARCHITECTURE.md).
#pragma once

#include <sys/stat.h>

#include <string>

#include "bbkit/error.hpp"

namespace bbkit::mover_internal {

// Short names for error.hpp's mover_reason and mover_error, which every part of a move calls.
inline std::string reason(int err) {
    return mover_reason(err);
}

[[noreturn]] inline void fail(const std::string& what, int err) {
    throw mover_error(what, err);
}

// A copy is complete (a rerun skips it) when its size and its nanosecond mtime are the source's.
inline bool same_mtime(const struct stat& a, const struct stat& b) {
    return a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec;
}

}  // namespace bbkit::mover_internal
