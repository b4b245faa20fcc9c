#include "bbkit/mover/mover_private.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/process.hpp"
#include "bbkit/seal.hpp"

namespace bbkit::mover_internal {

// ---- temporaries --------------------------------------------------------------------------

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

// The name a temporary of temp_name() was made for, with a suffix of `suffix` digits: "" when
// `entry` is not shaped like one; a hash tag ("#" + tag) for the short form of long names.
std::string temp_owner(const std::string& entry, std::size_t suffix) {
    const std::string marker = ".bbkit-";
    if (entry.size() <= 1 + marker.size() + suffix || entry[0] != '.')
        return "";
    for (std::size_t i = entry.size() - suffix; i < entry.size(); ++i)
        if (!std::isxdigit(static_cast<unsigned char>(entry[i])) ||
            std::isupper(static_cast<unsigned char>(entry[i])))
            return "";
    const std::string head = entry.substr(0, entry.size() - suffix);  // ".NAME.bbkit-"
    if (head.size() > 1 + marker.size() &&
        head.compare(head.size() - marker.size(), marker.size(), marker) == 0)
        return head.substr(1, head.size() - 1 - marker.size());
    // ".bbkit-TAG-"
    if (head.compare(0, marker.size(), marker) == 0 && head.back() == '-' &&
        head.size() > marker.size() + 1) {
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
    std::string owner = temp_owner(entry, temp_suffix_digits);
    return owner.empty() ? temp_owner(entry, old_temp_suffix_digits) : owner;
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

std::string Mover::temp_name(const std::string& name) {
    char counter[8];
    std::snprintf(counter, sizeof counter, "%04llx",
                  static_cast<unsigned long long>(temp_counter_.fetch_add(1) & 0xffff));
    const std::string suffix = temp_prefix_ + counter;
    std::string temp = "." + name + ".bbkit-" + suffix;
    if (temp.size() <= NAME_MAX)
        return temp;
    // A long name leaves no room for a suffix: a short name still unique within this move.
    return ".bbkit-" + long_name_tag(name) + "-" + suffix;
}

// This move's own temporaries carry its 24-digit prefix.
bool Mover::ours(const std::string& temp) const {
    return temp.size() > temp_suffix_digits &&
           temp.compare(temp.size() - temp_suffix_digits, temp_prefix_digits, temp_prefix_) == 0;
}

// A temporary of this buffer's moves in this boot.
bool Mover::tagged_ours(const std::string& temp) const {
    return temp.size() > temp_suffix_digits &&
           temp.compare(temp.size() - temp_suffix_digits, temp_tag_digits, temp_tag_) == 0;
}

// Whether a temporary tree `temp` (its lstat `st`) of a killed move may be taken over for a
// source directory (its stat `source`). Only where one syncfs makes everything in it durable:
// a file a killed run completed but never fsync'd would otherwise be published as it is. And
// only this buffer's own (its tag: see temp_tag), never for a keep_existing entry (which
// builds no tree under a temporary name: see make_dir), a directory of the user's, no more open
// than the mover makes one (the source's mode, the owner's rwx while it is built, a set-group-ID
// bit inherited from the parent): anyone who could write in it may have put anything there
// (bbkit(7), STAGING).
bool Mover::can_adopt(const std::string& temp, const struct stat& st,
                      const struct stat& source) const {
    if (!plan_.durable || !plan_.trust_syncfs || !tagged_ours(temp) || entry_->keep_existing)
        return false;
    const mode_t allowed = (source.st_mode & 07777) | S_IRWXU | S_ISGID;
    return S_ISDIR(st.st_mode) && st.st_uid == uid_ && (st.st_mode & 07777 & ~allowed) == 0;
}

// Whether `name` in `dir` belongs to the user: a killed move's temporary is removed only then.
// Another user's file that merely has the shape (in a directory others may write) is theirs.
bool Mover::owned(int dir, const std::string& name) const {
    struct stat st {};
    return fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_uid == uid_;
}

// Whether a temporary of another move may be removed as stale. A keep_existing entry's
// destination is shared with other writers (other nodes merging into it) whose live
// temporaries look like a killed move's: only this buffer's own of this boot are.
bool Mover::may_remove_stale(const std::string& temp) const {
    return !entry_->keep_existing || tagged_ours(temp);
}

// Removes a temporary a killed move left (a file, or a whole tree without following a symlink).
void Mover::remove_stale(const std::string& dir, int fd, const std::string& name) {
    if (const int err = remove_tree_beneath(fd, name); err != 0)
        warn("cannot remove the stale temporary " + dst_->display(dst_->join(dir, name)) + ": " +
             reason(err));
}

// The temporaries of other moves in `dir` (the parent of entries' destinations), listed once
// per move: (entry, owner).
std::vector<std::pair<std::string, std::string>>& Mover::temps_beside(const std::string& dir) {
    const auto found = entry_temps_.find(dir);
    if (found != entry_temps_.end())
        return found->second;
    auto& temps = entry_temps_[dir];
    Fd fd;
    try {
        fd = dst_->open_dir(dir);
    } catch (const Error&) {
        return temps;  // the copy itself reports what is wrong with this directory
    }
    DirStream stream(fd.get());
    while (stream) {
        const dirent* entry = stream.next();
        if (entry == nullptr)
            break;
        const std::string owner = temp_owner(entry->d_name);
        if (!owner.empty() && !ours(entry->d_name) && owned(fd.get(), entry->d_name))
            temps.emplace_back(entry->d_name, owner);
    }
    return temps;
}

// A move killed before its renames (stage-out, or symlinks and fifos of a stage-in) left its
// temporaries beside the names it was writing: files, and whole directory trees a durable move
// was building. In a destination directory that existed before this move, those made for a
// name this move writes there are removed, except a tree of a move killed in this boot, which
// the directory of that name takes over: what it holds is what the page cache holds, made
// durable by this move's sync before the tree is renamed into place (after a reboot it may
// hold torn files, so it goes). An entry of the source that merely looks like a temporary is
// kept, as is anything else.
void Mover::scan_stale_temps(Frame& frame) {
    const Dir& dir = *frame.dir;
    Fd fd;
    try {
        fd = dst_->open_dir(dir.at);
    } catch (const Error&) {
        return;  // the copy itself reports what is wrong with this directory
    }
    std::vector<std::string> stale;
    {
        DirStream stream(fd.get());
        while (stream) {
            const dirent* entry = stream.next();
            if (entry == nullptr)
                break;
            const std::string name = entry->d_name;
            const std::string owner = temp_owner(name);
            if (owner.empty() || ours(name) || kept_lookalike(dst_->join(dir.dst, name)) ||
                !may_remove_stale(name))
                continue;
            struct stat st {};
            if (fstatat(frame.fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
                continue;  // a source entry of that name: the user's, copied like any other
            struct stat temp {};
            if (fstatat(fd.get(), name.c_str(), &temp, AT_SYMLINK_NOFOLLOW) != 0 ||
                temp.st_uid != uid_)
                continue;  // gone, or somebody else's: neither removed nor taken over
            if (owner[0] == '#') {
                frame.tagged[owner].push_back(name);
                continue;
            }
            if (fstatat(frame.fd(), owner.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
                continue;  // not a name this move writes here
            if (S_ISDIR(st.st_mode) && frame.adoptable.count(owner) == 0 &&
                can_adopt(name, temp, st)) {
                frame.adoptable[owner] = name;
                continue;
            }
            stale.push_back(name);
        }
    }
    for (const std::string& name : stale)
        remove_stale(dir.at, fd.get(), name);
}

}  // namespace bbkit::mover_internal
