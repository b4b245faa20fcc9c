#include "bbkit/fault.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <cstdio>

#include <set>
#include <string>

namespace bbkit {
namespace {

TEST(Fault, point_names_are_unique_and_described) {
    std::set<std::string> names;
    for (const FaultPointInfo& point : fault_points()) {
        EXPECT_TRUE(names.insert(point.name).second) << point.name;
        EXPECT_STRNE(point.where, "") << point.name;
    }
#ifdef BBKIT_FAULT_INJECTION
    EXPECT_GT(names.size(), 30u);
    EXPECT_TRUE(names.count("alloc.reserved"));
    EXPECT_TRUE(names.count("mover.renamed"));
#else
    EXPECT_TRUE(names.empty());
#endif
}

#ifdef BBKIT_FAULT_INJECTION

// Each death test re-runs in a fresh process, where BBKIT_FAULT is read for the first time.
class FaultDeath : public ::testing::Test {
  protected:
    void SetUp() override { ::testing::FLAGS_gtest_death_test_style = "threadsafe"; }
};

TEST_F(FaultDeath, armed_point_kills_on_its_nth_pass_only) {
    EXPECT_EXIT(
        {
            setenv("BBKIT_FAULT", "teardown.locked:3", 1);
            fault_point("teardown.locked");
            fault_point("alloc.reserved");  // another point does not count
            fault_point("teardown.locked");
            fprintf(stderr, "survived two passes\n");
            fault_point("teardown.locked");
            fprintf(stderr, "survived the third\n");
            exit(0);
        },
        ::testing::KilledBySignal(SIGKILL), "survived two passes");
}

TEST_F(FaultDeath, unarmed_points_do_nothing) {
    EXPECT_EXIT(
        {
            unsetenv("BBKIT_FAULT");
            for (const FaultPointInfo& point : fault_points())
                fault_point(point.name);
            exit(7);
        },
        ::testing::ExitedWithCode(7), "");
}

TEST_F(FaultDeath, rearm_reads_a_setting_made_after_the_first_point) {
    EXPECT_EXIT(
        {
            unsetenv("BBKIT_FAULT");
            fault_point("mover.renamed");  // the setting is read here: nothing armed
            setenv("BBKIT_FAULT", "mover.renamed", 1);
            fault_point("mover.renamed");
            fprintf(stderr, "not armed without a rearm\n");
            fault_rearm();
            fault_point("mover.renamed");
            exit(0);
        },
        ::testing::KilledBySignal(SIGKILL), "not armed without a rearm");
}

TEST_F(FaultDeath, unknown_point_name_aborts) {
    EXPECT_DEATH(fault_point("no.such-point"), "not in fault.cpp");
}

TEST(Fault, environment_carries_the_setting_to_children) {
    setenv("BBKIT_FAULT", "mover.renamed:2", 1);
    setenv("BBKIT_FAULT_LOG", "/tmp/log", 1);
    const auto env = fault_environment();
    unsetenv("BBKIT_FAULT");
    unsetenv("BBKIT_FAULT_LOG");
    EXPECT_EQ(env.at("BBKIT_FAULT"), "mover.renamed:2");
    EXPECT_EQ(env.at("BBKIT_FAULT_LOG"), "/tmp/log");
}

#endif

}  // namespace
}  // namespace bbkit
