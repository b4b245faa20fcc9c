#include "bbkit/config.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include "bbkit/error.hpp"
#include "source_file.hpp"

namespace bbkit {
namespace {

constexpr std::uint64_t gib = 1024ULL * 1024 * 1024;

// The message of the Error(config) that parsing `text` throws; fails the test if none is thrown.
std::string config_error(const std::string& text) {
    try {
        parse_config(text, "t.toml");
    } catch (const Error& error) {
        EXPECT_EQ(error.code(), ExitCode::config);
        return error.what();
    }
    ADD_FAILURE() << "no error for:\n" << text;
    return "";
}

::testing::AssertionResult starts_with(const std::string& text, const std::string& prefix) {
    if (text.rfind(prefix, 0) == 0)
        return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "'" << text << "' does not start with '" << prefix << "'";
}

// Lines 1-4 of a document: one valid pool named "a".
const std::string pool_a = R"([[pool]]
name = "a"
path = "/bb/a"
capacity = "1TiB"
)";

std::string example_path() {
    return unit::source_file("share/bbkit/bbkit.toml.example");
}

std::string file_text(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// Restores $BBKIT_CONFIG after a test changes it.
class EnvironmentGuard {
  public:
    EnvironmentGuard() {
        if (const char* value = std::getenv("BBKIT_CONFIG"))
            saved_ = value;
    }
    ~EnvironmentGuard() {
        if (saved_)
            setenv("BBKIT_CONFIG", saved_->c_str(), 1);
        else
            unsetenv("BBKIT_CONFIG");
    }
    EnvironmentGuard(const EnvironmentGuard&) = delete;
    EnvironmentGuard& operator=(const EnvironmentGuard&) = delete;

  private:
    std::optional<std::string> saved_;
};

// --- defaults and a full document ---

TEST(config, empty_text_gives_defaults) {
    const Config config = parse_config("", "t.toml");
    EXPECT_EQ(config.source, "t.toml");
    EXPECT_EQ(config.state_dir, "/var/lib/bbkit");
    EXPECT_EQ(config.state_owner, "root");
    EXPECT_EQ(config.mode, Mode::standalone);
    EXPECT_EQ(config.cluster, "main");
    EXPECT_EQ(config.directives, (std::vector<std::string>{"BB_LUA", "DW", "BB"}));
    EXPECT_FALSE(config.default_pool);
    EXPECT_FALSE(config.flags.enable_persistent);
    EXPECT_FALSE(config.flags.private_data);
    EXPECT_FALSE(config.flags.teardown_failure);
    EXPECT_TRUE(config.allow_users.empty());
    EXPECT_TRUE(config.deny_users.empty());
    EXPECT_FALSE(config.allow_root);
    EXPECT_EQ(config.timeouts.stage_in, 86400u);
    EXPECT_EQ(config.timeouts.stage_out, 86400u);
    EXPECT_EQ(config.timeouts.other, 300u);
    EXPECT_EQ(config.timeouts.validate, 5u);
    EXPECT_EQ(config.timeouts.queue, 600u);
    EXPECT_EQ(config.limits.stage_concurrency, 128u);
    EXPECT_EQ(config.limits.mover_threads, 8u);
    EXPECT_EQ(config.limits.mover_memory, 256u << 20);
    EXPECT_EQ(config.limits.script_size, 4u << 20);
    EXPECT_FALSE(config.limits.user_capacity);
    EXPECT_TRUE(config.pools.empty());
    EXPECT_TRUE(config.hooks.empty());
    EXPECT_FALSE(config.slurm_release);
    EXPECT_EQ(config.slurm_conf, "");
    EXPECT_EQ(config.poll_interval, 15u);
}

TEST(config, reads_every_key) {
    const Config config = parse_config(R"(
state_dir = "/srv/bbkit"
state_owner = "bbkit"
mode = "slurm"
cluster = "hpc-2.east"
directives = ["BB_LUA", "DW"]
default_pool = "ssd"
flags = ["EnablePersistent", "PrivateData", "TeardownFailure"]
allow_users = ["alice", 1001]
allow_root = true
slurm_release = "24.11"
slurm_conf = "/opt/slurm/etc/slurm.conf"
poll_interval = 30
[timeouts]
stage_in = 100
stage_out = 200
other = 30
validate = 2
queue = 45
[limits]
stage_concurrency = 16
mover_threads = 4
user_capacity = "10TiB"
[[pool]]
name = "nvme"
path = "/bb/nvme"
capacity = "5800GiB"
granularity = "200GiB"
[[pool]]
name = "ssd"
path = "/bb/ssd"
capacity = "1000GB"
[hooks]
pre_run = "/etc/bbkit/pre_run.sh"
post_run = "/etc/bbkit/post_run.sh"
)",
                                       "t.toml");
    EXPECT_EQ(config.state_dir, "/srv/bbkit");
    EXPECT_EQ(config.state_owner, "bbkit");
    EXPECT_EQ(config.mode, Mode::slurm);
    EXPECT_EQ(config.cluster, "hpc-2.east");
    EXPECT_EQ(config.directives, (std::vector<std::string>{"BB_LUA", "DW"}));
    EXPECT_EQ(config.default_pool, "ssd");
    EXPECT_TRUE(config.flags.enable_persistent);
    EXPECT_TRUE(config.flags.private_data);
    EXPECT_TRUE(config.flags.teardown_failure);
    EXPECT_EQ(config.allow_users, (std::vector<std::string>{"alice", "1001"}));
    EXPECT_TRUE(config.allow_root);
    EXPECT_EQ(config.slurm_release, (SlurmRelease{24, 11}));
    EXPECT_EQ(config.slurm_conf, "/opt/slurm/etc/slurm.conf");
    EXPECT_EQ(config.poll_interval, 30u);
    EXPECT_EQ(config.timeouts.stage_in, 100u);
    EXPECT_EQ(config.timeouts.stage_out, 200u);
    EXPECT_EQ(config.timeouts.other, 30u);
    EXPECT_EQ(config.timeouts.validate, 2u);
    EXPECT_EQ(config.timeouts.queue, 45u);
    EXPECT_EQ(config.limits.stage_concurrency, 16u);
    EXPECT_EQ(config.limits.mover_threads, 4u);
    EXPECT_EQ(config.limits.user_capacity, 10 * 1024 * gib);
    ASSERT_EQ(config.pools.size(), 2u);
    EXPECT_EQ(config.pools[0].name, "nvme");
    EXPECT_EQ(config.pools[0].path, "/bb/nvme");
    EXPECT_EQ(config.pools[0].capacity, 5800 * gib);
    EXPECT_EQ(config.pools[0].granularity, 200 * gib);
    EXPECT_EQ(config.pools[1].capacity, 1000ULL * 1000 * 1000 * 1000);
    EXPECT_EQ(config.hooks,
              (std::map<std::string, std::string>{{"post_run", "/etc/bbkit/post_run.sh"},
                                                  {"pre_run", "/etc/bbkit/pre_run.sh"}}));
}

TEST(config, no_pools_is_allowed) {
    EXPECT_TRUE(parse_config("cluster = \"x\"\n", "t.toml").pools.empty());
    EXPECT_TRUE(parse_config("pool = []\n", "t.toml").pools.empty());
}

TEST(config, find_pool_returns_the_pool_or_nullptr) {
    const Config config = parse_config(pool_a, "t.toml");
    ASSERT_NE(config.find_pool("a"), nullptr);
    EXPECT_EQ(config.find_pool("a")->path, "/bb/a");
    EXPECT_EQ(config.find_pool("b"), nullptr);
}

TEST(config, mode_prints_as_its_config_word) {
    EXPECT_STREQ(to_string(Mode::standalone), "standalone");
    EXPECT_STREQ(to_string(Mode::slurm), "slurm");
}

TEST(config, hook_phases_are_the_ones_bb_stage_runs) {
    EXPECT_EQ(hook_phases(), (std::vector<std::string>{"pre_run", "post_run"}));
}

// --- unknown keys and types ---

TEST(config, rejects_unknown_top_level_key_with_line) {
    const std::string message = config_error("cluster = \"x\"\n\nfoo = 1\n");
    EXPECT_TRUE(starts_with(message, "t.toml:3: foo: unknown key 'foo' (known: state_dir,"));
}

TEST(config, reports_the_first_unknown_key_in_file_order) {
    EXPECT_TRUE(
        starts_with(config_error("zzz = 1\naaa = 2\n"), "t.toml:1: zzz: unknown key 'zzz'"));
}

TEST(config, names_a_quoted_unknown_key_whole) {
    EXPECT_TRUE(starts_with(config_error("[limits]\n\"a.b\" = 1\n"),
                            "t.toml:2: limits.a.b: unknown key 'a.b'"));
}

TEST(config, rejects_unknown_key_in_timeouts_with_line) {
    EXPECT_EQ(config_error("[timeouts]\nstage_in = 5\nstagein = 5\n"),
              "t.toml:3: timeouts.stagein: unknown key 'stagein' (known: stage_in, stage_out, "
              "other, validate, queue, takeover)");
}

TEST(config, rejects_unknown_key_in_limits_with_line) {
    EXPECT_TRUE(starts_with(config_error("[limits]\nthreads = 5\n"),
                            "t.toml:2: limits.threads: unknown key 'threads'"));
}

TEST(config, rejects_unknown_key_in_pool_with_line) {
    EXPECT_EQ(config_error(pool_a + "[[pool]]\nname = \"b\"\nsize = \"1G\"\n"),
              "t.toml:7: pool[1].size: unknown key 'size' (known: name, path, capacity, "
              "granularity, direct_io, syncfs, quota, quota_missing, quota_project_base, "
              "node_local, gres, staging, transfer_partition, transfer_nodes)");
}

TEST(config, pool_quota_defaults_to_none_refuse_and_base_2000000000) {
    const Config config = parse_config(pool_a, "t.toml");
    EXPECT_EQ(config.pools.at(0).quota, QuotaMode::none);
    EXPECT_EQ(config.pools.at(0).quota_missing, QuotaMissing::refuse);
    EXPECT_EQ(config.pools.at(0).quota_project_base, 2000000000U);
}

TEST(config, pool_quota_settings_parse) {
    const Config config = parse_config(
        pool_a + "quota = \"project\"\nquota_missing = \"warn\"\nquota_project_base = 7000\n",
        "t.toml");
    EXPECT_EQ(config.pools.at(0).quota, QuotaMode::project);
    EXPECT_EQ(config.pools.at(0).quota_missing, QuotaMissing::warn);
    EXPECT_EQ(config.pools.at(0).quota_project_base, 7000U);
}

TEST(config, rejects_unknown_quota_words_and_bases_out_of_range) {
    EXPECT_NE(config_error(pool_a + "quota = \"user\"\n").find("must be \"none\" or \"project\""),
              std::string::npos);
    EXPECT_NE(config_error(pool_a + "quota_missing = \"ignore\"\n")
                  .find("must be \"refuse\" or \"warn\""),
              std::string::npos);
    EXPECT_NE(config_error(pool_a + "quota_project_base = 0\n").find("must be between 1 and"),
              std::string::npos);
    EXPECT_NE(config_error(pool_a + "quota_project_base = 4000000000\n").find("must be between"),
              std::string::npos);
}

const std::string standalone = "mode = \"standalone\"\n";
const std::string nvme = R"([[pool]]
name = "nvme"
path = "/local/nvme"
capacity = "3500GiB"
granularity = "1GiB"
node_local = true
)";

TEST(config, node_local_pools_have_a_gres_counted_in_granules) {
    const Config config = parse_config(standalone + pool_a + nvme, "t.toml");
    EXPECT_FALSE(config.pools.at(0).node_local);
    EXPECT_TRUE(config.pools.at(1).node_local);
    EXPECT_EQ(config.pools.at(1).gres, "bbnvme");
    EXPECT_EQ(gres_count(config.pools.at(1)), 3500u);
    const Config named = parse_config(standalone + nvme + "gres = \"bb_fast2\"\n", "t.toml");
    EXPECT_EQ(named.pools.at(0).gres, "bb_fast2");
    // Whole granules only: a partial one is never promised to Slurm.
    const Config partial =
        parse_config(standalone +
                         "[[pool]]\nname = \"p\"\npath = \"/p\"\ncapacity = \"10GiB\"\n"
                         "granularity = \"3GiB\"\nnode_local = true\n",
                     "t.toml");
    EXPECT_EQ(gres_count(partial.pools.at(0)), 3u);
}

TEST(config, node_local_pools_need_standalone_mode_and_gres_of_their_own) {
    EXPECT_NE(config_error("mode = \"slurm\"\n" + nvme)
                  .find("node-local pools need mode = "
                        "\"standalone\""),
              std::string::npos);
    EXPECT_NE(config_error(standalone + pool_a + "gres = \"bbnvme\"\n")
                  .find("gres: applies to node-local pools only"),
              std::string::npos);
    const std::string second = R"([[pool]]
name = "nvme2"
path = "/local/nvme2"
capacity = "1TiB"
node_local = true
)";
    EXPECT_NE(
        config_error(standalone + nvme + second).find("GRES 'bbnvme' already counts pool 'nvme'"),
        std::string::npos);
    for (const char* bad : {"", "Bbnvme", "1nvme", "bb-nvme", "bb nvme", "bb:nvme",
                            "abcdefghijklmnopqrstuvwxyz0123456"})
        EXPECT_NE(
            config_error(standalone + nvme + "gres = \"" + bad + "\"\n").find("is not a GRES name"),
            std::string::npos)
            << bad;
}

TEST(config, a_pool_stages_on_the_controller_unless_it_names_transfer_nodes) {
    const Config config = parse_config(pool_a, "t.toml");
    EXPECT_EQ(config.pools.at(0).staging, PoolStaging::controller);
    const Config slurm =
        parse_config("mode = \"slurm\"\n" + pool_a +
                         "staging = \"slurm\"\ntransfer_partition = \"xfer\"\ntransfer_nodes = 3\n",
                     "t.toml");
    EXPECT_EQ(slurm.pools.at(0).staging, PoolStaging::slurm);
    EXPECT_EQ(slurm.pools.at(0).transfer_partition, "xfer");
    EXPECT_EQ(slurm.pools.at(0).transfer_nodes, 3u);
    const Config one = parse_config(
        "mode = \"datawarp\"\n" + pool_a + "staging = \"slurm\"\ntransfer_partition = \"dtn\"\n",
        "t.toml");
    EXPECT_EQ(one.pools.at(0).transfer_nodes, 1u);
}

TEST(config, transfer_staging_is_refused_where_it_cannot_work_naming_the_key) {
    const std::string slurm = "mode = \"slurm\"\n";
    const std::string on = "staging = \"slurm\"\n";
    const std::string part = "transfer_partition = \"xfer\"\n";
    const auto refused = [](const std::string& text, const std::string& expected) {
        const std::string error = config_error(text);
        EXPECT_NE(error.find(expected), std::string::npos) << error;
        EXPECT_EQ(error.find('\n'), std::string::npos) << error;
    };
    refused(slurm + pool_a + "staging = \"xfer\"\n",
            "staging: 'xfer' is not a staging place (use \"controller\" or \"slurm\")");
    refused(slurm + pool_a + on, "transfer_partition: is required with staging = \"slurm\"");
    refused(standalone + pool_a + on + part, "staging: \"slurm\" needs mode = \"slurm\"");
    refused(standalone + nvme + on + part, "staging: \"slurm\" needs mode");
    refused(slurm + pool_a + part, "transfer_partition: applies to staging = \"slurm\" only");
    refused(slurm + pool_a + "transfer_nodes = 2\n", "transfer_nodes: applies to staging");
    for (const char* bad : {"", "-x", "x y", "x;rm", "x\\nb", ".."})
        refused(slurm + pool_a + on + "transfer_partition = \"" + bad + "\"\n",
                "transfer_partition:");
    for (const char* bad : {"0", "65", "-1", "\"2\""})
        refused(slurm + pool_a + on + part + "transfer_nodes = " + bad + "\n", "transfer_nodes:");
}

TEST(config, pool_io_options_default_to_buffered_and_syncfs) {
    const Config config = parse_config(pool_a, "t.toml");
    EXPECT_FALSE(config.pools.at(0).direct_io);
    EXPECT_TRUE(config.pools.at(0).syncfs);
    const Config tuned = parse_config(pool_a + "direct_io = true\nsyncfs = false\n", "t.toml");
    EXPECT_TRUE(tuned.pools.at(0).direct_io);
    EXPECT_FALSE(tuned.pools.at(0).syncfs);
    EXPECT_NE(config_error(pool_a + "direct_io = \"yes\"\n").find("direct_io"), std::string::npos);
}

TEST(config, rejects_unknown_hook_phase_with_line) {
    EXPECT_EQ(config_error("[hooks]\npre_run = \"/a\"\nprolog = \"/b\"\n"),
              "t.toml:3: hooks.prolog: unknown key 'prolog' (known: pre_run, post_run)");
}

TEST(config, rejects_unknown_nested_table_with_line) {
    EXPECT_TRUE(starts_with(config_error("[limits]\nmover_threads = 2\n[limits.extra]\nx = 1\n"),
                            "t.toml:3: limits.extra: unknown key 'extra'"));
}

TEST(config, rejects_wrong_type_naming_expected_and_given) {
    EXPECT_EQ(config_error("cluster = 5\n"),
              "t.toml:1: cluster: expected a string, got an integer");
    EXPECT_EQ(config_error("\nallow_root = \"yes\"\n"),
              "t.toml:2: allow_root: expected a boolean (true or false), got a string");
    EXPECT_EQ(config_error("[timeouts]\nother = 1.5\n"),
              "t.toml:2: timeouts.other: expected an integer, got a float");
    EXPECT_EQ(config_error("directives = \"BB\"\n"),
              "t.toml:1: directives: expected an array, got a string");
    EXPECT_EQ(config_error("timeouts = 5\n"),
              "t.toml:1: timeouts: expected a table, got an integer");
}

TEST(config, rejects_capacity_given_as_a_number) {
    EXPECT_EQ(config_error("[[pool]]\nname = \"a\"\npath = \"/bb/a\"\ncapacity = 1024\n"),
              "t.toml:4: pool[0].capacity: expected a string (a size such as \"100GiB\"), got an "
              "integer");
}

// A pool's capacity without a unit is bytes, never what an administrator meant; a unit
// ending in a lower-case 'b' is bits in common use. Both are refused, naming what to write;
// a granularity of "1" (byte) stays allowed.
TEST(config, rejects_a_capacity_without_a_unit_or_in_bits) {
    const std::string pool = "[[pool]]\nname = \"a\"\npath = \"/bb/a\"\n";
    EXPECT_EQ(config_error(pool + "capacity = \"100\"\n"),
              "t.toml:4: pool[0].capacity: invalid size '100': no unit, which would mean 100 "
              "bytes (write 100GiB, 100TiB or the like)");
    EXPECT_EQ(config_error(pool + "capacity = \"100Gb\"\n"),
              "t.toml:4: pool[0].capacity: invalid size '100Gb': 'Gb' reads as bits; write "
              "100GB (powers of 1000) or 100GiB (powers of 1024)");
    EXPECT_EQ(config_error("[limits]\nuser_capacity = \"5tb\"\n"),
              "t.toml:2: limits.user_capacity: invalid size '5tb': 'tb' reads as bits; write "
              "5TB (powers of 1000) or 5TiB (powers of 1024)");
    const Config config =
        parse_config(pool + "capacity = \"1TiB\"\ngranularity = \"1\"\n", "t.toml");
    EXPECT_EQ(config.pools.at(0).granularity, 1U);
}

TEST(config, rejects_pool_written_as_a_single_table) {
    EXPECT_EQ(config_error("[pool]\nname = \"a\"\n"),
              "t.toml:1: pool: expected an array of tables ([[pool]]), got a table");
}

// --- TOML syntax ---

TEST(config, collapses_toml_syntax_error_to_one_line_with_line) {
    const std::string message = config_error("cluster = \"x\"\nstate_dir = \n");
    EXPECT_TRUE(starts_with(message, "t.toml:2: invalid TOML: "));
    EXPECT_EQ(message.find('\n'), std::string::npos);
    EXPECT_EQ(message.find("toml::"), std::string::npos);
    EXPECT_EQ(message.find("[error]"), std::string::npos);
}

TEST(config, reports_toml_duplicate_key_at_its_second_line) {
    const std::string message = config_error("cluster = \"x\"\n\ncluster = \"y\"\n");
    EXPECT_TRUE(starts_with(message, "t.toml:3: invalid TOML: "));
    EXPECT_NE(message.find("already exists"), std::string::npos);
    EXPECT_EQ(message.find('\n'), std::string::npos);
}

TEST(config, reports_trailing_garbage_with_line) {
    const std::string message = config_error("[limits]\nmover_threads = 1 2\n");
    EXPECT_TRUE(starts_with(message, "t.toml:2: invalid TOML: "));
    EXPECT_EQ(message.find('\n'), std::string::npos);
}

TEST(config, whole_line_comments_change_nothing_and_keep_line_numbers) {
    const std::string plain = "cluster = \"x\"\n[limits]\nmover_threads = 3\n" + pool_a;
    const std::string commented =
        "# heading\r\ncluster = \"x\" # trailing\n  \t# indented\n[limits]\n#\nmover_threads = "
        "3\n" +
        pool_a;
    const Config a = parse_config(plain, "t.toml");
    const Config b = parse_config(commented, "t.toml");
    EXPECT_EQ(b.cluster, a.cluster);
    EXPECT_EQ(b.limits.mover_threads, 3u);
    ASSERT_EQ(b.pools.size(), 1u);
    EXPECT_EQ(b.pools[0].path, a.pools[0].path);
    EXPECT_TRUE(starts_with(config_error("# one\n  # two\ncluster = \"x\"\nstate_dir = \n"),
                            "t.toml:4: invalid TOML: "));
}

TEST(config, a_line_starting_with_hash_inside_a_multi_line_string_is_content) {
    EXPECT_NE(config_error("cluster = \"\"\"a\n# b\"\"\"\n").find("# b"), std::string::npos);
    EXPECT_NE(config_error("cluster = '''a\n# b'''\n").find("# b"), std::string::npos);
}

TEST(config, a_comment_holding_a_control_character_is_still_refused) {
    EXPECT_TRUE(starts_with(config_error("# bad \x01 byte\ncluster = \"x\"\n"),
                            "t.toml:1: invalid TOML: "));
}

// Named at the comment's own line (toml11 4 reports it at the next one), whatever toml11 says.
TEST(config, a_control_character_in_a_comment_is_named_with_its_line_and_byte) {
    EXPECT_EQ(config_error("cluster = \"x\"\n# bad \x01 byte\n"),
              "t.toml:2: invalid TOML: control character 0x01 in a comment (byte 21; a comment "
              "may hold none but tab)");
    EXPECT_EQ(config_error("cluster = \"x\" # \x7f\nstate_dir = \"/x\"\n"),
              "t.toml:1: invalid TOML: control character 0x7f in a comment (byte 17; a comment "
              "may hold none but tab)");
    EXPECT_TRUE(
        starts_with(config_error("# a\rb\ncluster = \"x\"\n"),
                    "t.toml:1: invalid TOML: control character 0x0d in a comment (byte 4;"));
    EXPECT_TRUE(starts_with(config_error("cluster = \"x\" # a\r"),
                            "t.toml:1: invalid TOML: control character 0x0d in a comment"));
    // A tab, and the CR of a CRLF, are no control characters here.
    EXPECT_EQ(parse_config("cluster = \"x\" # a\tb\r\n#\tc\r\n" + pool_a, "t.toml").cluster, "x");
}

TEST(config, escapes_control_characters_to_keep_messages_on_one_line) {
    EXPECT_EQ(config_error("cluster = \"a\\nb\"\n"),
              "t.toml:1: cluster: invalid character in 'a\\x0ab' (use letters, digits, '_', '.', "
              "'-')");
}

// --- top-level keys ---

TEST(config, rejects_relative_state_dir) {
    EXPECT_EQ(config_error("state_dir = \"var/lib/bbkit\"\n"),
              "t.toml:1: state_dir: 'var/lib/bbkit' is not an absolute path");
}

TEST(config, rejects_empty_state_owner) {
    EXPECT_EQ(config_error("state_owner = \"\"\n"),
              "t.toml:1: state_owner: a user name must not be empty");
}

TEST(config, rejects_unknown_mode) {
    EXPECT_EQ(config_error("mode = \"Slurm\"\n"),
              "t.toml:1: mode: must be \"standalone\", \"slurm\" or \"datawarp\", got 'Slurm'");
}

TEST(config, state_journal_is_auto_wal_or_rollback) {
    EXPECT_EQ(parse_config("", "t.toml").state_journal, StateJournal::automatic);
    EXPECT_EQ(parse_config("state_journal = \"rollback\"\n", "t.toml").state_journal,
              StateJournal::rollback);
    EXPECT_EQ(parse_config("state_journal = \"wal\"\n", "t.toml").state_journal, StateJournal::wal);
    EXPECT_STREQ(to_string(StateJournal::automatic), "auto");
    EXPECT_EQ(config_error("state_journal = \"delete\"\n"),
              "t.toml:1: state_journal: must be \"auto\", \"wal\" or \"rollback\", got 'delete'");
}

TEST(config, datawarp_mode_reads_what_slurms_datawarp_plugin_reads) {
    const Config config = parse_config(R"(mode = "datawarp"
[[pool]]
name = "a"
path = "/bb/a"
capacity = "1GiB"
[[pool]]
name = "b"
path = "/bb/b"
capacity = "1GiB"
)",
                                       "t.toml");
    EXPECT_EQ(config.mode, Mode::datawarp);
    EXPECT_TRUE(slurm_drives(config.mode));
    EXPECT_EQ(config.directives, (std::vector<std::string>{"DW", "BB"}));
    ASSERT_TRUE(config.default_pool);
    EXPECT_EQ(*config.default_pool, "a");  // Slurm's DefaultPool: the first pool listed
    EXPECT_EQ(
        parse_config("mode = \"datawarp\"\ndirectives = [\"BB\", \"DW\"]\n", "t.toml").directives,
        (std::vector<std::string>{"BB", "DW"}));
    EXPECT_EQ(config_error("mode = \"datawarp\"\ndirectives = [\"BB_LUA\", \"DW\", \"BB\"]\n"),
              "t.toml:2: directives: must be [\"DW\", \"BB\"] in datawarp mode (what Slurm's "
              "datawarp plugin reads), or left out");
    EXPECT_FALSE(slurm_drives(Mode::standalone));
}

TEST(config, rejects_empty_cluster) {
    EXPECT_EQ(config_error("cluster = \"\"\n"), "t.toml:1: cluster: must not be empty");
}

TEST(config, rejects_cluster_with_slash) {
    EXPECT_EQ(config_error("cluster = \"a/b\"\n"),
              "t.toml:1: cluster: invalid character in 'a/b' (use letters, digits, '_', '.', '-')");
}

TEST(config, rejects_directive_with_hash) {
    EXPECT_EQ(config_error("directives = [\n  \"DW\",\n  \"#BB\",\n]\n"),
              "t.toml:3: directives[1]: write 'BB' without the leading '#'");
}

TEST(config, rejects_duplicate_directive_with_line) {
    EXPECT_EQ(config_error("directives = [\n  \"DW\",\n  \"BB\",\n  \"DW\",\n]\n"),
              "t.toml:4: directives[2]: duplicate directive 'DW'");
}

TEST(config, rejects_empty_directive_list) {
    EXPECT_EQ(config_error("\ndirectives = []\n"),
              "t.toml:2: directives: at least one directive is required");
}

TEST(config, rejects_empty_or_odd_directive_word) {
    EXPECT_EQ(config_error("directives = [\"\"]\n"),
              "t.toml:1: directives[0]: a directive must not be empty");
    EXPECT_EQ(config_error("directives = [\"B-B\"]\n"),
              "t.toml:1: directives[0]: invalid character in 'B-B' (use letters, digits and '_')");
    EXPECT_EQ(config_error("directives = [1]\n"),
              "t.toml:1: directives[0]: expected a string, got an integer");
}

// --- flags ---

TEST(config, matches_flags_case_insensitively) {
    const Config config =
        parse_config("flags = [\"enablepersistent\", \"PRIVATEDATA\"]\n", "t.toml");
    EXPECT_TRUE(config.flags.enable_persistent);
    EXPECT_TRUE(config.flags.private_data);
    EXPECT_FALSE(config.flags.teardown_failure);
}

TEST(config, disable_persistent_is_the_default_and_accepted) {
    EXPECT_FALSE(
        parse_config("flags = [\"DisablePersistent\"]\n", "t.toml").flags.enable_persistent);
    EXPECT_FALSE(parse_config("flags = []\n", "t.toml").flags.enable_persistent);
}

TEST(config, rejects_unknown_flag_with_line) {
    EXPECT_EQ(config_error("flags = [\n  \"PrivateData\",\n  \"Persistent\",\n]\n"),
              "t.toml:3: flags[1]: unknown flag 'Persistent' (known: DisablePersistent, "
              "EnablePersistent, PrivateData, TeardownFailure)");
}

TEST(config, rejects_enable_and_disable_persistent_together) {
    EXPECT_EQ(config_error("flags = [\n  \"DisablePersistent\",\n  \"enablepersistent\",\n]\n"),
              "t.toml:3: flags[1]: EnablePersistent and DisablePersistent are exclusive");
}

// --- users ---

TEST(config, stores_uids_as_decimal_strings) {
    const Config config = parse_config("deny_users = [0, \"bob\", 4294967294]\n", "t.toml");
    EXPECT_EQ(config.deny_users, (std::vector<std::string>{"0", "bob", "4294967294"}));
}

TEST(config, rejects_both_allow_and_deny_users) {
    EXPECT_EQ(config_error("allow_users = [\"alice\"]\n\ndeny_users = [\"bob\"]\n"),
              "t.toml:3: deny_users: allow_users and deny_users are exclusive");
}

TEST(config, accepts_allow_users_with_empty_deny_users) {
    const Config config = parse_config("allow_users = [\"alice\"]\ndeny_users = []\n", "t.toml");
    EXPECT_EQ(config.allow_users, (std::vector<std::string>{"alice"}));
}

TEST(config, rejects_negative_uid) {
    EXPECT_EQ(config_error("allow_users = [\"a\", -1]\n"),
              "t.toml:1: allow_users[1]: a uid must be between 0 and 4294967294, got -1");
}

TEST(config, rejects_user_of_wrong_type) {
    EXPECT_EQ(config_error("allow_users = [1.5]\n"),
              "t.toml:1: allow_users[0]: expected a user name or a uid, got a float");
    EXPECT_EQ(config_error("deny_users = [\"\"]\n"),
              "t.toml:1: deny_users[0]: a user name must not be empty");
}

// --- the Slurm release, its slurm.conf and its PollInterval ---

// The Slurm commands root runs (through sudo, with no SLURM_CONF) read the slurm.conf named
// here: one absolute spelling, as every path root is given.
TEST(config, slurm_conf_is_an_absolute_normalized_path) {
    EXPECT_NE(config_error("slurm_conf = \"etc/slurm.conf\"\n").find("t.toml:1: slurm_conf: "),
              std::string::npos);
    EXPECT_EQ(config_error("slurm_conf = \"/etc/slurm/../slurm.conf\"\n"),
              "t.toml:1: slurm_conf: '/etc/slurm/../slurm.conf' is not normalized (no '//', '.' "
              "or '..' components)");
    EXPECT_NE(config_error("slurm_conf = 1\n").find("t.toml:1: slurm_conf: "), std::string::npos);
}

TEST(config, slurm_release_must_be_a_known_release_written_yy_mm) {
    EXPECT_EQ(config_error("slurm_release = \"24.5\"\n"),
              "t.toml:1: slurm_release: '24.5' is not a release written YY.MM, such as \"24.11\"");
    EXPECT_EQ(config_error("cluster = \"x\"\nslurm_release = \"24.11.5\"\n"),
              "t.toml:2: slurm_release: '24.11.5' is not a release written YY.MM, such as "
              "\"24.11\" (leave out the maintenance number)");
    EXPECT_EQ(config_error("slurm_release = \"19.05\"\n"),
              "t.toml:1: slurm_release: Slurm 19.05 is older than 20.11, the oldest release "
              "whose layout bbkit knows");
    EXPECT_TRUE(starts_with(config_error("slurm_release = \"24.08\"\n"),
                            "t.toml:1: slurm_release: '24.08' is no Slurm release bbkit knows "
                            "(20.11, 21.08,"));
    EXPECT_EQ(config_error("slurm_release = 24.11\n"),
              "t.toml:1: slurm_release: expected a string (a release such as \"24.11\"), got "
              "a float");
    EXPECT_EQ(parse_config("slurm_release = \"22.05\"\n", "t.toml").slurm_release,
              (SlurmRelease{22, 5}));
}

TEST(config, poll_interval_is_a_positive_number_of_seconds) {
    EXPECT_EQ(config_error("poll_interval = 0\n"),
              "t.toml:1: poll_interval: must be a number of seconds between 1 and 2073600 "
              "(Slurm's longest timeout), got 0");
    EXPECT_EQ(config_error("poll_interval = -15\n"),
              "t.toml:1: poll_interval: must be a number of seconds between 1 and 2073600 "
              "(Slurm's longest timeout), got -15");
    EXPECT_EQ(config_error("poll_interval = 2073601\n"),
              "t.toml:1: poll_interval: must be a number of seconds between 1 and 2073600 "
              "(Slurm's longest timeout), got 2073601");
    EXPECT_EQ(config_error("poll_interval = \"15\"\n"),
              "t.toml:1: poll_interval: expected an integer, got a string");
    EXPECT_EQ(config_error("poll_interval = 1.5\n"),
              "t.toml:1: poll_interval: expected an integer, got a float");
    EXPECT_EQ(parse_config("poll_interval = 1\n", "t.toml").poll_interval, 1u);
}

// --- timeouts and limits ---

TEST(config, rejects_timeout_over_cap_naming_it) {
    EXPECT_EQ(config_error("[timeouts]\nstage_in = 10\nstage_out = 2073601\n"),
              "t.toml:3: timeouts.stage_out: 2073601 exceeds Slurm's maximum of 2073600 seconds "
              "(24 days)");
}

TEST(config, accepts_timeout_at_cap) {
    EXPECT_EQ(parse_config("[timeouts]\nvalidate = 2073600\n", "t.toml").timeouts.validate,
              max_timeout_seconds);
}

TEST(config, rejects_zero_or_negative_timeout) {
    EXPECT_EQ(config_error("[timeouts]\nother = 0\n"),
              "t.toml:2: timeouts.other: must be a positive number of seconds, got 0");
    EXPECT_EQ(config_error("[timeouts]\n\nvalidate = -5\n"),
              "t.toml:3: timeouts.validate: must be a positive number of seconds, got -5");
}

TEST(config, rejects_stage_concurrency_out_of_range) {
    EXPECT_EQ(config_error("[limits]\nstage_concurrency = 0\n"),
              "t.toml:2: limits.stage_concurrency: must be between 1 and 4096, got 0");
    EXPECT_EQ(config_error("[limits]\nstage_concurrency = 4097\n"),
              "t.toml:2: limits.stage_concurrency: must be between 1 and 4096, got 4097");
    EXPECT_EQ(
        parse_config("[limits]\nstage_concurrency = 4096\n", "t.toml").limits.stage_concurrency,
        4096u);
}

TEST(config, rejects_mover_threads_out_of_range) {
    EXPECT_EQ(config_error("[limits]\nmover_threads = 1025\n"),
              "t.toml:2: limits.mover_threads: must be between 1 and 1024, got 1025");
    EXPECT_EQ(config_error("[limits]\nmover_threads = 0\n"),
              "t.toml:2: limits.mover_threads: must be between 1 and 1024, got 0");
    EXPECT_EQ(parse_config("[limits]\nmover_threads = 1\n", "t.toml").limits.mover_threads, 1u);
}

TEST(config, script_size_is_a_size_between_1KiB_and_512MiB) {
    EXPECT_EQ(parse_config("[limits]\nscript_size = \"16MiB\"\n", "t.toml").limits.script_size,
              16u << 20);
    EXPECT_EQ(config_error("[limits]\nscript_size = \"1KB\"\n"),
              "t.toml:2: limits.script_size: must be between 1KiB and 512MiB, got 1KB");
    EXPECT_EQ(parse_config("[limits]\nscript_size = \"512k\"\n", "t.toml").limits.script_size,
              512u << 10);
    EXPECT_EQ(config_error("[limits]\nscript_size = \"1GiB\"\n"),
              "t.toml:2: limits.script_size: must be between 1KiB and 512MiB, got 1GiB");
}

TEST(config, mover_memory_is_a_size_between_16MiB_and_1TiB) {
    EXPECT_EQ(parse_config("[limits]\nmover_memory = \"64MiB\"\n", "t.toml").limits.mover_memory,
              64u << 20);
    EXPECT_EQ(config_error("[limits]\nmover_memory = \"8MiB\"\n"),
              "t.toml:2: limits.mover_memory: must be between 16MiB and 1TiB, got 8MiB");
    EXPECT_EQ(config_error("[limits]\nmover_memory = \"2TiB\"\n"),
              "t.toml:2: limits.mover_memory: must be between 16MiB and 1TiB, got 2TiB");
    EXPECT_TRUE(starts_with(config_error("[limits]\nmover_memory = 1000\n"),
                            "t.toml:2: limits.mover_memory: "));
    EXPECT_TRUE(starts_with(config_error("[limits]\nmover_memory = \"4N\"\n"),
                            "t.toml:2: limits.mover_memory: "));
}

TEST(config, rejects_node_count_as_user_capacity) {
    EXPECT_TRUE(starts_with(config_error("[limits]\nuser_capacity = \"4N\"\n"),
                            "t.toml:2: limits.user_capacity: invalid capacity '4N': a node count "
                            "is not a capacity"));
}

// --- pools ---

TEST(config, granularity_defaults_to_one_byte) {
    EXPECT_EQ(parse_config(pool_a, "t.toml").pools.at(0).granularity, 1u);
}

TEST(config, rejects_duplicate_pool_names_naming_both_lines) {
    EXPECT_EQ(
        config_error(pool_a + "\n[[pool]]\npath = \"/bb/b\"\nname = \"a\"\ncapacity = \"1G\"\n"),
        "t.toml:8: pool[1].name: duplicate pool name 'a' (first defined at line 2)");
}

TEST(config, rejects_pools_whose_paths_overlap) {
    EXPECT_EQ(config_error(pool_a +
                           "[[pool]]\nname = \"b\"\npath = \"/bb/a/inner\"\ncapacity = \"1G\"\n"),
              "t.toml:7: pool[1].path: '/bb/a/inner' overlaps pool 'a' at '/bb/a'");
    EXPECT_NO_THROW(parse_config(
        pool_a + "[[pool]]\nname = \"b\"\npath = \"/bb/ab\"\ncapacity = \"1G\"\n", "t.toml"));
}

TEST(config, rejects_missing_pool_keys_at_the_pool_line) {
    EXPECT_EQ(config_error(pool_a + "[[pool]]\nname = \"b\"\ncapacity = \"1G\"\n"),
              "t.toml:5: pool[1].path: missing (this key is required)");
    EXPECT_EQ(config_error("[[pool]]\npath = \"/bb/b\"\ncapacity = \"1G\"\n"),
              "t.toml:1: pool[0].name: missing (this key is required)");
    EXPECT_EQ(config_error("[[pool]]\nname = \"b\"\npath = \"/bb/b\"\n"),
              "t.toml:1: pool[0].capacity: missing (this key is required)");
}

TEST(config, rejects_bad_pool_name) {
    EXPECT_EQ(config_error("[[pool]]\nname = \"my pool\"\n"),
              "t.toml:2: pool[0].name: invalid character in 'my pool' (use letters, digits, '_', "
              "'.', '-')");
}

TEST(config, rejects_relative_pool_path) {
    EXPECT_EQ(config_error("[[pool]]\nname = \"a\"\npath = \"bb/a\"\ncapacity = \"1G\"\n"),
              "t.toml:3: pool[0].path: 'bb/a' is not an absolute path");
}

TEST(config, rejects_root_as_pool_path) {
    EXPECT_EQ(config_error("[[pool]]\nname = \"a\"\npath = \"/\"\ncapacity = \"1G\"\n"),
              "t.toml:3: pool[0].path: the root directory cannot be used here");
}

// Found by the config fuzzer: state_dir = "//y" was accepted with two spellings.
TEST(config, rejects_state_dir_that_is_not_normalized) {
    EXPECT_EQ(config_error("state_dir = \"//y\"\n"),
              "t.toml:1: state_dir: '//y' is not normalized (no '//', '.' or '..' components)");
    EXPECT_EQ(config_error("state_dir = \"/var/lib/bbkit/\"\n"),
              "t.toml:1: state_dir: '/var/lib/bbkit/' must not end with '/'");
}

TEST(config, rejects_pool_path_with_trailing_slash) {
    EXPECT_EQ(config_error("[[pool]]\nname = \"a\"\npath = \"/bb/a/\"\ncapacity = \"1G\"\n"),
              "t.toml:3: pool[0].path: '/bb/a/' must not end with '/'");
}

TEST(config, rejects_unnormalized_pool_path) {
    for (const std::string path : {"/bb/../a", "/bb/./a", "/bb//a", "/..", "/."}) {
        EXPECT_EQ(
            config_error("[[pool]]\nname = \"a\"\npath = \"" + path + "\"\ncapacity = \"1G\"\n"),
            "t.toml:3: pool[0].path: '" + path +
                "' is not normalized (no '//', '.' or '..' components)");
    }
}

TEST(config, accepts_dots_inside_path_components) {
    const Config config = parse_config(
        "[[pool]]\nname = \"a\"\npath = \"/bb/.a/b..c\"\ncapacity = \"1G\"\n", "t.toml");
    EXPECT_EQ(config.pools.at(0).path, "/bb/.a/b..c");
}

TEST(config, rejects_node_count_capacity) {
    EXPECT_TRUE(
        starts_with(config_error("[[pool]]\nname = \"a\"\npath = \"/bb/a\"\ncapacity = \"4N\"\n"),
                    "t.toml:4: pool[0].capacity: invalid capacity '4N': a node count is "
                    "not a capacity"));
}

TEST(config, rejects_decimal_capacity_with_line) {
    EXPECT_EQ(
        config_error(pool_a + "[[pool]]\nname = \"b\"\npath = \"/bb/b\"\ncapacity = \"1.5G\"\n"),
        "t.toml:8: pool[1].capacity: invalid size '1.5G': decimals are not allowed (use a "
        "smaller unit)");
}

TEST(config, rejects_granularity_larger_than_capacity) {
    EXPECT_EQ(config_error(pool_a + "granularity = \"2TiB\"\n"),
              "t.toml:5: pool[0].granularity: 2TiB exceeds the pool's capacity 1TiB");
}

TEST(config, accepts_granularity_equal_to_capacity) {
    EXPECT_EQ(
        parse_config(pool_a + "granularity = \"1024GiB\"\n", "t.toml").pools.at(0).granularity,
        1024 * gib);
}

TEST(config, rejects_node_count_granularity) {
    EXPECT_TRUE(starts_with(config_error(pool_a + "granularity = \"2N\"\n"),
                            "t.toml:5: pool[0].granularity: invalid capacity '2N'"));
}

// --- default_pool and hooks ---

TEST(config, rejects_default_pool_naming_no_pool) {
    EXPECT_EQ(config_error("default_pool = \"ssd\"\n" + pool_a),
              "t.toml:1: default_pool: no pool named 'ssd' (configured: a)");
}

TEST(config, rejects_default_pool_without_pools) {
    EXPECT_EQ(config_error("\ndefault_pool = \"a\"\n"),
              "t.toml:2: default_pool: names pool 'a' but no [[pool]] is configured");
}

TEST(config, rejects_relative_hook_path) {
    EXPECT_EQ(config_error("[hooks]\n\npre_run = \"hooks/in.sh\"\n"),
              "t.toml:3: hooks.pre_run: 'hooks/in.sh' is not an absolute path");
}

// --- locating and loading files ---

TEST(config, locate_prefers_the_command_line) {
    const EnvironmentGuard guard;
    setenv("BBKIT_CONFIG", "/env/bbkit.toml", 1);
    EXPECT_EQ(locate_config(std::string("/cli/bbkit.toml")), "/cli/bbkit.toml");
}

TEST(config, locate_uses_the_environment_then_etc) {
    const EnvironmentGuard guard;
    setenv("BBKIT_CONFIG", "/env/bbkit.toml", 1);
    EXPECT_EQ(locate_config(std::nullopt), "/env/bbkit.toml");
    setenv("BBKIT_CONFIG", "", 1);
    EXPECT_EQ(locate_config(std::nullopt), "/etc/bbkit/bbkit.toml");
    unsetenv("BBKIT_CONFIG");
    EXPECT_EQ(locate_config(std::nullopt), "/etc/bbkit/bbkit.toml");
}

TEST(config, load_reports_missing_file_with_hint) {
    try {
        load_config("/nonexistent/bbkit.toml");
        FAIL() << "no error";
    } catch (const Error& error) {
        EXPECT_EQ(error.code(), ExitCode::config);
        EXPECT_STREQ(error.what(),
                     "/nonexistent/bbkit.toml: cannot read configuration: No such file or "
                     "directory (use --config FILE or set BBKIT_CONFIG)");
    }
}

TEST(config, load_reports_a_directory) {
    try {
        load_config("/");
        FAIL() << "no error";
    } catch (const Error& error) {
        EXPECT_EQ(error.code(), ExitCode::config);
        EXPECT_TRUE(starts_with(error.what(), "/: cannot read configuration: Is a directory"));
    }
}

TEST(config, load_names_the_file_in_errors_and_source) {
    char path[] = "/tmp/bbkit_config_test_XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    close(fd);
    std::ofstream(path) << "cluster = \"c1\"\n";
    EXPECT_EQ(load_config(path).source, path);
    EXPECT_EQ(load_config(path).cluster, "c1");
    std::ofstream(path) << "cluster = \"c1\"\nbogus = true\n";
    try {
        load_config(path);
        ADD_FAILURE() << "no error";
    } catch (const Error& error) {
        EXPECT_TRUE(starts_with(error.what(), std::string(path) + ":2: bogus: unknown key"));
    }
    unlink(path);
}

// --- the shipped example ---

TEST(config, example_file_parses_with_documented_defaults) {
    const Config config = load_config(example_path());
    const Config defaults;
    EXPECT_EQ(config.state_dir, defaults.state_dir);
    EXPECT_EQ(config.state_owner, defaults.state_owner);
    EXPECT_EQ(config.mode, defaults.mode);
    EXPECT_EQ(config.cluster, defaults.cluster);
    EXPECT_EQ(config.directives, defaults.directives);
    EXPECT_EQ(config.timeouts.stage_in, defaults.timeouts.stage_in);
    EXPECT_EQ(config.timeouts.stage_out, defaults.timeouts.stage_out);
    EXPECT_EQ(config.timeouts.other, defaults.timeouts.other);
    EXPECT_EQ(config.timeouts.validate, defaults.timeouts.validate);
    EXPECT_EQ(config.limits.stage_concurrency, defaults.limits.stage_concurrency);
    EXPECT_EQ(config.limits.mover_threads, defaults.limits.mover_threads);
    EXPECT_FALSE(config.limits.user_capacity);
    EXPECT_FALSE(config.flags.enable_persistent);
    EXPECT_FALSE(config.allow_root);
    EXPECT_EQ(config.default_pool, "nvme");
    EXPECT_FALSE(config.slurm_release);
    EXPECT_EQ(config.poll_interval, defaults.poll_interval);
    ASSERT_EQ(config.pools.size(), 1u);
    EXPECT_EQ(config.pools[0].granularity, 1u);
}

// The example's optional settings are written "#key = value"; uncommented, they must parse too.
TEST(config, example_file_optional_settings_parse) {
    const std::regex optional_setting(R"(^#([a-z\[]))", std::regex::multiline);
    const std::string text = std::regex_replace(file_text(example_path()), optional_setting, "$1");
    const Config config = parse_config(text, "example");
    EXPECT_EQ(config.limits.user_capacity, 10 * 1024 * gib);
    EXPECT_EQ(config.slurm_release, (SlurmRelease{24, 11}));
    EXPECT_EQ(config.hooks.size(), hook_phases().size());
}

// The example names every key bbkit.toml(5) documents (".BR key \" ("), as a setting or, where
// one cannot be set there (a node-local pool's gres), in its comments.
TEST(config, example_file_names_every_documented_key) {
    const std::string page = file_text(unit::source_file("man/man5/bbkit.toml.5"));
    const std::string example = file_text(example_path());
    const std::regex documented(R"(^\.BR ([a-z_]+) " \()", std::regex::multiline);
    std::size_t keys = 0;
    for (auto it = std::sregex_iterator(page.begin(), page.end(), documented);
         it != std::sregex_iterator(); ++it, ++keys) {
        const std::regex setting("(^#?|\\s)" + (*it)[1].str() + " *=", std::regex::multiline);
        EXPECT_TRUE(std::regex_search(example, setting)) << (*it)[1] << " is not in the example";
    }
    EXPECT_GT(keys, 30u);
}

// The man page's EXAMPLE is the text between ".ft CR" and ".ft"; readers copy it, so it must load.
TEST(config, man_page_example_parses) {
    const std::string page = file_text(unit::source_file("man/man5/bbkit.toml.5"));
    const std::size_t begin = page.find(".ft CR\n");
    const std::size_t end = page.find("\n.ft\n", begin);
    ASSERT_NE(begin, std::string::npos);
    ASSERT_NE(end, std::string::npos);
    const std::size_t text_begin = begin + std::string(".ft CR\n").size();
    const Config config = parse_config(page.substr(text_begin, end - text_begin), "bbkit.toml.5");
    EXPECT_EQ(config.pools.size(), 2u);
    EXPECT_EQ(config.deny_users, (std::vector<std::string>{"guest", "1500"}));
    EXPECT_EQ(config.slurm_release, (SlurmRelease{24, 11}));
}

}  // namespace
}  // namespace bbkit

namespace bbkit {
namespace {

TEST(config, names_longer_than_64_characters_are_refused) {
    const std::string long_name(65, 'c');
    EXPECT_NE(
        config_error("cluster = \"" + long_name + "\"\n").find("65 characters long (at most 64)"),
        std::string::npos);
    EXPECT_EQ(parse_config("cluster = \"" + std::string(64, 'c') + "\"\n", "t.toml").cluster,
              std::string(64, 'c'));
}

}  // namespace
}  // namespace bbkit

namespace bbkit {
namespace {

// toml11 3.7 read past its buffer on these (tests/fuzz/corpus/config/crash-*).
TEST(config, invalid_utf8_is_an_error_naming_the_line) {
    for (const std::string& text :
         {std::string("'\x83'"), std::string("x = '\xc3'"), std::string("a = 1\nx = '''\x83"),
          std::string("cluster = \"caf\xe9\""), std::string("# \xed\xa0\x80 surrogate"),
          std::string("x = \"\xf4\x90\x80\x80\""), std::string("x = \"\xc0\xaf\"")}) {
        const std::string message = config_error(text);
        EXPECT_NE(message.find("invalid UTF-8"), std::string::npos) << message;
    }
    EXPECT_TRUE(starts_with(config_error("a = 1\nb = 2\nx = '\xff'"), "t.toml:3: invalid UTF-8"));
    EXPECT_EQ(parse_config("cluster = \"main\" # caf\xc3\xa9 \xf0\x9f\x98\x80\n", "t.toml").cluster,
              "main");
}

}  // namespace
}  // namespace bbkit

namespace bbkit {
namespace {

// --- hostile configurations: bounded size and nesting, no control characters in paths ---

// A temporary file holding `text`, removed at the end of the test.
class TemporaryConfig {
  public:
    explicit TemporaryConfig(const std::string& text) {
        const int fd = mkstemp(path_);
        EXPECT_GE(fd, 0);
        close(fd);
        std::ofstream(path_, std::ios::binary) << text;
    }
    ~TemporaryConfig() { unlink(path_); }
    TemporaryConfig(const TemporaryConfig&) = delete;
    TemporaryConfig& operator=(const TemporaryConfig&) = delete;
    std::string path() const { return path_; }

  private:
    char path_[32] = "/tmp/bbkit_config_test_XXXXXX";
};

std::string load_error(const std::string& path) {
    try {
        load_config(path);
    } catch (const Error& error) {
        EXPECT_EQ(error.code(), ExitCode::config);
        return error.what();
    }
    ADD_FAILURE() << "no error for " << path;
    return "";
}

TEST(config, refuses_configuration_over_size_limit) {
    // Valid TOML all along: only the size is wrong.
    const std::string padding = "# " + std::string(1024 * 1024, 'x') + "\ncluster = \"c\"\n";
    const TemporaryConfig file(padding);
    EXPECT_EQ(load_error(file.path()),
              file.path() +
                  ": cannot read configuration: larger than 1MiB, the most a bbkit.toml may hold "
                  "(use --config FILE or set BBKIT_CONFIG)");
    EXPECT_TRUE(starts_with(config_error(padding), "t.toml: refused: larger than 1MiB"));
}

TEST(config, accepts_configuration_at_size_limit) {
    const std::string line = "cluster = \"c\"\n";
    const std::string text = std::string(1024 * 1024 - line.size() - 1, '#') + "\n" + line;
    ASSERT_EQ(text.size(), 1024u * 1024u);
    const TemporaryConfig file(text);
    EXPECT_EQ(load_config(file.path()).cluster, "c");
}

TEST(config, refuses_a_device_or_fifo_without_reading_it) {
    EXPECT_EQ(load_error("/dev/zero"),
              "/dev/zero: cannot read configuration: not a regular file (use --config FILE or "
              "set BBKIT_CONFIG)");
    char directory[] = "/tmp/bbkit_config_test_XXXXXX";
    ASSERT_NE(mkdtemp(directory), nullptr);
    const std::string fifo = std::string(directory) + "/fifo";
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    // No writer: a blocking open would wait for ever.
    EXPECT_NE(load_error(fifo).find("not a regular file"), std::string::npos);
    unlink(fifo.c_str());
    rmdir(directory);
}

TEST(config, refuses_deeply_nested_array) {
    const std::string deep = "x = " + std::string(100000, '[') + std::string(100000, ']') + "\n";
    EXPECT_TRUE(starts_with(config_error(deep),
                            "t.toml:1: invalid TOML: arrays and inline tables "
                            "nested more than 8 deep"));
    EXPECT_TRUE(starts_with(config_error("a = 1\nx = " + std::string(9, '{') + "\n"),
                            "t.toml:2: invalid TOML: arrays and inline tables nested"));
    EXPECT_TRUE(starts_with(config_error("x = [{a = [{b = [[[[[1]]]]]}]}]\n"),
                            "t.toml:1: invalid TOML: arrays and inline tables nested"));
}

TEST(config, refuses_dotted_keys_of_many_parts) {
    std::string parts;
    for (int i = 0; i < 100000; ++i)
        parts += "a.";
    EXPECT_TRUE(starts_with(config_error("[" + parts + "b]\n"),
                            "t.toml:1: invalid TOML: dotted keys nested more than 8 deep"));
    EXPECT_TRUE(starts_with(config_error("x = 1\n" + parts + "b = 1\n"),
                            "t.toml:2: invalid TOML: dotted keys nested more than 8 deep"));
    EXPECT_TRUE(starts_with(config_error("x = {a . b.c.d.e.f.g.h.i = 1}\n"),
                            "t.toml:1: invalid TOML: dotted keys nested more than 8 deep"));
    // Eight parts pass the scan (and then fail as unknown keys); dots in values never add up.
    EXPECT_TRUE(starts_with(config_error("a.b.c.d.e.f.g.h = 1\n"), "t.toml:1: a: unknown key"));
    EXPECT_TRUE(starts_with(config_error("x = [1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5]\n"
                                         "y = 1979-05-27T07:32:00.999\n"
                                         "z = '/a.b.c.d.e.f.g.h.i.j'\n"),
                            "t.toml:1: x: unknown key"));
    EXPECT_EQ(parse_config("limits.mover_threads = 2 # a.b.c.d.e.f.g.h.i.j\n", "t.toml")
                  .limits.mover_threads,
              2u);
}

TEST(config, brackets_in_strings_comments_and_headers_do_not_count_as_nesting) {
    const std::string b(20, '[');
    std::string text = "# " + b + "\n" +                                   // a comment
                       "state_dir = \"/s/\\\"" + b + "\" # " + b + "\n" +  // an escaped quote
                       "cluster = 'c' # '\n" +                             // a quote in a comment
                       "[hooks]\n" +                                       // a table header
                       "pre_run = '''/h/''" + b + "''''\n" +           // quotes in a literal string
                       "post_run = \"\"\"/h/\"\"" + b + "\"\"\"\"\n";  // ... and in a basic one
    for (int i = 0; i < 10; ++i)  // array-of-tables headers, more than the nesting bound
        text += "[[pool]]\nname = \"p" + std::to_string(i) + "\"\npath = \"/bb/" +
                std::to_string(i) + "\"\ncapacity = \"1GiB\"\n";
    const Config config = parse_config(text, "t.toml");
    EXPECT_EQ(config.state_dir, "/s/\"" + b);
    EXPECT_EQ(config.hooks.at("pre_run"), "/h/''" + b + "'");
    EXPECT_EQ(config.hooks.at("post_run"), "/h/\"\"" + b + "\"");
    EXPECT_EQ(config.pools.size(), 10u);
}

TEST(config, refuses_newline_in_pool_path) {
    EXPECT_EQ(config_error(pool_a.substr(0, pool_a.find("path")) +
                           "path = \"/bb/a\\nBB_JOB_DIR=/etc\"\ncapacity = \"1TiB\"\n"),
              "t.toml:3: pool[0].path: a path cannot contain a control character (newline, tab, "
              "NUL, ...)");
}

TEST(config, refuses_control_characters_in_state_dir_and_hook_paths) {
    for (const std::string escape : {"\\n", "\\r", "\\t", "\\u0000", "\\u001b", "\\u007f"}) {
        EXPECT_TRUE(starts_with(config_error("state_dir = \"/var/lib/bb" + escape + "x\"\n"),
                                "t.toml:1: state_dir: a path cannot contain a control character"))
            << escape;
        EXPECT_TRUE(starts_with(config_error("[hooks]\npre_run = \"/h" + escape + "\"\n"),
                                "t.toml:2: hooks.pre_run: a path cannot contain a control"))
            << escape;
    }
    // Multi-line strings hold raw newlines.
    EXPECT_TRUE(starts_with(config_error("state_dir = \"\"\"/var\n/lib\"\"\"\n"),
                            "t.toml:1: state_dir: a path cannot contain a control character"));
}

TEST(config, names_and_accounts_refuse_control_characters) {
    EXPECT_NE(config_error("cluster = \"a\\nb\"\n").find("invalid character"), std::string::npos);
    EXPECT_NE(config_error("[[pool]]\nname = \"a\\tb\"\npath = \"/bb/a\"\ncapacity = \"1TiB\"\n")
                  .find("invalid character"),
              std::string::npos);
    EXPECT_NE(config_error("state_group = \"g\\n\"\n").find("not a valid group name"),
              std::string::npos);
    EXPECT_NE(config_error("allow_users = [\"u\\u007f\"]\n").find("not a valid user name"),
              std::string::npos);
    EXPECT_NE(config_error("directives = [\"BB\\n\"]\n").find("invalid character"),
              std::string::npos);
}

// fuzz_config's crash: toml11 recursed once per part of a dotted key in a line of 30,000
// parts and overflowed the stack. A line longer than 8192 bytes is refused before it parses.
TEST(config, a_line_longer_than_8192_bytes_is_refused_before_toml_reads_it) {
    std::string deep = "state_dir = \"/var/lib/bb[";
    for (int i = 0; i < 30000; ++i)
        deep += "a.";
    std::string message;
    try {
        parse_config(deep + "\n", "t.toml");
    } catch (const Error& error) {
        EXPECT_EQ(error.code(), ExitCode::config);
        message = error.what();
    }
    EXPECT_EQ(message, "t.toml:1: invalid TOML: a line longer than 8192 bytes");
}

}  // namespace
}  // namespace bbkit
