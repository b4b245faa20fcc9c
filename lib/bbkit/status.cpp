#include "bbkit/status.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/size.hpp"
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

// Job id, or the persistent buffer's name: what Slurm shows as JobID= or Name=.
std::string token_of(const Buffer& buffer) {
    return buffer.key.kind() == BufferKind::job ? std::to_string(buffer.key.job_id)
                                                : buffer.key.name;
}

std::string user_of(const Buffer& buffer) {
    const std::string name = buffer.user.empty() ? std::to_string(buffer.uid) : buffer.user;
    return name + "(" + std::to_string(buffer.uid) + ")";
}

std::string joined(const std::vector<std::string>& items, const char* separator) {
    std::string out;
    for (std::size_t i = 0; i < items.size(); ++i)
        out += (i ? separator : "") + items[i];
    return out;
}

// Right-aligned columns separated by one space, as dwstat prints them.
std::string table(const std::vector<std::string>& headers,
                  const std::vector<std::vector<std::string>>& rows) {
    std::vector<std::size_t> widths;
    for (const std::string& header : headers)
        widths.push_back(header.size());
    for (const auto& row : rows)
        for (std::size_t i = 0; i < row.size() && i < widths.size(); ++i)
            widths[i] = std::max(widths[i], row[i].size());
    auto line = [&](const std::vector<std::string>& cells) {
        std::string out;
        for (std::size_t i = 0; i < cells.size(); ++i) {
            if (i)
                out += ' ';
            out += std::string(widths[i] - cells[i].size(), ' ') + cells[i];
        }
        return out + "\n";
    };
    std::string out = line(headers);
    for (const auto& row : rows)
        out += line(row);
    return out;
}

// What is left to read from `fd` (the file at `path`). Error(io) on a read error.
std::string read_rest(int fd, const std::string& path) {
    std::string data;
    char chunk[65536];
    for (;;) {
        const ssize_t n = ::read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            throw Error(ExitCode::io, "cannot read " + path + ": " + std::strerror(errno));
        if (n == 0)
            break;
        data.append(chunk, static_cast<std::size_t>(n));
    }
    return data;
}

// A small file's content; nullopt when it does not exist. Error(no_perm) / Error(io) otherwise.
std::optional<std::string> read_optional_file(const std::string& path, const std::string& hint) {
    const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) {
        const int err = errno;
        if (err == ENOENT)
            return std::nullopt;
        const ExitCode code = (err == EACCES || err == EPERM) ? ExitCode::no_perm : ExitCode::io;
        throw Error(code, "cannot read " + path + ": " + std::strerror(err) + hint);
    }
    return read_rest(fd.get(), path);
}

json parse_published(const std::string& text) {
    json value = json::parse(text, nullptr, false);
    if (value.is_discarded() || !value.is_array())
        throw Error(ExitCode::data,
                    "not a JSON array (the owner rewrites it at the next change; run bb-stat "
                    "as the owner meanwhile)");
    return value;
}

// Whether `path` is a regular file of exactly `data` and `mode`. Never follows a symlink and
// never blocks on a fifo: with PrivateData a user owns the directory of their buffers' files.
bool same_file(const std::string& path, const std::string& data, mode_t mode) {
    const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
        (st.st_mode & 07777) != mode || static_cast<std::size_t>(st.st_size) != data.size())
        return false;
    std::string content(data.size() + 1, '\0');  // one more: a file that grew meanwhile
    std::size_t done = 0;
    while (done < content.size()) {
        const ssize_t n = ::read(fd.get(), content.data() + done, content.size() - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        done += static_cast<std::size_t>(n);
    }
    return done == data.size() && content.compare(0, done, data) == 0;
}

void remove_file(const std::string& path) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
        throw Error(ExitCode::io, "cannot remove " + path + ": " + std::strerror(errno));
}

bool ends_with(const std::string& text, const std::string& suffix) {
    return text.size() > suffix.size() &&
           text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The names in the directory open as `fd` (which stays open), without "." and "..".
std::vector<std::string> entries_of(int fd, const std::string& path) {
    const int copy = ::dup(fd);  // fdopendir takes its descriptor over
    if (copy < 0)
        throw Error(ExitCode::io, "cannot list " + path + ": " + std::strerror(errno));
    std::unique_ptr<DIR, int (*)(DIR*)> handle(::fdopendir(copy), &::closedir);
    if (!handle) {
        const int err = errno;
        ::close(copy);
        throw Error(ExitCode::io, "cannot list " + path + ": " + std::strerror(err));
    }
    ::rewinddir(handle.get());  // the shared offset may be past the end from an earlier listing
    std::vector<std::string> names;
    while (const dirent* entry = ::readdir(handle.get())) {
        const std::string name = entry->d_name;
        if (name != "." && name != "..")
            names.push_back(name);
    }
    return names;
}

// A directory under `parent`, never through a symbolic link; an empty Fd when it is missing.
Fd open_directory_at(int parent, const std::string& name, const std::string& path) {
    Fd fd(::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd && errno != ENOENT)
        throw Error(ExitCode::io, "cannot open directory " + path + ": " + std::strerror(errno));
    return fd;
}

// The uids of layout 1's public/buffers.<uid>.json files.
std::vector<uid_t> user_files(const std::string& dir) {
    const Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd)
        throw Error(ExitCode::io, "cannot list " + dir + ": " + std::strerror(errno));
    std::vector<uid_t> uids;
    const std::string prefix = "buffers.", suffix = ".json";
    for (const std::string& name : entries_of(fd.get(), dir)) {
        if (name.compare(0, prefix.size(), prefix) != 0 || !ends_with(name, suffix))
            continue;
        const std::string digits =
            name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
        if (const std::optional<std::uint64_t> uid = parse_decimal(digits, max_uid))
            uids.push_back(static_cast<uid_t>(*uid));
    }
    return uids;
}

std::string user_file(const std::string& public_dir, uid_t uid) {
    return public_dir + "/buffers." + std::to_string(uid) + ".json";
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

namespace {

BufferStatus status_of(Transaction& txn, const Config& config, Buffer buffer) {
    BufferStatus status;
    const PoolConfig* pool = config.find_pool(buffer.pool);
    status.path = (pool ? pool->path : std::string("(unknown pool)")) + "/" + buffer.directory;
    if (buffer.state == BufferState::pending)
        status.queue_position = txn.queue_position(buffer.key.str());
    status.buffer = std::move(buffer);
    return status;
}

}  // namespace

StatusSnapshot read_status(Transaction& txn, const Config& config) {
    StatusSnapshot snapshot;
    snapshot.pools = pool_status(txn, config);
    BufferFilter live;
    live.live_only = true;
    for (Buffer& buffer : txn.list_buffers(live))
        snapshot.buffers.push_back(status_of(txn, config, std::move(buffer)));
    snapshot.counts = txn.count_by_state();
    return snapshot;
}

namespace {

// Every public/buffers/<uid>/<key>.json the caller may read, oldest first. Directories and files
// that cannot be opened are someone else's (PrivateData) or were removed meanwhile: skipped.
std::vector<BufferStatus> read_public_buffers(const std::string& dir, bool private_data,
                                              uid_t uid) {
    std::vector<BufferStatus> buffers;
    const Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) {
        const int err = errno;
        if (err == ENOENT)
            return buffers;  // no buffer published yet
        throw Error(err == EACCES ? ExitCode::no_perm : ExitCode::io,
                    "cannot read " + dir + ": " + std::strerror(err));
    }
    for (const std::string& user : entries_of(fd.get(), dir)) {
        const std::string user_path = dir + "/" + user;
        const Fd user_fd(
            ::openat(fd.get(), user.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!user_fd)
            continue;
        for (const std::string& name : entries_of(user_fd.get(), user_path)) {
            if (!ends_with(name, ".json"))
                continue;  // a temporary being renamed into place
            const std::string path = user_path + "/" + name;
            std::optional<std::string> text;
            try {
                text = read_optional_file(path, "");
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
                throw Error(ExitCode::data, "cannot read " + path + ": " + error.what());
            }
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
    const auto pools = read_optional_file(pools_path, hint);
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
    try {
    } catch (const Error& error) {
        throw Error(ExitCode::data, "cannot read " + pools_path + ": " + error.what());
    }

    snapshot.buffers = read_public_buffers(dir + "/buffers", config.flags.private_data, uid);
    for (const BufferStatus& status : snapshot.buffers)
        ++snapshot.counts[status.buffer.state];
    return snapshot;
}

std::optional<StagingProgress> read_progress(const std::string& state_dir, const BufferKey& key) {
    std::optional<std::string> text;
    try {
        text = read_optional_file(state_dir + "/progress/" + key.str(), "");
    } catch (const Error&) {
        return std::nullopt;  // progress is a hint; an unreadable file shows as none
    }
    if (!text)
        return std::nullopt;
    const json value = json::parse(*text, nullptr, false);
    if (value.is_discarded() || !value.is_object())
        return std::nullopt;
    try {
        StagingProgress progress;
        progress.files_done = json_uint(value, "files_done");
        progress.files_total = json_uint(value, "files_total");
        progress.bytes_done = json_uint(value, "bytes_done");
        progress.bytes_total = json_uint(value, "bytes_total");
        return progress;
    } catch (const Error&) {
        return std::nullopt;
    }
}

namespace {

[[noreturn]] void no_job_buffer(std::uint64_t job_id) {
    throw Error(ExitCode::no_input, "no burst buffer for job " + std::to_string(job_id));
}

}  // namespace

bool privileged_viewer(const Config& config, uid_t viewer) {
    if (viewer == 0)
        return true;
    if (config.state_owner == "root" || config.state_owner == "0")
        return false;
    try {
        return lookup_user(config.state_owner).uid == viewer;
    } catch (const Error&) {
        return false;  // an owner that does not resolve privileges nobody
    }
}

bool may_see(const Config& config, uid_t viewer, const Buffer& buffer) {
    return !config.flags.private_data || buffer.uid == viewer || privileged_viewer(config, viewer);
}

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

JobStatus job_status(Transaction& txn, const Config& config, std::uint64_t job_id,
                     std::optional<uid_t> viewer) {
    std::optional<Buffer> buffer = txn.latest_job_buffer(config.cluster, job_id);
    if (!buffer || (viewer && !may_see(config, *viewer, *buffer)))
        no_job_buffer(job_id);
    JobStatus job;
    job.progress = read_progress(config.state_dir, buffer->key);
    job.status = status_of(txn, config, std::move(*buffer));
    return job;
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

// ---- publishing ---------------------------------------------------------------------------

namespace {

// public/'s layout; bump it when that changes, so that the next writer resyncs everything.
// 1 was public/buffers.json or public/buffers.<uid>.json.
constexpr int public_layout = 2;

// Snapshots are not fsync'd, so a power cut may leave any of them stale or empty: a new boot id
// in public/.settings makes the first writer after a reboot rewrite them all.
const std::string& boot_id() {
    static const std::string id = [] {
        std::ifstream in("/proc/sys/kernel/random/boot_id");
        std::string line;
        std::getline(in, line);
        return line.empty() ? std::string("unknown") : line;
    }();
    return id;
}

// What public/ was last fully written for; any difference asks for publish_all().
std::string public_settings(const Config& config) {
    std::string out = "layout=" + std::to_string(public_layout) +
                      "\nprivate_data=" + (config.flags.private_data ? "1" : "0") +
                      "\nboot=" + boot_id() + "\n";
    // Each buffer file holds its absolute path, which comes from the pool's configured path.
    for (const PoolConfig& pool : config.pools)
        out += "pool=" + pool.name + " " + pool.path + "\n";
    return out;
}

// Snapshots are regenerated from state.db, so no fsync; an unchanged file is left alone, which
// keeps its mtime meaningful to whoever polls it.
void replace_if_changed(const std::string& path, const std::string& data, mode_t mode) {
    if (!same_file(path, data, mode))
        replace_file(path, data, mode);
}

struct DirectoryOwner {
    uid_t uid;
    gid_t gid;  // (gid_t)-1: keep whatever group it has
    mode_t mode;
};

// Gives the open directory `want`'s owner and mode, on the descriptor so that no path can be
// swapped in between. Access is taken away before the owner changes and granted after, so no
// intermediate state shows the directory to someone who should not see it.
void fix_directory(int fd, const std::string& path, const DirectoryOwner& want) {
    struct stat st {};
    if (::fstat(fd, &st) != 0)
        throw Error(ExitCode::io, "cannot inspect " + path + ": " + std::strerror(errno));
    mode_t mode = st.st_mode & 07777;
    const auto set_mode = [&](mode_t to) {
        if (::fchmod(fd, to) != 0)
            throw Error(ExitCode::no_perm,
                        "cannot set the mode of " + path + ": " + std::strerror(errno));
        mode = to;
    };
    if ((mode & ~want.mode) != 0)
        set_mode(mode & want.mode);
    if (st.st_uid != want.uid && ::fchown(fd, want.uid, want.gid) != 0)
        throw Error(ExitCode::no_perm, "cannot give " + path + " to uid " +
                                           std::to_string(want.uid) + ": " + std::strerror(errno));
    if (mode != want.mode)
        set_mode(want.mode);
}

// public/buffers/<uid>/<key>.json: one file (0644) per live buffer, so that a change costs one
// file whatever the number of buffers. Without PrivateData each <uid>/ is 0755 and owned like
// public/; with it, 0700 and owned by that uid, so the directory alone decides who reads.
class PublicBuffers {
  public:
    PublicBuffers(const StateStore& store, const Config& config)
        : dir_(store.path("public/buffers")), private_data_(config.flags.private_data) {
        const std::string parent = store.path("public");
        const Fd public_fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!public_fd)
            throw Error(ExitCode::io,
                        "cannot open directory " + parent + ": " + std::strerror(errno));
        struct stat st {};
        if (::fstat(public_fd.get(), &st) != 0)
            throw Error(ExitCode::io, "cannot inspect " + parent + ": " + std::strerror(errno));
        // public/ belongs to the state directory's owner (StateStore sees to it).
        base_ = DirectoryOwner{st.st_uid, st.st_gid, 0755};
        if (::mkdirat(public_fd.get(), "buffers", 0700) != 0 && errno != EEXIST)
            throw Error(ExitCode::io, "cannot create " + dir_ + ": " + std::strerror(errno));
        fd_ = open_directory_at(public_fd.get(), "buffers", dir_);
        if (!fd_)
            throw Error(ExitCode::io,
                        "cannot open directory " + dir_ + ": " + std::strerror(errno));
        // 0755 even with PrivateData: users list it to find their directory, which they alone
        // may then enter.
        fix_directory(fd_.get(), dir_, base_);
    }

    // Writes the buffer's file, creating or fixing its user's directory.
    void write(const BufferStatus& status) {
        const Buffer& b = status.buffer;
        guarded(b.uid, [&] {
            UserDirectory* user = user_directory(b.uid, b.gid, true);
            replace_if_changed(
                user->path + "/" + b.key.str() + ".json",
                buffer_status_json(status).dump(2, ' ', false, json::error_handler_t::replace) +
                    "\n",
                0644);
        });
    }

    // Removes the buffer's file, and its user's directory once empty.
    void remove(const std::string& key, uid_t uid) {
        guarded(uid, [&] {
            UserDirectory* user = user_directory(uid, static_cast<gid_t>(-1), false);
            if (!user)
                return;
            const std::string name = key + ".json";
            if (::unlinkat(user->fd.get(), name.c_str(), 0) != 0 && errno != ENOENT)
                throw Error(ExitCode::io, "cannot remove " + user->path + "/" + name + ": " +
                                              std::strerror(errno));
            remove_if_empty(uid);
        });
    }

    // Makes the tree hold exactly `live`: writes every file that differs, removes all others
    // (stale files, temporaries left by a kill, directories of users without live buffers).
    void resync(const std::vector<BufferStatus>& live) {
        std::map<uid_t, std::vector<const BufferStatus*>> by_user;
        for (const BufferStatus& status : live)
            by_user[status.buffer.uid].push_back(&status);
        for (const std::string& name : entries_of(fd_.get(), dir_)) {
            const std::optional<std::uint64_t> number = parse_decimal(name, max_uid);
            const auto uid = static_cast<uid_t>(number.value_or(0));
            if (!number || by_user.count(uid))
                continue;
            guarded(uid, [&] {
                if (UserDirectory* user = user_directory(uid, static_cast<gid_t>(-1), false)) {
                    for (const std::string& entry : entries_of(user->fd.get(), user->path))
                        remove_entry(*user, entry);
                    remove_if_empty(uid);
                }
            });
        }
        for (const auto& [uid, statuses] : by_user) {
            std::set<std::string> expected;
            for (const BufferStatus* status : statuses) {
                write(*status);
                expected.insert(status->buffer.key.str() + ".json");
            }
            guarded(uid, [&] {
                if (UserDirectory* user = user_directory(uid, static_cast<gid_t>(-1), false))
                    for (const std::string& entry : entries_of(user->fd.get(), user->path))
                        if (!expected.count(entry))
                            remove_entry(*user, entry);
            });
        }
    }

  private:
    struct UserDirectory {
        Fd fd;
        std::string path;
    };

    // Checked once per publish; nullptr when missing and `create` is false.
    UserDirectory* user_directory(uid_t uid, gid_t gid, bool create) {
        if (const auto it = open_.find(uid); it != open_.end())
            return &it->second;
        const std::string name = std::to_string(uid);
        const std::string path = dir_ + "/" + name;
        // 0700 until fix_directory has set the owner: never open to the wrong user.
        if (create && ::mkdirat(fd_.get(), name.c_str(), 0700) != 0 && errno != EEXIST)
            throw Error(ExitCode::io, "cannot create " + path + ": " + std::strerror(errno));
        Fd fd = open_directory_at(fd_.get(), name, path);
        if (!fd)
            return nullptr;
        fix_directory(fd.get(), path, wanted_owner(uid, gid));
        return &open_.emplace(uid, UserDirectory{std::move(fd), path}).first->second;
    }

    DirectoryOwner wanted_owner(uid_t uid, gid_t gid) {
        if (!private_data_)
            return base_;
        if (base_.uid == 0)
            return DirectoryOwner{uid, gid, 0700};
        // Only root can give a directory away. Keeping it fails closed: users cannot read
        // their buffers, rather than reading everyone's.
        if (!warned_) {
            spdlog::warn(
                "PrivateData: cannot give {}/<uid> to each user, the state directory's "
                "owner is not root (other users see no buffers)",
                dir_);
            warned_ = true;
        }
        return DirectoryOwner{base_.uid, base_.gid, 0700};
    }

    void remove_entry(const UserDirectory& user, const std::string& name) {
        if (::unlinkat(user.fd.get(), name.c_str(), 0) != 0 && errno != ENOENT)
            throw Error(ExitCode::io,
                        "cannot remove " + user.path + "/" + name + ": " + std::strerror(errno));
    }

    // A user without live buffers has no directory: readers take a missing one as none.
    void remove_if_empty(uid_t uid) {
        const std::string name = std::to_string(uid);
        if (::unlinkat(fd_.get(), name.c_str(), AT_REMOVEDIR) == 0)
            open_.erase(uid);
    }

    // With PrivateData a user owns their directory and may put anything into it; what they break
    // there only hides their own buffers from themselves, and must never fail the operation.
    template <typename Action>
    void guarded(uid_t uid, Action action) {
        if (!private_data_ || base_.uid != 0 || uid == 0) {
            action();
            return;
        }
        try {
            action();
        } catch (const Error& error) {
            spdlog::warn("public status of uid {} not updated: {}", uid, error.what());
        }
    }

    std::string dir_;
    bool private_data_;
    DirectoryOwner base_{};
    Fd fd_;
    std::map<uid_t, UserDirectory> open_;
    bool warned_ = false;
};

// public/.unsettled: the keys (with their uid) that the last publish wrote. It ran before its
// commit, which a rollback or a kill may have undone: the next publish rewrites these keys from
// the committed state, so no file outlives a transaction that never happened.
//
// Only writers read it, under the state lock, so it is rewritten in place through the
// descriptor it was read from: a new file per publish cost a data block allocated and one freed
// each time. A kill between the write and the truncation leaves the new keys followed by part
// of the old ones, which were settled before (publish settles them first): settling any of
// them again, or a fragment that names nothing, is harmless. A power cut may leave anything
// here, but it also changes the boot id, which makes the next writer resync all of public/.
class UnsettledFile {
  public:
    // `owner`: public/'s owner and group, which the file is given when root writes it (the
    // state directory's owner must be able to rewrite it in place).
    UnsettledFile(const std::string& path, uid_t owner, gid_t group) : path_(path) {
        const int flags = O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
        fd_.reset(::open(path.c_str(), flags, 0600));
        if (!fd_ && errno == EACCES && ::unlink(path.c_str()) == 0)  // someone else's: ours now
            fd_.reset(::open(path.c_str(), flags, 0600));
        struct stat st {};
        if (!fd_ || ::fstat(fd_.get(), &st) != 0)
            throw Error(ExitCode::io, "cannot open " + path + ": " + std::strerror(errno));
        if (!S_ISREG(st.st_mode))
            throw Error(ExitCode::io, path + " is not a regular file (remove it)");
        if (geteuid() == 0 && (st.st_uid != owner || st.st_gid != group) &&
            ::fchown(fd_.get(), owner, group) != 0)
            throw Error(ExitCode::io, "cannot give " + path + " to uid " + std::to_string(owner) +
                                          ": " + std::strerror(errno));
        text_ = read_rest(fd_.get(), path);
    }

    std::map<std::string, uid_t> keys() const {
        std::map<std::string, uid_t> keys;
        std::istringstream in(text_);
        std::string uid, key;
        while (in >> uid >> key)
            if (const std::optional<std::uint64_t> number = parse_decimal(uid, max_uid))
                keys.emplace(key, static_cast<uid_t>(*number));
        return keys;
    }

    // Names the keys of `buffers` that have a record. Never shorter than one byte: truncating
    // to nothing would free the block that the next publish allocates again.
    void write(const std::map<std::string, std::optional<Buffer>>& buffers) {
        std::string text;
        for (const auto& [key, buffer] : buffers)
            if (buffer)
                text += std::to_string(buffer->uid) + " " + key + "\n";
        if (text.empty())
            text = "\n";
        if (text == text_)
            return;
        std::size_t done = 0;
        while (done < text.size()) {
            const ssize_t n = ::pwrite(fd_.get(), text.data() + done, text.size() - done,
                                       static_cast<off_t>(done));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                throw Error(ExitCode::io, "cannot write " + path_ + ": " + std::strerror(errno));
            done += static_cast<std::size_t>(n);
        }
        if (text.size() < text_.size() &&
            ::ftruncate(fd_.get(), static_cast<off_t>(text.size())) != 0)
            throw Error(ExitCode::io, "cannot write " + path_ + ": " + std::strerror(errno));
        text_ = std::move(text);
    }

  private:
    std::string path_;
    Fd fd_;
    std::string text_;
};

std::optional<Buffer> find_by_text(Transaction& txn, const std::string& key) {
    try {
        return txn.find_buffer(parse_buffer_key(key));
    } catch (const Error&) {
        return std::nullopt;  // not a key this build can parse: nothing to publish
    }
}

// The buffers of the keys this transaction touched (a key without a record has none).
std::map<std::string, std::optional<Buffer>> touched_buffers(WriteTransaction& txn) {
    std::map<std::string, std::optional<Buffer>> buffers;
    for (const std::string& key : txn.touched_keys())
        buffers.emplace(key, find_by_text(txn, key));
    // A request left a queue: everyone behind it moved up.
    for (const std::string& pool : txn.touched_queues())
        for (const QueueEntry& entry : txn.queue(pool))
            if (!buffers.count(entry.key))
                buffers.emplace(entry.key, find_by_text(txn, entry.key));
    return buffers;
}

UnsettledFile open_unsettled(const StateStore& store) {
    const std::string dir = store.path("public");
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0)
        throw Error(ExitCode::io, "cannot inspect " + dir + ": " + std::strerror(errno));
    return UnsettledFile(dir + "/.unsettled", st.st_uid, st.st_gid);
}

void publish_pools(Transaction& txn, const StateStore& store, const Config& config) {
    const std::vector<PoolStatus> pools = pool_status(txn, config);
    replace_if_changed(store.path("pools.json"), slurm_pools_json(pools) + "\n", 0644);
    json list = json::array();
    for (const PoolStatus& pool : pools)
        list.push_back(pool_status_json(pool));
    replace_if_changed(store.path("public/pools.json"), list.dump(2) + "\n", 0644);
}

// Whether a pool's availability differs from public/pools.json's: an unmount or a recreated
// file system changes no record, yet pools.json must then report free = 0 (one marker read per
// pool, no sum over buffers).
bool availability_changed(Transaction& txn, const StateStore& store, const Config& config) {
    const auto published = read_optional_file(store.path("public/pools.json"), "");
    if (!published)
        return true;
    std::map<std::string, std::string> was;
    try {
        for (const json& pool : parse_published(*published))
            was[json_string(pool, "name")] = pool.value("availability", "");
    } catch (const Error&) {
        return true;
    }
    for (const PoolConfig& configured : config.pools) {
        const std::optional<PoolRecord> record = txn.find_pool(configured.name);
        const PoolAvailability now = pool_availability(
            configured, record ? std::optional<std::string>(record->uuid) : std::nullopt,
            record && record->draining);
        if (was[configured.name] != to_string(now))
            return true;
    }
    return false;
}

}  // namespace

void publish_all(WriteTransaction& txn, const StateStore& store, const Config& config) {
    publish_pools(txn, store, config);
    open_unsettled(store).write(touched_buffers(txn));
    PublicBuffers out(store, config);
    BufferFilter live;
    live.live_only = true;
    std::vector<BufferStatus> statuses;
    for (Buffer& buffer : txn.list_buffers(live))
        statuses.push_back(status_of(txn, config, std::move(buffer)));
    out.resync(statuses);
    // Layout 1's files: a shared one would show everyone's buffers under PrivateData.
    const std::string dir = store.path("public");
    remove_file(dir + "/buffers.json");
    for (uid_t uid : user_files(dir))
        remove_file(user_file(dir, uid));
    // Last: a resync cut short is done again by the next writer.
    replace_file(dir + "/.settings", public_settings(config), 0600);
}

void publish(WriteTransaction& txn, const StateStore& store, const Config& config) {
    const std::string settings = store.path("public/.settings");
    if (read_optional_file(settings, "") != public_settings(config)) {
        publish_all(txn, store, config);
        return;
    }
    if (txn.pools_touched() || availability_changed(txn, store, config))
        publish_pools(txn, store, config);
    UnsettledFile unsettled = open_unsettled(store);
    const std::map<std::string, uid_t> previous = unsettled.keys();
    const std::map<std::string, std::optional<Buffer>> touched = touched_buffers(txn);
    PublicBuffers out(store, config);
    const auto settle = [&](const std::string& key, const std::optional<Buffer>& buffer) {
        // Gone (a rolled-back insert), or moved to another uid: the old file must not stay.
        const auto was = previous.find(key);
        if (was != previous.end() && (!buffer || buffer->uid != was->second))
            out.remove(key, was->second);
        if (!buffer)
            return;
        if (is_final(buffer->state))
            out.remove(key, buffer->uid);
        else
            out.write(status_of(txn, config, *buffer));
    };
    // The last publish's keys that this transaction leaves alone are settled first, from the
    // committed state, while .unsettled still names them: killed later, once .unsettled names
    // only this transaction's keys, nothing is left that no publish would ever rewrite.
    for (const auto& [key, uid] : previous)
        if (!touched.count(key))
            settle(key, find_by_text(txn, key));
    unsettled.write(touched);  // before any file it names is written
    fault_point("publish.unsettled-written");
    for (const auto& [key, buffer] : touched)
        settle(key, buffer);
}

// ---- JSON ---------------------------------------------------------------------------------

std::string slurm_time(TimePoint time) {
    const std::time_t seconds = std::chrono::system_clock::to_time_t(time);
    std::tm tm{};
    localtime_r(&seconds, &tm);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm);
    return text;
}

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

json buffer_status_json(const BufferStatus& status) {
    const Buffer& b = status.buffer;
    const bool job = b.key.kind() == BufferKind::job;
    json entered = json::object();
    for (const auto& [state, time] : b.entered)
        entered[to_string(state)] = to_seconds(time);
    return {{"key", b.key.str()},
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
            {"queue_position", status.queue_position ? json(*status.queue_position) : json()}};
}

BufferStatus buffer_status_from_json(const json& value) {
    if (!value.is_object())
        throw Error(ExitCode::data, "a buffer is not a JSON object");
    BufferStatus status;
    Buffer& b = status.buffer;
    b.key = parse_buffer_key(json_string(value, "key"));
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
    return status;
}

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
    return table({"pool", "units", "quantity", "free", "gran", "state"}, rows);
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

std::uint32_t activations_of(const Buffer& buffer) {
    if (buffer.key.kind() == BufferKind::persistent)
        return buffer.use_count;
    return is_active(buffer.state) ? 1 : 0;
}

}  // namespace

std::string sessions_table(const std::vector<BufferStatus>& buffers) {
    std::vector<std::vector<std::string>> rows;
    std::size_t id = 0;
    for (const BufferStatus& status : buffers) {
        const Buffer& b = status.buffer;
        rows.push_back({std::to_string(++id), dwstat_state(b), token_of(b), "bbkit",
                        std::to_string(b.uid), slurm_time(b.created), expiration_of(b), "0"});
    }
    return table({"sess", "state", "token", "creator", "owner", "created", "expiration", "nodes"},
                 rows);
}

std::string instances_table(const std::vector<BufferStatus>& buffers) {
    std::vector<std::vector<std::string>> rows;
    std::size_t id = 0;
    for (const BufferStatus& status : buffers) {
        const Buffer& b = status.buffer;
        ++id;
        rows.push_back({std::to_string(id), dwstat_state(b), std::to_string(id),
                        format_size(b.allocated_bytes), "0", slurm_time(b.created),
                        expiration_of(b), "true", token_of(b),
                        b.key.kind() == BufferKind::persistent ? "true" : "false", "1"});
    }
    return table({"inst", "state", "sess", "bytes", "nodes", "created", "expiration", "intact",
                  "label", "public", "confs"},
                 rows);
}

std::string configurations_table(const std::vector<BufferStatus>& buffers) {
    std::vector<std::vector<std::string>> rows;
    std::size_t id = 0;
    for (const BufferStatus& status : buffers) {
        const Buffer& b = status.buffer;
        ++id;
        rows.push_back({std::to_string(id), dwstat_state(b), std::to_string(id), type_of(b),
                        access_type_of(b), std::to_string(activations_of(b))});
    }
    return table({"conf", "state", "inst", "type", "access_type", "activs"}, rows);
}

json sessions_json(const std::vector<BufferStatus>& buffers) {
    json list = json::array();
    std::size_t id = 0;
    for (const BufferStatus& status : buffers) {
        const Buffer& b = status.buffer;
        list.push_back({{"sess", ++id},
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
    std::size_t id = 0;
    for (const BufferStatus& status : buffers) {
        const Buffer& b = status.buffer;
        ++id;
        list.push_back({{"inst", id},
                        {"state", dwstat_state(b)},
                        {"sess", id},
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
    std::size_t id = 0;
    for (const BufferStatus& status : buffers) {
        const Buffer& b = status.buffer;
        ++id;
        list.push_back({{"conf", id},
                        {"state", dwstat_state(b)},
                        {"inst", id},
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

std::string burst_text(const StatusSnapshot& snapshot, const Config& config) {
    std::string out = "Name=bbkit DefaultPool=" + config.default_pool.value_or("(null)") +
                      " Granularity=1 TotalSpace=0 FreeSpace=0 UsedSpace=0\n";
    for (std::size_t i = 0; i < snapshot.pools.size(); ++i) {
        const PoolStatus& pool = snapshot.pools[i];
        out += "  PoolName[" + std::to_string(i) + "]=" + pool.name +
               " Granularity=" + format_size(pool.granularity) +
               " TotalSpace=" + format_size(pool.total) + " FreeSpace=" + format_size(pool.free) +
               " UsedSpace=" + format_size(pool.used) +
               " Availability=" + to_string(pool.availability) + "\n";
    }
    out += "  Flags=" + joined(flag_names(config.flags), ",") + "\n";
    const Timeouts& t = config.timeouts;
    out += "  StageInTimeout=" + std::to_string(t.stage_in) +
           " StageOutTimeout=" + std::to_string(t.stage_out) +
           " ValidateTimeout=" + std::to_string(t.validate) +
           " OtherTimeout=" + std::to_string(t.other) + "\n";
    if (!config.allow_users.empty())
        out += "  AllowUsers=" + joined(config.allow_users, ",") + "\n";
    else if (!config.deny_users.empty())
        out += "  DenyUsers=" + joined(config.deny_users, ",") + "\n";
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
            {"allow_users", config.allow_users},
            {"deny_users", config.deny_users},
            {"buffers", buffers},
            {"users", users}};
}

// ---- bb-stat job --------------------------------------------------------------------------

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
    if (job.status.queue_position)
        field("queue", std::to_string(*job.status.queue_position));
    field("pool", b.pool);
    field("requested", format_size(b.requested_bytes));
    field("allocated", format_size(b.allocated_bytes));
    field("directory", job.status.path);
    field("user", user_of(b));
    field("created", slurm_time(b.created));
    if (job.progress) {
        const StagingProgress& p = *job.progress;
        field("progress", std::to_string(p.files_done) + "/" + std::to_string(p.files_total) +
                              " files, " + format_size(p.bytes_done) + "/" +
                              format_size(p.bytes_total) + " bytes");
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
    if (job.progress)
        out["progress"] = {{"files_done", job.progress->files_done},
                           {"files_total", job.progress->files_total},
                           {"bytes_done", job.progress->bytes_done},
                           {"bytes_total", job.progress->bytes_total}};
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

std::string prometheus_text(const StatusSnapshot& snapshot) {
    std::ostringstream out;
    out << "# HELP bbkit_pool_bytes Burst buffer pool space in bytes, by kind.\n"
        << "# TYPE bbkit_pool_bytes gauge\n";
    for (const PoolStatus& pool : snapshot.pools) {
        const std::string label = "{pool=\"" + escape_label(pool.name) + "\",kind=\"";
        out << "bbkit_pool_bytes" << label << "total\"} " << pool.total << '\n'
            << "bbkit_pool_bytes" << label << "used\"} " << pool.used << '\n'
            << "bbkit_pool_bytes" << label << "trash\"} " << pool.trash << '\n'
            << "bbkit_pool_bytes" << label << "free\"} " << pool.free << '\n';
    }
    out << "# HELP bbkit_buffers Burst buffers by state.\n"
        << "# TYPE bbkit_buffers gauge\n";
    for (BufferState state : all_buffer_states()) {
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
    return out.str();
}

}  // namespace bbkit
