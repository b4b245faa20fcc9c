#include "bbkit/stage_plan.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <istream>
#include <sstream>

#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/text.hpp"

namespace bbkit {
namespace {

using nlohmann::json;

// Paths are byte strings and JSON strings must be UTF-8: what must arrive byte for byte travels
// as hex.
std::string hex(const std::string& bytes) {
    static const char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char c : bytes) {
        out += digits[c >> 4];
        out += digits[c & 15];
    }
    return out;
}

std::string unhex(const std::string& text) {
    auto value = [&](char c) -> int {
        if (c >= '0' && c <= '9')
            return c - '0';
        if (c >= 'a' && c <= 'f')
            return c - 'a' + 10;
        throw Error(ExitCode::data, "malformed hex string in stage plan");
    };
    if (text.size() % 2)
        throw Error(ExitCode::data, "malformed hex string in stage plan");
    std::string out;
    out.reserve(text.size() / 2);
    for (std::size_t i = 0; i < text.size(); i += 2)
        out += static_cast<char>(value(text[i]) * 16 + value(text[i + 1]));
    return out;
}

json hex_stage_json(const StageDirective& s) {
    return {{"type", to_string(s.type)},
            {"source_hex", hex(s.source)},
            {"destination_hex", hex(s.destination)},
            {"buffer", s.buffer},
            {"line", s.where.line},
            {"from", to_string(s.where.origin)},
            {"unresolved", s.unresolved},
            {"distribute", s.distribute ? json(to_string(*s.distribute)) : json()},
            {"gather", s.gather ? json(to_string(*s.gather)) : json()}};
}

json nodes_json(const JobNodes& nodes) {
    return {{"name", nodes.name}, {"index", nodes.index}, {"count", nodes.count}};
}

// Read back through job_nodes' own checks: a record names a node the way bb-pool alloc was
// given it, and a plan only what a record holds.
JobNodes nodes_from(const json& j) {
    JobNodes nodes;
    nodes.name = j.at("name").get<std::string>();
    nodes.index = j.at("index").get<std::uint32_t>();
    nodes.count = j.at("count").get<std::uint32_t>();
    if (nodes.count == 0 || nodes.count > max_job_nodes || nodes.index >= nodes.count)
        throw Error(ExitCode::data, "malformed node place in stage plan");
    return nodes;
}

StageDirective stage_from(const json& j) {
    StageDirective s;
    s.type = parse_stage_type(j.at("type").get<std::string>());
    s.source = unhex(j.at("source_hex").get<std::string>());
    s.destination = unhex(j.at("destination_hex").get<std::string>());
    s.unresolved = j.value("unresolved", false);
    if (j.contains("buffer") && j["buffer"].is_string())
        s.buffer = j["buffer"].get<std::string>();
    if (j.contains("distribute") && j["distribute"].is_string())
        s.distribute = parse_spread(j["distribute"].get<std::string>());
    if (j.contains("gather") && j["gather"].is_string())
        s.gather = parse_gather(j["gather"].get<std::string>());
    s.where.line = j.value("line", 0);
    const std::string from = j.value("from", std::string("script"));
    s.where.origin = from == "--bb"    ? Origin::bb_option
                     : from == "--bbf" ? Origin::bbf_file
                                       : Origin::script;
    return s;
}

// A string member of a report's JSON object; "" when absent or of another type.
std::string text_field(const json& object, const char* name) {
    const auto found = object.find(name);
    return found != object.end() && found->is_string() ? found->get<std::string>() : "";
}

// One line of report: a word, then space-separated fields; messages are JSON strings so that
// any byte of a file name survives.
std::string json_quoted(const std::string& text) {
    return json(text).dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

const char* to_string(StageDirection direction) {
    return direction == StageDirection::in ? "in" : "out";
}

std::string plan_to_json(const StagePlan& plan) {
    json stages = json::array();
    for (const StageDirective& s : plan.stages)
        stages.push_back(hex_stage_json(s));
    json roots = json::object();
    for (const auto& [name, path] : plan.persistent_roots)
        roots[name] = hex(path);
    return json{{"direction", to_string(plan.direction)},
                {"user",
                 {{"name", plan.user.name},
                  {"uid", plan.user.uid},
                  {"gid", plan.user.gid},
                  {"groups", plan.user.groups}}},
                {"job_root_hex", hex(plan.job_root)},
                {"persistent_roots", roots},
                {"capacity", plan.capacity},
                {"stages", stages},
                {"threads", plan.threads},
                {"durable", plan.durable},
                {"direct_io", plan.direct_io},
                {"trust_syncfs", plan.trust_syncfs},
                {"memory_limit", plan.memory_limit},
                {"temp_token", plan.temp_token},
                {"nodes", nodes_json(plan.nodes)},
                {"part", plan.part},
                {"parts", plan.parts}}
        .dump();
}

StagePlan plan_from_json(const std::string& text) {
    try {
        const json j = json::parse(text);
        StagePlan plan;
        plan.direction = j.at("direction").get<std::string>() == "out" ? StageDirection::out
                                                                       : StageDirection::in;
        plan.user.name = j.at("user").at("name").get<std::string>();
        plan.user.uid = j.at("user").at("uid").get<uid_t>();
        plan.user.gid = j.at("user").at("gid").get<gid_t>();
        plan.user.groups = j.at("user").at("groups").get<std::vector<gid_t>>();
        plan.job_root = unhex(j.at("job_root_hex").get<std::string>());
        for (const auto& [name, path] : j.at("persistent_roots").items())
            plan.persistent_roots[name] = unhex(path.get<std::string>());
        plan.capacity = j.at("capacity").get<std::uint64_t>();
        for (const json& s : j.at("stages"))
            plan.stages.push_back(stage_from(s));
        plan.threads = j.at("threads").get<unsigned>();
        plan.durable = j.at("durable").get<bool>();
        plan.direct_io = j.at("direct_io").get<bool>();
        plan.trust_syncfs = j.value("trust_syncfs", true);
        plan.memory_limit = j.value("memory_limit", plan.memory_limit);
        plan.temp_token = j.value("temp_token", std::string());
        if (j.contains("nodes"))
            plan.nodes = nodes_from(j.at("nodes"));
        plan.part = j.value("part", std::uint32_t{0});
        plan.parts = j.value("parts", std::uint32_t{1});
        if (plan.parts == 0 || plan.parts > max_job_nodes || plan.part >= plan.parts)
            throw Error(ExitCode::data, "malformed part in stage plan: part " +
                                            std::to_string(plan.part) + " of " +
                                            std::to_string(plan.parts));
        return plan;
    } catch (const json::exception& e) {
        throw Error(ExitCode::data, std::string("malformed stage plan: ") + e.what());
    }
}

std::string read_transfer_plan(const std::string& path) {
    if (geteuid() == 0)
        throw Error(ExitCode::no_perm,
                    "--plan is for a transfer job's mover, run as the job's user; root's mover "
                    "takes its plan from bb-stage on standard input");
    const std::optional<std::string> text =
        read_file(path, "plan " + path, std::size_t{64} << 20, O_NOFOLLOW | O_NONBLOCK);
    if (!text)
        throw Error(ExitCode::no_input, "plan " + path + " does not exist");
    return *text;
}

void set_part_of_step(StagePlan& plan) {
    const auto number = [](const char* name) -> std::optional<std::uint64_t> {
        const char* value = std::getenv(name);
        return value ? parse_decimal(value) : std::nullopt;
    };
    const std::optional<std::uint64_t> task = number("SLURM_PROCID");
    const std::optional<std::uint64_t> tasks = number("SLURM_NTASKS");
    if (!task || !tasks || *tasks == 0 || *tasks > max_job_nodes || *task >= *tasks)
        throw Error(ExitCode::usage,
                    "--part-of-step needs a Slurm step's SLURM_PROCID and SLURM_NTASKS (run it "
                    "with srun)");
    plan.part = static_cast<std::uint32_t>(*task);
    plan.parts = static_cast<std::uint32_t>(*tasks);
}

std::string staging_record(const Request& request, const std::optional<JobNodes>& nodes) {
    json in = json::array(), out = json::array(), uses = json::array();
    for (const StageDirective& s : request.stage_in)
        in.push_back(hex_stage_json(s));
    for (const StageDirective& s : request.stage_out)
        out.push_back(hex_stage_json(s));
    for (const PersistentUse& u : request.use)
        uses.push_back(u.name);
    json record{{"stage_in", in}, {"stage_out", out}, {"persistent_use", uses}};
    if (nodes)
        record["nodes"] = nodes_json(*nodes);
    return record.dump();
}

std::optional<JobNodes> recorded_nodes(const std::string& staging_json) {
    const json j = json::parse(staging_json, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("nodes"))
        return std::nullopt;
    try {
        return nodes_from(j.at("nodes"));
    } catch (const json::exception& e) {
        throw Error(ExitCode::data, std::string("malformed recorded node place: ") + e.what());
    }
}

std::optional<TransferRecord> recorded_transfer(const std::string& staging_json) {
    const json j = json::parse(staging_json, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("transfer"))
        return std::nullopt;
    try {
        const json& t = j.at("transfer");
        TransferRecord record;
        record.direction = t.at("direction").get<std::string>() == "out" ? StageDirection::out
                                                                         : StageDirection::in;
        record.directory = t.at("directory").get<std::string>();
        record.job_id = t.at("job_id").get<std::uint64_t>();
        record.parts = t.at("parts").get<std::uint32_t>();
        return record;
    } catch (const json::exception& e) {
        throw Error(ExitCode::data, std::string("malformed recorded transfer job: ") + e.what());
    }
}

std::string with_transfer(const std::string& staging_json,
                          const std::optional<TransferRecord>& transfer) {
    json j = json::parse(staging_json, nullptr, false);
    if (j.is_discarded() || !j.is_object())
        j = json::object();
    if (!transfer) {
        j.erase("transfer");
        return j.dump();
    }
    j["transfer"] = {{"direction", to_string(transfer->direction)},
                     {"directory", transfer->directory},
                     {"job_id", transfer->job_id},
                     {"parts", transfer->parts}};
    return j.dump();
}

std::vector<StageDirective> recorded_stages(const std::string& staging_json,
                                            StageDirection direction) {
    std::vector<StageDirective> stages;
    const json j = json::parse(staging_json, nullptr, false);
    if (j.is_discarded() || !j.is_object())
        return stages;
    const char* key = direction == StageDirection::in ? "stage_in" : "stage_out";
    if (!j.contains(key) || !j[key].is_array())
        return stages;
    try {
        for (const json& s : j[key])
            stages.push_back(stage_from(s));
    } catch (const json::exception& e) {
        throw Error(ExitCode::data, std::string("malformed recorded stage lines: ") + e.what());
    }
    return stages;
}

std::vector<StageDirective> unstaged_results(const Buffer& b) {
    if (b.key.kind() != BufferKind::job)
        return {};
    switch (b.state) {
        case BufferState::running:
        case BufferState::post_run:
        case BufferState::staging_out:
            return recorded_stages(b.staging, StageDirection::out);
        default:
            return {};
    }
}

std::vector<std::string> recorded_persistent_uses(const std::string& staging_json) {
    std::vector<std::string> names;
    const json j = json::parse(staging_json, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("persistent_use"))
        return names;
    for (const json& name : j["persistent_use"])
        if (name.is_string())
            names.push_back(name.get<std::string>());
    return names;
}

const char* to_string(StagePhase phase) {
    switch (phase) {
        case StagePhase::measuring:
            return "measuring";
        case StagePhase::copying:
            return "copying";
        case StagePhase::syncing:
            return "syncing";
    }
    return "copying";
}

std::optional<StagePhase> parse_stage_phase(const std::string& text) {
    for (StagePhase phase : {StagePhase::measuring, StagePhase::copying, StagePhase::syncing})
        if (text == to_string(phase))
            return phase;
    return std::nullopt;
}

std::string progress_line(std::uint64_t files_done, std::uint64_t files_total,
                          std::uint64_t bytes_done, std::uint64_t bytes_total, StagePhase phase) {
    // The phase goes last: an older bb-stage reads the four counters and ignores the rest.
    return "progress " + std::to_string(files_done) + " " + std::to_string(files_total) + " " +
           std::to_string(bytes_done) + " " + std::to_string(bytes_total) + " " + to_string(phase);
}

double MovePhases::idle_share() const {
    if (threads == 0 || seconds <= 0)
        return 0;
    return std::clamp(1 - busy / (threads * seconds), 0.0, 1.0);
}

void MovePhases::append(const MovePhases& later) {
    walk += later.walk;
    wait += later.wait;
    copy += later.copy;
    finish += later.finish;
    sync += later.sync;
    busy += later.busy;
    if (seconds <= 0)
        before = later.before;
    after = later.after;
    threads = std::max(threads, later.threads);
    seconds += later.seconds;
}

namespace {

// The phases as "name=value" words, in this order.
std::vector<std::pair<const char*, double MovePhases::*>> phase_fields() {
    return {{"walk", &MovePhases::walk},   {"wait", &MovePhases::wait},
            {"copy", &MovePhases::copy},   {"finish", &MovePhases::finish},
            {"sync", &MovePhases::sync},   {"before", &MovePhases::before},
            {"after", &MovePhases::after}, {"busy", &MovePhases::busy}};
}

// The words after a summary's seconds; nullopt unless every field is there, well formed.
std::optional<MovePhases> parse_phases(std::istream& in, double seconds) {
    std::map<std::string, std::string> words;
    for (std::string word; in >> word;) {
        const std::size_t eq = word.find('=');
        if (eq == std::string::npos)
            return std::nullopt;
        words[word.substr(0, eq)] = word.substr(eq + 1);
    }
    MovePhases phases;
    phases.seconds = seconds;
    for (const auto& [name, field] : phase_fields()) {
        const auto found = words.find(name);
        if (found == words.end())
            return std::nullopt;
        std::istringstream value(found->second);
        double v = 0;
        if (!(value >> v) || !(value >> std::ws).eof() || !(v >= 0))
            return std::nullopt;
        phases.*field = v;
    }
    const auto threads = words.find("threads");
    const std::optional<std::uint64_t> n =
        threads == words.end() ? std::nullopt : parse_decimal(threads->second);
    if (!n || *n > 1024)
        return std::nullopt;
    phases.threads = static_cast<unsigned>(*n);
    return phases;
}

}  // namespace

std::string summary_line(std::uint64_t files, std::uint64_t bytes, std::uint64_t skipped,
                         double seconds, const MovePhases& phases) {
    std::ostringstream out;
    out << "summary " << files << ' ' << bytes << ' ' << skipped << ' ' << seconds;
    for (const auto& [name, field] : phase_fields())
        out << ' ' << name << '=' << phases.*field;
    out << " threads=" << phases.threads;
    return out.str();
}

std::string error_line(const Error& error) {
    const Failure failure = error.failure().value_or(Failure{});
    json detail = {{"message", error.what()}, {"kind", to_string(failure.kind)}};
    if (!failure.operation.empty())
        detail["operation"] = failure.operation;
    if (!failure.path.empty())
        detail["path"] = failure.path;
    if (failure.err != 0)
        detail["errno"] = errno_name(failure.err);
    return "error " + std::to_string(error.exit_status()) + " " +
           detail.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string warning_line(const std::string& message) {
    return "warning " + json_quoted(message);
}

json transfer_place_json(const TransferPlace& place) {
    return {{"job", place.job_id}, {"nodes", place.nodes}, {"parts", place.parts}};
}

std::optional<TransferPlace> transfer_place_from_json(const json& value) {
    if (!value.is_object())
        return std::nullopt;
    const auto job = value.find("job");
    const auto nodes = value.find("nodes");
    const auto parts = value.find("parts");
    if (job == value.end() || !job->is_number_unsigned() || nodes == value.end() ||
        !nodes->is_string() || nodes->get_ref<const std::string&>().size() > max_place_text ||
        parts == value.end() || !parts->is_array() || parts->size() > max_place_parts)
        return std::nullopt;
    TransferPlace place;
    place.job_id = job->get<std::uint64_t>();
    place.nodes = nodes->get<std::string>();
    for (const json& part : *parts) {
        if (!part.is_string() || part.get_ref<const std::string&>().size() > max_place_text)
            return std::nullopt;
        place.parts.push_back(part.get<std::string>());
    }
    return place;
}

std::string transfer_line(const TransferPlace& place) {
    return "transfer " +
           transfer_place_json(place).dump(-1, ' ', false, json::error_handler_t::replace);
}

MoverReport parse_report(const std::string& line) {
    MoverReport r;
    std::istringstream in(line);
    std::string word;
    in >> word;
    auto message_rest = [&]() {
        std::string rest;
        std::getline(in >> std::ws, rest);
        const json j = json::parse(rest, nullptr, false);
        return j.is_string() ? j.get<std::string>() : rest;
    };
    if (word == "progress" &&
        (in >> r.files_done >> r.files_total >> r.bytes_done >> r.bytes_total)) {
        std::string phase, extra;
        const bool has_phase = static_cast<bool>(in >> phase);
        const std::optional<StagePhase> known =
            has_phase ? parse_stage_phase(phase) : StagePhase::copying;
        if (known && !(in >> extra)) {
            r.kind = MoverReport::Kind::progress;
            r.phase = *known;
        }
    } else if (word == "summary" && (in >> r.files >> r.bytes >> r.skipped >> r.seconds)) {
        r.kind = MoverReport::Kind::summary;
        r.phases = parse_phases(in, r.seconds);
    } else if (word == "error" && (in >> r.exit_code)) {
        r.kind = MoverReport::Kind::error;
        std::string rest;
        std::getline(in >> std::ws, rest);
        const json j = json::parse(rest, nullptr, false);
        if (j.is_object()) {
            r.message = text_field(j, "message");
            if (const std::optional<FailureKind> kind = parse_failure_kind(text_field(j, "kind")))
                r.failure = Failure{*kind, text_field(j, "operation"), text_field(j, "path"),
                                    errno_from_name(text_field(j, "errno"))};
        } else {
            r.message = j.is_string() ? j.get<std::string>() : rest;
        }
    } else if (word == "warning") {
        r.kind = MoverReport::Kind::warning;
        r.message = message_rest();
    } else if (word == "transfer") {
        std::string rest;
        std::getline(in >> std::ws, rest);
        const json j = json::parse(rest, nullptr, false);
        if ((r.transfer = transfer_place_from_json(j)))
            r.kind = MoverReport::Kind::transfer;
    }
    return r;
}

}  // namespace bbkit
