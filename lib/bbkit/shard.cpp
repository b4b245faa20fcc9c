#include "bbkit/shard.hpp"

namespace bbkit {

std::uint64_t fnv1a_64(std::string_view text) {
    std::uint64_t hash = 14695981039346656037u;
    for (const char c : text) {
        hash ^= static_cast<unsigned char>(c);
        hash *= 1099511628211u;
    }
    return hash;
}

std::uint64_t mix_64(std::uint64_t hash) {
    hash ^= hash >> 33;
    hash *= 0xff51afd7ed558ccdu;
    hash ^= hash >> 33;
    hash *= 0xc4ceb9fe1a85ec53u;
    hash ^= hash >> 33;
    return hash;
}

std::uint32_t shard_of(std::string_view relative_path, std::uint32_t count) {
    if (count <= 1)
        return 0;
    return static_cast<std::uint32_t>(mix_64(fnv1a_64(relative_path)) % count);
}

}  // namespace bbkit
