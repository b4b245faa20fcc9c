#include "bbkit/dws_render.hpp"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

namespace bbkit {
namespace {

using nlohmann::json;

std::int64_t epoch_seconds(TimePoint time) {
    return std::chrono::duration_cast<std::chrono::seconds>(time.time_since_epoch()).count();
}

bool ending(BufferState s) {
    return s == BufferState::teardown || s == BufferState::teardown_fail ||
           s == BufferState::deleting;
}

// DataWarp's state object: goal "create" until a teardown starts, then "destroy".
json state_of(const Buffer& buffer) {
    const bool settling = buffer.state == BufferState::allocating;
    return {{"actualized", !settling && !ending(buffer.state)},
            {"fuse_blown", buffer.state == BufferState::teardown_fail},
            {"goal", ending(buffer.state) ? "destroy" : "create"},
            {"mixed", false},
            {"transitioning", settling || ending(buffer.state)}};
}

std::string listing(const char* key, const json& items) {
    return json{{key, items}}.dump();
}

}  // namespace

bool is_dws_session(const Buffer& buffer) {
    return buffer.state != BufferState::pending && !is_final(buffer.state);
}

bool has_dws_instance(const Buffer& buffer) {
    return !is_session_only(buffer);
}

std::uint32_t activations_of(const Buffer& buffer) {
    if (buffer.key.kind() == BufferKind::persistent)
        return buffer.use_count;
    const BufferState s = buffer.state;
    return s == BufferState::pre_run || s == BufferState::running || s == BufferState::post_run ? 1
                                                                                                : 0;
}

std::string dws_pools(const std::vector<PoolStatus>& pools) {
    json list = json::array();
    for (const PoolStatus& pool : pools) {
        const std::uint64_t granularity = std::max<std::uint64_t>(pool.granularity, 1);
        const bool up = !pool.draining && pool.initialized &&
                        pool.availability != PoolAvailability::unavailable;
        list.push_back({{"id", pool.name},
                        {"units", "bytes"},
                        {"granularity", granularity},
                        {"quantity", pool.total / granularity},
                        {"free", up ? pool.free / granularity : 0}});
    }
    return listing("pools", list);
}

std::string dws_sessions(const std::vector<BufferStatus>& buffers) {
    json list = json::array();
    for (const BufferStatus& status : buffers) {
        const Buffer& b = status.buffer;
        if (!is_dws_session(b))
            continue;
        list.push_back({{"id", b.record_id},
                        {"created", epoch_seconds(b.created)},
                        {"creator", "bbkit"},
                        {"owner", b.uid},
                        {"token", token_of(b)},
                        {"expiration", b.expires ? epoch_seconds(*b.expires) : 0},
                        {"expired", false},
                        {"links", {{"client_nodes", json::array()}}},
                        {"state", state_of(b)}});
    }
    return listing("sessions", list);
}

std::string dws_instances(const std::vector<BufferStatus>& buffers) {
    json list = json::array();
    for (const BufferStatus& status : buffers) {
        const Buffer& b = status.buffer;
        if (!is_dws_session(b) || !has_dws_instance(b))
            continue;
        list.push_back(
            {{"id", b.record_id},
             {"capacity", {{"bytes", b.allocated_bytes}, {"nodes", 0}}},
             {"created", epoch_seconds(b.created)},
             {"expiration", b.expires ? epoch_seconds(*b.expires) : 0},
             {"expired", false},
             {"intact", b.state != BufferState::teardown_fail},
             {"label", token_of(b)},
             {"links", {{"configurations", json::array({b.record_id})}, {"session", b.record_id}}},
             {"public", b.key.kind() == BufferKind::persistent},
             {"state", state_of(b)}});
    }
    return listing("instances", list);
}

std::string dws_configurations(const std::vector<BufferStatus>& buffers) {
    json list = json::array();
    for (const BufferStatus& status : buffers) {
        const Buffer& b = status.buffer;
        if (!is_dws_session(b) || !has_dws_instance(b))
            continue;
        list.push_back({{"id", b.record_id},
                        {"type", b.type.empty() ? "scratch" : b.type},
                        {"access_type", b.access == "private" ? "private" : "stripe"},
                        {"activs", activations_of(b)},
                        {"links", {{"instance", b.record_id}}},
                        {"state", state_of(b)}});
    }
    return listing("configurations", list);
}

std::string dws_real_size(const Buffer& buffer) {
    if (!is_dws_session(buffer))
        return "";
    return json{{"capacity", buffer.allocated_bytes}, {"units", "bytes"}}.dump();
}

}  // namespace bbkit
