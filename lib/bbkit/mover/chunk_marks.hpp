// Resuming a large file's copy after a kill. A stage-in writes files under their final names,
// a large one by several workers, a chunk each: each chunk copied is marked on the destination,
// in its extended attribute user.bbkit.chunks, with what it is a copy of (the source's device,
// inode, size and nanosecond mtime), the boot and the chunk size. A rerun that finds the marks
// of the same source, made in this boot, copies only the chunks not marked; anything else (no
// marks, another source or a changed one, another boot, a file system without user xattrs)
// copies the whole file again, as before. Marks of another boot are never trusted: the data of
// a marked chunk may have been in the page cache only when the machine went down.
//
// The destination is the user's own file in the user's own buffer: whoever can forge its marks
// can write its data as well, so the marks need no protection beyond the file's.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

namespace bbkit {

class ChunkMarks {
  public:
    static constexpr const char* attribute = "user.bbkit.chunks";

    // The marks of a copy of `source` in `chunks` chunks of `chunk_bytes`: none done yet.
    ChunkMarks(const struct stat& source, off_t chunk_bytes, std::size_t chunks);

    // Takes the marks `dst` carries when they are this source's, of this boot: true then (even
    // with no chunk done). false, and none done, otherwise.
    bool load(int dst);
    bool done(std::size_t chunk) const { return chunk < done_.size() && done_[chunk]; }
    std::size_t count() const;

    // Marks `chunk` done on `dst` once its data is written. Best effort: where the attribute
    // cannot be written the marks stay as they were and a rerun copies the chunk again. The
    // caller serialises the calls for one file.
    void mark(int dst, std::size_t chunk);

    // Removes the attribute from `dst` (a complete copy carries none; nothing is done where it
    // was never written).
    static void clear(int dst);

    // The attribute's text for the current marks (tests).
    std::string text() const;

  private:
    std::string identity_;  // "v1 BOOT DEV:INO SIZE SEC.NSEC CHUNK_BYTES"
    std::vector<bool> done_;
};

}  // namespace bbkit
