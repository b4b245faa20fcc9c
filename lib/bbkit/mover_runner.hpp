// How a stage runs its move: bb-mover, a process of its own that becomes the job's user, with
// the plan on its standard input and its report lines (stage_plan.hpp) on its standard output;
// or, for tests, the same work and the same lines in the calling process. bb-stage's decisions
// (stage.hpp) read only the lines, so both runners take every path through them.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "bbkit/process.hpp"
#include "bbkit/stage_plan.hpp"

namespace bbkit {

class MoverRunner {
  public:
    virtual ~MoverRunner() = default;
    // Runs `plan`, handing each report line to `on_line` as it comes. The outcome is
    // run_process's (process.hpp): an exit status, or the signal that ended the mover, or
    // timed_out when `timeout` passed and the mover was stopped.
    virtual ProcessOutcome run(const StagePlan& plan, std::chrono::seconds timeout,
                               const std::function<void(const std::string&)>& on_line) const = 0;
};

// bb-mover at `path` (find_mover), with crash injection's environment (fault.hpp) and nothing
// else of the caller's.
class MoverProcess : public MoverRunner {
  public:
    explicit MoverProcess(std::string path) : path_(std::move(path)) {}
    ProcessOutcome run(const StagePlan& plan, std::chrono::seconds timeout,
                       const std::function<void(const std::string&)>& on_line) const override;

  private:
    std::string path_;
};

// run_and_report (mover.hpp) on the calling thread, as whoever calls it: no change of user
// (the plan's user must be the caller), no timeout. For the library's tests, which then stage
// without an installed bb-mover and take its every report line (ARCHITECTURE.md, tests).
class MoverInProcess : public MoverRunner {
  public:
    ProcessOutcome run(const StagePlan& plan, std::chrono::seconds timeout,
                       const std::function<void(const std::string&)>& on_line) const override;
};

// Where bb-mover is: next to this program (the build tree), else the libexec directory of the
// prefix this program is installed under, else the configure-time libexec directory. When the
// process is root, the mover found must be one only root can change (Error(config) otherwise).
std::string find_mover();

}  // namespace bbkit
