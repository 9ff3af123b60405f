// stream_cache: the per-stream fast path, exact-size bins (S11: same-stream reuse).
#include "core/stream_cache.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "cache_blocks.hpp"

namespace {

using soma::detail::block;
using soma::detail::stream_cache;

std::unique_ptr<block> make_block(std::uintptr_t address, std::size_t size) {
  auto b = std::make_unique<block>();
  b->address = address;
  b->size_bytes = size;
  return b;
}

using soma_test::drained;

TEST(S11_StreamCache, EmptyCacheMisses) {
  stream_cache cache;
  EXPECT_EQ(cache.pop(256), nullptr);
  EXPECT_EQ(cache.cached_bytes(), 0u);
}

TEST(S11_StreamCache, PopReturnsExactSizeOnly) {
  stream_cache cache;
  auto small = make_block(0x10000, 512);
  auto large = make_block(0x20000, 1024);
  ASSERT_TRUE(cache.push(small.get()));
  ASSERT_TRUE(cache.push(large.get()));
  EXPECT_EQ(cache.cached_bytes(), 1536u);
  EXPECT_EQ(cache.pop(768), nullptr);  // no best fit here: exact sizes only
  EXPECT_EQ(cache.pop(256), nullptr);
  EXPECT_EQ(cache.pop(1024), large.get());
  EXPECT_EQ(cache.pop(1024), nullptr);
  EXPECT_EQ(cache.pop(512), small.get());
  EXPECT_EQ(cache.cached_bytes(), 0u);
  EXPECT_EQ(small->next_in_bin, nullptr);
  EXPECT_EQ(large->next_in_bin, nullptr);
}

TEST(S11_StreamCache, SameSizeIsLastInFirstOut) {
  stream_cache cache;
  auto a = make_block(0x10000, 256);
  auto b = make_block(0x20000, 256);
  auto c = make_block(0x30000, 256);
  for (block* x : {a.get(), b.get(), c.get()}) ASSERT_TRUE(cache.push(x));
  EXPECT_EQ(cache.pop(256), c.get());
  EXPECT_EQ(cache.pop(256), b.get());
  EXPECT_EQ(cache.pop(256), a.get());
  EXPECT_EQ(cache.pop(256), nullptr);
}

TEST(S9_StreamCache, PushBeyondCapacityIsRefused) {
  stream_cache cache(/*capacity_bytes=*/2048);
  auto a = make_block(0x10000, 1024);
  auto b = make_block(0x20000, 1024);
  auto c = make_block(0x30000, 256);
  EXPECT_TRUE(cache.push(a.get()));
  EXPECT_TRUE(cache.push(b.get()));
  EXPECT_FALSE(cache.push(c.get()));
  EXPECT_EQ(cache.cached_bytes(), 2048u);
  EXPECT_EQ(cache.pop(256), nullptr);  // the refused block was not cached
  ASSERT_EQ(cache.pop(1024), b.get());
  EXPECT_TRUE(cache.push(c.get()));  // room again
  EXPECT_EQ(cache.cached_bytes(), 1280u);
}

TEST(S9_StreamCache, DrainTakesEverything) {
  stream_cache cache;
  std::vector<std::unique_ptr<block>> blocks;
  std::set<block*> pushed;
  for (std::size_t i = 0; i < 50; ++i) {
    blocks.push_back(make_block(0x100000 + i * 0x10000, 256 * (1 + i % 7)));
    ASSERT_TRUE(cache.push(blocks.back().get()));
    pushed.insert(blocks.back().get());
  }
  const std::vector<block*> out = drained(cache);
  ASSERT_EQ(out.size(), 50u);
  EXPECT_EQ(std::set<block*>(out.begin(), out.end()), pushed);
  EXPECT_EQ(cache.cached_bytes(), 0u);
  for (std::size_t i = 1; i <= 7; ++i) EXPECT_EQ(cache.pop(256 * i), nullptr);
}

TEST(S11_StreamCache, ManyDistinctSizesSurviveBinGrowth) {
  stream_cache cache;
  std::vector<std::unique_ptr<block>> blocks;
  constexpr std::size_t kSizes = 500;  // far beyond the initial 32 bins
  for (std::size_t i = 1; i <= kSizes; ++i) {
    for (int copy = 0; copy < 2; ++copy) {
      blocks.push_back(make_block(0x1000000 + blocks.size() * 0x100000, 256 * i));
      ASSERT_TRUE(cache.push(blocks.back().get()));
    }
  }
  for (std::size_t i = kSizes; i >= 1; --i) {
    block* first = cache.pop(256 * i);
    block* second = cache.pop(256 * i);
    ASSERT_NE(first, nullptr) << "size " << 256 * i;
    ASSERT_NE(second, nullptr) << "size " << 256 * i;
    EXPECT_EQ(first->size_bytes, 256 * i);
    EXPECT_EQ(second->size_bytes, 256 * i);
    EXPECT_NE(first, second);
    EXPECT_EQ(cache.pop(256 * i), nullptr);
  }
  EXPECT_EQ(cache.cached_bytes(), 0u);
}

// A drain runs on every miss of the stream's cache (the pool's slow path), so its work must
// follow what is cached, not every size the stream ever freed: PyTorch's variable-shape training
// loop frees thousands of distinct sizes, and its replay spent 44 % of its instructions walking
// empty bins (bench/trace_replay; its short steps took 21-27 ms on an H200 against 12-16 ms
// after this fix).
TEST(S11_StreamCache, DrainLeavesNoBinsOfSizesNoLongerCached) {
  stream_cache cache(/*capacity_bytes=*/std::size_t{1} << 40);
  std::vector<std::unique_ptr<block>> blocks;
  for (std::size_t i = 1; i <= 5000; ++i) {
    blocks.push_back(make_block(0x1000000 + i * 0x100000, 256 * i));
    ASSERT_TRUE(cache.push(blocks.back().get()));
  }
  EXPECT_GE(cache.bin_slots(), 5000u);
  EXPECT_EQ(drained(cache).size(), 5000u);
  EXPECT_LE(cache.bin_slots(), 32u) << "an empty cache keeps the bins of 5000 sizes";
  // Sizes come back as before.
  ASSERT_TRUE(cache.push(blocks[41].get()));
  EXPECT_EQ(cache.pop(256 * 42), blocks[41].get());
  EXPECT_EQ(cache.pop(256 * 42), nullptr);
}

TEST(S11_StreamCache, ConcurrentPushPopKeepsEveryBlock) {
  stream_cache cache;
  constexpr int kThreads = 4;
  constexpr std::size_t kPerThread = 200;
  std::vector<std::unique_ptr<block>> storage;
  std::vector<std::vector<block*>> held(kThreads);  // a thread pushes only what it holds
  for (int t = 0; t < kThreads; ++t) {
    for (std::size_t i = 0; i < kPerThread; ++i) {
      storage.push_back(make_block(0x1000000 + (t * kPerThread + i) * 0x10000, 256 * (1 + i % 4)));
      held[t].push_back(storage.back().get());
    }
  }
  std::vector<int> misses(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 50; ++round) {
        std::vector<std::size_t> sizes;
        for (block* b : held[t]) {
          sizes.push_back(b->size_bytes);
          cache.push(b);
        }
        held[t].clear();
        // Each pop follows this thread's own push of that size: it can never miss.
        for (std::size_t size : sizes) {
          block* b = cache.pop(size);
          if (b == nullptr || b->size_bytes != size) {
            ++misses[t];
            continue;
          }
          held[t].push_back(b);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(misses[t], 0) << "thread " << t;
  EXPECT_EQ(cache.cached_bytes(), 0u);
  std::set<block*> all;
  for (auto& h : held) all.insert(h.begin(), h.end());
  EXPECT_EQ(all.size(), storage.size());  // no block lost or handed out twice
}

// S10: the stream's used share moves with its pops and pushes, under the cache's lock: a free
// takes its bytes off, a re-use within them publishes nothing, and a share that turns positive
// is handed out whole for the pool to publish. Threads freeing and allocating on one stream at
// once lose no byte of it.
TEST(S10_StreamCache, TheUsedShareMovesWithPopsAndPushes) {
  stream_cache cache;
  auto a = make_block(0x1000, 256);
  std::int64_t publish = -1;
  ASSERT_TRUE(cache.push(a.get(), 200));
  EXPECT_EQ(cache.peek_used(), -200);
  ASSERT_EQ(cache.pop(256, 150, &publish), a.get());
  EXPECT_EQ(publish, 0) << "a re-use within the stream's frees";
  EXPECT_EQ(cache.peek_used(), -50);
  ASSERT_TRUE(cache.push(a.get(), 150));
  ASSERT_EQ(cache.pop(256, 250, &publish), a.get());
  EXPECT_EQ(publish, 50) << "the share turned positive: all of it goes to the pool";
  EXPECT_EQ(cache.peek_used(), 0);
  EXPECT_EQ(cache.pop(256, 100, &publish), nullptr);
  EXPECT_EQ(publish, 0) << "a miss changes no share";
  EXPECT_EQ(cache.take_used(), 0);

  constexpr int kThreads = 4;
  std::vector<std::unique_ptr<block>> storage;
  for (int t = 0; t < kThreads; ++t) storage.push_back(make_block(0x10000 + t * 0x1000, 512));
  std::vector<std::thread> threads;
  std::vector<std::int64_t> published(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      block* mine = storage[static_cast<std::size_t>(t)].get();
      for (int round = 0; round < 1000; ++round) {
        cache.push(mine, 100);
        std::int64_t out = 0;
        mine = cache.pop(512, 100, &out);
        published[static_cast<std::size_t>(t)] += out;
        if (mine == nullptr) return;  // cannot happen: this thread pushed one just before
      }
    });
  }
  for (auto& th : threads) th.join();
  std::int64_t total = cache.take_used();
  for (std::int64_t p : published) total += p;
  EXPECT_EQ(total, 0) << "every free was matched by an allocation of the same bytes";
  EXPECT_EQ(cache.cached_bytes(), 0u);
}

}  // namespace
