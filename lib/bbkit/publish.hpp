// The snapshots every operation leaves for readers who may not open the database: pools.json
// for Slurm and public/ for users (read back by views.hpp's read_public_status). Writers publish
// inside each write transaction, before commit.
#pragma once

#include "bbkit/config.hpp"
#include "bbkit/store.hpp"

namespace bbkit {

// Brings the snapshots up to date with what `txn` changed, in O(changes), not O(buffers):
// <state>/pools.json and public/pools.json (0644, rewritten only when their content changed),
// then the file (0644) of each key in txn.touched_keys() (and of the requests behind a dequeued
// one) in its user's directory of public/buffers/: written while the buffer is live, removed
// once it is final. Without PrivateData that directory is <uid>/ (0755, owned like public/);
// with it, when the state directory is root's, the one the user's key names (views.hpp's
// public_directory_name: 0700, theirs), and none when it is not (no user sees any buffer).
// Everything below public/ is written through descriptors opened beneath the state directory,
// never by a path (bbkit(7), SECURITY). Nothing is fsync'd: the snapshots are regenerated from
// state.db. When public/.owner/settings (layout version, PrivateData, pool paths, boot id) does
// not match, it calls publish_all() instead. Writers call it inside each write transaction,
// before commit; the next publish repairs what a rollback leaves behind.
// Throws Error(io) / Error(no_perm).
void publish(WriteTransaction& txn, const StateStore& store, const Config& config);
// The full resync, O(live buffers): rewrites every live buffer's file, removes every other file
// and directory under public/buffers/ (but, with PrivateData, users' keys and directories), the
// files of older layouts, then writes public/.owner/settings.
void publish_all(WriteTransaction& txn, const StateStore& store, const Config& config);

}  // namespace bbkit
