// The memory of a runtime pool: the core's memory_provider over the backend, which reserves
// address ranges, commits physical memory (whole, or a physical allocation per granule), gives
// it back, and keeps the access other devices were granted (S6).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <mutex>

#include "backend/backend.hpp"
#include "core/memory_provider.hpp"
#include "core/status.hpp"

namespace soma::detail {

/// memory_provider over the backend: reservations and chunks of one pool at one location (a
/// device, or host memory).
class backend_memory_provider final : public memory_provider {
 public:
  backend_memory_provider(backend::backend& platform, backend::memory_location where,
                          unsigned export_handle_types);

  std::size_t granularity_bytes() const override { return granularity_bytes_; }
  result<std::uintptr_t> reserve(std::size_t bytes) override;
  void free_reservation(std::uintptr_t base, std::size_t bytes) override;
  result<std::uint64_t> commit(std::uintptr_t address, std::size_t bytes) override;
  void decommit(std::uintptr_t address, std::size_t bytes, std::uint64_t token,
                std::size_t offset_bytes) override;
  result<std::uint64_t> commit_by_granule(std::uintptr_t address, std::size_t bytes);
  bool can_decommit_part(std::uint64_t token) const override {
    if (split_commits_.count(token) != 0) return true;  // one physical allocation a granule
    // Memory of an exportable pool goes back in whole commits: giving back part of one would
    // drop pages an importer may still map (S7 lifetime), while closing a whole commit leaves
    // them to the importer's mapping.
    return export_handle_types_ == 0 && platform_.can_discard_physical_part();
  }
  /// Remap: a commit of granule-sized physical allocations, or any commit where the platform
  /// maps at an offset (cpu's memfd); never an exportable pool's (S7 exports whole commits).
  bool can_map_again(std::uint64_t token) const override {
    if (export_handle_types_ != 0) return false;
    return split_commits_.count(token) != 0 || maps_at_offset_;
  }
  status map_again(std::span<const physical_piece> pieces) override;
  /// One platform unmap over the pieces' range, whatever mappings it holds.
  void unmap_alias(std::span<const physical_piece> pieces) override;
  /// From now on, where the platform gives back physical allocations whole only (cuda), make
  /// each commit of a granule-sized physical allocation per granule, so that free granules
  /// inside a commit can go back (compaction, S9) or be mapped again elsewhere (remap). Not
  /// for exportable pools (S7 exports whole commits). Requires: the pool lock is held.
  void set_granule_commits(bool enabled) { granule_commits_ = enabled; }
  /// Whether any commit could be mapped again once remapping is on: the platform maps at an
  /// offset (cpu), and the pool is not exportable. On cuda only per-granule commits can, which
  /// a pool makes only in the modes that ask for them.
  bool remaps_any_commit() const { return maps_at_offset_ && export_handle_types_ == 0; }

  /// Access other devices have to this memory (S6). set_access applies to every reservation
  /// and is applied again to each new one, under one lock, so growth never misses a grant.
  backend::access_flags access(int device) const;
  status set_access(int device, backend::access_flags flags);
  /// A range mapped by someone else (imports) that grants reach as they reach reservations.
  status adopt_range(std::uintptr_t address, std::size_t bytes);
  void forget_range(std::uintptr_t address);

 private:
  std::map<std::uint64_t, std::size_t> mapped_bytes_;  // per physical handle; pool lock held
  // Commits made of one physical allocation per granule: token -> handle by offset inside the
  // commit (remap maps a granule at other addresses). Tokens are minted above 2^63, apart from
  // the platform's handles. Pool lock held.
  std::map<std::uint64_t, std::map<std::size_t, std::uint64_t>> split_commits_;
  std::uint64_t next_split_token_ = std::uint64_t{1} << 63;
  bool granule_commits_ = false;
  mutable std::mutex access_mutex_;                     // the two maps below
  std::map<std::uintptr_t, std::size_t> reservations_;  // base -> bytes
  std::map<int, backend::access_flags> granted_;        // devices other than the owner
  backend::backend& platform_;
  const backend::memory_location where_;
  const unsigned export_handle_types_;
  const std::size_t granularity_bytes_;
  const bool maps_at_offset_;
};

}  // namespace soma::detail
