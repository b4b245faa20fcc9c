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

#include <iostream>
#include <iterator>
#include <mutex>

#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/mover.hpp"
#include "bbkit/stage_plan.hpp"
#include "bbkit/text.hpp"
#include "bbkit/tool.hpp"
#include "bbkit/user.hpp"

namespace {

using namespace bbkit;

std::mutex output_mutex;
bool error_reported = false;  // the move's own typed error line went out (run_and_report)

void report(const std::string& line) {
    std::lock_guard<std::mutex> lock(output_mutex);
    if (starts_with(line, "error "))
        error_reported = true;
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

int run(const std::string& input, bool part_of_step) {
    StagePlan plan = plan_from_json(input);
    if (part_of_step)
        set_part_of_step(plan);
    // Nothing below may open a user path as root.
    become_user(plan.user);
    // The credential change cleared any parent-death signal; a mover must not outlive bb-stage.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1)
        return static_cast<int>(ExitCode::software);
    lower_priority();
    raise_descriptor_limit();  // the walk holds a directory open per level
    run_and_report(plan, report);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    limit_arenas();
    CLI::App app{
        "bb-mover: bbkit's data mover, run by bb-stage with a stage plan on standard "
        "input (bbkit(7), STAGING)"};
    const CommonOptions none;  // bb-stage gives it no option: everything is in the plan
    // A transfer job's mover (bbkit(7), STAGING ON TRANSFER NODES) reads its plan from the file
    // bb-stage wrote for it, as the job's user, and takes its step task's part.
    std::string plan_file;
    bool part_of_step = false;
    app.add_option("--plan", plan_file,
                   "read the plan from FILE (a transfer job's mover, run as the job's user)");
    app.add_flag("--part-of-step", part_of_step,
                 "move this Slurm step task's part (SLURM_PROCID of SLURM_NTASKS)");
    // Every error reaches bb-stage as an error line: the move's typed by run_and_report, any
    // other (an argument, the plan, the user) here.
    return run_tool(
        "bb-mover", app, argc, argv, none,
        [&]() -> int {
            if (!plan_file.empty())
                return run(read_transfer_plan(plan_file), part_of_step);
            return run(std::string{std::istreambuf_iterator<char>(std::cin),
                                   std::istreambuf_iterator<char>()},
                       part_of_step);
        },
        [](int status, const std::string& message) {
            if (!error_reported)
                report(error_line(Error(static_cast<ExitCode>(status), message)));
        });
}
