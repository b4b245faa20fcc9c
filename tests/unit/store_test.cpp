#include "bbkit/store.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>

#include "bbkit/error.hpp"
#include "bbkit/sqlite.hpp"
#include "code_of.hpp"

namespace bbkit {
namespace {

[[maybe_unused]] std::string file_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), {});
}

using S = BufferState;
constexpr std::uint64_t gib = 1024ULL * 1024 * 1024;

class StateStoreTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char pattern[] = "/tmp/bbkit-store-XXXXXX";
        ASSERT_NE(mkdtemp(pattern), nullptr);
        root_ = pattern;
        config_.state_dir = root_ + "/state";
        config_.state_owner = std::to_string(geteuid());
        if (geteuid() == 0)
            config_.state_owner = "root";
    }
    void TearDown() override { std::system(("rm -rf '" + root_ + "'").c_str()); }

    StoreOptions quick(int milliseconds = 10000) {
        StoreOptions options;
        options.lock_timeout = std::chrono::milliseconds(milliseconds);
        return options;
    }

    // A store with pool "nvme" registered.
    std::unique_ptr<StateStore> open_with_pool(StoreOptions options = {}) {
        auto store = std::make_unique<StateStore>(config_, options);
        WriteTransaction txn(*store, "test");
        if (!txn.find_pool("nvme")) {
            txn.put_pool({"nvme", "/bb/nvme", "uuid-1", false});
            txn.put_pool({"ssd", "/bb/ssd", "uuid-2", false});
        }
        txn.commit();
        return store;
    }

    static Buffer job_buffer(std::uint64_t job, std::uint32_t incarnation, std::uint64_t bytes,
                             const std::string& pool = "nvme", uid_t uid = 1000) {
        Buffer b = Buffer::for_key(BufferKey::job("main", job, incarnation));
        b.pool = pool;
        b.requested_bytes = bytes;
        b.allocated_bytes = bytes;
        b.uid = uid;
        b.gid = 100;
        b.user = "alice";
        b.state = S::allocating;
        return b;
    }

    static Buffer persistent_buffer(const std::string& name, std::uint64_t bytes) {
        Buffer b = job_buffer(1, 1, bytes);
        Buffer p = Buffer::for_key(BufferKey::persistent("main", name));
        p.pool = b.pool;
        p.requested_bytes = p.allocated_bytes = bytes;
        p.uid = b.uid;
        p.gid = b.gid;
        p.user = p.owner = b.user;
        p.state = S::allocating;
        return p;
    }

    mode_t mode_of(const std::string& path) {
        struct stat st {};
        EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
        return st.st_mode & 07777;
    }

    void set_user_version(int version) {
        sqlite3* db = nullptr;
        ASSERT_EQ(sqlite3_open((config_.state_dir + "/state.db").c_str(), &db), SQLITE_OK);
        const std::string sql = "PRAGMA user_version = " + std::to_string(version);
        EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
        sqlite3_close(db);
    }

    std::string root_;
    Config config_;
};

// Runs `body` in a child process; returns its exit status. The child never returns.
int in_child(const std::function<int()>& body) {
    const pid_t pid = fork();
    if (pid == 0) {
        int status = 1;
        try {
            status = body();
        } catch (...) {
            status = 99;
        }
        _exit(status);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST_F(StateStoreTest, creates_the_layout_with_private_modes) {
    StateStore store(config_);
    EXPECT_EQ(mode_of(config_.state_dir), 0711u);
    for (const char* name : {"run", "progress", "log"})
        EXPECT_EQ(mode_of(config_.state_dir + "/" + name), 0700u) << name;
    // env/: its group (state_group) may enter and passes itself on; nobody else may.
    EXPECT_EQ(mode_of(config_.state_dir + "/env"), 02710u);
    EXPECT_EQ(mode_of(config_.state_dir + "/public"), 0755u);
    EXPECT_EQ(mode_of(config_.state_dir + "/state.db"), 0600u);
    EXPECT_EQ(mode_of(config_.state_dir + "/lock"), 0600u);
    EXPECT_EQ(store.path("env/x.env"), config_.state_dir + "/env/x.env");
}

TEST_F(StateStoreTest, a_numeric_state_group_is_a_gid) {
    config_.state_group = std::to_string(getegid());
    StateStore store(config_);
    struct stat st {};
    ASSERT_EQ(lstat((config_.state_dir + "/env").c_str(), &st), 0);
    EXPECT_EQ(st.st_gid, getegid());
}

// Beyond the largest gid, digits are a group name (which no host has), never a gid cut short:
// 4294967296 would otherwise be gid 0.
TEST_F(StateStoreTest, a_state_group_number_beyond_any_gid_is_looked_up_as_a_name) {
    config_.state_group = "4294967296";
    std::string message;
    EXPECT_EQ(code_of([&] { StateStore store(config_); }, &message), ExitCode::config);
    EXPECT_EQ(message,
              "state_group '4294967296' is not a group on this host (groupadd it, or "
              "change state_group in the configuration)");
}

TEST_F(StateStoreTest, read_only_open_of_a_missing_directory_creates_nothing) {
    StoreOptions options;
    options.read_only = true;
    try {
        StateStore store(config_, options);
        FAIL() << "opened a missing state directory";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ExitCode::no_input);
        EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos);
    }
    struct stat st {};
    EXPECT_NE(lstat(config_.state_dir.c_str(), &st), 0);
    ASSERT_EQ(mkdir(config_.state_dir.c_str(), 0711), 0);
    EXPECT_THROW(StateStore(config_, options), Error);  // no state.db either
    EXPECT_NE(lstat((config_.state_dir + "/state.db").c_str(), &st), 0);
}

TEST_F(StateStoreTest, read_only_store_reads_and_refuses_to_write) {
    { open_with_pool(); }
    StoreOptions options;
    options.read_only = true;
    StateStore store(config_, options);
    {
        ReadSnapshot snapshot(store);
        EXPECT_TRUE(snapshot.find_pool("nvme") && snapshot.find_pool("ssd"));
    }
    try {
        WriteTransaction txn(store, "test");
        FAIL() << "wrote through a read-only store";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ExitCode::software);
    }
}

TEST_F(StateStoreTest, reopening_keeps_the_data) {
    { open_with_pool(); }
    StateStore store(config_);
    ReadSnapshot snapshot(store);
    EXPECT_TRUE(snapshot.find_pool("nvme") && snapshot.find_pool("ssd"));
}

TEST_F(StateStoreTest, wal_outlives_the_connection_and_keeps_its_commits) {
    // No checkpoint at close (it would cost every process two syncs): the commits stay in the
    // WAL, and the next process reads them from there.
    { open_with_pool(); }
    struct stat st {};
    ASSERT_EQ(stat((config_.state_dir + "/state.db-wal").c_str(), &st), 0);
    EXPECT_GT(st.st_size, 0);
    StateStore store(config_);
    ReadSnapshot snapshot(store);
    EXPECT_TRUE(snapshot.find_pool("nvme") && snapshot.find_pool("ssd"));
}

// The last step of alloc and teardown commits without syncing the WAL (see Durability); the
// connection syncs again for whatever comes next, commit or rollback.
TEST_F(StateStoreTest, a_deferred_commit_is_kept_and_the_next_transaction_syncs_again) {
    auto store = open_with_pool();
    EXPECT_TRUE(store->syncs_commits());
    {
        WriteTransaction txn(*store, "test", WriteTransaction::Durability::deferred);
        EXPECT_FALSE(store->syncs_commits());
        Buffer b = job_buffer(1, 1, 1 << 20);
        txn.insert_buffer(b);
        txn.commit();
    }
    EXPECT_TRUE(store->syncs_commits());
    {
        WriteTransaction txn(*store, "test", WriteTransaction::Durability::deferred);
        Buffer b = job_buffer(2, 1, 1 << 20);
        txn.insert_buffer(b);
    }  // rolled back
    EXPECT_TRUE(store->syncs_commits());
    store.reset();
    StateStore again(config_);
    ReadSnapshot snapshot(again);
    EXPECT_TRUE(snapshot.find_buffer(BufferKey::job("main", 1, 1)));
    EXPECT_FALSE(snapshot.find_buffer(BufferKey::job("main", 2, 1)));
}

TEST_F(StateStoreTest, database_uses_wal) {
    { StateStore store(config_); }
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((config_.state_dir + "/state.db").c_str(), &db), SQLITE_OK);
    sqlite3_stmt* statement = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &statement, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(statement), SQLITE_ROW);
    EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(statement, 0)), "wal");
    sqlite3_finalize(statement);
    sqlite3_close(db);
}

// What a test build's BBKIT_TEST_SHARED_FS makes the state directory (file_system.hpp): a
// network file system, while alive.
class OnNetworkFileSystem {
  public:
    explicit OnNetworkFileSystem(const char* name = "nfs") {
        ::setenv("BBKIT_TEST_SHARED_FS", name, 1);
    }
    ~OnNetworkFileSystem() { ::unsetenv("BBKIT_TEST_SHARED_FS"); }
    OnNetworkFileSystem(const OnNetworkFileSystem&) = delete;
    OnNetworkFileSystem& operator=(const OnNetworkFileSystem&) = delete;
};

std::optional<bool> state_db_in_wal(const std::string& state_dir) {
    return sqlite::wal_header(state_dir + "/state.db", std::nullopt);
}

#ifdef BBKIT_FAULT_INJECTION
// On a network file system (bbkit(7), STATE DIRECTORY): a rollback journal, no WAL, and every
// commit synced, the deferred ones of alloc and teardown too.
TEST_F(StateStoreTest, on_a_network_file_system_the_store_uses_a_rollback_journal_synced_always) {
    const OnNetworkFileSystem nfs;
    auto store = open_with_pool();
    EXPECT_EQ(state_db_in_wal(config_.state_dir), std::optional<bool>(false));
    struct stat st {};
    EXPECT_NE(stat((config_.state_dir + "/state.db-wal").c_str(), &st), 0);
    ASSERT_EQ(stat((config_.state_dir + "/state.db-journal").c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 0);
    {
        WriteTransaction txn(*store, "test", WriteTransaction::Durability::deferred);
        EXPECT_TRUE(store->syncs_commits());
        Buffer b = job_buffer(1, 1, 1 << 20);
        txn.insert_buffer(b);
        txn.commit();
    }
    store.reset();
    StateStore again(config_, [] {
        StoreOptions o;
        o.read_only = true;
        return o;
    }());
    ReadSnapshot snapshot(again);
    EXPECT_TRUE(snapshot.find_buffer(BufferKey::job("main", 1, 1)));
}

TEST_F(StateStoreTest, state_journal_wal_on_a_network_file_system_is_refused) {
    const OnNetworkFileSystem nfs;
    config_.state_journal = StateJournal::wal;
    std::string message;
    EXPECT_EQ(code_of([&] { StateStore store(config_); }, &message), ExitCode::config);
    EXPECT_NE(message.find("network file system (nfs)"), std::string::npos) << message;
    struct stat st {};
    EXPECT_NE(stat(config_.state_dir.c_str(), &st), 0);  // nothing created
}

// A shared file system whose locks bbkit cannot judge (FUSE, BeeGFS, 9p) is refused, with
// nothing created, until the site vouches for it with state_journal = "rollback".
TEST_F(StateStoreTest, a_shared_file_system_of_unknown_locking_needs_the_sites_word) {
    for (const char* name : {"fuse", "beegfs", "9p"}) {
        const OnNetworkFileSystem shared(name);
        config_.state_journal = StateJournal::automatic;
        std::string message;
        EXPECT_EQ(code_of([&] { StateStore store(config_); }, &message), ExitCode::config) << name;
        EXPECT_NE(message.find("set state_journal = \"rollback\""), std::string::npos) << message;
        struct stat st {};
        EXPECT_NE(stat(config_.state_dir.c_str(), &st), 0) << name;  // nothing created
        config_.state_journal = StateJournal::rollback;
        { StateStore store(config_); }
        EXPECT_EQ(state_db_in_wal(config_.state_dir), std::optional<bool>(false)) << name;
        std::system(("rm -rf '" + config_.state_dir + "'").c_str());
    }
}

// A reader of a state.db on a shared file system opens it read-only (it converts nothing and
// rolls no journal back: a journal a dead writer left is the next writer's): it writes not a
// byte of state.db or its journal.
TEST_F(StateStoreTest, a_reader_on_a_shared_file_system_writes_nothing) {
    const OnNetworkFileSystem nfs;
    {
        auto store = open_with_pool();
        WriteTransaction txn(*store, "test");
        Buffer b = job_buffer(1, 1, 1 << 20);
        txn.insert_buffer(b);
        txn.commit();
    }
    const std::string db = config_.state_dir + "/state.db";
    const std::string file = file_text(db);
    const std::string journal = file_text(db + "-journal");
    struct stat before {
    }, after{};
    ASSERT_EQ(stat(db.c_str(), &before), 0);
    {
        StoreOptions reading;
        reading.read_only = true;
        StateStore reader(config_, reading);
        ReadSnapshot snapshot(reader);
        EXPECT_TRUE(snapshot.find_buffer(BufferKey::job("main", 1, 1)));
    }
    ASSERT_EQ(stat(db.c_str(), &after), 0);
    EXPECT_EQ(file_text(db), file);
    EXPECT_EQ(file_text(db + "-journal"), journal);
    EXPECT_EQ(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
}

// A state.db moved between a local disk and a network file system: a reader refuses it (it
// changes nothing), a writer converts it under the state lock, each way, and keeps every row.
TEST_F(StateStoreTest, a_state_db_moved_to_a_network_file_system_is_converted_by_a_writer) {
    open_with_pool();
    ASSERT_EQ(state_db_in_wal(config_.state_dir), std::optional<bool>(true));
    StoreOptions reading;
    reading.read_only = true;
    {
        const OnNetworkFileSystem nfs;
        std::string message;
        EXPECT_EQ(code_of([&] { StateStore store(config_, reading); }, &message), ExitCode::config);
        EXPECT_NE(message.find("WAL mode on a nfs file system"), std::string::npos) << message;
        EXPECT_NE(message.find("a writing command"), std::string::npos) << message;
        EXPECT_EQ(state_db_in_wal(config_.state_dir), std::optional<bool>(true));
        { StateStore store(config_); }
        EXPECT_EQ(state_db_in_wal(config_.state_dir), std::optional<bool>(false));
        struct stat st {};
        EXPECT_NE(stat((config_.state_dir + "/state.db-wal").c_str(), &st), 0);
        StateStore store(config_, reading);
        ReadSnapshot snapshot(store);
        EXPECT_TRUE(snapshot.find_pool("nvme") && snapshot.find_pool("ssd"));
    }
    EXPECT_EQ(code_of([&] { StateStore store(config_, reading); }), ExitCode::config);
    { StateStore store(config_); }
    EXPECT_EQ(state_db_in_wal(config_.state_dir), std::optional<bool>(true));
    StateStore store(config_, reading);
    ReadSnapshot snapshot(store);
    EXPECT_TRUE(snapshot.find_pool("nvme") && snapshot.find_pool("ssd"));
}
#endif

// state_journal = "rollback" on a local disk: for a shared file system bbkit does not know.
TEST_F(StateStoreTest, state_journal_rollback_uses_a_rollback_journal_on_a_local_disk) {
    config_.state_journal = StateJournal::rollback;
    open_with_pool();
    EXPECT_EQ(state_db_in_wal(config_.state_dir), std::optional<bool>(false));
}

TEST_F(StateStoreTest, refuses_a_state_dir_others_can_read) {
    ASSERT_EQ(mkdir(config_.state_dir.c_str(), 0700), 0);
    ASSERT_EQ(chmod(config_.state_dir.c_str(), 0755), 0);
    std::string message;
    EXPECT_EQ(code_of([&] { StateStore store(config_); }, &message), ExitCode::no_perm);
    EXPECT_NE(message.find(config_.state_dir), std::string::npos) << message;
    EXPECT_NE(message.find("0755"), std::string::npos) << message;
    EXPECT_NE(message.find("chmod 0711"), std::string::npos) << message;
}

TEST_F(StateStoreTest, accepts_search_permission_for_public) {
    ASSERT_EQ(mkdir(config_.state_dir.c_str(), 0700), 0);
    ASSERT_EQ(chmod(config_.state_dir.c_str(), 0711), 0);
    EXPECT_NO_THROW(StateStore store(config_));
}

TEST_F(StateStoreTest, refuses_a_state_dir_owned_by_someone_else) {
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root to chown";
    ASSERT_EQ(mkdir(config_.state_dir.c_str(), 0700), 0);
    ASSERT_EQ(chown(config_.state_dir.c_str(), 65534, 65534), 0);
    std::string message;
    EXPECT_EQ(code_of([&] { StateStore store(config_); }, &message), ExitCode::no_perm);
    EXPECT_NE(message.find("owned by uid 65534"), std::string::npos) << message;
    EXPECT_NE(message.find("chown root " + config_.state_dir), std::string::npos) << message;
}

TEST_F(StateStoreTest, missing_parent_is_a_config_error) {
    config_.state_dir = root_ + "/no/such/state";
    std::string message;
    EXPECT_EQ(code_of([&] { StateStore store(config_); }, &message), ExitCode::config);
    EXPECT_NE(message.find(config_.state_dir), std::string::npos) << message;
}

// bbkit(7), EXIT STATUS: a failed call while a writing command sets up the state directory is
// 78 whatever its errno, for root and a non-root state owner (nobody here) alike.
TEST_F(StateStoreTest, a_state_directory_its_owner_cannot_set_up_is_a_configuration_error) {
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root to become the state owner";
    ASSERT_EQ(chmod(root_.c_str(), 0711), 0);
    config_.state_owner = "65534";
    { StateStore store(config_); }  // root sets it up for its owner
    std::string message;
    config_.state_group = "1";  // a group nobody is not in: env/ cannot be given to it (EPERM)
    EXPECT_EQ(code_of_as(
                  65534, 65534, [&] { StateStore store(config_); }, &message),
              ExitCode::config);
    EXPECT_EQ(message,
              "cannot give " + config_.state_dir + "/env to group 1: Operation not permitted");
    config_.state_group.clear();
    ASSERT_EQ(chown((config_.state_dir + "/lock").c_str(), 0, 0), 0);  // EACCES
    EXPECT_EQ(code_of_as(
                  65534, 65534, [&] { StateStore store(config_); }, &message),
              ExitCode::config);
    EXPECT_EQ(message, "cannot open " + config_.state_dir +
                           "/lock: Permission denied (check the state directory's owner and mode)");
}

// A reading command sets nothing up: its failed call gives the errno's code (bbkit(7), EXIT
// STATUS), here 77 for a state directory its owner may not reach.
TEST_F(StateStoreTest, a_reading_commands_failed_call_gives_its_errnos_code) {
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root to become the state owner";
    config_.state_owner = "65534";
    StoreOptions options;
    options.read_only = true;
    std::string message;
    EXPECT_EQ(code_of_as(
                  65534, 65534, [&] { StateStore store(config_, options); }, &message),
              ExitCode::no_perm);
    EXPECT_EQ(message,
              "cannot inspect state directory " + config_.state_dir + ": Permission denied");
}

TEST_F(StateStoreTest, refuses_a_newer_schema) {
    { StateStore store(config_); }
    set_user_version(state_schema_version() + 41);
    std::string message;
    EXPECT_EQ(code_of([&] { StateStore store(config_); }, &message), ExitCode::config);
    EXPECT_EQ(message, "state.db has schema version " +
                           std::to_string(state_schema_version() + 41) +
                           " but this bbkit knows only up to " +
                           std::to_string(state_schema_version()) + " (upgrade bbkit)");
}

TEST_F(StateStoreTest, corrupt_database_is_an_error_not_a_crash) {
    ASSERT_EQ(mkdir(config_.state_dir.c_str(), 0700), 0);
    {
        std::ofstream garbage(config_.state_dir + "/state.db");
        for (int i = 0; i < 2000; ++i)
            garbage << "this is not a database " << i << "\n";
    }
    std::string message;
    EXPECT_EQ(code_of([&] { StateStore store(config_); }, &message), ExitCode::config);
    EXPECT_NE(message.find(config_.state_dir + "/state.db"), std::string::npos) << message;
    EXPECT_NE(message.find("backup"), std::string::npos) << message;
}

TEST_F(StateStoreTest, database_overwritten_with_garbage_is_an_error) {
    { open_with_pool(); }
    unlink((config_.state_dir + "/state.db-wal").c_str());
    unlink((config_.state_dir + "/state.db-shm").c_str());
    {
        std::ofstream garbage(config_.state_dir + "/state.db", std::ios::trunc);
        garbage << std::string(8192, '\x5a');
    }
    EXPECT_EQ(code_of([&] { StateStore store(config_); }), ExitCode::config);
}

TEST_F(StateStoreTest, buffer_round_trips_every_field) {
    auto store = open_with_pool();
    Buffer b = job_buffer(42, 1, 200 * gib);
    b.requested_bytes = 150 * gib;
    b.reason = "BurstBufferOperation";
    b.message = "allocating";
    b.access = "striped";
    b.type = "scratch";
    b.staging = R"({"stage_in":[{"source":"/a b","destination":"x"}]})";
    b.run_lock_holder = ProcessId{1234, 5678};
    {
        WriteTransaction txn(*store, "bb-pool alloc");
        txn.insert_buffer(b);
        txn.commit();
    }
    ReadSnapshot snapshot(*store);
    const Buffer got = snapshot.get_buffer(b.key);
    EXPECT_EQ(got.key, b.key);
    EXPECT_EQ(got.pool, "nvme");
    EXPECT_EQ(got.requested_bytes, 150 * gib);
    EXPECT_EQ(got.allocated_bytes, 200 * gib);
    EXPECT_EQ(got.uid, 1000u);
    EXPECT_EQ(got.gid, 100u);
    EXPECT_EQ(got.user, "alice");
    EXPECT_EQ(got.state, S::allocating);
    EXPECT_EQ(got.reason, "BurstBufferOperation");
    EXPECT_EQ(got.message, "allocating");
    EXPECT_EQ(got.directory, b.directory);
    EXPECT_EQ(got.directory.rfind("job/main.42.1.", 0), 0u) << got.directory;
    EXPECT_EQ(got.access, "striped");
    EXPECT_EQ(got.type, "scratch");
    EXPECT_EQ(got.staging, b.staging);
    EXPECT_EQ(got.created, b.created);
    ASSERT_EQ(got.entered.count(S::allocating), 1u);
    EXPECT_EQ(got.entered.at(S::allocating), b.created);
    ASSERT_TRUE(got.run_lock_holder.has_value());
    EXPECT_EQ(*got.run_lock_holder, (ProcessId{1234, 5678}));
    EXPECT_FALSE(got.expires.has_value());
    EXPECT_FALSE(got.reaped);
}

TEST_F(StateStoreTest, persistent_buffer_round_trips_and_can_be_recreated_after_deletion) {
    auto store = open_with_pool();
    Buffer p = Buffer::for_key(BufferKey::persistent("main", "alpha"));
    p.pool = "ssd";
    p.allocated_bytes = p.requested_bytes = gib;
    p.owner = "alice";
    p.expires = TimePoint(std::chrono::seconds(2000000000));
    p.use_count = 3;
    {
        WriteTransaction txn(*store, "bb-pool alloc");
        txn.insert_buffer(p);
        txn.transition(p.key, S::allocated);
        Buffer again = p;
        EXPECT_EQ(code_of([&] { txn.insert_buffer(again); }), ExitCode::exists);
        txn.commit();
    }
    {
        ReadSnapshot snapshot(*store);
        const Buffer got = snapshot.get_buffer(p.key);
        EXPECT_EQ(got.directory.rfind("persistent/main.alpha.", 0), 0u) << got.directory;
        EXPECT_EQ(got.owner, "alice");
        EXPECT_EQ(got.expires, p.expires);
        EXPECT_EQ(got.use_count, 3u);
        EXPECT_EQ(got.state, S::allocated);
    }
    {
        WriteTransaction txn(*store, "bb-teardown");
        txn.transition(p.key, S::deleting);
        txn.transition(p.key, S::deleted);
        Buffer again = p;
        again.allocated_bytes = 2 * gib;
        txn.insert_buffer(again);
        EXPECT_EQ(txn.get_buffer(p.key).allocated_bytes, 2 * gib);
        EXPECT_EQ(txn.get_buffer(p.key).state, S::allocating);
        txn.commit();
    }
}

TEST_F(StateStoreTest, duplicate_job_key_is_refused) {
    auto store = open_with_pool();
    WriteTransaction txn(*store, "test");
    Buffer b = job_buffer(1, 1, gib);
    txn.insert_buffer(b);
    std::string message;
    EXPECT_EQ(code_of([&] { txn.insert_buffer(b); }, &message), ExitCode::exists);
    EXPECT_NE(message.find("main.1.1"), std::string::npos) << message;
}

TEST_F(StateStoreTest, unknown_pool_or_buffer_is_no_input) {
    auto store = open_with_pool();
    WriteTransaction txn(*store, "test");
    Buffer b = job_buffer(1, 1, gib, "nosuch");
    std::string message;
    EXPECT_EQ(code_of([&] { txn.insert_buffer(b); }, &message), ExitCode::no_input);
    EXPECT_NE(message.find("bb-pool init nosuch"), std::string::npos) << message;
    EXPECT_EQ(code_of([&] { txn.get_buffer(BufferKey::job("main", 5, 1)); }), ExitCode::no_input);
    EXPECT_EQ(code_of([&] { txn.transition(BufferKey::job("main", 5, 1), S::allocated); }),
              ExitCode::no_input);
    EXPECT_EQ(code_of([&] { txn.set_draining("nosuch", true); }), ExitCode::no_input);
}

TEST_F(StateStoreTest, new_buffers_start_pending_or_allocating) {
    auto store = open_with_pool();
    WriteTransaction txn(*store, "test");
    Buffer b = job_buffer(1, 1, gib);
    b.state = S::allocated;
    EXPECT_EQ(code_of([&] { txn.insert_buffer(b); }), ExitCode::software);
    b.state = S::pending;
    EXPECT_NO_THROW(txn.insert_buffer(b));
}

TEST_F(StateStoreTest, illegal_transition_is_refused_and_changes_nothing) {
    auto store = open_with_pool();
    WriteTransaction txn(*store, "test");
    Buffer b = job_buffer(7, 1, gib);
    txn.insert_buffer(b);
    std::string message;
    EXPECT_EQ(code_of([&] { txn.transition(b.key, S::running); }, &message), ExitCode::data);
    EXPECT_NE(message.find("buffer main.7.1 is allocating, cannot become running"),
              std::string::npos)
        << message;
    EXPECT_EQ(txn.get_buffer(b.key).state, S::allocating);
    EXPECT_EQ(txn.history(b.key).size(), 1u);
}

TEST_F(StateStoreTest, transitions_record_time_reason_and_history) {
    auto store = open_with_pool();
    Buffer b = job_buffer(8, 1, gib);
    {
        WriteTransaction txn(*store, "bb-pool alloc");
        txn.insert_buffer(b);
        txn.transition(b.key, S::allocated);
        txn.commit();
    }
    {
        WriteTransaction txn(*store, "bb-stage in");
        const Buffer got =
            txn.transition(b.key, S::staging_in, "BurstBufferStageIn", "copying 3 files");
        EXPECT_EQ(got.state, S::staging_in);
        txn.commit();
    }
    ReadSnapshot snapshot(*store);
    const Buffer got = snapshot.get_buffer(b.key);
    EXPECT_EQ(got.reason, "BurstBufferStageIn");
    EXPECT_EQ(got.message, "copying 3 files");
    ASSERT_EQ(got.entered.size(), 3u);
    EXPECT_LE(got.entered.at(S::allocating), got.entered.at(S::allocated));
    EXPECT_LE(got.entered.at(S::allocated), got.entered.at(S::staging_in));
    const auto history = snapshot.history(b.key);
    ASSERT_EQ(history.size(), 3u);
    EXPECT_FALSE(history[0].from.has_value());
    EXPECT_EQ(history[0].to, S::allocating);
    EXPECT_EQ(history[1].from, S::allocating);
    EXPECT_EQ(history[1].to, S::allocated);
    EXPECT_EQ(history[1].who, "bb-pool alloc");
    EXPECT_EQ(history[2].who, "bb-stage in");
    EXPECT_EQ(history[2].reason, "BurstBufferStageIn");
}

TEST_F(StateStoreTest, update_cannot_change_the_state) {
    auto store = open_with_pool();
    WriteTransaction txn(*store, "test");
    Buffer b = job_buffer(9, 1, gib);
    txn.insert_buffer(b);
    b.use_count = 5;
    b.message = "hello";
    b.run_lock_holder = ProcessId::self();
    txn.update_buffer(b);
    const Buffer got = txn.get_buffer(b.key);
    EXPECT_EQ(got.message, "hello");
    EXPECT_EQ(got.run_lock_holder, ProcessId::self());
    b.run_lock_holder.reset();
    txn.update_buffer(b);
    EXPECT_FALSE(txn.get_buffer(b.key).run_lock_holder.has_value());
    b.state = S::allocated;
    EXPECT_EQ(code_of([&] { txn.update_buffer(b); }), ExitCode::software);
}

TEST_F(StateStoreTest, run_lock_holder_is_set_and_cleared_on_the_newest_row_only) {
    auto store = open_with_pool();
    WriteTransaction txn(*store, "test");
    Buffer old = persistent_buffer("scratch", gib);
    txn.insert_buffer(old);
    txn.transition(old.key, S::allocated);
    txn.transition(old.key, S::deleting);
    txn.transition(old.key, S::deleted);
    Buffer b = persistent_buffer("scratch", 2 * gib);  // the name again: a new row
    b.message = "kept";
    txn.insert_buffer(b);
    txn.set_run_lock_holder(b.key, ProcessId::self());
    Buffer got = txn.get_buffer(b.key);
    EXPECT_EQ(got.run_lock_holder, ProcessId::self());
    EXPECT_EQ(got.message, "kept");
    EXPECT_EQ(got.allocated_bytes, 2 * gib);
    EXPECT_EQ(got.state, S::allocating);
    EXPECT_TRUE(txn.touched_keys().count(b.key.str()));
    txn.set_run_lock_holder(b.key, std::nullopt);
    EXPECT_FALSE(txn.get_buffer(b.key).run_lock_holder.has_value());
    EXPECT_EQ(
        code_of([&] { txn.set_run_lock_holder(BufferKey::job("main", 77, 1), ProcessId::self()); }),
        ExitCode::no_input);
    EXPECT_EQ(txn.used_bytes("nvme"), 2 * gib);
}

TEST_F(StateStoreTest, latest_job_buffer_is_the_highest_incarnation) {
    auto store = open_with_pool();
    WriteTransaction txn(*store, "test");
    EXPECT_FALSE(txn.latest_job_buffer("main", 5).has_value());
    for (std::uint32_t incarnation : {1u, 2u, 3u}) {
        Buffer b = job_buffer(5, incarnation, gib);
        txn.insert_buffer(b);
        txn.transition(b.key, S::complete);
    }
    Buffer other = job_buffer(6, 1, gib);
    txn.insert_buffer(other);
    EXPECT_EQ(txn.latest_job_buffer("main", 5)->key, BufferKey::job("main", 5, 3));
    EXPECT_FALSE(txn.latest_job_buffer("other", 5).has_value());
}

TEST_F(StateStoreTest, rollback_on_exception_leaves_nothing) {
    auto store = open_with_pool(quick(0));
    const Buffer b = job_buffer(10, 1, gib);
    try {
        WriteTransaction txn(*store, "test");
        Buffer copy = b;
        txn.insert_buffer(copy);
        txn.set_draining("nvme", true);
        txn.enqueue("nvme", parse_buffer_key("main.11.1"), gib, ProcessId::self());
        throw std::runtime_error("crash between steps");
    } catch (const std::runtime_error&) {
    }
    // The lock was released too: a writer with no patience at all gets it.
    WriteTransaction txn(*store, "test");
    EXPECT_FALSE(txn.find_buffer(b.key).has_value());
    EXPECT_TRUE(txn.history(b.key).empty());
    EXPECT_FALSE(txn.find_pool("nvme")->draining);
    EXPECT_EQ(txn.queue_length("nvme"), 0u);
}

TEST_F(StateStoreTest, one_transaction_at_a_time) {
    auto store = open_with_pool();
    ReadSnapshot snapshot(*store);
    EXPECT_EQ(code_of([&] { WriteTransaction txn(*store, "test"); }), ExitCode::software);
    EXPECT_EQ(code_of([&] { ReadSnapshot again(*store); }), ExitCode::software);
}

TEST_F(StateStoreTest, used_bytes_follow_the_states_that_hold_space) {
    auto store = open_with_pool();
    WriteTransaction txn(*store, "test");
    Buffer other = job_buffer(99, 1, 5 * gib, "ssd");
    txn.insert_buffer(other);
    Buffer b = job_buffer(20, 1, 3 * gib);
    b.state = S::pending;
    txn.insert_buffer(b);
    const std::vector<S> path = {S::pending,     S::allocating, S::allocated, S::staging_in,
                                 S::staged_in,   S::pre_run,    S::running,   S::post_run,
                                 S::staging_out, S::staged_out, S::teardown,  S::teardown_fail,
                                 S::teardown,    S::complete};
    for (std::size_t i = 0; i < path.size(); ++i) {
        if (i > 0)
            txn.transition(b.key, path[i]);
        const std::uint64_t expected = holds_space(path[i]) ? 3 * gib : 0;
        EXPECT_EQ(txn.used_bytes("nvme"), expected) << to_string(path[i]);
        EXPECT_EQ(txn.summed_used_bytes("nvme"), expected) << to_string(path[i]);
        EXPECT_EQ(txn.used_bytes_of_user(1000), expected + 5 * gib) << to_string(path[i]);
    }
    EXPECT_EQ(txn.used_bytes("ssd"), 5 * gib);
    // Torn down but still in trash/: charged as trash until reaped.
    EXPECT_EQ(txn.trash_bytes("nvme"), 3 * gib);
    txn.mark_reaped(b.key);
    EXPECT_EQ(txn.trash_bytes("nvme"), 0u);
    EXPECT_EQ(code_of([&] { txn.mark_reaped(other.key); }), ExitCode::data);
}

TEST_F(StateStoreTest, used_bytes_sum_many_buffers_per_pool) {
    auto store = open_with_pool();
    WriteTransaction txn(*store, "test");
    for (std::uint64_t job = 1; job <= 30; ++job) {
        Buffer b = job_buffer(job, 1, job * gib, job % 2 ? "nvme" : "ssd");
        txn.insert_buffer(b);
        if (job % 3 == 0)
            txn.transition(b.key, S::complete);  // rolled back: holds nothing
    }
    std::uint64_t nvme = 0;
    std::uint64_t ssd = 0;
    for (std::uint64_t job = 1; job <= 30; ++job)
        if (job % 3 != 0)
            (job % 2 ? nvme : ssd) += job * gib;
    EXPECT_EQ(txn.used_bytes("nvme"), nvme);
    EXPECT_EQ(txn.used_bytes("ssd"), ssd);
    EXPECT_EQ(txn.used_bytes("none"), 0u);
    EXPECT_EQ(txn.list_buffers({}).size(), 30u);
    BufferFilter live;
    live.live_only = true;
    EXPECT_EQ(txn.list_buffers(live).size(), 20u);
    live.pool = "nvme";
    EXPECT_EQ(txn.list_buffers(live).size(), 10u);
    BufferFilter by_state;
    by_state.state = S::complete;
    EXPECT_EQ(txn.list_buffers(by_state).size(), 10u);
    BufferFilter by_user;
    by_user.uid = 1000;
    EXPECT_EQ(txn.list_buffers(by_user).size(), 30u);
    by_user.uid = 1001;
    EXPECT_TRUE(txn.list_buffers(by_user).empty());
    EXPECT_EQ(txn.count_by_state()[S::complete], 10u);
    EXPECT_EQ(txn.count_by_state()[S::allocating], 20u);
}

TEST_F(StateStoreTest, incarnations_increase) {
    auto store = open_with_pool();
    WriteTransaction txn(*store, "test");
    EXPECT_EQ(txn.next_incarnation("main", 42), 1u);
    EXPECT_FALSE(txn.latest_job_buffer("main", 42).has_value());
    for (std::uint32_t expected = 1; expected <= 3; ++expected) {
        ASSERT_EQ(txn.next_incarnation("main", 42), expected);
        Buffer b = job_buffer(42, expected, gib);
        txn.insert_buffer(b);
        txn.transition(b.key, S::complete);
    }
    EXPECT_EQ(txn.next_incarnation("main", 42), 4u);
    EXPECT_EQ(txn.latest_job_buffer("main", 42)->key.incarnation, 3u);
    EXPECT_EQ(txn.next_incarnation("other", 42), 1u);  // clusters sharing a state dir
    EXPECT_EQ(txn.next_incarnation("main", 43), 1u);
}

TEST_F(StateStoreTest, pools_register_and_drain) {
    auto store = open_with_pool();
    {
        WriteTransaction txn(*store, "bb-pool drain");
        txn.set_draining("nvme", true);
        txn.put_pool({"nvme", "/bb/nvme2", "uuid-9", false});  // keeps the draining flag
        txn.commit();
    }
    ReadSnapshot snapshot(*store);
    const auto pool = snapshot.find_pool("nvme");
    ASSERT_TRUE(pool.has_value());
    EXPECT_TRUE(pool->draining);
    EXPECT_EQ(pool->path, "/bb/nvme2");
    EXPECT_EQ(pool->uuid, "uuid-9");
    EXPECT_FALSE(snapshot.find_pool("nope").has_value());
    EXPECT_EQ(snapshot.find_pool("ssd")->path, "/bb/ssd");
}

TEST_F(StateStoreTest, queue_is_fifo_per_pool) {
    auto store = open_with_pool();
    WriteTransaction txn(*store, "test");
    const ProcessId me = ProcessId::self();
    txn.enqueue("nvme", parse_buffer_key("main.1.1"), gib, me);
    txn.enqueue("ssd", parse_buffer_key("main.2.1"), gib, me);
    txn.enqueue("nvme", parse_buffer_key("main.3.1"), 2 * gib, me);
    txn.enqueue("nvme", parse_buffer_key("main.4.1"), 3 * gib, me);
    EXPECT_EQ(code_of([&] { txn.enqueue("nvme", parse_buffer_key("main.3.1"), gib, me); }),
              ExitCode::exists);
    EXPECT_EQ(code_of([&] { txn.enqueue("nope", parse_buffer_key("main.9.1"), gib, me); }),
              ExitCode::no_input);
    EXPECT_EQ(txn.queue_length("nvme"), 3u);
    EXPECT_EQ(txn.queue_position(parse_buffer_key("main.1.1")), 1u);
    EXPECT_EQ(txn.queue_position(parse_buffer_key("main.2.1")), 1u);
    EXPECT_EQ(txn.queue_position(parse_buffer_key("main.4.1")), 3u);
    EXPECT_FALSE(txn.queue_position(parse_buffer_key("main.9.1")).has_value());
    EXPECT_EQ(txn.queue_head("nvme")->key, "main.1.1");
    EXPECT_TRUE(txn.dequeue(parse_buffer_key("main.1.1")));
    EXPECT_FALSE(txn.dequeue(parse_buffer_key("main.1.1")));
    EXPECT_EQ(txn.queue_head("nvme")->key, "main.3.1");
    EXPECT_EQ(txn.queue_head("nvme")->requested_bytes, 2 * gib);
    EXPECT_EQ(txn.queue_head("nvme")->waiter, me);
    EXPECT_EQ(txn.queue_position(parse_buffer_key("main.4.1")), 2u);
    const auto entries = txn.queue("nvme");
    ASSERT_EQ(entries.size(), 2u);
    EXPECT_LT(entries[0].seq, entries[1].seq);
}

TEST_F(StateStoreTest, dead_waiters_leave_the_queue) {
    auto store = open_with_pool();
    WriteTransaction txn(*store, "test");
    txn.enqueue("nvme", parse_buffer_key("main.1.1"), gib, ProcessId::self());
    // The same pid with another start time is a different (reused-pid) process.
    txn.enqueue("nvme", parse_buffer_key("main.2.1"), gib,
                ProcessId{getpid(), ProcessId::self().start_time + 1});
    const pid_t child = fork();
    if (child == 0)
        _exit(0);
    waitpid(child, nullptr, 0);
    txn.enqueue("nvme", parse_buffer_key("main.3.1"), gib, ProcessId{child, 12345});
    const auto dropped = txn.drop_dead_waiters();
    ASSERT_EQ(dropped.size(), 2u);
    EXPECT_EQ(dropped[0].key, "main.2.1");
    EXPECT_EQ(dropped[1].key, "main.3.1");
    EXPECT_EQ(txn.queue_length("nvme"), 1u);
}

// A child holds the write lock until the parent lets it go.
class LockHolder {
  public:
    explicit LockHolder(const Config& config) {
        int ready[2];
        int release[2];
        if (pipe(ready) != 0 || pipe(release) != 0)
            std::abort();
        pid_ = fork();
        if (pid_ == 0) {
            close(ready[0]);
            close(release[1]);
            int status = 0;
            try {
                StateStore store(config);
                WriteTransaction txn(store, "bb-pool alloc");
                Buffer b = Buffer::for_key(BufferKey::job("main", 500, 1));
                b.pool = "nvme";
                txn.insert_buffer(b);  // uncommitted: readers must not see it
                char c = 'r';
                if (write(ready[1], &c, 1) != 1)
                    status = 2;
                if (read(release[0], &c, 1) < 0)
                    status = 3;
            } catch (...) {
                status = 1;
            }
            _exit(status);
        }
        close(ready[1]);
        close(release[0]);
        release_ = release[1];
        char c = 0;
        ready_ = read(ready[0], &c, 1) == 1;
        close(ready[0]);
    }
    ~LockHolder() { finish(); }
    int finish() {
        if (pid_ <= 0)
            return status_;
        close(release_);
        int status = 0;
        waitpid(pid_, &status, 0);
        pid_ = -1;
        status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
        return status_;
    }
    bool ready() const { return ready_; }
    pid_t pid() const { return pid_; }

  private:
    pid_t pid_ = -1;
    int release_ = -1;
    bool ready_ = false;
    int status_ = 0;
};

TEST_F(StateStoreTest, lock_timeout_names_the_holder) {
    { open_with_pool(); }
    LockHolder holder(config_);
    ASSERT_TRUE(holder.ready());
    StateStore store(config_, quick(300));
    const auto start = std::chrono::steady_clock::now();
    std::string message;
    EXPECT_EQ(code_of([&] { WriteTransaction txn(store, "bb-teardown"); }, &message),
              ExitCode::temp_fail);
    const auto waited = std::chrono::steady_clock::now() - start;
    EXPECT_GE(waited, std::chrono::milliseconds(300));
    EXPECT_LT(waited, std::chrono::seconds(3));
    EXPECT_NE(message.find("state directory " + config_.state_dir + " is locked by pid " +
                           std::to_string(holder.pid()) + " (bb-pool alloc) since "),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("retry later"), std::string::npos) << message;
    EXPECT_EQ(holder.finish(), 0);
    EXPECT_NO_THROW(WriteTransaction txn(store, "bb-teardown"));
}

TEST_F(StateStoreTest, lock_record_is_rewritten_in_place_and_blank_once_released) {
    auto store = open_with_pool();
    const std::string lock = config_.state_dir + "/lock";
    const auto contents = [&] {
        std::ifstream in(lock);
        return std::string(std::istreambuf_iterator<char>(in), {});
    };
    {
        WriteTransaction txn(*store, "bb-pool alloc");
        const std::string record = contents();
        EXPECT_EQ(record.size(), 256u);
        EXPECT_EQ(record.rfind(std::to_string(getpid()) + " ", 0), 0u) << record;
        EXPECT_NE(record.find(" bb-pool alloc "), std::string::npos) << record;
        txn.commit();
    }
    EXPECT_EQ(contents(), std::string(255, ' ') + "\n");
    // Locked by a process that has not written its record yet: no stale name is given.
    const int other = open(lock.c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(other, 0);
    ASSERT_EQ(flock(other, LOCK_EX), 0);
    StateStore waiting(config_, quick(100));
    std::string message;
    EXPECT_EQ(code_of([&] { WriteTransaction txn(waiting, "bb-teardown"); }, &message),
              ExitCode::temp_fail);
    EXPECT_NE(message.find(" is locked by another process: gave up after "), std::string::npos)
        << message;
    close(other);
}

TEST_F(StateStoreTest, reader_works_while_a_writer_holds_the_lock) {
    {
        auto store = open_with_pool();
        WriteTransaction txn(*store, "test");
        Buffer b = job_buffer(1, 1, gib);
        txn.insert_buffer(b);
        txn.commit();
    }
    LockHolder holder(config_);
    ASSERT_TRUE(holder.ready());
    StateStore store(config_, quick(0));
    {
        ReadSnapshot snapshot(store);
        EXPECT_EQ(snapshot.list_buffers().size(), 1u);  // committed data, not the child's insert
        EXPECT_EQ(snapshot.used_bytes("nvme"), gib);
        EXPECT_FALSE(snapshot.find_buffer(BufferKey::job("main", 500, 1)).has_value());
    }
    EXPECT_EQ(holder.finish(), 0);
    ReadSnapshot snapshot(store);
    EXPECT_FALSE(snapshot.find_buffer(BufferKey::job("main", 500, 1)).has_value());  // rolled back
}

TEST_F(StateStoreTest, snapshot_does_not_see_later_commits) {
    auto store = open_with_pool();
    ReadSnapshot snapshot(*store);
    EXPECT_EQ(in_child([&] {
                  StateStore other(config_);
                  WriteTransaction txn(other, "test");
                  Buffer b = job_buffer(77, 1, gib);
                  txn.insert_buffer(b);
                  txn.commit();
                  return 0;
              }),
              0);
    EXPECT_FALSE(snapshot.find_buffer(BufferKey::job("main", 77, 1)).has_value());
}

TEST_F(StateStoreTest, concurrent_writers_never_lose_an_update) {
    constexpr int writers = 8;
    constexpr int rounds = 40;
    {
        auto store = open_with_pool();
        WriteTransaction txn(*store, "test");
        Buffer counter = Buffer::for_key(BufferKey::persistent("main", "counter"));
        counter.pool = "nvme";
        txn.insert_buffer(counter);
        txn.commit();
    }
    std::vector<pid_t> children;
    for (int w = 0; w < writers; ++w) {
        const pid_t pid = fork();
        if (pid == 0) {
            int status = 0;
            try {
                // This test is about lost updates, not waits: 320 fsync'd commits queue on
                // one lock, which can take longer than the default wait under a sanitizer.
                StateStore store(config_, StoreOptions{std::chrono::minutes(5)});
                const BufferKey counter = BufferKey::persistent("main", "counter");
                for (int i = 0; i < rounds; ++i) {
                    WriteTransaction txn(store, "writer " + std::to_string(w));
                    Buffer b = txn.get_buffer(counter);  // read-modify-write
                    b.use_count += 1;
                    txn.update_buffer(b);
                    // Every writer adds incarnations of the same job: a lost update would
                    // reuse one and fail on the unique key.
                    Buffer job = job_buffer(1000, txn.next_incarnation("main", 1000), 1);
                    txn.insert_buffer(job);
                    txn.commit();
                }
            } catch (const std::exception& e) {
                fprintf(stderr, "writer %d: %s\n", w, e.what());
                status = 1;
            }
            _exit(status);
        }
        children.push_back(pid);
    }
    for (pid_t pid : children) {
        int status = 0;
        waitpid(pid, &status, 0);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    StateStore store(config_);
    ReadSnapshot snapshot(store);
    EXPECT_EQ(snapshot.get_buffer(BufferKey::persistent("main", "counter")).use_count,
              static_cast<std::uint32_t>(writers * rounds));
    EXPECT_EQ(snapshot.next_incarnation("main", 1000),
              static_cast<std::uint32_t>(writers * rounds + 1));
    EXPECT_EQ(snapshot.used_bytes("nvme"), static_cast<std::uint64_t>(writers * rounds));
}

TEST_F(StateStoreTest, hot_queries_use_indexes) {
    { open_with_pool(); }
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((config_.state_dir + "/state.db").c_str(), &db), SQLITE_OK);
    const auto plan = [&](const std::string& sql) {
        sqlite3_stmt* statement = nullptr;
        EXPECT_EQ(
            sqlite3_prepare_v2(db, ("EXPLAIN QUERY PLAN " + sql).c_str(), -1, &statement, nullptr),
            SQLITE_OK)
            << sqlite3_errmsg(db);
        std::string text;
        while (sqlite3_step(statement) == SQLITE_ROW)
            text += std::string(reinterpret_cast<const char*>(sqlite3_column_text(statement, 3))) +
                    "; ";
        sqlite3_finalize(statement);
        return text;
    };
    const std::vector<std::string> queries = {
        "SELECT SUM(allocated_bytes) FROM buffers WHERE pool = 'x' AND state IN ('allocated', "
        "'running')",
        "SELECT SUM(allocated_bytes) FROM buffers WHERE pool = 'x' AND reaped = 0 AND state IN "
        "('complete', 'deleted')",
        "SELECT MAX(incarnation) FROM buffers WHERE cluster = 'main' AND job_id = 4",
        "SELECT * FROM buffers WHERE key = 'main.4.1' ORDER BY id DESC LIMIT 1",
        "SELECT * FROM buffers WHERE state = 'running'",
    };
    for (const std::string& sql : queries) {
        const std::string text = plan(sql);
        EXPECT_EQ(text.find("SCAN"), std::string::npos) << sql << "\n" << text;
    }
    // Trash per pool reads only unreaped rows, never the history of complete ones.
    const std::string trash = plan(
        "SELECT SUM(allocated_bytes) FROM buffers INDEXED BY buffers_trash WHERE pool = 'x' AND "
        "reaped = 0 AND state IN ('complete', 'deleted')");
    EXPECT_NE(trash.find("buffers_trash"), std::string::npos) << trash;
    // Persistent space per pool reads only persistent rows (a covering partial index).
    const std::string persistent = plan(
        "SELECT SUM(allocated_bytes) FROM buffers WHERE pool = 'x' AND name IS NOT NULL AND "
        "state IN ('allocated', 'deleting')");
    EXPECT_NE(persistent.find("buffers_persistent"), std::string::npos) << persistent;
    sqlite3_close(db);
}

}  // namespace
}  // namespace bbkit

namespace bbkit {
namespace {

// Schema 3 fills pool_usage from the rows a schema-2 state.db already holds; schema 4 drops its
// triggers (and fills it again), and every insert, state change and resize keeps it from then on.
TEST_F(StateStoreTest, migrations_3_and_4_fill_pool_usage_and_writes_keep_it) {
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root: only root migrates a database from before seals";
    {
        auto store = open_with_pool();
        WriteTransaction txn(*store, "test");
        Buffer a = job_buffer(1, 1, 2 * gib);
        txn.insert_buffer(a);
        Buffer done = job_buffer(2, 1, 7 * gib);
        txn.insert_buffer(done);
        txn.transition(done.key, S::teardown);
        txn.transition(done.key, S::complete);
        txn.commit();
    }
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((config_.state_dir + "/state.db").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(
                  db,
                  "DROP INDEX buffers_held; DROP TABLE stage_runs; ALTER TABLE buffers DROP COLUMN "
                  "held_since;"
                  " ALTER TABLE buffers DROP COLUMN ended; "
                  "DROP TABLE pool_usage; ALTER TABLE buffers DROP COLUMN failure;"
                  " ALTER TABLE buffers DROP COLUMN failed; ALTER TABLE buffers DROP COLUMN seal;"
                  " ALTER TABLE buffers DROP COLUMN temp_token; DROP TABLE controller; PRAGMA "
                  "user_version = 2",
                  nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
    StateStore store(config_);
    ASSERT_EQ(sqlite3_open((config_.state_dir + "/state.db").c_str(), &db), SQLITE_OK);
    sqlite3_stmt* triggers = nullptr;
    sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger'", -1,
                       &triggers, nullptr);
    ASSERT_EQ(sqlite3_step(triggers), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int(triggers, 0), 0);
    sqlite3_finalize(triggers);
    sqlite3_close(db);
    WriteTransaction txn(store, "test");
    EXPECT_EQ(txn.used_bytes("nvme"), 2 * gib);
    Buffer b = job_buffer(3, 1, 3 * gib);
    txn.insert_buffer(b);
    EXPECT_EQ(txn.used_bytes("nvme"), 5 * gib);
    b = txn.get_buffer(b.key);
    b.allocated_bytes = 4 * gib;
    txn.update_buffer(b);
    EXPECT_EQ(txn.used_bytes("nvme"), 6 * gib);
    EXPECT_EQ(txn.summed_used_bytes("nvme"), 6 * gib);
    txn.transition(b.key, S::teardown);
    txn.transition(b.key, S::complete);
    EXPECT_EQ(txn.used_bytes("nvme"), 2 * gib);
}

// Every write keeps each pool's figure equal to the sum of its rows: a queued request holds
// nothing until alloc takes it, a resize or a move between pools counts where the space is.
TEST_F(StateStoreTest, used_bytes_follow_every_write_of_a_row) {
    auto store = open_with_pool();
    WriteTransaction txn(*store, "test");
    const auto expect = [&](std::uint64_t nvme, std::uint64_t ssd) {
        EXPECT_EQ(txn.used_bytes("nvme"), nvme);
        EXPECT_EQ(txn.used_bytes("ssd"), ssd);
        EXPECT_EQ(txn.summed_used_bytes("nvme"), nvme);
        EXPECT_EQ(txn.summed_used_bytes("ssd"), ssd);
    };
    Buffer b = job_buffer(1, 1, 3 * gib);
    b.state = S::pending;
    txn.insert_buffer(b);
    expect(0, 0);
    b = txn.get_buffer(b.key);
    b.allocated_bytes = 4 * gib;
    b.pool = "ssd";
    txn.update_buffer(b);
    expect(0, 0);
    txn.transition(b.key, S::allocating);
    expect(0, 4 * gib);
    b = txn.get_buffer(b.key);
    b.pool = "nvme";
    txn.update_buffer(b);
    expect(4 * gib, 0);
    b.allocated_bytes = 1 * gib;
    txn.update_buffer(b);
    expect(1 * gib, 0);
    txn.transition(b.key, S::allocated);
    txn.transition(b.key, S::teardown);
    expect(1 * gib, 0);
    txn.transition(b.key, S::complete);
    expect(0, 0);
    txn.commit();
}

}  // namespace
}  // namespace bbkit
