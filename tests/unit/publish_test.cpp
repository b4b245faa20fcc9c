#include "bbkit/publish.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <iterator>
#include <optional>
#include <set>
#include <sstream>

#include "bbkit/error.hpp"
#include "bbkit/fsops.hpp"
#include "bbkit/seal.hpp"
#include "code_of.hpp"
#include "status_fixture.hpp"

namespace bbkit {
namespace {

using namespace fixture;

[[maybe_unused]] std::string fs_parent(const std::string& path) {  // fault-injection builds only
    return path.substr(0, path.rfind('/'));
}

// With PrivateData, the directory of `uid`'s files as they find it: through their key.
std::string own_directory(const Config& config, uid_t uid) {
    const std::string buffers = config.state_dir + "/public/buffers/";
    const std::optional<std::string> key =
        parse_user_key(read_file(buffers + public_key_name(uid)));
    EXPECT_TRUE(key) << "no key for uid " << uid;
    return buffers + public_directory_name(uid, key.value_or(""));
}

// What another user learns from stat(2) of an entry they can reach: everything but atime.
std::string stat_print(const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0)
        return path + " missing";
    std::ostringstream out;
    out << path << ' ' << st.st_ino << ' ' << std::oct << st.st_mode << std::dec << ' '
        << st.st_nlink << ' ' << st.st_uid << ' ' << st.st_size << ' ' << st.st_mtim.tv_sec << '.'
        << st.st_mtim.tv_nsec << ' ' << st.st_ctim.tv_sec << '.' << st.st_ctim.tv_nsec;
    return out.str();
}

TEST_F(StatusTest, write_transaction_records_the_keys_and_queues_it_touched) {
    config_.pools.resize(1);
    auto store = open_store();
    {
        WriteTransaction txn(*store, "test");
        EXPECT_TRUE(txn.touched_keys().empty());
        Buffer b = job(1, "pool1", kib, 1017, "marshall", t_169502);
        txn.insert_buffer(b);
        Buffer pending = job(2, "pool1", kib, 1017, "marshall", t_169504);
        pending.state = S::pending;
        txn.insert_buffer(pending);
        txn.commit();
    }
    {
        WriteTransaction txn(*store, "test");
        txn.find_buffer(BufferKey::job("main", 1, 1));  // reads touch nothing
        EXPECT_TRUE(txn.touched_keys().empty());
        Buffer b = txn.transition(BufferKey::job("main", 1, 1), S::allocated);
        b.message = "updated";
        txn.update_buffer(b);
        txn.enqueue("pool1", parse_buffer_key("main.2.1"), kib, ProcessId::self());
        EXPECT_EQ(txn.touched_keys(), (std::set<std::string>{"main.1.1", "main.2.1"}));
        EXPECT_TRUE(txn.touched_queues().empty()) << "an append moves nobody up";
        txn.commit();
    }
    {
        WriteTransaction txn(*store, "test");
        EXPECT_FALSE(txn.dequeue(parse_buffer_key("main.9.1")));  // not queued: nothing changed
        EXPECT_TRUE(txn.touched_queues().empty());
        EXPECT_TRUE(txn.dequeue(parse_buffer_key("main.2.1")));
        txn.transition(BufferKey::job("main", 1, 1), S::teardown);
        txn.transition(BufferKey::job("main", 1, 1), S::complete);
        txn.mark_reaped(BufferKey::job("main", 1, 1));
        EXPECT_EQ(txn.touched_keys(), (std::set<std::string>{"main.1.1", "main.2.1"}));
        EXPECT_EQ(txn.touched_queues(), std::set<std::string>{"pool1"});
    }
}

TEST_F(StatusTest, publish_writes_pools_json_and_one_file_per_live_buffer) {
    config_.pools.resize(1);
    auto store = open_store();
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", 100 * kib, 1017, "marshall", t_169502));
        publish(txn, *store, config_);
        txn.commit();
    }
    const std::string dir = config_.state_dir;
    EXPECT_EQ(read_file(dir + "/pools.json"),
              R"({"pools":[{"free":9900,"granularity":1024,"id":"pool1","quantity":10000}]})"
              "\n");
    EXPECT_EQ(stat_of(dir + "/pools.json").st_mode & 07777, 0644u);
    EXPECT_EQ(stat_of(dir + "/public/pools.json").st_mode & 07777, 0644u);
    EXPECT_EQ(stat_of(dir + "/public/buffers").st_mode & 07777, 0755u);
    EXPECT_EQ(stat_of(dir + "/public/buffers/1017").st_mode & 07777, 0755u);
    EXPECT_EQ(stat_of(dir + "/public/buffers/1017").st_uid, geteuid());
    EXPECT_EQ(stat_of(dir + "/public/buffers/1017/main.1.1.json").st_mode & 07777, 0644u);
    EXPECT_NE(::access((dir + "/public/buffers.json").c_str(), F_OK), 0) << "layout 1 is gone";
    // The bookkeeping is the owner's alone: its sizes and times follow every change.
    EXPECT_EQ(stat_of(dir + "/public/.owner").st_mode & 07777, 0700u);
    EXPECT_EQ(stat_of(dir + "/public/.owner/settings").st_mode & 07777, 0600u);
    EXPECT_EQ(stat_of(dir + "/public/.owner/unsettled").st_mode & 07777, 0600u);
    EXPECT_NE(::access((dir + "/public/.settings").c_str(), F_OK), 0);

    const StatusSnapshot seen = read_public_status(config_, 4242);
    ASSERT_EQ(seen.pools.size(), 1u);
    EXPECT_EQ(seen.pools[0].used, 100 * kib);
    ASSERT_EQ(seen.buffers.size(), 1u);
    EXPECT_EQ(seen.buffers[0].buffer.key.str(), "main.1.1");
    EXPECT_EQ(seen.buffers[0].buffer.created, at(t_169502));
    EXPECT_EQ(seen.buffers[0].path.rfind(root_ + "/bb/pool1/job/main.1.1.", 0), 0u)
        << seen.buffers[0].path;
    EXPECT_EQ(seen.counts.at(S::allocated), 1u);
    EXPECT_EQ(job_status(seen, config_, 1).status.buffer.state, S::allocated);
}

TEST_F(StatusTest, publish_rewrites_only_the_touched_buffers_and_removes_final_ones) {
    config_.pools.resize(1);
    auto store = open_store();
    const std::string users = config_.state_dir + "/public/buffers";
    const std::string one = users + "/1017/main.1.1.json", two = users + "/1018/main.2.1.json";
    auto touch_one = [&](const std::string& message) {
        WriteTransaction txn(*store, "test");
        Buffer b = txn.get_buffer(BufferKey::job("main", 1, 1));
        b.message = message;
        txn.update_buffer(b);
        publish(txn, *store, config_);
        txn.commit();
    };
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", kib, 1017, "marshall", t_169502));
        allocate(txn, job(2, "pool1", kib, 1018, "other", t_169504));
        publish(txn, *store, config_);
        txn.commit();
    }
    touch_one("first");  // also settles the first publish's keys (see publish())
    const ino_t two_before = stat_of(two).st_ino;
    const ino_t one_before = stat_of(one).st_ino;
    touch_one("second");
    EXPECT_EQ(stat_of(two).st_ino, two_before) << "an untouched buffer's file is left alone";
    EXPECT_NE(stat_of(one).st_ino, one_before);
    EXPECT_NE(read_file(one).find("\"message\": \"second\""), std::string::npos) << read_file(one);

    {
        WriteTransaction txn(*store, "test");
        txn.transition(BufferKey::job("main", 1, 1), S::teardown);
        txn.transition(BufferKey::job("main", 1, 1), S::complete);
        publish(txn, *store, config_);
        txn.commit();
    }
    EXPECT_NE(::access(one.c_str(), F_OK), 0) << "a final buffer has no file";
    EXPECT_NE(::access((users + "/1017").c_str(), F_OK), 0) << "nor does a user without buffers";
    EXPECT_EQ(stat_of(two).st_ino, two_before);
    const StatusSnapshot seen = read_public_status(config_, 4242);
    ASSERT_EQ(seen.buffers.size(), 1u);
    EXPECT_EQ(seen.buffers[0].buffer.key.str(), "main.2.1");
}

TEST_F(StatusTest, the_next_publish_undoes_a_rolled_back_one) {
    config_.pools.resize(1);
    auto store = open_store();
    const std::string file = config_.state_dir + "/public/buffers/1017/main.1.1.json";
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", kib, 1017, "marshall", t_169502));
        publish(txn, *store, config_);
    }  // rolled back, as a kill between publish and commit would
    EXPECT_EQ(::access(file.c_str(), F_OK), 0);
    {
        WriteTransaction txn(*store, "test");
        publish(txn, *store, config_);  // touches nothing itself
        txn.commit();
    }
    EXPECT_NE(::access(file.c_str(), F_OK), 0);
    EXPECT_TRUE(read_public_status(config_, 4242).buffers.empty());
}

TEST_F(StatusTest, unsettled_is_rewritten_in_place_and_a_torn_tail_is_harmless) {
    config_.pools.resize(1);
    auto store = open_store();
    const std::string unsettled = config_.state_dir + "/public/.owner/unsettled";
    const auto contents = [&] {
        std::ifstream in(unsettled);
        return std::string(std::istreambuf_iterator<char>(in), {});
    };
    const auto inode = [&] {
        struct stat st {};
        EXPECT_EQ(::stat(unsettled.c_str(), &st), 0);
        return st.st_ino;
    };
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", kib, 1017, "marshall", t_169502));
        allocate(txn, job(2, "pool1", kib, 1017, "marshall", t_169504));
        publish(txn, *store, config_);
        txn.commit();
    }
    EXPECT_EQ(contents(), "1017 main.1.1\n1017 main.2.1\n");
    const ino_t first = inode();
    {
        WriteTransaction txn(*store, "test");
        txn.transition(BufferKey::job("main", 1, 1), S::teardown);
        publish(txn, *store, config_);
        txn.commit();
    }
    EXPECT_EQ(contents(), "1017 main.1.1\n");
    EXPECT_EQ(inode(), first);
    // What a kill between the write and the truncation leaves: the new keys, then part of the
    // old ones (all settled already), here cut in the middle of a line.
    {
        std::ofstream out(unsettled, std::ios::app);
        out << "7 main.2.1\n1017 main.2";
    }
    {
        WriteTransaction txn(*store, "test");
        publish(txn, *store, config_);
        txn.commit();
    }
    EXPECT_EQ(contents(), "\n");
    EXPECT_EQ(inode(), first);
    if (geteuid() == 0) {  // root gives it (back) to public/'s owner, who rewrites it in place
        ASSERT_EQ(::chown(unsettled.c_str(), 4242, 4242), 0);
        {
            WriteTransaction txn(*store, "test");
            txn.transition(BufferKey::job("main", 2, 1), S::teardown);
            publish(txn, *store, config_);
            txn.commit();
        }
        struct stat file {};
        struct stat dir {};
        ASSERT_EQ(::stat(unsettled.c_str(), &file), 0);
        ASSERT_EQ(::stat((config_.state_dir + "/public").c_str(), &dir), 0);
        EXPECT_EQ(file.st_uid, dir.st_uid);
        EXPECT_EQ(file.st_gid, dir.st_gid);
        EXPECT_EQ(contents(), "1017 main.2.1\n");
    }
    const StatusSnapshot seen = read_public_status(config_, 1017);
    ASSERT_EQ(seen.buffers.size(), 2u);
    EXPECT_EQ(seen.buffers[0].buffer.state, S::teardown);
    EXPECT_EQ(seen.buffers[1].buffer.state, geteuid() == 0 ? S::teardown : S::allocated);
}

#ifdef BBKIT_FAULT_INJECTION
// Killed once public/.unsettled names only its own keys, a publish has already settled the keys
// the last one left unsettled: the file of a rolled-back buffer does not outlive both.
TEST_F(StatusTest, a_publish_killed_after_naming_its_keys_settled_the_previous_ones_first) {
    ::testing::FLAGS_gtest_death_test_style = "threadsafe";  // a fresh process reads BBKIT_FAULT
    config_.pools.resize(1);
    auto store = open_store();
    const std::string file = config_.state_dir + "/public/buffers/1017/main.1.1.json";
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", kib, 1017, "marshall", t_169502));
        publish(txn, *store, config_);
    }  // rolled back: main.1.1's file shows a buffer that never was
    ASSERT_EQ(::access(file.c_str(), F_OK), 0);
    // The child runs this test again from the start, in a state directory of its own whose
    // first publish (above) is a full one, without that point; then works on this process's.
    ::setenv("BBKIT_TEST_STATE_DIR", config_.state_dir.c_str(), 0);
    ::setenv("BBKIT_FAULT", "publish.unsettled-written", 1);
    EXPECT_EXIT(
        {
            std::system(("rm -rf '" + root_ + "'").c_str());  // the child's own, unused
            config_.state_dir = std::getenv("BBKIT_TEST_STATE_DIR");
            // The parent's pool too (public/.settings names the pool paths).
            config_.pools[0].path = fs_parent(config_.state_dir) + "/bb/pool1";
            StateStore shared(config_);
            WriteTransaction txn(shared, "test");
            allocate(txn, job(2, "pool1", kib, 1018, "other", t_169504));
            publish(txn, shared, config_);
            std::exit(0);
        },
        ::testing::KilledBySignal(SIGKILL), "");
    ::unsetenv("BBKIT_FAULT");
    ::unsetenv("BBKIT_TEST_STATE_DIR");
    EXPECT_NE(::access(file.c_str(), F_OK), 0) << "the rolled-back buffer's file is left";
}
#endif

TEST_F(StatusTest, a_dequeue_republishes_the_requests_behind_it) {
    config_.pools.resize(1);
    auto store = open_store();
    {
        WriteTransaction txn(*store, "test");
        for (std::uint64_t id : {1, 2, 3}) {
            Buffer b = job(id, "pool1", kib, 1017, "marshall", t_169502 + id);
            b.state = S::pending;
            txn.insert_buffer(b);
            txn.enqueue("pool1", b.key, kib, ProcessId::self());
        }
        publish(txn, *store, config_);
        txn.commit();
    }
    {
        WriteTransaction txn(*store, "test");
        txn.dequeue(parse_buffer_key("main.1.1"));
        txn.transition(BufferKey::job("main", 1, 1), S::allocating);
        publish(txn, *store, config_);
        txn.commit();
    }
    const StatusSnapshot seen = read_public_status(config_, 4242);
    ASSERT_EQ(seen.buffers.size(), 3u);
    EXPECT_FALSE(seen.buffers[0].queue_position);
    EXPECT_EQ(seen.buffers[1].queue_position, std::optional<std::size_t>(1));
    EXPECT_EQ(seen.buffers[2].queue_position, std::optional<std::size_t>(2));
}

TEST_F(StatusTest, private_data_changes_resync_the_user_directories) {
    if (geteuid() != 0)
        GTEST_SKIP() << "giving directories to other users needs root";
    config_.pools.resize(1);
    auto store = open_store();
    const std::string pub = config_.state_dir + "/public";
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", kib, 1017, "marshall", t_169502));
        allocate(txn, job(2, "pool1", 2 * kib, 1018, "other", t_169504));
        publish(txn, *store, config_);
        txn.commit();
    }
    std::ofstream(pub + "/buffers.json") << "[]";  // layout 1's files go at the next resync
    std::ofstream(pub + "/buffers.1017.json") << "[]";
    std::ofstream(pub + "/.settings") << "layout=2\n";  // and layout 2's bookkeeping
    std::ofstream(pub + "/.unsettled") << "1017 main.1.1\n";
    auto publish_nothing = [&] {
        WriteTransaction txn(*store, "test");
        publish(txn, *store, config_);  // touches no buffer: only a resync changes the tree
        txn.commit();
    };

    config_.flags.private_data = true;
    publish_nothing();
    for (const char* gone : {"/buffers.json", "/buffers.1017.json", "/.settings", "/.unsettled",
                             "/buffers/1017", "/buffers/1018"})
        EXPECT_NE(::access((pub + gone).c_str(), F_OK), 0) << gone;
    EXPECT_EQ(stat_of(pub + "/buffers").st_mode & 07777, 0711u) << "nobody else lists it";
    for (uid_t uid : {1017u, 1018u}) {
        const struct stat key = stat_of(pub + "/buffers/" + public_key_name(uid));
        EXPECT_EQ(key.st_mode & 07777, 0400u);
        EXPECT_EQ(key.st_uid, uid);
        const struct stat st = stat_of(own_directory(config_, uid));
        EXPECT_EQ(st.st_mode & 07777, 0700u);
        EXPECT_EQ(st.st_uid, uid);
    }
    const StatusSnapshot mine = read_public_status(config_, 1018);
    ASSERT_EQ(mine.buffers.size(), 1u);
    EXPECT_EQ(mine.buffers[0].buffer.key.job_id, 2u);
    EXPECT_TRUE(read_public_status(config_, 999).buffers.empty());

    config_.flags.private_data = false;
    publish_nothing();
    EXPECT_EQ(stat_of(pub + "/buffers").st_mode & 07777, 0755u);
    for (uid_t uid : {1017u, 1018u}) {
        const struct stat st = stat_of(pub + "/buffers/" + std::to_string(uid));
        EXPECT_EQ(st.st_mode & 07777, 0755u);
        EXPECT_EQ(st.st_uid, 0u);
        EXPECT_NE(::access((pub + "/buffers/" + public_key_name(uid)).c_str(), F_OK), 0);
    }
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(pub + "/buffers"), {}), 2)
        << "the keyed directories are gone";
    EXPECT_EQ(read_public_status(config_, 999).buffers.size(), 2u);
}

// With PrivateData nothing another user can reach changes with a user's buffers once that user
// has a key: public/buffers/ (which they may not list) keeps its entries, the user's directory
// stays when emptied, and only that user can name it.
TEST_F(StatusTest, with_private_data_nothing_others_reach_changes_with_a_users_buffers) {
    if (geteuid() != 0)
        GTEST_SKIP() << "giving directories to other users needs root";
    config_.pools.resize(1);
    config_.flags.private_data = true;
    auto store = open_store();
    const std::string buffers = config_.state_dir + "/public/buffers";
    const auto step = [&](std::uint64_t id, bool live) {
        WriteTransaction txn(*store, "test");
        if (live) {
            allocate(txn, job(id, "pool1", kib, 1017, "marshall", t_169502));
        } else {
            txn.transition(BufferKey::job("main", id, 1), S::teardown);
            txn.transition(BufferKey::job("main", id, 1), S::complete);
        }
        publish(txn, *store, config_);
        txn.commit();
    };
    const auto reachable = [&] {
        return stat_print(buffers) + "\n" + stat_print(buffers + "/" + public_key_name(1017)) +
               "\n" + stat_print(buffers + "/1017");
    };
    step(1, true);  // the user's first buffer makes their key and directory
    const std::string dir = own_directory(config_, 1017);
    EXPECT_EQ(dir.substr(buffers.size() + 1).size(), 32u);
    step(1, false);
    EXPECT_TRUE(std::filesystem::is_empty(dir)) << "emptied, not removed";
    const std::string before = reachable();
    ::usleep(20000);  // so that a change of mtime would show
    step(2, true);
    EXPECT_EQ(reachable(), before);
    ASSERT_EQ(read_public_status(config_, 1017).buffers.size(), 1u);
    step(2, false);
    EXPECT_EQ(reachable(), before);
    EXPECT_EQ(own_directory(config_, 1017), dir) << "the key stays";
}

// A key file the user changed (it is theirs) is no key: root makes them a new one, and the
// directory the old one named goes at the next resync.
TEST_F(StatusTest, with_private_data_a_key_the_user_broke_is_made_again) {
    if (geteuid() != 0)
        GTEST_SKIP() << "giving files to other users needs root";
    config_.pools.resize(1);
    config_.flags.private_data = true;
    auto store = open_store();
    const std::string buffers = config_.state_dir + "/public/buffers";
    const std::string key = buffers + "/" + public_key_name(1017);
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", kib, 1017, "marshall", t_169502));
        publish(txn, *store, config_);
        txn.commit();
    }
    const std::string old_dir = own_directory(config_, 1017);
    ASSERT_EQ(::chmod(key.c_str(), 0600), 0);
    std::ofstream(key) << "not a key\n";
    {
        WriteTransaction txn(*store, "test");
        txn.transition(BufferKey::job("main", 1, 1), S::staging_in);
        publish(txn, *store, config_);
        txn.commit();
    }
    EXPECT_EQ(stat_of(key).st_mode & 07777, 0400u);
    EXPECT_EQ(stat_of(key).st_uid, 1017u);
    const std::string new_dir = own_directory(config_, 1017);
    EXPECT_NE(new_dir, old_dir);
    ASSERT_EQ(read_public_status(config_, 1017).buffers.size(), 1u);
    EXPECT_EQ(read_public_status(config_, 1017).buffers[0].buffer.state, S::staging_in);
    ASSERT_EQ(::unlink((config_.state_dir + "/public/.owner/settings").c_str()), 0);
    {
        WriteTransaction txn(*store, "test");
        publish(txn, *store, config_);
        txn.commit();
    }
    EXPECT_FALSE(std::filesystem::exists(old_dir));
    EXPECT_TRUE(std::filesystem::exists(new_dir + "/main.1.1.json"));
}

// Only root can give a file away: with a state owner that is not root, PrivateData publishes no
// buffer at all (no user could read their own), and nothing under public/buffers/ names a user.
TEST_F(StatusTest, with_private_data_and_a_state_owner_not_root_no_buffer_is_published) {
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root to become the state owner";
    config_.pools.resize(1);
    config_.state_owner = "65534";
    ASSERT_EQ(::chown(root_.c_str(), 65534, 65534), 0);
    auto store = open_store();
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", kib, 1017, "marshall", t_169502));
        publish(txn, *store, config_);  // root writes, without PrivateData
        txn.commit();
    }
    const std::string buffers = config_.state_dir + "/public/buffers";
    ASSERT_TRUE(std::filesystem::exists(buffers + "/1017/main.1.1.json"));
    config_.flags.private_data = true;
    for (const bool as_root : {true, false}) {
        const auto write = [&] {
            StateStore shared(config_);
            WriteTransaction txn(shared, "test");
            allocate(txn, job(as_root ? 2 : 3, "pool1", kib, 1017, "marshall", t_169504));
            publish(txn, shared, config_);
            txn.commit();
        };
        std::string message;
        if (as_root)
            write();
        else
            ASSERT_EQ(code_of_as(65534, 65534, write, &message), ExitCode::ok) << message;
        EXPECT_TRUE(std::filesystem::is_empty(buffers));
        EXPECT_EQ(stat_of(buffers).st_mode & 07777, 0711u);
        EXPECT_EQ(stat_of(buffers).st_uid, 65534u);
    }
    EXPECT_TRUE(read_public_status(config_, 1017).buffers.empty());
}

TEST_F(StatusTest, publish_restores_a_user_directorys_mode_when_writing_into_it) {
    if (geteuid() != 0)
        GTEST_SKIP() << "giving directories to other users needs root";
    config_.pools.resize(1);
    config_.flags.private_data = true;
    auto store = open_store();
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", kib, 1017, "marshall", t_169502));
        publish(txn, *store, config_);
        txn.commit();
    }
    const std::string dir = own_directory(config_, 1017);
    ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);  // what its owner may do
    {
        WriteTransaction txn(*store, "test");
        txn.transition(BufferKey::job("main", 1, 1), S::staging_in);
        publish(txn, *store, config_);
        txn.commit();
    }
    EXPECT_EQ(stat_of(dir).st_mode & 07777, 0700u);
    EXPECT_EQ(stat_of(dir).st_uid, 1017u);
}

// A non-root state owner (nobody) that may not open a user's directory under public/buffers/
// fails as every failed call does (bbkit(7), EXIT STATUS): 77 for EACCES.
TEST_F(StatusTest, a_user_directory_the_state_owner_may_not_open_is_refused_with_77) {
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root to become the state owner";
    config_.pools.resize(1);
    config_.state_owner = "65534";
    ASSERT_EQ(::chown(root_.c_str(), 65534, 65534), 0);
    const auto as_owner = [&](bool first) {
        const auto store = first ? open_store() : std::make_unique<StateStore>(config_);
        WriteTransaction txn(*store, "test");
        if (first)
            allocate(txn, job(1, "pool1", kib, 1017, "marshall", t_169502));
        else
            txn.transition(BufferKey::job("main", 1, 1), S::staging_in);
        publish(txn, *store, config_);
        txn.commit();
    };
    std::string message;
    ASSERT_EQ(code_of_as(
                  65534, 65534, [&] { as_owner(true); }, &message),
              ExitCode::ok)
        << message;
    const std::string dir = config_.state_dir + "/public/buffers/1017";
    ASSERT_EQ(::chown(dir.c_str(), 0, 0), 0);
    ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
    EXPECT_EQ(code_of_as(
                  65534, 65534, [&] { as_owner(false); }, &message),
              ExitCode::no_perm);
    EXPECT_EQ(message, "cannot open directory " + dir + ": Permission denied");
}

TEST_F(StatusTest, a_resync_removes_stale_files_and_directories) {
    config_.pools.resize(1);
    auto store = open_store();
    const std::string users = config_.state_dir + "/public/buffers";
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", kib, 1017, "marshall", t_169502));
        publish(txn, *store, config_);
        txn.commit();
    }
    std::ofstream(users + "/1017/main.9.1.json") << "{}";         // a buffer long gone
    std::ofstream(users + "/1017/main.1.1.json.tmp.1.2") << "{";  // a killed writer's
    ASSERT_EQ(::mkdir((users + "/555").c_str(), 0755), 0);
    std::ofstream(users + "/555/main.8.1.json") << "{}";
    ASSERT_EQ(::unlink((config_.state_dir + "/public/.owner/settings").c_str()), 0);
    {
        WriteTransaction txn(*store, "test");
        publish(txn, *store, config_);
        txn.commit();
    }
    EXPECT_NE(::access((users + "/1017/main.9.1.json").c_str(), F_OK), 0);
    EXPECT_NE(::access((users + "/1017/main.1.1.json.tmp.1.2").c_str(), F_OK), 0);
    EXPECT_NE(::access((users + "/555").c_str(), F_OK), 0);
    EXPECT_EQ(::access((users + "/1017/main.1.1.json").c_str(), F_OK), 0);
    EXPECT_EQ(read_public_status(config_, 4242).buffers.size(), 1u);
}

// With PrivateData a user owns their directory and may put anything into it: a resync removes
// their files and empty directories, but root never empties a directory for them (it may hold
// another user's files, moved in whole), nor follows a link out. public/'s other files are not
// layout 1's.
TEST_F(StatusTest, a_resync_removes_what_users_could_remove_and_no_tree_they_planted) {
    if (geteuid() != 0)
        GTEST_SKIP() << "giving directories to other users needs root";
    config_.pools.resize(1);
    config_.flags.private_data = true;
    auto store = open_store();
    const std::string pub = config_.state_dir + "/public";
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", kib, 1017, "marshall", t_169502));
        publish(txn, *store, config_);
        txn.commit();
    }
    const std::string own = own_directory(config_, 1017);
    std::filesystem::create_directories(own + "/empty");
    std::filesystem::create_directories(own + "/planted/other-users");
    std::ofstream(own + "/planted/other-users/results") << "not marshall's";
    std::ofstream(own + "/stale.json") << "{}";
    std::filesystem::create_directories(pub + "/buffers/555/planted");
    std::filesystem::create_directories(root_ + "/outside");
    std::ofstream(root_ + "/outside/kept") << "x";
    std::filesystem::create_directory_symlink(root_ + "/outside", pub + "/buffers/555/link");
    std::filesystem::create_directory_symlink(root_ + "/outside", pub + "/buffers/link");
    std::ofstream(pub + "/buffers.notes.json") << "{}";  // not a name layout 1 used
    ASSERT_EQ(::unlink((pub + "/.owner/settings").c_str()), 0);
    {
        WriteTransaction txn(*store, "test");
        publish(txn, *store, config_);
        txn.commit();
    }
    EXPECT_FALSE(std::filesystem::exists(own + "/empty"));
    EXPECT_FALSE(std::filesystem::exists(own + "/stale.json"));
    EXPECT_TRUE(std::filesystem::exists(own + "/planted/other-users/results"));
    EXPECT_FALSE(std::filesystem::exists(pub + "/buffers/555"));  // a link and an empty dir
    EXPECT_FALSE(std::filesystem::is_symlink(pub + "/buffers/link"));
    EXPECT_TRUE(std::filesystem::exists(root_ + "/outside/kept"));
    EXPECT_TRUE(std::filesystem::exists(own + "/main.1.1.json"));
    EXPECT_TRUE(std::filesystem::exists(pub + "/buffers.notes.json"));
}

// public/ and what is below it belong to the state owner, who may swap any directory for a
// symlink: publish writes through descriptors opened beneath the state directory, so a swapped
// entry is refused (77, one line) and nothing is written where the link points.
TEST_F(StatusTest, publish_writes_nothing_through_a_directory_swapped_for_a_symlink) {
    config_.pools.resize(1);
    auto store = open_store();
    const std::string pub = config_.state_dir + "/public";
    const std::string outside = root_ + "/outside";
    std::filesystem::create_directories(outside);
    {
        WriteTransaction txn(*store, "test");
        allocate(txn, job(1, "pool1", kib, 1017, "marshall", t_169502));
        publish(txn, *store, config_);
        txn.commit();
    }
    const auto publish_touching_1 = [&] {
        WriteTransaction txn(*store, "test");
        Buffer b = txn.get_buffer(BufferKey::job("main", 1, 1));
        b.message = "again";
        txn.update_buffer(b);
        publish(txn, *store, config_);
    };
    for (const char* swapped : {"", "/buffers", "/buffers/1017", "/.owner"}) {
        const std::string path = pub + swapped;
        std::filesystem::rename(path, path + ".real");
        std::filesystem::create_directory_symlink(outside, path);
        std::string message;
        EXPECT_EQ(code_of(publish_touching_1, &message), ExitCode::no_perm) << swapped;
        EXPECT_NE(message.find("symlink"), std::string::npos) << message;
        EXPECT_EQ(message.find('\n'), std::string::npos) << message;
        EXPECT_TRUE(std::filesystem::is_empty(outside)) << swapped;
        std::filesystem::remove(path);
        std::filesystem::rename(path + ".real", path);
    }
    EXPECT_EQ(code_of(publish_touching_1), ExitCode::ok);  // put back, as before
    EXPECT_TRUE(std::filesystem::is_empty(outside));
}

}  // namespace
}  // namespace bbkit
