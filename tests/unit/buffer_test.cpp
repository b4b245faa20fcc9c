#include "bbkit/buffer.hpp"

#include <gtest/gtest.h>

#include <set>
#include <utility>

#include "bbkit/error.hpp"

namespace bbkit {
namespace {

using S = BufferState;

// The lifecycle as bbkit(7) BUFFER STATES states it, written out independently of the table.
const std::set<std::pair<S, S>> job_transitions = {
    {S::pending, S::allocating},      {S::pending, S::complete},
    {S::allocating, S::allocated},    {S::allocating, S::complete},
    {S::allocating, S::teardown},     {S::allocated, S::staging_in},
    {S::allocated, S::staged_in},     {S::staging_in, S::staging_in},
    {S::staging_in, S::staged_in},    {S::staged_in, S::pre_run},
    {S::pre_run, S::running},         {S::running, S::post_run},
    {S::post_run, S::staging_out},    {S::post_run, S::staged_out},
    {S::staging_out, S::staging_out}, {S::staging_out, S::staged_out},
    {S::allocated, S::teardown},      {S::staging_in, S::teardown},
    {S::staged_in, S::teardown},      {S::pre_run, S::teardown},
    {S::running, S::teardown},        {S::post_run, S::teardown},
    {S::staging_out, S::teardown},    {S::staged_out, S::teardown},
    {S::teardown, S::teardown},       {S::teardown, S::complete},
    {S::teardown, S::teardown_fail},  {S::teardown_fail, S::teardown},
};

const std::set<std::pair<S, S>> persistent_transitions = {
    {S::allocating, S::allocated}, {S::allocating, S::deleted}, {S::allocated, S::deleting},
    {S::deleting, S::deleting},    {S::deleting, S::deleted},
};

std::string transition_error(BufferKind kind, S from, S to) {
    try {
        check_transition(kind, from, to, "buffer main.42.1");
    } catch (const Error& error) {
        EXPECT_EQ(error.code(), ExitCode::data);
        return error.what();
    }
    ADD_FAILURE() << "accepted " << to_string(from) << " -> " << to_string(to);
    return "";
}

TEST(BufferState, names_are_slurms) {
    const std::vector<std::string> expected = {
        "pending",  "allocating",    "allocated", "staging-in",  "staged-in",
        "pre-run",  "running",       "post-run",  "staging-out", "staged-out",
        "teardown", "teardown-fail", "complete",  "deleting",    "deleted"};
    std::vector<std::string> names;
    for (S state : all_buffer_states())
        names.push_back(to_string(state));
    EXPECT_EQ(names, expected);
}

TEST(BufferState, names_round_trip) {
    for (S state : all_buffer_states())
        EXPECT_EQ(parse_buffer_state(to_string(state)), state);
}

TEST(BufferState, unknown_name_is_a_data_error) {
    for (const char* text : {"", "Running", "staging_in", "torn-down"}) {
        try {
            parse_buffer_state(text);
            ADD_FAILURE() << "accepted '" << text << "'";
        } catch (const Error& error) {
            EXPECT_EQ(error.code(), ExitCode::data);
            EXPECT_NE(std::string(error.what()).find(std::string("'") + text + "'"),
                      std::string::npos);
        }
    }
}

TEST(BufferState, space_is_held_from_allocating_to_teardown_fail_and_while_deleting) {
    const std::set<S> holding = {S::allocating, S::allocated, S::staging_in,    S::staged_in,
                                 S::pre_run,    S::running,   S::post_run,      S::staging_out,
                                 S::staged_out, S::teardown,  S::teardown_fail, S::deleting};
    for (S state : all_buffer_states())
        EXPECT_EQ(holds_space(state), holding.count(state) == 1) << to_string(state);
    EXPECT_TRUE(is_final(S::complete));
    EXPECT_TRUE(is_final(S::deleted));
    EXPECT_FALSE(is_final(S::teardown_fail));
}

TEST(Transitions, table_is_exactly_the_documented_lifecycle) {
    std::set<std::pair<S, S>> job;
    std::set<std::pair<S, S>> persistent;
    for (const Transition& t : transition_table()) {
        EXPECT_TRUE(t.job || t.persistent) << to_string(t.from) << " -> " << to_string(t.to);
        EXPECT_NE(std::string(t.operation), "");
        if (t.job) {
            EXPECT_TRUE(job.insert({t.from, t.to}).second) << "duplicate " << to_string(t.from);
        }
        if (t.persistent) {
            EXPECT_TRUE(persistent.insert({t.from, t.to}).second);
        }
    }
    EXPECT_EQ(job, job_transitions);
    EXPECT_EQ(persistent, persistent_transitions);
}

TEST(Transitions, every_legal_transition_is_accepted) {
    for (const auto& [from, to] : job_transitions)
        EXPECT_NO_THROW(check_transition(BufferKind::job, from, to))
            << to_string(from) << " -> " << to_string(to);
    for (const auto& [from, to] : persistent_transitions)
        EXPECT_NO_THROW(check_transition(BufferKind::persistent, from, to))
            << to_string(from) << " -> " << to_string(to);
}

TEST(Transitions, every_other_pair_is_refused) {
    for (S from : all_buffer_states()) {
        for (S to : all_buffer_states()) {
            if (job_transitions.count({from, to}) == 0) {
                EXPECT_THROW(check_transition(BufferKind::job, from, to), Error)
                    << to_string(from) << " -> " << to_string(to);
            }
            if (persistent_transitions.count({from, to}) == 0) {
                EXPECT_THROW(check_transition(BufferKind::persistent, from, to), Error)
                    << to_string(from) << " -> " << to_string(to);
            }
        }
    }
}

TEST(Transitions, refusal_names_both_states) {
    const std::vector<std::pair<S, S>> samples = {
        {S::running, S::allocated}, {S::complete, S::teardown}, {S::staged_in, S::post_run},
        {S::teardown, S::running},  {S::allocated, S::running}, {S::staged_out, S::complete},
        {S::pending, S::allocated}, {S::allocated, S::deleting}};
    for (const auto& [from, to] : samples) {
        const std::string message = transition_error(BufferKind::job, from, to);
        EXPECT_NE(message.find("buffer main.42.1"), std::string::npos) << message;
        EXPECT_NE(message.find(std::string("is ") + to_string(from)), std::string::npos) << message;
        EXPECT_NE(message.find(std::string("cannot become ") + to_string(to)), std::string::npos)
            << message;
    }
}

TEST(Transitions, refusal_lists_what_is_legal) {
    const std::string message = transition_error(BufferKind::job, S::running, S::allocated);
    EXPECT_NE(message.find("post-run, teardown"), std::string::npos) << message;
    EXPECT_NE(transition_error(BufferKind::job, S::complete, S::teardown).find("it is over"),
              std::string::npos);
}

TEST(Transitions, job_and_persistent_lifecycles_do_not_mix) {
    transition_error(BufferKind::persistent, S::allocated, S::teardown);
    transition_error(BufferKind::persistent, S::allocating, S::complete);
    transition_error(BufferKind::job, S::deleting, S::deleted);
    transition_error(BufferKind::job, S::allocating, S::deleted);
}

TEST(Transitions, operation_is_recorded) {
    EXPECT_STREQ(check_transition(BufferKind::job, S::allocating, S::complete).operation,
                 "recover");
    EXPECT_STREQ(check_transition(BufferKind::job, S::staging_in, S::staged_in).operation,
                 "stage-in");
    EXPECT_STREQ(check_transition(BufferKind::persistent, S::deleting, S::deleted).operation,
                 "destroy");
}

TEST(Buffer, for_key_fills_the_directory) {
    const std::string dir = Buffer::for_key(BufferKey::job("main", 9, 3)).directory;
    EXPECT_EQ(dir.rfind("job/main.9.3.", 0), 0u) << dir;  // and its random part
    EXPECT_EQ(dir.size(), std::string("job/main.9.3.").size() + 16) << dir;
}

// A stage nobody runs: failed (no holder, a message) or killed (a holder that is gone).
TEST(Buffer, a_stage_without_a_live_stager_is_stalled_and_says_how_to_go_on) {
    Buffer b = Buffer::for_key(BufferKey::job("main", 7, 1));
    b.state = BufferState::staging_in;
    b.run_lock_holder = ProcessId::self();
    EXPECT_FALSE(stage_stalled(b));
    EXPECT_EQ(stalled_stage_text(b), "");
    b.run_lock_holder = ProcessId{ProcessId::self().pid, ProcessId::self().start_time + 1};
    EXPECT_TRUE(stage_stalled(b));
    EXPECT_NE(stalled_stage_text(b).find("its stager (pid "), std::string::npos);
    EXPECT_NE(stalled_stage_text(b).find("bb-stage --job 7 in resumes it"), std::string::npos);
    b.run_lock_holder.reset();
    b.state = BufferState::staging_out;
    b.message = "cannot create directory /pfs/res: permission denied";
    EXPECT_NE(stalled_stage_text(b).find("it failed: cannot create directory"), std::string::npos);
    EXPECT_NE(stalled_stage_text(b).find("bb-teardown --force --job 7 discards it"),
              std::string::npos);
    b.state = BufferState::running;
    EXPECT_FALSE(stage_stalled(b));
}

}  // namespace
}  // namespace bbkit
