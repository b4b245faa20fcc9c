// Who a tool acts for, and which files root trusts (bbkit(7), SECURITY).
//
// A tool running as root may act for a less privileged caller: SlurmUser through sudo (sudo's
// SUDO_UID), or a real uid that is not root. Such a caller gets the tools' operations, never
// their choice of root's files: no --config, --state-dir or output path, no BBKIT_* variable
// that names a file, and input files are opened with the caller's own permissions. Whoever
// runs it, root reads a configuration and runs a hook only when nobody but root can change
// that file or any directory on its way.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "bbkit/fsops.hpp"

namespace bbkit {

struct Caller {
    uid_t uid = 0;
    gid_t gid = 0;
    std::string name;  // SUDO_USER when sudo ran the tool, else empty
};

// The less privileged party a root tool acts for, or nullopt when the tool is not running
// with euid 0 or root itself called it (SUDO_UID absent or 0, real uid 0).
std::optional<Caller> less_privileged_caller();

// Error(no_perm) when a less privileged caller gave `option`, an administrator's override
// (bb-teardown --force): SlurmUser through sudo gets the operations Slurm asks for, never the
// overrides that discard data or skip a safety check.
void refuse_caller_override(const std::string& option);
// Error(no_perm) when a less privileged caller gave `option` (e.g. "--config"): that caller
// may not choose a file root reads or writes.
void refuse_caller_file_choice(const std::string& option);

// Removes the environment variables that name files or change what root does (BBKIT_CONFIG,
// BBKIT_STATE_DIR, BBKIT_FAULT, BBKIT_FAULT_LOG, SLURM_CONF) when a less privileged caller runs
// the tool: sudo's env_keep may pass them through.
void drop_caller_environment();

// Checks, as root must before reading `path` as configuration or running it as a hook, that
// only root can change it: a regular file owned by root and not writable by group or others,
// reached through directories (and symlinks) that only root can change (a world-writable
// directory counts only with the sticky bit, for root-owned entries). Throws Error(config)
// naming `what`, the path and what to fix; a missing file is Error(config) too. Does nothing
// when the process is not root (it then has no privilege to lend).
void check_root_controlled(const std::string& path, const std::string& what);

// Opens `path` for reading with the permissions of the less privileged caller when there is
// one (file system uid, gid and groups switched for the open only), else as the process.
// Errors as read_script_file's.
Fd open_as_caller(const std::string& path);

}  // namespace bbkit
