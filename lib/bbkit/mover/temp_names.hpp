// The names of a move's temporaries (bbkit(7), STAGING): ".NAME.bbkit-SUFFIX" beside the name
// it is written for (".bbkit-TAG-SUFFIX" when NAME is too long for that), the suffix the
// buffer's tag for this boot, 8 hex digits of this move and 4 of the file. What a name says of
// its owner, and whether it is this move's, or this buffer's in this boot: the only facts the
// mover trusts before it removes or takes over a killed move's temporary.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace bbkit::mover_internal {

// A long name's short tag (decimal digits): ".bbkit-TAG-SUFFIX" stands for it.
std::string long_name_tag(const std::string& name);

// The name a temporary was made for; "#" + its tag for the short form; "" when `entry` is not
// shaped like a temporary (of this bbkit, or of an older one, whose suffix was 20 digits).
std::string temp_owner(const std::string& entry);

// What opens the suffix of every temporary a move of this buffer makes in this boot: a keyed
// hash of the boot id under the buffer's secret token (Buffer::temp_token). The boot id is
// public, the token is not: nobody else can name a temporary this buffer's next move would take
// over. Without a token, a random tag that no move will ever take over.
std::string temp_tag(const std::string& token);

// One move's temporaries: their names, and which names are whose. Safe from any thread.
class TempNames {
  public:
    explicit TempNames(const std::string& token);

    // A new temporary's name for `name`: unique within this move.
    std::string name(const std::string& name);
    // Made by this move (its 24-digit prefix).
    bool ours(const std::string& temp) const;
    // Made by a move of this buffer in this boot (its tag): the only ones ever taken over.
    bool tagged_ours(const std::string& temp) const;

  private:
    std::string tag_;     // see temp_tag()
    std::string prefix_;  // the tag and this move's own 8 digits
    std::atomic<std::uint64_t> counter_{0};
};

}  // namespace bbkit::mover_internal
