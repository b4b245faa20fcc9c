#include "bbkit/error.hpp"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

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
    return Error(exit_code_for(err), what + ": " + std::strerror(err) + hint,
                 Failure{FailureKind::internal, "", "", err});
}

Error configuration_error(const std::string& what, int err, const std::string& hint) {
    return Error(ExitCode::config, what + ": " + std::strerror(err) + hint);
}

const char* to_string(FailureKind kind) {
    switch (kind) {
        case FailureKind::source:
            return "source";
        case FailureKind::destination:
            return "destination";
        case FailureKind::capacity:
            return "capacity";
        case FailureKind::pool_full:
            return "pool-full";
        case FailureKind::interrupted:
            return "interrupted";
        case FailureKind::internal:
            break;
    }
    return "internal";
}

std::optional<FailureKind> parse_failure_kind(std::string_view text) {
    for (FailureKind kind :
         {FailureKind::source, FailureKind::destination, FailureKind::capacity,
          FailureKind::pool_full, FailureKind::interrupted, FailureKind::internal})
        if (text == to_string(kind))
            return kind;
    return std::nullopt;
}

Error mover_error(FailureKind kind, const std::string& operation, const std::string& path, int err,
                  const std::string& rest) {
    const std::string verb = operation.substr(0, operation.find(' '));
    return Error(
        exit_code_for(err),
        "cannot " + operation + (path.empty() ? "" : " " + path) + rest + ": " + mover_reason(err),
        Failure{kind, verb, path, err});
}

std::string errno_name(int err) {
    const char* name = strerrorname_np(err);
    return name ? name : "E" + std::to_string(err);
}

int errno_from_name(std::string_view name) {
    if (name.size() > 1 && name.size() < 6 && name[0] == 'E' &&
        name.find_first_not_of("0123456789", 1) == std::string_view::npos)
        return std::stoi(std::string(name.substr(1)));  // errno_name's "E<number>"
    // errno values are small: every one the C library names is below 4096.
    for (int err = 1; err < 4096; ++err) {
        const char* known = strerrorname_np(err);
        if (known && name == known)
            return err;
    }
    return 0;
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
