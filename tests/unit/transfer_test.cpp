#include "bbkit/transfer.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/process.hpp"
#include "bbkit/slurm_client.hpp"
#include "bbkit/text.hpp"

using namespace bbkit;

namespace {

constexpr uid_t nobody = 65534;

class ReportDir {
  public:
    ReportDir() {
        char pattern[] = "/tmp/bbkit-transfer-XXXXXX";
        path_ = mkdtemp(pattern);
        fd_ = Fd(open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    }
    ~ReportDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    // Appends `text` to `name`, owned by `owner`.
    void append(const std::string& name, const std::string& text, uid_t owner = getuid()) {
        std::ofstream(path_ + "/" + name, std::ios::app) << text;
        EXPECT_EQ(chown((path_ + "/" + name).c_str(), owner, static_cast<gid_t>(-1)), 0);
    }
    void truncate_to(const std::string& name, const std::string& text) {
        std::ofstream(path_ + "/" + name, std::ios::trunc) << text;
    }
    int fd() const { return fd_.get(); }
    std::string operator/(const std::string& name) const { return path_ + "/" + name; }

  private:
    std::string path_;
    Fd fd_;
};

std::string progress(std::uint64_t files, std::uint64_t total, std::uint64_t bytes) {
    return progress_line(files, total, bytes, bytes * 2) + "\n";
}

std::string summary(std::uint64_t files, std::uint64_t bytes, std::uint64_t skipped) {
    return summary_line(files, bytes, skipped, 1.5, MovePhases{}) + "\n";
}

}  // namespace

TEST(Transfer, slurms_answer_gives_state_nodes_user_and_name) {
    const TransferJobState job = parse_transfer_job(
        {"JobId=17 JobName=bbkit.main.42.1.in.0a1b UserId=alice(1001) GroupId=alice(1001) "
         "MCS_label=N/A Priority=1 JobState=RUNNING Reason=None Dependency=(null) ExitCode=0:0 "
         "Restarts=2 NodeList=x[1-3] BatchHost=x1"});
    EXPECT_TRUE(job.known);
    EXPECT_EQ(job.state, "RUNNING");
    EXPECT_EQ(job.nodes, "x[1-3]");
    EXPECT_EQ(job.uid, 1001u);
    EXPECT_EQ(job.name, "bbkit.main.42.1.in.0a1b");
    EXPECT_EQ(job.exit_code, "0:0");
    EXPECT_EQ(job.restarts, 2u);
    try {
        parse_transfer_job({"slurm_load_jobs error: Unable to contact slurm controller\x1b"});
        ADD_FAILURE() << "an answer without a JobState was taken";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ExitCode::data);
        EXPECT_EQ(std::string(e.what()).find('\x1b'), std::string::npos) << e.what();
    }
}

TEST(Transfer, the_script_runs_a_mover_per_part_then_one_to_finish) {
    const std::string one = transfer_script("/usr/lib/bbkit/bb-mover", "/usr/bin/srun", 1,
                                            StageDirection::in, "main.42.1");
    EXPECT_TRUE(starts_with(one, "#!/bin/sh\n"));
    EXPECT_NE(
        one.find("'/usr/bin/srun' --ntasks=1 --ntasks-per-node=1 --kill-on-bad-exit=0 "
                 "--output=report.$run.%t '/usr/lib/bbkit/bb-mover' --plan plan --part-of-step"),
        std::string::npos)
        << one;
    EXPECT_EQ(one.find("finish"), std::string::npos) << one;
    const std::string three =
        transfer_script("/opt/it's/bb-mover", "/usr/bin/srun", 3, StageDirection::in, "k");
    EXPECT_NE(three.find("--ntasks=3 "), std::string::npos);
    EXPECT_NE(three.find(
                  "for part in 0 1 2; do grep -q '^summary ' report.$run.$part || exit 75; done\n"),
              std::string::npos)
        << three;
    EXPECT_NE(three.find("exec '/opt/it'\\''s/bb-mover' --plan plan >report.$run.finish"),
              std::string::npos)
        << three;
}

TEST(Transfer, reports_of_every_part_sum_to_one_progress_and_one_summary) {
    ReportDir dir;
    TransferReports reports(2, 0);
    EXPECT_FALSE(reports.read(dir.fd(), getuid()));  // nothing yet
    dir.append("report.0.0", progress(1, 10, 100));
    dir.append("report.0.1", progress(2, 20, 200) + "progress 3 2");  // a line not yet ended
    EXPECT_TRUE(reports.read(dir.fd(), getuid()));
    EXPECT_EQ(reports.progress(), progress_line(3, 30, 300, 600));
    dir.append("report.0.1", "0 300 600 copying\n");
    EXPECT_TRUE(reports.read(dir.fd(), getuid()));
    EXPECT_EQ(reports.progress(), progress_line(4, 30, 400, 800));
    dir.append("report.0.0", summary(10, 200, 0));
    dir.append("report.0.1", summary(20, 600, 1));
    reports.read(dir.fd(), getuid());
    EXPECT_FALSE(reports.summary(3)) << "two parts, and the finishing mover has not reported";
    dir.append("report.0.finish", summary(0, 0, 31));
    reports.read(dir.fd(), getuid());
    const auto done = reports.summary(3);
    ASSERT_TRUE(done);
    const MoverReport r = parse_report(*done);
    EXPECT_EQ(r.kind, MoverReport::Kind::summary);
    EXPECT_EQ(r.files, 30u);
    EXPECT_EQ(r.bytes, 800u);
    EXPECT_EQ(r.skipped, 1u);  // the parts' own: what the finishing mover found is theirs
    EXPECT_FALSE(reports.error());
    EXPECT_EQ(reports.parts_text().size(), 2u);
}

TEST(Transfer, a_parts_error_is_read_and_a_requeued_jobs_run_has_reports_of_its_own) {
    ReportDir dir;
    TransferReports reports(1, 0);
    dir.append("report.0.0",
               progress(5, 9, 50) + error_line(Error(ExitCode::io, "disk gone")) + "\n");
    reports.read(dir.fd(), getuid());
    ASSERT_TRUE(reports.error());
    EXPECT_EQ(parse_report(*reports.error()).exit_code, 74);
    // A file that shrank is read again from its start.
    dir.truncate_to("report.0.0", progress(1, 9, 10));
    reports.read(dir.fd(), getuid());
    EXPECT_EQ(reports.progress(), progress_line(1, 9, 10, 20));
    // Requeued (Slurm's Restarts=1): the new run's movers write files of their own, which are
    // all that count, whatever the old run's say or however large they grew.
    TransferReports requeued(1, 1);
    EXPECT_EQ(requeued.run(), 1u);
    EXPECT_FALSE(requeued.read(dir.fd(), getuid()));
    dir.append("report.1.0", progress(2, 9, 20));
    EXPECT_TRUE(requeued.read(dir.fd(), getuid()));
    EXPECT_FALSE(requeued.error());
    EXPECT_EQ(requeued.progress(), progress_line(2, 9, 20, 40));
}

// A mover's silence is what makes bb-stage ask Slurm soon: the quietest mover still due counts
// (a part with no summary; the finishing mover once every part has one, from the last part's
// report), a mover done counts no more.
TEST(Transfer, silence_is_the_quietest_due_movers) {
    using Clock = TransferReports::Clock;
    using std::chrono::seconds;
    ReportDir dir;
    const Clock::time_point t0 = Clock::now();
    TransferReports reports(2, 0, t0);
    EXPECT_EQ(reports.silence(t0 + seconds(7)), seconds(7));  // nobody has reported
    dir.append("report.0.0", progress(1, 10, 100));
    EXPECT_TRUE(reports.read(dir.fd(), getuid(), t0 + seconds(8)));
    EXPECT_EQ(reports.silence(t0 + seconds(9)), seconds(9)) << "part 1 still silent";
    dir.append("report.0.1", progress(1, 10, 100));
    reports.read(dir.fd(), getuid(), t0 + seconds(10));
    EXPECT_EQ(reports.silence(t0 + seconds(11)), seconds(3)) << "part 0's report, at 8 s";
    dir.append("report.0.0", summary(10, 200, 0));
    reports.read(dir.fd(), getuid(), t0 + seconds(12));
    EXPECT_EQ(reports.silence(t0 + seconds(20)), seconds(10)) << "part 1, at 10 s; 0 is done";
    dir.append("report.0.1", summary(10, 200, 0));
    reports.read(dir.fd(), getuid(), t0 + seconds(21));
    EXPECT_EQ(reports.silence(t0 + seconds(24)), seconds(3)) << "the finishing mover, since 21 s";
    dir.append("report.0.finish", summary(0, 0, 20));
    reports.read(dir.fd(), getuid(), t0 + seconds(25));
    EXPECT_EQ(reports.silence(t0 + seconds(90)), Clock::duration::zero()) << "none is due";
    // One part: no finishing mover.
    TransferReports one(1, 0, t0);
    ReportDir single;
    single.append("report.0.0", summary(1, 1, 0));
    one.read(single.fd(), getuid(), t0 + seconds(1));
    EXPECT_EQ(one.silence(t0 + seconds(60)), Clock::duration::zero());
    // A report that shrank (its mover started again) grew as far as silence goes.
    TransferReports again(1, 0, t0);
    ReportDir restarted;
    restarted.append("report.0.0", progress(1, 10, 100) + progress(2, 10, 200));
    again.read(restarted.fd(), getuid(), t0 + seconds(1));
    restarted.truncate_to("report.0.0", progress(1, 10, 100));
    EXPECT_TRUE(again.read(restarted.fd(), getuid(), t0 + seconds(30)));
    EXPECT_EQ(again.silence(t0 + seconds(31)), seconds(1));
}

// Every state Slurm may answer, with every silence and report: bb-stage asks again within 5 s
// whenever the answer is in doubt (no answer, an end to confirm, a due mover silent for 5 s, a
// waiting job that something says started), every 30 s while the job waits (queued, held,
// requeued, suspended) and every 60 s while it runs with every due mover reporting.
TEST(Transfer, slurm_is_asked_soon_whenever_the_answer_is_in_doubt) {
    using std::chrono::seconds;
    const std::vector<std::string> states = {
        "PENDING",      "CONFIGURING",   "RUNNING",      "COMPLETING",    "SUSPENDED",
        "STOPPED",      "REQUEUED",      "RESIZING",     "SIGNALING",     "STAGE_OUT",
        "COMPLETED",    "CANCELLED",     "FAILED",       "TIMEOUT",       "NODE_FAIL",
        "PREEMPTED",    "BOOT_FAIL",     "DEADLINE",     "OUT_OF_MEMORY", "REVOKED",
        "SPECIAL_EXIT", "RESV_DEL_HOLD", "REQUEUE_HOLD", "REQUEUE_FED"};
    // Where none of the job's movers can run.
    const std::vector<std::string> waiting = {"PENDING",       "CONFIGURING", "REQUEUED",
                                              "REQUEUE_HOLD",  "REQUEUE_FED", "SPECIAL_EXIT",
                                              "RESV_DEL_HOLD", "SUSPENDED",   "STOPPED"};
    const std::vector<seconds> silences = {seconds(0), seconds(4), seconds(5), seconds(3600)};
    for (const std::string& state : states)
        for (const bool known : {false, true})
            for (const bool answered : {false, true})
                for (const seconds silence : silences)
                    for (const bool reported : {false, true}) {
                        TransferJobState job;
                        job.known = known;
                        job.state = state;
                        const seconds pace = slurm_ask_interval(answered, job, silence, reported);
                        const std::string what = state + (known ? "" : " (unknown)") +
                                                 (answered ? "" : ", no answer") + ", silent " +
                                                 std::to_string(silence.count()) + " s" +
                                                 (reported ? ", reported" : "");
                        EXPECT_GE(pace, seconds(5)) << what;
                        EXPECT_LE(pace, seconds(60)) << what;
                        const bool listed =
                            std::find(waiting.begin(), waiting.end(), state) != waiting.end();
                        EXPECT_EQ(slurm_job_waits(state), listed) << what;
                        const bool waits = known && listed;
                        const bool in_doubt = !answered || !known || slurm_job_ended(state) ||
                                              (!waits && silence >= seconds(5)) ||
                                              (waits && reported);
                        if (in_doubt)
                            EXPECT_EQ(pace, seconds(5)) << what;
                        else if (waits)
                            EXPECT_EQ(pace, seconds(30)) << what;
                        else
                            EXPECT_EQ(pace, seconds(60)) << what;
                    }
}

// The reports are the user's files, read by root: only a regular file of the job's user with
// one name is read; a symlink, a hard link to someone else's file, another owner's file or a
// fifo is not, and a line past 64 KiB is dropped, not kept.
// Every part reported its summary: a running job is given the grace to end by itself (Slurm
// then records it COMPLETED, not CANCELLED); a waiting one (requeued) would run again.
TEST(Transfer, after_the_summary_only_a_requeued_or_lingering_job_is_cancelled) {
    using namespace std::chrono_literals;
    const std::vector<std::string> states = {
        "PENDING",       "CONFIGURING", "REQUEUED",  "REQUEUE_HOLD", "REQUEUE_FED",  "SPECIAL_EXIT",
        "RESV_DEL_HOLD", "SUSPENDED",   "STOPPED",   "RUNNING",      "COMPLETING",   "STAGE_OUT",
        "SIGNALING",     "RESIZING",    "COMPLETED", "CANCELLED",    "FAILED",       "TIMEOUT",
        "NODE_FAIL",     "PREEMPTED",   "BOOT_FAIL", "DEADLINE",     "OUT_OF_MEMORY"};
    for (const std::string& state : states)
        for (const bool known : {false, true})
            for (const auto waited : {0s, 1s, transfer_end_grace - 1s, transfer_end_grace, 300s}) {
                TransferJobState job;
                job.known = known;
                job.state = state;
                const bool expected = known && !slurm_job_ended(state) &&
                                      (slurm_job_waits(state) || waited >= transfer_end_grace);
                EXPECT_EQ(cancel_after_summary(job, waited), expected)
                    << state << " known=" << known << " waited=" << waited.count();
            }
    TransferJobState running;
    running.known = true;
    running.state = "RUNNING";
    EXPECT_FALSE(cancel_after_summary(running, 19s));
    EXPECT_TRUE(cancel_after_summary(running, 20s));
    running.state = "REQUEUED";
    EXPECT_TRUE(cancel_after_summary(running, 0s));
    running.state = "COMPLETED";
    EXPECT_FALSE(cancel_after_summary(running, 300s));
}

TEST(Transfer, only_the_users_own_regular_reports_are_read_and_lines_are_bounded) {
    if (geteuid() != 0)
        GTEST_SKIP() << "plants files of other users: needs root";
    ReportDir dir;
    TransferReports reports(4, 0);
    // Part 0's report: a symlink to root's report-like file; part 1's: a hard link to it.
    std::ofstream(dir / "roots") << summary(1, 1, 0);
    ASSERT_EQ(symlink((dir / "roots").c_str(), (dir / "report.0.0").c_str()), 0);
    ASSERT_EQ(link((dir / "roots").c_str(), (dir / "report.0.1").c_str()), 0);
    dir.append("report.0.2", summary(1, 1, 0), 0);  // root's, not the user's
    ASSERT_EQ(mkfifo((dir / "report.0.3").c_str(), 0600), 0);
    ASSERT_EQ(chown((dir / "report.0.3").c_str(), nobody, static_cast<gid_t>(-1)), 0);
    EXPECT_FALSE(reports.read(dir.fd(), nobody));
    EXPECT_EQ(reports.progress(), progress_line(0, 0, 0, 0, StagePhase::measuring));

    ReportDir own;
    TransferReports bounded(1, 0);
    own.append("report.0.0", std::string(70000, 'x') + "\n" + progress(2, 4, 8), nobody);
    bounded.read(own.fd(), nobody);
    EXPECT_EQ(bounded.progress(), progress_line(2, 4, 8, 16));
}

TEST(Transfer, a_child_process_runs_as_the_identity_it_is_given) {
    if (geteuid() != 0)
        GTEST_SKIP() << "changes identity: needs root";
    ProcessSpec spec;
    spec.path = "/usr/bin/id";
    spec.args = {"-u"};
    spec.identity = Identity{nobody, 65534, {65534}};
    std::string out;
    spec.on_stdout_line = [&out](const std::string& line) { out += line; };
    const ProcessOutcome outcome = run_process(spec);
    EXPECT_EQ(outcome.exit_code, 0);
    EXPECT_EQ(out, "65534");
}
