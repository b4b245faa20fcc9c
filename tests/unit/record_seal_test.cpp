#include "bbkit/record_seal.hpp"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "bbkit/error.hpp"
#include "bbkit/store.hpp"
#include "bbkit/store_schema.hpp"
#include "bbkit/user.hpp"
#include "code_of.hpp"

namespace bbkit {
namespace {

class RecordSealTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "only root holds a record key";
        char pattern[] = "/tmp/bbkit-seal-XXXXXX";
        ASSERT_NE(mkdtemp(pattern), nullptr);
        root_ = pattern;
        ASSERT_EQ(chmod(root_.c_str(), 0755), 0);  // the state owner reaches its directory
        config_.state_dir = root_ + "/state";
        config_.record_key = root_ + "/record.key";
        config_.state_owner = "nobody";
    }
    void TearDown() override {
        if (!root_.empty())
            std::system(("rm -rf '" + root_ + "'").c_str());
    }

    void sql(const std::string& statement) {
        sqlite3* db = nullptr;
        ASSERT_EQ(sqlite3_open((config_.state_dir + "/state.db").c_str(), &db), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(db, statement.c_str(), nullptr, nullptr, nullptr), SQLITE_OK)
            << sqlite3_errmsg(db);
        sqlite3_close(db);
    }

    std::string db_path() const { return config_.state_dir + "/state.db"; }

    int user_version() {
        sqlite3* db = nullptr;
        sqlite3_open(db_path().c_str(), &db);
        sqlite3_stmt* q = nullptr;
        sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &q, nullptr);
        const int version = sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int(q, 0) : -1;
        sqlite3_finalize(q);
        sqlite3_close(db);
        return version;
    }

    // Job `job`'s record of 1 KiB of pool nvme for alice, written by root (and sealed).
    void insert_job(std::uint64_t job) {
        StateStore store(config_);
        WriteTransaction txn(store, "test");
        txn.put_pool({"nvme", "/bb/nvme", "uuid-1", false});
        Buffer b = Buffer::for_key(BufferKey::job("main", job, 1));
        b.state = BufferState::allocating;
        b.pool = "nvme";
        b.requested_bytes = b.allocated_bytes = 1024;
        b.uid = b.gid = 1000;
        b.user = "alice";
        txn.insert_buffer(b);
        txn.transition(b.key, BufferState::allocated);
        txn.commit();
    }

    std::string root_;
    Config config_;
};

TEST_F(RecordSealTest, root_makes_a_key_of_its_own_readable_by_nobody_else) {
    EXPECT_FALSE(RecordSeal::for_process(config_, false));
    const std::optional<RecordSeal> seal = RecordSeal::for_process(config_, true);
    ASSERT_TRUE(seal);
    struct stat st {};
    ASSERT_EQ(stat(config_.record_key.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 0u);
    EXPECT_EQ(st.st_mode & 07777, 0400u);
    EXPECT_EQ(st.st_size, 65);
    // The same key the next time: a seal made now matches then.
    const std::string s = seal->seal("row");
    EXPECT_TRUE(RecordSeal::for_process(config_, true)->matches("row", s));
    EXPECT_FALSE(seal->matches("row ", s));
}

TEST_F(RecordSealTest, a_key_others_may_read_is_refused) {
    ASSERT_TRUE(RecordSeal::for_process(config_, true));
    chmod(config_.record_key.c_str(), 0440);
    EXPECT_EQ(code_of([&] { RecordSeal::for_process(config_, true); }), ExitCode::config);
}

TEST_F(RecordSealTest, seals_are_checked_only_when_the_state_owner_is_not_root) {
    EXPECT_TRUE(untrusted_state_owner(config_));
    config_.state_owner = "root";
    EXPECT_FALSE(untrusted_state_owner(config_));
    config_.state_owner = "0";
    EXPECT_FALSE(untrusted_state_owner(config_));
}

TEST_F(RecordSealTest, the_store_refuses_a_changed_row_and_lists_it) {
    {
        StateStore store(config_);
        WriteTransaction txn(store, "test");
        txn.put_pool({"nvme", "/bb/nvme", "uuid-1", false});
        for (std::uint64_t job : {1, 2}) {
            Buffer b = Buffer::for_key(BufferKey::job("main", job, 1));
            b.pool = "nvme";
            b.requested_bytes = b.allocated_bytes = 1024;
            b.uid = b.gid = 1000;
            b.user = "alice";
            txn.insert_buffer(b);
        }
        txn.commit();
    }
    sql("UPDATE buffers SET uid = 0 WHERE job_id = 1");
    StateStore store(config_);
    ReadSnapshot snapshot(store);
    EXPECT_EQ(code_of([&] { snapshot.get_buffer(BufferKey::job("main", 1, 1)); }),
              ExitCode::no_perm);
    const std::vector<Buffer> listed = snapshot.list_buffers();
    ASSERT_EQ(listed.size(), 1u);
    EXPECT_EQ(listed[0].key.job_id, 2u);
    const std::vector<Buffer> forged = snapshot.forged_records();
    ASSERT_EQ(forged.size(), 1u);
    EXPECT_EQ(forged[0].key.job_id, 1u);
    EXPECT_EQ(snapshot.get_buffer(BufferKey::job("main", 2, 1)).uid, 1000u);
}

// Attack 2 of bbkit(7) SECURITY: the owner forges a row, drops the seal columns and sets an
// older version, so that root's "migration" would seal everything. Root's ledger remembers the
// state directory was sealed: refused, even to bb-pool migrate, and nothing is sealed.
TEST_F(RecordSealTest, a_schema_rewound_below_what_root_sealed_is_refused_never_migrated) {
    insert_job(1);
    sql("UPDATE buffers SET uid = 0 WHERE job_id = 1;"
        " ALTER TABLE buffers DROP COLUMN seal; ALTER TABLE buffers DROP COLUMN temp_token;"
        " DROP TABLE controller; DROP INDEX buffers_held; DROP TABLE stage_runs; ALTER TABLE "
        "buffers DROP COLUMN held_since; ALTER TABLE buffers DROP COLUMN ended; PRAGMA "
        "user_version = 5");
    for (const bool migrate : {false, true}) {
        StoreOptions options;
        options.migrate_unsealed = migrate;
        std::string message;
        EXPECT_EQ(code_of([&] { StateStore store(config_, options); }, &message),
                  ExitCode::no_perm);
        EXPECT_NE(message.find("state.db has schema version 5, older than the version " +
                               std::to_string(state_schema_version()) + " root sealed it at"),
                  std::string::npos)
            << message;
    }
    EXPECT_EQ(user_version(), 5);  // nothing migrated, nothing sealed
}

// A database of a bbkit from before seals, which root never sealed (no ledger line): only the
// explicit bb-pool migrate seals its rows.
TEST_F(RecordSealTest, a_database_from_before_seals_is_sealed_only_by_bb_pool_migrate) {
    insert_job(1);
    sql("ALTER TABLE buffers DROP COLUMN seal; ALTER TABLE buffers DROP COLUMN temp_token;"
        " DROP TABLE controller; DROP INDEX buffers_held; DROP TABLE stage_runs; ALTER TABLE "
        "buffers DROP COLUMN held_since; ALTER TABLE buffers DROP COLUMN ended; PRAGMA "
        "user_version = 5");
    ASSERT_EQ(unlink((config_.record_key + ".sealed").c_str()), 0);
    std::string message;
    EXPECT_EQ(code_of([&] { StateStore store(config_); }, &message), ExitCode::no_perm);
    EXPECT_NE(message.find("run bb-pool migrate as root once to seal its records"),
              std::string::npos)
        << message;
    EXPECT_EQ(user_version(), 5);
    StoreOptions options;
    options.migrate_unsealed = true;
    {
        StateStore store(config_, options);
        EXPECT_EQ(store.sealed_by_migration(), 1u);
    }
    EXPECT_EQ(SealLedger::sealed_version(config_), state_schema_version());
    StateStore store(config_);
    ReadSnapshot snapshot(store);
    EXPECT_EQ(snapshot.get_buffer(BufferKey::job("main", 1, 1)).user, "alice");
    EXPECT_TRUE(snapshot.forged_records().empty());
}

// Attack 1 of bbkit(7) SECURITY and its class: whatever kind of schema object the owner adds,
// drops or changes, root reads and writes nothing (77, one line naming the object).
TEST_F(RecordSealTest, every_kind_of_foreign_schema_object_is_refused_naming_it) {
    insert_job(1);
    const std::vector<std::pair<std::string, std::string>> attacks = {
        {"CREATE TRIGGER t AFTER UPDATE OF state ON buffers BEGIN UPDATE buffers SET uid = 0; END",
         "state.db holds a trigger 't' that bbkit did not create"},
        {"CREATE VIEW v AS SELECT * FROM buffers", "state.db holds a view 'v'"},
        {"CREATE INDEX i ON buffers(lower(user))", "state.db holds an index 'i'"},
        {"CREATE INDEX i ON buffers(user COLLATE NOCASE) WHERE uid = 0",
         "state.db holds an index 'i'"},
        {"CREATE TABLE x (y)", "state.db holds a table 'x'"},
        {"DROP INDEX buffers_key", "state.db lacks bbkit's index 'buffers_key'"},
        {"ANALYZE", "state.db holds a table 'sqlite_stat1'"},
        {"PRAGMA writable_schema = ON; UPDATE sqlite_schema SET sql = replace(sql, "
         "'reason          TEXT NOT NULL DEFAULT ''''', 'reason TEXT NOT NULL DEFAULT ''x''')"
         " WHERE name = 'buffers'",
         "state.db's table 'buffers' is not the one bbkit creates"},
        {"ALTER TABLE buffers ADD COLUMN z AS (uid + 1)",
         "state.db's table 'buffers' is not the one bbkit creates"},
    };
    // The file alone, its WAL emptied into it before each copy.
    sql("PRAGMA wal_checkpoint(TRUNCATE)");
    const std::string saved = root_ + "/saved.db";
    std::filesystem::copy_file(db_path(), saved);
    for (const auto& [attack, named] : attacks) {
        sql(attack);
        sql("PRAGMA wal_checkpoint(TRUNCATE)");
        std::string message;
        EXPECT_EQ(code_of([&] { StateStore store(config_); }, &message), ExitCode::no_perm)
            << attack;
        EXPECT_EQ(message.rfind(named, 0), 0u) << attack << ": " << message;
        EXPECT_EQ(message.find('\n'), std::string::npos);
        sql("PRAGMA wal_checkpoint(TRUNCATE)");
        std::filesystem::copy_file(saved, db_path(),
                                   std::filesystem::copy_options::overwrite_existing);
    }
    StateStore store(config_);  // the saved file is bbkit's again
}

// What check --repair does with a foreign schema: a new state.db with bbkit's schema and only
// the rows root sealed; the old file kept aside.
TEST_F(RecordSealTest, a_foreign_schema_is_rebuilt_from_the_sealed_records_only) {
    insert_job(1);
    insert_job(2);
    sql("CREATE TRIGGER t AFTER UPDATE ON buffers BEGIN SELECT 1; END;"
        " UPDATE buffers SET uid = 0 WHERE job_id = 2;"
        " INSERT INTO history (key, to_state, time, who) VALUES ('x', 'allocated', 0, 'owner')");
    StoreOptions options;
    options.tolerate_foreign_schema = true;
    {
        StateStore store(config_, options);
        ASSERT_EQ(store.foreign_schema().size(), 1u);
        EXPECT_EQ(store.foreign_schema()[0],
                  "state.db holds a trigger 't' that bbkit did not create");
        const RebuildResult result =
            store.rebuild_from_sealed_records({{"nvme", "/bb/nvme", "uuid-1", false}}, "test");
        EXPECT_EQ(result.carried, 1u);
        EXPECT_EQ(result.left_out, 1u);
        EXPECT_EQ(result.unreadable, "");
        struct stat st {};
        EXPECT_EQ(stat((config_.state_dir + "/" + result.kept_as).c_str(), &st), 0);
    }
    struct stat st {};
    ASSERT_EQ(stat(db_path().c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, lookup_user("nobody").uid);  // still the state owner's file
    StateStore store(config_);
    ReadSnapshot snapshot(store);
    const std::vector<Buffer> listed = snapshot.list_buffers();
    ASSERT_EQ(listed.size(), 1u);
    EXPECT_EQ(listed[0].key.job_id, 1u);
    EXPECT_TRUE(snapshot.forged_records().empty());
    EXPECT_TRUE(snapshot.history(BufferKey::job("main", 1, 1)).empty());  // unsealed: not carried
    EXPECT_EQ(snapshot.used_bytes("nvme"), 1024u);
    EXPECT_TRUE(snapshot.find_pool("nvme"));
}

// A seal is computed from what root binds; whatever root writes, through every kind of write,
// reads back as sealed (a value SQLite stored otherwise than root bound it would be refused).
TEST_F(RecordSealTest, every_write_of_root_reads_back_as_sealed) {
    std::mt19937_64 random(20261128);
    StateStore store(config_);
    {
        WriteTransaction txn(store, "test");
        txn.put_pool({"nvme", "/bb/nvme", "uuid-1", false});
        txn.commit();
    }
    for (int i = 0; i < 60; ++i) {
        WriteTransaction txn(store, "test");
        Buffer b = i % 3 == 0
                       ? Buffer::for_key(BufferKey::persistent("main", "p" + std::to_string(i)))
                       : Buffer::for_key(BufferKey::job("main", random() >> 1, 1 + i % 4));
        b.state = BufferState::allocating;
        b.pool = "nvme";
        b.requested_bytes = random() >> (random() % 64);
        b.allocated_bytes = random();
        b.uid = static_cast<uid_t>(random());
        b.gid = static_cast<gid_t>(random());
        b.user = "user\t" + std::to_string(random());
        b.staging = std::string(random() % 3000, 'x') + "\n;:~";
        b.access = i % 2 ? "striped" : "";
        if (i % 4 == 0)
            b.expires = TimePoint(std::chrono::seconds(random() % 4000000000));
        txn.insert_buffer(b);
        b.message = "m" + std::to_string(random());
        b.use_count = static_cast<std::uint32_t>(random());
        b.failure = i % 5 ? "" : "failed: x";
        if (i % 5 == 0)
            b.failed = TimePoint(std::chrono::nanoseconds(random() >> 2));
        txn.update_buffer(b);
        txn.set_run_lock_holder(b.key, ProcessId{static_cast<pid_t>(random() % 4000000), random()});
        if (i % 2)
            txn.set_run_lock_holder(b.key, std::nullopt);
        txn.transition(b.key, BufferState::allocated, "r" + std::to_string(i), "msg");
        txn.commit();
    }
    ReadSnapshot snapshot(store);
    EXPECT_TRUE(snapshot.forged_records().empty());
    EXPECT_EQ(snapshot.list_buffers().size(), 60u);
}

// An index whose entries lie (rebuilt under another definition, then the definition put back,
// so that the schema check passes): a lookup of job 1 finds job 2's sealed row. The key is
// sealed with the row, and root also checks what it got against what it asked for.
TEST_F(RecordSealTest, a_sealed_row_an_index_hands_out_for_another_key_is_refused) {
    insert_job(1);
    insert_job(2);
    sql("PRAGMA writable_schema = ON; UPDATE sqlite_schema SET sql = 'CREATE INDEX buffers_key"
        " ON buffers(CASE WHEN id = 2 THEN ''main.1.1'' ELSE key END)' WHERE name = 'buffers_key'");
    sql("REINDEX buffers_key");
    sql("PRAGMA writable_schema = ON; UPDATE sqlite_schema SET sql = 'CREATE INDEX buffers_key"
        " ON buffers(key)' WHERE name = 'buffers_key'");
    StateStore store(config_);
    ReadSnapshot snapshot(store);
    std::string message;
    EXPECT_EQ(code_of([&] { snapshot.get_buffer(BufferKey::job("main", 1, 1)); }, &message),
              ExitCode::no_perm);
    EXPECT_NE(message.find("buffer main.1.1"), std::string::npos) << message;
}

TEST_F(RecordSealTest, the_ledger_is_roots_and_remembers_the_highest_version) {
    EXPECT_FALSE(SealLedger::sealed_version(config_));
    SealLedger::record(config_, 6);
    SealLedger::record(config_, 5);
    EXPECT_EQ(SealLedger::sealed_version(config_), 6);
    Config other = config_;
    other.state_dir = root_ + "/other state";
    EXPECT_FALSE(SealLedger::sealed_version(other));
    SealLedger::record(other, 7);
    EXPECT_EQ(SealLedger::sealed_version(other), 7);
    EXPECT_EQ(SealLedger::sealed_version(config_), 6);
    struct stat st {};
    ASSERT_EQ(stat((config_.record_key + ".sealed").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 0u);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    chmod((config_.record_key + ".sealed").c_str(), 0666);
    EXPECT_EQ(code_of([&] { SealLedger::sealed_version(config_); }), ExitCode::config);
}

TEST_F(RecordSealTest, with_root_as_the_state_owner_nothing_is_refused) {
    config_.state_owner = "root";
    {
        StateStore store(config_);
        WriteTransaction txn(store, "test");
        txn.put_pool({"nvme", "/bb/nvme", "uuid-1", false});
        Buffer b = Buffer::for_key(BufferKey::job("main", 1, 1));
        b.pool = "nvme";
        b.user = "alice";
        txn.insert_buffer(b);
        txn.commit();
    }
    sql("UPDATE buffers SET uid = 7 WHERE job_id = 1");
    StateStore store(config_);
    ReadSnapshot snapshot(store);
    EXPECT_EQ(snapshot.get_buffer(BufferKey::job("main", 1, 1)).uid, 7u);
    EXPECT_TRUE(snapshot.forged_records().empty());
}

}  // namespace
}  // namespace bbkit
