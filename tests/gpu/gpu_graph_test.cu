// Graphs with memory nodes on the GPU (S15): kernels inside soma graphs, through the captured
// native stream and through native child graphs; the footprint across relaunches; physical
// sharing between graphs on one stream and not on two; trim.
#include <soma/soma.h>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "gpu_test_util.cuh"

namespace {

using namespace soma_gpu_test;

class S15_GpuGraphs : public gpu_test {};

std::uint64_t graph_attr(somaGraphMemAttributeType attr) {
  std::uint64_t v = 0;
  EXPECT_EQ(somaDeviceGetGraphMemAttribute(0, attr, &v), somaSuccess) << last_message();
  return v;
}

// Captures on stream: `count` allocations of `bytes`, each filled by a kernel (slow by spin_ns)
// and freed before the next is made, the last one's words copied to out (pinned, may be null).
somaGraph_t capture_chain(somaStream_t stream, int count, std::size_t bytes, std::uint64_t spin_ns,
                          std::uint32_t* out, std::uint32_t seed) {
  EXPECT_EQ(somaStreamBeginCapture(stream, somaStreamCaptureModeGlobal), somaSuccess)
      << last_message();
  const std::size_t words = bytes / 4;
  for (int i = 0; i < count; ++i) {
    void* p = nullptr;
    EXPECT_EQ(somaMallocAsync(&p, bytes, stream), somaSuccess) << last_message();
    fill_pattern_kernel<<<grid_for(words, spin_ns), 256, 0, native_stream(stream)>>>(
        static_cast<std::uint32_t*>(p), words, seed + static_cast<std::uint32_t>(i), spin_ns);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    if (out != nullptr && i == count - 1)
      EXPECT_EQ(somaMemcpyAsync(out, p, bytes, somaMemcpyDeviceToHost, stream), somaSuccess)
          << last_message();
    EXPECT_EQ(somaFreeAsync(p, stream), somaSuccess) << last_message();
  }
  somaGraph_t graph = nullptr;
  EXPECT_EQ(somaStreamEndCapture(stream, &graph), somaSuccess) << last_message();
  return graph;
}

std::size_t mismatches(const std::uint32_t* words, std::size_t count, std::uint32_t seed) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < count; ++i) bad += words[i] != pattern_value(i, seed) ? 1 : 0;
  return bad;
}

TEST_F(S15_GpuGraphs, KernelWritesGraphMemoryAndACopyNodeReadsItBack) {
  unique_stream stream;
  constexpr std::size_t bytes = 4 * MiB;
  pinned_host<std::uint32_t> out(bytes / 4);
  somaGraph_t graph = capture_chain(stream, 1, bytes, 0, out.get(), 0x1234);
  ASSERT_NE(graph, nullptr);
  somaGraphExec_t exec = nullptr;
  SOMA_ASSERT_OK(somaGraphInstantiate(&exec, graph, 0));
  for (int launch = 0; launch < 3; ++launch) {
    std::memset(out.get(), 0, bytes);
    SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
    EXPECT_EQ(mismatches(out.get(), bytes / 4, 0x1234), 0u) << "launch " << launch;
  }
  SOMA_EXPECT_OK(somaGraphExecDestroy(exec));
  SOMA_EXPECT_OK(somaGraphDestroy(graph));
  SOMA_EXPECT_OK(somaDeviceGraphMemTrim(0));
}

TEST_F(S15_GpuGraphs, HundredRelaunchesKeepTheFootprintFlat) {
  unique_stream stream;
  somaGraph_t graph = capture_chain(stream, 8, 16 * MiB, 0, nullptr, 7);
  somaGraphExec_t exec = nullptr;
  SOMA_ASSERT_OK(somaGraphInstantiate(&exec, graph, 0));
  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  const std::uint64_t reserved = graph_attr(somaGraphMemAttrReservedMemCurrent);
  const std::uint64_t used = graph_attr(somaGraphMemAttrUsedMemCurrent);
  EXPECT_EQ(used, 16 * MiB) << "8 chained allocations share one allocation's memory";
  for (int i = 0; i < 100; ++i) SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(graph_attr(somaGraphMemAttrReservedMemCurrent), reserved);
  EXPECT_EQ(graph_attr(somaGraphMemAttrReservedMemHigh), reserved);
  SOMA_EXPECT_OK(somaGraphExecDestroy(exec));
  SOMA_EXPECT_OK(somaGraphDestroy(graph));
  SOMA_EXPECT_OK(somaDeviceGraphMemTrim(0));
}

TEST_F(S15_GpuGraphs, GraphsOnOneStreamSharePhysicalMemoryOnTwoStreamsTheyDoNot) {
  SOMA_ASSERT_OK(somaDeviceGraphMemTrim(0));
  unique_stream first;
  unique_stream second;
  constexpr std::size_t bytes = 64 * MiB;
  somaGraph_t a = capture_chain(first, 8, bytes, 0, nullptr, 1);
  somaGraph_t b = capture_chain(first, 8, bytes, 20'000'000, nullptr, 2);  // 20 ms per kernel
  somaGraphExec_t ea = nullptr;
  somaGraphExec_t eb = nullptr;
  SOMA_ASSERT_OK(somaGraphInstantiate(&ea, a, 0));
  SOMA_ASSERT_OK(somaGraphInstantiate(&eb, b, 0));
  SOMA_ASSERT_OK(somaGraphLaunch(ea, first));
  SOMA_ASSERT_OK(somaGraphLaunch(eb, first));
  SOMA_ASSERT_OK(somaStreamSynchronize(first));
  EXPECT_EQ(graph_attr(somaGraphMemAttrReservedMemCurrent), bytes) << "one stream: shared";
  EXPECT_EQ(graph_attr(somaGraphMemAttrUsedMemCurrent), bytes);

  std::uint64_t zero = 0;
  SOMA_ASSERT_OK(somaDeviceSetGraphMemAttribute(0, somaGraphMemAttrReservedMemHigh, &zero));
  SOMA_ASSERT_OK(somaGraphLaunch(eb, first));  // slow: still running when a starts
  SOMA_ASSERT_OK(somaGraphLaunch(ea, second));
  EXPECT_GE(graph_attr(somaGraphMemAttrReservedMemCurrent), 2 * bytes)
      << "two streams at once: apart";
  SOMA_ASSERT_OK(somaStreamSynchronize(first));
  SOMA_ASSERT_OK(somaStreamSynchronize(second));

  size_t committed_before = 0;
  SOMA_ASSERT_OK(somaDeviceGetCommittedBytes(&committed_before, 0));
  const memory_info before = driver_memory_info();
  SOMA_ASSERT_OK(somaDeviceGraphMemTrim(0));
  EXPECT_EQ(graph_attr(somaGraphMemAttrReservedMemCurrent), 0u) << "trim gives graph memory back";
  EXPECT_EQ(graph_attr(somaGraphMemAttrUsedMemCurrent), 0u);
  size_t committed_after = 0;
  SOMA_ASSERT_OK(somaDeviceGetCommittedBytes(&committed_after, 0));
  EXPECT_GE(committed_before - committed_after, 2 * bytes);
  const memory_info after = driver_memory_info();
  EXPECT_GE(after.free_bytes + meminfo_slack_bytes(), before.free_bytes + 2 * bytes)
      << "the driver sees the memory come back";
  SOMA_EXPECT_OK(somaGraphExecDestroy(ea));
  SOMA_EXPECT_OK(somaGraphExecDestroy(eb));
  SOMA_EXPECT_OK(somaGraphDestroy(a));
  SOMA_EXPECT_OK(somaGraphDestroy(b));
}

TEST_F(S15_GpuGraphs, CapturedGraphEqualsTheSameGraphBuiltExplicitly) {
  unique_stream stream;
  constexpr std::size_t bytes = 2 * MiB;
  constexpr std::size_t words = bytes / 4;
  pinned_host<std::uint32_t> captured_out(words);
  pinned_host<std::uint32_t> explicit_out(words);
  somaGraph_t captured = capture_chain(stream, 1, bytes, 0, captured_out.get(), 99);

  // The same work built node by node; the kernel comes in as a native child graph.
  somaGraph_t built = nullptr;
  SOMA_ASSERT_OK(somaGraphCreate(&built, 0));
  somaMemAllocNodeParams ap{};
  ap.poolProps.allocType = somaMemAllocationTypePinned;
  ap.poolProps.location.type = somaMemLocationTypeDevice;
  ap.poolProps.location.id = 0;
  ap.bytesize = bytes;
  somaGraphNode_t alloc = nullptr, kernel = nullptr, copy = nullptr, release = nullptr;
  SOMA_ASSERT_OK(somaGraphAddMemAllocNode(&alloc, built, nullptr, 0, &ap));
  cudaStream_t side = nullptr;
  CUDA_ASSERT_OK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  cudaGraph_t child = nullptr;
  CUDA_ASSERT_OK(cudaStreamBeginCapture(side, cudaStreamCaptureModeRelaxed));
  fill_pattern_kernel<<<grid_for(words), 256, 0, side>>>(static_cast<std::uint32_t*>(ap.dptr),
                                                         words, 99, 0);
  CUDA_ASSERT_OK(cudaStreamEndCapture(side, &child));
  SOMA_ASSERT_OK(somaGraphAddNativeChildGraphNode(&kernel, built, &alloc, 1, child));
  SOMA_ASSERT_OK(somaGraphAddMemcpyNode1D(&copy, built, &kernel, 1, explicit_out.get(), ap.dptr,
                                          bytes, somaMemcpyDeviceToHost));
  SOMA_ASSERT_OK(somaGraphAddMemFreeNode(&release, built, &copy, 1, ap.dptr));

  for (somaGraph_t g : {captured, built}) {
    somaGraphExec_t exec = nullptr;
    SOMA_ASSERT_OK(somaGraphInstantiate(&exec, g, 0));
    SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
    SOMA_EXPECT_OK(somaGraphExecDestroy(exec));
  }
  EXPECT_EQ(mismatches(captured_out.get(), words, 99), 0u);
  EXPECT_EQ(std::memcmp(captured_out.get(), explicit_out.get(), bytes), 0);
  CUDA_EXPECT_OK(cudaGraphDestroy(child));
  CUDA_EXPECT_OK(cudaStreamDestroy(side));
  SOMA_EXPECT_OK(somaGraphDestroy(captured));
  SOMA_EXPECT_OK(somaGraphDestroy(built));
  SOMA_EXPECT_OK(somaDeviceGraphMemTrim(0));
}

TEST_F(S15_GpuGraphs, UnfreedAllocationIsUsableAfterTheLaunchAndNotShared) {
  unique_stream stream;
  constexpr std::size_t bytes = 8 * MiB;
  constexpr std::size_t words = bytes / 4;
  // Graph a allocates and fills without freeing; graph b fills memory of its own on the same
  // stream. a's allocation must keep its bytes.
  SOMA_ASSERT_OK(somaStreamBeginCapture(stream, somaStreamCaptureModeGlobal));
  void* kept = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&kept, bytes, stream));
  fill_pattern_kernel<<<grid_for(words), 256, 0, native_stream(stream)>>>(
      static_cast<std::uint32_t*>(kept), words, 5, 0);
  somaGraph_t a = nullptr;
  SOMA_ASSERT_OK(somaStreamEndCapture(stream, &a));
  somaGraph_t b = capture_chain(stream, 1, bytes, 0, nullptr, 6);
  somaGraphExec_t ea = nullptr;
  somaGraphExec_t eb = nullptr;
  SOMA_ASSERT_OK(somaGraphInstantiate(&ea, a, 0));
  SOMA_ASSERT_OK(somaGraphInstantiate(&eb, b, 0));
  SOMA_ASSERT_OK(somaGraphLaunch(ea, stream));
  SOMA_ASSERT_OK(somaGraphLaunch(eb, stream));
  pinned_host<std::uint32_t> out(words);
  SOMA_ASSERT_OK(somaMemcpyAsync(out.get(), kept, bytes, somaMemcpyDeviceToHost, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(mismatches(out.get(), words, 5), 0u) << "the unfreed allocation kept its bytes";
  EXPECT_EQ(somaGraphLaunch(ea, stream), somaErrorInvalidValue) << "its allocation is still live";
  SOMA_ASSERT_OK(somaFreeAsync(kept, stream));
  SOMA_ASSERT_OK(somaGraphLaunch(ea, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  SOMA_ASSERT_OK(somaFreeAsync(kept, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  SOMA_EXPECT_OK(somaGraphExecDestroy(ea));
  SOMA_EXPECT_OK(somaGraphExecDestroy(eb));
  SOMA_EXPECT_OK(somaGraphDestroy(a));
  SOMA_EXPECT_OK(somaGraphDestroy(b));
  SOMA_EXPECT_OK(somaDeviceGraphMemTrim(0));
}

}  // namespace
