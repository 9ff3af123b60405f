// Lets an invariant check tell whether calls that take no lock (a pool's fast path) ran while
// it counted, with SOMA_EXPENSIVE_CHECKS; without, every member is empty and costs nothing.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/check.hpp"

namespace soma::detail {

/// Counts calls in progress and calls started. A check reads a mark, counts, and trusts its
/// count only if still_quiet(mark): no call was in progress at the mark and none started since.
/// Thread-safe.
class call_census {
 public:
  /// One call, from construction to destruction.
  class scope {
   public:
    explicit scope(call_census& census) noexcept : census_(census) {
      if constexpr (expensive_checks) {
        // In progress before started: a mark that sees this call's start sees it in progress.
        census_.in_progress_.fetch_add(1, std::memory_order_seq_cst);
        census_.started_.fetch_add(1, std::memory_order_seq_cst);
      }
    }
    ~scope() {
      if constexpr (expensive_checks) census_.in_progress_.fetch_sub(1, std::memory_order_seq_cst);
    }
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;

   private:
    call_census& census_;
  };

  struct mark {
    std::uint64_t started = 0;
    bool quiet = false;
  };

  mark take_mark() const noexcept {
    mark m;
    m.started = started_.load(std::memory_order_seq_cst);
    m.quiet = in_progress_.load(std::memory_order_seq_cst) == 0;
    return m;
  }
  bool still_quiet(const mark& m) const noexcept {
    return m.quiet && in_progress_.load(std::memory_order_seq_cst) == 0 &&
           started_.load(std::memory_order_seq_cst) == m.started;
  }

 private:
  std::atomic<int> in_progress_{0};
  std::atomic<std::uint64_t> started_{0};
};

}  // namespace soma::detail
