#include "bbkit/slurm_gres.hpp"

#include <algorithm>
#include <optional>
#include <vector>

#include "bbkit/error.hpp"
#include "bbkit/text.hpp"

namespace bbkit {

namespace {

[[noreturn]] void malformed(const std::string& text, const std::string& why) {
    throw Error(ExitCode::data, "Slurm's GRES of the job on this node, '" + printable(text) +
                                    "', is not a list Slurm prints (" + why + ")");
}

// The items of the list: split at the commas outside parentheses.
std::vector<std::string> items_of(const std::string& text) {
    std::vector<std::string> items;
    std::string item;
    int depth = 0;
    for (const char c : text) {
        if (c == '(') {
            ++depth;
        } else if (c == ')') {
            if (--depth < 0)
                malformed(text, "a ')' without its '('");
        } else if (c == ',' && depth == 0) {
            items.push_back(item);
            item.clear();
            continue;
        }
        item += c;
    }
    if (depth != 0)
        malformed(text, "a '(' without its ')'");
    items.push_back(item);
    return items;
}

std::uint64_t count_of(const std::string& text, const std::string& digits) {
    const std::optional<std::uint64_t> n = parse_decimal(digits);
    if (!n)
        malformed(text, "count '" + printable(digits) + "' is not a number");
    return *n;
}

// The indices of an IDX list ("0-1,3"): how many.
std::uint64_t indices_in(const std::string& text, const std::string& list) {
    std::uint64_t n = 0;
    std::size_t start = 0;
    while (start <= list.size()) {
        const std::size_t end = std::min(list.find(',', start), list.size());
        const std::string range = list.substr(start, end - start);
        const std::size_t dash = range.find('-');
        if (dash == std::string::npos) {
            count_of(text, range);
            ++n;
        } else {
            const std::uint64_t low = count_of(text, range.substr(0, dash));
            const std::uint64_t high = count_of(text, range.substr(dash + 1));
            if (high < low || high - low == UINT64_MAX)
                malformed(text,
                          "index range '" + printable(range) + "' runs backwards or past 64 bits");
            n += high - low + 1;
        }
        start = end + 1;
    }
    return n;
}

// One item's name and units.
std::pair<std::string, std::uint64_t> item_units(const std::string& text, std::string item) {
    // squeue's TRES form: gres:NAME[:TYPE][:N] or gres/NAME[:TYPE][:N], the count optional.
    if (starts_with(item, "gres:") || starts_with(item, "gres/")) {
        item.erase(0, 5);
        const std::size_t last = item.rfind(':');
        if (item.find('(') != std::string::npos || item.empty() || item.front() == ':')
            malformed(text, "item 'gres" + printable(item) + "' is not a GRES");
        if (last == std::string::npos || !all_digits(item.substr(last + 1)))
            return {item.substr(0, item.find(':')), 1};
    }
    const std::size_t open = item.find('(');
    std::string head = item.substr(0, open);
    std::uint64_t units = 0;
    if (open != std::string::npos) {
        if (item.back() != ')')
            malformed(text, "text after ')'");
        const std::string inside = item.substr(open + 1, item.size() - open - 2);
        if (starts_with(inside, "CNT:"))
            units = count_of(text, inside.substr(4));
        else if (starts_with(inside, "IDX:"))
            units = inside == "IDX:N/A" ? 0 : indices_in(text, inside.substr(4));
        else
            malformed(text, "neither CNT: nor IDX: in parentheses");
        const std::size_t colon = head.find(':');
        return {head.substr(0, colon), units};
    }
    // NAME[:TYPE]:N
    const std::size_t last = head.rfind(':');
    if (last == std::string::npos)
        malformed(text, "item '" + printable(item) + "' has no count");
    units = count_of(text, head.substr(last + 1));
    head.resize(last);
    return {head.substr(0, head.find(':')), units};
}

}  // namespace

std::uint64_t granted_units(const std::string& slurm_gres, const std::string& name) {
    if (slurm_gres.empty() || slurm_gres == "(null)" || slurm_gres == "N/A")
        return 0;
    std::uint64_t total = 0;
    for (const std::string& item : items_of(slurm_gres)) {
        const auto [item_name, units] = item_units(slurm_gres, item);
        if (item_name.empty())  // "(CNT:6)", ":6": every form's one check
            malformed(slurm_gres, "an item without a name");
        if (item_name != name)
            continue;
        if (total + units < total)
            malformed(slurm_gres, "counts add up past 64 bits");
        total += units;
    }
    return total;
}

}  // namespace bbkit
