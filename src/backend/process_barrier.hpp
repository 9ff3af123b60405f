// A memory barrier run on every thread of the process at once (Linux membarrier), so that
// a path taken on every call can do without a fence of its own when a rare one pays for both.
#pragma once

namespace soma::detail::backend {

/// True where process_barrier() works (registered on first call). Fixed for the process's
/// life, so a caller may choose its light or heavy side from it once.
bool process_barrier_available() noexcept;

/// Acts as a full memory barrier on every running thread of the process before it returns.
/// false if the system refused it. Requires: process_barrier_available().
bool process_barrier() noexcept;

}  // namespace soma::detail::backend
