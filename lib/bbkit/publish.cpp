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
#include "bbkit/text.hpp"
#include "bbkit/user.hpp"
#include "bbkit/views.hpp"

namespace bbkit {
namespace {

using nlohmann::json;

// Whether `path` is a regular file of exactly `data` and `mode`. Never follows a symlink and
// never blocks on a fifo: with PrivateData a user owns the directory of their buffers' files.
bool same_file(const std::string& path, const std::string& data, mode_t mode) {
    const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
        (st.st_mode & 07777) != mode || static_cast<std::size_t>(st.st_size) != data.size())
        return false;
    try {
        return read_all(fd.get(), path, data.size()) == data;  // larger: it grew meanwhile
    } catch (const Error&) {
        return false;
    }
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

Fd open_directory_at(int parent, const std::string& name, const std::string& path) {
    Fd fd(::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd && errno != ENOENT)
        throw system_error("cannot open directory " + path, errno);
    return fd;
}

// Layout 1's public/buffers.json and public/buffers.<uid>.json.
bool is_layout_1_file(const std::string& name) {
    const std::string prefix = "buffers.", suffix = ".json";
    if (name == "buffers.json")
        return true;
    if (name.size() <= prefix.size() + suffix.size() ||
        name.compare(0, prefix.size(), prefix) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
        return false;
    return parse_decimal(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size()),
                         max_uid)
        .has_value();
}

// A snapshot file; nullopt when it does not exist.
std::optional<std::string> read_snapshot_file(const std::string& path) {
    return read_file(path, path, max_published_bytes, O_NOFOLLOW);
}

// public/'s layout; bump it when that changes, so that the next writer resyncs everything.
// 1 was public/buffers.json or public/buffers.<uid>.json.
constexpr int public_layout = 2;

// Snapshots are not fsync'd, so a power cut may leave any of them stale or empty: a new boot id
// (process.hpp) in public/.settings makes the first writer after a reboot rewrite them all.

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

// Snapshots are regenerated from state.db, so no fsync; an unchanged file is left alone, which
// keeps its mtime meaningful to whoever polls it.
void replace_if_changed(const std::string& path, const std::string& data, mode_t mode) {
    if (!same_file(path, data, mode))
        replace_file(path, data, mode);
}

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

// public/buffers/<uid>/<key>.json: one file (0644) per live buffer, so that a change costs one
// file whatever the number of buffers. Without PrivateData each <uid>/ is 0755 and owned like
// public/; with it, 0700 and owned by that uid, so the directory alone decides who reads.
class PublicBuffers {
  public:
    PublicBuffers(const StateStore& store, const Config& config)
        : dir_(store.path("public/buffers")), private_data_(config.flags.private_data) {
        const std::string parent = store.path("public");
        const Fd public_fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!public_fd)
            throw system_error("cannot open directory " + parent, errno);
        struct stat st {};
        if (::fstat(public_fd.get(), &st) != 0)
            throw system_error("cannot inspect " + parent, errno);
        // public/ belongs to the state directory's owner (StateStore sees to it).
        base_ = DirectoryOwner{st.st_uid, st.st_gid, 0755};
        if (::mkdirat(public_fd.get(), "buffers", 0700) != 0 && errno != EEXIST)
            throw system_error("cannot create " + dir_, errno);
        fd_ = open_directory_at(public_fd.get(), "buffers", dir_);
        if (!fd_)
            throw system_error("cannot open directory " + dir_, errno);
        // 0755 even with PrivateData: users list it to find their directory, which they alone
        // may then enter.
        fix_directory(fd_.get(), dir_, base_);
    }

    // Writes the buffer's file, creating or fixing its user's directory.
    void write(const BufferStatus& status) {
        const Buffer& b = status.buffer;
        guarded(b.uid, [&] {
            UserDirectory* user = user_directory(b.uid, b.gid, true);
            replace_if_changed(
                user->path + "/" + b.key.str() + ".json",
                buffer_status_json(status).dump(2, ' ', false, json::error_handler_t::replace) +
                    "\n",
                0644);
        });
    }

    // Removes the buffer's file, and its user's directory once empty.
    void remove(const std::string& key, uid_t uid) {
        guarded(uid, [&] {
            UserDirectory* user = user_directory(uid, static_cast<gid_t>(-1), false);
            if (!user)
                return;
            remove_entry(user->fd.get(), user->path, key + ".json");
            remove_if_empty(uid);
        });
    }

    // Makes the tree hold exactly `live`: writes every file that differs, removes all others
    // (stale files, temporaries left by a kill, directories of users without live buffers).
    void resync(const std::vector<BufferStatus>& live) {
        std::map<uid_t, std::vector<const BufferStatus*>> by_user;
        for (const BufferStatus& status : live)
            by_user[status.buffer.uid].push_back(&status);
        for (const std::string& name : list_directory(fd_.get(), dir_)) {
            const std::optional<std::uint64_t> number = parse_decimal(name, max_uid);
            const auto uid = static_cast<uid_t>(number.value_or(0));
            if (!number || by_user.count(uid))
                continue;
            guarded(uid, [&] {
                if (UserDirectory* user = user_directory(uid, static_cast<gid_t>(-1), false))
                    for (const std::string& entry : list_directory(user->fd.get(), user->path))
                        remove_entry(user->fd.get(), user->path, entry);
                remove_if_empty(uid);
            });
        }
        for (const auto& [uid, statuses] : by_user) {
            std::set<std::string> expected;
            for (const BufferStatus* status : statuses) {
                write(*status);
                expected.insert(status->buffer.key.str() + ".json");
            }
            guarded(uid, [&] {
                if (UserDirectory* user = user_directory(uid, static_cast<gid_t>(-1), false))
                    for (const std::string& entry : list_directory(user->fd.get(), user->path))
                        if (!expected.count(entry))
                            remove_entry(user->fd.get(), user->path, entry);
            });
        }
    }

  private:
    struct UserDirectory {
        Fd fd;
        std::string path;
    };

    // Checked once per publish; nullptr when missing and `create` is false.
    UserDirectory* user_directory(uid_t uid, gid_t gid, bool create) {
        if (const auto it = open_.find(uid); it != open_.end())
            return &it->second;
        const std::string name = std::to_string(uid);
        const std::string path = dir_ + "/" + name;
        // 0700 until fix_directory has set the owner: never open to the wrong user.
        if (create && ::mkdirat(fd_.get(), name.c_str(), 0700) != 0 && errno != EEXIST)
            throw system_error("cannot create " + path, errno);
        Fd fd = open_directory_at(fd_.get(), name, path);
        if (!fd)
            return nullptr;
        fix_directory(fd.get(), path, wanted_owner(uid, gid));
        return &open_.emplace(uid, UserDirectory{std::move(fd), path}).first->second;
    }

    DirectoryOwner wanted_owner(uid_t uid, gid_t gid) {
        if (!private_data_)
            return base_;
        if (base_.uid == 0)
            return DirectoryOwner{uid, gid, 0700};
        // Only root can give a directory away. Keeping it fails closed: users cannot read
        // their buffers, rather than reading everyone's.
        if (!warned_) {
            spdlog::warn(
                "PrivateData: cannot give {}/<uid> to each user, the state directory's "
                "owner is not root (other users see no buffers)",
                dir_);
            warned_ = true;
        }
        return DirectoryOwner{base_.uid, base_.gid, 0700};
    }

    // A user without live buffers has no directory: readers take a missing one as none.
    void remove_if_empty(uid_t uid) {
        const std::string name = std::to_string(uid);
        if (::unlinkat(fd_.get(), name.c_str(), AT_REMOVEDIR) == 0)
            open_.erase(uid);
    }

    // With PrivateData a user owns their directory and may put anything into it; what they break
    // there only hides their own buffers from themselves, and must never fail the operation.
    template <typename Action>
    void guarded(uid_t uid, Action action) {
        if (!private_data_ || base_.uid != 0 || uid == 0) {
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
    bool private_data_;
    DirectoryOwner base_{};
    Fd fd_;
    std::map<uid_t, UserDirectory> open_;
    bool warned_ = false;
};

// public/.unsettled: the keys (with their uid) that the last publish wrote. It ran before its
// commit, which a rollback or a kill may have undone: the next publish rewrites these keys from
// the committed state, so no file outlives a transaction that never happened.
//
// Only writers read it, under the state lock, so it is rewritten in place through the
// descriptor it was read from: a new file per publish cost a data block allocated and one freed
// each time. A kill between the write and the truncation leaves the new keys followed by part
// of the old ones, which were settled before (publish settles them first): settling any of
// them again, or a fragment that names nothing, is harmless. A power cut may leave anything
// here, but it also changes the boot id, which makes the next writer resync all of public/.
class UnsettledFile {
  public:
    // `owner`: public/'s owner and group, which the file is given when root writes it (the
    // state directory's owner must be able to rewrite it in place).
    UnsettledFile(const std::string& path, uid_t owner, gid_t group) : path_(path) {
        const int flags = O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
        fd_.reset(::open(path.c_str(), flags, 0600));
        if (!fd_ && errno == EACCES && ::unlink(path.c_str()) == 0)  // someone else's: ours now
            fd_.reset(::open(path.c_str(), flags, 0600));
        struct stat st {};
        if (!fd_ || ::fstat(fd_.get(), &st) != 0)
            throw system_error("cannot open " + path, errno);
        if (!S_ISREG(st.st_mode))
            throw Error(ExitCode::io, path + " is not a regular file (remove it)");
        if (geteuid() == 0 && (st.st_uid != owner || st.st_gid != group) &&
            ::fchown(fd_.get(), owner, group) != 0)
            throw system_error("cannot give " + path + " to uid " + std::to_string(owner), errno);
        text_ = read_all(fd_.get(), path, max_published_bytes);
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

UnsettledFile open_unsettled(const StateStore& store) {
    const std::string dir = store.path("public");
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0)
        throw system_error("cannot inspect " + dir, errno);
    return UnsettledFile(dir + "/.unsettled", st.st_uid, st.st_gid);
}

void publish_pools(Transaction& txn, const StateStore& store, const Config& config) {
    const std::vector<PoolStatus> pools = pool_status(txn, config);
    replace_if_changed(store.path("pools.json"), slurm_pools_json(pools) + "\n", 0644);
    replace_if_changed(store.path("public/pools.json"), pools_json(pools).dump(2) + "\n", 0644);
}

// Whether a pool's availability differs from public/pools.json's: an unmount or a recreated
// file system changes no record, yet pools.json must then report free = 0 (one marker read per
// pool, no sum over buffers).
bool availability_changed(Transaction& txn, const StateStore& store, const Config& config) {
    const auto published = read_snapshot_file(store.path("public/pools.json"));
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

}  // namespace

void publish_all(WriteTransaction& txn, const StateStore& store, const Config& config) {
    publish_pools(txn, store, config);
    open_unsettled(store).write(touched_buffers(txn));
    PublicBuffers out(store, config);
    BufferFilter live;
    live.live_only = true;
    std::vector<BufferStatus> statuses;
    for (Buffer& buffer : txn.list_buffers(live))
        statuses.push_back(buffer_status(txn, config, std::move(buffer)));
    out.resync(statuses);
    // Layout 1's files: a shared one would show everyone's buffers under PrivateData.
    const std::string dir = store.path("public");
    const Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd)
        throw system_error("cannot list " + dir, errno);
    for (const std::string& name : list_directory(fd.get(), dir))
        if (is_layout_1_file(name))
            remove_entry(fd.get(), dir, name);
    // Last: a resync cut short is done again by the next writer.
    replace_file(dir + "/.settings", public_settings(config), 0600);
}

void publish(WriteTransaction& txn, const StateStore& store, const Config& config) {
    const std::string settings = store.path("public/.settings");
    if (read_snapshot_file(settings) != public_settings(config)) {
        publish_all(txn, store, config);
        return;
    }
    if (txn.pools_touched() || availability_changed(txn, store, config))
        publish_pools(txn, store, config);
    UnsettledFile unsettled = open_unsettled(store);
    const std::map<std::string, uid_t> previous = unsettled.keys();
    const std::map<std::string, std::optional<Buffer>> touched = touched_buffers(txn);
    PublicBuffers out(store, config);
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
    // committed state, while .unsettled still names them: killed later, once .unsettled names
    // only this transaction's keys, nothing is left that no publish would ever rewrite.
    for (const auto& [key, uid] : previous)
        if (!touched.count(key))
            settle(key, find_by_text(txn, key));
    unsettled.write(touched);  // before any file it names is written
    fault_point("publish.unsettled-written");
    for (const auto& [key, buffer] : touched)
        settle(key, buffer);
}

}  // namespace bbkit
