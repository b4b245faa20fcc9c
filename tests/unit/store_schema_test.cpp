#include "bbkit/store_schema.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>

#include "bbkit/buffer.hpp"
#include "bbkit/error.hpp"
#include "bbkit/sqlite.hpp"
#include "code_of.hpp"

namespace bbkit {
namespace {

constexpr std::int64_t gib = 1024LL * 1024 * 1024;

class StoreSchemaTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char pattern[] = "/tmp/bbkit-schema-XXXXXX";
        ASSERT_NE(mkdtemp(pattern), nullptr);
        root_ = pattern;
        path_ = root_ + "/state.db";
        const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        ASSERT_GE(fd, 0);
        ::close(fd);
        db_ = sqlite::Database(path_);
    }
    void TearDown() override {
        db_ = sqlite::Database();
        std::system(("rm -rf '" + root_ + "'").c_str());
    }

    std::int64_t number(const std::string& sql) {
        sqlite::Query q = db_.query(sql);
        EXPECT_TRUE(q.step()) << sql;
        return q.integer(0);
    }
    std::string text(const std::string& sql) {
        sqlite::Query q = db_.query(sql);
        EXPECT_TRUE(q.step()) << sql;
        return q.text(0);
    }
    bool has(const std::string& name) {
        return number("SELECT COUNT(*) FROM sqlite_master WHERE name = '" + name + "'") == 1;
    }

    // Two pools and, in nvme, a buffer that holds space, one that no longer does (complete) and
    // a persistent one that holds space.
    void add_rows() {
        db_.exec(
            "INSERT INTO pools (name, path, uuid) VALUES ('nvme', '/bb/nvme', 'u1'),"
            " ('ssd', '/bb/ssd', 'u2');"
            "INSERT INTO buffers (key, cluster, job_id, incarnation, pool, requested_bytes,"
            " allocated_bytes, uid, gid, user, state, directory, created) VALUES"
            " ('main.1.1', 'main', 1, 1, 'nvme', 1, " +
                std::to_string(2 * gib) +
                ", 1000, 100, 'alice', 'running', 'job/main.1.1', 1),"
                " ('main.2.1', 'main', 2, 1, 'nvme', 1, " +
                std::to_string(7 * gib) +
                ", 1000, 100, 'alice', 'complete', 'job/main.2.1', 2);"
                "INSERT INTO buffers (key, cluster, name, pool, requested_bytes, allocated_bytes,"
                " uid, gid, user, state, directory, created) VALUES"
                " ('main.p', 'main', 'p', 'nvme', 1, " +
                std::to_string(3 * gib) +
                ", 1000, 100, 'alice', 'allocated', 'persistent/main.p', 3);",
            "adding rows");
    }

    std::string root_;
    std::string path_;
    sqlite::Database db_;
};

TEST_F(StoreSchemaTest, an_empty_file_gets_the_current_schema_in_wal_mode) {
    EXPECT_EQ(schema_version(db_), 0);
    migrate_schema(db_);
    EXPECT_EQ(schema_version(db_), state_schema_version());
    EXPECT_FALSE(db_.in_transaction());
    EXPECT_EQ(text("PRAGMA journal_mode"), "wal");
    for (const char* table : {"pools", "buffers", "queue", "history", "pool_usage"})
        EXPECT_TRUE(has(table)) << table;
    // pool_usage is kept by the store's own writes since schema 4, not by triggers.
    EXPECT_EQ(number("SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger'"), 0);
}

TEST_F(StoreSchemaTest, migrating_the_current_schema_changes_nothing) {
    migrate_schema(db_);
    add_rows();
    migrate_schema(db_);
    EXPECT_EQ(schema_version(db_), state_schema_version());
    EXPECT_EQ(number("SELECT COUNT(*) FROM buffers"), 3);
}

// A schema-1 file (no persistent-space index, no pool_usage) with rows in it: the migrations
// keep every row, add what the later schemas have and fill pool_usage from the rows.
TEST_F(StoreSchemaTest, migrating_from_schema_1_keeps_the_rows_and_records_the_version) {
    migrate_schema(db_);
    add_rows();
    db_.exec(
        "DROP INDEX buffers_held; DROP TABLE stage_runs; ALTER TABLE buffers DROP COLUMN "
        "held_since;"
        " ALTER TABLE buffers DROP COLUMN ended; "
        "DROP INDEX buffers_persistent; DROP TABLE pool_usage; ALTER TABLE buffers DROP "
        "COLUMN failure; ALTER TABLE buffers DROP COLUMN failed; ALTER TABLE buffers DROP COLUMN "
        "seal;"
        " ALTER TABLE buffers DROP COLUMN temp_token; DROP TABLE controller; PRAGMA user_version = "
        "1",
        "going back to schema 1");
    ASSERT_EQ(schema_version(db_), 1);
    migrate_schema(db_);
    EXPECT_EQ(schema_version(db_), state_schema_version());
    EXPECT_EQ(number("SELECT COUNT(*) FROM pools"), 2);
    EXPECT_EQ(number("SELECT COUNT(*) FROM buffers"), 3);
    EXPECT_EQ(text("SELECT state FROM buffers WHERE key = 'main.2.1'"), "complete");
    EXPECT_TRUE(has("buffers_persistent"));
    EXPECT_EQ(number("SELECT used FROM pool_usage WHERE pool = 'nvme'"), 5 * gib);
    EXPECT_EQ(number("SELECT used FROM pool_usage WHERE pool = 'ssd'"), 0);
    EXPECT_EQ(number("SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger'"), 0);
}

// Schema 5 adds each buffer's last failure: rows from before it have none.
TEST_F(StoreSchemaTest, migrating_from_schema_4_gives_existing_rows_no_failure) {
    migrate_schema(db_);
    add_rows();
    db_.exec(
        "DROP INDEX buffers_held; DROP TABLE stage_runs; ALTER TABLE buffers DROP COLUMN "
        "held_since;"
        " ALTER TABLE buffers DROP COLUMN ended; "
        "ALTER TABLE buffers DROP COLUMN failure; ALTER TABLE buffers DROP COLUMN failed; ALTER "
        "TABLE buffers DROP COLUMN seal;"
        " ALTER TABLE buffers DROP COLUMN temp_token;"
        " DROP TABLE controller; PRAGMA user_version = 4",
        "going back to schema 4");
    migrate_schema(db_);
    EXPECT_EQ(schema_version(db_), state_schema_version());
    EXPECT_EQ(number("SELECT COUNT(*) FROM buffers WHERE failure = '' AND failed IS NULL"), 3);
}

// Schema 8 adds the accounting's hold times, filled from each record's history: when it first
// became allocating at or after its creation, and for a final record when it reached its state
// (a record without that history: its creation time); live ones have not ended.
TEST_F(StoreSchemaTest, migrating_from_schema_7_fills_the_hold_times_from_the_history) {
    migrate_schema(db_);
    add_rows();
    db_.exec(
        "DROP INDEX buffers_held; DROP TABLE stage_runs; ALTER TABLE buffers DROP COLUMN "
        "held_since; ALTER TABLE buffers DROP COLUMN ended; PRAGMA user_version = 7;"
        // main.2.1: allocating at 5, complete at 9 (an older record of the same key's history
        // at 0 and 1 is before its creation, 2, and is not its own).
        "INSERT INTO history (key, from_state, to_state, time, who) VALUES"
        " ('main.2.1', NULL, 'allocating', 0, 't'), ('main.2.1', 'allocated', 'complete', 1, "
        "'t'), ('main.2.1', NULL, 'allocating', 5, 't'), ('main.2.1', 'teardown', "
        "'complete', 9, 't'), ('main.1.1', NULL, 'allocating', 4, 't');",
        "going back to schema 7");
    migrate_schema(db_);
    EXPECT_EQ(schema_version(db_), state_schema_version());
    EXPECT_EQ(number("SELECT held_since FROM buffers WHERE key = 'main.2.1'"), 5);
    EXPECT_EQ(number("SELECT ended FROM buffers WHERE key = 'main.2.1'"), 9);
    EXPECT_EQ(number("SELECT held_since FROM buffers WHERE key = 'main.1.1'"), 4);
    EXPECT_EQ(number("SELECT ended IS NULL FROM buffers WHERE key = 'main.1.1'"), 1);
    // No history at all: not known to have held, not ended.
    EXPECT_EQ(number("SELECT held_since IS NULL AND ended IS NULL FROM buffers WHERE key = "
                     "'main.p'"),
              1);
    EXPECT_TRUE(has("stage_runs"));
    EXPECT_TRUE(has("buffers_held"));
}

TEST_F(StoreSchemaTest, refuses_a_newer_schema) {
    migrate_schema(db_);
    db_.exec("PRAGMA user_version = " + std::to_string(state_schema_version() + 1),
             "setting a newer version");
    std::string message;
    EXPECT_EQ(code_of([&] { schema_version(db_); }, &message), ExitCode::config);
    EXPECT_EQ(message, "state.db has schema version " + std::to_string(state_schema_version() + 1) +
                           " but this bbkit knows only up to " +
                           std::to_string(state_schema_version()) + " (upgrade bbkit)");
}

// Migration 3 creates pool_usage: a schema-2 file that has one already fails there, and the
// steps before it in the same transaction are undone with it.
TEST_F(StoreSchemaTest, a_failed_migration_leaves_the_file_at_its_version) {
    migrate_schema(db_);
    add_rows();
    db_.exec("DROP INDEX buffers_persistent; PRAGMA user_version = 1", "going back to schema 1");
    std::string message;
    EXPECT_EQ(code_of([&] { migrate_schema(db_); }, &message), ExitCode::software);
    EXPECT_EQ(message.rfind("migrating to schema 3 failed in " + path_ + ": ", 0), 0u) << message;
    EXPECT_FALSE(db_.in_transaction());
    EXPECT_EQ(schema_version(db_), 1);
    EXPECT_FALSE(has("buffers_persistent"));  // schema 2's step, rolled back
    EXPECT_EQ(number("SELECT COUNT(*) FROM buffers"), 3);
}

TEST_F(StoreSchemaTest, holding_states_are_the_states_that_hold_space) {
    const std::string list = holding_states;
    for (int i = 0; i <= static_cast<int>(BufferState::deleted); ++i) {
        const auto state = static_cast<BufferState>(i);
        const bool listed =
            list.find(std::string("'") + to_string(state) + "'") != std::string::npos;
        EXPECT_EQ(listed, holds_space(state)) << to_string(state);
    }
}

// The constant the schema check compares a database's digest with is the digest of what the
// migrations build: a new migration fails here, printing the value to put in store_schema.cpp.
TEST_F(StoreSchemaTest, the_current_schema_digest_is_that_of_the_migrations) {
    migrate_schema(db_);
    EXPECT_EQ(schema_digest(db_), current_schema_digest);
    EXPECT_TRUE(foreign_schema(db_, state_schema_version()).empty());
}

// An older schema is checked against what its own migrations build, object by object.
TEST_F(StoreSchemaTest, each_version_is_checked_against_its_own_migrations) {
    db_.exec("CREATE TABLE x (y)", "a table of the owner's");
    const std::vector<std::string> found = foreign_schema(db_, 0);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0], "state.db holds a table 'x' that bbkit did not create");
    const std::vector<std::string> missing = foreign_schema(db_, 1);
    EXPECT_NE(std::find(missing.begin(), missing.end(), "state.db lacks bbkit's table 'buffers'"),
              missing.end());
    EXPECT_EQ(code_of([&] { check_schema(db_, 0); }), ExitCode::no_perm);
}

}  // namespace
}  // namespace bbkit
