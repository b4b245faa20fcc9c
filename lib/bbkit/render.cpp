#include "bbkit/render.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "bbkit/error.hpp"
#include "bbkit/text.hpp"

namespace bbkit {
namespace {

using nlohmann::json;

json location_json(const Location& where) {
    return {{"line", where.line}, {"from", to_string(where.origin)}};
}

std::string location_text(const Location& where) {
    if (where.origin == Origin::command_line)
        return to_string(where.origin);
    return std::string(to_string(where.origin)) + " line " + std::to_string(where.line);
}

json with_location(json object, const Location& where) {
    object.update(location_json(where));
    return object;
}

json stage_json(const StageDirective& stage) {
    return with_location(
        {{"type", to_string(stage.type)},
         {"source", stage.source},
         {"destination", stage.destination},
         {"buffer", stage.buffer.empty() ? json() : json(stage.buffer)},
         {"unresolved", stage.unresolved},
         {"distribute", stage.distribute ? json(to_string(*stage.distribute)) : json()},
         {"gather", stage.gather ? json(to_string(*stage.gather)) : json()}},
        stage.where);
}

// The buffer side of a stage line as users write it.
std::string buffer_path(const std::string& buffer, const std::string& relative) {
    std::string var = "$BB_JOB_DIR";
    if (!buffer.empty()) {
        var = "$DW_PERSISTENT_STRIPED_" + persistent_variable_form(buffer);
    }
    return relative.empty() ? var : var + "/" + relative;
}

std::string stage_text(const char* direction, const StageDirective& stage, bool in) {
    const std::string buffer_side =
        buffer_path(stage.buffer, in ? stage.destination : stage.source);
    const std::string& outside = in ? stage.source : stage.destination;
    std::ostringstream out;
    out << direction << ": " << to_string(stage.type) << ' ' << (in ? outside : buffer_side)
        << " -> " << (in ? buffer_side : outside) << "  [" << location_text(stage.where) << "]"
        << (stage.unresolved ? " (symbols pending)" : "") << '\n';
    return out.str();
}

std::string toml_string(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
    }
    return out + "\"";
}

std::string toml_array(const std::vector<std::string>& items) {
    std::string out = "[";
    for (std::size_t i = 0; i < items.size(); ++i)
        out += (i ? ", " : "") + toml_string(items[i]);
    return out + "]";
}

}  // namespace

std::string json_text(const json& value, int indent) {
    return value.dump(indent, ' ', false, json::error_handler_t::replace);
}

json size_json(const Size& size, std::uint64_t rounded) {
    return {{"bytes", size.value},
            {"nodes", size.nodes},
            {"rounded", rounded},
            {"text", format_size(size)},
            {"rounded_text", size.nodes ? format_size(size) : format_size(rounded)}};
}

std::string size_text(const Size& size, std::uint64_t rounded) {
    std::ostringstream out;
    out << (size.nodes ? "nodes:   " : "bytes:   ") << size.value << '\n'
        << "rounded: " << rounded << '\n'
        << "text:    " << format_size(size) << '\n';
    if (!size.nodes && rounded != size.value)
        out << "rounded text: " << format_size(rounded) << '\n';
    return out.str();
}

json request_json(const Request& request) {
    json out;
    out["has_directive"] = request.has_directive;
    if (request.job_buffer) {
        const JobBufferRequest& b = *request.job_buffer;
        out["job_buffer"] = with_location({{"pool", b.pool},
                                           {"capacity", b.capacity},
                                           {"allocated", b.allocated},
                                           {"access", b.access},
                                           {"type", b.type},
                                           {"node_local", b.node_local}},
                                          b.where);
        // What a node-local request asks Slurm for, as sbatch --gres takes it (per node).
        if (b.node_local) {
            out["node_local"] = true;
            out["gres"] = b.gres + ":" + std::to_string(b.gres_count);
        }
    } else {
        out["job_buffer"] = nullptr;
    }
    out["stage_in"] = json::array();
    for (const StageDirective& s : request.stage_in)
        out["stage_in"].push_back(stage_json(s));
    out["stage_out"] = json::array();
    for (const StageDirective& s : request.stage_out)
        out["stage_out"].push_back(stage_json(s));
    json persistent = {
        {"create", json::array()}, {"destroy", json::array()}, {"use", json::array()}};
    for (const PersistentCreate& c : request.create)
        persistent["create"].push_back(with_location({{"name", c.name},
                                                      {"pool", c.pool},
                                                      {"capacity", c.capacity},
                                                      {"allocated", c.allocated},
                                                      {"access", c.access},
                                                      {"type", c.type}},
                                                     c.where));
    for (const PersistentDestroy& d : request.destroy)
        persistent["destroy"].push_back(
            with_location({{"name", d.name}, {"hurry", d.hurry}}, d.where));
    for (const PersistentUse& u : request.use)
        persistent["use"].push_back(with_location({{"name", u.name}}, u.where));
    out["persistent"] = persistent;
    out["swap"] = nullptr;  // swap requests are refused; the field stays for DataWarp tooling
    out["warnings"] = json::array();
    for (const Warning& w : request.warnings)
        out["warnings"].push_back(with_location({{"message", w.message}}, w.where));
    return out;
}

std::string request_text(const Request& request) {
    std::ostringstream out;
    if (!request.has_directive)
        out << "no burst-buffer directives\n";
    if (request.job_buffer) {
        const JobBufferRequest& b = *request.job_buffer;
        out << "job buffer: pool " << b.pool << ", capacity " << format_size(b.capacity)
            << ", allocated " << format_size(b.allocated) << " (" << b.access << ", " << b.type
            << ")  [" << location_text(b.where) << "]\n";
    } else if (request.has_directive) {
        out << "job buffer: none (the stages run without space)\n";
    }
    for (const StageDirective& s : request.stage_in)
        out << stage_text("stage_in", s, true);
    for (const StageDirective& s : request.stage_out)
        out << stage_text("stage_out", s, false);
    for (const PersistentCreate& c : request.create)
        out << "create_persistent: " << c.name << ", pool " << c.pool << ", capacity "
            << format_size(c.capacity) << ", allocated " << format_size(c.allocated) << "  ["
            << location_text(c.where) << "]\n";
    for (const PersistentDestroy& d : request.destroy)
        out << "destroy_persistent: " << d.name << (d.hurry ? " (hurry)" : "") << "  ["
            << location_text(d.where) << "]\n";
    for (const PersistentUse& u : request.use)
        out << "use_persistent: " << u.name << "  [" << location_text(u.where) << "]\n";
    for (const Warning& w : request.warnings)
        out << "warning: " << location_text(w.where) << ": " << w.message << '\n';
    return out.str();
}

json sources_json(const SourceTotals& totals) {
    json skipped = json::array();
    for (const Warning& w : totals.skipped)
        skipped.push_back(with_location({{"message", w.message}}, w.where));
    return {{"bytes", totals.bytes}, {"files", totals.files}, {"skipped", skipped}};
}

std::string sources_text(const SourceTotals& totals) {
    std::ostringstream out;
    const std::string bytes = std::to_string(totals.bytes) + " bytes";
    const std::string size = format_size(totals.bytes);
    out << "stage-in sources: " << counted(totals.files, "entry", "entries") << ", "
        << (size == std::to_string(totals.bytes) ? bytes : size + " (" + bytes + ")")
        << ", all readable\n";
    for (const Warning& w : totals.skipped)
        out << "warning: " << location_text(w.where) << ": " << w.message << '\n';
    return out.str();
}

json config_json(const Config& config, const FileSystemKind* fs) {
    json pools = json::array();
    for (const PoolConfig& p : config.pools)
        pools.push_back({{"name", p.name},
                         {"path", p.path},
                         {"capacity", p.capacity},
                         {"granularity", p.granularity},
                         {"direct_io", p.direct_io},
                         {"syncfs", p.syncfs},
                         {"quota", to_string(p.quota)},
                         {"quota_missing", to_string(p.quota_missing)},
                         {"quota_project_base", p.quota_project_base},
                         {"node_local", p.node_local},
                         {"gres", p.node_local ? json(p.gres) : json()}});
    const json release = config.slurm_release ? json(to_string(*config.slurm_release)) : json();
    json out = {{"source", config.source},
                {"state_dir", config.state_dir},
                {"state_owner", config.state_owner},
                {"state_group", config.state_group},
                {"state_journal", to_string(config.state_journal)},
                {"mode", to_string(config.mode)},
                {"cluster", config.cluster},
                {"directives", config.directives},
                {"default_pool", config.default_pool ? json(*config.default_pool) : json()},
                {"flags", flag_names(config.flags)},
                {"allow_users", config.allow_users},
                {"deny_users", config.deny_users},
                {"allow_root", config.allow_root},
                {"slurm_release", release},
                {"slurm_conf", config.slurm_conf.empty() ? json() : json(config.slurm_conf)},
                {"poll_interval", config.poll_interval},
                {"timeouts",
                 {{"stage_in", config.timeouts.stage_in},
                  {"stage_out", config.timeouts.stage_out},
                  {"other", config.timeouts.other},
                  {"validate", config.timeouts.validate},
                  {"queue", config.timeouts.queue}}},
                {"limits",
                 {{"stage_concurrency", config.limits.stage_concurrency},
                  {"mover_threads", config.limits.mover_threads},
                  {"mover_memory", config.limits.mover_memory},
                  {"script_size", config.limits.script_size},
                  {"user_capacity",
                   config.limits.user_capacity ? json(*config.limits.user_capacity) : json()}}},
                {"pools", pools},
                {"hooks", config.hooks}};
    if (fs != nullptr)
        out["state_dir_file_system"] = {{"name", fs->name}, {"shared", fs->shared}};
    return out;
}

std::string config_text(const Config& config, const FileSystemKind* fs) {
    std::ostringstream out;
    out << "# effective configuration"
        << (config.source.empty() ? "" : " read from " + config.source) << '\n'
        << "state_dir = " << toml_string(config.state_dir) << '\n'
        << "state_owner = " << toml_string(config.state_owner) << '\n'
        << (config.state_group.empty() ? ""
                                       : "state_group = " + toml_string(config.state_group) + "\n")
        << "state_journal = " << toml_string(to_string(config.state_journal)) << '\n'
        << (fs == nullptr
                ? ""
                : "# state_dir file system: " + fs->name +
                      (!fs->unreachable.empty() ? " (" + printable(fs->unreachable) + ")\n"
                       : fs->shared             ? " (shared)\n"
                       : fs->known              ? " (local)\n"
                                                : " (unknown: set state_journal)\n"))
        << "mode = " << toml_string(to_string(config.mode)) << '\n'
        << "cluster = " << toml_string(config.cluster) << '\n'
        << "directives = " << toml_array(config.directives) << '\n';
    if (config.default_pool)
        out << "default_pool = " << toml_string(*config.default_pool) << '\n';
    out << "flags = " << toml_array(flag_names(config.flags)) << '\n'
        << "allow_users = " << toml_array(config.allow_users) << '\n'
        << "deny_users = " << toml_array(config.deny_users) << '\n'
        << "allow_root = " << (config.allow_root ? "true" : "false") << '\n';
    if (config.slurm_release)
        out << "slurm_release = " << toml_string(to_string(*config.slurm_release)) << '\n';
    if (!config.slurm_conf.empty())
        out << "slurm_conf = " << toml_string(config.slurm_conf) << '\n';
    out << "poll_interval = " << config.poll_interval << "\n\n"
        << "[timeouts]\n"
        << "stage_in = " << config.timeouts.stage_in << '\n'
        << "stage_out = " << config.timeouts.stage_out << '\n'
        << "other = " << config.timeouts.other << '\n'
        << "validate = " << config.timeouts.validate << '\n'
        << "queue = " << config.timeouts.queue << "\n\n"
        << "[limits]\n"
        << "stage_concurrency = " << config.limits.stage_concurrency << '\n'
        << "mover_threads = " << config.limits.mover_threads << '\n'
        << "mover_memory = " << toml_string(format_size(config.limits.mover_memory)) << '\n'
        << "script_size = " << toml_string(format_size(config.limits.script_size)) << '\n';
    if (config.limits.user_capacity)
        out << "user_capacity = " << toml_string(format_size(*config.limits.user_capacity)) << '\n';
    for (const PoolConfig& p : config.pools) {
        out << "\n[[pool]]\n"
            << "name = " << toml_string(p.name) << '\n'
            << "path = " << toml_string(p.path) << '\n'
            << "capacity = " << toml_string(format_size(p.capacity)) << '\n'
            << "granularity = " << toml_string(format_size(p.granularity)) << '\n'
            << "direct_io = " << (p.direct_io ? "true" : "false") << '\n'
            << "syncfs = " << (p.syncfs ? "true" : "false") << '\n'
            << "quota = " << toml_string(to_string(p.quota)) << '\n'
            << "quota_missing = " << toml_string(to_string(p.quota_missing)) << '\n'
            << "quota_project_base = " << p.quota_project_base << '\n'
            << "node_local = " << (p.node_local ? "true" : "false") << '\n';
        if (p.node_local)  // the key is refused for other pools
            out << "gres = " << toml_string(p.gres) << '\n';
    }
    if (!config.hooks.empty()) {
        out << "\n[hooks]\n";
        for (const auto& [phase, path] : config.hooks)
            out << phase << " = " << toml_string(path) << '\n';
    }
    return out.str();
}

std::string text_table(const std::vector<Column>& columns,
                       const std::vector<std::vector<std::string>>& rows) {
    std::vector<std::size_t> widths;
    for (const Column& column : columns)
        widths.push_back(column.width.value_or(column.header.size()));
    for (const auto& row : rows)
        for (std::size_t i = 0; i < row.size() && i < columns.size(); ++i)
            if (!columns[i].width)
                widths[i] = std::max(widths[i], row[i].size());
    const auto line = [&](const std::vector<std::string>& cells) {
        std::string out;
        for (std::size_t i = 0; i < cells.size() && i < columns.size(); ++i) {
            const std::string padding(cells[i].size() < widths[i] ? widths[i] - cells[i].size() : 0,
                                      ' ');
            out += (i ? columns[i].gap : "") +
                   (columns[i].left ? cells[i] + padding : padding + cells[i]);
        }
        return out + "\n";
    };
    std::vector<std::string> headers;
    for (const Column& column : columns)
        headers.push_back(column.header);
    std::string out = line(headers);
    for (const auto& row : rows)
        out += line(row);
    return out;
}

std::string pool_list_text(const std::vector<PoolStatus>& pools) {
    std::vector<std::vector<std::string>> rows;
    for (const PoolStatus& p : pools)
        rows.push_back({p.name, format_size(p.total), format_size(p.used), format_size(p.trash),
                        format_size(p.free), format_size(p.granularity), std::to_string(p.queued),
                        to_string(p.availability)});
    return text_table({{"POOL", 16, true},
                       {"TOTAL", 10},
                       {"USED", 10},
                       {"TRASH", 10},
                       {"FREE", 10},
                       {"GRAN", 10},
                       {"QUEUED", 6},
                       {"STATE", 0, true, "  "}},
                      rows);
}

json paths_json(const std::string& lines) {
    json out = json::object();
    std::istringstream in(lines);
    std::string line;
    while (std::getline(in, line)) {
        const std::size_t eq = line.find('=');
        if (eq != std::string::npos)
            out[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return out;
}

std::string counted(std::uint64_t count, const std::string& singular, const std::string& plural) {
    return std::to_string(count) + " " + (count == 1 ? singular : plural);
}

std::string replace_text(const ReplaceResult& result) {
    std::string out = "pool " + result.marker.name + " replaced (uuid " + result.marker.uuid +
                      ", was " + result.old_uuid + "): closed " +
                      counted(result.closed.size(), "buffer", "buffers") + ", released " +
                      format_size(result.bytes_released) + "\n";
    for (const std::string& key : result.closed)
        out += "closed " + key + "\n";
    return out;
}

namespace {

json claim_json(const std::optional<ControllerClaim>& claim) {
    if (!claim)
        return nullptr;
    return {{"epoch", claim->epoch},
            {"host", printable(claim->host)},
            {"since", local_time(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     claim->since.time_since_epoch())
                                     .count())}};
}

}  // namespace

json takeover_json(const Takeover& takeover, const std::string& state_dir) {
    json out = claim_json(takeover.now);
    out["state_dir"] = state_dir;
    out["changed"] = takeover.changed;
    out["before"] = claim_json(takeover.before);
    return out;
}

std::string takeover_text(const Takeover& takeover, const std::string& state_dir) {
    if (!takeover.changed)
        return "this host already holds state directory " + state_dir + " as epoch " +
               std::to_string(takeover.now.epoch) + "\n";
    return "took state directory " + state_dir + " over as epoch " +
           std::to_string(takeover.now.epoch) +
           (takeover.before ? " from " + to_string(*takeover.before) : std::string()) + "\n";
}

json claim_status_json(const ClaimStatus& status, const std::string& state_dir) {
    return {{"state_dir", state_dir},
            {"holds", status.holds},
            {"token", status.token ? json(*status.token) : json(nullptr)},
            {"claim", claim_json(status.claim)}};
}

std::string claim_status_text(const ClaimStatus& status, const std::string& state_dir) {
    if (!status.claim)
        return "no controller holds state directory " + state_dir +
               " (no takeover yet): any host may write it\n";
    if (status.holds)
        return "this host holds state directory " + state_dir + ": " + to_string(*status.claim) +
               "\n";
    return "this host does not hold state directory " + state_dir + ": " +
           to_string(*status.claim) + " does\n";
}

json alloc_json(const AllocResult& result) {
    const Buffer& b = result.buffer;
    json out = {{"key", b.key.str()},
                {"pool", b.pool},
                {"user", b.user},
                {"uid", b.uid},
                {"requested", b.requested_bytes},
                {"allocated", b.allocated_bytes},
                {"path", result.path},
                {"state", to_string(b.state)},
                {"existed", result.already_existed}};
    if (b.key.kind() == BufferKind::job) {
        out["job_id"] = b.key.job_id;
        out["incarnation"] = b.key.incarnation;
    } else {
        out["name"] = b.key.name;
    }
    return out;
}

std::string alloc_text(const AllocResult& result) {
    const Buffer& b = result.buffer;
    std::ostringstream out;
    out << (result.already_existed ? "already allocated: " : "allocated: ") << b.key.str() << " "
        << format_size(b.allocated_bytes) << " in pool " << b.pool << " for " << b.user << " at "
        << result.path << '\n';
    return out.str();
}

json findings_json(const std::vector<Finding>& findings) {
    json out = json::array();
    for (const Finding& f : findings)
        out.push_back({{"kind", to_string(f.kind)},
                       {"pool", f.pool},
                       {"subject", f.subject},
                       {"detail", f.detail},
                       {"repaired", f.repaired}});
    return out;
}

std::string findings_text(const std::vector<Finding>& findings) {
    if (findings.empty())
        return "no findings\n";
    std::ostringstream out;
    for (const Finding& f : findings)
        out << to_string(f.kind) << ": " << (f.pool.empty() ? "" : "pool " + f.pool + ": ")
            << f.subject << (f.detail.empty() ? "" : ": " + f.detail)
            << (f.repaired ? " [repaired]" : "") << '\n';
    return out.str();
}

json health_json(const HealthReport& report) {
    json faults = json::array();
    for (const HealthFault& f : report.faults)
        faults.push_back({{"subject", f.subject}, {"problem", f.problem}});
    return {{"healthy", report.healthy()},
            {"pools", report.pools},
            {"draining", report.draining},
            {"faults", faults}};
}

std::string health_text(const HealthReport& report) {
    std::ostringstream out;
    for (const std::string& pool : report.pools) {
        const bool faulty =
            std::any_of(report.faults.begin(), report.faults.end(),
                        [&](const HealthFault& f) { return f.subject == "pool " + pool; });
        const bool draining = std::find(report.draining.begin(), report.draining.end(), pool) !=
                              report.draining.end();
        out << "pool " << pool << ": " << (faulty ? "FAULT" : "ok")
            << (draining ? " (draining)" : "") << '\n';
    }
    for (const HealthFault& f : report.faults)
        out << f.subject << ": fault: " << f.problem << '\n';
    return out.str();
}

namespace {

double mb_per_s(std::uint64_t bytes, double seconds) {
    return seconds > 0 ? bytes / seconds / 1e6 : 0.0;
}

}  // namespace

json stage_result_json(const StageResult& r) {
    return {{"key", r.key},
            {"nothing_to_do", r.nothing_to_do},
            {"files", r.files},
            {"bytes", r.bytes},
            {"skipped", r.skipped},
            {"seconds", r.seconds},
            {"mb_per_s", mb_per_s(r.bytes, r.seconds)},
            {"phases", r.phases ? phases_json(*r.phases) : json()},
            {"warnings", r.warnings},
            {"note", r.note}};
}

std::string stage_result_text(const StageResult& r, const std::string& phase) {
    if (r.nothing_to_do)
        return phase + " of " + r.key + ": nothing to do" +
               (r.note.empty() ? "" : " (" + r.note + ")") + "\n";
    char line[256];
    std::snprintf(
        line, sizeof line,
        "%s of %s: %s written, %s in %.2f s (%.1f MB/s), %llu already complete\n", phase.c_str(),
        r.key.c_str(), counted(r.files, "file", "files").c_str(),
        (format_size(r.bytes) == std::to_string(r.bytes) ? std::to_string(r.bytes) + " bytes"
                                                         : format_size(r.bytes))
            .c_str(),
        r.seconds, mb_per_s(r.bytes, r.seconds), static_cast<unsigned long long>(r.skipped));
    return line;
}

json end_result_json(const EndResult& r) {
    json j = {{"key", r.key}, {"ran", r.ran}, {"reaped", r.reaped}, {"note", r.note}};
    if (r.ran)
        j["stage_out"] = stage_result_json(r.stage_out);
    return j;
}

std::string end_result_text(const EndResult& r) {
    std::string text;
    if (r.ran)
        text += stage_result_text(r.stage_out, "stage-out");
    TeardownResult ended;
    ended.found = !r.key.empty() && r.note.empty();
    ended.key = r.key;
    ended.reaped = r.reaped;
    ended.note = r.note;
    return text + teardown_text(ended);
}

namespace {

// 1234567 -> "1,234,567": counts of millions of files are read at a glance.
std::string grouped(std::uint64_t n) {
    std::string digits = std::to_string(n);
    for (std::size_t i = digits.size(); i > 3; i -= 3)
        digits.insert(i - 3, ",");
    return digits;
}

std::string duration_text(std::uint64_t seconds) {
    char text[48];
    if (seconds < 120)
        std::snprintf(text, sizeof text, "%llu s", static_cast<unsigned long long>(seconds));
    else if (seconds < 7200)
        std::snprintf(text, sizeof text, "%llu min %02llu s",
                      static_cast<unsigned long long>(seconds / 60),
                      static_cast<unsigned long long>(seconds % 60));
    else
        std::snprintf(text, sizeof text, "%llu h %02llu min",
                      static_cast<unsigned long long>(seconds / 3600),
                      static_cast<unsigned long long>(seconds / 60 % 60));
    return text;
}

std::string files_rate_text(double per_second) {
    if (per_second >= 10)
        return grouped(static_cast<std::uint64_t>(per_second + 0.5)) + " entries/s";
    char text[32];
    std::snprintf(text, sizeof text, "%.1f entries/s", per_second);
    return text;
}

}  // namespace

std::string phases_text(const MovePhases& p) {
    char line[320];
    const double serial = p.before + p.after;
    std::snprintf(
        line, sizeof line,
        "walk %.2f s, wait %.2f s, copy %.2f s, finish %.2f s, sync %.2f s; serial %.2f s "
        "of %.2f s (%.1f%%); workers idle %.0f%% (%u %s)",
        p.walk, p.wait, p.copy, p.finish, p.sync, serial, p.seconds,
        p.seconds > 0 ? 100 * serial / p.seconds : 0.0, 100 * p.idle_share(), p.threads,
        p.threads == 1 ? "thread" : "threads");
    return line;
}

// Entries, as bb-parse --check-sources counts them: files, directories, links and fifos
// (bb-stage's result counts the files it wrote, which leaves directories out).
std::string progress_text(const StagingProgress& p, bool live) {
    std::string text = grouped(p.files_done) + "/" + grouped(p.files_total) + " entries, " +
                       approximate_size(p.bytes_done) + "/" + approximate_size(p.bytes_total);
    if (!live)
        return text;
    if (p.files_per_second)
        text += ", " + files_rate_text(*p.files_per_second);
    if (p.bytes_per_second)
        text += ", " + approximate_size(static_cast<std::uint64_t>(*p.bytes_per_second)) + "/s";
    if (p.eta_seconds)
        text += ", ETA " + duration_text(*p.eta_seconds);
    if (p.phase)
        text += std::string(" (") + to_string(*p.phase) + ")";
    return text;
}

std::string progress_bar(const StagingProgress& p) {
    double done = p.bytes_total
                      ? static_cast<double>(p.bytes_done) / p.bytes_total
                      : (p.files_total ? static_cast<double>(p.files_done) / p.files_total : 1.0);
    done = std::min(done, 1.0);
    const int width = 20;
    std::string bar(static_cast<std::size_t>(done * width), '#');
    bar.resize(width, '.');
    char percent[8];
    std::snprintf(percent, sizeof percent, "%3d%%", static_cast<int>(done * 100));
    // Erase to the end of the line: the text shrinks when a rate or the ETA gets shorter.
    return "\r[" + bar + "] " + percent + "  " + progress_text(p) + "\033[K";
}

namespace {

// "1 entry", "1,234,567 entries".
std::string entries_text(std::uint64_t count) {
    return grouped(count) + (count == 1 ? " entry" : " entries");
}

}  // namespace

json teardown_json(const TeardownResult& result) {
    return {{"found", result.found},
            {"key", result.key},
            {"reaped", result.reaped},
            {"entries_removed", result.entries_removed},
            {"note", result.note}};
}

std::string teardown_text(const TeardownResult& result) {
    if (!result.found)
        return "note: " + result.note + "\n";
    // No count when nothing was removed: the directory was gone already, or the teardown was a
    // stage's end, whose result does not carry it.
    return "torn down: " + result.key +
           (result.reaped ? " (space released)"
                          : " (in trash until bb-pool reap; space still charged)") +
           (result.entries_removed ? ", " + entries_text(result.entries_removed) + " removed"
                                   : "") +
           "\n";
}

json reap_json(const ReapResult& result) {
    return {{"reaped", result.reaped},
            {"remaining", result.remaining},
            {"bytes_released", result.bytes_released},
            {"entries_removed", result.entries_removed}};
}

std::string reap_text(const ReapResult& result) {
    return "reaped " + std::to_string(result.reaped) + " buffer(s), released " +
           format_size(result.bytes_released) + ", " + entries_text(result.entries_removed) +
           " removed" +
           (result.remaining ? ", " + std::to_string(result.remaining) + " left for later" : "") +
           "\n";
}

std::string removal_progress_line(const RemovalProgress& progress) {
    // Erased to the end of the line: the name of the next buffer reaped may be shorter.
    return "\rreaping " + progress.pool + "/" + progress.trash_name + ": " +
           entries_text(progress.removed) + " removed\033[K";
}

}  // namespace bbkit

namespace bbkit {

json reconcile_json(const ReconcileResult& result, bool applied) {
    json orphans = json::array();
    for (const ReconcileEntry& e : result.orphans) {
        const Buffer& b = e.buffer;
        orphans.push_back({{"key", b.key.str()},
                           {"job_id", b.key.job_id},
                           {"user", b.user},
                           {"uid", b.uid},
                           {"pool", b.pool},
                           {"allocated", b.allocated_bytes},
                           {"state", to_string(b.state)},
                           {"torn_down", e.torn_down},
                           {"reason", to_string(e.reason)},
                           {"note", e.note}});
    }
    return {{"checked", result.checked}, {"applied", applied}, {"orphans", orphans}};
}

std::string reconcile_text(const ReconcileResult& result, bool applied) {
    std::ostringstream out;
    const auto label = [](OrphanReason reason) {
        switch (reason) {
            case OrphanReason::pending_in_slurm:
                return "pending in Slurm: ";
            case OrphanReason::ended_in_slurm:
                return "ended in Slurm: ";
            case OrphanReason::unknown_to_slurm:
                break;
        }
        return "unknown to Slurm: ";
    };
    for (const ReconcileEntry& e : result.orphans) {
        const Buffer& b = e.buffer;
        out << (applied ? (e.torn_down ? "torn down: " : "NOT torn down: ") : label(e.reason))
            << b.key.str() << " (job " << b.key.job_id << ", user " << b.user << ", pool " << b.pool
            << ", " << format_size(b.allocated_bytes) << ", " << to_string(b.state) << ")";
        if (!e.note.empty())
            out << ": " << e.note;
        out << '\n';
    }
    out << result.checked << " job buffer(s) checked, "
        << result.count(OrphanReason::unknown_to_slurm) << " unknown to Slurm";
    if (const std::size_t lost = result.count(OrphanReason::pending_in_slurm); lost > 0)
        out << ", " << lost << " pending in Slurm (its buffer lost)";
    if (const std::size_t ended = result.count(OrphanReason::ended_in_slurm); ended > 0)
        out << ", " << ended << " ended in Slurm before it ran";
    if (!applied && !result.orphans.empty())
        out << " (--apply tears them down)";
    out << '\n';
    return out.str();
}

}  // namespace bbkit
