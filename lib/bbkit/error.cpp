#include "bbkit/error.hpp"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace bbkit {

ExitCode exit_code_for(int err) {
    switch (err) {
        case EACCES:
        case EPERM:
            return ExitCode::no_perm;
        case ENOENT:
        case ENOTDIR:
            return ExitCode::no_input;
        default:
            return ExitCode::io;
    }
}

Error system_error(const std::string& what, int err, const std::string& hint) {
    return Error(exit_code_for(err), what + ": " + std::strerror(err) + hint);
}

Error configuration_error(const std::string& what, int err, const std::string& hint) {
    return Error(ExitCode::config, what + ": " + std::strerror(err) + hint);
}

Error mover_error(const std::string& what, int err) {
    return Error(exit_code_for(err), "cannot " + what + ": " + mover_reason(err));
}

std::string mover_reason(int err) {
    std::string text = std::strerror(err);
    if (!text.empty())
        text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
    return text;
}

bool is_control(char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte < 0x20 || byte == 0x7f;
}

std::string printable(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (const char c : text) {
        if (!is_control(c)) {
            out += c;
            continue;
        }
        char escaped[8];
        std::snprintf(escaped, sizeof escaped, "\\x%02x", static_cast<unsigned char>(c));
        out += escaped;
    }
    return out;
}

}  // namespace bbkit
