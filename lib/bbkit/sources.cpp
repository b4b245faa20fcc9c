#include "bbkit/sources.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>

#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/size.hpp"

namespace bbkit {
namespace {

std::string where_text(const Location& where) {
    return std::string(to_string(where.origin)) + " line " + std::to_string(where.line);
}

// The error for a failed system call on `path`, with the exit code its errno deserves.
Error path_error(const Location& where, const std::string& path, const std::string& what, int err) {
    return system_error(where_text(where) + ": stage-in source '" + path + "': " + what, err);
}

void require_readable(const Location& where, const std::string& path, bool directory) {
    const int mode = directory ? (R_OK | X_OK) : R_OK;
    if (faccessat(AT_FDCWD, path.c_str(), mode, AT_EACCESS) != 0)
        throw path_error(where, path, "cannot read", errno);
}

// For the caller's own entries the owner's mode bits decide (an ACL's owner entry is those
// bits): no access check is needed when they grant it. Anything else is asked of the kernel.
bool owner_may_read(const struct stat& st, bool directory) {
    const mode_t need = directory ? (S_IRUSR | S_IXUSR) : S_IRUSR;
    return st.st_uid == geteuid() && (st.st_mode & need) == need;
}

// The running count of one measurement: the totals, the bytes that count against the job
// buffer's capacity (checked at every file, so a walk stops as soon as they are over it) and
// when progress is next due.
class Tally {
  public:
    Tally(SourceTotals& totals, std::optional<std::uint64_t> capacity,
          const SourceProgress& progress, bool walk_trees = true)
        : totals_(totals),
          capacity_(capacity),
          progress_(progress),
          walk_trees_(walk_trees),
          next_report_(std::chrono::steady_clock::now() + report_interval) {}

    SourceTotals& totals() { return totals_; }
    // false: a directory source is checked, not walked (check_stage_in).
    bool walk_trees() const { return walk_trees_; }

    // Entries measured from now on go to a persistent buffer: not the job buffer's capacity.
    void stop_counting_capacity() { capacity_.reset(); }

    // One entry copied, with `bytes` of data (0 for anything but a regular file).
    void add(std::uint64_t bytes) {
        ++totals_.files;
        totals_.bytes += bytes;
        if (capacity_) {
            counted_ += bytes;
            require_fits(counted_, *capacity_);
        }
        if (progress_)
            report();
    }

  private:
    static constexpr std::chrono::milliseconds report_interval{100};

    void report() {
        const auto now = std::chrono::steady_clock::now();
        if (now < next_report_)
            return;
        next_report_ = now + report_interval;
        progress_(totals_.files, totals_.bytes);
    }

    SourceTotals& totals_;
    std::optional<std::uint64_t> capacity_;
    std::uint64_t counted_ = 0;
    SourceProgress progress_;
    bool walk_trees_;
    std::chrono::steady_clock::time_point next_report_;
};

// The directory `name` in `parent` as a stream that holds one descriptor, never through a
// symlink; null when it cannot be opened (errno says why).
std::unique_ptr<DirStream> open_directory(int parent, const char* name) {
    while (true) {
        int err = 0;
        {
            const Fd fd(openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
            if (fd) {
                auto stream = std::make_unique<DirStream>(fd.get());
                if (*stream)
                    return stream;  // its own duplicate: `fd` is closed here
            }
            err = errno;
        }
        if (err != EMFILE || !raise_descriptor_limit()) {
            errno = err;
            return nullptr;
        }
    }
}

// Walks a tree without following symlinks, depth-first with one open directory per level and
// entries opened relative to it: memory grows with the depth only (a directory of a million
// subdirectories holds no list of them) and nothing recurses on the C stack. Messages name the
// full path, kept in one string that grows and shrinks with the walk.
void measure_tree(const Location& where, const std::string& root, Tally& tally) {
    struct Level {
        std::unique_ptr<DirStream> stream;
        std::size_t path_length;
    };
    require_readable(where, root, true);
    std::unique_ptr<DirStream> top = open_directory(AT_FDCWD, root.c_str());
    if (!top)
        throw path_error(where, root, "cannot open directory", errno);
    std::string path = root;
    std::vector<Level> levels;
    levels.push_back({std::move(top), path.size()});
    while (!levels.empty()) {
        DirStream& dir = *levels.back().stream;
        const dirent* entry = dir.next();
        if (!entry) {
            if (errno != 0)
                throw path_error(where, path, "cannot list directory", errno);
            levels.pop_back();
            if (!levels.empty())
                path.resize(levels.back().path_length);
            continue;
        }
        const char* name = entry->d_name;
        struct stat st {};
        if (fstatat(dir.fd(), name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            throw path_error(where, path + "/" + name, "cannot stat", errno);
        if (S_ISDIR(st.st_mode)) {
            tally.add(0);
            if (!owner_may_read(st, true) &&
                faccessat(dir.fd(), name, R_OK | X_OK, AT_EACCESS) != 0)
                throw path_error(where, path + "/" + name, "cannot read", errno);
            std::unique_ptr<DirStream> sub = open_directory(dir.fd(), name);
            const int err = errno;
            path += '/';
            path += name;
            if (!sub && err == EMFILE) {
                // Every descriptor is in use: closed before the error is built and thrown, so
                // whatever handles it (a log, a reply to the scheduler) has descriptors again.
                const std::size_t depth = levels.size();
                levels.clear();
                throw path_error(where, path,
                                 "cannot open directory " + std::to_string(depth) +
                                     " levels deep (raise the open-file limit, ulimit -n)",
                                 err);
            }
            if (!sub)
                throw path_error(where, path, "cannot open directory", err);
            levels.push_back({std::move(sub), path.size()});
        } else if (S_ISREG(st.st_mode)) {
            if (!owner_may_read(st, false) && faccessat(dir.fd(), name, R_OK, AT_EACCESS) != 0)
                throw path_error(where, path + "/" + name, "cannot read", errno);
            tally.add(static_cast<std::uint64_t>(st.st_size));
        } else {
            tally.add(0);
        }
    }
}

void measure_entry(const SourceEntry& entry, Tally& tally) {
    struct stat st {};
    if (lstat(entry.source.c_str(), &st) != 0)
        throw path_error(entry.where, entry.source, "cannot stat", errno);
    const bool is_dir = S_ISDIR(st.st_mode);
    if (entry.type == StageType::file && is_dir)
        throw Error(ExitCode::data, where_text(entry.where) + ": stage-in source '" + entry.source +
                                        "' is a directory (use type=directory)");
    if (entry.type == StageType::directory && !is_dir)
        throw Error(ExitCode::data, where_text(entry.where) + ": stage-in source '" + entry.source +
                                        "' is not a directory (use type=file)");
    if (is_dir) {
        tally.add(0);
        if (tally.walk_trees())
            measure_tree(entry.where, entry.source, tally);
        else
            require_readable(entry.where, entry.source, true);
    } else if (S_ISREG(st.st_mode)) {
        require_readable(entry.where, entry.source, false);
        tally.add(static_cast<std::uint64_t>(st.st_size));
    } else {
        tally.add(0);
    }
}

// Measures `lines` in order into the tally's totals (entries, and the skipped lines).
void measure_lines(const std::vector<StageDirective>& lines, Tally& tally) {
    SourceTotals& totals = tally.totals();
    for (const StageDirective& stage : lines) {
        if (stage.unresolved) {
            totals.skipped.push_back({stage.where, "source '" + stage.source +
                                                       "' not checked: it holds a symbol that is "
                                                       "replaced only when the job is known"});
            continue;
        }
        std::vector<SourceEntry> entries;
        if (stage.type == StageType::list) {
            entries = read_stage_list(stage);
        } else {
            entries.push_back({stage.source, stage.destination, stage.type, stage.where});
        }
        for (const SourceEntry& entry : entries) {
            measure_entry(entry, tally);
            totals.entries.push_back(entry);
        }
    }
}

// Splits a list line into words; double quotes group a word with blanks, \" is a quote.
std::vector<std::string> split_list_line(const std::string& line, bool& ok) {
    std::vector<std::string> words;
    std::string word;
    bool in_word = false, quoted = false;
    for (std::size_t i = 0; i < line.size(); ++i) {
        const char c = line[i];
        if (quoted) {
            if (c == '\\' && i + 1 < line.size() && line[i + 1] == '"') {
                word += '"';
                ++i;
            } else if (c == '"') {
                quoted = false;
            } else {
                word += c;
            }
        } else if (c == '"') {
            quoted = in_word = true;
        } else if (c == ' ' || c == '\t') {
            if (in_word)
                words.push_back(word);
            word.clear();
            in_word = false;
        } else {
            word += c;
            in_word = true;
        }
    }
    ok = !quoted;
    if (in_word)
        words.push_back(word);
    return words;
}

}  // namespace

std::vector<SourceEntry> read_stage_list(const StageDirective& list) {
    const std::string& path = list.source;
    std::ifstream in(path);
    if (!in) {
        const int err = errno;
        require_readable(list.where, path, false);
        throw path_error(list.where, path, "cannot open list file", err ? err : EIO);
    }
    std::vector<SourceEntry> entries;
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
        ++number;
        const std::string context = "list file '" + path + "' line " + std::to_string(number);
        if (line.find('\0') != std::string::npos)
            throw Error(ExitCode::data, context + ": NUL byte");
        const std::size_t first = line.find_first_not_of(" \t\r");
        if (first == std::string::npos || line[first] == '#')
            continue;
        bool ok = true;
        const std::vector<std::string> words = split_list_line(line, ok);
        if (!ok)
            throw Error(ExitCode::data, context + ": unterminated quote");
        if (words.size() != 2)
            throw Error(ExitCode::data, context + ": expected 'source destination'");
        SourceEntry entry;
        entry.source = words[0];
        if (entry.source.empty() || entry.source[0] != '/')
            throw Error(ExitCode::data,
                        context + ": source '" + entry.source + "' is not absolute");
        path_components(entry.source,
                        context + ": source '" + entry.source + "' must not contain '..'");
        std::string buffer;
        std::string relative;
        try {
            relative = buffer_relative_path(words[1], buffer);
        } catch (const Error& e) {
            throw Error(e.code(), context + ": " + e.what());
        }
        if (!buffer.empty())
            throw Error(ExitCode::data, context + ": list entries go to the job's buffer");
        const bool anchored = words[1][0] == '$';
        entry.destination =
            anchored || list.destination.empty()
                ? relative
                : (relative.empty() ? list.destination : list.destination + "/" + relative);
        struct stat st {};
        const bool is_dir = lstat(entry.source.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
        entry.type = is_dir ? StageType::directory : StageType::file;
        entry.where = list.where;
        entries.push_back(std::move(entry));
    }
    return entries;
}

namespace {

SourceTotals measure_lines_against(const std::vector<StageDirective>& stage_in,
                                   std::optional<std::uint64_t> job_capacity,
                                   const SourceProgress& progress, bool walk_trees) {
    // A distribute=shard line's share of each node is known only on the nodes (it depends on
    // the job's node count): each node's walk counts its own share against its buffer.
    std::vector<StageDirective> counted, uncounted;
    for (const StageDirective& stage : stage_in)
        (stage.buffer.empty() && stage.distribute != Spread::shard ? counted : uncounted)
            .push_back(stage);
    SourceTotals totals;
    Tally tally(totals, job_capacity, progress, walk_trees);
    measure_lines(counted, tally);
    tally.stop_counting_capacity();
    measure_lines(uncounted, tally);
    return totals;
}

}  // namespace

SourceTotals measure_stage_in(const std::vector<StageDirective>& stage_in,
                              std::optional<std::uint64_t> job_capacity,
                              const SourceProgress& progress) {
    return measure_lines_against(stage_in, job_capacity, progress, true);
}

SourceTotals check_stage_in(const std::vector<StageDirective>& stage_in,
                            std::optional<std::uint64_t> job_capacity) {
    return measure_lines_against(stage_in, job_capacity, {}, false);
}

void require_fits(std::uint64_t counted, std::uint64_t capacity) {
    if (counted <= capacity)
        return;
    throw Error(ExitCode::data,
                "stage-in needs at least " + format_size(counted) + " (" + std::to_string(counted) +
                    " bytes counted so far) but the buffer holds " + format_size(capacity) +
                    " (request a larger capacity)",
                Failure{FailureKind::capacity, "", "", 0});
}

}  // namespace bbkit
