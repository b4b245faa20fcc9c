// Hard links too many to remember, kept on disk: a move that meets more multiply-linked files
// than its memory bound allows copies each such file on its own and records (device, inode,
// destination) here; at the end the records come back grouped by inode (an external sort in
// bounded memory) and the copies of one inode are replaced by links to its first.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bbkit/fsops.hpp"

namespace bbkit {

class LinkSpill {
  public:
    // The records live in an unnamed file (O_TMPFILE) in the directory `dir`: nothing is left
    // behind by a kill, and nothing appears in the tree. `memory`: bytes held in memory at once
    // (sorting and merging). Throws Error(io) when the file system cannot hold unnamed files.
    LinkSpill(int dir, const std::string& what, std::size_t memory);

    void add(dev_t device, ino_t inode, const std::string& path);
    std::uint64_t size() const { return count_; }

    // For each inode recorded more than once, in (device, inode) order: fn(first, other) for
    // each later path, paths in the order they were added.
    void for_each_link(const std::function<void(const std::string&, const std::string&)>& fn);

    struct Record {
        std::uint64_t device = 0, inode = 0, sequence = 0;
        std::string path;
    };

  private:
    void write_run();

    Fd file_;
    std::string what_;
    std::size_t memory_;
    std::vector<Record> pending_;
    std::size_t pending_bytes_ = 0;
    std::vector<std::pair<off_t, off_t>> runs_;  // [begin, end) of each sorted run in the file
    off_t end_ = 0;
    std::uint64_t count_ = 0;
};

}  // namespace bbkit
