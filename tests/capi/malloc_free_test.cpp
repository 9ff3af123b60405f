// somaMallocAsync / somaMallocFromPoolAsync / somaFreeAsync (S1, S2) and the reuse rule of this
// version (api-behaviour.md): memory freed on stream A is reused at once by A, and serves
// another stream only once a synchronize or a successful query proved the free complete.
// Bad input (NULL, unknown, interior, double free, sizes) is in bad_input_test.cpp.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "host_task.hpp"
#include "soma_test_util.hpp"
#include "stream_gate.hpp"

namespace {

using namespace soma_test;
using namespace std::chrono_literals;

class S1_Allocation : public capi_test {};
class S2_Free : public capi_test {};
class S2_S12_CrossStreamReuse : public capi_test {};

std::uintptr_t address(const void* pointer) { return reinterpret_cast<std::uintptr_t>(pointer); }

bool ranges_overlap(const void* a, std::size_t a_size, const void* b, std::size_t b_size) {
  return address(a) < address(b) + b_size && address(b) < address(a) + a_size;
}

TEST_F(S1_Allocation, SizeZeroReturnsNullAndSuccess) {
  unique_stream stream;
  const somaMemPool_t pool = default_pool(0);
  const pool_stats before = read_pool_stats(pool);
  void* pointer = reinterpret_cast<void*>(0x1000);
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 0, stream));
  EXPECT_EQ(pointer, nullptr);
  pointer = reinterpret_cast<void*>(0x1000);
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 0, pool, stream));
  EXPECT_EQ(pointer, nullptr);
  EXPECT_EQ(read_pool_stats(pool), before);
  SOMA_EXPECT_OK(somaFreeAsync(pointer, stream)) << "freeing the NULL of a size-0 allocation";
}

TEST_F(S1_Allocation, PointersAreAligned256AndDoNotOverlap) {
  unique_stream stream;
  const std::size_t sizes[] = {1,           3,     255,   256,      257,          1000,
                               4096,        65535, 65536, 65537,    1 * MiB + 13, 4 * MiB,
                               2 * MiB - 1, 100,   7,     300 * KiB};
  std::vector<std::pair<void*, std::size_t>> live;
  for (std::size_t size : sizes) {
    void* pointer = nullptr;
    SOMA_ASSERT_OK(somaMallocAsync(&pointer, size, stream)) << "size " << size;
    ASSERT_NE(pointer, nullptr) << "size " << size;
    EXPECT_EQ(address(pointer) % 256, 0u) << "size " << size;
    for (const auto& [other, other_size] : live) {
      EXPECT_FALSE(ranges_overlap(pointer, size, other, other_size))
          << pointer << "+" << size << " overlaps " << other << "+" << other_size;
    }
    live.emplace_back(pointer, size);
  }
  for (const auto& [pointer, size] : live) SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S1_Allocation, MemoryIsUsableByLaterWorkOnTheSameStream) {
  unique_stream stream;
  constexpr std::size_t size = 512 * KiB;
  host_buffer pattern(size);
  for (std::size_t i = 0; i < size; ++i) pattern.data()[i] = static_cast<unsigned char>(i * 13 + 1);
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, size, stream));
  SOMA_ASSERT_OK(somaMemcpyAsync(pointer, pattern.data(), size, somaMemcpyHostToDevice, stream));
  const host_buffer back = read_back(pointer, size, stream);
  ASSERT_EQ(back.size(), size);
  EXPECT_EQ(std::memcmp(back.data(), pattern.data(), size), 0);
  if (on_cpu_backend()) {
    // On the cpu backend pool memory is host memory: after the synchronize the host may read
    // and write it too (on cuda it is device memory).
    auto* bytes = static_cast<unsigned char*>(pointer);
    bytes[0] = 0xEE;
    bytes[size - 1] = 0xEF;
    EXPECT_EQ(bytes[0], 0xEE);
    EXPECT_EQ(bytes[size - 1], 0xEF);
  }
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S1_Allocation, ManyLiveAllocationsKeepTheirContents) {
  unique_stream stream;
  std::mt19937_64 random(7);
  struct live_allocation {
    void* pointer;
    std::size_t words;
    std::size_t offset;  // of its pattern in the host buffers, in words
  };
  std::vector<live_allocation> live;
  std::size_t total_words = 0;
  for (int i = 0; i < 1500; ++i) {
    const std::size_t words = 1 + random() % (random() % 8 == 0 ? 8192 : 64);
    void* pointer = nullptr;
    SOMA_ASSERT_OK(somaMallocAsync(&pointer, words * sizeof(std::uint64_t), stream));
    live.push_back({pointer, words, total_words});
    total_words += words;
  }
  // Each allocation gets its index in every word, through stream copies, and comes back.
  host_buffer written(total_words * sizeof(std::uint64_t));
  host_buffer read(total_words * sizeof(std::uint64_t));
  auto* in = reinterpret_cast<std::uint64_t*>(written.data());
  const auto* out = reinterpret_cast<const std::uint64_t*>(read.data());
  for (std::size_t i = 0; i < live.size(); ++i) std::fill_n(in + live[i].offset, live[i].words, i);
  for (const live_allocation& a : live) {
    SOMA_ASSERT_OK(somaMemcpyAsync(a.pointer, in + a.offset, a.words * sizeof(std::uint64_t),
                                   somaMemcpyHostToDevice, stream));
  }
  for (const live_allocation& a : live) {
    SOMA_ASSERT_OK(somaMemcpyAsync(const_cast<std::uint64_t*>(out) + a.offset, a.pointer,
                                   a.words * sizeof(std::uint64_t), somaMemcpyDeviceToHost,
                                   stream));
  }
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < live.size(); ++i) {
    wrong += static_cast<std::size_t>(std::count_if(out + live[i].offset,
                                                    out + live[i].offset + live[i].words,
                                                    [i](std::uint64_t w) { return w != i; }));
  }
  EXPECT_EQ(wrong, 0u) << "two live allocations share memory";
  for (const live_allocation& a : live) SOMA_ASSERT_OK(somaFreeAsync(a.pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S1_Allocation, WholeDeviceMemoryCanBeAllocatedOnce) {
  // A GPU's free memory is below its total (the driver's own) and moves with other processes.
  SOMA_REQUIRE_TEST_CONFIG();
  unique_stream stream;
  SOMA_ASSERT_OK(somaDeviceSynchronize());
  const memory_info before = device_memory_info(0);
  ASSERT_EQ(before.free_bytes, before.total_bytes) << "another pool holds memory on device 0";
  unique_pool pool(0);
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, before.total_bytes, pool, stream));
  EXPECT_EQ(device_memory_info(0).free_bytes, 0u);
  void* more = nullptr;
  EXPECT_EQ(somaMallocAsync(&more, 4096, stream), somaErrorMemoryAllocation)
      << "the device's memory is all committed";
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(device_memory_info(0).free_bytes, before.total_bytes);
}

TEST_F(S1_Allocation, ExplicitPoolOfAnotherDeviceServesThisStream) {
  if (!have_devices(2)) GTEST_SKIP() << "needs 2 devices";
  unique_stream stream;  // device 0
  unique_pool pool(1);
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 8192, pool, stream));
  somaPointerAttributes attributes{};
  SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, pointer));
  EXPECT_EQ(attributes.device, 1);
  EXPECT_EQ(attributes.pool, pool.get());
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), 8192u);
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), 0u);
}

// ---- free ----------------------------------------------------------------------------------

TEST_F(S2_Free, FreedPointerIsDeadAtOnce) {
  unique_stream stream;
  unique_pool pool(0);
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 3000, pool, stream));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), 3000u);
  stream_gate gate;
  SOMA_ASSERT_OK(gate.hold(stream));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  // Not yet executed on the stream, but dead for the caller: not used, not live.
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), 0u);
  somaPointerAttributes attributes{};
  SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, pointer));
  EXPECT_EQ(attributes.isLiveAllocation, 0);
  gate.open();
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S2_Free, SameStreamReusesFreedMemoryAtOnce) {
  unique_stream stream;
  unique_pool pool(0);
  constexpr std::size_t size = 1 * MiB;
  void* first = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&first, size, pool, stream));
  SOMA_ASSERT_OK(somaFreeAsync(first, stream));
  void* second = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&second, size, pool, stream));
  EXPECT_EQ(second, first) << "same size after a free on the same stream reuses the block";
  SOMA_ASSERT_OK(somaFreeAsync(second, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S2_Free, SameStreamReusesEvenWhileTheFreeIsPending) {
  unique_stream stream;
  constexpr std::size_t size = 1 * MiB;
  unique_pool pool(0, size);  // room for one block only
  ASSERT_EQ(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX), somaSuccess);
  stream_gate gate;
  void* first = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&first, size, pool, stream));
  SOMA_ASSERT_OK(gate.hold(stream));
  SOMA_ASSERT_OK(somaFreeAsync(first, stream));
  void* second = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&second, size, pool, stream))
      << "stream order makes the pending free safe to reuse on its own stream";
  EXPECT_EQ(second, first);
  EXPECT_EQ(somaStreamQuery(stream), somaErrorNotReady);
  gate.open();
  SOMA_ASSERT_OK(somaFreeAsync(second, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S2_Free, FreeOnAnotherStreamAfterEventDependency) {
  unique_stream allocating;
  unique_stream freeing;
  unique_event used;
  const somaMemPool_t pool = default_pool(0);
  const std::uint64_t used_before = pool_u64(pool, somaMemPoolAttrUsedMemCurrent);
  constexpr std::size_t size = 64 * KiB;
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, size, allocating));
  SOMA_ASSERT_OK(somaMemsetAsync(pointer, 0x3C, size, allocating));
  SOMA_ASSERT_OK(somaEventRecord(used, allocating));
  SOMA_ASSERT_OK(somaStreamWaitEvent(freeing, used, 0));
  host_buffer seen(size);
  SOMA_ASSERT_OK(somaMemcpyAsync(seen.data(), pointer, size, somaMemcpyDeviceToHost, freeing));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, freeing));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), used_before);
  SOMA_ASSERT_OK(somaStreamSynchronize(freeing));
  EXPECT_EQ(seen.count_not(0x3C), 0u) << "the freeing stream read before the event's work";
}

// ---- cross-stream reuse: only after the free is proven complete ------------------------------
//
// A pool capped at one block (one granule: a cap rounds up to the granularity) with an infinite
// release threshold: a second block can only come from reusing the first, so success or
// failure of the allocation on the other stream shows whether soma reused the freed memory.

struct one_block_pool {
  const std::size_t kBlock = granularity_bytes(0);
  unique_pool pool{0, kBlock};
  unique_stream freeing;
  unique_stream other;
  void* block = nullptr;

  void allocate_and_free(bool policies_on) {
    const int flag = policies_on ? 1 : 0;
    SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
    SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolReuseFollowEventDependencies, flag));
    SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolReuseAllowOpportunistic, flag));
    SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolReuseAllowInternalDependencies, flag));
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&block, kBlock, pool, freeing));
    SOMA_ASSERT_OK(somaMemsetAsync(block, 1, kBlock, freeing));
    SOMA_ASSERT_OK(somaFreeAsync(block, freeing));
  }

  void expect_other_stream_gets_block() {
    void* reused = nullptr;
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&reused, kBlock, pool, other))
        << "a free proven complete must serve another stream";
    EXPECT_EQ(reused, block);
    SOMA_ASSERT_OK(somaFreeAsync(reused, other));
    SOMA_ASSERT_OK(somaStreamSynchronize(other));
  }
};

TEST_F(S2_S12_CrossStreamReuse, AfterStreamSynchronize) {
  one_block_pool setup;
  ASSERT_NO_FATAL_FAILURE(setup.allocate_and_free(true));
  SOMA_ASSERT_OK(somaStreamSynchronize(setup.freeing));
  setup.expect_other_stream_gets_block();
}

TEST_F(S2_S12_CrossStreamReuse, AfterEventSynchronize) {
  one_block_pool setup;
  ASSERT_NO_FATAL_FAILURE(setup.allocate_and_free(true));
  unique_event freed;
  SOMA_ASSERT_OK(somaEventRecord(freed, setup.freeing));
  SOMA_ASSERT_OK(somaEventSynchronize(freed));
  setup.expect_other_stream_gets_block();
}

TEST_F(S2_S12_CrossStreamReuse, AfterDeviceSynchronize) {
  one_block_pool setup;
  ASSERT_NO_FATAL_FAILURE(setup.allocate_and_free(true));
  SOMA_ASSERT_OK(somaDeviceSynchronize());
  setup.expect_other_stream_gets_block();
}

TEST_F(S2_S12_CrossStreamReuse, AfterSuccessfulStreamQuery) {
  one_block_pool setup;
  ASSERT_NO_FATAL_FAILURE(setup.allocate_and_free(true));
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  somaError_t status = somaErrorNotReady;
  while ((status = somaStreamQuery(setup.freeing)) == somaErrorNotReady &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  SOMA_ASSERT_OK(status);
  setup.expect_other_stream_gets_block();
}

TEST_F(S2_S12_CrossStreamReuse, NotWhileTheFreeIsIncompleteWithPoliciesOff) {
  one_block_pool setup;
  stream_gate gate;
  SOMA_ASSERT_OK(gate.hold(setup.freeing));
  ASSERT_NO_FATAL_FAILURE(setup.allocate_and_free(false));
  void* pointer = nullptr;
  EXPECT_EQ(somaMallocFromPoolAsync(&pointer, setup.kBlock, setup.pool, setup.other),
            somaErrorMemoryAllocation)
      << "the only block is freed on a stream that has not reached the free";
  gate.open();
  SOMA_ASSERT_OK(somaStreamSynchronize(setup.freeing));
  setup.expect_other_stream_gets_block();
}

TEST_F(S2_S12_CrossStreamReuse, NeverRunsBeforeTheFreeWithDefaultPolicies) {
  // Whatever policy admits the block (S11 may insert a wait), work on the other stream must
  // not touch it before the freeing stream has passed the free.
  unique_pool pool(0);
  unique_stream freeing;
  unique_stream other;
  constexpr std::size_t size = 256 * KiB;
  void* first = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&first, size, pool, freeing));
  stream_gate gate;
  SOMA_ASSERT_OK(gate.hold(freeing));
  SOMA_ASSERT_OK(somaFreeAsync(first, freeing));
  void* second = nullptr;
  const somaError_t status = somaMallocFromPoolAsync(&second, size, pool, other);
  SOMA_ASSERT_OK(status) << "an uncapped pool can always grow";
  stream_flag ran;
  SOMA_ASSERT_OK(ran.set_on(other));
  ASSERT_TRUE(gate.wait_entered());
  std::this_thread::sleep_for(30ms);
  if (ranges_overlap(first, size, second, size)) {
    EXPECT_FALSE(ran.is_set()) << "the other stream used memory whose free had not run";
  }
  gate.open();
  SOMA_ASSERT_OK(somaFreeAsync(second, other));
  SOMA_ASSERT_OK(somaStreamSynchronize(other));
  SOMA_ASSERT_OK(somaStreamSynchronize(freeing));
  EXPECT_TRUE(ran.is_set());
}

}  // namespace
