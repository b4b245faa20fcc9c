#include "bbkit/process.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
// Boost.Process v1. Newer Boosts keep it in <boost/process/v1.hpp>, namespace
// boost::process::v1, and make <boost/process.hpp> the different v2 (1.88 on); older ones have
// <boost/process.hpp> only.
#if __has_include(<boost/process/v1.hpp>)
#include <boost/process/v1.hpp>
#include <boost/process/v1/extend.hpp>
#define BBKIT_BOOST_PROCESS_V1 boost::process::v1
#else
#include <boost/process.hpp>
#include <boost/process/extend.hpp>
#define BBKIT_BOOST_PROCESS_V1 boost::process
#endif
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"

namespace bbkit {
namespace bp = BBKIT_BOOST_PROCESS_V1;

namespace {

constexpr const char* safe_path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

bp::environment environment_for(const ProcessSpec& spec) {
    bp::environment env =
        spec.clean_env ? bp::environment() : bp::environment(boost::this_process::environment());
    if (spec.clean_env) {
        env["PATH"] = safe_path;
#ifdef BBKIT_SANITIZER_BUILD
        // Only in sanitizer builds: the mover reports its findings where the tests look.
        for (const char* name : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"})
            if (const char* value = std::getenv(name))
                env[name] = value;
#endif
    }
    for (const auto& [key, value] : spec.env)
        env[key] = value;
    return env;
}

// Becomes ProcessSpec::identity in the forked child, before it executes the program; a child that
// cannot exits 126 (the shell's "cannot execute") and never runs the program as the caller.
struct AsIdentity : bp::extend::handler {
    const std::optional<Identity>* identity;
    explicit AsIdentity(const std::optional<Identity>& i) : identity(&i) {}
    template <typename Executor>
    void on_exec_setup(Executor&) const {
        if (*identity && switch_identity(**identity) != nullptr)
            _exit(126);
    }
};

// Polls rather than trusting child::wait_for, which is unreliable in Boost 1.74.
bool wait_until(bp::child& child, std::chrono::steady_clock::time_point deadline) {
    while (child.running()) {
        if (std::chrono::steady_clock::now() >= deadline)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
}

}  // namespace

// What the reader threads share with run_process. Held by shared_ptr: a grandchild that keeps a
// pipe open must not keep us waiting, so readers may be left behind, and must then find it.
struct Pipes {
    bp::ipstream out;
    bp::ipstream err;
    std::mutex mutex;
    std::string last_stderr_line;
    std::function<void(const std::string&)> on_line;
    std::atomic<int> open_readers{2};
    std::atomic<bool> abandoned{false};
    // While the caller handles a line, and when a reader last finished one (steady clock): the
    // child's own output is read to its end however slow the caller is (drain below).
    std::atomic<bool> handling{false};
    std::atomic<std::chrono::steady_clock::rep> last_line{0};

    void line_done() { last_line = std::chrono::steady_clock::now().time_since_epoch().count(); }
};

// After the child's exit, how long the pipes may stay open with no line read and none being
// handled before their readers are left behind (a grandchild holds them).
constexpr auto pipe_idle_limit = std::chrono::seconds(2);

ProcessOutcome run_process(const ProcessSpec& spec) {
    auto pipes = std::make_shared<Pipes>();
    pipes->on_line = spec.on_stdout_line;
    bp::opstream in;
    std::error_code ec;
    bp::child child(bp::exe = spec.path, bp::args = spec.args, environment_for(spec),
                    bp::std_in<in, bp::std_out> pipes->out, bp::std_err > pipes->err,
                    AsIdentity(spec.identity), ec);
    if (ec && (ec.category() == std::system_category() || ec.category() == std::generic_category()))
        throw system_error("cannot start " + spec.path, ec.value());
    if (ec)
        throw Error(ExitCode::software, "cannot start " + spec.path + ": " + ec.message());

    std::thread([pipes] {
        std::string line;
        while (std::getline(pipes->out, line)) {
            pipes->handling = true;
            {
                std::lock_guard<std::mutex> lock(pipes->mutex);
                if (!pipes->abandoned && pipes->on_line)
                    pipes->on_line(line);
            }
            pipes->line_done();
            pipes->handling = false;
        }
        --pipes->open_readers;
    }).detach();
    std::thread([pipes] {
        std::string line;
        while (std::getline(pipes->err, line)) {
            {
                std::lock_guard<std::mutex> lock(pipes->mutex);
                if (!line.empty())
                    pipes->last_stderr_line = line;
            }
            pipes->line_done();
        }
        --pipes->open_readers;
    }).detach();
    // A child that exits early must not kill us with SIGPIPE while we feed it.
    signal(SIGPIPE, SIG_IGN);
    in << spec.stdin_data;
    in.flush();
    in.pipe().close();

    ProcessOutcome outcome;
    const auto deadline = std::chrono::steady_clock::now() + spec.timeout;
    if (!wait_until(child, deadline)) {
        outcome.timed_out = true;
        ::kill(child.id(), SIGTERM);
        if (!wait_until(child, std::chrono::steady_clock::now() + spec.grace))
            ::kill(child.id(), SIGKILL);
    }
    child.wait(ec);
    // The child is gone; what it wrote is read to the end. A caller's line can take seconds (a
    // mover's progress line is a state write, which waits on a disk busy flushing the data just
    // copied), and the line after it may be the one saying the run succeeded: the readers are
    // waited for while they handle lines or read them, until the run's own deadline. Only pipes
    // that stay open and silent for pipe_idle_limit, held by a grandchild, are left behind.
    const auto exited = std::chrono::steady_clock::now();
    pipes->line_done();
    const auto drain_until = std::max(deadline, exited + pipe_idle_limit);
    while (pipes->open_readers > 0) {
        const auto now = std::chrono::steady_clock::now();
        const auto idle = now - std::chrono::steady_clock::time_point(
                                    std::chrono::steady_clock::duration(pipes->last_line.load()));
        if (now >= drain_until || (!pipes->handling && idle >= pipe_idle_limit))
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    {
        std::lock_guard<std::mutex> lock(pipes->mutex);
        pipes->abandoned = true;
        outcome.last_stderr_line = pipes->last_stderr_line;
    }
    const int native = child.native_exit_code();
    if (WIFSIGNALED(native))
        outcome.signal = WTERMSIG(native);
    else
        outcome.exit_code = WEXITSTATUS(native);
    return outcome;
}

const std::string& boot_id() {
    static const std::string id = [] {
        std::string text;
        try {
            text = read_file("/proc/sys/kernel/random/boot_id", "the boot id", 64).value_or("");
        } catch (const Error&) {
        }
        while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
            text.pop_back();
        return text.empty() ? std::string("unknown") : text;
    }();
    return id;
}

namespace {

int pidfd_open_(pid_t pid) {
    return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
}

int pidfd_signal(int pidfd, int sig) {
    return static_cast<int>(syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

// A pidfd for `process`, or an empty Fd when that process (same start time) is gone.
Fd pidfd_of(const ProcessId& process) {
    Fd fd(pidfd_open_(process.pid));
    if (!fd)
        return Fd();
    // The pidfd pins the pid: if the start time matches now, the fd is that very process.
    if (!(ProcessId::of(process.pid) == process))
        return Fd();
    return fd;
}

bool wait_pidfd(int pidfd, std::chrono::milliseconds timeout) {
    pollfd p{pidfd, POLLIN, 0};
    const int rc = poll(&p, 1, static_cast<int>(timeout.count()));
    return rc > 0;
}

}  // namespace

ProcessId ProcessId::self() {
    // A process's start time never changes: read it once per process (a forked child has
    // another pid and reads its own).
    thread_local ProcessId cached;
    const pid_t pid = ::getpid();
    if (cached.pid != pid || cached.start_time == 0)
        cached = of(pid);
    return cached;
}

ProcessId ProcessId::of(pid_t pid) {
    ProcessId id;
    id.pid = pid;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line))
        return id;
    // The command name (field 2) may hold spaces and parentheses: fields resume after the last
    // ')'. Field 22 (starttime) is the 20th after it.
    const auto paren = line.rfind(')');
    if (paren == std::string::npos)
        return id;
    std::istringstream fields(line.substr(paren + 1));
    std::string field;
    for (int i = 3; i <= 22 && fields >> field; ++i) {
        if (i == 3 && (field == "Z" || field == "X"))
            return id;  // a zombie has exited: it holds nothing and waits for nothing
        if (i == 22)
            id.start_time = std::stoull(field);
    }
    return id;
}

bool ProcessId::alive() const {
    return pid > 0 && start_time != 0 && of(pid) == *this;
}

bool stop_process(const ProcessId& process, std::chrono::milliseconds grace) {
    Fd fd = pidfd_of(process);
    if (!fd)
        return false;
    if (pidfd_signal(fd.get(), SIGTERM) != 0)
        return errno != ESRCH;
    if (wait_pidfd(fd.get(), grace))
        return true;
    pidfd_signal(fd.get(), SIGKILL);
    wait_pidfd(fd.get(), std::chrono::milliseconds(5000));
    return true;
}

bool wait_for_exit(const ProcessId& process, std::chrono::milliseconds timeout) {
    Fd fd = pidfd_of(process);
    if (!fd)
        return true;
    return wait_pidfd(fd.get(), timeout);
}

}  // namespace bbkit
