// The thin layer between bbkit and SQLite: one connection with its prepared statements cached
// for its whole life, one use of a statement at a time, and SQLite's result codes turned into
// bbkit's errors. Every connection goes through the "bbkit" VFS and the settings state.db relies
// on (WAL kept between processes on a local disk, a rollback journal on a network file system,
// synchronous=FULL, foreign keys): bbkit(7), STATE DIRECTORY.
// Every connection also runs no SQL that the file brings (bbkit(7), SECURITY): no trigger
// fires, no view is expanded, no function of the schema runs unless innocuous, no extension
// loads, and SQLite's defensive mode and lowered limits are on. A connection must not cross a
// fork().
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

struct sqlite3;
struct sqlite3_stmt;

namespace bbkit::sqlite {

// The account that can write a database file, when that is not this process (root's
// connection to a state.db whose owner is not root): the connection maps none of the file,
// and every SQLite call that may open, create, read or write one of its files runs under that
// account's file-system identity (setfsuid and setfsgid, in the calling thread only), so that a
// link the account planted in its directory to a file elsewhere (the WAL, the -shm file SQLite
// opens by name) reaches only what the account itself could (bbkit(7), SECURITY).
struct ForeignWriter {
    uid_t uid;
    gid_t gid;
};

// How a connection journals its transactions (bbkit(7), STATE DIRECTORY). wal: the WAL, kept
// between processes and checkpointed every few dozen transactions, state.db read through mmap;
// for a local disk, where every process sharing the file shares one host's memory (the WAL's
// index is a shared mapping). rollback: journal_mode=TRUNCATE (the journal stays, emptied and
// synced at each commit: no file created, removed or directory synced per transaction), no
// memory-mapped I/O; for a file system other hosts share, where only the file's locks and its
// synced contents cross hosts. Readers then hold a shared lock for their snapshot, which a
// commit waits for.
enum class Journal { wal, rollback };

// What state.db's header says (bytes 18 and 19, SQLite's file format): true when the file is in
// WAL mode, false for a rollback journal, nullopt for a file with no header yet (just created,
// empty) or none at all. Read under `writer`'s identity, without following a symlink; nothing
// of SQLite runs, so a WAL file's shared memory is not touched.
std::optional<bool> wal_header(const std::string& path, const std::optional<ForeignWriter>& writer);

// One use of a cached prepared statement: binds, steps, and resets it (bindings cleared) when
// it goes out of scope. A failure is an Error whose code follows SQLite's result: a corrupt file
// is config, busy temp_fail, a full or failing disk io, a refused open no_perm, a constraint
// exists, anything else software.
class Query {
  public:
    Query(sqlite3* db, sqlite3_stmt* statement, const std::string& db_path,
          const std::optional<ForeignWriter>& writer)
        : db_(db), statement_(statement), db_path_(db_path), writer_(writer) {}
    Query(const Query&) = delete;
    Query& operator=(const Query&) = delete;
    ~Query();

    Query& bind(int index, std::int64_t value);
    Query& bind(int index, std::uint64_t value);  // stored as its two's-complement int64
    Query& bind(int index, const std::string& value);
    Query& bind_null(int index);
    template <typename T>
    Query& bind(int index, const std::optional<T>& value) {
        return value ? bind(index, *value) : bind_null(index);
    }

    // True while there is a row to read; `what` begins the message of a failure.
    bool step(const std::string& what = "query failed");
    void run(const std::string& what = "query failed");  // steps to the end

    bool is_null(int column) const;
    std::int64_t integer(int column) const;
    std::uint64_t unsigned_integer(int column) const;
    std::string text(int column) const;  // "" for NULL

  private:
    void check(int rc);

    sqlite3* db_;
    sqlite3_stmt* statement_;
    const std::string& db_path_;
    const std::optional<ForeignWriter>& writer_;
};

// A connection to an existing database file, read-write. One transaction at a time.
class Database {
  public:
    Database() = default;  // not open: only to be assigned an open one
    // Opens `path`, which must exist (else Error(no_perm)): SQLite never creates it, so its owner
    // and mode stay whoever created it chose. With Journal::rollback a file in WAL mode is
    // converted (SQLite checkpoints and removes the WAL, which needs every other connection
    // closed: else Error(temp_fail)); the caller decides whether that may happen (StateStore:
    // only a writer, under the state lock).
    // With `read_only` and Journal::rollback the connection is SQLite's read-only one: it
    // converts nothing and rolls no journal back (a hot journal is Error(temp_fail)).
    explicit Database(std::string path, std::optional<ForeignWriter> writer = std::nullopt,
                      Journal journal = Journal::wal, bool read_only = false);
    // A private database in memory, with the same settings (store_schema builds the schema
    // bbkit expects in one).
    static Database in_memory();
    Database(Database&&) noexcept;
    Database& operator=(Database&&) noexcept;
    ~Database();

    const std::string& path() const { return path_; }
    Journal journal() const { return journal_; }

    // The statement for `sql`, compiled at its first use and kept until the connection closes.
    Query query(const std::string& sql);
    // Runs `sql` (any number of statements) once, uncached; `what` begins the message of a failure.
    void exec(const std::string& sql, const std::string& what);

    // BEGIN IMMEDIATE (write: takes SQLite's write lock now) or BEGIN (a deferred read).
    // Error(software) when a transaction is already open.
    void begin(bool write);
    // A failure leaves the transaction open: rollback() it.
    void commit(const std::string& what = "query failed");
    // Rolls back the open transaction, if any. Never throws: destructors call it.
    void rollback() noexcept;
    bool in_transaction() const { return in_transaction_; }

    int changes() const;  // rows the last INSERT, UPDATE or DELETE changed
    std::int64_t last_insert_rowid() const;

  private:
    void open_rollback_journal(bool read_only);

    struct Closer {
        const std::optional<ForeignWriter>* writer = nullptr;
        void operator()(sqlite3* db) const;
    };
    struct Finalizer {
        void operator()(sqlite3_stmt* statement) const;
    };

    std::string path_;
    Journal journal_ = Journal::wal;
    // Before db_: the connection closes under the writer's identity. Boxed, so that a moved
    // Database's queries still find it.
    std::unique_ptr<std::optional<ForeignWriter>> writer_ =
        std::make_unique<std::optional<ForeignWriter>>();
    std::unique_ptr<sqlite3, Closer> db_{nullptr, Closer{writer_.get()}};
    // After db_: finalized before the connection closes.
    std::unordered_map<std::string, std::unique_ptr<sqlite3_stmt, Finalizer>> statements_;
    bool in_transaction_ = false;
};

}  // namespace bbkit::sqlite
