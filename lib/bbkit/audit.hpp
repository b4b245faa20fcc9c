// log/audit.log: one line per privileged action (alloc, teardown, repair, drain, persistent
// create/destroy): when, who (uid, sudo's caller, host, pid, tool), what, and on which buffer or
// pool.
#pragma once

#include <string>

namespace bbkit {

// Appends one line with a single write(2) to <state_dir>/log/audit.log (O_APPEND, so
// concurrent writers never interleave within a line), and sends the same record to syslog
// (identifier "bbkit", facility authpriv). Failing to audit is logged, not fatal.
void audit(const std::string& state_dir, const std::string& who, const std::string& action,
           const std::string& details);

}  // namespace bbkit
