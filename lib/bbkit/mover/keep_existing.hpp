// What a keep_existing entry (MoveEntry::keep_existing: a node's share of a gathered result)
// does at a name another writer may take: nothing there is ever removed or replaced; a name
// taken by a complete copy of the same source is kept (a rerun, or another node's identical
// copy), anything else refused. The copier checks before writing, the finisher again when it
// gives a temporary its name (copier.hpp, finisher.hpp).
#pragma once

#include <string>

#include "bbkit/mover/move_types.hpp"
#include "bbkit/mover/tally.hpp"

namespace bbkit::mover_internal {

// `name` in `dir` (the destination `path`) is taken by something that is not a complete copy
// of its source: Error(exists), or, for a directory, the error replacing it would give.
// Returns when nothing is there.
void refuse_taken(const Side& dst, int dir, const std::string& name, const std::string& path);

// Whether `name` in `dir` is what a rerun would skip for this node: a regular file of the
// source's size, a fifo of its mode, a symlink to the target of this move's own copy (`copy` in
// `copy_dir`), each with the source's ns mtime.
bool same_as_source(const Node& node, int dir, const std::string& name, int copy_dir,
                    const std::string& copy);

// Gives the node's temporary (node.temp, in `dir`) its final `name`, never over anything: a
// name another writer took meanwhile is refused (refuse_taken), or, when it is a complete copy
// of the same source, kept and counted as skipped (this copy goes). The temporary is gone
// either way.
void put_without_replacing(const Side& dst, MoveCounters& counts, Node& node, int dir,
                           const std::string& name);

}  // namespace bbkit::mover_internal
