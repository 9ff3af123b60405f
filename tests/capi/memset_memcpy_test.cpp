// somaMemsetAsync and somaMemcpyAsync on pool memory (S1: stream-ordered use of an allocation;
// S13: copies resolve the owning device from the pointers). Pool memory is read back with a
// copy into host memory (read_back), so the checks hold on every backend.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "host_task.hpp"
#include "soma_test_util.hpp"

namespace {

using namespace soma_test;

class S1_Memset : public capi_test {};
class S13_Memcpy : public capi_test {};

TEST_F(S1_Memset, SetsExactlyTheRequestedRange) {
  unique_stream stream;
  constexpr std::size_t size = 64 * KiB;
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, size, stream));
  SOMA_ASSERT_OK(somaMemsetAsync(pointer, 0x11, size, stream));
  SOMA_ASSERT_OK(somaMemsetAsync(static_cast<char*>(pointer) + 1000, 0xAB, 5000, stream));
  const host_buffer bytes = read_back(pointer, size, stream);
  ASSERT_EQ(bytes.size(), size);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < size; ++i) {
    const unsigned char expected = (i >= 1000 && i < 6000) ? 0xAB : 0x11;
    if (bytes[i] != expected) ++wrong;
  }
  EXPECT_EQ(wrong, 0u);
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S1_Memset, ValueIsTakenAsUnsignedChar) {
  unique_stream stream;
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 256, stream));
  SOMA_ASSERT_OK(somaMemsetAsync(pointer, 0x1FF, 256, stream));  // like memset: 0xFF
  const host_buffer bytes = read_back(pointer, 256, stream);
  ASSERT_EQ(bytes.size(), 256u);
  for (std::size_t i = 0; i < 256; ++i) ASSERT_EQ(bytes[i], 0xFF) << i;
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S1_Memset, ZeroCountIsANoOp) {
  unique_stream stream;
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 256, stream));
  SOMA_ASSERT_OK(somaMemsetAsync(pointer, 0x22, 256, stream));
  SOMA_ASSERT_OK(somaMemsetAsync(pointer, 0x33, 0, stream));
  const host_buffer bytes = read_back(pointer, 256, stream);
  EXPECT_EQ(bytes.count_not(0x22), 0u);
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S1_Memset, IsOrderedBetweenHostTasksOfTheStream) {
  // Host tasks touch host memory only (on cuda pool memory is device memory): task 1 fills
  // staging, a copy takes it into the pool, the memset overwrites the first half, a copy brings
  // the pool back, task 2 looks. Any reordering shows in what task 2 sees.
  unique_stream stream;
  constexpr std::size_t size = 4096;
  host_buffer staging(size);
  host_buffer back(size);
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, size, stream));
  unsigned char* in = staging.data();
  const unsigned char* out = back.data();
  std::atomic<bool> saw_order{false};
  SOMA_ASSERT_OK(launch_host(stream, [in] { std::memset(in, 0x01, size); }));
  SOMA_ASSERT_OK(somaMemcpyAsync(pointer, in, size, somaMemcpyHostToDevice, stream));
  SOMA_ASSERT_OK(somaMemsetAsync(pointer, 0x7E, size / 2, stream));
  SOMA_ASSERT_OK(somaMemcpyAsync(back.data(), pointer, size, somaMemcpyDeviceToHost, stream));
  SOMA_ASSERT_OK(launch_host(stream, [out, &saw_order] {
    bool ordered = true;
    for (std::size_t i = 0; i < size; ++i)
      ordered = ordered && out[i] == (i < size / 2 ? 0x7E : 0x01);
    saw_order.store(ordered);
  }));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_TRUE(saw_order.load());
}

TEST_F(S13_Memcpy, DeviceToDeviceHostToDeviceAndBack) {
  unique_stream stream;
  constexpr std::size_t count = 10000;
  std::vector<std::uint32_t> source(count);
  std::iota(source.begin(), source.end(), 17u);
  std::vector<std::uint32_t> result(count, 0);
  const std::size_t bytes = count * sizeof(std::uint32_t);

  void* first = nullptr;
  void* second = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&first, bytes, stream));
  SOMA_ASSERT_OK(somaMallocAsync(&second, bytes, stream));
  SOMA_ASSERT_OK(somaMemcpyAsync(first, source.data(), bytes, somaMemcpyHostToDevice, stream));
  SOMA_ASSERT_OK(somaMemcpyAsync(second, first, bytes, somaMemcpyDeviceToDevice, stream));
  SOMA_ASSERT_OK(somaMemcpyAsync(result.data(), second, bytes, somaMemcpyDeviceToHost, stream));
  SOMA_ASSERT_OK(somaFreeAsync(first, stream));
  SOMA_ASSERT_OK(somaFreeAsync(second, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(result, source);
}

TEST_F(S13_Memcpy, DefaultKindInfersDirectionFromPointers) {
  unique_stream stream;
  constexpr std::size_t bytes = 3 * KiB + 7;
  std::vector<unsigned char> source(bytes);
  for (std::size_t i = 0; i < bytes; ++i) source[i] = static_cast<unsigned char>(i * 7 + 3);
  std::vector<unsigned char> result(bytes, 0);
  void* device_copy = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&device_copy, bytes, stream));
  SOMA_ASSERT_OK(somaMemcpyAsync(device_copy, source.data(), bytes, somaMemcpyDefault, stream));
  SOMA_ASSERT_OK(somaMemcpyAsync(result.data(), device_copy, bytes, somaMemcpyDefault, stream));
  SOMA_ASSERT_OK(somaFreeAsync(device_copy, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(result, source);
}

TEST_F(S13_Memcpy, OtherStreamReadsAfterEventDependency) {
  unique_stream producer;
  unique_stream consumer;
  unique_event ready;
  constexpr std::size_t bytes = 256 * KiB;
  std::vector<unsigned char> result(bytes, 0);
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, bytes, producer));
  SOMA_ASSERT_OK(somaMemsetAsync(pointer, 0x5C, bytes, producer));
  SOMA_ASSERT_OK(somaEventRecord(ready, producer));
  SOMA_ASSERT_OK(somaStreamWaitEvent(consumer, ready, 0));
  SOMA_ASSERT_OK(somaMemcpyAsync(result.data(), pointer, bytes, somaMemcpyDeviceToHost, consumer));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, consumer));  // ordered after both streams' use (S2)
  SOMA_ASSERT_OK(somaStreamSynchronize(consumer));
  EXPECT_EQ(result, std::vector<unsigned char>(bytes, 0x5C));
}

TEST_F(S13_Memcpy, CopyBetweenPoolsOfOneDevice) {
  unique_stream stream;
  unique_pool explicit_pool(0);
  constexpr std::size_t bytes = 100 * KiB;
  void* from_default = nullptr;
  void* from_explicit = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&from_default, bytes, stream));
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&from_explicit, bytes, explicit_pool, stream));
  SOMA_ASSERT_OK(somaMemsetAsync(from_default, 0x42, bytes, stream));
  SOMA_ASSERT_OK(somaMemcpyAsync(from_explicit, from_default, bytes, somaMemcpyDefault, stream));
  const host_buffer copied = read_back(from_explicit, bytes, stream);
  ASSERT_EQ(copied.size(), bytes);
  EXPECT_EQ(copied.count_not(0x42), 0u);
  SOMA_ASSERT_OK(somaFreeAsync(from_default, stream));
  SOMA_ASSERT_OK(somaFreeAsync(from_explicit, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

}  // namespace
