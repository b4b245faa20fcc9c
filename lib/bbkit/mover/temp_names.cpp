#include "bbkit/mover/temp_names.hpp"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdio>
#include <functional>
#include <string>

#include "bbkit/process.hpp"
#include "bbkit/seal.hpp"
#include "bbkit/text.hpp"

namespace bbkit::mover_internal {

namespace {

// A temporary's suffix: the buffer's tag for this boot (16 hex digits, see temp_tag), 8 per
// move and 4 per file. Older movers wrote 20 (the boot's public hash, 8 per move, 4 per
// file): their temporaries are still recognised, and removed, never taken over.
constexpr std::size_t temp_tag_digits = 16;
constexpr std::size_t temp_prefix_digits = temp_tag_digits + 8;
constexpr std::size_t temp_suffix_digits = temp_prefix_digits + 4;
constexpr std::size_t old_temp_suffix_digits = 20;

}  // namespace

std::string long_name_tag(const std::string& name) {
    return std::to_string(std::hash<std::string>{}(name));
}

namespace {

// The name a temporary of TempNames::name() was made for, with a suffix of `suffix` digits: "" when
// `entry` is not shaped like one; a hash tag ("#" + tag) for the short form of long names.
std::string temp_owner_with(const std::string& entry, std::size_t suffix) {
    const std::string marker = ".bbkit-";
    if (entry.size() <= 1 + marker.size() + suffix || entry[0] != '.')
        return "";
    for (std::size_t i = entry.size() - suffix; i < entry.size(); ++i)
        if (!std::isxdigit(static_cast<unsigned char>(entry[i])) ||
            std::isupper(static_cast<unsigned char>(entry[i])))
            return "";
    const std::string head = entry.substr(0, entry.size() - suffix);  // ".NAME.bbkit-"
    if (head.size() > 1 + marker.size() && ends_with(head, marker))
        return head.substr(1, head.size() - 1 - marker.size());
    // ".bbkit-TAG-"
    if (starts_with(head, marker) && head.back() == '-' && head.size() > marker.size() + 1) {
        const std::string tag = head.substr(marker.size(), head.size() - marker.size() - 1);
        if (std::all_of(tag.begin(), tag.end(),
                        [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
            return "#" + tag;
    }
    return "";
}

}  // namespace

// Either suffix length: the digits before the suffix end in '-', which no suffix holds, so a
// name has at most one reading.
std::string temp_owner(const std::string& entry) {
    std::string owner = temp_owner_with(entry, temp_suffix_digits);
    return owner.empty() ? temp_owner_with(entry, old_temp_suffix_digits) : owner;
}

// What opens the suffix of every temporary a move of this buffer makes in this boot: a keyed
// hash of the boot id under the buffer's secret token. The boot id is public, the token is
// not: nobody else can name a temporary this buffer's next move would take over (bbkit(7),
// STAGING). Without a token, a random tag that no move will ever take over.
std::string temp_tag(const std::string& token) {
    if (token.empty())
        return random_hex(temp_tag_digits / 2);
    return to_hex(hmac_sha256(token, boot_id())).substr(0, temp_tag_digits);
}

TempNames::TempNames(const std::string& token)
    : tag_(temp_tag(token)), prefix_(tag_ + random_hex(4)) {}

std::string TempNames::name(const std::string& name) {
    char counter[8];
    std::snprintf(counter, sizeof counter, "%04llx",
                  static_cast<unsigned long long>(counter_.fetch_add(1) & 0xffff));
    const std::string suffix = prefix_ + counter;
    std::string temp = "." + name + ".bbkit-" + suffix;
    if (temp.size() <= NAME_MAX)
        return temp;
    // A long name leaves no room for a suffix: a short name still unique within this move.
    return ".bbkit-" + long_name_tag(name) + "-" + suffix;
}

// This move's own temporaries carry its 24-digit prefix.
bool TempNames::ours(const std::string& temp) const {
    return temp.size() > temp_suffix_digits &&
           temp.compare(temp.size() - temp_suffix_digits, temp_prefix_digits, prefix_) == 0;
}

// A temporary of this buffer's moves in this boot.
bool TempNames::tagged_ours(const std::string& temp) const {
    return temp.size() > temp_suffix_digits &&
           temp.compare(temp.size() - temp_suffix_digits, temp_tag_digits, tag_) == 0;
}

}  // namespace bbkit::mover_internal
