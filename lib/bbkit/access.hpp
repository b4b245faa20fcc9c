// Who may do what, one answer each: use burst buffers, create or destroy persistent ones, see a
// buffer. The directive parser, the operations and the views ask here (bbkit(7), SECURITY).
#pragma once

#include <sys/types.h>

#include <string>

#include "bbkit/buffer.hpp"
#include "bbkit/config.hpp"
#include "bbkit/user.hpp"

namespace bbkit {

// Throws Error(no_perm) unless `user` may use burst buffers under the configuration's
// allow_root, allow_users and deny_users: job users and persistent owners alike.
void check_may_use_burst_buffers(const Config& config, const User& user);

// Whether this process acts on root's own authority: uid 0, and not for a less privileged
// caller through sudo.
bool root_itself();

// Who asks to create or destroy a persistent buffer: a job's directive, or an admin's command
// (bb-pool alloc --persistent).
enum class PersistentRequest { job, command };

// Persistent buffers are created and destroyed on root's own authority: root's command for any
// owner, or a job of root's run by root itself. Anyone else (a user's job, SlurmUser through
// sudo) needs the EnablePersistent flag and an owner who may use burst buffers. Throws
// Error(no_perm) "user NAME may not VERB persistent burst buffers (EnablePersistent is not
// set)" otherwise.
void check_may_manage_persistent(const Config& config, const User& owner, PersistentRequest from,
                                 const std::string& verb);

// Root and the state directory's owner: they read the database and see every buffer.
bool privileged_viewer(const Config& config, uid_t viewer);

// Slurm's PrivateData for burst buffers: with the PrivateData flag a user sees only their own
// buffers, root and the state directory's owner see all; without it everyone sees all.
bool may_see(const Config& config, uid_t viewer, const Buffer& buffer);
// Whether every user may see every buffer (PrivateData is not set).
bool buffers_are_public(const Config& config);

}  // namespace bbkit
