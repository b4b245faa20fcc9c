#include "bbkit/views.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "bbkit/access.hpp"
#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/seal.hpp"
#include "bbkit/slurm_gres.hpp"
#include "bbkit/text.hpp"
#include "bbkit/user.hpp"

namespace bbkit {
namespace {

using nlohmann::json;

std::uint64_t free_bytes(std::uint64_t total, std::uint64_t used, std::uint64_t trash) {
    const std::uint64_t taken = used + trash;  // both <= max_size, so no overflow
    return taken >= total ? 0 : total - taken;
}

double to_seconds(TimePoint time) {
    return std::chrono::duration<double>(time.time_since_epoch()).count();
}

TimePoint from_seconds(double seconds) {
    return TimePoint(
        std::chrono::duration_cast<TimePoint::duration>(std::chrono::duration<double>(seconds)));
}

// A file of public/ or progress/; nullopt when it does not exist. `hint` ends the message of a
// file that exists but cannot be opened.
std::optional<std::string> read_snapshot_file(const std::string& path, const std::string& hint) {
    const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) {
        const int err = errno;
        if (err == ENOENT)
            return std::nullopt;
        throw system_error("cannot read " + path, err, hint);
    }
    return read_all(fd.get(), path, max_published_bytes);
}

json parse_published(const std::string& text) {
    json value = json::parse(text, nullptr, false);
    if (value.is_discarded() || !value.is_array())
        throw Error(ExitCode::data,
                    "not a JSON array (the owner rewrites it at the next change; run bb-stat "
                    "as the owner meanwhile)");
    return value;
}

std::uint64_t json_uint(const json& object, const char* key) {
    const auto it = object.find(key);
    if (it == object.end() || !it->is_number_unsigned())
        throw Error(ExitCode::data,
                    std::string("field '") + key + "' is not a non-negative integer");
    return it->get<std::uint64_t>();
}

std::string json_string(const json& object, const char* key) {
    const auto it = object.find(key);
    if (it == object.end() || !it->is_string())
        throw Error(ExitCode::data, std::string("field '") + key + "' is not a string");
    return it->get<std::string>();
}

}  // namespace

// ---- reading ------------------------------------------------------------------------------

std::vector<PoolStatus> pool_status(Transaction& txn, const Config& config) {
    std::vector<PoolStatus> pools;
    for (const PoolConfig& configured : config.pools) {
        PoolStatus pool;
        pool.name = configured.name;
        pool.path = configured.path;
        pool.total = configured.capacity;
        pool.granularity = configured.granularity;
        std::optional<std::string> uuid;
        if (const auto record = txn.find_pool(configured.name)) {
            pool.initialized = true;
            pool.draining = record->draining;
            pool.uuid = record->uuid;
            uuid = record->uuid;
        }
        pool.availability = pool_availability(configured, uuid, pool.draining);
        pool.used = txn.used_bytes(configured.name);
        pool.trash = txn.trash_bytes(configured.name);
        pool.persistent = txn.persistent_used_bytes(configured.name);
        pool.queued = txn.queue_length(configured.name);
        pool.free = free_bytes(pool.total, pool.used, pool.trash);
        pools.push_back(std::move(pool));
    }
    return pools;
}

BufferStatus buffer_status(Transaction& txn, const Config& config, Buffer buffer) {
    BufferStatus status;
    const PoolConfig* pool = config.find_pool(buffer.pool);
    status.path = (pool ? pool->path : std::string("(unknown pool)")) + "/" + buffer.directory;
    if (buffer.state == BufferState::pending)
        status.queue_position = txn.queue_position(buffer.key);
    status.buffer = std::move(buffer);
    return status;
}

StatusSnapshot read_status(Transaction& txn, const Config& config) {
    StatusSnapshot snapshot;
    snapshot.pools = pool_status(txn, config);
    BufferFilter live;
    live.live_only = true;
    for (Buffer& buffer : txn.list_buffers(live))
        snapshot.buffers.push_back(buffer_status(txn, config, std::move(buffer)));
    snapshot.counts = txn.count_by_state();
    return snapshot;
}

namespace {

// Adds the buffer files of the open directory `fd` (`path`) that the caller may read. Files
// that cannot be opened are someone else's or were removed meanwhile: skipped.
void read_buffer_files(int fd, const std::string& path, bool private_data, uid_t uid,
                       std::vector<BufferStatus>& buffers) {
    for (const std::string& name : list_directory(fd, path)) {
        if (!ends_with(name, ".json") || name == ".json")
            continue;  // a temporary being renamed into place, or no <key>.json
        const std::string file = path + "/" + name;
        std::optional<std::string> text;
        try {
            text = read_file_at(fd, name, file, max_published_bytes, O_NOFOLLOW | O_NONBLOCK);
        } catch (const Error&) {
            continue;
        }
        if (!text)
            continue;
        try {
            json value = json::parse(*text, nullptr, false);
            if (value.is_discarded())
                throw Error(ExitCode::data,
                            "not JSON (the owner rewrites it at the next change; run "
                            "bb-stat as the owner meanwhile)");
            BufferStatus status = buffer_status_from_json(value);
            // Someone else's file left readable (PrivateData just set, not yet resynced).
            if (private_data && status.buffer.uid != uid)
                continue;
            buffers.push_back(std::move(status));
        } catch (const Error& error) {
            throw Error(ExitCode::data, "cannot read " + file + ": " + error.what());
        }
    }
}

// Every public/buffers/.../<key>.json the caller may read, oldest first.
std::vector<BufferStatus> read_public_buffers(const std::string& dir, bool private_data,
                                              uid_t uid) {
    std::vector<BufferStatus> buffers;
    // Searched only, with PrivateData: it may not be listed.
    const Fd fd(::open(dir.c_str(), (private_data ? O_PATH : O_RDONLY) | O_DIRECTORY | O_CLOEXEC));
    if (!fd) {
        const int err = errno;
        if (err == ENOENT)
            return buffers;  // no buffer published yet
        throw system_error("cannot read " + dir, err);
    }
    if (private_data) {
        // Nothing of theirs without a key (nothing published for them yet, or PrivateData just
        // set).
        if (const std::optional<std::string> key = read_public_key(fd.get(), dir, uid)) {
            const std::string name = public_directory_name(uid, *key);
            const Fd own(
                ::openat(fd.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
            if (own)
                read_buffer_files(own.get(), dir + "/" + name, true, uid, buffers);
        }
    } else {
        for (const std::string& user : list_directory(fd.get(), dir)) {
            const Fd user_fd(
                ::openat(fd.get(), user.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
            if (user_fd)
                read_buffer_files(user_fd.get(), dir + "/" + user, false, uid, buffers);
        }
    }
    // The database's order (record id) is creation order.
    std::sort(buffers.begin(), buffers.end(), [](const BufferStatus& a, const BufferStatus& b) {
        if (a.buffer.created != b.buffer.created)
            return a.buffer.created < b.buffer.created;
        return a.buffer.key.str() < b.buffer.key.str();
    });
    return buffers;
}

}  // namespace

StatusSnapshot read_public_status(const Config& config, uid_t uid) {
    const std::string dir = config.state_dir + "/public";
    const std::string hint =
        " (ask the administrator to make " + config.state_dir + " searchable: chmod 0711)";
    StatusSnapshot snapshot;
    const std::string pools_path = dir + "/pools.json";
    const auto pools = read_snapshot_file(pools_path, hint);
    if (!pools)
        throw Error(ExitCode::unavailable, "no status published in " + dir +
                                               " yet (bb-pool init publishes it, as the "
                                               "state directory's owner)");
    try {
        for (const json& pool : parse_published(*pools))
            snapshot.pools.push_back(pool_status_from_json(pool));
    } catch (const Error& error) {
        throw Error(ExitCode::data, "cannot read " + pools_path + ": " + error.what());
    }
    // The snapshot is as old as the last write; a pool unmounted since shows now.
    for (PoolStatus& pool : snapshot.pools)
        if (const PoolConfig* configured = config.find_pool(pool.name))
            pool.availability = pool_availability(
                *configured,
                pool.initialized ? std::optional<std::string>(pool.uuid) : std::nullopt,
                pool.draining, pool.availability);

    snapshot.buffers = read_public_buffers(dir + "/buffers", config.flags.private_data, uid);
    for (const BufferStatus& status : snapshot.buffers)
        ++snapshot.counts[status.buffer.state];
    return snapshot;
}

std::optional<StagingProgress> read_progress(const std::string& state_dir, const BufferKey& key) {
    std::optional<std::string> text;
    try {
        text = read_snapshot_file(state_dir + "/progress/" + key.str(), "");
    } catch (const Error&) {
        return std::nullopt;  // progress is a hint; an unreadable file shows as none
    }
    if (!text)
        return std::nullopt;
    return parse_progress_record(*text);
}

namespace {

[[noreturn]] void no_job_buffer(std::uint64_t job_id) {
    throw Error(ExitCode::no_input, "no burst buffer for job " + std::to_string(job_id));
}

}  // namespace

void restrict_to_viewer(StatusSnapshot& snapshot, const Config& config, uid_t viewer) {
    std::vector<BufferStatus> kept;
    snapshot.counts.clear();
    for (BufferStatus& status : snapshot.buffers)
        if (may_see(config, viewer, status.buffer)) {
            ++snapshot.counts[status.buffer.state];
            kept.push_back(std::move(status));
        }
    snapshot.buffers = std::move(kept);
}

void restrict_to_anyone(StatusSnapshot& snapshot, const Config& config) {
    if (buffers_are_public(config))
        return;
    snapshot.buffers.clear();
    snapshot.counts.clear();
}

JobStatus job_status(Transaction& txn, const Config& config, std::uint64_t job_id,
                     std::optional<uid_t> viewer) {
    std::optional<Buffer> buffer = txn.latest_job_buffer(config.cluster, job_id);
    if (!buffer || (viewer && !may_see(config, *viewer, *buffer)))
        no_job_buffer(job_id);
    JobStatus job;
    job.progress = read_progress(config.state_dir, buffer->key);
    job.status = buffer_status(txn, config, std::move(*buffer));
    const Buffer& b = job.status.buffer;
    if (b.state != BufferState::pending && !b.reaped)
        job.status.used_bytes = ProjectUsageReader(config).used_bytes(b);
    return job;
}

void read_project_usage(StatusSnapshot& snapshot, const Config& config) {
    ProjectUsageReader reader(config);
    for (BufferStatus& status : snapshot.buffers)
        if (holds_space(status.buffer.state) && status.buffer.state != BufferState::allocating)
            status.used_bytes = reader.used_bytes(status.buffer);
}

JobStatus job_status(const StatusSnapshot& snapshot, const Config& config, std::uint64_t job_id,
                     std::optional<uid_t> viewer) {
    const BufferStatus* found = nullptr;
    for (const BufferStatus& status : snapshot.buffers) {
        const BufferKey& key = status.buffer.key;
        if (key.kind() == BufferKind::job && key.cluster == config.cluster &&
            key.job_id == job_id && (!found || key.incarnation > found->buffer.key.incarnation))
            found = &status;
    }
    if (!found || (viewer && !may_see(config, *viewer, found->buffer)))
        no_job_buffer(job_id);
    return JobStatus{*found, std::nullopt};
}

StatusAnswer query_status(const Config& config, uid_t caller, const StatusQuery& query) {
    StatusAnswer answer;
    if (privileged_viewer(config, caller)) {
        StoreOptions read_only;
        read_only.read_only = true;
        StateStore store(config, read_only);
        ReadSnapshot txn(store);
        if (query.job_id)
            answer.job = job_status(txn, config, *query.job_id, query.for_uid);
        if (query.scope == StatusQuery::Scope::pools)
            answer.snapshot.pools = pool_status(txn, config);
        else if (query.scope == StatusQuery::Scope::all)
            answer.snapshot = read_status(txn, config);
        if (query.project_usage)
            read_project_usage(answer.snapshot, config);
    } else {
        answer.snapshot = read_public_status(config, caller);
        if (query.job_id)
            answer.job = job_status(answer.snapshot, config, *query.job_id, query.for_uid);
    }
    if (query.for_uid)
        restrict_to_viewer(answer.snapshot, config, *query.for_uid);
    if (query.for_anyone) {
        restrict_to_anyone(answer.snapshot, config);
        if (answer.job && !buffers_are_public(config))
            no_job_buffer(*query.job_id);
    }
    return answer;
}

std::string slurm_reason(const Buffer& buffer) {
    if (!buffer.reason.empty())
        return buffer.reason;
    switch (buffer.state) {
        case BufferState::pending:
            return "BurstBufferResources";
        case BufferState::staging_in:
        case BufferState::staged_in:
            return "BurstBufferStageIn";
        default:
            return "None";
    }
}

// ---- Slurm's pools ------------------------------------------------------------------------

std::string slurm_pools_json(const std::vector<PoolStatus>& pools) {
    json list = json::array();
    for (const PoolStatus& pool : pools) {
        const std::uint64_t granularity = std::max<std::uint64_t>(pool.granularity, 1);
        // Slurm owns only job buffers: persistent buffers and trash are not its to hand out.
        const std::uint64_t quantity =
            free_bytes(pool.total, pool.persistent, pool.trash) / granularity;
        const std::uint64_t free =
            pool.draining || !pool.initialized || pool.availability == PoolAvailability::unavailable
                ? 0
                : free_bytes(pool.total, pool.used, pool.trash) / granularity;
        list.push_back({{"id", pool.name},
                        {"quantity", quantity},
                        {"granularity", granularity},
                        {"free", std::min(free, quantity)}});
    }
    return json{{"pools", list}}.dump();
}

std::string slurm_pools_json(Transaction& txn, const Config& config) {
    return slurm_pools_json(pool_status(txn, config));
}

// ---- a node-local pool's GRES count --------------------------------------------------------

namespace {

// The one item of `name` among a node's GRES, or nullptr when it has none.
NodeGres* pool_item(std::vector<NodeGres>& gres, const std::string& name, const std::string& text) {
    NodeGres* found = nullptr;
    for (NodeGres& item : gres) {
        if (item.name != name)
            continue;
        if (found != nullptr || !item.type.empty())
            throw Error(ExitCode::data, "Slurm's GRES of this node, '" + printable(text) +
                                            "', has " + (found ? "more than one" : "a typed") +
                                            " item of " + name +
                                            ": bbkit's is one item without a type");
        found = &item;
    }
    return found;
}

}  // namespace

std::vector<GresCount> gres_counts(const StatusSnapshot& snapshot, const Config& config,
                                   const std::set<std::uint64_t>& live_jobs,
                                   const std::optional<std::string>& node_gres) {
    std::vector<NodeGres> node;
    if (node_gres)
        node = parse_node_gres(*node_gres);
    std::vector<GresCount> counts;
    for (const PoolConfig& pool : config.pools) {
        if (!pool.node_local)
            continue;
        std::uint64_t held_bytes = 0;
        std::uint64_t live_bytes = 0;
        bool closed = false;  // draining or not in place: no new buffer fits
        for (const PoolStatus& status : snapshot.pools) {
            if (status.name != pool.name)
                continue;
            held_bytes = status.trash;
            closed = status.draining || status.availability == PoolAvailability::unavailable;
        }
        for (const BufferStatus& status : snapshot.buffers) {
            const Buffer& b = status.buffer;
            if (b.pool != pool.name || !holds_space(b.state))
                continue;
            if (b.key.kind() == BufferKind::persistent || live_jobs.count(b.key.job_id) == 0)
                held_bytes += b.allocated_bytes;
            else
                live_bytes += b.allocated_bytes;
        }
        GresCount count;
        count.pool = pool.name;
        count.gres = pool.gres;
        count.units = gres_count(pool);
        const std::uint64_t granularity = std::max<std::uint64_t>(pool.granularity, 1);
        const auto units_of = [&](std::uint64_t bytes) {
            return bytes / granularity + (bytes % granularity != 0 ? 1 : 0);
        };
        count.held = units_of(held_bytes);
        count.count = count.units > count.held ? count.units - count.held : 0;
        // A closed pool: what its live jobs hold, so Slurm places no job there.
        if (closed)
            count.count = std::min(count.count, units_of(live_bytes));
        if (node_gres) {
            const NodeGres* item = pool_item(node, pool.gres, *node_gres);
            count.slurm = item ? item->count : 0;
        }
        counts.push_back(count);
    }
    return counts;
}

std::optional<std::string> gres_update_text(const std::vector<GresCount>& counts,
                                            const std::string& node_gres) {
    std::vector<NodeGres> node = parse_node_gres(node_gres);
    bool changed = false;
    for (const GresCount& count : counts) {
        NodeGres* item = pool_item(node, count.gres, node_gres);
        if (item == nullptr && count.count > 0) {
            // Slurm does not print a GRES whose count is 0: set back to 0 before, it is named
            // again (on a node that never had it, Slurm's update skips it).
            node.push_back(NodeGres{count.gres, "", false, count.count});
            changed = true;
        } else if (item != nullptr && item->count != count.count) {
            item->count = count.count;
            changed = true;
        }
    }
    if (!changed)
        return std::nullopt;
    return node_gres_text(node);
}

// ---- the names in public/ ------------------------------------------------------------------

std::string public_key_name(uid_t uid) {
    return std::to_string(uid) + ".key";
}

std::string public_directory_name(uid_t uid, const std::string& user_key) {
    return user_tag(user_key, "public/buffers/" + std::to_string(uid));
}

std::optional<std::string> read_public_key(int buffers, const std::string& dir, uid_t uid) {
    const std::string name = public_key_name(uid);
    const Fd fd(::openat(buffers, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != uid)
        return std::nullopt;
    try {
        return parse_user_key(read_all(fd.get(), dir + "/" + name, 64));
    } catch (const Error&) {
        return std::nullopt;  // longer than a key: not one
    }
}

// ---- the JSON of public/ and of --json ----------------------------------------------------

json pool_status_json(const PoolStatus& pool) {
    return {{"name", pool.name},
            {"path", pool.path},
            {"total", pool.total},
            {"used", pool.used},
            {"trash", pool.trash},
            {"free", pool.free},
            {"granularity", pool.granularity},
            {"persistent", pool.persistent},
            {"queued", pool.queued},
            {"draining", pool.draining},
            {"initialized", pool.initialized},
            {"uuid", pool.uuid.empty() ? json() : json(pool.uuid)},
            {"availability", to_string(pool.availability)}};
}

PoolStatus pool_status_from_json(const json& value) {
    if (!value.is_object())
        throw Error(ExitCode::data, "a pool is not a JSON object");
    PoolStatus pool;
    pool.name = json_string(value, "name");
    pool.path = json_string(value, "path");
    pool.total = json_uint(value, "total");
    pool.used = json_uint(value, "used");
    pool.trash = json_uint(value, "trash");
    pool.free = json_uint(value, "free");
    pool.granularity = json_uint(value, "granularity");
    pool.persistent = json_uint(value, "persistent");
    pool.queued = static_cast<std::size_t>(json_uint(value, "queued"));
    pool.draining = value.value("draining", false);
    pool.initialized = value.value("initialized", false);
    if (value.contains("uuid") && value["uuid"].is_string())
        pool.uuid = value["uuid"].get<std::string>();
    // Snapshots of older versions have no availability: what the records said.
    pool.availability = value.contains("availability") && value["availability"].is_string()
                            ? parse_pool_availability(value["availability"].get<std::string>())
                        : !pool.initialized ? PoolAvailability::uninitialised
                        : pool.draining     ? PoolAvailability::draining
                                            : PoolAvailability::up;
    return pool;
}

json pools_json(const std::vector<PoolStatus>& pools) {
    json list = json::array();
    for (const PoolStatus& pool : pools)
        list.push_back(pool_status_json(pool));
    return list;
}

json buffer_status_json(const BufferStatus& status) {
    const Buffer& b = status.buffer;
    const bool job = b.key.kind() == BufferKind::job;
    json entered = json::object();
    for (const auto& [state, time] : b.entered)
        entered[to_string(state)] = to_seconds(time);
    return {{"key", b.key.str()},
            {"id", b.record_id},
            {"cluster", b.key.cluster},
            {"job_id", job ? json(b.key.job_id) : json()},
            {"incarnation", job ? json(b.key.incarnation) : json()},
            {"name", job ? json() : json(b.key.name)},
            {"pool", b.pool},
            {"state", to_string(b.state)},
            {"reason", slurm_reason(b)},
            {"message", b.message},
            {"requested", b.requested_bytes},
            {"allocated", b.allocated_bytes},
            {"uid", b.uid},
            {"gid", b.gid},
            {"user", b.user},
            {"owner", b.owner.empty() ? json() : json(b.owner)},
            {"directory", b.directory},
            {"path", status.path},
            {"access", b.access},
            {"type", b.type},
            {"created", to_seconds(b.created)},
            {"entered", entered},
            {"expires", b.expires ? json(to_seconds(*b.expires)) : json()},
            {"use_count", b.use_count},
            {"queue_position", status.queue_position ? json(*status.queue_position) : json()},
            {"stager", b.run_lock_holder ? json{{"pid", b.run_lock_holder->pid},
                                                {"start", b.run_lock_holder->start_time}}
                                         : json()},
            {"failure", b.failure},
            {"failed", b.failed ? json(to_seconds(*b.failed)) : json()}};
}

BufferStatus buffer_status_from_json(const json& value) {
    if (!value.is_object())
        throw Error(ExitCode::data, "a buffer is not a JSON object");
    BufferStatus status;
    Buffer& b = status.buffer;
    b.key = parse_buffer_key(json_string(value, "key"));
    if (value.contains("id") && value["id"].is_number_integer())  // absent from older snapshots
        b.record_id = value["id"].get<std::int64_t>();
    b.pool = json_string(value, "pool");
    b.state = parse_buffer_state(json_string(value, "state"));
    b.reason = json_string(value, "reason");
    b.message = json_string(value, "message");
    b.requested_bytes = json_uint(value, "requested");
    b.allocated_bytes = json_uint(value, "allocated");
    b.uid = static_cast<uid_t>(json_uint(value, "uid"));
    b.gid = static_cast<gid_t>(json_uint(value, "gid"));
    b.user = json_string(value, "user");
    if (value.contains("owner") && value["owner"].is_string())
        b.owner = value["owner"].get<std::string>();
    b.directory = json_string(value, "directory");
    status.path = json_string(value, "path");
    b.access = json_string(value, "access");
    b.type = json_string(value, "type");
    if (!value.contains("created") || !value["created"].is_number())
        throw Error(ExitCode::data, "field 'created' is not a number");
    b.created = from_seconds(value["created"].get<double>());
    if (value.contains("entered") && value["entered"].is_object())
        for (const auto& [state, time] : value["entered"].items())
            if (time.is_number())
                b.entered[parse_buffer_state(state)] = from_seconds(time.get<double>());
    if (value.contains("expires") && value["expires"].is_number())
        b.expires = from_seconds(value["expires"].get<double>());
    b.use_count = static_cast<std::uint32_t>(json_uint(value, "use_count"));
    if (value.contains("queue_position") && value["queue_position"].is_number_unsigned())
        status.queue_position = value["queue_position"].get<std::size_t>();
    // Absent from what older versions published.
    if (value.contains("stager") && value["stager"].is_object())
        b.run_lock_holder = ProcessId{static_cast<pid_t>(json_uint(value["stager"], "pid")),
                                      json_uint(value["stager"], "start")};
    if (value.contains("failure") && value["failure"].is_string())
        b.failure = value["failure"].get<std::string>();
    if (value.contains("failed") && value["failed"].is_number())
        b.failed = from_seconds(value["failed"].get<double>());
    return status;
}

}  // namespace bbkit
