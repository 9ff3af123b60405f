// Helpers for tests of graphs with memory nodes (S15): node parameters, RAII graphs and
// executable graphs, node makers that return a status, the device graph pool's figures, and
// the graph_test fixture that starts and ends each test with an empty graph pool.
//
// Requires: the including binary links `soma` and GoogleTest.
#pragma once

#include <soma/soma.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "soma_test_util.hpp"

namespace soma_test {

using node_list = std::vector<somaGraphNode_t>;

/// Alloc node parameters: Pinned on device, no handle types, bytes.
inline somaMemAllocNodeParams alloc_node_params(std::size_t bytes, int device = 0) {
  somaMemAllocNodeParams params{};
  params.poolProps.allocType = somaMemAllocationTypePinned;
  params.poolProps.location.type = somaMemLocationTypeDevice;
  params.poolProps.location.id = device;
  params.bytesize = bytes;
  return params;
}

/// Memset node parameters setting bytes (elementSize 1, height 1).
inline somaMemsetParams memset_node_params(void* destination, unsigned value, std::size_t bytes) {
  somaMemsetParams params{};
  params.dst = destination;
  params.value = value;
  params.elementSize = 1;
  params.width = bytes;
  params.height = 1;
  return params;
}

/// An address as soma's messages print it ("0x7f...").
inline std::string hex(const void* pointer) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx",
                static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(pointer)));
  return text;
}

inline void* byte_offset(void* pointer, std::size_t bytes) {
  return static_cast<unsigned char*>(pointer) + bytes;
}

/// A somaDeviceGetGraphMemAttribute figure.
inline std::uint64_t graph_memory(somaGraphMemAttributeType attr, int device = 0) {
  std::uint64_t value = 0;
  const somaError_t status = somaDeviceGetGraphMemAttribute(device, attr, &value);
  EXPECT_EQ(status, somaSuccess) << "somaDeviceGetGraphMemAttribute(" << static_cast<int>(attr)
                                 << "): " << last_message();
  return value;
}

inline std::size_t round_up_to(std::size_t bytes, std::size_t unit) {
  return (bytes + unit - 1) / unit * unit;
}

// ---- node makers: the status of the add, the node through *node ---------------------------

inline somaError_t add_alloc(somaGraph_t graph, const node_list& after, std::size_t bytes,
                             somaGraphNode_t* node, void** address) {
  somaMemAllocNodeParams params = alloc_node_params(bytes);
  const somaError_t status =
      somaGraphAddMemAllocNode(node, graph, after.data(), after.size(), &params);
  *address = params.dptr;
  return status;
}

inline somaError_t add_free(somaGraph_t graph, const node_list& after, void* address,
                            somaGraphNode_t* node) {
  return somaGraphAddMemFreeNode(node, graph, after.data(), after.size(), address);
}

inline somaError_t add_memset(somaGraph_t graph, const node_list& after, void* destination,
                              unsigned value, std::size_t bytes, somaGraphNode_t* node) {
  const somaMemsetParams params = memset_node_params(destination, value, bytes);
  return somaGraphAddMemsetNode(node, graph, after.data(), after.size(), &params);
}

inline somaError_t add_copy(somaGraph_t graph, const node_list& after, void* destination,
                            const void* source, std::size_t bytes, somaGraphNode_t* node) {
  return somaGraphAddMemcpyNode1D(node, graph, after.data(), after.size(), destination, source,
                                  bytes, somaMemcpyDefault);
}

// ---- RAII handles (unique_handle.hpp) ------------------------------------------------------

class unique_graph : public unique_handle<somaGraph_t, somaGraphDestroy> {
 public:
  unique_graph() { expect_created(somaGraphCreate(out(), 0), "somaGraphCreate"); }
  /// Takes ownership of a graph made elsewhere (somaStreamEndCapture).
  explicit unique_graph(somaGraph_t graph) : unique_handle(graph) {}
};

/// Empty until somaGraphInstantiate fills out().
using unique_graph_exec = unique_handle<somaGraphExec_t, somaGraphExecDestroy>;

/// Fixture of the S15 tests: every device idle and the graph pool of device 0 trimmed, with
/// its high watermarks reset, before and after each test, so figures start at 0 even when
/// the binary runs whole.
class graph_test : public capi_test {
 protected:
  void SetUp() override {
    capi_test::SetUp();
    if (HasFatalFailure()) return;
    empty_graph_pool();
  }
  void TearDown() override {
    empty_graph_pool();
    capi_test::TearDown();
  }

  static void empty_graph_pool() {
    int count = 0;
    if (somaGetDeviceCount(&count) != somaSuccess) return;
    for (int device = 0; device < count; ++device) {
      (void)synchronize_device(device);
      (void)somaDeviceGraphMemTrim(device);
      std::uint64_t zero = 0;
      (void)somaDeviceSetGraphMemAttribute(device, somaGraphMemAttrUsedMemHigh, &zero);
      (void)somaDeviceSetGraphMemAttribute(device, somaGraphMemAttrReservedMemHigh, &zero);
    }
  }

  /// The span graph memory gives an allocation of bytes on device 0.
  static std::size_t span_of(std::size_t bytes) { return round_up_to(bytes, granularity_bytes(0)); }
};

}  // namespace soma_test
