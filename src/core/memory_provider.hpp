// The seam between a pool and the physical memory behind it. The runtime implements it
// over the backend; core tests implement it with fakes (a provider that fails the N-th
// commit, a tiny address space).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/status.hpp"

namespace soma::detail {

/// One commit (or what is left of it) backing part of a pool's address space, or a part of one
/// about to be mapped at another address (remap).
struct physical_piece {
  std::uintptr_t address = 0;  ///< where it is (or is to be) mapped
  std::size_t size_bytes = 0;
  std::uint64_t token = 0;       ///< memory_provider's token: the backend's physical handle
  std::size_t offset_bytes = 0;  ///< where the piece starts inside its commit
};

/// Address reservation and physical commitment for one pool. Called only on the slow path
/// (growth, release, teardown), always under the pool's lock.
class memory_provider {
 public:
  virtual ~memory_provider() = default;

  /// Physical granularity: commit sizes and addresses are multiples of it.
  virtual std::size_t granularity_bytes() const = 0;
  /// Reserves bytes of address space aligned to the granularity. Failure:
  /// address_space_exhausted, with the limit that was hit in the message (S16).
  virtual result<std::uintptr_t> reserve(std::size_t bytes) = 0;
  virtual void free_reservation(std::uintptr_t base, std::size_t bytes) = 0;
  /// Backs [address, address + bytes) with new physical memory, accessible to the pool's
  /// device and to every device granted access. Returns a token for decommit. Failure:
  /// out_of_memory (the message names the device's figures), or the backend's error.
  virtual result<std::uint64_t> commit(std::uintptr_t address, std::size_t bytes) = 0;
  /// Returns [address, address + bytes) to the OS/driver; the addresses stay reserved.
  /// offset_bytes is where the range starts inside the memory committed under token. Unless
  /// can_decommit_part(), the range is always everything committed under token.
  virtual void decommit(std::uintptr_t address, std::size_t bytes, std::uint64_t token,
                        std::size_t offset_bytes) = 0;
  /// Whether part of the commit made under token can go back on its own (granule-level
  /// release). Without it the pool releases that commit whole only.
  virtual bool can_decommit_part(std::uint64_t /*token*/) const { return false; }

  /// Whether granule-aligned parts of the commit made under token can be mapped at a second
  /// address while they stay mapped at the first (remap, design §3 "Remapping").
  virtual bool can_map_again(std::uint64_t /*token*/) const { return false; }
  /// Maps each piece's physical memory at its address, the pieces one after another in one
  /// unmapped, reserved range, with the access the pool's memory has, granted once over the
  /// whole range. The memory stays mapped where it was too. Requires: can_map_again for every
  /// token; pieces granule aligned. On failure nothing new stays mapped.
  virtual status map_again(std::span<const physical_piece> /*pieces*/) {
    return status(error_code::not_supported, "this memory cannot be mapped at a second address");
  }
  /// Unmaps the pieces, one after another in one range, whose physical memory is also mapped
  /// at another address: the physical memory stays, and the addresses stay reserved. One call
  /// for the range, since an unmap is a driver call of tens of microseconds on cuda.
  virtual void unmap_alias(std::span<const physical_piece> /*pieces*/) {}
};

}  // namespace soma::detail
