// Points in time as an administrator writes them on a command line, in sacct's forms (its -S and
// -E): bb-stat history's --since and --until (bbkit(7), HISTORY AND ACCOUNTING); and as Slurm
// prints them.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace bbkit {

// `text` as a point in time, local time where it has no zone:
//   YYYY-MM-DD[THH:MM[:SS]]   a date, midnight unless a time follows
//   now[{+|-}COUNT[UNIT]]     now, or COUNT units before or after it; UNIT: seconds (the
//                             default), minutes, hours, days or weeks, singular or plural
//   today, midnight           the start of the current day
//   @SECONDS                  seconds since the epoch (date +%s)
// Anything else, a date that does not exist (2026-02-30) or a count past a century, is
// Error(usage) naming `text` and the forms.
std::chrono::system_clock::time_point parse_time_spec(std::string_view text,
                                                      std::chrono::system_clock::time_point now);

// Slurm's time form in local time: 2021-08-11T10:13:38.
std::string slurm_time(std::chrono::system_clock::time_point time);

// The start of the local day that holds `time`.
std::chrono::system_clock::time_point start_of_day(std::chrono::system_clock::time_point time);

}  // namespace bbkit
