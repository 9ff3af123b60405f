// Checks both fuzz targets make of what the C API promises, and the model pieces they share.
// Every failed check aborts with a message (fuzz_check.hpp).
//   - statistics (S10): used == sum of live requested sizes, reserved >= used, highs >= currents,
//     reserved in whole granules and within the pool's cap;
//   - contents: a live allocation keeps the bytes stream work wrote until it is freed (S1, S2),
//     checked on the host after a synchronize and by host tasks in stream order;
//   - pointer attributes (S14): base, size, device and pool of any byte of a live allocation;
//     a freed pointer is not live;
//   - cleanup: with everything freed and destroyed and the devices synchronized, nothing stays
//     committed and the default pools hold nothing (S5, S9).
#pragma once

#include <soma/soma.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <utility>

#include "byte_runs.hpp"
#include "fuzz_check.hpp"
#include "fuzz_config.hpp"
#include "pool_stats.hpp"

namespace soma_fuzz {

// ---- streams --------------------------------------------------------------------------------

/// A stream and its device. The NULL handle is the current device's default stream, so a call
/// on it must first make `device` current: use() does.
struct stream_ref {
  somaStream_t handle = nullptr;
  int device = 0;
};

inline somaStream_t use(const stream_ref& stream) {
  if (stream.handle == nullptr) FUZZ_OK(somaSetDevice(stream.device));
  return stream.handle;
}

/// Later work on waiter runs after all work queued so far on target (an event dependency),
/// the ordering S1 and S2 ask of a program that uses memory on several streams.
inline void order_after(somaEvent_t ordering, const stream_ref& waiter, const stream_ref& target) {
  if (waiter.handle == target.handle && waiter.device == target.device) return;
  FUZZ_OK(somaEventRecord(ordering, use(target)));
  FUZZ_OK(somaStreamWaitEvent(use(waiter), ordering, 0));
}

// ---- statistics (S10) -----------------------------------------------------------------------

using soma_test::pool_stats;
using soma_test::try_read_pool_stats;

inline pool_stats read_pool_stats(somaMemPool_t pool) {
  pool_stats stats;
  FUZZ_OK(try_read_pool_stats(pool, &stats));
  return stats;
}

/// S10 for a pool whose live allocations the caller knows all of (no other thread changes it).
inline void check_pool_stats(const pool_stats& stats, std::uint64_t live_bytes,
                             std::size_t cap_bytes) {
  FUZZ_CHECK(stats.used_current == live_bytes, "used %llu != sum of live sizes %llu",
             static_cast<unsigned long long>(stats.used_current),
             static_cast<unsigned long long>(live_bytes));
  FUZZ_CHECK(stats.reserved_current >= stats.used_current, "reserved %llu < used %llu",
             static_cast<unsigned long long>(stats.reserved_current),
             static_cast<unsigned long long>(stats.used_current));
  FUZZ_CHECK(stats.used_high >= stats.used_current, "used high %llu < used %llu",
             static_cast<unsigned long long>(stats.used_high),
             static_cast<unsigned long long>(stats.used_current));
  FUZZ_CHECK(stats.reserved_high >= stats.reserved_current, "reserved high %llu < reserved %llu",
             static_cast<unsigned long long>(stats.reserved_high),
             static_cast<unsigned long long>(stats.reserved_current));
  FUZZ_CHECK(stats.reserved_current % kGranularityBytes == 0, "reserved %llu not in granules",
             static_cast<unsigned long long>(stats.reserved_current));
  FUZZ_CHECK(stats.reserved_current <= cap_bytes, "reserved %llu over the cap %zu",
             static_cast<unsigned long long>(stats.reserved_current), cap_bytes);
}

/// A quiet pool's snapshot adds up: the live blocks sum to used and to what the session holds,
/// the blocks tile the commits in address order, and the commits sum to reserved.
inline void check_snapshot(somaMemPool_t pool, std::uint64_t live_bytes) {
  somaMemSnapshot taken{};
  FUZZ_OK(somaMemPoolSnapshotTake(pool, &taken));
  FUZZ_CHECK(taken.poolCount == 1, "a pool's snapshot holds %zu pools", taken.poolCount);
  const somaMemPoolSnapshot& p = taken.pools[0];
  std::uint64_t live = 0;
  std::uint64_t blocks = 0;
  std::uintptr_t end = 0;
  for (std::size_t i = 0; i < p.blockCount; ++i) {
    const auto start = reinterpret_cast<std::uintptr_t>(p.blocks[i].address);
    FUZZ_CHECK(start >= end, "block %zu at %p overlaps the one before", i, p.blocks[i].address);
    end = start + p.blocks[i].bytes;
    blocks += p.blocks[i].bytes;
    if (p.blocks[i].state == somaMemBlockLive) live += p.blocks[i].requestedBytes;
  }
  std::uint64_t commits = 0;
  for (std::size_t i = 0; i < p.commitCount; ++i) commits += p.commits[i].bytes;
  FUZZ_CHECK(live == p.usedBytes && live == live_bytes,
             "snapshot: live blocks %llu, used %llu, the session holds %llu",
             static_cast<unsigned long long>(live), static_cast<unsigned long long>(p.usedBytes),
             static_cast<unsigned long long>(live_bytes));
  FUZZ_CHECK(blocks == commits && commits == p.reservedBytes,
             "snapshot: blocks %llu, commits %llu, reserved %llu",
             static_cast<unsigned long long>(blocks), static_cast<unsigned long long>(commits),
             static_cast<unsigned long long>(p.reservedBytes));
  FUZZ_OK(somaMemSnapshotFree(&taken));
}

inline std::size_t committed_bytes(int device) {
  std::size_t bytes = 0;
  FUZZ_OK(somaDeviceGetCommittedBytes(&bytes, device));
  return bytes;
}

/// The cpu backend's device figures agree: what pools committed is within the device and is
/// exactly what somaMemGetInfo says is not free.
inline void check_device_figures(int device, std::uint64_t reserved_by_live_pools) {
  const std::size_t committed = committed_bytes(device);
  FUZZ_CHECK(committed >= reserved_by_live_pools && committed <= kDeviceMemoryBytes,
             "device %d: committed %zu, pools reserve %llu, memory %zu", device, committed,
             static_cast<unsigned long long>(reserved_by_live_pools), kDeviceMemoryBytes);
  FUZZ_OK(somaSetDevice(device));
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  FUZZ_OK(somaMemGetInfo(&free_bytes, &total_bytes));
  FUZZ_CHECK(total_bytes == kDeviceMemoryBytes && free_bytes + committed == total_bytes,
             "device %d: free %zu + committed %zu != total %zu", device, free_bytes, committed,
             total_bytes);
}

// ---- contents -------------------------------------------------------------------------------

/// Aborts if memory differs from what its runs say; what names the allocation.
inline void check_contents(const void* memory, const byte_runs& runs, const char* what) {
  const std::size_t bad = runs.first_mismatch(memory);
  FUZZ_CHECK(bad == runs.size(), "%s: byte %zu of %p (%zu B) is 0x%02x, expected 0x%02x", what, bad,
             memory, runs.size(), static_cast<const unsigned char*>(memory)[bad],
             runs.expected_at(bad));
}

/// Checks the contents in stream order: a host task on stream compares memory with runs when
/// the stream reaches it, so memory handed to another stream too early is caught while the
/// owner's work is still queued.
inline void launch_contents_check(somaStream_t stream, const void* memory, const byte_runs& runs) {
  struct task {
    const void* memory;
    byte_runs runs;
  };
  auto* heap = new task{memory, runs};
  const somaError_t status = somaLaunchHostFunc(
      stream,
      [](void* user_data) {
        auto* checked = static_cast<task*>(user_data);
        check_contents(checked->memory, checked->runs, "host task in stream order");
        delete checked;
      },
      heap);
  if (status != somaSuccess) delete heap;
  FUZZ_EXPECT_STATUS(status, somaSuccess);
}

// ---- pointer attributes (S14) ---------------------------------------------------------------

/// Any byte of a live allocation names it. pool nullptr: the pool is not checked (destroyed, or
/// unknown to the caller).
inline somaPointerAttributes check_live_attributes(void* base, std::size_t size, int device,
                                                   somaMemPool_t pool, std::size_t offset) {
  somaPointerAttributes attributes{};
  FUZZ_OK(somaPointerGetAttributes(&attributes, static_cast<char*>(base) + offset));
  FUZZ_CHECK(attributes.isLiveAllocation == 1 && attributes.type == somaMemoryTypeDevice,
             "%p+%zu: live %d type %d", base, offset, attributes.isLiveAllocation,
             static_cast<int>(attributes.type));
  FUZZ_CHECK(attributes.base == base && attributes.size == size && attributes.device == device,
             "%p+%zu: base %p size %zu device %d, expected %p %zu %d", base, offset,
             attributes.base, attributes.size, attributes.device, base, size, device);
  FUZZ_CHECK(pool == nullptr || attributes.pool == pool, "%p: pool %p, expected %p", base,
             static_cast<void*>(attributes.pool), static_cast<void*>(pool));
  return attributes;
}

inline void check_not_live(const void* pointer) {
  somaPointerAttributes attributes{};
  FUZZ_OK(somaPointerGetAttributes(&attributes, pointer));
  FUZZ_CHECK(attributes.isLiveAllocation == 0 && attributes.device == -1,
             "freed %p still reads as live (device %d)", pointer, attributes.device);
}

// ---- cleanup --------------------------------------------------------------------------------

/// With every allocation freed, every explicit pool destroyed, default pools back at threshold
/// 0 and every device synchronized: no device keeps committed memory, default pools hold
/// nothing (S5, S9). Then resets the default pools' highs for the next input.
inline void check_all_returned() {
  for (int device = 0; device < kDeviceCount; ++device) {
    somaMemPool_t pool = nullptr;
    FUZZ_OK(somaDeviceGetDefaultMemPool(&pool, device));
    const pool_stats stats = read_pool_stats(pool);
    FUZZ_CHECK(stats.used_current == 0 && stats.reserved_current == 0,
               "device %d default pool after cleanup: used %llu reserved %llu", device,
               static_cast<unsigned long long>(stats.used_current),
               static_cast<unsigned long long>(stats.reserved_current));
    check_device_figures(device, 0);
    FUZZ_CHECK(committed_bytes(device) == 0, "device %d keeps %zu B committed after cleanup",
               device, committed_bytes(device));
    std::uint64_t zero = 0;
    FUZZ_OK(somaMemPoolSetAttribute(pool, somaMemPoolAttrUsedMemHigh, &zero));
    FUZZ_OK(somaMemPoolSetAttribute(pool, somaMemPoolAttrReservedMemHigh, &zero));
  }
  FUZZ_OK(somaSetDevice(0));
}

/// Puts a default pool back as a fresh process has it: current, threshold 0, every reuse policy
/// on, no compaction, no access for other devices.
inline void restore_default_pool(int device) {
  somaMemPool_t pool = nullptr;
  FUZZ_OK(somaDeviceGetDefaultMemPool(&pool, device));
  FUZZ_OK(somaDeviceSetMemPool(device, pool));
  std::uint64_t threshold = 0;
  FUZZ_OK(somaMemPoolSetAttribute(pool, somaMemPoolAttrReleaseThreshold, &threshold));
  for (somaMemPoolAttr attr :
       {somaMemPoolReuseFollowEventDependencies, somaMemPoolReuseAllowOpportunistic,
        somaMemPoolReuseAllowInternalDependencies}) {
    int on = 1;
    FUZZ_OK(somaMemPoolSetAttribute(pool, attr, &on));
  }
  int off = 0;
  FUZZ_OK(somaMemPoolSetAttribute(pool, somaMemPoolAttrCompactBeforeGrowth, &off));
  for (int other = 0; other < kDeviceCount; ++other) {
    if (other == device) continue;
    const somaMemAccessDesc revoke{{somaMemLocationTypeDevice, other}, somaMemAccessFlagsProtNone};
    FUZZ_OK(somaMemPoolSetAccess(pool, &revoke, 1));
  }
}

/// Valid properties of an explicit pool.
inline somaMemPoolProps pool_props(int device, std::size_t max_size, bool exportable) {
  somaMemPoolProps props{};
  props.allocType = somaMemAllocationTypePinned;
  props.handleTypes = exportable ? somaMemHandleTypePosixFileDescriptor : somaMemHandleTypeNone;
  props.location.type = somaMemLocationTypeDevice;
  props.location.id = device;
  props.maxSize = max_size;
  return props;
}

}  // namespace soma_fuzz
