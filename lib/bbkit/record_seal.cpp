#include "bbkit/record_seal.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <sstream>

#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/seal.hpp"
#include "bbkit/text.hpp"
#include "bbkit/trust.hpp"
#include "bbkit/user.hpp"

namespace bbkit {
namespace {

constexpr std::size_t key_bytes = 32;
constexpr std::size_t key_file_limit = 4096;

// A new key appears whole or not at all: written to a temporary name, then linked to the
// key's name, which fails when another process made it first (its key is then read).
void create_key(const std::string& path) {
    const std::string tmp = path + ".new." + std::to_string(getpid());
    unlink(tmp.c_str());
    Fd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400));
    if (!fd)
        throw configuration_error("cannot create the record key " + path, errno,
                                  " (its directory must exist and be root's)");
    const std::string key = random_hex(key_bytes) + "\n";
    const bool written =
        write(fd.get(), key.data(), key.size()) == static_cast<ssize_t>(key.size()) &&
        fsync(fd.get()) == 0;
    const int err = errno;
    const bool linked = written && link(tmp.c_str(), path.c_str()) == 0;
    const int link_err = errno;
    unlink(tmp.c_str());
    if (!written)
        throw configuration_error("cannot write the record key " + path, err);
    if (!linked && link_err != EEXIST)
        throw configuration_error("cannot create the record key " + path, link_err);
}

std::string read_key(const std::string& path) {
    check_root_controlled(path, "record key");
    Fd fd(open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
    if (!fd)
        throw configuration_error("cannot read the record key " + path, errno);
    struct stat st {};
    if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
        throw Error(ExitCode::config, "record key " + path + " is not a regular file");
    if ((st.st_mode & 077) != 0)
        throw Error(
            ExitCode::config,
            "record key " + path + " may be read by group or others (chmod 0400 " + path + ")");
    std::string key = read_all(fd.get(), "record key " + path, key_file_limit);
    while (!key.empty() && (key.back() == '\n' || key.back() == ' '))
        key.pop_back();
    if (key.size() < 2 * key_bytes)
        throw Error(ExitCode::config,
                    "record key " + path + " is too short (remove it: root " +
                        "makes a new one, and every record must be sealed again)");
    return key;
}

constexpr std::size_t ledger_limit = 1 << 20;

// Root's files beside its key that map state directories to a number, one "NUMBER PATH" line
// each (SealLedger, ControllerToken): `what` names the file in messages, `highest` bounds the
// number. Empty when there is no such file yet.
std::map<std::string, std::uint64_t> read_ledger(const std::string& path, const std::string& what,
                                                 std::uint64_t highest) {
    std::map<std::string, std::uint64_t> lines_by_dir;
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0 && errno == ENOENT)
        return lines_by_dir;
    check_root_controlled(path, what);
    const std::optional<std::string> text =
        read_file(path, "the " + what + " " + path, ledger_limit, O_NOFOLLOW | O_NONBLOCK);
    std::istringstream lines(text.value_or(""));
    std::string line;
    while (std::getline(lines, line)) {
        const auto space = line.find(' ');
        const std::optional<std::uint64_t> number =
            space == std::string::npos ? std::nullopt
                                       : parse_decimal(line.substr(0, space), highest);
        if (!number)
            throw Error(ExitCode::config,
                        "the " + what + " " + path +
                            " has a line that is not \"NUMBER PATH\": " + printable(line));
        lines_by_dir[line.substr(space + 1)] = *number;
    }
    return lines_by_dir;
}

void write_ledger(const std::string& path, const std::map<std::string, std::uint64_t>& lines) {
    std::string text;
    for (const auto& [dir, number] : lines)
        text += std::to_string(number) + " " + dir + "\n";
    write_file_atomically(path, text, 0600);
}

std::string ledger_path(const Config& config) {
    return config.record_key + ".sealed";
}
const char* const ledger_what = "record key's ledger";

std::string token_path(const Config& config) {
    return config.record_key + ".controller";
}
const char* const token_what = "controller token";
constexpr std::uint64_t highest_epoch = std::uint64_t{1} << 62;

}  // namespace

std::optional<int> SealLedger::sealed_version(const Config& config) {
    const auto sealed = read_ledger(ledger_path(config), ledger_what, 1000);
    const auto found = sealed.find(config.state_dir);
    if (found == sealed.end())
        return std::nullopt;
    return static_cast<int>(found->second);
}

void SealLedger::record(const Config& config, int version) {
    const std::string path = ledger_path(config);
    auto sealed = read_ledger(path, ledger_what, 1000);
    std::uint64_t& recorded = sealed[config.state_dir];
    if (recorded >= static_cast<std::uint64_t>(version))
        return;
    recorded = static_cast<std::uint64_t>(version);
    write_ledger(path, sealed);
}

std::optional<std::int64_t> ControllerToken::held(const Config& config) {
    if (geteuid() != 0 || config.record_key.empty())
        return std::nullopt;
    const auto tokens = read_ledger(token_path(config), token_what, highest_epoch);
    const auto found = tokens.find(config.state_dir);
    if (found == tokens.end())
        return std::nullopt;
    return static_cast<std::int64_t>(found->second);
}

void ControllerToken::hold(const Config& config, std::int64_t epoch) {
    const std::string path = token_path(config);
    auto tokens = read_ledger(path, token_what, highest_epoch);
    tokens[config.state_dir] = static_cast<std::uint64_t>(epoch);
    write_ledger(path, tokens);
}

void ControllerToken::release(const Config& config) {
    const std::string path = token_path(config);
    auto tokens = read_ledger(path, token_what, highest_epoch);
    if (tokens.erase(config.state_dir) != 0)
        write_ledger(path, tokens);
}

bool RecordSeal::missing(const Config& config) {
    struct stat st {};
    return geteuid() == 0 && !config.record_key.empty() &&
           lstat(config.record_key.c_str(), &st) != 0 && errno == ENOENT;
}

std::optional<RecordSeal> RecordSeal::for_process(const Config& config, bool create) {
    if (geteuid() != 0 || config.record_key.empty())
        return std::nullopt;
    struct stat st {};
    if (lstat(config.record_key.c_str(), &st) != 0 && errno == ENOENT) {
        if (!create)
            return std::nullopt;
        create_key(config.record_key);
    }
    return RecordSeal(read_key(config.record_key));
}

std::string RecordSeal::seal(std::string_view row) const {
    return to_hex(hmac_sha256(key_, row));
}

bool RecordSeal::matches(std::string_view row, std::string_view seal_text) const {
    return same_secret(seal(row), seal_text);
}

std::optional<User> untrusted_state_owner(const Config& config) {
    if (config.state_owner == "root" || config.state_owner == "0")
        return std::nullopt;
    User owner = lookup_user(config.state_owner, UserGroups::skip);
    if (owner.uid == 0)
        return std::nullopt;
    return owner;
}

Error forged_record_error(const std::string& key) {
    return Error(ExitCode::no_perm,
                 "record of buffer " + printable(key) +
                     " in state.db does not carry root's seal: it was changed outside bbkit, so "
                     "root does not act on it (bbkit(7), SECURITY; bb-pool check lists it)");
}

}  // namespace bbkit
