// Graphs with memory nodes (S15), built explicitly: the lifetime of graph allocations, the
// relaunch rules and the ordering rule. Refusals: graph_bad_input_test.cpp; the device graph
// pool: graph_pool_test.cpp; stream capture and event nodes: graph_capture_test.cpp. Graph
// memory is touched by memset and copy nodes and stream operations only, so every test runs on
// both backends.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "graph_test_util.hpp"
#include "soma_test_util.hpp"

namespace {

using namespace soma_test;

constexpr std::size_t kBytes = 4096;

// ---- S15_MemoryNodes: lifetime ----------------------------------------------------------

class S15_MemoryNodes : public graph_test {};

TEST_F(S15_MemoryNodes, AllocNodeAddressIsGivenAtOnceAndKeptOnEveryLaunch) {
  unique_stream stream;
  host_buffer host(kBytes);
  unique_graph graph;
  somaGraphNode_t alloc = nullptr, low = nullptr, high = nullptr, copy = nullptr, free = nullptr;
  void* p = nullptr;
  SOMA_ASSERT_OK(add_alloc(graph, {}, kBytes, &alloc, &p));
  ASSERT_NE(p, nullptr) << "the address must be returned when the node is added";
  somaMemAllocNodeParams got{};
  SOMA_ASSERT_OK(somaGraphMemAllocNodeGetParams(alloc, &got));
  EXPECT_EQ(got.dptr, p);
  EXPECT_EQ(got.bytesize, kBytes);
  EXPECT_EQ(got.poolProps.location.id, 0);
  // Two memsets of the two halves, both read back by one copy node into host memory.
  SOMA_ASSERT_OK(add_memset(graph, {alloc}, p, 0x11, kBytes / 2, &low));
  SOMA_ASSERT_OK(add_memset(graph, {alloc}, byte_offset(p, kBytes / 2), 0x22, kBytes / 2, &high));
  SOMA_ASSERT_OK(add_copy(graph, {low, high}, host.data(), p, kBytes, &copy));
  SOMA_ASSERT_OK(add_free(graph, {copy}, p, &free));
  void* freed = nullptr;
  SOMA_ASSERT_OK(somaGraphMemFreeNodeGetParams(free, &freed));
  EXPECT_EQ(freed, p);

  unique_graph_exec exec;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), graph, 0));
  for (int launch = 0; launch < 3; ++launch) {
    std::memset(host.data(), 0, kBytes);
    SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
    EXPECT_EQ(host.count_not(0x11), kBytes / 2) << "launch " << launch;
    EXPECT_EQ(host[0], 0x11);
    EXPECT_EQ(host[kBytes / 2 - 1], 0x11);
    EXPECT_EQ(host[kBytes / 2], 0x22);
    EXPECT_EQ(host[kBytes - 1], 0x22);
    SOMA_ASSERT_OK(somaGraphMemAllocNodeGetParams(alloc, &got));
    EXPECT_EQ(got.dptr, p) << "launch " << launch;
  }
  // The graph frees the allocation: after the launch it is not live.
  somaPointerAttributes attributes{};
  SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, p));
  EXPECT_EQ(attributes.isLiveAllocation, 0);
}

// Graph alloc + memset 0x33, no free node.
struct unfreed_graph {
  unique_graph graph;
  void* p = nullptr;
  somaGraphNode_t alloc = nullptr, set = nullptr;
  void build(std::size_t bytes, unsigned value) {
    SOMA_ASSERT_OK(add_alloc(graph, {}, bytes, &alloc, &p));
    SOMA_ASSERT_OK(add_memset(graph, {alloc}, p, value, bytes, &set));
  }
};

TEST_F(S15_MemoryNodes, AllocationTheGraphDoesNotFreeIsLiveAfterTheLaunch) {
  unique_stream stream;
  unfreed_graph g;
  ASSERT_NO_FATAL_FAILURE(g.build(kBytes, 0x33));
  unique_graph_exec exec;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), g.graph, 0));
  somaPointerAttributes attributes{};
  SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, g.p));
  EXPECT_EQ(attributes.isLiveAllocation, 0) << "not live before any launch";

  for (int round = 0; round < 2; ++round) {
    SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
    attributes = {};
    SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, byte_offset(g.p, 100)));
    EXPECT_EQ(attributes.isLiveAllocation, 1);
    EXPECT_EQ(attributes.type, somaMemoryTypeDevice);
    EXPECT_EQ(attributes.device, 0);
    EXPECT_EQ(attributes.base, g.p);
    EXPECT_EQ(attributes.size, kBytes);
    // Stream operations ordered after the launch use it, and somaFreeAsync ends it.
    host_buffer host(kBytes);
    SOMA_ASSERT_OK(somaMemsetAsync(byte_offset(g.p, 100), 0x44, 100, stream));
    SOMA_ASSERT_OK(somaMemcpyAsync(host.data(), g.p, kBytes, somaMemcpyDeviceToHost, stream));
    SOMA_ASSERT_OK(somaFreeAsync(g.p, stream));
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
    EXPECT_EQ(host.count_not(0x33), 100u) << "round " << round;
    EXPECT_EQ(host[99], 0x33);
    EXPECT_EQ(host[100], 0x44);
    EXPECT_EQ(host[199], 0x44);
    EXPECT_EQ(host[200], 0x33);
    attributes = {};
    SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, g.p));
    EXPECT_EQ(attributes.isLiveAllocation, 0) << "freed by somaFreeAsync";
    EXPECT_EQ(somaFreeAsync(g.p, stream), somaErrorInvalidValue) << "freed twice";
  }
}

TEST_F(S15_MemoryNodes, RelaunchWithTheLastAllocationUnfreedIsRefusedUntilItIsFreed) {
  unique_stream stream;
  unfreed_graph g;
  ASSERT_NO_FATAL_FAILURE(g.build(kBytes, 0x33));
  unique_graph_exec exec;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), g.graph, 0));
  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
  EXPECT_EQ(somaGraphLaunch(exec, stream), somaErrorInvalidValue);
  const std::string message = last_message();
  EXPECT_TRUE(contains(message, hex(g.p))) << message;
  EXPECT_TRUE(contains(message, "unfreed")) << message;
  // Still live and unchanged by the refused launch.
  host_buffer host = read_back(g.p, kBytes, stream);
  EXPECT_TRUE(host.all(0x33));
  SOMA_ASSERT_OK(somaFreeAsync(g.p, stream));
  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
  SOMA_ASSERT_OK(somaFreeAsync(g.p, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S15_MemoryNodes, AutoFreeOnLaunchRelaunchesAtTheSameAddress) {
  unique_stream stream;
  unfreed_graph g;
  ASSERT_NO_FATAL_FAILURE(g.build(kBytes, 0x33));
  unique_graph_exec exec;
  SOMA_ASSERT_OK(
      somaGraphInstantiate(exec.out(), g.graph, somaGraphInstantiateFlagAutoFreeOnLaunch));
  for (int launch = 0; launch < 3; ++launch) {
    SOMA_ASSERT_OK(somaGraphLaunch(exec, stream)) << "launch " << launch;
    // Spoil the bytes after the launch: the next launch's memset must write them again.
    host_buffer host = read_back(g.p, kBytes, stream);
    EXPECT_TRUE(host.all(0x33)) << "launch " << launch;
    SOMA_ASSERT_OK(somaMemsetAsync(g.p, 0, kBytes, stream));
    somaPointerAttributes attributes{};
    SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, g.p));
    EXPECT_EQ(attributes.isLiveAllocation, 1);
    EXPECT_EQ(attributes.base, g.p);
  }
  SOMA_ASSERT_OK(somaFreeAsync(g.p, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S15_MemoryNodes, UploadMapsForTheStreamAndTheLaunchRuns) {
  unique_stream stream;
  unfreed_graph g;
  ASSERT_NO_FATAL_FAILURE(g.build(kBytes, 0x44));
  unique_graph_exec exec;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), g.graph, somaGraphInstantiateFlagUpload));
  SOMA_ASSERT_OK(somaGraphUpload(exec, stream));
  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
  host_buffer host = read_back(g.p, kBytes, stream);
  EXPECT_TRUE(host.all(0x44));
  EXPECT_EQ(somaGraphUpload(nullptr, stream), somaErrorInvalidValue);
  SOMA_ASSERT_OK(somaGraphUpload(exec, stream)) << "an upload while an allocation is live keeps it";
  SOMA_ASSERT_OK(somaFreeAsync(g.p, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S15_MemoryNodes, DestroyingTheGraphKeepsItsExecutableAndLiveAllocations) {
  unique_stream stream;
  unfreed_graph g;
  ASSERT_NO_FATAL_FAILURE(g.build(kBytes, 0x5e));
  unique_graph_exec exec;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), g.graph, 0));
  void* p = g.p;
  g.graph.reset();
  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
  exec.reset();
  host_buffer host = read_back(p, kBytes, stream);
  EXPECT_TRUE(host.all(0x5e));
  somaPointerAttributes attributes{};
  SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, p));
  EXPECT_EQ(attributes.isLiveAllocation, 1);
  SOMA_ASSERT_OK(somaFreeAsync(p, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S15_MemoryNodes, AnotherGraphMayFreeAnAllocationItsGraphLeavesLive) {
  unique_stream stream;
  unfreed_graph g;
  ASSERT_NO_FATAL_FAILURE(g.build(kBytes, 0x3d));
  unique_graph freeing;
  somaGraphNode_t free = nullptr;
  SOMA_ASSERT_OK(add_free(freeing, {}, g.p, &free));
  somaGraphNode_t own_free = nullptr;
  EXPECT_EQ(add_free(g.graph, {g.set}, g.p, &own_free), somaErrorInvalidValue)
      << "freed in two graphs";
  unique_graph_exec exec, exec_free;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), g.graph, 0));
  SOMA_ASSERT_OK(somaGraphInstantiate(exec_free.out(), freeing, 0));
  EXPECT_EQ(somaGraphLaunch(exec_free, stream), somaErrorInvalidValue)
      << "the allocation is not live before its graph ran";
  for (int round = 0; round < 2; ++round) {
    SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
    host_buffer host = read_back(g.p, kBytes, stream);
    EXPECT_TRUE(host.all(0x3d));
    SOMA_ASSERT_OK(somaGraphLaunch(exec_free, stream));
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
    somaPointerAttributes attributes{};
    SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, g.p));
    EXPECT_EQ(attributes.isLiveAllocation, 0) << "round " << round;
  }
}

// ---- S15_Ordering: every node touching graph memory lies between alloc and free ----------

class S15_Ordering : public graph_test {};

// The three kinds of node that touch graph memory, made at `after`.
enum class toucher { memset, copy, host_with_access };

somaError_t add_toucher(toucher kind, somaGraph_t graph, const node_list& after, void* p,
                        void* host, somaGraphNode_t* node) {
  switch (kind) {
    case toucher::memset:
      return add_memset(graph, after, p, 0x5a, kBytes, node);
    case toucher::copy:
      return add_copy(graph, after, host, p, kBytes, node);
    case toucher::host_with_access: {
      const somaHostNodeParams params{[](void*) {}, nullptr};
      const somaHostAccess access{p, kBytes, somaMemAccessFlagsProtReadWrite};
      return somaGraphAddHostNodeWithAccess(node, graph, after.data(), after.size(), &params,
                                            &access, 1);
    }
  }
  return somaErrorUnknown;
}

const char* toucher_name(toucher kind) {
  switch (kind) {
    case toucher::memset:
      return "memset node";
    case toucher::copy:
      return "memcpy node";
    case toucher::host_with_access:
      return "host node";
  }
  return "?";
}

TEST_F(S15_Ordering, NodeNotReachedFromItsAllocNodeFailsAtInstantiate) {
  unique_stream stream;
  host_buffer host(kBytes);
  for (toucher kind : {toucher::memset, toucher::copy, toucher::host_with_access}) {
    SCOPED_TRACE(toucher_name(kind));
    unique_graph graph;
    somaGraphNode_t alloc = nullptr, user = nullptr, free = nullptr;
    void* p = nullptr;
    SOMA_ASSERT_OK(add_alloc(graph, {}, kBytes, &alloc, &p));
    SOMA_ASSERT_OK(add_toucher(kind, graph, {}, p, host.data(), &user));
    SOMA_ASSERT_OK(add_free(graph, {alloc, user}, p, &free));
    unique_graph_exec exec;
    EXPECT_EQ(somaGraphInstantiate(exec.out(), graph, 0), somaErrorInvalidValue);
    const std::string message = last_message();
    EXPECT_TRUE(contains(message, "alloc node")) << message;
    EXPECT_TRUE(contains(message, toucher_name(kind))) << message;
    EXPECT_EQ(exec.get(), nullptr);
    // The edge makes the graph valid.
    SOMA_ASSERT_OK(somaGraphAddDependencies(graph, &alloc, &user, 1));
    SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), graph, 0));
    SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  }
}

TEST_F(S15_Ordering, NodeAfterTheFreeNodeIsRefusedWhenAdded) {
  unique_stream stream;
  host_buffer host(kBytes);
  for (toucher kind : {toucher::memset, toucher::copy, toucher::host_with_access}) {
    SCOPED_TRACE(toucher_name(kind));
    unique_graph graph;
    somaGraphNode_t alloc = nullptr, free = nullptr, empty = nullptr, user = nullptr;
    void* p = nullptr;
    SOMA_ASSERT_OK(add_alloc(graph, {}, kBytes, &alloc, &p));
    SOMA_ASSERT_OK(add_free(graph, {alloc}, p, &free));
    EXPECT_EQ(add_toucher(kind, graph, {free}, p, host.data(), &user), somaErrorInvalidValue);
    EXPECT_TRUE(contains(last_message(), "free node")) << last_message();
    // Through an empty node too: the path counts, not the direct edge.
    SOMA_ASSERT_OK(somaGraphAddEmptyNode(&empty, graph, &free, 1));
    EXPECT_EQ(add_toucher(kind, graph, {empty}, p, host.data(), &user), somaErrorInvalidValue);
    // The graph is as it was: it instantiates and runs.
    unique_graph_exec exec;
    SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), graph, 0));
    SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  }
}

TEST_F(S15_Ordering, NodeNotReachingTheFreeNodeFailsAtInstantiate) {
  unique_stream stream;
  host_buffer host(kBytes);
  for (toucher kind : {toucher::memset, toucher::copy, toucher::host_with_access}) {
    SCOPED_TRACE(toucher_name(kind));
    unique_graph graph;
    somaGraphNode_t alloc = nullptr, user = nullptr, free = nullptr;
    void* p = nullptr;
    SOMA_ASSERT_OK(add_alloc(graph, {}, kBytes, &alloc, &p));
    SOMA_ASSERT_OK(add_free(graph, {alloc}, p, &free));
    SOMA_ASSERT_OK(add_toucher(kind, graph, {alloc}, p, host.data(), &user));
    unique_graph_exec exec;
    EXPECT_EQ(somaGraphInstantiate(exec.out(), graph, 0), somaErrorInvalidValue);
    const std::string message = last_message();
    EXPECT_TRUE(contains(message, "free node")) << message;
    EXPECT_TRUE(contains(message, toucher_name(kind))) << message;
    SOMA_ASSERT_OK(somaGraphAddDependencies(graph, &user, &free, 1));
    SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), graph, 0));
    SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  }
}

TEST_F(S15_Ordering, RangeOutsideTheAllocationIsRefusedWhenAdded) {
  unique_stream stream;
  host_buffer host(2 * kBytes);
  unique_graph graph;
  somaGraphNode_t alloc = nullptr, node = nullptr;
  void* p = nullptr;
  // 1000 bytes: the granule behind them is graph address space, but not the allocation's.
  constexpr std::size_t bytes = 1000;
  SOMA_ASSERT_OK(add_alloc(graph, {}, bytes, &alloc, &p));
  EXPECT_EQ(add_memset(graph, {alloc}, p, 1, bytes + 1, &node), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), hex(p))) << last_message();
  EXPECT_EQ(add_memset(graph, {alloc}, byte_offset(p, 500), 1, 501, &node), somaErrorInvalidValue);
  EXPECT_EQ(add_memset(graph, {alloc}, byte_offset(p, bytes), 1, 1, &node), somaErrorInvalidValue);
  EXPECT_EQ(add_memset(graph, {alloc}, byte_offset(p, 2000), 1, 10, &node), somaErrorInvalidValue)
      << "a range past the allocation's end, inside its granule";
  EXPECT_EQ(add_copy(graph, {alloc}, host.data(), p, bytes + 1, &node), somaErrorInvalidValue);
  EXPECT_EQ(add_copy(graph, {alloc}, host.data(), byte_offset(p, 2000), 10, &node),
            somaErrorInvalidValue);
  EXPECT_EQ(add_copy(graph, {alloc}, byte_offset(p, 2000), host.data(), 10, &node),
            somaErrorInvalidValue);
  // Exactly the allocation is accepted and runs.
  somaGraphNode_t set = nullptr, copy = nullptr, free = nullptr;
  SOMA_ASSERT_OK(add_memset(graph, {alloc}, p, 0x42, bytes, &set));
  SOMA_ASSERT_OK(add_copy(graph, {set}, host.data(), p, bytes, &copy));
  SOMA_ASSERT_OK(add_free(graph, {copy}, p, &free));
  unique_graph_exec exec;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), graph, 0));
  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(host.count_not(0x42), host.size() - bytes);
  EXPECT_EQ(host[bytes - 1], 0x42);
  EXPECT_EQ(host[bytes], 0);
}

TEST_F(S15_Ordering, FreeNodeNotAfterItsAllocNodeFailsAtInstantiate) {
  unique_stream stream;
  unique_graph graph;
  somaGraphNode_t alloc = nullptr, free = nullptr;
  void* p = nullptr;
  SOMA_ASSERT_OK(add_alloc(graph, {}, kBytes, &alloc, &p));
  SOMA_ASSERT_OK(add_free(graph, {}, p, &free));
  unique_graph_exec exec;
  EXPECT_EQ(somaGraphInstantiate(exec.out(), graph, 0), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "free node")) << last_message();
  EXPECT_TRUE(contains(last_message(), "alloc node")) << last_message();
  SOMA_ASSERT_OK(somaGraphAddDependencies(graph, &alloc, &free, 1));
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), graph, 0));
  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream)) << "the graph frees what it allocates";
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S15_Ordering, DependenciesThatCloseACycleAreRefusedAndNoneIsAdded) {
  unique_stream stream;
  unique_graph graph;
  somaGraphNode_t a = nullptr, b = nullptr, c = nullptr, d = nullptr, e = nullptr;
  SOMA_ASSERT_OK(somaGraphAddEmptyNode(&a, graph, nullptr, 0));
  SOMA_ASSERT_OK(somaGraphAddEmptyNode(&b, graph, &a, 1));
  SOMA_ASSERT_OK(somaGraphAddEmptyNode(&c, graph, &b, 1));
  SOMA_ASSERT_OK(somaGraphAddEmptyNode(&d, graph, nullptr, 0));
  SOMA_ASSERT_OK(somaGraphAddEmptyNode(&e, graph, nullptr, 0));
  EXPECT_EQ(somaGraphAddDependencies(graph, &c, &a, 1), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "cycle")) << last_message();
  EXPECT_EQ(somaGraphAddDependencies(graph, &a, &a, 1), somaErrorInvalidValue);
  // d -> e and e -> d in one call: the second closes a cycle with the first; neither stays.
  const somaGraphNode_t from[] = {d, e};
  const somaGraphNode_t to[] = {e, d};
  EXPECT_EQ(somaGraphAddDependencies(graph, from, to, 2), somaErrorInvalidValue);
  SOMA_EXPECT_OK(somaGraphAddDependencies(graph, &e, &d, 1)) << "d -> e must not have stayed";
  EXPECT_EQ(somaGraphAddDependencies(graph, &d, &e, 1), somaErrorInvalidValue);
  unique_graph_exec exec;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), graph, 0));
  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

}  // namespace
