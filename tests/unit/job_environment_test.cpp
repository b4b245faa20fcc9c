// The names of a job's environment files (bbkit(7), FILES): the state directory's, which
// burst_buffer.lua builds again (tests/cli/slurm-scripts.bats runs it on what the tools write),
// and a pool's, tagged with the user's key.
#include "bbkit/job_environment.hpp"

#include <gtest/gtest.h>

#include <set>

#include "bbkit/seal.hpp"

using namespace bbkit;

namespace {

constexpr const char* key_a = "0123456789abcdef0123456789abcdef";
constexpr const char* key_b = "fedcba9876543210fedcba9876543210";

bool lower_hex(const std::string& text) {
    return text.find_first_not_of("0123456789abcdef") == std::string::npos;
}

}  // namespace

TEST(JobEnvironmentTest, a_buffers_file_in_the_state_directory_is_named_by_its_key) {
    EXPECT_EQ(buffer_environment_path("/var/lib/bbkit", BufferKey::job("main", 42, 1)),
              "/var/lib/bbkit/env/main.42.1.env");
    EXPECT_EQ(buffer_environment_path("/s", BufferKey::persistent("main", "alpha")),
              "/s/env/main.p.alpha.env");
}

// slurm_bb_paths knows the cluster (BBKIT_CLUSTER) and the job id, never the incarnation.
TEST(JobEnvironmentTest, the_job_level_name_has_the_cluster_and_job_id_only) {
    EXPECT_EQ(job_environment_path("/var/lib/bbkit", "main", 42), "/var/lib/bbkit/env/main.42.env");
    EXPECT_EQ(job_environment_path("/s", "blue", 18446744073709551615ULL),
              "/s/env/blue.18446744073709551615.env");
}

TEST(JobEnvironmentTest, a_pool_files_tag_is_the_keyed_hash_of_cluster_and_job) {
    const std::string name = job_environment_name("main", 7, key_a);
    ASSERT_EQ(name.rfind("main.7.", 0), 0u) << name;
    const std::string tag = name.substr(7);
    EXPECT_EQ(tag.size(), 32u);
    EXPECT_TRUE(lower_hex(tag)) << tag;
    EXPECT_EQ(tag, to_hex(hmac_sha256(key_a, "main.7")).substr(0, 32));
    EXPECT_EQ(job_environment_name("main", 7, key_a), name);  // the user recomputes it
}

TEST(JobEnvironmentTest, another_key_job_or_cluster_gives_another_name) {
    const std::set<std::string> names = {
        job_environment_name("main", 7, key_a), job_environment_name("main", 7, key_b),
        job_environment_name("main", 8, key_a), job_environment_name("blue", 7, key_a),
        legacy_job_environment_name("main", 7)};
    EXPECT_EQ(names.size(), 5u);
    EXPECT_EQ(legacy_job_environment_name("main", 7), "main.7");
}

TEST(JobEnvironmentTest, a_users_key_file_is_named_by_the_uid) {
    EXPECT_EQ(environment_key_name(0), "0.key");
    EXPECT_EQ(environment_key_name(65534), "65534.key");
}

TEST(JobEnvironmentTest, an_entry_names_a_job_of_the_cluster_only_in_either_form) {
    const std::string tagged = job_environment_name("t", 7, key_a);
    EXPECT_EQ(environment_job_id("t", tagged), std::optional<std::uint64_t>(7));
    EXPECT_EQ(environment_job_id("t", "t.7"), std::optional<std::uint64_t>(7));
    EXPECT_EQ(environment_job_id("u", tagged), std::nullopt);  // another cluster's
    EXPECT_EQ(environment_job_id("t2", "t.7"), std::nullopt);  // a cluster named like a prefix
    EXPECT_EQ(environment_job_id("t", "t2.7"), std::nullopt);
    EXPECT_EQ(environment_job_id("t", environment_key_name(65534)), std::nullopt);
    EXPECT_EQ(environment_job_id("t", "." + tagged + ".tmp"), std::nullopt);  // a temporary
    EXPECT_EQ(environment_job_id("t", tagged + ".tmp"), std::nullopt);
    EXPECT_EQ(environment_job_id("t", "t.x.7"), std::nullopt);
    EXPECT_EQ(environment_job_id("t", "t.7." + std::string(31, 'a')), std::nullopt);
    EXPECT_EQ(environment_job_id("t", "t.7." + std::string(32, 'A')), std::nullopt);
    EXPECT_EQ(environment_job_id("t", "t."), std::nullopt);
    EXPECT_EQ(environment_job_id("t", "t.99999999999999999999999"), std::nullopt);
}
