// Controller failover (bbkit(7), STATE DIRECTORY, "Controller failover"): controllers take turns
// writing one state directory, each with root's files of its own beside its record key. Here a
// host is a Config whose record_key lies in a directory of that host's own: the key is copied
// between them, as a site copies it, and each keeps its own token.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/record_seal.hpp"
#include "bbkit/run_lock.hpp"
#include "bbkit/store.hpp"
#include "code_of.hpp"
#include "source_file.hpp"

namespace bbkit {
namespace {

StoreOptions reading() {
    StoreOptions o;
    o.read_only = true;
    return o;
}

StoreOptions taking_over(bool tolerate_foreign_schema = false) {
    StoreOptions o;
    o.takes_over = true;
    o.tolerate_foreign_schema = tolerate_foreign_schema;
    return o;
}

class ControllerTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "only root holds a record key and a controller token";
        char pattern[] = "/tmp/bbkit-controller-XXXXXX";
        ASSERT_NE(mkdtemp(pattern), nullptr);
        root_ = pattern;
        ASSERT_EQ(chmod(root_.c_str(), 0755), 0);  // the state owner reaches its directory
        for (const char* host : {"a", "b"}) {
            ASSERT_EQ(mkdir((root_ + "/" + host).c_str(), 0700), 0);
            Config config;
            config.state_dir = root_ + "/state";
            config.record_key = root_ + "/" + host + "/record.key";
            config.state_owner = "nobody";  // root checks the seals, as on a site with SlurmUser
            config.timeouts.takeover = 0;   // a refusal at once, unless a test waits
            hosts_[host] = config;
        }
        { StateStore first(hosts_["a"]); }  // makes state.db and host a's key
        share_key();
    }
    void TearDown() override {
        if (!root_.empty())
            std::system(("rm -rf '" + root_ + "'").c_str());
    }

    // Host b gets host a's key, as every controller needs.
    void share_key() {
        std::ifstream in(hosts_["a"].record_key);
        const std::string key((std::istreambuf_iterator<char>(in)), {});
        write_file_atomically(hosts_["b"].record_key, key, 0400);
    }

    // One write, as a command's transaction: a buffer for job `job`.
    static void write_job(StateStore& store, std::uint64_t job) {
        WriteTransaction txn(store, "test");
        txn.put_pool({"nvme", "/bb/nvme", "uuid-1", false});
        Buffer b = Buffer::for_key(BufferKey::job("main", job, 1));
        b.state = BufferState::allocating;
        b.pool = "nvme";
        b.requested_bytes = b.allocated_bytes = 1024;
        b.uid = b.gid = 1000;
        b.user = "alice";
        txn.insert_buffer(b);
        txn.commit();
    }

    std::size_t buffers() {
        StateStore store(hosts_["a"], reading());
        ReadSnapshot snapshot(store);
        return snapshot.list_buffers().size();
    }

    Takeover take_over(const std::string& host) {
        StateStore store(hosts_[host], taking_over());
        return store.take_over("bb-pool takeover");
    }

    std::string root_;
    std::map<std::string, Config> hosts_;
};

TEST_F(ControllerTest, without_a_claim_every_host_writes_and_nothing_waits) {
    StateStore a(hosts_["a"]);
    StateStore b(hosts_["b"]);
    write_job(a, 1);
    write_job(b, 2);
    EXPECT_EQ(buffers(), 2u);
    const ClaimStatus status = b.claim_status();
    EXPECT_FALSE(status.claim);
    EXPECT_TRUE(status.holds);
}

TEST_F(ControllerTest, a_takeover_fences_every_process_of_the_other_host) {
    const Takeover first = take_over("a");
    EXPECT_TRUE(first.changed);
    EXPECT_FALSE(first.before);
    EXPECT_EQ(first.now.epoch, 1);
    StateStore a(hosts_["a"]);
    write_job(a, 1);
    // A writing command of host b does not even open the state (it would touch nothing).
    std::string why;
    EXPECT_EQ(code_of([&] { StateStore b(hosts_["b"]); }, &why), ExitCode::unavailable);
    EXPECT_NE(why.find("this host does not hold state directory"), std::string::npos) << why;
    EXPECT_NE(why.find("epoch 1"), std::string::npos) << why;
    StateStore reader(hosts_["b"], reading());  // a standby reads
    {
        ReadSnapshot snapshot(reader);
        EXPECT_EQ(snapshot.list_buffers().size(), 1u);
    }

    const Takeover second = take_over("b");
    ASSERT_TRUE(second.before);
    EXPECT_EQ(second.before->epoch, 1);
    EXPECT_EQ(second.now.epoch, 2);
    // Host a's process began while a held the claim: refused at once, whatever it writes.
    const auto started = std::chrono::steady_clock::now();
    EXPECT_EQ(code_of([&] { write_job(a, 3); }, &why), ExitCode::unavailable);
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(1));
    EXPECT_NE(why.find("began while this host held"), std::string::npos) << why;
    StateStore b(hosts_["b"]);
    write_job(b, 4);
    EXPECT_EQ(buffers(), 2u);  // jobs 1 and 4; nothing of the refused attempts
}

// A process that began before any claim, on the host that then takes the state directory
// over, goes on writing under the new claim; one of the other host is refused.
TEST_F(ControllerTest, processes_from_before_the_first_claim_follow_their_host) {
    StateStore a(hosts_["a"]);
    StateStore b(hosts_["b"]);
    take_over("a");
    write_job(a, 1);
    EXPECT_EQ(code_of([&] { write_job(b, 2); }), ExitCode::unavailable);
    EXPECT_EQ(buffers(), 1u);
}

TEST_F(ControllerTest, a_former_primary_that_comes_back_writes_nothing_of_its_old_term) {
    take_over("a");
    StateStore old_term(hosts_["a"]);
    write_job(old_term, 1);
    take_over("b");
    const Takeover again = take_over("a");  // a is Slurm's primary again: a new term
    EXPECT_EQ(again.now.epoch, 3);
    EXPECT_EQ(code_of([&] { write_job(old_term, 2); }), ExitCode::unavailable);
    StateStore new_term(hosts_["a"]);
    write_job(new_term, 3);
    EXPECT_EQ(buffers(), 2u);
}

// Run locks follow the claim (bbkit(7), STATE DIRECTORY, "Controller failover"): a writer takes
// those of the epoch it writes under, a reader looks at the current claim's; a stager of the
// old epoch, still alive on a host cut off, holds its lock and blocks the new holder's nobody.
TEST_F(ControllerTest, run_locks_belong_to_the_claim_epoch) {
    {
        StateStore before(hosts_["a"]);
        EXPECT_FALSE(run_lock_scope(before).epoch) << "no claim: the plain lock files";
    }
    take_over("a");
    StateStore a(hosts_["a"]);
    EXPECT_EQ(run_lock_scope(a).epoch, 1);
    const BufferKey key = BufferKey::job("main", 1, 1);
    std::optional<RunLock> fenced = RunLock::try_acquire(run_lock_scope(a), key);
    ASSERT_TRUE(fenced);
    take_over("b");
    StateStore b(hosts_["b"]);
    EXPECT_EQ(run_lock_scope(b).epoch, 2);
    StateStore reader(hosts_["a"], reading());
    EXPECT_EQ(run_lock_scope(reader).epoch, 2) << "a reader looks at the current claim's locks";
    EXPECT_FALSE(RunLock::holder(run_lock_scope(b), key));
    std::optional<RunLock> lock = RunLock::try_acquire(run_lock_scope(b), key);
    ASSERT_TRUE(lock) << "the fenced holder blocks nobody";
    EXPECT_EQ(*RunLock::holder(run_lock_scope(reader), key), ProcessId::self());
    EXPECT_EQ(run_lock_scope(a).epoch, 1) << "a process of the old term keeps its own";
}

TEST_F(ControllerTest, a_takeover_by_the_holder_changes_nothing) {
    take_over("a");
    StateStore running(hosts_["a"]);  // a stage of this term, running while slurmctld restarts
    const Takeover again = take_over("a");
    EXPECT_FALSE(again.changed);
    EXPECT_EQ(again.now.epoch, 1);
    write_job(running, 1);
    EXPECT_EQ(buffers(), 1u);
}

TEST_F(ControllerTest, a_process_waiting_for_its_host_goes_on_once_the_host_takes_over) {
    take_over("a");
    hosts_["b"].timeouts.takeover = 30;
    std::optional<ExitCode> waited;
    std::thread hook([&] {
        StateStore b(hosts_["b"]);  // a recovery hook Slurm started before PrimaryOnProg
        waited = code_of([&] { write_job(b, 1); });
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT_FALSE(waited);
    take_over("b");
    hook.join();
    EXPECT_EQ(waited, ExitCode::ok);
    EXPECT_EQ(buffers(), 1u);
}

TEST_F(ControllerTest, a_released_host_writes_nothing_until_it_takes_over_again) {
    take_over("a");
    {
        StateStore a(hosts_["a"], taking_over());
        a.release_controller();
        EXPECT_FALSE(a.claim_status().holds);
        EXPECT_EQ(code_of([&] { write_job(a, 1); }), ExitCode::unavailable);
    }
    EXPECT_EQ(code_of([&] { StateStore a(hosts_["a"]); }), ExitCode::unavailable);
    EXPECT_EQ(take_over("a").now.epoch, 2);
    StateStore a(hosts_["a"]);
    write_job(a, 1);
}

TEST_F(ControllerTest, a_host_without_the_key_makes_none_where_records_are_sealed) {
    take_over("a");
    {
        StateStore a(hosts_["a"]);
        write_job(a, 1);
    }
    ASSERT_EQ(unlink(hosts_["b"].record_key.c_str()), 0);
    std::string why;
    EXPECT_EQ(code_of([&] { StateStore b(hosts_["b"]); }, &why), ExitCode::config);
    EXPECT_NE(why.find("copy the key"), std::string::npos) << why;
    struct stat st {};
    EXPECT_NE(lstat(hosts_["b"].record_key.c_str(), &st), 0) << "a key was made";
    // A key of its own (another host's, or one made by hand) matches none of the records.
    { StateStore repair(hosts_["b"], taking_over(true)); }
    ASSERT_EQ(lstat(hosts_["b"].record_key.c_str(), &st), 0);
    EXPECT_EQ(code_of([&] { take_over("b"); }, &why), ExitCode::config);
    EXPECT_NE(why.find("matches none of the records"), std::string::npos) << why;
    EXPECT_EQ(take_over("a").now.epoch, 1);  // nothing changed
}

// bb-pool check --repair of a schema root refuses: the rebuild carries the claim it can read,
// only for the host that holds it; a claim table the owner dropped is no obstacle to it.
TEST_F(ControllerTest, a_rebuild_carries_the_claim_for_its_holder_alone) {
    take_over("a");
    {
        StateStore a(hosts_["a"]);
        write_job(a, 1);
    }
    const std::string db = root_ + "/state/state.db";
    ASSERT_EQ(std::system(("sqlite3 '" + db +
                           "' 'CREATE TRIGGER forged AFTER INSERT ON pools BEGIN SELECT 1; END'")
                              .c_str()),
              0);
    // bb-pool check --repair on `host`: the records it carried.
    const auto rebuild = [&](const std::string& host) {
        StateStore store(hosts_[host], taking_over(true));
        EXPECT_FALSE(store.foreign_schema().empty());
        return store
            .rebuild_from_sealed_records({{"nvme", "/bb/nvme", "uuid-1", false}}, "bb-pool check")
            .carried;
    };
    std::string why;
    EXPECT_EQ(code_of([&] { rebuild("b"); }, &why), ExitCode::unavailable) << why;
    EXPECT_EQ(rebuild("a"), 1u);
    EXPECT_EQ(StateStore(hosts_["a"], reading()).claim_status().claim->epoch, 1);
    // The owner drops the table: the rebuild goes on, with no claim to carry.
    ASSERT_EQ(std::system(("sqlite3 '" + db + "' 'DROP TABLE controller'").c_str()), 0);
    EXPECT_EQ(rebuild("a"), 1u);
}

// The state owner's own processes cannot read root's token: they cannot take over, and where
// a claim exists they write nothing.
TEST_F(ControllerTest, only_root_takes_over_and_only_root_writes_under_a_claim) {
    const uid_t nobody = 65534;
    EXPECT_EQ(
        code_of_as(nobody, 65534,
                   [&] { StateStore(hosts_["a"], taking_over()).take_over("bb-pool takeover"); }),
        ExitCode::no_perm);
    take_over("a");
    EXPECT_EQ(code_of_as(nobody, 65534, [&] { StateStore store(hosts_["a"]); }),
              ExitCode::unavailable);
    EXPECT_EQ(buffers(), 0u);
}

// The protocol against a model, on random sequences of what controllers do: takeovers,
// releases, processes that begin and write. A write succeeds exactly when the model says the
// process's host holds the claim for it, and so at any time only one host's processes write.
TEST_F(ControllerTest, random_takeovers_and_writes_leave_one_writer_at_a_time) {
    struct Process {
        std::string host;
        std::unique_ptr<StateStore> store;
        std::optional<std::int64_t> epoch;  // the model's: the claim it writes under
    };
    std::optional<std::pair<std::int64_t, std::string>> claim;  // epoch, holder
    std::map<std::string, std::int64_t> token;
    std::vector<Process> processes;
    std::mt19937 random(20261129);
    std::uint64_t job = 0;
    std::size_t written = 0;
    const std::vector<std::string> names{"a", "b"};
    for (int step = 0; step < 300; ++step) {
        const std::string host = names[random() % 2];
        switch (random() % 5) {
            case 0: {  // bb-pool takeover
                const Takeover t = take_over(host);
                const bool holds = claim && token.count(host) && token[host] == claim->first;
                ASSERT_EQ(t.changed, !holds) << "step " << step;
                if (!holds)
                    claim = std::make_pair(claim ? claim->first + 1 : 1, host);
                token[host] = claim->first;
                ASSERT_EQ(t.now.epoch, claim->first) << "step " << step;
                break;
            }
            case 1: {  // bb-pool takeover --release
                StateStore(hosts_[host], taking_over()).release_controller();
                token.erase(host);
                break;
            }
            case 2: {  // a writing command begins: only where its host may write
                if (processes.size() >= 6)
                    processes.erase(processes.begin() + static_cast<long>(random() % 6));
                const bool holds = claim && token.count(host) && token[host] == claim->first;
                std::unique_ptr<StateStore> store;
                const ExitCode code =
                    code_of([&] { store = std::make_unique<StateStore>(hosts_[host]); });
                ASSERT_EQ(code, !claim || holds ? ExitCode::ok : ExitCode::unavailable)
                    << "step " << step << ": a command of " << host << " begins";
                if (store)
                    processes.push_back(
                        {host, std::move(store),
                         holds ? std::optional<std::int64_t>(claim->first) : std::nullopt});
                break;
            }
            default: {  // a process writes
                if (processes.empty())
                    break;
                Process& p = processes[random() % processes.size()];
                bool may = !claim;
                if (claim && p.epoch)
                    may = *p.epoch == claim->first;
                else if (claim && token.count(p.host) && token[p.host] == claim->first) {
                    p.epoch = claim->first;  // it adopts its host's new claim
                    may = true;
                }
                const ExitCode code = code_of([&] { write_job(*p.store, ++job); });
                ASSERT_EQ(code, may ? ExitCode::ok : ExitCode::unavailable)
                    << "step " << step << ": a process of " << p.host;
                if (may) {
                    ++written;
                    ASSERT_TRUE(!claim || claim->second == p.host) << "step " << step;
                }
                break;
            }
        }
    }
    processes.clear();
    EXPECT_EQ(buffers(), written);
    EXPECT_GT(written, 10u);
}

// Every write transaction of the library is fenced: the one place that opens SQLite's write
// transaction on state.db outside WriteTransaction must read the claim first. A new
// `begin(true)` in lib/ fails this test until it is listed here with what fences it.
TEST(ControllerFence, every_write_transaction_in_the_library_reads_the_claim) {
    const std::map<std::string, int> fenced = {
        // WriteTransaction, take_over, seal_every_row (in migrate, after its fence), and the
        // new file of rebuild_from_sealed_records (after its fence on the old one)
        {"store.cpp", 4},
        {"store_schema.cpp", 1},  // migrate_schema: after migrate's fence, or a new file's
    };
    std::map<std::string, int> found;
    for (const auto& entry : std::filesystem::directory_iterator(unit::source_file("lib/bbkit"))) {
        if (entry.path().extension() != ".cpp")
            continue;
        std::ifstream in(entry.path());
        const std::string text((std::istreambuf_iterator<char>(in)), {});
        const std::regex write_begin(R"(begin\(true\))");
        const auto n = std::distance(std::sregex_iterator(text.begin(), text.end(), write_begin),
                                     std::sregex_iterator());
        if (n > 0)
            found[entry.path().filename().string()] = static_cast<int>(n);
    }
    EXPECT_EQ(found, fenced);
}

}  // namespace
}  // namespace bbkit
