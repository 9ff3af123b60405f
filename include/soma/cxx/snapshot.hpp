/**
 * @file soma/cxx/snapshot.hpp
 * @brief Part of soma's C++ API (include <soma/soma.hpp>): snapshots of pools (soma's own).
 */
#ifndef SOMA_CXX_SNAPSHOT_HPP
#define SOMA_CXX_SNAPSHOT_HPP

#include <cstddef>
#include <span>
#include <utility>

#include <soma/cxx/pool.hpp>

namespace soma {

/**
 * What one pool, or every live pool, holds at one moment: reservations, commits, every block
 * with its state (live, free, or free-pending with the stream and position it waits for), and
 * the statistics. Exact when no other thread allocates or frees in the pool meanwhile.
 * Move-only; frees its arrays in the destructor.
 */
class snapshot {
 public:
  /** The state of one pool. */
  static snapshot of(somaMemPool_t pool) {
    snapshot taken;
    check(somaMemPoolSnapshotTake(pool, &taken.data_));
    return taken;
  }
  static snapshot of(const soma::pool& pool) { return of(pool.handle()); }
  /** Every live pool of every device: default pools first, then the others in creation order. */
  static snapshot all() {
    snapshot taken;
    check(somaMemSnapshotTakeAll(&taken.data_));
    return taken;
  }

  snapshot(snapshot&& other) noexcept : data_(std::exchange(other.data_, somaMemSnapshot{})) {}
  snapshot& operator=(snapshot&& other) noexcept {
    if (this != &other) {
      (void)somaMemSnapshotFree(&data_);
      data_ = std::exchange(other.data_, somaMemSnapshot{});
    }
    return *this;
  }
  snapshot(const snapshot&) = delete;
  snapshot& operator=(const snapshot&) = delete;
  ~snapshot() { (void)somaMemSnapshotFree(&data_); }

  std::span<const somaMemPoolSnapshot> pools() const noexcept {
    return {data_.pools, data_.poolCount};
  }
  static std::span<const somaMemBlockInfo> blocks(const somaMemPoolSnapshot& pool) noexcept {
    return {pool.blocks, pool.blockCount};
  }
  static std::span<const somaMemRange> commits(const somaMemPoolSnapshot& pool) noexcept {
    return {pool.commits, pool.commitCount};
  }
  static std::span<const somaMemRange> reservations(const somaMemPoolSnapshot& pool) noexcept {
    return {pool.reservations, pool.reservationCount};
  }

 private:
  snapshot() = default;
  somaMemSnapshot data_{};
};

}  // namespace soma

#endif  // SOMA_CXX_SNAPSHOT_HPP
