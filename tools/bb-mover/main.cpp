// bb-mover: bbkit's internal data mover, exec'd by bb-stage with a stage plan on standard
// input. It becomes the job's user before it opens any user path, stays in its caller's
// process group, and reports progress, a summary or an error on standard output.
#include <linux/ioprio.h>
#include <malloc.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <iterator>
#include <mutex>

#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/fsops.hpp"
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

// glibc gives each thread that allocates its own arena, 64 MiB of address space apiece: with a
// worker per thread that is most of a mover's virtual size, and what `ulimit -v` (or a cgroup
// sized from it) counts. Two arenas are plenty: workers allocate little per file.
void limit_arenas() {
    mallopt(M_ARENA_MAX, 2);
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
    raise_descriptor_limit();  // the walk holds a directory open per level

    // A stage-in's sources are measured first (the capacity check): the totals are known
    // before the copy. A stage-out's grow as the walk, ahead of the copy, counts them.
    SourceTotals measured;
    const auto groups = entries_by_root(
        plan,
        [](std::uint64_t files, std::uint64_t bytes) {
            report(progress_line(0, files, 0, bytes, StagePhase::measuring));
        },
        &measured);
    std::uint64_t files = 0, bytes = 0, skipped = 0;
    double seconds = 0;
    std::uint64_t base_files = 0, base_bytes = 0;
    std::size_t left = groups.size();
    for (const auto& [root, entries] : groups) {
        --left;
        MovePlan move;
        move.direction =
            plan.direction == StageDirection::in ? MoveDirection::in : MoveDirection::out;
        move.buffer_root = root;
        move.entries = entries;
        move.threads = plan.threads;
        move.durable = plan.durable;
        move.direct_io = plan.direct_io;
        move.trust_syncfs = plan.trust_syncfs;
        move.memory_limit = plan.memory_limit;
        MoveProgress last;
        const MoveSummary summary = run_move(move, [&](const MoveProgress& p) {
            last = p;
            // The measurement counts a hard-linked file's bytes once per name, the walk once:
            // the walk's own count is the answer once it is complete.
            const bool complete = left == 0 && !p.counting;
            const std::uint64_t files_total =
                complete ? base_files + p.files_total
                         : std::max(measured.files, base_files + p.files_total);
            const std::uint64_t bytes_total =
                complete ? base_bytes + p.bytes_total
                         : std::max(measured.bytes, base_bytes + p.bytes_total);
            const bool counting = measured.files == 0 && (p.counting || left > 0);
            report(progress_line(base_files + p.files_done, files_total, base_bytes + p.bytes_done,
                                 bytes_total,
                                 p.syncing  ? StagePhase::syncing
                                 : counting ? StagePhase::measuring
                                            : StagePhase::copying));
        });
        for (const std::string& w : summary.warnings)
            report(warning_line(w));
        files += summary.files;
        bytes += summary.bytes;
        skipped += summary.skipped;
        seconds += summary.seconds;
        base_files += last.files_total;  // the move's last report is its complete count
        base_bytes += last.bytes_total;
    }
    bbkit::fault_point("mover.before-summary");
    report(summary_line(files, bytes, skipped, seconds));
    return 0;
}

}  // namespace

int main() {
    limit_arenas();
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
