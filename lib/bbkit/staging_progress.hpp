// A stage's progress as bb-stage records it in <state>/progress/<key> for bb-stat and any other
// poller (bbkit(7), STATE DIRECTORY), and the recent rate and time left it derives from
// bb-mover's reports. The record is a hint, not state: a reader takes what it can use of it.
#pragma once

#include <sys/types.h>

#include <nlohmann/json_fwd.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "bbkit/buffer.hpp"
#include "bbkit/stage_plan.hpp"

namespace bbkit {

struct StagingProgress {
    std::optional<StageDirection> direction;  // absent from an older stager's record
    // An older stager's record has none and was written while copying; nullopt is a phase this
    // reader does not know.
    std::optional<StagePhase> phase = StagePhase::copying;
    std::uint64_t files_done = 0, files_total = 0;
    std::uint64_t bytes_done = 0, bytes_total = 0;
    // Over the last StagingRate::window of the current phase; nullopt until known.
    std::optional<double> files_per_second, bytes_per_second;
    std::optional<std::uint64_t> eta_seconds;  // see eta_seconds()
    std::optional<TimePoint> started;          // when the stager started this stage
    std::optional<TimePoint> updated;          // when it wrote the record
    std::optional<pid_t> pid;                  // the stager's
    std::optional<MovePhases> phases;          // the finished stage's, from the mover's summary
    std::optional<TransferPlace> transfer;     // a stage on transfer nodes: where it runs
};

// A move's phases as JSON (bb-stage --json, bb-stat job --json, the record's "phases"): each
// MovePhases field in seconds, "threads", and "idle_share".
nlohmann::json phases_json(const MovePhases& phases);

// The record's one-line JSON text (fields in bbkit(7) and bb-stat(1)).
std::string progress_record(const StagingProgress& progress);
// nullopt unless `text` is a JSON object with the four counters as non-negative integers (all an
// older stager wrote); any other field of the wrong type or out of range reads as unknown.
std::optional<StagingProgress> parse_progress_record(const std::string& text);

// The rates of the recent past of one stage, from successive reports of the mover. A stage of
// millions of files runs for hours: the rate since its start would hide a slowdown (a cold
// cache, a busy file system, a directory of small files after large ones) for as long, so only
// the last `window` counts. A change of phase starts over: measuring moves no data and syncing
// moves none of its own, so neither says anything of the copy's pace.
class StagingRate {
  public:
    using Clock = std::chrono::steady_clock;
    static constexpr Clock::duration default_window = std::chrono::seconds(15);

    explicit StagingRate(Clock::duration window = default_window);

    // A report at `when`. Reports out of time order are ignored; counters that go back (a
    // mover started over) start the window over.
    void add(Clock::time_point when, StagePhase phase, std::uint64_t files_done,
             std::uint64_t bytes_done);

    // nullopt before a second has been observed in the current phase, and outside copying.
    std::optional<double> files_per_second() const;
    std::optional<double> bytes_per_second() const;

  private:
    struct Sample {
        Clock::time_point when;
        std::uint64_t files_done, bytes_done;
    };
    std::optional<double> per_second(std::uint64_t Sample::*counter) const;

    Clock::duration window_;
    std::optional<StagePhase> phase_;
    // Oldest first; the first is the newest sample at or before the window's start, so the
    // window is always covered. Samples closer together than window_/64 replace the last one,
    // which bounds the deque whatever the mover's report rate.
    std::deque<Sample> samples_;
};

// Seconds left, rounded up: nullopt unless copying, and while neither rate says anything.
// Each of files and bytes gives an estimate (remaining / rate); the larger one is taken, as
// both costs must be paid: a tree of small files is bound by per-file work (files/s), one of
// large files by bandwidth (bytes/s), and each estimate alone assumes the other cost is free.
// A rate of zero (one large file for the whole window: no file finished) gives no estimate of
// its own; nothing left of a kind gives 0.
std::optional<std::uint64_t> eta_seconds(const StagingProgress& progress);

}  // namespace bbkit
