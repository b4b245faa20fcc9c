#include "bbkit/directive.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <functional>

#include "bbkit/error.hpp"
#include "bbkit/render.hpp"
#include "source_file.hpp"

using bbkit::buffer_relative_path;
using bbkit::canonical_lines;
using bbkit::Config;
using bbkit::Error;
using bbkit::ExitCode;
using bbkit::JobContext;
using bbkit::Mode;
using bbkit::Origin;
using bbkit::parse_request;
using bbkit::Request;
using bbkit::request_json;
using bbkit::RequestText;
using bbkit::StageDirective;
using bbkit::StageType;

namespace {

constexpr std::uint64_t KiB = 1024ULL;
constexpr std::uint64_t GiB = KiB * KiB * KiB;

Config test_config() {
    Config config;
    config.pools = {{"nvme", "/bb/nvme", 100 * GiB, GiB},
                    {"small", "/bb/small", 4 * KiB, KiB},
                    {"pool1", "/bb/pool1", 10000 * KiB, KiB}};
    config.default_pool = "nvme";
    return config;
}

RequestText script(const std::string& text) {
    RequestText request;
    request.script = text;
    return request;
}

RequestText bb(const std::string& text) {
    RequestText request;
    request.bb = text;
    return request;
}

RequestText bbf(const std::string& text) {
    RequestText request;
    request.bbf = text;
    return request;
}

Request parse(const RequestText& text, const Config& config = test_config(),
              const JobContext& job = {}) {
    return parse_request(text, config, job);
}

Request parse_script(const std::string& text, const JobContext& job = {}) {
    return parse(script(text), test_config(), job);
}

// The error parse() throws; fails the test when it throws none.
Error error_of(const RequestText& text, const Config& config = test_config(),
               const JobContext& job = {}) {
    try {
        parse(text, config, job);
    } catch (const Error& e) {
        return e;
    }
    ADD_FAILURE() << "accepted";
    return Error(ExitCode::ok, "");
}

void expect_error(const RequestText& text, ExitCode code, const std::string& message,
                  const Config& config = test_config(), const JobContext& job = {}) {
    const Error e = error_of(text, config, job);
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos)
        << "'" << e.what() << "' lacks '" << message << "'";
}

void expect_script_error(const std::string& text, const std::string& message,
                         ExitCode code = ExitCode::data) {
    expect_error(script(text), code, message);
}

JobContext job_with_user(const std::string& user) {
    JobContext job;
    job.user = user;
    return job;
}

const std::string shebang = "#!/bin/bash\n";

// ---- the guide's examples --------------------------------------------------------------------

TEST(Directive, bare_lua_directive_only_asks_for_the_stages) {
    const Request r = parse_script(shebang + "#BB_LUA\nsrun application.sh\n");
    EXPECT_TRUE(r.has_directive);
    EXPECT_FALSE(r.job_buffer);
    EXPECT_TRUE(r.warnings.empty());
}

TEST(Directive, lua_pool_and_capacity_request_a_job_buffer) {
    const Request r = parse_script(shebang + "#BB_LUA pool=pool1 capacity=1K\nsrun a.sh\n");
    ASSERT_TRUE(r.job_buffer);
    EXPECT_EQ(r.job_buffer->pool, "pool1");
    EXPECT_EQ(r.job_buffer->capacity, KiB);
    EXPECT_EQ(r.job_buffer->allocated, KiB);
    EXPECT_EQ(r.job_buffer->access, "striped");
    EXPECT_EQ(r.job_buffer->type, "scratch");
    EXPECT_EQ(r.job_buffer->where.origin, Origin::script);
    EXPECT_EQ(r.job_buffer->where.line, 2);
}

TEST(Directive, lua_capacity_is_rounded_up_to_the_pool_granularity) {
    const Request r = parse_script("#BB_LUA pool=nvme capacity=100MiB access=private\n");
    ASSERT_TRUE(r.job_buffer);
    EXPECT_EQ(r.job_buffer->capacity, 100 * KiB * KiB);
    EXPECT_EQ(r.job_buffer->allocated, GiB);
    EXPECT_EQ(r.job_buffer->access, "private");
}

TEST(Directive, datawarp_jobdw_uses_the_default_pool_and_warns_about_unknown_keys) {
    const Request r = parse_script(
        shebang + "#DW jobdw type=scratch capacity=1GB access_mode=striped,private pfs=/scratch\n");
    ASSERT_TRUE(r.job_buffer);
    EXPECT_EQ(r.job_buffer->capacity, 1000000000u);
    EXPECT_EQ(r.job_buffer->allocated, GiB);
    EXPECT_EQ(r.job_buffer->pool, "nvme");
    EXPECT_EQ(r.job_buffer->access, "striped,private");
    ASSERT_EQ(r.warnings.size(), 1u);
    EXPECT_EQ(r.warnings[0].where.line, 2);
    EXPECT_NE(r.warnings[0].message.find("pfs"), std::string::npos);
}

TEST(Directive, guide_stage_in_to_an_absolute_destination_is_outside_the_buffer) {
    expect_script_error(shebang +
                            "#DW jobdw type=scratch capacity=1GB\n"
                            "#DW stage_in type=file source=/tmp/a destination=/ss/file1\n",
                        "script line 3: destination '/ss/file1' is outside the buffer");
}

TEST(Directive, guide_stage_lines_parse_when_written_inside_the_buffer) {
    const Request r = parse_script(
        shebang +
        "#DW jobdw type=scratch capacity=1GB access_mode=striped,private pfs=/scratch\n"
        "#DW stage_in type=file source=/tmp/a destination=$DW_JOB_STRIPED/ss/file1\n"
        "#DW stage_out type=file destination=/tmp/b source=$DW_JOB_STRIPED/ss/file1\n"
        "srun application.sh\n");
    ASSERT_EQ(r.stage_in.size(), 1u);
    EXPECT_EQ(r.stage_in[0].type, StageType::file);
    EXPECT_EQ(r.stage_in[0].source, "/tmp/a");
    EXPECT_EQ(r.stage_in[0].destination, "ss/file1");
    EXPECT_EQ(r.stage_in[0].buffer, "");
    EXPECT_EQ(r.stage_in[0].where.line, 3);
    ASSERT_EQ(r.stage_out.size(), 1u);
    EXPECT_EQ(r.stage_out[0].source, "ss/file1");
    EXPECT_EQ(r.stage_out[0].destination, "/tmp/b");
    EXPECT_FALSE(r.stage_out[0].unresolved);
}

TEST(Directive, guide_creates_two_persistent_buffers) {
    const Request r =
        parse_script(shebang +
                     "#BB create_persistent name=alpha capacity=32GB access=striped type=scratch\n"
                     "#BB create_persistent name=beta capacity=16GB access=striped type=scratch\n"
                     "srun application.sh\n");
    ASSERT_EQ(r.create.size(), 2u);
    EXPECT_EQ(r.create[0].name, "alpha");
    EXPECT_EQ(r.create[0].capacity, 32000000000u);
    EXPECT_EQ(r.create[0].allocated, 30 * GiB);
    EXPECT_EQ(r.create[0].pool, "nvme");
    EXPECT_EQ(r.create[1].name, "beta");
    EXPECT_EQ(r.create[1].where.line, 3);
    EXPECT_FALSE(r.job_buffer);
}

TEST(Directive, guide_destroys_two_persistent_buffers_and_honours_hurry) {
    const Request r = parse_script(shebang +
                                   "#BB destroy_persistent name=alpha\n"
                                   "#BB destroy_persistent name=beta hurry\n");
    ASSERT_EQ(r.destroy.size(), 2u);
    EXPECT_EQ(r.destroy[0].name, "alpha");
    EXPECT_FALSE(r.destroy[0].hurry);
    EXPECT_EQ(r.destroy[1].name, "beta");
    EXPECT_TRUE(r.destroy[1].hurry);
    EXPECT_TRUE(r.warnings.empty());
}

TEST(Directive, bb_short_form_is_translated_like_the_datawarp_plugin) {
    Config config = test_config();
    config.directives = {"BB_LUA"};  // the translation is read even without #DW
    const Request r = parse(bb("capacity=1G access=striped type=scratch"), config);
    ASSERT_TRUE(r.job_buffer);
    EXPECT_EQ(r.job_buffer->capacity, GiB);
    EXPECT_EQ(r.job_buffer->pool, "nvme");
    EXPECT_EQ(r.job_buffer->access, "striped");
    EXPECT_EQ(r.job_buffer->where.origin, Origin::bb_option);
    EXPECT_EQ(r.job_buffer->where.line, 1);
}

TEST(Directive, bb_short_form_pool_is_passed_on) {
    const Request r = parse(bb("capacity=2K pool=small"));
    ASSERT_TRUE(r.job_buffer);
    EXPECT_EQ(r.job_buffer->pool, "small");
    EXPECT_EQ(r.job_buffer->allocated, 2 * KiB);
}

TEST(Directive, bb_short_form_refuses_swap_and_unknown_keys) {
    expect_error(bb("capacity=1G swap=2G"), ExitCode::data, "--bb: swap is not supported");
    expect_error(bb("capacity=1G nodes=2"), ExitCode::data, "--bb: unknown option 'nodes'");
}

TEST(Directive, bb_short_form_may_span_lines) {
    EXPECT_EQ(parse(bb("capacity=2K\npool=small\n")).job_buffer->pool, "small");
}

TEST(Directive, bb_short_form_without_capacity_is_an_error) {
    expect_error(bb("access=striped"), ExitCode::data, "--bb: jobdw needs capacity=");
}

TEST(Directive, bb_lua_text_is_read_as_a_directive) {
    const Request r = parse(bb("#BB_LUA pool=pool1 capacity=1K"));
    ASSERT_TRUE(r.job_buffer);
    EXPECT_EQ(r.job_buffer->pool, "pool1");
}

TEST(Directive, bb_text_is_split_before_each_prefix) {
    const Request r =
        parse(bb("#BB_LUA capacity=1G #BB_LUA stage_in type=file source=/a destination=b"));
    ASSERT_TRUE(r.job_buffer);
    ASSERT_EQ(r.stage_in.size(), 1u);
    EXPECT_EQ(r.stage_in[0].destination, "b");
    EXPECT_EQ(r.stage_in[0].where.line, 2);
    expect_error(bb("#BB_LUA capacity=1G\n#BB_LUA capacity=2G"), ExitCode::data,
                 "--bb line 2: only one job buffer per job: one is already requested on --bb "
                 "line 1");
}

TEST(Directive, bb_cannot_create_or_destroy_persistent_buffers) {
    expect_error(bb("#BB create_persistent name=alpha capacity=1G"), ExitCode::data,
                 "--bb: --bb cannot create or destroy persistent burst buffers");
    expect_error(bb("#BB destroy_persistent name=alpha"), ExitCode::data,
                 "--bb cannot create or destroy");
}

TEST(Directive, bbf_reads_every_line_and_refuses_other_text) {
    const Request r =
        parse(bbf("#BB_LUA capacity=1G\n\n# a comment\n#BB create_persistent "
                  "name=p capacity=1G\n"));
    ASSERT_TRUE(r.job_buffer);
    ASSERT_EQ(r.create.size(), 1u);
    EXPECT_EQ(r.create[0].where.origin, Origin::bbf_file);
    EXPECT_EQ(r.create[0].where.line, 4);
    expect_error(bbf("#BB_LUA capacity=1G\nsrun a.out\n"), ExitCode::data,
                 "--bbf line 2: not a burst-buffer directive");
}

TEST(Directive, all_sources_are_read_in_order_with_their_origin) {
    RequestText text = script("#BB_LUA capacity=1G\n");
    text.bb = "#BB_LUA use_persistent name=shared";
    text.bbf = "#BB_LUA stage_in type=file source=/a destination=b\n";
    const Request r = parse(text);
    EXPECT_EQ(r.job_buffer->where.origin, Origin::script);
    EXPECT_EQ(r.use.at(0).where.origin, Origin::bb_option);
    EXPECT_EQ(r.stage_in.at(0).where.origin, Origin::bbf_file);
    EXPECT_EQ(std::string(bbkit::to_string(Origin::bbf_file)), "--bbf");
}

// ---- scanning --------------------------------------------------------------------------------

TEST(Directive, scanning_stops_at_the_first_non_comment_line) {
    const Request r = parse_script(shebang +
                                   "#SBATCH -N1\n\n  \n#BB_LUA capacity=1G\necho hi\n"
                                   "#BB_LUA stage_in type=nonsense\n");
    ASSERT_TRUE(r.job_buffer);
    EXPECT_EQ(r.job_buffer->where.line, 5);
    EXPECT_TRUE(r.stage_in.empty());
}

TEST(Directive, a_prefix_must_end_at_a_blank) {
    const Request r = parse_script("#BBX capacity=1G\n#BB_LUAX capacity=1G\n#DWjobdw\n");
    EXPECT_FALSE(r.has_directive);
    EXPECT_TRUE(parse_script("#BB_LUA\tcapacity=1G\n").job_buffer);
}

TEST(Directive, trailing_nul_bytes_are_ignored) {
    const Request r = parse_script(std::string("#BB_LUA capacity=1G\nsrun a\n\0\0", 29));
    EXPECT_TRUE(r.job_buffer);
}

TEST(Directive, an_inner_nul_byte_is_an_error_naming_the_line) {
    expect_script_error(std::string("#!/bin/sh\n#BB_LUA\nsrun\0a\n", 24),
                        "script line 3: NUL byte");
}

TEST(Directive, a_trailing_backslash_continues_the_directive) {
    const Request r = parse_script(
        "#!/bin/sh\n#BB_LUA stage_in type=file \\\n#BB_LUA source=/data/in \\\n#BB_LUA "
        "destination=in\n"
        "#BB_LUA capacity=1G\n");
    ASSERT_EQ(r.stage_in.size(), 1u);
    EXPECT_EQ(r.stage_in[0].source, "/data/in");
    EXPECT_EQ(r.stage_in[0].destination, "in");
    EXPECT_EQ(r.stage_in[0].where.line, 2);
    EXPECT_EQ(r.job_buffer->where.line, 5);
}

// As Slurm reads it: a plain comment or a command ends a continuation, never joins it.
TEST(Directive, only_a_directive_line_continues_a_directive) {
    Request r = parse_script("#BB_LUA capacity=1G \\\nsrun a.out\n#BB_LUA pool=small\n");
    ASSERT_TRUE(r.job_buffer);
    EXPECT_EQ(r.job_buffer->pool, "nvme");  // the default: pool=small came after the command
    expect_script_error("#!/bin/sh\n#BB_LUA stage_in type=file \\\n#   source=/data/in\n",
                        "script line 2");
}

// Slurm continues a line ending in "\\" too: one backslash goes, one stays.
TEST(Directive, a_double_backslash_at_the_end_continues_as_in_slurm) {
    expect_script_error(
        "#BB_LUA stage_in type=file source=/a destination=b\\\\\n#BB_LUA capacity=1G\n",
        "has a backslash at its end");
}

// The table Slurm's reading is written down in, shared with the Lua reader
// (tests/slurm-lua/directive-cases.lua): each script must parse exactly as its expected
// directive lines, one per line, do.
TEST(Directive, continued_lines_join_as_slurm_joins_them) {
    std::ifstream in(bbkit::unit::source_file("tests/data/directive-reading-cases.tsv"));
    ASSERT_TRUE(in) << "tests/data/directive-reading-cases.tsv is missing";
    const auto without_lines = [](nlohmann::json value) {
        std::function<void(nlohmann::json&)> strip = [&](nlohmann::json& v) {
            if (v.is_object()) {
                v.erase("line");
                v.erase("where");
            }
            if (v.is_structured())
                for (auto& child : v)
                    strip(child);
        };
        strip(value);
        return value;
    };
    const auto replaced = [](std::string text, char from, char to) {
        std::replace(text.begin(), text.end(), from, to);
        return text;
    };
    int cases = 0;
    std::string row;
    while (std::getline(in, row)) {
        if (row.empty() || row[0] == '#')
            continue;
        const std::size_t tab1 = row.find('\t');
        const std::size_t tab2 = row.find('\t', tab1 + 1);
        ASSERT_NE(tab2, std::string::npos) << "malformed: " << row;
        const std::string name = row.substr(0, tab1);
        const std::string text = replaced(row.substr(tab1 + 1, tab2 - tab1 - 1), '|', '\n') + "\n";
        std::string expected = "#!/bin/sh\n";
        for (std::size_t at = tab2 + 1; at < row.size();) {
            const std::size_t close = row.find(']', at);
            ASSERT_TRUE(row[at] == '[' && close != std::string::npos) << "malformed: " << row;
            expected += "#BB_LUA" + row.substr(at + 1, close - at - 1) + "\n";
            at = close + 1;
        }
        // The outcome of parsing: the request without line numbers, or the refusal.
        const auto outcome = [&](const std::string& script_text) {
            try {
                return without_lines(request_json(parse_script(script_text))).dump();
            } catch (const Error& e) {
                return std::string("error ") + std::to_string(e.exit_status()) + ": " + e.what();
            }
        };
        EXPECT_EQ(outcome(text), outcome(expected)) << name;
        ++cases;
    }
    EXPECT_GE(cases, 10);
}

// DataWarp-era scripts (tests/data/datawarp-directive-cases.tsv, shared with cli_filter.lua's
// reader, tests/slurm-lua/datawarp-cases.lua): in datawarp mode each script gets its expected
// answer, and the same answer as its directive lines as Slurm's datawarp plugin collects them.
TEST(Directive, datawarp_era_scripts_read_as_datawarp_read_them) {
    std::ifstream in(bbkit::unit::source_file("tests/data/datawarp-directive-cases.tsv"));
    ASSERT_TRUE(in) << "tests/data/datawarp-directive-cases.tsv is missing";
    Config config = test_config();
    config.mode = bbkit::Mode::datawarp;
    config.directives = bbkit::datawarp_directives();
    const auto split = [](const std::string& row) {
        std::vector<std::string> fields;
        std::size_t begin = 0;
        for (std::size_t tab; (tab = row.find('\t', begin)) != std::string::npos; begin = tab + 1)
            fields.push_back(row.substr(begin, tab - begin));
        fields.push_back(row.substr(begin));
        return fields;
    };
    const auto outcome = [&](const std::string& text) {
        try {
            const Request r = parse(script(text), config);
            return std::string("accepted") + (r.has_directive ? "" : " (nothing)");
        } catch (const Error& e) {
            return std::string("refused ") + std::to_string(e.exit_status()) + ": " + e.what();
        }
    };
    int cases = 0;
    std::string row;
    while (std::getline(in, row)) {
        if (row.empty() || row[0] == '#')
            continue;
        const std::vector<std::string> f = split(row);
        ASSERT_EQ(f.size(), 4u) << "malformed: " << row;
        std::string text = f[1];
        std::replace(text.begin(), text.end(), '|', '\n');
        const std::string got = outcome(text + "\n");
        if (f[3] == "accepted") {
            EXPECT_EQ(got.rfind("accepted", 0), 0u) << f[0] << ": " << got;
            // bb-parse --emit-script's lines read back in datawarp mode (#BB for persistent
            // buffers, as the plugin reads them).
            std::string emitted = "#!/bin/sh\n";
            for (const std::string& line :
                 canonical_lines(parse(script(text + "\n"), config), config))
                emitted += line + "\n";
            EXPECT_EQ(outcome(emitted).rfind("accepted", 0), 0u) << f[0] << ": " << emitted;
        } else {
            ASSERT_EQ(f[3].rfind("refused: ", 0), 0u) << "malformed: " << row;
            EXPECT_EQ(got.rfind("refused 65: ", 0), 0u) << f[0] << ": " << got;
            EXPECT_NE(got.find(f[3].substr(9)), std::string::npos) << f[0] << ": " << got;
        }
        if (f[2] != "refused") {
            std::string lines = "#!/bin/sh\n";
            for (std::size_t at = 0; at < f[2].size();) {
                const std::size_t close = f[2].find("]", at);
                ASSERT_TRUE(f[2][at] == '[' && close != std::string::npos) << "malformed: " << row;
                lines += f[2].substr(at + 1, close - at - 1) + "\n";
                at = close + 1;
            }
            // Without line numbers: a joined line is one line where the script had several.
            const auto unnumbered = [](std::string text) {
                const std::size_t colon = text.find(" line ");
                if (colon != std::string::npos)
                    text.erase(colon, text.find(':', colon) - colon);
                return text;
            };
            EXPECT_EQ(unnumbered(outcome(lines)), unnumbered(got)) << f[0];
        }
        ++cases;
    }
    EXPECT_GE(cases, 20);
}

TEST(Directive, a_key_repeated_with_the_same_value_is_read_once) {
    const Request r = parse_script("#DW jobdw type=scratch capacity=1GiB type=scratch\n");
    ASSERT_TRUE(r.job_buffer);
    EXPECT_EQ(r.job_buffer->type, "scratch");
    expect_script_error("#DW jobdw capacity=1GiB capacity=2GiB\n",
                        "'capacity=' is given twice with different values ('1GiB' and '2GiB'");
}

TEST(Directive, symbols_replaced_by_the_scheduler_are_not_replaced_again) {
    // What Slurm's datawarp plugin hands setup: %% already turned into %, a job name holding
    // '%', and a \\ that stopped Slurm's replacement, kept.
    RequestText text = script(
        "#!/bin/sh\n#DW jobdw capacity=1GiB\n"
        "#DW stage_out type=file source=$DW_JOB_STRIPED/o destination=/data/100%j/%x\n"
        "#DW stage_in type=file source=/in/a\\\\b destination=$DW_JOB_STRIPED/i\n");
    text.symbols_replaced = true;
    JobContext job;
    job.job_id = "42";
    job.job_name = "evil";
    const Request r = parse(text, test_config(), job);
    ASSERT_EQ(r.stage_out.size(), 1u);
    EXPECT_EQ(r.stage_out[0].destination, "/data/100%j/%x");
    EXPECT_FALSE(r.stage_out[0].unresolved);
    ASSERT_EQ(r.stage_in.size(), 1u);
    EXPECT_EQ(r.stage_in[0].source, "/in/a\\\\b");
    EXPECT_TRUE(r.warnings.empty());
    // Its canonical lines read back the same, symbols and all.
    std::string again = "#!/bin/sh\n";
    for (const std::string& line : canonical_lines(r, test_config()))
        again += line + "\n";
    const Request back = parse(script(again), test_config(), job);
    EXPECT_EQ(back.stage_out.at(0).destination, "/data/100%j/%x");
    EXPECT_EQ(back.stage_in.at(0).source, "/in/a\\\\b");
    // Read as a job script, the same text is replaced.
    text.symbols_replaced = false;
    EXPECT_EQ(parse(text, test_config(), job).stage_out.at(0).destination, "/data/10042/evil");
}

// ---- tokens and symbols ----------------------------------------------------------------------

TEST(Directive, quoted_values_keep_blanks_and_escaped_quotes) {
    const Request r = parse_script(
        "#BB_LUA stage_in type=file source=\"/data/my file\" destination=\"say \\\"hi\\\"\"\n");
    ASSERT_EQ(r.stage_in.size(), 1u);
    EXPECT_EQ(r.stage_in[0].source, "/data/my file");
    EXPECT_EQ(r.stage_in[0].destination, "say \"hi\"");
}

TEST(Directive, an_unterminated_quote_names_the_line) {
    expect_script_error("#!/bin/sh\n#BB_LUA stage_in type=file source=\"/data/x destination=y\n",
                        "script line 2: unterminated quote");
}

JobContext full_job() {
    JobContext job;
    job.job_id = "1234";
    job.workdir = "/home/alice/run";
    job.job_name = "sim";
    job.user = "nobody";
    return job;
}

// The stage_in source after replacement of `pattern` (placed under /in/).
std::string replaced(const std::string& pattern, const JobContext& job) {
    const Request r = parse_script(
        "#BB_LUA stage_in type=file source=/in/" + pattern + " destination=out\n", job);
    return r.stage_in.at(0).source;
}

TEST(Directive, each_symbol_is_replaced_from_the_job) {
    JobContext job = full_job();
    EXPECT_EQ(replaced("a%%b", job), "/in/a%b");
    EXPECT_EQ(replaced("%j", job), "/in/1234");
    EXPECT_EQ(replaced("%A", job), "/in/1234");
    EXPECT_EQ(replaced("%a", job), "/in/4294967294");
    EXPECT_EQ(replaced("%b", job), "/in/4");
    EXPECT_EQ(replaced("%u", job), "/in/nobody");
    EXPECT_EQ(replaced("%x", job), "/in/sim");
    EXPECT_EQ(replaced("%d/f", job), "/in/home/alice/run/f");
    job.array_job_id = "1200";
    job.array_task_id = "17";
    EXPECT_EQ(replaced("%A_%a_%b", job), "/in/1200_17_7");
}

TEST(Directive, workdir_symbol_gives_an_absolute_source) {
    const Request r =
        parse_script("#BB_LUA stage_in type=file source=%d/input destination=in\n", full_job());
    EXPECT_EQ(r.stage_in.at(0).source, "/home/alice/run/input");
}

TEST(Directive, unknown_percent_sequences_stay_literally) {
    EXPECT_EQ(replaced("100%q%", full_job()), "/in/100%q%");
}

TEST(Directive, unknown_symbols_stay_and_mark_the_stage_unresolved_with_one_warning) {
    const Request r =
        parse_script("#BB_LUA stage_out type=file source=%x.out destination=%d/out/%j_%x\n");
    ASSERT_EQ(r.stage_out.size(), 1u);
    EXPECT_TRUE(r.stage_out[0].unresolved);
    EXPECT_EQ(r.stage_out[0].source, "%x.out");
    EXPECT_EQ(r.stage_out[0].destination, "%d/out/%j_%x");
    ASSERT_EQ(r.warnings.size(), 1u);
    EXPECT_EQ(r.warnings[0].where.line, 1);
    EXPECT_EQ(r.warnings[0].message,
              "%x is not known yet; it is replaced when the job is submitted");
}

TEST(Directive, an_unresolved_relative_source_is_still_refused) {
    expect_script_error("#BB_LUA stage_in type=file source=%u/x destination=in\n",
                        "source '%u/x' must be an absolute path (write %d/%u/x");
}

TEST(Directive, a_double_backslash_stops_replacement_for_the_rest_of_the_line) {
    const Request r = parse_script(
        "#BB_LUA stage_out type=file source=%j destination=/out/\\\\%j/%x\n", full_job());
    EXPECT_EQ(r.stage_out.at(0).source, "1234");
    EXPECT_EQ(r.stage_out.at(0).destination, "/out/%j/%x");
    EXPECT_FALSE(r.stage_out.at(0).unresolved);
}

TEST(Directive, job_name_cannot_inject_a_key) {
    JobContext job = full_job();
    job.job_name = "x destination=/etc";
    const Request r =
        parse_script("#BB_LUA stage_in type=file source=/in/%x destination=%x\n", job);
    ASSERT_EQ(r.stage_in.size(), 1u);
    EXPECT_EQ(r.stage_in[0].source, "/in/x destination=/etc");
    EXPECT_EQ(r.stage_in[0].destination, "x destination=/etc");
    EXPECT_TRUE(r.warnings.empty());
}

TEST(Directive, job_name_cannot_climb_out_of_the_buffer) {
    JobContext job = full_job();
    job.job_name = "../../etc";
    expect_error(script("#BB_LUA stage_in type=file source=/a destination=%x/f\n"), ExitCode::data,
                 "destination '../../etc/f' is outside the buffer", test_config(), job);
}

TEST(Directive, user_name_cannot_inject_a_key) {
    // A name with blanks is no user: the lookup refuses it before any line is read.
    expect_error(script("#BB_LUA stage_in type=file source=/home/%u destination=d\n"),
                 ExitCode::no_input, "no such user", test_config(),
                 job_with_user("nobody destination=/etc"));
    const Request r = parse_script("#BB_LUA stage_in type=file source=/home/%u destination=d\n",
                                   job_with_user("nobody"));
    EXPECT_EQ(r.stage_in.at(0).source, "/home/nobody");
}

// ---- paths -----------------------------------------------------------------------------------

TEST(Directive, destinations_may_not_climb_or_be_absolute) {
    expect_script_error("#BB_LUA stage_in type=file source=/a destination=../x\n",
                        "script line 1: destination '../x' is outside the buffer");
    expect_script_error("#BB_LUA stage_in type=file source=/a destination=a/../b\n",
                        "destination 'a/../b' is outside the buffer");
    expect_script_error("#BB_LUA stage_in type=file source=/a destination=$BB_JOB_DIR/../x\n",
                        "is outside the buffer");
    expect_script_error("#BB_LUA stage_in type=file source=/a destination=/etc/passwd\n",
                        "destination '/etc/passwd' is outside the buffer (write it relative to "
                        "the buffer or as $DW_JOB_STRIPED/…)");
    expect_script_error("#BB_LUA stage_out type=file source=/etc/shadow destination=/b\n",
                        "source '/etc/shadow' is outside the buffer");
}

TEST(Directive, sources_and_outside_destinations_must_be_absolute_without_dotdot) {
    expect_script_error("#BB_LUA stage_in type=file source=data/in destination=in\n",
                        "source 'data/in' must be an absolute path (write %d/data/in");
    expect_script_error("#BB_LUA stage_in type=file source=/a/../etc destination=in\n",
                        "source '/a/../etc' must not contain '..'");
    expect_script_error("#BB_LUA stage_out type=file source=out destination=/x/../y\n",
                        "destination '/x/../y' must not contain '..'");
}

TEST(Directive, paths_are_lexically_normalized) {
    const Request r = parse_script(
        "#BB_LUA stage_in type=directory source=/data//./in/ destination=./a//b/\n"
        "#BB_LUA stage_out type=directory source=$BB_JOB_DIR destination=/out/./x/\n");
    EXPECT_EQ(r.stage_in.at(0).source, "/data/in");
    EXPECT_EQ(r.stage_in.at(0).destination, "a/b");
    EXPECT_EQ(r.stage_out.at(0).source, "");
    EXPECT_EQ(r.stage_out.at(0).destination, "/out/x");
}

TEST(Directive, a_file_stage_out_needs_a_file_inside_the_buffer) {
    expect_script_error("#BB_LUA stage_out type=file source=$DW_JOB_STRIPED destination=/a\n",
                        "must name a file inside the buffer, not its root");
}

TEST(Directive, buffer_relative_path_accepts_the_buffer_variables) {
    std::string buffer = "x";
    EXPECT_EQ(buffer_relative_path("a/b", buffer), "a/b");
    EXPECT_EQ(buffer, "");
    EXPECT_EQ(buffer_relative_path("$BB_JOB_DIR/a", buffer), "a");
    EXPECT_EQ(buffer_relative_path("${BB_JOB_DIR}/a", buffer), "a");
    EXPECT_EQ(buffer_relative_path("$DW_JOB_STRIPED", buffer), "");
    EXPECT_EQ(buffer_relative_path("$DW_JOB_PRIVATE/x/", buffer), "x");
    EXPECT_EQ(buffer_relative_path("$DW_PERSISTENT_STRIPED_my_data/in", buffer), "in");
    EXPECT_EQ(buffer, "my_data");
    EXPECT_THROW(buffer_relative_path("$DW_JOB_STRIPEDX/a", buffer), Error);
    EXPECT_THROW(buffer_relative_path("$HOME/a", buffer), Error);
    EXPECT_THROW(buffer_relative_path("", buffer), Error);
}

TEST(Directive, persistent_variable_names_a_used_persistent_buffer) {
    const Request r = parse_script(
        "#DW persistentdw name=my-data\n"
        "#DW stage_in type=list source=/lists/in.txt "
        "destination=$DW_PERSISTENT_STRIPED_my_data/in\n");
    ASSERT_EQ(r.stage_in.size(), 1u);
    EXPECT_EQ(r.stage_in[0].type, StageType::list);
    EXPECT_EQ(r.stage_in[0].buffer, "my-data");
    EXPECT_EQ(r.stage_in[0].destination, "in");
}

TEST(Directive, persistent_variable_must_name_a_buffer_of_the_request) {
    expect_script_error(
        "#BB_LUA capacity=1G\n"
        "#DW stage_in type=file source=/a destination=$DW_PERSISTENT_STRIPED_other/in\n",
        "script line 2: $DW_PERSISTENT_STRIPED_other names no persistent buffer");
}

// ---- sizes, pools, types ---------------------------------------------------------------------

TEST(Directive, node_count_capacity_is_refused) {
    expect_script_error("#DW jobdw capacity=2N\n", "script line 1: invalid capacity '2N'");
}

TEST(Directive, decimal_capacity_names_line_and_token) {
    expect_script_error(shebang + "\n#BB_LUA capacity=1.5G\n",
                        "script line 3: invalid size '1.5G': decimals are not allowed (use a "
                        "smaller unit)");
}

TEST(Directive, type_cache_is_refused_with_the_reason) {
    expect_script_error("#DW jobdw capacity=1G type=cache\n",
                        "script line 1: type=cache is not supported: bbkit buffers are scratch "
                        "space (stage files in and out instead)");
    expect_script_error("#DW jobdw capacity=1G type=other\n", "unknown type 'other'");
}

// A list file names sources outside the buffer: a stage-out of one is refused when the job is
// submitted, naming the line, not when its output is staged out after it ran.
TEST(Directive, stage_out_type_list_is_refused_naming_the_line) {
    expect_script_error(
        "#BB_LUA capacity=1G\n"
        "#BB_LUA stage_out type=list source=$BB_JOB_DIR/out "
        "destination=/lus/out\n",
        "script line 2: stage_out type=list is not supported (write one "
        "stage_out line per file or directory)");
    expect_script_error(
        "#DW jobdw capacity=1G\n"
        "#DW stage_out type=list source=$DW_JOB_STRIPED/files destination=/x\n",
        "script line 2: stage_out type=list is not supported");
    EXPECT_EQ(parse_script("#BB_LUA stage_in type=list source=/lists/in.txt destination=in\n")
                  .stage_in[0]
                  .type,
              StageType::list);
}

TEST(Directive, stage_types_are_read_in_one_place) {
    EXPECT_EQ(bbkit::parse_stage_type("file"), StageType::file);
    EXPECT_EQ(bbkit::parse_stage_type("directory"), StageType::directory);
    EXPECT_EQ(bbkit::parse_stage_type("list"), StageType::list);
    for (const std::string type : {"File", "dir", "", "list "}) {
        try {
            bbkit::parse_stage_type(type);
            ADD_FAILURE() << "accepted '" << type << "'";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ExitCode::data);
            EXPECT_NE(std::string(e.what()).find("(use file, directory or list)"),
                      std::string::npos)
                << e.what();
        }
    }
    EXPECT_NO_THROW(bbkit::check_stage_type(StageType::list, true));
    EXPECT_NO_THROW(bbkit::check_stage_type(StageType::directory, false));
    EXPECT_THROW(bbkit::check_stage_type(StageType::list, false), Error);
}

TEST(Directive, path_components_refuse_every_dotdot) {
    EXPECT_EQ(bbkit::path_components("/a//b/./c/", "climbs"),
              (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_EQ(bbkit::path_components("", "climbs"), std::vector<std::string>{});
    EXPECT_EQ(bbkit::path_components("a/..b/c..", "climbs"),
              (std::vector<std::string>{"a", "..b", "c.."}));
    for (const std::string path : {"..", "a/..", "/a/../b", "../a", "a/b/../../c"}) {
        try {
            bbkit::path_components(path, "'" + path + "' climbs");
            ADD_FAILURE() << "accepted " << path;
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ExitCode::data);
            EXPECT_EQ(std::string(e.what()), "'" + path + "' climbs");
        }
    }
}

TEST(Directive, unsupported_access_modes_are_refused) {
    expect_script_error("#BB_LUA capacity=1G access=ldbalance\n", "access mode 'ldbalance'");
    EXPECT_EQ(
        parse_script("#DW jobdw capacity=1G access_mode=private,private\n").job_buffer->access,
        "private");
}

TEST(Directive, swap_is_refused_in_every_dialect) {
    expect_script_error("#DW swap 10GiB\n",
                        "script line 1: swap is not supported: bbkit buffers are a directory, not "
                        "swap space");
    expect_script_error("#BB_LUA capacity=1G swap=1G\n", "swap is not supported");
}

TEST(Directive, unknown_command_is_an_error) {
    expect_script_error("#!/bin/sh\n#BB_LUA frobnicate x=1\n",
                        "script line 2: unknown command 'frobnicate'");
}

TEST(Directive, a_second_job_buffer_names_both_lines) {
    expect_script_error("#BB_LUA capacity=1G\n#SBATCH -N1\n#DW jobdw capacity=2G\n",
                        "script line 3: only one job buffer per job: one is already requested on "
                        "script line 1");
}

TEST(Directive, jobdw_needs_a_capacity) {
    expect_script_error("#DW jobdw pool=nvme\n", "script line 1: jobdw needs capacity=");
    // A misspelt capacity= is named rather than left to a warning after the error.
    expect_script_error("#DW jobdw capacty=1GiB pool=nvme\n",
                        "script line 1: jobdw needs capacity= ('capacty' is not one of its keys: "
                        "capacity=, pool=, access=, type=)");
    expect_script_error("#BB_LUA pool=nvme\n", "script line 1: a job buffer needs capacity=");
}

TEST(Directive, unknown_pool_is_no_input) {
    expect_script_error("#BB_LUA pool=ssd capacity=1G\n", "script line 1: unknown pool 'ssd'",
                        ExitCode::no_input);
}

TEST(Directive, capacity_without_pool_needs_a_default_pool) {
    Config config = test_config();
    config.default_pool.reset();
    expect_error(script("#BB_LUA capacity=1G\n"), ExitCode::data,
                 "capacity requested but no pool given and no default_pool configured", config);
}

TEST(Directive, capacity_larger_than_the_pool_can_never_be_satisfied) {
    expect_script_error("#BB_LUA pool=small capacity=5K\n",
                        "script line 1: capacity=5K can never be satisfied: pool 'small' holds "
                        "only 4KiB in total");
    // 3.5KiB rounds up to 4KiB: it still fits.
    EXPECT_EQ(parse_script("#BB_LUA pool=small capacity=3584\n").job_buffer->allocated, 4 * KiB);
}

TEST(Directive, a_key_given_twice_is_an_error) {
    expect_script_error("#BB_LUA capacity=1G capacity=2G\n", "'capacity=' is given twice");
}

TEST(Directive, stage_lines_name_their_missing_key) {
    expect_script_error("#BB_LUA stage_in type=file source=/a\n",
                        "script line 1: stage_in needs destination=");
    expect_script_error("#BB_LUA stage_out source=a destination=/b\n", "stage_out needs type=");
    expect_script_error("#BB_LUA stage_out type=fifo source=a destination=/b\n",
                        "unknown stage type 'fifo'");
}

// ---- persistent buffers ----------------------------------------------------------------------

TEST(Directive, persistent_names_follow_slurms_rules) {
    expect_script_error("#BB create_persistent name=1abc capacity=1G\n",
                        "must not start with a digit");
    expect_script_error("#BB destroy_persistent name=a/b\n", "use only letters, digits");
    expect_script_error("#DW persistentdw name=a..b\n", "must not hold '..'");
    expect_script_error("#DW persistentdw name=..\n", "must not start with '.'");
    expect_script_error("#DW persistentdw name=.hidden\n", "must not start with '.'");
    // DataWarp's dotted names, which Slurm's datawarp plugin passes.
    EXPECT_EQ(parse_script("#DW persistentdw name=climate.v2\n").use.at(0).name, "climate.v2");
    expect_script_error("#DW persistentdw name=-x\n", "must not start with '-'");
    expect_script_error("#DW persistentdw name=" + std::string(65, 'a') + "\n", "1 to 64");
    expect_script_error("#DW persistentdw name=a$b\n", "use only letters, digits");
    EXPECT_EQ(parse_script("#BB_LUA use_persistent name=Run_1-v2\n").use.at(0).name, "Run_1-v2");
}

TEST(Directive, persistent_create_needs_enable_persistent_for_ordinary_users) {
    const std::string text = "#BB create_persistent name=alpha capacity=1G\n";
    expect_error(script(text), ExitCode::no_perm,
                 "script line 1: user nobody may not create persistent burst buffers "
                 "(EnablePersistent is not set)",
                 test_config(), job_with_user("nobody"));
    expect_error(script("#BB destroy_persistent name=alpha\n"), ExitCode::no_perm,
                 "may not destroy persistent", test_config(), job_with_user("nobody"));
    Config config = test_config();
    config.flags.enable_persistent = true;
    EXPECT_EQ(parse(script(text), config, job_with_user("nobody")).create.size(), 1u);
}

TEST(Directive, roots_own_job_may_create_persistent_when_root_runs_the_tool) {
    if (geteuid() != 0)
        GTEST_SKIP() << "root's job, parsed by root: needs root";
    Config config = test_config();
    config.allow_root = true;
    const std::string text = "#BB create_persistent name=alpha capacity=1G\n";
    EXPECT_EQ(parse(script(text), config, job_with_user("root")).create.size(), 1u);
}

// ---- users -----------------------------------------------------------------------------------

TEST(Directive, root_is_refused_unless_allowed) {
    const RequestText text = script("#BB_LUA capacity=1G\n");
    expect_error(text, ExitCode::no_perm,
                 "user root may not use burst buffers (allow_root = false)", test_config(),
                 job_with_user("root"));
    JobContext by_uid;
    by_uid.uid = 0;
    expect_error(text, ExitCode::no_perm, "(allow_root = false)", test_config(), by_uid);
    Config config = test_config();
    config.allow_root = true;
    EXPECT_TRUE(parse(text, config, by_uid).job_buffer);
}

TEST(Directive, root_without_a_directive_is_not_refused) {
    EXPECT_FALSE(parse(script("echo hi\n"), test_config(), job_with_user("root")).has_directive);
}

TEST(Directive, allow_users_and_deny_users_are_enforced) {
    const RequestText text = script("#BB_LUA capacity=1G\n");
    Config config = test_config();
    config.allow_users = {"alice", "0"};
    expect_error(text, ExitCode::no_perm,
                 "user nobody may not use burst buffers (not in allow_users)", config,
                 job_with_user("nobody"));
    config.allow_users = {"65534"};
    EXPECT_TRUE(parse(text, config, job_with_user("nobody")).job_buffer);
    config = test_config();
    config.deny_users = {"nobody"};
    expect_error(text, ExitCode::no_perm, "(listed in deny_users)", config,
                 job_with_user("nobody"));
}

TEST(Directive, unknown_user_is_no_input) {
    expect_error(script("#BB_LUA\n"), ExitCode::no_input, "no such user", test_config(),
                 job_with_user("no-such-user-bbkit"));
}

TEST(Directive, uid_gives_the_user_name_for_percent_u) {
    JobContext job;
    job.uid = 65534;
    const Request r =
        parse_script("#BB_LUA stage_in type=file source=/home/%u destination=d\n", job);
    EXPECT_EQ(r.stage_in.at(0).source, "/home/nobody");
}

// ---- slurm mode ------------------------------------------------------------------------------

TEST(Directive, slurm_mode_reads_only_slurms_directive) {
    Config config = test_config();
    config.mode = Mode::slurm;
    const Request r = parse(script("#DW jobdw capacity=1G\n#BB_LUA stage_in type=file "
                                   "source=/a destination=b\n"),
                            config);
    EXPECT_FALSE(r.job_buffer);
    EXPECT_EQ(r.stage_in.size(), 1u);
    ASSERT_EQ(r.warnings.size(), 1u);
    EXPECT_EQ(r.warnings[0].where.line, 1);
    EXPECT_NE(r.warnings[0].message.find("slurm mode"), std::string::npos);
    config.mode = Mode::standalone;
    EXPECT_TRUE(parse(script("#DW jobdw capacity=1G\n"), config).job_buffer);
}

// ---- canonical lines -------------------------------------------------------------------------

// Request equality without locations and warnings (the canonical form drops unknown keys).
void expect_same_request(const Request& a, const Request& b) {
    EXPECT_EQ(a.has_directive, b.has_directive);
    ASSERT_EQ(a.job_buffer.has_value(), b.job_buffer.has_value());
    if (a.job_buffer) {
        EXPECT_EQ(a.job_buffer->pool, b.job_buffer->pool);
        EXPECT_EQ(a.job_buffer->capacity, b.job_buffer->capacity);
        EXPECT_EQ(a.job_buffer->allocated, b.job_buffer->allocated);
        EXPECT_EQ(a.job_buffer->access, b.job_buffer->access);
        EXPECT_EQ(a.job_buffer->type, b.job_buffer->type);
    }
    const auto same_stages = [](const std::vector<StageDirective>& x,
                                const std::vector<StageDirective>& y) {
        ASSERT_EQ(x.size(), y.size());
        for (std::size_t i = 0; i < x.size(); ++i) {
            EXPECT_EQ(x[i].type, y[i].type);
            EXPECT_EQ(x[i].source, y[i].source);
            EXPECT_EQ(x[i].destination, y[i].destination);
            EXPECT_EQ(x[i].buffer, y[i].buffer);
            EXPECT_EQ(x[i].unresolved, y[i].unresolved);
        }
    };
    same_stages(a.stage_in, b.stage_in);
    same_stages(a.stage_out, b.stage_out);
    ASSERT_EQ(a.create.size(), b.create.size());
    for (std::size_t i = 0; i < a.create.size(); ++i) {
        EXPECT_EQ(a.create[i].name, b.create[i].name);
        EXPECT_EQ(a.create[i].pool, b.create[i].pool);
        EXPECT_EQ(a.create[i].capacity, b.create[i].capacity);
        EXPECT_EQ(a.create[i].access, b.create[i].access);
    }
    ASSERT_EQ(a.destroy.size(), b.destroy.size());
    for (std::size_t i = 0; i < a.destroy.size(); ++i) {
        EXPECT_EQ(a.destroy[i].name, b.destroy[i].name);
        EXPECT_EQ(a.destroy[i].hurry, b.destroy[i].hurry);
    }
    ASSERT_EQ(a.use.size(), b.use.size());
    for (std::size_t i = 0; i < a.use.size(); ++i)
        EXPECT_EQ(a.use[i].name, b.use[i].name);
}

std::string joined(const std::vector<std::string>& lines) {
    std::string out;
    for (const std::string& line : lines)
        out += line + "\n";
    return out;
}

const std::string rich_script =
    "#!/bin/bash\n"
    "#DW jobdw capacity=1GB access_mode=striped,private pool=nvme pfs=/x\n"
    "#DW persistentdw name=shared-set\n"
    "#BB create_persistent name=alpha capacity=32GB\n"
    "#BB destroy_persistent name=old hurry\n"
    "#DW stage_in type=directory source=\"/data/my %% dir\" destination=in\n"
    "#DW stage_in type=list source=/lists/%x destination=$DW_PERSISTENT_STRIPED_shared_set/l\n"
    "#DW stage_in type=file source=/q/\\\"quoted\\\" destination=\"a b/c\"\n"
    "#DW stage_out type=file source=out/%j.dat destination=%d/results/%j\n";

TEST(Directive, canonical_lines_read_back_as_the_same_request) {
    for (const char* prefix : {"BB_LUA", "DW", "BB"}) {
        Config config = test_config();
        config.directives = {prefix, "DW", "BB"};
        JobContext job;
        job.job_name = "run 1";
        const Request first = parse(script(rich_script), config, job);
        EXPECT_TRUE(first.stage_out.at(0).unresolved);
        const Request again = parse(script(joined(canonical_lines(first, config))), config, job);
        expect_same_request(first, again);
        EXPECT_EQ(again.stage_in.at(0).source, "/data/my % dir");
    }
}

TEST(Directive, canonical_lines_use_the_first_directive_and_its_dialect) {
    const Request r = parse_script(
        "#BB_LUA pool=nvme capacity=1G\n#BB_LUA stage_in type=file source=\"/a b\" "
        "destination=x\n");
    Config config = test_config();
    const std::vector<std::string> lua = canonical_lines(r, config);
    ASSERT_EQ(lua.size(), 2u);
    EXPECT_EQ(lua[0], "#BB_LUA pool=nvme capacity=1GiB access=striped type=scratch");
    EXPECT_EQ(lua[1], "#BB_LUA stage_in type=file source=\"/a b\" destination=$BB_JOB_DIR/x");
    config.directives = {"DW"};
    EXPECT_EQ(canonical_lines(r, config)[0],
              "#DW jobdw capacity=1GiB pool=nvme access_mode=striped type=scratch");
    EXPECT_EQ(canonical_lines(parse_script("#BB_LUA\n"), test_config()),
              std::vector<std::string>{"#BB_LUA"});
}

TEST(Directive, canonical_lines_keep_literal_percent_signs_literal) {
    JobContext job = full_job();
    const Request r =
        parse_script("#BB_LUA stage_in type=file source=/in/%%j destination=%j\n", job);
    EXPECT_EQ(r.stage_in.at(0).source, "/in/%j");
    const Request again =
        parse(script(joined(canonical_lines(r, test_config()))), test_config(), job);
    EXPECT_EQ(again.stage_in.at(0).source, "/in/%j");
    EXPECT_EQ(again.stage_in.at(0).destination, "1234");
}

}  // namespace

TEST(Directive, stray_word_on_a_stage_line_is_an_error_not_a_shorter_path) {
    expect_script_error(shebang +
                            "#BB_LUA capacity=1G\n"
                            "#BB_LUA stage_in type=file source=/tmp/a destination=my file\n",
                        "script line 3: unexpected word 'file'");
}

TEST(Directive, file_destination_naming_a_directory_keeps_the_source_name) {
    const Request r =
        parse_script(shebang +
                     "#BB_LUA capacity=1G\n"
                     "#BB_LUA stage_in type=file source=/d/big.bin destination=in/\n"
                     "#BB_LUA stage_in type=file source=/d/x destination=$BB_JOB_DIR\n"
                     "#BB_LUA stage_out type=file source=out/r.txt destination=/res/\n");
    EXPECT_EQ(r.stage_in.at(0).destination, "in/big.bin");
    EXPECT_EQ(r.stage_in.at(1).destination, "x");
    EXPECT_EQ(r.stage_out.at(0).destination, "/res/r.txt");
}

// Found by the directive fuzzer: "/" has no name to keep, and "in/" reached the mover.
TEST(Directive, a_file_stage_in_of_the_root_directory_is_refused) {
    for (const std::string dest : {"in/", "$BB_JOB_DIR", "x"})
        expect_script_error("#BB_LUA stage_in type=file source=/ destination=" + dest + "\n",
                            "source of a type=file stage must name a file, not '/'");
    expect_script_error("#BB_LUA stage_in type=file source=//./ destination=in/\n",
                        "must name a file, not '//./'");
}

TEST(directive, rejects_job_ids_that_are_not_numbers) {
    for (const std::string id : {"abc", "-1", "1x", "", " 7", "../x", "12345678901234567890"}) {
        JobContext job;
        job.job_id = id;
        expect_error(bb("capacity=1G"), ExitCode::usage, "job id '" + id + "' is not a number",
                     test_config(), job);
        JobContext array;
        array.job_id = "7";
        array.array_task_id = id;
        expect_error(bb("capacity=1G"), ExitCode::usage, "array task id", test_config(), array);
    }
    JobContext job;
    job.job_id = "1234567890123456789";
    EXPECT_TRUE(parse(bb("capacity=1G"), test_config(), job).job_buffer);
}

TEST(directive, many_distinct_keys_on_one_line_are_warnings_in_linear_time) {
    std::string line = "#BB_LUA capacity=1G";
    for (int i = 0; i < 100000; ++i)
        line += " k" + std::to_string(i) + "=v";
    const Request request = parse_script(shebang + line + "\n");
    ASSERT_TRUE(request.job_buffer);
    EXPECT_EQ(request.warnings.size(), 100000u);
    expect_script_error(shebang + line + " k99999=w\n", "'k99999=' is given twice");
}

TEST(directive, thousands_of_continued_lines_join_into_one_directive) {
    std::string text = shebang + "#BB_LUA capacity=2K \\\n";
    for (int i = 0; i < 50000; ++i)
        text += "#BB_LUA \\\n";
    text += "#BB_LUA pool=small";
    const Request request = parse_script(text);
    ASSERT_TRUE(request.job_buffer);
    EXPECT_EQ(request.job_buffer->pool, "small");
}

// Found by tests/fuzz/directive.cpp: such paths came back from --emit-script as lines that did
// not parse (an unterminated quote) or continued onto the next line.
TEST(directive, rejects_paths_that_canonical_lines_cannot_write_back) {
    expect_script_error(shebang + "#BB_LUA stage_out type=file source=r destination=/o/x\\ k=v\n",
                        "destination '/o/x\\' has a backslash at its end");
    expect_script_error(shebang + "#BB_LUA stage_in type=file source=/a\\/ destination=d\n",
                        "source '/a\\' has a backslash at its end");
    expect_script_error(
        shebang + "#BB_LUA stage_in type=file source=/a\\\\x\\\\\\\"b destination=d\n",
        "source '/ax\\\\\"b' has a backslash at its end or before a '\"'");
    JobContext job;
    job.job_id = "7";
    const Request request = parse_script(
        shebang + "#BB_LUA stage_in type=file source=\"/a b/%j\\c\\\\d \\\"q\\\"\" destination=x\n",
        job);
    std::string again = shebang;
    for (const std::string& line : canonical_lines(request, test_config()))
        again += line + "\n";
    const Request reparsed = parse_script(again, job);
    ASSERT_EQ(reparsed.stage_in.size(), 1u);
    EXPECT_EQ(reparsed.stage_in[0].source, request.stage_in[0].source);
}

// ---- value lengths (bb-parse(1), LIMITS) -------------------------------------------------------

TEST(directive, refuses_source_longer_than_path_max) {
    const std::string long_path = "/" + std::string(4095, 'a');
    expect_script_error(
        shebang + "#BB_LUA stage_in type=file source=" + long_path + " destination=d\n",
        "script line 2: source= is 4096 bytes long (a path holds at most 4095 bytes)");
    const std::string huge = "/" + std::string(20 * 1024 * 1024, 'a');
    const Error e = error_of(bbf("#BB_LUA stage_in type=file source=" + huge + " destination=d\n"));
    EXPECT_EQ(e.code(), ExitCode::data);
    EXPECT_LT(std::string(e.what()).size(), 200u) << "the value is not echoed";
}

// A resolved path at the bound that holds a '%' is written back with the `\\` mark that stops
// replacement: its two bytes are not the value's, so the line reads back (found by fuzzing).
TEST(directive, canonical_line_of_a_path_at_the_bound_holding_a_percent_reads_back) {
    const std::string path = "/in/%%" + std::string(4089, 'a');  // 4,095 as written
    const Request r =
        parse_script(shebang + "#BB_LUA stage_in type=file source=" + path + " destination=d\n");
    ASSERT_EQ(r.stage_in.at(0).source.size(), 4094u);
    const std::vector<std::string> lines = canonical_lines(r, test_config());
    ASSERT_NE(lines.back().find("source=\"\\\\/in/%"), std::string::npos) << lines.back();
    const Request again = parse(script(joined(lines)), test_config(), JobContext{});
    EXPECT_EQ(again.stage_in.at(0).source, r.stage_in.at(0).source);
}

TEST(directive, accepts_paths_of_path_max_minus_one_bytes) {
    const std::string path = "/" + std::string(4094, 'a');
    const Request r = parse_script(shebang + "#BB_LUA stage_in type=file source=" + path +
                                   " destination=d\n#BB_LUA stage_out type=file source=d "
                                   "destination=\"" +
                                   path + "\"\n");
    ASSERT_EQ(r.stage_in.size(), 1u);
    EXPECT_EQ(r.stage_in[0].source, path);
    EXPECT_EQ(r.stage_out.at(0).destination, path);
}

TEST(directive, refuses_destination_longer_than_path_max) {
    expect_script_error(shebang + "#BB_LUA stage_in type=file source=/s destination=" +
                            std::string(4096, 'd') + "\n",
                        "destination= is 4096 bytes long (a path holds at most 4095 bytes)");
}

TEST(directive, refuses_a_path_that_symbol_replacement_makes_too_long) {
    JobContext job;
    job.job_name = std::string(200, 'x');
    const std::string path = "/" + std::string(3900, 'a') + "/%x";
    expect_error(script(shebang + "#BB_LUA stage_in type=file source=" + path + " destination=d\n"),
                 ExitCode::data, "source= is 4102 bytes long (a path holds at most 4095 bytes)",
                 test_config(), job);
    job.job_name = "x";
    EXPECT_EQ(
        parse(script(shebang + "#BB_LUA stage_in type=file source=" + path + " destination=d\n"),
              test_config(), job)
            .stage_in.at(0)
            .source.size(),
        3903u);
}

TEST(directive, refuses_other_values_longer_than_256_bytes) {
    const std::string long_value(257, 'p');
    for (const std::string key : {"pool", "capacity", "access", "type", "unknown_key"}) {
        const std::string others = key == "pool"       ? "capacity=1G"
                                   : key == "capacity" ? "pool=nvme"
                                                       : "capacity=1G pool=nvme";
        expect_script_error(shebang + "#BB_LUA " + others + " " + key + "=" + long_value + "\n",
                            key + "= is 257 bytes long (a value holds at most 256 bytes)");
    }
    expect_script_error(shebang + "#DW persistentdw name=" + long_value + "\n",
                        "script line 2: name= is 257 bytes long (a value holds at most 256 bytes)");
    expect_error(bb("capacity=1G pool=" + long_value), ExitCode::data,
                 "--bb: pool= is 257 bytes long (a value holds at most 256 bytes)");
    expect_script_error(shebang + "#BB_LUA capacity=1G " + std::string(257, 'w') + "\n",
                        "a word of 257 bytes (a key or word holds at most 256 bytes)");
    EXPECT_EQ(parse_script(shebang + "#BB_LUA capacity=1G k=" + std::string(256, 'v') + "\n")
                  .warnings.size(),
              1u);
}

TEST(Directive, a_blank_between_capacity_and_its_unit_is_refused) {
    expect_script_error("#!/bin/sh\n#DW jobdw capacity=10 GiB\n",
                        "script line 2: capacity=10 GiB: a blank between the number and its unit "
                        "(write capacity=10GiB)");
    expect_error(bb("capacity=10 GiB"), ExitCode::data,
                 "--bb: capacity=10 GiB: a blank between the number and its unit (write "
                 "capacity=10GiB)");
    // A word that is not a unit stays an unknown key, as before.
    const Request r = parse_script("#DW jobdw capacity=10GiB access_mode=striped extra\n");
    EXPECT_EQ(r.job_buffer->capacity, 10ULL << 30);
}

TEST(Directive, a_command_line_value_is_blamed_on_the_command_line) {
    RequestText text;
    text.command_line = "#DW jobdw capacity=\"1.5G\"";
    try {
        parse_request(text, test_config(), {});
        FAIL() << "1.5G was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ExitCode::data);
        EXPECT_EQ(std::string(e.what()).rfind("command line: ", 0), 0u) << e.what();
    }
}

TEST(Directive, datawarp_mode_stages_only_into_space_the_job_asked_for) {
    Config config = test_config();
    config.mode = bbkit::Mode::datawarp;
    config.directives = bbkit::datawarp_directives();
    const std::string in = "#DW stage_in type=file source=/pfs/a destination=$DW_JOB_STRIPED/a\n";
    expect_error(script(shebang + in), ExitCode::data,
                 "script line 2: stages into the job's own buffer, and the job asks for none",
                 config);
    // With a jobdw line it is the job's space; a persistent buffer it uses is fine too.
    EXPECT_EQ(parse(script(shebang + "#DW jobdw capacity=1GiB\n" + in), config).stage_in.size(),
              1u);
    const Request r = parse(script(shebang + "#DW persistentdw name=ps\n"
                                             "#DW stage_in type=file source=/pfs/a "
                                             "destination=$DW_PERSISTENT_STRIPED_ps/a\n"),
                            config);
    ASSERT_EQ(r.stage_in.size(), 1u);
    EXPECT_EQ(r.stage_in[0].buffer, "ps");
    // Other modes keep running stages without space (a bare #BB_LUA in Slurm's lua mode).
    EXPECT_NO_THROW(parse(script(shebang + in)));
}

TEST(Directive, datawarp_mode_reads_only_what_slurms_datawarp_plugin_reads) {
    Config config = test_config();
    config.mode = bbkit::Mode::datawarp;
    config.directives = bbkit::datawarp_directives();
    for (const char* line :
         {"#DW capacity=90GiB", "#BB capacity=50GiB", "#BB jobdw capacity=1GiB",
          "#DW create_persistent name=a capacity=1GiB", "#DW use_persistent name=a",
          "#BB stage_in type=file source=/a destination=a"})
        expect_error(script(shebang + std::string(line) + "\n"), ExitCode::data,
                     "is not read by Slurm's datawarp plugin", config);
    const Request r = parse(script(shebang + "#DW jobdw capacity=1GiB\n#BB create_persistent "
                                             "name=p capacity=1GiB\n#BB destroy_persistent "
                                             "name=q\n#DW\n"),
                            config);
    ASSERT_TRUE(r.job_buffer);
    EXPECT_EQ(r.create.size(), 1u);
    EXPECT_EQ(r.destroy.size(), 1u);
}

namespace {

// A site with a shared pool and a node-local one (standalone mode).
Config node_local_config() {
    Config config = test_config();
    config.mode = Mode::standalone;
    bbkit::PoolConfig local{"local", "/local/nvme", 3500 * GiB, GiB};
    local.node_local = true;
    local.gres = "bbnvme";
    config.pools.push_back(local);
    return config;
}

}  // namespace

TEST(Directive, node_local_lines_say_how_the_nodes_share_the_stages) {
    const Request r =
        parse(script(shebang + "#BB_LUA pool=local capacity=200GiB\n"
                               "#BB_LUA stage_in type=directory source=/lus/in "
                               "destination=$BB_JOB_DIR/in distribute=shard\n"
                               "#BB_LUA stage_in type=file source=/lus/table.dat "
                               "destination=$BB_JOB_DIR/\n"
                               "#BB_LUA stage_out type=directory source=$BB_JOB_DIR/out "
                               "destination=/lus/out gather=merge\n"
                               "#BB_LUA stage_out type=file source=$BB_JOB_DIR/log "
                               "destination=/lus/log\n"),
              node_local_config());
    ASSERT_TRUE(r.job_buffer);
    EXPECT_TRUE(r.job_buffer->node_local);
    EXPECT_EQ(r.job_buffer->gres, "bbnvme");
    EXPECT_EQ(r.job_buffer->gres_count, 200u);
    ASSERT_EQ(r.stage_in.size(), 2u);
    EXPECT_EQ(r.stage_in[0].distribute, bbkit::Spread::shard);
    EXPECT_FALSE(r.stage_in[1].distribute);  // copy, the default
    ASSERT_EQ(r.stage_out.size(), 2u);
    EXPECT_EQ(r.stage_out[0].gather, bbkit::Gather::merge);
    EXPECT_FALSE(r.stage_out[1].gather);  // nodes, the default
    const auto json = request_json(r);
    EXPECT_EQ(json["gres"], "bbnvme:200");
    EXPECT_EQ(json["node_local"], true);
    EXPECT_EQ(json["stage_in"][0]["distribute"], "shard");
    EXPECT_EQ(json["stage_out"][0]["gather"], "merge");
    // Printed back as they were given, and read back the same.
    const auto lines = canonical_lines(r, node_local_config());
    EXPECT_NE(std::find_if(lines.begin(), lines.end(),
                           [](const std::string& l) {
                               return l.find(" distribute=shard") != std::string::npos;
                           }),
              lines.end());
    std::string again = shebang;
    for (const std::string& line : lines)
        again += line + "\n";
    const Request back = parse(script(again), node_local_config());
    EXPECT_EQ(back.stage_in[0].distribute, bbkit::Spread::shard);
    EXPECT_EQ(back.stage_out[0].gather, bbkit::Gather::merge);
}

TEST(Directive, a_partial_granule_asks_slurm_for_a_whole_one) {
    const Request r =
        parse(script(shebang + "#BB_LUA pool=local capacity=1500MiB\n"), node_local_config());
    EXPECT_EQ(r.job_buffer->gres_count, 2u);
    const Request shared =
        parse(script(shebang + "#BB_LUA pool=nvme capacity=1500MiB\n"), node_local_config());
    EXPECT_FALSE(shared.job_buffer->node_local);
    EXPECT_FALSE(request_json(shared).contains("gres"));
}

TEST(Directive, distribute_and_gather_only_for_a_node_local_job_buffer) {
    const Config config = node_local_config();
    expect_error(script(shebang + "#BB_LUA pool=nvme capacity=1GiB\n"
                                  "#BB_LUA stage_in type=file source=/a destination=b "
                                  "distribute=shard\n"),
                 ExitCode::data,
                 "script line 3: distribute= applies to a job buffer in a "
                 "node-local pool, and pool 'nvme' is not node-local",
                 config);
    expect_error(script(shebang + "#BB_LUA stage_out type=file source=$BB_JOB_DIR/a "
                                  "destination=/b gather=nodes\n"),
                 ExitCode::data,
                 "gather= applies to a job buffer in a node-local pool (the "
                 "job asks for no buffer)",
                 config);
    expect_error(script(shebang + "#BB_LUA pool=local capacity=1GiB\n"
                                  "#BB_LUA stage_in type=file source=/a destination=b "
                                  "distribute=spread\n"),
                 ExitCode::data, "unknown distribute 'spread' (use copy or shard)", config);
    expect_error(script(shebang + "#BB_LUA pool=local capacity=1GiB\n"
                                  "#BB_LUA stage_out type=file source=$BB_JOB_DIR/a "
                                  "destination=/b gather=all\n"),
                 ExitCode::data, "unknown gather 'all' (use nodes or merge)", config);
    expect_error(script(shebang + "#BB_LUA pool=local capacity=1GiB\n"
                                  "#BB_LUA stage_out type=file source=$BB_JOB_DIR/a "
                                  "destination=/b distribute=shard\n"),
                 ExitCode::data, "distribute= is for stage_in lines", config);
    expect_error(script(shebang + "#BB_LUA pool=local capacity=1GiB\n"
                                  "#BB_LUA stage_in type=file source=/a destination=b "
                                  "gather=merge\n"),
                 ExitCode::data, "gather= is for stage_out lines", config);
    Config persistent = config;
    persistent.flags.enable_persistent = true;
    expect_error(script(shebang + "#BB_LUA create_persistent name=p capacity=1GiB pool=local\n"),
                 ExitCode::data, "persistent buffer 'p' cannot be in node-local pool 'local'",
                 persistent);
}
