#include "bbkit/config.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <toml.hpp>

#include "bbkit/error.hpp"
#include "bbkit/size.hpp"
#include "bbkit/text.hpp"

namespace bbkit {
namespace {

constexpr const char* default_config_path = "/etc/bbkit/bbkit.toml";
constexpr unsigned max_stage_concurrency = 4096;
constexpr unsigned max_mover_threads = 1024;
// Names end up in file names with a job id and an incarnation: keep them well under NAME_MAX.
constexpr std::size_t max_name_length = 64;
// A site's bbkit.toml is a few KiB; a file past this bound is not one (bbkit.toml(5)), and
// reading stops here, so a device or a growing file cannot fill the memory.
constexpr std::size_t max_config_bytes = 1024 * 1024;
// toml11 recurses once per nested array or inline table, so a deep enough nesting overflows the
// stack; the schema needs two levels (pool = [{...}]).
constexpr std::size_t max_nesting = 8;

std::string too_large() {
    return "larger than " + format_size(max_config_bytes) + ", the most a bbkit.toml may hold";
}

[[noreturn]] void fail_at(const std::string& source, std::size_t line, const std::string& key,
                          const std::string& why) {
    std::string where = source;
    if (line > 0)
        where += ":" + std::to_string(line);
    throw Error(ExitCode::config, printable(where + ": " + key + ": " + why));
}

// toml11 recurses once per part of a dotted key, and a line of tens of thousands of them
// overflows the stack (found by fuzz_config). No line of a configuration needs more than a
// path's 4096 bytes and its key: a longer one is refused before toml11 reads the text.
constexpr std::size_t max_config_line = 8192;

void check_line_lengths(const std::string& text, const std::string& source) {
    std::size_t line = 1;
    std::size_t start = 0;
    while (start <= text.size()) {
        std::size_t end = text.find('\n', start);
        if (end == std::string::npos)
            end = text.size();
        if (end - start > max_config_line)
            fail_at(source, line, "invalid TOML",
                    "a line longer than " + std::to_string(max_config_line) + " bytes");
        start = end + 1;
        ++line;
    }
}

// A byte as messages name a control character: "0x01".
std::string byte_code(unsigned char c) {
    char code[8];
    std::snprintf(code, sizeof code, "0x%02x", c);
    return code;
}

std::string without_trailing_period(std::string text) {
    while (!text.empty() && (text.back() == '.' || text.back() == ' '))
        text.pop_back();
    return text;
}

// toml11 words a syntax error "toml::parse_x: what" and hints at places in the source. Our
// messages are one line: "what (hint)".
std::string one_line(const std::string& summary, const std::string& hint) {
    static const std::regex function_prefix(R"(^\s*(toml::[A-Za-z_:]+:\s*)?)");
    const std::string what =
        without_trailing_period(std::regex_replace(summary, function_prefix, ""));
    const std::string clue = without_trailing_period(hint);
    return clue.empty() ? what : what + " (" + clue + ")";
}

// --- toml11 3.x and 4.x: all that differs between them, and nothing else ---
// Tables are std::maps, whose sorted keys make checks that walk a table report the same
// problem every run; comments are discarded (4.x keeps them by default).
#if TOML11_VERSION_MAJOR >= 4
}  // namespace

// Not in the anonymous namespace: with internal linkage, GCC 14 and 16 (-O2) inline toml11 4.4's
// inline-table parser into parse_value and then warn that a std::optional it tests with
// has_value() may be used uninitialized: the false -Wmaybe-uninitialized of GCC bug 80635, in
// the library's code, which no #pragma around <toml.hpp> silences.
struct ConfigTomlTypes : toml::type_config {
    using comment_type = toml::discard_comments;
    template <typename K, typename T>
    using table_type = std::map<K, T>;
};

namespace {

using Value = toml::basic_value<ConfigTomlTypes>;

std::size_t line_of(const Value& value) {
    return value.location().first_line_number();
}

const std::string& string_in(const Value& value) {
    return value.as_string();
}

std::string first_line(const std::string& text) {
    return text.substr(0, text.find('\n'));
}

// What toml11 4 points at with a bare "here", named as toml11 3 did: the character there.
std::string found_at(const toml::source_location& place) {
    if (!place.is_ok())
        return "";
    const std::string& line = place.first_line();
    const std::size_t at = place.first_column_offset() - 1;  // in first_line()
    if (at >= line.size())
        return "got the end of the line";
    const unsigned char c = static_cast<unsigned char>(line[at]);
    if (c < 0x20 || c == 0x7f)
        return "got " + byte_code(c);
    std::size_t length = 1;  // the whole UTF-8 character
    while (at + length < line.size() &&
           (static_cast<unsigned char>(line[at + length]) & 0xc0) == 0x80)
        ++length;
    return "got '" + line.substr(at, length) + "'";
}

// toml11 4 goes on past an error and lists them all: the first is reported, at its first place,
// with the last hint (naming its line when it is another).
Value toml_document(const std::string& text, const std::string& source) {
    check_line_lengths(text, source);
    auto parsed = toml::try_parse<ConfigTomlTypes>(
        std::vector<unsigned char>(text.begin(), text.end()), source);
    if (parsed.is_ok())
        return std::move(parsed.unwrap());
    const std::vector<toml::error_info>& errors = parsed.unwrap_err();
    if (errors.empty())
        fail_at(source, 0, "invalid TOML", "unexplained error");
    std::size_t line = 0;
    std::string hint;
    for (const auto& [place, words] : errors.front().locations()) {
        const std::size_t at = place.first_line_number();
        if (line == 0)
            line = at;
        const std::string said = words == "here" ? found_at(place) : first_line(words);
        if (said.empty())
            continue;
        // toml11's "but value already exists" reads, after the summary, "value already exists".
        hint = starts_with(said, "but ") ? said.substr(4) : said;
        if (at != line)
            hint += " at line " + std::to_string(at);
    }
    fail_at(source, line, "invalid TOML", one_line(first_line(errors.front().title()), hint));
}
#else
using Value = toml::basic_value<toml::discard_comments, std::map, std::vector>;

std::size_t line_of(const Value& value) {
    return value.location().line();
}

const std::string& string_in(const Value& value) {
    return value.as_string().str;
}

// toml11 3 explains a syntax error over several lines: "[error] toml::parse_x: what", then a
// source excerpt with "^--- hint" marks, of which the last that says more than "here" is kept.
std::string one_line(const std::string& toml_message) {
    static const std::regex hint_line(R"(^\s*\|\s*[\^~]+-*\s+(.+)$)");
    static const std::string error_tag = "[error]";
    std::istringstream lines(toml_message);
    std::string summary;
    std::getline(lines, summary);
    if (starts_with(summary, error_tag))
        summary.erase(0, error_tag.size());
    std::string line;
    std::string hint;
    std::smatch match;
    while (std::getline(lines, line))
        if (std::regex_match(line, match, hint_line) && match[1] != "here")
            hint = match[1];
    return one_line(summary, hint);
}

Value toml_document(const std::string& text, const std::string& source) {
    check_line_lengths(text, source);
    std::istringstream stream(text);
    try {
        return toml::parse<toml::discard_comments, std::map, std::vector>(stream, source);
    } catch (const toml::exception& error) {
        fail_at(source, error.location().line(), "invalid TOML", one_line(error.what()));
    }
}
#endif
using Table = Value::table_type;
// --- end of what differs between toml11 3.x and 4.x ---

// One value of the document with the dotted key ("pool[0].name") that names it in messages.
class Field {
  public:
    Field(const std::string& source, const Value& value, std::string key)
        : source_(&source), value_(&value), key_(std::move(key)) {}

    const Value& value() const { return *value_; }
    const std::string& key() const { return key_; }
    std::size_t line() const { return line_of(*value_); }

    [[noreturn]] void fail(const std::string& why) const { fail_at(*source_, line(), key_, why); }
    // For a key that should be in this table but is not: the table's line is the best we have.
    [[noreturn]] void fail_member(const std::string& name, const std::string& why) const {
        fail_at(*source_, line(), member_key(name), why);
    }

    Field member(const std::string& name, const Value& value) const {
        return Field(*source_, value, member_key(name));
    }
    Field item(std::size_t index, const Value& value) const {
        return Field(*source_, value, key_ + "[" + std::to_string(index) + "]");
    }

  private:
    std::string member_key(const std::string& name) const {
        return key_.empty() ? name : key_ + "." + name;
    }

    const std::string* source_;
    const Value* value_;
    std::string key_;
};

const char* type_name(const Value& value) {
    switch (value.type()) {
        case toml::value_t::boolean:
            return "a boolean";
        case toml::value_t::integer:
            return "an integer";
        case toml::value_t::floating:
            return "a float";
        case toml::value_t::string:
            return "a string";
        case toml::value_t::offset_datetime:
        case toml::value_t::local_datetime:
            return "a date-time";
        case toml::value_t::local_date:
            return "a date";
        case toml::value_t::local_time:
            return "a time";
        case toml::value_t::array:
            return "an array";
        case toml::value_t::table:
            return "a table";
        case toml::value_t::empty:
            break;
    }
    return "nothing";
}

void expect_type(const Field& field, toml::value_t type, const std::string& expected) {
    if (field.value().type() != type)
        field.fail("expected " + expected + ", got " + type_name(field.value()));
}

const Table& table_of(const Field& field) {
    expect_type(field, toml::value_t::table, "a table");
    return field.value().as_table();
}

std::optional<Field> find(const Field& table, const std::string& name) {
    const Table& members = table_of(table);
    const auto it = members.find(name);
    if (it == members.end())
        return std::nullopt;
    return table.member(name, it->second);
}

Field required(const Field& table, const std::string& name) {
    if (auto field = find(table, name))
        return *field;
    table.fail_member(name, "missing (this key is required)");
}

std::vector<Field> array_items(const Field& field, const std::string& expected = "an array") {
    expect_type(field, toml::value_t::array, expected);
    std::vector<Field> items;
    const auto& array = field.value().as_array();
    for (std::size_t i = 0; i < array.size(); ++i)
        items.push_back(field.item(i, array[i]));
    return items;
}

std::string string_of(const Field& field, const std::string& expected = "a string") {
    expect_type(field, toml::value_t::string, expected);
    return string_in(field.value());
}

std::int64_t integer_of(const Field& field) {
    expect_type(field, toml::value_t::integer, "an integer");
    return field.value().as_integer();
}

bool boolean_of(const Field& field) {
    expect_type(field, toml::value_t::boolean, "a boolean (true or false)");
    return field.value().as_boolean();
}

// Reports the unknown key that comes first in the file, as a reader fixing them would meet it.
void reject_unknown_keys(const Field& table, const std::vector<std::string>& known) {
    std::optional<Field> first;
    std::string first_name;
    for (const auto& [name, value] : table_of(table)) {
        if (std::find(known.begin(), known.end(), name) != known.end())
            continue;
        const Field field = table.member(name, value);
        if (first && first->line() <= field.line())
            continue;
        first = field;
        first_name = name;
    }
    if (first)
        first->fail("unknown key '" + first_name + "' (known: " + join(known, ", ") + ")");
}

template <typename T, typename Read>
void read_if_present(const Field& table, const std::string& name, T& out, Read read) {
    if (auto field = find(table, name))
        out = read(*field);
}

// A path lands in env files, Slurm's path file and messages, each read line by line: a newline
// or any other control character in it would split or forge a line (bbkit.toml(5)).
std::string absolute_path_of(const Field& field) {
    const std::string path = string_of(field, "a string (an absolute path)");
    for (char c : path)
        if (is_control(c))
            field.fail("a path cannot contain a control character (newline, tab, NUL, ...)");
    if (path.empty() || path[0] != '/')
        field.fail("'" + path + "' is not an absolute path");
    return path;
}

// Pool paths are compared and joined with buffer names, and the state directory is written
// into Slurm's script: each must have one spelling.
std::string normalized_path_of(const Field& field) {
    const std::string path = absolute_path_of(field);
    if (path == "/")
        field.fail("the root directory cannot be used here");
    if (path.back() == '/')
        field.fail("'" + path + "' must not end with '/'");
    std::istringstream parts(path.substr(1));
    std::string part;
    while (std::getline(parts, part, '/'))
        if (part.empty() || part == "." || part == "..")
            field.fail("'" + path + "' is not normalized (no '//', '.' or '..' components)");
    return path;
}

bool is_name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
}

// Cluster and pool names become parts of keys and directory names: a safe, short alphabet.
std::string name_of(const Field& field) {
    const std::string name = string_of(field);
    if (name.empty())
        field.fail("must not be empty");
    if (name.size() > max_name_length)
        field.fail("'" + name.substr(0, 16) + "...' is " + std::to_string(name.size()) +
                   " characters long (at most " + std::to_string(max_name_length) + ")");
    for (char c : name)
        if (!is_name_char(c))
            field.fail("invalid character in '" + name + "' (use letters, digits, '_', '.', '-')");
    return name;
}

// A persistent buffer's key is CLUSTER.p.NAME, and its name may hold '.' (buffer_key.hpp):
// a cluster name holding ".p." could not be told from it.
std::string cluster_name_of(const Field& field) {
    const std::string name = name_of(field);
    if (name.find(".p.") != std::string::npos || ends_with(name, ".p"))
        field.fail(
            "'" + name +
            "' holds \".p\", which buffer keys keep for persistent buffers (rename the cluster)");
    return name;
}

// A user or group name as /etc/passwd and /etc/group can hold it; `kind` is "user" or "group".
std::string account_name_of(const Field& field, const std::string& kind) {
    const std::string name = string_of(field);
    if (name.empty())
        field.fail("a " + kind + " name must not be empty");
    for (char c : name)
        if (std::isspace(static_cast<unsigned char>(c)) ||
            std::iscntrl(static_cast<unsigned char>(c)) || c == ':' || c == '/')
            field.fail("'" + name + "' is not a valid " + kind + " name");
    return name;
}

std::string user_name_of(const Field& field) {
    return account_name_of(field, "user");
}

std::string group_name_of(const Field& field) {
    return account_name_of(field, "group");
}

// A size in bytes (parse_config_size): with `unit_required` a bare number is refused (a pool's
// capacity of "100" is 100 bytes, surely not meant); a granularity of "1" (byte) is common.
std::uint64_t size_of(const Field& field, bool unit_required) {
    const std::string text = string_of(field, "a string (a size such as \"100GiB\")");
    try {
        return parse_config_size(text, unit_required);
    } catch (const Error& error) {
        field.fail(error.what());
    }
}
std::uint64_t capacity_of(const Field& field) {
    return size_of(field, true);
}

// A mover's memory bound: below 16 MiB its batches would hold too few files to keep the
// workers busy; above 1 TiB it is surely a typo.
std::uint64_t mover_memory_of(const Field& field) {
    const std::uint64_t bytes = capacity_of(field);
    if (bytes < (std::uint64_t{16} << 20) || bytes > (std::uint64_t{1} << 40))
        field.fail("must be between 16MiB and 1TiB, got " + format_size(bytes));
    return bytes;
}

// The largest job script read: at least 1 KiB (a script of a few directives), at most Slurm's
// own ceiling for max_script_size (512 MiB).
std::uint64_t script_size_of(const Field& field) {
    const std::uint64_t bytes = capacity_of(field);
    if (bytes < (std::uint64_t{1} << 10) || bytes > (std::uint64_t{512} << 20))
        field.fail("must be between 1KiB and 512MiB, got " + format_size(bytes));
    return bytes;
}

unsigned seconds_of(const Field& field) {
    const std::int64_t seconds = integer_of(field);
    if (seconds <= 0)
        field.fail("must be a positive number of seconds, got " + std::to_string(seconds));
    if (seconds > max_timeout_seconds)
        field.fail(std::to_string(seconds) + " exceeds Slurm's maximum of " +
                   std::to_string(max_timeout_seconds) + " seconds (24 days)");
    return static_cast<unsigned>(seconds);
}

unsigned integer_between(const Field& field, unsigned low, unsigned high) {
    const std::int64_t n = integer_of(field);
    if (n < low || n > high)
        field.fail("must be between " + std::to_string(low) + " and " + std::to_string(high) +
                   ", got " + std::to_string(n));
    return static_cast<unsigned>(n);
}

SlurmRelease slurm_release_of(const Field& field) {
    const std::string text = string_of(field, "a string (a release such as \"24.11\")");
    try {
        return parse_slurm_release(text);
    } catch (const Error& error) {
        field.fail(error.what());
    }
}

// Slurm polls a busy stage again after PollInterval seconds, within the stage's timeout: a
// longer interval than the longest timeout Slurm allows would never be waited out.
unsigned poll_interval_of(const Field& field) {
    const std::int64_t seconds = integer_of(field);
    if (seconds <= 0 || seconds > max_timeout_seconds)
        field.fail("must be a number of seconds between 1 and " +
                   std::to_string(max_timeout_seconds) + " (Slurm's longest timeout), got " +
                   std::to_string(seconds));
    return static_cast<unsigned>(seconds);
}

Mode mode_of(const Field& field) {
    const std::string mode = string_of(field);
    if (mode == "standalone")
        return Mode::standalone;
    if (mode == "slurm")
        return Mode::slurm;
    if (mode == "datawarp")
        return Mode::datawarp;
    field.fail("must be \"standalone\", \"slurm\" or \"datawarp\", got '" + mode + "'");
}

StateJournal state_journal_of(const Field& field) {
    const std::string journal = string_of(field);
    if (journal == "auto")
        return StateJournal::automatic;
    if (journal == "wal")
        return StateJournal::wal;
    if (journal == "rollback")
        return StateJournal::rollback;
    field.fail("must be \"auto\", \"wal\" or \"rollback\", got '" + journal + "'");
}

void check_directive_word(const Field& field, const std::string& word) {
    if (word.empty())
        field.fail("a directive must not be empty");
    if (word[0] == '#')
        field.fail("write '" + word.substr(1) + "' without the leading '#'");
    for (char c : word)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_')
            field.fail("invalid character in '" + word + "' (use letters, digits and '_')");
}

std::vector<std::string> directives_of(const Field& field) {
    std::vector<std::string> words;
    for (const Field& item : array_items(field)) {
        const std::string word = string_of(item);
        check_directive_word(item, word);
        if (std::find(words.begin(), words.end(), word) != words.end())
            item.fail("duplicate directive '" + word + "'");
        words.push_back(word);
    }
    if (words.empty())
        field.fail("at least one directive is required");
    return words;
}

// Slurm compares burst_buffer.conf flags case-insensitively; we return the canonical spelling.
std::string flag_of(const Field& field) {
    static const std::vector<std::string> known{"DisablePersistent", "EnablePersistent",
                                                "PrivateData", "TeardownFailure"};
    const std::string flag = string_of(field);
    for (const std::string& name : known)
        if (lower(name) == lower(flag))
            return name;
    field.fail("unknown flag '" + flag + "' (known: " + join(known, ", ") + ")");
}

Flags flags_of(const Field& field) {
    Flags flags;
    bool disable_persistent = false;
    for (const Field& item : array_items(field)) {
        const std::string flag = flag_of(item);
        disable_persistent |= flag == "DisablePersistent";
        flags.enable_persistent |= flag == "EnablePersistent";
        flags.private_data |= flag == "PrivateData";
        flags.teardown_failure |= flag == "TeardownFailure";
        if (disable_persistent && flags.enable_persistent)
            item.fail("EnablePersistent and DisablePersistent are exclusive");
    }
    return flags;
}

std::string uid_of(const Field& field) {
    const std::int64_t uid = integer_of(field);
    // The largest uid: (uid_t)-1 means "no uid" to the kernel (user.hpp's max_uid).
    constexpr std::int64_t max_uid = std::numeric_limits<uid_t>::max() - 1;
    if (uid < 0 || uid > max_uid)
        field.fail("a uid must be between 0 and " + std::to_string(max_uid) + ", got " +
                   std::to_string(uid));
    return std::to_string(uid);
}

std::vector<std::string> users_of(const Field& field) {
    std::vector<std::string> users;
    for (const Field& item : array_items(field)) {
        const toml::value_t type = item.value().type();
        if (type != toml::value_t::string && type != toml::value_t::integer)
            item.fail(std::string("expected a user name or a uid, got ") + type_name(item.value()));
        users.push_back(type == toml::value_t::integer ? uid_of(item) : user_name_of(item));
    }
    return users;
}

// Slurm's datawarp plugin reads #DW and #BB lines and nothing else, so bbkit must too: by
// default in datawarp mode, and a `directives` that says otherwise is refused.
void check_datawarp_directives(const Field& root, Config& config) {
    if (config.mode != Mode::datawarp)
        return;
    const std::optional<Field> given = find(root, "directives");
    if (!given) {
        config.directives = datawarp_directives();
        return;
    }
    std::vector<std::string> sorted = config.directives;
    std::sort(sorted.begin(), sorted.end());
    if (sorted != std::vector<std::string>{"BB", "DW"})
        given->fail(
            "must be [\"DW\", \"BB\"] in datawarp mode (what Slurm's datawarp plugin "
            "reads), or left out");
}

void read_identity(const Field& root, Config& config) {
    read_if_present(root, "state_dir", config.state_dir, normalized_path_of);
    read_if_present(root, "state_owner", config.state_owner, user_name_of);
    read_if_present(root, "state_group", config.state_group, group_name_of);
    read_if_present(root, "state_journal", config.state_journal, state_journal_of);
    read_if_present(root, "record_key", config.record_key, normalized_path_of);
    read_if_present(root, "mode", config.mode, mode_of);
    read_if_present(root, "cluster", config.cluster, cluster_name_of);
    read_if_present(root, "directives", config.directives, directives_of);
    read_if_present(root, "flags", config.flags, flags_of);
    check_datawarp_directives(root, config);
}

void read_access(const Field& root, Config& config) {
    read_if_present(root, "allow_users", config.allow_users, users_of);
    read_if_present(root, "deny_users", config.deny_users, users_of);
    read_if_present(root, "allow_root", config.allow_root, boolean_of);
    if (!config.allow_users.empty() && !config.deny_users.empty())
        find(root, "deny_users")->fail("allow_users and deny_users are exclusive");
}

Timeouts timeouts_of(const Field& table) {
    reject_unknown_keys(table, {"stage_in", "stage_out", "other", "validate", "queue", "takeover"});
    Timeouts timeouts;
    read_if_present(table, "stage_in", timeouts.stage_in, seconds_of);
    read_if_present(table, "stage_out", timeouts.stage_out, seconds_of);
    read_if_present(table, "other", timeouts.other, seconds_of);
    read_if_present(table, "validate", timeouts.validate, seconds_of);
    read_if_present(table, "queue", timeouts.queue, seconds_of);
    read_if_present(table, "takeover", timeouts.takeover, seconds_of);
    return timeouts;
}

Limits limits_of(const Field& table) {
    reject_unknown_keys(table, {"stage_concurrency", "mover_threads", "mover_memory",
                                "user_capacity", "script_size"});
    Limits limits;
    if (auto field = find(table, "stage_concurrency"))
        limits.stage_concurrency = integer_between(*field, 1, max_stage_concurrency);
    if (auto field = find(table, "mover_threads"))
        limits.mover_threads = integer_between(*field, 1, max_mover_threads);
    read_if_present(table, "mover_memory", limits.mover_memory, mover_memory_of);
    read_if_present(table, "user_capacity", limits.user_capacity, capacity_of);
    read_if_present(table, "script_size", limits.script_size, script_size_of);
    return limits;
}

// Whether one normalized absolute path is the other or lies beneath it.
bool paths_overlap(const std::string& a, const std::string& b) {
    const std::string& shorter = a.size() <= b.size() ? a : b;
    const std::string& longer = a.size() <= b.size() ? b : a;
    return starts_with(longer, shorter) &&
           (longer.size() == shorter.size() || longer[shorter.size()] == '/');
}

QuotaMode quota_mode_of(const Field& field) {
    const std::string mode = string_of(field);
    if (mode == "none")
        return QuotaMode::none;
    if (mode == "project")
        return QuotaMode::project;
    field.fail("must be \"none\" or \"project\", got '" + mode + "'");
}

QuotaMissing quota_missing_of(const Field& field) {
    const std::string what = string_of(field);
    if (what == "refuse")
        return QuotaMissing::refuse;
    if (what == "warn")
        return QuotaMissing::warn;
    field.fail("must be \"refuse\" or \"warn\", got '" + what + "'");
}

// Room is left above the base for a billion records: a base nearer the top would run out.
constexpr std::int64_t max_project_base = max_project_id - 1000000000LL;

std::uint32_t project_base_of(const Field& field) {
    const std::int64_t base = integer_of(field);
    if (base < 1 || base > max_project_base)
        field.fail("must be between 1 and " + std::to_string(max_project_base) + ", got " +
                   std::to_string(base));
    return static_cast<std::uint32_t>(base);
}

// A GRES name as Slurm's GresTypes takes it and as bbkit writes it into gres.conf and job
// requests: lower-case letters, digits and '_', starting with a letter, at most 32.
std::string gres_name_of(const Field& field) {
    const std::string name = string_of(field);
    const bool valid = !name.empty() && name.size() <= 32 && name[0] >= 'a' && name[0] <= 'z' &&
                       std::all_of(name.begin(), name.end(), [](char c) {
                           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
                       });
    if (!valid)
        field.fail("'" + name +
                   "' is not a GRES name (a lower-case letter, then letters, digits or '_', at "
                   "most 32)");
    return name;
}

PoolStaging pool_staging_of(const Field& field) {
    const std::string staging = string_of(field);
    if (staging == "controller")
        return PoolStaging::controller;
    if (staging == "slurm")
        return PoolStaging::slurm;
    field.fail("'" + staging + "' is not a staging place (use \"controller\" or \"slurm\")");
}

// A Slurm partition's name as sbatch takes it: the names' alphabet, at most 64 characters.
std::string partition_of(const Field& field) {
    const std::string name = name_of(field);
    if (!std::isalnum(static_cast<unsigned char>(name[0])))
        field.fail("'" + name + "' must start with a letter or a digit");
    return name;
}

// staging = "slurm" and its transfer_ keys (bbkit(7), STAGING ON TRANSFER NODES): a stage of
// the pool's buffers is a Slurm job of the buffer's user, which only a controller's hooks start.
void read_staging(const Field& table, Mode mode, PoolConfig& pool) {
    read_if_present(table, "staging", pool.staging, pool_staging_of);
    const bool slurm = pool.staging == PoolStaging::slurm;
    if (slurm && mode == Mode::standalone)
        required(table, "staging")
            .fail(
                "\"slurm\" needs mode = \"slurm\" or \"datawarp\" (the controller's hooks "
                "start the transfer jobs)");
    if (slurm && pool.node_local)
        required(table, "staging")
            .fail("\"slurm\" is for shared pools (a node-local pool's node stages its own data)");
    for (const char* key : {"transfer_partition", "transfer_nodes"})
        if (find(table, key) && !slurm)
            required(table, key).fail("applies to staging = \"slurm\" only");
    if (!slurm)
        return;
    if (!find(table, "transfer_partition"))
        table.fail_member("transfer_partition",
                          "is required with staging = \"slurm\" (the partition of the transfer "
                          "nodes)");
    pool.transfer_partition = partition_of(required(table, "transfer_partition"));
    if (auto field = find(table, "transfer_nodes"))
        pool.transfer_nodes = integer_between(*field, 1, max_transfer_nodes);
}

PoolConfig pool_of(const Field& table, Mode mode) {
    reject_unknown_keys(table, {"name", "path", "capacity", "granularity", "direct_io", "syncfs",
                                "quota", "quota_missing", "quota_project_base", "node_local",
                                "gres", "staging", "transfer_partition", "transfer_nodes"});
    PoolConfig pool;
    pool.name = name_of(required(table, "name"));
    pool.path = normalized_path_of(required(table, "path"));
    pool.capacity = capacity_of(required(table, "capacity"));
    read_if_present(table, "direct_io", pool.direct_io, boolean_of);
    read_if_present(table, "syncfs", pool.syncfs, boolean_of);
    read_if_present(table, "quota", pool.quota, quota_mode_of);
    read_if_present(table, "quota_missing", pool.quota_missing, quota_missing_of);
    read_if_present(table, "quota_project_base", pool.quota_project_base, project_base_of);
    read_if_present(table, "node_local", pool.node_local, boolean_of);
    read_if_present(table, "gres", pool.gres, gres_name_of);
    if (pool.node_local && mode != Mode::standalone)
        required(table, "node_local")
            .fail("node-local pools need mode = \"standalone\" (each node runs the tools itself)");
    if (find(table, "gres") && !pool.node_local)
        required(table, "gres").fail("applies to node-local pools only (node_local = true)");
    read_staging(table, mode, pool);
    if (auto field = find(table, "granularity")) {
        pool.granularity = size_of(*field, false);
        if (pool.granularity > pool.capacity)
            field->fail(format_size(pool.granularity) + " exceeds the pool's capacity " +
                        format_size(pool.capacity));
    }
    return pool;
}

std::vector<PoolConfig> pools_of(const Field& field, Mode mode) {
    std::vector<PoolConfig> pools;
    std::map<std::string, std::size_t> name_lines;
    std::map<std::string, std::string> gres_pools;  // node-local pools' GRES -> pool
    for (const Field& item : array_items(field, "an array of tables ([[pool]])")) {
        pools.push_back(pool_of(item, mode));
        if (pools.back().node_local) {
            const auto [other, fresh] = gres_pools.emplace(pools.back().gres, pools.back().name);
            if (!fresh)
                (find(item, "gres") ? required(item, "gres") : required(item, "node_local"))
                    .fail("GRES '" + other->first + "' already counts pool '" + other->second +
                          "' (each node-local pool needs a gres of its own)");
        }
        const Field name = required(item, "name");
        const auto [first, inserted] = name_lines.emplace(pools.back().name, name.line());
        if (!inserted)
            name.fail("duplicate pool name '" + first->first + "' (first defined at line " +
                      std::to_string(first->second) + ")");
        // Two pools over the same directory tree would count the same space twice.
        const PoolConfig& added = pools.back();
        for (std::size_t i = 0; i + 1 < pools.size(); ++i)
            if (paths_overlap(pools[i].path, added.path))
                required(item, "path")
                    .fail("'" + added.path + "' overlaps pool '" + pools[i].name + "' at '" +
                          pools[i].path + "'");
    }
    return pools;
}

std::map<std::string, std::string> hooks_of(const Field& table) {
    reject_unknown_keys(table, hook_phases());
    std::map<std::string, std::string> hooks;
    for (const auto& [phase, value] : table_of(table))
        hooks[phase] = absolute_path_of(table.member(phase, value));
    return hooks;
}

std::string default_pool_of(const Field& field, const std::vector<PoolConfig>& pools) {
    const std::string name = string_of(field);
    if (pools.empty())
        field.fail("names pool '" + name + "' but no [[pool]] is configured");
    std::vector<std::string> names;
    for (const PoolConfig& pool : pools)
        names.push_back(pool.name);
    if (std::find(names.begin(), names.end(), name) == names.end())
        field.fail("no pool named '" + name + "' (configured: " + join(names, ", ") + ")");
    return name;
}

Config config_of(const Field& root) {
    reject_unknown_keys(
        root, {"state_dir",     "state_owner", "state_group", "state_journal", "record_key",
               "mode",          "cluster",     "directives",  "default_pool",  "flags",
               "allow_users",   "deny_users",  "allow_root",  "slurm_release", "slurm_conf",
               "poll_interval", "timeouts",    "limits",      "pool",          "hooks"});
    Config config;
    read_identity(root, config);
    read_access(root, config);
    read_if_present(root, "slurm_release", config.slurm_release, slurm_release_of);
    read_if_present(root, "slurm_conf", config.slurm_conf, normalized_path_of);
    read_if_present(root, "poll_interval", config.poll_interval, poll_interval_of);
    read_if_present(root, "timeouts", config.timeouts, timeouts_of);
    read_if_present(root, "limits", config.limits, limits_of);
    if (auto field = find(root, "pool"))
        config.pools = pools_of(*field, config.mode);
    read_if_present(root, "hooks", config.hooks, hooks_of);
    if (auto field = find(root, "default_pool"))
        config.default_pool = default_pool_of(*field, config.pools);
    // Slurm's datawarp plugin takes the first pool dw_wlm_cli lists as its DefaultPool.
    if (config.mode == Mode::datawarp && !config.default_pool && !config.pools.empty())
        config.default_pool = config.pools.front().name;
    return config;
}

}  // namespace

std::uint64_t gres_count(const PoolConfig& pool) {
    return pool.capacity / pool.granularity;
}

namespace {

// The byte length of the UTF-8 sequence starting at text[i], or 0 when it is not valid UTF-8
// (overlong forms, surrogates and code points past U+10FFFF included).
std::size_t utf8_sequence(const std::string& text, std::size_t i) {
    const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
    const unsigned char lead = byte(i);
    if (lead < 0x80)
        return 1;
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xbf;  // the range of the second byte
    if (lead >= 0xc2 && lead <= 0xdf) {
        length = 2;
    } else if (lead >= 0xe0 && lead <= 0xef) {
        length = 3;
        low = lead == 0xe0 ? 0xa0 : 0x80;
        high = lead == 0xed ? 0x9f : 0xbf;
    } else if (lead >= 0xf0 && lead <= 0xf4) {
        length = 4;
        low = lead == 0xf0 ? 0x90 : 0x80;
        high = lead == 0xf4 ? 0x8f : 0xbf;
    } else {
        return 0;
    }
    if (i + length > text.size() || byte(i + 1) < low || byte(i + 1) > high)
        return 0;
    for (std::size_t k = 2; k < length; ++k)
        if (byte(i + k) < 0x80 || byte(i + k) > 0xbf)
            return 0;
    return length;
}

// TOML documents are UTF-8. Checked before toml11 sees the text: toml11 3.7 reads past the end
// of its buffer on some invalid sequences (found by tests/fuzz/config.cpp).
void check_utf8(const std::string& text, const std::string& source) {
    std::size_t line = 1;
    for (std::size_t i = 0; i < text.size();) {
        const std::size_t length = utf8_sequence(text, i);
        if (length == 0)
            fail_at(source, line, "invalid UTF-8",
                    "byte " + std::to_string(i + 1) +
                        " does not start a valid UTF-8 character "
                        "(TOML files are UTF-8: convert the file, e.g. with iconv)");
        if (text[i] == '\n')
            ++line;
        i += length;
    }
}

// The text with the body of every whole-line comment removed (its newline kept, so toml11's
// line numbers stay true). toml11 3.7 reads a comment through a combinator per character: the
// shipped example's 33 comment lines were 40% of its parse, paid by every tool call at a site
// that keeps them. Only where nothing can be mistaken for a comment: no multi-line string in
// the file (a line in one may start with '#'), and no character TOML forbids in a comment (such
// a line stays; check_comment refuses it first). Single-line strings cannot span a line.
std::string without_comment_lines(const std::string& text) {
    if (text.find("\"\"\"") != std::string::npos || text.find("'''") != std::string::npos)
        return text;
    std::string out;
    out.reserve(text.size());
    std::size_t start = 0;
    while (start < text.size()) {
        std::size_t end = text.find('\n', start);
        if (end == std::string::npos)
            end = text.size();
        const std::size_t body = std::min(text.find_first_not_of(" \t", start), end);
        std::size_t stop = end;  // a CR before the newline ends the line too (CRLF)
        if (stop > body && text[stop - 1] == '\r')
            --stop;
        bool blank = body < stop && text[body] == '#';
        for (std::size_t i = body; blank && i < stop; ++i) {
            const unsigned char c = static_cast<unsigned char>(text[i]);
            blank = !((c < 0x20 && c != '\t') || c == 0x7f);
        }
        out.append(text, start, (blank ? body : stop) - start);
        out.append(text, stop, end - stop);
        if (end < text.size())
            out += '\n';
        start = end + 1;
    }
    return out;
}

// The number of `quote` characters in the run starting at text[i].
std::size_t quote_run(const std::string& text, std::size_t i, char quote) {
    std::size_t n = 0;
    while (i + n < text.size() && text[i + n] == quote)
        ++n;
    return n;
}

// Where the string opened at text[i] ends (the index past its closing quote, or the end of the
// line or text when it is unterminated, which toml11 then reports). Basic strings ('"') take
// backslash escapes, literal ones ('\'') do not; a run of three quotes opens a multi-line string,
// which closes at the next run of three or more (up to two of them belong to its content).
std::size_t string_end(const std::string& text, std::size_t i) {
    const char quote = text[i];
    const bool multi_line = quote_run(text, i, quote) >= 3;
    for (i += multi_line ? 3 : 1; i < text.size(); ++i) {
        const char c = text[i];
        if (c == '\\' && quote == '"') {
            ++i;
        } else if (c == '\n' && !multi_line) {
            return i;
        } else if (c == quote) {
            const std::size_t run = quote_run(text, i, quote);
            if (!multi_line)
                return i + 1;
            if (run >= 3)
                return i + run;
            i += run - 1;
        }
    }
    return text.size();
}

[[noreturn]] void too_deep(const std::string& source, std::size_t line, const std::string& what) {
    fail_at(source, line, "invalid TOML",
            what + " nested more than " + std::to_string(max_nesting) +
                " deep (bbkit.toml needs two levels at most: flatten them)");
}

// TOML allows no control character in a comment but tab (and the CR of a CRLF). Refused here,
// before toml11: 4.x reports one at the line after the comment's.
void check_comment(const std::string& text, std::size_t begin, std::size_t end,
                   const std::string& source, std::size_t line) {
    for (std::size_t i = begin; i < end; ++i) {
        const unsigned char c = static_cast<unsigned char>(text[i]);
        if ((c >= 0x20 && c != 0x7f) || c == '\t' ||
            (c == '\r' && i + 1 == end && end < text.size()))
            continue;
        fail_at(source, line, "invalid TOML",
                "control character " + byte_code(c) + " in a comment (byte " +
                    std::to_string(i + 1) + "; a comment may hold none but tab)");
    }
}

// Refuses arrays, inline tables and dotted keys nested deeper than max_nesting before toml11
// works on them: it recurses once per array or inline table, and takes time quadratic in the
// parts of a dotted key. Brackets and dots in strings and comments do not count; a table header
// ([a] or [[pool]]) opens and closes on its line, so it never adds up. Outside strings, only a
// dotted key holds more than one dot between two of "=,[]{}" and a newline (a float or a time
// holds one). Each comment met on the way goes through check_comment.
void check_nesting(const std::string& text, const std::string& source) {
    std::size_t depth = 0;
    std::size_t dots = 0;
    std::size_t line = 1;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c == '"' || c == '\'') {
            const std::size_t end = string_end(text, i);
            line +=
                static_cast<std::size_t>(std::count(text.begin() + i, text.begin() + end, '\n'));
            i = end - 1;
            continue;
        }
        if (c == '#') {
            const std::size_t end = std::min(text.find('\n', i), text.size());
            check_comment(text, i, end, source, line);
            i = end - 1;
        } else if (c == '.') {
            if (++dots >= max_nesting)
                too_deep(source, line, "dotted keys");
            continue;
        } else if (c == '\n') {
            ++line;
        } else if (c == '[' || c == '{') {
            if (++depth > max_nesting)
                too_deep(source, line, "arrays and inline tables");
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        } else if (c != '=' && c != ',' && c != ']' && c != '}') {
            continue;
        }
        dots = 0;
    }
}

Value parse_toml(const std::string& text, const std::string& source) {
    if (text.size() > max_config_bytes)
        fail_at(source, 0, "refused", too_large() + " (is this a bbkit.toml?)");
    check_utf8(text, source);
    check_nesting(text, source);
    return toml_document(without_comment_lines(text), source);
}

struct FileCloser {
    void operator()(std::FILE* file) const { std::fclose(file); }
};

constexpr const char* cannot_read_hint = " (use --config FILE or set BBKIT_CONFIG)";

[[noreturn]] void cannot_read(const std::string& path, const std::string& why) {
    throw Error(ExitCode::config,
                printable(path + ": cannot read configuration: " + why + cannot_read_hint));
}

[[noreturn]] void cannot_read(const std::string& path, int error_number) {
    throw configuration_error(printable(path + ": cannot read configuration"), error_number,
                              cannot_read_hint);
}

// Opened without blocking, so that a FIFO with no writer is refused rather than waited for;
// only a regular file is read, and at most one byte past max_config_bytes of it (a file in
// /proc, or one that grows, may hold more than its size said).
std::string file_text(const std::string& path) {
    const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        cannot_read(path, errno);
    std::unique_ptr<std::FILE, FileCloser> file(fdopen(fd, "rb"));
    if (!file) {
        const int error_number = errno;
        close(fd);
        cannot_read(path, error_number);
    }
    struct stat st {};
    if (fstat(fd, &st) != 0)
        cannot_read(path, errno);
    if (S_ISDIR(st.st_mode))
        cannot_read(path, EISDIR);
    if (!S_ISREG(st.st_mode))
        cannot_read(path, "not a regular file");
    std::string text;
    char buffer[65536];
    std::size_t count = 0;
    while (
        text.size() <= max_config_bytes &&
        (count = std::fread(buffer, 1, std::min(sizeof buffer, max_config_bytes + 1 - text.size()),
                            file.get())) > 0)
        text.append(buffer, count);
    if (std::ferror(file.get()))
        cannot_read(path, errno);
    if (text.size() > max_config_bytes)
        cannot_read(path, too_large());
    return text;
}

}  // namespace

const char* to_string(QuotaMode mode) {
    return mode == QuotaMode::project ? "project" : "none";
}

const char* to_string(QuotaMissing missing) {
    return missing == QuotaMissing::warn ? "warn" : "refuse";
}

const PoolConfig* Config::find_pool(const std::string& name) const {
    for (const PoolConfig& pool : pools)
        if (pool.name == name)
            return &pool;
    return nullptr;
}

const std::vector<std::string>& hook_phases() {
    // Only the phases bb-stage runs a hook for: a key that would be accepted and never run
    // would mislead the site.
    static const std::vector<std::string> phases{"pre_run", "post_run"};
    return phases;
}

namespace {

// Beside the configuration file: root's key goes where root's configuration is.
std::string default_record_key(const std::string& source) {
    if (source.empty())
        return "/etc/bbkit/record.key";
    std::string dir =
        source.find('/') == std::string::npos ? "." : source.substr(0, source.rfind('/'));
    if (dir.empty())
        dir = "/";
    if (dir[0] != '/') {
        char cwd[PATH_MAX];
        if (getcwd(cwd, sizeof cwd) != nullptr)
            dir = std::string(cwd) + "/" + dir;
    }
    return dir == "/" ? "/record.key" : dir + "/record.key";
}

}  // namespace

std::string locate_config(const std::optional<std::string>& cli_path) {
    if (cli_path)
        return *cli_path;
    const char* from_environment = std::getenv("BBKIT_CONFIG");
    if (from_environment != nullptr && *from_environment != '\0')
        return from_environment;
    return default_config_path;
}

Config parse_config(const std::string& text, const std::string& source_name) {
    const std::string source = source_name.empty() ? "<config>" : source_name;
    const Value document = parse_toml(text, source);
    Config config = config_of(Field(source, document, ""));
    config.source = source_name;
    if (config.record_key.empty())
        config.record_key = default_record_key(source_name);
    return config;
}

Config load_config(const std::string& path) {
    return parse_config(file_text(path), path);
}

const char* to_string(Mode mode) {
    switch (mode) {
        case Mode::standalone:
            return "standalone";
        case Mode::slurm:
            return "slurm";
        case Mode::datawarp:
            return "datawarp";
    }
    return "standalone";
}

const char* to_string(StateJournal journal) {
    switch (journal) {
        case StateJournal::automatic:
            return "auto";
        case StateJournal::wal:
            return "wal";
        case StateJournal::rollback:
            return "rollback";
    }
    return "auto";
}

bool slurm_drives(Mode mode) {
    return mode == Mode::slurm || mode == Mode::datawarp;
}

std::vector<std::string> flag_names(const Flags& flags) {
    std::vector<std::string> names;
    names.push_back(flags.enable_persistent ? "EnablePersistent" : "DisablePersistent");
    if (flags.private_data)
        names.push_back("PrivateData");
    if (flags.teardown_failure)
        names.push_back("TeardownFailure");
    return names;
}

}  // namespace bbkit
