#include "bbkit/seal.hpp"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>
#include <climits>

#include "bbkit/error.hpp"

namespace bbkit {
namespace {

// An internal error naming OpenSSL's reason (its error queue is emptied, not left to whatever
// asks next).
[[noreturn]] void fail(const std::string& what) {
    char reason[256] = "no reason given";
    if (const unsigned long code = ERR_get_error(); code != 0)
        ERR_error_string_n(code, reason, sizeof reason);
    ERR_clear_error();
    throw Error(ExitCode::software, what + " (OpenSSL: " + reason + ")");
}

// libcrypto, started before its first use without reading any configuration. It would otherwise
// read the file OPENSSL_CONF names, from the caller's environment when a tool runs as root
// through sudo, and load the provider modules that file lists into the root process (bbkit(7),
// SECURITY). SHA-256 and HMAC come from its built-in default provider, which needs none.
void start_libcrypto() {
    static const bool started = OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG, nullptr) == 1;
    if (!started)
        fail("cannot start OpenSSL's libcrypto");
}

// The bytes of `text` as libcrypto takes them: never a null pointer, even for an empty view.
const unsigned char* as_bytes(std::string_view text) {
    static const unsigned char none = 0;
    return text.empty() ? &none : reinterpret_cast<const unsigned char*>(text.data());
}

std::string_view as_text(const Digest& d) {
    return {reinterpret_cast<const char*>(d.data()), d.size()};
}

}  // namespace

Digest sha256(std::string_view data) {
    start_libcrypto();
    Digest out{};
    unsigned int length = 0;
    if (EVP_Digest(as_bytes(data), data.size(), out.data(), &length, EVP_sha256(), nullptr) != 1 ||
        length != out.size())
        fail("cannot compute a SHA-256 digest");
    return out;
}

Digest hmac_sha256(std::string_view key, std::string_view data) {
    start_libcrypto();
    if (key.size() > INT_MAX)
        throw Error(ExitCode::software, "cannot compute an HMAC-SHA-256: key over 2 GiB");
    Digest out{};
    unsigned int length = 0;
    if (HMAC(EVP_sha256(), as_bytes(key), static_cast<int>(key.size()), as_bytes(data), data.size(),
             out.data(), &length) == nullptr ||
        length != out.size())
        fail("cannot compute an HMAC-SHA-256");
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

// The kernel's generator, not libcrypto's RAND_bytes: that is a generator in the process, seeded
// from this same getrandom, with state to keep apart across fork() and, on first use, the
// library's start-up; reading the kernel's needs neither.
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

bool same_secret(std::string_view a, std::string_view b) {
    // The lengths are not secret (a seal is always 64 digits): unequal ones answer at once, so
    // the time tells the lengths and nothing of the bytes. CRYPTO_memcmp reads every byte.
    if (a.size() != b.size())
        return false;
    return CRYPTO_memcmp(as_bytes(a), as_bytes(b), a.size()) == 0;
}

}  // namespace bbkit
