#include "bbkit/accounting.hpp"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <string>

#include "bbkit/error.hpp"
#include "bbkit/history_render.hpp"
#include "bbkit/time_spec.hpp"
#include "code_of.hpp"

namespace bbkit {
namespace {

using S = BufferState;
using Clock = std::chrono::system_clock;
constexpr std::uint64_t gib = 1024ULL * 1024 * 1024;

// Seconds since the epoch as a TimePoint: the tests' times are round numbers.
TimePoint at(std::int64_t seconds) {
    return Clock::time_point(std::chrono::seconds(seconds));
}

std::int64_t nanos(std::int64_t seconds) {
    return seconds * 1000000000LL;
}

class AccountingTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char pattern[] = "/tmp/bbkit-accounting-XXXXXX";
        ASSERT_NE(mkdtemp(pattern), nullptr);
        root_ = pattern;
        config_.state_dir = root_ + "/state";
        config_.state_owner = geteuid() == 0 ? "root" : std::to_string(geteuid());
        PoolConfig nvme;
        nvme.name = "nvme";
        nvme.path = root_ + "/nvme";
        nvme.capacity = 100 * gib;
        config_.pools.push_back(nvme);
        PoolConfig ssd = nvme;
        ssd.name = "ssd";
        ssd.path = root_ + "/ssd";
        config_.pools.push_back(ssd);
        store_ = std::make_unique<StateStore>(config_);
        WriteTransaction txn(*store_, "test");
        txn.put_pool({"nvme", nvme.path, "uuid-1", false});
        txn.put_pool({"ssd", ssd.path, "uuid-2", false});
        txn.commit();
    }
    void TearDown() override {
        store_.reset();
        std::system(("rm -rf '" + root_ + "'").c_str());
    }

    // A job buffer of `user` in `pool` that goes through its life with real transitions, then
    // is given the hold [from, to) (seconds; to < 0: still held) by rewriting the two times,
    // which are not sealed.
    BufferKey buffer(std::uint64_t job, const std::string& user, const std::string& pool,
                     std::uint64_t bytes, std::int64_t from, std::int64_t to) {
        Buffer b = Buffer::for_key(BufferKey::job("main", job, 1));
        b.pool = pool;
        b.requested_bytes = b.allocated_bytes = bytes;
        b.uid = 1000 + static_cast<uid_t>(user[0]);
        b.gid = 100;
        b.user = user;
        b.state = S::allocating;
        {
            WriteTransaction txn(*store_, "test");
            txn.insert_buffer(b);
            txn.transition(b.key, S::allocated);
            if (to >= 0) {
                txn.transition(b.key, S::teardown);
                txn.transition(b.key, S::complete);
            }
            txn.commit();
        }
        sql("UPDATE buffers SET held_since = " + std::to_string(nanos(from)) + ", ended = " +
            (to >= 0 ? std::to_string(nanos(to)) : "NULL") + " WHERE key = '" + b.key.str() + "'");
        return b.key;
    }

    void stage_run(const BufferKey& key, bool in, std::int64_t from, std::int64_t to,
                   std::uint64_t files, std::uint64_t bytes, bool failed = false) {
        WriteTransaction txn(*store_, "test");
        StageRun run;
        run.stage_in = in;
        run.started = at(from);
        run.ended = at(to);
        run.files = files;
        run.bytes = bytes;
        run.failed = failed;
        txn.record_stage_run(key, run);
        txn.commit();
    }

    void sql(const std::string& text) {
        sqlite3* db = nullptr;
        ASSERT_EQ(sqlite3_open((config_.state_dir + "/state.db").c_str(), &db), SQLITE_OK);
        char* error = nullptr;
        EXPECT_EQ(sqlite3_exec(db, text.c_str(), nullptr, nullptr, &error), SQLITE_OK)
            << (error ? error : "") << ": " << text;
        sqlite3_free(error);
        sqlite3_close(db);
    }

    std::vector<AccountingRow> rows(std::int64_t since, std::int64_t until,
                                    AccountingGroup by = AccountingGroup::user,
                                    std::int64_t now = 100000) {
        AccountingQuery query;
        query.since = at(since);
        query.until = at(until);
        query.by = by;
        ReadSnapshot txn(*store_);
        return txn.accounting(query, at(now));
    }

    std::string root_;
    Config config_;
    std::unique_ptr<StateStore> store_;
};

TEST_F(AccountingTest, transitions_record_when_the_hold_began_and_ended) {
    const auto before = Clock::now();
    Buffer b = Buffer::for_key(BufferKey::job("main", 7, 1));
    b.pool = "nvme";
    b.requested_bytes = b.allocated_bytes = gib;
    b.uid = 1000;
    b.gid = 100;
    b.user = "alice";
    b.state = S::pending;
    {
        WriteTransaction txn(*store_, "test");
        txn.insert_buffer(b);
        txn.commit();
    }
    const auto times = [&] {
        ReadSnapshot txn(*store_);
        AccountingQuery query;
        query.since = before - std::chrono::hours(1);
        query.until = Clock::now() + std::chrono::hours(1);
        return txn.accounting(query, Clock::now());
    };
    EXPECT_TRUE(times().empty());  // pending holds nothing
    for (const S to : {S::allocating, S::allocated, S::teardown, S::complete}) {
        WriteTransaction txn(*store_, "test");
        txn.transition(b.key, to);
        txn.commit();
    }
    const std::vector<AccountingRow> found = times();
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].name, "alice");
    EXPECT_EQ(found[0].buffers, 1u);
    // Held from allocating to complete: a moment, far less than the hour after.
    EXPECT_GE(found[0].byte_seconds, 0.0);
    EXPECT_LT(found[0].byte_seconds, static_cast<double>(gib) * 60);
}

TEST_F(AccountingTest, a_hold_counts_only_the_part_within_the_range) {
    buffer(1, "alice", "nvme", 2 * gib, 1000, 1000 + 7200);  // two hours of 2 GiB
    buffer(2, "alice", "nvme", gib, 5000, -1);               // still held (now = 100000)
    buffer(3, "bob", "ssd", gib, 0, 500);                    // ended before the range
    std::vector<AccountingRow> found = rows(1000, 1000 + 3600);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].name, "alice");
    EXPECT_EQ(found[0].buffers, 1u);
    EXPECT_DOUBLE_EQ(gib_hours(found[0].byte_seconds), 2.0);  // 2 GiB for the range's hour
    found = rows(0, 200000);
    ASSERT_EQ(found.size(), 2u);
    EXPECT_EQ(found[0].name, "alice");
    EXPECT_EQ(found[0].buffers, 2u);
    // 2 GiB x 2 h, and 1 GiB from 5000 s until now (100000 s).
    EXPECT_DOUBLE_EQ(gib_hours(found[0].byte_seconds), 4.0 + 95000.0 / 3600);
    EXPECT_EQ(found[1].name, "bob");
    EXPECT_DOUBLE_EQ(gib_hours(found[1].byte_seconds), 500.0 / 3600);
    found = rows(0, 200000, AccountingGroup::pool);
    ASSERT_EQ(found.size(), 2u);
    EXPECT_EQ(found[0].name, "nvme");
    EXPECT_EQ(found[0].buffers, 2u);
    EXPECT_EQ(found[1].name, "ssd");
}

TEST_F(AccountingTest, stage_runs_are_summed_by_direction_within_the_range) {
    const BufferKey a = buffer(1, "alice", "nvme", gib, 0, 10000);
    stage_run(a, true, 10, 40, 100, 3 * gib);
    stage_run(a, true, 50, 60, 5, 100, true);  // failed, up to its last progress
    stage_run(a, false, 9000, 9500, 7, gib);
    stage_run(a, false, 20000, 20100, 1, 1);  // ends after the range
    const std::vector<AccountingRow> found = rows(0, 10000);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].in.runs, 2u);
    EXPECT_EQ(found[0].in.failed, 1u);
    EXPECT_EQ(found[0].in.files, 105u);
    EXPECT_EQ(found[0].in.bytes, 3 * gib + 100);
    EXPECT_DOUBLE_EQ(found[0].in.seconds, 40.0);
    EXPECT_DOUBLE_EQ(found[0].in.max_seconds, 30.0);
    EXPECT_EQ(found[0].out.runs, 1u);
    EXPECT_EQ(found[0].out.bytes, gib);
    EXPECT_DOUBLE_EQ(found[0].out.max_seconds, 500.0);
}

TEST_F(AccountingTest, filters_keep_one_user_or_pool) {
    buffer(1, "alice", "nvme", gib, 0, 100);
    buffer(2, "bob", "nvme", gib, 0, 100);
    buffer(3, "bob", "ssd", gib, 0, 100);
    AccountingQuery query;
    query.since = at(0);
    query.until = at(1000);
    query.user = "bob";
    query.by = AccountingGroup::pool;
    {
        ReadSnapshot txn(*store_);
        const std::vector<AccountingRow> found = txn.accounting(query, at(1000));
        ASSERT_EQ(found.size(), 2u);
        EXPECT_EQ(found[0].name, "nvme");
        EXPECT_EQ(found[0].buffers, 1u);
        EXPECT_EQ(found[1].name, "ssd");
    }
    query.user.reset();
    query.pool = "nvme";
    query.by = AccountingGroup::user;
    ReadSnapshot txn(*store_);
    const std::vector<AccountingRow> found = txn.accounting(query, at(1000));
    ASSERT_EQ(found.size(), 2u);
    EXPECT_EQ(found[0].name, "alice");
    EXPECT_EQ(found[1].name, "bob");
    EXPECT_EQ(found[1].buffers, 1u);
}

// The class of ranges: for random holds and random ranges, the sums equal the ones computed
// by hand from the same holds, and the plot's slots add up to the same byte-seconds.
TEST_F(AccountingTest, random_holds_and_ranges_sum_as_computed_by_hand) {
    std::mt19937_64 rng(20261129);
    struct Hold {
        std::string user;
        std::uint64_t bytes;
        std::int64_t from, to;  // to < 0: held until now
    };
    std::vector<Hold> holds;
    const std::int64_t now = 50000;
    for (std::uint64_t job = 1; job <= 60; ++job) {
        Hold h;
        h.user = std::string(1, static_cast<char>('a' + rng() % 4));
        h.bytes = (1 + rng() % 16) * gib / 4;
        h.from = static_cast<std::int64_t>(rng() % 40000);
        h.to = rng() % 5 == 0 ? -1 : h.from + 1 + static_cast<std::int64_t>(rng() % 9000);
        buffer(job, h.user, "nvme", h.bytes, h.from, h.to);
        holds.push_back(h);
    }
    for (int trial = 0; trial < 40; ++trial) {
        const std::int64_t since = static_cast<std::int64_t>(rng() % 45000);
        const std::int64_t until = since + 1 + static_cast<std::int64_t>(rng() % 20000);
        std::map<std::string, std::pair<std::uint64_t, double>> expected;
        double all = 0;
        for (const Hold& h : holds) {
            const std::int64_t end = h.to < 0 ? now : h.to;
            if (!(h.from < until && end > since))
                continue;
            const double seconds =
                static_cast<double>(std::min(end, until) - std::max(h.from, since));
            expected[h.user].first += 1;
            expected[h.user].second += static_cast<double>(h.bytes) * seconds;
            all += static_cast<double>(h.bytes) * seconds;
        }
        const std::vector<AccountingRow> found = rows(since, until, AccountingGroup::user, now);
        ASSERT_EQ(found.size(), expected.size()) << since << ".." << until;
        for (const AccountingRow& row : found) {
            EXPECT_EQ(row.buffers, expected[row.name].first) << row.name;
            EXPECT_NEAR(row.byte_seconds, expected[row.name].second,
                        1e-9 * expected[row.name].second + 1)
                << row.name;
        }
        // The plot's slots hold the same byte-seconds (until now: later holds have not begun).
        const std::int64_t plot_until = std::min(until, now);
        if (plot_until <= since)
            continue;
        const PoolUse use =
            query_pool_use(config_, geteuid(), "nvme", at(since), at(plot_until), 37);
        double plotted = 0;
        for (const double mean : use.mean_bytes)
            plotted += mean * static_cast<double>(plot_until - since) / 37;
        double expected_plot = 0;
        for (const Hold& h : holds) {
            const std::int64_t end = std::min(h.to < 0 ? now : h.to, plot_until);
            if (h.from < plot_until && end > since)
                expected_plot += static_cast<double>(h.bytes) *
                                 static_cast<double>(end - std::max(h.from, since));
        }
        EXPECT_NEAR(plotted, expected_plot, 1e-6 * expected_plot + 1) << since << ".." << until;
    }
}

TEST_F(AccountingTest, only_root_and_the_state_owner_read_the_history) {
    if (geteuid() != 0)
        GTEST_SKIP() << "another uid than the caller's is the point: root only";
    AccountingQuery query;
    query.since = at(0);
    query.until = at(10);
    std::string message;
    EXPECT_EQ(code_of([&] { query_accounting(config_, 65534, query); }, &message),
              ExitCode::no_perm);
    EXPECT_EQ(message,
              "the history is read from state.db: run this as root or as the state directory's "
              "owner (root)");
    EXPECT_NO_THROW(query_accounting(config_, 0, query));
}

TEST_F(AccountingTest, the_plot_names_an_unknown_pool_and_needs_one) {
    std::string message;
    EXPECT_EQ(
        code_of([&] { query_pool_use(config_, geteuid(), "nope", at(0), at(10), 5); }, &message),
        ExitCode::no_input);
    EXPECT_EQ(message, "unknown pool 'nope' (see bb-pool list)");
    AccountingQuery query;
    EXPECT_EQ(code_of([&] { plotted_pool(config_, query); }, &message), ExitCode::usage);
    EXPECT_EQ(message, "--plot draws one pool: name it with --pool");
    query.pool = "ssd";
    EXPECT_EQ(plotted_pool(config_, query), "ssd");
}

TEST_F(AccountingTest, the_svg_escapes_names_and_carries_its_first_line) {
    PoolUse use;
    use.pool = "a<b>&\"c\"";
    use.capacity = 4 * gib;
    use.since = at(0);
    use.until = at(3600);
    use.mean_bytes = {0, static_cast<double>(gib), 5.0 * gib};
    use.peak_bytes = 5.0 * gib;
    const std::string svg = pool_use_svg(use);
    EXPECT_EQ(svg.rfind(pool_use_first_line, 0), 0u);
    EXPECT_EQ(svg.find("a<b>"), std::string::npos);
    EXPECT_NE(svg.find("a&lt;b&gt;&amp;&quot;c&quot;"), std::string::npos);
    EXPECT_NE(svg.find("peak 5.0GiB of 4.0GiB"), std::string::npos) << svg;
    EXPECT_EQ(svg.find("<script"), std::string::npos);
    EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

// ---- time_spec -----------------------------------------------------------------------------

TEST(TimeSpec, takes_sacct_forms) {
    const TimePoint now = at(1764000000);
    EXPECT_EQ(parse_time_spec("now", now), now);
    EXPECT_EQ(parse_time_spec("now-7days", now), now - std::chrono::hours(24 * 7));
    EXPECT_EQ(parse_time_spec("NOW+90", now), now + std::chrono::seconds(90));
    EXPECT_EQ(parse_time_spec("now-1week", now), now - std::chrono::hours(24 * 7));
    EXPECT_EQ(parse_time_spec("now-3hours", now), now - std::chrono::hours(3));
    EXPECT_EQ(parse_time_spec("@1700000000", now), at(1700000000));
    EXPECT_EQ(parse_time_spec("today", now), start_of_day(now));
    EXPECT_EQ(parse_time_spec("midnight", now), start_of_day(now));
    const TimePoint day = parse_time_spec("2026-11-28", now);
    EXPECT_EQ(parse_time_spec("2026-11-28T00:00", now), day);
    EXPECT_EQ(parse_time_spec("2026-11-28T10:20:30", now),
              day + std::chrono::hours(10) + std::chrono::minutes(20) + std::chrono::seconds(30));
    EXPECT_EQ(start_of_day(day + std::chrono::hours(13)), day);
}

TEST(TimeSpec, refuses_anything_else_in_one_line) {
    const TimePoint now = at(1764000000);
    for (const char* bad : {"",
                            "yesterday",
                            "now-",
                            "now-7 days",
                            "now-7fortnights",
                            "now*3",
                            "now-99999999999",
                            "now-6000weeks",
                            "2026-02-30",
                            "2026-13-01",
                            "2026-11-28T25:00",
                            "2026-11-28 10:00",
                            "2026-11-28T10",
                            "26-11-28",
                            "@",
                            "@-5",
                            "@12x",
                            "1969-12-31",
                            "2026-11-28T10:00:60",
                            "2026-11-28T10:00:00Z"}) {
        std::string message;
        EXPECT_EQ(code_of([&] { parse_time_spec(bad, now); }, &message), ExitCode::usage) << bad;
        EXPECT_NE(message.find("is not a time: write YYYY-MM-DD"), std::string::npos) << message;
        EXPECT_EQ(message.find('\n'), std::string::npos);
    }
}

}  // namespace
}  // namespace bbkit
