#include "bbkit/slurm_release.hpp"

#include <gtest/gtest.h>

#include "bbkit/error.hpp"

namespace bbkit {
namespace {

std::string release_error(const std::string& text) {
    try {
        parse_slurm_release(text);
    } catch (const Error& error) {
        EXPECT_EQ(error.code(), ExitCode::config);
        return error.what();
    }
    ADD_FAILURE() << "no error for '" << text << "'";
    return "";
}

TEST(SlurmRelease, parses_every_known_release_and_prints_it_back) {
    for (const SlurmRelease release : known_slurm_releases())
        EXPECT_EQ(parse_slurm_release(to_string(release)), release) << to_string(release);
    EXPECT_EQ(to_string(parse_slurm_release("24.05")), "24.05");
    EXPECT_EQ(to_string(parse_slurm_release("20.11")), "20.11");
}

TEST(SlurmRelease, known_releases_run_from_20_11_to_26_05_in_order) {
    const auto& known = known_slurm_releases();
    EXPECT_EQ(to_string(known.front()), "20.11");
    EXPECT_EQ(to_string(known.back()), "26.05");
    for (std::size_t i = 1; i < known.size(); ++i)
        EXPECT_TRUE(known[i - 1] < known[i]) << to_string(known[i]);
}

TEST(SlurmRelease, rejects_other_shapes) {
    for (const char* bad : {"", "24", "24.5", "2024.11", "24.11.", ".11", "24-11", " 24.11",
                            "24.11 ", "v24.11", "24.1a", "+4.11"})
        EXPECT_EQ(release_error(bad),
                  "'" + std::string(bad) + "' is not a release written YY.MM, such as \"24.11\"")
            << bad;
    EXPECT_EQ(release_error("24.11.5"),
              "'24.11.5' is not a release written YY.MM, such as \"24.11\" (leave out the "
              "maintenance number)");
}

TEST(SlurmRelease, rejects_releases_before_20_11) {
    EXPECT_EQ(release_error("20.02"),
              "Slurm 20.02 is older than 20.11, the oldest release whose layout bbkit knows");
    EXPECT_EQ(release_error("17.11"),
              "Slurm 17.11 is older than 20.11, the oldest release whose layout bbkit knows");
}

TEST(SlurmRelease, rejects_unknown_releases_naming_the_known_ones) {
    const std::string known =
        "(20.11, 21.08, 22.05, 23.02, 23.11, 24.05, 24.11, 25.05, 25.11, 26.05); for a later "
        "one leave slurm_release out, which means the newest";
    EXPECT_EQ(release_error("24.08"), "'24.08' is no Slurm release bbkit knows " + known);
    EXPECT_EQ(release_error("26.11"), "'26.11' is no Slurm release bbkit knows " + known);
    EXPECT_EQ(release_error("99.99"), "'99.99' is no Slurm release bbkit knows " + known);
}

TEST(SlurmRelease, burst_layout_changes_at_21_08_and_24_05) {
    const auto layout = [](const char* release) {
        return burst_layout(parse_slurm_release(release));
    };
    EXPECT_EQ(layout("20.11").pool_key, "AltPoolName");
    EXPECT_FALSE(layout("20.11").poll_interval);
    for (const char* release : {"21.08", "22.05", "23.02", "23.11"}) {
        EXPECT_EQ(layout(release).pool_key, "PoolName") << release;
        EXPECT_FALSE(layout(release).poll_interval) << release;
    }
    for (const char* release : {"24.05", "24.11", "25.05", "25.11", "26.05"}) {
        EXPECT_EQ(layout(release).pool_key, "PoolName") << release;
        EXPECT_TRUE(layout(release).poll_interval) << release;
    }
}

TEST(SlurmRelease, without_a_release_the_layout_is_the_newest) {
    EXPECT_EQ(burst_layout(std::nullopt).pool_key, "PoolName");
    EXPECT_TRUE(burst_layout(std::nullopt).poll_interval);
}

TEST(SlurmRelease, slurms_default_poll_interval_is_15_seconds) {
    EXPECT_EQ(default_poll_interval, 15u);
}

// A transfer job's --export: NIL where sbatch has it (24.11 on; NONE there runs the user's
// login shell on the node and holds the job when that is slow), NONE before; the newest's
// without a release.
TEST(SlurmRelease, a_job_without_environment_is_nil_from_24_11_and_none_before) {
    EXPECT_EQ(empty_export(SlurmRelease{22, 5}), "NONE");
    EXPECT_EQ(empty_export(SlurmRelease{24, 5}), "NONE");
    EXPECT_EQ(empty_export(SlurmRelease{24, 11}), "NIL");
    EXPECT_EQ(empty_export(SlurmRelease{26, 5}), "NIL");
    EXPECT_EQ(empty_export(std::nullopt), "NIL");
}

}  // namespace
}  // namespace bbkit
