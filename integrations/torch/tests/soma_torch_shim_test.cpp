// Tests of libsoma_torch.so's C functions (integrations/torch/soma_torch.h) as PyTorch and
// soma_torch.py call them, on both backends (cpu: label cpu; cuda: label gpu, names cuda.*).
//
// Native streams: on cuda, the CUstream of a soma stream the test creates and keeps, which the
// library adopts as it adopts PyTorch's; on cpu, made-up handle values, each of which the
// library gives a soma stream of its own. Pool memory is touched by stream operations only
// (memset, copies into host memory); streams are held by value waits (stream_gate).
#include "soma_torch.h"

#include <soma/soma.h>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "soma_test_util.hpp"
#include "stream_gate.hpp"

namespace {

using namespace soma_test;
using namespace std::chrono_literals;

constexpr std::uint64_t keep_everything = UINT64_MAX;

/// A native stream of device, as PyTorch would pass it; a new one at every call. Streams are
/// never destroyed: the library keeps what it adopted for the life of the process.
cudaStream_t new_native_stream(int device = 0) {
  static std::mutex mutex;
  static std::uintptr_t next_value = 0x10000;
  std::lock_guard lock(mutex);
  if (on_cuda_backend()) {
    int previous = 0;
    somaStream_t stream = nullptr;
    void* native = nullptr;
    EXPECT_EQ(somaGetDevice(&previous), somaSuccess);
    EXPECT_EQ(somaSetDevice(device), somaSuccess);
    EXPECT_EQ(somaStreamCreateWithFlags(&stream, somaStreamNonBlocking), somaSuccess)
        << last_message();
    EXPECT_EQ(somaStreamGetNative(stream, &native), somaSuccess) << last_message();
    EXPECT_EQ(somaSetDevice(previous), somaSuccess);
    return static_cast<cudaStream_t>(native);
  }
  next_value += 0x100;
  return reinterpret_cast<cudaStream_t>(next_value);  // NOLINT(performance-no-int-to-ptr)
}

soma_torch_stats stats_of(int device = 0) {
  soma_torch_stats stats;
  std::memset(&stats, 0, sizeof stats);
  EXPECT_EQ(soma_torch_get_stats(device, &stats), somaSuccess) << "soma_torch_get_stats";
  return stats;
}

std::string library_message() {
  std::array<char, 1024> text{};
  (void)soma_torch_last_error(text.data(), text.size());
  return text.data();
}

somaStream_t stream_of(cudaStream_t native, int device = 0) {
  somaStream_t stream = soma_torch_get_stream(device, native);
  EXPECT_NE(stream, nullptr) << library_message();
  return stream;
}

/// Every test starts with the default settings and no memory fraction, and must leave no
/// live allocation in the library's pools.
class soma_torch_test : public capi_test {
 protected:
  void SetUp() override {
    capi_test::SetUp();
    ASSERT_EQ(soma_torch_configure(keep_everything, 1, 1, 1), somaSuccess) << library_message();
    const int devices = soma_torch_device_count();
    ASSERT_GE(devices, 1) << library_message();
    for (int device = 0; device < devices; ++device) soma_torch_set_memory_fraction(1.0, device);
  }
  void TearDown() override {
    for (int device = 0; device < soma_torch_device_count(); ++device) {
      EXPECT_EQ(stats_of(device).used_bytes, 0u)
          << "device " << device << ": the test left live allocations behind";
    }
    capi_test::TearDown();
  }
};

class Allocate : public soma_torch_test {};
class Streams : public soma_torch_test {};
class Free : public soma_torch_test {};
class Statistics : public soma_torch_test {};
class Cache : public soma_torch_test {};
class Configure : public soma_torch_test {};
class RecordStream : public soma_torch_test {};
class Hooks : public soma_torch_test {};
class Threads : public soma_torch_test {};

// ---- allocation and free ---------------------------------------------------------------------

TEST_F(Allocate, MemoryHoldsWhatTheStreamWroteAndIsCounted) {
  const cudaStream_t native = new_native_stream();
  const soma_torch_stats before = stats_of();
  constexpr std::size_t size = 3 * MiB + 17;
  void* pointer = soma_torch_malloc(size, 0, native);
  ASSERT_NE(pointer, nullptr) << library_message();
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(pointer) % 256, 0u);

  somaStream_t stream = stream_of(native);
  SOMA_ASSERT_OK(somaMemsetAsync(pointer, 0x5a, size, stream));
  EXPECT_TRUE(read_back(pointer, size, stream).all(0x5a));
  somaPointerAttributes attributes{};
  SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, pointer));
  EXPECT_EQ(attributes.pool, soma_torch_get_pool(0)) << "allocated from the library's pool";
  EXPECT_EQ(attributes.size, size);

  soma_torch_stats during = stats_of();
  EXPECT_EQ(during.used_bytes, before.used_bytes + size);
  EXPECT_GE(during.reserved_bytes, during.used_bytes);
  EXPECT_EQ(during.allocations, before.allocations + 1);

  soma_torch_free(pointer, size, 0, native);
  const soma_torch_stats after = stats_of();
  EXPECT_EQ(after.used_bytes, before.used_bytes);
  EXPECT_EQ(after.frees, before.frees + 1);
  EXPECT_EQ(after.failed_frees, before.failed_frees);
}

TEST_F(Allocate, SizeZeroGivesNullAndIsNoFailure) {
  const soma_torch_stats before = stats_of();
  EXPECT_EQ(soma_torch_malloc(0, 0, new_native_stream()), nullptr);
  const soma_torch_stats after = stats_of();
  EXPECT_EQ(after.failed_allocations, before.failed_allocations);
  EXPECT_EQ(after.allocations, before.allocations);
}

TEST_F(Allocate, NegativeSizeAndBadDeviceGiveNullAndAMessage) {
  const soma_torch_stats before = stats_of();
  EXPECT_EQ(soma_torch_malloc(-5, 0, new_native_stream()), nullptr);
  EXPECT_NE(library_message().find("negative"), std::string::npos) << library_message();
  EXPECT_EQ(stats_of().failed_allocations, before.failed_allocations + 1);

  EXPECT_EQ(soma_torch_malloc(256, 99, new_native_stream()), nullptr);
  EXPECT_NE(library_message().find("device 99"), std::string::npos) << library_message();
  EXPECT_EQ(soma_torch_malloc(256, -1, new_native_stream()), nullptr);
}

TEST_F(Allocate, OutOfMemoryGivesNullAndThePoolStaysUsable) {
  const cudaStream_t native = new_native_stream();
  const std::size_t too_big = device_memory_bytes(0) + 64 * MiB;
  const soma_torch_stats before = stats_of();
  EXPECT_EQ(soma_torch_malloc(static_cast<ssize_t>(too_big), 0, native), nullptr);
  EXPECT_EQ(stats_of().failed_allocations, before.failed_allocations + 1);
  EXPECT_NE(library_message().find("somaErrorMemoryAllocation"), std::string::npos)
      << library_message();
  void* pointer = soma_torch_malloc(4096, 0, native);
  ASSERT_NE(pointer, nullptr) << library_message();
  soma_torch_free(pointer, 4096, 0, native);
}

TEST_F(Allocate, SecondDeviceHasAPoolOfItsOwn) {
  if (!have_devices(2)) GTEST_SKIP() << "needs 2 devices";
  const cudaStream_t native = new_native_stream(1);
  const soma_torch_stats device0 = stats_of(0);
  void* pointer = soma_torch_malloc(MiB, 1, native);
  ASSERT_NE(pointer, nullptr) << library_message();
  somaPointerAttributes attributes{};
  SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, pointer));
  EXPECT_EQ(attributes.device, 1);
  EXPECT_EQ(attributes.pool, soma_torch_get_pool(1));
  EXPECT_NE(soma_torch_get_pool(1), soma_torch_get_pool(0));
  EXPECT_EQ(stats_of(1).used_bytes, MiB);
  EXPECT_EQ(stats_of(0).used_bytes, device0.used_bytes);
  soma_torch_free(pointer, MiB, 1, native);
}

TEST_F(Free, NullIsANoOp) {
  const soma_torch_stats before = stats_of();
  soma_torch_free(nullptr, 0, 0, new_native_stream());
  const soma_torch_stats after = stats_of();
  EXPECT_EQ(after.frees, before.frees);
  EXPECT_EQ(after.failed_frees, before.failed_frees);
}

TEST_F(Free, UnknownPointerAndDoubleFreeAreCountedNotFatal) {
  const cudaStream_t native = new_native_stream();
  const soma_torch_stats before = stats_of();
  int local = 0;
  soma_torch_free(&local, sizeof local, 0, native);
  EXPECT_EQ(stats_of().failed_frees, before.failed_frees + 1);
  EXPECT_NE(library_message().find("somaErrorInvalidValue"), std::string::npos)
      << library_message();

  void* pointer = soma_torch_malloc(8192, 0, native);
  ASSERT_NE(pointer, nullptr) << library_message();
  soma_torch_free(pointer, 8192, 0, native);
  soma_torch_free(pointer, 8192, 0, native);
  const soma_torch_stats after = stats_of();
  EXPECT_EQ(after.failed_frees, before.failed_frees + 2);
  EXPECT_EQ(after.frees, before.frees + 1);
  expect_pool_usable(soma_torch_get_pool(0), stream_of(native));
}

TEST_F(Free, BadDeviceIsCountedNowhereAndKeepsTheMemory) {
  const cudaStream_t native = new_native_stream();
  void* pointer = soma_torch_malloc(4096, 0, native);
  ASSERT_NE(pointer, nullptr) << library_message();
  soma_torch_free(pointer, 4096, 42, native);
  EXPECT_NE(library_message().find("device 42"), std::string::npos) << library_message();
  EXPECT_EQ(stats_of().used_bytes, 4096u) << "a free that names a bad device frees nothing";
  soma_torch_free(pointer, 4096, 0, native);
}

// ---- streams ------------------------------------------------------------------------------------

TEST_F(Streams, EachNativeStreamIsAdoptedOnceAndKept) {
  const cudaStream_t native = new_native_stream();
  const std::uint64_t streams_before = stats_of().streams;
  somaStream_t first = stream_of(native);
  EXPECT_EQ(stats_of().streams, streams_before + 1);
  void* pointer = soma_torch_malloc(1024, 0, native);
  ASSERT_NE(pointer, nullptr) << library_message();
  soma_torch_free(pointer, 1024, 0, native);
  EXPECT_EQ(stream_of(native), first) << "the same soma stream every time";
  EXPECT_EQ(stats_of().streams, streams_before + 1);

  // From another thread (the per-thread cache is empty there): still the same stream.
  somaStream_t seen_elsewhere = nullptr;
  std::thread([&] { seen_elsewhere = soma_torch_get_stream(0, native); }).join();
  EXPECT_EQ(seen_elsewhere, first);
  EXPECT_NE(stream_of(new_native_stream()), first);
}

TEST_F(Streams, NativeStreamsAreAdoptedOnCudaOnly) {
  EXPECT_EQ(soma_torch_adopts_native_streams(), on_cuda_backend() ? 1 : 0);
  somaStream_t stream = stream_of(new_native_stream());
  void* native = nullptr;
  SOMA_ASSERT_OK(somaStreamGetNative(stream, &native));
  if (on_cuda_backend()) {
    EXPECT_NE(native, nullptr) << "cuda: the soma stream is over the native one";
  } else {
    EXPECT_EQ(native, nullptr) << "cpu: a stream of soma's own";
  }
}

TEST_F(Streams, DefaultStreamZeroWorks) {
  void* pointer = soma_torch_malloc(64 * KiB, 0, nullptr);
  ASSERT_NE(pointer, nullptr) << library_message();
  somaStream_t stream = stream_of(nullptr);
  SOMA_ASSERT_OK(somaMemsetAsync(pointer, 0x3c, 64 * KiB, stream));
  EXPECT_TRUE(read_back(pointer, 64 * KiB, stream).all(0x3c));
  soma_torch_free(pointer, 64 * KiB, 0, nullptr);
  if (on_cuda_backend()) {
    void* native = nullptr;
    SOMA_ASSERT_OK(somaStreamGetNative(stream, &native));
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(native), 0x1u)
        << "stream 0 is adopted as CU_STREAM_LEGACY";
    EXPECT_EQ(soma_torch_get_stream(0, reinterpret_cast<cudaStream_t>(0x1)), stream)
        << "0 and cudaStreamLegacy name the same stream";
  }
}

TEST_F(Streams, PerThreadDefaultStreamIsRefusedOnCuda) {
  if (!on_cuda_backend()) GTEST_SKIP() << "cuda only: on cpu 0x2 is just another value";
  const auto per_thread = reinterpret_cast<cudaStream_t>(0x2);  // NOLINT
  EXPECT_EQ(soma_torch_get_stream(0, per_thread), nullptr);
  EXPECT_NE(library_message().find("cudaStreamPerThread"), std::string::npos) << library_message();
  EXPECT_EQ(soma_torch_malloc(4096, 0, per_thread), nullptr);
}

// ---- statistics, cache, configuration ---------------------------------------------------------

TEST_F(Statistics, UsedIsTheSumOfLiveSizesAndReturnsToZero) {
  const cudaStream_t native = new_native_stream();
  const std::vector<std::size_t> sizes = {1, 1000, 4097, MiB + 3, 255, 70000};
  std::vector<void*> pointers;
  std::uint64_t sum = 0;
  for (std::size_t size : sizes) {
    pointers.push_back(soma_torch_malloc(static_cast<ssize_t>(size), 0, native));
    ASSERT_NE(pointers.back(), nullptr) << library_message();
    sum += size;
    const soma_torch_stats stats = stats_of();
    EXPECT_EQ(stats.used_bytes, sum);
    EXPECT_GE(stats.used_high_bytes, sum);
    EXPECT_GE(stats.reserved_bytes, stats.used_bytes);
    EXPECT_GE(stats.reserved_high_bytes, stats.reserved_bytes);
  }
  for (std::size_t i = 0; i < pointers.size(); ++i)
    soma_torch_free(pointers[i], static_cast<ssize_t>(sizes[i]), 0, native);
  soma_torch_stats stats = stats_of();
  EXPECT_EQ(stats.used_bytes, 0u);
  EXPECT_GE(stats.used_high_bytes, sum);

  SOMA_ASSERT_OK(static_cast<somaError_t>(soma_torch_reset_peak(0)));
  stats = stats_of();
  EXPECT_EQ(stats.used_high_bytes, 0u) << "reset sets the high watermark to the current value";
  EXPECT_EQ(stats.reserved_high_bytes, stats.reserved_bytes);
  SOMA_ASSERT_OK(static_cast<somaError_t>(soma_torch_reset_peak(-1)));
}

TEST_F(Statistics, BadArgumentsAreErrors) {
  soma_torch_stats stats{};
  EXPECT_EQ(soma_torch_get_stats(0, nullptr), somaErrorInvalidValue);
  EXPECT_EQ(soma_torch_get_stats(99, &stats), somaErrorInvalidDevice);
  EXPECT_NE(library_message().find("device 99"), std::string::npos) << library_message();
  EXPECT_EQ(soma_torch_reset_peak(99), somaErrorInvalidDevice);
  EXPECT_EQ(soma_torch_synchronize(-7), somaErrorInvalidDevice);
  EXPECT_EQ(soma_torch_get_pool(99), nullptr);
  EXPECT_EQ(soma_torch_get_stream(99, new_native_stream()), nullptr);
}

TEST_F(Statistics, LastErrorIsCopiedTruncatedWithItsFullLength) {
  EXPECT_EQ(soma_torch_malloc(-1, 0, new_native_stream()), nullptr);
  const std::string full = library_message();
  ASSERT_GT(full.size(), 8u);
  std::array<char, 8> small{};
  EXPECT_EQ(soma_torch_last_error(small.data(), small.size()), full.size());
  EXPECT_EQ(std::string(small.data()), full.substr(0, 7));
  EXPECT_EQ(soma_torch_last_error(nullptr, 0), full.size());
}

TEST_F(Cache, EmptyCacheReturnsEveryFreeGranule) {
  const cudaStream_t native = new_native_stream();
  std::vector<void*> pointers;
  for (int i = 0; i < 8; ++i) {
    pointers.push_back(soma_torch_malloc(4 * MiB, 0, native));
    ASSERT_NE(pointers.back(), nullptr) << library_message();
  }
  for (void* pointer : pointers) soma_torch_free(pointer, 4 * MiB, 0, native);
  EXPECT_GE(stats_of().reserved_bytes, 32 * MiB) << "release threshold UINT64_MAX keeps memory";
  SOMA_ASSERT_OK(static_cast<somaError_t>(soma_torch_synchronize(0)));
  EXPECT_GE(stats_of().reserved_bytes, 32 * MiB) << "a synchronize releases only above threshold";
  soma_torch_empty_cache();
  EXPECT_EQ(stats_of().reserved_bytes, 0u) << library_message();
}

// Release goes in whole release units (cpu: granules; cuda: a pool's commits, made in 32 MiB
// steps), so the live block is allocated first and the dead one needs a commit of its own.
TEST_F(Cache, EmptyCacheKeepsWhatIsLive) {
  const cudaStream_t native = new_native_stream();
  soma_torch_empty_cache();  // nothing cached from earlier tests
  void* live = soma_torch_malloc(2 * MiB, 0, native);
  void* dead = soma_torch_malloc(64 * MiB, 0, native);
  ASSERT_NE(live, nullptr) << library_message();
  ASSERT_NE(dead, nullptr) << library_message();
  somaStream_t stream = stream_of(native);
  SOMA_ASSERT_OK(somaMemsetAsync(live, 0x44, 2 * MiB, stream));
  soma_torch_free(dead, 64 * MiB, 0, native);
  const std::uint64_t reserved_before = stats_of().reserved_bytes;
  soma_torch_empty_cache();
  const soma_torch_stats stats = stats_of();
  EXPECT_GE(stats.reserved_bytes, 2 * MiB);
  EXPECT_LT(stats.reserved_bytes, reserved_before) << "the dead block's release units went";
  EXPECT_TRUE(read_back(live, 2 * MiB, stream).all(0x44)) << "empty_cache moved nothing live";
  soma_torch_free(live, 2 * MiB, 0, native);
}

TEST_F(Cache, AReleaseThresholdActsAtSomasSynchronize) {
  ASSERT_EQ(soma_torch_configure(0, 1, 1, 1), somaSuccess) << library_message();
  const cudaStream_t native = new_native_stream();
  void* pointer = soma_torch_malloc(16 * MiB, 0, native);
  ASSERT_NE(pointer, nullptr) << library_message();
  soma_torch_free(pointer, 16 * MiB, 0, native);
  EXPECT_GE(stats_of().reserved_bytes, 16 * MiB) << "nothing is released before a synchronize";
  SOMA_ASSERT_OK(static_cast<somaError_t>(soma_torch_synchronize(-1)));
  EXPECT_EQ(stats_of().reserved_bytes, 0u) << "threshold 0: everything goes back (S9)";
}

TEST_F(Configure, SetsThePoolAttributesOfEveryDevice) {
  somaMemPool_t pool = soma_torch_get_pool(0);
  ASSERT_NE(pool, nullptr) << library_message();
  ASSERT_EQ(soma_torch_configure(123456, 0, 1, 0), somaSuccess) << library_message();
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReleaseThreshold), 123456u);
  EXPECT_EQ(pool_int(pool, somaMemPoolReuseFollowEventDependencies), 0);
  EXPECT_EQ(pool_int(pool, somaMemPoolReuseAllowOpportunistic), 1);
  EXPECT_EQ(pool_int(pool, somaMemPoolReuseAllowInternalDependencies), 0);
  if (have_devices(2)) {
    somaMemPool_t other = soma_torch_get_pool(1);  // created now or earlier: same settings
    ASSERT_NE(other, nullptr) << library_message();
    EXPECT_EQ(pool_u64(other, somaMemPoolAttrReleaseThreshold), 123456u);
    EXPECT_EQ(pool_int(other, somaMemPoolReuseAllowInternalDependencies), 0);
  }
  EXPECT_EQ(soma_torch_configure(7, 2, 1, 1), somaErrorInvalidValue);
  EXPECT_NE(library_message().find("0 or 1"), std::string::npos) << library_message();
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReleaseThreshold), 123456u)
      << "a refused call sets nothing";
  EXPECT_EQ(soma_torch_configure(7, 1, -1, 1), somaErrorInvalidValue);
}

// ---- record_stream ------------------------------------------------------------------------------

/// Allocates `count` blocks of size, `per_stream` on each of streams, and fills each with value on
/// its stream; the caller frees them.
struct filled_blocks {
  std::vector<void*> pointers;
  std::vector<cudaStream_t> natives;
};
filled_blocks allocate_filled(const std::vector<cudaStream_t>& streams, int per_stream,
                              std::size_t size, unsigned char value) {
  filled_blocks blocks;
  for (cudaStream_t native : streams) {
    for (int i = 0; i < per_stream; ++i) {
      void* pointer = soma_torch_malloc(static_cast<ssize_t>(size), 0, native);
      EXPECT_NE(pointer, nullptr) << library_message();
      if (pointer == nullptr) continue;
      EXPECT_EQ(somaMemsetAsync(pointer, value, size, stream_of(native)), somaSuccess);
      blocks.pointers.push_back(pointer);
      blocks.natives.push_back(native);
    }
  }
  return blocks;
}

void expect_filled_and_free(const filled_blocks& blocks, std::size_t size, unsigned char value) {
  for (std::size_t i = 0; i < blocks.pointers.size(); ++i) {
    EXPECT_TRUE(read_back(blocks.pointers[i], size, stream_of(blocks.natives[i])).all(value))
        << "block " << blocks.pointers[i] << " was written by a use of memory freed earlier";
    soma_torch_free(blocks.pointers[i], static_cast<ssize_t>(size), 0, blocks.natives[i]);
  }
}

// Memory also used on another stream (declared) is handed out again only after that stream's
// work up to the free, and the allocating stream does not wait for it: blocks allocated after
// the free and written at once keep their contents when the held use finally writes.
TEST_F(RecordStream, NoBlockIsHandedOutBeforeTheRecordedUse) {
  const cudaStream_t allocating = new_native_stream();
  const cudaStream_t user = new_native_stream();
  constexpr std::size_t size = MiB;
  const soma_torch_stats before = stats_of();

  void* pointer = soma_torch_malloc(size, 0, allocating);
  ASSERT_NE(pointer, nullptr) << library_message();
  stream_gate gate;
  SOMA_ASSERT_OK(gate.hold(stream_of(user)));
  SOMA_ASSERT_OK(somaMemsetAsync(pointer, 0x22, size, stream_of(user)));  // the use, held back
  soma_torch_record_stream(pointer, user);
  soma_torch_free(pointer, size, 0, allocating);
  EXPECT_EQ(stats_of().used_bytes, before.used_bytes) << "the allocation is dead at the free (S2)";

  const filled_blocks blocks =
      allocate_filled({allocating, new_native_stream(), new_native_stream()}, 3, size, 0x33);
  for (void* block : blocks.pointers) EXPECT_NE(block, pointer) << "handed out during its use";
  stream_flag passed;
  SOMA_ASSERT_OK(passed.set_on(stream_of(allocating)));
  EXPECT_TRUE(passed.wait()) << "the allocating stream must not wait for the recorded one";

  gate.open();
  SOMA_ASSERT_OK(static_cast<somaError_t>(soma_torch_synchronize(0)));
  expect_filled_and_free(blocks, size, 0x33);
  EXPECT_EQ(stats_of().cross_stream_frees, before.cross_stream_frees + 1);
}

// What the library cannot see: a use on another stream that nobody declared. The free is an
// ordinary one and the allocating stream reuses the memory at once (as with PyTorch's own
// allocator, such a use is the caller's bug).
TEST_F(RecordStream, WithoutRecordStreamTheMemoryIsReusedAtOnce) {
  const cudaStream_t allocating = new_native_stream();
  const cudaStream_t user = new_native_stream();
  constexpr std::size_t size = MiB;
  void* pointer = soma_torch_malloc(size, 0, allocating);
  ASSERT_NE(pointer, nullptr) << library_message();
  stream_gate gate;
  SOMA_ASSERT_OK(gate.hold(stream_of(user)));
  soma_torch_free(pointer, size, 0, allocating);
  void* next = soma_torch_malloc(size, 0, allocating);
  EXPECT_EQ(next, pointer) << "same-stream reuse: the undeclared use is not waited for";
  gate.open();
  soma_torch_free(next, size, 0, allocating);
}

TEST_F(RecordStream, EveryRecordedStreamIsWaitedFor) {
  const cudaStream_t allocating = new_native_stream();
  const cudaStream_t first_user = new_native_stream();
  const cudaStream_t second_user = new_native_stream();
  constexpr std::size_t size = 256 * KiB;
  void* pointer = soma_torch_malloc(size, 0, allocating);
  ASSERT_NE(pointer, nullptr) << library_message();
  stream_gate first_gate;
  stream_gate second_gate;
  SOMA_ASSERT_OK(first_gate.hold(stream_of(first_user)));
  SOMA_ASSERT_OK(second_gate.hold(stream_of(second_user)));
  SOMA_ASSERT_OK(somaMemsetAsync(pointer, 0x22, size, stream_of(second_user)));
  soma_torch_record_stream(pointer, first_user);
  soma_torch_record_stream(pointer, second_user);
  soma_torch_record_stream(pointer, first_user);  // repeats are stored once
  soma_torch_free(pointer, size, 0, allocating);

  first_gate.open();
  SOMA_ASSERT_OK(somaStreamSynchronize(stream_of(first_user)));
  std::this_thread::sleep_for(20ms);
  const filled_blocks blocks = allocate_filled({allocating, new_native_stream()}, 4, size, 0x33);
  for (void* block : blocks.pointers) EXPECT_NE(block, pointer) << "the second use still runs";
  second_gate.open();
  SOMA_ASSERT_OK(static_cast<somaError_t>(soma_torch_synchronize(0)));
  expect_filled_and_free(blocks, size, 0x33);
}

TEST_F(RecordStream, TheAllocatingStreamItselfIsAnOrdinaryFree) {
  const cudaStream_t allocating = new_native_stream();
  const soma_torch_stats before = stats_of();
  void* pointer = soma_torch_malloc(4096, 0, allocating);
  ASSERT_NE(pointer, nullptr) << library_message();
  soma_torch_record_stream(pointer, allocating);
  soma_torch_free(pointer, 4096, 0, allocating);
  void* next = soma_torch_malloc(4096, 0, allocating);
  EXPECT_EQ(next, pointer) << "reused at once on its own stream";
  soma_torch_free(next, 4096, 0, allocating);
  const soma_torch_stats after = stats_of();
  EXPECT_EQ(after.cross_stream_frees, before.cross_stream_frees);
  EXPECT_EQ(after.frees, before.frees + 2);
}

TEST_F(RecordStream, PointersThatAreNotAllocationStartsAreIgnored) {
  const cudaStream_t allocating = new_native_stream();
  const cudaStream_t user = new_native_stream();
  void* pointer = soma_torch_malloc(8192, 0, allocating);
  ASSERT_NE(pointer, nullptr) << library_message();
  int local = 0;
  soma_torch_record_stream(nullptr, user);
  soma_torch_record_stream(&local, user);
  soma_torch_record_stream(static_cast<char*>(pointer) + 256, user);  // inside, not the start

  stream_gate gate;
  SOMA_ASSERT_OK(gate.hold(stream_of(user)));
  soma_torch_free(pointer, 8192, 0, allocating);
  void* next = soma_torch_malloc(8192, 0, allocating);
  EXPECT_EQ(next, pointer) << "nothing was recorded for the allocation itself";
  gate.open();
  soma_torch_free(next, 8192, 0, allocating);
}

// A record is dropped with its free: when the address is handed out again, its next free is
// an ordinary one. The address is made to come back by a request only it can serve: most of
// the small cpu test device.
TEST_F(RecordStream, ARecordDoesNotOutliveItsFree) {
  SOMA_REQUIRE_TEST_CONFIG();
  const cudaStream_t allocating = new_native_stream();
  const cudaStream_t user = new_native_stream();
  const std::size_t size = device_memory_bytes(0) * 3 / 4;
  soma_torch_empty_cache();  // nothing cached from earlier tests: the pool holds only this
  void* pointer = soma_torch_malloc(static_cast<ssize_t>(size), 0, allocating);
  ASSERT_NE(pointer, nullptr) << library_message();
  soma_torch_record_stream(pointer, user);
  soma_torch_free(pointer, static_cast<ssize_t>(size), 0, allocating);
  SOMA_ASSERT_OK(static_cast<somaError_t>(soma_torch_synchronize(0)));
  void* again = soma_torch_malloc(static_cast<ssize_t>(size), 0, allocating);
  ASSERT_EQ(again, pointer) << library_message();

  const soma_torch_stats before = stats_of();
  stream_gate gate;
  SOMA_ASSERT_OK(gate.hold(stream_of(user)));
  soma_torch_free(again, static_cast<ssize_t>(size), 0, allocating);
  EXPECT_EQ(stats_of().cross_stream_frees, before.cross_stream_frees);
  void* next = soma_torch_malloc(static_cast<ssize_t>(size), 0, allocating);
  EXPECT_EQ(next, again) << "an ordinary free: reused at once on its stream";
  gate.open();
  soma_torch_free(next, static_cast<ssize_t>(size), 0, allocating);
  soma_torch_empty_cache();
}

// ---- the other hooks ----------------------------------------------------------------------------

TEST_F(Hooks, MemoryFractionLimitsLiveBytes) {
  const cudaStream_t native = new_native_stream();
  const std::size_t total = device_memory_bytes(0);
  const auto over = static_cast<ssize_t>(total / 50);    // 2 %
  const auto under = static_cast<ssize_t>(total / 160);  // 0.625 %
  soma_torch_set_memory_fraction(0.01, 0);
  EXPECT_EQ(soma_torch_malloc(over, 0, native), nullptr);
  EXPECT_NE(library_message().find("memory fraction"), std::string::npos) << library_message();
  void* pointer = soma_torch_malloc(under, 0, native);
  ASSERT_NE(pointer, nullptr) << library_message();
  EXPECT_EQ(soma_torch_malloc(under, 0, native), nullptr) << "2 x 0.625 % passes 1 %";
  soma_torch_free(pointer, under, 0, native);

  soma_torch_set_memory_fraction(-0.5, 0);  // ignored: the 1 % limit stays
  EXPECT_EQ(soma_torch_malloc(over, 0, native), nullptr);
  soma_torch_set_memory_fraction(1.0, 0);
  pointer = soma_torch_malloc(over, 0, native);
  EXPECT_NE(pointer, nullptr) << library_message();
  soma_torch_free(pointer, over, 0, native);
}

TEST_F(Hooks, BaseAllocationGivesTheStartAndSize) {
  const cudaStream_t native = new_native_stream();
  void* pointer = soma_torch_malloc(5000, 0, native);
  ASSERT_NE(pointer, nullptr) << library_message();
  std::size_t size = 0;
  EXPECT_EQ(soma_torch_base_allocation(static_cast<char*>(pointer) + 100, &size), pointer);
  EXPECT_EQ(size, 5000u);
  EXPECT_EQ(soma_torch_base_allocation(pointer, nullptr), pointer);
  int local = 0;
  size = 77;
  EXPECT_EQ(soma_torch_base_allocation(&local, &size), &local);
  EXPECT_EQ(size, 77u) << "untouched for memory that is not soma's";
  soma_torch_free(pointer, 5000, 0, native);
}

// ---- threads ------------------------------------------------------------------------------------

// PyTorch calls from many threads (the main thread, autograd's, data loaders'): each thread
// here allocates on a stream of its own and, now and then, on the shared default stream 0,
// keeps a few allocations live, checks that none is shared with another thread's, and frees.
TEST_F(Threads, ManyThreadsAllocateAndFreeOnTheirStreams) {
  constexpr int thread_count = 8;
  constexpr int iterations = 1500;
  constexpr std::size_t live_per_thread = 8;
  std::vector<cudaStream_t> natives(thread_count);
  for (cudaStream_t& native : natives) native = new_native_stream();
  const soma_torch_stats before = stats_of();
  std::atomic<int> failures{0};

  auto work = [&](int thread) {
    struct live_block {
      void* pointer = nullptr;
      std::size_t size = 0;
      cudaStream_t native = nullptr;
    };
    std::vector<live_block> live(live_per_thread);
    std::mt19937 random(static_cast<unsigned>(thread) + 1);
    for (int i = 0; i < iterations; ++i) {
      live_block& slot = live[static_cast<std::size_t>(i) % live_per_thread];
      if (slot.pointer != nullptr) soma_torch_free(slot.pointer, 0, 0, slot.native);
      slot.size = (random() % 64 + 1) * 4 * KiB;
      slot.native = i % 16 == 0 ? nullptr : natives[static_cast<std::size_t>(thread)];
      slot.pointer = soma_torch_malloc(static_cast<ssize_t>(slot.size), 0, slot.native);
      if (slot.pointer == nullptr) {
        ++failures;
        return;
      }
      const auto byte = static_cast<unsigned char>(thread + 1);
      somaStream_t stream = soma_torch_get_stream(0, slot.native);
      if (stream == nullptr ||
          somaMemsetAsync(slot.pointer, byte, slot.size, stream) != somaSuccess) {
        ++failures;
        return;
      }
      if (i % 100 == 99) {  // every live block still holds this thread's byte: none is shared
        for (const live_block& held : live) {
          if (!read_back(held.pointer, held.size, soma_torch_get_stream(0, held.native))
                   .all(byte)) {
            ++failures;
            return;
          }
        }
      }
    }
    for (live_block& slot : live) soma_torch_free(slot.pointer, 0, 0, slot.native);
  };
  std::vector<std::thread> threads;
  threads.reserve(thread_count);
  for (int t = 0; t < thread_count; ++t) threads.emplace_back(work, t);
  for (std::thread& thread : threads) thread.join();

  EXPECT_EQ(failures.load(), 0) << library_message();
  const soma_torch_stats after = stats_of();
  EXPECT_EQ(after.used_bytes, 0u);
  EXPECT_EQ(after.allocations - before.allocations, after.frees - before.frees);
  EXPECT_EQ(after.allocations - before.allocations,
            static_cast<std::uint64_t>(thread_count) * iterations);
  EXPECT_EQ(after.failed_frees, before.failed_frees);
  EXPECT_EQ(after.failed_allocations, before.failed_allocations);
}

}  // namespace
