// Fuzz target for lib/bbkit/config: parse_config over arbitrary text must either return a
// configuration that holds every documented rule or throw Error(config) with a one-line message
// (bbkit.toml(5)).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>

#include "bbkit/config.hpp"
#include "bbkit/error.hpp"

namespace {

void check(bool condition) {
    if (!condition)
        std::abort();
}

// Paths land in env files and Slurm's path file, which are read line by line.
bool without_control_characters(const std::string& text) {
    return std::none_of(text.begin(), text.end(), [](char c) {
        const unsigned char byte = static_cast<unsigned char>(c);
        return byte < 0x20 || byte == 0x7f;
    });
}

bool absolute_normalized(const std::string& path) {
    return without_control_characters(path) && !path.empty() && path[0] == '/' &&
           path.find("//") == std::string::npos && path.find("/./") == std::string::npos &&
           path.find("/../") == std::string::npos;
}

void check_timeout(unsigned seconds) {
    check(seconds >= 1 && seconds <= bbkit::max_timeout_seconds);
}

void check_config(const bbkit::Config& config) {
    check(absolute_normalized(config.state_dir));
    check(!config.directives.empty());
    check(config.allow_users.empty() || config.deny_users.empty());
    check_timeout(config.timeouts.stage_in);
    check_timeout(config.timeouts.stage_out);
    check_timeout(config.timeouts.other);
    check_timeout(config.timeouts.validate);
    check(config.limits.stage_concurrency >= 1 && config.limits.mover_threads >= 1);
    std::set<std::string> names;
    for (const bbkit::PoolConfig& pool : config.pools) {
        check(!pool.name.empty() && names.insert(pool.name).second);
        check(absolute_normalized(pool.path) && pool.path != "/" && pool.path.back() != '/');
        check(pool.capacity > 0 && pool.granularity >= 1 && pool.granularity <= pool.capacity);
        check(config.find_pool(pool.name) != nullptr);
    }
    if (config.default_pool)
        check(config.find_pool(*config.default_pool) != nullptr);
    for (const auto& [phase, path] : config.hooks)
        check(!path.empty() && path[0] == '/' && without_control_characters(path));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        check_config(bbkit::parse_config(text, "fuzz.toml"));
    } catch (const bbkit::Error& e) {
        check(e.code() == bbkit::ExitCode::config);
        check(std::string(e.what()).find('\n') == std::string::npos);
    }
    return 0;
}
