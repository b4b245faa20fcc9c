#include "bbkit/mover/link_spill.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <queue>
#include <tuple>

#include "bbkit/error.hpp"

namespace bbkit {
namespace {

using Record = LinkSpill::Record;

// device, inode, sequence (8 bytes each), path length (4 bytes), then the path.
constexpr std::size_t header_bytes = 3 * 8 + 4;
constexpr std::size_t write_chunk = std::size_t{1} << 20;

bool before(const Record& a, const Record& b) {
    return std::tie(a.device, a.inode, a.sequence) < std::tie(b.device, b.inode, b.sequence);
}

void put(std::string& out, std::uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i)
        out += static_cast<char>((value >> (8 * i)) & 0xff);
}

std::uint64_t get(const char* in, int bytes) {
    std::uint64_t value = 0;
    for (int i = 0; i < bytes; ++i)
        value |= std::uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
    return value;
}

void write_at(int fd, const std::string& data, off_t offset, const std::string& what) {
    std::size_t done = 0;
    while (done < data.size()) {
        const ssize_t n =
            pwrite(fd, data.data() + done, data.size() - done, offset + static_cast<off_t>(done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            throw system_error("cannot write the hard-link records in " + what, errno);
        done += static_cast<std::size_t>(n);
    }
}

// Reads one sorted run back, record by record, through a buffer of bounded size.
class RunReader {
  public:
    RunReader(int fd, off_t begin, off_t end, std::size_t buffer, const std::string& what)
        : fd_(fd), next_(begin), end_(end), capacity_(buffer), what_(what) {}

    bool next(Record& record) {
        if (!available(header_bytes))
            return false;
        const char* at = data_.data() + pos_;
        record.device = get(at, 8);
        record.inode = get(at + 8, 8);
        record.sequence = get(at + 16, 8);
        const auto length = static_cast<std::size_t>(get(at + 24, 4));
        pos_ += header_bytes;
        if (!available(length))
            throw Error(ExitCode::io, "the hard-link records in " + what_ + " are truncated");
        record.path.assign(data_.data() + pos_, length);
        pos_ += length;
        return true;
    }

  private:
    // Whether `bytes` more are in the buffer, reading on as needed (a path longer than the
    // buffer grows it for that record).
    bool available(std::size_t bytes) {
        if (data_.size() - pos_ >= bytes)
            return true;
        data_.erase(0, pos_);
        pos_ = 0;
        while (data_.size() < bytes && next_ < end_) {
            const std::size_t want = std::min<std::size_t>(
                std::max(capacity_, bytes - data_.size()), static_cast<std::size_t>(end_ - next_));
            const std::size_t old = data_.size();
            data_.resize(old + want);
            const ssize_t n = pread(fd_, &data_[old], want, next_);
            if (n < 0 && errno == EINTR) {
                data_.resize(old);
                continue;
            }
            if (n <= 0) {
                const int err = n < 0 ? errno : EIO;
                throw system_error("cannot read the hard-link records in " + what_, err);
            }
            data_.resize(old + static_cast<std::size_t>(n));
            next_ += n;
        }
        return data_.size() >= bytes;
    }

    int fd_;
    off_t next_, end_;
    std::size_t capacity_;
    std::string what_;
    std::string data_;
    std::size_t pos_ = 0;
};

}  // namespace

LinkSpill::LinkSpill(int dir, const std::string& what, std::size_t memory)
    : what_(what), memory_(std::max<std::size_t>(memory, std::size_t{1} << 20)) {
    const int fd = openat(dir, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        throw system_error("cannot create an unnamed file in " + what, errno);
    file_ = Fd(fd);
}

void LinkSpill::add(dev_t device, ino_t inode, const std::string& path) {
    pending_.push_back(
        {static_cast<std::uint64_t>(device), static_cast<std::uint64_t>(inode), count_++, path});
    pending_bytes_ += sizeof(Record) + path.size();
    if (pending_bytes_ >= memory_ / 2)
        write_run();
}

void LinkSpill::write_run() {
    std::sort(pending_.begin(), pending_.end(), before);
    const off_t begin = end_;
    std::string out;
    for (const Record& r : pending_) {
        put(out, r.device, 8);
        put(out, r.inode, 8);
        put(out, r.sequence, 8);
        put(out, r.path.size(), 4);
        out += r.path;
        if (out.size() >= write_chunk) {
            write_at(file_.get(), out, end_, what_);
            end_ += static_cast<off_t>(out.size());
            out.clear();
        }
    }
    write_at(file_.get(), out, end_, what_);
    end_ += static_cast<off_t>(out.size());
    runs_.emplace_back(begin, end_);
    std::vector<Record>().swap(pending_);
    pending_bytes_ = 0;
}

void LinkSpill::for_each_link(
    const std::function<void(const std::string&, const std::string&)>& fn) {
    std::uint64_t device = 0, inode = 0;
    bool have = false;
    std::string first;
    auto visit = [&](const Record& r) {
        if (have && r.device == device && r.inode == inode) {
            fn(first, r.path);
            return;
        }
        have = true;
        device = r.device;
        inode = r.inode;
        first = r.path;
    };
    if (runs_.empty()) {
        std::sort(pending_.begin(), pending_.end(), before);
        for (const Record& r : pending_)
            visit(r);
        return;
    }
    if (!pending_.empty())
        write_run();
    // A k-way merge: one reader per run, each with its share of the memory.
    const std::size_t buffer = std::max<std::size_t>(memory_ / (2 * runs_.size()), 4096);
    std::vector<RunReader> readers;
    readers.reserve(runs_.size());
    for (const auto& [begin, end] : runs_)
        readers.emplace_back(file_.get(), begin, end, buffer, what_);
    using Head = std::pair<Record, std::size_t>;
    auto later = [](const Head& a, const Head& b) { return before(b.first, a.first); };
    std::priority_queue<Head, std::vector<Head>, decltype(later)> heads(later);
    for (std::size_t i = 0; i < readers.size(); ++i) {
        Record r;
        if (readers[i].next(r))
            heads.emplace(std::move(r), i);
    }
    while (!heads.empty()) {
        Head head = heads.top();
        heads.pop();
        visit(head.first);
        Record r;
        if (readers[head.second].next(r))
            heads.emplace(std::move(r), head.second);
    }
}

}  // namespace bbkit
