// The device graph pool (S15): graph memory comes from a per-device pool apart from the
// stream-ordered pools. Allocations of one graph whose lifetimes cannot overlap, and graphs
// launched into one stream, share physical memory; graphs that may run at the same time, and
// memory an unfreed allocation holds, never do. somaDeviceGraphMemTrim gives idle memory back.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "graph_test_util.hpp"
#include "soma_test_util.hpp"
#include "stream_gate.hpp"

namespace {

using namespace soma_test;

constexpr std::size_t kProbe = 64;  // bytes copied out of each allocation

class S15_GraphPool : public graph_test {};

// alloc(bytes) -> memset(value) -> copy of the first and last kProbe bytes to host -> free,
// or no free when `unfreed`.
struct simple_graph {
  unique_graph graph;
  void* p = nullptr;
  void build(std::size_t bytes, unsigned value, unsigned char* host, bool unfreed = false) {
    somaGraphNode_t alloc = nullptr, set = nullptr, head = nullptr, tail = nullptr;
    somaGraphNode_t free = nullptr;
    SOMA_ASSERT_OK(add_alloc(graph, {}, bytes, &alloc, &p));
    SOMA_ASSERT_OK(add_memset(graph, {alloc}, p, value, bytes, &set));
    SOMA_ASSERT_OK(add_copy(graph, {set}, host, p, kProbe, &head));
    SOMA_ASSERT_OK(
        add_copy(graph, {set}, host + kProbe, byte_offset(p, bytes - kProbe), kProbe, &tail));
    if (!unfreed) {
      SOMA_ASSERT_OK(add_free(graph, {head, tail}, p, &free));
    }
  }
};

TEST_F(S15_GraphPool, ChainedAllocationsOfOneGraphShareOneSpan) {
  constexpr int kCount = 8;
  const std::size_t bytes = MiB;
  unique_stream stream;
  host_buffer host(kCount * 2 * kProbe);
  unique_graph graph;
  std::vector<void*> addresses;
  somaGraphNode_t last_free = nullptr;
  for (int i = 0; i < kCount; ++i) {
    somaGraphNode_t alloc = nullptr, set = nullptr, head = nullptr, tail = nullptr;
    void* p = nullptr;
    node_list after;
    if (last_free != nullptr) after.push_back(last_free);
    SOMA_ASSERT_OK(add_alloc(graph, after, bytes, &alloc, &p));
    SOMA_ASSERT_OK(add_memset(graph, {alloc}, p, 0x10 + i, bytes, &set));
    unsigned char* slot = host.data() + i * 2 * kProbe;
    SOMA_ASSERT_OK(add_copy(graph, {set}, slot, p, kProbe, &head));
    SOMA_ASSERT_OK(
        add_copy(graph, {set}, slot + kProbe, byte_offset(p, bytes - kProbe), kProbe, &tail));
    SOMA_ASSERT_OK(add_free(graph, {head, tail}, p, &last_free));
    addresses.push_back(p);
  }
  EXPECT_EQ(graph_memory(somaGraphMemAttrReservedMemCurrent), 0u) << "nothing before a launch";
  unique_graph_exec exec;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), graph, 0));
  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  for (int i = 0; i < kCount; ++i) {
    const unsigned char* slot = host.data() + i * 2 * kProbe;
    for (std::size_t b = 0; b < 2 * kProbe; ++b) {
      ASSERT_EQ(slot[b], 0x10 + i) << "allocation " << i << " byte " << b;
    }
  }
  EXPECT_EQ(graph_memory(somaGraphMemAttrUsedMemCurrent), span_of(bytes));
  EXPECT_EQ(graph_memory(somaGraphMemAttrReservedMemCurrent), span_of(bytes));
  EXPECT_EQ(graph_memory(somaGraphMemAttrUsedMemHigh), span_of(bytes));
}

TEST_F(S15_GraphPool, GraphsLaunchedIntoOneStreamShareMemory) {
  const std::size_t bytes = MiB;
  unique_stream stream;
  host_buffer host_a(2 * kProbe), host_b(2 * kProbe);
  simple_graph a, b;
  ASSERT_NO_FATAL_FAILURE(a.build(bytes, 0xa1, host_a.data()));
  ASSERT_NO_FATAL_FAILURE(b.build(bytes, 0xb2, host_b.data()));
  unique_graph_exec exec_a, exec_b;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec_a.out(), a.graph, 0));
  SOMA_ASSERT_OK(somaGraphInstantiate(exec_b.out(), b.graph, 0));
  for (int round = 0; round < 2; ++round) {
    SOMA_ASSERT_OK(somaGraphLaunch(exec_a, stream));
    SOMA_ASSERT_OK(somaGraphLaunch(exec_b, stream));
  }
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_TRUE(host_a.all(0xa1));
  EXPECT_TRUE(host_b.all(0xb2));
  EXPECT_EQ(graph_memory(somaGraphMemAttrReservedMemCurrent), span_of(bytes));
  EXPECT_EQ(graph_memory(somaGraphMemAttrReservedMemHigh), span_of(bytes));
  EXPECT_EQ(graph_memory(somaGraphMemAttrUsedMemCurrent), span_of(bytes));
}

TEST_F(S15_GraphPool, GraphsThatMayRunAtTheSameTimeDoNotShare) {
  const std::size_t bytes = MiB;
  unique_stream first, second;
  host_buffer host_a(2 * kProbe), host_b(2 * kProbe);
  simple_graph a, b;
  ASSERT_NO_FATAL_FAILURE(a.build(bytes, 0xa1, host_a.data()));
  ASSERT_NO_FATAL_FAILURE(b.build(bytes, 0xb2, host_b.data()));
  unique_graph_exec exec_a, exec_b;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec_a.out(), a.graph, 0));
  SOMA_ASSERT_OK(somaGraphInstantiate(exec_b.out(), b.graph, 0));
  stream_gate gate;
  SOMA_ASSERT_OK(gate.hold(first));
  SOMA_ASSERT_OK(gate.hold(second));
  SOMA_ASSERT_OK(somaGraphLaunch(exec_a, first));
  SOMA_ASSERT_OK(somaGraphLaunch(exec_b, second));
  EXPECT_EQ(somaStreamQuery(first), somaErrorNotReady);
  EXPECT_EQ(somaStreamQuery(second), somaErrorNotReady);
  EXPECT_GE(graph_memory(somaGraphMemAttrReservedMemCurrent), 2 * span_of(bytes));
  EXPECT_GE(graph_memory(somaGraphMemAttrUsedMemCurrent), 2 * span_of(bytes));
  gate.open();
  SOMA_ASSERT_OK(somaStreamSynchronize(first));
  SOMA_ASSERT_OK(somaStreamSynchronize(second));
  EXPECT_TRUE(host_a.all(0xa1));
  EXPECT_TRUE(host_b.all(0xb2));
}

TEST_F(S15_GraphPool, MemoryOfAnUnfreedAllocationIsNotShared) {
  const std::size_t bytes = MiB;
  unique_stream stream;
  host_buffer host_live(2 * kProbe), host_other(2 * kProbe);
  simple_graph live, other;
  ASSERT_NO_FATAL_FAILURE(live.build(bytes, 0xaa, host_live.data(), /*unfreed=*/true));
  ASSERT_NO_FATAL_FAILURE(other.build(bytes, 0xbb, host_other.data()));
  unique_graph_exec exec_live, exec_other;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec_live.out(), live.graph, 0));
  SOMA_ASSERT_OK(somaGraphInstantiate(exec_other.out(), other.graph, 0));
  // The other graph first, so the live one maps where the other ran; then the other again.
  SOMA_ASSERT_OK(somaGraphLaunch(exec_other, stream));
  SOMA_ASSERT_OK(somaGraphLaunch(exec_live, stream));
  SOMA_ASSERT_OK(somaGraphLaunch(exec_other, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_TRUE(host_live.all(0xaa));
  EXPECT_TRUE(host_other.all(0xbb));
  host_buffer whole = read_back(live.p, bytes, stream);
  EXPECT_EQ(whole.count_not(0xaa), 0u) << "the other graph wrote into the live allocation";
  EXPECT_GE(graph_memory(somaGraphMemAttrReservedMemCurrent), 2 * span_of(bytes));
  // A trim keeps what the live allocation holds.
  SOMA_ASSERT_OK(somaDeviceGraphMemTrim(0));
  EXPECT_GE(graph_memory(somaGraphMemAttrReservedMemCurrent), span_of(bytes));
  host_buffer after_trim = read_back(live.p, bytes, stream);
  EXPECT_EQ(after_trim.count_not(0xaa), 0u) << "the trim took the live allocation's memory";
  SOMA_ASSERT_OK(somaFreeAsync(live.p, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  SOMA_ASSERT_OK(somaDeviceGraphMemTrim(0));
  EXPECT_EQ(graph_memory(somaGraphMemAttrReservedMemCurrent), 0u);
}

TEST_F(S15_GraphPool, TrimGivesIdleGraphMemoryBack) {
  const std::size_t bytes = 2 * MiB;
  unique_stream stream;
  host_buffer host(2 * kProbe);
  simple_graph g;
  ASSERT_NO_FATAL_FAILURE(g.build(bytes, 0x3c, host.data()));
  const std::size_t committed_before = committed_bytes(0);
  unique_graph_exec exec;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), g.graph, 0));
  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_TRUE(host.all(0x3c));
  const std::uint64_t reserved = graph_memory(somaGraphMemAttrReservedMemCurrent);
  EXPECT_EQ(reserved, span_of(bytes));
  EXPECT_EQ(committed_bytes(0), committed_before + reserved);
  // The stream-ordered pool's trim leaves graph memory alone.
  SOMA_ASSERT_OK(somaMemPoolTrimTo(default_pool(0), 0));
  EXPECT_EQ(graph_memory(somaGraphMemAttrReservedMemCurrent), reserved);
  SOMA_ASSERT_OK(somaDeviceGraphMemTrim(0));
  EXPECT_EQ(graph_memory(somaGraphMemAttrReservedMemCurrent), 0u);
  EXPECT_EQ(graph_memory(somaGraphMemAttrUsedMemCurrent), 0u);
  EXPECT_EQ(committed_bytes(0), committed_before);
  // The executable maps again at its next launch.
  std::memset(host.data(), 0, host.size());
  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_TRUE(host.all(0x3c));
  EXPECT_EQ(graph_memory(somaGraphMemAttrReservedMemCurrent), span_of(bytes));
}

TEST_F(S15_GraphPool, PoolTrimToLeavesLiveGraphMemoryAlone) {
  const std::size_t bytes = MiB;
  unique_stream stream;
  host_buffer host(2 * kProbe);
  simple_graph g;
  ASSERT_NO_FATAL_FAILURE(g.build(bytes, 0x6d, host.data(), /*unfreed=*/true));
  unique_graph_exec exec;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), g.graph, 0));
  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  const std::uint64_t reserved = graph_memory(somaGraphMemAttrReservedMemCurrent);
  EXPECT_EQ(reserved, span_of(bytes));
  const pool_stats pool = read_pool_stats(default_pool(0));
  SOMA_ASSERT_OK(somaMemPoolTrimTo(default_pool(0), 0));
  EXPECT_EQ(graph_memory(somaGraphMemAttrReservedMemCurrent), reserved);
  EXPECT_EQ(read_pool_stats(default_pool(0)).used_current, pool.used_current)
      << "graph memory is not the default pool's";
  host_buffer whole = read_back(g.p, bytes, stream);
  EXPECT_EQ(whole.count_not(0x6d), 0u);
  SOMA_ASSERT_OK(somaFreeAsync(g.p, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S15_GraphPool, HighWatermarksFollowAndReset) {
  const std::size_t bytes = MiB;
  unique_stream first, second;
  host_buffer host_a(2 * kProbe), host_b(2 * kProbe);
  simple_graph a, b;
  ASSERT_NO_FATAL_FAILURE(a.build(bytes, 0x01, host_a.data()));
  ASSERT_NO_FATAL_FAILURE(b.build(bytes, 0x02, host_b.data()));
  unique_graph_exec exec_a, exec_b;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec_a.out(), a.graph, 0));
  SOMA_ASSERT_OK(somaGraphInstantiate(exec_b.out(), b.graph, 0));
  // Instantiation maps (docs/graphs.md): both executables on one idle backing so far.
  EXPECT_EQ(graph_memory(somaGraphMemAttrUsedMemHigh), span_of(bytes));
  EXPECT_EQ(graph_memory(somaGraphMemAttrReservedMemHigh), span_of(bytes));
  {
    stream_gate gate;  // both pending at once: two spans
    SOMA_ASSERT_OK(gate.hold(first));
    SOMA_ASSERT_OK(gate.hold(second));
    SOMA_ASSERT_OK(somaGraphLaunch(exec_a, first));
    SOMA_ASSERT_OK(somaGraphLaunch(exec_b, second));
  }
  SOMA_ASSERT_OK(somaStreamSynchronize(first));
  SOMA_ASSERT_OK(somaStreamSynchronize(second));
  const std::uint64_t used_high = graph_memory(somaGraphMemAttrUsedMemHigh);
  const std::uint64_t reserved_high = graph_memory(somaGraphMemAttrReservedMemHigh);
  EXPECT_GE(used_high, 2 * span_of(bytes));
  EXPECT_GE(reserved_high, 2 * span_of(bytes));
  SOMA_ASSERT_OK(somaDeviceGraphMemTrim(0));
  EXPECT_EQ(graph_memory(somaGraphMemAttrReservedMemCurrent), 0u);
  EXPECT_EQ(graph_memory(somaGraphMemAttrUsedMemHigh), used_high) << "a trim keeps the highs";
  EXPECT_EQ(graph_memory(somaGraphMemAttrReservedMemHigh), reserved_high);
  // One graph again, then reset: a high restarts from the current figure.
  SOMA_ASSERT_OK(somaGraphLaunch(exec_a, first));
  SOMA_ASSERT_OK(somaStreamSynchronize(first));
  std::uint64_t zero = 0;
  SOMA_ASSERT_OK(somaDeviceSetGraphMemAttribute(0, somaGraphMemAttrUsedMemHigh, &zero));
  SOMA_ASSERT_OK(somaDeviceSetGraphMemAttribute(0, somaGraphMemAttrReservedMemHigh, &zero));
  EXPECT_EQ(graph_memory(somaGraphMemAttrUsedMemHigh), span_of(bytes));
  EXPECT_EQ(graph_memory(somaGraphMemAttrReservedMemHigh), span_of(bytes));
  SOMA_ASSERT_OK(somaDeviceGraphMemTrim(0));
  SOMA_ASSERT_OK(somaDeviceSetGraphMemAttribute(0, somaGraphMemAttrUsedMemHigh, &zero));
  SOMA_ASSERT_OK(somaDeviceSetGraphMemAttribute(0, somaGraphMemAttrReservedMemHigh, &zero));
  EXPECT_EQ(graph_memory(somaGraphMemAttrUsedMemHigh), 0u);
  EXPECT_EQ(graph_memory(somaGraphMemAttrReservedMemHigh), 0u);
}

TEST_F(S15_GraphPool, RelaunchesKeepTheFootprintFlat) {
  const std::size_t bytes = MiB;
  unique_stream stream;
  host_buffer host_freed(2 * kProbe), host_kept(2 * kProbe);
  simple_graph freed, kept;
  ASSERT_NO_FATAL_FAILURE(freed.build(bytes, 0x0f, host_freed.data()));
  ASSERT_NO_FATAL_FAILURE(kept.build(bytes, 0xf0, host_kept.data(), /*unfreed=*/true));
  unique_graph_exec exec_freed, exec_kept;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec_freed.out(), freed.graph, 0));
  SOMA_ASSERT_OK(
      somaGraphInstantiate(exec_kept.out(), kept.graph, somaGraphInstantiateFlagAutoFreeOnLaunch));
  auto round = [&] {
    SOMA_ASSERT_OK(somaGraphLaunch(exec_freed, stream));
    SOMA_ASSERT_OK(somaGraphLaunch(exec_kept, stream));
  };
  for (int i = 0; i < 2; ++i) ASSERT_NO_FATAL_FAILURE(round());
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  const std::uint64_t reserved = graph_memory(somaGraphMemAttrReservedMemCurrent);
  EXPECT_GE(reserved, 2 * span_of(bytes)) << "the kept allocation pins its memory";
  for (int i = 0; i < 100; ++i) {
    ASSERT_NO_FATAL_FAILURE(round());
    ASSERT_EQ(graph_memory(somaGraphMemAttrReservedMemCurrent), reserved) << "round " << i;
  }
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(graph_memory(somaGraphMemAttrReservedMemHigh), reserved);
  EXPECT_TRUE(host_freed.all(0x0f));
  EXPECT_TRUE(host_kept.all(0xf0));
  SOMA_ASSERT_OK(somaFreeAsync(kept.p, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

}  // namespace
