// Small text rules every layer shares: what counts as a plain decimal number.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

namespace bbkit {

// Whether `text` is one or more ASCII digits and nothing else (no sign, blank or locale digit).
bool all_digits(std::string_view text);

// `text` as a number when it is all_digits and no larger than `max`; std::nullopt otherwise,
// overflow included.
std::optional<std::uint64_t> parse_decimal(
    std::string_view text, std::uint64_t max = std::numeric_limits<std::uint64_t>::max());

}  // namespace bbkit
