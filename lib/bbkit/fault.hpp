// Crash injection for the fault tests: named points between the durable steps of every
// mutating operation. A build configured with BBKIT_FAULT_INJECTION=ON compiles them in; at run
// time BBKIT_FAULT=NAME[:NTH] makes the process SIGKILL itself the NTH time (default 1) it
// passes NAME, as a power cut or `kill -9` would. Without the option a point is an empty inline
// function and the environment is never read. BBKIT_FAULT=NAME[:NTH]:stop stops the process
// (SIGSTOP) there instead, so a test can act while an operation is half done, then SIGCONT it.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace bbkit {

#ifdef BBKIT_FAULT_INJECTION
// Dies here (SIGKILL, no clean-up of any kind) when armed for this point and this pass.
// BBKIT_FAULT_LOG=FILE: the point's name is appended to FILE first, so a driver knows which
// kill happened even when the victim is a child whose death its parent reports as a failure.
void fault_point(const char* name);
#else
inline void fault_point(const char*) {}
#endif

struct FaultPointInfo {
    const char* name;
    const char* where;  // the step just done, and the one not yet done
};

// Every point the library and tools may pass, in the order of the operations (empty when
// injection is not compiled in). fault_point() refuses (aborts) a name not in this table.
const std::vector<FaultPointInfo>& fault_points();

// BBKIT_FAULT and BBKIT_FAULT_LOG as set for this process, for children started with a clean
// environment (bb-mover); empty when injection is not compiled in.
std::map<std::string, std::string> fault_environment();

// BBKIT_FAULT=list: every tool prints the compiled-in points (name, tab, where) and exits 0.
bool fault_list_requested();

// Reads BBKIT_FAULT again and restarts the count of passes. A process reads the setting once,
// at its first point; a test that forks a child and arms it with setenv calls this in the
// child, before any other thread exists there. Does nothing without injection compiled in.
void fault_rearm();

}  // namespace bbkit
