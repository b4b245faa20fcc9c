#include "bbkit/transfer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>
#include <thread>

#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/pool.hpp"
#include "bbkit/pool_dir.hpp"
#include "bbkit/seal.hpp"
#include "bbkit/size.hpp"
#include "bbkit/slurm_client.hpp"
#include "bbkit/slurm_release.hpp"
#include "bbkit/text.hpp"

namespace bbkit {
namespace {

constexpr auto report_poll = std::chrono::milliseconds(500);
// slurm_ask_interval's three paces.
constexpr auto slurm_poll = std::chrono::seconds(5);
constexpr auto pending_poll = std::chrono::seconds(30);
constexpr auto reporting_poll = std::chrono::seconds(60);
constexpr std::size_t max_report_line = 64 * 1024;
constexpr std::size_t max_read_per_poll = 1 << 20;
// A run's reports (TransferReports): report.RUN.PART and report.RUN.finish.
std::string report_name(unsigned run, const std::string& part) {
    return "report." + std::to_string(run) + "." + part;
}

// The latest run whose reports are in `dir` (a job Slurm no longer knows): the first run with
// no part 0 ends the search.
unsigned latest_run(int dir) {
    unsigned run = 0;
    struct stat st {};
    while (run < 10000 &&
           fstatat(dir, report_name(run + 1, "0").c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
        ++run;
    return run;
}

// A stage's progress lines from the reports, and what the job's end makes of them.
ProcessOutcome failed_outcome(const std::string& why) {
    ProcessOutcome outcome;
    outcome.exit_code = static_cast<int>(ExitCode::software);
    outcome.last_stderr_line = why;
    return outcome;
}

TransferJobState ask_slurm(std::uint64_t job_id) {
    SlurmCall call;
    call.args = {"--oneliner", "show", "job", std::to_string(job_id)};
    const SlurmOutput out = run_slurm("scontrol", call);
    if (out.outcome.exit_code != 0) {
        if (out.outcome.last_stderr_line.find("Invalid job id") != std::string::npos)
            return TransferJobState{};
        throw Error(ExitCode::unavailable, slurm_failure("scontrol", out.outcome));
    }
    return parse_transfer_job(out.lines);
}

// The id of the user's job named `name` that Slurm still lists, if any (a job submitted by a
// stager that died before it recorded the id).
std::optional<std::uint64_t> find_named_job(const std::string& name, uid_t uid) {
    SlurmCall call;
    call.args = {"--noheader", "--states=all", "--name=" + name, "--user=" + std::to_string(uid),
                 "--format=%i"};
    const SlurmOutput out = run_slurm("squeue", call);
    if (out.outcome.exit_code != 0)
        throw Error(ExitCode::unavailable, slurm_failure("squeue", out.outcome));
    for (const std::string& line : out.lines)
        if (const std::optional<std::uint64_t> id = parse_decimal(trim(line)))
            return id;
    return std::nullopt;
}

void cancel_job(std::uint64_t job_id) {
    SlurmCall call;
    call.args = {std::to_string(job_id)};
    const SlurmOutput out = run_slurm("scancel", call);
    if (out.outcome.exit_code != 0 &&
        out.outcome.last_stderr_line.find("Invalid job id") == std::string::npos)
        throw Error(ExitCode::unavailable, slurm_failure("scancel", out.outcome));
}

bool still_running(const TransferJobState& job) {
    return job.known && !slurm_job_ended(job.state);
}

// How many answers in a row (slurm_poll apart: slurm_ask_interval) must say a job ended before
// it is believed. A job whose node failed (or that was preempted, or whose node did not boot)
// shows that state until Slurm requeues it (--requeue), which may take a while: a minute of
// it. Any other end twice, so that one answer caught between two states decides nothing.
unsigned answers_to_believe(const TransferJobState& job) {
    const bool requeued_from =
        job.state == "NODE_FAIL" || job.state == "PREEMPTED" || job.state == "BOOT_FAIL";
    return requeued_from ? 12 : 2;
}

// Slurm's answer about the recorded id, when it is about the recorded job: its name and user.
// A controller that lost its state may have given the id to another job since, which bbkit
// neither waits for nor cancels.
TransferJobState ask_about(const TransferRecord& record, uid_t uid) {
    TransferJobState job = ask_slurm(record.job_id);
    if (job.known && (job.name != transfer_job_name(record.directory) || job.uid != uid))
        return TransferJobState{};
    return job;
}

void record_transfer(StateStore& store, const BufferKey& key,
                     const std::optional<TransferRecord>& transfer, const std::string& who) {
    WriteTransaction txn(store, who);
    Buffer now = txn.get_buffer(key);
    now.staging = with_transfer(now.staging, transfer);
    txn.update_buffer(now);
    txn.commit();
}

PoolDir pool_dir_of(StateStore& store, const Config& config, const Buffer& b) {
    ReadSnapshot snapshot(store);
    return open_pool(snapshot, config, b.pool);
}

// Slurm's --time in minutes, rounded up: the stage's own timeout bounds the job too.
std::string minutes(std::chrono::seconds timeout) {
    return std::to_string(std::max<std::int64_t>(1, (timeout.count() + 59) / 60));
}

std::uint64_t submit(const PoolConfig& pool, const std::optional<SlurmRelease>& release,
                     const Buffer& b, const User& user, const std::string& directory_path,
                     const std::string& name, std::uint32_t parts, const std::string& script,
                     std::chrono::seconds timeout) {
    SlurmCall call;
    call.identity = identity_of(user);
    call.stdin_data = script;
    call.args = {"--parsable",
                 "--job-name=" + name,
                 "--partition=" + pool.transfer_partition,
                 "--nodes=" + std::to_string(parts),
                 "--ntasks=" + std::to_string(parts),
                 "--ntasks-per-node=1",
                 "--time=" + minutes(timeout),
                 "--chdir=" + directory_path,
                 "--output=" + directory_path + "/batch.out",
                 "--export=" + empty_export(release),
                 "--requeue",
                 "--comment=bbkit transfer of " + b.key.str()};
    const SlurmOutput out = run_slurm("sbatch", call);
    if (out.outcome.exit_code != 0)
        throw Error(ExitCode::unavailable, "cannot submit the transfer job of " + b.key.str() +
                                               " as user '" + user.name + "' to partition '" +
                                               pool.transfer_partition +
                                               "': " + slurm_failure("sbatch", out.outcome));
    // "ID" or "ID;CLUSTER"
    const std::string first = out.lines.empty() ? "" : out.lines.front();
    const std::optional<std::uint64_t> id = parse_decimal(first.substr(0, first.find(';')));
    if (!id)
        throw Error(ExitCode::unavailable,
                    "sbatch printed '" + first + "' where a job id was expected");
    return *id;
}

}  // namespace

TransferJobState parse_transfer_job(const std::vector<std::string>& lines) {
    TransferJobState job;
    std::string text;
    for (const std::string& line : lines)
        text += line + " ";
    std::istringstream words(text);
    for (std::string word; words >> word;) {
        const auto eq = word.find('=');
        if (eq == std::string::npos)
            continue;
        const std::string key = word.substr(0, eq), value = word.substr(eq + 1);
        if (key == "JobState")
            job.state = value;
        else if (key == "NodeList")
            job.nodes = value;
        else if (key == "ExitCode")
            job.exit_code = value;
        else if (key == "JobName")
            job.name = value;
        else if (key == "Restarts")
            job.restarts = static_cast<unsigned>(parse_decimal(value).value_or(0));
        else if (key == "UserId") {  // name(uid)
            const auto open = value.find('(');
            const auto close = value.find(')', open == std::string::npos ? 0 : open);
            if (open != std::string::npos && close != std::string::npos)
                job.uid = parse_decimal(value.substr(open + 1, close - open - 1)).value_or(0);
        }
    }
    if (job.state.empty())
        throw Error(ExitCode::data,
                    "cannot read Slurm's answer about the transfer job: no "
                    "JobState in '" +
                        printable(text.substr(0, 200)) + "'");
    job.known = true;
    return job;
}

std::chrono::seconds slurm_ask_interval(bool answered, const TransferJobState& job,
                                        std::chrono::steady_clock::duration silence,
                                        bool reported) {
    if (!answered || !still_running(job))
        return slurm_poll;
    if (slurm_job_waits(job.state))
        return reported ? slurm_poll : pending_poll;
    return silence < slurm_poll ? reporting_poll : slurm_poll;
}

bool cancel_after_summary(const TransferJobState& job, std::chrono::steady_clock::duration waited) {
    return still_running(job) && (slurm_job_waits(job.state) || waited >= transfer_end_grace);
}

std::string transfer_job_name(const std::string& directory) {
    return "bbkit." + directory;
}

std::string transfer_script(const std::string& mover, const std::string& srun, std::uint32_t parts,
                            StageDirection direction, const std::string& key) {
    // Every word is bbkit's own: the key and the programs' paths hold no shell character
    // (buffer keys are names, the paths are root's installations), and are quoted all the same.
    std::string script =
        "#!/bin/sh\n# bbkit: the stage-" + std::string(to_string(direction)) + " of " + key +
        " on transfer nodes (bbkit(7), STAGING ON TRANSFER NODES)\n"
        "PATH=/usr/sbin:/usr/bin:/sbin:/bin; export PATH  # --export=NIL (NONE): none\n"
        "# A requeued job's run writes reports of its own (TransferReports).\n"
        "run=${SLURM_RESTART_COUNT:-0}\n";
    script += shell_quoted(srun) + " --ntasks=" + std::to_string(parts) +
              " --ntasks-per-node=1 --kill-on-bad-exit=0 --output=report.$run.%t " +
              shell_quoted(mover) + " --plan plan --part-of-step || exit $?\n";
    if (parts > 1) {
        // srun may end well although a node of the step failed: the finishing mover runs only
        // once every part reported its summary (it would otherwise copy the rest alone).
        std::string list;
        for (std::uint32_t part = 0; part < parts; ++part)
            list += " " + std::to_string(part);
        script +=
            "for part in" + list + "; do grep -q '^summary ' report.$run.$part || exit 75; done\n";
        script += "exec " + shell_quoted(mover) + " --plan plan >report.$run.finish\n";
    }
    return script;
}

TransferReports::TransferReports(std::uint32_t parts, unsigned run, Clock::time_point since)
    : run_(run), parts_(parts) {
    for (Part& part : parts_)
        part.grew = since;
    finish_.grew = since;
}

bool TransferReports::read_one(int dir, const std::string& name, uid_t uid, Part& part,
                               Clock::time_point now) {
    const Fd fd(openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd)
        return false;  // not there yet (or not a file the user may plant: a symlink)
    struct stat st {};
    // The user's own report only: a hard link to a file of someone else's is not read.
    if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != uid || st.st_nlink != 1)
        return false;
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (size < part.offset) {  // a requeued job's movers started their reports again
        part = Part{};
        part.grew = now;
    }
    if (size == part.offset)
        return false;
    std::string chunk(std::min<std::uint64_t>(size - part.offset, max_read_per_poll), '\0');
    const ssize_t n = pread(fd.get(), chunk.data(), chunk.size(), static_cast<off_t>(part.offset));
    if (n <= 0)
        return false;
    chunk.resize(static_cast<std::size_t>(n));
    part.offset += static_cast<std::uint64_t>(n);
    part.grew = now;
    for (char c : chunk) {
        if (c != '\n') {
            if (part.partial.size() < max_report_line)
                part.partial += c;
            else
                part.overlong = true;
            continue;
        }
        const std::string line = std::move(part.partial);
        part.partial.clear();
        if (std::exchange(part.overlong, false))
            continue;
        const MoverReport r = parse_report(line);
        if (r.kind == MoverReport::Kind::progress)
            part.progress = r;
        else if (r.kind == MoverReport::Kind::summary)
            part.summary = r;
        else if (r.kind == MoverReport::Kind::error && !part.error)
            part.error = line;
    }
    return true;
}

bool TransferReports::read(int dir, uid_t uid, Clock::time_point now) {
    bool changed = false;
    for (std::uint32_t i = 0; i < parts_.size(); ++i)
        changed =
            read_one(dir, report_name(run_, std::to_string(i)), uid, parts_[i], now) || changed;
    if (parts_.size() > 1)
        changed = read_one(dir, report_name(run_, "finish"), uid, finish_, now) || changed;
    return changed;
}

TransferReports::Clock::duration TransferReports::silence(Clock::time_point now) const {
    Clock::time_point quietest = now, last_part = finish_.grew;
    bool parts_done = true;
    for (const Part& p : parts_) {
        last_part = std::max(last_part, p.grew);
        if (!p.summary) {
            parts_done = false;
            quietest = std::min(quietest, p.grew);
        }
    }
    if (parts_done && parts_.size() > 1 && !finish_.summary)
        quietest = std::min(quietest, std::max(finish_.grew, last_part));
    return std::max(Clock::duration::zero(), now - quietest);
}

std::string TransferReports::progress() const {
    std::uint64_t files_done = 0, files_total = 0, bytes_done = 0, bytes_total = 0;
    bool measuring = true, syncing = false;
    for (const Part& p : parts_) {
        if (p.summary) {
            files_done += p.summary->files + p.summary->skipped;
            files_total += p.summary->files + p.summary->skipped;
            bytes_done += p.summary->bytes;
            bytes_total += p.summary->bytes;
            measuring = false;
            continue;
        }
        if (!p.progress)
            continue;
        files_done += p.progress->files_done;
        files_total += p.progress->files_total;
        bytes_done += p.progress->bytes_done;
        bytes_total += p.progress->bytes_total;
        measuring = measuring && p.progress->phase == StagePhase::measuring;
        syncing = syncing || p.progress->phase == StagePhase::syncing;
    }
    return progress_line(files_done, files_total, bytes_done, bytes_total,
                         syncing     ? StagePhase::syncing
                         : measuring ? StagePhase::measuring
                                     : StagePhase::copying);
}

std::optional<std::string> TransferReports::summary(double seconds) const {
    std::uint64_t files = 0, bytes = 0, skipped = 0;
    MovePhases phases;
    for (const Part& p : parts_) {
        if (!p.summary)
            return std::nullopt;
        files += p.summary->files;
        bytes += p.summary->bytes;
        skipped += p.summary->skipped;
        if (p.summary->phases)
            phases.append(*p.summary->phases);
    }
    if (parts_.size() > 1 && !finish_.summary)
        return std::nullopt;
    if (finish_.summary && finish_.summary->phases)
        phases.append(*finish_.summary->phases);
    phases.seconds = seconds;
    return summary_line(files, bytes, skipped, seconds, phases);
}

std::optional<std::string> TransferReports::error() const {
    for (const Part& p : parts_)
        if (p.error)
            return p.error;
    return finish_.error;
}

std::vector<std::string> TransferReports::parts_text() const {
    std::vector<std::string> lines;
    for (std::size_t i = 0; i < parts_.size(); ++i) {
        const Part& p = parts_[i];
        std::string text = "part " + std::to_string(i) + ": ";
        if (p.error)
            text += "failed";
        else if (p.summary)
            text += "done, " + std::to_string(p.summary->files) + " files, " +
                    format_size(p.summary->bytes);
        else if (p.progress)
            text += std::to_string(p.progress->files_done) + "/" +
                    std::to_string(p.progress->files_total) + " files, " +
                    format_size(p.progress->bytes_done) + " of " +
                    format_size(p.progress->bytes_total);
        else
            text += "not started";
        lines.push_back(text);
    }
    return lines;
}

TransferRunner::TransferRunner(StateStore& store, const Config& config, Buffer b, std::string mover,
                               std::string who)
    : store_(store),
      config_(config),
      buffer_(std::move(b)),
      mover_(std::move(mover)),
      who_(std::move(who)) {}

ProcessOutcome TransferRunner::run(const StagePlan& plan, std::chrono::seconds timeout,
                                   const std::function<void(const std::string&)>& on_line) const {
    const auto started = std::chrono::steady_clock::now();
    const auto deadline = started + timeout;
    const PoolConfig& pool = configured_pool(config_, buffer_.pool);
    PoolDir dir = pool_dir_of(store_, config_, buffer_);
    std::optional<TransferRecord> stored;  // the last transfer job, either direction
    {
        ReadSnapshot snapshot(store_);
        stored = recorded_transfer(snapshot.get_buffer(buffer_.key).staging);
    }
    std::optional<TransferRecord> record = stored;
    if (record && record->direction != plan.direction)
        record.reset();  // the other direction's, ended: its directory goes below
    // The recorded job, when Slurm still runs it, is the stage's: never a second one.
    TransferJobState job;
    if (record && record->job_id == 0)
        if (const auto id = find_named_job(transfer_job_name(record->directory), plan.user.uid)) {
            record->job_id = *id;
            record_transfer(store_, buffer_.key, record, who_);
        }
    if (record && record->job_id != 0)
        job = ask_about(*record, plan.user.uid);
    // Done: nothing of the job is left to find or cancel, and its directory goes (a failed
    // one's stays, with batch.out, for whoever looks into it, until the next run or teardown).
    const auto succeed = [&](const TransferRecord& done, const std::string& summary) {
        on_line(summary);
        // The directory before the record: a stager killed between the two leaves a record of
        // a job that ended and no directory, which the next run replaces, never an orphan.
        dir.remove_transfer_dir(done.directory, done.directory + ".ended", deadline);
        record_transfer(store_, buffer_.key, std::nullopt, who_);
        ProcessOutcome outcome;
        outcome.exit_code = 0;
        return outcome;
    };
    bool attach = record && still_running(job);
    if (record && !attach) {
        // Ended (or never started): its reports may already be the stage's whole answer.
        if (const Fd d = dir.open_transfer_dir(record->directory, plan.user.uid)) {
            TransferReports reports(record->parts, job.known ? job.restarts : latest_run(d.get()));
            reports.read(d.get(), plan.user.uid);
            if (const auto summary = reports.summary(0))
                return succeed(*record, *summary);
        }
    }
    if (!attach) {
        if (stored)
            dir.remove_transfer_dir(stored->directory, stored->directory + ".ended", deadline);
        TransferRecord fresh;
        fresh.direction = plan.direction;
        fresh.parts = pool.transfer_nodes;
        fresh.directory = buffer_.key.str() + "." + to_string(plan.direction) + "." + random_hex(8);
        StagePlan job_plan = plan;
        job_plan.part = 0;
        job_plan.parts = 1;  // each mover takes its part from its step task (--part-of-step)
        // The name first: a stager that dies from here on leaves a record that finds its job
        // (or its directory), never a second job or a directory nobody removes.
        record_transfer(store_, buffer_.key, fresh, who_);
        const std::string path = dir.make_transfer_dir(fresh.directory, plan_to_json(job_plan),
                                                       plan.user.uid, plan.user.gid);
        try {
            fresh.job_id = submit(pool, config_.slurm_release, buffer_, plan.user, path,
                                  transfer_job_name(fresh.directory), fresh.parts,
                                  transfer_script(mover_, slurm_program("srun"), fresh.parts,
                                                  plan.direction, buffer_.key.str()),
                                  timeout);
        } catch (const Error& e) {
            // The stage's failure, recorded on the buffer as a mover's would be (a partition
            // the user may not use, Slurm down): the record keeps the directory's name.
            ProcessOutcome refused = failed_outcome(e.what());
            refused.exit_code = static_cast<int>(e.code());
            return refused;
        }
        record_transfer(store_, buffer_.key, fresh, who_);
        record = fresh;
        job = TransferJobState{};
        job.known = true;
        job.state = "PENDING";
    }
    TransferReports reports(record->parts, job.restarts);
    // The last ask: its time, whether Slurm answered (`job` is its answer; a job just
    // submitted is asked about 5 s on, as if not), and whether a report grew since, or, while
    // the job waits, Slurm's batch.out changed: the job started (slurm_ask_interval).
    auto last_ask = std::chrono::steady_clock::now();
    bool answered = attach, reported = false;
    // batch.out's size and mtime (-1, -1: none), at the last ask.
    using Stamp = std::pair<std::int64_t, std::int64_t>;
    const auto batch_out_now = [](int d) {
        struct stat st {};
        if (fstatat(d, "batch.out", &st, AT_SYMLINK_NOFOLLOW) != 0)
            return Stamp{-1, -1};
        return Stamp{st.st_size, static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 +
                                     st.st_mtim.tv_nsec};
    };
    Stamp batch_out_then{-1, -1};
    std::string last_progress;
    unsigned ended_answers = 0;  // answers in a row that said the job ended
    // Where it runs, said whenever the job's nodes or a part's progress change (bb-stat job).
    TransferPlace place;
    std::string last_place;
    const auto tell_place = [&]() {
        place.job_id = record->job_id;
        place.nodes = job.nodes == "(null)" ? "" : job.nodes;
        place.parts = reports.parts_text();
        const std::string line = transfer_line(place);
        if (line != last_place)
            on_line(last_place = line);
    };
    tell_place();
    for (;;) {
        if (const Fd d = dir.open_transfer_dir(record->directory, plan.user.uid)) {
            if (reports.read(d.get(), plan.user.uid)) {
                reported = true;
                tell_place();
                const std::string line = reports.progress();
                if (line != last_progress)
                    on_line(last_progress = line);
            }
            if (!reported && still_running(job) && slurm_job_waits(job.state) &&
                batch_out_now(d.get()) != batch_out_then)
                reported = true;
        }
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        if (const auto summary = reports.summary(seconds)) {
            // The last answer may be a minute old: Slurm is asked again, once a second, until
            // the job has ended or cancel_after_summary says to cancel it (a requeue after its
            // last mover finished: not run twice).
            const auto summed = std::chrono::steady_clock::now();
            bool cancel = still_running(job);
            try {
                for (;;) {
                    job = ask_about(*record, plan.user.uid);
                    cancel = cancel_after_summary(job, std::chrono::steady_clock::now() - summed);
                    if (cancel || !still_running(job))
                        break;
                    std::this_thread::sleep_for(std::chrono::seconds(1));
                }
            } catch (const Error&) {
                // Slurm did not answer: as its last answer said
            }
            if (cancel)
                try {
                    cancel_job(record->job_id);
                } catch (const Error&) {
                    // it finds its directory gone and ends
                }
            return succeed(*record, *summary);
        }
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) {
            try {
                cancel_job(record->job_id);
            } catch (const Error&) {
                // bb-teardown cancels it from the record
            }
            ProcessOutcome out;
            out.timed_out = true;
            return out;
        }
        if (now - last_ask >= slurm_ask_interval(answered, job, reports.silence(now), reported)) {
            last_ask = now;
            reported = false;
            if (const Fd d = dir.open_transfer_dir(record->directory, plan.user.uid))
                batch_out_then = batch_out_now(d.get());
            bool asked = true;
            try {
                job = ask_about(*record, plan.user.uid);
            } catch (const Error&) {
                asked = false;  // slurmctld restarting: ask again, within the timeout
            }
            answered = asked;
            if (asked && job.known && job.restarts != reports.run())
                reports = TransferReports(record->parts, job.restarts, now);  // requeued: a new run
            if (asked) {
                ended_answers = still_running(job) ? 0 : ended_answers + 1;
                if (job.known)
                    tell_place();
            }
            // A part's error is the stage's once the job has ended: a job Slurm requeues (its
            // node failed) starts its movers again, and their reports with them.
            if (asked && ended_answers >= answers_to_believe(job)) {
                if (const Fd d = dir.open_transfer_dir(record->directory, plan.user.uid))
                    reports.read(d.get(), plan.user.uid);
                if (const auto summary = reports.summary(seconds))
                    return succeed(*record, *summary);
                if (const auto error = reports.error()) {
                    on_line(*error);
                    ProcessOutcome failed;
                    failed.exit_code = parse_report(*error).exit_code;
                    if (failed.exit_code == 0)
                        failed.exit_code = static_cast<int>(ExitCode::software);
                    return failed;
                }
                return failed_outcome(
                    "transfer job " + std::to_string(record->job_id) +
                    (job.known
                         ? " ended " + job.state + " (exit " + job.exit_code + ") on " + job.nodes
                         : " is gone from Slurm") +
                    " before every part reported its summary (" + dir.path() + "/" +
                    PoolDir::transfer_subdir + "/" + record->directory + ")");
            }
        }
        std::this_thread::sleep_for(report_poll);
    }
}

void end_transfer_job(PoolDir& dir, const Buffer& b, std::chrono::seconds wait) {
    std::optional<TransferRecord> record = recorded_transfer(b.staging);
    if (!record)
        return;
    const auto deadline = std::chrono::steady_clock::now() + wait;
    if (record->job_id == 0)
        record->job_id = find_named_job(transfer_job_name(record->directory), b.uid).value_or(0);
    if (record->job_id != 0) {
        TransferJobState job = ask_about(*record, b.uid);
        if (still_running(job))
            cancel_job(record->job_id);
        while (still_running(job)) {
            if (std::chrono::steady_clock::now() >= deadline)
                throw Error(ExitCode::unavailable,
                            "transfer job " + std::to_string(record->job_id) + " of " +
                                b.key.str() + " is still " + job.state +
                                " after scancel; the buffer is kept until it ends (run "
                                "bb-teardown again)");
            std::this_thread::sleep_for(std::chrono::seconds(1));
            job = ask_about(*record, b.uid);
        }
    }
    dir.remove_transfer_dir(record->directory, record->directory + ".ended", deadline);
}

}  // namespace bbkit
