#include "bbkit/seal.hpp"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "bbkit/error.hpp"

namespace bbkit {
namespace {

constexpr std::uint32_t round_constants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr std::size_t user_key_digits = 32;
constexpr std::size_t user_tag_digits = 32;

bool lower_hex(std::string_view text) {
    return std::all_of(text.begin(), text.end(),
                       [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::uint32_t rotate_right(std::uint32_t x, unsigned n) {
    return (x >> n) | (x << (32 - n));
}

class Sha256 {
  public:
    void add(std::string_view data) {
        for (const char c : data) {
            block_[filled_++] = static_cast<std::uint8_t>(c);
            if (filled_ == block_.size()) {
                compress();
                filled_ = 0;
            }
        }
        length_ += data.size();
    }

    Digest finish() {
        const std::uint64_t bits = length_ * 8;
        const std::string one(1, '\x80');
        add(one);
        const std::string zero(1, '\0');
        while (filled_ != 56)
            add(zero);
        for (int i = 7; i >= 0; --i)
            add(std::string(1, static_cast<char>((bits >> (8 * i)) & 0xff)));
        Digest out{};
        for (std::size_t i = 0; i < 8; ++i)
            for (std::size_t j = 0; j < 4; ++j)
                out[4 * i + j] = static_cast<std::uint8_t>(state_[i] >> (24 - 8 * j));
        return out;
    }

  private:
    void compress() {
        std::uint32_t w[64];
        for (std::size_t i = 0; i < 16; ++i)
            w[i] = static_cast<std::uint32_t>(block_[4 * i]) << 24 |
                   static_cast<std::uint32_t>(block_[4 * i + 1]) << 16 |
                   static_cast<std::uint32_t>(block_[4 * i + 2]) << 8 | block_[4 * i + 3];
        for (std::size_t i = 16; i < 64; ++i) {
            const std::uint32_t s0 =
                rotate_right(w[i - 15], 7) ^ rotate_right(w[i - 15], 18) ^ (w[i - 15] >> 3);
            const std::uint32_t s1 =
                rotate_right(w[i - 2], 17) ^ rotate_right(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        std::uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
        std::uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
        for (std::size_t i = 0; i < 64; ++i) {
            const std::uint32_t t1 =
                h + (rotate_right(e, 6) ^ rotate_right(e, 11) ^ rotate_right(e, 25)) +
                ((e & f) ^ (~e & g)) + round_constants[i] + w[i];
            const std::uint32_t t2 =
                (rotate_right(a, 2) ^ rotate_right(a, 13) ^ rotate_right(a, 22)) +
                ((a & b) ^ (a & c) ^ (b & c));
            h = g;
            g = f;
            f = e;
            e = d + t1;
            d = c;
            c = b;
            b = a;
            a = t1 + t2;
        }
        state_[0] += a;
        state_[1] += b;
        state_[2] += c;
        state_[3] += d;
        state_[4] += e;
        state_[5] += f;
        state_[6] += g;
        state_[7] += h;
    }

    std::uint32_t state_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                               0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    std::array<std::uint8_t, 64> block_{};
    std::size_t filled_ = 0;
    std::uint64_t length_ = 0;
};

std::string_view as_text(const Digest& d) {
    return {reinterpret_cast<const char*>(d.data()), d.size()};
}

}  // namespace

Digest sha256(std::string_view data) {
    Sha256 h;
    h.add(data);
    return h.finish();
}

Digest hmac_sha256(std::string_view key, std::string_view data) {
    std::string block(64, '\0');
    if (key.size() > block.size()) {
        const Digest k = sha256(key);
        std::memcpy(block.data(), k.data(), k.size());
    } else {
        std::memcpy(block.data(), key.data(), key.size());
    }
    std::string inner_pad = block;
    std::string outer_pad = block;
    for (std::size_t i = 0; i < block.size(); ++i) {
        inner_pad[i] = static_cast<char>(inner_pad[i] ^ 0x36);
        outer_pad[i] = static_cast<char>(outer_pad[i] ^ 0x5c);
    }
    Sha256 inner;
    inner.add(inner_pad);
    inner.add(data);
    const Digest inner_digest = inner.finish();
    Sha256 outer;
    outer.add(outer_pad);
    outer.add(as_text(inner_digest));
    return outer.finish();
}

std::string to_hex(std::string_view bytes) {
    static const char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (const char c : bytes) {
        const auto b = static_cast<unsigned char>(c);
        out += digits[b >> 4];
        out += digits[b & 0xf];
    }
    return out;
}

std::string to_hex(const Digest& digest) {
    return to_hex(as_text(digest));
}

std::string random_hex(std::size_t bytes) {
    std::string raw(bytes, '\0');
    std::size_t got = 0;
    while (got < bytes) {
        const ssize_t n = getrandom(raw.data() + got, bytes - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            throw system_error("cannot read random bytes", errno);
        got += static_cast<std::size_t>(n);
    }
    return to_hex(raw);
}

std::string new_user_key() {
    return random_hex(user_key_digits / 2);
}

std::optional<std::string> parse_user_key(std::string_view text) {
    if (!text.empty() && text.back() == '\n')
        text.remove_suffix(1);
    if (text.size() != user_key_digits || !lower_hex(text))
        return std::nullopt;
    return std::string(text);
}

std::string user_tag(std::string_view user_key, std::string_view text) {
    return to_hex(hmac_sha256(user_key, text)).substr(0, user_tag_digits);
}

bool is_user_tag(std::string_view text) {
    return text.size() == user_tag_digits && lower_hex(text);
}

bool same_secret(std::string_view a, std::string_view b) {
    if (a.size() != b.size())
        return false;
    unsigned char diff = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
        diff |= static_cast<unsigned char>(a[i] ^ b[i]);
    return diff == 0;
}

}  // namespace bbkit
