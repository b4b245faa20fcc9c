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

std::string ledger_path(const Config& config) {
    return config.record_key + ".sealed";
}

constexpr std::size_t ledger_limit = 1 << 20;

// The ledger's lines, state directory -> version; empty when there is no ledger yet.
std::map<std::string, int> read_ledger(const std::string& path) {
    std::map<std::string, int> sealed;
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0 && errno == ENOENT)
        return sealed;
    check_root_controlled(path, "record key's ledger");
    const std::optional<std::string> text =
        read_file(path, "the record key's ledger " + path, ledger_limit, O_NOFOLLOW | O_NONBLOCK);
    std::istringstream lines(text.value_or(""));
    std::string line;
    while (std::getline(lines, line)) {
        const auto space = line.find(' ');
        const std::optional<std::uint64_t> version =
            space == std::string::npos ? std::nullopt : parse_decimal(line.substr(0, space), 1000);
        if (!version)
            throw Error(ExitCode::config,
                        "the record key's ledger " + path +
                            " has a line that is not \"VERSION PATH\": " + printable(line));
        sealed[line.substr(space + 1)] = static_cast<int>(*version);
    }
    return sealed;
}

}  // namespace

std::optional<int> SealLedger::sealed_version(const Config& config) {
    const std::map<std::string, int> sealed = read_ledger(ledger_path(config));
    const auto found = sealed.find(config.state_dir);
    if (found == sealed.end())
        return std::nullopt;
    return found->second;
}

void SealLedger::record(const Config& config, int version) {
    const std::string path = ledger_path(config);
    std::map<std::string, int> sealed = read_ledger(path);
    int& recorded = sealed[config.state_dir];
    if (recorded >= version)
        return;
    recorded = version;
    std::string text;
    for (const auto& [dir, v] : sealed)
        text += std::to_string(v) + " " + dir + "\n";
    write_file_atomically(path, text, 0600);
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
