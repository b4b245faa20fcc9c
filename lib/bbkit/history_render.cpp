#include "bbkit/history_render.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <sstream>
#include <vector>

#include "bbkit/fsops.hpp"
#include "bbkit/render.hpp"
#include "bbkit/size.hpp"
#include "bbkit/stat_render.hpp"

namespace bbkit {

namespace {

using json = nlohmann::json;

std::string fixed(double value, int decimals) {
    char text[64];
    std::snprintf(text, sizeof text, "%.*f", decimals, value);
    return text;
}

std::string run_time_text(double seconds) {
    if (seconds < 60)
        return fixed(seconds, 1) + "s";
    return age_text(std::chrono::seconds(static_cast<long long>(std::llround(seconds))));
}

double mean_seconds(const StageTotals& totals) {
    return totals.runs == 0 ? 0 : totals.seconds / static_cast<double>(totals.runs);
}

// RUNS SIZE FILES MEAN MAX of one direction; "-" for each when it has no run.
std::vector<std::string> stage_cells(const StageTotals& totals) {
    if (totals.runs == 0)
        return {"0", "-", "-", "-", "-"};
    return {std::to_string(totals.runs), approximate_size(totals.bytes),
            std::to_string(totals.files), run_time_text(mean_seconds(totals)),
            run_time_text(totals.max_seconds)};
}

std::vector<std::string> row_cells(const std::string& name, const AccountingRow& row) {
    std::vector<std::string> cells{name, std::to_string(row.buffers),
                                   fixed(gib_hours(row.byte_seconds), 2)};
    for (const StageTotals* totals : {&row.in, &row.out}) {
        const std::vector<std::string> stage = stage_cells(*totals);
        cells.insert(cells.end(), stage.begin(), stage.end());
    }
    cells.push_back(std::to_string(row.failed_buffers));
    return cells;
}

json stage_totals_json(const StageTotals& totals) {
    return {{"runs", totals.runs},       {"failed", totals.failed},
            {"files", totals.files},     {"bytes", totals.bytes},
            {"seconds", totals.seconds}, {"max_seconds", totals.max_seconds}};
}

json row_json(const AccountingRow& row) {
    return {{"name", row.name},
            {"buffers", row.buffers},
            {"failed_buffers", row.failed_buffers},
            {"gib_hours", gib_hours(row.byte_seconds)},
            {"stage_in", stage_totals_json(row.in)},
            {"stage_out", stage_totals_json(row.out)}};
}

const char* group_word(AccountingGroup by) {
    return by == AccountingGroup::user ? "user" : "pool";
}

// Text for an SVG element's content or attribute: the five characters XML reserves escaped,
// control characters dropped (a pool's name is an administrator's, but never trusted as markup).
std::string xml_text(const std::string& text) {
    std::string out;
    for (const char c : text) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&quot;";
                break;
            case '\'':
                out += "&apos;";
                break;
            default:
                if (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f)
                    out += c;
        }
    }
    return out;
}

// An axis label: the day and minute ("11-29 23:19"), or for a range under ten minutes the
// time to the second; the title carries the whole range.
std::string axis_time(TimePoint time, double range_seconds) {
    const std::time_t seconds = std::chrono::system_clock::to_time_t(time);
    std::tm tm{};
    localtime_r(&seconds, &tm);
    char text[32];
    std::strftime(text, sizeof text, range_seconds >= 600 ? "%m-%d %H:%M" : "%H:%M:%S", &tm);
    return text;
}

}  // namespace

std::string history_text(const AccountingReport& report) {
    std::ostringstream out;
    out << "history from " << slurm_time(report.query.since) << " to "
        << slurm_time(report.query.until) << " by " << group_word(report.query.by);
    if (report.query.user)
        out << ", user " << *report.query.user;
    if (report.query.pool)
        out << ", pool " << *report.query.pool;
    out << '\n';
    if (report.rows.empty()) {
        out << "no buffers in the range\n";
        return out.str();
    }
    const std::string first = report.query.by == AccountingGroup::user ? "USER" : "POOL";
    std::vector<Column> columns{{first, std::nullopt, true},
                                {"BUFFERS"},
                                {"GIB-HOURS"},
                                {"IN", std::nullopt, false, "  "},
                                {"IN-SIZE"},
                                {"IN-FILES"},
                                {"IN-MEAN"},
                                {"IN-MAX"},
                                {"OUT", std::nullopt, false, "  "},
                                {"OUT-SIZE"},
                                {"OUT-FILES"},
                                {"OUT-MEAN"},
                                {"OUT-MAX"},
                                {"FAILED", std::nullopt, false, "  "}};
    std::vector<std::vector<std::string>> rows;
    for (const AccountingRow& row : report.rows)
        rows.push_back(row_cells(row.name, row));
    rows.push_back(row_cells("TOTAL", report.total));
    out << text_table(columns, rows);
    return out.str();
}

json history_json(const AccountingReport& report) {
    json rows = json::array();
    for (const AccountingRow& row : report.rows)
        rows.push_back(row_json(row));
    json total = row_json(report.total);
    total.erase("name");
    return {{"since", slurm_time(report.query.since)},
            {"until", slurm_time(report.query.until)},
            {"by", group_word(report.query.by)},
            {"user", report.query.user ? json(*report.query.user) : json(nullptr)},
            {"pool", report.query.pool ? json(*report.query.pool) : json(nullptr)},
            {"rows", rows},
            {"total", total}};
}

const std::string_view pool_use_first_line = "<!-- bbkit pool use";

std::string pool_use_svg(const PoolUse& use) {
    // The plot's frame: a chart of w x h at (left, top) in a picture of width x height.
    const double width = 800, height = 360, left = 70, top = 40, w = 700, h = 270;
    const double ceiling = std::max({static_cast<double>(use.capacity), use.peak_bytes, 1.0});
    const std::size_t slots = use.mean_bytes.size();
    const auto y_of = [&](double bytes) { return top + h - h * bytes / ceiling; };
    const auto x_of = [&](std::size_t slot) {
        return left +
               w * static_cast<double>(slot) / static_cast<double>(std::max<std::size_t>(slots, 1));
    };
    std::ostringstream svg;
    svg << pool_use_first_line << ": " << xml_text(use.pool) << " from " << slurm_time(use.since)
        << " to " << slurm_time(use.until) << " -->\n";
    svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
        << "\" viewBox=\"0 0 " << width << ' ' << height
        << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
    svg << "<title>Pool " << xml_text(use.pool) << ": space held</title>\n";
    svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    svg << "<text x=\"" << left << "\" y=\"22\" font-size=\"15\">Pool " << xml_text(use.pool)
        << ": space held, " << slurm_time(use.since) << " to " << slurm_time(use.until)
        << "</text>\n";
    // The use, as steps: each slot's mean across its width.
    svg << "<path fill=\"#4e79a7\" fill-opacity=\"0.45\" stroke=\"#4e79a7\" d=\"M" << fixed(left, 1)
        << ',' << fixed(top + h, 1);
    for (std::size_t i = 0; i < slots; ++i) {
        const std::string y = fixed(y_of(use.mean_bytes[i]), 1);
        svg << " L" << fixed(x_of(i), 1) << ',' << y << " L" << fixed(x_of(i + 1), 1) << ',' << y;
    }
    svg << " L" << fixed(left + w, 1) << ',' << fixed(top + h, 1) << " Z\"/>\n";
    // The capacity, the axes and their labels.
    const double cap_y = y_of(static_cast<double>(use.capacity));
    svg << "<line x1=\"" << left << "\" y1=\"" << fixed(cap_y, 1) << "\" x2=\"" << left + w
        << "\" y2=\"" << fixed(cap_y, 1) << "\" stroke=\"#e15759\" stroke-dasharray=\"6 4\"/>\n";
    svg << "<text x=\"" << left + w << "\" y=\"" << fixed(cap_y - 4, 1)
        << "\" text-anchor=\"end\" fill=\"#e15759\">capacity " << approximate_size(use.capacity)
        << "</text>\n";
    svg << "<path fill=\"none\" stroke=\"black\" d=\"M" << left << ',' << top << " L" << left << ','
        << top + h << " L" << left + w << ',' << top + h << "\"/>\n";
    for (int i = 0; i <= 4; ++i) {
        const double bytes = ceiling * i / 4;
        svg << "<text x=\"" << left - 6 << "\" y=\"" << fixed(y_of(bytes) + 4, 1)
            << "\" text-anchor=\"end\">" << approximate_size(static_cast<std::uint64_t>(bytes))
            << "</text>\n";
    }
    const double range = std::chrono::duration<double>(use.until - use.since).count();
    for (int i = 0; i <= 4; ++i) {
        const TimePoint at = use.since + (use.until - use.since) * i / 4;
        svg << "<text x=\"" << fixed(left + w * i / 4, 1) << "\" y=\"" << top + h + 18
            << "\" text-anchor=\""
            << (i == 0   ? "start"
                : i == 4 ? "end"
                         : "middle")
            << "\">" << axis_time(at, range) << "</text>\n";
    }
    svg << "<text x=\"" << left << "\" y=\"" << height - 12 << "\">peak "
        << approximate_size(static_cast<std::uint64_t>(use.peak_bytes)) << " of "
        << approximate_size(use.capacity) << " (mean per slot of "
        << run_time_text(range / static_cast<double>(std::max<std::size_t>(slots, 1)))
        << ")</text>\n";
    svg << "</svg>\n";
    return svg.str();
}

void write_plot(const std::string& target, const std::string& svg) {
    if (standard_output("--plot", target)) {
        std::cout << svg << std::flush;
        return;
    }
    write_own_output(target, svg, 0644, pool_use_first_line);
}

}  // namespace bbkit
