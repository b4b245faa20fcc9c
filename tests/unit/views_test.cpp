#include "bbkit/views.hpp"

#include <gtest/gtest.h>

#include "bbkit/error.hpp"
#include "bbkit/publish.hpp"
#include "bbkit/seal.hpp"
#include "code_of.hpp"
#include "status_fixture.hpp"

namespace bbkit {
namespace {

using namespace fixture;

// ---- PrivateData --------------------------------------------------------------------------

BufferStatus status_of_uid(std::uint64_t job, uid_t uid, BufferState state) {
    BufferStatus status;
    status.buffer = Buffer::for_key(BufferKey::job("main", job, 1));
    status.buffer.uid = uid;
    status.buffer.state = state;
    return status;
}

TEST(PrivateData, a_viewer_keeps_their_own_buffers_root_and_the_owner_keep_all) {
    Config config;
    config.state_owner = "root";
    config.flags.private_data = true;
    const auto snapshot_of_three = [] {
        StatusSnapshot snapshot;
        snapshot.pools.push_back(pool("nvme", 4 * gib, 1));
        snapshot.buffers = {status_of_uid(1, 1000, S::allocated),
                            status_of_uid(2, 1001, S::allocated),
                            status_of_uid(3, 1000, S::staging_in)};
        snapshot.counts = {{S::allocated, 2}, {S::staging_in, 1}, {S::complete, 40}};
        return snapshot;
    };
    StatusSnapshot seen = snapshot_of_three();
    restrict_to_viewer(seen, config, 1000);
    ASSERT_EQ(seen.buffers.size(), 2u);
    EXPECT_EQ(seen.buffers[0].buffer.key.job_id, 1u);
    EXPECT_EQ(seen.buffers[1].buffer.key.job_id, 3u);
    EXPECT_EQ(seen.pools.size(), 1u);
    const std::map<BufferState, std::size_t> counts{{S::allocated, 1}, {S::staging_in, 1}};
    EXPECT_EQ(seen.counts, counts);
    EXPECT_TRUE(privileged_viewer(config, 0));
    EXPECT_FALSE(privileged_viewer(config, 1000));
    seen = snapshot_of_three();
    restrict_to_viewer(seen, config, 0);
    EXPECT_EQ(seen.buffers.size(), 3u);
    // The state directory's owner is privileged; a name that does not resolve privileges nobody.
    config.state_owner = "nobody";  // 65534 on Debian
    EXPECT_TRUE(may_see(config, 65534, status_of_uid(1, 1000, S::allocated).buffer));
    config.state_owner = "no-such-user-bbkit";
    EXPECT_FALSE(may_see(config, 1001, status_of_uid(1, 1000, S::allocated).buffer));
    config.flags.private_data = false;
    seen = snapshot_of_three();
    restrict_to_viewer(seen, config, 1001);
    EXPECT_EQ(seen.buffers.size(), 3u);
}

// ---- slurm_pools_json ---------------------------------------------------------------------

TEST(SlurmPoolsJson, counts_quantity_and_free_in_granules) {
    // 10000 bytes in 1 KiB granules: 9 whole granules, the rest is never offered.
    EXPECT_EQ(slurm_pools_json({pool("p", 10000, 1024)}),
              R"({"pools":[{"free":9,"granularity":1024,"id":"p","quantity":9}]})");
}

TEST(SlurmPoolsJson, leaves_persistent_buffers_and_trash_out_of_quantity) {
    // used 3 KiB of which 1 KiB persistent, 1 KiB trash: quantity (10000-1024-1024)/1024 = 7,
    // free (10000-3072-1024)/1024 = 5.
    EXPECT_EQ(slurm_pools_json({pool("p", 10000, 1024, 3 * kib, kib, kib)}),
              R"({"pools":[{"free":5,"granularity":1024,"id":"p","quantity":7}]})");
}

TEST(SlurmPoolsJson, free_is_zero_while_draining_and_before_init) {
    PoolStatus draining = pool("d", 4 * kib, kib);
    draining.draining = true;
    PoolStatus fresh = pool("f", 4 * kib, kib);
    fresh.initialized = false;
    EXPECT_EQ(slurm_pools_json({draining, fresh}),
              R"({"pools":[{"free":0,"granularity":1024,"id":"d","quantity":4},)"
              R"({"free":0,"granularity":1024,"id":"f","quantity":4}]})");
}

TEST(SlurmPoolsJson, over_commit_clamps_at_zero) {
    EXPECT_EQ(slurm_pools_json({pool("p", 4 * kib, kib, 5 * kib, kib, 5 * kib)}),
              R"({"pools":[{"free":0,"granularity":1024,"id":"p","quantity":0}]})");
}

TEST(SlurmPoolsJson, no_pools_is_an_object_with_an_empty_list) {
    EXPECT_EQ(slurm_pools_json({}), R"({"pools":[]})");
}

TEST(SlurmPoolsJson, large_pools_stay_integers) {
    const std::string text = slurm_pools_json({pool("nvme", 5800 * gib, 200 * gib, 1600 * gib)});
    EXPECT_EQ(text,
              R"({"pools":[{"free":21,"granularity":214748364800,"id":"nvme","quantity":29}]})");
    EXPECT_EQ(text.find('.'), std::string::npos);
}

// ---- pools --------------------------------------------------------------------------------

TEST_F(StatusTest, pool_status_derives_used_trash_and_free) {
    config_.pools.resize(1);
    auto store = open_store();
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", 100 * kib, 1017, "marshall", t_169502));
        allocate(txn, job(2, "pool1", 50 * kib, 1017, "marshall", t_169504));
        txn.transition(BufferKey::job("main", 2, 1), S::teardown);
        txn.transition(BufferKey::job("main", 2, 1), S::complete);  // in trash/ until reaped
        txn.set_draining("pool1", true);
        txn.commit();
    }
    ReadSnapshot txn(*store);
    const std::vector<PoolStatus> pools = pool_status(txn, config_);
    ASSERT_EQ(pools.size(), 1u);
    EXPECT_EQ(pools[0].used, 100 * kib);
    EXPECT_EQ(pools[0].trash, 50 * kib);
    EXPECT_EQ(pools[0].free, 9850 * kib);  // the real free space, even while draining
    EXPECT_TRUE(pools[0].draining);
    EXPECT_TRUE(pools[0].initialized);
    EXPECT_EQ(slurm_pools_json(pools),
              R"({"pools":[{"free":0,"granularity":1024,"id":"pool1","quantity":9950}]})");
}

TEST(PoolsJson, is_one_object_per_pool_in_configuration_order) {
    const auto unavailable_pool = [](std::string name, std::uint64_t total,
                                     std::uint64_t granularity, std::uint64_t used) {
        PoolStatus p = pool(std::move(name), total, granularity, used);
        p.availability = PoolAvailability::unavailable;
        return p;
    };
    const nlohmann::json list = pools_json({pool("a", 10, 1), unavailable_pool("b", 20, 2, 4)});
    ASSERT_EQ(list.size(), 2u);
    EXPECT_EQ(list[1]["name"], "b");
    EXPECT_EQ(list[1]["free"], 16u);
    EXPECT_EQ(list[1]["availability"], "unavailable");
    EXPECT_TRUE(pools_json({}).is_array());
}

// ---- public/ ------------------------------------------------------------------------------

TEST_F(StatusTest, a_reader_skips_temporaries_and_sorts_oldest_first) {
    config_.pools.resize(1);
    auto store = open_store();
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(2, "pool1", kib, 1018, "other", t_169502));  // older, higher uid
        allocate(txn, job(1, "pool1", kib, 1017, "marshall", t_169504));
        publish(txn, *store, config_);
        txn.commit();
    }
    const std::string users = config_.state_dir + "/public/buffers";
    std::ofstream(users + "/1017/main.1.1.json.tmp.7.8") << "{";
    const StatusSnapshot seen = read_public_status(config_, 4242);
    ASSERT_EQ(seen.buffers.size(), 2u);
    EXPECT_EQ(seen.buffers[0].buffer.key.str(), "main.2.1");
    EXPECT_EQ(seen.buffers[1].buffer.key.str(), "main.1.1");

    std::ofstream(users + "/1017/main.1.1.json") << "{garbage";
    try {
        read_public_status(config_, 4242);
        FAIL();
    } catch (const Error& error) {
        EXPECT_EQ(error.code(), ExitCode::data);
        EXPECT_NE(std::string(error.what()).find("main.1.1.json"), std::string::npos);
    }
}

TEST(PublicNames, a_users_directory_is_the_tag_of_their_uid_under_their_key) {
    const std::string key = "0123456789abcdef0123456789abcdef";
    EXPECT_EQ(public_key_name(1017), "1017.key");
    EXPECT_EQ(public_directory_name(1017, key), user_tag(key, "public/buffers/1017"));
    EXPECT_NE(public_directory_name(1018, key), public_directory_name(1017, key));
    EXPECT_NE(public_directory_name(1017, "fedcba9876543210fedcba9876543210"),
              public_directory_name(1017, key));
}

// With PrivateData a reader never lists public/buffers/: they open their key by name and the
// directory it names, and take a key only from a regular file of their own.
TEST_F(StatusTest, with_private_data_a_reader_opens_only_what_their_own_key_names) {
    config_.pools.resize(1);
    auto store = open_store();
    {
        WriteTransaction txn(*store, "test");
        publish(txn, *store, config_);  // public/pools.json
        txn.commit();
    }
    config_.flags.private_data = true;
    const uid_t me = geteuid();
    const std::string buffers = config_.state_dir + "/public/buffers";
    const std::string key = "0123456789abcdef0123456789abcdef";
    const std::string dir = buffers + "/" + public_directory_name(me, key);
    std::filesystem::create_directories(dir);
    BufferStatus mine = status_of_uid(7, me, S::allocated);
    mine.buffer.pool = "pool1";
    std::ofstream(dir + "/main.7.1.json") << buffer_status_json(mine).dump();
    EXPECT_TRUE(read_public_status(config_, me).buffers.empty()) << "no key yet";
    std::ofstream(buffers + "/" + public_key_name(me)) << key << "\n";
    ASSERT_EQ(read_public_status(config_, me).buffers.size(), 1u);
    EXPECT_EQ(read_public_status(config_, me).buffers[0].buffer.key.str(), "main.7.1");
    EXPECT_TRUE(read_public_status(config_, me + 1).buffers.empty());
    if (geteuid() == 0) {  // a key file of another user's under my name is none
        ASSERT_EQ(::chown((buffers + "/" + public_key_name(me)).c_str(), 4242, 4242), 0);
        EXPECT_TRUE(read_public_status(config_, me).buffers.empty());
    }
}

TEST_F(StatusTest, reading_public_before_anything_was_published_is_unavailable) {
    auto store = open_store();
    try {
        read_public_status(config_, 4242);
        FAIL();
    } catch (const Error& error) {
        EXPECT_EQ(error.code(), ExitCode::unavailable);
    }
    std::ofstream(config_.state_dir + "/public/pools.json") << "{garbage";
    try {
        read_public_status(config_, 4242);
        FAIL();
    } catch (const Error& error) {
        EXPECT_EQ(error.code(), ExitCode::data);
    }
}

// ---- query_status: what a reader sees, from where it may read -------------------------------

class QueryTest : public StatusTest {
  protected:
    // Two job buffers in pool1, of users 1017 (job 1) and 1018 (job 2), in state.db only.
    std::unique_ptr<StateStore> two_buffers() {
        config_.pools.resize(1);
        auto store = open_store();
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", kib, 1017, "marshall", t_169504));
        allocate(txn, job(2, "pool1", kib, 1018, "other", t_169502));
        txn.commit();
        return store;
    }
    void publish_now(StateStore& store) {
        WriteTransaction txn(store, "test");
        publish(txn, store, config_);
        txn.commit();
    }
    static StatusQuery scoped(StatusQuery::Scope scope) {
        StatusQuery query;
        query.scope = scope;
        return query;
    }
};

TEST_F(QueryTest, the_owner_reads_the_database_another_user_public) {
    auto store = two_buffers();
    const StatusAnswer owner = query_status(config_, geteuid(), StatusQuery{});
    EXPECT_EQ(owner.snapshot.pools.size(), 1u);
    EXPECT_EQ(owner.snapshot.buffers.size(), 2u);
    EXPECT_FALSE(owner.job);
    // Nothing published yet: another user reads public/ only.
    EXPECT_EQ(code_of([&] { query_status(config_, 4242, StatusQuery{}); }), ExitCode::unavailable);
    publish_now(*store);
    const StatusAnswer other = query_status(config_, 4242, StatusQuery{});
    EXPECT_EQ(other.snapshot.pools.size(), 1u);
    EXPECT_EQ(other.snapshot.buffers.size(), 2u);
    StatusQuery job = scoped(StatusQuery::Scope::none);
    job.job_id = 2;
    const StatusAnswer from_public = query_status(config_, 4242, job);
    ASSERT_TRUE(from_public.job);
    EXPECT_EQ(from_public.job->status.buffer.uid, 1018u);
}

TEST_F(QueryTest, the_database_is_read_as_far_as_the_scope_asks) {
    auto store = two_buffers();
    const StatusAnswer pools = query_status(config_, geteuid(), scoped(StatusQuery::Scope::pools));
    EXPECT_EQ(pools.snapshot.pools.size(), 1u);
    EXPECT_TRUE(pools.snapshot.buffers.empty());
    EXPECT_TRUE(pools.snapshot.counts.empty());
    StatusQuery job = scoped(StatusQuery::Scope::none);
    job.job_id = 1;
    const StatusAnswer alone = query_status(config_, geteuid(), job);
    EXPECT_TRUE(alone.snapshot.pools.empty());
    EXPECT_TRUE(alone.snapshot.buffers.empty());
    ASSERT_TRUE(alone.job);
    EXPECT_EQ(alone.job->status.buffer.key.str(), "main.1.1");
    job.job_id = 3;
    EXPECT_EQ(code_of([&] { query_status(config_, geteuid(), job); }), ExitCode::no_input);
}

TEST_F(QueryTest, for_a_user_only_what_they_may_see_is_kept) {
    auto store = two_buffers();
    config_.flags.private_data = true;
    StatusQuery query;
    query.for_uid = 1017;
    const StatusAnswer seen = query_status(config_, geteuid(), query);
    ASSERT_EQ(seen.snapshot.buffers.size(), 1u);
    EXPECT_EQ(seen.snapshot.buffers[0].buffer.uid, 1017u);
    const std::map<BufferState, std::size_t> counts{{S::allocated, 1}};
    EXPECT_EQ(seen.snapshot.counts, counts);
    query.job_id = 2;  // another user's job: as if it had no buffer
    std::string message;
    EXPECT_EQ(code_of([&] { query_status(config_, geteuid(), query); }, &message),
              ExitCode::no_input);
    EXPECT_EQ(message, "no burst buffer for job 2");
}

// For a caller that cannot tell who asks (scontrol show dwstat): with PrivateData the pools and
// no buffer, and a job's buffer answered as for a job without one.
TEST_F(QueryTest, for_anyone_private_data_keeps_the_pools_and_hides_every_buffer) {
    auto store = two_buffers();
    StatusQuery query;
    query.for_anyone = true;
    query.job_id = 1;
    const StatusAnswer everyone = query_status(config_, geteuid(), query);
    EXPECT_EQ(everyone.snapshot.buffers.size(), 2u);
    ASSERT_TRUE(everyone.job);
    config_.flags.private_data = true;
    std::string message;
    EXPECT_EQ(code_of([&] { query_status(config_, geteuid(), query); }, &message),
              ExitCode::no_input);
    EXPECT_EQ(message, "no burst buffer for job 1");
    query.job_id.reset();
    const StatusAnswer anyone = query_status(config_, geteuid(), query);
    EXPECT_EQ(anyone.snapshot.pools.size(), 1u);
    EXPECT_TRUE(anyone.snapshot.buffers.empty());
    EXPECT_TRUE(anyone.snapshot.counts.empty());
}

}  // namespace
}  // namespace bbkit
