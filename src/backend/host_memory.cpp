#include "backend/host_memory.hpp"

#include <linux/mempolicy.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/os_error.hpp"

namespace soma::detail::backend {

std::string describe(memory_location where) {
  switch (where.type) {
    case memory_location::kind::device:
      return "device " + std::to_string(where.id);
    case memory_location::kind::host:
      return "the host";
    case memory_location::kind::host_numa:
      return "host NUMA node " + std::to_string(where.id);
  }
  return "an unknown location";
}

int host_numa_node_count() {
  // "0", "0-1", "0,2-3": the count is one past the highest node named.
  std::ifstream online("/sys/devices/system/node/online");
  std::string text;
  if (!std::getline(online, text) || text.empty()) return 1;
  int highest = 0, value = 0;
  bool in_number = false;
  for (char c : text) {
    if (c >= '0' && c <= '9') {
      value = (in_number ? value * 10 : 0) + (c - '0');
      in_number = true;
    } else {
      if (in_number && value > highest) highest = value;
      in_number = false;
    }
  }
  if (in_number && value > highest) highest = value;
  return highest + 1;
}

std::size_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_bytes = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_bytes <= 0) return 0;
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page_bytes);
}

status bind_to_numa_node(void* address, std::size_t bytes, int node) {
  constexpr std::size_t bits = 8 * sizeof(unsigned long);
  std::vector<unsigned long> mask(static_cast<std::size_t>(node) / bits + 1, 0);
  mask[static_cast<std::size_t>(node) / bits] = 1UL << (static_cast<std::size_t>(node) % bits);
  // maxnode counts bits, one more than the kernel reads (it drops the last).
  if (syscall(SYS_mbind, address, bytes, MPOL_BIND, mask.data(), mask.size() * bits + 1, 0) != 0) {
    const int error = errno;
    return status(error == ENOMEM ? error_code::out_of_memory : error_code::invalid_value,
                  "mbind of " + std::to_string(bytes) + " bytes to NUMA node " +
                      std::to_string(node) + " failed (" + errno_text(error) + ")");
  }
  return status::success();
}

int numa_node_of(const void* address) {
  int node = -1;
  if (syscall(SYS_get_mempolicy, &node, nullptr, 0, address, MPOL_F_NODE | MPOL_F_ADDR) != 0)
    return -1;
  return node;
}

}  // namespace soma::detail::backend
