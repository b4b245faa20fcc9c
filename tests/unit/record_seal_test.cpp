#include "bbkit/record_seal.hpp"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "bbkit/error.hpp"
#include "bbkit/store.hpp"
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
    EXPECT_TRUE(records_need_checking(config_));
    config_.state_owner = "root";
    EXPECT_FALSE(records_need_checking(config_));
    config_.state_owner = "0";
    EXPECT_FALSE(records_need_checking(config_));
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

TEST_F(RecordSealTest, rows_from_before_seals_are_sealed_by_roots_migration) {
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
    sql("ALTER TABLE buffers DROP COLUMN seal; ALTER TABLE buffers DROP COLUMN temp_token;"
        " PRAGMA user_version = 5");
    StateStore store(config_);
    ReadSnapshot snapshot(store);
    EXPECT_EQ(snapshot.get_buffer(BufferKey::job("main", 1, 1)).user, "alice");
    EXPECT_TRUE(snapshot.forged_records().empty());
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
