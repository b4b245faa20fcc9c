#include "bbkit/mover/walker.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bbkit/directive.hpp"
#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/shard.hpp"
#include "bbkit/sources.hpp"
#include "bbkit/text.hpp"

namespace bbkit::mover_internal {

// ---- walk -------------------------------------------------------------------------------

namespace {

// Buffer paths are relative, outside paths absolute; neither may climb (directive.hpp's rule:
// in the buffer ".." could only lead out of it).
std::string normalize(const std::string& path, bool in_buffer, const std::string& what) {
    if (!in_buffer && (path.empty() || path[0] != '/'))
        throw Error(ExitCode::data, what + " '" + path + "' is not an absolute path");
    std::string out = in_buffer ? "" : "/";
    const std::string shown = what + " '" + path + "'";
    for (const std::string& part : path_components(
             path, shown + (in_buffer ? " leaves the buffer" : " must not contain '..'"))) {
        if (!out.empty() && out != "/")
            out += '/';
        out += part;
    }
    return out;
}

}  // namespace

Walker::Walker(MoveState& state)
    : state_(state),
      plan_(state.plan),
      src_(state.src.get()),
      dst_(state.dst.get()),
      counts_(state.counts),
      warnings_(state.warnings),
      temps_(state.temps),
      links_(state.buffer_root.get(), state.plan.buffer_root, state.plan.memory_limit,
             state.plan.direction == MoveDirection::in ? FailureKind::destination
                                                       : FailureKind::internal),
      uid_(geteuid()) {
    // A sixteenth of the bound per batch: three batches alive, the hard links a quarter, the
    // workers' buffers and the allocator's slack the rest.
    batch_bytes_ = static_cast<std::size_t>(std::max<std::uint64_t>(plan_.memory_limit / 16, 1));
    batch_entries_ = plan_.batch_entries > 0 ? plan_.batch_entries : max_batch_entries;
    batch_limit_ = std::min(first_batch_entries, batch_entries_);
}

// The walker thread: every entry depth first, in batches; the last batch, or the failure that
// ended the walk, reaches the executor through the queue.
void Walker::run() {
    const Clock::time_point began = Clock::now();
    std::exception_ptr error;
    try {
        // Trees are read ahead by a thread per two workers (at most 8): they keep the one walk
        // from waiting on the disk, which would starve the workers of a large machine.
        if (std::any_of(plan_.entries.begin(), plan_.entries.end(),
                        [](const MoveEntry& e) { return e.type == StageType::directory; }))
            ahead_ = std::make_unique<WalkAhead>(std::clamp(plan_.threads / 2, 1u, 8u));
        for (const MoveEntry& entry : plan_.entries) {
            check_stopped();
            walk_entry(entry);
        }
        counts_.walk_done = true;
        fault_point("mover.walked");
        hand_over();
    } catch (const CopyStopped&) {
    } catch (...) {
        error = std::current_exception();
    }
    // The copy learns of the end (and a failure stops it) before the read-ahead winds down.
    state_.batches.finish(error, Clock::now() - began);
    ahead_.reset();
}

// An entry whose destination is, holds or is inside an earlier one's waits until everything
// before it is copied and in place: it then finds those directories where they belong and
// merges into them, instead of building a second temporary tree for the same name.
bool Walker::inside_earlier(const std::string& path) const {
    if (covers_all_)
        return true;
    for (std::string p = path; !p.empty() && p != "/";) {
        if (entry_tops_.count(p) != 0)
            return true;
        const std::size_t slash = p.rfind('/');
        if (slash == std::string::npos)
            break;
        p.resize(slash == 0 ? 1 : slash);
    }
    return false;
}

bool Walker::overlaps_earlier(const std::string& dst) const {
    if (entry_tops_.empty() && !covers_all_)
        return false;
    if (dst.empty() || dst == "/" || inside_earlier(dst))
        return true;
    const std::string below = dst + "/";
    const auto next = entry_tops_.lower_bound(below);
    return next != entry_tops_.end() && starts_with(*next, below);
}

// The directories above `dst` that an earlier entry finished (their final mode and times are
// applied when their walk ends): opened up while this entry writes into them, their mode and
// times put back at the end.
void Walker::reopen_earlier(const std::string& dst) {
    for (std::string dir = split_last(dst).first; inside_earlier(dir);
         dir = split_last(dir).first) {
        struct stat st {};
        if (reopened_.count(dir) == 0 && dst_->stat_entry(dir, st) && S_ISDIR(st.st_mode)) {
            reopened_.emplace(dir, st);
            if ((st.st_mode & S_IRWXU) != S_IRWXU) {
                const Fd fd = dst_->open_dir(dir, true);
                if (fchmod(fd.get(), (st.st_mode & 07777) | S_IRWXU) != 0)
                    fail("make", dst_->display(dir), errno, " writable");
            }
        }
        if (dir.empty() || dir == "/")
            break;
    }
}

void Walker::restore_reopened() {
    std::vector<std::pair<std::string, struct stat>> dirs(reopened_.begin(), reopened_.end());
    std::sort(dirs.begin(), dirs.end(),
              [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    for (const auto& [dir, st] : dirs) {
        const Fd fd = dst_->open_dir(dir, true);
        const struct timespec times[2] = {st.st_atim, st.st_mtim};
        if (fchmod(fd.get(), st.st_mode & 07777) != 0 || futimens(fd.get(), times) != 0)
            fail("restore the mode and times of", dst_->display(dir), errno);
        if (plan_.durable && fsync(fd.get()) != 0)
            fail("sync directory", dst_->display(dir), errno);
    }
}

// Names shaped like temporaries that this move writes are the user's: kept from every later
// stale-temporary pass (within a bound; past it, overlapping entries remove none at all).
void Walker::note_lookalike(const std::string& dst) {
    if (temp_owner(split_last(dst).second).empty())
        return;
    if (lookalikes_.size() < 65536)
        lookalikes_.insert(dst);
    else
        lookalikes_overflow_ = true;
}

bool Walker::kept_lookalike(const std::string& path) const {
    return lookalikes_.count(path) != 0 || (lookalikes_overflow_ && overlapping_);
}

// Whether a non-directory at `relative` below the entry's source root is this shard's
// (MoveEntry::shard_index): one hash of its name, nothing else.
bool Walker::in_shard(std::string_view relative) const {
    return entry_->shard_count <= 1 ||
           shard_of(relative, entry_->shard_count) == entry_->shard_index;
}

bool Walker::in_shard(ino_t inode) const {
    return entry_->shard_count <= 1 ||
           shard_of(std::to_string(inode), entry_->shard_count) == entry_->shard_index;
}

void Walker::walk_entry(const MoveEntry& entry) {
    entry_ = &entry;
    const std::string src = normalize(entry.source, src_->in_buffer(), "source");
    // "" (the buffer root) -> "name", "/" -> "/name", "dir" -> "dir/name".
    shard_prefix_ = src.empty() ? 0 : src == "/" ? 1 : src.size() + 1;
    bool into = entry.destination.empty() || entry.destination.back() == '/';
    std::string dst = normalize(entry.destination, dst_->in_buffer(), "destination");
    const std::string shown = src_->display(src);
    struct stat st {};
    if (!src_->stat_entry(src, st))
        fail_source("read", shown, ENOENT);
    switch (entry.type) {
        case StageType::directory:
            if (S_ISLNK(st.st_mode) && src_->in_buffer())
                throw refusal(FailureKind::source, ExitCode::no_perm,
                              "refusing " + shown + ": it is a symlink", shown);
            if (!S_ISDIR(st.st_mode))
                throw refusal(FailureKind::source, ExitCode::data,
                              shown + " is not a directory (type=directory)", shown);
            break;
        case StageType::file: {
            if (S_ISDIR(st.st_mode))
                throw refusal(FailureKind::source, ExitCode::data,
                              shown + " is a directory (use type=directory)", shown);
            struct stat existing {};
            if (!into && dst_->stat_entry(dst, existing) && S_ISDIR(existing.st_mode))
                into = true;
            if (into)
                dst = dst_->join(dst, split_last(src).second);
            break;
        }
        case StageType::list:
            throw Error(ExitCode::software, "type=list entries must be expanded before moving");
    }
    // Another shard's file: checked like every shard's source, then left to that shard.
    if (entry.type == StageType::file &&
        !(entry.shard_by_inode ? in_shard(st.st_ino) : in_shard(split_last(src).second)))
        return;
    overlapping_ = overlaps_earlier(dst);
    if (overlapping_) {
        drain();
        reopen_earlier(dst);
    }
    entry_tops_.insert(dst);
    covers_all_ = covers_all_ || dst.empty() || dst == "/";
    make_parents(dst);
    const auto [parent, name] = split_last(dst);
    watch_file_system(parent);

    // Temporaries a killed move left beside this entry's destination.
    std::string adopt;
    if (!(dst_->in_buffer() && dst.empty())) {
        auto& temps = temps_beside(parent);
        const std::string tag = "#" + long_name_tag(name);
        for (auto it = temps.begin(); it != temps.end();) {
            if ((it->second != name && it->second != tag) ||
                kept_lookalike(dst_->join(parent, it->first)) || !may_remove_stale(it->first)) {
                ++it;
                continue;
            }
            const Fd dir = dst_->open_dir(parent);
            struct stat temp {};
            if (entry.type == StageType::directory && adopt.empty() && it->second == name &&
                fstatat(dir.get(), it->first.c_str(), &temp, AT_SYMLINK_NOFOLLOW) == 0 &&
                can_adopt(it->first, temp, st))
                adopt = it->first;
            else
                remove_stale(parent, dir.get(), it->first);
            it = temps.erase(it);
        }
    }
    if (entry.type == StageType::directory) {
        const std::shared_ptr<Dir> top = make_dir(src, dst, st, nullptr, adopt);
        ++counts_.files_total;
        struct stat made {};
        if (fstat(dst_->open_dir(top->at, true).get(), &made) == 0) {
            top_dev_ = made.st_dev;
            top_ino_ = made.st_ino;
        }
        walk_tree(top);
        top_dev_ = 0;
        top_ino_ = 0;
    } else {
        add_node(src, dst, st, nullptr);
    }
}

void Walker::open_frame(Frame& frame, int parent_fd) {
    const Dir& dir = *frame.dir;
    Fd fd;
    if (parent_fd < 0) {
        fd = src_->open_dir(dir.src, true);
    } else {
        fd = Fd(openat(parent_fd, split_last(dir.src).second.c_str(),
                       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!fd)
            fail_source("open directory", src_->display(dir.src), errno);
    }
    frame.stream = std::make_unique<DirStream>(fd.get());
    if (!*frame.stream)
        fail_source("list", src_->display(dir.src), errno);
    if (dir.created)
        return;
    if (dir.tree && dir.tree->adopted)
        prune_adopted(frame);
    else
        scan_stale_temps(frame);
}

// A directory of a tree taken over from a killed move holds what that move wrote, which may
// not be this source's (another source, an edited request): whatever the source does not have
// there, or has as another kind (a directory against anything else), goes.
void Walker::prune_adopted(Frame& frame) {
    const Dir& dir = *frame.dir;
    const Fd fd = dst_->open_dir(dir.at);
    DirStream stream(fd.get());
    while (stream) {
        const dirent* entry = stream.next();
        if (entry == nullptr)
            break;
        const std::string name = entry->d_name;
        if (!temp_owner(name).empty() && temps_.ours(name))
            continue;
        struct stat in_source {
        }, here{};
        if (fstatat(fd.get(), name.c_str(), &here, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (fstatat(frame.fd(), name.c_str(), &in_source, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISDIR(in_source.st_mode) == S_ISDIR(here.st_mode))
            continue;
        remove_stale(dir.at, fd.get(), name);
    }
}

// A directory's walk ended: temporary trees nobody took over go, and its metadata waits for
// the end of this batch's copy.
void Walker::close_frame(Frame& frame) {
    if (!frame.adoptable.empty()) {
        const Fd dir = dst_->open_dir(frame.dir->at);
        for (const auto& [name, temp] : frame.adoptable)
            remove_stale(frame.dir->at, dir.get(), temp);
    }
    batch_.closed.push_back(frame.dir);
    account(entry_overhead + frame.dir->src.size() + frame.dir->dst.size());
}

// Depth first with one open directory per level: memory grows with the depth, never with the
// number of entries in a directory.
void Walker::walk_tree(const std::shared_ptr<Dir>& top) {
    std::vector<Frame> stack;
    stack.emplace_back();
    stack.back().dir = top;
    open_frame(stack.back(), -1);
    // A descriptor of its own (a dup would share the walk's position in the directory).
    if (ahead_)
        ahead_->read(Fd(openat(stack.back().fd(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)));
    while (!stack.empty()) {
        check_stopped();
        Frame& frame = stack.back();
        const dirent* entry = frame.stream->next();
        if (ahead_ && entry != nullptr)
            ahead_->walked();
        if (entry == nullptr) {
            if (errno != 0)
                fail_source("list", src_->display(frame.dir->src), errno);
            close_frame(frame);
            stack.pop_back();
            continue;
        }
        const std::string name = entry->d_name;
        if (!frame.tagged.empty()) {
            const auto tagged = frame.tagged.find("#" + long_name_tag(name));
            if (tagged != frame.tagged.end()) {
                const Fd dir = dst_->open_dir(frame.dir->at);
                for (const std::string& temp : tagged->second)
                    remove_stale(frame.dir->at, dir.get(), temp);
                frame.tagged.erase(tagged);
            }
        }
        const std::string child_src = src_->join(frame.dir->src, name);
        // A sharded entry takes only its own share of the non-directories, and does not even
        // stat another shard's where the listing says what it is; directories are walked (and
        // made) in every shard.
        const bool mine = entry_->shard_by_inode
                              ? in_shard(entry->d_ino)
                              : in_shard(std::string_view(child_src).substr(shard_prefix_));
        if (!mine && entry->d_type != DT_UNKNOWN && entry->d_type != DT_DIR)
            continue;
        const std::string child_dst = dst_->join(frame.dir->dst, name);
        struct stat st {};
        if (fstatat(frame.fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
            fail_source("stat", src_->display(child_src), errno);
        if (!S_ISDIR(st.st_mode)) {
            if (mine)
                add_node(child_src, child_dst, st, frame.dir);
            continue;
        }
        if (st.st_dev == top_dev_ && st.st_ino == top_ino_)
            continue;  // the destination itself, inside the source: not copied into itself
        std::string adopt;
        if (const auto it = frame.adoptable.find(name); it != frame.adoptable.end()) {
            adopt = it->second;
            frame.adoptable.erase(it);
        }
        Frame child;
        child.dir = make_dir(child_src, child_dst, st, frame.dir.get(), adopt);
        ++counts_.files_total;
        const int parent_fd = frame.fd();
        open_frame(child, parent_fd);
        stack.push_back(std::move(child));
        fault_point("mover.dirs-made");
    }
}

void Walker::add_node(const std::string& src, const std::string& dst, const struct stat& st,
                      const std::shared_ptr<Dir>& parent) {
    Node node;
    node.src = src;
    node.dst = dst;
    node.st = st;
    node.parent = parent;
    node.keep_existing = entry_->keep_existing;
    const mode_t type = st.st_mode & S_IFMT;
    if (type == S_IFREG)
        node.kind = Kind::file;
    else if (type == S_IFLNK)
        node.kind = Kind::symlink;
    else if (type == S_IFIFO)
        node.kind = Kind::fifo;
    else {
        warnings_.add("skipped " + std::string(type == S_IFSOCK ? "socket " : "device node ") +
                      src_->display(src));
        return;
    }
    note_lookalike(dst);
    std::size_t bytes = entry_overhead + src.size() + dst.size();
    // Hard links of any kind of entry (a symlink or fifo can have several names too, and cp -a
    // keeps them as links).
    if (st.st_nlink > 1) {
        const std::shared_ptr<TempTree> tree = parent ? parent->tree : nullptr;
        // Where it is reached until the very end (a spilled link is made there).
        const std::string reached_at =
            parent ? dst_->join(parent->at, split_last(dst).second) : dst;
        switch (links_.meet(st, dst, tree, reached_at, node.link)) {
            case LinkTable::Met::later:
                node.kind = Kind::hard_link;
                bytes += node.link.dst.size();
                break;
            case LinkTable::Met::spilled:
                // Its tree stays under its temporary name until the links are made
                // (TempTree::deferred).
                if (tree)
                    tree->deferred = true;
                break;
            case LinkTable::Met::first:
                break;
        }
    }
    if (plan_.capacity && type == S_IFREG) {
        capacity_counted_ += static_cast<std::uint64_t>(st.st_size);
        require_fits(capacity_counted_, *plan_.capacity);
    }
    if (node.kind == Kind::file)
        counts_.bytes_total += static_cast<std::uint64_t>(st.st_size);
    ++counts_.files_total;
    batch_.nodes.push_back(std::move(node));
    account(bytes);
}

void Walker::account(std::size_t bytes) {
    batch_.bytes += bytes;
    if (batch_.nodes.size() + batch_.closed.size() >= batch_limit_ || batch_.bytes >= batch_bytes_)
        hand_over();
}

// Queues the batch being filled (waiting while the queue is full) and starts a new one.
void Walker::hand_over() {
    if (batch_.nodes.empty() && batch_.closed.empty())
        return;
    state_.batches.push(std::move(batch_));
    batch_ = Batch{};
    batch_limit_ = std::min(batch_limit_ * 2, batch_entries_);
    fault_point("mover.batch-walked");
}

// Waits until everything walked so far is copied and finished.
void Walker::drain() {
    hand_over();
    state_.batches.drain();
}

}  // namespace bbkit::mover_internal
