// Children forked after a backend started in this process. Neither backend can serve one:
// CUDA cannot be used after fork (the driver answers CUDA_ERROR_NOT_INITIALIZED there), and
// the cpu backend's stream threads do not survive fork while its pool memory (MAP_SHARED
// memfds) stays shared with the parent. The runtime and the cuda backend ask
// forked_after_start() before they touch anything and refuse with forked_child_error().
#pragma once

#include <atomic>
#include <string>

#include "core/status.hpp"

namespace soma::detail::backend {

/// Records that backend_name ("cpu", "cuda") started in this process and installs, once, the
/// pthread_atfork handler that marks its children. Thread-safe.
void note_backend_started(const char* backend_name);

/// Set in the child of every fork() after a backend started (fork_guard.cpp).
extern std::atomic<bool> forked_child;

/// True in a process forked (directly or through its parent) from one in which a backend had
/// started. One relaxed load: cheap enough for every call.
inline bool forked_after_start() noexcept { return forked_child.load(std::memory_order_relaxed); }

/// initialization_error (CUDA's code for this case): which process started which backend, why
/// this child cannot use it, and what to do instead.
status forked_child_error();

}  // namespace soma::detail::backend
