// Bad input to the C API (api-behaviour.md; design.md §2 "Errors"): every case is an error
// code, never a crash, and never a corrupted pool. After each rejected call the test checks
// that the pool's statistics did not change and that the pool still allocates and frees.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "c_caller.h"
#include "host_task.hpp"
#include "soma_test_util.hpp"

namespace {

using namespace soma_test;

class S1_BadInput : public capi_test {};
class S2_BadInput : public capi_test {};
class S1_BadHandles : public capi_test {};
class S5_BadHandles : public capi_test {};
class S9_S10_BadAttributes : public capi_test {};
class S8_BadInput : public capi_test {};

const auto kForgedStream = reinterpret_cast<somaStream_t>(std::uintptr_t{0x12345});
const auto kForgedEvent = reinterpret_cast<somaEvent_t>(std::uintptr_t{0x12345});
const auto kForgedPool = reinterpret_cast<somaMemPool_t>(std::uintptr_t{0x12345});

void noop_host_function(void*) {}
somaError_t ok_status_function(void*) { return somaSuccess; }

// ---- allocation (S1) -------------------------------------------------------------------------

TEST_F(S1_BadInput, NullResultPointerIsInvalidValue) {
  unique_stream stream;
  const somaMemPool_t pool = default_pool(0);
  const pool_stats before = read_pool_stats(pool);
  EXPECT_EQ(somaMallocAsync(nullptr, 1024, stream), somaErrorInvalidValue);
  EXPECT_FALSE(last_message().empty());
  EXPECT_EQ(somaMallocFromPoolAsync(nullptr, 1024, pool, stream), somaErrorInvalidValue);
  expect_unchanged_and_usable(pool, before, stream);
}

TEST_F(S1_BadInput, SizeBeyondDeviceMemoryIsMemoryAllocationWithTheNumbers) {
  unique_stream stream;
  const somaMemPool_t pool = default_pool(0);
  // The exact total (somaMemGetInfo): the MiB attribute rounds a GPU's figure down.
  const std::size_t total = device_memory_info(0).total_bytes;
  const std::size_t request = total + 64 * MiB;
  const pool_stats before = read_pool_stats(pool);
  void* pointer = nullptr;
  EXPECT_EQ(somaMallocAsync(&pointer, request, stream), somaErrorMemoryAllocation);
  const std::string message = last_message();
  EXPECT_TRUE(contains_icase(message, "out of memory")) << message;
  EXPECT_TRUE(mentions_size(message, request)) << "request missing: " << message;
  EXPECT_TRUE(mentions_size(message, total)) << "device limit missing: " << message;
  expect_unchanged_and_usable(pool, before, stream);
}

TEST_F(S1_BadInput, SizeBeyondPoolMaxSizeIsMemoryAllocationWithTheNumbers) {
  unique_stream stream;
  constexpr std::size_t cap = 12 * MiB;
  unique_pool pool(0, cap);
  void* live = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&live, 1 * MiB, pool, stream));
  const pool_stats before = read_pool_stats(pool);
  void* pointer = nullptr;
  EXPECT_EQ(somaMallocFromPoolAsync(&pointer, 13 * MiB, pool, stream), somaErrorMemoryAllocation);
  const std::string message = last_message();
  EXPECT_TRUE(contains_icase(message, "out of memory")) << message;
  EXPECT_TRUE(mentions_size(message, 13 * MiB)) << "request missing: " << message;
  EXPECT_TRUE(mentions_size(message, cap)) << "max size missing: " << message;
  EXPECT_NE(somaMallocFromPoolAsync(&pointer, 13 * MiB, pool, stream),
            somaErrorAddressSpaceExhausted);
  expect_unchanged_and_usable(pool, before, stream);
  SOMA_ASSERT_OK(somaFreeAsync(live, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S1_BadInput, HugeSizesFailCleanly) {
  unique_stream stream;
  const somaMemPool_t pool = default_pool(0);
  const pool_stats before = read_pool_stats(pool);
  for (std::size_t size : {SIZE_MAX, SIZE_MAX - 255, SIZE_MAX / 2 + 1, std::size_t{1} << 50}) {
    void* pointer = nullptr;
    EXPECT_EQ(somaMallocAsync(&pointer, size, stream), somaErrorMemoryAllocation)
        << "size " << size;
  }
  expect_unchanged_and_usable(pool, before, stream);
}

// ---- free (S2) --------------------------------------------------------------------------------

TEST_F(S2_BadInput, FreeNullIsANoOp) {
  unique_stream stream;
  const somaMemPool_t pool = default_pool(0);
  const pool_stats before = read_pool_stats(pool);
  SOMA_EXPECT_OK(somaFreeAsync(nullptr, stream));
  SOMA_EXPECT_OK(somaFreeAsync(nullptr, nullptr));
  expect_unchanged_and_usable(pool, before, stream);
}

TEST_F(S2_BadInput, FreeOfUnknownPointerIsInvalidValue) {
  unique_stream stream;
  const somaMemPool_t pool = default_pool(0);
  void* live = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&live, 4096, stream));
  const pool_stats before = read_pool_stats(pool);
  int on_stack = 0;
  auto on_heap = std::make_unique<char[]>(256);
  for (void* unknown : {static_cast<void*>(&on_stack), static_cast<void*>(on_heap.get()),
                        reinterpret_cast<void*>(std::uintptr_t{0x12345})}) {
    EXPECT_EQ(somaFreeAsync(unknown, stream), somaErrorInvalidValue) << unknown;
    EXPECT_TRUE(contains_icase(last_message(), "not a live allocation")) << last_message();
  }
  expect_unchanged_and_usable(pool, before, stream);
  SOMA_ASSERT_OK(somaFreeAsync(live, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S2_BadInput, FreeOfInteriorPointerIsInvalidValueAndKeepsTheAllocation) {
  unique_stream stream;
  const somaMemPool_t pool = default_pool(0);
  constexpr std::size_t size = 64 * KiB;
  constexpr std::size_t offset = 4112;  // 0x1010
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, size, stream));
  const pool_stats before = read_pool_stats(pool);
  EXPECT_EQ(somaFreeAsync(static_cast<char*>(pointer) + offset, stream), somaErrorInvalidValue);
  const std::string message = last_message();
  EXPECT_TRUE(contains(message, "4112") || contains_icase(message, "0x1010"))
      << "offset missing: " << message;
  EXPECT_EQ(read_pool_stats(pool), before);
  somaPointerAttributes attributes{};
  SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, pointer));
  EXPECT_EQ(attributes.isLiveAllocation, 1) << "the allocation must survive a wrong free";
  expect_pool_usable(pool, stream);
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S2_BadInput, DoubleFreeIsInvalidValue) {
  unique_stream stream;
  const somaMemPool_t pool = default_pool(0);
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 8192, stream));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  const pool_stats before = read_pool_stats(pool);
  EXPECT_EQ(somaFreeAsync(pointer, stream), somaErrorInvalidValue);
  EXPECT_TRUE(contains_icase(last_message(), "already freed")) << last_message();
  EXPECT_EQ(read_pool_stats(pool), before);
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  // Once the free completed and memory went back, it is still refused.
  EXPECT_EQ(somaFreeAsync(pointer, stream), somaErrorInvalidValue);
  expect_unchanged_and_usable(pool, read_pool_stats(pool), stream);
}

TEST_F(S2_BadInput, DoubleFreeOnAnotherStreamIsInvalidValue) {
  unique_stream first;
  unique_stream second;
  const somaMemPool_t pool = default_pool(0);
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 8192, first));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, first));
  const pool_stats before = read_pool_stats(pool);
  EXPECT_EQ(somaFreeAsync(pointer, second), somaErrorInvalidValue);
  expect_unchanged_and_usable(pool, before, first);
  SOMA_ASSERT_OK(somaStreamSynchronize(first));
}

TEST_F(S2_BadInput, TwoThreadsFreeingOnePointerAtOnceFreeItOnce) {
  // The free finds the block without a lock (the pointer table's readers take none) and claims
  // it: of two racing frees exactly one succeeds, the other is a double free.
  unique_stream first;
  unique_stream second;
  const somaMemPool_t pool = default_pool(0);
  for (int round = 0; round < 200; ++round) {
    void* pointer = nullptr;
    SOMA_ASSERT_OK(somaMallocAsync(&pointer, 4096, first));
    std::atomic<bool> go{false};
    somaError_t results[2] = {somaSuccess, somaSuccess};
    auto free_on = [&](somaStream_t stream, somaError_t* result) {
      while (!go.load()) {
      }
      *result = somaFreeAsync(pointer, stream);
    };
    std::thread a(free_on, static_cast<somaStream_t>(first), &results[0]);
    std::thread b(free_on, static_cast<somaStream_t>(second), &results[1]);
    go.store(true);
    a.join();
    b.join();
    ASSERT_EQ((results[0] == somaSuccess) + (results[1] == somaSuccess), 1) << "round " << round;
    ASSERT_EQ((results[0] == somaErrorInvalidValue) + (results[1] == somaErrorInvalidValue), 1);
    ASSERT_EQ(read_pool_stats(pool).used_current, 0u) << "round " << round;
  }
  SOMA_ASSERT_OK(somaStreamSynchronize(first));
  SOMA_ASSERT_OK(somaStreamSynchronize(second));
  expect_unchanged_and_usable(pool, read_pool_stats(pool), first);
}

TEST_F(S2_BadInput, FreeOnInvalidStreamKeepsTheAllocation) {
  unique_stream stream;
  const somaMemPool_t pool = default_pool(0);
  somaStream_t destroyed = nullptr;
  SOMA_ASSERT_OK(somaStreamCreate(&destroyed));
  SOMA_ASSERT_OK(somaStreamDestroy(destroyed));
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 4096, stream));
  const pool_stats before = read_pool_stats(pool);
  EXPECT_EQ(somaFreeAsync(pointer, destroyed), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaFreeAsync(pointer, kForgedStream), somaErrorInvalidResourceHandle);
  EXPECT_EQ(read_pool_stats(pool), before);
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream)) << "the allocation is still live";
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

// ---- stream and event handles ---------------------------------------------------------------

/// Every call that takes a stream, with `bad` as the stream: each must return
/// InvalidResourceHandle.
void expect_stream_rejected(somaStream_t bad, void* live, somaEvent_t event, somaMemPool_t pool) {
  void* pointer = nullptr;
  int device = -1;
  char host[16] = {};
  EXPECT_EQ(somaStreamSynchronize(bad), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaStreamQuery(bad), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaStreamWaitEvent(bad, event, 0), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaStreamGetDevice(bad, &device), somaErrorInvalidResourceHandle);
  void* native = nullptr;
  EXPECT_EQ(somaStreamGetNative(bad, &native), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaEventRecord(event, bad), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaLaunchHostFunc(bad, noop_host_function, nullptr), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaLaunchHostFuncWithStatus(bad, ok_status_function, nullptr),
            somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaMemsetAsync(live, 0, 16, bad), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaMemcpyAsync(host, live, 16, somaMemcpyDeviceToHost, bad),
            somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaMallocAsync(&pointer, 1024, bad), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaMallocFromPoolAsync(&pointer, 1024, pool, bad), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaStreamDestroy(bad), somaErrorInvalidResourceHandle);
}

TEST_F(S1_BadHandles, DestroyedStream) {
  unique_stream good;
  unique_event event;
  const somaMemPool_t pool = default_pool(0);
  void* live = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&live, 4096, good));
  SOMA_ASSERT_OK(somaStreamSynchronize(good));
  somaStream_t destroyed = nullptr;
  SOMA_ASSERT_OK(somaStreamCreate(&destroyed));
  SOMA_ASSERT_OK(somaStreamDestroy(destroyed));
  const pool_stats before = read_pool_stats(pool);
  expect_stream_rejected(destroyed, live, event, pool);
  expect_unchanged_and_usable(pool, before, good);
  SOMA_ASSERT_OK(somaFreeAsync(live, good));
  SOMA_ASSERT_OK(somaStreamSynchronize(good));
}

TEST_F(S1_BadHandles, NeverCreatedStream) {
  unique_stream good;
  unique_event event;
  const somaMemPool_t pool = default_pool(0);
  void* live = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&live, 4096, good));
  SOMA_ASSERT_OK(somaStreamSynchronize(good));
  const pool_stats before = read_pool_stats(pool);
  expect_stream_rejected(kForgedStream, live, event, pool);
  expect_unchanged_and_usable(pool, before, good);
  SOMA_ASSERT_OK(somaFreeAsync(live, good));
  SOMA_ASSERT_OK(somaStreamSynchronize(good));
}

void expect_event_rejected(somaEvent_t bad, somaStream_t stream) {
  EXPECT_EQ(somaEventRecord(bad, stream), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaEventQuery(bad), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaEventSynchronize(bad), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaStreamWaitEvent(stream, bad, 0), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaEventDestroy(bad), somaErrorInvalidResourceHandle);
}

TEST_F(S1_BadHandles, DestroyedEvent) {
  unique_stream stream;
  const somaMemPool_t pool = default_pool(0);
  somaEvent_t destroyed = nullptr;
  SOMA_ASSERT_OK(somaEventCreate(&destroyed));
  SOMA_ASSERT_OK(somaEventRecord(destroyed, stream));
  SOMA_ASSERT_OK(somaEventDestroy(destroyed));
  const pool_stats before = read_pool_stats(pool);
  expect_event_rejected(destroyed, stream);
  SOMA_EXPECT_OK(somaStreamSynchronize(stream)) << "the stream is not harmed";
  expect_unchanged_and_usable(pool, before, stream);
}

TEST_F(S1_BadHandles, NeverCreatedEvent) {
  unique_stream stream;
  const somaMemPool_t pool = default_pool(0);
  const pool_stats before = read_pool_stats(pool);
  expect_event_rejected(kForgedEvent, stream);
  SOMA_EXPECT_OK(somaStreamSynchronize(stream));
  expect_unchanged_and_usable(pool, before, stream);
}

// ---- pool handles (S5) ------------------------------------------------------------------------

void expect_pool_rejected(somaMemPool_t bad, somaStream_t stream) {
  void* pointer = nullptr;
  std::uint64_t value = 0;
  EXPECT_EQ(somaMallocFromPoolAsync(&pointer, 1024, bad, stream), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaMemPoolGetAttribute(bad, somaMemPoolAttrUsedMemCurrent, &value),
            somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaMemPoolSetAttribute(bad, somaMemPoolAttrReleaseThreshold, &value),
            somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaMemPoolTrimTo(bad, 0), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaMemPoolSetName(bad, "ghost"), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaDeviceSetMemPool(0, bad), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaMemPoolDestroy(bad), somaErrorInvalidResourceHandle);
  EXPECT_EQ(current_pool(0), default_pool(0));
}

TEST_F(S5_BadHandles, DestroyedPool) {
  unique_stream stream;
  const somaMemPool_t pool = default_pool(0);
  somaMemPool_t destroyed = nullptr;
  const somaMemPoolProps props = pool_props(0);
  SOMA_ASSERT_OK(somaMemPoolCreate(&destroyed, &props));
  SOMA_ASSERT_OK(somaMemPoolDestroy(destroyed));
  const pool_stats before = read_pool_stats(pool);
  expect_pool_rejected(destroyed, stream);
  expect_unchanged_and_usable(pool, before, stream);
}

TEST_F(S5_BadHandles, DestroyedPoolWithLiveAllocation) {
  unique_stream stream;
  somaMemPool_t destroyed = nullptr;
  const somaMemPoolProps props = pool_props(0);
  SOMA_ASSERT_OK(somaMemPoolCreate(&destroyed, &props));
  void* live = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&live, 4096, destroyed, stream));
  SOMA_ASSERT_OK(somaMemPoolDestroy(destroyed));
  expect_pool_rejected(destroyed, stream);
  SOMA_ASSERT_OK(somaFreeAsync(live, stream)) << "frees of live allocations still succeed";
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  expect_pool_usable(default_pool(0), stream);
}

TEST_F(S5_BadHandles, NeverCreatedPool) {
  unique_stream stream;
  const somaMemPool_t pool = default_pool(0);
  const pool_stats before = read_pool_stats(pool);
  expect_pool_rejected(kForgedPool, stream);
  expect_unchanged_and_usable(pool, before, stream);
}

// ---- pool properties (S5) ---------------------------------------------------------------------

struct props_case {
  const char* name;
  std::function<void(somaMemPoolProps&)> mutate;
  somaError_t expected;

  friend void PrintTo(const props_case& value, std::ostream* out) { *out << value.name; }
};

class S5_BadPoolProps : public capi_test, public ::testing::WithParamInterface<props_case> {};

TEST_P(S5_BadPoolProps, IsRejectedWithTheDocumentedCode) {
  unique_stream stream;
  const somaMemPool_t pool = default_pool(0);
  SOMA_ASSERT_OK(somaDeviceSynchronize());
  const pool_stats before = read_pool_stats(pool);
  const std::size_t committed_before = committed_bytes(0);
  somaMemPoolProps props = pool_props(0);
  GetParam().mutate(props);
  somaMemPool_t created = nullptr;
  const somaError_t status = somaMemPoolCreate(&created, &props);
  EXPECT_EQ(status, GetParam().expected);
  EXPECT_FALSE(last_message().empty());
  if (status == somaSuccess) (void)somaMemPoolDestroy(created);
  EXPECT_EQ(committed_bytes(0), committed_before);
  expect_unchanged_and_usable(pool, before, stream);
}

std::vector<props_case> bad_props_cases() {
  using props = somaMemPoolProps;
  return {
      {"AllocTypeInvalid", [](props& p) { p.allocType = somaMemAllocationTypeInvalid; },
       somaErrorInvalidValue},
      {"AllocTypeManaged", [](props& p) { p.allocType = somaMemAllocationTypeManaged; },
       somaErrorNotSupported},
      {"AllocTypeUnknown", [](props& p) { p.allocType = static_cast<somaMemAllocationType>(3); },
       somaErrorInvalidValue},
      // S5: host pools exist; these are the host locations CUDA refuses.
      {"LocationHostNumaCurrent",
       [](props& p) { p.location.type = somaMemLocationTypeHostNumaCurrent; },
       somaErrorInvalidValue},
      {"LocationHostExportable",
       [](props& p) {
         p.location.type = somaMemLocationTypeHost;
         p.handleTypes = somaMemHandleTypePosixFileDescriptor;
       },
       somaErrorInvalidValue},
      {"LocationHostNumaNoSuchNode",
       [](props& p) {
         p.location.type = somaMemLocationTypeHostNuma;
         p.location.id = 1000;
       },
       somaErrorInvalidValue},
      {"LocationInvalid", [](props& p) { p.location.type = somaMemLocationTypeInvalid; },
       somaErrorInvalidValue},
      {"LocationUnknown", [](props& p) { p.location.type = static_cast<somaMemLocationType>(7); },
       somaErrorInvalidValue},
      {"DeviceNegative", [](props& p) { p.location.id = -1; }, somaErrorInvalidValue},
      {"DeviceOutOfRange", [](props& p) { p.location.id = 1000; }, somaErrorInvalidValue},
      {"HandleWin32", [](props& p) { p.handleTypes = somaMemHandleTypeWin32; },
       somaErrorNotSupported},
      {"HandleWin32Kmt", [](props& p) { p.handleTypes = somaMemHandleTypeWin32Kmt; },
       somaErrorNotSupported},
      {"HandleFabric", [](props& p) { p.handleTypes = somaMemHandleTypeFabric; },
       somaErrorNotSupported},
      {"Win32SecurityAttributesSet",
       [](props& p) { p.win32SecurityAttributes = reinterpret_cast<void*>(0x10); },
       somaErrorInvalidValue},
      {"UsageNonZero", [](props& p) { p.usage = 1; }, somaErrorInvalidValue},
      {"UsageHwDecompress", [](props& p) { p.usage = 2; }, somaErrorInvalidValue},
      {"ReservedFirstByte", [](props& p) { p.reserved[0] = 1; }, somaErrorInvalidValue},
      {"ReservedLastByte", [](props& p) { p.reserved[53] = 0x80; }, somaErrorInvalidValue},
  };
}

INSTANTIATE_TEST_SUITE_P(Props, S5_BadPoolProps, ::testing::ValuesIn(bad_props_cases()),
                         [](const ::testing::TestParamInfo<props_case>& info) {
                           return std::string(info.param.name);
                         });

TEST_F(S5_BadHandles, DeviceCountIsOutOfRangeAsLocation) {
  somaMemPoolProps props = pool_props(device_count());
  somaMemPool_t pool = nullptr;
  EXPECT_EQ(somaMemPoolCreate(&pool, &props), somaErrorInvalidValue);
}

TEST_F(S5_BadHandles, NullPropsOrResultIsInvalidValue) {
  const somaMemPoolProps props = pool_props(0);
  somaMemPool_t pool = nullptr;
  EXPECT_EQ(somaMemPoolCreate(&pool, nullptr), somaErrorInvalidValue);
  EXPECT_EQ(somaMemPoolCreate(nullptr, &props), somaErrorInvalidValue);
}

// ---- values only a C caller can pass (c_caller.c) ---------------------------------------------

class S5_BadPoolPropsFromC : public capi_test {};
class S1_BadInputFromC : public capi_test {};

TEST_F(S5_BadPoolPropsFromC, UnknownValuesAndBitsAreInvalidValue) {
  unique_stream stream;
  const somaMemPool_t pool = default_pool(0);
  SOMA_ASSERT_OK(somaDeviceSynchronize());
  const pool_stats before = read_pool_stats(pool);
  const std::size_t committed_before = committed_bytes(0);
  somaMemPool_t created = nullptr;
  SOMA_ASSERT_OK(c_caller_pool_create(&created, 0, somaMemAllocationTypePinned,
                                      somaMemLocationTypeDevice, somaMemHandleTypeNone))
      << "the helper builds valid props";
  SOMA_ASSERT_OK(somaMemPoolDestroy(created));
  const struct {
    const char* name;
    int alloc_type;
    int location_type;
    int handle_types;
  } cases[] = {
      {"allocType 7", 7, somaMemLocationTypeDevice, 0},
      {"allocType -1", -1, somaMemLocationTypeDevice, 0},
      {"location.type 42", somaMemAllocationTypePinned, 42, 0},
      {"location.type -3", somaMemAllocationTypePinned, -3, 0},
      {"handleTypes 16", somaMemAllocationTypePinned, somaMemLocationTypeDevice, 16},
      {"handleTypes 0x100", somaMemAllocationTypePinned, somaMemLocationTypeDevice, 0x100},
      {"handleTypes Posix|32", somaMemAllocationTypePinned, somaMemLocationTypeDevice, 1 | 32},
      {"handleTypes -1", somaMemAllocationTypePinned, somaMemLocationTypeDevice, -1},
  };
  for (const auto& bad : cases) {
    created = nullptr;
    const somaError_t status =
        c_caller_pool_create(&created, 0, bad.alloc_type, bad.location_type, bad.handle_types);
    EXPECT_EQ(status, somaErrorInvalidValue) << bad.name;
    if (status == somaSuccess) (void)somaMemPoolDestroy(created);
  }
  EXPECT_EQ(committed_bytes(0), committed_before);
  expect_unchanged_and_usable(pool, before, stream);
}

TEST_F(S1_BadInputFromC, UnknownAttributesAreInvalidValue) {
  unique_stream stream;
  unique_pool pool(0);
  const pool_stats before = read_pool_stats(pool);
  std::uint64_t value = 0;
  for (int attr : {-1, 16, 99, 1 << 20}) {
    EXPECT_EQ(c_caller_pool_get_attribute(pool, attr, &value), somaErrorInvalidValue) << attr;
    EXPECT_EQ(c_caller_pool_set_attribute(pool, attr, &value), somaErrorInvalidValue) << attr;
  }
  int device_value = 0;
  for (int attr : {-1, 40000, 1 << 20}) {
    EXPECT_EQ(c_caller_device_get_attribute(&device_value, attr, 0), somaErrorInvalidValue) << attr;
  }
  expect_unchanged_and_usable(pool, before, stream);
}

// ---- attributes (S9, S10, S11) ----------------------------------------------------------------

TEST_F(S9_S10_BadAttributes, ReuseFlagsTakeOnlyZeroOrOne) {
  unique_stream stream;
  unique_pool pool(0);
  for (somaMemPoolAttr attr :
       {somaMemPoolReuseFollowEventDependencies, somaMemPoolReuseAllowOpportunistic,
        somaMemPoolReuseAllowInternalDependencies}) {
    for (int bad : {2, -1, 100}) {
      EXPECT_EQ(set_pool_int(pool, attr, bad), somaErrorInvalidValue)
          << "attr " << static_cast<int>(attr) << " value " << bad;
    }
    EXPECT_EQ(pool_int(pool, attr), 1) << "a refused value changes nothing";
    SOMA_EXPECT_OK(set_pool_int(pool, attr, 0));
    EXPECT_EQ(pool_int(pool, attr), 0);
    SOMA_EXPECT_OK(set_pool_int(pool, attr, 1));
  }
  expect_pool_usable(pool, stream);
}

TEST_F(S9_S10_BadAttributes, HighWatermarksAcceptOnlyZero) {
  unique_stream stream;
  unique_pool pool(0);
  void* live = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&live, 1 * MiB, pool, stream));
  const pool_stats before = read_pool_stats(pool);
  EXPECT_EQ(set_pool_u64(pool, somaMemPoolAttrReservedMemHigh, 5), somaErrorInvalidValue);
  EXPECT_EQ(set_pool_u64(pool, somaMemPoolAttrUsedMemHigh, 1), somaErrorInvalidValue);
  EXPECT_EQ(set_pool_u64(pool, somaMemPoolAttrUsedMemHigh, UINT64_MAX), somaErrorInvalidValue);
  EXPECT_EQ(read_pool_stats(pool), before);
  expect_pool_usable(pool, stream);
  SOMA_ASSERT_OK(somaFreeAsync(live, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S9_S10_BadAttributes, CurrentStatisticsCannotBeSet) {
  unique_stream stream;
  unique_pool pool(0);
  const pool_stats before = read_pool_stats(pool);
  EXPECT_EQ(set_pool_u64(pool, somaMemPoolAttrReservedMemCurrent, 0), somaErrorInvalidValue);
  EXPECT_EQ(set_pool_u64(pool, somaMemPoolAttrUsedMemCurrent, 0), somaErrorInvalidValue);
  EXPECT_EQ(set_pool_u64(pool, somaMemPoolAttrUsedMemCurrent, 12345), somaErrorInvalidValue);
  expect_unchanged_and_usable(pool, before, stream);
}

TEST_F(S9_S10_BadAttributes, NullValueOrUnknownAttributeIsInvalidValue) {
  unique_stream stream;
  unique_pool pool(0);
  const pool_stats before = read_pool_stats(pool);
  EXPECT_EQ(somaMemPoolGetAttribute(pool, somaMemPoolAttrReleaseThreshold, nullptr),
            somaErrorInvalidValue);
  EXPECT_EQ(somaMemPoolSetAttribute(pool, somaMemPoolAttrReleaseThreshold, nullptr),
            somaErrorInvalidValue);
  std::uint64_t value = 0;
  for (int attr : {0, 14, 15, 999}) {  // unknown (9-13 are CUDA 13.2's read-only ones)
    EXPECT_EQ(somaMemPoolGetAttribute(pool, static_cast<somaMemPoolAttr>(attr), &value),
              somaErrorInvalidValue)
        << attr;
    EXPECT_EQ(somaMemPoolSetAttribute(pool, static_cast<somaMemPoolAttr>(attr), &value),
              somaErrorInvalidValue)
        << attr;
  }
  expect_unchanged_and_usable(pool, before, stream);
}

TEST_F(S9_S10_BadAttributes, ReleaseThresholdTakesAnyValue) {
  unique_pool pool(0);
  for (std::uint64_t threshold : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{12345},
                                  std::uint64_t{1} << 40, UINT64_MAX}) {
    SOMA_EXPECT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, threshold));
    EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReleaseThreshold), threshold);
  }
}

// ---- devices and other arguments (S8) --------------------------------------------------------

TEST_F(S8_BadInput, DeviceOrdinalOutOfRange) {
  const int count = device_count();
  unique_stream stream;
  const somaMemPool_t pool = default_pool(0);
  const pool_stats before = read_pool_stats(pool);
  EXPECT_EQ(somaSetDevice(-1), somaErrorInvalidDevice);
  EXPECT_EQ(somaSetDevice(count), somaErrorInvalidDevice);
  int current = -1;
  SOMA_ASSERT_OK(somaGetDevice(&current));
  EXPECT_EQ(current, 0) << "a refused somaSetDevice changes nothing";
  int value = 0;
  EXPECT_EQ(somaDeviceGetAttribute(&value, somaDevAttrMemoryPoolsSupported, -1),
            somaErrorInvalidDevice);
  EXPECT_EQ(somaDeviceGetAttribute(&value, somaDevAttrMemoryPoolsSupported, count),
            somaErrorInvalidDevice);
  somaMemPool_t out = nullptr;
  for (somaError_t status :
       {somaDeviceGetDefaultMemPool(&out, count), somaDeviceGetDefaultMemPool(&out, -1),
        somaDeviceGetMemPool(&out, count), somaDeviceSetMemPool(count, pool)}) {
    EXPECT_TRUE(status == somaErrorInvalidDevice || status == somaErrorInvalidValue)
        << "got " << ::testing::PrintToString(status);
  }
  int can_access = 0;
  EXPECT_NE(somaDeviceCanAccessPeer(&can_access, 0, count), somaSuccess);
  EXPECT_NE(somaDeviceCanAccessPeer(&can_access, -1, 0), somaSuccess);
  expect_unchanged_and_usable(pool, before, stream);
}

TEST_F(S8_BadInput, UnknownDeviceAttributeIsInvalidValue) {
  int value = 0;
  EXPECT_EQ(somaDeviceGetAttribute(&value, static_cast<somaDeviceAttr>(0), 0),
            somaErrorInvalidValue);
  EXPECT_EQ(somaDeviceGetAttribute(&value, static_cast<somaDeviceAttr>(9999), 0),
            somaErrorInvalidValue);
  EXPECT_EQ(somaDeviceGetAttribute(nullptr, somaDevAttrMemoryPoolsSupported, 0),
            somaErrorInvalidValue);
}

TEST_F(S8_BadInput, NullOutputPointersAreInvalidValue) {
  unique_stream stream;
  const somaMemPool_t pool = default_pool(0);
  const pool_stats before = read_pool_stats(pool);
  std::size_t bytes = 0;
  EXPECT_EQ(somaGetDeviceCount(nullptr), somaErrorInvalidValue);
  EXPECT_EQ(somaGetDevice(nullptr), somaErrorInvalidValue);
  EXPECT_EQ(somaGetBackendName(nullptr), somaErrorInvalidValue);
  EXPECT_EQ(somaMemGetInfo(nullptr, &bytes), somaErrorInvalidValue);
  EXPECT_EQ(somaMemGetInfo(&bytes, nullptr), somaErrorInvalidValue);
  EXPECT_EQ(somaStreamCreate(nullptr), somaErrorInvalidValue);
  EXPECT_EQ(somaEventCreate(nullptr), somaErrorInvalidValue);
  EXPECT_EQ(somaStreamGetDevice(stream, nullptr), somaErrorInvalidValue);
  EXPECT_EQ(somaStreamGetNative(stream, nullptr), somaErrorInvalidValue);
  EXPECT_EQ(somaDeviceGetDefaultMemPool(nullptr, 0), somaErrorInvalidValue);
  EXPECT_EQ(somaDeviceGetMemPool(nullptr, 0), somaErrorInvalidValue);
  EXPECT_EQ(somaPointerGetAttributes(nullptr, &bytes), somaErrorInvalidValue);
  EXPECT_EQ(somaLaunchHostFunc(stream, nullptr, nullptr), somaErrorInvalidValue);
  EXPECT_EQ(somaLaunchHostFuncWithStatus(stream, nullptr, nullptr), somaErrorInvalidValue);
  SOMA_EXPECT_OK(somaStreamSynchronize(stream)) << "the stream is not harmed";
  expect_unchanged_and_usable(pool, before, stream);
}

}  // namespace
