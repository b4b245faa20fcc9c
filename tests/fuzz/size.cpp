// Fuzz target for lib/bbkit/size: parse_size must either return a size that prints and parses
// back to itself, or throw Error(data); rounding must stay exact and within max_size.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "bbkit/error.hpp"
#include "bbkit/size.hpp"

namespace {

void check(bool condition) {
    if (!condition)
        std::abort();
}

void check_rounding(std::uint64_t bytes, std::uint64_t granularity) {
    std::uint64_t rounded = 0;
    try {
        rounded = bbkit::round_up(bytes, granularity);
    } catch (const bbkit::Error& e) {
        check(e.code() == bbkit::ExitCode::data);
        return;  // past max_size
    }
    check(rounded >= bytes && rounded <= bbkit::max_size);
    if (granularity > 1)
        check(rounded % granularity == 0 && rounded - bytes < granularity);
    else
        check(rounded == bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    bbkit::Size parsed;
    try {
        parsed = bbkit::parse_size(text);
    } catch (const bbkit::Error& e) {
        check(e.code() == bbkit::ExitCode::data);
        try {
            bbkit::parse_capacity(text);
            check(false);  // a capacity is a size
        } catch (const bbkit::Error& again) {
            check(again.code() == bbkit::ExitCode::data);
        }
        return 0;
    }
    check(parsed.value > 0 && parsed.value <= bbkit::max_size);

    const std::string printed = bbkit::format_size(parsed);
    const bbkit::Size reparsed = bbkit::parse_size(printed);
    check(reparsed.value == parsed.value && reparsed.nodes == parsed.nodes);
    check(bbkit::format_size(reparsed) == printed);

    if (parsed.nodes)
        return 0;
    check(bbkit::parse_capacity(text) == parsed.value);
    for (std::uint64_t granularity :
         {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{1000}, std::uint64_t{1} << 30,
          std::uint64_t{200} << 30, parsed.value, bbkit::max_size})
        check_rounding(parsed.value, granularity);
    check_rounding(bbkit::max_size - parsed.value + 1, parsed.value);
    return 0;
}
