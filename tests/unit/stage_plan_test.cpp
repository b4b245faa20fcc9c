#include "bbkit/stage_plan.hpp"

#include <gtest/gtest.h>

#include <cerrno>

#include "bbkit/error.hpp"

using namespace bbkit;

TEST(StagePlan, round_trips_through_json) {
    StagePlan plan;
    plan.direction = StageDirection::out;
    plan.user = User{"alice", 1001, 1002, {1002, 27}};
    plan.job_root = "/bb/job/42.1";
    plan.persistent_roots = {{"shared", "/bb/persistent/shared"}};
    plan.capacity = 1 << 30;
    StageDirective s;
    s.type = StageType::directory;
    s.source = "out dir/\xff\n";
    s.destination = "/lus/alice/results";
    s.buffer = "shared";
    s.where.line = 7;
    s.where.origin = Origin::bbf_file;
    plan.stages.push_back(s);
    plan.threads = 4;
    plan.durable = true;
    plan.direct_io = true;
    plan.trust_syncfs = false;
    plan.temp_token = "00112233445566778899aabbccddeeff";
    const StagePlan back = plan_from_json(plan_to_json(plan));
    EXPECT_EQ(back.direction, StageDirection::out);
    EXPECT_EQ(back.user.name, "alice");
    EXPECT_EQ(back.user.groups, (std::vector<gid_t>{1002, 27}));
    EXPECT_EQ(back.persistent_roots.at("shared"), "/bb/persistent/shared");
    ASSERT_EQ(back.stages.size(), 1u);
    EXPECT_EQ(back.stages[0].source, s.source);
    EXPECT_EQ(back.stages[0].buffer, "shared");
    EXPECT_EQ(back.stages[0].where.origin, Origin::bbf_file);
    EXPECT_TRUE(back.durable && back.direct_io && !back.trust_syncfs);
    EXPECT_EQ(back.temp_token, plan.temp_token);
}

TEST(StagePlan, malformed_plan_is_a_data_error) {
    EXPECT_THROW(plan_from_json("{\"direction\":\"in\"}"), Error);
    EXPECT_THROW(plan_from_json("not json"), Error);
}

TEST(StagePlan, report_lines_carry_any_message) {
    const std::string odd = "cannot read '/a b/\xff\nname': Permission denied";
    const MoverReport e = parse_report(error_line(Error(ExitCode::no_perm, odd)));
    EXPECT_EQ(e.kind, MoverReport::Kind::error);
    EXPECT_EQ(e.exit_code, 77);
    EXPECT_NE(e.message.find("Permission denied"), std::string::npos) << e.message;
    ASSERT_TRUE(e.failure);  // an Error from no move: internal
    EXPECT_EQ(e.failure->kind, FailureKind::internal);
    const MoverReport p = parse_report(progress_line(1, 2, 3, 4));
    EXPECT_EQ(p.kind, MoverReport::Kind::progress);
    EXPECT_EQ(p.bytes_total, 4u);
    const MoverReport s = parse_report(summary_line(5, 6, 7, 1.5, MovePhases{}));
    EXPECT_EQ(s.kind, MoverReport::Kind::summary);
    EXPECT_EQ(s.skipped, 7u);
    EXPECT_EQ(parse_report("garbage").kind, MoverReport::Kind::unknown);
}

TEST(StagePlan, summary_lines_carry_the_phases) {
    MovePhases phases;
    phases.walk = 0.5;
    phases.wait = 0.01;
    phases.copy = 3.25;
    phases.finish = 0.125;
    phases.sync = 0.75;
    phases.before = 0.02;
    phases.after = 0.8;
    phases.busy = 6;
    phases.threads = 2;
    const std::string line = summary_line(5, 6, 7, 4.5, phases);
    EXPECT_EQ(line,
              "summary 5 6 7 4.5 walk=0.5 wait=0.01 copy=3.25 finish=0.125 sync=0.75 before=0.02 "
              "after=0.8 busy=6 threads=2");
    const MoverReport s = parse_report(line);
    ASSERT_TRUE(s.phases);
    EXPECT_EQ(s.phases->copy, 3.25);
    EXPECT_EQ(s.phases->threads, 2u);
    EXPECT_EQ(s.phases->seconds, 4.5);
    EXPECT_NEAR(s.phases->idle_share(), 1 - 6 / (2 * 4.5), 1e-9);
    // An older mover's summary has none; a malformed or partial set is none, the summary kept.
    EXPECT_FALSE(parse_report("summary 5 6 7 4.5").phases);
    for (const char* odd : {"summary 5 6 7 4.5 walk=0.5", "summary 5 6 7 4.5 walk=x",
                            "summary 5 6 7 4.5 walk=-1 wait=0 copy=0 finish=0 sync=0 before=0 "
                            "after=0 busy=0 threads=1",
                            "summary 5 6 7 4.5 walk=0 wait=0 copy=0 finish=0 sync=0 before=0 "
                            "after=0 busy=0 threads=99999"}) {
        const MoverReport r = parse_report(odd);
        EXPECT_EQ(r.kind, MoverReport::Kind::summary) << odd;
        EXPECT_FALSE(r.phases) << odd;
    }
}

TEST(StagePlan, phases_of_several_moves_add_up) {
    MovePhases a, b;
    a.copy = 1, a.before = 0.1, a.after = 0.2, a.seconds = 2, a.busy = 3, a.threads = 2;
    b.copy = 2, b.before = 0.3, b.after = 0.4, b.seconds = 3, b.busy = 5, b.threads = 2;
    MovePhases total;
    total.append(a);
    total.append(b);
    EXPECT_EQ(total.copy, 3);
    EXPECT_EQ(total.before, 0.1);  // the first move's start
    EXPECT_EQ(total.after, 0.4);   // the last move's end
    EXPECT_EQ(total.seconds, 5);
    EXPECT_NEAR(total.idle_share(), 1 - 8.0 / 10, 1e-9);
    EXPECT_EQ(MovePhases{}.idle_share(), 0);
}

TEST(StagePlan, progress_lines_carry_the_phase) {
    for (StagePhase phase : {StagePhase::measuring, StagePhase::copying, StagePhase::syncing}) {
        const MoverReport p = parse_report(progress_line(1, 2, 3, 4, phase));
        EXPECT_EQ(p.kind, MoverReport::Kind::progress);
        EXPECT_EQ(p.phase, phase);
        EXPECT_EQ(p.files_total, 2u);
        EXPECT_EQ(p.bytes_total, 4u);
    }
    EXPECT_EQ(progress_line(1, 2, 3, 4), "progress 1 2 3 4 copying");
    EXPECT_EQ(progress_line(0, 7, 0, 9, StagePhase::measuring), "progress 0 7 0 9 measuring");
}

TEST(StagePlan, progress_line_of_an_older_mover_is_copying) {
    const MoverReport p = parse_report("progress 5 6 7 8");
    EXPECT_EQ(p.kind, MoverReport::Kind::progress);
    EXPECT_EQ(p.phase, StagePhase::copying);
    EXPECT_EQ(p.files_done, 5u);
    EXPECT_EQ(p.bytes_total, 8u);
}

TEST(StagePlan, progress_line_with_an_unknown_phase_or_more_words_is_not_progress) {
    for (const char* line :
         {"progress 1 2 3 4 verifying", "progress 1 2 3 4 copying extra",
          "progress 1 2 3 4 COPYING", "progress 1 2 3", "progress 1 2 3 x copying", "progress"})
        EXPECT_EQ(parse_report(line).kind, MoverReport::Kind::unknown) << line;
}

TEST(StagePlan, phases_have_one_name_each) {
    for (StagePhase phase : {StagePhase::measuring, StagePhase::copying, StagePhase::syncing})
        EXPECT_EQ(parse_stage_phase(to_string(phase)), phase);
    EXPECT_FALSE(parse_stage_phase(""));
    EXPECT_FALSE(parse_stage_phase("done"));
}

TEST(StagePlan, recorded_stages_read_what_alloc_recorded) {
    Request request;
    StageDirective s;
    s.type = StageType::list;
    s.source = "/l/\xff";
    s.destination = "d";
    s.where.line = 3;
    request.stage_in.push_back(s);
    request.use.push_back({"shared", {}});
    const std::string staging = staging_record(request);
    const auto in = recorded_stages(staging, StageDirection::in);
    ASSERT_EQ(in.size(), 1u);
    EXPECT_EQ(in[0].type, StageType::list);
    EXPECT_EQ(in[0].source, "/l/\xff");
    EXPECT_TRUE(in[0].buffer.empty());
    EXPECT_TRUE(recorded_stages(staging, StageDirection::out).empty());
    EXPECT_EQ(recorded_persistent_uses(staging), std::vector<std::string>{"shared"});
    EXPECT_TRUE(recorded_stages("{}", StageDirection::in).empty());
}

// What bb-teardown protects in standalone mode: only a job that ran and whose stage-out has not
// succeeded holds results found nowhere else.
TEST(StagePlan, unstaged_results_are_those_of_a_job_that_ran_and_did_not_stage_out) {
    Request request;
    StageDirective out;
    out.type = StageType::directory;
    out.source = "out";
    out.destination = "/pfs/res";
    request.stage_out.push_back(out);
    Buffer b = Buffer::for_key(BufferKey::job("main", 7, 1));
    b.staging = staging_record(request);
    for (BufferState s : all_buffer_states()) {
        b.state = s;
        const bool at_risk = s == BufferState::running || s == BufferState::post_run ||
                             s == BufferState::staging_out;
        const auto found = unstaged_results(b);
        EXPECT_EQ(found.size(), at_risk ? 1u : 0u) << to_string(s);
        if (at_risk) {
            EXPECT_EQ(found[0].destination, "/pfs/res");
        }
    }
    b.state = BufferState::running;
    b.staging = staging_record(Request{});
    EXPECT_TRUE(unstaged_results(b).empty());
    Buffer persistent = Buffer::for_key(BufferKey::persistent("main", "p"));
    persistent.state = BufferState::running;
    persistent.staging = staging_record(request);
    EXPECT_TRUE(unstaged_results(persistent).empty());
}

TEST(StagePlan, carries_the_node_and_the_lines_spread) {
    StagePlan plan;
    plan.user = User{"alice", 1001, 1002, {}};
    plan.job_root = "/local/nvme/job/main.7.1";
    StageDirective s;
    s.type = StageType::directory;
    s.source = "/lus/in";
    s.destination = "in";
    s.distribute = Spread::shard;
    plan.stages.push_back(s);
    plan.nodes = JobNodes{"n3", 2, 4};
    const StagePlan back = plan_from_json(plan_to_json(plan));
    EXPECT_EQ(back.nodes.name, "n3");
    EXPECT_EQ(back.nodes.index, 2u);
    EXPECT_EQ(back.nodes.count, 4u);
    EXPECT_EQ(back.stages.at(0).distribute, Spread::shard);
    EXPECT_FALSE(back.stages.at(0).gather);
    // A place that cannot be: refused, never a shard nobody owns.
    std::string text = plan_to_json(plan);
    text.replace(text.find("\"index\":2"), 9, "\"index\":4");
    EXPECT_THROW(plan_from_json(text), Error);
}

TEST(StagePlan, the_staging_record_keeps_the_node_of_a_node_local_buffer) {
    Request request;
    StageDirective out;
    out.type = StageType::file;
    out.source = "log";
    out.destination = "/lus/log";
    out.gather = Gather::merge;
    request.stage_out.push_back(out);
    EXPECT_FALSE(recorded_nodes(staging_record(request)));
    const std::string record = staging_record(request, JobNodes{"n1", 0, 2});
    const auto nodes = recorded_nodes(record);
    ASSERT_TRUE(nodes);
    EXPECT_EQ(nodes->name, "n1");
    EXPECT_EQ(nodes->count, 2u);
    EXPECT_EQ(recorded_stages(record, StageDirection::out).at(0).gather, Gather::merge);
    EXPECT_FALSE(recorded_nodes("{}"));
    EXPECT_FALSE(recorded_nodes("not json"));
}

TEST(StagePlan, error_lines_carry_the_failure_typed) {
    const std::string path = "/pfs/a b/\nodd";
    const Error error = mover_error(FailureKind::pool_full, "write", path, ENOSPC);
    const std::string line = error_line(error);
    EXPECT_EQ(line.find('\n'), std::string::npos) << line;  // one line, whatever the path
    const MoverReport r = parse_report(line);
    ASSERT_EQ(r.kind, MoverReport::Kind::error);
    EXPECT_EQ(r.exit_code, 74);
    EXPECT_EQ(r.message, "cannot write " + path + ": no space left on device");
    ASSERT_TRUE(r.failure);
    EXPECT_EQ(r.failure->kind, FailureKind::pool_full);
    EXPECT_EQ(r.failure->operation, "write");
    EXPECT_EQ(r.failure->path, path);
    EXPECT_EQ(r.failure->err, ENOSPC);
    EXPECT_NE(line.find("\"errno\":\"ENOSPC\""), std::string::npos) << line;
}

TEST(StagePlan, every_failure_kind_survives_its_line) {
    for (FailureKind kind :
         {FailureKind::source, FailureKind::destination, FailureKind::capacity,
          FailureKind::pool_full, FailureKind::interrupted, FailureKind::internal}) {
        const MoverReport r =
            parse_report(error_line(Error(ExitCode::io, "m", Failure{kind, "", "", 0})));
        ASSERT_TRUE(r.failure) << to_string(kind);
        EXPECT_EQ(r.failure->kind, kind);
        EXPECT_EQ(r.failure->err, 0);
        EXPECT_EQ(r.failure->operation, "");
    }
}

TEST(StagePlan, an_older_movers_error_line_reads_without_a_failure) {
    const MoverReport r = parse_report("error 74 \"cannot write /x: no space left on device\"");
    ASSERT_EQ(r.kind, MoverReport::Kind::error);
    EXPECT_EQ(r.message, "cannot write /x: no space left on device");
    EXPECT_FALSE(r.failure);  // words are never read for a kind
}

TEST(StagePlan, an_unknown_kind_or_errno_reads_as_no_failure_or_no_errno) {
    const MoverReport unknown = parse_report("error 74 {\"message\":\"m\",\"kind\":\"later\"}");
    EXPECT_EQ(unknown.message, "m");
    EXPECT_FALSE(unknown.failure);
    const MoverReport odd =
        parse_report("error 74 {\"message\":\"m\",\"kind\":\"source\",\"errno\":\"ENOTHING\"}");
    ASSERT_TRUE(odd.failure);
    EXPECT_EQ(odd.failure->err, 0);
}

// The transfer runner's place line (bbkit(7), STAGING ON TRANSFER NODES) reads back whole;
// one past its bounds, or malformed, is no place at all.
TEST(StagePlan, a_transfer_place_line_reads_back_and_is_bounded) {
    TransferPlace place{17, "n[1-3]", {"part 0: done, 3 files, 1.0KiB", "part 1: not started"}};
    const MoverReport r = parse_report(transfer_line(place));
    ASSERT_EQ(r.kind, MoverReport::Kind::transfer);
    ASSERT_TRUE(r.transfer);
    EXPECT_EQ(r.transfer->job_id, 17u);
    EXPECT_EQ(r.transfer->nodes, "n[1-3]");
    EXPECT_EQ(r.transfer->parts, place.parts);
    TransferPlace many = place;
    many.parts.assign(max_place_parts + 1, "part");
    EXPECT_EQ(parse_report(transfer_line(many)).kind, MoverReport::Kind::unknown);
    TransferPlace long_text = place;
    long_text.nodes = std::string(max_place_text + 1, 'n');
    EXPECT_EQ(parse_report(transfer_line(long_text)).kind, MoverReport::Kind::unknown);
    for (const char* bad :
         {"transfer", "transfer {}", "transfer {\"job\":-1,\"nodes\":\"\",\"parts\":[]}",
          "transfer {\"job\":1,\"nodes\":2,\"parts\":[]}",
          "transfer {\"job\":1,\"nodes\":\"\",\"parts\":[3]}", "transfer [1]"})
        EXPECT_EQ(parse_report(bad).kind, MoverReport::Kind::unknown) << bad;
}
