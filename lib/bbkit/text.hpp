// Small text rules every layer shares: what counts as a plain decimal number, and the few
// string helpers that were otherwise written again in each file that wanted one.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bbkit {

// Whether `text` is one or more ASCII digits and nothing else (no sign, blank or locale digit).
bool all_digits(std::string_view text);

// `text` as a number when it is all_digits and no larger than `max`; std::nullopt otherwise,
// overflow included.
std::optional<std::uint64_t> parse_decimal(
    std::string_view text, std::uint64_t max = std::numeric_limits<std::uint64_t>::max());

// `text` as a signed 64-bit number: an optional '-' and all_digits, within range, as
// std::to_string writes one; std::nullopt otherwise.
std::optional<std::int64_t> parse_signed(std::string_view text);

// `parts` with `separator` between each two: join({"a", "b"}, ", ") is "a, b".
std::string join(const std::vector<std::string>& parts, std::string_view separator);

// `text` with each byte through std::tolower: for words compared without regard to case (size
// units, burst_buffer.conf flags, Slurm's size suffixes), which are ASCII.
std::string lower(std::string_view text);

bool starts_with(std::string_view text, std::string_view prefix);
bool ends_with(std::string_view text, std::string_view suffix);

// `value` as one word of sh: in single quotes, which keep everything literal; a quote itself
// closes, escapes and reopens them.
std::string shell_quoted(const std::string& value);

// `text` without the blanks at either end: space, tab, CR, LF, vertical tab and form feed (the
// C locale's isspace), never a byte past ASCII.
std::string trim(std::string_view text);

// A time given in nanoseconds since the epoch, in this host's time zone, to the second:
// "2026-11-29 04:46:05", as lock holders and controller claims are named in messages.
std::string local_time(std::int64_t nanos);

}  // namespace bbkit
