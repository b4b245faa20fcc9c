// What every part of a move shares (the Mover's files walk and finish, copy_file.cpp copies a
// file's bytes, copy_metadata.cpp its group, mode, times and xattrs): one error wording for a
// failed system call and one rule for "the same modification time". Not a contract: only files
// under lib/bbkit/mover/ include it (ARCHITECTURE.md).
#pragma once

#include <sys/stat.h>

#include <cctype>
#include <cstring>
#include <string>

#include "bbkit/error.hpp"

namespace bbkit::mover_internal {

// strerror with a lower-case first letter: mover messages read "cannot read /x: no such file
// or directory".
inline std::string reason(int err) {
    std::string text = std::strerror(err);
    if (!text.empty())
        text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
    return text;
}

// Error(exit_code_for(err), "cannot " + what + ": " + reason(err)).
[[noreturn]] inline void fail(const std::string& what, int err) {
    throw Error(exit_code_for(err), "cannot " + what + ": " + reason(err));
}

// A copy is complete (a rerun skips it) when its size and its nanosecond mtime are the source's.
inline bool same_mtime(const struct stat& a, const struct stat& b) {
    return a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec;
}

}  // namespace bbkit::mover_internal
