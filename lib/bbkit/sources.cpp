#include "bbkit/sources.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"

namespace bbkit {
namespace {

std::string where_text(const Location& where) {
    return std::string(to_string(where.origin)) + " line " + std::to_string(where.line);
}

// The error for a failed system call on `path`, with the exit code its errno deserves.
Error path_error(const Location& where, const std::string& path, const char* what, int err) {
    return Error(exit_code_for(err), where_text(where) + ": stage-in source '" + path +
                                         "': " + what + ": " + std::strerror(err));
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

// Walks a tree without following symlinks; an explicit stack keeps deep trees off the C stack.
void measure_tree(const Location& where, const std::string& root, SourceTotals& totals) {
    std::vector<std::string> pending{root};
    while (!pending.empty()) {
        const std::string dir = pending.back();
        pending.pop_back();
        require_readable(where, dir, true);
        const Fd dir_fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        if (!dir_fd)
            throw path_error(where, dir, "cannot open directory", errno);
        DirStream stream(dir_fd.get());
        if (!stream)
            throw path_error(where, dir, "cannot open directory", errno);
        while (const dirent* entry = stream.next()) {
            const char* name = entry->d_name;
            // Relative to the open directory: no walk of the whole path for every entry.
            struct stat st {};
            if (fstatat(dir_fd.get(), name, &st, AT_SYMLINK_NOFOLLOW) != 0)
                throw path_error(where, dir + "/" + name, "cannot stat", errno);
            ++totals.files;
            if (S_ISDIR(st.st_mode)) {
                pending.push_back(dir + "/" + name);
            } else if (S_ISREG(st.st_mode)) {
                if (!owner_may_read(st, false) &&
                    faccessat(dir_fd.get(), name, R_OK, AT_EACCESS) != 0)
                    throw path_error(where, dir + "/" + name, "cannot read", errno);
                totals.bytes += static_cast<std::uint64_t>(st.st_size);
            }
        }
        if (errno != 0)
            throw path_error(where, dir, "cannot list directory", errno);
    }
}

void measure_entry(const SourceEntry& entry, SourceTotals& totals) {
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
    ++totals.files;
    if (is_dir) {
        measure_tree(entry.where, entry.source, totals);
    } else {
        if (S_ISREG(st.st_mode)) {
            require_readable(entry.where, entry.source, false);
            totals.bytes += static_cast<std::uint64_t>(st.st_size);
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

SourceTotals measure_sources(const std::vector<StageDirective>& stage_in) {
    SourceTotals totals;
    for (const StageDirective& stage : stage_in) {
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
            measure_entry(entry, totals);
            totals.entries.push_back(entry);
        }
    }
    return totals;
}

}  // namespace bbkit

#include "bbkit/size.hpp"

namespace bbkit {

void require_fits(std::uint64_t needed, std::uint64_t capacity) {
    if (needed <= capacity)
        return;
    throw Error(ExitCode::data, "stage-in needs " + format_size(needed) + " (" +
                                    std::to_string(needed) + " bytes) but the buffer holds " +
                                    format_size(capacity) + " (request a larger capacity)");
}

SourceTotals measure_stage_in(const std::vector<StageDirective>& stage_in,
                              std::optional<std::uint64_t> job_capacity) {
    std::vector<StageDirective> into_job, into_persistent;
    for (const StageDirective& stage : stage_in)
        (stage.buffer.empty() ? into_job : into_persistent).push_back(stage);
    SourceTotals totals = measure_sources(into_job);
    if (job_capacity && totals.bytes > 0)
        require_fits(totals.bytes, *job_capacity);
    const SourceTotals other = measure_sources(into_persistent);
    totals.bytes += other.bytes;
    totals.files += other.files;
    totals.entries.insert(totals.entries.end(), other.entries.begin(), other.entries.end());
    totals.skipped.insert(totals.skipped.end(), other.skipped.begin(), other.skipped.end());
    return totals;
}

}  // namespace bbkit
