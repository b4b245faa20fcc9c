// Errors carry an exit code (sysexits.h) and a one-line message that is safe to show users.
// The library throws them; each tool turns one into "bb-TOOL: message" and its exit code in
// exactly one place.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace bbkit {

enum class ExitCode : int {
    ok = 0,
    usage = 64,        // bad command line
    data = 65,         // invalid directive, size or data
    no_input = 66,     // no such buffer, pool, user or input file
    unavailable = 69,  // pool draining or not mounted
    software = 70,     // internal error
    exists = 73,       // a different buffer already exists under that key; another node's
                       // file in the way of a merging stage-out (mover.hpp, keep_existing)
    io = 74,           // I/O error while staging
    temp_fail = 75,    // short of capacity now; retry later
    no_perm = 77,      // permission denied
    config = 78,       // configuration error
};

class Error : public std::runtime_error {
  public:
    Error(ExitCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
    ExitCode code() const { return code_; }
    int exit_status() const { return static_cast<int>(code_); }

  private:
    ExitCode code_;
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
// (" (check free space and permissions)").
Error system_error(const std::string& what, int err, const std::string& hint = {});

// The same message with exit code config (78) whatever the errno, for what bbkit must have
// before it can act at all: its configuration, a file root must trust (trust.hpp), the record
// key, and the state directory a writing command sets up (bbkit(7), EXIT STATUS). A reading
// command's state directory is not set up: system_error.
Error configuration_error(const std::string& what, int err, const std::string& hint = {});

// bb-mover's wording: Error(exit_code_for(err), "cannot " + what + ": " + mover_reason(err)),
// e.g. "cannot read /x: no such file or directory". Its messages become a clause of bb-stage's
// ("stage-in of ... failed: cannot read /x: ..."), hence the lower case; bb-stage finds ENOSPC
// and EDQUOT in them by that wording.
Error mover_error(const std::string& what, int err);

// strerror(err) with a lower-case first letter: mover_error's reason, and the mover's warnings'.
std::string mover_reason(int err);

// `text` with every control character (newline, carriage return, escape, NUL...) written as
// \xNN: what a user chose (a file name, a job name, a directive) can then never start a line
// of its own in a message, a log or a Slurm reason, nor drive a terminal (bbkit(7), SECURITY).
std::string printable(std::string_view text);

// Whether `c` is a C0 control character or DEL, whatever the locale: what printable() escapes.
bool is_control(char c);

}  // namespace bbkit
