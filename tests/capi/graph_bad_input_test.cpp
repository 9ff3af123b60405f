// Refusals of the graph API (S15): bad handles and arguments, alloc node properties, free
// nodes of memory no alloc node made, a second executable of a graph with memory nodes,
// memset updates that leave their allocation, instantiate flags and graph memory attributes.
// After each refusal the graph and the pools still work.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "graph_test_util.hpp"
#include "soma_test_util.hpp"

namespace {

using namespace soma_test;

constexpr std::size_t kBytes = 4096;

// ---- S15_BadInput: refusals, after which the graph and the graph pool still work ----------

class S15_BadInput : public graph_test {
 protected:
  /// A complete graph (alloc, memset, copy to host, free) runs and reads back value.
  static void expect_graph_runs(somaStream_t stream, unsigned value) {
    host_buffer host(kBytes);
    unique_graph graph;
    somaGraphNode_t alloc = nullptr, set = nullptr, copy = nullptr, free = nullptr;
    void* p = nullptr;
    SOMA_ASSERT_OK(add_alloc(graph, {}, kBytes, &alloc, &p));
    SOMA_ASSERT_OK(add_memset(graph, {alloc}, p, value, kBytes, &set));
    SOMA_ASSERT_OK(add_copy(graph, {set}, host.data(), p, kBytes, &copy));
    SOMA_ASSERT_OK(add_free(graph, {copy}, p, &free));
    unique_graph_exec exec;
    SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), graph, 0));
    SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
    EXPECT_TRUE(host.all(static_cast<unsigned char>(value)));
  }
};

TEST_F(S15_BadInput, AllocationIsFreedByOneFreeNodeOnly) {
  unique_stream stream;
  unique_graph graph, other;
  somaGraphNode_t alloc = nullptr, free = nullptr, again = nullptr;
  void* p = nullptr;
  SOMA_ASSERT_OK(add_alloc(graph, {}, kBytes, &alloc, &p));
  SOMA_ASSERT_OK(add_free(graph, {alloc}, p, &free));
  EXPECT_EQ(add_free(graph, {free}, p, &again), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), hex(p))) << last_message();
  EXPECT_EQ(add_free(other, {}, p, &again), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), hex(p))) << last_message();
  unique_graph_exec exec;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), graph, 0));
  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S15_BadInput, FreeNodeOfMemoryNoAllocNodeMadeIsRefused) {
  unique_stream stream;
  void* pool_memory = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pool_memory, kBytes, stream));
  const pool_stats before = read_pool_stats(default_pool(0));
  host_buffer host(kBytes);
  unique_graph graph;
  somaGraphNode_t alloc = nullptr, node = nullptr;
  void* p = nullptr;
  SOMA_ASSERT_OK(add_alloc(graph, {}, 2 * kBytes, &alloc, &p));
  int on_stack = 0;
  void* const refused[] = {pool_memory, host.data(),
                           &on_stack,   reinterpret_cast<void*>(std::uintptr_t{0x1234}),
                           nullptr,     byte_offset(p, 64)};
  for (void* address : refused) {
    EXPECT_EQ(add_free(graph, {alloc}, address, &node), somaErrorInvalidValue) << address;
  }
  // The stream-ordered allocation is untouched and frees normally.
  EXPECT_EQ(read_pool_stats(default_pool(0)), before);
  SOMA_ASSERT_OK(somaFreeAsync(pool_memory, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  expect_pool_usable(default_pool(0), stream);
  ASSERT_NO_FATAL_FAILURE(expect_graph_runs(stream, 0x71));
}

TEST_F(S15_BadInput, GraphWithMemoryNodesHasOneExecutableAtATime) {
  unique_stream stream;
  unique_graph graph;
  somaGraphNode_t alloc = nullptr, free = nullptr;
  void* p = nullptr;
  SOMA_ASSERT_OK(add_alloc(graph, {}, kBytes, &alloc, &p));
  SOMA_ASSERT_OK(add_free(graph, {alloc}, p, &free));
  unique_graph_exec first, second;
  SOMA_ASSERT_OK(somaGraphInstantiate(first.out(), graph, 0));
  EXPECT_EQ(somaGraphInstantiate(second.out(), graph, 0), somaErrorNotSupported);
  EXPECT_EQ(second.get(), nullptr);
  SOMA_ASSERT_OK(somaGraphLaunch(first, stream)) << "the first is unharmed";
  first.reset();
  SOMA_ASSERT_OK(somaGraphInstantiate(second.out(), graph, 0));
  SOMA_ASSERT_OK(somaGraphLaunch(second, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));

  // Without memory nodes: any number.
  host_buffer host(kBytes);
  unique_graph plain;
  somaGraphNode_t set = nullptr;
  void* pool_memory = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pool_memory, kBytes, stream));
  SOMA_ASSERT_OK(add_memset(plain, {}, pool_memory, 0x19, kBytes, &set));
  unique_graph_exec a, b;
  SOMA_ASSERT_OK(somaGraphInstantiate(a.out(), plain, 0));
  SOMA_ASSERT_OK(somaGraphInstantiate(b.out(), plain, 0));
  SOMA_ASSERT_OK(somaGraphLaunch(a, stream));
  SOMA_ASSERT_OK(somaGraphLaunch(b, stream));
  SOMA_ASSERT_OK(somaMemcpyAsync(host.data(), pool_memory, kBytes, somaMemcpyDeviceToHost, stream));
  SOMA_ASSERT_OK(somaFreeAsync(pool_memory, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_TRUE(host.all(0x19));
}

TEST_F(S15_BadInput, MemsetNodeUpdateMayNotLeaveItsAllocation) {
  unique_stream stream;
  host_buffer host(kBytes);
  unique_graph graph, other;
  somaGraphNode_t alloc = nullptr, set = nullptr, copy = nullptr, free = nullptr;
  void* p = nullptr;
  SOMA_ASSERT_OK(add_alloc(graph, {}, kBytes, &alloc, &p));
  SOMA_ASSERT_OK(add_memset(graph, {alloc}, p, 0x01, kBytes, &set));
  SOMA_ASSERT_OK(add_copy(graph, {set}, host.data(), p, kBytes, &copy));
  SOMA_ASSERT_OK(add_free(graph, {copy}, p, &free));
  // Another graph's allocation and memset node.
  somaGraphNode_t other_alloc = nullptr, other_set = nullptr, other_free = nullptr;
  void* q = nullptr;
  SOMA_ASSERT_OK(add_alloc(other, {}, kBytes, &other_alloc, &q));
  SOMA_ASSERT_OK(add_memset(other, {other_alloc}, q, 0x02, kBytes, &other_set));
  SOMA_ASSERT_OK(add_free(other, {other_set}, q, &other_free));
  unique_graph_exec exec;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), graph, 0));

  const somaMemsetParams too_wide = memset_node_params(p, 0x09, kBytes + 1);
  const somaMemsetParams past_end = memset_node_params(byte_offset(p, kBytes - 8), 0x09, 16);
  const somaMemsetParams in_other = memset_node_params(q, 0x09, 16);
  const somaMemsetParams in_host = memset_node_params(host.data(), 0x09, 16);
  for (const somaMemsetParams& refused : {too_wide, past_end, in_other, in_host}) {
    EXPECT_EQ(somaGraphExecMemsetNodeSetParams(exec, set, &refused), somaErrorInvalidValue)
        << refused.dst << " +" << refused.width;
  }
  const somaMemsetParams element = [&] {
    somaMemsetParams params = memset_node_params(p, 0x09, 16);
    params.elementSize = 4;
    return params;
  }();
  EXPECT_EQ(somaGraphExecMemsetNodeSetParams(exec, set, &element), somaErrorNotSupported);
  EXPECT_EQ(somaGraphExecMemsetNodeSetParams(exec, other_set, &in_other), somaErrorInvalidValue)
      << "a node of another graph";
  EXPECT_EQ(somaGraphExecMemsetNodeSetParams(exec, copy, &in_other), somaErrorInvalidValue)
      << "not a memset node";
  EXPECT_EQ(somaGraphExecMemsetNodeSetParams(exec, set, nullptr), somaErrorInvalidValue);

  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_TRUE(host.all(0x01)) << "refused updates changed the node";

  // Inside the allocation: taken at the next launch.
  const somaMemsetParams inside = memset_node_params(byte_offset(p, 100), 0x0b, 200);
  SOMA_ASSERT_OK(somaGraphExecMemsetNodeSetParams(exec, set, &inside));
  std::memset(host.data(), 0xee, kBytes);
  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(host[100], 0x0b);
  EXPECT_EQ(host[299], 0x0b);
  EXPECT_EQ(host.count_not(0x0b), kBytes - 200) << "the other bytes are the allocation's, unset";
}

TEST_F(S15_BadInput, BadHandlesAndArgumentsAreRefused) {
  unique_stream stream;
  unique_graph graph, other;
  somaGraphNode_t alloc = nullptr, node = nullptr, foreign = nullptr;
  void* p = nullptr;
  SOMA_ASSERT_OK(add_alloc(graph, {}, kBytes, &alloc, &p));
  SOMA_ASSERT_OK(somaGraphAddEmptyNode(&foreign, other, nullptr, 0));

  EXPECT_EQ(somaGraphCreate(nullptr, 0), somaErrorInvalidValue);
  somaGraph_t flagged = nullptr;
  EXPECT_EQ(somaGraphCreate(&flagged, 1), somaErrorInvalidValue);
  EXPECT_EQ(somaGraphDestroy(nullptr), somaErrorInvalidValue);
  EXPECT_EQ(somaGraphAddEmptyNode(&node, nullptr, nullptr, 0), somaErrorInvalidValue);
  EXPECT_EQ(somaGraphAddEmptyNode(nullptr, graph, nullptr, 0), somaErrorInvalidValue);
  EXPECT_EQ(somaGraphAddEmptyNode(&node, graph, nullptr, 1), somaErrorInvalidValue)
      << "NULL dependencies with a count";
  EXPECT_EQ(somaGraphAddEmptyNode(&node, graph, &foreign, 1), somaErrorInvalidValue)
      << "a node of another graph";
  const somaGraphNode_t twice[] = {alloc, alloc};
  EXPECT_EQ(somaGraphAddEmptyNode(&node, graph, twice, 2), somaErrorInvalidValue);
  const somaGraphNode_t with_null[] = {alloc, nullptr};
  EXPECT_EQ(somaGraphAddEmptyNode(&node, graph, with_null, 2), somaErrorInvalidValue);
  EXPECT_EQ(somaGraphAddDependencies(graph, &foreign, &alloc, 1), somaErrorInvalidValue);
  EXPECT_EQ(somaGraphAddDependencies(graph, nullptr, &alloc, 1), somaErrorInvalidValue);
  EXPECT_EQ(somaGraphAddMemAllocNode(&node, graph, nullptr, 0, nullptr), somaErrorInvalidValue);
  EXPECT_EQ(somaGraphAddMemsetNode(&node, graph, &alloc, 1, nullptr), somaErrorInvalidValue);
  EXPECT_EQ(somaGraphAddHostNode(&node, graph, &alloc, 1, nullptr), somaErrorInvalidValue);
  const somaHostNodeParams no_function{nullptr, nullptr};
  EXPECT_EQ(somaGraphAddHostNode(&node, graph, &alloc, 1, &no_function), somaErrorInvalidValue);
  EXPECT_EQ(add_memset(graph, {alloc}, nullptr, 0, 16, &node), somaErrorInvalidValue);
  EXPECT_EQ(
      somaGraphAddMemcpyNode1D(&node, graph, &alloc, 1, p, p, 16, static_cast<somaMemcpyKind>(9)),
      somaErrorInvalidValue);
  EXPECT_EQ(somaGraphMemAllocNodeGetParams(foreign, nullptr), somaErrorInvalidValue);
  somaMemAllocNodeParams got{};
  EXPECT_EQ(somaGraphMemAllocNodeGetParams(foreign, &got), somaErrorInvalidValue)
      << "not an alloc node";
  void* freed = nullptr;
  EXPECT_EQ(somaGraphMemFreeNodeGetParams(alloc, &freed), somaErrorInvalidValue);
  unique_graph_exec exec;
  EXPECT_EQ(somaGraphInstantiate(nullptr, graph, 0), somaErrorInvalidValue);
  EXPECT_EQ(somaGraphInstantiate(exec.out(), nullptr, 0), somaErrorInvalidValue);
  EXPECT_EQ(somaGraphLaunch(nullptr, stream), somaErrorInvalidValue);
  EXPECT_EQ(somaGraphExecDestroy(nullptr), somaErrorInvalidValue);

  // Destroyed graph, node and executable.
  somaGraph_t doomed = other.release();
  SOMA_ASSERT_OK(somaGraphDestroy(doomed));
  EXPECT_EQ(somaGraphDestroy(doomed), somaErrorInvalidValue);
  EXPECT_EQ(somaGraphAddEmptyNode(&node, doomed, nullptr, 0), somaErrorInvalidValue);
  EXPECT_EQ(somaGraphAddEmptyNode(&node, graph, &foreign, 1), somaErrorInvalidValue)
      << "a node of a destroyed graph";
  somaGraphNode_t free = nullptr;
  SOMA_ASSERT_OK(add_free(graph, {alloc}, p, &free));
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), graph, 0));
  somaGraphExec_t gone = exec.release();
  SOMA_ASSERT_OK(somaGraphExecDestroy(gone));
  EXPECT_EQ(somaGraphLaunch(gone, stream), somaErrorInvalidValue);
  EXPECT_EQ(somaGraphExecDestroy(gone), somaErrorInvalidValue);

  // The graph still works.
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), graph, 0));
  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  ASSERT_NO_FATAL_FAILURE(expect_graph_runs(stream, 0x72));
}

TEST_F(S15_BadInput, AllocNodePropertiesAreChecked) {
  unique_stream stream;
  unique_graph graph;
  somaGraphNode_t node = nullptr;
  const std::uint64_t reserved = graph_memory(somaGraphMemAttrReservedMemCurrent);
  auto add = [&](somaMemAllocNodeParams params) {
    params.dptr = reinterpret_cast<void*>(std::uintptr_t{1});
    const somaError_t status = somaGraphAddMemAllocNode(&node, graph, nullptr, 0, &params);
    if (status != somaSuccess) {
      EXPECT_EQ(params.dptr, reinterpret_cast<void*>(std::uintptr_t{1})) << "dptr set on failure";
    }
    return status;
  };
  somaMemAllocNodeParams params = alloc_node_params(0);
  EXPECT_EQ(add(params), somaErrorInvalidValue) << "bytesize 0";
  params = alloc_node_params(kBytes);
  params.poolProps.allocType = somaMemAllocationTypeInvalid;
  EXPECT_EQ(add(params), somaErrorInvalidValue);
  params.poolProps.allocType = somaMemAllocationTypeManaged;
  EXPECT_EQ(add(params), somaErrorInvalidValue);
  params = alloc_node_params(kBytes);
  params.poolProps.location.type = somaMemLocationTypeHost;
  EXPECT_EQ(add(params), somaErrorInvalidValue);
  params.poolProps.location.type = somaMemLocationTypeInvalid;
  EXPECT_EQ(add(params), somaErrorInvalidValue);
  EXPECT_EQ(add(alloc_node_params(kBytes, device_count())), somaErrorInvalidDevice);
  EXPECT_EQ(add(alloc_node_params(kBytes, -1)), somaErrorInvalidDevice);
  params = alloc_node_params(kBytes);
  params.poolProps.handleTypes = somaMemHandleTypePosixFileDescriptor;
  EXPECT_EQ(add(params), somaErrorInvalidValue);
  params = alloc_node_params(kBytes);
  params.poolProps.maxSize = kBytes;
  EXPECT_EQ(add(params), somaErrorInvalidValue);
  params = alloc_node_params(kBytes);
  params.poolProps.reserved[3] = 1;
  EXPECT_EQ(add(params), somaErrorInvalidValue);
  const somaMemAccessDesc bad_device{{somaMemLocationTypeDevice, device_count() + 3},
                                     somaMemAccessFlagsProtReadWrite};
  params = alloc_node_params(kBytes);
  params.accessDescs = &bad_device;
  params.accessDescCount = 1;
  EXPECT_EQ(add(params), somaErrorInvalidDevice);
  params.accessDescs = nullptr;
  EXPECT_EQ(add(params), somaErrorInvalidValue) << "NULL access list with a count";

  const somaMemsetParams wide = [] {
    somaMemsetParams m = memset_node_params(nullptr, 0, 16);
    m.elementSize = 2;
    return m;
  }();
  void* p = nullptr;
  somaGraphNode_t alloc = nullptr;
  SOMA_ASSERT_OK(add_alloc(graph, {}, kBytes, &alloc, &p));
  somaMemsetParams element = wide;
  element.dst = p;
  EXPECT_EQ(somaGraphAddMemsetNode(&node, graph, &alloc, 1, &element), somaErrorNotSupported);
  somaMemsetParams rows = memset_node_params(p, 0, 16);
  rows.height = 2;
  rows.pitch = 16;
  EXPECT_EQ(somaGraphAddMemsetNode(&node, graph, &alloc, 1, &rows), somaErrorNotSupported);

  EXPECT_EQ(graph_memory(somaGraphMemAttrReservedMemCurrent), reserved);
  somaGraphNode_t free = nullptr;
  SOMA_ASSERT_OK(add_free(graph, {alloc}, p, &free));
  unique_graph_exec exec;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), graph, 0));
  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  ASSERT_NO_FATAL_FAILURE(expect_graph_runs(stream, 0x73));
}

TEST_F(S15_BadInput, InstantiateFlagsAndGraphMemoryAttributesAreChecked) {
  unique_stream stream;
  unique_graph graph;
  somaGraphNode_t alloc = nullptr, free = nullptr;
  void* p = nullptr;
  SOMA_ASSERT_OK(add_alloc(graph, {}, kBytes, &alloc, &p));
  SOMA_ASSERT_OK(add_free(graph, {alloc}, p, &free));
  unique_graph_exec exec;
  EXPECT_EQ(somaGraphInstantiate(exec.out(), graph, somaGraphInstantiateFlagDeviceLaunch),
            somaErrorNotSupported);
  EXPECT_EQ(somaGraphInstantiate(exec.out(), graph, 64), somaErrorInvalidValue);
  // A refused instantiation leaves no executable behind: the graph may be instantiated.
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), graph, somaGraphInstantiateFlagUseNodePriority));
  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));

  std::uint64_t value = 0;
  for (auto attr : {somaGraphMemAttrUsedMemCurrent, somaGraphMemAttrReservedMemCurrent}) {
    EXPECT_EQ(somaDeviceSetGraphMemAttribute(0, attr, &value), somaErrorInvalidValue) << attr;
  }
  value = 1;
  for (auto attr : {somaGraphMemAttrUsedMemHigh, somaGraphMemAttrReservedMemHigh}) {
    EXPECT_EQ(somaDeviceSetGraphMemAttribute(0, attr, &value), somaErrorInvalidValue) << attr;
  }
  EXPECT_EQ(somaDeviceSetGraphMemAttribute(0, somaGraphMemAttrUsedMemHigh, nullptr),
            somaErrorInvalidValue);
  EXPECT_EQ(somaDeviceGetGraphMemAttribute(0, somaGraphMemAttrUsedMemHigh, nullptr),
            somaErrorInvalidValue);
  EXPECT_EQ(somaDeviceGetGraphMemAttribute(0, static_cast<somaGraphMemAttributeType>(7), &value),
            somaErrorInvalidValue);
  EXPECT_EQ(somaDeviceGetGraphMemAttribute(device_count(), somaGraphMemAttrUsedMemHigh, &value),
            somaErrorInvalidDevice);
  EXPECT_EQ(somaDeviceGraphMemTrim(device_count()), somaErrorInvalidDevice);
  EXPECT_GT(graph_memory(somaGraphMemAttrReservedMemHigh), 0u) << "the refusals reset nothing";
}

TEST_F(S15_BadInput, LaunchIntoAStreamOfAnotherDeviceIsRefused) {
  if (!have_devices(2)) GTEST_SKIP() << "needs two devices";
  unique_stream stream;  // device 0
  unique_graph graph;
  somaGraphNode_t alloc = nullptr, free = nullptr;
  somaMemAllocNodeParams params = alloc_node_params(kBytes, 1);
  SOMA_ASSERT_OK(somaGraphAddMemAllocNode(&alloc, graph, nullptr, 0, &params));
  SOMA_ASSERT_OK(add_free(graph, {alloc}, params.dptr, &free));
  unique_graph_exec exec;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), graph, 0));
  EXPECT_EQ(somaGraphLaunch(exec, stream), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "device 1")) << last_message();
  SOMA_ASSERT_OK(somaSetDevice(1));
  unique_stream on_one;
  SOMA_ASSERT_OK(somaGraphLaunch(exec, on_one));
  SOMA_ASSERT_OK(somaStreamSynchronize(on_one));
}

}  // namespace
