#include "bbkit/render.hpp"

#include <gtest/gtest.h>

namespace bbkit {
namespace {

constexpr std::uint64_t gib = 1024ULL * 1024 * 1024;

PoolStatus pool(std::string name, std::uint64_t total, std::uint64_t granularity,
                std::uint64_t used, std::size_t queued, PoolAvailability availability) {
    PoolStatus p;
    p.name = std::move(name);
    p.total = total;
    p.granularity = granularity;
    p.used = used;
    p.free = total - used;
    p.queued = queued;
    p.initialized = true;
    p.availability = availability;
    return p;
}

StagingProgress progress(std::uint64_t files_done, std::uint64_t files_total,
                         std::uint64_t bytes_done, std::uint64_t bytes_total) {
    StagingProgress p;
    p.files_done = files_done;
    p.files_total = files_total;
    p.bytes_done = bytes_done;
    p.bytes_total = bytes_total;
    return p;
}

TEST(ProgressText, counters_then_rates_eta_and_phase) {
    StagingProgress p = progress(12034, 100000, 1258291, 10276045);
    p.files_per_second = 3400;
    p.bytes_per_second = 2202009;
    p.eta_seconds = 26;
    EXPECT_EQ(
        progress_text(p),
        "12,034/100,000 entries, 1.2MiB/9.8MiB, 3,400 entries/s, 2.1MiB/s, ETA 26 s (copying)");
    EXPECT_EQ(progress_text(p, false), "12,034/100,000 entries, 1.2MiB/9.8MiB");
}

TEST(ProgressText, shows_only_what_is_known) {
    StagingProgress p = progress(0, 1234567, 0, 5 * gib);
    p.phase = StagePhase::measuring;
    EXPECT_EQ(progress_text(p), "0/1,234,567 entries, 0B/5.0GiB (measuring)");
    p.phase.reset();  // a phase a newer stager wrote
    EXPECT_EQ(progress_text(p), "0/1,234,567 entries, 0B/5.0GiB");
}

TEST(ProgressText, slow_rates_keep_a_decimal_and_long_etas_read_in_minutes_or_hours) {
    StagingProgress p = progress(1, 10, 0, 0);
    p.files_per_second = 0.3;
    p.eta_seconds = 250;
    EXPECT_EQ(progress_text(p), "1/10 entries, 0B/0B, 0.3 entries/s, ETA 4 min 10 s (copying)");
    p.eta_seconds = 3 * 3600 + 5 * 60 + 59;
    EXPECT_NE(progress_text(p).find("ETA 3 h 05 min"), std::string::npos);
}

TEST(ProgressBar, fills_with_the_bytes_and_ends_with_the_text) {
    StagingProgress p = progress(1, 4, 50, 100);
    const std::string bar = progress_bar(p);
    EXPECT_EQ(bar.rfind("\r[##########..........]  50%  1/4 entries, 50B/100B (copying)", 0), 0u)
        << bar;
    EXPECT_EQ(bar.substr(bar.size() - 3), "\033[K");
    p.bytes_done = 200;  // more than measured: never past the end of the bar
    EXPECT_NE(progress_bar(p).find("[####################] 100%"), std::string::npos);
}

TEST(TextTable, fitted_columns_are_as_wide_as_their_widest_cell) {
    EXPECT_EQ(text_table({{"a"}, {"bb"}}, {{"long", "1"}, {"x", "22"}}),
              "   a bb\n"
              "long  1\n"
              "   x 22\n");
}

TEST(TextTable, fixed_columns_pad_and_let_a_longer_cell_overflow_as_printf_does) {
    EXPECT_EQ(text_table({{"N", 4, true}, {"V", 3}, {"S", 0, true, "  "}},
                         {{"ab", "1", "up"}, {"abcdef", "1234", "down"}}),
              "N      V  S\n"
              "ab     1  up\n"
              "abcdef 1234  down\n");
}

TEST(TextTable, without_rows_prints_the_header) {
    EXPECT_EQ(text_table({{"pool"}, {"free"}}, {}), "pool free\n");
}

TEST(PoolListText, keeps_bb_pool_lists_layout) {
    EXPECT_EQ(
        pool_list_text(
            {pool("nvme", 5800 * gib, gib, 1200 * gib, 2, PoolAvailability::up),
             pool("a-pool-name-longer-than-16", 10, 2, 0, 0, PoolAvailability::draining)}),
        "POOL                  TOTAL       USED      TRASH       FREE       GRAN QUEUED  STATE\n"
        "nvme                5800GiB    1200GiB          0    4600GiB       1GiB      2  up\n"
        "a-pool-name-longer-than-16         10          0          0         10          2      "
        "0  draining\n");
}

TEST(TeardownText, ends_with_the_entries_removed_when_there_were_any) {
    TeardownResult t{true, "main.8.1", true, "", 1234567};
    EXPECT_EQ(teardown_text(t),
              "torn down: main.8.1 (space released), 1,234,567 entries removed\n");
    t.reaped = false;
    t.entries_removed = 1;
    EXPECT_EQ(teardown_text(t),
              "torn down: main.8.1 (in trash until bb-pool reap; space still "
              "charged), 1 entry removed\n");
    t.entries_removed = 0;
    EXPECT_EQ(teardown_text(t),
              "torn down: main.8.1 (in trash until bb-pool reap; space still charged)\n");
    EXPECT_EQ(teardown_json(t)["entries_removed"], 0);
}

TEST(ReapText, counts_buffers_space_and_entries) {
    ReapResult r;
    r.reaped = 2;
    r.remaining = 1;
    r.bytes_released = 3 * gib;
    r.entries_removed = 5000002;
    EXPECT_EQ(reap_text(r),
              "reaped 2 buffer(s), released 3GiB, 5,000,002 entries removed, 1 left for later\n");
    EXPECT_EQ(reap_json(r)["entries_removed"], 5000002);
    EXPECT_EQ(reap_text(ReapResult{}), "reaped 0 buffer(s), released 0, 0 entries removed\n");
    EXPECT_EQ(removal_progress_line({"nvme", "main.8.1.17", 999}),
              "\rreaping nvme/main.8.1.17: 999 entries removed\033[K");
}

}  // namespace
}  // namespace bbkit
