#include "bbkit/fault.hpp"

#ifdef BBKIT_FAULT_INJECTION
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "bbkit/text.hpp"
#endif

namespace bbkit {

#ifdef BBKIT_FAULT_INJECTION
namespace {

// One table: the driver (tests/fault/run) reads it through BBKIT_FAULT=list.
const std::vector<FaultPointInfo> point_table = {
    {"txn.before-commit", "a write transaction is about to commit (any operation; :NTH)"},
    {"output.checked",
     "an output file's name checked (free, or the caller's own file of that "
     "kind); nothing placed yet"},
    {"txn.committed", "a write transaction committed, the state lock still held (:NTH)"},
    {"alloc.queued", "alloc --wait: pending record and queue entry committed, waiting"},
    {"alloc.reserved", "record committed as allocating (or allocated reused); no directory"},
    {"dir.made", "buffer directory made; not handed to its user, nothing fsync'd"},
    {"dir.quota", "buffer directory given its project and limit; still root's, not fsync'd"},
    {"dir.owned", "buffer directory owned by its user; the parent not fsync'd"},
    {"alloc.dir-durable", "buffer directory durable; the record still allocating"},
    {"alloc.env-written", "env file written; allocated not committed"},
    {"alloc.done", "allocated committed; the alloc not yet audited or reported"},
    {"teardown.committed", "teardown/deleting committed; stager not stopped, directory in place"},
    {"teardown.locked", "stager stopped, run lock held; directory not moved"},
    {"trash.renamed", "directory renamed into trash/; neither directory fsync'd"},
    {"teardown.trashed", "moved to trash/ (and reaped in budget), durable; end not committed"},
    {"teardown.ended", "complete/deleted committed; env file kept, trash not reaped"},
    {"reap.partial", "part of a trash entry removed (:NTH)"},
    {"reap.removed", "trash entry gone; its space not released"},
    {"stage.locked", "bb-stage holds the run lock; the state not changed"},
    {"stage.entered", "staging-in/staging-out committed; mover not started"},
    {"stage.moved", "the mover succeeded; staged-in/staged-out not committed"},
    {"stage.failed", "a stage failure recorded; nothing else done"},
    {"replace.marker-written",
     "init --replace wrote the new marker; the closed records not committed"},
    {"hook.entered", "pre-run/post-run committed; the hook not run"},
    {"hook.ran", "the hook succeeded; the next state not committed"},
    {"mover.dirs-made",
     "bb-mover made (or took over) one destination directory; none of its files written (:NTH)"},
    {"mover.batch-walked",
     "bb-mover's walk queued one batch; earlier batches may be copied or finished (:NTH)"},
    {"mover.walked", "bb-mover walked every source; the last batch queued, not all copied"},
    {"mover.mid-copy", "bb-mover wrote part of a file (:NTH for later pieces)"},
    {"mover.chunk-copied",
     "bb-mover copied one chunk of a large file (a stage-in's marked on the destination) (:NTH)"},
    {"mover.file-copied",
     "bb-mover wrote one whole file (temporary name, or in a temporary directory, when "
     "durable) (:NTH)"},
    {"mover.before-syncfs", "bb-mover wrote every file of a batch; the batch not synced (:NTH)"},
    {"mover.before-renames",
     "bb-mover synced a batch; none of its temporaries renamed into place (:NTH)"},
    {"mover.renamed", "bb-mover renamed one temporary (file or new directory) into place (:NTH)"},
    {"mover.before-dir-renames",
     "a batch's temporary files renamed and links made; its complete new directory trees "
     "still under temporary names (:NTH)"},
    {"mover.before-dir-metadata",
     "a batch's files in place; modes and times of its finished directories not applied (:NTH)"},
    {"mover.batch-done", "bb-mover finished a batch: its files and directories final (:NTH)"},
    {"mover.before-dir-fsync",
     "every batch finished; the parents of the entries' destinations not fsync'd"},
    {"mover.before-summary", "the move is complete and durable; bb-stage not told"},
    {"recover.listed", "recover read the live buffers; none acted on"},
    {"recover.action", "recover finished one buffer (:NTH)"},
    {"recover.queue", "recover dropped dead waiters; env files not rebuilt"},
    {"recover.published", "recover rebuilt public/; trash not reaped"},
    {"publish.unsettled-written",
     "public/.owner/unsettled names this transaction's keys; their files not written, no commit"},
    {"quarantine.renamed", "check --repair moved an orphan into quarantine/; not fsync'd"},
    {"repair.closed", "check --repair closed a record whose directory was gone"},
    {"check.listed",
     "check read its snapshot; no finding confirmed (writes nothing: a pause point)"},
    {"takeover.before-commit", "takeover wrote the next claim; not committed"},
    {"takeover.committed", "takeover committed the claim; this host's token not written"},
};

struct Armed {
    std::string name;
    long nth = 1;
    bool stop = false;  // SIGSTOP instead of SIGKILL: a test holds the process mid-operation
};

std::optional<Armed> parse_armed() {
    const char* env = std::getenv("BBKIT_FAULT");
    if (!env || !*env || std::strcmp(env, "list") == 0)
        return std::nullopt;
    Armed a;
    a.name = env;
    if (a.name.size() > 5 && ends_with(a.name, ":stop")) {
        a.stop = true;
        a.name.erase(a.name.size() - 5);
    }
    if (const auto colon = a.name.rfind(':'); colon != std::string::npos) {
        a.nth = std::atol(a.name.c_str() + colon + 1);
        a.name.erase(colon);
    }
    if (a.nth <= 0)
        return std::nullopt;
    return a;
}

// BBKIT_FAULT=NAME[:NTH], read once (again only by fault_rearm).
std::optional<Armed>& armed_setting() {
    static std::optional<Armed> setting = parse_armed();
    return setting;
}

const Armed* armed() {
    const std::optional<Armed>& setting = armed_setting();
    return setting ? &*setting : nullptr;
}

std::atomic<long> passes{0};

bool known(const char* name) {
    for (const FaultPointInfo& point : point_table)
        if (std::strcmp(point.name, name) == 0)
            return true;
    return false;
}

}  // namespace

void fault_point(const char* name) {
    if (!known(name)) {
        const std::string message = std::string("fault point '") + name + "' is not in fault.cpp\n";
        (void)!write(STDERR_FILENO, message.data(), message.size());
        std::abort();
    }
    const Armed* a = armed();
    if (!a || a->name != name || passes.fetch_add(1) + 1 != a->nth)
        return;
    if (const char* log = std::getenv("BBKIT_FAULT_LOG"); log && *log) {
        const int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
        if (fd >= 0) {
            const std::string line = std::string(name) + "\n";
            (void)!write(fd, line.data(), line.size());
            close(fd);
        }
    }
    if (a->stop) {
        kill(getpid(), SIGSTOP);  // continues where it stopped on SIGCONT
        return;
    }
    for (;;)
        kill(getpid(), SIGKILL);
}

const std::vector<FaultPointInfo>& fault_points() {
    return point_table;
}

void fault_rearm() {
    armed_setting() = parse_armed();
    passes = 0;
}

std::map<std::string, std::string> fault_environment() {
    std::map<std::string, std::string> env;
    for (const char* key : {"BBKIT_FAULT", "BBKIT_FAULT_LOG"})
        if (const char* value = std::getenv(key))
            env[key] = value;
    return env;
}

bool fault_list_requested() {
    const char* env = std::getenv("BBKIT_FAULT");
    return env && std::strcmp(env, "list") == 0;
}

#else

const std::vector<FaultPointInfo>& fault_points() {
    static const std::vector<FaultPointInfo> none;
    return none;
}

std::map<std::string, std::string> fault_environment() {
    return {};
}

bool fault_list_requested() {
    return false;
}

void fault_rearm() {}

#endif

}  // namespace bbkit
