// Facts about the host's memory that both backends need for host pools (S5): NUMA nodes, the
// memory size, binding a range to a node.
#pragma once

#include <cstddef>

#include "core/status.hpp"

namespace soma::detail::backend {

/// NUMA nodes of the host: one past the highest online node (/sys/devices/system/node/online);
/// 1 where the kernel shows none (a host without NUMA is node 0).
int host_numa_node_count();

/// Physical memory of the host in bytes (sysconf).
std::size_t host_memory_bytes();

/// Binds the pages of [address, address + bytes) (a mapping of shared memory: the policy goes
/// to the memory itself, so pages allocated later through any mapping follow it) to NUMA
/// node `node` (mbind, MPOL_BIND). Fails with the errno's name.
status bind_to_numa_node(void* address, std::size_t bytes, int node);

/// The NUMA node the page at address lives on (get_mempolicy), or -1 if the kernel says none.
int numa_node_of(const void* address);

}  // namespace soma::detail::backend
