// The snapshots every operation leaves for readers who may not open the database: pools.json
// for Slurm and public/ for users (read back by views.hpp's read_public_status). Writers publish
// inside each write transaction, before commit.
#pragma once

#include "bbkit/config.hpp"
#include "bbkit/store.hpp"

namespace bbkit {

// Brings the snapshots up to date with what `txn` changed, in O(changes), not O(buffers):
// <state>/pools.json and public/pools.json (0644, rewritten only when their content changed),
// then public/buffers/<uid>/<key>.json (0644) of each key in txn.touched_keys() (and of the
// requests behind a dequeued one): written while the buffer is live, removed once it is final.
// Each <uid>/ directory is 0755 and owned like public/, or with PrivateData 0700 and owned by
// that uid (when the state directory belongs to root). Nothing is fsync'd: the snapshots are
// regenerated from state.db. When public/.settings (layout version, PrivateData, pool paths,
// boot id) does not match, it calls publish_all() instead. Writers call it inside each write
// transaction, before commit; the next publish repairs what a rollback leaves behind.
// Throws Error(io) / Error(no_perm).
void publish(WriteTransaction& txn, const StateStore& store, const Config& config);
// The full resync, O(live buffers): rewrites every live buffer's file, removes every other file
// and directory under public/buffers/ and layout 1's public/buffers*.json, then writes
// public/.settings.
void publish_all(WriteTransaction& txn, const StateStore& store, const Config& config);

}  // namespace bbkit
