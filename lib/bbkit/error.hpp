// Errors carry an exit code (sysexits.h) and a one-line message that is safe to show users.
// The library throws them; each tool turns one into "bb-TOOL: message" and its exit code in
// exactly one place.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace bbkit {

enum class ExitCode : int {
    ok = 0,
    usage = 64,        // bad command line
    data = 65,         // invalid directive, size or data
    no_input = 66,     // no such buffer, pool, user or input file
    unavailable = 69,  // pool draining or not mounted
    software = 70,     // internal error
    exists = 73,       // a different buffer already exists under that key; another node's
                       // file in the way of a merging stage-out (mover.hpp, keep_existing);
                       // an output file the tool did not write (fsops.hpp, refuse_output)
    io = 74,           // I/O error while staging
    temp_fail = 75,    // short of capacity now; retry later
    no_perm = 77,      // permission denied
    config = 78,       // configuration error
};

// What kind of failure ended a move, for the program that runs it: bb-stage decides on this,
// never on a message's words (the mover's typed report, stage_plan.hpp; bbkit(7), STAGING).
// source: what the move reads (a missing, unreadable or wrong-typed source); destination: where
// it writes (outside, or a buffer that is not the job's own); capacity: the job's buffer is
// full (its capacity counted by the walk, or its project quota); pool_full: the pool's file
// system is; interrupted: the mover was stopped (a timeout, a signal); internal: anything else.
enum class FailureKind { source, destination, capacity, pool_full, interrupted, internal };
const char* to_string(FailureKind kind);                               // "pool-full", ...
std::optional<FailureKind> parse_failure_kind(std::string_view text);  // nullopt when unknown

// An Error's cause, when it comes from a move: its kind, and the failed call's operation (its
// verb: "read", "write", "create"...; empty for a refusal that is no call), the path it was
// given (as shown to people) and its errno (0 for a refusal bbkit decides itself).
struct Failure {
    FailureKind kind = FailureKind::internal;
    std::string operation;
    std::string path;
    int err = 0;
};

class Error : public std::runtime_error {
  public:
    Error(ExitCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
    Error(ExitCode code, const std::string& message, Failure failure)
        : std::runtime_error(message), code_(code), failure_(std::move(failure)) {}
    ExitCode code() const { return code_; }
    int exit_status() const { return static_cast<int>(code_); }
    const std::optional<Failure>& failure() const { return failure_; }
    // The mover names the kind when it knows more than the thrower did (an ENOSPC written into
    // the job's own buffer is the pool's, not the destination's): mover/run.cpp.
    void set_failure(Failure failure) { failure_ = std::move(failure); }

  private:
    ExitCode code_;
    std::optional<Failure> failure_;
};

// The exit code of a failed system call, the same in every tool and library layer (bbkit(7),
// EXIT STATUS): EACCES and EPERM are no_perm (77), ENOENT and ENOTDIR no_input (66), anything
// else io (74). A refusal bbkit decides itself (a symlink in the way, a mount crossed) is not
// an errno and says its own code.
ExitCode exit_code_for(int err);

// A failed system call reaches the user through one of the three functions below, never through
// an Error built from strerror by hand: its exit code and its wording are decided here alone.
//
// system_error, the rule everywhere but in the two cases after it:
// Error(exit_code_for(err), what + ": " + strerror(err) + hint), e.g. "cannot open /x:
// Permission denied"; `hint`, when given, is the way on, with its leading blank
// (" (check free space and quotas)"). Its Failure keeps the errno, kind internal (a move
// that knows better types it: mover/common.hpp's typed).
Error system_error(const std::string& what, int err, const std::string& hint = {});

// The same message with exit code config (78) whatever the errno, for what bbkit must have
// before it can act at all: its configuration, a file root must trust (trust.hpp), the record
// key, and the state directory a writing command sets up (bbkit(7), EXIT STATUS). A reading
// command's state directory is not set up: system_error.
Error configuration_error(const std::string& what, int err, const std::string& hint = {});

// bb-mover's wording: Error(exit_code_for(err), "cannot " + operation + " " + path + rest +
// ": " + mover_reason(err)), e.g. "cannot read /x: no such file or directory" ("cannot " +
// operation + rest + ...: when the call had no path), carrying Failure{kind, the operation's
// first word, path, err}. Its messages become a clause of bb-stage's ("stage-in of ...
// failed: cannot read /x: ..."), hence the lower case; bb-stage decides on the Failure.
Error mover_error(FailureKind kind, const std::string& operation, const std::string& path, int err,
                  const std::string& rest = {});

// errno's symbolic name ("ENOSPC"), as the mover's typed report carries it; "E<number>" for
// one the C library does not name.
std::string errno_name(int err);
// The errno a name stands for; 0 when it names none this C library knows.
int errno_from_name(std::string_view name);

// strerror(err) with a lower-case first letter: mover_error's reason, and the mover's warnings'.
std::string mover_reason(int err);

// `text` with every control character (newline, carriage return, escape, NUL...) written as
// \xNN: what a user chose (a file name, a job name, a directive) can then never start a line
// of its own in a message, a log or a Slurm reason, nor drive a terminal (bbkit(7), SECURITY).
std::string printable(std::string_view text);

// Whether `c` is a C0 control character or DEL, whatever the locale: what printable() escapes.
bool is_control(char c);

}  // namespace bbkit
