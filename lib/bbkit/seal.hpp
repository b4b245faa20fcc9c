// Secrets and seals: random tokens nobody can predict, and a keyed hash (HMAC-SHA-256) that
// marks a record as written by root. The state owner can edit state.db but cannot read root's
// key, so a record it changed no longer matches its seal (bbkit(7), SECURITY). SHA-256, HMAC
// and the constant-time comparison are libsodium's, a library sites already trust and patch;
// the random bytes are the kernel's (getrandom).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace bbkit {

using Digest = std::array<std::uint8_t, 32>;

// SHA-256 (FIPS 180-4) of `data`. Error(software) should libsodium fail, as for the HMAC.
Digest sha256(std::string_view data);

// HMAC-SHA-256 (RFC 2104) of `data` under `key`, a key of any length.
Digest hmac_sha256(std::string_view key, std::string_view data);

// Lower-case hexadecimal of `bytes`.
std::string to_hex(std::string_view bytes);
std::string to_hex(const Digest& digest);

// `bytes` bytes from the kernel's random source (getrandom), as 2 * bytes hex digits: a name
// or token another user cannot guess. Error(software) when the kernel gives none.
std::string random_hex(std::size_t bytes);

// A user's naming key: 32 random lower-case hex digits, kept in a key file of theirs (with a
// newline), behind the names of their entries in directories others may traverse (a pool's
// env/, public/buffers/ with PrivateData; bbkit(7), SECURITY).
std::string new_user_key();
// The key a key file holds (32 lower-case hex digits, then a newline or nothing); nullopt for
// anything else.
std::optional<std::string> parse_user_key(std::string_view text);
// A name only the holders of `user_key` (the user, and root) can compute: the first 32 hex
// digits of HMAC-SHA-256 of `text` under it.
std::string user_tag(std::string_view user_key, std::string_view text);
// Whether `text` has a user_tag's form.
bool is_user_tag(std::string_view text);

// Whether two strings are equal, in a time that depends only on their lengths
// (sodium_memcmp; strings of different lengths are unequal at once).
bool same_secret(std::string_view a, std::string_view b);

}  // namespace bbkit
