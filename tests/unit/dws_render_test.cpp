#include "bbkit/dws_render.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bbkit/stat_render.hpp"
#include "status_fixture.hpp"

namespace bbkit {
namespace {

using namespace fixture;
using nlohmann::json;

// What Slurm's datawarp plugin demands of every listing: one object, one key, an array of
// objects, and no apostrophe anywhere (it turns ' into " before parsing).
json listing(const std::string& text, const std::string& key) {
    EXPECT_EQ(text.find('\''), std::string::npos) << text;
    const json value = json::parse(text);
    EXPECT_TRUE(value.is_object());
    EXPECT_EQ(value.size(), 1u);
    EXPECT_TRUE(value.at(key).is_array());
    for (const json& item : value.at(key))
        EXPECT_TRUE(item.is_object());
    return value.at(key);
}

class DwsTest : public StatusTest {
  protected:
    // pool1: job 832 with 4 KiB, job 833 using persistent "ps" (a session without space), and
    // persistent "ps" of 8 KiB; job 834 still pending.
    StatusSnapshot snapshot() {
        config_.pools.resize(1);
        auto store = open_store();
        {
            WriteTransaction txn(*store, "test");
            allocate(txn, job(832, "pool1", 4 * kib, 12345, "tester", t_169502));
            Buffer ps = Buffer::for_key(BufferKey::persistent("main", "ps"));
            ps.pool = "pool1";
            ps.requested_bytes = ps.allocated_bytes = 8 * kib;
            ps.uid = ps.gid = 12345;
            ps.user = ps.owner = "tester";
            ps.state = S::allocating;
            ps.created = at(t_169502);
            ps.use_count = 1;
            allocate(txn, ps);
            Buffer user = job(833, "pool1", 0, 12345, "tester", t_169504);
            user.staging = R"({"persistent_use":["ps"]})";
            allocate(txn, user);
            txn.transition(user.key, S::staging_in);
            txn.transition(user.key, S::staged_in);
            txn.transition(user.key, S::pre_run);
            txn.transition(user.key, S::running);
            Buffer waiting = job(834, "pool1", kib, 12345, "tester", t_169504);
            waiting.state = S::pending;
            txn.insert_buffer(waiting);
            txn.commit();
        }
        ReadSnapshot txn(*store);
        return read_status(txn, config_);
    }
};

TEST_F(DwsTest, sessions_list_every_existing_buffer_with_its_token_owner_and_record_id) {
    const StatusSnapshot s = snapshot();
    const json sessions = listing(dws_sessions(s.buffers), "sessions");
    ASSERT_EQ(sessions.size(), 3u);  // not the pending one
    EXPECT_EQ(sessions[0]["token"], "832");
    EXPECT_EQ(sessions[0]["owner"], 12345);
    EXPECT_EQ(sessions[0]["created"], t_169502);
    EXPECT_EQ(sessions[1]["token"], "ps");
    EXPECT_EQ(sessions[2]["token"], "833");
    for (const json& session : sessions) {
        EXPECT_TRUE(session["id"].is_number_integer());
        EXPECT_TRUE(session["token"].is_string());  // the plugin reads no numeric token
    }
    EXPECT_NE(sessions[0]["id"], sessions[1]["id"]);
}

TEST_F(DwsTest, instances_and_configurations_only_for_buffers_with_space) {
    const StatusSnapshot s = snapshot();
    const json sessions = listing(dws_sessions(s.buffers), "sessions");
    const json instances = listing(dws_instances(s.buffers), "instances");
    ASSERT_EQ(instances.size(), 2u);  // 832 and ps; 833 has no space of its own
    EXPECT_EQ(instances[0]["capacity"]["bytes"], 4 * kib);
    EXPECT_EQ(instances[0]["links"]["session"], sessions[0]["id"]);
    EXPECT_EQ(instances[1]["capacity"]["bytes"], 8 * kib);
    EXPECT_EQ(instances[1]["links"]["session"], sessions[1]["id"]);
    const json configurations = listing(dws_configurations(s.buffers), "configurations");
    ASSERT_EQ(configurations.size(), 2u);
    EXPECT_EQ(configurations[1]["links"]["instance"], instances[1]["id"]);
    EXPECT_EQ(configurations[1]["activs"], 1);
}

TEST_F(DwsTest, activations_pair_a_running_job_with_the_configurations_it_uses) {
    const StatusSnapshot s = snapshot();
    const json activations = activations_json(s.buffers);
    ASSERT_EQ(activations.size(), 1u);
    EXPECT_EQ(activations[0]["token"], "833");
    EXPECT_EQ(activations[0]["configuration"], "ps");
    EXPECT_NE(activations_table(s.buffers).find("activ state sess conf nodes\n"),
              std::string::npos);
}

TEST(DwsPools, count_granules_and_report_no_free_space_unless_the_pool_is_up) {
    PoolStatus up = pool("nvme", 10 * gib, gib, 3 * gib, gib, 2 * gib);
    PoolStatus draining = up;
    draining.name = "slow";
    draining.draining = true;
    const json pools = listing(dws_pools({up, draining}), "pools");
    EXPECT_EQ(pools[0], json::parse(R"({"id":"nvme","units":"bytes","granularity":1073741824,
                                        "quantity":10,"free":6})"));
    EXPECT_EQ(pools[1]["free"], 0);
    EXPECT_EQ(listing(dws_pools({}), "pools").size(), 0u);
}

TEST(DwsRealSize, is_the_allocated_size_in_bytes) {
    Buffer b = Buffer::for_key(BufferKey::job("main", 1, 1));
    b.allocated_bytes = 3 * gib;
    EXPECT_EQ(json::parse(dws_real_size(b)),
              json::parse(R"({"capacity":3221225472,"units":"bytes"})"));
}

}  // namespace
}  // namespace bbkit
