// soma next to the CUDA runtime (S1, S2, S12, S13): a soma stream over a cudaStream_t the
// application owns (somaStreamCreateFromNative) serves allocations, frees, copies and host
// functions in the native stream's order; memsets and copies in every direction round-trip
// through pool memory, with kernels checking what landed on the device.
#include <soma/soma.h>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "gpu_test_util.cuh"

namespace {

using namespace soma_gpu_test;

class S1_S2_GpuNativeStream : public gpu_test {};
class S13_GpuCopies : public gpu_test {};

constexpr std::uint64_t kSlowKernelNs = 30'000'000;  // 30 ms

TEST_F(S1_S2_GpuNativeStream, StreamOverACudaStreamAllocatesFreesAndRunsHostFunctions) {
  cudaStream_t native = nullptr;
  CUDA_ASSERT_OK(cudaStreamCreateWithFlags(&native, cudaStreamNonBlocking));
  somaStream_t stream = nullptr;
  SOMA_ASSERT_OK(somaStreamCreateFromNative(&stream, native, 0));
  ASSERT_NE(stream, nullptr);
  void* back = nullptr;
  SOMA_ASSERT_OK(somaStreamGetNative(stream, &back));
  EXPECT_EQ(back, static_cast<void*>(native)) << "somaStreamGetNative gives the adopted stream";
  int device = -1;
  SOMA_ASSERT_OK(somaStreamGetDevice(stream, &device));
  EXPECT_EQ(device, 0);

  constexpr std::size_t words = 1 * MiB;
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, words * 4, stream));
  // Work the application enqueues on its own stream, slow so that ordering matters.
  fill_pattern_kernel<<<grid_for(words, kSlowKernelNs), 256, 0, native>>>(
      static_cast<std::uint32_t*>(pointer), words, 0xcafe, kSlowKernelNs);
  CUDA_ASSERT_LAUNCHED();
  pinned_host<int> flag;
  spin_then_store_kernel<<<1, 1, 0, native>>>(flag.get(), 5, 0);
  CUDA_ASSERT_LAUNCHED();
  struct seen_t {
    volatile int* flag;
    int value = -1;
  } seen{flag.get()};
  SOMA_ASSERT_OK(somaLaunchHostFunc(
      stream,
      [](void* data) {
        auto* state = static_cast<seen_t*>(data);
        state->value = *state->flag;
      },
      &seen));
  std::vector<std::uint32_t> host(words, 0);
  SOMA_ASSERT_OK(somaMemcpyAsync(host.data(), pointer, words * 4, somaMemcpyDeviceToHost, stream));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  // Same-stream reuse on an adopted stream, before anything synchronizes.
  void* again = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&again, words * 4, stream));
  EXPECT_EQ(again, pointer);
  SOMA_ASSERT_OK(somaMemsetAsync(again, 0, words * 4, stream));
  SOMA_ASSERT_OK(somaFreeAsync(again, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(seen.value, 5) << "the host function ran before the native kernels ahead of it";
  for (std::size_t i = 0; i < words; ++i)
    ASSERT_EQ(host[i], pattern_value(i, 0xcafe)) << "word " << i;

  // Work soma enqueues is ordered on the native stream: the native stream's own synchronize
  // covers it.
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, words * 4, stream));
  fill(stream, pointer, words, 0xd00d, kSlowKernelNs);
  CUDA_ASSERT_LAUNCHED();
  SOMA_ASSERT_OK(somaMemcpyAsync(host.data(), pointer, words * 4, somaMemcpyDeviceToHost, stream));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  CUDA_ASSERT_OK(cudaStreamSynchronize(native));
  EXPECT_EQ(host[words - 1], pattern_value(words - 1, 0xd00d));
  EXPECT_EQ(somaStreamQuery(stream), somaSuccess);

  SOMA_ASSERT_OK(somaStreamDestroy(stream));
  CUDA_EXPECT_OK(cudaStreamQuery(native)) << "soma must not destroy a stream it does not own";
  spin_then_store_kernel<<<1, 1, 0, native>>>(flag.get(), 6, 0);
  CUDA_ASSERT_LAUNCHED();
  CUDA_ASSERT_OK(cudaStreamSynchronize(native));
  EXPECT_EQ(*flag.get(), 6);
  CUDA_ASSERT_OK(cudaStreamDestroy(native));
  EXPECT_EQ(pool_u64(default_pool(0), somaMemPoolAttrUsedMemCurrent), 0u);
}

TEST_F(S1_S2_GpuNativeStream, EventsOrderAnAdoptedStreamAndASomaStream) {
  cudaStream_t native = nullptr;
  CUDA_ASSERT_OK(cudaStreamCreateWithFlags(&native, cudaStreamNonBlocking));
  somaStream_t adopted = nullptr;
  SOMA_ASSERT_OK(somaStreamCreateFromNative(&adopted, native, 0));
  {
    unique_stream own;
    unique_event written;
    constexpr std::size_t words = 2 * MiB;
    void* pointer = nullptr;
    SOMA_ASSERT_OK(somaMallocAsync(&pointer, words * 4, adopted));
    fill(adopted, pointer, words, 0x77, kSlowKernelNs);
    CUDA_ASSERT_LAUNCHED();
    SOMA_ASSERT_OK(somaEventRecord(written, adopted));
    SOMA_ASSERT_OK(somaStreamWaitEvent(own, written, 0));
    void* counter = new_counter(own);
    check(own, pointer, words, 0x77, counter);
    CUDA_ASSERT_LAUNCHED();
    SOMA_ASSERT_OK(somaFreeAsync(pointer, own));
    EXPECT_EQ(read_and_free_counter(own, counter), 0u);
  }
  SOMA_ASSERT_OK(somaStreamSynchronize(adopted));
  SOMA_ASSERT_OK(somaStreamDestroy(adopted));
  CUDA_ASSERT_OK(cudaStreamDestroy(native));
}

// somaNativeStreamMayEndFirst, as soma.cupy adopts CuPy's streams: the owner destroys the
// native stream while a kernel still runs on it and before soma's stream goes. Nothing hangs,
// nothing touches the dead CUstream, and the free is reused only once the kernel has run.
TEST_F(S1_S2_GpuNativeStream, AStreamWhoseOwnerEndsItFirstLeavesItsFreesProvable) {
  cudaStream_t native = nullptr;
  CUDA_ASSERT_OK(cudaStreamCreateWithFlags(&native, cudaStreamNonBlocking));
  somaStream_t adopted = nullptr;
  SOMA_ASSERT_OK(
      somaStreamCreateFromNativeWithFlags(&adopted, native, 0, somaNativeStreamMayEndFirst));
  constexpr std::size_t words = 1 * MiB;
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, words * 4, adopted));
  fill_pattern_kernel<<<grid_for(words, kSlowKernelNs), 256, 0, native>>>(
      static_cast<std::uint32_t*>(pointer), words, 0xbeef, kSlowKernelNs);
  CUDA_ASSERT_LAUNCHED();
  SOMA_ASSERT_OK(somaFreeAsync(pointer, adopted));
  CUDA_ASSERT_OK(cudaStreamDestroy(native));  // the kernel still runs
  SOMA_ASSERT_OK(somaStreamDestroy(adopted));
  unique_stream other;
  void* again = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&again, words * 4, other));
  if (again == pointer) {  // handed over: other must run after the kernel (S11)
    void* counter = new_counter(other);
    check(other, again, words, 0xbeef, counter);
    CUDA_ASSERT_LAUNCHED();
    EXPECT_EQ(read_and_free_counter(other, counter), 0u) << "reused before the kernel ended";
  }
  SOMA_ASSERT_OK(somaFreeAsync(again, other));
  SOMA_ASSERT_OK(somaDeviceSynchronize());
  EXPECT_EQ(pool_u64(default_pool(0), somaMemPoolAttrUsedMemCurrent), 0u);
}

TEST_F(S13_GpuCopies, MemsetAndMemcpyRoundTripThroughPoolMemory) {
  unique_stream stream;
  constexpr std::size_t size = 4 * MiB + 3;  // not a multiple of anything
  void* first = nullptr;
  void* second = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&first, size, stream));
  SOMA_ASSERT_OK(somaMallocAsync(&second, size, stream));

  // memset, checked on the device by a kernel.
  SOMA_ASSERT_OK(somaMemsetAsync(first, 0xab, size, stream));
  void* counter = new_counter(stream);
  check_bytes_kernel<<<grid_for(size), 256, 0, stream.native()>>>(
      static_cast<const unsigned char*>(first), size, 0xab,
      static_cast<unsigned long long*>(counter));
  CUDA_ASSERT_LAUNCHED();
  EXPECT_EQ(read_and_free_counter(stream, counter), 0u) << "somaMemsetAsync on device memory";

  // host -> device (explicit kind), device -> device (somaMemcpyDefault), device -> host.
  std::vector<unsigned char> source(size);
  for (std::size_t i = 0; i < size; ++i) source[i] = static_cast<unsigned char>(i * 131 + 7);
  SOMA_ASSERT_OK(somaMemcpyAsync(first, source.data(), size, somaMemcpyHostToDevice, stream));
  SOMA_ASSERT_OK(somaMemcpyAsync(second, first, size, somaMemcpyDefault, stream));
  // A memset of an odd range in the middle, at an odd offset.
  auto* middle = static_cast<unsigned char*>(second) + 1000001;
  SOMA_ASSERT_OK(somaMemsetAsync(middle, 0x5c, 4097, stream));
  std::vector<unsigned char> result(size, 0);
  SOMA_ASSERT_OK(somaMemcpyAsync(result.data(), second, size, somaMemcpyDeviceToHost, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  std::size_t wrong = 0;
  std::size_t first_wrong = size;
  for (std::size_t i = 0; i < size; ++i) {
    const bool in_memset = i >= 1000001 && i < 1000001 + 4097;
    const unsigned char expected = in_memset ? 0x5c : source[i];
    if (result[i] != expected) {
      ++wrong;
      if (first_wrong == size) first_wrong = i;
    }
  }
  EXPECT_EQ(wrong, 0u) << "first wrong byte at " << first_wrong;

  // Page-locked host memory, somaMemcpyDefault both ways.
  pinned_host<unsigned char> pinned(size);
  SOMA_ASSERT_OK(somaMemcpyAsync(pinned.get(), first, size, somaMemcpyDefault, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(std::memcmp(pinned.get(), source.data(), size), 0);
  std::memset(pinned.get(), 0x3e, size);
  SOMA_ASSERT_OK(somaMemcpyAsync(first, pinned.get(), size, somaMemcpyDefault, stream));
  counter = new_counter(stream);
  check_bytes_kernel<<<grid_for(size), 256, 0, stream.native()>>>(
      static_cast<const unsigned char*>(first), size, 0x3e,
      static_cast<unsigned long long*>(counter));
  CUDA_ASSERT_LAUNCHED();
  EXPECT_EQ(read_and_free_counter(stream, counter), 0u);

  SOMA_ASSERT_OK(somaFreeAsync(first, stream));
  SOMA_ASSERT_OK(somaFreeAsync(second, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S13_GpuCopies, CopyBetweenStreamsFollowsTheEvent) {
  // A slow kernel on A writes; B copies to the host after waiting on A's event.
  unique_stream a;
  unique_stream b;
  unique_event written;
  constexpr std::size_t words = 1 * MiB;
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, words * 4, a));
  fill(a, pointer, words, 0x1234, kSlowKernelNs);
  CUDA_ASSERT_LAUNCHED();
  SOMA_ASSERT_OK(somaEventRecord(written, a));
  SOMA_ASSERT_OK(somaStreamWaitEvent(b, written, 0));
  std::vector<std::uint32_t> host(words, 0);
  SOMA_ASSERT_OK(somaMemcpyAsync(host.data(), pointer, words * 4, somaMemcpyDeviceToHost, b));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, b));
  SOMA_ASSERT_OK(somaStreamSynchronize(b));
  for (std::size_t i = 0; i < words; ++i)
    ASSERT_EQ(host[i], pattern_value(i, 0x1234)) << "word " << i;
}

}  // namespace
