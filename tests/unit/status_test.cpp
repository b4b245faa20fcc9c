#include "bbkit/status.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"

namespace bbkit {
namespace {

using S = BufferState;
constexpr std::uint64_t kib = 1024;
constexpr std::uint64_t gib = 1024ULL * 1024 * 1024;

// 2021-08-11T10:13:38 UTC, the guide's first CreateTime.
TimePoint at(std::time_t seconds) {
    return std::chrono::system_clock::from_time_t(seconds);
}
constexpr std::time_t t_169504 = 1628676818;
constexpr std::time_t t_169502 = 1628676726;  // 10:12:06

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
}

struct stat stat_of(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
    return st;
}

PoolStatus pool(std::string name, std::uint64_t total, std::uint64_t granularity,
                std::uint64_t used = 0, std::uint64_t trash = 0, std::uint64_t persistent = 0) {
    PoolStatus p;
    p.name = std::move(name);
    p.path = "/bb/" + p.name;
    p.total = total;
    p.granularity = granularity;
    p.used = used;
    p.trash = trash;
    p.persistent = persistent;
    p.free = used + trash >= total ? 0 : total - used - trash;
    p.initialized = true;
    p.availability = PoolAvailability::up;
    return p;
}

[[maybe_unused]] std::string fs_parent(const std::string& path) {  // fault-injection builds only
    return path.substr(0, path.rfind('/'));
}

class StatusTest : public ::testing::Test {
  protected:
    void SetUp() override {
        // Slurm prints local time; the expected layouts are in UTC.
        ::setenv("TZ", "UTC", 1);
        ::tzset();
        char pattern[] = "/tmp/bbkit-status-XXXXXX";
        ASSERT_NE(mkdtemp(pattern), nullptr);
        root_ = pattern;
        config_.state_dir = root_ + "/state";
        config_.state_owner = geteuid() == 0 ? "root" : std::to_string(geteuid());
        config_.pools = {{"pool1", root_ + "/bb/pool1", 10000 * kib, kib},
                         {"pool2", root_ + "/bb/pool2", 10, 2},
                         {"pool3", root_ + "/bb/pool3", 4, 1},
                         {"pool4", root_ + "/bb/pool4", 5000000000ULL, 1}};
    }
    void TearDown() override { std::system(("rm -rf '" + root_ + "'").c_str()); }

    std::unique_ptr<StateStore> open_store() {
        auto store = std::make_unique<StateStore>(config_);
        WriteTransaction txn(*store, "test");
        for (const PoolConfig& p : config_.pools) {
            // Mounted: each pool's marker names it and its recorded UUID (up).
            std::filesystem::create_directories(p.path);
            std::ofstream(p.path + "/.bbkit-pool")
                << "name=" << p.name << "\nuuid=uuid-" << p.name << "\n";
            txn.put_pool({p.name, p.path, "uuid-" + p.name, false});
        }
        txn.commit();
        return store;
    }

    static Buffer job(std::uint64_t id, const std::string& pool, std::uint64_t bytes, uid_t uid,
                      const std::string& user, std::time_t created) {
        Buffer b = Buffer::for_key(BufferKey::job("main", id, 1));
        b.pool = pool;
        b.requested_bytes = bytes;
        b.allocated_bytes = bytes;
        b.uid = uid;
        b.gid = uid;
        b.user = user;
        b.state = S::allocating;
        b.created = at(created);
        return b;
    }

    // Inserts as allocating and moves to allocated, as bb-pool alloc does.
    static void allocate(WriteTransaction& txn, Buffer b) {
        txn.insert_buffer(b);
        txn.transition(b.key, S::allocated);
    }

    std::string root_;
    Config config_;
};

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

// ---- scontrol show burst ------------------------------------------------------------------

TEST_F(StatusTest, burst_matches_the_guides_lua_example_byte_for_byte) {
    auto store = open_store();
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(169502, "pool4", 1000000000, 1017, "marshall", t_169502));
        allocate(txn, job(169504, "pool1", 250 * kib, 1017, "marshall", t_169504));
        txn.commit();
    }
    ReadSnapshot txn(*store);
    const std::string expected =
        "Name=bbkit DefaultPool=(null) Granularity=1 TotalSpace=0 FreeSpace=0 UsedSpace=0\n"
        "  PoolName[0]=pool1 Granularity=1KiB TotalSpace=10000KiB FreeSpace=9750KiB "
        "UsedSpace=250KiB Availability=up\n"
        "  PoolName[1]=pool2 Granularity=2 TotalSpace=10 FreeSpace=10 UsedSpace=0 "
        "Availability=up\n"
        "  PoolName[2]=pool3 Granularity=1 TotalSpace=4 FreeSpace=4 UsedSpace=0 Availability=up\n"
        "  PoolName[3]=pool4 Granularity=1 TotalSpace=5GB FreeSpace=4GB UsedSpace=1GB "
        "Availability=up\n"
        "  Flags=DisablePersistent\n"
        "  StageInTimeout=86400 StageOutTimeout=86400 ValidateTimeout=5 OtherTimeout=300\n"
        "  GetSysState=(null)\n"
        "  GetSysStatus=(null)\n"
        "  Allocated Buffers:\n"
        "    JobID=169504 CreateTime=2021-08-11T10:13:38 Pool=pool1 Size=250KiB State=allocated "
        "UserID=marshall(1017)\n"
        "    JobID=169502 CreateTime=2021-08-11T10:12:06 Pool=pool4 Size=1GB State=allocated "
        "UserID=marshall(1017)\n"
        "  Per User Buffer Use:\n"
        "    UserID=marshall(1017) Used=1000256KB\n";
    EXPECT_EQ(burst_text(read_status(txn, config_), config_), expected);
}

TEST_F(StatusTest, burst_without_buffers_has_no_buffer_sections) {
    config_.default_pool = "pool1";
    config_.flags.private_data = true;
    config_.flags.teardown_failure = true;
    config_.deny_users = {"eve", "1234"};
    config_.timeouts = {300, 300, 120, 5};
    config_.pools.resize(1);
    auto store = open_store();
    ReadSnapshot txn(*store);
    EXPECT_EQ(burst_text(read_status(txn, config_), config_),
              "Name=bbkit DefaultPool=pool1 Granularity=1 TotalSpace=0 FreeSpace=0 UsedSpace=0\n"
              "  PoolName[0]=pool1 Granularity=1KiB TotalSpace=10000KiB FreeSpace=10000KiB "
              "UsedSpace=0 Availability=up\n"
              "  Flags=DisablePersistent,PrivateData,TeardownFailure\n"
              "  StageInTimeout=300 StageOutTimeout=300 ValidateTimeout=5 OtherTimeout=120\n"
              "  DenyUsers=eve,1234\n"
              "  GetSysState=(null)\n"
              "  GetSysStatus=(null)\n");
}

TEST_F(StatusTest, burst_lists_persistent_buffers_by_name_and_skips_pending_ones) {
    config_.pools.resize(1);
    auto store = open_store();
    {
        WriteTransaction txn(*store, "test");
        Buffer alpha = Buffer::for_key(BufferKey::persistent("main", "alpha"));
        alpha.pool = "pool1";
        alpha.requested_bytes = alpha.allocated_bytes = 2 * kib;
        alpha.uid = 0;
        alpha.user = "root";
        alpha.owner = "root";
        alpha.state = S::allocating;
        alpha.created = at(t_169502);
        allocate(txn, alpha);
        Buffer waiting = job(7, "pool1", 20000 * kib, 1017, "marshall", t_169504);
        waiting.state = S::pending;
        txn.insert_buffer(waiting);
        txn.commit();
    }
    ReadSnapshot txn(*store);
    const std::string text = burst_text(read_status(txn, config_), config_);
    EXPECT_NE(text.find("  Allocated Buffers:\n"
                        "    Name=alpha CreateTime=2021-08-11T10:12:06 Pool=pool1 Size=2KiB "
                        "State=allocated UserID=root(0)\n"
                        "  Per User Buffer Use:\n"
                        "    UserID=root(0) Used=2KiB\n"),
              std::string::npos)
        << text;
    EXPECT_EQ(text.find("JobID=7"), std::string::npos);
}

// ---- pools and dwstat tables --------------------------------------------------------------

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

TEST(PoolsTable, is_right_aligned_with_slurm_sizes) {
    EXPECT_EQ(pools_table({pool("wlm_pool", 5800 * gib, gib, 1200 * gib), pool("p", 10, 2)}),
              "    pool units quantity    free gran state\n"
              "wlm_pool bytes  5800GiB 4600GiB 1GiB    up\n"
              "       p bytes       10      10    2    up\n");
}

TEST(PoolsTable, without_pools_prints_the_header) {
    EXPECT_EQ(pools_table({}), "pool units quantity free gran state\n");
}

TEST_F(StatusTest, dwstat_tables_have_one_row_per_live_buffer) {
    config_.pools.resize(1);
    auto store = open_store();
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(832, "pool1", 4 * kib, 12345, "tester", t_169502));
        txn.commit();
    }
    ReadSnapshot txn(*store);
    const StatusSnapshot snapshot = read_status(txn, config_);
    EXPECT_EQ(sessions_table(snapshot.buffers),
              "sess state token creator owner             created expiration nodes\n"
              "   1 CA---   832   bbkit 12345 2021-08-11T10:12:06      never     0\n");
    EXPECT_EQ(configurations_table(snapshot.buffers),
              "conf state inst    type access_type activs\n"
              "   1 CA---    1 scratch      stripe      0\n");
    EXPECT_NE(instances_table(snapshot.buffers).find("4KiB"), std::string::npos);
    EXPECT_EQ(instances_json(snapshot.buffers)[0]["bytes"], 4 * kib);
}

TEST(DwstatState, flags_follow_the_lifecycle) {
    Buffer b = Buffer::for_key(BufferKey::job("main", 1, 1));
    b.state = S::pending;
    EXPECT_EQ(dwstat_state(b), "-----");
    b.state = S::running;
    EXPECT_EQ(dwstat_state(b), "CA---");
    b.state = S::teardown_fail;
    EXPECT_EQ(dwstat_state(b), "C-DT-");
    b.state = S::staging_in;
    b.reason = "BurstBufferOperation";
    EXPECT_EQ(dwstat_state(b), "CA--F");
}

// ---- bb-stat job --------------------------------------------------------------------------

TEST_F(StatusTest, job_shows_queue_position_reason_and_directory) {
    config_.pools.resize(1);
    auto store = open_store();
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", 9000 * kib, 1017, "marshall", t_169502));
        Buffer waiting = job(2, "pool1", 2000 * kib, 1017, "marshall", t_169504);
        waiting.state = S::pending;
        txn.insert_buffer(waiting);
        txn.enqueue("pool1", waiting.key.str(), waiting.requested_bytes, ProcessId::self());
        txn.commit();
    }
    ReadSnapshot txn(*store);
    const JobStatus job = job_status(txn, config_, 2);
    EXPECT_EQ(job.status.queue_position, std::optional<std::size_t>(1));
    EXPECT_EQ(job.status.path, root_ + "/bb/pool1/job/main.2.1");
    const std::string text = job_text(job, at(t_169504 + 2));
    EXPECT_NE(text.find("reason:     BurstBufferResources\n"), std::string::npos) << text;
    EXPECT_NE(text.find("queue:      1\n"), std::string::npos) << text;
    EXPECT_NE(text.find("  pending       2021-08-11T10:13:38  2.000s\n"), std::string::npos)
        << text;
    const nlohmann::json json = job_json(job, at(t_169504 + 2));
    EXPECT_EQ(json["reason"], "BurstBufferResources");
    EXPECT_EQ(json["phases"][0]["seconds"], 2.0);
    EXPECT_TRUE(json["progress"].is_null());
    // Times in bb-stat job --json are Slurm's ISO 8601 form, as in every other JSON view.
    EXPECT_EQ(json["created"], "2021-08-11T10:13:38");
    EXPECT_EQ(json["phases"][0]["entered"], "2021-08-11T10:13:38");
    EXPECT_EQ(json["entered"]["pending"], "2021-08-11T10:13:38");

    try {
        job_status(txn, config_, 3);
        FAIL() << "job 3 has no buffer";
    } catch (const Error& error) {
        EXPECT_EQ(error.code(), ExitCode::no_input);
        EXPECT_STREQ(error.what(), "no burst buffer for job 3");
    }
}

TEST_F(StatusTest, job_reports_failures_and_staging_progress) {
    config_.pools.resize(1);
    auto store = open_store();
    const BufferKey key = BufferKey::job("main", 5, 1);
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(5, "pool1", kib, 1017, "marshall", t_169502));
        txn.transition(key, S::staging_in);
        txn.commit();
    }
    const std::string progress = config_.state_dir + "/progress/" + key.str();
    {
        ReadSnapshot txn(*store);
        EXPECT_EQ(slurm_reason(job_status(txn, config_, 5).status.buffer), "BurstBufferStageIn");
    }
    std::ofstream(progress) << "{\"files_done\": 3, \"files_total\": 10, \"bytes_done\": 1024,"
                               " \"bytes_total\": 4096}";
    {
        ReadSnapshot txn(*store);
        const JobStatus job = job_status(txn, config_, 5);
        ASSERT_TRUE(job.progress);
        EXPECT_EQ(job.progress->files_total, 10u);
        EXPECT_NE(job_text(job, at(t_169504)).find("progress:   3/10 files, 1KiB/4KiB bytes\n"),
                  std::string::npos);
    }
    for (const char* garbage : {"", "{", "[]", "{\"files_done\": -1}", "{\"files_done\": \"3\"}"}) {
        std::ofstream(progress) << garbage;
        EXPECT_FALSE(read_progress(config_.state_dir, key)) << garbage;
    }
    {
        WriteTransaction txn(*store, "test");
        txn.transition(key, S::staging_in, "BurstBufferOperation", "source /x: No such file");
        txn.commit();
    }
    ReadSnapshot txn(*store);
    const JobStatus job = job_status(txn, config_, 5);
    const std::string text = job_text(job, at(t_169504));
    EXPECT_NE(text.find("reason:     BurstBufferOperation\nmessage:    source /x: No such file\n"),
              std::string::npos)
        << text;
}

// ---- publish and public/ ------------------------------------------------------------------

TEST_F(StatusTest, write_transaction_records_the_keys_and_queues_it_touched) {
    config_.pools.resize(1);
    auto store = open_store();
    {
        WriteTransaction txn(*store, "test");
        EXPECT_TRUE(txn.touched_keys().empty());
        Buffer b = job(1, "pool1", kib, 1017, "marshall", t_169502);
        txn.insert_buffer(b);
        Buffer pending = job(2, "pool1", kib, 1017, "marshall", t_169504);
        pending.state = S::pending;
        txn.insert_buffer(pending);
        txn.commit();
    }
    {
        WriteTransaction txn(*store, "test");
        txn.find_buffer(BufferKey::job("main", 1, 1));  // reads touch nothing
        EXPECT_TRUE(txn.touched_keys().empty());
        Buffer b = txn.transition(BufferKey::job("main", 1, 1), S::allocated);
        b.message = "updated";
        txn.update_buffer(b);
        txn.enqueue("pool1", "main.2.1", kib, ProcessId::self());
        EXPECT_EQ(txn.touched_keys(), (std::set<std::string>{"main.1.1", "main.2.1"}));
        EXPECT_TRUE(txn.touched_queues().empty()) << "an append moves nobody up";
        txn.commit();
    }
    {
        WriteTransaction txn(*store, "test");
        EXPECT_FALSE(txn.dequeue("main.9.1"));  // not queued: nothing changed
        EXPECT_TRUE(txn.touched_queues().empty());
        EXPECT_TRUE(txn.dequeue("main.2.1"));
        txn.transition(BufferKey::job("main", 1, 1), S::teardown);
        txn.transition(BufferKey::job("main", 1, 1), S::complete);
        txn.mark_reaped(BufferKey::job("main", 1, 1));
        EXPECT_EQ(txn.touched_keys(), (std::set<std::string>{"main.1.1", "main.2.1"}));
        EXPECT_EQ(txn.touched_queues(), std::set<std::string>{"pool1"});
    }
}

TEST_F(StatusTest, publish_writes_pools_json_and_one_file_per_live_buffer) {
    config_.pools.resize(1);
    auto store = open_store();
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", 100 * kib, 1017, "marshall", t_169502));
        publish(txn, *store, config_);
        txn.commit();
    }
    const std::string dir = config_.state_dir;
    EXPECT_EQ(read_file(dir + "/pools.json"),
              R"({"pools":[{"free":9900,"granularity":1024,"id":"pool1","quantity":10000}]})"
              "\n");
    EXPECT_EQ(stat_of(dir + "/pools.json").st_mode & 07777, 0644u);
    EXPECT_EQ(stat_of(dir + "/public/pools.json").st_mode & 07777, 0644u);
    EXPECT_EQ(stat_of(dir + "/public/buffers").st_mode & 07777, 0755u);
    EXPECT_EQ(stat_of(dir + "/public/buffers/1017").st_mode & 07777, 0755u);
    EXPECT_EQ(stat_of(dir + "/public/buffers/1017").st_uid, geteuid());
    EXPECT_EQ(stat_of(dir + "/public/buffers/1017/main.1.1.json").st_mode & 07777, 0644u);
    EXPECT_NE(::access((dir + "/public/buffers.json").c_str(), F_OK), 0) << "layout 1 is gone";

    const StatusSnapshot seen = read_public_status(config_, 4242);
    ASSERT_EQ(seen.pools.size(), 1u);
    EXPECT_EQ(seen.pools[0].used, 100 * kib);
    ASSERT_EQ(seen.buffers.size(), 1u);
    EXPECT_EQ(seen.buffers[0].buffer.key.str(), "main.1.1");
    EXPECT_EQ(seen.buffers[0].buffer.created, at(t_169502));
    EXPECT_EQ(seen.buffers[0].path, root_ + "/bb/pool1/job/main.1.1");
    EXPECT_EQ(seen.counts.at(S::allocated), 1u);
    EXPECT_EQ(job_status(seen, config_, 1).status.buffer.state, S::allocated);
}

TEST_F(StatusTest, publish_rewrites_only_the_touched_buffers_and_removes_final_ones) {
    config_.pools.resize(1);
    auto store = open_store();
    const std::string users = config_.state_dir + "/public/buffers";
    const std::string one = users + "/1017/main.1.1.json", two = users + "/1018/main.2.1.json";
    auto touch_one = [&](const std::string& message) {
        WriteTransaction txn(*store, "test");
        Buffer b = txn.get_buffer(BufferKey::job("main", 1, 1));
        b.message = message;
        txn.update_buffer(b);
        publish(txn, *store, config_);
        txn.commit();
    };
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", kib, 1017, "marshall", t_169502));
        allocate(txn, job(2, "pool1", kib, 1018, "other", t_169504));
        publish(txn, *store, config_);
        txn.commit();
    }
    touch_one("first");  // also settles the first publish's keys (see publish())
    const ino_t two_before = stat_of(two).st_ino;
    const ino_t one_before = stat_of(one).st_ino;
    touch_one("second");
    EXPECT_EQ(stat_of(two).st_ino, two_before) << "an untouched buffer's file is left alone";
    EXPECT_NE(stat_of(one).st_ino, one_before);
    EXPECT_NE(read_file(one).find("\"message\": \"second\""), std::string::npos) << read_file(one);

    {
        WriteTransaction txn(*store, "test");
        txn.transition(BufferKey::job("main", 1, 1), S::teardown);
        txn.transition(BufferKey::job("main", 1, 1), S::complete);
        publish(txn, *store, config_);
        txn.commit();
    }
    EXPECT_NE(::access(one.c_str(), F_OK), 0) << "a final buffer has no file";
    EXPECT_NE(::access((users + "/1017").c_str(), F_OK), 0) << "nor does a user without buffers";
    EXPECT_EQ(stat_of(two).st_ino, two_before);
    const StatusSnapshot seen = read_public_status(config_, 4242);
    ASSERT_EQ(seen.buffers.size(), 1u);
    EXPECT_EQ(seen.buffers[0].buffer.key.str(), "main.2.1");
}

TEST_F(StatusTest, the_next_publish_undoes_a_rolled_back_one) {
    config_.pools.resize(1);
    auto store = open_store();
    const std::string file = config_.state_dir + "/public/buffers/1017/main.1.1.json";
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", kib, 1017, "marshall", t_169502));
        publish(txn, *store, config_);
    }  // rolled back, as a kill between publish and commit would
    EXPECT_EQ(::access(file.c_str(), F_OK), 0);
    {
        WriteTransaction txn(*store, "test");
        publish(txn, *store, config_);  // touches nothing itself
        txn.commit();
    }
    EXPECT_NE(::access(file.c_str(), F_OK), 0);
    EXPECT_TRUE(read_public_status(config_, 4242).buffers.empty());
}

TEST_F(StatusTest, unsettled_is_rewritten_in_place_and_a_torn_tail_is_harmless) {
    config_.pools.resize(1);
    auto store = open_store();
    const std::string unsettled = config_.state_dir + "/public/.unsettled";
    const auto contents = [&] {
        std::ifstream in(unsettled);
        return std::string(std::istreambuf_iterator<char>(in), {});
    };
    const auto inode = [&] {
        struct stat st {};
        EXPECT_EQ(::stat(unsettled.c_str(), &st), 0);
        return st.st_ino;
    };
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", kib, 1017, "marshall", t_169502));
        allocate(txn, job(2, "pool1", kib, 1017, "marshall", t_169504));
        publish(txn, *store, config_);
        txn.commit();
    }
    EXPECT_EQ(contents(), "1017 main.1.1\n1017 main.2.1\n");
    const ino_t first = inode();
    {
        WriteTransaction txn(*store, "test");
        txn.transition(BufferKey::job("main", 1, 1), S::teardown);
        publish(txn, *store, config_);
        txn.commit();
    }
    EXPECT_EQ(contents(), "1017 main.1.1\n");
    EXPECT_EQ(inode(), first);
    // What a kill between the write and the truncation leaves: the new keys, then part of the
    // old ones (all settled already), here cut in the middle of a line.
    {
        std::ofstream out(unsettled, std::ios::app);
        out << "7 main.2.1\n1017 main.2";
    }
    {
        WriteTransaction txn(*store, "test");
        publish(txn, *store, config_);
        txn.commit();
    }
    EXPECT_EQ(contents(), "\n");
    EXPECT_EQ(inode(), first);
    if (geteuid() == 0) {  // root gives it (back) to public/'s owner, who rewrites it in place
        ASSERT_EQ(::chown(unsettled.c_str(), 4242, 4242), 0);
        {
            WriteTransaction txn(*store, "test");
            txn.transition(BufferKey::job("main", 2, 1), S::teardown);
            publish(txn, *store, config_);
            txn.commit();
        }
        struct stat file {};
        struct stat dir {};
        ASSERT_EQ(::stat(unsettled.c_str(), &file), 0);
        ASSERT_EQ(::stat((config_.state_dir + "/public").c_str(), &dir), 0);
        EXPECT_EQ(file.st_uid, dir.st_uid);
        EXPECT_EQ(file.st_gid, dir.st_gid);
        EXPECT_EQ(contents(), "1017 main.2.1\n");
    }
    const StatusSnapshot seen = read_public_status(config_, 1017);
    ASSERT_EQ(seen.buffers.size(), 2u);
    EXPECT_EQ(seen.buffers[0].buffer.state, S::teardown);
    EXPECT_EQ(seen.buffers[1].buffer.state, geteuid() == 0 ? S::teardown : S::allocated);
}

#ifdef BBKIT_FAULT_INJECTION
// Killed once public/.unsettled names only its own keys, a publish has already settled the keys
// the last one left unsettled: the file of a rolled-back buffer does not outlive both.
TEST_F(StatusTest, a_publish_killed_after_naming_its_keys_settled_the_previous_ones_first) {
    ::testing::FLAGS_gtest_death_test_style = "threadsafe";  // a fresh process reads BBKIT_FAULT
    config_.pools.resize(1);
    auto store = open_store();
    const std::string file = config_.state_dir + "/public/buffers/1017/main.1.1.json";
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", kib, 1017, "marshall", t_169502));
        publish(txn, *store, config_);
    }  // rolled back: main.1.1's file shows a buffer that never was
    ASSERT_EQ(::access(file.c_str(), F_OK), 0);
    // The child runs this test again from the start, in a state directory of its own whose
    // first publish (above) is a full one, without that point; then works on this process's.
    ::setenv("BBKIT_TEST_STATE_DIR", config_.state_dir.c_str(), 0);
    ::setenv("BBKIT_FAULT", "publish.unsettled-written", 1);
    EXPECT_EXIT(
        {
            std::system(("rm -rf '" + root_ + "'").c_str());  // the child's own, unused
            config_.state_dir = std::getenv("BBKIT_TEST_STATE_DIR");
            // The parent's pool too (public/.settings names the pool paths).
            config_.pools[0].path = fs_parent(config_.state_dir) + "/bb/pool1";
            StateStore shared(config_);
            WriteTransaction txn(shared, "test");
            allocate(txn, job(2, "pool1", kib, 1018, "other", t_169504));
            publish(txn, shared, config_);
            std::exit(0);
        },
        ::testing::KilledBySignal(SIGKILL), "");
    ::unsetenv("BBKIT_FAULT");
    ::unsetenv("BBKIT_TEST_STATE_DIR");
    EXPECT_NE(::access(file.c_str(), F_OK), 0) << "the rolled-back buffer's file is left";
}
#endif

TEST_F(StatusTest, a_dequeue_republishes_the_requests_behind_it) {
    config_.pools.resize(1);
    auto store = open_store();
    {
        WriteTransaction txn(*store, "test");
        for (std::uint64_t id : {1, 2, 3}) {
            Buffer b = job(id, "pool1", kib, 1017, "marshall", t_169502 + id);
            b.state = S::pending;
            txn.insert_buffer(b);
            txn.enqueue("pool1", b.key.str(), kib, ProcessId::self());
        }
        publish(txn, *store, config_);
        txn.commit();
    }
    {
        WriteTransaction txn(*store, "test");
        txn.dequeue("main.1.1");
        txn.transition(BufferKey::job("main", 1, 1), S::allocating);
        publish(txn, *store, config_);
        txn.commit();
    }
    const StatusSnapshot seen = read_public_status(config_, 4242);
    ASSERT_EQ(seen.buffers.size(), 3u);
    EXPECT_FALSE(seen.buffers[0].queue_position);
    EXPECT_EQ(seen.buffers[1].queue_position, std::optional<std::size_t>(1));
    EXPECT_EQ(seen.buffers[2].queue_position, std::optional<std::size_t>(2));
}

TEST_F(StatusTest, private_data_changes_resync_the_user_directories) {
    if (geteuid() != 0)
        GTEST_SKIP() << "giving directories to other users needs root";
    config_.pools.resize(1);
    auto store = open_store();
    const std::string pub = config_.state_dir + "/public";
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", kib, 1017, "marshall", t_169502));
        allocate(txn, job(2, "pool1", 2 * kib, 1018, "other", t_169504));
        publish(txn, *store, config_);
        txn.commit();
    }
    std::ofstream(pub + "/buffers.json") << "[]";  // layout 1's files go at the next resync
    std::ofstream(pub + "/buffers.1017.json") << "[]";
    auto publish_nothing = [&] {
        WriteTransaction txn(*store, "test");
        publish(txn, *store, config_);  // touches no buffer: only a resync changes the tree
        txn.commit();
    };

    config_.flags.private_data = true;
    publish_nothing();
    EXPECT_NE(::access((pub + "/buffers.json").c_str(), F_OK), 0) << "shared file must go";
    EXPECT_NE(::access((pub + "/buffers.1017.json").c_str(), F_OK), 0);
    EXPECT_EQ(stat_of(pub + "/buffers").st_mode & 07777, 0755u);
    for (uid_t uid : {1017u, 1018u}) {
        const struct stat st = stat_of(pub + "/buffers/" + std::to_string(uid));
        EXPECT_EQ(st.st_mode & 07777, 0700u);
        EXPECT_EQ(st.st_uid, uid);
    }
    const StatusSnapshot mine = read_public_status(config_, 1018);
    ASSERT_EQ(mine.buffers.size(), 1u);
    EXPECT_EQ(mine.buffers[0].buffer.key.job_id, 2u);
    EXPECT_TRUE(read_public_status(config_, 999).buffers.empty());

    config_.flags.private_data = false;
    publish_nothing();
    for (uid_t uid : {1017u, 1018u}) {
        const struct stat st = stat_of(pub + "/buffers/" + std::to_string(uid));
        EXPECT_EQ(st.st_mode & 07777, 0755u);
        EXPECT_EQ(st.st_uid, 0u);
    }
    EXPECT_EQ(read_public_status(config_, 999).buffers.size(), 2u);
}

TEST_F(StatusTest, publish_restores_a_user_directorys_mode_when_writing_into_it) {
    if (geteuid() != 0)
        GTEST_SKIP() << "giving directories to other users needs root";
    config_.pools.resize(1);
    config_.flags.private_data = true;
    auto store = open_store();
    const std::string dir = config_.state_dir + "/public/buffers/1017";
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", kib, 1017, "marshall", t_169502));
        publish(txn, *store, config_);
        txn.commit();
    }
    ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);  // what its owner may do
    {
        WriteTransaction txn(*store, "test");
        txn.transition(BufferKey::job("main", 1, 1), S::staging_in);
        publish(txn, *store, config_);
        txn.commit();
    }
    EXPECT_EQ(stat_of(dir).st_mode & 07777, 0700u);
    EXPECT_EQ(stat_of(dir).st_uid, 1017u);
}

TEST_F(StatusTest, a_resync_removes_stale_files_and_directories) {
    config_.pools.resize(1);
    auto store = open_store();
    const std::string users = config_.state_dir + "/public/buffers";
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", kib, 1017, "marshall", t_169502));
        publish(txn, *store, config_);
        txn.commit();
    }
    std::ofstream(users + "/1017/main.9.1.json") << "{}";         // a buffer long gone
    std::ofstream(users + "/1017/main.1.1.json.tmp.1.2") << "{";  // a killed writer's
    ASSERT_EQ(::mkdir((users + "/555").c_str(), 0755), 0);
    std::ofstream(users + "/555/main.8.1.json") << "{}";
    ASSERT_EQ(::unlink((config_.state_dir + "/public/.settings").c_str()), 0);
    {
        WriteTransaction txn(*store, "test");
        publish(txn, *store, config_);
        txn.commit();
    }
    EXPECT_NE(::access((users + "/1017/main.9.1.json").c_str(), F_OK), 0);
    EXPECT_NE(::access((users + "/1017/main.1.1.json.tmp.1.2").c_str(), F_OK), 0);
    EXPECT_NE(::access((users + "/555").c_str(), F_OK), 0);
    EXPECT_EQ(::access((users + "/1017/main.1.1.json").c_str(), F_OK), 0);
    EXPECT_EQ(read_public_status(config_, 4242).buffers.size(), 1u);
}

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

TEST_F(StatusTest, replace_file_swaps_content_and_mode_in_one_rename) {
    const std::string path = root_ + "/snapshot";
    replace_file(path, "old", 0600);
    replace_file(path, "new", 0644);
    EXPECT_EQ(read_file(path), "new");
    EXPECT_EQ(stat_of(path).st_mode & 07777, 0644u);
    EXPECT_EQ(std::system(("test $(ls -A '" + root_ + "' | wc -l) -eq 1").c_str()), 0)
        << "no temporary left";
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

// ---- Prometheus ---------------------------------------------------------------------------

TEST(Prometheus, exposes_pool_bytes_buffers_queue_and_draining) {
    StatusSnapshot snapshot;
    snapshot.pools.push_back(pool("nvme", 4 * kib, kib, kib, kib));
    snapshot.pools[0].queued = 2;
    snapshot.pools[0].draining = true;
    snapshot.counts[S::allocated] = 3;
    const std::string text = prometheus_text(snapshot);
    EXPECT_EQ(text.substr(0, text.find("bbkit_buffers{")),
              "# HELP bbkit_pool_bytes Burst buffer pool space in bytes, by kind.\n"
              "# TYPE bbkit_pool_bytes gauge\n"
              "bbkit_pool_bytes{pool=\"nvme\",kind=\"total\"} 4096\n"
              "bbkit_pool_bytes{pool=\"nvme\",kind=\"used\"} 1024\n"
              "bbkit_pool_bytes{pool=\"nvme\",kind=\"trash\"} 1024\n"
              "bbkit_pool_bytes{pool=\"nvme\",kind=\"free\"} 2048\n"
              "# HELP bbkit_buffers Burst buffers by state.\n"
              "# TYPE bbkit_buffers gauge\n");
    EXPECT_NE(text.find("bbkit_buffers{state=\"allocated\"} 3\n"), std::string::npos);
    EXPECT_NE(text.find("bbkit_buffers{state=\"teardown-fail\"} 0\n"), std::string::npos);
    EXPECT_NE(text.find("# TYPE bbkit_pool_queue_length gauge\n"
                        "bbkit_pool_queue_length{pool=\"nvme\"} 2\n"),
              std::string::npos);
    EXPECT_NE(text.find("# TYPE bbkit_pool_draining gauge\nbbkit_pool_draining{pool=\"nvme\"} 1\n"),
              std::string::npos);
    EXPECT_EQ(text.back(), '\n');
}

TEST_F(StatusTest, availability_is_in_every_view_and_in_the_published_snapshot) {
    config_.pools.resize(2);
    auto store = open_store();
    std::filesystem::remove(config_.pools[1].path + "/.bbkit-pool");
    {
        WriteTransaction txn(*store, "test");
        txn.set_draining("pool1", true);
        publish_all(txn, *store, config_);
        txn.commit();
    }
    ReadSnapshot txn(*store);
    const StatusSnapshot snapshot = read_status(txn, config_);
    EXPECT_EQ(snapshot.pools[0].availability, PoolAvailability::draining);
    EXPECT_EQ(snapshot.pools[1].availability, PoolAvailability::unavailable);
    EXPECT_NE(burst_text(snapshot, config_).find("UsedSpace=0 Availability=unavailable\n"),
              std::string::npos);
    EXPECT_EQ(burst_json(snapshot, config_)["pools"][1]["availability"], "unavailable");
    EXPECT_EQ(pool_status_json(snapshot.pools[0])["availability"], "draining");
    const std::string metrics = prometheus_text(snapshot);
    EXPECT_NE(
        metrics.find("bbkit_pool_availability{pool=\"pool2\",availability=\"unavailable\"} 1"),
        std::string::npos);
    EXPECT_NE(metrics.find("bbkit_pool_availability{pool=\"pool2\",availability=\"up\"} 0"),
              std::string::npos);
    EXPECT_NE(read_file(config_.state_dir + "/public/pools.json")
                  .find("\"availability\": \"unavailable\""),
              std::string::npos);
    EXPECT_NE(read_file(config_.state_dir + "/pools.json")
                  .find(R"({"free":0,"granularity":2,"id":"pool2")"),
              std::string::npos);
    const PoolStatus back = pool_status_from_json(pool_status_json(snapshot.pools[1]));
    EXPECT_EQ(back.availability, PoolAvailability::unavailable);
    EXPECT_EQ(back.uuid, "uuid-pool2");
}

}  // namespace
}  // namespace bbkit
