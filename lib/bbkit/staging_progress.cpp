#include "bbkit/staging_progress.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace bbkit {
namespace {

using nlohmann::json;

// Times past this read as unknown: a hostile record must not overflow a TimePoint.
constexpr std::uint64_t latest_unix_seconds = 4102444800;  // 2100-01-01
// An ETA beyond this is no estimate anyone can use; it also keeps the rounding in range.
constexpr double longest_eta = 1e9;

// `value` to 1/`parts` (dividing last gives the double nearest the decimal: "3400.1").
json rounded(const std::optional<double>& value, double parts) {
    if (!value)
        return nullptr;
    return std::round(*value * parts) / parts;
}

json unix_seconds(const std::optional<TimePoint>& time) {
    if (!time)
        return nullptr;
    return std::chrono::duration_cast<std::chrono::seconds>(time->time_since_epoch()).count();
}

std::optional<std::uint64_t> read_uint(
    const json& object, const char* key,
    std::uint64_t most = std::numeric_limits<std::uint64_t>::max()) {
    const auto it = object.find(key);
    if (it == object.end() || !it->is_number_unsigned() || it->get<std::uint64_t>() > most)
        return std::nullopt;
    return it->get<std::uint64_t>();
}

std::optional<double> read_rate(const json& object, const char* key) {
    const auto it = object.find(key);
    if (it == object.end() || !it->is_number())
        return std::nullopt;
    const double value = it->get<double>();
    if (!std::isfinite(value) || value < 0)
        return std::nullopt;
    return value;
}

std::optional<TimePoint> read_time(const json& object, const char* key) {
    const std::optional<std::uint64_t> seconds = read_uint(object, key, latest_unix_seconds);
    if (!seconds)
        return std::nullopt;
    return TimePoint(std::chrono::seconds(static_cast<std::int64_t>(*seconds)));
}

std::optional<std::string> read_string(const json& object, const char* key) {
    const auto it = object.find(key);
    if (it == object.end() || !it->is_string())
        return std::nullopt;
    return it->get<std::string>();
}

// Seconds to finish `left` at `rate`; nullopt when the rate says nothing.
std::optional<double> time_left(std::uint64_t left, const std::optional<double>& rate) {
    if (left == 0)
        return 0.0;
    if (!rate || *rate <= 0)
        return std::nullopt;
    return static_cast<double>(left) / *rate;
}

std::optional<MovePhases> phases_from_json(const json& value) {
    if (!value.is_object())
        return std::nullopt;
    MovePhases p;
    for (auto [name, field] : {std::pair{"walk", &MovePhases::walk},
                               {"wait", &MovePhases::wait},
                               {"copy", &MovePhases::copy},
                               {"finish", &MovePhases::finish},
                               {"sync", &MovePhases::sync},
                               {"before", &MovePhases::before},
                               {"after", &MovePhases::after},
                               {"busy", &MovePhases::busy},
                               {"seconds", &MovePhases::seconds}}) {
        const auto v = read_rate(value, name);
        if (!v)
            return std::nullopt;
        p.*field = *v;
    }
    const auto threads = read_uint(value, "threads", 1024);
    if (!threads)
        return std::nullopt;
    p.threads = static_cast<unsigned>(*threads);
    return p;
}

}  // namespace

json phases_json(const MovePhases& p) {
    return {{"walk", p.walk},
            {"wait", p.wait},
            {"copy", p.copy},
            {"finish", p.finish},
            {"sync", p.sync},
            {"before", p.before},
            {"after", p.after},
            {"busy", p.busy},
            {"threads", p.threads},
            {"seconds", p.seconds},
            {"idle_share", p.idle_share()}};
}

std::string progress_record(const StagingProgress& p) {
    const json record = {
        {"direction", p.direction ? json(to_string(*p.direction)) : json()},
        {"phase", p.phase ? json(to_string(*p.phase)) : json()},
        {"files_done", p.files_done},
        {"files_total", p.files_total},
        {"bytes_done", p.bytes_done},
        {"bytes_total", p.bytes_total},
        // A tenth of a file per second matters to a stage of large files; a byte does not.
        {"files_per_second", rounded(p.files_per_second, 10)},
        {"bytes_per_second", rounded(p.bytes_per_second, 1)},
        {"eta_seconds", p.eta_seconds ? json(*p.eta_seconds) : json()},
        {"started", unix_seconds(p.started)},
        {"updated", unix_seconds(p.updated)},
        {"pid", p.pid ? json(*p.pid) : json()},
        {"phases", p.phases ? phases_json(*p.phases) : json()},
        {"transfer", p.transfer ? transfer_place_json(*p.transfer) : json()}};
    return record.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

std::optional<StagingProgress> parse_progress_record(const std::string& text) {
    const json value = json::parse(text, nullptr, false);
    if (value.is_discarded() || !value.is_object())
        return std::nullopt;
    StagingProgress p;
    const auto files_done = read_uint(value, "files_done");
    const auto files_total = read_uint(value, "files_total");
    const auto bytes_done = read_uint(value, "bytes_done");
    const auto bytes_total = read_uint(value, "bytes_total");
    if (!files_done || !files_total || !bytes_done || !bytes_total)
        return std::nullopt;
    p.files_done = *files_done;
    p.files_total = *files_total;
    p.bytes_done = *bytes_done;
    p.bytes_total = *bytes_total;
    if (const auto direction = read_string(value, "direction"))
        p.direction = *direction == "in"    ? std::optional(StageDirection::in)
                      : *direction == "out" ? std::optional(StageDirection::out)
                                            : std::nullopt;
    if (value.contains("phase")) {
        const auto phase = read_string(value, "phase");
        p.phase = phase ? parse_stage_phase(*phase) : std::nullopt;
    }
    p.files_per_second = read_rate(value, "files_per_second");
    p.bytes_per_second = read_rate(value, "bytes_per_second");
    p.eta_seconds = read_uint(value, "eta_seconds");
    p.started = read_time(value, "started");
    p.updated = read_time(value, "updated");
    if (const auto pid = read_uint(value, "pid", std::numeric_limits<pid_t>::max()); pid && *pid)
        p.pid = static_cast<pid_t>(*pid);
    if (value.contains("phases"))
        p.phases = phases_from_json(value["phases"]);
    if (value.contains("transfer"))
        p.transfer = transfer_place_from_json(value["transfer"]);
    return p;
}

StagingRate::StagingRate(Clock::duration window) : window_(window) {}

void StagingRate::add(Clock::time_point when, StagePhase phase, std::uint64_t files_done,
                      std::uint64_t bytes_done) {
    if (!samples_.empty() && when < samples_.back().when)
        return;
    const bool went_back = !samples_.empty() && (files_done < samples_.back().files_done ||
                                                 bytes_done < samples_.back().bytes_done);
    if (phase != phase_ || went_back)
        samples_.clear();
    phase_ = phase;
    const Sample sample{when, files_done, bytes_done};
    if (samples_.size() >= 2 && when - samples_[samples_.size() - 2].when < window_ / 64)
        samples_.back() = sample;
    else
        samples_.push_back(sample);
    while (samples_.size() > 2 && samples_[1].when <= when - window_)
        samples_.pop_front();
}

std::optional<double> StagingRate::per_second(std::uint64_t Sample::*counter) const {
    if (phase_ != StagePhase::copying || samples_.size() < 2)
        return std::nullopt;
    const Sample& first = samples_.front();
    const Sample& last = samples_.back();
    const double seconds = std::chrono::duration<double>(last.when - first.when).count();
    if (seconds < 1)
        return std::nullopt;  // a few reports apart, one large file finishing looks like a burst
    return static_cast<double>(last.*counter - first.*counter) / seconds;
}

std::optional<double> StagingRate::files_per_second() const {
    return per_second(&Sample::files_done);
}

std::optional<double> StagingRate::bytes_per_second() const {
    return per_second(&Sample::bytes_done);
}

std::optional<std::uint64_t> eta_seconds(const StagingProgress& p) {
    if (p.phase != StagePhase::copying)
        return std::nullopt;
    const std::uint64_t files_left =
        p.files_total > p.files_done ? p.files_total - p.files_done : 0;
    const std::uint64_t bytes_left =
        p.bytes_total > p.bytes_done ? p.bytes_total - p.bytes_done : 0;
    const std::optional<double> by_files = time_left(files_left, p.files_per_second);
    const std::optional<double> by_bytes = time_left(bytes_left, p.bytes_per_second);
    // Something left whose rate says nothing, and no other estimate: unknown, not 0.
    if (!by_files && !by_bytes)
        return std::nullopt;
    if ((!by_files && bytes_left == 0) || (!by_bytes && files_left == 0))
        return std::nullopt;
    const double seconds =
        std::min(std::max(by_files.value_or(0), by_bytes.value_or(0)), longest_eta);
    return static_cast<std::uint64_t>(std::ceil(seconds));
}

}  // namespace bbkit
