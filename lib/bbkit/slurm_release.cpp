#include "bbkit/slurm_release.hpp"

#include <algorithm>

#include "bbkit/error.hpp"
#include "bbkit/text.hpp"

namespace bbkit {
namespace {

// The releases that changed what bbkit prints of `scontrol show burst` (bbkit(7), Slurm
// releases): 21.08 renamed the pool lines, 24.05 added PollInterval.
constexpr SlurmRelease pool_name_since{21, 8};
constexpr SlurmRelease poll_interval_since{24, 5};

std::string known_list() {
    std::string out;
    for (const SlurmRelease& release : known_slurm_releases())
        out += (out.empty() ? "" : ", ") + to_string(release);
    return out;
}

// Two digits, or nothing when `text` is not exactly that.
std::optional<unsigned> two_digits(const std::string& text) {
    if (text.size() != 2 || !all_digits(text))
        return std::nullopt;
    return static_cast<unsigned>(*parse_decimal(text));
}

}  // namespace

bool operator==(SlurmRelease a, SlurmRelease b) {
    return a.year == b.year && a.month == b.month;
}

bool operator<(SlurmRelease a, SlurmRelease b) {
    return a.year != b.year ? a.year < b.year : a.month < b.month;
}

std::string to_string(SlurmRelease release) {
    const std::string month = std::to_string(release.month);
    return std::to_string(release.year) + "." + (month.size() < 2 ? "0" : "") + month;
}

const std::vector<SlurmRelease>& known_slurm_releases() {
    static const std::vector<SlurmRelease> releases{{20, 11}, {21, 8},  {22, 5}, {23, 2},  {23, 11},
                                                    {24, 5},  {24, 11}, {25, 5}, {25, 11}, {26, 5}};
    return releases;
}

SlurmRelease parse_slurm_release(const std::string& text) {
    const std::size_t dot = text.find('.');
    const auto year = two_digits(text.substr(0, dot));
    const auto month = dot == std::string::npos ? std::nullopt : two_digits(text.substr(dot + 1));
    if (!year || !month) {
        // "24.11.5", as slurmctld -V prints it.
        const std::size_t last = text.rfind('.');
        const bool maintenance =
            std::count(text.begin(), text.end(), '.') == 2 && all_digits(text.substr(last + 1));
        throw Error(ExitCode::config,
                    "'" + text + "' is not a release written YY.MM, such as \"24.11\"" +
                        (maintenance ? " (leave out the maintenance number)" : ""));
    }
    const SlurmRelease release{*year, *month};
    const auto& known = known_slurm_releases();
    if (release < known.front())
        throw Error(ExitCode::config, "Slurm " + text + " is older than " +
                                          to_string(known.front()) +
                                          ", the oldest release whose layout bbkit knows");
    if (std::find(known.begin(), known.end(), release) == known.end())
        throw Error(ExitCode::config,
                    "'" + text + "' is no Slurm release bbkit knows (" + known_list() +
                        "); for a later one leave slurm_release out, which means the newest");
    return release;
}

std::string empty_export(const std::optional<SlurmRelease>& release) {
    const SlurmRelease r = release.value_or(known_slurm_releases().back());
    return r < SlurmRelease{24, 11} ? "NONE" : "NIL";
}

BurstLayout burst_layout(const std::optional<SlurmRelease>& release) {
    const SlurmRelease r = release.value_or(known_slurm_releases().back());
    return {r < pool_name_since ? "AltPoolName" : "PoolName", !(r < poll_interval_since)};
}

}  // namespace bbkit
