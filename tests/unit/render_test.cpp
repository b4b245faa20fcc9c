#include "bbkit/render.hpp"

#include <gtest/gtest.h>

namespace bbkit {
namespace {

constexpr std::uint64_t gib = 1024ULL * 1024 * 1024;

PoolStatus pool(std::string name, std::uint64_t total, std::uint64_t granularity,
                std::uint64_t used, std::size_t queued, PoolAvailability availability) {
    PoolStatus p;
    p.name = std::move(name);
    p.total = total;
    p.granularity = granularity;
    p.used = used;
    p.free = total - used;
    p.queued = queued;
    p.initialized = true;
    p.availability = availability;
    return p;
}

TEST(TextTable, fitted_columns_are_as_wide_as_their_widest_cell) {
    EXPECT_EQ(text_table({{"a"}, {"bb"}}, {{"long", "1"}, {"x", "22"}}),
              "   a bb\n"
              "long  1\n"
              "   x 22\n");
}

TEST(TextTable, fixed_columns_pad_and_let_a_longer_cell_overflow_as_printf_does) {
    EXPECT_EQ(text_table({{"N", 4, true}, {"V", 3}, {"S", 0, true, "  "}},
                         {{"ab", "1", "up"}, {"abcdef", "1234", "down"}}),
              "N      V  S\n"
              "ab     1  up\n"
              "abcdef 1234  down\n");
}

TEST(TextTable, without_rows_prints_the_header) {
    EXPECT_EQ(text_table({{"pool"}, {"free"}}, {}), "pool free\n");
}

TEST(PoolListText, keeps_bb_pool_lists_layout) {
    EXPECT_EQ(
        pool_list_text(
            {pool("nvme", 5800 * gib, gib, 1200 * gib, 2, PoolAvailability::up),
             pool("a-pool-name-longer-than-16", 10, 2, 0, 0, PoolAvailability::draining)}),
        "POOL                  TOTAL       USED      TRASH       FREE       GRAN QUEUED  STATE\n"
        "nvme                5800GiB    1200GiB          0    4600GiB       1GiB      2  up\n"
        "a-pool-name-longer-than-16         10          0          0         10          2      "
        "0  draining\n");
}

}  // namespace
}  // namespace bbkit
