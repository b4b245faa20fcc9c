#include "bbkit/directive.hpp"

#include <algorithm>
#include <cctype>
#include <climits>
#include <string_view>
#include <utility>

#include "bbkit/buffer_key.hpp"
#include "bbkit/directive_private.hpp"
#include "bbkit/error.hpp"
#include "bbkit/size.hpp"
#include "bbkit/text.hpp"

namespace bbkit {

const char* to_string(Origin origin) {
    switch (origin) {
        case Origin::script:
            return "script";
        case Origin::bb_option:
            return "--bb";
        case Origin::bbf_file:
            return "--bbf";
        case Origin::command_line:
            return "command line";
    }
    return "?";
}

const char* to_string(StageType type) {
    switch (type) {
        case StageType::file:
            return "file";
        case StageType::directory:
            return "directory";
        case StageType::list:
            return "list";
    }
    return "?";
}

const char* to_string(Spread spread) {
    return spread == Spread::shard ? "shard" : "copy";
}

const char* to_string(Gather gather) {
    return gather == Gather::merge ? "merge" : "nodes";
}

namespace directive_internal {

bool is_blank(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

// ---- tokens ----------------------------------------------------------------------------------

std::vector<Token> tokenize(const std::string& body) {
    std::vector<Token> tokens;
    std::size_t i = 0;
    while (true) {
        while (i < body.size() && is_blank(body[i]))
            ++i;
        if (i == body.size())
            return tokens;
        std::string text;
        std::size_t eq = std::string::npos;
        bool quoted = false;
        for (; i < body.size() && (quoted || !is_blank(body[i])); ++i) {
            const char c = body[i];
            const char next = i + 1 < body.size() ? body[i + 1] : '\0';
            if (c == '\\' && (next == '"' || next == '\\')) {
                text += next == '"' ? "\"" : "\\\\";
                ++i;
            } else if (c == '"') {
                quoted = !quoted;
            } else {
                if (c == '=' && !quoted && eq == std::string::npos)
                    eq = text.size();
                text += c;
            }
        }
        if (quoted)
            throw invalid("unterminated quote in '" + text + "'");
        Token token;
        if (eq == std::string::npos) {
            token.key = text;
        } else {
            if (eq == 0)
                throw invalid("'" + text + "' has no key before '='");
            token.key = text.substr(0, eq);
            token.value = text.substr(eq + 1);
            token.has_value = true;
        }
        tokens.push_back(std::move(token));
    }
}

// ---- lengths ---------------------------------------------------------------------------------

namespace {

// A path longer than PATH_MAX - 1 bytes can never be opened, and every other value is a size,
// a mode, a type or a name: each is refused past its bound at parse time, before a request is
// stored anywhere (bb-parse(1), LIMITS). burst_buffer.lua checks the same bounds.
constexpr std::size_t max_path_bytes = PATH_MAX - 1;
constexpr std::size_t max_word_bytes = 256;

bool is_path_key(const std::string& key) {
    return key == "source" || key == "destination";
}

}  // namespace

void check_value_length(const Token& token, bool as_written) {
    const bool path = is_path_key(token.key);
    const std::size_t limit = path ? max_path_bytes : max_word_bytes;
    std::size_t size = token.value.size();
    if (as_written && token.value.find("\\\\") != std::string::npos)
        size -= 2;
    if (size > limit)
        throw invalid(token.key + "= is " + std::to_string(size) + " bytes long (" +
                      (path ? "a path" : "a value") + " holds at most " + std::to_string(limit) +
                      " bytes)");
}

void check_lengths(const std::vector<Token>& tokens) {
    for (const Token& token : tokens) {
        if (token.key.size() > max_word_bytes)
            throw invalid("a word of " + std::to_string(token.key.size()) +
                          " bytes (a key or word holds at most " + std::to_string(max_word_bytes) +
                          " bytes)");
        if (token.has_value)
            check_value_length(token, true);
    }
}

// ---- symbols ---------------------------------------------------------------------------------

namespace {

// Slurm's %a for a job that is not part of an array (NO_VAL - 1).
const char* const non_array_task_id = "4294967294";

std::optional<std::string> array_task(const JobContext& job) {
    if (job.array_task_id)
        return job.array_task_id;
    if (job.job_id)
        return std::string(non_array_task_id);
    return std::nullopt;
}

// The replacement of %<symbol>; nullopt when the job context does not know it yet.
std::optional<std::string> symbol_value(char symbol, const JobContext& job) {
    switch (symbol) {
        case 'A':
            return job.array_job_id ? job.array_job_id : job.job_id;
        case 'a':
            return array_task(job);
        case 'b': {
            const std::optional<std::string> task = array_task(job);
            if (!task || !all_digits(*task))
                return std::nullopt;
            return task->substr(task->size() - 1);  // n % 10 is its last decimal digit
        }
        case 'd':
            return job.workdir;
        case 'j':
            return job.job_id;
        case 'u':
            return job.user;
        case 'x':
            return job.job_name;
    }
    return std::nullopt;
}

bool is_symbol(char c) {
    return c != '\0' && std::string("Aabdjux").find(c) != std::string::npos;
}

}  // namespace

std::string replace_symbols(const std::string& value, Symbols& symbols) {
    if (symbols.stopped)
        return value;
    std::string out;
    for (std::size_t i = 0; i < value.size(); ++i) {
        const char c = value[i];
        const char next = i + 1 < value.size() ? value[i + 1] : '\0';
        if (c == '\\' && next == '\\') {
            symbols.stopped = true;
            return out + value.substr(i + 2);
        }
        if (c != '%' || next == '\0') {
            out += c;
            continue;
        }
        ++i;
        if (next == '%') {
            out += '%';
            continue;
        }
        const std::optional<std::string> replacement =
            is_symbol(next) ? symbol_value(next, symbols.job) : std::nullopt;
        if (replacement) {
            // A directive is one line: a job name (or user, or directory) holding a newline
            // or another control character cannot be written back (--emit-script, Slurm).
            if (std::any_of(replacement->begin(), replacement->end(),
                            [](char r) { return is_control(r) && r != '\t'; }))
                throw invalid(std::string("the value of %") + next + " ('" +
                              printable(*replacement) +
                              "') holds a control character, which a directive line cannot "
                              "hold (rename the job)");
            out += *replacement;
            continue;
        }
        out += '%';
        out += next;
        if (is_symbol(next) && symbols.unresolved.empty())
            symbols.unresolved = out.substr(out.size() - 2);
    }
    return out;
}

// ---- values ----------------------------------------------------------------------------------

Error swap_refused() {
    return invalid("swap is not supported: bbkit buffers are a directory, not swap space");
}

std::string check_type(const std::string& type) {
    if (type == "scratch")
        return type;
    if (type == "cache")
        throw invalid(
            "type=cache is not supported: bbkit buffers are scratch space (stage files in and out "
            "instead)");
    throw invalid("unknown type '" + type + "' (bbkit buffers are type=scratch)");
}

std::string check_access(const std::string& access) {
    std::vector<std::string> modes;
    std::size_t begin = 0;
    while (true) {
        const std::size_t comma = access.find(',', begin);
        const std::string mode = access.substr(begin, comma - begin);
        if (mode != "striped" && mode != "private")
            throw invalid("unsupported access mode '" + mode + "' in '" + access +
                          "': a bbkit buffer is one directory (use striped or private)");
        if (std::find(modes.begin(), modes.end(), mode) == modes.end())
            modes.push_back(mode);
        if (comma == std::string::npos)
            break;
        begin = comma + 1;
    }
    std::string out;
    for (const std::string& mode : modes)
        out += (out.empty() ? "" : ",") + mode;
    return out;
}

namespace {

// The variable prefixes that name the job's own buffer.
bool strip_job_variable(const std::string& path, std::string& rest) {
    static const char* const names[] = {"BB_JOB_DIR", "DW_JOB_STRIPED", "DW_JOB_PRIVATE"};
    for (const char* name : names)
        for (const std::string& prefix : {"$" + std::string(name), "${" + std::string(name) + "}"})
            if (starts_with(path, prefix) &&
                (path.size() == prefix.size() || path[prefix.size()] == '/')) {
                rest = path.substr(prefix.size());
                return true;
            }
    return false;
}

// $DW_PERSISTENT_STRIPED_<name> or ${DW_PERSISTENT_STRIPED_<name>}: sets `buffer` to <name>.
bool strip_persistent_variable(const std::string& path, std::string& buffer, std::string& rest) {
    const bool braced = starts_with(path, "${" + std::string(persistent_variable));
    if (!braced && !starts_with(path, "$" + std::string(persistent_variable)))
        return false;
    const std::size_t begin = (braced ? 2 : 1) + std::string(persistent_variable).size();
    const std::size_t end = path.find(braced ? '}' : '/', begin);
    const std::string name = path.substr(begin, end == std::string::npos ? end : end - begin);
    const bool valid = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    });
    const std::size_t after = end == std::string::npos ? path.size() : end + (braced ? 1 : 0);
    if (!valid || (braced && end == std::string::npos) ||
        (after < path.size() && path[after] != '/'))
        return false;
    buffer = name;
    rest = path.substr(after);
    return true;
}

}  // namespace

std::string buffer_relative(const std::string& path, std::string& buffer, const std::string& role) {
    const std::string what = role + " '" + path + "'";
    if (path.empty())
        throw invalid(role + " is empty");
    std::string rest = path;
    buffer.clear();
    if (path[0] == '$') {
        if (!strip_job_variable(path, rest) && !strip_persistent_variable(path, buffer, rest))
            throw invalid(what +
                          " starts with an unknown variable (use $BB_JOB_DIR, $DW_JOB_STRIPED, "
                          "$DW_JOB_PRIVATE or $DW_PERSISTENT_STRIPED_<name>)");
    } else if (path[0] == '/') {
        throw invalid(what +
                      " is outside the buffer (write it relative to the buffer or as "
                      "$DW_JOB_STRIPED/…)");
    }
    return join(path_components(rest, what + " is outside the buffer ('..' is not allowed)"), "/");
}

std::string outside_path(const std::string& path, const std::string& role, bool workdir_pending) {
    const std::string what = role + " '" + path + "'";
    if (path.empty())
        throw invalid(role + " is empty");
    std::string head = "/";
    std::string rest = path;
    if (workdir_pending && starts_with(path, "%d") && (path.size() == 2 || path[2] == '/')) {
        head = "%d/";
        rest = path.substr(2);
    } else if (path[0] != '/') {
        throw invalid(what + " must be an absolute path (write %d/" + path +
                      " for a path under the job's working directory)");
    }
    const std::string joined = join(path_components(rest, what + " must not contain '..'"), "/");
    if (joined.empty())
        return head == "/" ? "/" : "%d";
    return head + joined;
}

void check_writable(const std::string& path, const std::string& role) {
    if ((!path.empty() && path.back() == '\\') || path.find("\\\"") != std::string::npos)
        throw invalid(role + " '" + path +
                      "' has a backslash at its end or before a '\"', which a directive cannot "
                      "hold (rename the file)");
}

// ---- canonical lines -------------------------------------------------------------------------

namespace {

std::string quote(const std::string& value) {
    if (!value.empty() && value.find_first_of(" \t\r\v\f\"\\") == std::string::npos)
        return value;
    std::string out = "\"";
    for (char c : value)
        out += c == '"' ? std::string("\\\"") : std::string(1, c);
    return out + "\"";
}

}  // namespace

std::string directive_line(const std::string& prefix, const std::string& command, Pairs pairs,
                           bool resolved) {
    if (resolved)
        for (auto& pair : pairs)
            if (pair.second.find('%') != std::string::npos ||
                pair.second.find("\\\\") != std::string::npos) {
                pair.second = "\\\\" + pair.second;
                break;
            }
    std::string line = "#" + prefix + (command.empty() ? "" : " " + command);
    for (const auto& pair : pairs)
        line += " " + pair.first + "=" + quote(pair.second);
    return line;
}

namespace {

std::string buffer_path(const std::string& relative, const std::string& buffer) {
    const std::string root =
        buffer.empty() ? "$BB_JOB_DIR"
                       : "$" + std::string(persistent_variable) + persistent_variable_form(buffer);
    return relative.empty() ? root : root + "/" + relative;
}

}  // namespace
}  // namespace directive_internal

using namespace directive_internal;

Spread parse_spread(const std::string& name) {
    if (name == "copy")
        return Spread::copy;
    if (name == "shard")
        return Spread::shard;
    throw invalid("unknown distribute '" + name + "' (use copy or shard)");
}

Gather parse_gather(const std::string& name) {
    if (name == "nodes")
        return Gather::nodes;
    if (name == "merge")
        return Gather::merge;
    throw invalid("unknown gather '" + name + "' (use nodes or merge)");
}

StageType parse_stage_type(const std::string& name) {
    if (name == "file")
        return StageType::file;
    if (name == "directory")
        return StageType::directory;
    if (name == "list")
        return StageType::list;
    throw invalid("unknown stage type '" + name + "' (use file, directory or list)");
}

// A list file names sources outside the buffer, one a line: it has no meaning for a
// stage-out, whose sources are in the buffer. Refused when the job is submitted rather than
// when its output is staged out, after it ran.
void check_stage_type(StageType type, bool stage_in) {
    if (type == StageType::list && !stage_in)
        throw invalid(
            "stage_out type=list is not supported (write one stage_out line per file or "
            "directory)");
}

std::vector<std::string> path_components(const std::string& path, const std::string& climbing) {
    std::vector<std::string> parts;
    std::size_t begin = 0;
    while (begin <= path.size()) {
        std::size_t slash = path.find('/', begin);
        if (slash == std::string::npos)
            slash = path.size();
        std::string part = path.substr(begin, slash - begin);
        if (part == "..")
            throw invalid(climbing);
        if (!part.empty() && part != ".")
            parts.push_back(std::move(part));
        begin = slash + 1;
    }
    return parts;
}

std::string buffer_relative_path(const std::string& path, std::string& buffer) {
    return buffer_relative(path, buffer, "destination");
}

std::vector<std::string> canonical_lines(const Request& request, const Config& config) {
    const std::string prefix = config.directives.empty() ? "BB_LUA" : config.directives[0];
    const bool datawarp = prefix == "DW";
    std::vector<std::string> lines;
    if (const auto& b = request.job_buffer) {
        const std::string capacity = format_size(b->capacity);
        if (datawarp)
            lines.push_back(directive_line(prefix, "jobdw",
                                           {{"capacity", capacity},
                                            {"pool", b->pool},
                                            {"access_mode", b->access},
                                            {"type", b->type}},
                                           true));
        else
            lines.push_back(directive_line(prefix, "",
                                           {{"pool", b->pool},
                                            {"capacity", capacity},
                                            {"access", b->access},
                                            {"type", b->type}},
                                           true));
    }
    // Slurm's datawarp plugin creates and destroys persistent buffers from #BB lines only.
    const std::string persistent_prefix = datawarp ? "BB" : prefix;
    for (const PersistentCreate& c : request.create)
        lines.push_back(directive_line(persistent_prefix, "create_persistent",
                                       {{"name", c.name},
                                        {"capacity", format_size(c.capacity)},
                                        {"access", c.access},
                                        {"pool", c.pool},
                                        {"type", c.type}},
                                       true));
    for (const PersistentUse& u : request.use)
        lines.push_back(directive_line(prefix, datawarp ? "persistentdw" : "use_persistent",
                                       {{"name", u.name}}, true));
    for (const StageDirective& s : request.stage_in) {
        Pairs pairs{{"type", to_string(s.type)},
                    {"source", s.source},
                    {"destination", buffer_path(s.destination, s.buffer)}};
        if (s.distribute)
            pairs.emplace_back("distribute", to_string(*s.distribute));
        lines.push_back(directive_line(prefix, "stage_in", pairs, !s.unresolved));
    }
    for (const StageDirective& s : request.stage_out) {
        Pairs pairs{{"type", to_string(s.type)},
                    {"source", buffer_path(s.source, s.buffer)},
                    {"destination", s.destination}};
        if (s.gather)
            pairs.emplace_back("gather", to_string(*s.gather));
        lines.push_back(directive_line(prefix, "stage_out", pairs, !s.unresolved));
    }
    for (const PersistentDestroy& d : request.destroy)
        lines.push_back(
            directive_line(persistent_prefix, "destroy_persistent", {{"name", d.name}}, true) +
            (d.hurry ? " hurry" : ""));
    if (lines.empty() && request.has_directive)
        lines.push_back("#" + prefix);
    return lines;
}

}  // namespace bbkit
