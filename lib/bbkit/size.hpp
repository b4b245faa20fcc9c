// Sizes as Slurm writes them in burst-buffer requests, parsed more strictly than Slurm does.
//
// K|KiB M|MiB G|GiB T|TiB P|PiB are powers of 1024, KB MB GB TB PB powers of 1000, no suffix
// is bytes and N|node|nodes is a node count; suffixes are case-insensitive. Decimals, unknown
// suffixes, zero, negatives, blanks and values of 2^63 or more are errors naming the token.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace bbkit {

// The largest size bbkit stores (SQLite integers are signed 64-bit).
constexpr std::uint64_t max_size = 0x7fffffffffffffffULL;

struct Size {
    std::uint64_t value = 0;  // bytes, or nodes when `nodes` is set
    bool nodes = false;
};

// Throws Error(data) naming `text` when it is not a valid size.
Size parse_size(std::string_view text);

// A capacity in bytes: like parse_size, but a node count is an error.
std::uint64_t parse_capacity(std::string_view text);

// A size an administrator writes in bbkit.toml: like parse_capacity, and stricter where a
// reading would surprise. A two-letter unit ending in a lower-case 'b' ("100Gb", "100kb") is
// refused: in common use that is bits, so neither GB nor GiB is assumed. With `unit_required`, a
// bare number ("100": 100 bytes) is refused too, naming the units to write.
std::uint64_t parse_config_size(std::string_view text, bool unit_required);

// ceil(bytes / granularity) * granularity; granularity 0 or 1 leaves bytes as they are.
// Throws Error(data) when the result would exceed max_size.
std::uint64_t round_up(std::uint64_t bytes, std::uint64_t granularity);

// Slurm's printed form: the largest unit that divides exactly, IEC before SI at each
// magnitude ("1200GiB", "250KiB", "4GB", "1000256KB"), plain bytes otherwise, "0" for zero.
std::string format_size(std::uint64_t bytes);
std::string format_size(const Size& size);  // node counts print as "4N"

// For people watching numbers change (progress, rates), never read back: the largest IEC unit
// not above `bytes`, one decimal below 100 of it ("512B", "1.2MiB", "9.8MiB", "240GiB").
std::string approximate_size(std::uint64_t bytes);

}  // namespace bbkit
