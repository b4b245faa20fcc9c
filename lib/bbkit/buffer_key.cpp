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

// Read from the right: cluster names may contain '.', persistent names and numbers may not.
BufferKey parse_buffer_key(const std::string& text) {
    const auto fail = [&]() -> BufferKey {
        throw Error(ExitCode::data, "invalid buffer key '" + text +
                                        "' (expected CLUSTER.JOBID.INCARNATION or CLUSTER.p.NAME)");
    };
    const auto last = text.rfind('.');
    if (last == std::string::npos || last == 0)
        return fail();
    const auto middle = text.rfind('.', last - 1);
    if (middle == std::string::npos || middle == 0)
        return fail();
    const std::string cluster = text.substr(0, middle);
    const std::string second = text.substr(middle + 1, last - middle - 1);
    const std::string third = text.substr(last + 1);
    const std::optional<std::uint64_t> job_id = key_number(second, UINT64_MAX);
    const std::optional<std::uint64_t> incarnation = key_number(third, UINT32_MAX);
    if (job_id && incarnation)
        return BufferKey::job(cluster, *job_id, static_cast<std::uint32_t>(*incarnation));
    if (second == "p") {
        try {
            return BufferKey::persistent(cluster, third);
        } catch (const Error&) {
            return fail();
        }
    }
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

void check_persistent_name(const std::string& name) {
    const std::string what = "invalid persistent buffer name '" + name + "': ";
    if (name.empty() || name.size() > 64)
        throw Error(ExitCode::data, what + "it must be 1 to 64 characters long");
    const bool valid_chars = std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
    // No '/', '.' or '..': the name is a directory name under persistent/ and a file name
    // under env/ and run/.
    if (!valid_chars)
        throw Error(ExitCode::data, what + "use only letters, digits, '_' and '-'");
    if (std::isdigit(static_cast<unsigned char>(name[0])))
        throw Error(ExitCode::data,
                    what +
                        "it must not start with a digit (numeric names are reserved for job "
                        "buffers)");
    if (name[0] == '-')
        throw Error(ExitCode::data, what + "it must not start with '-'");
}

}  // namespace bbkit
