// A node's health: whether the pools, the state directory and the programs bbkit needs on this
// host are in order, by checks that no job controls (bbkit(7), NODE-LOCAL POOLS, Node health).
// The node scripts ask it after a failure, to tell a broken node (drain it) from a job's
// failure (hold the job); a site's HealthCheckProgram asks it too.
#pragma once

#include <string>
#include <vector>

#include "bbkit/config.hpp"
#include "bbkit/store.hpp"

namespace bbkit {

struct HealthScope {
    std::vector<std::string> pools;  // these pools; empty: every pool (or every node-local one)
    bool node_local_only = false;    // empty `pools`: the node-local pools only
    std::vector<std::string> trusted_files;  // programs and scripts that must be root's alone
};

struct HealthFault {
    std::string subject;  // "pool nvme", "state directory", "bb-mover", a file's path
    std::string problem;  // one line
};

struct HealthReport {
    std::vector<std::string> pools;     // the pools checked, in configuration order
    std::vector<std::string> draining;  // of those, the ones an administrator drained
    std::vector<HealthFault> faults;    // empty: healthy
    bool healthy() const { return faults.empty(); }
};

// Checks, reading only what root and the state owner control (never a buffer's contents, never
// the pool's free space, which a job can use up): each pool is initialised here, its marker in
// place (its file system mounted) with the recorded UUID, its directories root's, its file
// system writable (not mounted read-only) and at least the pool's capacity in size; the state
// directory's file system is writable; bb-mover is found and only root can change it; each
// trusted file is a regular file only root can change. A draining pool is healthy (an
// administrator's choice) and listed. Error(no_input) for a pool not configured; Error(data)
// when the scope selects no pool.
HealthReport check_health(StateStore& store, const Config& config, const HealthScope& scope);

// Nothing when the report is healthy; else Error(unavailable) "unhealthy: SUBJECT: PROBLEM"
// naming its first fault (the line the node scripts put in a drain reason or AdminComment).
void require_healthy(const HealthReport& report);

}  // namespace bbkit
