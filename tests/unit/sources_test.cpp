#include "bbkit/sources.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "bbkit/error.hpp"
#include "code_of.hpp"

namespace fs = std::filesystem;
using bbkit::code_of;
using bbkit::Error;
using bbkit::ExitCode;
using bbkit::StageDirective;
using bbkit::StageType;

namespace {

class Sources : public ::testing::Test {
  protected:
    void SetUp() override {
        char tmpl[] = "/tmp/bbkit-sources.XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir = tmpl;
    }
    void TearDown() override { fs::remove_all(dir); }

    std::string write(const std::string& name, const std::string& data) {
        const fs::path path = fs::path(dir) / name;
        fs::create_directories(path.parent_path());
        std::ofstream(path, std::ios::binary) << data;
        return path.string();
    }

    static StageDirective stage(StageType type, const std::string& source,
                                const std::string& dest) {
        StageDirective s;
        s.type = type;
        s.source = source;
        s.destination = dest;
        s.where.line = 7;
        return s;
    }

    std::string dir;
};

}  // namespace

TEST_F(Sources, sums_files_and_trees_without_following_symlinks) {
    const std::string a = write("a", std::string(100, 'x'));
    write("tree/b", std::string(20, 'y'));
    write("tree/sub/c", std::string(3, 'z'));
    fs::create_symlink("/usr", fs::path(dir) / "tree" / "link");  // would be huge if followed
    const auto totals = bbkit::measure_sources(
        {stage(StageType::file, a, "a"), stage(StageType::directory, dir + "/tree", "t")});
    EXPECT_EQ(totals.bytes, 123u);
    EXPECT_EQ(totals.entries.size(), 2u);
}

TEST_F(Sources, missing_source_is_no_input_naming_path_and_line) {
    try {
        bbkit::measure_sources({stage(StageType::file, dir + "/nope", "x")});
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ExitCode::no_input);
        EXPECT_NE(std::string(e.what()).find(dir + "/nope"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("line 7"), std::string::npos);
    }
}

TEST_F(Sources, file_and_directory_types_must_match) {
    write("d/f", "1");
    EXPECT_EQ(code_of([&] { bbkit::measure_sources({stage(StageType::file, dir + "/d", "x")}); }),
              ExitCode::data);
    EXPECT_EQ(
        code_of([&] { bbkit::measure_sources({stage(StageType::directory, dir + "/d/f", "x")}); }),
        ExitCode::data);
}

TEST_F(Sources, list_files_expand_under_the_directive_destination) {
    const std::string one = write("one", "1234");
    const std::string list =
        write("list", one + " in/one\n# comment\n\n\"" + one + "\" $BB_JOB_DIR/top\n");
    const auto entries = bbkit::read_stage_list(stage(StageType::list, list, "base"));
    ASSERT_EQ(entries.size(), 2u);
    EXPECT_EQ(entries[0].destination, "base/in/one");
    EXPECT_EQ(entries[1].destination, "top");
    const auto totals = bbkit::measure_sources({stage(StageType::list, list, "base")});
    EXPECT_EQ(totals.bytes, 8u);
}

TEST_F(Sources, list_lines_that_escape_or_are_malformed_are_refused) {
    const std::string one = write("one", "1");
    for (const std::string& line :
         {one + " ../up", one + " /etc/x", std::string("relative x"), one, one + " a b",
          one + " \"unterminated", dir + "/../" + one.substr(1) + " x"}) {
        const std::string list = write("bad", line + "\n");
        EXPECT_EQ(code_of([&] { bbkit::read_stage_list(stage(StageType::list, list, "d")); }),
                  ExitCode::data)
            << line;
    }
}

TEST_F(Sources, unresolved_lines_are_skipped_with_a_warning) {
    StageDirective s = stage(StageType::file, "/data/%j", "x");
    s.unresolved = true;
    const auto totals = bbkit::measure_sources({s});
    EXPECT_EQ(totals.bytes, 0u);
    ASSERT_EQ(totals.skipped.size(), 1u);
}

TEST(SourcesFit, refuses_more_than_the_buffer_holds) {
    EXPECT_NO_THROW(bbkit::require_fits(4096, 4096));
    try {
        bbkit::require_fits(4097, 4096);
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ExitCode::data);
        EXPECT_NE(std::string(e.what()).find("buffer holds 4KiB"), std::string::npos);
    }
}

TEST_F(Sources, only_lines_into_the_job_buffer_count_against_its_capacity) {
    const std::string big = write("big", std::string(3000, 'x'));
    StageDirective to_persistent = stage(StageType::file, big, "p");
    to_persistent.buffer = "shared";
    EXPECT_EQ(bbkit::measure_stage_in({to_persistent}, 1024).bytes, 3000u);
    EXPECT_EQ(code_of([&] { bbkit::measure_stage_in({stage(StageType::file, big, "j")}, 1024); }),
              ExitCode::data);
    EXPECT_EQ(bbkit::measure_stage_in({stage(StageType::file, big, "j")}, std::nullopt).bytes,
              3000u);
}
