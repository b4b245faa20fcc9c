// bb-mover: bbkit's internal data mover, exec'd by bb-stage with a stage plan on standard
// input. It becomes the job's user before it opens any user path, stays in its caller's
// process group, and reports progress, a summary or an error on standard output.
#include <linux/ioprio.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <iostream>
#include <iterator>
#include <mutex>

#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/mover.hpp"
#include "bbkit/stage_plan.hpp"
#include "bbkit/user.hpp"

namespace {

using namespace bbkit;

std::mutex output_mutex;

void report(const std::string& line) {
    std::lock_guard<std::mutex> lock(output_mutex);
    std::cout << line << std::endl;
}

// Movers yield to the jobs running on the same host.
void lower_priority() {
    setpriority(PRIO_PROCESS, 0, 10);
    syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, IOPRIO_PRIO_VALUE(IOPRIO_CLASS_BE, 7));
}

int run(const std::string& input) {
    const StagePlan plan = plan_from_json(input);
    // Nothing below may open a user path as root.
    become_user(plan.user);
    // The credential change cleared any parent-death signal; a mover must not outlive bb-stage.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1)
        return static_cast<int>(ExitCode::software);
    lower_priority();

    const auto groups = entries_by_root(plan);
    std::uint64_t files = 0, bytes = 0, skipped = 0;
    double seconds = 0;
    std::uint64_t base_files = 0, base_bytes = 0;
    for (const auto& [root, entries] : groups) {
        MovePlan move;
        move.direction =
            plan.direction == StageDirection::in ? MoveDirection::in : MoveDirection::out;
        move.buffer_root = root;
        move.entries = entries;
        move.threads = plan.threads;
        move.durable = plan.durable;
        move.direct_io = plan.direct_io;
        move.trust_syncfs = plan.trust_syncfs;
        const MoveSummary summary = run_move(move, [&](const MoveProgress& p) {
            report(progress_line(base_files + p.files_done, base_files + p.files_total,
                                 base_bytes + p.bytes_done, base_bytes + p.bytes_total));
        });
        for (const std::string& w : summary.warnings)
            report(warning_line(w));
        files += summary.files;
        bytes += summary.bytes;
        skipped += summary.skipped;
        seconds += summary.seconds;
        base_files += summary.files + summary.skipped;
        base_bytes += summary.bytes;
    }
    bbkit::fault_point("mover.before-summary");
    report(summary_line(files, bytes, skipped, seconds));
    return 0;
}

}  // namespace

int main() {
    try {
        const std::string input{std::istreambuf_iterator<char>(std::cin),
                                std::istreambuf_iterator<char>()};
        return run(input);
    } catch (const bbkit::Error& e) {
        report(bbkit::error_line(e.exit_status(), e.what()));
        std::cerr << "bb-mover: " << bbkit::printable(e.what()) << '\n';
        return e.exit_status();
    } catch (const std::exception& e) {
        report(bbkit::error_line(70, std::string("internal error: ") + e.what()));
        std::cerr << "bb-mover: internal error: " << bbkit::printable(e.what()) << '\n';
        return 70;
    }
}
