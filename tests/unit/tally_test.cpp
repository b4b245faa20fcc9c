// A move's counters and warnings, alone.
#include "bbkit/mover/tally.hpp"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace bbkit::mover_internal {
namespace {

TEST(Warnings, each_message_once_in_order_from_any_thread) {
    Warnings warnings;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&] {
            for (int i = 0; i < 10; ++i)
                warnings.callback()("skipped socket /s" + std::to_string(i % 3));
        });
    for (std::thread& t : threads)
        t.join();
    const std::vector<std::string> list = warnings.list();
    ASSERT_EQ(list.size(), 3u);
    warnings.add("later");
    EXPECT_EQ(warnings.list().back(), "later");
}

TEST(Warnings, memory_stays_bounded_and_the_rest_are_counted) {
    Warnings warnings;
    for (std::size_t i = 0; i < Warnings::max_kept + 7; ++i)
        warnings.add("w" + std::to_string(i));
    const std::vector<std::string> list = warnings.list();
    ASSERT_EQ(list.size(), Warnings::max_kept + 1);
    EXPECT_EQ(list.front(), "w0");
    EXPECT_EQ(list.back(), "7 more warnings");
}

TEST(MoveCounters, progress_says_counting_until_the_walk_is_done) {
    MoveCounters counts;
    counts.files_total += 3;
    counts.bytes_total += 30;
    counts.files_done += 1;
    counts.bytes_done += 10;
    MoveProgress p = counts.progress(false);
    EXPECT_EQ(p.files_done, 1u);
    EXPECT_EQ(p.files_total, 3u);
    EXPECT_EQ(p.bytes_done, 10u);
    EXPECT_EQ(p.bytes_total, 30u);
    EXPECT_TRUE(p.counting);
    EXPECT_FALSE(p.syncing);
    counts.walk_done = true;
    p = counts.progress(true);
    EXPECT_FALSE(p.counting);
    EXPECT_TRUE(p.syncing);
}

}  // namespace
}  // namespace bbkit::mover_internal
