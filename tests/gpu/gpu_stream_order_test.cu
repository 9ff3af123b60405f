// Stream order on a real GPU (S1, S2, S11, S12): kernels on the native streams behind soma
// streams write and read pool memory; events carry the dependency from one stream to another;
// a freed block is reused on the same stream at once and on another stream never before the
// work that used it has finished, whatever the reuse policy (S11).
//
// Kernels that spin for tens of milliseconds keep a stream busy, so a missing dependency shows
// up as wrong data rather than passing by luck.
#include <soma/soma.h>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "gpu_test_util.cuh"

namespace {

using namespace soma_gpu_test;

constexpr std::uint64_t kSlowKernelNs = 50'000'000;  // 50 ms
constexpr std::size_t kWords = 4 * MiB;              // 16 MiB of 32-bit words

class S1_S2_GpuCrossStream : public gpu_test {};
class S1_S11_GpuSameStream : public gpu_test {};
class S11_GpuReusePolicies : public gpu_test {};
class S1_S12_GpuHostFunc : public gpu_test {};

TEST_F(S1_S2_GpuCrossStream, KernelWritesOnAEventThenBReadsChecksAndFrees) {
  unique_stream a;
  unique_stream b;
  unique_event written;
  void* words = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&words, kWords * 4, a));
  ASSERT_NE(words, nullptr);
  fill(a, words, kWords, 0xa11ce, kSlowKernelNs);  // slow writer on A
  CUDA_ASSERT_LAUNCHED();
  SOMA_ASSERT_OK(somaEventRecord(written, a));
  SOMA_ASSERT_OK(somaStreamWaitEvent(b, written, 0));

  void* counter = new_counter(b);
  check(b, words, kWords, 0xa11ce, counter);
  CUDA_ASSERT_LAUNCHED();
  std::vector<std::uint32_t> head(4096, 0);
  SOMA_ASSERT_OK(somaMemcpyAsync(head.data(), words, head.size() * 4, somaMemcpyDeviceToHost, b));
  SOMA_ASSERT_OK(somaFreeAsync(words, b)) << "free on B, after B's use, is legal (S2)";
  const unsigned long long mismatches = read_and_free_counter(b, counter);
  SOMA_ASSERT_OK(somaStreamSynchronize(a));

  EXPECT_EQ(mismatches, 0u) << "B read before A's kernel finished: the event did not order it";
  for (std::size_t i = 0; i < head.size(); ++i) {
    ASSERT_EQ(head[i], pattern_value(i, 0xa11ce)) << "word " << i << " copied back to the host";
  }
  EXPECT_EQ(pool_u64(default_pool(0), somaMemPoolAttrUsedMemCurrent), 0u);
}

TEST_F(S1_S2_GpuCrossStream, ManyRoundsOfAllocWriteOnAReadFreeOnB) {
  // Steady state of a producer/consumer pair: every round allocates on A, a kernel writes, B
  // waits on an event, checks and frees. Blocks freed on B come back to A only through S11.
  unique_stream a;
  unique_stream b;
  unique_event written;
  void* counter = new_counter(b);
  SOMA_ASSERT_OK(somaStreamSynchronize(b));
  constexpr std::size_t words = 256 * KiB;
  for (std::uint32_t round = 0; round < 64; ++round) {
    void* pointer = nullptr;
    SOMA_ASSERT_OK(somaMallocAsync(&pointer, words * 4, a));
    fill(a, pointer, words, round, round % 8 == 0 ? 2'000'000 : 0);
    SOMA_ASSERT_OK(somaEventRecord(written, a));
    SOMA_ASSERT_OK(somaStreamWaitEvent(b, written, 0));
    check(b, pointer, words, round, counter);
    SOMA_ASSERT_OK(somaFreeAsync(pointer, b));
  }
  CUDA_ASSERT_LAUNCHED();
  SOMA_ASSERT_OK(somaStreamSynchronize(a));
  EXPECT_EQ(read_and_free_counter(b, counter), 0u);
}

TEST_F(S1_S11_GpuSameStream, FreeThenAllocOfTheSameSizeReturnsTheSameAddress) {
  unique_stream stream;
  for (std::size_t bytes : {std::size_t{256}, 4 * KiB, 64 * KiB, 1 * MiB, 64 * MiB}) {
    void* first = nullptr;
    SOMA_ASSERT_OK(somaMallocAsync(&first, bytes, stream));
    fill(stream, first, bytes / 4, 1);
    CUDA_ASSERT_LAUNCHED();
    SOMA_ASSERT_OK(somaFreeAsync(first, stream));
    void* second = nullptr;
    SOMA_ASSERT_OK(somaMallocAsync(&second, bytes, stream));
    EXPECT_EQ(second, first) << bytes
                             << " bytes: reuse within one stream is always allowed "
                                "and needs no synchronize (S11)";
    // The new owner's work is ordered after the old owner's on the same stream.
    void* counter = new_counter(stream);
    fill(stream, second, bytes / 4, 2);
    check(stream, second, bytes / 4, 2, counter);
    CUDA_ASSERT_LAUNCHED();
    SOMA_ASSERT_OK(somaFreeAsync(second, stream));
    EXPECT_EQ(read_and_free_counter(stream, counter), 0u);
  }
}

// A block freed on A while a slow kernel on A still reads it is requested at once, with no
// dependency, on B. Whatever S11 policy serves the request (fresh memory, or reuse with an
// inserted wait), B's writes must not reach A's reader.
void expect_no_reuse_before_pending_reads(bool policies_on) {
  somaMemPool_t pool = default_pool(0);
  const int flag = policies_on ? 1 : 0;
  SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolReuseFollowEventDependencies, flag));
  SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolReuseAllowOpportunistic, flag));
  SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolReuseAllowInternalDependencies, flag));
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  {
    unique_stream a;
    unique_stream b;
    void* counter = new_counter(a);
    void* words = nullptr;
    SOMA_ASSERT_OK(somaMallocAsync(&words, kWords * 4, a));
    fill(a, words, kWords, 0xbeef);
    check(a, words, kWords, 0xbeef, counter, kSlowKernelNs);  // slow reader
    CUDA_ASSERT_LAUNCHED();
    SOMA_ASSERT_OK(somaFreeAsync(words, a));

    void* other = nullptr;
    SOMA_ASSERT_OK(somaMallocAsync(&other, kWords * 4, b));
    fill(b, other, kWords, 0xdead);  // overwrites if other == words too early
    CUDA_ASSERT_LAUNCHED();
    SOMA_ASSERT_OK(somaFreeAsync(other, b));
    SOMA_ASSERT_OK(somaStreamSynchronize(b));
    EXPECT_EQ(read_and_free_counter(a, counter), 0u)
        << "B wrote into memory A's kernel was still reading (reused: "
        << (other == words ? "yes" : "no") << ")";
    ::testing::Test::RecordProperty("reused_across_streams", other == words ? "yes" : "no");
  }
  SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolReuseFollowEventDependencies, 1));
  SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolReuseAllowOpportunistic, 1));
  SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolReuseAllowInternalDependencies, 1));
}

TEST_F(S11_GpuReusePolicies, AllocOnAnotherStreamWithoutDependencyNeverOverwritesPendingReads) {
  expect_no_reuse_before_pending_reads(/*policies_on=*/true);
}

TEST_F(S11_GpuReusePolicies, SameWithEveryReusePolicyOff) {
  expect_no_reuse_before_pending_reads(/*policies_on=*/false);
}

TEST_F(S11_GpuReusePolicies, ReuseThroughAnEventDependencyIsOrderedAfterTheFree) {
  // B reads slowly and frees; A waits on an event recorded after the free and allocates the
  // same size: soma may hand A the same block (follow event dependencies), and A's writes must
  // come after B's reads.
  somaMemPool_t pool = default_pool(0);
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  unique_stream a;
  unique_stream b;
  unique_event written;
  unique_event freed;
  void* counter = new_counter(b);
  void* words = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&words, kWords * 4, a));
  fill(a, words, kWords, 0x5eed);
  SOMA_ASSERT_OK(somaEventRecord(written, a));
  SOMA_ASSERT_OK(somaStreamWaitEvent(b, written, 0));
  check(b, words, kWords, 0x5eed, counter, kSlowKernelNs);  // slow reader on B
  CUDA_ASSERT_LAUNCHED();
  SOMA_ASSERT_OK(somaFreeAsync(words, b));
  SOMA_ASSERT_OK(somaEventRecord(freed, b));
  SOMA_ASSERT_OK(somaStreamWaitEvent(a, freed, 0));

  void* again = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&again, kWords * 4, a));
  fill(a, again, kWords, 0xf00d);
  CUDA_ASSERT_LAUNCHED();
  SOMA_ASSERT_OK(somaFreeAsync(again, a));
  SOMA_ASSERT_OK(somaStreamSynchronize(a));
  EXPECT_EQ(read_and_free_counter(b, counter), 0u)
      << "A's new allocation was written while B still read the old one (reused: "
      << (again == words ? "yes" : "no") << ")";
  RecordProperty("reused_through_event", again == words ? "yes" : "no");
}

// ---- host functions on a cuda stream ----------------------------------------------------------

struct host_log {
  std::atomic<int> next{0};
  int order[8] = {};
  int flag_seen = -1;
  volatile int* flag = nullptr;
};

void append(host_log* log, int id) { log->order[log->next.fetch_add(1)] = id; }

TEST_F(S1_S12_GpuHostFunc, HostFunctionsRunInStreamOrderAroundKernelsAndAllocations) {
  unique_stream stream;
  pinned_host<int> flag;
  host_log log;
  log.flag = flag.get();
  SOMA_ASSERT_OK(somaLaunchHostFunc(
      stream, [](void* data) { append(static_cast<host_log*>(data), 1); }, &log));
  spin_then_store_kernel<<<1, 1, 0, stream.native()>>>(flag.get(), 42, kSlowKernelNs);
  CUDA_ASSERT_LAUNCHED();
  SOMA_ASSERT_OK(somaLaunchHostFunc(
      stream,
      [](void* data) {
        auto* state = static_cast<host_log*>(data);
        state->flag_seen = *state->flag;  // the kernel before this function has finished
        append(state, 2);
      },
      &log));
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 1 * MiB, stream));
  SOMA_ASSERT_OK(somaMemsetAsync(pointer, 0x11, 1 * MiB, stream));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaLaunchHostFunc(
      stream, [](void* data) { append(static_cast<host_log*>(data), 3); }, &log));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream)) << "the synchronize waits for host functions";
  ASSERT_EQ(log.next.load(), 3);
  EXPECT_EQ(log.order[0], 1);
  EXPECT_EQ(log.order[1], 2);
  EXPECT_EQ(log.order[2], 3);
  EXPECT_EQ(log.flag_seen, 42) << "a host function ran before the kernel queued ahead of it";
}

TEST_F(S1_S12_GpuHostFunc, HostFunctionOnAnotherStreamWaitsForTheEvent) {
  unique_stream a;
  unique_stream b;
  unique_event done;
  pinned_host<int> flag;
  host_log log;
  log.flag = flag.get();
  spin_then_store_kernel<<<1, 1, 0, a.native()>>>(flag.get(), 7, kSlowKernelNs);
  CUDA_ASSERT_LAUNCHED();
  SOMA_ASSERT_OK(somaEventRecord(done, a));
  SOMA_ASSERT_OK(somaStreamWaitEvent(b, done, 0));
  SOMA_ASSERT_OK(somaLaunchHostFunc(
      b,
      [](void* data) {
        auto* state = static_cast<host_log*>(data);
        state->flag_seen = *state->flag;
        append(state, 1);
      },
      &log));
  SOMA_ASSERT_OK(somaStreamSynchronize(b));
  EXPECT_EQ(log.next.load(), 1);
  EXPECT_EQ(log.flag_seen, 7) << "the host function on B ran before A's kernel finished";
}

}  // namespace
