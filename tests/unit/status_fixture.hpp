// What the views', publish's and bb-stat's rendering tests share: a state directory with four
// pools under a temporary root, Slurm's guide's times, and buffers as bb-pool alloc makes them.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "bbkit/store.hpp"
#include "bbkit/views.hpp"

namespace bbkit::fixture {

using S = BufferState;
constexpr std::uint64_t kib = 1024;
constexpr std::uint64_t gib = 1024ULL * 1024 * 1024;

// 2021-08-11T10:13:38 UTC, the guide's first CreateTime.
inline TimePoint at(std::time_t seconds) {
    return std::chrono::system_clock::from_time_t(seconds);
}
constexpr std::time_t t_169504 = 1628676818;
constexpr std::time_t t_169502 = 1628676726;  // 10:12:06

inline std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
}

inline struct stat stat_of(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
    return st;
}

inline PoolStatus pool(std::string name, std::uint64_t total, std::uint64_t granularity,
                       std::uint64_t used = 0, std::uint64_t trash = 0,
                       std::uint64_t persistent = 0) {
    PoolStatus p;
    p.name = std::move(name);
    p.path = "/bb/" + p.name;
    p.total = total;
    p.granularity = granularity;
    p.used = used;
    p.trash = trash;
    p.persistent = persistent;
    p.free = used + trash >= total ? 0 : total - used - trash;
    p.initialized = true;
    p.availability = PoolAvailability::up;
    return p;
}

class StatusTest : public ::testing::Test {
  protected:
    void SetUp() override {
        // Slurm prints local time; the expected layouts are in UTC.
        ::setenv("TZ", "UTC", 1);
        ::tzset();
        char pattern[] = "/tmp/bbkit-status-XXXXXX";
        ASSERT_NE(mkdtemp(pattern), nullptr);
        root_ = pattern;
        config_.state_dir = root_ + "/state";
        config_.state_owner = geteuid() == 0 ? "root" : std::to_string(geteuid());
        config_.pools = {{"pool1", root_ + "/bb/pool1", 10000 * kib, kib},
                         {"pool2", root_ + "/bb/pool2", 10, 2},
                         {"pool3", root_ + "/bb/pool3", 4, 1},
                         {"pool4", root_ + "/bb/pool4", 5000000000ULL, 1}};
    }
    void TearDown() override { std::system(("rm -rf '" + root_ + "'").c_str()); }

    std::unique_ptr<StateStore> open_store() {
        auto store = std::make_unique<StateStore>(config_);
        WriteTransaction txn(*store, "test");
        for (const PoolConfig& p : config_.pools) {
            // Mounted: each pool's marker names it and its recorded UUID (up).
            std::filesystem::create_directories(p.path);
            std::ofstream(p.path + "/.bbkit-pool")
                << "name=" << p.name << "\nuuid=uuid-" << p.name << "\n";
            txn.put_pool({p.name, p.path, "uuid-" + p.name, false});
        }
        txn.commit();
        return store;
    }

    static Buffer job(std::uint64_t id, const std::string& pool, std::uint64_t bytes, uid_t uid,
                      const std::string& user, std::time_t created) {
        Buffer b = Buffer::for_key(BufferKey::job("main", id, 1));
        b.pool = pool;
        b.requested_bytes = bytes;
        b.allocated_bytes = bytes;
        b.uid = uid;
        b.gid = uid;
        b.user = user;
        b.state = S::allocating;
        b.created = at(created);
        return b;
    }

    // Inserts as allocating and moves to allocated, as bb-pool alloc does.
    static void allocate(WriteTransaction& txn, Buffer b) {
        txn.insert_buffer(b);
        txn.transition(b.key, S::allocated);
    }

    std::string root_;
    Config config_;
};

}  // namespace bbkit::fixture
