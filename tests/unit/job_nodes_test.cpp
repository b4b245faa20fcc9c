#include "bbkit/job_nodes.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <string>
#include <vector>

#include "bbkit/error.hpp"
#include "code_of.hpp"

using namespace bbkit;

TEST(JobNodes, finds_the_node_in_the_job_order) {
    const JobNodes nodes = job_nodes("n3", "n1,n3,n2");
    EXPECT_EQ(nodes.name, "n3");
    EXPECT_EQ(nodes.index, 1u);
    EXPECT_EQ(nodes.count, 3u);
    const JobNodes alone = job_nodes("cn-0007.rack1", "cn-0007.rack1");
    EXPECT_EQ(alone.index, 0u);
    EXPECT_EQ(alone.count, 1u);
}

TEST(JobNodes, refuses_bad_names_repeats_and_strangers) {
    for (const auto& [node, list] : std::vector<std::pair<std::string, std::string>>{
             {"n1", ""},                    // an empty list
             {"n1", "n1,,n2"},              // an empty name
             {"n1", "n1,n2,"},              // a trailing comma
             {"..", "..,n1"},               // a path climbing out of DESTINATION
             {"n1", "n1,../x"},             // a slash
             {"-n1", "-n1"},                // an option-looking name
             {"n1", "n1,n 2"},              // a blank
             {"n1", "n1,n2\n"},             // a newline
             {"n1", "n1,n2,n1"},            // twice
             {"n9", "n1,n2"},               // not the job's
             {std::string(65, 'a'), "n1"},  // too long
         }) {
        EXPECT_EQ(code_of([&] { job_nodes(node, list); }), ExitCode::data)
            << node << " in " << list;
    }
    try {
        job_nodes("n1", "n1,n\x01x");
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()).find('\x01'), std::string::npos) << e.what();
    }
}

TEST(JobNodes, takes_up_to_65536_nodes) {
    std::string list;
    for (std::uint32_t i = 0; i < max_job_nodes; ++i)
        list += (i ? ",n" : "n") + std::to_string(i);
    EXPECT_EQ(job_nodes("n65535", list).index, 65535u);
    EXPECT_EQ(code_of([&] { job_nodes("n0", list + ",x"); }), ExitCode::data);
}

TEST(JobNodes, this_host_alone_is_the_short_host_name) {
    char host[HOST_NAME_MAX + 1] = {};
    ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
    const std::string name(host);
    const JobNodes alone = this_host_alone();
    EXPECT_EQ(alone.name, name.substr(0, name.find('.')));
    EXPECT_EQ(alone.index, 0u);
    EXPECT_EQ(alone.count, 1u);
}

TEST(JobNodes, gathered_destination_puts_the_node_name_in) {
    EXPECT_EQ(gathered_destination("/lus/alice/out", StageType::directory, "n2"),
              "/lus/alice/out/n2");
    EXPECT_EQ(gathered_destination("/lus/alice/result.dat", StageType::file, "n2"),
              "/lus/alice/n2/result.dat");
    EXPECT_EQ(gathered_destination("/result.dat", StageType::file, "n2"), "/n2/result.dat");
    EXPECT_EQ(gathered_destination("/", StageType::directory, "n2"), "/n2");
}
