#include "bbkit/slurm_gres.hpp"

#include <algorithm>
#include <optional>
#include <vector>

#include "bbkit/error.hpp"
#include "bbkit/text.hpp"

namespace bbkit {

namespace {

[[noreturn]] void malformed(const std::string& text, const std::string& why,
                            const char* whose = "of the job on this node") {
    throw Error(ExitCode::data, std::string("Slurm's GRES ") + whose + ", '" + printable(text) +
                                    "', is not a list Slurm prints (" + why + ")");
}

constexpr const char* node_whose = "of this node";

// The items of the list: split at the commas outside parentheses.
std::vector<std::string> items_of(const std::string& text,
                                  const char* whose = "of the job on this node") {
    std::vector<std::string> items;
    std::string item;
    int depth = 0;
    for (const char c : text) {
        if (c == '(') {
            ++depth;
        } else if (c == ')') {
            if (--depth < 0)
                malformed(text, "a ')' without its '('", whose);
        } else if (c == ',' && depth == 0) {
            items.push_back(item);
            item.clear();
            continue;
        }
        item += c;
    }
    if (depth != 0)
        malformed(text, "a '(' without its ')'", whose);
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

// A node item's COUNT: decimal digits, maybe with one of Slurm's 1024-fold suffixes.
std::uint64_t node_count_of(const std::string& text, std::string count) {
    static const std::string suffixes = "KMGTP";
    int power = 0;
    if (!count.empty()) {
        const std::size_t at = suffixes.find(count.back());
        if (at != std::string::npos) {
            power = static_cast<int>(at) + 1;
            count.pop_back();
        }
    }
    const std::optional<std::uint64_t> n = parse_decimal(count);
    if (!n)
        malformed(text, "count '" + printable(count) + "' is not a number", node_whose);
    std::uint64_t value = *n;
    for (int i = 0; i < power; ++i) {
        if (value > UINT64_MAX / 1024)
            malformed(text, "count '" + printable(count) + "' is past 64 bits", node_whose);
        value *= 1024;
    }
    return value;
}

NodeGres node_item(const std::string& text, const std::string& item) {
    std::string head = item;
    if (const std::size_t open = item.find('('); open != std::string::npos) {
        if (item.back() != ')' || !starts_with(std::string_view(item).substr(open), "(S:"))
            malformed(text, "item '" + printable(item) + "' has other than sockets in parentheses",
                      node_whose);
        head.resize(open);
    }
    // NAME, then TYPE and the no_consume flag (each at most once, the flag after the type), COUNT.
    std::vector<std::string> words;
    for (std::size_t start = 0;;) {
        const std::size_t colon = head.find(':', start);
        words.push_back(head.substr(start, colon - start));
        if (colon == std::string::npos)
            break;
        start = colon + 1;
    }
    const auto not_the_form = [&] {
        malformed(text, "item '" + printable(item) + "' is not NAME[:TYPE][:no_consume]:COUNT",
                  node_whose);
    };
    if (words.size() < 2 || words.size() > 4 || words.front().empty() || words.back().empty())
        not_the_form();
    NodeGres gres;
    gres.name = words.front();
    for (std::size_t i = 1; i + 1 < words.size(); ++i) {
        if (words[i] == "no_consume" && !gres.no_consume)
            gres.no_consume = true;
        else if (i == 1 && !words[i].empty() && words[i] != "no_consume")
            gres.type = words[i];
        else
            not_the_form();
    }
    const std::size_t last = head.rfind(':');
    gres.count = node_count_of(text, head.substr(last + 1));
    return gres;
}

}  // namespace

std::vector<NodeGres> parse_node_gres(const std::string& text) {
    std::vector<NodeGres> gres;
    if (text.empty() || text == "(null)")
        return gres;
    for (const std::string& item : items_of(text, node_whose))
        gres.push_back(node_item(text, item));
    return gres;
}

std::uint64_t node_gres_units(const std::vector<NodeGres>& gres, const std::string& name) {
    std::uint64_t total = 0;
    for (const NodeGres& item : gres)
        if (item.name == name)
            total = total + item.count < total ? UINT64_MAX : total + item.count;
    return total;
}

std::string node_gres_text(const std::vector<NodeGres>& gres) {
    std::vector<std::string> items;
    for (const NodeGres& item : gres)
        items.push_back(item.name + (item.type.empty() ? "" : ":" + item.type) +
                        (item.no_consume ? ":no_consume" : "") + ":" + std::to_string(item.count));
    return items.empty() ? "(null)" : join(items, ",");
}

std::set<std::uint64_t> parse_job_ids(const std::string& text) {
    std::set<std::uint64_t> ids;
    std::size_t start = 0;
    while (start < text.size()) {
        const std::size_t end = std::min(text.find_first_of(", \t\n", start), text.size());
        if (end > start) {
            const std::string word = text.substr(start, end - start);
            const std::optional<std::uint64_t> id = parse_decimal(word);
            if (!id || *id == 0)
                throw Error(ExitCode::usage, "'" + printable(word) +
                                                 "' in the list of Slurm's jobs is not a job id");
            ids.insert(*id);
        }
        start = end + 1;
    }
    return ids;
}

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
