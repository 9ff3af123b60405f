// somaMallocHost / somaFreeHost and stream value operations (somaStreamWaitValue32,
// somaStreamWriteValue32): the means by which tests and applications observe and hold streams
// without host tasks, on every backend (S12 ordering, S13 copies with host memory, S14).
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <thread>

#include "soma_test_util.hpp"

namespace {

using namespace soma_test;

class S13_HostMemory : public capi_test {};
class S12_StreamValues : public capi_test {};

TEST_F(S13_HostMemory, AllocationIsWritableAndFreed) {
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocHost(&pointer, 3 * 4096 + 1));
  ASSERT_NE(pointer, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(pointer) % 4096, 0u) << "page aligned";
  static_cast<unsigned char*>(pointer)[3 * 4096] = 7;  // the last byte is the host's
  SOMA_EXPECT_OK(somaFreeHost(pointer));
}

TEST_F(S13_HostMemory, ZeroBytesGivesNullAndNullFreesNothing) {
  void* pointer = &pointer;
  SOMA_ASSERT_OK(somaMallocHost(&pointer, 0));
  EXPECT_EQ(pointer, nullptr);
  SOMA_EXPECT_OK(somaFreeHost(nullptr));
}

TEST_F(S13_HostMemory, NullOutputIsInvalidValue) {
  EXPECT_EQ(somaMallocHost(nullptr, 64), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "ptr")) << last_message();
}

TEST_F(S13_HostMemory, FreeOfForeignInteriorOrFreedPointerIsRejected) {
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocHost(&pointer, 8192));
  int local = 0;
  EXPECT_EQ(somaFreeHost(&local), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "not host memory from somaMallocHost")) << last_message();
  EXPECT_EQ(somaFreeHost(static_cast<char*>(pointer) + 100), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "100 bytes into")) << last_message();
  SOMA_ASSERT_OK(somaFreeHost(pointer));
  EXPECT_EQ(somaFreeHost(pointer), somaErrorInvalidValue) << "double free";
  EXPECT_TRUE(contains(last_message(), "already freed")) << last_message();
}

TEST_F(S13_HostMemory, PoolMemoryRoundTripsThroughHostMemory) {
  unique_stream stream;
  constexpr std::size_t bytes = 256 * KiB;
  host_buffer source(bytes);
  host_buffer back(bytes);
  for (std::size_t i = 0; i < bytes; ++i) source.data()[i] = static_cast<unsigned char>(i * 7);
  void* device = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&device, bytes, stream));
  SOMA_ASSERT_OK(somaMemcpyAsync(device, source.data(), bytes, somaMemcpyHostToDevice, stream));
  SOMA_ASSERT_OK(somaMemcpyAsync(back.data(), device, bytes, somaMemcpyDeviceToHost, stream));
  SOMA_ASSERT_OK(somaFreeAsync(device, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  for (std::size_t i = 0; i < bytes; ++i)
    ASSERT_EQ(back[i], static_cast<unsigned char>(i * 7)) << "byte " << i;
}

TEST_F(S13_HostMemory, PointerAttributesSayHost) {
  host_buffer buffer(8192);
  somaPointerAttributes attributes{};
  SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, buffer.data() + 10));
  EXPECT_EQ(attributes.type, somaMemoryTypeHost);
  EXPECT_EQ(attributes.hostPointer, buffer.data() + 10);
  EXPECT_EQ(attributes.base, buffer.data());
  EXPECT_EQ(attributes.size, 8192u);
  EXPECT_EQ(attributes.pool, nullptr);
  EXPECT_EQ(attributes.isLiveAllocation, 0);
}

TEST_F(S12_StreamValues, WriteIsOrderedAfterEarlierWorkAndWaitHoldsLaterWork) {
  unique_stream held;
  unique_stream writer;
  stream_flag opened;
  stream_flag behind;
  // `held` waits for a word that `writer` sets: the value ops order two streams.
  SOMA_ASSERT_OK(somaStreamWaitValue32(held, opened.word(), 1, somaStreamWaitValueGeq));
  SOMA_ASSERT_OK(behind.set_on(held));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(behind.is_set());
  EXPECT_EQ(somaStreamQuery(held), somaErrorNotReady);
  SOMA_ASSERT_OK(opened.set_on(writer));
  EXPECT_TRUE(behind.wait());
  SOMA_EXPECT_OK(somaStreamSynchronize(held));
}

TEST_F(S12_StreamValues, ConditionsFollowTheDriversRules) {
  unique_stream stream;
  std::uint32_t* word = new_host_word();
  struct probe {
    std::uint32_t word_value;
    std::uint32_t value;
    unsigned flags;
  };
  // Each wait is satisfied already, so the stream drains; a wrong rule would hang it (and the
  // synchronize below would time the test out).
  const probe satisfied[] = {
      {5, 5, somaStreamWaitValueGeq},
      {6, 5, somaStreamWaitValueGeq},
      {2, 0xfffffff0u, somaStreamWaitValueGeq},  // wrapped counter: 2 is "after" -16
      {9, 9, somaStreamWaitValueEq},
      {0b0110, 0b0100, somaStreamWaitValueAnd},
      {0b0101, 0b1010, somaStreamWaitValueNor},
  };
  for (const probe& p : satisfied) {
    store_word(word, p.word_value);
    SOMA_ASSERT_OK(somaStreamWaitValue32(stream, word, p.value, p.flags));
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  }
  // Not satisfied: held until the host changes the word.
  store_word(word, 3);
  SOMA_ASSERT_OK(somaStreamWaitValue32(stream, word, 4, somaStreamWaitValueEq));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(somaStreamQuery(stream), somaErrorNotReady);
  store_word(word, 4);
  SOMA_EXPECT_OK(somaStreamSynchronize(stream));
}

TEST_F(S12_StreamValues, WordInsideALiveAllocationIsAccepted) {
  unique_stream stream;
  void* device = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&device, 4096, stream));
  auto* word = static_cast<std::uint32_t*>(device) + 3;
  SOMA_ASSERT_OK(somaStreamWriteValue32(stream, word, 42, 0));
  SOMA_ASSERT_OK(somaStreamWaitValue32(stream, word, 42, somaStreamWaitValueEq));
  host_buffer back(sizeof(std::uint32_t));
  SOMA_ASSERT_OK(
      somaMemcpyAsync(back.data(), word, sizeof(std::uint32_t), somaMemcpyDeviceToHost, stream));
  SOMA_ASSERT_OK(somaFreeAsync(device, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(load_word(reinterpret_cast<std::uint32_t*>(back.data())), 42u);
}

TEST_F(S12_StreamValues, BadAddressesAndFlagsAreRejectedAndEnqueueNothing) {
  unique_stream stream;
  std::uint32_t* word = new_host_word();
  std::uint32_t stack_word = 0;
  EXPECT_EQ(somaStreamWaitValue32(stream, nullptr, 1, 0), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "NULL")) << last_message();
  auto* misaligned = reinterpret_cast<std::uint32_t*>(reinterpret_cast<char*>(word) + 1);
  EXPECT_EQ(somaStreamWriteValue32(stream, misaligned, 1, 0), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "not 4-byte aligned")) << last_message();
  EXPECT_EQ(somaStreamWaitValue32(stream, &stack_word, 1, 0), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "neither host memory from somaMallocHost"))
      << last_message();
  EXPECT_EQ(somaStreamWaitValue32(stream, word, 1, 4), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "flags 4")) << last_message();
  EXPECT_EQ(somaStreamWriteValue32(stream, word, 1, 1), somaErrorInvalidValue);
  // A freed allocation's word is refused too (it is no longer a live allocation).
  void* device = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&device, 4096, stream));
  SOMA_ASSERT_OK(somaFreeAsync(device, stream));
  EXPECT_EQ(somaStreamWriteValue32(stream, static_cast<std::uint32_t*>(device), 1, 0),
            somaErrorInvalidValue);
  EXPECT_EQ(somaStreamQuery(stream), somaSuccess)
      << "nothing waits: the rejected calls enqueued nothing";
}

TEST_F(S12_StreamValues, DestroyedStreamIsInvalidResourceHandle) {
  somaStream_t stream = nullptr;
  SOMA_ASSERT_OK(somaStreamCreate(&stream));
  SOMA_ASSERT_OK(somaStreamDestroy(stream));
  EXPECT_EQ(somaStreamWriteValue32(stream, new_host_word(), 1, 0), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaStreamWaitValue32(stream, new_host_word(), 1, 0), somaErrorInvalidResourceHandle);
}

}  // namespace
