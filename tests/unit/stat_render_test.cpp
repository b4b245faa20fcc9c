#include "bbkit/stat_render.hpp"

#include <gtest/gtest.h>

#include "bbkit/error.hpp"
#include "bbkit/publish.hpp"
#include "status_fixture.hpp"

namespace bbkit {
namespace {

using namespace fixture;

// ---- scontrol show burst ------------------------------------------------------------------

// The guide's example has the layout of 21.08 to 23.11 (no PollInterval line).
TEST_F(StatusTest, burst_matches_the_guides_lua_example_byte_for_byte) {
    config_.slurm_release = SlurmRelease{21, 8};
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
        "UsedSpace=250KiB\n"
        "  PoolName[1]=pool2 Granularity=2 TotalSpace=10 FreeSpace=10 UsedSpace=0\n"
        "  PoolName[2]=pool3 Granularity=1 TotalSpace=4 FreeSpace=4 UsedSpace=0\n"
        "  PoolName[3]=pool4 Granularity=1 TotalSpace=5GB FreeSpace=4GB UsedSpace=1GB\n"
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
    config_.slurm_release = SlurmRelease{23, 11};
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
              "UsedSpace=0\n"
              "  Flags=DisablePersistent,PrivateData,TeardownFailure\n"
              "  StageInTimeout=300 StageOutTimeout=300 ValidateTimeout=5 OtherTimeout=120\n"
              "  DenyUsers=eve,1234\n"
              "  GetSysState=(null)\n"
              "  GetSysStatus=(null)\n");
}

// From 24.05 Slurm prints burst_buffer.conf's PollInterval on a line of its own after Flags.
TEST_F(StatusTest, burst_of_24_05_and_later_prints_poll_interval_after_flags) {
    config_.slurm_release = SlurmRelease{24, 11};
    config_.poll_interval = 30;
    config_.allow_users = {"alice"};
    config_.pools.resize(1);
    auto store = open_store();
    ReadSnapshot txn(*store);
    EXPECT_EQ(burst_text(read_status(txn, config_), config_),
              "Name=bbkit DefaultPool=(null) Granularity=1 TotalSpace=0 FreeSpace=0 UsedSpace=0\n"
              "  PoolName[0]=pool1 Granularity=1KiB TotalSpace=10000KiB FreeSpace=10000KiB "
              "UsedSpace=0\n"
              "  Flags=DisablePersistent\n"
              "  PollInterval=30\n"
              "  StageInTimeout=86400 StageOutTimeout=86400 ValidateTimeout=5 OtherTimeout=300\n"
              "  AllowUsers=alice\n"
              "  GetSysState=(null)\n"
              "  GetSysStatus=(null)\n");
    EXPECT_EQ(burst_json(read_status(txn, config_), config_)["poll_interval"], 30);
}

// Without slurm_release, the newest layout bbkit knows, with Slurm's default PollInterval.
TEST_F(StatusTest, burst_without_a_release_has_the_newest_layout) {
    config_.pools.resize(1);
    auto store = open_store();
    ReadSnapshot txn(*store);
    const std::string text = burst_text(read_status(txn, config_), config_);
    config_.slurm_release = known_slurm_releases().back();
    EXPECT_EQ(text, burst_text(read_status(txn, config_), config_));
    EXPECT_NE(text.find("  Flags=DisablePersistent\n  PollInterval=15\n  StageInTimeout="),
              std::string::npos)
        << text;
}

// 20.11 and earlier named the pool lines AltPoolName.
TEST_F(StatusTest, burst_of_20_11_names_the_pools_alt_pool_name) {
    config_.slurm_release = SlurmRelease{20, 11};
    config_.pools.resize(2);
    auto store = open_store();
    ReadSnapshot txn(*store);
    EXPECT_EQ(burst_text(read_status(txn, config_), config_),
              "Name=bbkit DefaultPool=(null) Granularity=1 TotalSpace=0 FreeSpace=0 UsedSpace=0\n"
              "  AltPoolName[0]=pool1 Granularity=1KiB TotalSpace=10000KiB FreeSpace=10000KiB "
              "UsedSpace=0\n"
              "  AltPoolName[1]=pool2 Granularity=2 TotalSpace=10 FreeSpace=10 UsedSpace=0\n"
              "  Flags=DisablePersistent\n"
              "  StageInTimeout=86400 StageOutTimeout=86400 ValidateTimeout=5 OtherTimeout=300\n"
              "  GetSysState=(null)\n"
              "  GetSysStatus=(null)\n");
}

// Each release's lines (bbkit(7), Slurm releases): the pool lines' key and whether PollInterval
// is there; everything else is the same in every release.
TEST_F(StatusTest, burst_follows_each_known_release) {
    config_.pools.resize(1);
    config_.poll_interval = 7;
    auto store = open_store();
    ReadSnapshot txn(*store);
    const StatusSnapshot snapshot = read_status(txn, config_);
    const std::string pool_line =
        "[0]=pool1 Granularity=1KiB TotalSpace=10000KiB FreeSpace=10000KiB UsedSpace=0\n";
    for (const SlurmRelease release : known_slurm_releases()) {
        config_.slurm_release = release;
        const bool polls = !(release < SlurmRelease{24, 5});
        const std::string key = release < SlurmRelease{21, 8} ? "AltPoolName" : "PoolName";
        EXPECT_EQ(burst_text(snapshot, config_),
                  "Name=bbkit DefaultPool=(null) Granularity=1 TotalSpace=0 FreeSpace=0 "
                  "UsedSpace=0\n  " +
                      key + pool_line + "  Flags=DisablePersistent\n" +
                      (polls ? "  PollInterval=7\n" : "") +
                      "  StageInTimeout=86400 StageOutTimeout=86400 ValidateTimeout=5 "
                      "OtherTimeout=300\n  GetSysState=(null)\n  GetSysStatus=(null)\n")
            << to_string(release);
    }
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

// ---- dwstat tables ------------------------------------------------------------------------

TEST(PoolsTable, is_right_aligned_with_slurm_sizes) {
    EXPECT_EQ(pools_table({pool("wlm_pool", 5800 * gib, gib, 1200 * gib), pool("p", 10, 2)}),
              "    pool units quantity    free gran state\n"
              "wlm_pool bytes  5800GiB 4600GiB 1GiB    up\n"
              "       p bytes       10      10    2    up\n");
}

TEST(PoolsTable, without_pools_prints_the_header) {
    EXPECT_EQ(pools_table({}), "pool units quantity free gran state\n");
}

TEST(Dwstat, sizes_print_as_datawarp_printed_them) {
    EXPECT_EQ(dwstat_size(0), "0B");
    EXPECT_EQ(dwstat_size(48), "48B");
    EXPECT_EQ(dwstat_size(1023), "1023B");
    EXPECT_EQ(dwstat_size(kib), "1KiB");
    EXPECT_EQ(dwstat_size(1536), "1.5KiB");
    EXPECT_EQ(dwstat_size(gib), "1GiB");
    EXPECT_EQ(dwstat_size(512 * 1024 * kib), "512MiB");
    EXPECT_EQ(dwstat_size(8004444650209ULL), "7.28TiB");  // the Slurm guide's wlm_pool
    EXPECT_EQ(dwstat_size(1024 * 1024 - 1), "1MiB");      // 1023.999KiB rounds up a unit
    EXPECT_EQ(dwstat_size(gib + gib / 100), "1.01GiB");
    EXPECT_EQ(dwstat_size(UINT64_MAX), "16EiB");
}

TEST(Dwstat, empty_tables_print_datawarps_lines) {
    StatusSnapshot empty;
    EXPECT_EQ(dwstat_text("pools", empty), "no pools\n");
    EXPECT_EQ(dwstat_text("sessions", empty), "no sessions\n");
    EXPECT_EQ(dwstat_text("instances", empty), "no instances\n");
    EXPECT_EQ(dwstat_text("configurations", empty), "no scratch, cache, swap configurations\n");
    EXPECT_EQ(dwstat_text("activations", empty), "no activations\n");
    EXPECT_EQ(dwstat_text("most", empty),
              "no pools\n\nno sessions\n\nno instances\n\nno scratch, cache, swap "
              "configurations\n\nno activations\n");
    EXPECT_THROW(dwstat_text("burst", empty), Error);
}

TEST(Dwstat, pools_have_datawarps_five_columns) {
    StatusSnapshot snapshot;
    snapshot.pools = {pool("wlm_pool", 8004444650209ULL, gib, 0)};
    EXPECT_EQ(dwstat_text("pools", snapshot),
              "    pool units quantity    free gran\n"
              "wlm_pool bytes  7.28TiB 7.28TiB 1GiB\n");
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

TEST(JobView, used_bytes_show_only_when_a_project_quota_counted_them) {
    JobStatus job;
    job.status.buffer = Buffer::for_key(BufferKey::job("main", 3, 1));
    job.status.buffer.state = S::running;
    job.status.buffer.allocated_bytes = 4 * kib;
    const TimePoint now = std::chrono::system_clock::now();
    EXPECT_EQ(job_text(job, now).find("used:"), std::string::npos);
    EXPECT_TRUE(job_json(job, now)["used_bytes"].is_null());
    job.status.used_bytes = 3000;
    EXPECT_NE(job_text(job, now).find("allocated:  4KiB\nused:       3000 bytes (project quota)\n"),
              std::string::npos)
        << job_text(job, now);
    EXPECT_EQ(job_json(job, now)["used_bytes"], 3000);
}

TEST_F(StatusTest, job_shows_queue_position_reason_and_directory) {
    config_.pools.resize(1);
    auto store = open_store();
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", 9000 * kib, 1017, "marshall", t_169502));
        Buffer waiting = job(2, "pool1", 2000 * kib, 1017, "marshall", t_169504);
        waiting.state = S::pending;
        txn.insert_buffer(waiting);
        txn.enqueue("pool1", waiting.key, waiting.requested_bytes, ProcessId::self());
        txn.commit();
    }
    ReadSnapshot txn(*store);
    const JobStatus job = job_status(txn, config_, 2);
    EXPECT_EQ(job.status.queue_position, std::optional<std::size_t>(1));
    EXPECT_EQ(job.status.path, root_ + "/bb/pool1/" + job.status.buffer.directory);
    EXPECT_EQ(job.status.path.rfind(root_ + "/bb/pool1/job/main.2.1.", 0), 0u) << job.status.path;
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

TEST(BuffersView, ages_read_at_a_glance) {
    using std::chrono::seconds;
    EXPECT_EQ(age_text(seconds(0)), "0s");
    EXPECT_EQ(age_text(seconds(59)), "59s");
    EXPECT_EQ(age_text(seconds(60)), "1m00s");
    EXPECT_EQ(age_text(seconds(3599)), "59m59s");
    EXPECT_EQ(age_text(seconds(3600)), "1h00m");
    EXPECT_EQ(age_text(seconds(86399)), "23h59m");
    EXPECT_EQ(age_text(seconds(2 * 86400 + 4 * 3600 + 59)), "2d04h");
    EXPECT_EQ(age_text(seconds(-5)), "0s");  // a clock set back: never negative
}

TEST_F(StatusTest, buffers_lists_reasons_and_each_pools_queue_in_order) {
    config_.pools.resize(1);
    auto store = open_store();
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", 9000 * kib, 1017, "marshall", t_169502));
        for (std::uint64_t id : {2, 3}) {
            Buffer waiting = job(id, "pool1", 2000 * kib, 1017, "marshall", t_169504);
            waiting.state = S::pending;
            txn.insert_buffer(waiting);
            txn.enqueue("pool1", waiting.key, waiting.requested_bytes, ProcessId::self());
        }
        txn.commit();
    }
    ReadSnapshot txn(*store);
    const StatusSnapshot snapshot = read_status(txn, config_);
    const std::string text = buffers_table(snapshot, at(t_169504 + 125));
    EXPECT_EQ(text,
              "job  user            pool      size  state        age  reason\n"
              "  1  marshall(1017)  pool1  9000KiB  allocated  3m37s\n"
              "  2  marshall(1017)  pool1  2000KiB  pending    2m05s  waiting for space in "
              "pool1, 1 (next) in its queue\n"
              "  3  marshall(1017)  pool1  2000KiB  pending    2m05s  waiting for space in "
              "pool1, 2 in its queue\n"
              "pool pool1: 2 waiting: 2 3\n")
        << text;
    const nlohmann::json json = buffers_json(snapshot, at(t_169504 + 125));
    EXPECT_EQ(json["buffers"].size(), 3u);
    EXPECT_EQ(json["buffers"][1]["queue_position"], 1);
    EXPECT_EQ(json["buffers"][1]["age_seconds"], 125);
    EXPECT_EQ(json["buffers"][0]["reason"], "");
    EXPECT_EQ(json["waiting"]["pool1"], nlohmann::json({"2", "3"}));
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
        // An older stager's record: the four counters, read as copying.
        ReadSnapshot txn(*store);
        JobStatus job = job_status(txn, config_, 5);
        ASSERT_TRUE(job.progress);
        EXPECT_EQ(job.progress->files_total, 10u);
        // Nobody runs the stage: its last record has no pace.
        EXPECT_NE(job_text(job, at(t_169504)).find("progress:   3/10 entries, 1.0KiB/4.0KiB\n"),
                  std::string::npos)
            << job_text(job, at(t_169504));
        job.status.buffer.run_lock_holder = ProcessId::self();
        EXPECT_NE(
            job_text(job, at(t_169504)).find("progress:   3/10 entries, 1.0KiB/4.0KiB (copying)\n"),
            std::string::npos)
            << job_text(job, at(t_169504));
        const nlohmann::json json = job_json(job, at(t_169504));
        EXPECT_EQ(json["progress"]["phase"], "copying");
        EXPECT_EQ(json["progress"]["bytes_total"], 4096);
        for (const char* key : {"direction", "files_per_second", "bytes_per_second", "eta_seconds",
                                "started", "updated", "pid"})
            EXPECT_TRUE(json["progress"].at(key).is_null()) << key;
    }
    {
        // This stager's record, while it runs the stage: rates, ETA and phase.
        StagingProgress p;
        p.direction = StageDirection::in;
        p.phase = StagePhase::copying;
        p.files_done = 12034;
        p.files_total = 100000;
        p.bytes_done = 1258291;
        p.bytes_total = 10276045;
        p.files_per_second = 3400;
        p.bytes_per_second = 2202009;
        p.eta_seconds = 26;
        p.started = at(t_169504);
        p.updated = at(t_169504 + 12);
        p.pid = 4242;
        std::ofstream(progress) << progress_record(p);
        ReadSnapshot txn(*store);
        JobStatus job = job_status(txn, config_, 5);
        job.status.buffer.run_lock_holder = ProcessId::self();
        const std::string text = job_text(job, at(t_169504 + 12));
        EXPECT_NE(text.find("progress:   12,034/100,000 entries, 1.2MiB/9.8MiB, 3,400 entries/s, "
                            "2.1MiB/s, ETA 26 s (copying)\n"),
                  std::string::npos)
            << text;
        const nlohmann::json json = job_json(job, at(t_169504 + 12));
        const nlohmann::json& j = json["progress"];
        EXPECT_EQ(j["direction"], "in");
        EXPECT_EQ(j["files_done"], 12034);
        EXPECT_EQ(j["files_per_second"], 3400.0);
        EXPECT_EQ(j["bytes_per_second"], 2202009.0);
        EXPECT_EQ(j["eta_seconds"], 26);
        EXPECT_EQ(j["started"], "2021-08-11T10:13:38");
        EXPECT_EQ(j["updated"], "2021-08-11T10:13:50");
        EXPECT_EQ(j["pid"], 4242);
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

// ---- Prometheus ---------------------------------------------------------------------------

TEST(Prometheus, exposes_pool_bytes_buffers_queue_and_draining) {
    StatusSnapshot snapshot;
    snapshot.pools.push_back(pool("nvme", 4 * kib, kib, kib, kib));
    snapshot.pools[0].queued = 2;
    snapshot.pools[0].draining = true;
    snapshot.counts[S::allocated] = 3;
    const std::string text = prometheus_text(snapshot, Config{});
    EXPECT_EQ(text.substr(0, text.find("bbkit_buffers{")),
              "# HELP bbkit_pool_bytes Burst buffer pool space in bytes, by kind.\n"
              "# TYPE bbkit_pool_bytes gauge\n"
              "bbkit_pool_bytes{pool=\"nvme\",kind=\"total\"} 4096\n"
              "bbkit_pool_bytes{pool=\"nvme\",kind=\"used\"} 1024\n"
              "bbkit_pool_bytes{pool=\"nvme\",kind=\"trash\"} 1024\n"
              "bbkit_pool_bytes{pool=\"nvme\",kind=\"free\"} 2048\n"
              "# HELP bbkit_buffers Live burst buffers by state.\n"
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

// What alerts watch: stalled stages by direction, failed buffers, the queue's longest wait;
// and no count of finished records, which would grow as long as the state directory lives.
TEST(Prometheus, exposes_stalled_and_failed_stages_and_the_queues_longest_wait) {
    StatusSnapshot snapshot;
    snapshot.pools.push_back(pool("nvme", 4 * kib, kib, 0, 0));
    snapshot.pools.push_back(pool("idle", 4 * kib, 0, 0, 0));
    snapshot.counts[S::complete] = 12345;
    const auto add = [&](std::uint64_t id, S state, const std::string& failure, int age) {
        BufferStatus status;
        status.buffer.key = BufferKey::job("main", id, 1);
        status.buffer.pool = "nvme";
        status.buffer.state = state;
        status.buffer.failure = failure;
        status.buffer.created = std::chrono::system_clock::now() - std::chrono::seconds(age);
        snapshot.buffers.push_back(status);
    };
    add(1, S::staging_in, "", 10);  // no stager: stalled
    add(2, S::staging_out, "stage-out failed: EIO", 20);
    add(3, S::staging_out, "", 20);
    add(4, S::pending, "", 100);
    add(5, S::pending, "", 40);
    const std::string text = prometheus_text(snapshot, Config{});
    EXPECT_EQ(text.find("state=\"complete\""), std::string::npos) << text;
    EXPECT_EQ(text.find("state=\"deleted\""), std::string::npos) << text;
    EXPECT_NE(text.find("bbkit_stages_stalled{pool=\"nvme\",direction=\"in\"} 1\n"
                        "bbkit_stages_stalled{pool=\"nvme\",direction=\"out\"} 2\n"
                        "bbkit_stages_stalled{pool=\"idle\",direction=\"in\"} 0\n"
                        "bbkit_stages_stalled{pool=\"idle\",direction=\"out\"} 0\n"),
              std::string::npos)
        << text;
    EXPECT_NE(
        text.find("bbkit_buffers_failed{pool=\"nvme\"} 1\nbbkit_buffers_failed{pool=\"idle\"} 0\n"),
        std::string::npos)
        << text;
    const auto where = text.find("bbkit_pool_queue_oldest_seconds{pool=\"nvme\"} ");
    ASSERT_NE(where, std::string::npos) << text;
    const long waited = std::stol(text.substr(where + 45));
    EXPECT_GE(waited, 100);
    EXPECT_LT(waited, 160);
    EXPECT_NE(text.find("bbkit_pool_queue_oldest_seconds{pool=\"idle\"} 0\n"), std::string::npos);
}

TEST(Prometheus, exposes_each_buffers_allocated_and_known_used_bytes_unless_private) {
    StatusSnapshot snapshot;
    snapshot.pools.push_back(pool("nvme", 4 * kib, kib, 0, 0));
    BufferStatus measured;
    measured.buffer.key = BufferKey::job("main", 7, 1);
    measured.buffer.pool = "nvme";
    measured.buffer.state = S::running;
    measured.buffer.allocated_bytes = kib;
    measured.used_bytes = 512;
    BufferStatus unmeasured = measured;
    unmeasured.buffer.key = BufferKey::job("main", 8, 1);
    unmeasured.used_bytes.reset();
    BufferStatus ended = measured;
    ended.buffer.key = BufferKey::job("main", 9, 1);
    ended.buffer.state = S::complete;
    snapshot.buffers = {measured, unmeasured, ended};
    const std::string text = prometheus_text(snapshot, Config{});
    EXPECT_NE(text.find("# TYPE bbkit_buffer_bytes gauge\n"
                        "bbkit_buffer_bytes{pool=\"nvme\",buffer=\"main.7.1\",kind=\"allocated\"} "
                        "1024\n"
                        "bbkit_buffer_bytes{pool=\"nvme\",buffer=\"main.7.1\",kind=\"used\"} 512\n"
                        "bbkit_buffer_bytes{pool=\"nvme\",buffer=\"main.8.1\",kind=\"allocated\"} "
                        "1024\n"),
              std::string::npos)
        << text;
    EXPECT_EQ(text.find("main.9.1"), std::string::npos);
    EXPECT_EQ(text.find("main.8.1\",kind=\"used"), std::string::npos);
    Config private_data;
    private_data.flags.private_data = true;
    EXPECT_EQ(prometheus_text(snapshot, private_data).find("main.7.1"), std::string::npos);
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
    // Slurm's text has no such field (sites grep it): the JSON has it.
    EXPECT_EQ(burst_text(snapshot, config_).find("Availability"), std::string::npos);
    EXPECT_EQ(burst_json(snapshot, config_)["pools"][1]["availability"], "unavailable");
    EXPECT_EQ(pool_status_json(snapshot.pools[0])["availability"], "draining");
    const std::string metrics = prometheus_text(snapshot, Config{});
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
