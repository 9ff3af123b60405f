// One allocation of a graph (S15): the address an alloc node got when it was added, which
// every launch of every executable of that graph uses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/backend.hpp"

namespace soma::detail::graph {

class graph_memory;
struct exec_memory;

/// A device's access to a graph allocation besides its own (the alloc node's access list).
struct access_grant {
  int device = 0;
  backend::access_flags flags = backend::access_flags::none;
};

/// Shared by the alloc node, the free node and the executables that map it; the address goes
/// back to the graph address space when the last of them lets go.
struct graph_allocation {
  graph_allocation(graph_memory& memory, int device, std::uintptr_t address, std::size_t bytes,
                   std::size_t span)
      : memory(memory), device(device), address(address), bytes(bytes), span(span) {}
  ~graph_allocation();
  graph_allocation(const graph_allocation&) = delete;
  graph_allocation& operator=(const graph_allocation&) = delete;

  graph_memory& memory;
  const int device;
  const std::uintptr_t address;
  const std::size_t bytes;  ///< requested
  const std::size_t span;   ///< bytes rounded up to the granularity: what is mapped
  std::vector<access_grant> access;
  std::uint64_t id = 0;  ///< for messages: "graph allocation 3"

  // Which graph frees it (identities, for "freed twice" across graphs); graph_memory's lock.
  const void* freeing_graph = nullptr;
  // The executable whose launch left it live (unfreed), or nullptr; graph_memory's lock.
  exec_memory* live_in = nullptr;
};

}  // namespace soma::detail::graph
