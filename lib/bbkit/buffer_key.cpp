#include "bbkit/buffer_key.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <optional>

#include "bbkit/error.hpp"
#include "bbkit/seal.hpp"
#include "bbkit/text.hpp"

namespace bbkit {
namespace {

// Keys are bbkit's own output: plain numbers, without leading zeros.
std::optional<std::uint64_t> key_number(const std::string& text, std::uint64_t max) {
    if (text.size() > 1 && text[0] == '0')
        return std::nullopt;
    return parse_decimal(text, max);
}

}  // namespace

BufferKey BufferKey::job(std::string cluster, std::uint64_t job_id, std::uint32_t incarnation) {
    BufferKey key;
    key.cluster = std::move(cluster);
    key.job_id = job_id;
    key.incarnation = incarnation;
    return key;
}

BufferKey BufferKey::persistent(std::string cluster, std::string name) {
    check_persistent_name(name);
    BufferKey key;
    key.cluster = std::move(cluster);
    key.name = std::move(name);
    return key;
}

std::string BufferKey::str() const {
    if (kind() == BufferKind::persistent)
        return cluster + ".p." + name;
    return cluster + "." + std::to_string(job_id) + "." + std::to_string(incarnation);
}

// The whole key, cluster included: clusters sharing a pool never meet in one directory.
// Records keep the directory they were created with (older versions left the cluster out).
std::string BufferKey::new_directory() const {
    const std::string token = "." + random_hex(directory_token_digits / 2);
    if (kind() == BufferKind::persistent)
        return "persistent/" + cluster + "." + name + token;
    return "job/" + str() + token;
}

std::string without_directory_token(const std::string& entry) {
    const std::size_t dot = entry.rfind('.');
    if (dot == std::string::npos || dot == 0 || entry.size() - dot - 1 != directory_token_digits)
        return entry;
    const bool token =
        std::all_of(entry.begin() + static_cast<std::ptrdiff_t>(dot) + 1, entry.end(), [](char c) {
            return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f');
        });
    return token ? entry.substr(0, dot) : entry;
}

bool BufferKey::operator==(const BufferKey& other) const {
    return cluster == other.cluster && job_id == other.job_id && incarnation == other.incarnation &&
           name == other.name;
}

// A persistent key is CLUSTER.p.NAME where both may hold '.': it splits at the first ".p."
// followed by a valid name (bbkit.toml(5) keeps ".p." out of cluster names). A job key is read
// from the right: cluster names may contain '.', numbers may not.
BufferKey parse_buffer_key(const std::string& text) {
    const auto fail = [&]() -> BufferKey {
        throw Error(ExitCode::data, "invalid buffer key '" + text +
                                        "' (expected CLUSTER.JOBID.INCARNATION or CLUSTER.p.NAME)");
    };
    for (std::size_t at = text.find(".p."); at != std::string::npos && at > 0;
         at = text.find(".p.", at + 1)) {
        try {
            return BufferKey::persistent(text.substr(0, at), text.substr(at + 3));
        } catch (const Error&) {
            continue;
        }
    }
    const auto last = text.rfind('.');
    if (last == std::string::npos || last == 0)
        return fail();
    const auto middle = text.rfind('.', last - 1);
    if (middle == std::string::npos || middle == 0)
        return fail();
    const std::optional<std::uint64_t> job_id =
        key_number(text.substr(middle + 1, last - middle - 1), UINT64_MAX);
    const std::optional<std::uint64_t> incarnation = key_number(text.substr(last + 1), UINT32_MAX);
    if (job_id && incarnation)
        return BufferKey::job(text.substr(0, middle), *job_id,
                              static_cast<std::uint32_t>(*incarnation));
    return fail();
}

std::uint64_t parse_job_id(const std::string& text, const std::string& what) {
    constexpr std::uint64_t max_id = 0x7fffffffffffffffULL;  // SQLite integers are signed
    const std::optional<std::uint64_t> id =
        text.size() <= 19 ? parse_decimal(text, max_id) : std::nullopt;
    if (!id)
        throw Error(ExitCode::usage,
                    what + " '" + text + "' is not a number (Slurm's ids are whole numbers)");
    return *id;
}

std::string persistent_variable_form(std::string name) {
    std::replace(name.begin(), name.end(), '-', '_');
    std::replace(name.begin(), name.end(), '.', '_');
    return name;
}

void check_persistent_name(const std::string& name) {
    const std::string what = "invalid persistent buffer name '" + printable(name) + "': ";
    if (name.empty() || name.size() > 64)
        throw Error(ExitCode::data, what + "it must be 1 to 64 characters long");
    // Slurm's datawarp plugin refuses only a name starting with a digit; DataWarp's names
    // (climate.v2, run_7-b) hold letters, digits, '_', '-' and '.'. Anything else (a '/',
    // a blank, a quote, a '$') could not be a directory name under persistent/ nor a word of a
    // directive line, and is refused (bbkit(7), REQUESTS).
    const bool valid_chars = std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
    });
    if (!valid_chars)
        throw Error(ExitCode::data, what + "use only letters, digits, '_', '-' and '.'");
    if (std::isdigit(static_cast<unsigned char>(name[0])))
        throw Error(ExitCode::data,
                    what +
                        "it must not start with a digit (numeric names are reserved for job "
                        "buffers)");
    if (name[0] == '-' || name[0] == '.')
        throw Error(ExitCode::data, what + "it must not start with '" + name.substr(0, 1) + "'");
    // Never a path component of its own, whatever a name is joined to.
    if (name.find("..") != std::string::npos)
        throw Error(ExitCode::data, what + "it must not hold '..'");
}

}  // namespace bbkit
