#include "bbkit/slurm_view.hpp"

#include <cctype>
#include <limits>

#include "bbkit/error.hpp"
#include "bbkit/size.hpp"
#include "bbkit/text.hpp"

namespace bbkit {
namespace {

// Slurm's run_command_add_to_script: after the first line of a script starting with '#',
// else in front of it.
void splice(std::string& script, std::string addition) {
    if (addition.empty())
        return;
    if (addition.back() != '\n')
        addition += '\n';
    if (script.empty()) {
        script = addition;
        return;
    }
    if (script[0] != '#') {
        script = addition + script;
        return;
    }
    const std::size_t newline = script.find('\n');
    if (newline == std::string::npos)
        script += "\n" + addition;
    else
        script.insert(newline + 1, addition);
}

// Slurm's strtok(text, "\n"): empty lines vanish.
std::vector<std::string> nonempty_lines(const std::string& text) {
    std::vector<std::string> lines;
    std::size_t begin = 0;
    while (begin < text.size()) {
        std::size_t end = text.find('\n', begin);
        if (end == std::string::npos)
            end = text.size();
        if (end > begin)
            lines.push_back(text.substr(begin, end - begin));
        begin = end + 1;
    }
    return lines;
}

bool c_space(char c) {
    return std::isspace(static_cast<unsigned char>(c)) != 0;
}

// Slurm's suffix_mult; 0 for an unknown suffix (Slurm then keeps the bare number).
std::uint64_t suffix_multiplier(const std::string& unit) {
    const std::uint64_t k = 1024, d = 1000;
    const struct {
        const char* names[2];
        std::uint64_t value;
    } table[] = {{{"k", "kib"}, k},
                 {{"kb", "kb"}, d},
                 {{"m", "mib"}, k * k},
                 {{"mb", "mb"}, d * d},
                 {{"g", "gib"}, k * k * k},
                 {{"gb", "gb"}, d * d * d},
                 {{"t", "tib"}, k * k * k * k},
                 {{"tb", "tb"}, d * d * d * d},
                 {{"p", "pib"}, k * k * k * k * k},
                 {{"pb", "pb"}, d * d * d * d * d}};
    if (unit.empty())
        return 1;
    const std::string name = lower(unit);
    for (const auto& row : table)
        if (name == row.names[0] || name == row.names[1])
            return row.value;
    return 0;
}

// Slurm's bb_get_size_num(text, 1). Sizes past 2^64 wrap in Slurm; here they saturate, which
// never equals a size bbkit accepts.
void slurm_size(const std::string& text, SlurmBufferLine& line) {
    std::size_t at = 0;
    while (at < text.size() && c_space(text[at]))
        ++at;
    if (at < text.size() && text[at] == '+')
        ++at;
    std::uint64_t value = 0;
    bool digits = false, overflow = false;
    for (; at < text.size() && std::isdigit(static_cast<unsigned char>(text[at])); ++at) {
        digits = true;
        const std::uint64_t digit = static_cast<std::uint64_t>(text[at] - '0');
        if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10)
            overflow = true;
        else
            value = value * 10 + digit;
    }
    if (!digits || overflow || value == 0)
        return;  // Slurm: size 0, the job is refused
    line.size = value;
    if (at >= text.size() || c_space(text[at]))
        return;
    std::string unit = text.substr(at);
    unit = unit.substr(0, unit.find(' '));
    const std::string name = lower(unit);
    if (name == "n" || name == "node" || name == "nodes") {
        line.nodes = true;
        return;
    }
    const std::uint64_t mult = suffix_multiplier(unit);
    if (mult == 0)
        return;
    line.size = value > std::numeric_limits<std::uint64_t>::max() / mult
                    ? std::numeric_limits<std::uint64_t>::max()
                    : value * mult;
}

std::string single_quoted(const std::string& text) {
    return "'" + text + "'";
}

}  // namespace

std::string slurm_job_text(const RequestText& text) {
    std::string script = text.script.value_or("");
    while (!script.empty() && script.back() == '\0')
        script.pop_back();
    if (text.bbf)
        splice(script, *text.bbf);
    if (text.bb)
        splice(script, *text.bb);
    return script;
}

SlurmView slurm_view(const std::string& text, const std::string& directive, const Config& config) {
    SlurmView view;
    std::vector<std::string> joined;
    bool continuing = false;
    for (std::string line : nonempty_lines(text)) {
        if (line[0] != '#')
            break;
        if (!starts_with(line, "#" + directive)) {
            continuing = false;
            continue;
        }
        view.has_directive = true;
        std::string body = line.substr(directive.size() + 1);
        if (continuing && !joined.empty()) {
            std::size_t skip = 0;
            while (skip < body.size() && c_space(body[skip]))
                ++skip;
            joined.back() += body.substr(skip);
        } else {
            joined.push_back(body);
        }
        continuing = !body.empty() && body.back() == '\\';
        if (continuing)
            joined.back().pop_back();
    }
    for (const std::string& body : joined) {
        const std::size_t capacity = body.find("capacity=");
        if (capacity == std::string::npos)
            continue;
        SlurmBufferLine line;
        line.text = body;
        slurm_size(body.substr(capacity + 9), line);
        const std::size_t pool = body.find("pool=");
        if (pool != std::string::npos) {
            const std::string value = body.substr(pool + 5);
            line.pool = value.substr(0, value.find(' '));
        }
        view.pool = line.pool;
        std::uint64_t size = line.size;
        if (line.pool && !line.nodes)
            if (const PoolConfig* p = config.find_pool(*line.pool))
                if (size <= max_size) {
                    try {
                        size = round_up(size, p->granularity);
                    } catch (const Error&) {
                        size = std::numeric_limits<std::uint64_t>::max();  // past any bbkit size
                    }
                }
        view.total = size > std::numeric_limits<std::uint64_t>::max() - view.total
                         ? std::numeric_limits<std::uint64_t>::max()
                         : view.total + size;
        view.capacity_lines.push_back(line);
    }
    return view;
}

void check_slurm_view(const RequestText& text, const Request& request, const Config& config) {
    if (config.mode != Mode::slurm)
        return;
    const std::string directive = config.directives.empty() ? "BB_LUA" : config.directives[0];
    const SlurmView view = slurm_view(slurm_job_text(text), directive, config);
    auto differ = [](const std::string& why) {
        return Error(ExitCode::data, "Slurm reads this request differently: " + why);
    };
    const std::string where = "#" + directive + " line";
    if (view.capacity_lines.size() > 1)
        throw differ(std::to_string(view.capacity_lines.size()) + " " + where +
                     "s hold capacity= and Slurm adds them up; bbkit allows one buffer line");
    const auto& job = request.job_buffer;
    if (view.capacity_lines.empty()) {
        if (job)
            throw differ("Slurm sees no capacity= on a " + where +
                         " (write capacity= and pool= on one " + where + ", continued only by " +
                         where + "s)");
        return;
    }
    const SlurmBufferLine& line = view.capacity_lines.front();
    if (!job)
        throw differ("Slurm takes " + single_quoted("#" + directive + line.text) +
                     " for a buffer request (capacity= inside another word or line)");
    if (!line.pool)
        throw differ("Slurm needs pool= on the line with capacity= (it applies no default pool)");
    if (*line.pool != job->pool)
        throw differ("Slurm reads pool " + single_quoted(*line.pool) + ", bbkit pool " +
                     single_quoted(job->pool) + " (write pool= once, as its own word)");
    if (line.nodes || view.total != job->allocated)
        throw differ("Slurm reads capacity " +
                     (line.nodes ? std::to_string(line.size) + " nodes"
                                 : std::to_string(view.total) + " bytes") +
                     ", bbkit " + std::to_string(job->allocated) +
                     " bytes (write capacity= once, as its own word)");
}

}  // namespace bbkit
