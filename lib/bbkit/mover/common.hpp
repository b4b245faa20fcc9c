// What every part of a move shares (the walk, the copier, the finisher; copy_file.cpp copies a
// file's bytes, copy_metadata.cpp its group, mode, times and xattrs): the wording of a failed
// system call (error.hpp's, for the mover) and one rule for "the same modification time". Not
// a contract: only files under lib/bbkit/mover/ include it (ARCHITECTURE.md).
#pragma once

#include <sys/stat.h>

#include <string>

#include "bbkit/error.hpp"

namespace bbkit::mover_internal {

// Short names for error.hpp's mover_reason and mover_error, which every part of a move calls:
// "cannot OPERATION PATH REST: reason", the failure typed by the side it happened on (a move
// reads its source and writes its destination; run_move names a full buffer or pool).
inline std::string reason(int err) {
    return mover_reason(err);
}

[[noreturn]] inline void fail_as(FailureKind kind, const std::string& operation,
                                 const std::string& path, int err, const std::string& rest = {}) {
    throw mover_error(kind, operation, path, err, rest);
}

// Where the move writes: its destination, and what it does there (create, rename, sync...).
[[noreturn]] inline void fail(const std::string& operation, const std::string& path, int err,
                              const std::string& rest = {}) {
    fail_as(FailureKind::destination, operation, path, err, rest);
}

// Where the move reads: its source (open, list, stat, read).
[[noreturn]] inline void fail_source(const std::string& operation, const std::string& path, int err,
                                     const std::string& rest = {}) {
    fail_as(FailureKind::source, operation, path, err, rest);
}

// A refusal the move decides itself (a symlink in the way, a source of the wrong type): no
// call failed, no errno.
inline Error refusal(FailureKind kind, ExitCode code, const std::string& message,
                     const std::string& path) {
    return Error(code, message, Failure{kind, "", path, 0});
}

// `call()`'s result; an Error it throws that no move typed (fsops words its refusals, a symlink
// beneath a buffer; system_error keeps only the errno) is typed as `kind`, the call's
// `operation` at `path`, on its way out, its errno kept.
template <class Call>
auto typed(FailureKind kind, const std::string& operation, const std::string& path, Call call)
    -> decltype(call()) {
    try {
        return call();
    } catch (Error& e) {
        if (!e.failure() || e.failure()->kind == FailureKind::internal) {
            Failure failure = e.failure().value_or(Failure{});
            failure.kind = kind;
            failure.operation = operation;
            failure.path = path;
            e.set_failure(failure);
        }
        throw;
    }
}

// A copy is complete (a rerun skips it) when its size and its nanosecond mtime are the source's.
inline bool same_mtime(const struct stat& a, const struct stat& b) {
    return a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec;
}

}  // namespace bbkit::mover_internal
