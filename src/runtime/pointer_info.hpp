// What the runtime knows about an address (S14): somaPointerGetAttributes and range checks.
#pragma once

#include <cstddef>
#include <cstdint>

namespace soma::detail {

class pool_object;

struct pointer_info {
  bool is_live = false;
  const pool_object* pool = nullptr;  ///< owner of a live allocation (destroyed pools too)
  bool is_host = false;       ///< inside a somaMallocHost allocation (base and size are its own)
  bool is_graph = false;      ///< a live graph allocation (S15): no pool
  int device = -1;            ///< the owning device; -1 for host memory
  bool in_host_pool = false;  ///< a host pool's allocation (S5): host memory
  int numa_node = -1;         ///< its NUMA node (host-NUMA pools), else -1
  std::uintptr_t pool_handle = 0;
  std::uintptr_t base = 0;
  std::size_t requested_bytes = 0;
};

}  // namespace soma::detail
