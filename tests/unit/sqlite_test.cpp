#include "bbkit/sqlite.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>

#include "bbkit/error.hpp"
#include "bbkit/user.hpp"
#include "code_of.hpp"
#include "job_user.hpp"

namespace bbkit::sqlite {
namespace {

class SqliteTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char pattern[] = "/tmp/bbkit-sqlite-XXXXXX";
        ASSERT_NE(mkdtemp(pattern), nullptr);
        root_ = pattern;
        path_ = root_ + "/test.db";
    }
    void TearDown() override { std::system(("rm -rf '" + root_ + "'").c_str()); }

    // Database never creates its file: whoever does chooses its owner and mode.
    Database create() {
        const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        EXPECT_GE(fd, 0);
        ::close(fd);
        Database db(path_);
        db.exec("CREATE TABLE t (a INTEGER, b INTEGER, c TEXT, d INTEGER)", "creating t");
        return db;
    }

    // The test's directory and database handed to a state owner's account (nobody as root;
    // else the caller, the only account it can hand them to): what a connection with a
    // ForeignWriter opens as that account.
    std::optional<ForeignWriter> state_owner() {
        const User user = unit::job_user();
        EXPECT_EQ(::chmod(root_.c_str(), 0755), 0);
        EXPECT_EQ(::chown(root_.c_str(), user.uid, user.gid), 0);
        for (const char* suffix : {"", "-wal", "-shm"})
            ::chown((path_ + suffix).c_str(), user.uid, user.gid);
        return ForeignWriter{user.uid, user.gid};
    }

    static std::int64_t count(Database& db, const std::string& table = "t") {
        Query q = db.query("SELECT COUNT(*) FROM " + table);
        EXPECT_TRUE(q.step());
        return q.integer(0);
    }

    std::string root_;
    std::string path_;
};

TEST_F(SqliteTest, binds_and_reads_back_integers_text_and_null) {
    Database db = create();
    const std::string with_nul("a\0b", 3);
    constexpr std::uint64_t huge = std::numeric_limits<std::uint64_t>::max() - 1;
    db.query("INSERT INTO t (a, b, c, d) VALUES (?1, ?2, ?3, ?4)")
        .bind(1, std::int64_t{-5})
        .bind(2, huge)
        .bind(3, with_nul)
        .bind(4, std::optional<std::string>())
        .run();
    Query q = db.query("SELECT a, b, c, d FROM t");
    ASSERT_TRUE(q.step());
    EXPECT_EQ(q.integer(0), -5);
    EXPECT_EQ(q.unsigned_integer(1), huge);  // above INT64_MAX: kept as its bit pattern
    EXPECT_EQ(q.text(2), with_nul);
    EXPECT_FALSE(q.is_null(2));
    EXPECT_TRUE(q.is_null(3));
    EXPECT_EQ(q.text(3), "");
    EXPECT_FALSE(q.step());
}

TEST_F(SqliteTest, step_is_true_once_per_row_then_false) {
    Database db = create();
    for (std::int64_t i = 1; i <= 3; ++i)
        db.query("INSERT INTO t (a) VALUES (?1)").bind(1, i).run();
    Query q = db.query("SELECT a FROM t ORDER BY a");
    std::int64_t expected = 1;
    while (q.step())
        EXPECT_EQ(q.integer(0), expected++);
    EXPECT_EQ(expected, 4);
}

// A cached statement is reused: a use left half-read starts from the first row again, and a
// parameter bound by an earlier use is NULL unless bound again.
TEST_F(SqliteTest, each_use_of_a_statement_starts_reset_with_no_bindings) {
    Database db = create();
    const std::string insert = "INSERT INTO t (a) VALUES (?1)";
    db.query(insert).bind(1, std::int64_t{7}).run();
    db.query(insert).run();
    {
        Query q = db.query("SELECT a FROM t ORDER BY rowid");
        ASSERT_TRUE(q.step());
        EXPECT_EQ(q.integer(0), 7);
    }
    Query q = db.query("SELECT a FROM t ORDER BY rowid");
    ASSERT_TRUE(q.step());
    EXPECT_EQ(q.integer(0), 7);
    ASSERT_TRUE(q.step());
    EXPECT_TRUE(q.is_null(0));
}

TEST_F(SqliteTest, committed_rows_reach_the_next_connection) {
    {
        Database db = create();
        db.begin(true);
        EXPECT_TRUE(db.in_transaction());
        db.query("INSERT INTO t (a) VALUES (1)").run();
        db.commit();
        EXPECT_FALSE(db.in_transaction());
    }
    Database again(path_);
    EXPECT_EQ(count(again), 1);
}

TEST_F(SqliteTest, rollback_undoes_the_open_transaction_and_is_a_no_op_without_one) {
    Database db = create();
    db.rollback();
    db.begin(true);
    db.query("INSERT INTO t (a) VALUES (1)").run();
    db.rollback();
    EXPECT_FALSE(db.in_transaction());
    EXPECT_EQ(count(db), 0);
    db.rollback();
    db.begin(false);  // a new transaction may start
    db.rollback();
}

// What the store does when a statement throws inside a transaction: the failure leaves the
// transaction open, and rolling it back undoes the statements before it too.
TEST_F(SqliteTest, a_failed_statement_leaves_the_transaction_open_for_rollback) {
    Database db = create();
    db.exec("CREATE TABLE u (id INTEGER PRIMARY KEY)", "creating u");
    db.begin(true);
    try {
        db.query("INSERT INTO t (a) VALUES (1)").run();
        db.query("INSERT INTO u (id) VALUES (1)").run();
        db.query("INSERT INTO u (id) VALUES (1)").run();
        FAIL() << "a duplicate key was inserted";
    } catch (const Error& error) {
        EXPECT_EQ(error.code(), ExitCode::exists);
        EXPECT_TRUE(db.in_transaction());
        db.rollback();
    }
    EXPECT_EQ(count(db), 0);
    EXPECT_EQ(count(db, "u"), 0);
}

TEST_F(SqliteTest, one_transaction_at_a_time) {
    Database db = create();
    db.begin(false);
    std::string message;
    EXPECT_EQ(code_of([&] { db.begin(true); }, &message), ExitCode::software);
    EXPECT_EQ(message, "a transaction on " + path_ + " is already open (one at a time)");
    EXPECT_TRUE(db.in_transaction());
}

TEST_F(SqliteTest, a_failed_commit_names_the_step_and_leaves_the_transaction_open) {
    Database db = create();
    db.exec(
        "CREATE TABLE parent (id INTEGER PRIMARY KEY);"
        " CREATE TABLE child (parent INTEGER REFERENCES parent(id)"
        " DEFERRABLE INITIALLY DEFERRED)",
        "creating the tables");
    db.begin(true);
    db.query("INSERT INTO child (parent) VALUES (9)").run();  // checked at COMMIT
    std::string message;
    EXPECT_EQ(code_of([&] { db.commit("committing the test"); }, &message), ExitCode::exists);
    EXPECT_EQ(message.rfind("committing the test in " + path_ + ": ", 0), 0u) << message;
    EXPECT_TRUE(db.in_transaction());
    db.rollback();
    EXPECT_EQ(count(db, "child"), 0);
}

TEST_F(SqliteTest, foreign_keys_are_enforced) {
    Database db = create();
    db.exec(
        "CREATE TABLE parent (id INTEGER PRIMARY KEY);"
        " CREATE TABLE child (parent INTEGER REFERENCES parent(id))",
        "creating the tables");
    EXPECT_EQ(code_of([&] { db.query("INSERT INTO child (parent) VALUES (9)").run(); }),
              ExitCode::exists);
}

TEST_F(SqliteTest, commits_sync_fully) {
    Database db = create();
    Query q = db.query("PRAGMA synchronous");
    ASSERT_TRUE(q.step());
    EXPECT_EQ(q.integer(0), 2);  // FULL
}

TEST_F(SqliteTest, counts_changes_and_the_last_inserted_row) {
    Database db = create();
    db.query("INSERT INTO t (a) VALUES (1)").run();
    db.query("INSERT INTO t (a) VALUES (1)").run();
    EXPECT_EQ(db.last_insert_rowid(), 2);
    db.query("UPDATE t SET b = 5 WHERE a = 1").run();
    EXPECT_EQ(db.changes(), 2);
    db.query("UPDATE t SET b = 5 WHERE a = 2").run();
    EXPECT_EQ(db.changes(), 0);
}

TEST_F(SqliteTest, bad_sql_is_an_internal_error_naming_the_step_and_the_file) {
    Database db = create();
    std::string message;
    EXPECT_EQ(code_of([&] { db.query("SELEKT 1"); }, &message), ExitCode::software);
    EXPECT_EQ(message.rfind("preparing a query failed in " + path_ + ": ", 0), 0u) << message;
    EXPECT_EQ(code_of([&] { db.exec("CREATE TABLE t (a)", "creating t again"); }, &message),
              ExitCode::software);
    EXPECT_EQ(message.rfind("creating t again in " + path_ + ": ", 0), 0u) << message;
    EXPECT_NE(message.find("already exists"), std::string::npos) << message;
}

TEST_F(SqliteTest, a_missing_file_is_not_created) {
    std::string message;
    EXPECT_EQ(code_of([&] { Database db(path_); }, &message), ExitCode::no_perm);
    EXPECT_NE(message.find("check the state directory's owner and mode"), std::string::npos)
        << message;
    struct stat st {};
    EXPECT_NE(::lstat(path_.c_str(), &st), 0);
}

TEST_F(SqliteTest, a_file_that_is_not_sqlite_is_a_config_error) {
    {
        std::ofstream garbage(path_);
        for (int i = 0; i < 2000; ++i)
            garbage << "this is not a database " << i << "\n";
    }
    std::string message;
    EXPECT_EQ(code_of(
                  [&] {
                      Database db(path_);
                      db.query("PRAGMA user_version").step();
                  },
                  &message),
              ExitCode::config);
    EXPECT_NE(message.find("state database " + path_ + " is unreadable: "), std::string::npos)
        << message;
    EXPECT_NE(message.find("backup"), std::string::npos) << message;
}

// The "bbkit" VFS opens an existing WAL without creating it and still creates a missing one; the
// WAL outlives the connection (no checkpoint at close) and the next one reads its commits.
TEST_F(SqliteTest, the_wal_is_created_once_and_read_by_the_next_connection) {
    {
        Database db = create();
        EXPECT_NE(sqlite3_vfs_find("bbkit"), nullptr);
        Query q = db.query("PRAGMA journal_mode=WAL");
        ASSERT_TRUE(q.step());
        EXPECT_EQ(q.text(0), "wal");
    }
    {
        Database db(path_);
        db.query("INSERT INTO t (a) VALUES (1)").run();
    }
    struct stat st {};
    ASSERT_EQ(::stat((path_ + "-wal").c_str(), &st), 0);
    EXPECT_GT(st.st_size, 0);
    Database db(path_);
    db.query("INSERT INTO t (a) VALUES (2)").run();
    EXPECT_EQ(count(db), 2);
}

// A rollback journal (a network file system: bbkit(7), STATE DIRECTORY): journal_mode=TRUNCATE,
// no mapping, every commit synced; the journal stays between transactions, emptied, and no WAL
// is made.
TEST_F(SqliteTest, a_rollback_connection_truncates_its_journal_maps_nothing_and_syncs_fully) {
    create();
    Database db(path_, std::nullopt, Journal::rollback);
    EXPECT_EQ(db.journal(), Journal::rollback);
    const std::pair<const char*, std::string> settings[] = {{"PRAGMA journal_mode", "truncate"},
                                                            {"PRAGMA mmap_size", "0"},
                                                            {"PRAGMA synchronous", "2"}};
    for (const auto& [pragma, expected] : settings) {
        Query q = db.query(pragma);
        ASSERT_TRUE(q.step());
        EXPECT_EQ(q.text(0), expected) << pragma;
    }
    db.begin(true);
    db.query("INSERT INTO t (a) VALUES (1)").run();
    db.commit();
    struct stat st {};
    ASSERT_EQ(::stat((path_ + "-journal").c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 0);
    EXPECT_NE(::stat((path_ + "-wal").c_str(), &st), 0);
    EXPECT_EQ(wal_header(path_, std::nullopt), std::optional<bool>(false));
}

// A file left in WAL mode is converted by a rollback connection (its WAL checkpointed into the
// file and removed), unless another connection has it open: then temp_fail, nothing changed.
TEST_F(SqliteTest, a_rollback_connection_converts_a_wal_file_only_when_alone) {
    {
        Database db = create();
        db.exec("PRAGMA journal_mode = WAL", "WAL");
        db.query("INSERT INTO t (a) VALUES (1)").run();
    }
    EXPECT_EQ(wal_header(path_, std::nullopt), std::optional<bool>(true));
    {
        Database reader(path_);
        reader.begin(false);
        EXPECT_EQ(count(reader), 1);
        EXPECT_EQ(code_of([&] { Database(path_, std::nullopt, Journal::rollback); }),
                  ExitCode::temp_fail);
        reader.rollback();
    }
    EXPECT_EQ(wal_header(path_, std::nullopt), std::optional<bool>(true));
    Database db(path_, std::nullopt, Journal::rollback);
    EXPECT_EQ(count(db), 1);
    EXPECT_EQ(wal_header(path_, std::nullopt), std::optional<bool>(false));
    struct stat st {};
    EXPECT_NE(::stat((path_ + "-wal").c_str(), &st), 0);
}

// The journal is the owner's file as much as the WAL is (bbkit(7), SECURITY): one that is a
// symlink or a second link is not opened.
TEST_F(SqliteTest, a_planted_journal_is_not_opened) {
    create();
    const std::string elsewhere = root_ + "/elsewhere";
    { std::ofstream(elsewhere) << ""; }
    const auto write_one = [&] {
        Database db(path_, std::nullopt, Journal::rollback);
        db.begin(true);
        db.query("INSERT INTO t (a) VALUES (1)").run();
        db.commit();
    };
    ASSERT_EQ(::symlink(elsewhere.c_str(), (path_ + "-journal").c_str()), 0);
    EXPECT_EQ(code_of(write_one), ExitCode::no_perm);
    ::unlink((path_ + "-journal").c_str());
    ASSERT_EQ(::link(elsewhere.c_str(), (path_ + "-journal").c_str()), 0);
    EXPECT_EQ(code_of(write_one), ExitCode::no_perm);
}

// Whatever SQL the file brings runs in no connection of bbkit's (bbkit(7), SECURITY): a trigger
// another account added does not fire, a view is not read, the schema cannot be written, and
// no extension loads.
TEST_F(SqliteTest, runs_no_trigger_view_or_extension_the_file_brings) {
    create();
    {
        sqlite3* raw = nullptr;
        ASSERT_EQ(sqlite3_open(path_.c_str(), &raw), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(raw,
                               "CREATE TABLE log (x); CREATE VIEW v AS SELECT * FROM t;"
                               " CREATE TRIGGER fired AFTER INSERT ON t"
                               " BEGIN INSERT INTO log VALUES (NEW.a); END;",
                               nullptr, nullptr, nullptr),
                  SQLITE_OK);
        sqlite3_close(raw);
    }
    for (const std::optional<ForeignWriter> writer :
         {std::optional<ForeignWriter>(), state_owner()}) {
        Database db(path_, writer);
        db.query("INSERT INTO t (a) VALUES (1)").run();
        EXPECT_EQ(count(db, "log"), 0);  // the trigger did not fire
        EXPECT_EQ(code_of([&] { db.query("SELECT * FROM v").step(); }), ExitCode::software);
        EXPECT_EQ(code_of([&] {
                      db.exec("PRAGMA writable_schema = ON; UPDATE sqlite_schema SET sql = ''",
                              "writing the schema");
                  }),
                  ExitCode::software);
        EXPECT_EQ(code_of([&] { db.query("SELECT load_extension('x')").step(); }),
                  ExitCode::software);
    }
}

// A file another account can write is read with read() only: nothing it changes under a
// mapping reaches SQLite unchecked.
TEST_F(SqliteTest, a_foreign_file_is_not_memory_mapped) {
    create();
    Database own(path_);
    Query mapped = own.query("PRAGMA mmap_size");
    ASSERT_TRUE(mapped.step());
    EXPECT_GT(mapped.integer(0), 0);
    Database foreign(path_, state_owner());
    Query unmapped = foreign.query("PRAGMA mmap_size");
    ASSERT_TRUE(unmapped.step());
    EXPECT_EQ(unmapped.integer(0), 0);
}

// A connection with a ForeignWriter opens the files SQLite finds beside the database as that
// account: a -shm file hard-linked to root's file (where fs.protected_hardlinks is 0, or
// through a race with a check) is refused, and root's file keeps its owner, size and bytes.
TEST_F(SqliteTest, a_foreign_writers_link_to_a_file_it_cannot_write_is_not_written_through) {
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root";
    {
        Database db = create();
        db.exec("PRAGMA journal_mode = WAL", "WAL");
    }
    const std::optional<ForeignWriter> writer = state_owner();
    const std::string precious = root_ + "/precious";
    { std::ofstream(precious) << "root's"; }
    ASSERT_EQ(::chmod(precious.c_str(), 0600), 0);
    ::unlink((path_ + "-shm").c_str());
    ASSERT_EQ(::link(precious.c_str(), (path_ + "-shm").c_str()), 0);
    EXPECT_NE(code_of([&] {
                  Database db(path_, writer);
                  db.query("SELECT COUNT(*) FROM t").step();
              }),
              ExitCode::ok);
    struct stat st {};
    ASSERT_EQ(::stat(precious.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 0u);
    EXPECT_EQ(st.st_size, 6);
    std::ifstream in(precious);
    std::string content;
    std::getline(in, content);
    EXPECT_EQ(content, "root's");
}

// Assigning an open connection over another closes the old one first, under the old one's
// writer (still there when it closes: under ASan a use after free otherwise), and the
// assigned one goes on working, with its own writer, from its new place.
TEST_F(SqliteTest, an_open_connection_assigned_over_another_closes_the_old_one_first) {
    create();
    const std::string other = root_ + "/other.db";
    {
        const int fd = ::open(other.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        ASSERT_GE(fd, 0);
        ::close(fd);
    }
    const std::optional<ForeignWriter> writer = state_owner();
    if (geteuid() == 0) {
        ASSERT_EQ(::chown(other.c_str(), writer->uid, writer->gid), 0);
    }
    const auto open_files = [](const std::string& path) {
        int n = 0;
        for (int fd = 0; fd < 1024; ++fd) {
            char link[64];
            char target[4096];
            std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
            const ssize_t size = ::readlink(link, target, sizeof target - 1);
            if (size > 0 && std::string(target, static_cast<std::size_t>(size)) == path)
                ++n;
        }
        return n;
    };
    Database db(path_, writer);
    EXPECT_EQ(count(db), 0);
    EXPECT_EQ(open_files(path_), 1);
    db = Database(other, writer);
    EXPECT_EQ(open_files(path_), 0);
    db.exec("CREATE TABLE u (a INTEGER)", "creating u");
    EXPECT_EQ(count(db, "u"), 0);
    db = Database(path_);
    EXPECT_EQ(open_files(other), 0);
    EXPECT_EQ(count(db), 0);
    Database moved = std::move(db);
    EXPECT_EQ(count(moved), 0);
}

}  // namespace
}  // namespace bbkit::sqlite
