#include "bbkit/sqlite.hpp"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"

namespace bbkit::sqlite {
namespace {

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
// The most memory SQLite may hold in one process: a record is at most a request's stage lines
// (bounded by [limits] script_size, itself at most 512 MiB), so twice that.
constexpr sqlite3_int64 sqlite_heap_limit = 1LL << 30;

// The unix VFS opens the WAL with O_CREAT and then, at the first sync, also syncs its directory
// (a new file's name must be durable). The WAL now outlives our processes, so that would cost
// every process one device flush for nothing. This VFS ("bbkit") opens an existing WAL without
// SQLITE_OPEN_CREATE, so that only a WAL that has to be created gets the directory sync; the
// same for the rollback journal, which journal_mode=TRUNCATE keeps between transactions (a
// network file system: Journal::rollback). Every other call goes to the default VFS unchanged.
sqlite3_vfs* base_vfs(sqlite3_vfs* vfs) {
    return static_cast<sqlite3_vfs*>(vfs->pAppData);
}

// The state directory is its owner's, who is not trusted with root's files (bbkit(7),
// SECURITY): a database, WAL or journal that is not a regular file of one link (a symlink or a
// hard link planted to a file elsewhere) is not opened. SQLite opens them O_NOFOLLOW itself
// (SQLITE_OPEN_NOFOLLOW); the link count is checked here.
bool planted(const char* name) {
    struct stat st {};
    if (lstat(name, &st) != 0)
        return false;  // missing: SQLite creates it
    return !S_ISREG(st.st_mode) || st.st_nlink != 1;
}

int vfs_open(sqlite3_vfs* vfs, const char* name, sqlite3_file* file, int flags, int* out_flags) {
    sqlite3_vfs* base = base_vfs(vfs);
    if (name != nullptr && planted(name))
        return SQLITE_CANTOPEN;
    // The WAL index (-shm) is opened by SQLite's shared-memory code, not here: checked with its
    // database, so that a FIFO or a link planted there refuses the open (not an I/O error later).
    if (name != nullptr && (flags & SQLITE_OPEN_MAIN_DB) != 0 &&
        planted((std::string(name) + "-shm").c_str()))
        return SQLITE_CANTOPEN;
    const bool kept = (flags & (SQLITE_OPEN_WAL | SQLITE_OPEN_MAIN_JOURNAL)) != 0;
    if (name != nullptr && kept && (flags & SQLITE_OPEN_CREATE) != 0) {
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
        // A file another account wrote cannot make SQLite take all of root's memory
        // (bbkit(7), SECURITY: SQLite's own list of defences, one by one).
        sqlite3_hard_heap_limit64(sqlite_heap_limit);
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

// While alive, this thread's file operations run as `writer` (ForeignWriter); nothing when
// there is none. setfsuid and setfsgid are per thread: the process's other threads, and its
// credentials for anything else, are untouched; each returns the identity it replaces.
class AsWriter {
  public:
    explicit AsWriter(const std::optional<ForeignWriter>& writer) : active_(writer.has_value()) {
        if (!active_)
            return;
        old_gid_ = static_cast<gid_t>(::setfsgid(writer->gid));
        old_uid_ = static_cast<uid_t>(::setfsuid(writer->uid));
    }
    ~AsWriter() {
        if (!active_)
            return;
        ::setfsuid(old_uid_);
        ::setfsgid(old_gid_);
    }
    AsWriter(const AsWriter&) = delete;
    AsWriter& operator=(const AsWriter&) = delete;

  private:
    bool active_;
    uid_t old_uid_ = 0;
    gid_t old_gid_ = 0;
};

// SQLite's file format: bytes 18 and 19 of the header are the write and read versions, 2 in WAL
// mode and 1 for a rollback journal.
constexpr off_t header_versions_offset = 18;
constexpr int wal_version = 2;

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
        case SQLITE_READONLY:
            // A reader's connection (Database's read_only) that met a journal it may not roll
            // back: a writer died mid-commit, here or on another host (bbkit(7), STATE DIRECTORY).
            if (db != nullptr && sqlite3_db_readonly(db, "main") == 1)
                throw Error(ExitCode::temp_fail,
                            failed +
                                " (a writer was interrupted mid-commit and its journal is "
                                "still there: the next writing command rolls it back; "
                                "retry)");
            [[fallthrough]];
        case SQLITE_CANTOPEN:
        case SQLITE_PERM:
            throw Error(ExitCode::no_perm,
                        failed + " (check the state directory's owner and mode)");
        case SQLITE_CONSTRAINT:
            throw Error(ExitCode::exists, failed);
        default:
            throw Error(ExitCode::software, failed);
    }
}
}  // namespace

std::optional<bool> wal_header(const std::string& path,
                               const std::optional<ForeignWriter>& writer) {
    const AsWriter as(writer);
    // SQLite opens a file in WAL mode whenever its -wal file holds frames, whatever the header
    // says (a restored backup beside an old WAL, or a header another host just rewrote).
    struct stat wal {};
    const bool wal_frames = ::lstat((path + "-wal").c_str(), &wal) == 0 && wal.st_size > 0;
    const Fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    unsigned char versions[2] = {};
    if (!fd || ::pread(fd.get(), versions, sizeof versions, header_versions_offset) != 2)
        return wal_frames ? std::optional<bool>(true) : std::nullopt;
    return wal_frames || versions[0] == wal_version || versions[1] == wal_version;
}

// ---- Query ----------------------------------------------------------------------------------

Query::~Query() {
    const AsWriter as(writer_);
    sqlite3_reset(statement_);
    sqlite3_clear_bindings(statement_);
}

Query& Query::bind(int index, std::int64_t value) {
    check(sqlite3_bind_int64(statement_, index, value));
    return *this;
}

Query& Query::bind(int index, std::uint64_t value) {
    return bind(index, static_cast<std::int64_t>(value));
}

Query& Query::bind(int index, const std::string& value) {
    check(sqlite3_bind_text(statement_, index, value.data(), static_cast<int>(value.size()),
                            SQLITE_TRANSIENT));
    return *this;
}

Query& Query::bind_null(int index) {
    check(sqlite3_bind_null(statement_, index));
    return *this;
}

bool Query::step(const std::string& what) {
    int rc = 0;
    {
        const AsWriter as(writer_);
        rc = sqlite3_step(statement_);
    }
    if (rc == SQLITE_ROW)
        return true;
    if (rc == SQLITE_DONE)
        return false;
    fail_sqlite(db_, rc, db_path_, what);
}

void Query::run(const std::string& what) {
    while (step(what)) {
    }
}

bool Query::is_null(int column) const {
    return sqlite3_column_type(statement_, column) == SQLITE_NULL;
}

std::int64_t Query::integer(int column) const {
    return sqlite3_column_int64(statement_, column);
}

std::uint64_t Query::unsigned_integer(int column) const {
    return static_cast<std::uint64_t>(integer(column));
}

std::string Query::text(int column) const {
    const auto* data = sqlite3_column_text(statement_, column);
    const int size = sqlite3_column_bytes(statement_, column);
    return data == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(data), size);
}

void Query::check(int rc) {
    if (rc != SQLITE_OK)
        fail_sqlite(db_, rc, db_path_, "binding a value failed");
}

// ---- Database -------------------------------------------------------------------------------

void Database::Closer::operator()(sqlite3* db) const {
    const AsWriter as(writer != nullptr ? *writer : std::optional<ForeignWriter>());
    sqlite3_close_v2(db);
}

void Database::Finalizer::operator()(sqlite3_stmt* statement) const {
    sqlite3_finalize(statement);
}

namespace {

// What a connection runs of the SQL a database file brings, and how much it lets any statement
// take: nothing and little (bbkit(7), SECURITY, where each of SQLite's "defense against the dark
// arts" items is answered). bbkit's own statements need none of what is turned off here; the
// schema check (store_schema) refuses any object bbkit did not create before a statement runs.
void run_no_sql_of_the_file(sqlite3* db, const std::string& path) {
    const std::pair<int, int> settings[] = {
        {SQLITE_DBCONFIG_DEFENSIVE, 1},       // no writable_schema, no corrupting pragmas
        {SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0},  // the schema's functions: innocuous ones only
        {SQLITE_DBCONFIG_ENABLE_TRIGGER, 0},  // no trigger fires
        {SQLITE_DBCONFIG_ENABLE_VIEW, 0},     // no view is read
        {SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0},
        {SQLITE_DBCONFIG_DQS_DDL, 0},  // a double-quoted word is a name, never a string
        {SQLITE_DBCONFIG_DQS_DML, 0},
    };
    for (const auto& [option, value] : settings) {
        int now = -1;
        if (sqlite3_db_config(db, option, value, &now) != SQLITE_OK || now != value)
            throw Error(ExitCode::software, "setting SQLite's defences on " + path +
                                                " failed (option " + std::to_string(option) + ")");
    }
    // Far above what bbkit's statements and schema use, far below SQLite's defaults.
    const std::pair<int, int> limits[] = {
        {SQLITE_LIMIT_SQL_LENGTH, 100000},  {SQLITE_LIMIT_COLUMN, 100},
        {SQLITE_LIMIT_EXPR_DEPTH, 50},      {SQLITE_LIMIT_COMPOUND_SELECT, 3},
        {SQLITE_LIMIT_VDBE_OP, 25000},      {SQLITE_LIMIT_FUNCTION_ARG, 8},
        {SQLITE_LIMIT_ATTACHED, 0},         {SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 50},
        {SQLITE_LIMIT_VARIABLE_NUMBER, 64}, {SQLITE_LIMIT_TRIGGER_DEPTH, 1},
        {SQLITE_LIMIT_WORKER_THREADS, 0},
    };
    for (const auto& [limit, value] : limits)
        sqlite3_limit(db, limit, value);
}

}  // namespace

Database::Database(std::string path, std::optional<ForeignWriter> writer, Journal journal,
                   bool read_only)
    : path_(std::move(path)), journal_(journal) {
    // Only a rollback journal can be read without writing: a WAL reader writes its index.
    read_only = read_only && journal == Journal::rollback;
    *writer_ = writer;
    const AsWriter as(*writer_);
    if (writer && !Fd(::open(path_.c_str(), O_PATH | O_CLOEXEC | O_NOFOLLOW)) && errno == EACCES)
        throw Error(ExitCode::config,
                    "cannot reach " + path_ + " as uid " + std::to_string(writer->uid) +
                        ", the account that owns it, as root opens it: every directory above it "
                        "must be searchable by that account (bbkit(7), SECURITY)");
    sqlite3* raw = nullptr;
    sqlite3_vfs* vfs = bbkit_vfs();
    const int rc = sqlite3_open_v2(path_.c_str(), &raw,
                                   (read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE) |
                                       SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW,
                                   vfs != nullptr ? vfs->zName : nullptr);
    db_.reset(raw);
    if (rc != SQLITE_OK)
        fail_sqlite(raw, rc, path_, "opening the state database failed");
    sqlite3_extended_result_codes(raw, 0);
    run_no_sql_of_the_file(raw, path_);
    // The WAL stays between processes: a checkpoint at every close would cost each process two
    // syncs, and deleting the WAL one more to create it again (with a directory sync). Commits
    // checkpoint instead, every wal_checkpoint_pages pages. Committed transactions are in the
    // WAL, synced (synchronous=FULL): state.db alone is not a backup (use sqlite3 .backup).
    sqlite3_db_config(raw, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
    // Writers are serialized by the flock; the busy timeout only covers SQLite's own short
    // locks (checkpoints, WAL recovery after a crash) and, with a rollback journal, a commit
    // waiting for readers' snapshots to end and a reader waiting for a commit to end.
    sqlite3_busy_timeout(raw, 5000);
    // Through the C API where one exists: a PRAGMA is compiled and run like any statement.
    int enabled = 0;
    sqlite3_db_config(raw, SQLITE_DBCONFIG_ENABLE_FKEY, 1, &enabled);
    if (enabled != 1)
        throw Error(ExitCode::software, "enabling foreign keys on " + path_ + " failed");
    if (journal_ == Journal::rollback) {
        open_rollback_journal(read_only);
        return;
    }
    if (sqlite3_wal_autocheckpoint(raw, wal_checkpoint_pages) != SQLITE_OK)
        fail_sqlite(raw, SQLITE_ERROR, path_, "setting wal_autocheckpoint failed");
    // cell_size_check: a b-tree page's cells are checked before they are used. A file another
    // account writes is read with read() only: SQLite's advice for a file it cannot trust is
    // no memory-mapped I/O, which the owner could change under the mapping.
    exec(
        "PRAGMA synchronous = FULL; PRAGMA journal_size_limit = " + std::to_string(wal_size_limit) +
            "; PRAGMA cell_size_check = ON" + (writer ? "; PRAGMA mmap_size = 0" : ""),
        "setting synchronous=FULL, journal_size_limit and cell_size_check failed");
}

// The settings of Journal::rollback (sqlite.hpp; bbkit(7), STATE DIRECTORY). No mapping: another
// host's writes reach this one's page cache only through read(), which the NFS client
// revalidates when SQLite takes its lock; a mapping may keep stale pages. synchronous=FULL: the
// journal is synced before state.db is written and again once emptied, the commit point (EXTRA
// adds only a directory sync after deleting a journal, which TRUNCATE never does).
// journal_mode is the connection's, not the file's (unlike WAL): set at every open, where it
// also converts a file left in WAL mode. A reader's connection (read-only: it rolls no journal
// back, converts nothing, writes nothing) only checks that the file is not in WAL mode.
void Database::open_rollback_journal(bool read_only) {
    exec("PRAGMA mmap_size = 0; PRAGMA synchronous = FULL; PRAGMA cell_size_check = ON",
         "setting mmap_size=0, synchronous=FULL and cell_size_check failed");
    std::string mode;
    {
        Query q = query(read_only ? "PRAGMA journal_mode" : "PRAGMA journal_mode = TRUNCATE");
        if (q.step())
            mode = q.text(0);
    }
    if (read_only) {
        if (mode == "wal")
            throw Error(ExitCode::config,
                        "state database " + path_ +
                            " is in WAL mode on a file system other hosts share: a writing "
                            "command (e.g. bb-pool recover) converts it (bbkit(7), STATE "
                            "DIRECTORY)");
        return;
    }
    if (mode != "truncate")
        throw Error(ExitCode::temp_fail,
                    "cannot switch " + path_ + " to a rollback journal (journal_mode is " + mode +
                        "): another process has it open (retry when no bbkit command runs on any "
                        "host)");
}

Database Database::in_memory() {
    Database db;
    db.path_ = ":memory:";
    sqlite3* raw = nullptr;
    bbkit_vfs();  // SQLite's process settings first
    const int rc =
        sqlite3_open_v2(":memory:", &raw,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
    db.db_.reset(raw);
    if (rc != SQLITE_OK)
        fail_sqlite(raw, rc, db.path_, "opening a database in memory failed");
    sqlite3_extended_result_codes(raw, 0);
    run_no_sql_of_the_file(raw, db.path_);
    return db;
}

Database::Database(Database&&) noexcept = default;

// Not defaulted: member-wise, the old writer box would go before the old connection that
// closes under it. Statements first, then the connection under its writer, then the rest.
Database& Database::operator=(Database&& other) noexcept {
    if (this == &other)
        return *this;
    statements_.clear();
    db_.reset();
    path_ = std::move(other.path_);
    journal_ = other.journal_;
    writer_ = std::move(other.writer_);  // the box the moved Closer points to comes along
    db_ = std::move(other.db_);
    statements_ = std::move(other.statements_);
    in_transaction_ = std::exchange(other.in_transaction_, false);
    return *this;
}
Database::~Database() = default;

Query Database::query(const std::string& sql) {
    auto found = statements_.find(sql);
    if (found == statements_.end()) {
        const AsWriter as(*writer_);
        sqlite3_stmt* raw = nullptr;
        const int rc = sqlite3_prepare_v3(db_.get(), sql.c_str(), static_cast<int>(sql.size()),
                                          SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
        std::unique_ptr<sqlite3_stmt, Finalizer> statement(raw);
        if (rc != SQLITE_OK)
            fail_sqlite(db_.get(), rc, path_, "preparing a query failed");
        found = statements_.emplace(sql, std::move(statement)).first;
    }
    return Query(db_.get(), found->second.get(), path_, *writer_);
}

void Database::exec(const std::string& sql, const std::string& what) {
    int rc = 0;
    {
        const AsWriter as(*writer_);
        rc = sqlite3_exec(db_.get(), sql.c_str(), nullptr, nullptr, nullptr);
    }
    if (rc != SQLITE_OK)
        fail_sqlite(db_.get(), rc, path_, what);
}

void Database::begin(bool write) {
    if (in_transaction_)
        throw Error(ExitCode::software,
                    "a transaction on " + path_ + " is already open (one at a time)");
    query(write ? "BEGIN IMMEDIATE" : "BEGIN").run();
    in_transaction_ = true;
}

void Database::commit(const std::string& what) {
    query("COMMIT").run(what);
    in_transaction_ = false;
}

void Database::rollback() noexcept {
    if (!in_transaction_)
        return;
    in_transaction_ = false;
    const AsWriter as(*writer_);
    sqlite3_exec(db_.get(), "ROLLBACK", nullptr, nullptr, nullptr);
}

int Database::changes() const {
    return sqlite3_changes(db_.get());
}

std::int64_t Database::last_insert_rowid() const {
    return sqlite3_last_insert_rowid(db_.get());
}

}  // namespace bbkit::sqlite
