#include "bbkit/store.hpp"

#include <fcntl.h>
#include <limits.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/record_seal.hpp"
#include "bbkit/seal.hpp"
#include "bbkit/sqlite.hpp"
#include "bbkit/state_dir.hpp"
#include "bbkit/store_schema.hpp"
#include "bbkit/text.hpp"
#include "bbkit/user.hpp"

namespace bbkit {

using sqlite::Query;

namespace {

std::int64_t to_nanos(TimePoint time) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(time.time_since_epoch()).count();
}

TimePoint from_nanos(std::int64_t nanos) {
    return TimePoint(
        std::chrono::duration_cast<TimePoint::duration>(std::chrono::nanoseconds(nanos)));
}

// "allocating=1700000000000000000,allocated=..." : one column instead of fifteen.
std::string encode_entered(const std::map<BufferState, TimePoint>& entered) {
    std::string text;
    for (const auto& [state, time] : entered)
        text += std::string(text.empty() ? "" : ",") + to_string(state) + "=" +
                std::to_string(to_nanos(time));
    return text;
}

std::map<BufferState, TimePoint> decode_entered(const std::string& text) {
    std::map<BufferState, TimePoint> entered;
    std::istringstream items(text);
    std::string item;
    while (std::getline(items, item, ',')) {
        const auto eq = item.find('=');
        if (eq == std::string::npos)
            continue;
        entered[parse_buffer_state(item.substr(0, eq))] =
            from_nanos(std::stoll(item.substr(eq + 1)));
    }
    return entered;
}

}  // namespace

// ---- StateStore -----------------------------------------------------------------------------

struct StateStore::Impl {
    std::string dir;
    StoreOptions options;
    Fd lock_fd;
    sqlite::Database db;
    std::optional<StateLock> lock;
    // Root's key (RecordSeal::for_process) and whether rows must match it to be acted on.
    std::optional<RecordSeal> seal;
    bool check_seals = false;
    // The state owner, when root must not trust its files (check_seals): sqlite::ForeignWriter.
    std::optional<sqlite::ForeignWriter> writer;
    // With StoreOptions::tolerate_foreign_schema: what check_schema would have refused.
    std::vector<std::string> foreign_schema;
    std::size_t sealed_by_migration = 0;  // rows bb-pool migrate sealed
    // What ControllerToken and the fence read (record_key, state_dir).
    Config config;
    int schema = 0;  // state.db's schema version once opened (migrated unless foreign)
    // The controller claim this process writes under (ControllerClaim): this host's token
    // once it matched state.db's claim, then fixed for the process's life; none before.
    std::optional<std::int64_t> epoch;

    StateLock acquire_lock(const std::string& who) {
        if (!lock_fd)
            throw Error(ExitCode::software, "cannot write " + db.path() +
                                                ": the store was opened read-only (a reading "
                                                "command never changes state)");
        return StateLock::acquire(lock_fd, dir, options.lock_timeout, who);
    }
};

namespace {

std::string buffer_columns() {
    return "key, cluster, job_id, incarnation, name, pool, requested_bytes, allocated_bytes, uid, "
           "gid, user, state, reason, message, entered, directory, access, type, staging, owner, "
           "expires, use_count, created, lock_pid, lock_start, reaped, failure, failed, "
           "temp_token, "
           "id, seal";
}
constexpr int row_id_column = 29;
constexpr int seal_column = 30;

// The columns of buffer_columns(), by name, up to the id.
enum RecordColumn {
    c_key,
    c_cluster,
    c_job_id,
    c_incarnation,
    c_name,
    c_pool,
    c_requested,
    c_allocated,
    c_uid,
    c_gid,
    c_user,
    c_state,
    c_reason,
    c_message,
    c_entered,
    c_directory,
    c_access,
    c_type,
    c_staging,
    c_owner,
    c_expires,
    c_use_count,
    c_created,
    c_lock_pid,
    c_lock_start,
    c_reaped,
    c_failure,
    c_failed,
    c_temp_token,
    c_id
};
static_assert(c_id == row_id_column);

// A buffer row's values up to its id, each as SQLite gives it as text (none for NULL): what a
// seal covers.
using RowValues = std::array<std::optional<std::string>, row_id_column + 1>;

RowValues stored_values(const Query& q) {
    RowValues values;
    for (int c = 0; c <= row_id_column; ++c)
        if (!q.is_null(c))
            values[static_cast<std::size_t>(c)] = q.text(c);
    return values;
}

// A row's canonical text for its seal: every column up to the id, length-prefixed (NULL told
// apart from ""). A column added to buffer_columns() is sealed with the rest.
std::string row_text(const RowValues& values) {
    std::string text;
    for (const std::optional<std::string>& value : values)
        text += value ? std::to_string(value->size()) + ":" + *value + ";" : "~;";
    return text;
}

std::string row_text(const Query& q) {
    return row_text(stored_values(q));
}

std::string integer_text(std::int64_t value) {
    return std::to_string(value);
}

std::optional<std::string> nanos_text(const std::optional<TimePoint>& time) {
    if (!time)
        return std::nullopt;
    return integer_text(to_nanos(*time));
}

// What root binds for `b` (bind_mutable and the key's columns), as SQLite will give each value
// back as text: a seal is computed from these, never from what a statement reads back
// (store_test checks every column against the row SQLite stores).
RowValues bound_values(const Buffer& b, std::int64_t id) {
    RowValues v;
    const bool job = b.key.kind() == BufferKind::job;
    v[c_key] = b.key.str();
    v[c_cluster] = b.key.cluster;
    if (job) {
        v[c_job_id] = integer_text(static_cast<std::int64_t>(b.key.job_id));
        v[c_incarnation] = integer_text(static_cast<std::int64_t>(b.key.incarnation));
    } else {
        v[c_name] = b.key.name;
    }
    v[c_pool] = b.pool;
    v[c_requested] = integer_text(static_cast<std::int64_t>(b.requested_bytes));
    v[c_allocated] = integer_text(static_cast<std::int64_t>(b.allocated_bytes));
    v[c_uid] = integer_text(static_cast<std::int64_t>(b.uid));
    v[c_gid] = integer_text(static_cast<std::int64_t>(b.gid));
    v[c_user] = b.user;
    v[c_state] = std::string(to_string(b.state));
    v[c_reason] = b.reason;
    v[c_message] = b.message;
    v[c_entered] = encode_entered(b.entered);
    v[c_directory] = b.directory;
    v[c_access] = b.access;
    v[c_type] = b.type;
    v[c_staging] = b.staging;
    v[c_owner] = b.owner;
    v[c_expires] = nanos_text(b.expires);
    v[c_use_count] = integer_text(static_cast<std::int64_t>(b.use_count));
    v[c_created] = integer_text(to_nanos(b.created));
    if (b.run_lock_holder) {
        v[c_lock_pid] = integer_text(static_cast<std::int64_t>(b.run_lock_holder->pid));
        v[c_lock_start] = integer_text(static_cast<std::int64_t>(b.run_lock_holder->start_time));
    }
    v[c_reaped] = b.reaped ? "1" : "0";
    v[c_failure] = b.failure;
    v[c_failed] = nanos_text(b.failed);
    v[c_temp_token] = b.temp_token;
    v[c_id] = integer_text(id);
    return v;
}

// Whether root may act on the row `q` is on: sealed with root's key, or nobody checks.
bool trusted_row(const StateStore::Impl& impl, const Query& q);

Buffer read_buffer(const Query& q) {
    Buffer b;
    if (q.is_null(4))
        b.key = BufferKey::job(q.text(1), q.unsigned_integer(2),
                               static_cast<std::uint32_t>(q.integer(3)));
    else
        b.key = BufferKey::persistent(q.text(1), q.text(4));
    b.pool = q.text(5);
    b.requested_bytes = q.unsigned_integer(6);
    b.allocated_bytes = q.unsigned_integer(7);
    b.uid = static_cast<uid_t>(q.integer(8));
    b.gid = static_cast<gid_t>(q.integer(9));
    b.user = q.text(10);
    b.state = parse_buffer_state(q.text(11));
    b.reason = q.text(12);
    b.message = q.text(13);
    b.entered = decode_entered(q.text(14));
    b.directory = q.text(15);
    b.access = q.text(16);
    b.type = q.text(17);
    b.staging = q.text(18);
    b.owner = q.text(19);
    if (!q.is_null(20))
        b.expires = from_nanos(q.integer(20));
    b.use_count = static_cast<std::uint32_t>(q.integer(21));
    b.created = from_nanos(q.integer(22));
    if (!q.is_null(23))
        b.run_lock_holder = ProcessId{static_cast<pid_t>(q.integer(23)), q.unsigned_integer(24)};
    b.reaped = q.integer(25) != 0;
    b.failure = q.text(26);
    if (!q.is_null(27))
        b.failed = from_nanos(q.integer(27));
    b.temp_token = q.text(28);
    b.record_id = q.integer(row_id_column);
    return b;
}

// The rows root may act on; the others are left out (bb-pool check lists them).
std::vector<Buffer> read_buffers(const StateStore::Impl& impl, Query& q) {
    std::vector<Buffer> buffers;
    while (q.step())
        if (trusted_row(impl, q))
            buffers.push_back(read_buffer(q));
    return buffers;
}

bool trusted_row(const StateStore::Impl& impl, const Query& q) {
    return !impl.check_seals || impl.seal->matches(row_text(q), q.text(seal_column));
}

// The seal of a row that will hold `values`, under root's key; "" for a process without it
// (root refuses such a row: a record only root writes is root's).
std::string seal_of(const StateStore::Impl& impl, const RowValues& values) {
    return impl.seal ? impl.seal->seal(row_text(values)) : std::string();
}

// Every write of a buffer row addresses it by id and must change exactly that row: with
// triggers off nothing else runs, so anything else is a database that is not what bbkit made.
void check_one_row(const StateStore::Impl& impl, const std::string& key) {
    const int changed = impl.db.changes();
    if (changed != 1)
        throw Error(ExitCode::software, "writing the record of buffer " + printable(key) +
                                            " changed " + std::to_string(changed) +
                                            " rows of state.db, not one (run bb-pool check)");
}

// Binds the fields update_buffer() may change, as parameters 1..21.
void bind_mutable(Query& q, const Buffer& b) {
    q.bind(1, b.pool)
        .bind(2, b.requested_bytes)
        .bind(3, b.allocated_bytes)
        .bind(4, static_cast<std::int64_t>(b.uid))
        .bind(5, static_cast<std::int64_t>(b.gid))
        .bind(6, b.user)
        .bind(7, b.reason)
        .bind(8, b.message)
        .bind(9, b.directory)
        .bind(10, b.access)
        .bind(11, b.type)
        .bind(12, b.staging)
        .bind(13, b.owner);
    if (b.expires)
        q.bind(14, to_nanos(*b.expires));
    else
        q.bind_null(14);
    q.bind(15, static_cast<std::int64_t>(b.use_count));
    if (b.run_lock_holder)
        q.bind(16, static_cast<std::int64_t>(b.run_lock_holder->pid))
            .bind(17, b.run_lock_holder->start_time);
    else
        q.bind_null(16).bind_null(17);
    q.bind(18, static_cast<std::int64_t>(b.reaped ? 1 : 0)).bind(19, b.failure);
    if (b.failed)
        q.bind(20, to_nanos(*b.failed));
    else
        q.bind_null(20);
    q.bind(21, b.temp_token);
}

QueueEntry read_queue_entry(const Query& q) {
    QueueEntry e;
    e.seq = q.integer(0);
    e.pool = q.text(1);
    e.key = q.text(2);
    e.requested_bytes = q.unsigned_integer(3);
    e.waiter = ProcessId{static_cast<pid_t>(q.integer(4)), q.unsigned_integer(5)};
    e.enqueued = from_nanos(q.integer(6));
    return e;
}

const char* const queue_columns =
    "seq, pool, key, requested_bytes, waiter_pid, waiter_start, enqueued";

// `bb-pool migrate`'s sealing of the rows of a database from before seals: root vouches for
// them as they are, which only an administrator's command may decide (bbkit(7), SECURITY).
std::size_t seal_every_row(StateStore::Impl& impl) {
    impl.db.begin(true);
    try {
        std::vector<std::pair<std::int64_t, std::string>> seals;
        {
            Query q = impl.db.query("SELECT " + buffer_columns() + " FROM buffers WHERE seal = ''");
            while (q.step())
                seals.emplace_back(q.integer(row_id_column), seal_of(impl, stored_values(q)));
        }
        for (const auto& [id, seal] : seals) {
            Query update = impl.db.query("UPDATE buffers SET seal = ?1 WHERE id = ?2");
            update.bind(1, seal).bind(2, id);
            update.run();
            check_one_row(impl, "record " + std::to_string(id));
        }
        impl.db.commit("sealing the records failed");
        return seals.size();
    } catch (...) {
        impl.db.rollback();
        throw;
    }
}

// The refusal of a database older than what root sealed, or from before seals, whose owner is
// not root: root seals nothing on the owner's word (bbkit(7), SECURITY).
Error unsealed_schema_error(int found, std::optional<int> sealed) {
    if (sealed)
        return Error(ExitCode::no_perm,
                     "state.db has schema version " + std::to_string(found) +
                         ", older than the version " + std::to_string(*sealed) +
                         " root sealed it at: it was replaced or rewound outside bbkit, and root "
                         "migrates nothing on its owner's word (bbkit(7), SECURITY; bb-pool check "
                         "--repair rebuilds it from its sealed records)");
    return Error(ExitCode::no_perm,
                 "state.db has schema version " + std::to_string(found) +
                     ", from before records were sealed, and its owner is not root: run bb-pool "
                     "migrate as root once to seal its records (bbkit(7), SECURITY)");
}

// Whether `db` is a file nobody has written a schema into yet (open_state_dir creates it empty).
bool fresh_database(sqlite::Database& db, int found) {
    if (found != 0)
        return false;
    Query q = db.query("SELECT COUNT(*) FROM sqlite_schema");
    return q.step() && q.integer(0) == 0;
}

// ---- controller failover (bbkit(7), STATE DIRECTORY, "Controller failover") -------------------

// A schema root refused (bb-pool check's foreign_schema) may lack the table: only its rebuild
// reads that file's claim (`foreign`), and copes with a failure.
std::optional<ControllerClaim> read_claim(StateStore::Impl& impl, bool foreign = false) {
    if (impl.schema < first_controller_schema || (!impl.foreign_schema.empty() && !foreign))
        return std::nullopt;
    Query q = impl.db.query("SELECT epoch, host, since FROM controller WHERE id = 1");
    if (!q.step())
        return std::nullopt;
    return ControllerClaim{q.integer(0), q.text(1), from_nanos(q.integer(2))};
}

// Why this process may not write now, and whether this host's takeover may still let it;
// none when it may (a claim it holds, or no claim at all). Inside the write transaction: the
// claim read is the one its commit would follow.
struct Fence {
    std::string why;
    bool may_wait = false;
};
std::optional<Fence> fence(StateStore::Impl& impl, const std::optional<ControllerClaim>& claim) {
    if (!claim)
        return std::nullopt;
    if (impl.epoch) {
        if (*impl.epoch == claim->epoch)
            return std::nullopt;
        return Fence{"this process began while this host held state directory " + impl.dir +
                         " (epoch " + std::to_string(*impl.epoch) + "), which " +
                         to_string(*claim) +
                         " has taken over since: a controller that lost its state directory "
                         "writes nothing (bbkit(7), STATE DIRECTORY)",
                     false};
    }
    const std::optional<std::int64_t> token = ControllerToken::held(impl.config);
    if (token && *token == claim->epoch) {
        impl.epoch = token;
        return std::nullopt;
    }
    return Fence{"this host does not hold state directory " + impl.dir + ": " + to_string(*claim) +
                     " does; bb-pool takeover, which SlurmctldPrimaryOnProg runs, makes this host "
                     "its writer (bbkit(7), STATE DIRECTORY)",
                 true};
}

std::optional<Fence> fence(StateStore::Impl& impl) {
    return fence(impl, read_claim(impl));
}

std::string this_host_name() {
    std::array<char, HOST_NAME_MAX + 1> host{};
    if (gethostname(host.data(), host.size() - 1) != 0)
        throw system_error("cannot read this host's name", errno);
    return host.data();
}

// Whether state.db holds a record sealed by root, with whichever key.
bool has_sealed_records(StateStore::Impl& impl) {
    if (impl.schema < first_sealed_schema)
        return false;
    Query q = impl.db.query("SELECT 1 FROM buffers WHERE seal <> '' LIMIT 1");
    return q.step();
}

// Runs `attempt` (which returns why this process may not write, or none when it may) until it
// may, waiting while this host may still take the claim over, at most timeouts.takeover
// seconds; then Error(unavailable) with the reason. `attempt` takes and leaves whatever locks.
void wait_for_claim(StateStore::Impl& impl, const std::function<std::optional<Fence>()>& attempt) {
    const std::chrono::seconds wait(impl.config.timeouts.takeover);
    const auto deadline = std::chrono::steady_clock::now() + wait;
    bool told = false;
    for (;;) {
        const std::optional<Fence> refused = attempt();
        if (!refused)
            return;
        if (!refused->may_wait || std::chrono::steady_clock::now() >= deadline)
            throw Error(ExitCode::unavailable, refused->why);
        if (!std::exchange(told, true))
            spdlog::warn("waiting up to {} s for this host to take state directory {} over",
                         wait.count(), impl.dir);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
}

void migrate(StateStore::Impl& impl, int found, bool fresh) {
    const int known = state_schema_version();
    if (found == known)
        return;
    if (impl.options.read_only)
        throw Error(ExitCode::config,
                    "cannot read state.db: its schema version " + std::to_string(found) +
                        " is older than this bbkit's " + std::to_string(known) + " (run " +
                        (found < first_sealed_schema ? "bb-pool migrate" : "bb-pool recover") +
                        " once to migrate it)");
    // Rows written before seals are sealed only by root: by its explicit command, or where
    // nobody but root could have written them. The owner's own processes never migrate across.
    const bool seals_rows = found < first_sealed_schema && !fresh;
    if (seals_rows && (geteuid() != 0 || (impl.check_seals && !impl.options.migrate_unsealed)))
        throw unsealed_schema_error(found, std::nullopt);
    const StateLock lock = impl.acquire_lock("bbkit schema migration");
    impl.schema = found;
    if (const std::optional<Fence> refused = fence(impl))  // a claim an older version keeps
        throw Error(ExitCode::unavailable, refused->why);
    migrate_schema(impl.db);
    if (seals_rows && impl.seal)
        impl.sealed_by_migration = seal_every_row(impl);
}

// What root checks of a database another account can write before it reads anything of it:
// its version against what root sealed (the ledger beside the key), and its schema, object by
// object, against the one bbkit creates (bbkit(7), SECURITY). With tolerate_foreign_schema
// (bb-pool check), what it would refuse is kept in impl.foreign_schema instead.
void check_foreign_database(StateStore::Impl& impl, const Config& config, int found, bool fresh) {
    const std::optional<int> sealed = SealLedger::sealed_version(config);
    const bool tolerate = impl.options.tolerate_foreign_schema;
    if (!fresh && ((sealed && found < *sealed) ||
                   (found < first_sealed_schema && (sealed || !impl.options.migrate_unsealed)))) {
        Error refused = unsealed_schema_error(found, sealed);
        if (!tolerate)
            throw refused;
        impl.foreign_schema = {refused.what()};
    } else if (tolerate) {
        impl.foreign_schema = foreign_schema(impl.db, found);
    } else {
        check_schema(impl.db, found);
    }
}

// Opens state.db with the journal its file system needs (state_journal; bbkit(7), STATE
// DIRECTORY). A file in the other mode (moved between a local disk and a network file system) is
// converted by a writer, under the state lock so that no bbkit writer on any host runs, and only
// when no other connection has it open (SQLite's own lock on the file, which reaches every host
// that shares it); a reader refuses it, as it changes nothing.
void open_database(StateStore::Impl& impl, const std::string& db_path, sqlite::Journal journal,
                   const FileSystemKind& fs) {
    const bool want_wal = journal == sqlite::Journal::wal;
    const std::optional<bool> wal = sqlite::wal_header(db_path, impl.writer);
    if (!wal || *wal == want_wal) {
        impl.db = sqlite::Database(db_path, impl.writer, journal, impl.options.read_only);
        if (impl.options.no_mmap)
            impl.db.exec("PRAGMA mmap_size = 0", "setting mmap_size=0 failed");
        return;
    }
    const std::string why =
        want_wal ? std::string("uses a rollback journal on a local disk, where bbkit uses WAL")
                 : "is in WAL mode on a " + fs.name + " file system, where WAL is not safe";
    if (impl.options.read_only)
        throw Error(ExitCode::config, "state database " + db_path + " " + why +
                                          ": a writing command (e.g. bb-pool recover) converts "
                                          "it (bbkit(7), STATE DIRECTORY)");
    const StateLock lock = impl.acquire_lock("bbkit journal conversion");
    impl.db = sqlite::Database(db_path, impl.writer, journal);  // rollback: converts here
    if (want_wal)
        impl.db.exec("PRAGMA journal_mode=WAL", "converting state.db to WAL failed");
    spdlog::info("converted {} to {}: it {}", db_path, want_wal ? "WAL" : "a rollback journal",
                 why);
}

}  // namespace

StateStore::StateStore(const Config& config, StoreOptions options)
    : impl_(std::make_unique<Impl>()) {
    Impl& impl = *impl_;
    impl.dir = config.state_dir;
    const std::string db_path = impl.dir + "/state.db";
    impl.options = options;
    impl.config = config;
    // Judged before anything is created: a refused file system leaves no state directory.
    FileSystemKind fs;
    const sqlite::Journal journal = state_journal(config, &fs);
    impl.lock_fd = open_state_dir(config, options.read_only);

    // A missing key is made only once state.db shows that no record was sealed with another:
    // a backup controller without the primary's key would otherwise make its own and act on
    // none of the records (bbkit(7), STATE DIRECTORY, "Controller failover").
    const bool create_key = !options.read_only && RecordSeal::missing(config);
    impl.seal = RecordSeal::for_process(config, false);
    if (impl.seal || create_key) {
        if (const std::optional<User> owner = untrusted_state_owner(config)) {
            impl.check_seals = true;
            impl.writer = sqlite::ForeignWriter{owner->uid, owner->gid};
        }
    }
    open_database(impl, db_path, journal, fs);
    const int found = schema_version(impl.db);  // refuses a file that is not SQLite, or newer
    const bool fresh = fresh_database(impl.db, found);
    impl.schema = found;
    if (create_key) {
        if (impl.check_seals && !options.tolerate_foreign_schema && has_sealed_records(impl))
            throw Error(ExitCode::config,
                        "root's record key " + config.record_key + " is missing here, and " +
                            db_path +
                            " holds records root sealed with a key: copy the key (and its .sealed "
                            "ledger) from the host that sealed them, as every controller sharing a "
                            "state directory needs the same one; if it is lost for good, bb-pool "
                            "check --repair makes a new one, and trusts none of the records "
                            "(bbkit(7), STATE DIRECTORY)");
        impl.seal = RecordSeal::for_process(config, true);
    }
    if (impl.check_seals)
        check_foreign_database(impl, config, found, fresh);
    if (impl.foreign_schema.empty()) {
        migrate(impl, found, fresh);
        impl.schema = state_schema_version();
        if (impl.seal && !options.read_only)
            SealLedger::record(config, state_schema_version());
    }
    // The claim this process writes under, when this host holds it as the process begins;
    // a writing command of a host that does not hold it goes no further.
    if (!options.read_only) {
        const std::optional<ControllerClaim> claim = read_claim(impl);
        const std::optional<std::int64_t> token =
            claim ? ControllerToken::held(config) : std::nullopt;
        if (token && *token == claim->epoch)
            impl.epoch = token;
        else if (claim && !options.takes_over)
            wait_for_claim(impl, [&impl] { return fence(impl); });
    }
    {
        const bool wal = impl.db.journal() == sqlite::Journal::wal;
        // A reader's connection keeps SQLite's default rollback mode (it sets nothing).
        Query q = impl.db.query("PRAGMA journal_mode");
        const std::string mode = q.step() ? q.text(0) : "";
        if (wal ? mode != "wal" : mode != "truncate" && !(options.read_only && mode == "delete"))
            throw Error(ExitCode::config, "state database " + impl.db.path() + " is not in " +
                                              (wal ? "WAL mode" : "rollback-journal mode") +
                                              " (restore it from a backup)");
    }
}

StateStore::~StateStore() = default;

const std::string& StateStore::dir() const {
    return impl_->dir;
}

std::string StateStore::path(const std::string& relative) const {
    return impl_->dir + "/" + relative;
}

const std::vector<std::string>& StateStore::foreign_schema() const {
    return impl_->foreign_schema;
}

std::size_t StateStore::sealed_by_migration() const {
    return impl_->sealed_by_migration;
}

bool StateStore::syncs_commits() const {
    Query q = impl_->db.query("PRAGMA synchronous");
    return q.step() && q.integer(0) == 2;  // FULL
}

// ---- rebuild --------------------------------------------------------------------------------

namespace {

// The columns of a buffer row that hold integers: a sealed row's are root's integers, carried
// as such.
bool integer_column(int c) {
    switch (c) {
        case c_job_id:
        case c_incarnation:
        case c_requested:
        case c_allocated:
        case c_uid:
        case c_gid:
        case c_expires:
        case c_use_count:
        case c_created:
        case c_lock_pid:
        case c_lock_start:
        case c_reaped:
        case c_failed:
        case c_id:
            return true;
        default:
            return false;
    }
}

struct SealedRow {
    RowValues values;
    std::string seal;
};

// The rows of the old file whose seal matches, read without any of its indexes.
std::vector<SealedRow> sealed_rows(StateStore::Impl& impl, RebuildResult& result) {
    std::vector<SealedRow> rows;
    try {
        Query q = impl.db.query("SELECT " + buffer_columns() + " FROM buffers NOT INDEXED");
        while (q.step()) {
            RowValues values = stored_values(q);
            const std::string seal = q.text(seal_column);
            bool integers = true;
            for (int c = 0; c <= row_id_column; ++c)
                if (integer_column(c) && values[static_cast<std::size_t>(c)] &&
                    !parse_signed(*values[static_cast<std::size_t>(c)]))
                    integers = false;
            if (integers && !seal.empty() && impl.seal->matches(row_text(values), seal))
                rows.push_back({std::move(values), seal});
            else
                ++result.left_out;
        }
    } catch (const Error& e) {
        rows.clear();
        result.left_out = 0;
        result.unreadable = e.what();
    }
    return rows;
}

void insert_sealed_row(sqlite::Database& db, const SealedRow& row) {
    Query q = db.query("INSERT INTO buffers (" + buffer_columns() +
                       ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,"
                       " ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28,"
                       " ?29, ?30, ?31)");
    for (int c = 0; c <= row_id_column; ++c) {
        const std::optional<std::string>& value = row.values[static_cast<std::size_t>(c)];
        if (!value)
            q.bind_null(c + 1);
        else if (integer_column(c))
            q.bind(c + 1, *parse_signed(*value));
        else
            q.bind(c + 1, *value);
    }
    q.bind(seal_column + 1, row.seal);
    q.run("carrying a sealed record failed");
    // The accounting's hold times are not sealed and not carried: they come again from the
    // sealed times the record entered its states (allocating; its final state).
    const std::map<BufferState, TimePoint> entered =
        decode_entered(row.values[c_entered].value_or(""));
    const BufferState state = parse_buffer_state(row.values[c_state].value_or(""));
    Query times = db.query("UPDATE buffers SET held_since = ?1, ended = ?2 WHERE id = ?3");
    if (const auto allocating = entered.find(BufferState::allocating); allocating != entered.end())
        times.bind(1, to_nanos(allocating->second));
    else
        times.bind_null(1);
    if (const auto end = entered.find(state); is_final(state) && end != entered.end())
        times.bind(2, to_nanos(end->second));
    else
        times.bind_null(2);
    times.bind(3, *parse_signed(row.values[row_id_column].value_or("0")));
    times.run("carrying a sealed record failed");
}

// Renames `from` to `to` in the directory `dir_fd` (`dir`); a missing `from` is fine.
void rename_in(int dir_fd, const std::string& dir, const std::string& from, const std::string& to) {
    if (::renameat(dir_fd, from.c_str(), dir_fd, to.c_str()) != 0 && errno != ENOENT)
        throw system_error("cannot rename " + dir + "/" + from + " to " + to, errno);
}

}  // namespace

RebuildResult StateStore::rebuild_from_sealed_records(const std::vector<PoolRecord>& pools,
                                                      const std::string& who) {
    Impl& impl = *impl_;
    if (!impl.seal)
        throw Error(ExitCode::no_perm,
                    "only root, which holds the record key, can rebuild state.db from its sealed "
                    "records (run bb-pool check --repair as root)");
    const StateLock lock = impl.acquire_lock(who);
    // A claim the old file still shows is this host's to carry, as any write's: otherwise a
    // rebuild would leave state.db writable from any host.
    std::optional<ControllerClaim> claim;
    try {
        claim = read_claim(impl, true);
    } catch (const Error&) {
        claim.reset();  // a foreign file's claim may be unreadable: none is carried
    }
    if (const std::optional<Fence> refused = fence(impl, claim))
        throw Error(ExitCode::unavailable, refused->why);
    RebuildResult result;
    const std::vector<SealedRow> rows = sealed_rows(impl, result);

    const Fd dir_fd(::open(impl.dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat dir_st {};
    if (!dir_fd || ::fstat(dir_fd.get(), &dir_st) != 0)
        throw system_error("cannot open the state directory " + impl.dir, errno);
    const std::string stamp =
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count());
    const std::string fresh = "state.db.rebuilt." + std::to_string(::getpid());
    for (const char* suffix : {"", "-wal", "-shm", "-journal"})
        ::unlinkat(dir_fd.get(), (fresh + suffix).c_str(), 0);
    {
        const Fd file = open_state_file(impl.dir, fresh, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (::fchown(file.get(), dir_st.st_uid, static_cast<gid_t>(-1)) != 0)
            throw system_error("cannot give " + impl.dir + "/" + fresh + " to the state owner",
                               errno);
    }
    {
        sqlite::Database db(impl.dir + "/" + fresh, impl.writer, impl.db.journal());
        migrate_schema(db);
        db.begin(true);
        try {
            for (const PoolRecord& pool : pools) {
                Query q = db.query(
                    "INSERT INTO pools (name, path, uuid, draining)"
                    " VALUES (?1, ?2, ?3, 0)");
                q.bind(1, pool.name).bind(2, pool.path).bind(3, pool.uuid);
                q.run("registering a pool failed");
            }
            for (const SealedRow& row : rows) {
                const std::string& pool = *row.values[c_pool];
                if (std::none_of(pools.begin(), pools.end(),
                                 [&pool](const PoolRecord& p) { return p.name == pool; })) {
                    Query q = db.query(
                        "INSERT OR IGNORE INTO pools (name, path, uuid, draining)"
                        " VALUES (?1, '', '', 0)");
                    q.bind(1, pool);
                    q.run("registering a pool failed");
                }
                insert_sealed_row(db, row);
                ++result.carried;
            }
            Query usage = db.query(std::string("INSERT INTO pool_usage (pool, used) SELECT name, "
                                               "(SELECT COALESCE(SUM(allocated_bytes), 0) FROM "
                                               "buffers WHERE buffers.pool = pools.name AND state"
                                               " IN ") +
                                   holding_states + ") FROM pools");
            usage.run("counting the pools' used space failed");
            if (claim) {
                Query q = db.query(
                    "INSERT INTO controller (id, epoch, host, since) VALUES (1, ?1, ?2, ?3)");
                q.bind(1, claim->epoch).bind(2, claim->host).bind(3, to_nanos(claim->since));
                q.run("carrying the controller claim failed");
            }
            db.commit("writing the rebuilt state.db failed");
        } catch (...) {
            db.rollback();
            throw;
        }
        if (db.journal() == sqlite::Journal::wal)
            db.exec("PRAGMA wal_checkpoint(TRUNCATE)", "checkpointing the rebuilt state.db failed");
    }
    for (const char* suffix : {"-wal", "-shm", "-journal"})
        ::unlinkat(dir_fd.get(), (fresh + suffix).c_str(), 0);
    result.kept_as = "state.db.foreign." + stamp;
    rename_in(dir_fd.get(), impl.dir, "state.db", result.kept_as);
    rename_in(dir_fd.get(), impl.dir, "state.db-wal", result.kept_as + "-wal");
    rename_in(dir_fd.get(), impl.dir, "state.db-journal", result.kept_as + "-journal");
    ::unlinkat(dir_fd.get(), "state.db-shm", 0);
    rename_in(dir_fd.get(), impl.dir, fresh, "state.db");
    if (::fsync(dir_fd.get()) != 0)
        throw system_error("cannot sync the state directory " + impl.dir, errno);
    return result;
}

// ---- controller failover --------------------------------------------------------------------

std::string to_string(const ControllerClaim& claim) {
    return printable(claim.host) + " (epoch " + std::to_string(claim.epoch) + ", since " +
           local_time(to_nanos(claim.since)) + ")";
}

namespace {

// Whether state.db holds sealed records and root's key here matches none of them: the key of
// another host (each controller needs the one that sealed them).
bool sealed_with_another_key(StateStore::Impl& impl) {
    if (!impl.check_seals || impl.schema < first_sealed_schema)
        return false;
    Query q = impl.db.query("SELECT " + buffer_columns() + " FROM buffers WHERE seal <> ''");
    bool any = false;
    while (q.step()) {
        if (trusted_row(impl, q))
            return false;
        any = true;
    }
    return any;
}

}  // namespace

Takeover StateStore::take_over(const std::string& who) {
    Impl& impl = *impl_;
    if (geteuid() != 0 || impl.config.record_key.empty())
        throw Error(ExitCode::no_perm,
                    "only root takes a state directory over: this host's token is a file of "
                    "root's beside its record key (bbkit(7), STATE DIRECTORY)");
    if (impl.schema < first_controller_schema)
        throw Error(ExitCode::config, "state.db has schema version " + std::to_string(impl.schema) +
                                          ", from before controller claims (bb-pool check "
                                          "--repair rebuilds it)");
    const StateLock lock = impl.acquire_lock(who);
    Takeover result;
    impl.db.begin(true);
    try {
        result.before = read_claim(impl);
        const std::optional<std::int64_t> token = ControllerToken::held(impl.config);
        if (result.before && token && *token == result.before->epoch) {
            impl.db.rollback();
            result.now = *result.before;
            impl.epoch = token;
            return result;
        }
        if (sealed_with_another_key(impl))
            throw Error(ExitCode::config,
                        "root's record key " + impl.config.record_key +
                            " matches none of the records in " + impl.db.path() +
                            ": they were sealed with another host's key; copy that key here (and "
                            "its .sealed ledger), as every controller sharing a state directory "
                            "needs the same one (bbkit(7), STATE DIRECTORY)");
        result.now.epoch = result.before ? result.before->epoch + 1 : 1;
        result.now.host = this_host_name();
        result.now.since = std::chrono::system_clock::now();
        Query q = impl.db.query(
            "INSERT OR REPLACE INTO controller (id, epoch, host, since) VALUES (1, ?1, ?2, ?3)");
        q.bind(1, result.now.epoch).bind(2, result.now.host).bind(3, to_nanos(result.now.since));
        q.run("writing the controller claim failed");
        fault_point("takeover.before-commit");
        impl.db.commit("writing the controller claim failed");
    } catch (...) {
        impl.db.rollback();
        throw;
    }
    // From the commit on, no other host's process writes; this one's token comes after, so a
    // takeover killed between the two leaves nothing writing until it is run again.
    fault_point("takeover.committed");
    ControllerToken::hold(impl.config, result.now.epoch);
    impl.epoch = result.now.epoch;
    result.changed = true;
    return result;
}

void StateStore::release_controller() {
    if (geteuid() != 0 || impl_->config.record_key.empty())
        throw Error(ExitCode::no_perm,
                    "only root releases a state directory: this host's token is a file of root's "
                    "beside its record key (bbkit(7), STATE DIRECTORY)");
    ControllerToken::release(impl_->config);
    impl_->epoch.reset();
}

ClaimStatus StateStore::claim_status() {
    ClaimStatus status;
    {
        ReadSnapshot snapshot(*this);
        status.claim = snapshot.controller();
    }
    status.token = ControllerToken::held(impl_->config);
    status.holds = !status.claim || (status.token && *status.token == status.claim->epoch);
    return status;
}

std::optional<std::int64_t> StateStore::claim_epoch() {
    if (impl_->epoch || !impl_->options.read_only)
        return impl_->epoch;
    const std::optional<ControllerClaim> claim = read_claim(*impl_);
    return claim ? std::optional<std::int64_t>(claim->epoch) : std::nullopt;
}

std::optional<ControllerClaim> Transaction::controller() {
    return read_claim(impl_);
}

// ---- reads ----------------------------------------------------------------------------------

Transaction::Transaction(StateStore& store) : impl_(*store.impl_) {}

namespace {

// A buffer's record and its row, which the writes of a transaction address directly, with the
// values root sealed (a write seals them with what it changes).
struct Row {
    std::int64_t id;
    Buffer buffer;
    RowValues values;
};

// The one-line refusal of a sealed row that a query for `key` returned although it is another
// buffer's: state.db's indexes were changed under it.
Error misplaced_record_error(const std::string& key) {
    return Error(ExitCode::no_perm, "state.db answered for buffer " + printable(key) +
                                        " with another buffer's record: its indexes were "
                                        "changed outside bbkit, so root does not act on it "
                                        "(bbkit(7), SECURITY; bb-pool check --repair)");
}

std::optional<Row> find_row(StateStore::Impl& impl, const BufferKey& key) {
    // Persistent names can be reused after deletion: the newest row is the buffer.
    Query q = impl.db.query("SELECT " + buffer_columns() +
                            " FROM buffers WHERE key = ?1 ORDER BY id DESC LIMIT 1");
    q.bind(1, key.str());
    if (!q.step())
        return std::nullopt;
    if (!trusted_row(impl, q))
        throw forged_record_error(key.str());
    RowValues values = stored_values(q);
    if (values[c_key] != key.str())
        throw misplaced_record_error(key.str());
    return Row{q.integer(row_id_column), read_buffer(q), std::move(values)};
}

Row get_row(StateStore::Impl& impl, const BufferKey& key) {
    if (auto row = find_row(impl, key))
        return std::move(*row);
    throw Error(ExitCode::no_input, "no buffer " + key.str());
}

}  // namespace

std::optional<Buffer> Transaction::find_buffer(const BufferKey& key) {
    if (auto row = find_row(impl_, key))
        return std::move(row->buffer);
    return std::nullopt;
}

Buffer Transaction::get_buffer(const BufferKey& key) {
    if (auto buffer = find_buffer(key))
        return *buffer;
    throw Error(ExitCode::no_input, "no buffer " + key.str());
}

std::optional<Buffer> Transaction::find_buffer_by_record(std::int64_t record_id) {
    Query q = impl_.db.query("SELECT " + buffer_columns() + " FROM buffers WHERE id = ?1");
    q.bind(1, record_id);
    if (!q.step() || !trusted_row(impl_, q) || q.integer(row_id_column) != record_id)
        return std::nullopt;  // a forged row names nothing root acts on
    return read_buffer(q);
}

std::optional<Buffer> Transaction::latest_job_buffer(const std::string& cluster,
                                                     std::uint64_t job_id) {
    // Through the key: one statement less to compile per process than a query of its own.
    const std::uint32_t latest = next_incarnation(cluster, job_id) - 1;
    if (latest == 0)
        return std::nullopt;
    return find_buffer(BufferKey::job(cluster, job_id, latest));
}

std::uint32_t Transaction::next_incarnation(const std::string& cluster, std::uint64_t job_id) {
    Query q = impl_.db.query(
        "SELECT COALESCE(MAX(incarnation), 0) FROM buffers WHERE cluster = ?1 AND job_id = ?2");
    q.bind(1, cluster).bind(2, job_id);
    q.step();
    return static_cast<std::uint32_t>(q.integer(0) + 1);
}

std::vector<Buffer> Transaction::forged_records() {
    std::vector<Buffer> forged;
    if (!impl_.check_seals)
        return forged;
    Query q = impl_.db.query("SELECT " + buffer_columns() + " FROM buffers ORDER BY id");
    while (q.step()) {
        if (trusted_row(impl_, q))
            continue;
        try {
            forged.push_back(read_buffer(q));
        } catch (const Error&) {
            // A value that does not even parse (a state, a key): keep what names it.
            Buffer b;
            b.key = BufferKey::persistent("?", "unreadable");
            b.directory = q.text(15);
            b.pool = q.text(5);
            forged.push_back(b);
        }
    }
    return forged;
}

std::vector<Buffer> Transaction::list_buffers(const BufferFilter& filter) {
    std::string sql = "SELECT " + buffer_columns() + " FROM buffers WHERE 1";
    if (filter.live_only)
        sql += " AND state NOT IN ('complete', 'deleted')";
    if (filter.pool)
        sql += " AND pool = ?1";
    if (filter.uid)
        sql += " AND uid = ?2";
    if (filter.state)
        sql += " AND state = ?3";
    if (filter.in_trash_only)
        sql += " AND reaped = 0 AND state IN ('complete', 'deleted')";
    sql += " ORDER BY id";
    Query q = impl_.db.query(sql);
    if (filter.pool)
        q.bind(1, *filter.pool);
    if (filter.uid)
        q.bind(2, static_cast<std::int64_t>(*filter.uid));
    if (filter.state)
        q.bind(3, std::string(to_string(*filter.state)));
    std::vector<Buffer> buffers = read_buffers(impl_, q);
    // The same filter again on what the rows say, so that an index changed under the query
    // cannot hand root a buffer it did not ask for.
    const auto unasked = [&filter](const Buffer& b) {
        return (filter.live_only && is_final(b.state)) || (filter.pool && b.pool != *filter.pool) ||
               (filter.uid && b.uid != *filter.uid) || (filter.state && b.state != *filter.state) ||
               (filter.in_trash_only && (b.reaped || !is_final(b.state)));
    };
    buffers.erase(std::remove_if(buffers.begin(), buffers.end(), unasked), buffers.end());
    return buffers;
}

std::map<BufferState, std::size_t> Transaction::count_by_state() {
    Query q = impl_.db.query("SELECT state, COUNT(*) FROM buffers GROUP BY state");
    std::map<BufferState, std::size_t> counts;
    while (q.step())
        counts[parse_buffer_state(q.text(0))] = static_cast<std::size_t>(q.integer(1));
    return counts;
}

std::uint64_t Transaction::used_bytes(const std::string& pool) {
    Query q = impl_.db.query("SELECT used FROM pool_usage WHERE pool = ?1");
    q.bind(1, pool);
    return q.step() ? q.unsigned_integer(0) : 0;
}

std::uint64_t Transaction::summed_used_bytes(const std::string& pool) {
    Query q = impl_.db.query(std::string("SELECT COALESCE(SUM(allocated_bytes), 0) FROM buffers"
                                         " WHERE pool = ?1 AND state IN ") +
                             holding_states);
    q.bind(1, pool);
    q.step();
    return q.unsigned_integer(0);
}

std::uint64_t Transaction::trash_bytes(const std::string& pool) {
    // Without INDEXED BY, SQLite walks buffers_pool_state through every complete row, which
    // is all of history; the partial index holds only what is still in trash/.
    Query q = impl_.db.query(
        "SELECT COALESCE(SUM(allocated_bytes), 0) FROM buffers INDEXED BY buffers_trash"
        " WHERE pool = ?1 AND reaped = 0 AND state IN ('complete', 'deleted')");
    q.bind(1, pool);
    q.step();
    return q.unsigned_integer(0);
}

std::uint64_t Transaction::used_bytes_of_user(uid_t uid) {
    Query q = impl_.db.query(std::string("SELECT COALESCE(SUM(allocated_bytes), 0) FROM buffers"
                                         " WHERE uid = ?1 AND state IN ") +
                             holding_states);
    q.bind(1, static_cast<std::int64_t>(uid));
    q.step();
    return q.unsigned_integer(0);
}

std::optional<PoolRecord> Transaction::find_pool(const std::string& name) {
    Query q = impl_.db.query("SELECT name, path, uuid, draining FROM pools WHERE name = ?1");
    q.bind(1, name);
    if (!q.step())
        return std::nullopt;
    return PoolRecord{q.text(0), q.text(1), q.text(2), q.integer(3) != 0};
}

std::vector<QueueEntry> Transaction::queue(const std::string& pool) {
    Query q = impl_.db.query(std::string("SELECT ") + queue_columns +
                             " FROM queue WHERE pool = ?1 ORDER BY seq");
    q.bind(1, pool);
    std::vector<QueueEntry> entries;
    while (q.step())
        entries.push_back(read_queue_entry(q));
    return entries;
}

std::optional<QueueEntry> Transaction::queue_head(const std::string& pool) {
    Query q = impl_.db.query(std::string("SELECT ") + queue_columns +
                             " FROM queue WHERE pool = ?1 ORDER BY seq LIMIT 1");
    q.bind(1, pool);
    if (!q.step())
        return std::nullopt;
    return read_queue_entry(q);
}

std::optional<std::size_t> Transaction::queue_position(const BufferKey& buffer_key) {
    const std::string key = buffer_key.str();
    Query q = impl_.db.query(
        "SELECT (SELECT COUNT(*) FROM queue AS ahead WHERE ahead.pool = q.pool AND ahead.seq <= "
        "q.seq) FROM queue AS q WHERE q.key = ?1");
    q.bind(1, key);
    if (!q.step())
        return std::nullopt;
    return static_cast<std::size_t>(q.integer(0));
}

std::size_t Transaction::queue_length(const std::string& pool) {
    Query q = impl_.db.query("SELECT COUNT(*) FROM queue WHERE pool = ?1");
    q.bind(1, pool);
    q.step();
    return static_cast<std::size_t>(q.integer(0));
}

std::vector<HistoryEntry> Transaction::history(const BufferKey& key) {
    Query q = impl_.db.query(
        "SELECT key, from_state, to_state, time, who, reason FROM history WHERE key = ?1"
        " ORDER BY id");
    q.bind(1, key.str());
    std::vector<HistoryEntry> entries;
    while (q.step()) {
        HistoryEntry e;
        e.key = q.text(0);
        if (!q.is_null(1))
            e.from = parse_buffer_state(q.text(1));
        e.to = parse_buffer_state(q.text(2));
        e.time = from_nanos(q.integer(3));
        e.who = q.text(4);
        e.reason = q.text(5);
        entries.push_back(std::move(e));
    }
    return entries;
}

namespace {

// The accounting's optional filters, as SQL on the table alias `t` (buffers' or stage_runs',
// which carry the same user and pool), bound from ?10 on. The unary + keeps SQLite from
// answering through another index (buffers_pool_state) and reading every wide row it names:
// the range's index holds the user and the pool.
std::string accounting_filter(const AccountingQuery& query, const std::string& t) {
    std::string where;
    if (query.user)
        where += " AND +" + t + ".user = ?10";
    if (query.pool)
        where += " AND +" + t + ".pool = ?11";
    return where;
}

void bind_accounting_filter(Query& q, const AccountingQuery& query) {
    if (query.user)
        q.bind(10, *query.user);
    if (query.pool)
        q.bind(11, *query.pool);
}

}  // namespace

std::vector<AccountingRow> Transaction::accounting(const AccountingQuery& query, TimePoint now) {
    const std::string group = query.by == AccountingGroup::user ? "user" : "pool";
    // Summed here, one group per user or pool, rather than by SQL's GROUP BY, which sorts every
    // row first: one pass over each range in memory of the groups alone.
    std::unordered_map<std::string, AccountingRow> rows;
    const auto row_of = [&rows](const std::string& name) -> AccountingRow& {
        AccountingRow& row = rows[name];
        if (row.name.empty())
            row.name = name;
        return row;
    };
    const std::int64_t since = to_nanos(query.since);
    const std::int64_t until = to_nanos(query.until);
    // The holds that overlap the range: those that ended after its start, then those not ended,
    // each began before its end; from the index buffers_held alone. Two statements, not one
    // with OR, which SQLite answers by keeping every row id it met to drop the duplicates.
    for (const char* not_before_range : {"b.ended > ?1", "b.ended IS NULL"}) {
        Query held = impl_.db.query("SELECT b." + group +
                                    ", b.failed IS NOT NULL, b.allocated_bytes,"
                                    " MAX(b.held_since, ?1), MIN(COALESCE(b.ended, ?3), ?2)"
                                    " FROM buffers b WHERE " +
                                    not_before_range + " AND b.held_since < ?2" +
                                    accounting_filter(query, "b"));
        held.bind(1, since).bind(2, until).bind(3, to_nanos(now));
        bind_accounting_filter(held, query);
        while (held.step()) {
            AccountingRow& row = row_of(held.text(0));
            ++row.buffers;
            row.failed_buffers += held.integer(1) != 0 ? 1 : 0;
            // Byte-seconds in floating point: bytes times nanoseconds overflow.
            const std::int64_t nanos = held.integer(4) - held.integer(3);
            if (nanos > 0)
                row.byte_seconds += static_cast<double>(held.unsigned_integer(2)) *
                                    (static_cast<double>(nanos) / 1e9);
        }
    }
    // The stage runs that ended within the range: a range of stage_runs, which is kept in that
    // order; each carries its buffer's user and pool, so no page of buffers is read for them.
    Query staged = impl_.db.query("SELECT s." + group +
                                  ", s.direction = 'in', s.failed, s.files, s.bytes,"
                                  " s.ended - s.started FROM stage_runs s"
                                  " WHERE s.ended >= ?1 AND s.ended < ?2" +
                                  accounting_filter(query, "s"));
    staged.bind(1, since).bind(2, until);
    bind_accounting_filter(staged, query);
    while (staged.step()) {
        AccountingRow& row = row_of(staged.text(0));
        StageTotals& totals = staged.integer(1) != 0 ? row.in : row.out;
        ++totals.runs;
        totals.failed += staged.integer(2) != 0 ? 1 : 0;
        totals.files += staged.unsigned_integer(3);
        totals.bytes += staged.unsigned_integer(4);
        const double seconds = static_cast<double>(staged.integer(5)) / 1e9;
        totals.seconds += seconds;
        totals.max_seconds = std::max(totals.max_seconds, seconds);
    }
    std::vector<AccountingRow> result;
    result.reserve(rows.size());
    for (auto& [name, row] : rows)
        result.push_back(std::move(row));
    std::sort(result.begin(), result.end(),
              [](const AccountingRow& a, const AccountingRow& b) { return a.name < b.name; });
    return result;
}

void Transaction::for_each_hold(
    const std::string& pool, TimePoint since, TimePoint until, TimePoint now,
    const std::function<void(TimePoint, TimePoint, std::uint64_t)>& fn) {
    // As accounting(): those that ended after `since`, then those not ended, without an OR.
    for (const char* not_before_range : {"b.ended > ?1", "b.ended IS NULL"}) {
        Query q = impl_.db.query(
            std::string("SELECT b.held_since, COALESCE(b.ended, ?3), b.allocated_bytes FROM "
                        "buffers b WHERE ") +
            not_before_range + " AND b.held_since < ?2 AND +b.pool = ?4");
        q.bind(1, to_nanos(since)).bind(2, to_nanos(until)).bind(3, to_nanos(now)).bind(4, pool);
        while (q.step())
            fn(from_nanos(q.integer(0)), from_nanos(q.integer(1)), q.unsigned_integer(2));
    }
}

// ---- read-only queries added for status views (lib/bbkit/status.*) -------------------------

std::uint64_t Transaction::persistent_used_bytes(const std::string& pool) {
    Query q = impl_.db.query(std::string("SELECT COALESCE(SUM(allocated_bytes), 0) FROM buffers"
                                         " WHERE pool = ?1 AND name IS NOT NULL AND state IN ") +
                             holding_states);
    q.bind(1, pool);
    q.step();
    return q.unsigned_integer(0);
}

// ---- end of status additions ----------------------------------------------------------------

// ---- transactions ---------------------------------------------------------------------------

ReadSnapshot::ReadSnapshot(StateStore& store) : Transaction(store) {
    impl_.db.begin(false);
    try {
        // A deferred transaction starts reading at its first query: pin the snapshot now.
        Query q = impl_.db.query("SELECT COUNT(*) FROM pools");
        q.step();
    } catch (...) {
        impl_.db.rollback();
        throw;
    }
}

ReadSnapshot::~ReadSnapshot() {
    impl_.db.rollback();
}

WriteTransaction::WriteTransaction(StateStore& store, std::string who, Durability durability)
    : Transaction(store), who_(std::move(who)), durability_(durability) {
    if (impl_.db.in_transaction())
        throw Error(ExitCode::software,
                    "a transaction on " + impl_.db.path() + " is already open (one at a time)");
    // A rollback journal (a network file system) commits every transaction synced: with
    // synchronous=NORMAL a power cut there may corrupt state.db, not merely lose the last
    // commit as with the WAL.
    if (durability_ == Durability::deferred && impl_.db.journal() != sqlite::Journal::wal)
        durability_ = Durability::now;
    const Durability asked = durability_;
    // The claim is read inside the transaction, under both locks: the one its commit follows.
    // Neither is kept while waiting for this host's takeover, which needs both.
    wait_for_claim(impl_, [&]() -> std::optional<Fence> {
        StateLock lock = impl_.acquire_lock(who_);
        durability_ = asked;
        // SQLite takes the safety level only outside a transaction.
        if (durability_ == Durability::deferred)
            impl_.db.query("PRAGMA synchronous = NORMAL").run();
        std::optional<Fence> refused;
        try {
            impl_.db.begin(true);
            refused = fence(impl_);
        } catch (...) {
            impl_.db.rollback();
            restore_durability();
            throw;
        }
        if (refused) {
            impl_.db.rollback();
            restore_durability();
            return refused;
        }
        impl_.lock = std::move(lock);
        return std::nullopt;
    });
}

WriteTransaction::~WriteTransaction() {
    if (!committed_)
        impl_.db.rollback();
    restore_durability();
    impl_.lock.reset();  // after the rollback: the next writer must not see our changes
}

void WriteTransaction::restore_durability() {
    if (durability_ == Durability::deferred) {
        try {
            impl_.db.query("PRAGMA synchronous = FULL").run();  // compiled once per process
        } catch (const Error& e) {
            spdlog::warn("restoring synchronous=FULL failed: {}", e.what());
        }
        durability_ = Durability::now;
    }
}

void WriteTransaction::commit() {
    if (committed_)
        throw Error(ExitCode::software, "transaction committed twice");
    fault_point("txn.before-commit");
    impl_.db.commit();
    committed_ = true;
    restore_durability();
    fault_point("txn.committed");
    impl_.lock.reset();
}

namespace {

void append_history(StateStore::Impl& impl, const std::string& key, std::optional<BufferState> from,
                    BufferState to, TimePoint time, const std::string& who,
                    const std::string& reason) {
    Query q = impl.db.query(
        "INSERT INTO history (key, from_state, to_state, time, who, reason)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    q.bind(1, key);
    if (from)
        q.bind(2, std::string(to_string(*from)));
    else
        q.bind_null(2);
    q.bind(3, std::string(to_string(to))).bind(4, to_nanos(time)).bind(5, who).bind(6, reason);
    q.run();
}

// pool_usage follows every write of a row's pool, state or size, in the same transaction: the
// one place besides recompute_used_bytes that writes it.
void add_used_bytes(StateStore::Impl& impl, const std::string& pool, std::int64_t delta) {
    if (delta == 0)
        return;
    Query q = impl.db.query("UPDATE pool_usage SET used = used + ?2 WHERE pool = ?1");
    q.bind(1, pool).bind(2, delta);
    q.run();
}

std::int64_t signed_bytes(std::uint64_t bytes) {
    return static_cast<std::int64_t>(bytes);
}

}  // namespace

void WriteTransaction::insert_buffer(Buffer& buffer) {
    if (buffer.state != BufferState::pending && buffer.state != BufferState::allocating)
        throw Error(ExitCode::software, "buffer " + buffer.key.str() + " cannot start as " +
                                            to_string(buffer.state) +
                                            " (new buffers start pending or allocating)");
    const std::optional<Buffer> existing = find_buffer(buffer.key);
    if (existing && (buffer.key.kind() == BufferKind::job || !is_final(existing->state)))
        throw Error(ExitCode::exists, "buffer " + buffer.key.str() + " already exists (" +
                                          to_string(existing->state) + ")");
    if (buffer.created == TimePoint{})
        buffer.created = std::chrono::system_clock::now();
    buffer.entered.clear();
    buffer.entered[buffer.state] = buffer.created;
    if (buffer.directory.empty())
        buffer.directory = buffer.key.new_directory();
    if (buffer.temp_token.empty())
        buffer.temp_token = random_hex(16);

    Query q = impl_.db.query(
        "INSERT INTO buffers (pool, requested_bytes, allocated_bytes, uid, gid, user, reason,"
        " message, directory, access, type, staging, owner, expires, use_count, lock_pid,"
        " lock_start, reaped, failure, failed, temp_token, key, cluster, job_id, incarnation,"
        " name, state, entered, created, held_since)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,"
        " ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30)");
    bind_mutable(q, buffer);
    q.bind(22, buffer.key.str()).bind(23, buffer.key.cluster);
    if (buffer.key.kind() == BufferKind::job)
        q.bind(24, buffer.key.job_id)
            .bind(25, static_cast<std::int64_t>(buffer.key.incarnation))
            .bind_null(26);
    else
        q.bind_null(24).bind_null(25).bind(26, buffer.key.name);
    q.bind(27, std::string(to_string(buffer.state)))
        .bind(28, encode_entered(buffer.entered))
        .bind(29, to_nanos(buffer.created));
    if (holds_space(buffer.state))
        q.bind(30, to_nanos(buffer.created));
    else
        q.bind_null(30);
    try {
        q.run();
    } catch (const Error& error) {
        if (error.code() == ExitCode::exists && !find_pool(buffer.pool))
            throw Error(ExitCode::no_input, "no pool '" + buffer.pool +
                                                "' in the state database (run bb-pool init " +
                                                buffer.pool + ")");
        throw;
    }
    check_one_row(impl_, buffer.key.str());
    buffer.record_id = impl_.db.last_insert_rowid();
    {
        Query seal = impl_.db.query("UPDATE buffers SET seal = ?1 WHERE id = ?2");
        seal.bind(1, seal_of(impl_, bound_values(buffer, buffer.record_id)))
            .bind(2, buffer.record_id);
        seal.run();
        check_one_row(impl_, buffer.key.str());
    }
    if (holds_space(buffer.state))
        add_used_bytes(impl_, buffer.pool, signed_bytes(buffer.allocated_bytes));
    append_history(impl_, buffer.key.str(), std::nullopt, buffer.state, buffer.created, who_,
                   buffer.reason);
    touched_keys_.insert(buffer.key.str());
    pools_touched_ = true;
}

void WriteTransaction::update_buffer(const Buffer& buffer) {
    const Row row = get_row(impl_, buffer.key);
    const Buffer& stored = row.buffer;
    if (stored.state != buffer.state)
        throw Error(ExitCode::software, "update of buffer " + buffer.key.str() +
                                            " would change its state from " +
                                            to_string(stored.state) + " to " +
                                            to_string(buffer.state) + " (use transition)");
    Query q = impl_.db.query(
        "UPDATE buffers SET pool = ?1, requested_bytes = ?2, allocated_bytes = ?3, uid = ?4,"
        " gid = ?5, user = ?6, reason = ?7, message = ?8, directory = ?9, access = ?10,"
        " type = ?11, staging = ?12, owner = ?13, expires = ?14, use_count = ?15,"
        " lock_pid = ?16, lock_start = ?17, reaped = ?18, failure = ?19, failed = ?20,"
        " temp_token = ?21, seal = ?23 WHERE id = ?22");
    // The key, state and times stay as sealed; every other column takes what is bound.
    RowValues values = bound_values(buffer, row.id);
    for (const RecordColumn kept :
         {c_key, c_cluster, c_job_id, c_incarnation, c_name, c_state, c_entered, c_created, c_id})
        values[kept] = row.values[kept];
    bind_mutable(q, buffer);
    q.bind(22, row.id).bind(23, seal_of(impl_, values));
    q.run();
    check_one_row(impl_, buffer.key.str());
    if (holds_space(stored.state) &&
        (stored.pool != buffer.pool || stored.allocated_bytes != buffer.allocated_bytes)) {
        add_used_bytes(impl_, stored.pool, -signed_bytes(stored.allocated_bytes));
        add_used_bytes(impl_, buffer.pool, signed_bytes(buffer.allocated_bytes));
    }
    touched_keys_.insert(buffer.key.str());
    if (stored.pool != buffer.pool || stored.allocated_bytes != buffer.allocated_bytes ||
        stored.reaped != buffer.reaped)
        pools_touched_ = true;
}

Buffer WriteTransaction::transition(const BufferKey& key, BufferState to, const std::string& reason,
                                    const std::string& message) {
    Row row = get_row(impl_, key);
    Buffer& buffer = row.buffer;
    const BufferState from = buffer.state;
    check_transition(key.kind(), from, to, "buffer " + key.str());
    const TimePoint now = std::chrono::system_clock::now();
    buffer.state = to;
    buffer.reason = reason;
    buffer.message = message;
    buffer.entered[to] = now;
    RowValues values = row.values;
    values[c_state] = std::string(to_string(to));
    values[c_reason] = reason;
    values[c_message] = message;
    values[c_entered] = encode_entered(buffer.entered);
    Query q = impl_.db.query(
        "UPDATE buffers SET state = ?1, reason = ?2, message = ?3, entered = ?4, seal = ?6"
        " WHERE id = ?5");
    q.bind(1, *values[c_state])
        .bind(2, reason)
        .bind(3, message)
        .bind(4, *values[c_entered])
        .bind(5, row.id)
        .bind(6, seal_of(impl_, values));
    q.run();
    // The accounting's times (schema 8, not sealed), each in a statement of its own that only
    // the transition that sets it runs (the statement above leaves buffers_held alone): the
    // hold begins when the buffer first leaves pending, and ends with a final state.
    if (from == BufferState::pending && holds_space(to)) {
        Query held = impl_.db.query("UPDATE buffers SET held_since = ?1 WHERE id = ?2");
        held.bind(1, to_nanos(now)).bind(2, row.id);
        held.run();
    }
    if (is_final(to)) {
        Query ended = impl_.db.query("UPDATE buffers SET ended = ?1 WHERE id = ?2");
        ended.bind(1, to_nanos(now)).bind(2, row.id);
        ended.run();
    }
    check_one_row(impl_, key.str());
    if (holds_space(from) != holds_space(to))
        add_used_bytes(impl_, buffer.pool,
                       holds_space(to) ? signed_bytes(buffer.allocated_bytes)
                                       : -signed_bytes(buffer.allocated_bytes));
    append_history(impl_, key.str(), from, to, now, who_, reason);
    touched_keys_.insert(key.str());
    if (holds_space(from) != holds_space(to) || is_final(from) != is_final(to))
        pools_touched_ = true;
    return std::move(buffer);
}

void WriteTransaction::set_run_lock_holder(const BufferKey& key,
                                           const std::optional<ProcessId>& holder) {
    const Row row = get_row(impl_, key);
    // A statement of its own: it touches no indexed column, and compiling the full update
    // costs a short command more than running it.
    Query q = impl_.db.query(
        "UPDATE buffers SET lock_pid = ?1, lock_start = ?2, seal = ?4 WHERE id = ?3");
    RowValues values = row.values;
    values[c_lock_pid].reset();
    values[c_lock_start].reset();
    if (holder) {
        q.bind(1, static_cast<std::int64_t>(holder->pid)).bind(2, holder->start_time);
        values[c_lock_pid] = integer_text(static_cast<std::int64_t>(holder->pid));
        values[c_lock_start] = integer_text(static_cast<std::int64_t>(holder->start_time));
    } else {
        q.bind_null(1).bind_null(2);
    }
    q.bind(3, row.id).bind(4, seal_of(impl_, values));
    q.run();
    check_one_row(impl_, key.str());
    touched_keys_.insert(key.str());
}

void WriteTransaction::mark_reaped(const BufferKey& key) {
    const Row row = get_row(impl_, key);
    const Buffer& buffer = row.buffer;
    if (!is_final(buffer.state))
        throw Error(ExitCode::data, "buffer " + key.str() + " is " + to_string(buffer.state) +
                                        ", cannot be reaped (only complete or deleted buffers)");
    RowValues values = row.values;
    values[c_reaped] = "1";
    Query q = impl_.db.query("UPDATE buffers SET reaped = 1, seal = ?2 WHERE id = ?1");
    q.bind(1, row.id).bind(2, seal_of(impl_, values));
    q.run();
    check_one_row(impl_, key.str());
    touched_keys_.insert(key.str());
    pools_touched_ = true;
}

void WriteTransaction::record_stage_run(const BufferKey& key, const StageRun& run) {
    const Row row = get_row(impl_, key);
    Query q = impl_.db.query(
        "INSERT OR IGNORE INTO stage_runs (record, direction, started, ended, files, bytes, failed,"
        " user, pool) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
    q.bind(1, row.id)
        .bind(8, row.buffer.user)
        .bind(9, row.buffer.pool)
        .bind(2, std::string(run.stage_in ? "in" : "out"))
        .bind(3, to_nanos(run.started))
        .bind(4, to_nanos(run.ended))
        .bind(5, run.files)
        .bind(6, run.bytes)
        .bind(7, static_cast<std::int64_t>(run.failed ? 1 : 0));
    q.run();
}

void WriteTransaction::put_pool(const PoolRecord& pool) {
    Query q = impl_.db.query(
        "INSERT INTO pools (name, path, uuid, draining) VALUES (?1, ?2, ?3, ?4)"
        " ON CONFLICT (name) DO UPDATE SET path = excluded.path, uuid = excluded.uuid");
    q.bind(1, pool.name).bind(2, pool.path).bind(3, pool.uuid);
    q.bind(4, static_cast<std::int64_t>(pool.draining ? 1 : 0));
    q.run();
    Query usage = impl_.db.query("INSERT OR IGNORE INTO pool_usage (pool, used) VALUES (?1, 0)");
    usage.bind(1, pool.name);
    usage.run();
    pools_touched_ = true;
}

void WriteTransaction::recompute_used_bytes(const std::string& pool) {
    Query q =
        impl_.db.query(std::string("INSERT INTO pool_usage (pool, used) VALUES (?1, (SELECT"
                                   " COALESCE(SUM(allocated_bytes), 0) FROM buffers"
                                   " WHERE pool = ?1 AND state IN ") +
                       holding_states + ")) ON CONFLICT (pool) DO UPDATE SET used = excluded.used");
    q.bind(1, pool);
    q.run();
    pools_touched_ = true;
}

void WriteTransaction::set_draining(const std::string& pool, bool draining) {
    {
        Query q = impl_.db.query("UPDATE pools SET draining = ?1 WHERE name = ?2");
        q.bind(1, static_cast<std::int64_t>(draining ? 1 : 0)).bind(2, pool);
        q.run();
    }
    pools_touched_ = true;
    if (impl_.db.changes() == 0)
        throw Error(ExitCode::no_input,
                    "no pool '" + pool + "' in the state database (run bb-pool init " + pool + ")");
}

QueueEntry WriteTransaction::enqueue(const std::string& pool, const BufferKey& buffer_key,
                                     std::uint64_t requested_bytes, const ProcessId& waiter) {
    const std::string key = buffer_key.str();
    if (auto position = queue_position(buffer_key))
        throw Error(ExitCode::exists, "request " + key + " is already queued (position " +
                                          std::to_string(*position) + ")");
    if (!find_pool(pool))
        throw Error(ExitCode::no_input,
                    "no pool '" + pool + "' in the state database (run bb-pool init " + pool + ")");
    QueueEntry entry;
    entry.pool = pool;
    entry.key = key;
    entry.requested_bytes = requested_bytes;
    entry.waiter = waiter;
    entry.enqueued = std::chrono::system_clock::now();
    Query q = impl_.db.query(
        "INSERT INTO queue (pool, key, requested_bytes, waiter_pid, waiter_start, enqueued)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    q.bind(1, pool).bind(2, key).bind(3, requested_bytes);
    q.bind(4, static_cast<std::int64_t>(waiter.pid)).bind(5, waiter.start_time);
    q.bind(6, to_nanos(entry.enqueued));
    q.run();
    entry.seq = impl_.db.last_insert_rowid();
    touched_keys_.insert(key);  // its queue position appears
    pools_touched_ = true;      // and the pool's queue length changes
    return entry;
}

bool WriteTransaction::dequeue(const BufferKey& buffer_key) {
    return dequeue_text(buffer_key.str());
}

bool WriteTransaction::dequeue_text(const std::string& key) {
    std::optional<std::string> pool;
    {
        Query q = impl_.db.query("SELECT pool FROM queue WHERE key = ?1");
        q.bind(1, key);
        if (q.step())
            pool = q.text(0);
    }
    if (!pool)
        return false;
    Query q = impl_.db.query("DELETE FROM queue WHERE key = ?1");
    q.bind(1, key);
    q.run();
    touched_keys_.insert(key);
    touched_queues_.insert(*pool);
    pools_touched_ = true;
    return true;
}

std::vector<QueueEntry> WriteTransaction::drop_dead_waiters() {
    std::vector<QueueEntry> dead;
    {
        Query q =
            impl_.db.query(std::string("SELECT ") + queue_columns + " FROM queue ORDER BY seq");
        while (q.step()) {
            QueueEntry entry = read_queue_entry(q);
            if (!entry.waiter.alive())
                dead.push_back(std::move(entry));
        }
    }
    for (const QueueEntry& entry : dead)
        dequeue_text(entry.key);
    return dead;
}

}  // namespace bbkit
