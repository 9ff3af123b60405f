// A free never fails, even where host memory runs out inside it (api-behaviour.md, "Host memory
// exhausted"): the block still leaves its allocation, used memory falls, and the memory serves
// again. This binary replaces the global operator new (failing_operator_new.hpp).
#include "core/pool.hpp"

#include <gtest/gtest.h>

#include <memory>

#include "failing_operator_new.hpp"
#include "fake_memory_provider.hpp"

namespace {

using soma::detail::block;
using soma::detail::pool;
using soma::detail::pool_config;
using soma::detail::served_by;
using soma::detail::stream_timeline;
using soma_test::allocations_until_failure;
using soma_test::fake_memory_provider;
using soma_test::fake_memory_state;

constexpr std::size_t GiB = std::size_t{1} << 30;

// A block larger than a stream cache holds (1 GiB) goes from its free straight to the index. The
// index needs host memory for it (set nodes, room to recycle merged blocks); whichever of those
// allocations fails, the free completes, and the next allocation finds the block.
TEST(S2_PoolHostExhaustion, AFreeToTheIndexCompletesWhicheverAllocationFails) {
  for (int failing = 1; failing <= 3; ++failing) {
    SCOPED_TRACE(testing::Message() << "allocation " << failing << " of the free fails");
    auto memory = std::make_shared<fake_memory_state>();
    memory->granularity_bytes = 2 << 20;
    pool_config config;
    config.name = "exhaustion";
    config.max_size_bytes = 8 * GiB;
    config.reservation_bytes = 8 * GiB;
    pool p(config, std::make_unique<fake_memory_provider>(memory));
    stream_timeline a(0);
    block* big = p.allocate(2 * GiB, a).value();
    ASSERT_NE(big, nullptr);
    const std::uintptr_t address = big->address;
    a.note_enqueued();
    allocations_until_failure = failing;
    p.free(big, a);  // noexcept: a throw would end the test program
    const bool reached = allocations_until_failure == 0;
    allocations_until_failure = 0;
    // Nodes kept from earlier erases save some of them (free_index::spare_nodes): at least
    // the first is made.
    if (failing == 1)
      EXPECT_TRUE(reached) << "the free allocated nothing: the case was not reached";
    EXPECT_EQ(p.statistics().used_bytes, 0u);
    const std::size_t commits = memory->commit_calls;
    block* again = p.allocate(2 * GiB, a).value();
    EXPECT_EQ(again->address, address) << "the freed block was lost";
    EXPECT_EQ(memory->commit_calls, commits) << "the pool grew instead";
    EXPECT_EQ(again->how, served_by::same_stream);
    p.free(again, a);
  }
}

// A free on a stream new to the pool makes that stream's cache; where that fails the block goes
// to the index instead, and the stream that freed it reuses it at once (S11).
TEST(S2_PoolHostExhaustion, AFreeWhoseCacheCannotBeMadeGoesToTheIndex) {
  auto memory = std::make_shared<fake_memory_state>();
  memory->granularity_bytes = 64 << 10;
  pool_config config;
  config.name = "exhaustion";
  config.max_size_bytes = 64 << 20;
  config.reservation_bytes = 8 << 20;
  pool p(config, std::make_unique<fake_memory_provider>(memory));
  stream_timeline a(0);
  stream_timeline b(1);
  block* x = p.allocate(4096, a).value();
  ASSERT_NE(x, nullptr);
  b.note_enqueued();
  allocations_until_failure = 1;
  p.free(x, b);
  EXPECT_EQ(allocations_until_failure, 0) << "the cache was made without an allocation";
  allocations_until_failure = 0;
  EXPECT_EQ(p.statistics().used_bytes, 0u);
  block* again = p.allocate(4096, b).value();
  EXPECT_EQ(again, x);
  EXPECT_EQ(again->how, served_by::same_stream);
  p.free(again, b);
}

}  // namespace
