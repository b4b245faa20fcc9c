#include "bbkit/mover/chunk_marks.hpp"

#include <sys/xattr.h>

#include <algorithm>
#include <cerrno>

#include "bbkit/process.hpp"
#include "bbkit/text.hpp"

namespace bbkit {
namespace {

// An xattr value stays well inside one file system block (ext4 keeps them there): past this
// many chunks (256 GiB at the mover's 32 MiB) a file is not marked, and a rerun copies it whole.
constexpr std::size_t most_chunks = 8192;

constexpr char hex_digits[] = "0123456789abcdef";

}  // namespace

ChunkMarks::ChunkMarks(const struct stat& source, off_t chunk_bytes, std::size_t chunks)
    : identity_("v1 " + boot_id() + " " + std::to_string(source.st_dev) + ":" +
                std::to_string(source.st_ino) + " " + std::to_string(source.st_size) + " " +
                std::to_string(source.st_mtim.tv_sec) + "." +
                std::to_string(source.st_mtim.tv_nsec) + " " + std::to_string(chunk_bytes)),
      done_(chunks, false) {}

bool ChunkMarks::load(int dst) {
    std::fill(done_.begin(), done_.end(), false);
    if (done_.empty() || done_.size() > most_chunks)
        return false;
    std::string value(identity_.size() + 1 + (done_.size() + 3) / 4 + 1, '\0');
    const ssize_t n = fgetxattr(dst, attribute, value.data(), value.size());
    // Exactly this source's identity, one blank and the bitmap of this many chunks.
    if (n != static_cast<ssize_t>(value.size() - 1) || !starts_with(value, identity_) ||
        value[identity_.size()] != ' ')
        return false;
    const std::size_t bits = identity_.size() + 1;
    std::vector<bool> read(done_.size(), false);
    for (std::size_t chunk = 0; chunk < done_.size(); ++chunk) {
        const char* digit = std::find(hex_digits, hex_digits + 16, value[bits + chunk / 4]);
        if (digit == hex_digits + 16)
            return false;
        read[chunk] = ((digit - hex_digits) >> (chunk % 4)) & 1;
    }
    done_ = std::move(read);
    return true;
}

std::size_t ChunkMarks::count() const {
    return static_cast<std::size_t>(std::count(done_.begin(), done_.end(), true));
}

std::string ChunkMarks::text() const {
    std::string bitmap((done_.size() + 3) / 4, '0');
    for (std::size_t chunk = 0; chunk < done_.size(); ++chunk)
        if (done_[chunk]) {
            const auto digit = static_cast<std::size_t>(
                std::find(hex_digits, hex_digits + 16, bitmap[chunk / 4]) - hex_digits);
            bitmap[chunk / 4] = hex_digits[digit | (std::size_t{1} << (chunk % 4))];
        }
    return identity_ + " " + bitmap;
}

void ChunkMarks::mark(int dst, std::size_t chunk) {
    if (chunk >= done_.size() || done_.size() > most_chunks)
        return;
    done_[chunk] = true;
    const std::string value = text();
    if (fsetxattr(dst, attribute, value.data(), value.size(), 0) != 0)
        done_[chunk] = false;  // not recorded: copied again by a rerun
}

void ChunkMarks::clear(int dst) {
    fremovexattr(dst, attribute);  // ENODATA: never marked; ENOTSUP: never could be
}

}  // namespace bbkit
