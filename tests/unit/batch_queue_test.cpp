// The hand-off between a move's walk and its copy, alone: order, the bound, the walk's end and
// failure, the stop, and the waits each side is charged with.
#include "bbkit/mover/batch_queue.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

namespace bbkit::mover_internal {
namespace {

Batch batch_of(std::size_t nodes) {
    Batch batch;
    batch.nodes.resize(nodes);
    return batch;
}

constexpr auto tick = std::chrono::milliseconds(10);

TEST(BatchQueue, batches_arrive_in_order_and_none_after_the_walks_end) {
    BatchQueue queue(4);
    for (std::size_t n = 1; n <= 3; ++n)
        queue.push(batch_of(n));
    queue.finish(nullptr, std::chrono::seconds(1));
    for (std::size_t n = 1; n <= 3; ++n) {
        std::optional<Batch> b = queue.take(tick, [] {});
        ASSERT_TRUE(b);
        EXPECT_EQ(b->nodes.size(), n);
        queue.release();
    }
    EXPECT_FALSE(queue.take(tick, [] {}));
    EXPECT_FALSE(queue.walk_error());
    EXPECT_FALSE(queue.stopped());
}

TEST(BatchQueue, the_walk_waits_while_the_queue_is_full) {
    BatchQueue queue(1);
    queue.push(batch_of(1));
    std::atomic<bool> pushed{false};
    const Clock::time_point began = Clock::now();
    std::thread walker([&] {
        queue.push(batch_of(2));
        pushed = true;
        queue.finish(nullptr, Clock::now() - began);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(pushed);  // one batch waits already
    ASSERT_TRUE(queue.take(tick, [] {}));
    queue.release();
    ASSERT_TRUE(queue.take(tick, [] {}));
    queue.release();
    walker.join();
    EXPECT_TRUE(pushed);
    // The walk waited ~50 ms for room: that is not its working time.
    EXPECT_LT(queue.walk_time(), std::chrono::milliseconds(40));
}

TEST(BatchQueue, drain_waits_until_the_copy_released_every_batch) {
    BatchQueue queue(2);
    queue.push(batch_of(1));
    std::atomic<bool> drained{false};
    std::thread walker([&] {
        queue.drain();
        drained = true;
    });
    ASSERT_TRUE(queue.take(tick, [] {}));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(drained);  // taken, not yet released
    queue.release();
    walker.join();
    EXPECT_TRUE(drained);
}

TEST(BatchQueue, the_copy_is_told_while_it_waits) {
    BatchQueue queue(1);
    std::atomic<int> ticks{0};
    std::thread walker([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(60));
        queue.finish(nullptr, std::chrono::milliseconds(60));
    });
    EXPECT_FALSE(queue.take(tick, [&] { ++ticks; }));
    walker.join();
    EXPECT_GE(ticks.load(), 2);
    EXPECT_GE(queue.copy_waited(), std::chrono::milliseconds(50));
}

TEST(BatchQueue, a_failed_walk_stops_the_move_and_is_kept) {
    BatchQueue queue(1);
    queue.finish(std::make_exception_ptr(std::runtime_error("walk failed")),
                 std::chrono::milliseconds(5));
    EXPECT_TRUE(queue.stopped());
    ASSERT_TRUE(queue.walk_error());
    EXPECT_THROW(std::rethrow_exception(queue.walk_error()), std::runtime_error);
    EXPECT_FALSE(queue.take(tick, [] {}));
}

TEST(BatchQueue, a_stop_wakes_a_waiting_walk_with_copy_stopped) {
    for (bool draining : {false, true}) {
        BatchQueue queue(1);
        queue.push(batch_of(1));
        std::atomic<bool> stopped{false};
        std::thread walker([&] {
            try {
                if (draining)
                    queue.drain();
                else
                    queue.push(batch_of(2));
            } catch (const CopyStopped&) {
                stopped = true;
            }
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        queue.stop();
        walker.join();
        EXPECT_TRUE(stopped) << (draining ? "drain" : "push");
        EXPECT_THROW(queue.check_stopped(), CopyStopped);
        EXPECT_TRUE(queue.stop_flag().load());
    }
}

}  // namespace
}  // namespace bbkit::mover_internal
