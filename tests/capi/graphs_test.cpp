// Graphs with memory nodes (S15): explicit graphs and stream capture, on both backends.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "soma_test_util.hpp"

namespace {

using namespace soma_test;

class S15_Graphs : public capi_test {};

somaMemAllocNodeParams alloc_params(std::size_t bytes, int device = 0) {
  somaMemAllocNodeParams p{};
  p.poolProps.allocType = somaMemAllocationTypePinned;
  p.poolProps.location.type = somaMemLocationTypeDevice;
  p.poolProps.location.id = device;
  p.bytesize = bytes;
  return p;
}

somaMemsetParams memset_params(void* dst, unsigned value, std::size_t bytes) {
  somaMemsetParams p{};
  p.dst = dst;
  p.value = value;
  p.elementSize = 1;
  p.width = bytes;
  p.height = 1;
  return p;
}

std::uint64_t graph_attr(somaGraphMemAttributeType attr) {
  std::uint64_t v = 0;
  EXPECT_EQ(somaDeviceGetGraphMemAttribute(0, attr, &v), somaSuccess);
  return v;
}

TEST_F(S15_Graphs, AllocMemsetCopyFreeRunsAndKeepsItsAddress) {
  unique_stream stream;
  void* host = nullptr;
  SOMA_ASSERT_OK(somaMallocHost(&host, 4096));
  std::memset(host, 0, 4096);
  somaGraph_t graph = nullptr;
  SOMA_ASSERT_OK(somaGraphCreate(&graph, 0));
  somaMemAllocNodeParams ap = alloc_params(4096);
  somaGraphNode_t alloc = nullptr, set = nullptr, copy = nullptr, free_node = nullptr;
  SOMA_ASSERT_OK(somaGraphAddMemAllocNode(&alloc, graph, nullptr, 0, &ap));
  ASSERT_NE(ap.dptr, nullptr);
  somaMemsetParams mp = memset_params(ap.dptr, 0x5a, 4096);
  SOMA_ASSERT_OK(somaGraphAddMemsetNode(&set, graph, &alloc, 1, &mp));
  SOMA_ASSERT_OK(somaGraphAddMemcpyNode1D(&copy, graph, &set, 1, host, ap.dptr, 4096, somaMemcpyDefault));
  SOMA_ASSERT_OK(somaGraphAddMemFreeNode(&free_node, graph, &copy, 1, ap.dptr));
  somaGraphExec_t exec = nullptr;
  SOMA_ASSERT_OK(somaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) {
    std::memset(host, 0, 4096);
    SOMA_ASSERT_OK(somaGraphLaunch(exec, stream.get()));
    SOMA_ASSERT_OK(somaStreamSynchronize(stream.get()));
    EXPECT_EQ(static_cast<unsigned char*>(host)[4095], 0x5a);
  }
  EXPECT_GT(graph_attr(somaGraphMemAttrReservedMemCurrent), 0u);
  SOMA_ASSERT_OK(somaGraphExecDestroy(exec));
  SOMA_ASSERT_OK(somaGraphDestroy(graph));
  SOMA_ASSERT_OK(somaDeviceGraphMemTrim(0));
  EXPECT_EQ(graph_attr(somaGraphMemAttrReservedMemCurrent), 0u);
  SOMA_ASSERT_OK(somaFreeHost(host));
}

TEST_F(S15_Graphs, CaptureMakesNodes) {
  unique_stream stream;
  SOMA_ASSERT_OK(somaStreamBeginCapture(stream.get(), somaStreamCaptureModeGlobal));
  somaStreamCaptureStatus st{};
  SOMA_ASSERT_OK(somaStreamIsCapturing(stream.get(), &st));
  EXPECT_EQ(st, somaStreamCaptureStatusActive);
  void* p = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&p, 1 << 20, stream.get()));
  SOMA_ASSERT_OK(somaMemsetAsync(p, 7, 1 << 20, stream.get()));
  SOMA_ASSERT_OK(somaFreeAsync(p, stream.get()));
  somaGraph_t graph = nullptr;
  SOMA_ASSERT_OK(somaStreamEndCapture(stream.get(), &graph));
  somaGraphExec_t exec = nullptr;
  SOMA_ASSERT_OK(somaGraphInstantiate(&exec, graph, 0));
  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream.get()));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream.get()));
  SOMA_ASSERT_OK(somaGraphExecDestroy(exec));
  SOMA_ASSERT_OK(somaGraphDestroy(graph));
}

}  // namespace
