#include "bbkit/mover_runner.hpp"

#include <unistd.h>

#include <exception>
#include <string>

#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/mover.hpp"
#include "bbkit/trust.hpp"

namespace bbkit {

ProcessOutcome MoverProcess::run(const StagePlan& plan, std::chrono::seconds timeout,
                                 const std::function<void(const std::string&)>& on_line) const {
    ProcessSpec spec;
    spec.path = path_;
    spec.stdin_data = plan_to_json(plan);
    spec.env = fault_environment();
    spec.timeout = timeout;
    spec.on_stdout_line = on_line;
    return run_process(spec);
}

ProcessOutcome MoverInProcess::run(const StagePlan& plan, std::chrono::seconds,
                                   const std::function<void(const std::string&)>& on_line) const {
    ProcessOutcome outcome;
    try {
        run_and_report(plan, on_line);
        outcome.exit_code = 0;
    } catch (const Error& e) {  // reported on its line already
        outcome.exit_code = e.exit_status();
        outcome.last_stderr_line = e.what();
    } catch (const std::exception& e) {  // from `on_line`, say: as bb-mover's end would be
        outcome.exit_code = static_cast<int>(ExitCode::software);
        outcome.last_stderr_line = std::string("internal error: ") + e.what();
    }
    return outcome;
}

std::string find_mover() {
    // bbkit(7), FILES: the build tree keeps bb-mover beside the tools; an install under any
    // prefix keeps it at the same place relative to the tools' directory; the configure-time
    // directory is the last resort.
    std::string exe;
    char buf[4096];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n > 0)
        exe.assign(buf, static_cast<std::size_t>(n));
    const std::string dir = exe.substr(0, exe.rfind('/') + 1);
    const std::string candidates[] = {
        dir + "bb-mover",
        dir + BBKIT_MOVER_FROM_BINDIR + "/bb-mover",
        std::string(BBKIT_LIBEXECDIR) + "/bb-mover",
    };
    for (const std::string& mover : candidates) {
        if (exe.empty() && mover != candidates[2])
            continue;
        if (access(mover.c_str(), X_OK) != 0)
            continue;
        // bb-stage runs as root and bb-mover starts as root: only root may change it.
        check_root_controlled(mover, "bb-mover");
        return mover;
    }
    throw Error(ExitCode::software, "cannot find bb-mover: not next to " + exe + ", in " + dir +
                                        BBKIT_MOVER_FROM_BINDIR + " or in " + BBKIT_LIBEXECDIR +
                                        " (reinstall bbkit)");
}

}  // namespace bbkit
