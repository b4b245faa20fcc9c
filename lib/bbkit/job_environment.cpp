#include "bbkit/job_environment.hpp"

#include "bbkit/seal.hpp"
#include "bbkit/text.hpp"

namespace bbkit {

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
    return legacy + "." + user_tag(user_key, legacy);
}

std::string environment_key_name(uid_t uid) {
    return std::to_string(uid) + ".key";
}

std::optional<std::uint64_t> environment_job_id(const std::string& cluster,
                                                const std::string& name) {
    const std::string prefix = cluster + ".";
    if (!starts_with(name, prefix))
        return std::nullopt;
    std::string rest = name.substr(prefix.size());
    const std::size_t dot = rest.find('.');
    if (dot != std::string::npos) {
        if (!is_user_tag(std::string_view(rest).substr(dot + 1)))
            return std::nullopt;
        rest.resize(dot);
    }
    return parse_decimal(rest);
}

}  // namespace bbkit
