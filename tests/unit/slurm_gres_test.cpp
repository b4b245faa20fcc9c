#include "bbkit/slurm_gres.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "bbkit/error.hpp"
#include "code_of.hpp"

namespace bbkit {
namespace {

// What scontrol show job -d prints after GRES= on a node's line, in the forms of 22.05 to 26.05.
TEST(SlurmGresTest, reads_the_count_of_the_named_gres_in_every_form_scontrol_prints) {
    EXPECT_EQ(granted_units("bbnvme(CNT:600)", "bbnvme"), 600u);
    EXPECT_EQ(granted_units("bbnvme:600", "bbnvme"), 600u);
    EXPECT_EQ(granted_units("gpu:a100:2(IDX:0-1),bbnvme(CNT:600)", "bbnvme"), 600u);
    EXPECT_EQ(granted_units("gpu:a100:2(IDX:0-1),bbnvme(CNT:600)", "gpu"), 2u);
    EXPECT_EQ(granted_units("gpu(IDX:0,2-3)", "gpu"), 3u);
    EXPECT_EQ(granted_units("bbnvme:fast:100,bbnvme:slow:20", "bbnvme"), 120u);
    EXPECT_EQ(granted_units("gpu(IDX:N/A)", "gpu"), 0u);
}

// squeue's %b (TresPerNode): gres:NAME:N up to 23.02, gres/NAME:N from 23.11; no count is one.
TEST(SlurmGresTest, reads_squeues_tres_per_node_of_every_release) {
    EXPECT_EQ(granted_units("gres:bbnvme:600", "bbnvme"), 600u);
    EXPECT_EQ(granted_units("gres/bbnvme:600", "bbnvme"), 600u);
    EXPECT_EQ(granted_units("gres/gpu:a100:2,gres/bbnvme:fast:600", "bbnvme"), 600u);
    EXPECT_EQ(granted_units("gres/bbnvme", "bbnvme"), 1u);
    EXPECT_EQ(granted_units("gres/bbnvme:fast", "bbnvme"), 1u);
    EXPECT_EQ(granted_units("N/A", "bbnvme"), 0u);
    EXPECT_EQ(granted_units("license/x:1,cpu:4", "bbnvme"), 0u);
    for (const char* text : {"gres:", "gres/", "gres/:6", "gres/bbnvme(CNT:6)"})
        EXPECT_EQ(code_of([&] { granted_units(text, "bbnvme"); }), ExitCode::data) << text;
}

TEST(SlurmGresTest, none_or_another_name_grants_nothing) {
    EXPECT_EQ(granted_units("", "bbnvme"), 0u);
    EXPECT_EQ(granted_units("(null)", "bbnvme"), 0u);
    EXPECT_EQ(granted_units("gpu:2", "bbnvme"), 0u);
    EXPECT_EQ(granted_units("bbnvme2(CNT:5)", "bbnvme"), 0u);
    EXPECT_EQ(granted_units("bbnvm(CNT:5)", "bbnvme"), 0u);
}

TEST(SlurmGresTest, text_that_is_not_scontrols_is_the_jobs_error_65) {
    for (const std::string text :
         {"bbnvme", "bbnvme(CNT:)", "bbnvme(CNT:-1)", "bbnvme(CNT:6", "bbnvme)CNT:6(",
          "bbnvme(FOO:6)", "(CNT:6)", ":6", "bbnvme:", "bbnvme(CNT:6)x", "gpu(IDX:3-1)",
          "bbnvme(CNT:99999999999999999999)", "bbnvme(CNT:18446744073709551615),bbnvme:1",
          "bbnvme:6,,", "bbnvme(CNT: 6)"}) {
        EXPECT_EQ(code_of([&] { granted_units(text, "bbnvme"); }), ExitCode::data) << text;
    }
}

// Random lists of items of several names and forms: the named one's units are their sum,
// whatever the order, the types and the other items; with one character damaged, the answer is
// a number or the job's error (65), never another failure.
TEST(SlurmGresTest, random_lists_add_up_the_named_items_only) {
    std::mt19937_64 random(20261128);
    const std::string names[] = {"bbnvme", "gpu", "bbnvme_b", "mps"};
    for (int round = 0; round < 2000; ++round) {
        std::string text;
        std::uint64_t expected = 0;
        const int items = static_cast<int>(random() % 4) + 1;
        for (int i = 0; i < items; ++i) {
            const std::string& name = names[random() % 4];
            const std::uint64_t n = random() % 5000;
            std::string item = name;
            if (random() % 2)
                item += ":t" + std::to_string(random() % 3);
            switch (random() % 3) {
                case 0:
                    item += "(CNT:" + std::to_string(n) + ")";
                    break;
                case 1:
                    item += ":" + std::to_string(n);
                    if (random() % 2)  // squeue's TresPerNode form
                        item = (random() % 2 ? "gres:" : "gres/") + item;
                    break;
                default:
                    item += n == 0 ? "(IDX:N/A)" : "(IDX:0-" + std::to_string(n - 1) + ")";
                    break;
            }
            if (name == "bbnvme")
                expected += n;
            text += (text.empty() ? "" : ",") + item;
        }
        ASSERT_EQ(granted_units(text, "bbnvme"), expected) << text;
        std::string damaged = text;
        damaged[random() % damaged.size()] = "():,-x"[random() % 6];
        const ExitCode code = code_of([&] { granted_units(damaged, "bbnvme"); });
        EXPECT_TRUE(code == ExitCode::ok || code == ExitCode::data) << damaged;
    }
}

}  // namespace
}  // namespace bbkit
