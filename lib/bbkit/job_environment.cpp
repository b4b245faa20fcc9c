#include "bbkit/job_environment.hpp"

#include <algorithm>
#include <cctype>

#include "bbkit/seal.hpp"
#include "bbkit/text.hpp"

namespace bbkit {
namespace {

constexpr std::size_t environment_key_digits = 32;
constexpr std::size_t environment_tag_digits = 32;

bool lower_hex(const std::string& text) {
    return std::all_of(text.begin(), text.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f');
    });
}

}  // namespace

std::string buffer_environment_path(const std::string& state_dir, const BufferKey& key) {
    return state_dir + "/env/" + key.str() + ".env";
}

std::string job_environment_path(const std::string& state_dir, const std::string& cluster,
                                 std::uint64_t job_id) {
    // burst_buffer.lua's slurm_bb_paths builds this name too (see the header).
    return state_dir + "/env/" + legacy_job_environment_name(cluster, job_id) + ".env";
}

std::string legacy_job_environment_name(const std::string& cluster, std::uint64_t job_id) {
    return cluster + "." + std::to_string(job_id);
}

std::string job_environment_name(const std::string& cluster, std::uint64_t job_id,
                                 const std::string& user_key) {
    const std::string legacy = legacy_job_environment_name(cluster, job_id);
    return legacy + "." + to_hex(hmac_sha256(user_key, legacy)).substr(0, environment_tag_digits);
}

std::string environment_key_name(uid_t uid) {
    return std::to_string(uid) + ".key";
}

std::string new_environment_key() {
    return random_hex(environment_key_digits / 2);
}

std::optional<std::string> parse_environment_key(const std::string& text) {
    std::string key = text;
    if (!key.empty() && key.back() == '\n')
        key.pop_back();
    if (key.size() != environment_key_digits || !lower_hex(key))
        return std::nullopt;
    return key;
}

std::optional<std::uint64_t> environment_job_id(const std::string& cluster,
                                                const std::string& name) {
    const std::string prefix = cluster + ".";
    if (name.compare(0, prefix.size(), prefix) != 0)
        return std::nullopt;
    std::string rest = name.substr(prefix.size());
    const std::size_t dot = rest.find('.');
    if (dot != std::string::npos) {
        const std::string tag = rest.substr(dot + 1);
        if (tag.size() != environment_tag_digits || !lower_hex(tag))
            return std::nullopt;
        rest.resize(dot);
    }
    return parse_decimal(rest);
}

}  // namespace bbkit
