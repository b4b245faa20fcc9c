#include "bbkit/stage.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <cerrno>

#include <nlohmann/json.hpp>
#include <thread>

#include "bbkit/error.hpp"
#include "bbkit/fault.hpp"
#include "bbkit/file_system.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/job_environment.hpp"
#include "bbkit/job_nodes.hpp"
#include "bbkit/pool.hpp"
#include "bbkit/process.hpp"
#include "bbkit/project_quota.hpp"
#include "bbkit/publish.hpp"
#include "bbkit/run_lock.hpp"
#include "bbkit/seal.hpp"
#include "bbkit/size.hpp"
#include "bbkit/staging_progress.hpp"
#include "bbkit/teardown.hpp"
#include "bbkit/text.hpp"
#include "bbkit/transfer.hpp"
#include "bbkit/trust.hpp"

namespace bbkit {
namespace {

constexpr auto slot_poll = std::chrono::milliseconds(200);
constexpr auto progress_interval = std::chrono::milliseconds(500);
constexpr unsigned max_threads_per_mover = 8;

std::string job_name(std::uint64_t job_id) {
    return "job " + std::to_string(job_id);
}

Buffer live_job_buffer(StateStore& store, const Config& config, std::uint64_t job_id) {
    ReadSnapshot snapshot(store);
    const std::optional<Buffer> b = snapshot.latest_job_buffer(config.cluster, job_id);
    if (!b || is_final(b->state))
        throw Error(ExitCode::no_input,
                    job_name(job_id) + " has no burst buffer (bb-pool alloc first)");
    return *b;
}

// The job's last incarnation when it has ended (torn down) after it went through `reached`.
std::optional<Buffer> ended_after(StateStore& store, const Config& config, std::uint64_t job_id,
                                  BufferState reached) {
    ReadSnapshot snapshot(store);
    const std::optional<Buffer> b = snapshot.latest_job_buffer(config.cluster, job_id);
    if (!b || !is_final(b->state))
        return std::nullopt;
    for (const HistoryEntry& h : snapshot.history(b->key))
        if (h.to == reached)
            return b;
    return std::nullopt;
}

StageResult already_done(const Buffer& b) {
    StageResult done;
    done.key = b.key.str();
    done.nothing_to_do = true;
    return done;
}

Error wrong_state(const Buffer& b, const std::string& phase, const std::string& needs) {
    return Error(ExitCode::data, "cannot " + phase + " " + b.key.str() + ": it is " +
                                     to_string(b.state) + " (" + phase + " needs " + needs + ")");
}

RunLock take_run_lock(StateStore& store, const Buffer& b) {
    const RunLockScope scope = run_lock_scope(store);
    if (std::optional<RunLock> lock = RunLock::try_acquire(scope, b.key))
        return std::move(*lock);
    std::string who = "another process";
    if (std::optional<ProcessId> holder = RunLock::holder(scope, b.key))
        who = "pid " + std::to_string(holder->pid);
    throw Error(ExitCode::temp_fail,
                "buffer " + b.key.str() + " is busy: " + who + " is working on it");
}

// flock'd files in run/: `count` slots named <prefix>.<i>.lock (of the claim's epoch, as run
// locks: a stager of an older epoch, cut off, takes no slot of the new controller's); holding
// one is holding a slot.
std::vector<Fd> take_slots(const Config& config, const RunLockScope& scope,
                           const std::string& prefix, unsigned count, unsigned want,
                           std::chrono::steady_clock::time_point deadline,
                           const std::string& what) {
    std::vector<Fd> held;
    for (;;) {
        for (unsigned i = 0; i < count && held.size() < want; ++i) {
            Fd fd = open_state_file(config.state_dir,
                                    run_lock_name(scope, prefix + "." + std::to_string(i)),
                                    O_RDWR | O_CREAT, 0600);
            if (flock(fd.get(), LOCK_EX | LOCK_NB) == 0)
                held.push_back(std::move(fd));
        }
        if (!held.empty())
            return held;
        if (std::chrono::steady_clock::now() >= deadline)
            throw Error(ExitCode::temp_fail, "timed out waiting for a free " + what);
        std::this_thread::sleep_for(slot_poll);
    }
}

// Progress is not state: a temp file renamed over the old one, no fsync. progress/ is the
// state owner's: root writes only a file it has just created there, through the directory it
// opened (bbkit(7), SECURITY).
void write_progress(const StateStore& store, const Buffer& b, const StagingProgress& progress) {
    const std::string name = b.key.str();
    const std::string tmp = name + ".tmp";
    const std::string text = progress_record(progress);
    Fd dir;
    try {
        dir = open_state_file(store.dir(), "progress", O_RDONLY | O_DIRECTORY);
    } catch (const Error&) {
        return;
    }
    unlinkat(dir.get(), tmp.c_str(), 0);
    Fd fd(
        openat(dir.get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd || write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
        return;
    renameat(dir.get(), tmp.c_str(), dir.get(), name.c_str());
}

std::string pool_path_of(const Config& config, const Buffer& b) {
    return configured_pool(config, b.pool).path + "/" + b.directory;
}

StagePlan plan_for(StateStore& store, const Config& config, const Buffer& b,
                   StageDirection direction, const std::vector<StageDirective>& stages,
                   unsigned threads) {
    StagePlan plan;
    plan.direction = direction;
    plan.user = lookup_user(std::to_string(b.uid));  // groups as the system knows them now
    plan.job_root = pool_path_of(config, b);
    plan.capacity = b.allocated_bytes;
    plan.stages = stages;
    plan.threads = threads;
    plan.durable = direction == StageDirection::out;
    const PoolConfig& pool = configured_pool(config, b.pool);
    plan.direct_io = pool.direct_io;
    plan.trust_syncfs = pool.syncfs;
    plan.memory_limit = config.limits.mover_memory;
    plan.temp_token = b.temp_token;
    if (pool.node_local)  // recorded by bb-pool alloc; a record without it: this host alone
        plan.nodes = recorded_nodes(b.staging).value_or(this_host_alone());
    ReadSnapshot snapshot(store);
    for (const auto& [name, path] :
         resolve_persistent_uses(snapshot, config, b.uid, b.user, recorded_persistent_uses(b)))
        plan.persistent_roots[name] = path;
    return plan;
}

struct MoverRun {
    bool ok = false;
    int exit_code = 0;
    std::string message;
    Failure failure;  // when !ok: the mover's, or what ended it
    MoverReport summary;
    std::vector<std::string> warnings;
    StageRun record;  // what the accounting keeps of it (StateStore::record_stage_run)
};

MoverRun run_mover(StateStore& store, const Buffer& b, const StagePlan& plan,
                   const StageOptions& options, const MoverRunner& mover, unsigned timeout_seconds,
                   const char* phase) {
    MoverRun run;
    auto last_write = std::chrono::steady_clock::time_point{};
    std::optional<StagePhase> last_phase;
    StagingProgress last;                // the last record written
    std::optional<TransferPlace> place;  // a stage on transfer nodes: where it runs
    StagingRate rate;
    const TimePoint started = std::chrono::system_clock::now();
    const auto on_line = [&](const std::string& line) {
        const MoverReport r = parse_report(line);
        switch (r.kind) {
            case MoverReport::Kind::progress: {
                const auto now = std::chrono::steady_clock::now();
                rate.add(now, r.phase, r.files_done, r.bytes_done);
                StagingProgress p;
                p.direction = plan.direction;
                p.phase = r.phase;
                p.files_done = r.files_done;
                p.files_total = r.files_total;
                p.bytes_done = r.bytes_done;
                p.bytes_total = r.bytes_total;
                p.files_per_second = rate.files_per_second();
                p.bytes_per_second = rate.bytes_per_second();
                p.eta_seconds = eta_seconds(p);
                p.started = started;
                p.updated = std::chrono::system_clock::now();
                p.pid = getpid();
                p.transfer = place;
                if (options.on_progress)
                    options.on_progress(p);
                // A new phase is written at once: a poller sees measuring end and syncing begin.
                if (now - last_write >= progress_interval || r.files_done == r.files_total ||
                    r.phase != last_phase) {
                    write_progress(store, b, p);
                    last_write = now;
                    last_phase = r.phase;
                }
                last = p;
                break;
            }
            case MoverReport::Kind::summary:
                run.summary = r;
                run.ok = true;
                if (r.phases) {  // the record keeps where the stage's time went
                    last.direction = plan.direction;
                    last.phases = r.phases;
                    last.eta_seconds.reset();
                    last.updated = std::chrono::system_clock::now();
                    write_progress(store, b, last);
                }
                break;
            case MoverReport::Kind::error:
                run.exit_code = r.exit_code;
                run.message = r.message;
                run.failure = r.failure.value_or(Failure{});
                break;
            case MoverReport::Kind::warning:
                run.warnings.push_back(r.message);
                break;
            case MoverReport::Kind::transfer: {
                // A new job or new nodes are written at once (bb-stat job): a transfer job may
                // wait long in its partition's queue before any mover reports progress.
                const bool moved = !place || !r.transfer || place->job_id != r.transfer->job_id ||
                                   place->nodes != r.transfer->nodes;
                place = last.transfer = r.transfer;
                if (moved) {
                    if (!last_phase)  // no mover has reported yet
                        last.phase = StagePhase::measuring;
                    last.direction = plan.direction;
                    last.started = started;
                    last.updated = std::chrono::system_clock::now();
                    last.pid = getpid();
                    write_progress(store, b, last);
                }
                break;
            }
            default:
                break;
        }
    };
    const ProcessOutcome outcome = mover.run(plan, std::chrono::seconds(timeout_seconds), on_line);
    if (outcome.timed_out) {
        run.ok = false;
        run.exit_code = static_cast<int>(ExitCode::temp_fail);
        run.message = std::string(phase) + " timed out after " + std::to_string(timeout_seconds) +
                      " s (timeouts." +
                      (plan.direction == StageDirection::in ? "stage_in" : "stage_out") +
                      "); the mover was stopped";
        run.failure = Failure{FailureKind::interrupted, "", "", 0};
    } else if (outcome.exit_code != 0) {
        run.ok = false;
        if (run.exit_code == 0) {  // it reported no error: it was ended, or broke
            run.exit_code = outcome.exit_code > 0 ? outcome.exit_code : 70;
            run.failure = Failure{outcome.signal ? FailureKind::interrupted : FailureKind::internal,
                                  "", "", 0};
        }
        if (run.message.empty())
            run.message = outcome.signal
                              ? "the mover was killed by signal " + std::to_string(outcome.signal)
                              : outcome.last_stderr_line;
    } else if (!run.ok && run.exit_code == 0) {  // it ended well but no summary was read
        run.exit_code = static_cast<int>(ExitCode::software);
        run.failure = Failure{FailureKind::internal, "", "", 0};
    }
    // A failure always says what ended it: the tool's one error line is this message.
    if (!run.ok && run.message.empty())
        run.message = "the mover ended with exit status " + std::to_string(outcome.exit_code) +
                      " but reported neither its summary nor an error";
    // What the accounting keeps: all it moved, or for a failed run up to its last progress.
    run.record.stage_in = plan.direction == StageDirection::in;
    run.record.started = started;
    run.record.ended = std::chrono::system_clock::now();
    run.record.files = run.ok ? run.summary.files : last.files_done;
    run.record.bytes = run.ok ? run.summary.bytes : last.bytes_done;
    run.record.failed = !run.ok;
    return run;
}

// Records the failure on the buffer (state kept) and returns the error to throw.
Error record_failure(StateStore& store, const Config& config, const Buffer& b, const MoverRun& run,
                     const std::string& who) {
    WriteTransaction txn(store, who);
    Buffer now = txn.get_buffer(b.key);  // the state stays: Slurm (or an admin) decides what next
    now.reason = "BurstBufferOperation";
    now.message = run.message;
    now.failure = std::string(to_string(now.state)) + ": " + run.message;
    now.failed = std::chrono::system_clock::now();
    now.run_lock_holder.reset();
    txn.update_buffer(now);
    txn.record_stage_run(b.key, run.record);
    publish(txn, store, config);
    txn.commit();
    const ExitCode code = run.exit_code >= 64 && run.exit_code <= 78
                              ? static_cast<ExitCode>(run.exit_code)
                              : ExitCode::software;
    return Error(code, run.message, run.failure);
}

// XFS answers a write past a project's limit with ENOSPC, as it does a full file system
// (bbkit(7), CAPACITY); ext4 answers EDQUOT, which the mover names capacity itself. On an XFS
// pool with project quotas, the nearer of the two bounds is the one that was hit: what the
// buffer has left under its limit, or what the pool's file system has free. Unknown (not root,
// no limit, not XFS): the pool's, as the mover said.
bool quota_not_pool(const Config& config, const Buffer& b) {
    const PoolConfig& pool = configured_pool(config, b.pool);
    if (pool.quota != QuotaMode::project || b.record_id <= 0)
        return false;
    try {
        if (file_system_kind(pool.path).name != "xfs")
            return false;
        const Fd root(open(pool.path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        struct statvfs st {};
        if (!root || fstatvfs(root.get(), &st) != 0)
            return false;
        const ProjectUsage usage =
            ProjectQuotas(root.get(), pool.path).usage(buffer_project(pool, b.record_id));
        if (usage.byte_limit == 0)
            return false;
        const std::uint64_t left =
            usage.bytes >= usage.byte_limit ? 0 : usage.byte_limit - usage.bytes;
        return left < static_cast<std::uint64_t>(st.f_bavail) * st.f_frsize;
    } catch (const Error&) {
        return false;
    }
}

// The mover's message names the file and why; the user also needs the buffer, its pool and
// the way on ("bb-stage: what failed: why (what to do)"), which the failure's kind decides:
// a full buffer (its capacity: freeing space in the pool would not help) or a full pool.
Error explain_failure(const Config& config, const Buffer& b, bool in, const Error& mover) {
    const std::string why = mover.what();
    Failure failure = mover.failure().value_or(Failure{});
    if (in && failure.kind == FailureKind::pool_full && quota_not_pool(config, b))
        failure.kind = FailureKind::capacity;
    const bool over_capacity = failure.kind == FailureKind::capacity;
    const bool no_space = failure.kind == FailureKind::pool_full;
    const std::string job = std::to_string(b.key.job_id);
    std::string text = std::string(in ? "stage-in of " : "stage-out of ") + b.key.str() +
                       (in ? " into pool '" : " from pool '") + b.pool + "' failed: " + why;
    if (in && over_capacity)
        text += " (the files need more than the buffer's capacity of " +
                format_size(b.allocated_bytes) +
                ", its directories included: ask for a larger capacity, or make the sources "
                "smaller, then bb-stage in --job " +
                job + " again)";
    else if (in && no_space)
        text += " (free space in pool '" + b.pool + "', then bb-stage in --job " + job +
                " again; files already copied are skipped)";
    else if (!in)
        text +=
            " (the data is kept in the buffer; fix the cause, then bb-stage out --retry "
            "--job " +
            job + ")";
    return Error(mover.code(), text, failure);
}

// A record made before schema 6 has no temp_token: it gets one before its first stage, under
// the run lock, so that a move killed from now on is resumed by the next (bbkit(7), STAGING).
Buffer with_temp_token(StateStore& store, const Buffer& b, const std::string& who) {
    if (!b.temp_token.empty())
        return b;
    WriteTransaction txn(store, who);
    Buffer now = txn.get_buffer(b.key);
    if (now.temp_token.empty()) {
        now.temp_token = random_hex(16);
        txn.update_buffer(now);
    }
    txn.commit();
    return now;
}

Buffer enter(StateStore& store, const Config& config, const BufferKey& key, BufferState to,
             const std::string& who) {
    WriteTransaction txn(store, who);
    Buffer b = txn.transition(key, to);
    b.run_lock_holder = ProcessId::self();
    txn.set_run_lock_holder(key, b.run_lock_holder);
    publish(txn, store, config);
    txn.commit();
    return b;
}

// `run`: the stage that ended, kept in the same transaction for the accounting.
Buffer leave(StateStore& store, const Config& config, const BufferKey& key, BufferState to,
             const std::string& who, const std::optional<StageRun>& run = std::nullopt) {
    WriteTransaction txn(store, who);
    Buffer b = txn.transition(key, to);
    b.run_lock_holder.reset();
    txn.set_run_lock_holder(key, std::nullopt);
    if (run)
        txn.record_stage_run(key, *run);
    publish(txn, store, config);
    txn.commit();
    return b;
}

StageResult run_stage(StateStore& store, const Config& config, Buffer b, StageDirection direction,
                      const StageOptions& options, const std::string& who) {
    const bool in = direction == StageDirection::in;
    const BufferState working = in ? BufferState::staging_in : BufferState::staging_out;
    const BufferState done = in ? BufferState::staged_in : BufferState::staged_out;
    const unsigned timeout = in ? config.timeouts.stage_in : config.timeouts.stage_out;
    const char* phase = in ? "stage-in" : "stage-out";
    std::optional<RunLock> lock = take_run_lock(store, b);
    fault_point("stage.locked");
    b = live_job_buffer(store, config, b.key.job_id);  // again, under the run lock
    StageResult result;
    result.key = b.key.str();
    const std::vector<StageDirective> stages = recorded_stages(b.staging, direction);
    if (stages.empty()) {
        leave(store, config, b.key, done, who);
        result.nothing_to_do = true;
        return result;
    }
    // Before the buffer changes state: a missing or untrusted mover is an installation problem.
    // A pool with staging = "slurm" moves the data on its transfer nodes (transfer.hpp): the
    // stage takes a stage slot here, but none of this host's mover threads.
    const bool on_transfer_nodes = configured_pool(config, b.pool).staging == PoolStaging::slurm;
    std::optional<MoverProcess> process;
    std::optional<TransferRunner> transfer;
    if (!options.mover && on_transfer_nodes)
        transfer.emplace(store, config, b, find_mover(), who);
    else if (!options.mover)
        process.emplace(find_mover());
    const MoverRunner& mover = options.mover ? *options.mover
                               : transfer    ? static_cast<const MoverRunner&>(*transfer)
                                             : *process;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout);
    const RunLockScope scope = run_lock_scope(store);
    std::vector<Fd> slot =
        take_slots(config, scope, std::string("slot.") + (in ? "in" : "out"),
                   config.limits.stage_concurrency, 1, deadline, std::string(phase) + " slot");
    std::vector<Fd> threads;
    if (!on_transfer_nodes)
        threads = take_slots(config, scope, "thread", config.limits.mover_threads,
                             std::min(config.limits.mover_threads, max_threads_per_mover), deadline,
                             "mover thread");
    with_temp_token(store, b, who);
    b = enter(store, config, b.key, working, who);
    fault_point("stage.entered");
    // A transfer node's mover has the node to itself: the threads one mover may have.
    const unsigned mover_threads =
        on_transfer_nodes ? std::min(config.limits.mover_threads, max_threads_per_mover)
                          : static_cast<unsigned>(threads.size());
    const StagePlan plan = plan_for(store, config, b, direction, stages, mover_threads);
    const MoverRun run = run_mover(store, b, plan, options, mover, timeout, phase);
    threads.clear();
    slot.clear();
    if (!run.ok) {
        Error error = record_failure(store, config, b, run, who);
        if (!in || error.code() == ExitCode::io)  // a source problem needs no pool named
            error = explain_failure(config, b, in, error);
        fault_point("stage.failed");
        if (in && config.mode == Mode::standalone && config.flags.teardown_failure) {
            lock.reset();  // teardown takes the run lock itself
            TeardownOptions teardown;
            teardown.hurry = true;
            teardown_job(store, config, b.key.job_id, teardown, who);
        }
        throw error;
    }
    fault_point("stage.moved");
    leave(store, config, b.key, done, who, run.record);
    result.files = run.summary.files;
    result.bytes = run.summary.bytes;
    result.skipped = run.summary.skipped;
    result.seconds = run.summary.seconds;
    result.phases = run.summary.phases;
    result.warnings = run.warnings;
    return result;
}

void run_hook(const Config& config, const Buffer& b, const std::string& phase) {
    const auto hook = config.hooks.find(phase);
    if (hook == config.hooks.end())
        return;
    check_root_controlled(hook->second, phase + " hook");
    ProcessSpec spec;
    spec.path = hook->second;
    spec.timeout = std::chrono::seconds(config.timeouts.other);
    spec.env = {{"BBKIT_JOB_ID", std::to_string(b.key.job_id)},
                {"BBKIT_USER", b.user},
                {"BBKIT_UID", std::to_string(b.uid)},
                {"BBKIT_BUFFER_DIR", pool_path_of(config, b)},
                {"BBKIT_POOL", b.pool},
                {"BBKIT_PHASE", phase}};
    const ProcessOutcome outcome = run_process(spec);
    if (outcome.timed_out)
        throw Error(ExitCode::software, phase + " hook " + spec.path + " timed out after " +
                                            std::to_string(config.timeouts.other) + " s");
    if (outcome.exit_code != 0)
        throw Error(ExitCode::software,
                    phase + " hook " + spec.path + " failed" +
                        (outcome.signal ? " (signal " + std::to_string(outcome.signal) + ")"
                                        : " (exit " + std::to_string(outcome.exit_code) + ")") +
                        (outcome.last_stderr_line.empty() ? "" : ": " + outcome.last_stderr_line));
}

// Runs a phase's hook while the buffer is in `working`, then `before_done` (still under the run
// lock); a failure of either stays recorded there.
void hooked_phase(StateStore& store, const Config& config, Buffer b, BufferState working,
                  BufferState done, const std::string& hook, const std::string& who,
                  const std::function<void(const Buffer&)>& before_done = {}) {
    RunLock lock = take_run_lock(store, b);
    if (b.state != working)
        b = enter(store, config, b.key, working, who);
    fault_point("hook.entered");
    try {
        run_hook(config, b, hook);
        if (before_done)
            before_done(b);
    } catch (const Error& e) {
        MoverRun failed;
        failed.exit_code = static_cast<int>(e.code());
        failed.message = e.what();
        throw record_failure(store, config, b, failed, who);
    }
    fault_point("hook.ran");
    if (done != working)
        leave(store, config, b.key, done, who);
}

// What a stage finds before it moves anything: `done` when there is nothing left to do (the
// states each direction accepts as done), else the live buffer it would work on. Throws what
// the stage would throw for a buffer it cannot stage.
struct StageStart {
    std::optional<StageResult> done;
    Buffer buffer;
};

StageStart start_in(StateStore& store, const Config& config, std::uint64_t job_id) {
    const Buffer b = live_job_buffer(store, config, job_id);
    switch (b.state) {
        case BufferState::allocated:
        case BufferState::staging_in:
            return {std::nullopt, b};
        case BufferState::staged_in:
        case BufferState::pre_run:
        case BufferState::running:
        case BufferState::post_run:
        case BufferState::staging_out:
        case BufferState::staged_out:
            return {already_done(b), b};
        default:
            throw wrong_state(b, "stage in", "allocated");
    }
}

StageStart start_out(StateStore& store, const Config& config, std::uint64_t job_id,
                     const StageOptions& options) {
    if (const std::optional<Buffer> ended =
            ended_after(store, config, job_id, BufferState::staged_out)) {
        StageResult done = already_done(*ended);
        done.note = "staged out before it was torn down";
        return {done, *ended};
    }
    const Buffer b = live_job_buffer(store, config, job_id);
    switch (b.state) {
        case BufferState::post_run:
            return {std::nullopt, b};
        case BufferState::staging_out:
            if (b.reason == "BurstBufferOperation" && !options.retry)
                throw Error(ExitCode::unavailable,
                            "stage-out of " + b.key.str() + " failed before: " + b.message +
                                " (the data is kept; fix the cause, then bb-stage out "
                                "--retry --job " +
                                std::to_string(job_id) + ")");
            return {std::nullopt, b};
        case BufferState::staged_out:
            return {already_done(b), b};
        default:
            throw wrong_state(b, "stage out", "post-run");
    }
}

}  // namespace

StageResult stage_in(StateStore& store, const Config& config, std::uint64_t job_id,
                     const StageOptions& options, const std::string& who) {
    const StageStart start = start_in(store, config, job_id);
    if (start.done)
        return *start.done;
    return run_stage(store, config, start.buffer, StageDirection::in, options, who);
}

StageResult stage_out(StateStore& store, const Config& config, std::uint64_t job_id,
                      const StageOptions& options, const std::string& who) {
    const StageStart start = start_out(store, config, job_id, options);
    if (start.done)
        return *start.done;
    return run_stage(store, config, start.buffer, StageDirection::out, options, who);
}

StageResult check_stage(StateStore& store, const Config& config, std::uint64_t job_id,
                        StageDirection direction) {
    const bool in = direction == StageDirection::in;
    const StageStart start =
        in ? start_in(store, config, job_id) : start_out(store, config, job_id, StageOptions{});
    if (start.done)
        return *start.done;
    const Buffer& b = start.buffer;
    const char* phase = in ? "stage-in" : "stage-out";
    if (std::optional<ProcessId> holder = RunLock::holder(run_lock_scope(store), b.key))
        throw Error(ExitCode::temp_fail, std::string(phase) + " of " + b.key.str() +
                                             " is running: pid " + std::to_string(holder->pid) +
                                             " works on it");
    throw Error(ExitCode::data, std::string(phase) + " of " + b.key.str() +
                                    " has not run to its end: it is " + to_string(b.state) +
                                    " (bb-stage " + (in ? "in" : "out") + " runs it)");
}

void pre_run(StateStore& store, const Config& config, std::uint64_t job_id,
             const std::string& who) {
    // A scheduler that lost its saved state after the job ran (Slurm 22.05 saves its buffers
    // only every 30 s) may start the job again: it must not run without its data.
    if (const std::optional<Buffer> ended =
            ended_after(store, config, job_id, BufferState::running))
        throw Error(ExitCode::no_input,
                    job_name(job_id) + " already ran with burst buffer " + ended->key.str() +
                        ", which was torn down: it cannot run again without it (a scheduler "
                        "restarted from older state? bbkit(7), CRASHES)");
    Buffer b = live_job_buffer(store, config, job_id);
    if (b.state == BufferState::running)
        return;
    if (b.state == BufferState::allocated) {
        if (!recorded_stages(b.staging, StageDirection::in).empty())
            throw wrong_state(b, "pre-run", "staged-in (run bb-stage in first)");
        b = leave(store, config, b.key, BufferState::staged_in, who);
    }
    if (b.state != BufferState::staged_in && b.state != BufferState::pre_run)
        throw wrong_state(b, "pre-run", "staged-in");
    // Standalone mode: no scheduler hands the job its environment, so its tasks read it from
    // the pool (bb-stat env, bbkit(7) STANDALONE MODE WITH SLURM). Written before `running` is
    // recorded: a crash in between leaves pre-run, which the next pre-run finishes.
    const auto publish_environment = [&](const Buffer& now) {
        if (config.mode != Mode::standalone || now.key.kind() != BufferKind::job)
            return;
        const std::string lines = job_paths(store, config, job_id);
        ReadSnapshot snapshot(store);
        PoolDir dir = open_pool(snapshot, config, now.pool);
        const std::string key = dir.job_environment_key(now.uid, now.gid);
        dir.write_job_environment(job_environment_name(config.cluster, job_id, key), lines, now.uid,
                                  now.gid);
    };
    hooked_phase(store, config, b, BufferState::pre_run, BufferState::running, "pre_run", who,
                 publish_environment);
}

std::string post_run(StateStore& store, const Config& config, std::uint64_t job_id,
                     const std::string& who) {
    if (const std::optional<Buffer> ended =
            ended_after(store, config, job_id, BufferState::post_run))
        return ended->key.str() + " went through post-run before it was torn down";
    const Buffer b = live_job_buffer(store, config, job_id);
    if (b.state == BufferState::post_run && b.reason.empty())
        return "";
    // A scheduler restarted during stage-out runs post-run again (Slurm's datawarp plugin
    // restarts a job's stage-out from post-run): it is done.
    if (b.state == BufferState::staging_out || b.state == BufferState::staged_out)
        return b.key.str() + " is " + to_string(b.state) + ": post-run is done";
    if (b.state != BufferState::running && b.state != BufferState::post_run &&
        b.state != BufferState::staged_in)
        throw wrong_state(b, "post-run",
                          "running, or staged-in for a job that ran without pre-run");
    hooked_phase(store, config, b, BufferState::post_run, BufferState::post_run, "post_run", who);
    return "";
}

EndResult end_job(StateStore& store, const Config& config, std::uint64_t job_id,
                  const std::string& who) {
    EndResult result;
    std::optional<Buffer> b;
    {
        ReadSnapshot snapshot(store);
        b = snapshot.latest_job_buffer(config.cluster, job_id);
    }
    if (!b || is_final(b->state)) {
        result.note = job_name(job_id) +
                      (b ? "'s burst buffer is already torn down" : " has no burst buffer");
        return result;
    }
    TeardownOptions teardown;
    switch (b->state) {
        case BufferState::running:
            post_run(store, config, job_id, who);
            [[fallthrough]];
        case BufferState::post_run:
        case BufferState::staging_out:
        case BufferState::staged_out:
            result.ran = true;
            result.stage_out = stage_out(store, config, job_id, StageOptions{}, who);
            break;
        case BufferState::teardown:
        case BufferState::teardown_fail:
            break;
        default:
            teardown.hurry = true;  // the job never ran: nothing of its making is lost
            break;
    }
    const TeardownResult ended = teardown_job(store, config, job_id, teardown, who);
    result.key = ended.key;
    result.note = ended.note;
    result.reaped = ended.reaped;
    return result;
}

std::string job_paths(StateStore& store, const Config& config, std::uint64_t job_id) {
    const Buffer b = live_job_buffer(store, config, job_id);
    ReadSnapshot snapshot(store);
    return job_environment(
        b, pool_path_of(config, b),
        resolve_persistent_uses(snapshot, config, b.uid, b.user, recorded_persistent_uses(b)));
}

void write_paths_file(const std::string& path, const std::string& lines) {
    // Written in place (Slurm may have made the file), but only a new file or one of the
    // caller's that is empty or holds such lines (fsops.hpp, open_own_output).
    const OutputTarget target = output_target(path);
    Fd fd;
    if (target.existing) {
        fd = open_own_output(target, path, [](std::string_view head) {
            return head.empty() || starts_with(head, "BB_") || starts_with(head, "DW_");
        });
    } else {
        fd = Fd(openat(target.dir.get(), target.name.c_str(),
                       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
        if (!fd && errno == EEXIST)
            refuse_output(path, "it appeared while it was checked");
        if (!fd)
            throw system_error("cannot write " + path, errno);
    }
    if (ftruncate(fd.get(), 0) != 0)
        throw system_error("cannot write " + path, errno);
    const ssize_t n = pwrite(fd.get(), lines.data(), lines.size(), 0);
    if (n != static_cast<ssize_t>(lines.size()))  // short sets no errno: an I/O error
        throw system_error("cannot write " + path, n < 0 ? errno : EIO);
    if (fsync(fd.get()) != 0)
        throw system_error("cannot write " + path, errno);
}

}  // namespace bbkit
