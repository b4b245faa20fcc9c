#include "bbkit/slurm_gres.hpp"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

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

// ---- a node's count: scontrol show node's Gres= ----------------------------------------------

TEST(SlurmGresTest, reads_a_nodes_gres_as_scontrol_show_node_prints_it) {
    EXPECT_EQ(node_gres_units(parse_node_gres("bbnvme:1K"), "bbnvme"), 1024u);
    EXPECT_EQ(node_gres_units(parse_node_gres("bbnvme:200"), "bbnvme"), 200u);
    EXPECT_EQ(node_gres_units(parse_node_gres("bbnvme:3M"), "bbnvme"), 3u * 1024 * 1024);
    const std::vector<NodeGres> mixed = parse_node_gres("gpu:a100:4(S:0-1),bbnvme:1500,lic:2G");
    ASSERT_EQ(mixed.size(), 3u);
    EXPECT_EQ(mixed[0].name, "gpu");
    EXPECT_EQ(mixed[0].type, "a100");
    EXPECT_EQ(mixed[0].count, 4u);
    EXPECT_EQ(node_gres_units(mixed, "bbnvme"), 1500u);
    EXPECT_EQ(node_gres_units(mixed, "nothing"), 0u);
    EXPECT_TRUE(parse_node_gres("(null)").empty());
    EXPECT_TRUE(parse_node_gres("").empty());
    EXPECT_EQ(node_gres_text(mixed), "gpu:a100:4,bbnvme:1500,lic:2147483648");
    EXPECT_EQ(node_gres_text({}), "(null)");
    // A no_consume GRES, typed or not, keeps its flag through the text for scontrol update.
    const std::vector<NodeGres> flagged = parse_node_gres("gpu:a100:no_consume:2,bw:no_consume:4G");
    ASSERT_EQ(flagged.size(), 2u);
    EXPECT_EQ(flagged[0].type, "a100");
    EXPECT_TRUE(flagged[0].no_consume);
    EXPECT_EQ(flagged[1].type, "");
    EXPECT_TRUE(flagged[1].no_consume);
    EXPECT_EQ(flagged[1].count, 4ull << 30);
    EXPECT_EQ(node_gres_text(flagged), "gpu:a100:no_consume:2,bw:no_consume:4294967296");
}

TEST(SlurmGresTest, a_nodes_gres_in_another_form_is_refused_65_naming_it) {
    for (const char* text :
         {"bbnvme", ":4", "bbnvme:", "bbnvme:x", "bbnvme:4(CNT:4)", "bbnvme:4(S:0", "bbnvme:4)",
          "a:b:c:4", "bbnvme::4", "bbnvme:4K2", "bbnvme:99999999999999999P", "bbnvme:4,",
          ",bbnvme:4", "gpu:no_consume:a100:2", "gpu:no_consume:no_consume:2", "gpu:a:b:c:2"}) {
        try {
            parse_node_gres(text);
            ADD_FAILURE() << text << " was read";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ExitCode::data) << text;
            EXPECT_NE(std::string(e.what()).find("of this node"), std::string::npos) << e.what();
        }
    }
}

// Whatever Slurm prints, the text for scontrol update reads back as the same items, and a
// count written in decimal reads back as itself.
TEST(SlurmGresTest, random_node_gres_reads_back_from_the_text_for_scontrol_update) {
    std::mt19937_64 random(20261129);
    const std::vector<std::string> names{"bbnvme", "gpu", "mps", "lic_a"};
    const std::vector<std::string> suffixes{"", "", "K", "M", "G"};
    for (int round = 0; round < 2000; ++round) {
        std::vector<std::string> items;
        std::uint64_t want = 0;
        const int n = static_cast<int>(random() % 4) + 1;
        for (int i = 0; i < n; ++i) {
            const std::string& name = names[random() % names.size()];
            const std::string type = random() % 3 == 0 ? ":t" + std::to_string(random() % 9) : "";
            const std::uint64_t count = random() % 5000;
            const std::string& suffix = suffixes[random() % suffixes.size()];
            const std::size_t power = suffix.empty() ? 0 : std::string("KMG").find(suffix) + 1;
            std::uint64_t value = count;
            for (std::size_t k = 0; k < power; ++k)
                value *= 1024;
            if (name == "bbnvme")
                want += value;
            items.push_back(name + type + ":" + std::to_string(count) + suffix +
                            (random() % 4 == 0 ? "(S:0-1)" : ""));
        }
        std::string text;
        for (const std::string& item : items)
            text += (text.empty() ? "" : ",") + item;
        const std::vector<NodeGres> gres = parse_node_gres(text);
        ASSERT_EQ(gres.size(), items.size()) << text;
        EXPECT_EQ(node_gres_units(gres, "bbnvme"), want) << text;
        const std::vector<NodeGres> again = parse_node_gres(node_gres_text(gres));
        ASSERT_EQ(again.size(), gres.size()) << text;
        for (std::size_t i = 0; i < gres.size(); ++i) {
            EXPECT_EQ(again[i].name, gres[i].name) << text;
            EXPECT_EQ(again[i].type, gres[i].type) << text;
            EXPECT_EQ(again[i].count, gres[i].count) << text;
        }
    }
}

TEST(SlurmGresTest, reads_squeues_job_ids_and_refuses_anything_else_64) {
    EXPECT_EQ(parse_job_ids(""), (std::set<std::uint64_t>{}));
    EXPECT_EQ(parse_job_ids("12\n7\n12\n"), (std::set<std::uint64_t>{7, 12}));
    EXPECT_EQ(parse_job_ids("3,4 5\t6"), (std::set<std::uint64_t>{3, 4, 5, 6}));
    for (const char* text : {"12_3", "x", "0", "-1", "1;reboot", "99999999999999999999999"})
        EXPECT_EQ(code_of([&] { parse_job_ids(text); }), ExitCode::usage) << text;
}

}  // namespace
}  // namespace bbkit
