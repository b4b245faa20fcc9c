#include "bbkit/publish.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <set>
#include <sstream>

#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/process.hpp"
#include "bbkit/seal.hpp"
#include "bbkit/text.hpp"
#include "bbkit/user.hpp"
#include "bbkit/views.hpp"

namespace bbkit {
namespace {

using nlohmann::json;

// public/'s layout; bump it when that changes, so that the next writer resyncs everything.
// 1 was public/buffers.json or public/buffers.<uid>.json; 2 public/buffers/<uid>/ with or
// without PrivateData, and .settings and .unsettled in public/ itself.
constexpr int public_layout = 3;

// The writers' bookkeeping, public/.owner/ (mode 0700, public/'s owner's): the sizes and times
// of its files follow every change, which is nobody else's to watch (bbkit(7), SECURITY).
constexpr const char* books_name = ".owner";
constexpr const char* settings_name = "settings";
constexpr const char* unsettled_name = "unsettled";

struct DirectoryOwner {
    uid_t uid;
    gid_t gid;  // (gid_t)-1: keep whatever group it has
    mode_t mode;
};

// Gives the open directory `want`'s owner and mode, on the descriptor so that no path can be
// swapped in between. Access is taken away before the owner changes and granted after, so no
// intermediate state shows the directory to someone who should not see it.
void fix_directory(int fd, const std::string& path, const DirectoryOwner& want) {
    struct stat st {};
    if (::fstat(fd, &st) != 0)
        throw system_error("cannot inspect " + path, errno);
    mode_t mode = st.st_mode & 07777;
    const auto set_mode = [&](mode_t to) {
        if (::fchmod(fd, to) != 0)
            throw system_error("cannot set the mode of " + path, errno);
        mode = to;
    };
    if ((mode & ~want.mode) != 0)
        set_mode(mode & want.mode);
    if (st.st_uid != want.uid && ::fchown(fd, want.uid, want.gid) != 0)
        throw system_error("cannot give " + path + " to uid " + std::to_string(want.uid), errno);
    if (mode != want.mode)
        set_mode(want.mode);
}

// `name` in the directory `parent` (`path`), opened without following a symlink or crossing a
// mount (open_beneath: Error(no_perm) when one is in the way), and created first (mode 0700
// until fix_directory has set its owner: never open to the wrong user) when `create`. Empty
// when it is missing and not `create`.
Fd open_directory_at(int parent, const std::string& name, const std::string& path, bool create) {
    if (create && ::mkdirat(parent, name.c_str(), 0700) != 0 && errno != EEXIST)
        throw system_error("cannot create " + path, errno);
    struct stat st {};
    if (!create && ::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT)
            return Fd();
        throw system_error("cannot inspect " + path, errno);
    }
    return open_beneath(parent, name, O_RDONLY | O_DIRECTORY, "directory " + path);
}

// The directories publish writes in, each opened once, beneath the state directory, without
// following a symlink: public/ and all below it belong to the state owner, whom root does not
// trust (bbkit(7), SECURITY) and who could swap any of them for a symlink between a check and a
// write. So every write is a *at() call on these descriptors, never a path resolved again.
struct PublicTree {
    std::string state_path;
    std::string public_path;
    Fd state;
    Fd pub;
    Fd books;
    uid_t owner = 0;  // public/'s owner and group: the state owner's (StateStore sees to it)
    gid_t group = 0;

    std::string books_path(const std::string& name) const {
        return public_path + "/" + books_name + "/" + name;
    }
    // Root gives the bookkeeping to public/'s owner, who must be able to rewrite it.
    FileOwner books_owner() const { return geteuid() == 0 ? FileOwner{owner, group} : FileOwner{}; }
};

PublicTree open_public_tree(const StateStore& store) {
    PublicTree tree;
    tree.state_path = store.dir();
    tree.public_path = store.path("public");
    // The state directory itself sits in a directory of root's: only what is inside can move.
    tree.state.reset(
        ::open(tree.state_path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!tree.state)
        throw system_error("cannot open directory " + tree.state_path, errno);
    tree.pub = open_beneath(tree.state.get(), "public", O_RDONLY | O_DIRECTORY,
                            "directory " + tree.public_path);
    struct stat st {};
    if (::fstat(tree.pub.get(), &st) != 0)
        throw system_error("cannot inspect " + tree.public_path, errno);
    tree.owner = st.st_uid;
    tree.group = st.st_gid;
    const std::string books = tree.public_path + "/" + books_name;
    tree.books = open_directory_at(tree.pub.get(), books_name, books, true);
    fix_directory(tree.books.get(), books, DirectoryOwner{tree.owner, tree.group, 0700});
    return tree;
}

// Whether `name` in `dir` is a regular file of exactly `data` and `mode`. Never follows a
// symlink and never blocks on a fifo: with PrivateData a user owns the directory of their
// buffers' files.
bool same_file(int dir, const std::string& name, const std::string& data, mode_t mode) {
    const Fd fd(::openat(dir, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
        (st.st_mode & 07777) != mode || static_cast<std::size_t>(st.st_size) != data.size())
        return false;
    try {
        return read_all(fd.get(), name, data.size()) == data;  // larger: it grew meanwhile
    } catch (const Error&) {
        return false;
    }
}

// Snapshots are regenerated from state.db, so no fsync; an unchanged file is left alone, which
// keeps its mtime meaningful to whoever polls it.
void replace_if_changed(int dir, const std::string& name, const std::string& what,
                        const std::string& data, mode_t mode) {
    if (!same_file(dir, name, data, mode))
        replace_file_at(dir, name, data, mode, what);
}

// A snapshot or bookkeeping file in `dir`; nullopt when it does not exist.
std::optional<std::string> read_snapshot_at(int dir, const std::string& name,
                                            const std::string& what) {
    return read_file_at(dir, name, what, max_published_bytes, O_NOFOLLOW | O_NONBLOCK);
}

// Removes `name` from the directory `fd` (the directory `dir`): a file or an empty directory.
// Gone already is fine. A directory with content stays: in a user's directory (PrivateData) it
// may hold what that user could not remove themselves, such as another user's tree moved in
// whole, and root deletes nothing on a user's behalf that the user could not (bbkit(7),
// SECURITY). It only hides that user's own buffers from them.
void remove_entry(int fd, const std::string& dir, const std::string& name) {
    if (::unlinkat(fd, name.c_str(), 0) == 0 || errno == ENOENT)
        return;
    if (errno == EISDIR && (::unlinkat(fd, name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT ||
                            errno == ENOTEMPTY || errno == EEXIST))
        return;
    throw system_error("cannot remove " + dir + "/" + name, errno);
}

// Layout 1's public/buffers.json and public/buffers.<uid>.json.
bool is_layout_1_file(const std::string& name) {
    const std::string prefix = "buffers.", suffix = ".json";
    if (name == "buffers.json")
        return true;
    if (name.size() <= prefix.size() + suffix.size() || !starts_with(name, prefix) ||
        !ends_with(name, suffix))
        return false;
    return parse_decimal(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size()),
                         max_uid)
        .has_value();
}

// The uid a key file of public/buffers/ is named for (public_key_name); nullopt for any other
// name.
std::optional<uid_t> key_file_uid(const std::string& name) {
    const std::string suffix = ".key";
    if (name.size() <= suffix.size() || !ends_with(name, suffix))
        return std::nullopt;
    const auto uid = parse_decimal(name.substr(0, name.size() - suffix.size()), max_uid);
    if (!uid || public_key_name(static_cast<uid_t>(*uid)) != name)
        return std::nullopt;
    return static_cast<uid_t>(*uid);
}

// Snapshots are not fsync'd, so a power cut may leave any of them stale or empty: a new boot id
// (process.hpp) in the settings makes the first writer after a reboot rewrite them all.

// What public/ was last fully written for; any difference asks for publish_all().
std::string public_settings(const Config& config) {
    std::string out = "layout=" + std::to_string(public_layout) +
                      "\nprivate_data=" + (config.flags.private_data ? "1" : "0") +
                      "\nboot=" + boot_id() + "\n";
    // Each buffer file holds its absolute path, which comes from the pool's configured path.
    for (const PoolConfig& pool : config.pools)
        out += "pool=" + pool.name + " " + pool.path + "\n";
    return out;
}

// public/buffers/: one file (0644) per live buffer, <key>.json, in a directory per user, so
// that a change costs one file whatever the number of buffers (bbkit(7), FILES):
// - without PrivateData, public/buffers/ and each <uid>/ are 0755 and owned like public/, and a
//   user's directory goes with their last buffer;
// - with PrivateData and a state directory of root's, public/buffers/ is 0711 and holds each
//   user's key file and directory (views.hpp's public_key_name, public_directory_name), theirs
//   (0400, 0700): nobody else can list, name or stat them, so nothing another user reaches
//   changes with a user's buffers, and both stay once made (their directory is only emptied);
// - with PrivateData and a state directory of another owner's, who cannot give a file away,
//   public/buffers/ (0711) holds nothing: no user sees any buffer.
class PublicBuffers {
  public:
    PublicBuffers(const PublicTree& tree, const Config& config)
        : dir_(tree.public_path + "/buffers"),
          layout_(!config.flags.private_data ? Layout::shared
                  : tree.owner == 0          ? Layout::keyed
                                             : Layout::withheld),
          base_{tree.owner, tree.group, layout_ == Layout::shared ? mode_t{0755} : mode_t{0711}} {
        fd_ = open_directory_at(tree.pub.get(), "buffers", dir_, true);
        fix_directory(fd_.get(), dir_, base_);
    }

    // Writes the buffer's file, creating or fixing its user's directory (and key).
    void write(const BufferStatus& status) {
        const Buffer& b = status.buffer;
        if (layout_ == Layout::withheld) {
            warn_withheld();
            return;
        }
        guarded(b.uid, [&] {
            UserDirectory* user = user_directory(b.uid, b.gid, true);
            const std::string name = b.key.str() + ".json";
            replace_if_changed(
                user->fd.get(), name, user->path + "/" + name,
                buffer_status_json(status).dump(2, ' ', false, json::error_handler_t::replace) +
                    "\n",
                0644);
        });
    }

    // Removes the buffer's file (and without PrivateData its user's directory once empty).
    void remove(const std::string& key, uid_t uid) {
        if (layout_ == Layout::withheld)
            return;
        guarded(uid, [&] {
            UserDirectory* user = user_directory(uid, static_cast<gid_t>(-1), false);
            if (!user)
                return;
            remove_entry(user->fd.get(), user->path, key + ".json");
            remove_if_empty(uid);
        });
    }

    // Makes the tree hold exactly `live`: writes every file that differs, removes all others
    // (stale files, temporaries left by a kill, another layout's entries, directories of users
    // without live buffers when they may go).
    void resync(const std::vector<BufferStatus>& live) {
        if (layout_ == Layout::withheld) {
            for (const std::string& name : list_directory(fd_.get(), dir_))
                remove_stale(name);
            if (!live.empty())
                warn_withheld();
            return;
        }
        std::map<uid_t, std::vector<const BufferStatus*>> by_user;
        for (const BufferStatus& status : live)
            by_user[status.buffer.uid].push_back(&status);
        // The entries that belong to a user: their directory, and their key file.
        std::map<std::string, uid_t> owned;
        for (const std::string& name : list_directory(fd_.get(), dir_)) {
            if (layout_ == Layout::shared) {
                if (const auto uid = parse_decimal(name, max_uid);
                    uid && std::to_string(*uid) == name)
                    owned.emplace(name, static_cast<uid_t>(*uid));
            } else {
                const std::optional<uid_t> uid = key_file_uid(name);
                if (!uid)
                    continue;
                if (const auto key = user_key(*uid, static_cast<gid_t>(-1), false)) {
                    owned.emplace(name, *uid);
                    owned.emplace(public_directory_name(*uid, *key), *uid);
                }
            }
        }
        for (const std::string& name : list_directory(fd_.get(), dir_))
            if (!owned.count(name))
                remove_stale(name);
        for (const auto& [uid, statuses] : by_user) {
            std::set<std::string> expected;
            for (const BufferStatus* status : statuses) {
                write(*status);
                expected.insert(status->buffer.key.str() + ".json");
            }
            prune(uid, expected);
        }
        std::set<uid_t> idle;
        for (const auto& [name, uid] : owned)
            if (!by_user.count(uid))
                idle.insert(uid);
        for (const uid_t uid : idle)
            prune(uid, {});
    }

  private:
    enum class Layout { shared, keyed, withheld };

    struct UserDirectory {
        Fd fd;
        std::string path;
    };

    // The user's key (keyed layout), read from their key file in public/buffers/; with
    // `create`, a new one written there when they have none. A key file that is not a regular
    // file of theirs holding a key is none: they may have changed it (it is theirs), which only
    // moves their own directory, and the next resync removes the old one.
    std::optional<std::string> user_key(uid_t uid, gid_t gid, bool create) {
        if (std::optional<std::string> key = read_public_key(fd_.get(), dir_, uid))
            return key;
        if (!create)
            return std::nullopt;
        std::string key = new_user_key();
        // Not fsync'd, as the snapshots: a key lost to a power cut is made again, and the new
        // boot's resync removes the directory the old one named.
        const std::string name = public_key_name(uid);
        replace_file_at(fd_.get(), name, key + "\n", 0400, dir_ + "/" + name, FileOwner{uid, gid});
        return key;
    }

    // Checked once per publish; nullptr when missing and `create` is false.
    UserDirectory* user_directory(uid_t uid, gid_t gid, bool create) {
        if (const auto it = open_.find(uid); it != open_.end())
            return &it->second;
        std::string name = std::to_string(uid);
        if (layout_ == Layout::keyed) {
            const std::optional<std::string> key = user_key(uid, gid, create);
            if (!key)
                return nullptr;
            name = public_directory_name(uid, *key);
        }
        const std::string path = dir_ + "/" + name;
        Fd fd = open_directory_at(fd_.get(), name, path, create);
        if (!fd)
            return nullptr;
        fix_directory(fd.get(), path,
                      layout_ == Layout::keyed ? DirectoryOwner{uid, gid, 0700}
                                               : DirectoryOwner{base_.uid, base_.gid, 0755});
        return &open_.emplace(uid, UserDirectory{std::move(fd), path}).first->second;
    }

    // Removes from the user's directory every entry not in `expected`, and the directory itself
    // when empty and it may go.
    void prune(uid_t uid, const std::set<std::string>& expected) {
        guarded(uid, [&] {
            if (UserDirectory* user = user_directory(uid, static_cast<gid_t>(-1), false))
                for (const std::string& entry : list_directory(user->fd.get(), user->path))
                    if (!expected.count(entry))
                        remove_entry(user->fd.get(), user->path, entry);
            remove_if_empty(uid);
        });
    }

    // An entry of public/buffers/ that is nobody's in this layout: removed, a directory with
    // what root may remove in it (remove_entry).
    void remove_stale(const std::string& name) {
        struct stat st {};
        if (::fstatat(fd_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
            return;  // gone
        if (!S_ISDIR(st.st_mode)) {
            remove_entry(fd_.get(), dir_, name);
            return;
        }
        guarded(st.st_uid, [&] {
            const std::string path = dir_ + "/" + name;
            if (const Fd dir = open_directory_at(fd_.get(), name, path, false))
                for (const std::string& entry : list_directory(dir.get(), path))
                    remove_entry(dir.get(), path, entry);
            remove_entry(fd_.get(), dir_, name);
        });
    }

    // Without PrivateData a user without live buffers has no directory: readers take a missing
    // one as none. With it, their directory stays, so that public/buffers/ does not change.
    void remove_if_empty(uid_t uid) {
        if (layout_ != Layout::shared)
            return;
        const std::string name = std::to_string(uid);
        if (::unlinkat(fd_.get(), name.c_str(), AT_REMOVEDIR) == 0)
            open_.erase(uid);
    }

    void warn_withheld() {
        // Only root can give a file away. Keeping them fails closed: users cannot read their
        // buffers, rather than reading everyone's.
        if (!warned_)
            spdlog::warn(
                "PrivateData: the state directory's owner is not root, so {} cannot hold files "
                "only their users may read (other users see no buffers)",
                dir_);
        warned_ = true;
    }

    // A user owns their directory (PrivateData) and may put anything into it: what they break
    // there only hides their own buffers from them, and must never fail the operation.
    // `uid` is the user the directory or entry belongs to.
    template <typename Action>
    void guarded(uid_t uid, Action action) {
        if (layout_ != Layout::keyed || uid == 0 || uid == base_.uid) {
            action();
            return;
        }
        try {
            action();
        } catch (const Error& error) {
            spdlog::warn("public status of uid {} not updated: {}", uid, error.what());
        }
    }

    std::string dir_;
    Layout layout_;
    DirectoryOwner base_;
    Fd fd_;
    std::map<uid_t, UserDirectory> open_;
    bool warned_ = false;
};

// public/.owner/unsettled: the keys (with their uid) that the last publish wrote. It ran before
// its commit, which a rollback or a kill may have undone: the next publish rewrites these keys
// from the committed state, so no file outlives a transaction that never happened.
//
// Only writers read it, under the state lock, so it is rewritten in place through the
// descriptor it was read from: a new file per publish cost a data block allocated and one freed
// each time. A kill between the write and the truncation leaves the new keys followed by part
// of the old ones, which were settled before (publish settles them first): settling any of
// them again, or a fragment that names nothing, is harmless. A power cut may leave anything
// here, but it also changes the boot id, which makes the next writer resync all of public/.
class UnsettledFile {
  public:
    explicit UnsettledFile(const PublicTree& tree) : path_(tree.books_path(unsettled_name)) {
        // Never through a link the state owner planted (open_state_file's rules).
        fd_ = open_state_file_at(tree.books.get(), unsettled_name, O_RDWR | O_CREAT | O_NONBLOCK,
                                 path_, 0600);
        struct stat st {};
        if (::fstat(fd_.get(), &st) != 0)
            throw system_error("cannot open " + path_, errno);
        if (!S_ISREG(st.st_mode))
            throw Error(ExitCode::io, path_ + " is not a regular file (remove it)");
        // The state directory's owner must be able to rewrite it in place.
        const FileOwner owner = tree.books_owner();
        if (owner.uid != static_cast<uid_t>(-1) &&
            (st.st_uid != owner.uid || st.st_gid != owner.gid) &&
            ::fchown(fd_.get(), owner.uid, owner.gid) != 0)
            throw system_error("cannot give " + path_ + " to uid " + std::to_string(owner.uid),
                               errno);
        text_ = read_all(fd_.get(), path_, max_published_bytes);
    }

    std::map<std::string, uid_t> keys() const {
        std::map<std::string, uid_t> keys;
        std::istringstream in(text_);
        std::string uid, key;
        while (in >> uid >> key)
            if (const std::optional<std::uint64_t> number = parse_decimal(uid, max_uid))
                keys.emplace(key, static_cast<uid_t>(*number));
        return keys;
    }

    // Names the keys of `buffers` that have a record. Never shorter than one byte: truncating
    // to nothing would free the block that the next publish allocates again.
    void write(const std::map<std::string, std::optional<Buffer>>& buffers) {
        std::string text;
        for (const auto& [key, buffer] : buffers)
            if (buffer)
                text += std::to_string(buffer->uid) + " " + key + "\n";
        if (text.empty())
            text = "\n";
        if (text == text_)
            return;
        std::size_t done = 0;
        while (done < text.size()) {
            const ssize_t n = ::pwrite(fd_.get(), text.data() + done, text.size() - done,
                                       static_cast<off_t>(done));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)  // 0 sets no errno: nothing written is an I/O error
                throw system_error("cannot write " + path_, n < 0 ? errno : EIO);
            done += static_cast<std::size_t>(n);
        }
        if (text.size() < text_.size() &&
            ::ftruncate(fd_.get(), static_cast<off_t>(text.size())) != 0)
            throw system_error("cannot write " + path_, errno);
        text_ = std::move(text);
    }

  private:
    std::string path_;
    Fd fd_;
    std::string text_;
};

std::optional<Buffer> find_by_text(Transaction& txn, const std::string& key) {
    try {
        return txn.find_buffer(parse_buffer_key(key));
    } catch (const Error&) {
        return std::nullopt;  // not a key this build can parse: nothing to publish
    }
}

// The buffers of the keys this transaction touched (a key without a record has none).
std::map<std::string, std::optional<Buffer>> touched_buffers(WriteTransaction& txn) {
    std::map<std::string, std::optional<Buffer>> buffers;
    for (const std::string& key : txn.touched_keys())
        buffers.emplace(key, find_by_text(txn, key));
    // A request left a queue: everyone behind it moved up.
    for (const std::string& pool : txn.touched_queues())
        for (const QueueEntry& entry : txn.queue(pool))
            if (!buffers.count(entry.key))
                buffers.emplace(entry.key, find_by_text(txn, entry.key));
    return buffers;
}

void publish_pools(Transaction& txn, const PublicTree& tree, const Config& config) {
    const std::vector<PoolStatus> pools = pool_status(txn, config);
    replace_if_changed(tree.state.get(), "pools.json", tree.state_path + "/pools.json",
                       slurm_pools_json(pools) + "\n", 0644);
    replace_if_changed(tree.pub.get(), "pools.json", tree.public_path + "/pools.json",
                       pools_json(pools).dump(2) + "\n", 0644);
}

// Whether a pool's availability differs from public/pools.json's: an unmount or a recreated
// file system changes no record, yet pools.json must then report free = 0 (one marker read per
// pool, no sum over buffers).
bool availability_changed(Transaction& txn, const PublicTree& tree, const Config& config) {
    const auto published =
        read_snapshot_at(tree.pub.get(), "pools.json", tree.public_path + "/pools.json");
    if (!published)
        return true;
    const json list = json::parse(*published, nullptr, false);
    if (!list.is_array())
        return true;
    std::map<std::string, std::string> was;
    for (const json& pool : list) {
        const auto name = pool.find("name");
        if (!pool.is_object() || name == pool.end() || !name->is_string())
            return true;
        const auto availability = pool.find("availability");
        was[name->get<std::string>()] = availability != pool.end() && availability->is_string()
                                            ? availability->get<std::string>()
                                            : std::string();
    }
    for (const PoolConfig& configured : config.pools) {
        const std::optional<PoolRecord> record = txn.find_pool(configured.name);
        const PoolAvailability now = pool_availability(
            configured, record ? std::optional<std::string>(record->uuid) : std::nullopt,
            record && record->draining);
        if (was[configured.name] != to_string(now))
            return true;
    }
    return false;
}

void publish_all_to(WriteTransaction& txn, const PublicTree& tree, const Config& config) {
    publish_pools(txn, tree, config);
    UnsettledFile(tree).write(touched_buffers(txn));
    PublicBuffers out(tree, config);
    BufferFilter live;
    live.live_only = true;
    std::vector<BufferStatus> statuses;
    for (Buffer& buffer : txn.list_buffers(live))
        statuses.push_back(buffer_status(txn, config, std::move(buffer)));
    out.resync(statuses);
    // Layout 1's files (a shared one would show everyone's buffers under PrivateData), and
    // layout 2's bookkeeping.
    for (const std::string& name : list_directory(tree.pub.get(), tree.public_path))
        if (is_layout_1_file(name) || name == ".settings" || name == ".unsettled")
            remove_entry(tree.pub.get(), tree.public_path, name);
    // Last: a resync cut short is done again by the next writer.
    replace_file_at(tree.books.get(), settings_name, public_settings(config), 0600,
                    tree.books_path(settings_name), tree.books_owner());
}

}  // namespace

void publish_all(WriteTransaction& txn, const StateStore& store, const Config& config) {
    publish_all_to(txn, open_public_tree(store), config);
}

void publish(WriteTransaction& txn, const StateStore& store, const Config& config) {
    const PublicTree tree = open_public_tree(store);
    if (read_snapshot_at(tree.books.get(), settings_name, tree.books_path(settings_name)) !=
        public_settings(config)) {
        publish_all_to(txn, tree, config);
        return;
    }
    if (txn.pools_touched() || availability_changed(txn, tree, config))
        publish_pools(txn, tree, config);
    UnsettledFile unsettled(tree);
    const std::map<std::string, uid_t> previous = unsettled.keys();
    const std::map<std::string, std::optional<Buffer>> touched = touched_buffers(txn);
    PublicBuffers out(tree, config);
    const auto settle = [&](const std::string& key, const std::optional<Buffer>& buffer) {
        // Gone (a rolled-back insert), or moved to another uid: the old file must not stay.
        const auto was = previous.find(key);
        if (was != previous.end() && (!buffer || buffer->uid != was->second))
            out.remove(key, was->second);
        if (!buffer)
            return;
        if (is_final(buffer->state))
            out.remove(key, buffer->uid);
        else
            out.write(buffer_status(txn, config, *buffer));
    };
    // The last publish's keys that this transaction leaves alone are settled first, from the
    // committed state, while `unsettled` still names them: killed later, once it names only
    // this transaction's keys, nothing is left that no publish would ever rewrite.
    for (const auto& [key, uid] : previous)
        if (!touched.count(key))
            settle(key, find_by_text(txn, key));
    unsettled.write(touched);  // before any file it names is written
    fault_point("publish.unsettled-written");
    for (const auto& [key, buffer] : touched)
        settle(key, buffer);
}

}  // namespace bbkit
