#include "bbkit/directive.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <string_view>
#include <utility>

#include "bbkit/access.hpp"
#include "bbkit/buffer_key.hpp"
#include "bbkit/directive_private.hpp"
#include "bbkit/error.hpp"
#include "bbkit/size.hpp"
#include "bbkit/text.hpp"
#include "bbkit/user.hpp"

namespace bbkit {
namespace directive_internal {
namespace {

// ---- lines -----------------------------------------------------------------------------------

// The prefix `line` starts with ("#" + prefix + blank or end), or "" when none does.
std::string match_prefix(std::string_view line, const std::vector<std::string>& prefixes) {
    for (const std::string& prefix : prefixes) {
        if (prefix.empty() || !starts_with(line, "#" + prefix))
            continue;
        const std::size_t next = prefix.size() + 1;
        if (next == line.size() || is_blank(line[next]))
            return prefix;
    }
    return "";
}

// Slurm's joining of continued directives (bbkit(7), REQUESTS), exactly: a directive whose last
// character is a backslash continues on the next line when that line is a directive too; the
// backslash goes, the next line's prefix goes, and its leading blanks go only when a blank came
// right before the backslash. Any other line ends the continuation (the backslash still goes).
// Looks only at the ends of `body`, so joining thousands of continued lines stays linear.
bool continues(const std::string& body) {
    return !body.empty() && body.back() == '\\';
}

// Appends `next` (a continued line's text after its prefix) to `body`, which continues.
// Blanks as Slurm's isspace() sees them.
void join_continued(std::string& body, std::string_view next) {
    const auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
    const bool blank_before = body.size() >= 2 && space(body[body.size() - 2]);
    body.pop_back();
    if (blank_before)
        while (!next.empty() && space(next.front()))
            next.remove_prefix(1);
    body += next;
}

// ---- arguments -------------------------------------------------------------------------------

// The key=value pairs and bare words after the command; what no handler takes is reported as
// unknown (a warning, as Slurm ignores unknown options for compatibility).
class Arguments {
  public:
    // Linear in the number of tokens: a hostile line of megabytes must not take minutes.
    // DataWarp took a key repeated with the same value (Slurm's own guide writes
    // `type=scratch ... type=scratch`): the repeat is dropped. Different values are refused,
    // since Slurm's plugin would read the first and DataWarp the last (bbkit(7), REQUESTS).
    explicit Arguments(std::vector<Token> tokens) {
        std::map<std::string, std::size_t> keys;
        for (Token& token : tokens) {
            if (token.has_value) {
                const auto [seen, added] = keys.emplace(token.key, tokens_.size());
                if (!added) {
                    const std::string& first = tokens_[seen->second].value;
                    if (first != token.value)
                        throw invalid("'" + token.key +
                                      "=' is given twice with different values ('" + first +
                                      "' and '" + token.value + "'; give it once)");
                    continue;
                }
            }
            tokens_.push_back(std::move(token));
        }
        taken_.assign(tokens_.size(), false);
    }

    std::optional<std::string> take(const std::string& key) {
        for (std::size_t i = 0; i < tokens_.size(); ++i)
            if (tokens_[i].has_value && tokens_[i].key == key) {
                taken_[i] = true;
                return tokens_[i].value;
            }
        return std::nullopt;
    }

    std::string require(const std::string& key, const std::string& command) {
        std::optional<std::string> value = take(key);
        if (!value)
            throw invalid(command + " needs " + key + "=");
        return *value;
    }

    bool take_word(const std::string& word) {
        for (std::size_t i = 0; i < tokens_.size(); ++i)
            if (!tokens_[i].has_value && tokens_[i].key == word) {
                taken_[i] = true;
                return true;
            }
        return false;
    }

    // DataWarp writes access_mode=, Slurm's lua examples access=; both mean the same.
    std::optional<std::string> take_access() {
        std::optional<std::string> access = take("access");
        std::optional<std::string> mode = take("access_mode");
        if (access && mode)
            throw invalid("give access= or access_mode=, not both");
        return access ? access : mode;
    }

    // Bare words nobody took: on a path-carrying line they are most likely the rest of an
    // unquoted path with a blank, which must not silently shorten the path.
    std::vector<std::string> stray_words() const {
        std::vector<std::string> out;
        for (std::size_t i = 0; i < tokens_.size(); ++i)
            if (!taken_[i] && !tokens_[i].has_value)
                out.push_back(tokens_[i].key);
        return out;
    }

    std::vector<std::string> unknown() const {
        std::vector<std::string> out;
        for (std::size_t i = 0; i < tokens_.size(); ++i)
            if (!taken_[i])
                out.push_back(tokens_[i].key);
        return out;
    }

  private:
    std::vector<Token> tokens_;
    std::vector<bool> taken_;
};

// ---- the parser ------------------------------------------------------------------------------

struct DirectiveLine {
    Location where;
    std::string body;    // the text after "#<prefix>"
    std::string prefix;  // without '#': BB_LUA, DW, BB, ...
};

struct Space {
    std::string pool;
    std::uint64_t capacity = 0;
    std::uint64_t allocated = 0;
};

class Parser {
  public:
    Parser(const Config& config, const JobContext& job) : config_(config), job_(job) {}

    Request run(const RequestText& text) {
        symbols_replaced_ = text.symbols_replaced;
        check_job_numbers();
        resolve_user();
        if (text.script)
            read_lines(split_lines(*text.script, Origin::script), Origin::script);
        if (text.bb)
            read_bb(*text.bb);
        if (text.bbf)
            read_lines(split_lines(*text.bbf, Origin::bbf_file), Origin::bbf_file);
        if (text.command_line)
            read_lines(split_lines(*text.command_line, Origin::command_line), Origin::command_line);
        resolve_persistent_references();
        check_datawarp_job_space();
        check_node_local();
        check_user();
        return request_;
    }

  private:
    // Every error from a line becomes one line naming it: "script line 3: why".
    void parse_directive(const DirectiveLine& line) {
        try {
            parse(line);
        } catch (const Error& e) {
            throw Error(e.code(), label(line.where) + ": " + e.what());
        }
    }

    // "script line 3", or "--bb" alone when the --bb text is a single line.
    std::string label(const Location& where) const {
        if (where.origin == Origin::bb_option && bb_single_line_)
            return "--bb";
        if (where.origin == Origin::command_line)
            return "command line";
        return std::string(to_string(where.origin)) + " line " + std::to_string(where.line);
    }

    // In Slurm mode only Slurm's Directive counts, so bbkit reads what Slurm reads.
    std::vector<std::string> accepted_prefixes() const {
        if (config_.mode == Mode::slurm && !config_.directives.empty())
            return {config_.directives[0]};
        return config_.directives;
    }

    std::vector<std::string> split_lines(std::string text, Origin origin) {
        while (!text.empty() && text.back() == '\0')
            text.pop_back();  // Slurm's saved scripts
        if (origin == Origin::bb_option)
            bb_single_line_ = text.find('\n') == std::string::npos;
        std::vector<std::string> lines;
        std::size_t begin = 0;
        while (begin <= text.size()) {
            std::size_t end = text.find('\n', begin);
            if (end == std::string::npos)
                end = text.size();
            lines.push_back(text.substr(begin, end - begin));
            if (lines.back().find('\0') != std::string::npos)
                throw invalid(label({origin, static_cast<int>(lines.size())}) + ": NUL byte");
            begin = end + 1;
        }
        return lines;
    }

    // A script stops at its first non-comment line; --bb and --bbf text hold nothing else, so
    // such a line there is an error.
    void read_lines(const std::vector<std::string>& lines, Origin origin) {
        for (std::size_t i = 0; i < lines.size(); ++i) {
            const Location where{origin, static_cast<int>(i + 1)};
            const std::string& line = lines[i];
            if ((i == 0 && starts_with(line, "#!")) || trim(line).empty())
                continue;
            if (line[0] != '#') {
                if (origin == Origin::script)
                    return;
                throw invalid(label(where) + ": not a burst-buffer directive");
            }
            const std::string prefix = match_prefix(line, accepted_prefixes());
            if (prefix.empty()) {
                refuse_glued_datawarp_prefix(line, where);
                warn_if_ignored_prefix(line, where);
                continue;
            }
            std::string body = line.substr(prefix.size() + 1);
            while (continues(body) && i + 1 < lines.size()) {
                while (i + 2 < lines.size() && lines[i + 1].empty())
                    ++i;  // Slurm reads past empty lines
                const std::string next = match_prefix(lines[i + 1], accepted_prefixes());
                if (next.empty())
                    break;
                if (config_.mode == Mode::datawarp && next != prefix)
                    throw invalid(label(where) + ": a #" + prefix + " line continues on a #" +
                                  next +
                                  " line, which Slurm's datawarp plugin refuses (end the line "
                                  "without '\\')");
                ++i;
                join_continued(body, std::string_view(lines[i]).substr(next.size() + 1));
            }
            if (continues(body))
                body.pop_back();  // nothing continues it
            parse_directive({where, body, prefix});
        }
    }

    // Slurm's datawarp plugin reads "#DWjobdw capacity=1G" as a jobdw line (it looks at three
    // characters, no blank needed), which bbkit would skip as a comment: refused instead of
    // read differently.
    void refuse_glued_datawarp_prefix(const std::string& line, const Location& where) const {
        if (config_.mode != Mode::datawarp || line.size() < 4 || is_blank(line[3]))
            return;
        const std::string head = line.substr(0, 3);
        if (head != "#DW" && head != "#BB")
            return;
        std::size_t at = 3;
        while (at < line.size() && std::isspace(static_cast<unsigned char>(line[at])))
            ++at;
        for (const char* command : {"jobdw", "persistentdw", "stage_in", "stage_out", "swap",
                                    "create_persistent", "destroy_persistent"})
            if (starts_with(std::string_view(line).substr(at), command))
                throw invalid(label(where) + ": write '" + head + " " + command +
                              "', with a blank after " + head +
                              " (Slurm's datawarp plugin reads the line, bbkit would not)");
    }

    void warn_if_ignored_prefix(const std::string& line, const Location& where) {
        const std::string prefix = match_prefix(line, config_.directives);
        if (prefix.empty())
            return;  // an ordinary comment, e.g. #SBATCH
        request_.warnings.push_back(
            {where, "#" + prefix + " lines are not read in slurm mode (Slurm's Directive is #" +
                        config_.directives[0] + ")"});
    }

    // --bb holds either directives (split at newlines and before each "#<prefix>") or
    // DataWarp's short form.
    void read_bb(const std::string& text) {
        const std::vector<std::string> lines = split_lines(text, Origin::bb_option);
        std::string words;
        for (const std::string& line : lines)
            words += line + " ";
        words = trim(words);
        if (words.empty())
            return;
        if (words[0] != '#') {
            if (config_.mode == Mode::slurm)
                throw invalid(
                    "--bb: Slurm's burst_buffer/lua reads only directive lines, not the short "
                    "form (write --bb '#" +
                    (config_.directives.empty() ? std::string("BB_LUA") : config_.directives[0]) +
                    " pool=POOL capacity=SIZE')");
            return read_short_form(words);
        }
        std::vector<std::string> pieces;
        for (const std::string& line : lines)
            split_bb_line(line, pieces);
        bb_single_line_ = pieces.size() == 1;
        read_lines(pieces, Origin::bb_option);
    }

    void split_bb_line(const std::string& line, std::vector<std::string>& pieces) const {
        const std::string t = trim(line);
        std::size_t begin = 0;
        for (std::size_t i = 1; i < t.size(); ++i)
            if (t[i] == '#' && is_blank(t[i - 1]) &&
                !match_prefix(std::string_view(t).substr(i), config_.directives).empty()) {
                pieces.push_back(trim(t.substr(begin, i - begin)));
                begin = i;
            }
        if (begin < t.size())
            pieces.push_back(t.substr(begin));
    }

    // Slurm's datawarp plugin turns `capacity=1G access=striped` into a #DW jobdw line.
    void read_short_form(const std::string& text) {
        bb_single_line_ = true;
        const Location where{Origin::bb_option, 1};
        Pairs pairs;
        try {
            std::vector<Token> tokens = tokenize(text);
            check_lengths(tokens);
            refuse_detached_unit(tokens);
            Arguments args(std::move(tokens));
            for (const std::string& key : args.unknown())
                if (key != "capacity" && key != "access" && key != "type" && key != "pool" &&
                    key != "swap")
                    throw invalid("unknown option '" + key +
                                  "' in the short form (use capacity=, access=, type=, pool=)");
            if (args.take("swap"))
                throw swap_refused();
            if (auto capacity = args.take("capacity"))
                pairs.emplace_back("capacity", format_size(parse_capacity(*capacity)));
            if (auto access = args.take("access"))
                pairs.emplace_back("access_mode", *access);
            if (auto type = args.take("type"))
                pairs.emplace_back("type", *type);
            if (auto pool = args.take("pool"))
                pairs.emplace_back("pool", *pool);
            if (!args.unknown().empty())
                throw invalid("'" + args.unknown()[0] + "' is not key=value");
        } catch (const Error& e) {
            throw Error(e.code(), label(where) + ": " + e.what());
        }
        const std::string line = directive_line("DW", "jobdw", pairs, false);
        parse_directive({where, line.substr(3), "DW"});
    }

    void parse(const DirectiveLine& line) {
        request_.has_directive = true;
        std::vector<Token> tokens = tokenize(line.body);
        check_lengths(tokens);
        Symbols symbols(job_);
        for (Token& token : tokens)
            if (token.has_value && !symbols_replaced_) {
                token.value = replace_symbols(token.value, symbols);
                check_value_length(token, false);
            }
        if (!symbols.unresolved.empty())
            request_.warnings.push_back(
                {line.where, symbols.unresolved +
                                 " is not known yet; it is replaced when the job is submitted"});
        std::string command;
        if (!tokens.empty() && !tokens[0].has_value) {
            command = tokens[0].key;
            tokens.erase(tokens.begin());
        }
        refuse_detached_unit(tokens);
        if (line.where.origin != Origin::command_line)  // bbkit's own line from option values
            check_datawarp_grammar(line.prefix, command, tokens.empty());
        Arguments args(std::move(tokens));
        dispatch(command, args, line.where, !symbols.unresolved.empty());
        if (command == "stage_in" || command == "stage_out")
            for (const std::string& word : args.stray_words())
                throw invalid("unexpected word '" + word +
                              "' (quote a path that contains blanks: destination=\"a b\")");
        for (const std::string& key : args.unknown())
            request_.warnings.push_back({line.where, "unknown key '" + key + "' is ignored"});
    }

    // "capacity=10 GiB" would read as 10 bytes and an unknown key GiB: a size unit standing
    // alone right after a capacity is the blank that bbkit(7), SIZES, refuses.
    static void refuse_detached_unit(const std::vector<Token>& tokens) {
        for (std::size_t i = 1; i < tokens.size(); ++i) {
            const Token& before = tokens[i - 1];
            const Token& word = tokens[i];
            if (word.has_value || !before.has_value || before.key != "capacity" ||
                before.value.empty() ||
                !std::all_of(before.value.begin(), before.value.end(),
                             [](char c) { return c >= '0' && c <= '9'; }))
                continue;
            bool unit = false;
            try {
                unit = !word.key.empty() && (word.key[0] < '0' || word.key[0] > '9') &&
                       parse_size("1" + word.key).value > 0;
            } catch (const Error&) {
                unit = false;
            }
            if (unit)
                throw invalid("capacity=" + before.value + " " + word.key +
                              ": a blank between the number and its unit (write capacity=" +
                              before.value + word.key + ")");
        }
    }

    // Slurm's datawarp plugin counts space only from `#DW jobdw capacity=` and creates or
    // destroys persistent buffers only from #BB lines: every other form would be bbkit's alone
    // (space Slurm never charged), so in datawarp mode it is refused.
    void check_datawarp_grammar(const std::string& prefix, const std::string& command,
                                bool bare) const {
        if (config_.mode != Mode::datawarp || (command.empty() && bare))
            return;
        static const std::vector<std::string> dw{"jobdw", "persistentdw", "stage_in", "stage_out",
                                                 "swap"};
        static const std::vector<std::string> bb{"create_persistent", "destroy_persistent"};
        const std::vector<std::string>& allowed = prefix == "BB" ? bb : dw;
        if (std::find(allowed.begin(), allowed.end(), command) != allowed.end())
            return;
        throw invalid("#" + prefix + (command.empty() ? "" : " " + command) +
                      " is not read by Slurm's datawarp plugin (#DW jobdw, persistentdw, "
                      "stage_in, stage_out; #BB create_persistent, destroy_persistent)");
    }

    void dispatch(const std::string& command, Arguments& args, const Location& where,
                  bool unresolved) {
        if (command.empty() || command == "jobdw")
            return job_buffer(args, where, command.empty());
        if (command == "stage_in" || command == "stage_out")
            return stage(args, where, unresolved, command == "stage_in");
        if (command == "persistentdw" || command == "use_persistent")
            return use_persistent(args, where, command);
        if (command == "create_persistent")
            return create_persistent(args, where);
        if (command == "destroy_persistent")
            return destroy_persistent(args, where);
        if (command == "swap")
            throw swap_refused();
        throw invalid("unknown command '" + command + "'");
    }

    void job_buffer(Arguments& args, const Location& where, bool implicit) {
        const std::optional<std::string> capacity = args.take("capacity");
        const std::optional<std::string> pool = args.take("pool");
        const std::optional<std::string> access = args.take_access();
        const std::optional<std::string> type = args.take("type");
        if (args.take("swap"))
            throw swap_refused();
        if (!capacity) {
            // A misspelt key (capacty=) is what most likely left it out: named, not ignored.
            const std::vector<std::string> others = args.unknown();
            if (!implicit)
                throw invalid("jobdw needs capacity=" +
                              (others.empty() ? std::string()
                                              : " ('" + printable(others[0]) +
                                                    "' is not one of its keys: capacity=, "
                                                    "pool=, access=, type=)"));
            if (pool || access || type)
                throw invalid("a job buffer needs capacity= (pool=, access= and type= need it)");
            return;  // a bare directive: Slurm runs the stages without space
        }
        if (request_.job_buffer)
            throw invalid("only one job buffer per job: one is already requested on " +
                          label(request_.job_buffer->where));
        const Space space = resolve_space(*capacity, pool);
        JobBufferRequest buffer;
        buffer.pool = space.pool;
        buffer.capacity = space.capacity;
        buffer.allocated = space.allocated;
        buffer.access = check_access(access.value_or("striped"));
        buffer.type = check_type(type.value_or("scratch"));
        buffer.where = where;
        const PoolConfig& pool_config = *config_.find_pool(space.pool);
        if (pool_config.node_local) {
            buffer.node_local = true;
            buffer.gres = pool_config.gres;
            buffer.gres_count = space.allocated / pool_config.granularity;
        }
        request_.job_buffer = buffer;
    }

    Space resolve_space(const std::string& capacity, const std::optional<std::string>& pool) const {
        Space space;
        space.capacity = parse_capacity(capacity);
        if (pool) {
            space.pool = *pool;
        } else if (config_.default_pool) {
            space.pool = *config_.default_pool;
        } else {
            throw invalid("capacity requested but no pool given and no default_pool configured");
        }
        const PoolConfig* found = config_.find_pool(space.pool);
        if (found == nullptr)
            throw Error(ExitCode::no_input, "unknown pool '" + space.pool + "'");
        space.allocated = round_up(space.capacity, found->granularity);
        if (space.allocated > found->capacity)
            throw invalid("capacity=" + capacity + " can never be satisfied: pool '" + space.pool +
                          "' holds only " + format_size(found->capacity) + " in total");
        return space;
    }

    void stage(Arguments& args, const Location& where, bool unresolved, bool in) {
        const std::string command = in ? "stage_in" : "stage_out";
        StageDirective s;
        s.type = parse_stage_type(args.require("type", command));
        check_stage_type(s.type, in);
        if (const auto spread = args.take("distribute")) {
            if (!in)
                throw invalid("distribute= is for stage_in lines (a stage_out line takes gather=)");
            s.distribute = parse_spread(*spread);
        }
        if (const auto gather = args.take("gather")) {
            if (in)
                throw invalid("gather= is for stage_out lines (a stage_in line takes distribute=)");
            s.gather = parse_gather(*gather);
        }
        const std::string source = args.require("source", command);
        const std::string destination = args.require("destination", command);
        const bool workdir_pending = !job_.workdir;
        if (in) {
            s.source = outside_path(source, "source", workdir_pending);
            s.destination = buffer_relative(destination, s.buffer, "destination");
        } else {
            s.source = buffer_relative(source, s.buffer, "source");
            s.destination = outside_path(destination, "destination", workdir_pending);
        }
        // A type=file destination naming a directory ("dir/", or the buffer itself) receives
        // the file under its own name, as cp does.
        if (s.type == StageType::file) {
            const std::string name = s.source.substr(s.source.rfind('/') + 1);
            if (in && name.empty())  // found by the directive fuzzer: "source=/ destination=in/"
                throw invalid("source of a type=file stage must name a file, not '" + source + "'");
            if (in && (s.destination.empty() || destination.back() == '/'))
                s.destination = s.destination.empty() ? name : s.destination + "/" + name;
            if (!in && destination.back() == '/' && s.destination != "/")
                s.destination += "/" + name;
        }
        check_writable(s.source, "source");
        check_writable(s.destination, "destination");
        const std::string& inside = in ? s.destination : s.source;
        if (s.type == StageType::file && inside.empty())
            throw invalid(std::string(in ? "destination" : "source") +
                          " of a type=file stage must name a file inside the buffer, not its root");
        s.unresolved = unresolved;
        s.where = where;
        (in ? request_.stage_in : request_.stage_out).push_back(s);
    }

    void use_persistent(Arguments& args, const Location& where, const std::string& command) {
        const std::string name = args.require("name", command);
        check_persistent_name(name);
        for (const PersistentUse& use : request_.use)
            if (use.name == name)
                return;  // naming it twice asks for nothing more
        request_.use.push_back({name, where});
    }

    void create_persistent(Arguments& args, const Location& where) {
        check_persistent_allowed(where, "create");
        PersistentCreate create;
        create.name = args.require("name", "create_persistent");
        check_persistent_name(create.name);
        for (const PersistentCreate& other : request_.create)
            if (other.name == create.name)
                throw invalid("persistent buffer '" + create.name + "' is already created on " +
                              label(other.where));
        const std::string capacity = args.require("capacity", "create_persistent");
        const std::optional<std::string> access = args.take_access();
        const Space space = resolve_space(capacity, args.take("pool"));
        create.pool = space.pool;
        create.capacity = space.capacity;
        create.allocated = space.allocated;
        create.access = check_access(access.value_or("striped"));
        create.type = check_type(args.take("type").value_or("scratch"));
        create.where = where;
        request_.create.push_back(create);
    }

    void destroy_persistent(Arguments& args, const Location& where) {
        check_persistent_allowed(where, "destroy");
        PersistentDestroy destroy;
        destroy.name = args.require("name", "destroy_persistent");
        check_persistent_name(destroy.name);
        destroy.hurry = args.take_word("hurry");
        destroy.where = where;
        request_.destroy.push_back(destroy);
    }

    void check_persistent_allowed(const Location& where, const std::string& verb) const {
        if (where.origin == Origin::bb_option)
            throw invalid("--bb cannot create or destroy persistent burst buffers");
        if (user_)
            check_may_manage_persistent(config_, *user_, PersistentRequest::job, verb);
    }

    // $DW_PERSISTENT_STRIPED_<name> must name a buffer this request uses or creates.
    void resolve_persistent_references() {
        for (auto* stages : {&request_.stage_in, &request_.stage_out})
            for (StageDirective& s : *stages)
                if (!s.buffer.empty())
                    s.buffer = persistent_named(s.buffer, s.where);
    }

    std::string persistent_named(const std::string& variable, const Location& where) const {
        std::vector<std::string> names;
        for (const PersistentUse& use : request_.use)
            names.push_back(use.name);
        for (const PersistentCreate& create : request_.create)
            names.push_back(create.name);
        std::string found;
        for (const std::string& name : names) {
            if (persistent_variable_form(name) != variable || name == found)
                continue;
            if (!found.empty())
                throw invalid(label(where) + ": $" + persistent_variable + variable +
                              " is ambiguous: it may name '" + found + "' or '" + name + "'");
            found = name;
        }
        if (found.empty())
            throw invalid(label(where) + ": $" + persistent_variable + variable +
                          " names no persistent buffer this job uses (add persistentdw name=" +
                          variable + ")");
        return found;
    }

    // Slurm's job ids and array task ids are numbers; anything else would end up in paths
    // through %j, %A and %a.
    void check_job_numbers() const {
        if (job_.job_id)
            parse_job_id(*job_.job_id);
        if (job_.array_job_id)
            parse_job_id(*job_.array_job_id, "array job id");
        if (job_.array_task_id)
            parse_job_id(*job_.array_task_id, "array task id");
    }

    void resolve_user() {
        if (job_.uid) {
            user_ = lookup_user(std::to_string(*job_.uid), UserGroups::skip);
            if (job_.user && !user_matches(*user_, *job_.user))
                throw invalid("user '" + *job_.user + "' does not have uid " +
                              std::to_string(*job_.uid));
        } else if (job_.user) {
            user_ = lookup_user(*job_.user, UserGroups::skip);
        }
        if (user_ && !job_.user)
            job_.user = user_->name;  // %u
    }

    // DataWarp gives a job $DW_JOB_STRIPED only with a #DW jobdw line: in datawarp mode a job
    // without one has a session of 0 bytes, which nothing may be staged into or out of.
    void check_datawarp_job_space() const {
        if (config_.mode != Mode::datawarp || request_.job_buffer)
            return;
        for (const auto* stages : {&request_.stage_in, &request_.stage_out})
            for (const StageDirective& s : *stages)
                if (s.buffer.empty())
                    throw invalid(label(s.where) +
                                  ": stages into the job's own buffer, and the job asks for "
                                  "none (add #DW jobdw capacity=SIZE, or stage into a "
                                  "persistent buffer it uses)");
    }

    // distribute= and gather= say how a node-local buffer's lines run across the job's
    // nodes: on any other line they would promise what nothing does. Persistent buffers live
    // on one host, never in a node-local pool.
    void check_node_local() const {
        const bool node_local = request_.job_buffer && request_.job_buffer->node_local;
        for (const auto* stages : {&request_.stage_in, &request_.stage_out})
            for (const StageDirective& s : *stages) {
                if (!s.distribute && !s.gather)
                    continue;
                const char* key = s.distribute ? "distribute=" : "gather=";
                if (!s.buffer.empty())
                    throw invalid(label(s.where) + ": " + key +
                                  " applies to the job's own buffer in a node-local pool, not "
                                  "to persistent buffer '" +
                                  s.buffer + "'");
                if (!node_local)
                    throw invalid(
                        label(s.where) + ": " + key +
                        " applies to a job buffer in a node-local pool" +
                        (request_.job_buffer
                             ? ", and pool '" + request_.job_buffer->pool + "' is not node-local"
                             : " (the job asks for no buffer)"));
            }
        for (const PersistentCreate& c : request_.create)
            if (const PoolConfig* pool = config_.find_pool(c.pool); pool && pool->node_local)
                throw invalid(label(c.where) + ": persistent buffer '" + c.name +
                              "' cannot be in node-local pool '" + c.pool +
                              "' (a persistent buffer lives on one host)");
    }

    void check_user() const {
        if (user_ && request_.has_directive)
            check_may_use_burst_buffers(config_, *user_);
    }

    const Config& config_;
    JobContext job_;
    std::optional<User> user_;
    Request request_;
    bool bb_single_line_ = false;
    bool symbols_replaced_ = false;
};

}  // namespace
}  // namespace directive_internal

Request parse_request(const RequestText& text, const Config& config, const JobContext& job) {
    return directive_internal::Parser(config, job).run(text);
}

}  // namespace bbkit
