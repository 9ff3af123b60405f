// Host memory running out inside soma (design.md §2 "Errors"): a call whose own bookkeeping
// cannot allocate returns somaErrorMemoryAllocation ("host memory exhausted inside soma") and
// throws nothing across the C API, and the pool works on once memory is there again. This
// binary replaces the global operator new so that the calling thread's next allocation fails.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <new>

#include "soma_test_util.hpp"

namespace {

thread_local bool fail_next_allocation = false;

void* allocate_or_fail(std::size_t bytes) {
  if (fail_next_allocation) {
    fail_next_allocation = false;
    throw std::bad_alloc();
  }
  if (void* memory = std::malloc(bytes == 0 ? 1 : bytes)) return memory;
  throw std::bad_alloc();
}

}  // namespace

void* operator new(std::size_t bytes) { return allocate_or_fail(bytes); }
void* operator new[](std::size_t bytes) { return allocate_or_fail(bytes); }
void operator delete(void* memory) noexcept { std::free(memory); }
void operator delete[](void* memory) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t) noexcept { std::free(memory); }
void operator delete[](void* memory, std::size_t) noexcept { std::free(memory); }

namespace {

using namespace soma_test;

class HostExhaustion : public capi_test {};

// The first allocation on a stream in a pool makes the stream's cache there: the allocation
// that fails. Before the C API's fast lanes caught what they throw, std::bad_alloc left the
// C API.
TEST_F(HostExhaustion, AFirstAllocationOnAStreamFailsCleanlyAndTheNextSucceeds) {
  unique_stream stream;
  void* pointer = reinterpret_cast<void*>(0x1);
  fail_next_allocation = true;
  EXPECT_EQ(somaMallocAsync(&pointer, 4096, stream), somaErrorMemoryAllocation);
  fail_next_allocation = false;
  EXPECT_TRUE(contains(last_message(), "host memory exhausted inside soma")) << last_message();
  EXPECT_EQ(pointer, reinterpret_cast<void*>(0x1)) << "output written on failure";
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 4096, stream));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(HostExhaustion, AFirstAllocationFromAPoolFailsCleanlyAndThePoolGoesOn) {
  unique_stream stream;
  unique_pool pool(0);
  void* pointer = reinterpret_cast<void*>(0x1);
  fail_next_allocation = true;
  EXPECT_EQ(somaMallocFromPoolAsync(&pointer, 4096, pool, stream), somaErrorMemoryAllocation);
  fail_next_allocation = false;
  EXPECT_TRUE(contains(last_message(), "host memory exhausted inside soma")) << last_message();
  EXPECT_EQ(pointer, reinterpret_cast<void*>(0x1)) << "output written on failure";
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 4096, pool, stream));
  std::uint64_t used = 0;
  SOMA_ASSERT_OK(somaMemPoolGetAttribute(pool, somaMemPoolAttrUsedMemCurrent, &used));
  EXPECT_EQ(used, 4096U);
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

}  // namespace
