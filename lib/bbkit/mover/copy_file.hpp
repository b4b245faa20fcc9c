// One regular file's bytes, from a source descriptor into a new destination: holes stay holes,
// copy_file_range where the kernel can, read/write where it cannot, and O_DIRECT with several
// kernel AIO requests in flight for large files when a move asks for it. The walk, the names
// and the temporaries are the mover's (mover.hpp); group, mode, times and xattrs are
// copy_metadata's.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "bbkit/fsops.hpp"
#include "bbkit/mover/copy_metadata.hpp"

namespace bbkit {

// Files at least this large go through O_DIRECT when a move asks for it: each request is a
// synchronous round trip to the device, worth it only for big files.
constexpr off_t direct_min_size = off_t{8} << 20;

// Thrown by a copy that found `stop` set: another worker failed and reports why.
struct CopyStopped {};

// A worker thread's I/O buffers and AIO context, made on first use and kept between files.
class CopyBuffers {
  public:
    CopyBuffers();
    CopyBuffers(CopyBuffers&&) noexcept;
    CopyBuffers& operator=(CopyBuffers&&) noexcept;
    ~CopyBuffers();

    struct Pipeline;
    char* io_buffer();
    Pipeline* direct_pipeline();  // null where the kernel has no AIO to give

  private:
    struct State;
    std::unique_ptr<State> state_;
};

// The file as the walk saw it, and its two names for messages.
struct FileCopy {
    struct stat st {};
    std::string from, to;
};

// Whether `name` in `dir` already is a complete copy of `source`: a regular file of the same
// size and nanosecond mtime (a rerun after success or after a crash skips it).
bool is_complete_copy(int dir, const std::string& name, const struct stat& source);

// Whether `st` has holes (fewer blocks than its size needs).
bool is_sparse(const struct stat& st);

struct FilePair {
    Fd src, dst;
    bool direct = false;  // both ends are O_DIRECT
};

// Opens `name` in `src_dir` for reading, with O_DIRECT when `direct_io` and the file is at least
// direct_min_size, then creates the destination with `create`. O_DIRECT is dropped on both ends
// where either file system refuses it. A symlink is never followed: Error(no_perm); a source
// that is no longer a regular file is Error(io), "it changed during the move", and a FIFO put
// in its place never blocks the open.
FilePair open_pair(const FileCopy& file, int src_dir, const std::string& name, bool direct_io,
                   const std::function<Fd()>& create);

// Gives the destination its full size before pieces land at their offsets. `reserve` (dense
// files written with O_DIRECT) allocates the blocks up front, so a full file system fails here,
// before any copying; a file system that cannot reserve gets a plain size.
void size_destination(const FileCopy& file, int fd, bool reserve);

// Copies the bytes of [from, to) at the same offsets, skipping the source's holes. `direct`:
// both descriptors are O_DIRECT (the range is widened to whole blocks; the caller cuts the
// padding with finish_file). `drop_cache`: start writeback and drop the pages as it goes (big
// files). Throws CopyStopped once `stop` is set, Error naming the file otherwise.
void copy_data(const FileCopy& file, int in, int out, off_t from, off_t to, bool direct,
               bool drop_cache, CopyBuffers& buffers, const std::atomic<bool>& stop);

// Ends a copy: refuses a source that changed while it was copied (Error(io); the copy keeps a
// fresh mtime so a rerun copies it again), cuts it to the source's size when `truncate`, then
// copies xattrs, group, mode and times (`initial`: what creating it already set) and fsyncs it
// when `fsync`.
void finish_file(const FileCopy& file, int src, int dst, bool truncate,
                 const InitialMetadata& initial, bool fsync, const CopyWarning& warn);

}  // namespace bbkit
