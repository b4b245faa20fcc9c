#include "bbkit/seal.hpp"

#include <sodium.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>

#include "bbkit/error.hpp"

namespace bbkit {
namespace {

constexpr std::size_t user_key_digits = 32;
constexpr std::size_t user_tag_digits = 32;

bool lower_hex(std::string_view text) {
    return std::all_of(text.begin(), text.end(),
                       [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// libsodium, started once before its first use (sodium_init is thread-safe, and later calls
// return at once). It reads no configuration file and no environment variable, and loads no
// module (it opens /dev/random and /dev/urandom only where getrandom fails): the start picks
// among its built-in implementations by the CPU's features and checks the kernel's random
// source.
void start_libsodium() {
    static const bool started = sodium_init() >= 0;
    if (!started)
        throw Error(ExitCode::software, "cannot start libsodium");
}

// The bytes of `text` as libsodium takes them: never a null pointer, even for an empty view
// (its functions declare their pointers nonnull).
const unsigned char* as_bytes(std::string_view text) {
    static const unsigned char none = 0;
    return text.empty() ? &none : reinterpret_cast<const unsigned char*>(text.data());
}

std::string_view as_text(const Digest& d) {
    return {reinterpret_cast<const char*>(d.data()), d.size()};
}

}  // namespace

Digest sha256(std::string_view data) {
    start_libsodium();
    Digest out{};
    static_assert(std::tuple_size_v<Digest> == crypto_hash_sha256_BYTES);
    if (crypto_hash_sha256(out.data(), as_bytes(data), data.size()) != 0)
        throw Error(ExitCode::software, "cannot compute a SHA-256 digest");
    return out;
}

// The init/update/final form takes a key of any length (one longer than the block is hashed
// first, as RFC 2104 says); crypto_auth_hmacsha256 itself takes 32-byte keys only. The final
// step wipes the state.
Digest hmac_sha256(std::string_view key, std::string_view data) {
    start_libsodium();
    static_assert(std::tuple_size_v<Digest> == crypto_auth_hmacsha256_BYTES);
    crypto_auth_hmacsha256_state state;
    Digest out{};
    if (crypto_auth_hmacsha256_init(&state, as_bytes(key), key.size()) != 0 ||
        crypto_auth_hmacsha256_update(&state, as_bytes(data), data.size()) != 0 ||
        crypto_auth_hmacsha256_final(&state, out.data()) != 0) {
        sodium_memzero(&state, sizeof state);
        throw Error(ExitCode::software, "cannot compute an HMAC-SHA-256");
    }
    return out;
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

// The kernel's generator, read directly: libsodium's randombytes_buf would read the same
// getrandom after the library's start-up, which a token does not need.
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
    // The lengths are not secret (a seal is always 64 digits): unequal ones answer at once, so
    // the time tells the lengths and nothing of the bytes. sodium_memcmp reads every byte.
    if (a.size() != b.size())
        return false;
    start_libsodium();
    return sodium_memcmp(as_bytes(a), as_bytes(b), a.size()) == 0;
}

}  // namespace bbkit
