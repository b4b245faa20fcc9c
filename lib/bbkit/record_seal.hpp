// Root's seal on the records of state.db (bbkit(7), SECURITY). The state owner owns state.db
// and can change any row, but only root reads the key (Config::record_key, root's file of mode
// 0400), so a row it changed no longer matches its seal. Root seals every row it writes and,
// when the state owner is not root, acts on no row whose seal does not match.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "bbkit/config.hpp"
#include "bbkit/error.hpp"
#include "bbkit/user.hpp"

namespace bbkit {

class RecordSeal {
  public:
    // The key of `config` when this process is root, created (random, 0400, root's) when
    // missing and `create`; std::nullopt for any other process, a configuration without
    // record_key, or a missing key not to be created. A key file another user could change or
    // read is Error(config) naming it.
    static std::optional<RecordSeal> for_process(const Config& config, bool create);
    // Whether this process is root and the key of `config` does not exist (StateStore creates
    // it only where state.db holds no record sealed with another key).
    static bool missing(const Config& config);

    // The seal of a row's canonical text (see StateStore): hex HMAC-SHA-256 under the key.
    std::string seal(std::string_view row) const;
    bool matches(std::string_view row, std::string_view seal) const;

  private:
    explicit RecordSeal(std::string key) : key_(std::move(key)) {}
    std::string key_;
};

// Root's memory of the state directories whose records it has sealed (bbkit(7), SECURITY): the
// file <record_key>.sealed (root's, mode 0600), one line per state directory, "VERSION PATH",
// the path as root's configuration names it and the highest schema version root found there.
// Only root writes it, so the state owner cannot make root forget that a database was sealed
// and have it seal rows again by "migrating" an older schema. Root only (the key's rules).
class SealLedger {
  public:
    // The version recorded for config.state_dir; none when it was never sealed here.
    static std::optional<int> sealed_version(const Config& config);
    // Records `version` for config.state_dir unless as high a version is already there.
    static void record(const Config& config, int version);
};

// Root's memory, on this host, of the state directories this host holds as the controller
// (bbkit(7), STATE DIRECTORY, "Controller failover"): the file <record_key>.controller (root's,
// mode 0600), one line per state directory, "EPOCH PATH", the epoch of the claim in state.db
// that bb-pool takeover last took here. Beside root's key, never in the state directory that
// the controllers share: each host keeps its own. A writer checks it against the claim inside
// every write transaction (StateStore). Root only: for others held() is none.
class ControllerToken {
  public:
    static std::optional<std::int64_t> held(const Config& config);
    static void hold(const Config& config, std::int64_t epoch);
    static void release(const Config& config);  // bb-pool takeover --release
};

// The state owner when it is not root: whose rows root must check, and whose files root opens
// with that account's rights (sqlite::ForeignWriter); none for root.
std::optional<User> untrusted_state_owner(const Config& config);

// The one-line refusal of a record whose seal does not match: Error(no_perm).
Error forged_record_error(const std::string& key);

}  // namespace bbkit
