// Memory that exists only as numbers: address space and commits a pool can grow into and give
// back, with nothing behind them. For replaying recorded allocations on the pool logic (what a
// pool would have held under other settings) without a GPU or physical memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/memory_provider.hpp"

namespace soma::detail {

class synthetic_memory final : public memory_provider {
 public:
  /// partial: commits may go back, and be mapped again, granule by granule (the cpu backend, or
  /// cuda's commits of a physical allocation per granule), else whole only.
  synthetic_memory(std::size_t granularity_bytes, bool partial)
      : granularity_(granularity_bytes), partial_(partial) {}

  std::size_t granularity_bytes() const override { return granularity_; }
  result<std::uintptr_t> reserve(std::size_t bytes) override {
    const std::uintptr_t base = next_base_;
    next_base_ += (bytes + granularity_ - 1) / granularity_ * granularity_ + granularity_;
    return base;
  }
  void free_reservation(std::uintptr_t, std::size_t) override {}
  result<std::uint64_t> commit(std::uintptr_t, std::size_t bytes) override {
    committed_bytes_ += bytes;
    ++commits_;
    return next_token_++;
  }
  void decommit(std::uintptr_t, std::size_t bytes, std::uint64_t, std::size_t) override {
    committed_bytes_ -= bytes;
    ++decommits_;
  }
  bool can_decommit_part(std::uint64_t) const override { return partial_; }
  /// Memory that goes back granule by granule can also be mapped again granule by granule.
  bool can_map_again(std::uint64_t) const override { return partial_; }
  status map_again(std::span<const physical_piece>) override { return status::success(); }

  std::size_t commits() const noexcept { return commits_; }
  std::size_t decommits() const noexcept { return decommits_; }
  std::size_t committed_bytes() const noexcept { return committed_bytes_; }

 private:
  const std::size_t granularity_;
  const bool partial_;
  std::uintptr_t next_base_ = std::uintptr_t{1} << 44;
  std::uint64_t next_token_ = 1;
  std::size_t committed_bytes_ = 0;
  std::size_t commits_ = 0;
  std::size_t decommits_ = 0;
};

}  // namespace soma::detail
