#include "bbkit/slurm_view.hpp"

#include <gtest/gtest.h>

#include "bbkit/error.hpp"

using namespace bbkit;

namespace {

constexpr std::uint64_t KiB = 1024ULL;
constexpr std::uint64_t GiB = KiB * KiB * KiB;

Config slurm_config() {
    Config config;
    config.mode = Mode::slurm;
    config.directives = {"BB_LUA"};
    config.pools = {{"nvme", "/bb/nvme", 100 * GiB, GiB}, {"small", "/bb/small", 4 * KiB, KiB}};
    config.default_pool = "nvme";  // never applies for Slurm: it needs pool= with capacity=
    config.allow_root = true;
    return config;
}

RequestText script(const std::string& text) {
    RequestText request;
    request.script = text;
    return request;
}

// The error's message, "" when the request is accepted: parsed, then Slurm's reading checked,
// as bb-parse and bb-pool alloc do.
std::string refusal(const RequestText& text, const Config& config = slurm_config()) {
    try {
        check_slurm_view(text, parse_request(text, config, JobContext{}), config);
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ExitCode::data) << e.what();
        return e.what();
    }
    return "";
}

}  // namespace

TEST(SlurmView, reads_what_slurms_lua_plugin_reads) {
    const Config config = slurm_config();
    SlurmView v = slurm_view("#!/bin/sh\n#BB_LUA pool=small capacity=1500\n\n#BB_LUA stage_in x\n",
                             "BB_LUA", config);
    EXPECT_TRUE(v.has_directive);
    ASSERT_EQ(v.capacity_lines.size(), 1u);
    EXPECT_EQ(v.capacity_lines[0].size, 1500u);
    EXPECT_EQ(v.total, 2 * KiB);  // rounded to small's granularity
    EXPECT_EQ(v.pool, "small");
    // Lenient as Slurm: "1.5K" is 1 byte, an unknown unit is ignored, a tab is part of the unit.
    EXPECT_EQ(
        slurm_view("#BB_LUA pool=nvme capacity=1.5K", "BB_LUA", config).capacity_lines[0].size, 1u);
    EXPECT_EQ(slurm_view("#BB_LUA pool=nvme capacity=3X", "BB_LUA", config).capacity_lines[0].size,
              3u);
    EXPECT_EQ(slurm_view("#BB_LUA capacity=2G\tpool=nvme", "BB_LUA", config).capacity_lines[0].size,
              2u);
    EXPECT_TRUE(
        slurm_view("#BB_LUA pool=nvme capacity=2N", "BB_LUA", config).capacity_lines[0].nodes);
    // Repeated capacities add up; the last pool wins.
    v = slurm_view("#BB_LUA pool=small capacity=1K\n#BB_LUA pool=nvme capacity=1G\n", "BB_LUA",
                   config);
    EXPECT_EQ(v.total, KiB + GiB);
    EXPECT_EQ(v.pool, "nvme");
    // Scanning stops at the first line not starting with '#'; "#BB_LUAX" is a directive to Slurm.
    EXPECT_FALSE(slurm_view("#!/bin/sh\necho\n#BB_LUA pool=small capacity=1K\n", "BB_LUA", config)
                     .has_directive);
    EXPECT_EQ(slurm_view("#BB_LUAX pool=small capacity=1K", "BB_LUA", config).capacity_lines.size(),
              1u);
    // A trailing '\' joins the next directive line only.
    EXPECT_EQ(slurm_view("#BB_LUA pool=small \\\n#BB_LUA capacity=1K\n", "BB_LUA", config).total,
              KiB);
    EXPECT_TRUE(slurm_view("#BB_LUA pool=small \\\n# capacity=1K\n", "BB_LUA", config)
                    .capacity_lines.empty());
}

TEST(SlurmView, splices_bb_and_bbf_text_after_the_first_line) {
    RequestText text = script("#!/bin/sh\necho hi\n");
    text.bb = "#BB_LUA pool=small capacity=1K";
    EXPECT_EQ(slurm_job_text(text), "#!/bin/sh\n#BB_LUA pool=small capacity=1K\necho hi\n");
    text.script = std::string("echo hi\n\0", 9);
    EXPECT_EQ(slurm_job_text(text), "#BB_LUA pool=small capacity=1K\necho hi\n");
    EXPECT_EQ(refusal(text), "");
}

TEST(SlurmView, accepts_requests_read_the_same_way) {
    EXPECT_EQ(refusal(script("#!/bin/sh\n#BB_LUA pool=small capacity=2K\n")), "");
    EXPECT_EQ(refusal(script("#!/bin/sh\n#BB_LUA capacity=1500 pool=small access=striped\n")), "");
    EXPECT_EQ(refusal(script("#!/bin/sh\n#BB_LUA jobdw pool=nvme capacity=10GB\n")), "");
    EXPECT_EQ(refusal(script("#!/bin/sh\n#BB_LUA pool=small \\\n#BB_LUA capacity=1K\n")), "");
    EXPECT_EQ(refusal(script("#!/bin/sh\n#BB_LUA\n")), "");  // no space: nothing to compare
    EXPECT_EQ(refusal(script(std::string("#!/bin/sh\n#BB_LUA pool=small capacity=1K\n\0", 42))),
              "");
}

TEST(SlurmView, refuses_requests_slurm_reads_differently) {
    auto expect = [](const std::string& text, const std::string& why) {
        const std::string message = refusal(script("#!/bin/sh\n" + text));
        EXPECT_NE(message.find(why), std::string::npos) << text << " -> " << message;
    };
    expect("#BB_LUA capacity=1K\n", "Slurm needs pool= on the line with capacity=");
    expect("#BB_LUA pool=small capacity=1K\n#BB_LUA pool=small capacity=1K\n",
           "only one job buffer per job");  // bbkit's own rule comes first
    expect(
        "#BB_LUA pool=small capacity=1K\n#BB_LUA stage_out type=file source=a "
        "destination=/o/capacity=1K\n",
        "2 #BB_LUA lines hold capacity= and Slurm adds them up");
    expect("#BB_LUA mempool=x pool=small capacity=1K\n",
           "Slurm reads pool 'x', bbkit pool 'small'");
    expect("#BB_LUA pool=small capacity=\"1K\"\n", "Slurm reads capacity 0 bytes, bbkit 1024");
    expect("#BB_LUA pool=small xcapacity=3G capacity=1K\n",
           "Slurm reads capacity 3221225472 bytes, bbkit 1024");
    // A plain comment does not continue a directive, for bbkit as for Slurm.
    expect("#BB_LUA pool=small \\\n# capacity=1K\n", "a job buffer needs capacity=");
    expect("#BB_LUA stage_in type=file source=/d/capacity=3 destination=x pool=small\n",
           "Slurm takes '#BB_LUA stage_in");
}

// The parser reads bbkit's grammar only; Slurm's reading is its callers' question, asked in
// Slurm mode alone.
TEST(SlurmView, the_parser_leaves_slurms_reading_to_its_caller) {
    const RequestText text = script("#!/bin/sh\n#BB_LUA capacity=1K\n");
    const Config config = slurm_config();
    const Request request = parse_request(text, config, JobContext{});
    ASSERT_TRUE(request.job_buffer);
    EXPECT_EQ(request.job_buffer->pool, "nvme");  // the default pool, which Slurm never applies
    EXPECT_THROW(check_slurm_view(text, request, config), Error);
    Config standalone = config;
    standalone.mode = Mode::standalone;
    EXPECT_NO_THROW(check_slurm_view(text, request, standalone));
}

TEST(SlurmView, short_form_is_refused_in_slurm_mode_only) {
    RequestText text;
    text.bb = "capacity=1G pool=nvme";
    EXPECT_NE(refusal(text).find("not the short form (write --bb '#BB_LUA pool=POOL "
                                 "capacity=SIZE')"),
              std::string::npos);
    Config standalone = slurm_config();
    standalone.mode = Mode::standalone;
    standalone.directives = {"BB_LUA", "DW", "BB"};
    EXPECT_EQ(refusal(text, standalone), "");
}
