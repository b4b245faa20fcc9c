#include "bbkit/store.hpp"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <grp.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/user.hpp"

namespace bbkit {
namespace {

// The states that hold space, as SQL; must agree with holds_space() (a test checks it).
// Migrations 3 and 4 carry this list too (the rows' sums they fill pool_usage with).
#define BBKIT_HOLDING_STATES                                                             \
    "('allocating','allocated','staging-in','staged-in','pre-run','running','post-run'," \
    "'staging-out','staged-out','teardown','teardown-fail','deleting')"
const char* const holding_states = BBKIT_HOLDING_STATES;

// Each entry moves the schema from version N-1 to N; never edit one that has shipped.
const std::vector<const char*> migrations = {
    // 1: the first schema.
    R"sql(
CREATE TABLE pools (
    name        TEXT PRIMARY KEY,
    path        TEXT NOT NULL,
    uuid        TEXT NOT NULL,
    draining    INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE buffers (
    id              INTEGER PRIMARY KEY,
    key             TEXT NOT NULL,
    cluster         TEXT NOT NULL,
    job_id          INTEGER,
    incarnation     INTEGER,
    name            TEXT,
    pool            TEXT NOT NULL REFERENCES pools(name),
    requested_bytes INTEGER NOT NULL,
    allocated_bytes INTEGER NOT NULL,
    uid             INTEGER NOT NULL,
    gid             INTEGER NOT NULL,
    user            TEXT NOT NULL,
    state           TEXT NOT NULL,
    reason          TEXT NOT NULL DEFAULT '',
    message         TEXT NOT NULL DEFAULT '',
    entered         TEXT NOT NULL DEFAULT '',
    directory       TEXT NOT NULL,
    access          TEXT NOT NULL DEFAULT '',
    type            TEXT NOT NULL DEFAULT '',
    staging         TEXT NOT NULL DEFAULT '',
    owner           TEXT NOT NULL DEFAULT '',
    expires         INTEGER,
    use_count       INTEGER NOT NULL DEFAULT 0,
    created         INTEGER NOT NULL,
    lock_pid        INTEGER,
    lock_start      INTEGER,
    reaped          INTEGER NOT NULL DEFAULT 0,
    CHECK ((job_id IS NULL) <> (name IS NULL))
);
CREATE UNIQUE INDEX buffers_job ON buffers(cluster, job_id, incarnation) WHERE job_id IS NOT NULL;
CREATE INDEX buffers_key ON buffers(key);
CREATE UNIQUE INDEX buffers_live_key ON buffers(key)
    WHERE state NOT IN ('complete', 'deleted');
CREATE INDEX buffers_state ON buffers(state);
CREATE INDEX buffers_pool_state ON buffers(pool, state, allocated_bytes);
CREATE INDEX buffers_uid_state ON buffers(uid, state, allocated_bytes);
CREATE INDEX buffers_trash ON buffers(pool, allocated_bytes)
    WHERE reaped = 0 AND state IN ('complete', 'deleted');
CREATE TABLE queue (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    pool            TEXT NOT NULL REFERENCES pools(name),
    key             TEXT NOT NULL UNIQUE,
    requested_bytes INTEGER NOT NULL,
    waiter_pid      INTEGER NOT NULL,
    waiter_start    INTEGER NOT NULL,
    enqueued        INTEGER NOT NULL
);
CREATE INDEX queue_pool ON queue(pool, seq);
CREATE TABLE history (
    id          INTEGER PRIMARY KEY,
    key         TEXT NOT NULL,
    from_state  TEXT,
    to_state    TEXT NOT NULL,
    time        INTEGER NOT NULL,
    who         TEXT NOT NULL,
    reason      TEXT NOT NULL DEFAULT ''
);
CREATE INDEX history_key ON history(key, id);
)sql",
    // 2: persistent buffers' space per pool without visiting every live job buffer's row
    // (pool_status needs it on every write).
    R"sql(
CREATE INDEX buffers_persistent ON buffers(pool, state, allocated_bytes) WHERE name IS NOT NULL;
)sql",
    // 3: each pool's used bytes, kept by triggers in the transaction that changes a buffer row,
    // so a write no longer sums every live row (O(live buffers) twice per alloc). It is derived
    // from the rows by SQLite itself, never written by bbkit; `bb-pool check` compares it with
    // the sum and `check --repair` recomputes it.
    "CREATE TABLE pool_usage (\n"
    "    pool TEXT PRIMARY KEY,\n"
    "    used INTEGER NOT NULL\n"
    ") WITHOUT ROWID;\n"
    "INSERT INTO pool_usage (pool, used) SELECT name, (SELECT COALESCE(SUM(allocated_bytes), 0)"
    " FROM buffers WHERE buffers.pool = pools.name AND state IN " BBKIT_HOLDING_STATES
    ") FROM pools;\n"
    "CREATE TRIGGER pool_usage_pool AFTER INSERT ON pools BEGIN\n"
    "    INSERT OR IGNORE INTO pool_usage (pool, used) VALUES (NEW.name, 0);\n"
    "END;\n"
    "CREATE TRIGGER pool_usage_insert AFTER INSERT ON buffers WHEN NEW.state "
    "IN " BBKIT_HOLDING_STATES
    " BEGIN\n"
    "    UPDATE pool_usage SET used = used + NEW.allocated_bytes WHERE pool = NEW.pool;\n"
    "END;\n"
    "CREATE TRIGGER pool_usage_delete AFTER DELETE ON buffers WHEN OLD.state "
    "IN " BBKIT_HOLDING_STATES
    " BEGIN\n"
    "    UPDATE pool_usage SET used = used - OLD.allocated_bytes WHERE pool = OLD.pool;\n"
    "END;\n"
    "CREATE TRIGGER pool_usage_update AFTER UPDATE OF pool, state, allocated_bytes ON buffers"
    " BEGIN\n"
    "    UPDATE pool_usage SET used = used - OLD.allocated_bytes\n"
    "        WHERE pool = OLD.pool AND OLD.state IN " BBKIT_HOLDING_STATES
    ";\n"
    "    UPDATE pool_usage SET used = used + NEW.allocated_bytes\n"
    "        WHERE pool = NEW.pool AND NEW.state IN " BBKIT_HOLDING_STATES
    ";\n"
    "END;\n",
    // 4: pool_usage is kept by WriteTransaction's own writes, in the same statements' transaction
    // (add_used_bytes). SQLite parsed the triggers' text at every connection and compiled them
    // into every statement that writes a buffer: 7-9% of a short command's instructions.
    "DROP TRIGGER pool_usage_pool;\n"
    "DROP TRIGGER pool_usage_insert;\n"
    "DROP TRIGGER pool_usage_delete;\n"
    "DROP TRIGGER pool_usage_update;\n"
    "INSERT OR REPLACE INTO pool_usage (pool, used) SELECT name, (SELECT"
    " COALESCE(SUM(allocated_bytes), 0) FROM buffers WHERE buffers.pool = pools.name AND state "
    "IN " BBKIT_HOLDING_STATES ") FROM pools;\n",
};
#undef BBKIT_HOLDING_STATES

// Torn-down directories wait in each pool's own trash/ (a rename cannot cross file systems),
// and quarantined ones in the pool's quarantine/, so neither is here.
const char* const subdirectories[] = {"env", "public", "run", "progress", "log"};

std::int64_t to_nanos(TimePoint time) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(time.time_since_epoch()).count();
}

TimePoint from_nanos(std::int64_t nanos) {
    return TimePoint(
        std::chrono::duration_cast<TimePoint::duration>(std::chrono::nanoseconds(nanos)));
}

std::string local_time(std::int64_t nanos) {
    const std::time_t seconds = static_cast<std::time_t>(nanos / 1000000000);
    std::tm tm{};
    localtime_r(&seconds, &tm);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &tm);
    return text;
}

std::string octal_mode(mode_t mode) {
    char text[8];
    std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
    return text;
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

// ---- SQLite ---------------------------------------------------------------------------------

// How many WAL pages may pile up before a commit checkpoints them into state.db. Every process
// opens the database alone, so SQLite rebuilds the WAL index by reading the whole WAL at open:
// a small WAL keeps that cheap, and a checkpoint (two syncs) every few dozen transactions
// costs less than a checkpoint at every close. 128 pages (a checkpoint every seventh alloc or
// teardown) beat 256 by 5% and 64 in interleaved runs (see bench/README.md).
constexpr int wal_checkpoint_pages = 128;
// The WAL file is truncated back to this size after a checkpoint that emptied it.
constexpr int wal_size_limit = 4 << 20;
// How much of state.db SQLite may read through mmap.
constexpr long long state_db_mmap_bytes = 256LL << 20;

// The unix VFS opens the WAL with O_CREAT and then, at the first sync, also syncs its directory
// (a new file's name must be durable). The WAL now outlives our processes, so that would cost
// every process one device flush for nothing. This VFS ("bbkit") opens an existing WAL without
// SQLITE_OPEN_CREATE, so that only a WAL that has to be created gets the directory sync. Every
// other call goes to the default VFS unchanged.
sqlite3_vfs* base_vfs(sqlite3_vfs* vfs) {
    return static_cast<sqlite3_vfs*>(vfs->pAppData);
}

int vfs_open(sqlite3_vfs* vfs, const char* name, sqlite3_file* file, int flags, int* out_flags) {
    sqlite3_vfs* base = base_vfs(vfs);
    if (name != nullptr && (flags & SQLITE_OPEN_WAL) != 0 && (flags & SQLITE_OPEN_CREATE) != 0) {
        const int rc = base->xOpen(base, name, file, flags & ~SQLITE_OPEN_CREATE, out_flags);
        if (rc != SQLITE_CANTOPEN)
            return rc;
    }
    return base->xOpen(base, name, file, flags, out_flags);
}

sqlite3_vfs* bbkit_vfs() {
    static sqlite3_vfs* const vfs = []() -> sqlite3_vfs* {
        // Before SQLite initializes (the first call below does): a bbkit process uses SQLite
        // from one thread only (the fsync, hook and mover threads never call it), so SQLite's
        // mutexes and its memory statistics (a mutex on every allocation) are pure cost. A
        // process that initialized SQLite already keeps its settings (SQLITE_MISUSE, ignored).
        sqlite3_config(SQLITE_CONFIG_SINGLETHREAD);
        sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
        // Each process starts with an empty page cache: read state.db through a mapping (page
        // faults on the kernel's cache) rather than one pread per page. Set here rather than
        // by a PRAGMA, which every process would compile and run.
        sqlite3_config(SQLITE_CONFIG_MMAP_SIZE, state_db_mmap_bytes, state_db_mmap_bytes);
        sqlite3_vfs* base = sqlite3_vfs_find(nullptr);
        if (base == nullptr)
            return nullptr;
        static sqlite3_vfs shim;
        shim = *base;  // same sizes and version; forwards below
        shim.pNext = nullptr;
        shim.zName = "bbkit";
        shim.pAppData = base;
        shim.xOpen = vfs_open;
        shim.xDelete = [](sqlite3_vfs* v, const char* n, int s) {
            return base_vfs(v)->xDelete(base_vfs(v), n, s);
        };
        shim.xAccess = [](sqlite3_vfs* v, const char* n, int f, int* out) {
            return base_vfs(v)->xAccess(base_vfs(v), n, f, out);
        };
        shim.xFullPathname = [](sqlite3_vfs* v, const char* n, int size, char* out) {
            return base_vfs(v)->xFullPathname(base_vfs(v), n, size, out);
        };
        shim.xDlOpen = [](sqlite3_vfs* v, const char* n) {
            return base_vfs(v)->xDlOpen(base_vfs(v), n);
        };
        shim.xDlError = [](sqlite3_vfs* v, int size, char* out) {
            base_vfs(v)->xDlError(base_vfs(v), size, out);
        };
        shim.xDlSym = [](sqlite3_vfs* v, void* h, const char* n) {
            return base_vfs(v)->xDlSym(base_vfs(v), h, n);
        };
        shim.xDlClose = [](sqlite3_vfs* v, void* h) { base_vfs(v)->xDlClose(base_vfs(v), h); };
        shim.xRandomness = [](sqlite3_vfs* v, int size, char* out) {
            return base_vfs(v)->xRandomness(base_vfs(v), size, out);
        };
        shim.xSleep = [](sqlite3_vfs* v, int us) { return base_vfs(v)->xSleep(base_vfs(v), us); };
        shim.xCurrentTime = [](sqlite3_vfs* v, double* out) {
            return base_vfs(v)->xCurrentTime(base_vfs(v), out);
        };
        shim.xGetLastError = [](sqlite3_vfs* v, int size, char* out) {
            return base_vfs(v)->xGetLastError(base_vfs(v), size, out);
        };
        if (base->iVersion >= 2 && base->xCurrentTimeInt64 != nullptr)
            shim.xCurrentTimeInt64 = [](sqlite3_vfs* v, sqlite3_int64* out) {
                return base_vfs(v)->xCurrentTimeInt64(base_vfs(v), out);
            };
        if (base->iVersion >= 3) {
            shim.xSetSystemCall = [](sqlite3_vfs* v, const char* n, sqlite3_syscall_ptr f) {
                return base_vfs(v)->xSetSystemCall(base_vfs(v), n, f);
            };
            shim.xGetSystemCall = [](sqlite3_vfs* v, const char* n) {
                return base_vfs(v)->xGetSystemCall(base_vfs(v), n);
            };
            shim.xNextSystemCall = [](sqlite3_vfs* v, const char* n) {
                return base_vfs(v)->xNextSystemCall(base_vfs(v), n);
            };
        }
        return sqlite3_vfs_register(&shim, 0) == SQLITE_OK ? &shim : nullptr;
    }();
    return vfs;
}

struct DatabaseCloser {
    void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StatementFinalizer {
    void operator()(sqlite3_stmt* statement) const { sqlite3_finalize(statement); }
};
using DatabasePtr = std::unique_ptr<sqlite3, DatabaseCloser>;
using StatementPtr = std::unique_ptr<sqlite3_stmt, StatementFinalizer>;

[[noreturn]] void fail_sqlite(sqlite3* db, int rc, const std::string& db_path,
                              const std::string& what) {
    const std::string why = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    const std::string failed = what + " in " + db_path + ": " + why;
    switch (rc & 0xff) {
        case SQLITE_CORRUPT:
        case SQLITE_NOTADB:
            throw Error(ExitCode::config, "state database " + db_path + " is unreadable: " + why +
                                              " (restore it from a backup, or move it aside to "
                                              "start empty and run bb-pool check)");
        case SQLITE_BUSY:
        case SQLITE_LOCKED:
            throw Error(ExitCode::temp_fail, failed + " (retry later)");
        case SQLITE_FULL:
        case SQLITE_IOERR:
            throw Error(ExitCode::io, failed + " (check the state directory's file system)");
        case SQLITE_CANTOPEN:
        case SQLITE_PERM:
        case SQLITE_READONLY:
            throw Error(ExitCode::no_perm,
                        failed + " (check the state directory's owner and mode)");
        case SQLITE_CONSTRAINT:
            throw Error(ExitCode::exists, failed);
        default:
            throw Error(ExitCode::software, failed);
    }
}

// One use of a cached prepared statement: binds, steps, and resets it when done.
class Query {
  public:
    Query(sqlite3* db, sqlite3_stmt* statement, const std::string& db_path)
        : db_(db), statement_(statement), db_path_(db_path) {}
    Query(const Query&) = delete;
    Query& operator=(const Query&) = delete;
    ~Query() {
        sqlite3_reset(statement_);
        sqlite3_clear_bindings(statement_);
    }

    Query& bind(int index, std::int64_t value) {
        check(sqlite3_bind_int64(statement_, index, value));
        return *this;
    }
    Query& bind(int index, std::uint64_t value) {
        return bind(index, static_cast<std::int64_t>(value));
    }
    Query& bind(int index, const std::string& value) {
        check(sqlite3_bind_text(statement_, index, value.data(), static_cast<int>(value.size()),
                                SQLITE_TRANSIENT));
        return *this;
    }
    Query& bind_null(int index) {
        check(sqlite3_bind_null(statement_, index));
        return *this;
    }
    template <typename T>
    Query& bind(int index, const std::optional<T>& value) {
        return value ? bind(index, *value) : bind_null(index);
    }

    // True while there is a row to read.
    bool step() {
        const int rc = sqlite3_step(statement_);
        if (rc == SQLITE_ROW)
            return true;
        if (rc == SQLITE_DONE)
            return false;
        fail_sqlite(db_, rc, db_path_, "query failed");
    }
    void run() {
        while (step()) {
        }
    }

    bool is_null(int column) const {
        return sqlite3_column_type(statement_, column) == SQLITE_NULL;
    }
    std::int64_t integer(int column) const { return sqlite3_column_int64(statement_, column); }
    std::uint64_t unsigned_integer(int column) const {
        return static_cast<std::uint64_t>(integer(column));
    }
    std::string text(int column) const {
        const auto* data = sqlite3_column_text(statement_, column);
        const int size = sqlite3_column_bytes(statement_, column);
        return data == nullptr ? std::string()
                               : std::string(reinterpret_cast<const char*>(data), size);
    }

  private:
    void check(int rc) {
        if (rc != SQLITE_OK)
            fail_sqlite(db_, rc, db_path_, "binding a value failed");
    }
    sqlite3* db_;
    sqlite3_stmt* statement_;
    const std::string& db_path_;
};

// ---- the flock ------------------------------------------------------------------------------

// Holds flock(LOCK_EX) on the lock file while alive, with the holder named in the file. The
// record always has the same length and is overwritten in place, blank once released: a
// truncate and a new block per transaction cost more than the transaction's own statements.
class HeldLock {
  public:
    static constexpr std::size_t record_size = 256;

    HeldLock() = default;
    HeldLock(int fd, const std::string& who) : fd_(fd) {
        std::string holder = std::to_string(getpid()) + " " +
                             std::to_string(ProcessId::self().start_time) + " " +
                             std::to_string(to_nanos(std::chrono::system_clock::now())) + " " + who;
        write_record(std::move(holder));
    }
    HeldLock(HeldLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
    HeldLock& operator=(HeldLock&& other) noexcept {
        std::swap(fd_, other.fd_);
        return *this;
    }
    HeldLock(const HeldLock&) = delete;
    HeldLock& operator=(const HeldLock&) = delete;
    ~HeldLock() {
        if (fd_ >= 0) {
            write_record("");
            ::flock(fd_, LOCK_UN);
        }
    }

  private:
    // Informational only (for waiters' messages), so neither failure nor fsync matters.
    void write_record(std::string text) const {
        text.resize(record_size - 1, ' ');
        text += '\n';
        if (::pwrite(fd_, text.data(), text.size(), 0) < 0) {
        }
    }

    int fd_ = -1;
};

std::string describe_holder(int fd) {
    char buffer[512];
    const ssize_t n = ::pread(fd, buffer, sizeof buffer - 1, 0);
    if (n <= 0)
        return "another process";
    std::istringstream fields(std::string(buffer, static_cast<std::size_t>(n)));
    long pid = 0;
    std::uint64_t start = 0;
    std::int64_t since = 0;
    std::string who;
    if (!(fields >> pid >> start >> since) || pid <= 0)
        return "another process";  // blank: released, or not yet written by the new holder
    std::getline(fields >> std::ws, who);
    who.erase(who.find_last_not_of(' ') + 1);
    return "pid " + std::to_string(pid) + (who.empty() ? "" : " (" + who + ")") + " since " +
           local_time(since);
}

}  // namespace

int state_schema_version() {
    return static_cast<int>(migrations.size());
}

// ---- StateStore -----------------------------------------------------------------------------

struct StateStore::Impl {
    std::string dir;
    std::string db_path;
    StoreOptions options;
    Fd lock_fd;
    DatabasePtr db;
    std::unordered_map<std::string, StatementPtr> statements;
    std::optional<HeldLock> lock;
    bool in_transaction = false;

    Query query(const std::string& sql) {
        auto found = statements.find(sql);
        if (found == statements.end()) {
            sqlite3_stmt* raw = nullptr;
            const int rc = sqlite3_prepare_v3(db.get(), sql.c_str(), static_cast<int>(sql.size()),
                                              SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
            StatementPtr statement(raw);
            if (rc != SQLITE_OK)
                fail_sqlite(db.get(), rc, db_path, "preparing a query failed");
            found = statements.emplace(sql, std::move(statement)).first;
        }
        return Query(db.get(), found->second.get(), db_path);
    }

    void exec(const std::string& sql, const std::string& what) {
        const int rc = sqlite3_exec(db.get(), sql.c_str(), nullptr, nullptr, nullptr);
        if (rc != SQLITE_OK)
            fail_sqlite(db.get(), rc, db_path, what);
    }

    HeldLock acquire_lock(const std::string& who) {
        if (!lock_fd)
            throw Error(ExitCode::software, "cannot write " + db_path +
                                                ": the store was opened read-only (a reading "
                                                "command never changes state)");
        using Clock = std::chrono::steady_clock;
        const auto deadline = Clock::now() + options.lock_timeout;
        auto pause = std::chrono::microseconds(200);
        while (::flock(lock_fd.get(), LOCK_EX | LOCK_NB) != 0) {
            if (errno == EINTR)
                continue;
            if (errno != EWOULDBLOCK)
                throw Error(ExitCode::io, "cannot lock " + dir + "/lock: " + std::strerror(errno));
            if (Clock::now() >= deadline) {
                const auto waited = std::chrono::duration<double>(options.lock_timeout).count();
                std::ostringstream seconds;
                seconds << waited;
                throw Error(ExitCode::temp_fail,
                            "state directory " + dir + " is locked by " +
                                describe_holder(lock_fd.get()) + ": gave up after " +
                                seconds.str() + " s (retry later; if that process hangs, stop it)");
            }
            std::this_thread::sleep_for(pause);
            pause = std::min(pause * 2, std::chrono::microseconds(10000));
        }
        return HeldLock(lock_fd.get(), who);
    }

    void begin(bool write) {
        if (in_transaction)
            throw Error(ExitCode::software,
                        "a transaction on " + db_path + " is already open (one at a time)");
        query(write ? "BEGIN IMMEDIATE" : "BEGIN").run();
        in_transaction = true;
    }

    void end(const char* sql) noexcept {
        if (!in_transaction)
            return;
        in_transaction = false;
        sqlite3_exec(db.get(), sql, nullptr, nullptr, nullptr);
    }
};

namespace {

uid_t owner_uid_of(const Config& config) {
    if (config.state_owner == "root" || config.state_owner == "0")
        return 0;
    return lookup_user(config.state_owner).uid;
}

void check_owned(const std::string& path, const struct stat& st, uid_t owner,
                 const std::string& owner_name) {
    if (st.st_uid != owner)
        throw Error(ExitCode::no_perm, "state directory " + path + " is owned by uid " +
                                           std::to_string(st.st_uid) + ", not by " + owner_name +
                                           " (chown " + owner_name + " " + path +
                                           ", or set state_owner)");
}

// The directory at `path` itself, never what a symlink there points to: the state owner (not
// root) owns the state directory and could swap an entry between a check and a change of mode
// or owner, so root changes them only through this descriptor.
Fd open_directory_entry(const std::string& path, const struct stat* expected) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0)
        throw Error(ExitCode::no_perm, "cannot open directory " + path + ": " +
                                           std::strerror(errno) + " (is it a symlink?)");
    if (expected && (st.st_ino != expected->st_ino || st.st_dev != expected->st_dev))
        throw Error(ExitCode::no_perm, path + " changed while bbkit set it up (retry)");
    return fd;
}

// Creates `path` as a directory if missing; returns its status.
struct stat ensure_directory(const std::string& path, mode_t mode, uid_t owner) {
    struct stat st {};
    // Looked at first: a mkdir of an existing directory takes its parent's inode lock, which
    // every tool call would otherwise take six times.
    if (::lstat(path.c_str(), &st) != 0) {
        if (::mkdir(path.c_str(), mode) == 0) {
            const Fd fd = open_directory_entry(path, nullptr);
            // chmod: the umask must not decide who can read the state.
            if (::fchmod(fd.get(), mode) != 0 ||
                (geteuid() != owner && ::fchown(fd.get(), owner, static_cast<gid_t>(-1)) != 0))
                throw Error(ExitCode::no_perm,
                            "cannot set up directory " + path + ": " + std::strerror(errno));
        } else if (errno != EEXIST) {
            throw Error(ExitCode::config, "cannot create state directory " + path + ": " +
                                              std::strerror(errno) +
                                              " (create its parent, or set state_dir)");
        }
        if (::lstat(path.c_str(), &st) != 0)
            throw Error(ExitCode::config, "cannot inspect " + path + ": " + std::strerror(errno));
    }
    if (!S_ISDIR(st.st_mode))
        throw Error(ExitCode::config,
                    path + " is not a directory (move it aside so bbkit can create it)");
    return st;
}

Fd open_owned_file(const std::string& path, uid_t owner) {
    Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd)
        throw Error(ExitCode::no_perm, "cannot open " + path + ": " + std::strerror(errno) +
                                           " (check the state directory's owner and mode)");
    struct stat st {};
    if (::fstat(fd.get(), &st) == 0 && st.st_uid != owner && geteuid() == 0 &&
        ::fchown(fd.get(), owner, static_cast<gid_t>(-1)) != 0)
        throw Error(ExitCode::no_perm, "cannot chown " + path + ": " + std::strerror(errno));
    return fd;
}

// The group config.state_group names, or nullopt when it names none.
std::optional<gid_t> state_group_of(const Config& config) {
    if (config.state_group.empty())
        return std::nullopt;
    if (std::all_of(config.state_group.begin(), config.state_group.end(),
                    [](char c) { return c >= '0' && c <= '9'; }) &&
        config.state_group.size() <= 10)
        return static_cast<gid_t>(std::stoull(config.state_group));
    if (const struct group* g = ::getgrnam(config.state_group.c_str()))
        return g->gr_gid;
    throw Error(ExitCode::config, "state_group '" + config.state_group +
                                      "' is not a group on this host (groupadd it, or change "
                                      "state_group in the configuration)");
}

// env/: its group (state_group, SlurmUser's) may enter it and read the env files, which it
// passes on to the files created in it (setgid); nobody else can even learn which exist.
void set_up_env_directory(const std::string& path, const struct stat& st,
                          std::optional<gid_t> group) {
    constexpr mode_t env_mode = 02710;
    const bool regroup = group && st.st_gid != *group;
    if (!regroup && (st.st_mode & 07777) == env_mode)
        return;
    const Fd fd = open_directory_entry(path, &st);
    if (regroup && ::fchown(fd.get(), static_cast<uid_t>(-1), *group) != 0)
        throw Error(ExitCode::no_perm, "cannot give " + path + " to group " +
                                           std::to_string(*group) + ": " + std::strerror(errno));
    if (::fchmod(fd.get(), env_mode) != 0)
        throw Error(ExitCode::no_perm,
                    "cannot set the mode of " + path + ": " + std::strerror(errno));
}

void set_up_directory(const std::string& dir, uid_t owner, const std::string& owner_name,
                      std::optional<gid_t> env_group) {
    if (geteuid() != owner && geteuid() != 0)
        throw Error(ExitCode::no_perm,
                    "state directory " + dir + " belongs to " + owner_name +
                        (owner_name == "root" ? " (run this as root)"
                                              : " (run this as " + owner_name + " or root)"));
    // 0711: others may reach public/ (and nothing else: every other entry is 0700 or 0600).
    const struct stat st = ensure_directory(dir, 0711, owner);
    check_owned(dir, st, owner, owner_name);
    // Search permission alone lets non-owners reach public/; reading or writing does not.
    if ((st.st_mode & 066) != 0)
        throw Error(ExitCode::no_perm,
                    "state directory " + dir + " has mode " + octal_mode(st.st_mode) +
                        ": group or others may read or write it (chmod 0711 " + dir + ")");
    for (const char* name : subdirectories) {
        const std::string path = dir + "/" + name;
        const bool env = std::string(name) == "env";
        const mode_t mode = std::string(name) == "public" ? 0755 : env ? 0710 : 0700;
        struct stat st = ensure_directory(path, mode, owner);
        check_owned(path, st, owner, owner_name);
        if (env)
            set_up_env_directory(path, st, env_group);
    }
}

// What a reading command checks instead of set_up_directory: the same owner and mode rules,
// but a missing directory is an answer (66), never something to create (bbkit(7), STATE
// DIRECTORY).
void check_existing_directory(const std::string& dir, uid_t owner, const std::string& owner_name) {
    if (geteuid() != owner && geteuid() != 0)
        throw Error(ExitCode::no_perm, "state directory " + dir + " belongs to " + owner_name +
                                           " (run this as " + owner_name + " or root)");
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0) {
        if (errno == ENOENT)
            throw Error(ExitCode::no_input,
                        "cannot read state directory " + dir +
                            ": it does not exist (check state_dir and --state-dir; bb-pool init "
                            "creates it)");
        throw Error(ExitCode::config,
                    "cannot inspect state directory " + dir + ": " + std::strerror(errno));
    }
    if (!S_ISDIR(st.st_mode))
        throw Error(ExitCode::config, "cannot read state directory " + dir +
                                          ": not a directory (check state_dir and --state-dir)");
    check_owned(dir, st, owner, owner_name);
    if ((st.st_mode & 066) != 0)
        throw Error(ExitCode::no_perm,
                    "state directory " + dir + " has mode " + octal_mode(st.st_mode) +
                        ": group or others may read or write it (chmod 0711 " + dir + ")");
    const std::string db = dir + "/state.db";
    if (::lstat(db.c_str(), &st) != 0 && errno == ENOENT)
        throw Error(ExitCode::no_input, "cannot read " + db +
                                            ": it does not exist (check state_dir and "
                                            "--state-dir; bb-pool init creates it)");
}

std::string buffer_columns() {
    return "key, cluster, job_id, incarnation, name, pool, requested_bytes, allocated_bytes, uid, "
           "gid, user, state, reason, message, entered, directory, access, type, staging, owner, "
           "expires, use_count, created, lock_pid, lock_start, reaped, id";
}
constexpr int row_id_column = 26;

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
    return b;
}

std::vector<Buffer> read_buffers(Query& q) {
    std::vector<Buffer> buffers;
    while (q.step())
        buffers.push_back(read_buffer(q));
    return buffers;
}

// Binds the fields update_buffer() may change, as parameters 1..18.
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
    q.bind(18, static_cast<std::int64_t>(b.reaped ? 1 : 0));
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

void migrate(StateStore::Impl& impl) {
    const auto version = [&] {
        Query q = impl.query("PRAGMA user_version");
        q.step();
        return static_cast<int>(q.integer(0));
    };
    const int known = state_schema_version();
    const int found = version();  // the first read: a file that is not SQLite fails here
    if (found > known)
        throw Error(ExitCode::config, "state.db has schema version " + std::to_string(found) +
                                          " but this bbkit knows only up to " +
                                          std::to_string(known) + " (upgrade bbkit)");
    if (found == known)
        return;
    if (impl.options.read_only)
        throw Error(ExitCode::config, "cannot read state.db: its schema version " +
                                          std::to_string(found) + " is older than this bbkit's " +
                                          std::to_string(known) +
                                          " (run bb-pool recover once to migrate it)");
    const HeldLock lock = impl.acquire_lock("bbkit schema migration");
    // WAL is a property of the file: set once, by whoever creates or migrates it.
    impl.exec("PRAGMA journal_mode=WAL", "enabling WAL failed");
    impl.begin(true);
    try {
        for (int v = version(); v < known; ++v) {
            impl.exec(migrations[static_cast<std::size_t>(v)],
                      "migrating to schema " + std::to_string(v + 1) + " failed");
            impl.exec("PRAGMA user_version = " + std::to_string(v + 1),
                      "setting the version failed");
        }
        impl.exec("COMMIT", "committing the schema failed");
        impl.in_transaction = false;
    } catch (...) {
        impl.end("ROLLBACK");
        throw;
    }
}

}  // namespace

StateStore::StateStore(const Config& config, StoreOptions options)
    : impl_(std::make_unique<Impl>()) {
    Impl& impl = *impl_;
    impl.dir = config.state_dir;
    impl.db_path = impl.dir + "/state.db";
    impl.options = options;
    const uid_t owner = owner_uid_of(config);
    if (options.read_only) {
        state_group_of(config);  // a misconfigured state_group is an error for readers too
        check_existing_directory(impl.dir, owner, config.state_owner);
    } else {
        set_up_directory(impl.dir, owner, config.state_owner, state_group_of(config));
        impl.lock_fd = open_owned_file(impl.dir + "/lock", owner);
        // Created here so its owner and mode are ours; SQLite gives -wal and -shm the same ones.
        open_owned_file(impl.db_path, owner);
    }

    sqlite3* raw = nullptr;
    sqlite3_vfs* vfs = bbkit_vfs();
    const int rc =
        sqlite3_open_v2(impl.db_path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                        vfs != nullptr ? vfs->zName : nullptr);
    impl.db.reset(raw);
    if (rc != SQLITE_OK)
        fail_sqlite(raw, rc, impl.db_path, "opening the state database failed");
    sqlite3_extended_result_codes(raw, 0);
    // The WAL stays between processes: a checkpoint at every close would cost each process two
    // syncs, and deleting the WAL one more to create it again (with a directory sync). Commits
    // checkpoint instead, every wal_checkpoint_pages pages. Committed transactions are in the
    // WAL, synced (synchronous=FULL): state.db alone is not a backup (use sqlite3 .backup).
    sqlite3_db_config(raw, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
    // Writers are serialized by the flock; the busy timeout only covers SQLite's own short
    // locks (checkpoints, WAL recovery after a crash).
    sqlite3_busy_timeout(raw, 5000);
    // Through the C API where one exists: a PRAGMA is compiled and run like any statement.
    int enabled = 0;
    sqlite3_db_config(raw, SQLITE_DBCONFIG_ENABLE_FKEY, 1, &enabled);
    if (enabled != 1)
        throw Error(ExitCode::software, "enabling foreign keys on " + impl.db_path + " failed");
    if (sqlite3_wal_autocheckpoint(raw, wal_checkpoint_pages) != SQLITE_OK)
        fail_sqlite(raw, SQLITE_ERROR, impl.db_path, "setting wal_autocheckpoint failed");
    impl.exec(
        "PRAGMA synchronous = FULL; PRAGMA journal_size_limit = " + std::to_string(wal_size_limit),
        "setting synchronous=FULL and journal_size_limit failed");
    migrate(impl);
    {
        Query q = impl.query("PRAGMA journal_mode");
        if (!q.step() || q.text(0) != "wal")
            throw Error(ExitCode::config, "state database " + impl.db_path +
                                              " is not in WAL mode (restore it from a backup)");
    }
}

StateStore::~StateStore() = default;

const std::string& StateStore::dir() const {
    return impl_->dir;
}

std::string StateStore::path(const std::string& relative) const {
    return impl_->dir + "/" + relative;
}

bool StateStore::syncs_commits() const {
    Query q = impl_->query("PRAGMA synchronous");
    return q.step() && q.integer(0) == 2;  // FULL
}

// ---- reads ----------------------------------------------------------------------------------

Transaction::Transaction(StateStore& store) : impl_(*store.impl_) {}

namespace {

// A buffer's record and its row, which the writes of a transaction address directly.
struct Row {
    std::int64_t id;
    Buffer buffer;
};

std::optional<Row> find_row(StateStore::Impl& impl, const BufferKey& key) {
    // Persistent names can be reused after deletion: the newest row is the buffer.
    Query q = impl.query("SELECT " + buffer_columns() +
                         " FROM buffers WHERE key = ?1 ORDER BY id DESC LIMIT 1");
    q.bind(1, key.str());
    if (!q.step())
        return std::nullopt;
    return Row{q.integer(row_id_column), read_buffer(q)};
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

std::optional<Buffer> Transaction::latest_job_buffer(const std::string& cluster,
                                                     std::uint64_t job_id) {
    // Through the key: one statement less to compile per process than a query of its own.
    const std::uint32_t latest = next_incarnation(cluster, job_id) - 1;
    if (latest == 0)
        return std::nullopt;
    return find_buffer(BufferKey::job(cluster, job_id, latest));
}

std::uint32_t Transaction::next_incarnation(const std::string& cluster, std::uint64_t job_id) {
    Query q = impl_.query(
        "SELECT COALESCE(MAX(incarnation), 0) FROM buffers WHERE cluster = ?1 AND job_id = ?2");
    q.bind(1, cluster).bind(2, job_id);
    q.step();
    return static_cast<std::uint32_t>(q.integer(0) + 1);
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
    Query q = impl_.query(sql);
    if (filter.pool)
        q.bind(1, *filter.pool);
    if (filter.uid)
        q.bind(2, static_cast<std::int64_t>(*filter.uid));
    if (filter.state)
        q.bind(3, std::string(to_string(*filter.state)));
    return read_buffers(q);
}

std::map<BufferState, std::size_t> Transaction::count_by_state() {
    Query q = impl_.query("SELECT state, COUNT(*) FROM buffers GROUP BY state");
    std::map<BufferState, std::size_t> counts;
    while (q.step())
        counts[parse_buffer_state(q.text(0))] = static_cast<std::size_t>(q.integer(1));
    return counts;
}

std::uint64_t Transaction::used_bytes(const std::string& pool) {
    Query q = impl_.query("SELECT used FROM pool_usage WHERE pool = ?1");
    q.bind(1, pool);
    return q.step() ? q.unsigned_integer(0) : 0;
}

std::uint64_t Transaction::summed_used_bytes(const std::string& pool) {
    Query q = impl_.query(std::string("SELECT COALESCE(SUM(allocated_bytes), 0) FROM buffers"
                                      " WHERE pool = ?1 AND state IN ") +
                          holding_states);
    q.bind(1, pool);
    q.step();
    return q.unsigned_integer(0);
}

std::uint64_t Transaction::trash_bytes(const std::string& pool) {
    // Without INDEXED BY, SQLite walks buffers_pool_state through every complete row, which
    // is all of history; the partial index holds only what is still in trash/.
    Query q = impl_.query(
        "SELECT COALESCE(SUM(allocated_bytes), 0) FROM buffers INDEXED BY buffers_trash"
        " WHERE pool = ?1 AND reaped = 0 AND state IN ('complete', 'deleted')");
    q.bind(1, pool);
    q.step();
    return q.unsigned_integer(0);
}

std::uint64_t Transaction::used_bytes_of_user(uid_t uid) {
    Query q = impl_.query(std::string("SELECT COALESCE(SUM(allocated_bytes), 0) FROM buffers"
                                      " WHERE uid = ?1 AND state IN ") +
                          holding_states);
    q.bind(1, static_cast<std::int64_t>(uid));
    q.step();
    return q.unsigned_integer(0);
}

std::optional<PoolRecord> Transaction::find_pool(const std::string& name) {
    Query q = impl_.query("SELECT name, path, uuid, draining FROM pools WHERE name = ?1");
    q.bind(1, name);
    if (!q.step())
        return std::nullopt;
    return PoolRecord{q.text(0), q.text(1), q.text(2), q.integer(3) != 0};
}

std::vector<PoolRecord> Transaction::list_pools() {
    Query q = impl_.query("SELECT name, path, uuid, draining FROM pools ORDER BY name");
    std::vector<PoolRecord> pools;
    while (q.step())
        pools.push_back(PoolRecord{q.text(0), q.text(1), q.text(2), q.integer(3) != 0});
    return pools;
}

std::vector<QueueEntry> Transaction::queue(const std::string& pool) {
    Query q = impl_.query(std::string("SELECT ") + queue_columns +
                          " FROM queue WHERE pool = ?1 ORDER BY seq");
    q.bind(1, pool);
    std::vector<QueueEntry> entries;
    while (q.step())
        entries.push_back(read_queue_entry(q));
    return entries;
}

std::optional<QueueEntry> Transaction::queue_head(const std::string& pool) {
    Query q = impl_.query(std::string("SELECT ") + queue_columns +
                          " FROM queue WHERE pool = ?1 ORDER BY seq LIMIT 1");
    q.bind(1, pool);
    if (!q.step())
        return std::nullopt;
    return read_queue_entry(q);
}

std::optional<std::size_t> Transaction::queue_position(const std::string& key) {
    Query q = impl_.query(
        "SELECT (SELECT COUNT(*) FROM queue AS ahead WHERE ahead.pool = q.pool AND ahead.seq <= "
        "q.seq) FROM queue AS q WHERE q.key = ?1");
    q.bind(1, key);
    if (!q.step())
        return std::nullopt;
    return static_cast<std::size_t>(q.integer(0));
}

std::size_t Transaction::queue_length(const std::string& pool) {
    Query q = impl_.query("SELECT COUNT(*) FROM queue WHERE pool = ?1");
    q.bind(1, pool);
    q.step();
    return static_cast<std::size_t>(q.integer(0));
}

std::vector<HistoryEntry> Transaction::history(const BufferKey& key) {
    Query q = impl_.query(
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

// ---- read-only queries added for status views (lib/bbkit/status.*) -------------------------

std::uint64_t Transaction::persistent_used_bytes(const std::string& pool) {
    Query q = impl_.query(std::string("SELECT COALESCE(SUM(allocated_bytes), 0) FROM buffers"
                                      " WHERE pool = ?1 AND name IS NOT NULL AND state IN ") +
                          holding_states);
    q.bind(1, pool);
    q.step();
    return q.unsigned_integer(0);
}

// ---- end of status additions ----------------------------------------------------------------

// ---- transactions ---------------------------------------------------------------------------

ReadSnapshot::ReadSnapshot(StateStore& store) : Transaction(store) {
    impl_.begin(false);
    try {
        // A deferred transaction starts reading at its first query: pin the snapshot now.
        Query q = impl_.query("SELECT COUNT(*) FROM pools");
        q.step();
    } catch (...) {
        impl_.end("ROLLBACK");
        throw;
    }
}

ReadSnapshot::~ReadSnapshot() {
    impl_.end("ROLLBACK");
}

WriteTransaction::WriteTransaction(StateStore& store, std::string who, Durability durability)
    : Transaction(store), who_(std::move(who)), durability_(durability) {
    if (impl_.in_transaction)
        throw Error(ExitCode::software,
                    "a transaction on " + impl_.db_path + " is already open (one at a time)");
    HeldLock lock = impl_.acquire_lock(who_);
    // SQLite takes the safety level only outside a transaction.
    if (durability_ == Durability::deferred)
        impl_.query("PRAGMA synchronous = NORMAL").run();
    try {
        impl_.begin(true);
    } catch (...) {
        restore_durability();
        throw;
    }
    impl_.lock = std::move(lock);
}

WriteTransaction::~WriteTransaction() {
    if (!committed_)
        impl_.end("ROLLBACK");
    restore_durability();
    impl_.lock.reset();  // after the rollback: the next writer must not see our changes
}

void WriteTransaction::restore_durability() {
    if (durability_ == Durability::deferred) {
        try {
            impl_.query("PRAGMA synchronous = FULL").run();  // compiled once per process
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
    impl_.query("COMMIT").run();
    impl_.in_transaction = false;
    committed_ = true;
    restore_durability();
    fault_point("txn.committed");
    impl_.lock.reset();
}

namespace {

void append_history(StateStore::Impl& impl, const std::string& key, std::optional<BufferState> from,
                    BufferState to, TimePoint time, const std::string& who,
                    const std::string& reason) {
    Query q = impl.query(
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
    Query q = impl.query("UPDATE pool_usage SET used = used + ?2 WHERE pool = ?1");
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
        buffer.directory = buffer.key.directory();

    Query q = impl_.query(
        "INSERT INTO buffers (pool, requested_bytes, allocated_bytes, uid, gid, user, reason,"
        " message, directory, access, type, staging, owner, expires, use_count, lock_pid,"
        " lock_start, reaped, key, cluster, job_id, incarnation, name, state, entered, created)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,"
        " ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26)");
    bind_mutable(q, buffer);
    q.bind(19, buffer.key.str()).bind(20, buffer.key.cluster);
    if (buffer.key.kind() == BufferKind::job)
        q.bind(21, buffer.key.job_id)
            .bind(22, static_cast<std::int64_t>(buffer.key.incarnation))
            .bind_null(23);
    else
        q.bind_null(21).bind_null(22).bind(23, buffer.key.name);
    q.bind(24, std::string(to_string(buffer.state)))
        .bind(25, encode_entered(buffer.entered))
        .bind(26, to_nanos(buffer.created));
    try {
        q.run();
    } catch (const Error& error) {
        if (error.code() == ExitCode::exists && !find_pool(buffer.pool))
            throw Error(ExitCode::no_input, "no pool '" + buffer.pool +
                                                "' in the state database (run bb-pool init " +
                                                buffer.pool + ")");
        throw;
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
    Query q = impl_.query(
        "UPDATE buffers SET pool = ?1, requested_bytes = ?2, allocated_bytes = ?3, uid = ?4,"
        " gid = ?5, user = ?6, reason = ?7, message = ?8, directory = ?9, access = ?10,"
        " type = ?11, staging = ?12, owner = ?13, expires = ?14, use_count = ?15,"
        " lock_pid = ?16, lock_start = ?17, reaped = ?18 WHERE id = ?19");
    bind_mutable(q, buffer);
    q.bind(19, row.id);
    q.run();
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
    Query q = impl_.query(
        "UPDATE buffers SET state = ?1, reason = ?2, message = ?3, entered = ?4 WHERE id = ?5");
    q.bind(1, std::string(to_string(to)))
        .bind(2, reason)
        .bind(3, message)
        .bind(4, encode_entered(buffer.entered))
        .bind(5, row.id);
    q.run();
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
    Query q = impl_.query("UPDATE buffers SET lock_pid = ?1, lock_start = ?2 WHERE id = ?3");
    if (holder)
        q.bind(1, static_cast<std::int64_t>(holder->pid)).bind(2, holder->start_time);
    else
        q.bind_null(1).bind_null(2);
    q.bind(3, row.id);
    q.run();
    touched_keys_.insert(key.str());
}

void WriteTransaction::mark_reaped(const BufferKey& key) {
    const Row row = get_row(impl_, key);
    const Buffer& buffer = row.buffer;
    if (!is_final(buffer.state))
        throw Error(ExitCode::data, "buffer " + key.str() + " is " + to_string(buffer.state) +
                                        ", cannot be reaped (only complete or deleted buffers)");
    Query q = impl_.query("UPDATE buffers SET reaped = 1 WHERE id = ?1");
    q.bind(1, row.id);
    q.run();
    touched_keys_.insert(key.str());
    pools_touched_ = true;
}

void WriteTransaction::put_pool(const PoolRecord& pool) {
    Query q = impl_.query(
        "INSERT INTO pools (name, path, uuid, draining) VALUES (?1, ?2, ?3, ?4)"
        " ON CONFLICT (name) DO UPDATE SET path = excluded.path, uuid = excluded.uuid");
    q.bind(1, pool.name).bind(2, pool.path).bind(3, pool.uuid);
    q.bind(4, static_cast<std::int64_t>(pool.draining ? 1 : 0));
    q.run();
    Query usage = impl_.query("INSERT OR IGNORE INTO pool_usage (pool, used) VALUES (?1, 0)");
    usage.bind(1, pool.name);
    usage.run();
    pools_touched_ = true;
}

void WriteTransaction::recompute_used_bytes(const std::string& pool) {
    Query q =
        impl_.query(std::string("INSERT INTO pool_usage (pool, used) VALUES (?1, (SELECT"
                                " COALESCE(SUM(allocated_bytes), 0) FROM buffers"
                                " WHERE pool = ?1 AND state IN ") +
                    holding_states + ")) ON CONFLICT (pool) DO UPDATE SET used = excluded.used");
    q.bind(1, pool);
    q.run();
    pools_touched_ = true;
}

void WriteTransaction::set_draining(const std::string& pool, bool draining) {
    {
        Query q = impl_.query("UPDATE pools SET draining = ?1 WHERE name = ?2");
        q.bind(1, static_cast<std::int64_t>(draining ? 1 : 0)).bind(2, pool);
        q.run();
    }
    pools_touched_ = true;
    if (sqlite3_changes(impl_.db.get()) == 0)
        throw Error(ExitCode::no_input,
                    "no pool '" + pool + "' in the state database (run bb-pool init " + pool + ")");
}

QueueEntry WriteTransaction::enqueue(const std::string& pool, const std::string& key,
                                     std::uint64_t requested_bytes, const ProcessId& waiter) {
    if (auto position = queue_position(key))
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
    Query q = impl_.query(
        "INSERT INTO queue (pool, key, requested_bytes, waiter_pid, waiter_start, enqueued)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    q.bind(1, pool).bind(2, key).bind(3, requested_bytes);
    q.bind(4, static_cast<std::int64_t>(waiter.pid)).bind(5, waiter.start_time);
    q.bind(6, to_nanos(entry.enqueued));
    q.run();
    entry.seq = sqlite3_last_insert_rowid(impl_.db.get());
    touched_keys_.insert(key);  // its queue position appears
    pools_touched_ = true;      // and the pool's queue length changes
    return entry;
}

bool WriteTransaction::dequeue(const std::string& key) {
    std::optional<std::string> pool;
    {
        Query q = impl_.query("SELECT pool FROM queue WHERE key = ?1");
        q.bind(1, key);
        if (q.step())
            pool = q.text(0);
    }
    if (!pool)
        return false;
    Query q = impl_.query("DELETE FROM queue WHERE key = ?1");
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
        Query q = impl_.query(std::string("SELECT ") + queue_columns + " FROM queue ORDER BY seq");
        while (q.step()) {
            QueueEntry entry = read_queue_entry(q);
            if (!entry.waiter.alive())
                dead.push_back(std::move(entry));
        }
    }
    for (const QueueEntry& entry : dead)
        dequeue(entry.key);
    return dead;
}

}  // namespace bbkit
