// Handles that are forged, destroyed or of the wrong kind (api-behaviour.md "Handles"; S4, S5):
// every such call returns an error and leaves every live object, the default stream included,
// as it was. A NULL pool is somaErrorInvalidValue, as CUDA returns.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "soma_test_util.hpp"

namespace {

using namespace soma_test;

class S5_Handles : public capi_test {};

template <typename Handle>
Handle forged(std::uintptr_t value) {
  return reinterpret_cast<Handle>(value);  // NOLINT(performance-no-int-to-ptr)
}

// Small integers, values shaped like (slot, generation) pairs, and all-ones patterns.
std::vector<std::uintptr_t> forged_values() {
  std::vector<std::uintptr_t> values;
  for (std::uintptr_t v = 1; v <= 64; ++v) values.push_back(v);
  for (std::uintptr_t generation = 1; generation <= 4; ++generation) {
    for (std::uintptr_t slot = 0; slot <= 8; ++slot) values.push_back((generation << 32) | slot);
  }
  values.push_back(~std::uintptr_t{0});
  values.push_back(0x7fffffffffffULL);
  return values;
}

TEST_F(S5_Handles, ForgedStreamHandlesAreRefusedAndTheDefaultStreamSurvives) {
  for (std::uintptr_t value : forged_values()) {
    EXPECT_EQ(somaStreamDestroy(forged<somaStream_t>(value)), somaErrorInvalidResourceHandle)
        << "somaStreamDestroy(" << value << ")";
    EXPECT_EQ(somaStreamSynchronize(forged<somaStream_t>(value)), somaErrorInvalidResourceHandle)
        << "somaStreamSynchronize(" << value << ")";
  }
  // The NULL stream still works: allocate, use and free on it.
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 4096, nullptr));
  SOMA_ASSERT_OK(somaMemsetAsync(pointer, 7, 4096, nullptr));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, nullptr));
  SOMA_ASSERT_OK(somaStreamSynchronize(nullptr));
  expect_pool_usable(current_pool(0), nullptr);
}

TEST_F(S5_Handles, ForgedEventHandlesAreRefusedAndLiveEventsSurvive) {
  unique_stream stream;
  unique_event event;
  SOMA_ASSERT_OK(somaEventRecord(event, stream));
  for (std::uintptr_t value : forged_values()) {
    EXPECT_EQ(somaEventDestroy(forged<somaEvent_t>(value)), somaErrorInvalidResourceHandle)
        << "somaEventDestroy(" << value << ")";
    EXPECT_EQ(somaEventQuery(forged<somaEvent_t>(value)), somaErrorInvalidResourceHandle);
  }
  SOMA_EXPECT_OK(somaEventSynchronize(event));
  SOMA_EXPECT_OK(somaStreamWaitEvent(stream, event, 0));
  SOMA_EXPECT_OK(somaEventDestroy(event.release()));
}

TEST_F(S5_Handles, ForgedPoolHandlesAreRefusedAndPoolsSurvive) {
  unique_pool pool(0);
  for (std::uintptr_t value : forged_values()) {
    EXPECT_EQ(somaMemPoolDestroy(forged<somaMemPool_t>(value)), somaErrorInvalidResourceHandle)
        << "somaMemPoolDestroy(" << value << ")";
    void* pointer = nullptr;
    EXPECT_EQ(somaMallocFromPoolAsync(&pointer, 4096, forged<somaMemPool_t>(value), nullptr),
              somaErrorInvalidResourceHandle);
    EXPECT_EQ(pointer, nullptr);
  }
  expect_pool_usable(pool, nullptr);
  expect_pool_usable(default_pool(0), nullptr);
}

TEST_F(S5_Handles, AHandleOfOneKindIsNotAHandleOfAnother) {
  unique_stream stream;
  unique_event event;
  unique_pool pool(0);
  const auto stream_value = reinterpret_cast<std::uintptr_t>(stream.get());
  const auto event_value = reinterpret_cast<std::uintptr_t>(event.get());
  const auto pool_value = reinterpret_cast<std::uintptr_t>(pool.get());

  EXPECT_EQ(somaStreamDestroy(forged<somaStream_t>(pool_value)), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaStreamDestroy(forged<somaStream_t>(event_value)), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaEventDestroy(forged<somaEvent_t>(stream_value)), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaEventDestroy(forged<somaEvent_t>(pool_value)), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaMemPoolDestroy(forged<somaMemPool_t>(stream_value)),
            somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaMemPoolDestroy(forged<somaMemPool_t>(event_value)), somaErrorInvalidResourceHandle);
  void* pointer = nullptr;
  EXPECT_EQ(somaMallocFromPoolAsync(&pointer, 256, forged<somaMemPool_t>(stream_value), stream),
            somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaMallocAsync(&pointer, 256, forged<somaStream_t>(pool_value)),
            somaErrorInvalidResourceHandle);

  // All three are still alive and work.
  SOMA_EXPECT_OK(somaEventRecord(event, stream));
  SOMA_EXPECT_OK(somaEventSynchronize(event));
  expect_pool_usable(pool, stream);
  SOMA_EXPECT_OK(somaStreamDestroy(stream.release()));
  SOMA_EXPECT_OK(somaEventDestroy(event.release()));
  SOMA_EXPECT_OK(somaMemPoolDestroy(pool.release()));
}

TEST_F(S5_Handles, NoLiveHandleIsASmallInteger) {
  std::vector<somaStream_t> streams(8);
  std::vector<somaEvent_t> events(8);
  std::vector<somaMemPool_t> pools(4);
  for (auto& s : streams) SOMA_ASSERT_OK(somaStreamCreate(&s));
  for (auto& e : events) SOMA_ASSERT_OK(somaEventCreate(&e));
  const somaMemPoolProps props = pool_props(0);
  for (auto& p : pools) SOMA_ASSERT_OK(somaMemPoolCreate(&p, &props));
  for (auto s : streams) EXPECT_GT(reinterpret_cast<std::uintptr_t>(s), std::uintptr_t{1} << 48);
  for (auto e : events) EXPECT_GT(reinterpret_cast<std::uintptr_t>(e), std::uintptr_t{1} << 48);
  for (auto p : pools) EXPECT_GT(reinterpret_cast<std::uintptr_t>(p), std::uintptr_t{1} << 48);
  EXPECT_GT(reinterpret_cast<std::uintptr_t>(default_pool(0)), std::uintptr_t{1} << 48);
  for (auto s : streams) SOMA_EXPECT_OK(somaStreamDestroy(s));
  for (auto e : events) SOMA_EXPECT_OK(somaEventDestroy(e));
  for (auto p : pools) SOMA_EXPECT_OK(somaMemPoolDestroy(p));
}

TEST_F(S5_Handles, ADestroyedHandleStaysInvalidWhenItsSlotIsReused) {
  somaStream_t first = nullptr;
  SOMA_ASSERT_OK(somaStreamCreate(&first));
  SOMA_ASSERT_OK(somaStreamDestroy(first));
  unique_stream second;  // may take the same slot
  EXPECT_EQ(somaStreamDestroy(first), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaStreamSynchronize(first), somaErrorInvalidResourceHandle);
  SOMA_EXPECT_OK(somaStreamSynchronize(second));
}

// A thread remembers its last lookup of a handle (handle_table::find): the memory must not
// outlive the handle, whether the stream was destroyed on this thread or on another one.
TEST_F(S5_Handles, AStreamUsedAMomentAgoIsRefusedOnceDestroyed) {
  somaStream_t stream = nullptr;
  SOMA_ASSERT_OK(somaStreamCreate(&stream));
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 4096, stream));  // this thread looked it up
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamDestroy(stream));
  EXPECT_EQ(somaMallocAsync(&pointer, 4096, stream), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaFreeAsync(pointer, stream), somaErrorInvalidResourceHandle);

  SOMA_ASSERT_OK(somaStreamCreate(&stream));
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 4096, stream));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  std::thread([&] { SOMA_EXPECT_OK(somaStreamDestroy(stream)); }).join();
  unique_stream reusing;  // may take the destroyed stream's slot
  EXPECT_EQ(somaMallocAsync(&pointer, 4096, stream), somaErrorInvalidResourceHandle);
  SOMA_EXPECT_OK(somaStreamSynchronize(reusing));
}

// A thread remembers its last two lookups (a ping-pong names two streams in turn): the older
// one must not outlive its handle either.
TEST_F(S5_Handles, TheStreamUsedBeforeTheLastIsRefusedOnceDestroyed) {
  somaStream_t older = nullptr;
  SOMA_ASSERT_OK(somaStreamCreate(&older));
  unique_stream newer;
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 4096, older));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, newer));  // the lookup of older is now the second
  SOMA_ASSERT_OK(somaStreamDestroy(older));
  EXPECT_EQ(somaMallocAsync(&pointer, 4096, older), somaErrorInvalidResourceHandle);
  unique_stream reusing;  // may take the destroyed stream's slot
  EXPECT_EQ(somaStreamSynchronize(older), somaErrorInvalidResourceHandle);
  SOMA_EXPECT_OK(somaStreamSynchronize(reusing));
  SOMA_EXPECT_OK(somaStreamSynchronize(newer));
}

// CUDA returns cudaErrorInvalidValue for a NULL pool; so does soma, and the message says so.
TEST_F(S5_Handles, ANullPoolIsInvalidValueInEveryPoolCall) {
  void* pointer = nullptr;
  EXPECT_EQ(somaMemPoolDestroy(nullptr), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "NULL")) << last_message();
  EXPECT_EQ(somaMallocFromPoolAsync(&pointer, 256, nullptr, nullptr), somaErrorInvalidValue);
  std::uint64_t value = 0;
  EXPECT_EQ(somaMemPoolSetAttribute(nullptr, somaMemPoolAttrReleaseThreshold, &value),
            somaErrorInvalidValue);
  EXPECT_EQ(somaMemPoolGetAttribute(nullptr, somaMemPoolAttrReleaseThreshold, &value),
            somaErrorInvalidValue);
  EXPECT_EQ(somaMemPoolTrimTo(nullptr, 0), somaErrorInvalidValue);
  EXPECT_EQ(somaDeviceSetMemPool(0, nullptr), somaErrorInvalidValue);
  EXPECT_EQ(somaMemPoolSetName(nullptr, "x"), somaErrorInvalidValue);
  somaMemAccessDesc desc{};
  desc.location.type = somaMemLocationTypeDevice;
  desc.location.id = 0;
  desc.flags = somaMemAccessFlagsProtReadWrite;
  EXPECT_EQ(somaMemPoolSetAccess(nullptr, &desc, 1), somaErrorInvalidValue);
  somaMemAccessFlags flags{};
  somaMemLocation location{};
  location.type = somaMemLocationTypeDevice;
  EXPECT_EQ(somaMemPoolGetAccess(&flags, nullptr, &location), somaErrorInvalidValue);
  expect_pool_usable(default_pool(0), nullptr);
}

}  // namespace
