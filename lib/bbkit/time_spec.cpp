#include "bbkit/time_spec.hpp"

#include <cstdint>
#include <ctime>
#include <optional>

#include "bbkit/error.hpp"
#include "bbkit/text.hpp"

namespace bbkit {

namespace {

using Clock = std::chrono::system_clock;

[[noreturn]] void bad_time(std::string_view text) {
    throw Error(ExitCode::usage,
                "'" + printable(std::string(text)) +
                    "' is not a time: write YYYY-MM-DD[THH:MM[:SS]], now[-COUNT[seconds|minutes|"
                    "hours|days|weeks]], today or @SECONDS");
}

// The digits of text[from, from + count) as a number, or none.
std::optional<int> digits_at(std::string_view text, std::size_t from, std::size_t count) {
    if (from + count > text.size())
        return std::nullopt;
    int value = 0;
    for (std::size_t i = from; i < from + count; ++i) {
        if (text[i] < '0' || text[i] > '9')
            return std::nullopt;
        value = value * 10 + (text[i] - '0');
    }
    return value;
}

// YYYY-MM-DD[THH:MM[:SS]] in local time; none when `text` is not of that form or names a date
// or time that does not exist.
std::optional<Clock::time_point> parse_calendar(std::string_view text) {
    const std::size_t length = text.size();
    if (length != 10 && length != 16 && length != 19)
        return std::nullopt;
    if (text[4] != '-' || text[7] != '-')
        return std::nullopt;
    const auto year = digits_at(text, 0, 4);
    const auto month = digits_at(text, 5, 2);
    const auto day = digits_at(text, 8, 2);
    std::optional<int> hour = 0, minute = 0, second = 0;
    if (length >= 16) {
        if (text[10] != 'T' || text[13] != ':')
            return std::nullopt;
        hour = digits_at(text, 11, 2);
        minute = digits_at(text, 14, 2);
    }
    if (length == 19) {
        if (text[16] != ':')
            return std::nullopt;
        second = digits_at(text, 17, 2);
    }
    if (!year || !month || !day || !hour || !minute || !second || *year < 1970 || *month < 1 ||
        *month > 12 || *day < 1 || *day > 31 || *hour > 23 || *minute > 59 || *second > 59)
        return std::nullopt;
    std::tm tm{};
    tm.tm_year = *year - 1900;
    tm.tm_mon = *month - 1;
    tm.tm_mday = *day;
    tm.tm_hour = *hour;
    tm.tm_min = *minute;
    tm.tm_sec = *second;
    tm.tm_isdst = -1;
    const std::time_t seconds = std::mktime(&tm);
    // mktime moves a day that does not exist (February 30) into the next month: refuse it.
    if (seconds == -1 || tm.tm_mday != *day || tm.tm_mon != *month - 1)
        return std::nullopt;
    return Clock::from_time_t(seconds);
}

// The seconds in one of a relative time's units, or none.
std::optional<std::int64_t> unit_seconds(std::string_view unit) {
    const std::string u = lower(std::string(unit));
    if (u.empty() || u == "second" || u == "seconds")
        return 1;
    if (u == "minute" || u == "minutes")
        return 60;
    if (u == "hour" || u == "hours")
        return 3600;
    if (u == "day" || u == "days")
        return 86400;
    if (u == "week" || u == "weeks")
        return 7 * 86400;
    return std::nullopt;
}

}  // namespace

std::string slurm_time(Clock::time_point time) {
    const std::time_t seconds = Clock::to_time_t(time);
    std::tm tm{};
    localtime_r(&seconds, &tm);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm);
    return text;
}

Clock::time_point start_of_day(Clock::time_point time) {
    const std::time_t seconds = Clock::to_time_t(time);
    std::tm tm{};
    localtime_r(&seconds, &tm);
    tm.tm_hour = 0;
    tm.tm_min = 0;
    tm.tm_sec = 0;
    tm.tm_isdst = -1;
    return Clock::from_time_t(std::mktime(&tm));
}

Clock::time_point parse_time_spec(std::string_view text, Clock::time_point now) {
    const std::string word = lower(std::string(text));
    if (word == "today" || word == "midnight")
        return start_of_day(now);
    if (starts_with(word, "@")) {
        const std::string digits = word.substr(1);
        if (!all_digits(digits) || digits.empty() || digits.size() > 12)
            bad_time(text);
        return Clock::from_time_t(static_cast<std::time_t>(std::stoll(digits)));
    }
    if (starts_with(word, "now")) {
        const std::string rest = word.substr(3);
        if (rest.empty())
            return now;
        if (rest[0] != '+' && rest[0] != '-')
            bad_time(text);
        std::size_t end = 1;
        while (end < rest.size() && rest[end] >= '0' && rest[end] <= '9')
            ++end;
        const std::string count = rest.substr(1, end - 1);
        const auto unit = unit_seconds(std::string_view(rest).substr(end));
        if (count.empty() || count.size() > 10 || !unit)
            bad_time(text);
        const std::int64_t seconds = std::stoll(count) * *unit;
        if (seconds > 100LL * 366 * 86400)
            bad_time(text);
        const auto offset = std::chrono::seconds(seconds);
        return rest[0] == '+' ? now + offset : now - offset;
    }
    if (const auto time = parse_calendar(text))
        return *time;
    bad_time(text);
}

}  // namespace bbkit
