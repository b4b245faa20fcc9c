#include "bbkit/mover/copier.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/mover/keep_existing.hpp"
#include "bbkit/text.hpp"

namespace bbkit::mover_internal {

namespace {

// Small files are handed out in runs of this many from one directory (Copier::copy).
constexpr std::size_t files_per_run = 16;

}  // namespace

Copier::Copier(MoveState& state, WorkerPool& pool)
    : plan_(state.plan),
      src_(*state.src),
      dst_(*state.dst),
      batches_(state.batches),
      counts_(state.counts),
      warnings_(state.warnings),
      temps_(state.temps),
      pool_(pool) {
    umask_ = umask(077);  // reading it means setting it: put it back at once
    umask(umask_);
}

// ---- batches ------------------------------------------------------------------------------

// Chunks of large files first, in walk order (each large file is shared by all workers at
// once, so only a few files are open at any time), then the small files in runs of one
// directory, directories in turn: workers then create in different directories (a create
// holds its directory's lock, and on a cold cache may wait for an inode table read while
// holding it), and each keeps its cached directory descriptors for a whole run.
void Copier::copy(Batch& batch) {
    std::vector<Task> tasks;
    std::vector<std::pair<std::size_t, std::size_t>> runs;  // [first, last) of tasks
    std::map<const Dir*, std::vector<Node*>> by_dir;
    std::vector<const Dir*> dir_order;
    for (Node& node : batch.nodes) {
        if (node.kind == Kind::hard_link)
            continue;
        if (node.kind != Kind::file || node.st.st_size < large_file) {
            auto [it, first] = by_dir.try_emplace(node.parent.get());
            if (first)
                dir_order.push_back(node.parent.get());
            it->second.push_back(&node);
            continue;
        }
        auto shared = std::make_shared<SharedFile>();
        const std::size_t chunks =
            static_cast<std::size_t>((node.st.st_size + chunk_bytes - 1) / chunk_bytes);
        shared->remaining = chunks;
        for (std::size_t c = 0; c < chunks; ++c) {
            const off_t offset = static_cast<off_t>(c) * chunk_bytes;
            runs.emplace_back(tasks.size(), tasks.size() + 1);
            tasks.push_back(
                Task{&node, offset, std::min(chunk_bytes, node.st.st_size - offset), shared});
        }
    }
    std::vector<std::pair<const std::vector<Node*>*, std::size_t>> active;
    for (const Dir* dir : dir_order)
        active.emplace_back(&by_dir[dir], 0);
    while (!active.empty()) {
        for (auto& [files, cursor] : active) {
            const std::size_t end = std::min(files->size(), cursor + files_per_run);
            const std::size_t first = tasks.size();
            for (; cursor < end; ++cursor)
                tasks.push_back(Task{(*files)[cursor], 0, 0, nullptr});
            runs.emplace_back(first, tasks.size());
        }
        active.erase(std::remove_if(active.begin(), active.end(),
                                    [](const auto& a) { return a.second >= a.first->size(); }),
                     active.end());
    }
    pool_.run(runs.size(), [&](std::size_t r, Worker& worker) {
        const Clock::time_point began = Clock::now();
        if (worker.first_copy == Clock::time_point{})
            worker.first_copy = began;
        read_ahead(tasks, runs[r].first, runs[r].second, worker);
        for (std::size_t t = runs[r].first; t < runs[r].second; ++t) {
            batches_.check_stopped();
            run_task(tasks[t], worker);
        }
        worker.last_copy = Clock::now();
        worker.busy += worker.last_copy - began;
    });
}

// The small files of a run (one source directory) have their data read ahead, all at once,
// before the first is copied: on a cold cache each worker then waits for the disk once per run
// rather than once per file. Best effort: a file that cannot be opened here is left to the
// copy, which reports why. Never follows a symlink or blocks on a fifo put in a file's place.
void Copier::read_ahead(const std::vector<Task>& tasks, std::size_t first, std::size_t last,
                        Worker& worker) {
    if (last - first < 2)
        return;
    for (std::size_t t = first; t < last; ++t) {
        const Node& node = *tasks[t].node;
        if (tasks[t].shared || node.kind != Kind::file || node.st.st_size <= 0 ||
            node.st.st_size > read_ahead_max)
            continue;
        const auto [parent, name] = split_last(node.src);
        const Fd fd(openat(worker.src_dir.get(src_, parent), name.c_str(),
                           O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
        if (fd)
            posix_fadvise(fd.get(), 0, node.st.st_size, POSIX_FADV_WILLNEED);
    }
}

// ---- one entry ----------------------------------------------------------------------------

// Creates the file that receives the copy: under a temporary name for durable moves (except in
// a directory tree that is renamed into place whole), else under its final name after removing
// what an earlier run left (which may be read-only). A keep_existing entry removes nothing:
// what is there already is refused, and O_EXCL refuses a name another writer takes meanwhile.
Fd Copier::create_destination(Node& node, int dir, const std::string& name) {
    const std::string shown = dst_.display(node.dst);
    std::string target = name;
    if (plan_.durable && !in_temp_tree(node)) {
        if (node.keep_existing)
            refuse_taken(dst_, dir, name, node.dst);  // before copying (the rename checks again)
        target = temps_.name(name);
    } else if (!node.keep_existing && !in_new_dir(node) && unlinkat(dir, name.c_str(), 0) != 0 &&
               errno != ENOENT) {
        fail("replace", shown, errno);
    }
    node.initial =
        initial_metadata(node.st, in_new_dir(node) ? &node.parent->new_files : nullptr, umask_);
    const int fd = openat(dir, target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                          node.initial.mode);
    if (fd < 0) {
        const int err = errno;
        if (err == EEXIST && node.keep_existing && target == name)
            refuse_taken(dst_, dir, name, node.dst);
        const std::string parent = dst_.display(split_last(node.dst).first);
        const Error error =
            mover_error(FailureKind::destination, "create", shown, err, " in directory " + parent);
        // Missing here is the move's own destination directory, gone under it: an I/O error
        // while staging (74), not a missing buffer, pool or input (bbkit(7), EXIT STATUS).
        if (error.code() == ExitCode::no_input)
            throw Error(ExitCode::io, error.what(), *error.failure());
        throw error;
    }
    if (target != name)
        node.temp = target;
    return Fd(fd);
}

// The destination a killed stage-in left under the final name, when its chunk marks are this
// source's of this boot (`marks` then holds them); else none, and nothing is touched. Only a
// plain file of the source's size with one name, opened without following a symlink or
// blocking on a fifo. Its mode, group and times are all set again at the end (nothing of them
// is taken as set).
Fd Copier::resumable_destination(Node& node, int dir, const std::string& name, ChunkMarks& marks) {
    Fd fd(openat(dir, name.c_str(), O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    struct stat st {};
    if (!fd || fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
        st.st_size != node.st.st_size || !marks.load(fd.get()))
        return Fd();
    const int flags = fcntl(fd.get(), F_GETFL);
    if (flags < 0 || fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0)
        return Fd();
    node.initial = InitialMetadata{};
    node.initial.mode = st.st_mode & 07777;
    return fd;
}

// Opens the source and creates the destination; false when the destination is already
// complete (a rerun after success or a crash). With `marks` (a large file's stage-in), the
// partial copy a killed run left is reopened instead when its marks allow (marks then says
// which chunks are done).
bool Copier::open_file(Node& node, const FileCopy& file, Worker& worker, FilePair& pair,
                       ChunkMarks* marks) {
    const auto [src_parent, src_name] = split_last(node.src);
    const std::string dst_name = split_last(node.dst).second;
    const int dst_dir = worker.dst_dir.get(dst_, parent_path(node));
    // A directory this move created holds nothing yet: no earlier copy to look for.
    if (!in_new_dir(node) && is_complete_copy(dst_dir, dst_name, node.st))
        return false;
    const int src_dir = worker.src_dir.get(src_, src_parent);
    pair = open_pair(file, src_dir, src_name, plan_.direct_io, [&] {
        if (marks != nullptr && !in_new_dir(node))
            if (Fd resumed = resumable_destination(node, dst_dir, dst_name, *marks))
                return resumed;
        return create_destination(node, dst_dir, dst_name);
    });
    return true;
}

void Copier::finish_file(const Node& node, const FileCopy& file, const FilePair& pair,
                         bool truncate) {
    bbkit::finish_file(file, pair.src.get(), pair.dst.get(), truncate, node.initial,
                       plan_.durable && !plan_.trust_syncfs, warnings_.callback());
}

void Copier::run_task(const Task& task, Worker& worker) {
    Node& node = *task.node;
    switch (node.kind) {
        case Kind::file:
            if (task.shared)
                copy_chunk(task, worker);
            else
                copy_small_file(node, worker);
            return;
        case Kind::symlink:
            copy_symlink(node, worker);
            break;
        case Kind::fifo:
            copy_fifo(node, worker);
            break;
        case Kind::hard_link:
            return;
    }
    counts_.files_done.fetch_add(1);
}

void Copier::copy_small_file(Node& node, Worker& worker) {
    FilePair pair;
    const auto size = static_cast<std::uint64_t>(node.st.st_size);
    const FileCopy file = file_copy(node);
    if (!open_file(node, file, worker, pair)) {
        counts_.skipped.fetch_add(1);
    } else {
        const bool sparse = is_sparse(node.st);
        if (sparse || pair.direct)
            size_destination(file, pair.dst.get(), pair.direct && !sparse);
        if (node.st.st_size > 0)
            copy_data(file, pair.src.get(), pair.dst.get(), 0, node.st.st_size, pair.direct, false,
                      worker.buffers, batches_.stop_flag());
        finish_file(node, file, pair, pair.direct);
        fault_point("mover.file-copied");
        counts_.files_written.fetch_add(1);
        counts_.bytes_written.fetch_add(size);
    }
    counts_.bytes_done.fetch_add(size);
    counts_.files_done.fetch_add(1);
}

void Copier::copy_chunk(const Task& task, Worker& worker) {
    Node& node = *task.node;
    const FileCopy copy = file_copy(node);
    SharedFile& file = *task.shared;
    {
        std::lock_guard<std::mutex> lock(file.mutex);
        if (file.failed)
            throw CopyStopped{};  // the worker that opened it reports why
        if (!file.opened) {
            // Once only: a second attempt would make a second temporary.
            file.failed = true;
            // A stage-in writes the final name in place: its chunks are marked as they are
            // done, and a rerun takes up where a killed one stopped.
            if (!plan_.durable)
                file.marks = std::make_unique<ChunkMarks>(
                    node.st, chunk_bytes,
                    static_cast<std::size_t>((node.st.st_size + chunk_bytes - 1) / chunk_bytes));
            file.skip = !open_file(node, copy, worker, file.pair, file.marks.get());
            // Full size first: chunks write at their own offsets, holes stay holes.
            if (!file.skip)
                size_destination(copy, file.pair.dst.get(),
                                 file.pair.direct && !is_sparse(node.st));
            file.opened = true;
            file.failed = false;
        }
    }
    const auto chunk = static_cast<std::size_t>(task.offset / chunk_bytes);
    if (!file.skip && !(file.marks && file.marks->done(chunk))) {
        copy_data(copy, file.pair.src.get(), file.pair.dst.get(), task.offset,
                  task.offset + task.length, file.pair.direct, true, worker.buffers,
                  batches_.stop_flag());
        if (file.marks) {
            std::lock_guard<std::mutex> lock(file.mutex);
            file.marks->mark(file.pair.dst.get(), chunk);
        }
        fault_point("mover.chunk-copied");
    }
    counts_.bytes_done.fetch_add(static_cast<std::uint64_t>(task.length));
    if (file.remaining.fetch_sub(1) != 1)
        return;
    if (file.skip) {
        counts_.skipped.fetch_add(1);
    } else {
        if (file.marks)
            ChunkMarks::clear(file.pair.dst.get());  // a complete copy carries none
        finish_file(node, copy, file.pair, true);
        counts_.files_written.fetch_add(1);
        counts_.bytes_written.fetch_add(static_cast<std::uint64_t>(node.st.st_size));
    }
    file.pair.src.reset();
    file.pair.dst.reset();
    counts_.files_done.fetch_add(1);
}

// Puts a symlink or fifo made under a temporary name in place; durable moves rename later,
// together with the files.
void Copier::place(Node& node, int dir, const std::string& name) {
    if (plan_.durable || node.temp.empty())
        return;
    if (node.keep_existing)
        return put_without_replacing(dst_, counts_, node, dir, name);
    if (renameat(dir, node.temp.c_str(), dir, name.c_str()) != 0) {
        const int err = errno;
        unlinkat(dir, node.temp.c_str(), 0);
        fail("replace", dst_.display(node.dst), err);
    }
    node.temp.clear();
}

void Copier::copy_symlink(Node& node, Worker& worker) {
    const auto [src_parent, src_name] = split_last(node.src);
    const std::string dst_name = split_last(node.dst).second;
    const int src_dir = worker.src_dir.get(src_, src_parent);
    std::string target(static_cast<std::size_t>(std::max<off_t>(node.st.st_size, 255)) + 1, '\0');
    for (;;) {
        const ssize_t n = readlinkat(src_dir, src_name.c_str(), &target[0], target.size());
        if (n < 0)
            fail_source("read symlink", src_.display(node.src), errno);
        if (static_cast<std::size_t>(n) < target.size()) {
            target.resize(static_cast<std::size_t>(n));
            break;
        }
        target.resize(target.size() * 2);
    }
    const int dst_dir = worker.dst_dir.get(dst_, parent_path(node));
    const bool fresh = in_new_dir(node);
    struct stat existing {};
    if (!fresh && fstatat(dst_dir, dst_name.c_str(), &existing, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISLNK(existing.st_mode) && same_mtime(existing, node.st)) {
        std::string current(target.size() + 1, '\0');
        const ssize_t n = readlinkat(dst_dir, dst_name.c_str(), &current[0], current.size());
        if (n >= 0 && static_cast<std::size_t>(n) == target.size() &&
            starts_with(current, target)) {
            counts_.skipped.fetch_add(1);
            return;
        }
    }
    if (node.keep_existing)
        refuse_taken(dst_, dst_dir, dst_name,
                     node.dst);  // before making it (the rename checks again)
    // Under its final name at once where nothing can be replaced and no rename is batched.
    const bool direct_name = fresh && (!plan_.durable || in_temp_tree(node));
    const std::string temp = direct_name ? dst_name : temps_.name(dst_name);
    if (symlinkat(target.c_str(), dst_dir, temp.c_str()) != 0)
        fail("create", dst_.display(node.dst), errno);
    if (!direct_name)
        node.temp = temp;
    set_link_group_times(dst_dir, temp, node.st, dst_.display(node.dst));
    counts_.files_written.fetch_add(1);  // put_without_replacing takes it back for a complete one
    place(node, dst_dir, dst_name);
}

void Copier::copy_fifo(Node& node, Worker& worker) {
    const std::string dst_name = split_last(node.dst).second;
    const int dst_dir = worker.dst_dir.get(dst_, parent_path(node));
    const bool fresh = in_new_dir(node);
    struct stat existing {};
    if (!fresh && fstatat(dst_dir, dst_name.c_str(), &existing, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISFIFO(existing.st_mode) && existing.st_mode == node.st.st_mode &&
        same_mtime(existing, node.st)) {
        counts_.skipped.fetch_add(1);
        return;
    }
    if (node.keep_existing)
        refuse_taken(dst_, dst_dir, dst_name, node.dst);
    const bool direct_name = fresh && (!plan_.durable || in_temp_tree(node));
    const std::string temp = direct_name ? dst_name : temps_.name(dst_name);
    const std::string shown = dst_.display(node.dst);
    if (mkfifoat(dst_dir, temp.c_str(), 0600) != 0)
        fail("create", shown, errno);
    if (!direct_name)
        node.temp = temp;
    // Opening for reading without blocking works on a fifo with no writer; metadata then
    // goes through the descriptor, never through a name that could be swapped.
    const int fd = openat(dst_dir, temp.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        fail("open", shown, errno);
    const Fd owned(fd);
    set_owner_mode_times(fd, node.st, shown, warnings_.callback());
    counts_.files_written.fetch_add(1);  // put_without_replacing takes it back for a complete one
    place(node, dst_dir, dst_name);
}

}  // namespace bbkit::mover_internal
