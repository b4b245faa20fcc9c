#include "bbkit/size.hpp"

#include <array>
#include <cctype>
#include <cstdio>
#include <iterator>

#include "bbkit/error.hpp"
#include "bbkit/text.hpp"

namespace bbkit {
namespace {

struct Unit {
    std::string_view name;
    std::uint64_t factor;
};

constexpr std::uint64_t kib = 1024ULL;
constexpr std::uint64_t kb = 1000ULL;

// Largest first, IEC before SI at each magnitude: the order format_size tries them in.
constexpr std::array<Unit, 10> print_units{{
    {"PiB", kib* kib* kib* kib* kib},
    {"PB", kb* kb* kb* kb* kb},
    {"TiB", kib* kib* kib* kib},
    {"TB", kb* kb* kb* kb},
    {"GiB", kib* kib* kib},
    {"GB", kb* kb* kb},
    {"MiB", kib* kib},
    {"MB", kb* kb},
    {"KiB", kib},
    {"KB", kb},
}};

// Returns the multiplier of a suffix, 0 for a node suffix; throws for an unknown one.
std::uint64_t suffix_factor(std::string_view token, std::string_view suffix, bool& nodes) {
    const std::string s = lower(suffix);
    nodes = false;
    if (s.empty())
        return 1;
    if (s == "n" || s == "node" || s == "nodes") {
        nodes = true;
        return 1;
    }
    static constexpr std::array<std::string_view, 5> letters{"k", "m", "g", "t", "p"};
    std::uint64_t iec = 1;
    std::uint64_t si = 1;
    for (std::string_view letter : letters) {
        iec *= kib;
        si *= kb;
        if (s == letter || s == std::string(letter) + "ib")
            return iec;
        if (s == std::string(letter) + "b")
            return si;
    }
    throw Error(ExitCode::data, "invalid size '" + std::string(token) + "': unknown unit '" +
                                    std::string(suffix) +
                                    "' (use K/KiB, M/MiB, G/GiB, T/TiB, P/PiB, KB..PB or N)");
}

}  // namespace

Size parse_size(std::string_view text) {
    const std::string token(text);
    auto fail = [&](const std::string& why) -> Error {
        return Error(ExitCode::data, "invalid size '" + token + "': " + why);
    };
    if (text.empty())
        throw fail("empty");
    std::size_t i = 0;
    if (text[0] == '-')
        throw fail("negative sizes are not allowed");
    if (text[0] == '+')
        throw fail("a sign is not allowed");
    std::uint64_t number = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
        const std::uint64_t digit = static_cast<std::uint64_t>(text[i] - '0');
        if (number > (max_size - digit) / 10)
            throw fail("too large (the limit is 2^63-1 bytes)");
        number = number * 10 + digit;
        ++i;
    }
    if (i == 0)
        throw fail("it must start with a whole number");
    const std::string_view suffix = text.substr(i);
    if (!suffix.empty()) {
        const char c = suffix[0];
        if (c == '.' || c == ',')
            throw fail("decimals are not allowed (use a smaller unit)");
        if (std::isspace(static_cast<unsigned char>(c)))
            throw fail("no blank is allowed between the number and the unit");
        for (char ch : suffix)
            if (!std::isalpha(static_cast<unsigned char>(ch)))
                throw fail("unexpected character in unit '" + std::string(suffix) + "'");
    }
    bool nodes = false;
    const std::uint64_t factor = suffix_factor(text, suffix, nodes);
    if (number == 0)
        throw fail("zero is not a size");
    if (number > max_size / factor)
        throw fail("too large (the limit is 2^63-1 bytes)");
    return Size{number * factor, nodes};
}

std::uint64_t parse_capacity(std::string_view text) {
    const Size size = parse_size(text);
    if (size.nodes)
        throw Error(ExitCode::data,
                    "invalid capacity '" + std::string(text) +
                        "': a node count is not a capacity (give bytes, e.g. 100GiB)");
    return size.value;
}

std::uint64_t parse_config_size(std::string_view text, bool unit_required) {
    const std::uint64_t bytes = parse_capacity(text);
    std::size_t digits = 0;
    while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits])))
        ++digits;
    const std::string_view unit = text.substr(digits);
    const std::string number(text.substr(0, digits));
    if (unit.empty() && unit_required)
        throw Error(ExitCode::data,
                    "invalid size '" + std::string(text) + "': no unit, which would mean " +
                        number + " bytes (write " + number + "GiB, " + number + "TiB or the like)");
    if (unit.size() == 2 && unit[1] == 'b') {
        const std::string iec(1,
                              static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0]))));
        throw Error(ExitCode::data, "invalid size '" + std::string(text) + "': '" +
                                        std::string(unit) + "' reads as bits; write " + number +
                                        iec + "B (powers of 1000) or " + number + iec +
                                        "iB (powers of 1024)");
    }
    return bytes;
}

std::uint64_t round_up(std::uint64_t bytes, std::uint64_t granularity) {
    if (granularity <= 1 || bytes % granularity == 0)
        return bytes;
    const std::uint64_t granules = bytes / granularity + 1;
    if (granules > max_size / granularity)
        throw Error(ExitCode::data, "size " + std::to_string(bytes) +
                                        " rounded up to granularity " +
                                        std::to_string(granularity) + " exceeds 2^63-1 bytes");
    return granules * granularity;
}

std::string format_size(std::uint64_t bytes) {
    if (bytes == 0)
        return "0";
    for (const Unit& unit : print_units)
        if (bytes % unit.factor == 0)
            return std::to_string(bytes / unit.factor) + std::string(unit.name);
    return std::to_string(bytes);
}

std::string format_size(const Size& size) {
    if (size.nodes)
        return std::to_string(size.value) + "N";
    return format_size(size.value);
}

std::string approximate_size(std::uint64_t bytes) {
    static const char* const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024)
        return std::to_string(bytes) + "B";
    double value = static_cast<double>(bytes) / 1024;
    std::size_t unit = 0;
    for (; value >= 1024 && unit + 1 < std::size(units); ++unit)
        value /= 1024;
    char text[32];
    std::snprintf(text, sizeof text, value < 100 ? "%.1f%s" : "%.0f%s", value, units[unit]);
    return text;
}

}  // namespace bbkit
