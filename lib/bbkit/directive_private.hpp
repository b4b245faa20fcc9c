// What the directive module's two source files share (ARCHITECTURE.md): directive.cpp holds the
// grammar's rules, one function each (a line's tokens and their lengths, symbols, values, paths
// and canonical lines), directive_parser.cpp the Parser, which reads a request's lines in order
// and applies those rules to each. Included by these two files only.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "bbkit/directive.hpp"
#include "bbkit/error.hpp"

namespace bbkit::directive_internal {

constexpr const char* persistent_variable = "DW_PERSISTENT_STRIPED_";

inline Error invalid(const std::string& why) {
    return Error(ExitCode::data, why);
}

// The blanks between a directive's words (a newline ends the line before they are split).
bool is_blank(char c);

// ---- tokens ----------------------------------------------------------------------------------

struct Token {
    std::string key;  // the word itself when !has_value
    std::string value;
    bool has_value = false;
};

// Splits on blanks; double quotes group, `\"` is a literal quote. A `\\` pair is kept as two
// characters so symbol replacement can see Slurm's stop marker.
std::vector<Token> tokenize(const std::string& body);

// ---- lengths ---------------------------------------------------------------------------------

// Applied to the values as written and again after symbol replacement (%d and %x can lengthen
// a path). As written, a value's `\\` may be the mark that stops replacement (a canonical line
// puts one before a value holding '%'): its two bytes are not the value's.
void check_value_length(const Token& token, bool as_written);
void check_lengths(const std::vector<Token>& tokens);

// ---- symbols ---------------------------------------------------------------------------------

struct Symbols {
    explicit Symbols(const JobContext& context) : job(context) {}
    const JobContext& job;
    bool stopped = false;    // a `\\` was seen: the rest of the line is literal
    std::string unresolved;  // the first symbol left as is, e.g. "%j"
};

// `value` with the symbols the job context knows replaced; one it does not know yet is kept,
// and the first such is noted in `symbols.unresolved`.
std::string replace_symbols(const std::string& value, Symbols& symbols);

// ---- values ----------------------------------------------------------------------------------

Error swap_refused();

std::string check_type(const std::string& type);

// A comma-separated list of striped|private, duplicates dropped, order kept.
std::string check_access(const std::string& access);

// A path inside a buffer, relative to its root; `buffer` is set to the persistent buffer's name
// a $DW_PERSISTENT_STRIPED_<name> prefix gives, else cleared. `role` names the path in errors.
std::string buffer_relative(const std::string& path, std::string& buffer, const std::string& role);

// An absolute path outside the buffer, lexically normalized. `workdir_pending` lets a path
// start with an unreplaced %d: the working directory is absolute once it is known.
std::string outside_path(const std::string& path, const std::string& role, bool workdir_pending);

// canonical_lines (bb-parse --emit-script, the lines Slurm is given back) must write every
// accepted path so that it reads back the same. The grammar has no way to write a backslash
// right before a double quote or at the very end of a value (found by tests/fuzz/directive.cpp).
void check_writable(const std::string& path, const std::string& role);

// ---- canonical lines -------------------------------------------------------------------------

using Pairs = std::vector<std::pair<std::string, std::string>>;

// `resolved`: every '%' and "\\" in the values is literal, so a leading `\\` on the first value
// holding one stops Slurm and bbkit from replacing anything when the line is read again.
std::string directive_line(const std::string& prefix, const std::string& command, Pairs pairs,
                           bool resolved);

}  // namespace bbkit::directive_internal
