// Host memory that runs out inside the pool (api-behaviour.md, "Host memory exhausted inside
// soma"): a free never fails (the block still leaves its allocation, used memory falls, and the
// memory serves again), and an allocation, release or trim that fails for host memory reports it
// and leaves the pool whole, whichever allocation failed. This binary replaces the global
// operator new (failing_operator_new.hpp).
#include "core/pool.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "failing_operator_new.hpp"
#include "fake_memory_provider.hpp"

namespace {

using soma::detail::block;
using soma::detail::block_view;
using soma::detail::memory_provider;
using soma::detail::physical_piece;
using soma::detail::pool;
using soma::detail::pool_config;
using soma::detail::remap_mode;
using soma::detail::served_by;
using soma::detail::stream_timeline;
using soma_test::allocations_until_failure;
using soma_test::fake_memory_provider;
using soma_test::fake_memory_state;

constexpr std::size_t KiB = 1024;
constexpr std::size_t GiB = std::size_t{1} << 30;
constexpr std::size_t kGranule = 64 * KiB;

// Blocks larger than a stream cache holds (1 GiB) go from their free straight to the index. The
// index needs host memory for them (tree nodes, made ahead where the pool keeps none); whichever
// allocation fails, every free completes, and the blocks serve again without growth.
TEST(S2_PoolHostExhaustion, FreesToTheIndexCompleteWhicheverAllocationFails) {
  constexpr int kBlocks = 4;
  for (int failing = 1; failing <= 4; ++failing) {
    SCOPED_TRACE(testing::Message() << "allocation " << failing << " of the frees fails");
    auto memory = std::make_shared<fake_memory_state>();
    memory->granularity_bytes = 2 << 20;
    pool_config config;
    config.name = "exhaustion";
    config.max_size_bytes = 8 * GiB;
    config.reservation_bytes = 8 * GiB;
    pool p(config, std::make_unique<fake_memory_provider>(memory));
    stream_timeline a(0);
    std::vector<block*> big;
    for (int i = 0; i < kBlocks; ++i) big.push_back(p.allocate(3 * GiB / 2, a).value());
    std::vector<std::uintptr_t> addresses;
    for (block* b : big) addresses.push_back(b->address);
    allocations_until_failure = failing;
    for (block* b : big) {
      a.note_enqueued();  // each free a point of its own: none merges with another
      p.free(b, a);       // noexcept: a throw would end the test program
    }
    const bool reached = allocations_until_failure == 0;
    allocations_until_failure = 0;
    if (failing == 1) {
      EXPECT_TRUE(reached) << "the frees allocated nothing: the case was not reached";
    }
    EXPECT_EQ(p.statistics().used_bytes, 0u);
    const std::size_t commits = memory->commit_calls;
    std::vector<std::uintptr_t> again;
    for (int i = 0; i < kBlocks; ++i) {
      block* b = p.allocate(3 * GiB / 2, a).value();
      EXPECT_EQ(b->how, served_by::same_stream);
      again.push_back(b->address);
      big[i] = b;
    }
    std::sort(again.begin(), again.end());
    std::sort(addresses.begin(), addresses.end());
    EXPECT_EQ(again, addresses) << "a freed block was lost";
    EXPECT_EQ(memory->commit_calls, commits) << "the pool grew instead";
    for (block* b : big) p.free(b, a);
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

// ---- host memory made ahead ------------------------------------------------------------------

// A step that must not stop halfway reserves first: the nodes and blocks it was promised come
// without host memory, and what was kept before a failure stays usable.
TEST(S2_NodeReserve, ReservedNodesServeWithoutHostMemory) {
  soma::detail::node_reserve nodes;
  using map = std::map<std::uintptr_t, int, std::less<>,
                       soma::detail::reserve_allocator<std::pair<const std::uintptr_t, int>>>;
  map m{std::less<>{}, soma::detail::reserve_allocator<map::value_type>(nodes)};
  nodes.reserve(3);
  EXPECT_EQ(nodes.kept(), 3u);
  allocations_until_failure = 1;
  for (std::uintptr_t key = 1; key <= 3; ++key) m.emplace(key, 0);
  EXPECT_EQ(allocations_until_failure, 1) << "a reserved node allocated";
  EXPECT_THROW(m.emplace(4, 0), std::bad_alloc);
  allocations_until_failure = 0;
  EXPECT_EQ(m.size(), 3u) << "the failed insert changed the map";
  m.erase(2);  // its node is kept for the next one
  EXPECT_EQ(nodes.kept(), 1u);
  allocations_until_failure = 1;
  m.emplace(5, 0);
  EXPECT_EQ(allocations_until_failure, 1);
  allocations_until_failure = 0;
}

TEST(S2_BlockStore, ReservedBlocksAreMadeAndRecycledWithoutHostMemory) {
  soma::detail::block_store store;
  store.reserve(2);
  allocations_until_failure = 1;
  block* first = store.make();
  block* second = store.make();
  store.recycle(first);  // recycling allocates nothing, ever
  block* again = store.make();
  EXPECT_EQ(allocations_until_failure, 1) << "a reserved block allocated";
  EXPECT_EQ(again, first);
  EXPECT_THROW(store.make(), std::bad_alloc);
  allocations_until_failure = 0;
  store.recycle(again);
  store.recycle(second);
  EXPECT_EQ(store.kept(), 2u);
}

// ---- every other path: whichever host allocation fails, the pool stays whole --------------

/// Forwards to the fake with the failure countdown paused: the fake's own bookkeeping stands for
/// a backend's driver calls, not for the pool's host memory.
class sparing_provider final : public memory_provider {
 public:
  explicit sparing_provider(std::shared_ptr<fake_memory_state> state) : inner_(std::move(state)) {}
  std::size_t granularity_bytes() const override { return inner_.granularity_bytes(); }
  soma::detail::result<std::uintptr_t> reserve(std::size_t bytes) override {
    const paused p;
    return inner_.reserve(bytes);
  }
  void free_reservation(std::uintptr_t base, std::size_t bytes) override {
    const paused p;
    inner_.free_reservation(base, bytes);
  }
  soma::detail::result<std::uint64_t> commit(std::uintptr_t address, std::size_t bytes) override {
    const paused p;
    return inner_.commit(address, bytes);
  }
  void decommit(std::uintptr_t address, std::size_t bytes, std::uint64_t token,
                std::size_t offset_bytes) override {
    const paused p;
    inner_.decommit(address, bytes, token, offset_bytes);
  }
  bool can_decommit_part(std::uint64_t token) const override {
    return inner_.can_decommit_part(token);
  }
  bool can_map_again(std::uint64_t token) const override { return inner_.can_map_again(token); }
  soma::detail::status map_again(std::span<const physical_piece> pieces) override {
    const paused p;
    return inner_.map_again(pieces);
  }
  void unmap_alias(std::span<const physical_piece> pieces) override {
    const paused p;
    inner_.unmap_alias(pieces);
  }

 private:
  struct paused {
    int saved = allocations_until_failure;
    paused() { allocations_until_failure = 0; }
    ~paused() { allocations_until_failure = saved; }
    paused(const paused&) = delete;
    paused& operator=(const paused&) = delete;
  };
  fake_memory_provider inner_;
};

/// A pool of 64 KiB granules over sparing_provider, two streams and the blocks live in it.
struct exhaustion_case {
  explicit exhaustion_case(bool remap, std::size_t max_size = 64 << 20)
      : memory(std::make_shared<fake_memory_state>()) {
    memory->granularity_bytes = kGranule;
    memory->allow_map_again = remap;
    memory->allow_partial_decommit = remap;
    pool_config config;
    config.name = "exhaustion";
    config.max_size_bytes = max_size;
    config.reservation_bytes = 8 << 20;
    the_pool = std::make_unique<pool>(config, std::make_unique<sparing_provider>(memory));
    if (remap) the_pool->set_remap_free_memory(remap_mode::before_growth);
    // No spare nodes or blocks: a step that prepared too few allocates in its middle.
    the_pool->prepare_exactly(true);
    live.reserve(16);  // the test's own bookkeeping allocates nothing during a step
  }
  /// Allocates without failing (the case's setup), or records a failure of the step tried.
  block* allocate(std::size_t bytes, const stream_timeline& stream) {
    auto taken = the_pool->allocate(bytes, stream);
    if (!taken.ok()) {
      failed = true;
      return nullptr;
    }
    live.push_back(taken.value());
    return taken.value();
  }
  void free_pending(block* b, stream_timeline& stream) {
    std::erase(live, b);
    stream.note_enqueued();
    the_pool->free(b, stream);
  }
  static void prove(stream_timeline& stream) {
    const std::uint64_t position = stream.note_enqueued();
    stream.note_completed(position);
    stream.prove_completed(position);
  }

  std::shared_ptr<fake_memory_state> memory;
  stream_timeline a{0};
  stream_timeline b{1};
  std::unique_ptr<pool> the_pool;
  std::vector<block*> live;
  bool failed = false;
};

/// The pool is whole: its blocks tile its commits exactly, the live ones are the ones handed
/// out, and once they are freed and their frees proven, every byte goes back (no block was
/// lost between the index and its allocation).
void expect_whole(exhaustion_case& c) {
  const soma::detail::pool_snapshot snapshot = c.the_pool->snapshot();
  std::uint64_t committed = 0;
  for (const auto& commit : snapshot.commits) committed += commit.size_bytes;
  std::uint64_t covered = 0;
  std::size_t live_blocks = 0;
  std::uintptr_t end = 0;
  for (const block_view& v : snapshot.blocks) {
    EXPECT_GE(v.address, end) << "blocks overlap";
    end = v.address + v.size_bytes;
    covered += v.size_bytes;
    if (v.what == block_view::state::live) ++live_blocks;
  }
  EXPECT_EQ(covered, committed) << "the blocks do not cover the commits";
  EXPECT_EQ(committed, snapshot.reserved_bytes);
  EXPECT_EQ(live_blocks, c.live.size()) << "a block is live that was never handed out";
  for (block* b : std::vector<block*>(c.live)) c.free_pending(b, c.a);
  exhaustion_case::prove(c.a);
  exhaustion_case::prove(c.b);
  EXPECT_TRUE(c.the_pool->try_release_everything()) << "free memory was lost";
  EXPECT_EQ(c.the_pool->statistics().reserved_bytes, 0u);
}

/// Runs `step` on a fresh case made ready by `setup`, with the first, second, ... host
/// allocation of the step failing, until one run of it allocates nothing more: each run's pool
/// must be whole, and the step must succeed when tried again.
void sweep(const std::function<std::unique_ptr<exhaustion_case>()>& setup,
           const std::function<void(exhaustion_case&)>& step) {
  int reached_failures = 0;
  for (int failing = 1; failing <= 200; ++failing) {
    SCOPED_TRACE(testing::Message() << "allocation " << failing << " of the step fails");
    std::unique_ptr<exhaustion_case> c = setup();
    ASSERT_FALSE(c->failed) << "the setup failed";
    allocations_until_failure = failing;
    bool threw = false;
    try {
      step(*c);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    const bool reached = allocations_until_failure == 0;
    allocations_until_failure = 0;
    if (reached) {
      ++reached_failures;
      if (threw || c->failed) {
        c->failed = false;
        step(*c);  // host memory is back: the step succeeds
        EXPECT_FALSE(c->failed) << "the step failed again with host memory back";
      }
    } else {
      EXPECT_FALSE(threw || c->failed) << "the step failed with no allocation failing";
    }
    expect_whole(*c);
    if (!reached) break;
  }
  EXPECT_GT(reached_failures, 0) << "the step allocated nothing: no case was reached";
}

TEST(S2_PoolHostExhaustion, GrowthLeavesThePoolWholeWhicheverAllocationFails) {
  sweep([] { return std::make_unique<exhaustion_case>(false); },
        [](exhaustion_case& c) { c.allocate(3 * kGranule, c.a); });
}

TEST(S2_PoolHostExhaustion, ASplitLeavesThePoolWholeWhicheverAllocationFails) {
  sweep(
      [] {
        auto c = std::make_unique<exhaustion_case>(false);
        c->free_pending(c->allocate(8 * kGranule, c->a), c->a);
        return c;
      },
      [](exhaustion_case& c) { c.allocate(4 * KiB, c.a); });
}

TEST(S2_PoolHostExhaustion, AnotherStreamsProvenFreeServesWhicheverAllocationFails) {
  sweep(
      [] {
        auto c = std::make_unique<exhaustion_case>(false);
        block* x = c->allocate(8 * kGranule, c->a);
        block* y = c->allocate(8 * kGranule, c->a);
        c->free_pending(x, c->a);
        c->free_pending(y, c->a);
        exhaustion_case::prove(c->a);
        return c;
      },
      [](exhaustion_case& c) { c.allocate(12 * kGranule, c.b); });
}

TEST(S9_PoolHostExhaustion, ReleaseLeavesThePoolWholeWhicheverAllocationFails) {
  sweep(
      [] {
        auto c = std::make_unique<exhaustion_case>(true);
        block* x = c->allocate(4 * kGranule, c->a);
        c->allocate(4 * kGranule, c->a);
        block* z = c->allocate(4 * kGranule, c->a);
        c->free_pending(x, c->a);
        c->free_pending(z, c->a);
        exhaustion_case::prove(c->a);
        return c;
      },
      [](exhaustion_case& c) { c.the_pool->trim_to(0); });
}

TEST(S9_PoolHostExhaustion, AReleaseInsideAFreeBlockAndAChunkLeavesThePoolWhole) {
  // The free block and its chunk both go on past the granules given back, on either side: the
  // carve keeps two pieces and the chunk is cut in two, the most host memory a release takes.
  sweep(
      [] {
        auto c = std::make_unique<exhaustion_case>(true);
        c->free_pending(c->allocate(8 * kGranule, c->a), c->a);
        exhaustion_case::prove(c->a);
        block* before = c->allocate(kGranule + kGranule / 2, c->a);
        block* middle = c->allocate(5 * kGranule, c->a);
        block* after = c->allocate(kGranule + kGranule / 2, c->a);
        EXPECT_EQ(middle->address, before->address + before->size_bytes);
        EXPECT_EQ(after->address, middle->address + middle->size_bytes);
        c->free_pending(middle, c->a);
        exhaustion_case::prove(c->a);
        return c;
      },
      [](exhaustion_case& c) {
        c.the_pool->trim_to(0);
        EXPECT_EQ(c.the_pool->statistics().reserved_bytes, 4 * kGranule)
            << "granules 2 to 5 go back; the pieces beside them stay";
      });
}

/// Four live blocks of two granules, the first and third freed: two holes of two granules.
std::unique_ptr<exhaustion_case> two_holes(std::size_t max_size = 64 << 20) {
  auto c = std::make_unique<exhaustion_case>(true, max_size);
  std::vector<block*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(c->allocate(2 * kGranule, c->a));
  c->free_pending(blocks[0], c->a);
  c->free_pending(blocks[2], c->a);
  return c;
}

TEST(S9_PoolHostExhaustion, ARemapLeavesThePoolWholeWhicheverAllocationFails) {
  sweep([] { return two_holes(); },
        [](exhaustion_case& c) {
          block* big = c.allocate(4 * kGranule, c.a);
          if (big != nullptr) {
            EXPECT_EQ(big->how, served_by::remap);
          }
        });
}

TEST(S9_PoolHostExhaustion, UnmappingRetiredAddressesLeavesThePoolWholeWhicheverAllocationFails) {
  sweep(
      [] {
        auto c = two_holes();
        c->allocate(4 * kGranule, c->a);
        exhaustion_case::prove(c->a);
        return c;
      },
      [](exhaustion_case& c) { c.the_pool->trim_to(0); });
}

TEST(S9_PoolHostExhaustion, MovingAGranuleToTheSmallRegionLeavesThePoolWhole) {
  sweep(
      [] {
        auto c = std::make_unique<exhaustion_case>(true, 4 * kGranule);
        c->free_pending(c->allocate(4 * kGranule, c->a), c->a);
        return c;
      },
      [](exhaustion_case& c) {
        block* small = c.allocate(1 * KiB, c.a);
        if (small != nullptr) {
          EXPECT_TRUE(small->small_region);
        }
      });
}

}  // namespace
