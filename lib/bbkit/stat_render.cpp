#include "bbkit/stat_render.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bbkit/access.hpp"
#include "bbkit/dws_render.hpp"
#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/render.hpp"
#include "bbkit/size.hpp"
#include "bbkit/slurm_release.hpp"
#include "bbkit/stage_plan.hpp"
#include "bbkit/text.hpp"

namespace bbkit {
namespace {

using nlohmann::json;

std::string user_of(const Buffer& buffer) {
    const std::string name = buffer.user.empty() ? std::to_string(buffer.uid) : buffer.user;
    return name + "(" + std::to_string(buffer.uid) + ")";
}

std::string seconds_text(double seconds) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3fs", seconds);
    return text;
}

struct Phase {
    BufferState state;
    TimePoint entered;
    double seconds;  // until the next phase, or until now for the current one
};

std::vector<Phase> phases_of(const Buffer& buffer, TimePoint now) {
    std::vector<Phase> phases;
    for (const auto& [state, time] : buffer.entered)
        phases.push_back({state, time, 0});
    std::stable_sort(phases.begin(), phases.end(),
                     [](const Phase& a, const Phase& b) { return a.entered < b.entered; });
    for (std::size_t i = 0; i < phases.size(); ++i) {
        const TimePoint end = i + 1 < phases.size()       ? phases[i + 1].entered
                              : is_final(phases[i].state) ? phases[i].entered
                                                          : now;
        phases[i].seconds =
            std::max(0.0, std::chrono::duration<double>(end - phases[i].entered).count());
    }
    return phases;
}

std::string escape_label(const std::string& value) {
    std::string out;
    for (char c : value) {
        if (c == '\\' || c == '"')
            out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out;
}

bool is_active(BufferState state) {
    return state == BufferState::pre_run || state == BufferState::running ||
           state == BufferState::post_run;
}

// dwstat's layout: every column right-aligned and as wide as its widest cell.
std::string dwstat_table(const std::vector<std::string>& headers,
                         const std::vector<std::vector<std::string>>& rows) {
    std::vector<Column> columns;
    for (const std::string& header : headers)
        columns.push_back({header});
    return text_table(columns, rows);
}

}  // namespace

// ---- dwstat -------------------------------------------------------------------------------

std::string dwstat_state(const Buffer& buffer) {
    const BufferState s = buffer.state;
    const bool ending = s == BufferState::teardown || s == BufferState::teardown_fail ||
                        s == BufferState::deleting || is_final(s);
    std::string flags = "-----";
    if (s != BufferState::pending)
        flags[0] = 'C';
    if (holds_space(s) && !ending)
        flags[1] = 'A';
    if (ending)
        flags[2] = 'D';
    if (s == BufferState::teardown_fail)
        flags[3] = 'T';
    if (buffer.reason == "BurstBufferOperation")
        flags[4] = 'F';
    return flags;
}

std::string pools_table(const std::vector<PoolStatus>& pools) {
    std::vector<std::vector<std::string>> rows;
    for (const PoolStatus& pool : pools)
        rows.push_back({pool.name, "bytes", format_size(pool.total), format_size(pool.free),
                        format_size(pool.granularity), to_string(pool.availability)});
    // state: bbkit's column after dwstat's five (bb-stat(1)).
    return dwstat_table({"pool", "units", "quantity", "free", "gran", "state"}, rows);
}

std::string gres_table(const std::vector<GresCount>& counts) {
    std::vector<std::vector<std::string>> rows;
    for (const GresCount& c : counts)
        rows.push_back({c.pool, c.gres, std::to_string(c.units), std::to_string(c.held),
                        std::to_string(c.count),
                        c.slurm ? std::to_string(*c.slurm) + (c.agrees() ? "" : "*") : "-"});
    return dwstat_table({"pool", "gres", "units", "held", "count", "slurm"}, rows);
}

nlohmann::json gres_json(const std::vector<GresCount>& counts) {
    nlohmann::json list = nlohmann::json::array();
    for (const GresCount& c : counts) {
        nlohmann::json row{{"pool", c.pool}, {"gres", c.gres},   {"units", c.units},
                           {"held", c.held}, {"count", c.count}, {"agrees", c.agrees()}};
        row["slurm"] = c.slurm ? nlohmann::json(*c.slurm) : nlohmann::json(nullptr);
        list.push_back(row);
    }
    return nlohmann::json{{"gres", list}};
}

namespace {

std::string expiration_of(const Buffer& buffer) {
    return buffer.expires ? slurm_time(*buffer.expires) : "never";
}

std::string access_type_of(const Buffer& buffer) {
    return buffer.access == "private" ? "private" : "stripe";
}

std::string type_of(const Buffer& buffer) {
    return buffer.type.empty() ? "scratch" : buffer.type;
}

// One activation per job buffer being used (pre-run to post-run) and configuration it
// activates: its own, and each persistent buffer it uses (from its recorded request; a reader
// of public/ sees only the first).
struct Activation {
    const Buffer* job;
    const Buffer* configuration;
};

std::vector<Activation> activations(const std::vector<BufferStatus>& buffers) {
    std::map<std::string, const Buffer*> persistent;
    for (const BufferStatus& status : buffers)
        if (status.buffer.key.kind() == BufferKind::persistent)
            persistent[status.buffer.key.name] = &status.buffer;
    std::vector<Activation> list;
    for (const BufferStatus& status : buffers) {
        const Buffer& b = status.buffer;
        if (b.key.kind() != BufferKind::job || !is_active(b.state))
            continue;
        if (has_dws_instance(b))
            list.push_back({&b, &b});
        for (const std::string& name : recorded_persistent_uses(b.staging))
            if (auto it = persistent.find(name); it != persistent.end())
                list.push_back({&b, it->second});
    }
    return list;
}

}  // namespace

std::string age_text(std::chrono::seconds age) {
    const long long s = std::max<long long>(0, age.count());
    char text[32];
    if (s < 60)
        std::snprintf(text, sizeof text, "%llds", s);
    else if (s < 3600)
        std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
    else if (s < 86400)
        std::snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, s % 3600 / 60);
    else
        std::snprintf(text, sizeof text, "%lldd%02lldh", s / 86400, s % 86400 / 3600);
    return text;
}

std::string buffer_reason(const BufferStatus& status) {
    const Buffer& b = status.buffer;
    if (const std::string stalled = stalled_stage_text(b); !stalled.empty())
        return "stalled: " + stalled;
    if (status.queue_position)
        return "waiting for space in " + b.pool + ", " + std::to_string(*status.queue_position) +
               (*status.queue_position == 1 ? " (next)" : "") + " in its queue";
    if (!b.failure.empty())
        return "failed: " + b.failure;
    const std::string reason = slurm_reason(b);
    return reason == "None" ? std::string() : reason;
}

namespace {

std::chrono::seconds age_of(const Buffer& b, TimePoint now) {
    return std::chrono::duration_cast<std::chrono::seconds>(now - b.created);
}

// Per pool with a queue, in configuration order: its waiting buffers' tokens in queue order.
std::vector<std::pair<std::string, std::vector<std::string>>> waiting_by_pool(
    const StatusSnapshot& snapshot) {
    std::vector<std::pair<std::string, std::vector<std::string>>> out;
    for (const PoolStatus& pool : snapshot.pools) {
        std::vector<std::pair<std::size_t, std::string>> waiting;
        for (const BufferStatus& status : snapshot.buffers)
            if (status.queue_position && status.buffer.pool == pool.name)
                waiting.emplace_back(*status.queue_position, token_of(status.buffer));
        if (waiting.empty())
            continue;
        std::sort(waiting.begin(), waiting.end());
        std::vector<std::string> tokens;
        for (auto& entry : waiting)
            tokens.push_back(std::move(entry.second));
        out.emplace_back(pool.name, std::move(tokens));
    }
    return out;
}

}  // namespace

std::string buffers_table(const StatusSnapshot& snapshot, TimePoint now) {
    std::vector<std::vector<std::string>> rows;
    for (const BufferStatus& status : snapshot.buffers) {
        const Buffer& b = status.buffer;
        rows.push_back({token_of(b), user_of(b), b.pool, format_size(b.allocated_bytes),
                        to_string(b.state), age_text(age_of(b, now)),
                        printable(buffer_reason(status))});
    }
    std::vector<Column> columns{{"job"},   {"user"}, {"pool"},  {"size"},
                                {"state"}, {"age"},  {"reason"}};
    for (Column& column : columns)
        column.left = column.header != "job" && column.header != "size" && column.header != "age";
    for (std::size_t i = 1; i < columns.size(); ++i)
        columns[i].gap = "  ";
    // The reason, last and of any length, pads no line with blanks.
    std::string out;
    std::istringstream table(text_table(columns, rows));
    for (std::string line; std::getline(table, line);)
        out += line.erase(line.find_last_not_of(' ') + 1) + '\n';
    for (const auto& [pool, tokens] : waiting_by_pool(snapshot)) {
        out += "pool " + pool + ": " + std::to_string(tokens.size()) + " waiting:";
        for (const std::string& token : tokens)
            out += " " + printable(token);
        out += '\n';
    }
    return out;
}

json buffers_json(const StatusSnapshot& snapshot, TimePoint now) {
    json buffers = json::array();
    for (const BufferStatus& status : snapshot.buffers) {
        const Buffer& b = status.buffer;
        const bool job = b.key.kind() == BufferKind::job;
        buffers.push_back(
            {{"job_id", job ? json(b.key.job_id) : json()},
             {"name", job ? json() : json(b.key.name)},
             {"user", b.user},
             {"uid", b.uid},
             {"pool", b.pool},
             {"allocated", b.allocated_bytes},
             {"state", to_string(b.state)},
             {"created", slurm_time(b.created)},
             {"age_seconds", age_of(b, now).count()},
             {"reason", buffer_reason(status)},
             {"stalled", stage_stalled(b)},
             {"queue_position", status.queue_position ? json(*status.queue_position) : json()}});
    }
    json waiting = json::object();
    for (const auto& [pool, tokens] : waiting_by_pool(snapshot))
        waiting[pool] = tokens;
    return {{"buffers", buffers}, {"waiting", waiting}};
}

std::string sessions_table(const std::vector<BufferStatus>& buffers) {
    std::vector<std::vector<std::string>> rows;
    for (const BufferStatus& status : buffers) {
        const Buffer& b = status.buffer;
        rows.push_back({std::to_string(b.record_id), dwstat_state(b), token_of(b), "bbkit",
                        std::to_string(b.uid), slurm_time(b.created), expiration_of(b), "0"});
    }
    return dwstat_table(
        {"sess", "state", "token", "creator", "owner", "created", "expiration", "nodes"}, rows);
}

namespace {

// One row per DataWarp instance, in either layout: bb-stat's own (sizes as bbkit writes them,
// true/false) or DataWarp's (its sizes, intact, public/private).
std::vector<std::vector<std::string>> instance_rows(const std::vector<BufferStatus>& buffers,
                                                    bool dwstat_layout) {
    std::vector<std::vector<std::string>> rows;
    for (const BufferStatus& status : buffers) {
        const Buffer& b = status.buffer;
        if (!has_dws_instance(b))
            continue;
        const std::string id = std::to_string(b.record_id);
        const bool persistent = b.key.kind() == BufferKind::persistent;
        rows.push_back(
            {id, dwstat_state(b), id,
             dwstat_layout ? dwstat_size(b.allocated_bytes) : format_size(b.allocated_bytes), "0",
             slurm_time(b.created), expiration_of(b), dwstat_layout ? "intact" : "true",
             token_of(b),
             dwstat_layout ? (persistent ? "public" : "private") : (persistent ? "true" : "false"),
             "1"});
    }
    return rows;
}

const std::vector<std::string> instance_columns = {"inst",  "state",   "sess",       "bytes",
                                                   "nodes", "created", "expiration", "intact",
                                                   "label", "public",  "confs"};

}  // namespace

std::string instances_table(const std::vector<BufferStatus>& buffers) {
    return dwstat_table(instance_columns, instance_rows(buffers, false));
}

std::string configurations_table(const std::vector<BufferStatus>& buffers) {
    std::vector<std::vector<std::string>> rows;
    for (const BufferStatus& status : buffers) {
        const Buffer& b = status.buffer;
        if (!has_dws_instance(b))
            continue;
        const std::string id = std::to_string(b.record_id);
        rows.push_back({id, dwstat_state(b), id, type_of(b), access_type_of(b),
                        std::to_string(activations_of(b))});
    }
    return dwstat_table({"conf", "state", "inst", "type", "access_type", "activs"}, rows);
}

std::string activations_table(const std::vector<BufferStatus>& buffers) {
    std::vector<std::vector<std::string>> rows;
    std::size_t id = 0;
    for (const Activation& a : activations(buffers))
        rows.push_back({std::to_string(++id), dwstat_state(*a.job),
                        std::to_string(a.job->record_id),
                        std::to_string(a.configuration->record_id), "0"});
    return dwstat_table({"activ", "state", "sess", "conf", "nodes"}, rows);
}

// ---- dwstat as DataWarp printed it -----------------------------------------------------------

std::string dwstat_size(std::uint64_t bytes) {
    static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    std::size_t unit = 0;
    long double value = static_cast<long double>(bytes);
    while (value >= 1024.0L && unit + 1 < sizeof units / sizeof units[0]) {
        value /= 1024.0L;
        ++unit;
    }
    // Two decimals, rounded half up; 1023.996KiB rounds to the next unit's 1.
    unsigned long long hundredths = static_cast<unsigned long long>(value * 100.0L + 0.5L);
    if (hundredths >= 102400ULL && unit + 1 < sizeof units / sizeof units[0]) {
        hundredths = 100;
        ++unit;
    }
    std::string text = std::to_string(hundredths / 100);
    if (const unsigned long long fraction = hundredths % 100; fraction != 0) {
        text += fraction < 10 ? ".0" + std::to_string(fraction) : "." + std::to_string(fraction);
        if (text.back() == '0')
            text.pop_back();
    }
    return text + units[unit];
}

namespace {

using Rows = std::vector<std::vector<std::string>>;

// DataWarp's dwstat printed a line naming what it did not find instead of an empty table.
std::string dwstat_table_or(const std::vector<std::string>& headers, const Rows& rows,
                            const std::string& none) {
    return rows.empty() ? none + "\n" : dwstat_table(headers, rows);
}

std::string dwstat_pools(const std::vector<PoolStatus>& pools) {
    Rows rows;
    for (const PoolStatus& pool : pools)
        rows.push_back({pool.name, "bytes", dwstat_size(pool.total), dwstat_size(pool.free),
                        dwstat_size(pool.granularity)});
    return dwstat_table_or({"pool", "units", "quantity", "free", "gran"}, rows, "no pools");
}

std::string dwstat_sessions(const std::vector<BufferStatus>& buffers) {
    Rows rows;
    for (const BufferStatus& status : buffers) {
        const Buffer& b = status.buffer;
        rows.push_back({std::to_string(b.record_id), dwstat_state(b), token_of(b), "bbkit",
                        std::to_string(b.uid), slurm_time(b.created), expiration_of(b), "0"});
    }
    return dwstat_table_or(
        {"sess", "state", "token", "creator", "owner", "created", "expiration", "nodes"}, rows,
        "no sessions");
}

std::string dwstat_instances(const std::vector<BufferStatus>& buffers) {
    return dwstat_table_or(instance_columns, instance_rows(buffers, true), "no instances");
}

std::string dwstat_configurations(const std::vector<BufferStatus>& buffers) {
    Rows rows;
    for (const BufferStatus& status : buffers) {
        const Buffer& b = status.buffer;
        if (!has_dws_instance(b))
            continue;
        const std::string id = std::to_string(b.record_id);
        rows.push_back({id, dwstat_state(b), id, type_of(b), access_type_of(b),
                        std::to_string(activations_of(b))});
    }
    return dwstat_table_or({"conf", "state", "inst", "type", "access_type", "activs"}, rows,
                           "no scratch, cache, swap configurations");
}

std::string dwstat_activations(const std::vector<BufferStatus>& buffers) {
    Rows rows;
    std::size_t id = 0;
    for (const Activation& a : activations(buffers))
        rows.push_back({std::to_string(++id), dwstat_state(*a.job),
                        std::to_string(a.job->record_id),
                        std::to_string(a.configuration->record_id), "0"});
    return dwstat_table_or({"activ", "state", "sess", "conf", "nodes"}, rows, "no activations");
}

}  // namespace

const std::vector<std::string>& dwstat_views() {
    static const std::vector<std::string> views{
        "pools", "sessions", "instances", "configurations", "activations", "most", "all"};
    return views;
}

std::string dwstat_text(const std::string& view, const StatusSnapshot& snapshot) {
    if (view == "pools")
        return dwstat_pools(snapshot.pools);
    if (view == "sessions")
        return dwstat_sessions(snapshot.buffers);
    if (view == "instances")
        return dwstat_instances(snapshot.buffers);
    if (view == "configurations")
        return dwstat_configurations(snapshot.buffers);
    if (view == "activations")
        return dwstat_activations(snapshot.buffers);
    if (view == "most" || view == "all")
        return dwstat_pools(snapshot.pools) + "\n" + dwstat_sessions(snapshot.buffers) + "\n" +
               dwstat_instances(snapshot.buffers) + "\n" + dwstat_configurations(snapshot.buffers) +
               "\n" + dwstat_activations(snapshot.buffers);
    throw Error(ExitCode::usage, "unknown dwstat view '" + printable(view) +
                                     "' (pools, sessions, instances, configurations, activations, "
                                     "most or all)");
}

json activations_json(const std::vector<BufferStatus>& buffers) {
    json list = json::array();
    std::size_t id = 0;
    for (const Activation& a : activations(buffers))
        list.push_back({{"activ", ++id},
                        {"state", dwstat_state(*a.job)},
                        {"sess", a.job->record_id},
                        {"conf", a.configuration->record_id},
                        {"token", token_of(*a.job)},
                        {"configuration", token_of(*a.configuration)},
                        {"nodes", 0}});
    return list;
}

json sessions_json(const std::vector<BufferStatus>& buffers) {
    json list = json::array();
    for (const BufferStatus& status : buffers) {
        const Buffer& b = status.buffer;
        list.push_back({{"sess", b.record_id},
                        {"state", dwstat_state(b)},
                        {"token", token_of(b)},
                        {"key", b.key.str()},
                        {"creator", "bbkit"},
                        {"owner", b.uid},
                        {"created", slurm_time(b.created)},
                        {"expiration", b.expires ? json(slurm_time(*b.expires)) : json()},
                        {"nodes", 0}});
    }
    return list;
}

json instances_json(const std::vector<BufferStatus>& buffers) {
    json list = json::array();
    for (const BufferStatus& status : buffers) {
        const Buffer& b = status.buffer;
        if (!has_dws_instance(b))
            continue;
        list.push_back({{"inst", b.record_id},
                        {"state", dwstat_state(b)},
                        {"sess", b.record_id},
                        {"bytes", b.allocated_bytes},
                        {"nodes", 0},
                        {"created", slurm_time(b.created)},
                        {"expiration", b.expires ? json(slurm_time(*b.expires)) : json()},
                        {"intact", true},
                        {"label", token_of(b)},
                        {"public", b.key.kind() == BufferKind::persistent},
                        {"confs", 1}});
    }
    return list;
}

json configurations_json(const std::vector<BufferStatus>& buffers) {
    json list = json::array();
    for (const BufferStatus& status : buffers) {
        const Buffer& b = status.buffer;
        if (!has_dws_instance(b))
            continue;
        list.push_back({{"conf", b.record_id},
                        {"state", dwstat_state(b)},
                        {"inst", b.record_id},
                        {"type", type_of(b)},
                        {"access_type", access_type_of(b)},
                        {"activs", activations_of(b)}});
    }
    return list;
}

// ---- scontrol show burst ------------------------------------------------------------------

namespace {

// Buffers Slurm lists under "Allocated Buffers:": those holding space, newest first.
std::vector<const Buffer*> allocated_buffers(const StatusSnapshot& snapshot) {
    std::vector<const Buffer*> buffers;
    for (const BufferStatus& status : snapshot.buffers)
        if (holds_space(status.buffer.state))
            buffers.push_back(&status.buffer);
    std::stable_sort(buffers.begin(), buffers.end(),
                     [](const Buffer* a, const Buffer* b) { return a->created > b->created; });
    return buffers;
}

struct UserUse {
    std::string name;
    std::uint64_t used = 0;
};

// Summed across pools, as Slurm does.
std::map<uid_t, UserUse> use_by_user(const std::vector<const Buffer*>& buffers) {
    std::map<uid_t, UserUse> users;
    for (const Buffer* b : buffers) {
        UserUse& use = users[b->uid];
        use.name = b->user.empty() ? std::to_string(b->uid) : b->user;
        use.used += b->allocated_bytes;
    }
    return users;
}

}  // namespace

// Slurm's lines in the layout of the configured release; bbkit adds nothing to them (sites
// grep this text): the pools' availability is in burst_json and bbkit's own tables.
std::string burst_text(const StatusSnapshot& snapshot, const Config& config) {
    const BurstLayout layout = burst_layout(config.slurm_release);
    std::string out = "Name=bbkit DefaultPool=" + config.default_pool.value_or("(null)") +
                      " Granularity=1 TotalSpace=0 FreeSpace=0 UsedSpace=0\n";
    for (std::size_t i = 0; i < snapshot.pools.size(); ++i) {
        const PoolStatus& pool = snapshot.pools[i];
        out += "  " + layout.pool_key + "[" + std::to_string(i) + "]=" + pool.name +
               " Granularity=" + format_size(pool.granularity) +
               " TotalSpace=" + format_size(pool.total) + " FreeSpace=" + format_size(pool.free) +
               " UsedSpace=" + format_size(pool.used) + "\n";
    }
    out += "  Flags=" + join(flag_names(config.flags), ",") + "\n";
    if (layout.poll_interval)
        out += "  PollInterval=" + std::to_string(config.poll_interval) + "\n";
    const Timeouts& t = config.timeouts;
    out += "  StageInTimeout=" + std::to_string(t.stage_in) +
           " StageOutTimeout=" + std::to_string(t.stage_out) +
           " ValidateTimeout=" + std::to_string(t.validate) +
           " OtherTimeout=" + std::to_string(t.other) + "\n";
    if (!config.allow_users.empty())
        out += "  AllowUsers=" + join(config.allow_users, ",") + "\n";
    else if (!config.deny_users.empty())
        out += "  DenyUsers=" + join(config.deny_users, ",") + "\n";
    out += "  GetSysState=(null)\n  GetSysStatus=(null)\n";

    const std::vector<const Buffer*> buffers = allocated_buffers(snapshot);
    if (!buffers.empty())
        out += "  Allocated Buffers:\n";
    for (const Buffer* b : buffers)
        out += std::string("    ") + (b->key.kind() == BufferKind::job ? "JobID=" : "Name=") +
               token_of(*b) + " CreateTime=" + slurm_time(b->created) + " Pool=" + b->pool +
               " Size=" + format_size(b->allocated_bytes) + " State=" + to_string(b->state) +
               " UserID=" + user_of(*b) + "\n";
    const auto users = use_by_user(buffers);
    if (!users.empty())
        out += "  Per User Buffer Use:\n";
    for (const auto& [uid, use] : users)
        out += "    UserID=" + use.name + "(" + std::to_string(uid) +
               ") Used=" + format_size(use.used) + "\n";
    return out;
}

json burst_json(const StatusSnapshot& snapshot, const Config& config) {
    json pools = json::array();
    for (const PoolStatus& pool : snapshot.pools)
        pools.push_back({{"name", pool.name},
                         {"granularity", pool.granularity},
                         {"total", pool.total},
                         {"free", pool.free},
                         {"used", pool.used},
                         {"availability", to_string(pool.availability)}});
    const std::vector<const Buffer*> allocated = allocated_buffers(snapshot);
    json buffers = json::array();
    for (const Buffer* b : allocated) {
        const bool job = b->key.kind() == BufferKind::job;
        buffers.push_back({{"job_id", job ? json(b->key.job_id) : json()},
                           {"name", job ? json() : json(b->key.name)},
                           {"created", slurm_time(b->created)},
                           {"pool", b->pool},
                           {"size", b->allocated_bytes},
                           {"state", to_string(b->state)},
                           {"user", b->user},
                           {"uid", b->uid}});
    }
    json users = json::array();
    for (const auto& [uid, use] : use_by_user(allocated))
        users.push_back({{"user", use.name}, {"uid", uid}, {"used", use.used}});
    const Timeouts& t = config.timeouts;
    return {{"name", "bbkit"},
            {"default_pool", config.default_pool ? json(*config.default_pool) : json()},
            {"pools", pools},
            {"flags", flag_names(config.flags)},
            {"timeouts",
             {{"stage_in", t.stage_in},
              {"stage_out", t.stage_out},
              {"validate", t.validate},
              {"other", t.other}}},
            {"poll_interval", config.poll_interval},
            {"allow_users", config.allow_users},
            {"deny_users", config.deny_users},
            {"buffers", buffers},
            {"users", users}};
}

// ---- bb-stat job --------------------------------------------------------------------------

namespace {

// The record as the stager wrote it (what a poller of progress/ reads), times as everywhere
// else in this view; unknown values are null.
json progress_json(const StagingProgress& p) {
    auto known = [](const auto& value) { return value ? json(*value) : json(); };
    return {{"direction", p.direction ? json(to_string(*p.direction)) : json()},
            {"phase", p.phase ? json(to_string(*p.phase)) : json()},
            {"files_done", p.files_done},
            {"files_total", p.files_total},
            {"bytes_done", p.bytes_done},
            {"bytes_total", p.bytes_total},
            {"files_per_second", known(p.files_per_second)},
            {"bytes_per_second", known(p.bytes_per_second)},
            {"eta_seconds", known(p.eta_seconds)},
            {"started", p.started ? json(slurm_time(*p.started)) : json()},
            {"updated", p.updated ? json(slurm_time(*p.updated)) : json()},
            {"pid", known(p.pid)},
            {"phases", p.phases ? phases_json(*p.phases) : json()},
            {"transfer", p.transfer ? transfer_place_json(*p.transfer) : json()}};
}

}  // namespace

std::string job_text(const JobStatus& job, TimePoint now) {
    const Buffer& b = job.status.buffer;
    std::ostringstream out;
    auto field = [&](const std::string& name, const std::string& value) {
        out << name << ':' << std::string(name.size() < 11 ? 11 - name.size() : 1, ' ')
            << printable(value) << '\n';
    };
    field("job", token_of(b));
    field("buffer", b.key.str());
    field("state", to_string(b.state));
    field("reason", slurm_reason(b));
    if (!b.message.empty())
        field("message", b.message);
    if (b.run_lock_holder && b.run_lock_holder->alive())
        field("stager", "pid " + std::to_string(b.run_lock_holder->pid));
    else if (const std::string stalled = stalled_stage_text(b); !stalled.empty())
        field("stager", "none: " + stalled);
    if (!b.failure.empty())
        field("failure", (b.failed ? slurm_time(*b.failed) + " " : std::string()) + b.failure);
    if (job.status.queue_position)
        field("queue", std::to_string(*job.status.queue_position));
    field("pool", b.pool);
    if (const auto nodes = recorded_nodes(b.staging))  // a node-local pool's buffer
        field("node", nodes->name + " (" + std::to_string(nodes->index + 1) + " of " +
                          std::to_string(nodes->count) + " of the job's nodes)");
    field("requested", format_size(b.requested_bytes));
    field("allocated", format_size(b.allocated_bytes));
    if (job.status.used_bytes)
        field("used", std::to_string(*job.status.used_bytes) + " bytes (project quota)");
    field("directory", job.status.path);
    field("user", user_of(b));
    field("created", slurm_time(b.created));
    if (job.progress) {
        // The record outlives its stage: its pace means something only while a stager runs it.
        const bool staging =
            b.state == BufferState::staging_in || b.state == BufferState::staging_out;
        field("progress", progress_text(*job.progress, staging && !stage_stalled(b)));
        if (job.progress->phases)
            field("mover", phases_text(*job.progress->phases));
        if (const auto& place = job.progress->transfer) {  // STAGING ON TRANSFER NODES
            field("transfer",
                  "job " + std::to_string(place->job_id) +
                      (place->nodes.empty() ? std::string(" (pending)") : " on " + place->nodes));
            for (const std::string& part : place->parts)
                out << "  " << printable(part) << '\n';
        }
    }
    out << "phases:\n";
    for (const Phase& phase : phases_of(b, now)) {
        const std::string name = to_string(phase.state);
        out << "  " << name << std::string(name.size() < 14 ? 14 - name.size() : 1, ' ')
            << slurm_time(phase.entered) << "  " << seconds_text(phase.seconds) << '\n';
    }
    return out.str();
}

json job_json(const JobStatus& job, TimePoint now) {
    json out = buffer_status_json(job.status);
    // Times a person or a script reads are Slurm's ISO 8601 form, as everywhere else in bbkit's
    // JSON (bb-stat(1), JSON); only public/'s own files keep epoch seconds.
    const Buffer& b = job.status.buffer;
    out["created"] = slurm_time(b.created);
    out["expires"] = b.expires ? json(slurm_time(*b.expires)) : json();
    json entered = json::object();
    for (const auto& [state, time] : b.entered)
        entered[to_string(state)] = slurm_time(time);
    out["entered"] = entered;
    out["failed"] = b.failed ? json(slurm_time(*b.failed)) : json();
    out["stalled"] = stage_stalled(b);
    out["used_bytes"] = job.status.used_bytes ? json(*job.status.used_bytes) : json();
    const auto nodes = recorded_nodes(b.staging);
    out["node"] =
        nodes ? json{{"name", nodes->name}, {"index", nodes->index}, {"count", nodes->count}}
              : json();
    if (job.progress)
        out["progress"] = progress_json(*job.progress);
    else
        out["progress"] = nullptr;
    json phases = json::array();
    for (const Phase& phase : phases_of(job.status.buffer, now))
        phases.push_back({{"state", to_string(phase.state)},
                          {"entered", slurm_time(phase.entered)},
                          {"seconds", phase.seconds}});
    out["phases"] = phases;
    return out;
}

// ---- Prometheus ---------------------------------------------------------------------------

// How every metrics file bb-stat writes begins, and how it knows one it wrote before.
constexpr std::string_view prometheus_first_line = "# HELP bbkit_";

std::string prometheus_text(const StatusSnapshot& snapshot, const Config& config) {
    std::ostringstream out;
    out << prometheus_first_line << "pool_bytes Burst buffer pool space in bytes, by kind.\n"
        << "# TYPE bbkit_pool_bytes gauge\n";
    for (const PoolStatus& pool : snapshot.pools) {
        const std::string label = "{pool=\"" + escape_label(pool.name) + "\",kind=\"";
        out << "bbkit_pool_bytes" << label << "total\"} " << pool.total << '\n'
            << "bbkit_pool_bytes" << label << "used\"} " << pool.used << '\n'
            << "bbkit_pool_bytes" << label << "trash\"} " << pool.trash << '\n'
            << "bbkit_pool_bytes" << label << "free\"} " << pool.free << '\n';
    }
    // Live states only: complete and deleted records are history, and a count of them would
    // grow for as long as the state directory lives.
    out << "# HELP bbkit_buffers Live burst buffers by state.\n"
        << "# TYPE bbkit_buffers gauge\n";
    for (BufferState state : all_buffer_states()) {
        if (is_final(state))
            continue;
        const auto it = snapshot.counts.find(state);
        out << "bbkit_buffers{state=\"" << to_string(state) << "\"} "
            << (it == snapshot.counts.end() ? 0 : it->second) << '\n';
    }
    out << "# HELP bbkit_pool_queue_length Requests waiting in the pool's queue.\n"
        << "# TYPE bbkit_pool_queue_length gauge\n";
    for (const PoolStatus& pool : snapshot.pools)
        out << "bbkit_pool_queue_length{pool=\"" << escape_label(pool.name) << "\"} " << pool.queued
            << '\n';
    out << "# HELP bbkit_pool_draining 1 while the pool is draining, else 0.\n"
        << "# TYPE bbkit_pool_draining gauge\n";
    for (const PoolStatus& pool : snapshot.pools)
        out << "bbkit_pool_draining{pool=\"" << escape_label(pool.name) << "\"} "
            << (pool.draining ? 1 : 0) << '\n';
    out << "# HELP bbkit_pool_availability 1 for the pool's availability (up, draining, "
           "unavailable, uninitialised), 0 for the others.\n"
        << "# TYPE bbkit_pool_availability gauge\n";
    for (const PoolStatus& pool : snapshot.pools)
        for (PoolAvailability a : {PoolAvailability::up, PoolAvailability::draining,
                                   PoolAvailability::unavailable, PoolAvailability::uninitialised})
            out << "bbkit_pool_availability{pool=\"" << escape_label(pool.name)
                << "\",availability=\"" << to_string(a) << "\"} "
                << (pool.availability == a ? 1 : 0) << '\n';
    // What an alert watches for: stages nobody runs any more, failures, and queues that do not
    // move. Counts per pool, so that they name no buffer (the file is world-readable).
    std::map<std::string, std::size_t> stalled_in, stalled_out, failed;
    std::map<std::string, double> oldest_pending;
    const TimePoint now = std::chrono::system_clock::now();
    for (const BufferStatus& status : snapshot.buffers) {
        const Buffer& b = status.buffer;
        if (stage_stalled(b))
            ++(b.state == BufferState::staging_out ? stalled_out : stalled_in)[b.pool];
        if (!b.failure.empty())
            ++failed[b.pool];
        if (b.state == BufferState::pending) {
            const double waited =
                std::max(0.0, std::chrono::duration<double>(now - b.created).count());
            oldest_pending[b.pool] = std::max(oldest_pending[b.pool], waited);
        }
    }
    const auto count_of = [](const std::map<std::string, std::size_t>& counts,
                             const std::string& pool) {
        const auto it = counts.find(pool);
        return it == counts.end() ? std::size_t{0} : it->second;
    };
    out << "# HELP bbkit_stages_stalled Stage-ins and stage-outs nobody runs any more (their "
           "stager failed or died): bb-stage resumes one, bb-teardown ends it.\n"
        << "# TYPE bbkit_stages_stalled gauge\n";
    for (const PoolStatus& pool : snapshot.pools) {
        const std::string label = "{pool=\"" + escape_label(pool.name) + "\",direction=\"";
        out << "bbkit_stages_stalled" << label << "in\"} " << count_of(stalled_in, pool.name)
            << '\n'
            << "bbkit_stages_stalled" << label << "out\"} " << count_of(stalled_out, pool.name)
            << '\n';
    }
    out << "# HELP bbkit_buffers_failed Live buffers whose last stage or teardown failed.\n"
        << "# TYPE bbkit_buffers_failed gauge\n";
    for (const PoolStatus& pool : snapshot.pools)
        out << "bbkit_buffers_failed{pool=\"" << escape_label(pool.name) << "\"} "
            << count_of(failed, pool.name) << '\n';
    out << "# HELP bbkit_pool_queue_oldest_seconds How long the longest-waiting request of the "
           "pool's queue has waited (0: none waits).\n"
        << "# TYPE bbkit_pool_queue_oldest_seconds gauge\n";
    for (const PoolStatus& pool : snapshot.pools) {
        const auto it = oldest_pending.find(pool.name);
        out << "bbkit_pool_queue_oldest_seconds{pool=\"" << escape_label(pool.name) << "\"} "
            << static_cast<long long>(it == oldest_pending.end() ? 0 : it->second) << '\n';
    }
    out << "# HELP bbkit_buffer_bytes Space of each buffer that holds some, in bytes: allocated, "
           "and used where its pool enforces project quotas and root reads them.\n"
        << "# TYPE bbkit_buffer_bytes gauge\n";
    // The file is world-readable: with PrivateData it names no buffer.
    for (const BufferStatus& status : snapshot.buffers) {
        const Buffer& b = status.buffer;
        if (!holds_space(b.state) || !buffers_are_public(config))
            continue;
        const std::string label = "{pool=\"" + escape_label(b.pool) + "\",buffer=\"" +
                                  escape_label(b.key.str()) + "\",kind=\"";
        out << "bbkit_buffer_bytes" << label << "allocated\"} " << b.allocated_bytes << '\n';
        if (status.used_bytes)
            out << "bbkit_buffer_bytes" << label << "used\"} " << *status.used_bytes << '\n';
    }
    return out.str();
}

std::string task_environment_text(const TaskEnvironment& env, bool shell) {
    std::string out;
    for (const auto& [name, value] : env.variables)
        out += "export " + name + "=" + (shell ? shell_quoted(value) : value) + "\n";
    return out;
}

nlohmann::json task_environment_json(const TaskEnvironment& env) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [name, value] : env.variables)
        out[name] = value;
    return out;
}

void write_prometheus(const std::string& target, const std::string& text) {
    if (standard_output("--prometheus", target)) {
        std::cout << text << std::flush;
        return;
    }
    write_own_output(target, text, 0644, prometheus_first_line);
}

}  // namespace bbkit
