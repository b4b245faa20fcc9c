// Project quotas (bbkit(7), CAPACITY): a buffer's project id, the pool's rule when the file
// system lacks them, and the directory's project. The limits themselves need a file system that
// enforces project quotas: tests/cli/quota.bats mounts one where the kernel can.
#include "bbkit/project_quota.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "bbkit/error.hpp"
#include "code_of.hpp"

namespace fs = std::filesystem;
using namespace bbkit;

namespace {

PoolConfig quota_pool(QuotaMissing missing = QuotaMissing::refuse) {
    PoolConfig pool{"p", "/tmp", 1 << 20, 1};
    pool.quota = QuotaMode::project;
    pool.quota_missing = missing;
    pool.quota_project_base = 5000;
    return pool;
}

// A directory of its own on /tmp, which enforces no project quota.
class TempDir {
  public:
    TempDir() {
        char tmpl[] = "/tmp/bbkit-quota.XXXXXX";
        path_ = mkdtemp(tmpl) ? tmpl : "";
    }
    ~TempDir() {
        if (!path_.empty())
            fs::remove_all(path_);
    }
    const std::string& path() const { return path_; }

  private:
    std::string path_;
};

}  // namespace

TEST(project_quota, a_buffers_project_is_the_base_plus_its_record_id) {
    const PoolConfig pool = quota_pool();
    EXPECT_EQ(buffer_project(pool, 1), 5001U);
    EXPECT_EQ(buffer_project(pool, 42), 5042U);
    EXPECT_EQ(record_of_project(pool, 5042), 42);
}

TEST(project_quota, projects_outside_the_pools_range_belong_to_no_record) {
    const PoolConfig pool = quota_pool();
    EXPECT_EQ(record_of_project(pool, 5000), std::nullopt);
    EXPECT_EQ(record_of_project(pool, 17), std::nullopt);
    EXPECT_EQ(record_of_project(pool, 4294967295U), std::nullopt);
}

TEST(project_quota, a_record_past_the_last_project_id_is_a_configuration_error) {
    PoolConfig pool = quota_pool();
    pool.quota_project_base = max_project_id - 10;
    EXPECT_EQ(buffer_project(pool, 10), max_project_id);
    EXPECT_EQ(code_of([&] { buffer_project(pool, 11); }), ExitCode::config);
    EXPECT_EQ(code_of([&] { buffer_project(pool, 0); }), ExitCode::config);
}

TEST(project_quota, a_pool_without_quota_probes_nothing) {
    PoolConfig pool = quota_pool();
    pool.quota = QuotaMode::none;
    const TempDir dir;
    const Fd fd(open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    const PoolQuota quota = probe_pool_quota(pool, fd.get());
    EXPECT_FALSE(quota.enforced);
    EXPECT_EQ(quota.why_not, "");
    EXPECT_FALSE(require_pool_quota(pool, quota));
}

TEST(project_quota, a_file_system_without_project_quotas_says_why) {
    const TempDir dir;
    const Fd fd(open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    const PoolQuota quota = probe_pool_quota(quota_pool(), fd.get());
    if (quota.enforced)
        GTEST_SKIP() << "/tmp enforces project quotas here";
    EXPECT_NE(quota.why_not, "");
}

TEST(project_quota, refuse_is_one_line_naming_the_pool_and_the_way_on) {
    const PoolQuota missing{false, "its file system has no quota support"};
    try {
        require_pool_quota(quota_pool(), missing);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ExitCode::unavailable);
        const std::string text = e.what();
        EXPECT_EQ(text.find('\n'), std::string::npos);
        EXPECT_NE(text.find("pool 'p' at /tmp cannot limit its buffers: its file system has no "
                            "quota support"),
                  std::string::npos)
            << text;
        EXPECT_NE(text.find("quota_missing = \"warn\""), std::string::npos) << text;
    }
}

TEST(project_quota, warn_goes_on_without_limits) {
    EXPECT_FALSE(require_pool_quota(quota_pool(QuotaMissing::warn), PoolQuota{false, "none"}));
    EXPECT_TRUE(require_pool_quota(quota_pool(), PoolQuota{true, ""}));
}

TEST(project_quota, a_new_directory_is_in_project_0_without_inheritance) {
    const TempDir dir;
    const Fd fd(open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    try {
        const DirectoryProject project = directory_project(fd.get(), dir.path());
        EXPECT_EQ(project.project, 0U);
        EXPECT_FALSE(project.inherited);
    } catch (const Error& e) {
        GTEST_SKIP() << "no FS_IOC_FSGETXATTR on /tmp: " << e.what();
    }
}

TEST(project_quota, usage_of_a_pool_without_enforced_quotas_is_unknown) {
    const TempDir dir;
    Config config;
    PoolConfig pool = quota_pool();
    pool.path = dir.path();
    config.pools.push_back(pool);
    Buffer b;
    b.pool = "p";
    b.record_id = 3;
    ProjectUsageReader reader(config);
    EXPECT_EQ(reader.used_bytes(b), std::nullopt);
    config.pools.at(0).quota = QuotaMode::none;
    EXPECT_EQ(ProjectUsageReader(config).used_bytes(b), std::nullopt);
}
