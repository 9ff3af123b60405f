// somaPointerGetAttributes (S14): live allocations by their start or any byte inside; freed
// and unknown pointers read as "not a live allocation" with success.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>

#include "soma_test_util.hpp"

namespace {

using namespace soma_test;

class S14_PointerAttributes : public capi_test {};

void expect_not_live(const void* pointer) {
  somaPointerAttributes attributes;
  std::memset(&attributes, 0x5A, sizeof attributes);  // the call must fill every field it reports
  SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, pointer)) << pointer;
  EXPECT_EQ(attributes.type, somaMemoryTypeUnregistered) << pointer;
  EXPECT_EQ(attributes.device, -1) << pointer;
  EXPECT_EQ(attributes.isLiveAllocation, 0) << pointer;
}

TEST_F(S14_PointerAttributes, BaseOfLiveAllocation) {
  unique_stream stream;
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 1000, stream));
  somaPointerAttributes attributes{};
  SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, pointer));
  EXPECT_EQ(attributes.type, somaMemoryTypeDevice);
  EXPECT_EQ(attributes.device, 0);
  EXPECT_EQ(attributes.devicePointer, pointer);
  // Pool memory is host memory on the cpu backend only; on a GPU it has no host address.
  EXPECT_EQ(attributes.hostPointer, on_cpu_backend() ? pointer : nullptr);
  EXPECT_EQ(attributes.pool, default_pool(0));
  EXPECT_EQ(attributes.base, pointer);
  EXPECT_EQ(attributes.size, 1000u) << "the requested size, not the rounded one";
  EXPECT_EQ(attributes.isLiveAllocation, 1);
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S14_PointerAttributes, InteriorPointersNameTheirAllocation) {
  unique_stream stream;
  unique_pool pool(0);
  constexpr std::size_t size = 3 * MiB + 5;
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, size, pool, stream));
  for (std::size_t offset :
       {std::size_t{1}, std::size_t{999}, std::size_t{2 * MiB + 17}, size - 1}) {
    const void* inside = static_cast<const char*>(pointer) + offset;
    somaPointerAttributes attributes{};
    SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, inside)) << "offset " << offset;
    EXPECT_EQ(attributes.type, somaMemoryTypeDevice) << "offset " << offset;
    EXPECT_EQ(attributes.device, 0) << "offset " << offset;
    EXPECT_EQ(attributes.pool, pool.get()) << "offset " << offset;
    EXPECT_EQ(attributes.base, pointer) << "offset " << offset;
    EXPECT_EQ(attributes.size, size) << "offset " << offset;
    EXPECT_EQ(attributes.isLiveAllocation, 1) << "offset " << offset;
    EXPECT_EQ(attributes.devicePointer, inside) << "as CUDA: the queried pointer itself";
  }
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S14_PointerAttributes, OnePastTheEndIsNotInsideTheAllocation) {
  unique_stream stream;
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 1000, stream));  // next allocation starts >= +1024
  expect_not_live(static_cast<char*>(pointer) + 1000);
  expect_not_live(static_cast<char*>(pointer) + 1020);
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S14_PointerAttributes, FreedPointerIsNotLive) {
  unique_stream stream;
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 4096, stream));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  expect_not_live(pointer);
  expect_not_live(static_cast<char*>(pointer) + 100);
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  expect_not_live(pointer);
}

TEST_F(S14_PointerAttributes, UnknownPointersAreUnregistered) {
  int on_stack = 0;
  auto on_heap = std::make_unique<char[]>(64);
  expect_not_live(&on_stack);
  expect_not_live(on_heap.get());
  expect_not_live(nullptr);
  expect_not_live(reinterpret_cast<void*>(0x12345));
}

TEST_F(S14_PointerAttributes, NeverInferredFromAddressRanges) {
  // Memory the pool has committed but not handed out (cached after a free) is not an allocation.
  unique_stream stream;
  unique_pool pool(0);
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  void* freed = nullptr;
  void* live = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&freed, 1 * MiB, pool, stream));
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&live, 1 * MiB, pool, stream));
  SOMA_ASSERT_OK(somaFreeAsync(freed, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  expect_not_live(static_cast<char*>(freed) + 4096);
  somaPointerAttributes attributes{};
  SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, live));
  EXPECT_EQ(attributes.isLiveAllocation, 1);
  SOMA_ASSERT_OK(somaFreeAsync(live, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S14_PointerAttributes, AllocationOnAnotherDevice) {
  if (!have_devices(2)) GTEST_SKIP() << "needs 2 devices";
  SOMA_ASSERT_OK(somaSetDevice(1));
  unique_stream stream;
  SOMA_ASSERT_OK(somaSetDevice(0));
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 512, stream));
  somaPointerAttributes attributes{};
  SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, pointer));
  EXPECT_EQ(attributes.device, 1);
  EXPECT_EQ(attributes.pool, default_pool(1));
  EXPECT_EQ(attributes.type, somaMemoryTypeDevice);
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

}  // namespace
