#include "backend/process_barrier.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace soma::detail::backend {
namespace {

long membarrier(int command) { return ::syscall(__NR_membarrier, command, 0, 0); }

}  // namespace

bool process_barrier_available() noexcept {
  static const bool available = [] {
    const long commands = membarrier(MEMBARRIER_CMD_QUERY);
    if (commands < 0 || (commands & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
    return membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
  }();
  return available;
}

bool process_barrier() noexcept { return membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0; }

}  // namespace soma::detail::backend
