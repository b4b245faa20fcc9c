// Which node of a job receives a file of a sharded stage-in (bbkit(7), NODE-LOCAL POOLS): one
// rule, stated once, for the mover that filters its walk by it and for whoever counts a node's
// share of a request.
#pragma once

#include <cstdint>
#include <string_view>

namespace bbkit {

// FNV-1a, 64 bits (offset basis 14695981039346656037, prime 1099511628211), over the bytes of
// `text` as they are: no locale, no normalisation.
std::uint64_t fnv1a_64(std::string_view text);

// MurmurHash3's 64-bit finalizer: every bit of the result depends on every bit of `hash`.
// FNV-1a's low bits do not mix (its lowest is the parity of the bytes' lowest bits), so names
// that differ in one even character ("rank0", "rank2", ...) would all land on one of two nodes.
std::uint64_t mix_64(std::uint64_t hash);

// The shard, of `count`, that a non-directory belongs to: mix_64(fnv1a_64(relative_path)) %
// count.
// `relative_path` is its path below the stage line's source root ("a/b.dat" for a tree, the
// source's base name for type=file). A count of 0 or 1 is one shard: 0.
std::uint32_t shard_of(std::string_view relative_path, std::uint32_t count);

}  // namespace bbkit
