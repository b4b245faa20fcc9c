#include "bbkit/staging_progress.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace bbkit {
namespace {

using namespace std::chrono_literals;
using Clock = StagingRate::Clock;

// Synthetic times: `seconds` after an arbitrary origin.
Clock::time_point at(double seconds) {
    return Clock::time_point{} +
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Reports every 100 ms from `from` to `to` seconds, `files` and `bytes` per second from the
// given counters at `from`.
void feed(StagingRate& rate, StagePhase phase, double from, double to, double files, double bytes,
          std::uint64_t files_at_from = 0, std::uint64_t bytes_at_from = 0) {
    for (double t = from; t <= to + 1e-9; t += 0.1)
        rate.add(at(t), phase, files_at_from + static_cast<std::uint64_t>((t - from) * files),
                 bytes_at_from + static_cast<std::uint64_t>((t - from) * bytes));
}

StagingProgress copying(std::uint64_t files_done, std::uint64_t files_total,
                        std::uint64_t bytes_done, std::uint64_t bytes_total) {
    StagingProgress p;
    p.phase = StagePhase::copying;
    p.files_done = files_done;
    p.files_total = files_total;
    p.bytes_done = bytes_done;
    p.bytes_total = bytes_total;
    return p;
}

// ---- rates ---------------------------------------------------------------------------------

TEST(StagingRate, steady_copy_gives_its_rates) {
    StagingRate rate;
    feed(rate, StagePhase::copying, 0, 30, 1000, 1e6);
    ASSERT_TRUE(rate.files_per_second());
    EXPECT_NEAR(*rate.files_per_second(), 1000, 10);
    EXPECT_NEAR(*rate.bytes_per_second(), 1e6, 1e4);
}

TEST(StagingRate, nothing_before_a_second_has_passed) {
    StagingRate rate;
    EXPECT_FALSE(rate.files_per_second());
    feed(rate, StagePhase::copying, 0, 0.5, 1000, 1e6);
    EXPECT_FALSE(rate.files_per_second());
    EXPECT_FALSE(rate.bytes_per_second());
    feed(rate, StagePhase::copying, 0.6, 1.5, 1000, 1e6, 600, 600000);
    EXPECT_TRUE(rate.files_per_second());
}

TEST(StagingRate, only_the_recent_window_counts) {
    StagingRate rate(15s);
    // An hour of large files at 10 files/s, then small files at 5,000 files/s for 20 s.
    feed(rate, StagePhase::copying, 0, 3600, 10, 1e9);
    feed(rate, StagePhase::copying, 3600.1, 3620, 5000, 1e6, 36000, 3600000000000ULL);
    ASSERT_TRUE(rate.files_per_second());
    EXPECT_NEAR(*rate.files_per_second(), 5000, 100);
    EXPECT_NEAR(*rate.bytes_per_second(), 1e6, 1e5);
}

TEST(StagingRate, window_spans_at_least_its_length_once_that_much_has_passed) {
    StagingRate rate(10s);
    // 5 s at 100 files/s, then 10 s idle: the window (10 s) holds no progress at all.
    feed(rate, StagePhase::copying, 0, 5, 100, 0);
    feed(rate, StagePhase::copying, 5.1, 15.5, 0, 0, 500, 0);
    ASSERT_TRUE(rate.files_per_second());
    EXPECT_EQ(*rate.files_per_second(), 0);
}

TEST(StagingRate, measuring_and_syncing_have_no_rate_and_a_new_phase_starts_over) {
    StagingRate rate;
    feed(rate, StagePhase::measuring, 0, 20, 0, 0);
    EXPECT_FALSE(rate.files_per_second());
    // The copy starts: a minute of measuring at no progress must not drag its rate down.
    feed(rate, StagePhase::copying, 20, 22, 100, 1000);
    ASSERT_TRUE(rate.files_per_second());
    EXPECT_NEAR(*rate.files_per_second(), 100, 5);
    rate.add(at(22.5), StagePhase::syncing, 200, 2000);
    EXPECT_FALSE(rate.files_per_second());
    EXPECT_FALSE(rate.bytes_per_second());
}

TEST(StagingRate, reports_out_of_order_are_ignored_and_counters_going_back_start_over) {
    StagingRate rate;
    feed(rate, StagePhase::copying, 10, 20, 100, 100);
    rate.add(at(5), StagePhase::copying, 0, 0);  // from the past: ignored
    EXPECT_NEAR(*rate.files_per_second(), 100, 5);
    rate.add(at(20.2), StagePhase::copying, 3, 3);  // a mover that started over
    EXPECT_FALSE(rate.files_per_second());
}

TEST(StagingRate, a_flood_of_reports_keeps_its_memory_bounded) {
    StagingRate rate(10s);
    // A million reports in one window: still a correct rate (the samples are thinned).
    for (int i = 0; i <= 1000000; ++i)
        rate.add(at(i * 1e-5), StagePhase::copying, static_cast<std::uint64_t>(i),
                 static_cast<std::uint64_t>(i) * 10);
    ASSERT_TRUE(rate.files_per_second());
    EXPECT_NEAR(*rate.files_per_second(), 1e5, 1e3);
}

// ---- ETA -----------------------------------------------------------------------------------

TEST(StagingEta, the_slower_of_files_and_bytes_wins) {
    StagingProgress p = copying(1000, 101000, 1000000, 2000000);
    p.files_per_second = 1000;  // 100 s left by files
    p.bytes_per_second = 1e5;   // 10 s left by bytes
    EXPECT_EQ(eta_seconds(p), std::optional<std::uint64_t>(100));
    p.bytes_per_second = 1000;  // 1000 s by bytes
    EXPECT_EQ(eta_seconds(p), std::optional<std::uint64_t>(1000));
}

TEST(StagingEta, rounds_up) {
    StagingProgress p = copying(0, 10, 0, 0);
    p.files_per_second = 3;
    EXPECT_EQ(eta_seconds(p), std::optional<std::uint64_t>(4));
}

TEST(StagingEta, none_while_measuring_or_syncing_or_in_an_unknown_phase) {
    StagingProgress p = copying(10, 100, 10, 100);
    p.files_per_second = 1;
    p.bytes_per_second = 1;
    for (std::optional<StagePhase> phase :
         {std::optional(StagePhase::measuring), std::optional(StagePhase::syncing),
          std::optional<StagePhase>()}) {
        p.phase = phase;
        EXPECT_FALSE(eta_seconds(p));
    }
}

TEST(StagingEta, one_large_file_uses_the_byte_rate_alone) {
    StagingProgress p = copying(0, 1, 0, 1000000);
    p.files_per_second = 0;  // no file finished in the window
    p.bytes_per_second = 1e4;
    EXPECT_EQ(eta_seconds(p), std::optional<std::uint64_t>(100));
}

TEST(StagingEta, unknown_without_a_useful_rate) {
    StagingProgress p = copying(0, 10, 0, 100);
    EXPECT_FALSE(eta_seconds(p));  // no rate yet
    p.files_per_second = 0;
    p.bytes_per_second = 0;
    EXPECT_FALSE(eta_seconds(p));  // stalled
    // Only empty files left, and no file finished lately: unknown, not 0.
    p = copying(0, 10, 100, 100);
    p.files_per_second = 0;
    p.bytes_per_second = 5;
    EXPECT_FALSE(eta_seconds(p));
}

TEST(StagingEta, nothing_left_is_zero) {
    StagingProgress p = copying(10, 10, 100, 100);
    EXPECT_EQ(eta_seconds(p), std::optional<std::uint64_t>(0));
}

TEST(StagingEta, a_crawl_is_capped_not_overflowed) {
    StagingProgress p = copying(0, 1, 0, ~0ULL);
    p.bytes_per_second = 1e-300;
    ASSERT_TRUE(eta_seconds(p));
    EXPECT_LE(*eta_seconds(p), 1000000000u);
}

// ---- the record ----------------------------------------------------------------------------

TEST(ProgressRecord, round_trips) {
    StagingProgress p = copying(12034, 100000, 1258291, 10276045);
    p.direction = StageDirection::out;
    p.files_per_second = 3400.04;
    p.bytes_per_second = 2202009.6;
    p.eta_seconds = 26;
    p.started = TimePoint(std::chrono::seconds(1700000000));
    p.updated = TimePoint(std::chrono::seconds(1700000012));
    p.pid = 4242;
    const std::string text = progress_record(p);
    EXPECT_EQ(text.back(), '\n');
    EXPECT_EQ(text.find('\n'), text.size() - 1);  // one line
    const nlohmann::json j = nlohmann::json::parse(text);
    EXPECT_EQ(j["direction"], "out");
    EXPECT_EQ(j["phase"], "copying");
    EXPECT_EQ(j["started"], 1700000000);
    EXPECT_EQ(j["eta_seconds"], 26);
    EXPECT_EQ(j["bytes_per_second"], 2202010.0);
    const std::optional<StagingProgress> back = parse_progress_record(text);
    ASSERT_TRUE(back);
    EXPECT_EQ(back->direction, StageDirection::out);
    EXPECT_EQ(back->phase, StagePhase::copying);
    EXPECT_EQ(back->files_done, 12034u);
    EXPECT_EQ(back->bytes_total, 10276045u);
    EXPECT_NEAR(*back->files_per_second, 3400.0, 1e-9);
    EXPECT_EQ(back->eta_seconds, std::optional<std::uint64_t>(26));
    EXPECT_EQ(back->started, p.started);
    EXPECT_EQ(back->updated, p.updated);
    EXPECT_EQ(back->pid, std::optional<pid_t>(4242));
}

TEST(ProgressRecord, unknowns_are_null) {
    StagingProgress p = copying(0, 0, 0, 0);
    p.phase = StagePhase::measuring;
    const nlohmann::json j = nlohmann::json::parse(progress_record(p));
    for (const char* key : {"direction", "files_per_second", "bytes_per_second", "eta_seconds",
                            "started", "updated", "pid"})
        EXPECT_TRUE(j.at(key).is_null()) << key;
    EXPECT_EQ(parse_progress_record(progress_record(p))->phase, StagePhase::measuring);
}

TEST(ProgressRecord, an_older_stagers_record_reads_as_copying) {
    const std::optional<StagingProgress> p = parse_progress_record(
        R"({"files_done": 3, "files_total": 10, "bytes_done": 1024, "bytes_total": 4096})");
    ASSERT_TRUE(p);
    EXPECT_EQ(p->phase, StagePhase::copying);
    EXPECT_EQ(p->files_done, 3u);
    EXPECT_FALSE(p->direction);
    EXPECT_FALSE(p->files_per_second);
    EXPECT_FALSE(p->eta_seconds);
    EXPECT_FALSE(p->updated);
    EXPECT_FALSE(p->pid);
}

TEST(ProgressRecord, without_the_four_counters_there_is_no_record) {
    for (const char* text :
         {"", "{", "[]", "null", "42", R"({"files_done": -1})", R"({"files_done": "3"})",
          R"({"files_done": 1, "files_total": 2, "bytes_done": 3})",
          R"({"files_done": 1.5, "files_total": 2, "bytes_done": 3, "bytes_total": 4})",
          R"({"files_done": 1, "files_total": 2, "bytes_done": 3, "bytes_total": 1e400})"})
        EXPECT_FALSE(parse_progress_record(text)) << text;
}

TEST(ProgressRecord, hostile_optional_fields_read_as_unknown) {
    const std::optional<StagingProgress> p = parse_progress_record(
        R"({"files_done": 1, "files_total": 2, "bytes_done": 3, "bytes_total": 4,)"
        R"( "direction": "sideways", "phase": "teleporting", "files_per_second": -5,)"
        R"( "bytes_per_second": "fast", "eta_seconds": -1, "started": 99999999999999999999,)"
        R"( "updated": 1e300, "pid": 0})");
    ASSERT_TRUE(p);
    EXPECT_EQ(p->files_total, 2u);
    EXPECT_FALSE(p->direction);
    EXPECT_FALSE(p->phase);  // a phase this reader does not know
    EXPECT_FALSE(p->files_per_second);
    EXPECT_FALSE(p->bytes_per_second);
    EXPECT_FALSE(p->eta_seconds);
    EXPECT_FALSE(p->started);
    EXPECT_FALSE(p->updated);
    EXPECT_FALSE(p->pid);
    const std::optional<StagingProgress> big = parse_progress_record(
        R"({"files_done": 1, "files_total": 2, "bytes_done": 3, "bytes_total": 4,)"
        R"( "pid": 9999999999, "updated": 18446744073709551615, "phase": null})");
    ASSERT_TRUE(big);
    EXPECT_FALSE(big->pid);
    EXPECT_FALSE(big->updated);
    EXPECT_FALSE(big->phase);
}

// A stage on transfer nodes keeps where it runs in its record; a record without it, or with a
// malformed one, reads with none.
TEST(ProgressRecord, keeps_where_a_transfer_stage_runs) {
    StagingProgress p;
    p.files_done = 1;
    p.files_total = 2;
    p.transfer = TransferPlace{42, "x1", {"part 0: 1/2 files, 10B of 20B"}};
    const auto back = parse_progress_record(progress_record(p));
    ASSERT_TRUE(back);
    ASSERT_TRUE(back->transfer);
    EXPECT_EQ(back->transfer->job_id, 42u);
    EXPECT_EQ(back->transfer->parts, p.transfer->parts);
    const auto broken = parse_progress_record(
        R"({"files_done":1,"files_total":2,"bytes_done":0,"bytes_total":0,"transfer":{"job":"x"}})");
    ASSERT_TRUE(broken);
    EXPECT_FALSE(broken->transfer);
}

}  // namespace
}  // namespace bbkit
