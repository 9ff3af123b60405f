// The process barrier biased_lock needs, for core tests (the runtime installs its own from the
// backend, which core tests do not link): Linux's private expedited membarrier.
#pragma once

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace soma_test {

#if defined(__SANITIZE_THREAD__)
inline constexpr bool under_thread_sanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool under_thread_sanitizer = true;
#else
inline constexpr bool under_thread_sanitizer = false;
#endif
#else
inline constexpr bool under_thread_sanitizer = false;
#endif

inline long membarrier(int command) { return ::syscall(__NR_membarrier, command, 0, 0); }

/// The barrier: every thread of the process passes a full fence.
inline bool real_barrier() noexcept { return membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0; }

/// Registers the process for the barrier; nullptr on success, else why a test must skip.
inline const char* register_process_barrier() {
  if (under_thread_sanitizer)
    return "ThreadSanitizer does not model the process barrier; soma installs none there";
  const long commands = membarrier(MEMBARRIER_CMD_QUERY);
  if (commands < 0 || (commands & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0 ||
      membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0)
    return "this kernel has no private expedited membarrier";
  return nullptr;
}

}  // namespace soma_test
