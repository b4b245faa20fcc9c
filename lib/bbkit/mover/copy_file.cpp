#include "bbkit/mover/copy_file.hpp"

#include <fcntl.h>
#include <linux/aio_abi.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/mover/common.hpp"

namespace bbkit {

using mover_internal::fail;
using mover_internal::fail_source;
using mover_internal::refusal;
using mover_internal::same_mtime;

namespace {

// One copy_file_range/pread/pwrite at a time moves at most this much: small enough to check
// for cancellation and drop cache often, large enough to keep the device busy.
constexpr std::size_t piece_bytes = std::size_t{8} << 20;
constexpr off_t direct_align = 4096;
// O_DIRECT pieces in flight per worker (asynchronous reads and writes): one synchronous
// request at a time leaves this disk idle between a read and its write.
constexpr unsigned direct_depth = 6;
constexpr std::size_t direct_piece = std::size_t{4} << 20;  // the disk's largest request

struct AlignedFree {
    void operator()(char* p) const { std::free(p); }
};

char* aligned_buffer(std::size_t bytes) {
    void* p = nullptr;
    if (posix_memalign(&p, direct_align, bytes) != 0)
        throw Error(ExitCode::software, "out of memory for an I/O buffer");
    return static_cast<char*>(p);
}

// A kernel AIO context (io_setup): with O_DIRECT, reads and writes are queued to the device
// and complete without a thread waiting on each one.
class AioContext {
  public:
    AioContext() = default;
    AioContext(const AioContext&) = delete;
    AioContext& operator=(const AioContext&) = delete;
    ~AioContext() {
        if (ctx_ != 0)
            syscall(SYS_io_destroy, ctx_);
    }
    // false when the kernel offers none (ENOSYS, or EAGAIN once fs.aio-max-nr is used up).
    bool open(unsigned depth) {
        if (ctx_ == 0 && syscall(SYS_io_setup, depth, &ctx_) != 0)
            ctx_ = 0;
        return ctx_ != 0;
    }
    // 0 or an errno.
    int submit(iocb* cb) {
        iocb* list[1] = {cb};
        for (;;) {
            if (syscall(SYS_io_submit, ctx_, 1, list) == 1)
                return 0;
            if (errno != EINTR && errno != EAGAIN)
                return errno;
        }
    }
    // Waits for at least one completion; returns how many were stored.
    long wait(io_event* events, long max) {
        for (;;) {
            const long n = syscall(SYS_io_getevents, ctx_, 1, max, events, nullptr);
            if (n >= 0)
                return n;
            if (errno != EINTR)
                fail("wait for I/O", "", errno);
        }
    }

  private:
    aio_context_t ctx_ = 0;
};

void check_stopped(const std::atomic<bool>& stop) {
    if (stop.load(std::memory_order_relaxed))
        throw CopyStopped{};
}

bool copy_file_range_unsupported(int err) {
    return err == EXDEV || err == EINVAL || err == ENOSYS || err == EOPNOTSUPP || err == EBADF;
}

bool is_write_error(int err) {
    return err == ENOSPC || err == EDQUOT || err == EFBIG || err == EROFS;
}

}  // namespace

// The asynchronous O_DIRECT pipeline: an AIO context and direct_depth aligned pieces.
struct CopyBuffers::Pipeline {
    AioContext aio;
    std::unique_ptr<char, AlignedFree> pieces;
};

struct CopyBuffers::State {
    std::unique_ptr<char, AlignedFree> buffer;
    bool aio_tried = false;
    std::unique_ptr<Pipeline> pipeline;
};

CopyBuffers::CopyBuffers() : state_(std::make_unique<State>()) {}
CopyBuffers::CopyBuffers(CopyBuffers&&) noexcept = default;
CopyBuffers& CopyBuffers::operator=(CopyBuffers&&) noexcept = default;
CopyBuffers::~CopyBuffers() = default;

char* CopyBuffers::io_buffer() {
    if (!state_->buffer)
        state_->buffer.reset(aligned_buffer(piece_bytes));
    return state_->buffer.get();
}

CopyBuffers::Pipeline* CopyBuffers::direct_pipeline() {
    if (!state_->aio_tried) {
        state_->aio_tried = true;
        auto pipeline = std::make_unique<Pipeline>();
        if (pipeline->aio.open(direct_depth)) {
            pipeline->pieces.reset(aligned_buffer(direct_depth * direct_piece));
            state_->pipeline = std::move(pipeline);
        }
    }
    return state_->pipeline.get();
}

bool is_complete_copy(int dir, const std::string& name, const struct stat& source) {
    struct stat existing {};
    return fstatat(dir, name.c_str(), &existing, AT_SYMLINK_NOFOLLOW) == 0 &&
           S_ISREG(existing.st_mode) && existing.st_size == source.st_size &&
           same_mtime(existing, source);
}

bool is_sparse(const struct stat& st) {
    return static_cast<off_t>(st.st_blocks) * 512 < st.st_size;
}

namespace {

// Opens the source for reading without ever blocking in open(): a name swapped for a FIFO
// after the walk saw a regular file would otherwise wait for a writer forever (another user
// sharing a persistent buffer could hold a stage that way). O_NONBLOCK is dropped again once
// the descriptor is known to be a regular file. -1 with errno set when open() fails.
int open_source(int dir, const std::string& name, int flags, const std::string& from) {
    const int fd = openat(dir, name.c_str(), flags | O_NONBLOCK);
    if (fd < 0)
        return -1;
    Fd guard(fd);
    struct stat now {};
    if (fstat(fd, &now) != 0 || !S_ISREG(now.st_mode))
        throw refusal(FailureKind::source, ExitCode::io,
                      "cannot read " + from + ": it changed during the move", from);
    // F_SETFL takes the status flags of `flags` (O_DIRECT among them) and ignores the rest.
    if (fcntl(fd, F_SETFL, flags) != 0)
        fail_source("read", from, errno);
    return guard.release();
}

}  // namespace

FilePair open_pair(const FileCopy& file, int src_dir, const std::string& name, bool direct_io,
                   const std::function<Fd()>& create) {
    FilePair pair;
    pair.direct = direct_io && file.st.st_size >= direct_min_size;
    const int flags = O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC;
    int fd = open_source(src_dir, name, flags | (pair.direct ? O_DIRECT : 0), file.from);
    if (fd < 0 && pair.direct && errno == EINVAL) {  // the file system refuses O_DIRECT
        pair.direct = false;
        fd = open_source(src_dir, name, flags, file.from);
    }
    if (fd < 0)
        fail_source("read", file.from, errno == ELOOP ? EACCES : errno);
    pair.src = Fd(fd);
    pair.dst = create();
    if (pair.direct) {
        const int fl = fcntl(pair.dst.get(), F_GETFL);
        if (fl < 0 || fcntl(pair.dst.get(), F_SETFL, fl | O_DIRECT) != 0) {
            // The destination refuses O_DIRECT: reopen the source buffered as well.
            pair.direct = false;
            fd = open_source(src_dir, name, flags, file.from);
            if (fd < 0)
                fail_source("read", file.from, errno);
            pair.src = Fd(fd);
        }
    }
    return pair;
}

// ext4 lets direct writes to one file run in parallel into reserved blocks, where writes that
// allocate take the inode lock exclusively one at a time.
void size_destination(const FileCopy& file, int fd, bool reserve) {
    if (reserve) {
        if (fallocate(fd, 0, 0, file.st.st_size) == 0)
            return;
        const int err = errno;
        if (err != EOPNOTSUPP && err != ENOSYS && err != EINVAL)
            fail("write", file.to, err);
    }
    if (ftruncate(fd, file.st.st_size) != 0)
        fail("write", file.to, errno);
}

namespace {

// O_DIRECT copy of the aligned range [from, to) with direct_depth pieces in flight: each read
// is queued as a slot frees up, and its write as soon as the read completes. The piece that
// meets the end of the file is padded to a whole block (the final ftruncate cuts it). Returns
// false, having copied nothing, where no AIO context is available.
bool copy_direct_pipelined(const FileCopy& file, int in, int out, off_t from, off_t to,
                           CopyBuffers& buffers, const std::atomic<bool>& stop) {
    CopyBuffers::Pipeline* pipeline = buffers.direct_pipeline();
    if (!pipeline)
        return false;
    AioContext* aio = &pipeline->aio;
    enum class State { idle, reading, writing };
    struct Slot {
        char* data = nullptr;
        off_t pos = 0;
        std::size_t length = 0;
        State state = State::idle;
        iocb cb{};
    };
    Slot slots[direct_depth];
    for (unsigned i = 0; i < direct_depth; ++i)
        slots[i].data = pipeline->pieces.get() + i * direct_piece;
    unsigned busy = 0;
    off_t next = from;
    bool end = false;      // a read came back short: the file ends there
    bool stopped = false;  // another worker failed
    int error = 0;
    bool error_reading = false;  // the read failed, not the write
    auto failed = [&](int err, bool reading) {
        if (error == 0) {
            error = err;
            error_reading = reading;
        }
    };
    auto submit = [&](Slot& slot, State state) {
        slot.cb = iocb{};
        slot.cb.aio_data = reinterpret_cast<std::uint64_t>(&slot);
        slot.cb.aio_lio_opcode = state == State::reading ? IOCB_CMD_PREAD : IOCB_CMD_PWRITE;
        slot.cb.aio_fildes = static_cast<std::uint32_t>(state == State::reading ? in : out);
        slot.cb.aio_buf = reinterpret_cast<std::uint64_t>(slot.data);
        slot.cb.aio_nbytes = slot.length;
        slot.cb.aio_offset = slot.pos;
        const int err = aio->submit(&slot.cb);
        if (err != 0) {
            failed(err, state == State::reading);
            slot.state = State::idle;
            return;
        }
        slot.state = state;
        ++busy;
    };
    io_event events[direct_depth];
    for (;;) {
        if (stop.load(std::memory_order_relaxed))
            stopped = true;
        for (Slot& slot : slots) {
            if (slot.state != State::idle || end || stopped || error != 0 || next >= to)
                continue;
            slot.pos = next;
            slot.length = static_cast<std::size_t>(std::min<off_t>(direct_piece, to - next));
            next += static_cast<off_t>(slot.length);
            submit(slot, State::reading);
        }
        if (busy == 0)
            break;
        const long n = aio->wait(events, direct_depth);
        for (long e = 0; e < n; ++e) {
            Slot& slot = *reinterpret_cast<Slot*>(events[e].data);
            const long long res = events[e].res;
            --busy;
            const State was = slot.state;
            slot.state = State::idle;
            if (was == State::reading) {
                if (res < 0) {
                    failed(static_cast<int>(-res), true);
                    continue;
                }
                auto got = static_cast<std::size_t>(res);
                if (got < slot.length) {
                    end = true;  // the source shrank or this is its last block
                    if (got == 0)
                        continue;
                    const std::size_t padded =
                        got + (direct_align - got % direct_align) % direct_align;
                    std::memset(slot.data + got, 0, padded - got);
                    slot.length = padded;
                }
                if (error == 0 && !stopped)
                    submit(slot, State::writing);
                continue;
            }
            if (res < 0) {
                failed(static_cast<int>(-res), false);
                continue;
            }
            // A short write (rare: a full disk midway) finishes synchronously or fails there.
            for (auto done = static_cast<std::size_t>(res); done < slot.length && error == 0;) {
                const ssize_t w = pwrite(out, slot.data + done, slot.length - done,
                                         slot.pos + static_cast<off_t>(done));
                if (w < 0 && errno == EINTR)
                    continue;
                if (w <= 0)
                    failed(w < 0 ? errno : ENOSPC, false);
                else
                    done += static_cast<std::size_t>(w);
            }
        }
    }
    // Nothing is in flight any more: the buffers and descriptors may go.
    if (error != 0 && error_reading)
        fail_source("read", file.from, error);
    if (error != 0)
        fail("write", file.to, error);
    if (stopped)
        throw CopyStopped{};
    return true;
}

void copy_extent(const FileCopy& file, int in, int out, off_t from, off_t to, bool direct,
                 bool drop_cache, CopyBuffers& buffers, const std::atomic<bool>& stop) {
    if (direct) {
        // O_DIRECT wants aligned offsets and lengths; extents come from chunk boundaries and
        // SEEK_DATA/SEEK_HOLE (block-aligned), so rounding only ever adds bytes of the same
        // file, and the padding past the end is cut by the final ftruncate.
        from -= from % direct_align;
        to += (direct_align - to % direct_align) % direct_align;
        if (copy_direct_pipelined(file, in, out, from, to, buffers, stop))
            return;
    }
    bool use_copy_file_range = !direct;
    for (off_t pos = from; pos < to;) {
        check_stopped(stop);
        const std::size_t want = static_cast<std::size_t>(std::min<off_t>(piece_bytes, to - pos));
        ssize_t n = -1;
        if (use_copy_file_range) {
            loff_t in_off = pos, out_off = pos;
            n = copy_file_range(in, &in_off, out, &out_off, want, 0);
            if (n < 0 && copy_file_range_unsupported(errno)) {
                use_copy_file_range = false;
                continue;
            }
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0) {
                const int err = errno;
                if (is_write_error(err))
                    fail("write", file.to, err);
                fail_source("copy", file.from, err, " to " + file.to);  // a write's are above
            }
        } else {
            char* buffer = buffers.io_buffer();
            n = pread(in, buffer, want, pos);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                fail_source("read", file.from, errno);
            std::size_t length = static_cast<std::size_t>(n);
            if (direct && length % direct_align != 0) {  // end of file: pad to a whole block
                const std::size_t padded = length + (direct_align - length % direct_align);
                std::memset(buffer + length, 0, padded - length);
                length = padded;
            }
            for (std::size_t done = 0; done < length;) {
                const ssize_t w =
                    pwrite(out, buffer + done, length - done, pos + static_cast<off_t>(done));
                if (w < 0 && errno == EINTR)
                    continue;
                if (w < 0)
                    fail("write", file.to, errno);
                done += static_cast<std::size_t>(w);
            }
            if (direct && static_cast<std::size_t>(n) < want)
                return;  // end of file: the next offset would not be aligned
        }
        if (n == 0)
            return;  // the source shrank; the final ftruncate restores the walked size
        if (drop_cache) {
            // Big buffered copies: start writeback now and let go of the source's pages, so
            // the page cache does not grow (fresh guest memory is expensive to touch here).
            sync_file_range(out, pos, n, SYNC_FILE_RANGE_WRITE);
            posix_fadvise(in, pos, n, POSIX_FADV_DONTNEED);
            if (pos >= static_cast<off_t>(piece_bytes))
                posix_fadvise(out, pos - static_cast<off_t>(piece_bytes), piece_bytes,
                              POSIX_FADV_DONTNEED);
        }
        pos += n;
        fault_point("mover.mid-copy");
    }
}

// A source written, truncated or replaced while it was copied leaves a copy that is neither its
// old nor its new content: the move fails (exit 74) rather than report such a file done. ctime
// catches a change that restored the size and the mtime.
void check_unchanged(const FileCopy& file, int src) {
    struct stat now {};
    if (fstat(src, &now) != 0)
        fail_source("read", file.from, errno);
    if (now.st_ino != file.st.st_ino || now.st_dev != file.st.st_dev ||
        now.st_size != file.st.st_size || !same_mtime(now, file.st) ||
        now.st_ctim.tv_sec != file.st.st_ctim.tv_sec ||
        now.st_ctim.tv_nsec != file.st.st_ctim.tv_nsec)
        throw refusal(FailureKind::source, ExitCode::io,
                      "cannot copy " + file.from +
                          ": it changed while it was copied (rerun when the source is no "
                          "longer being written)",
                      file.from);
}

}  // namespace

void copy_data(const FileCopy& file, int in, int out, off_t from, off_t to, bool direct,
               bool drop_cache, CopyBuffers& buffers, const std::atomic<bool>& stop) {
    if (!is_sparse(file.st)) {
        copy_extent(file, in, out, from, to, direct, drop_cache, buffers, stop);
        return;
    }
    for (off_t pos = from; pos < to;) {
        const off_t data = lseek(in, pos, SEEK_DATA);
        if (data < 0 && errno == ENXIO)
            return;  // only a hole is left
        if (data < 0)
            fail_source("read", file.from, errno);
        if (data >= to)
            return;
        off_t hole = lseek(in, data, SEEK_HOLE);
        if (hole < 0)
            fail_source("read", file.from, errno);
        hole = std::min(hole, to);
        copy_extent(file, in, out, data, hole, direct, drop_cache, buffers, stop);
        pos = hole;
    }
}

void finish_file(const FileCopy& file, int src, int dst, bool truncate,
                 const InitialMetadata& initial, bool fsync, const CopyWarning& warn) {
    check_unchanged(file, src);
    if (truncate && ftruncate(dst, file.st.st_size) != 0)
        fail("write", file.to, errno);
    // An ACL written to it rewrites the group bits of its mode: then fchmod as always.
    const bool acl_or_xattr = copy_xattrs(src, dst, false, file.to, warn);
    set_owner_mode_times(dst, file.st, file.to, warn, initial.gid_set,
                         initial.mode_set && !acl_or_xattr);
    if (fsync && ::fsync(dst) != 0)
        fail("write", file.to, errno);
}

}  // namespace bbkit
