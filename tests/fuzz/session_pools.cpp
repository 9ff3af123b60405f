// Pools and every setting that changes one: create and destroy (S5), current pool (S4),
// release threshold and trim (S9), statistics resets (S10), reuse policies and compaction
// (S11), access for the other device (S6). Each setting is read back.
#include <soma/soma.h>

#include <cstdint>

#include "api_model.hpp"
#include "fuzz_check.hpp"
#include "session.hpp"

namespace soma_fuzz {
namespace {

constexpr somaMemPoolAttr kReuseAttributes[3] = {somaMemPoolReuseFollowEventDependencies,
                                                 somaMemPoolReuseAllowOpportunistic,
                                                 somaMemPoolReuseAllowInternalDependencies};

int read_int(somaMemPool_t pool, somaMemPoolAttr attr) {
  int value = -1;
  FUZZ_OK(somaMemPoolGetAttribute(pool, attr, &value));
  return value;
}

void check_current_pool(int device, somaMemPool_t expected) {
  somaMemPool_t current = nullptr;
  FUZZ_OK(somaDeviceGetMemPool(&current, device));
  FUZZ_CHECK(current == expected, "device %d: current pool %p, expected %p", device,
             static_cast<void*>(current), static_cast<void*>(expected));
}

}  // namespace

void session::pool_create(const operation& op) {
  const int slot = kDeviceCount + op.a % (kPoolSlots - kDeviceCount);
  if (state_.pool_slots[static_cast<std::size_t>(slot)] >= 0) return;
  constexpr std::size_t kMaxSizes[] = {
      0,         kGranularityBytes,          3 * kGranularityBytes + 1,
      128 * KiB, kDeviceMemoryBytes / 2 + 5, kDeviceMemoryBytes};
  pool_record pool;
  pool.device = op.b % kDeviceCount;
  const std::size_t max_size = kMaxSizes[op.raw % std::size(kMaxSizes)];
  pool.cap_bytes = max_size == 0 ? kDeviceMemoryBytes : round_up(max_size, kGranularityBytes);
  pool.access[static_cast<std::size_t>(pool.device)] = somaMemAccessFlagsProtReadWrite;
  pool.exportable = (op.c & 1) != 0;
  const somaMemPoolProps props = pool_props(pool.device, max_size, pool.exportable);
  FUZZ_OK(somaMemPoolCreate(&pool.handle, &props));
  if (op.c & 2) FUZZ_OK(somaMemPoolSetName(pool.handle, "fuzz-pool"));
  pool.last = read_pool_stats(pool.handle);
  FUZZ_CHECK(pool.last == pool_stats{}, "a new pool is not empty");
  state_.pool_slots[static_cast<std::size_t>(slot)] = static_cast<int>(state_.pools.size());
  state_.pools.push_back(pool);
}

/// S5: returns at once even with live allocations, whose frees still succeed later; the
/// default pool becomes current again if this one was.
void session::pool_destroy(const operation& op) {
  const int slot = kDeviceCount + op.a % (kPoolSlots - kDeviceCount);
  const int index = state_.pool_slots[static_cast<std::size_t>(slot)];
  if (index < 0) return;
  pool_record& pool = state_.pool(index);
  FUZZ_OK(somaMemPoolDestroy(pool.handle));
  pool.alive = false;
  state_.pool_slots[static_cast<std::size_t>(slot)] = -1;
  state_.stale_pools.push_back(pool.handle);
  int& current = state_.current_pool[static_cast<std::size_t>(pool.device)];
  if (current == index) current = pool.device;  // the default pool's index
  check_current_pool(pool.device, state_.pool(current).handle);
  FUZZ_EXPECT_STATUS(somaMemPoolTrimTo(pool.handle, 0), somaErrorInvalidResourceHandle);
}

void session::set_reuse_policy(const operation& op) {
  pool_record& pool = state_.pool(state_.pick_pool(op.a));
  const std::size_t which = op.b % 3;
  int value = op.c & 1;
  FUZZ_OK(somaMemPoolSetAttribute(pool.handle, kReuseAttributes[which], &value));
  pool.reuse[which] = value;
  for (std::size_t i = 0; i < 3; ++i)
    FUZZ_CHECK(read_int(pool.handle, kReuseAttributes[i]) == pool.reuse[i],
               "reuse policy %zu reads %d, set %d", i, read_int(pool.handle, kReuseAttributes[i]),
               pool.reuse[i]);
}

void session::set_release_threshold(const operation& op) {
  pool_record& pool = state_.pool(state_.pick_pool(op.a));
  std::uint64_t threshold = op.c & 1 ? UINT64_MAX : op.size;
  FUZZ_OK(somaMemPoolSetAttribute(pool.handle, somaMemPoolAttrReleaseThreshold, &threshold));
  pool.threshold = threshold;
  std::uint64_t read = 0;
  FUZZ_OK(somaMemPoolGetAttribute(pool.handle, somaMemPoolAttrReleaseThreshold, &read));
  FUZZ_CHECK(read == threshold, "threshold reads %llu, set %llu",
             static_cast<unsigned long long>(read), static_cast<unsigned long long>(threshold));
}

void session::set_compaction(const operation& op) {
  pool_record& pool = state_.pool(state_.pick_pool(op.a));
  int value = op.c & 1;
  FUZZ_OK(somaMemPoolSetAttribute(pool.handle, somaMemPoolAttrCompactBeforeGrowth, &value));
  pool.compaction = value;
  FUZZ_CHECK(read_int(pool.handle, somaMemPoolAttrCompactBeforeGrowth) == value,
             "compaction reads other than set");
  // The same op sets remapping: never, before growth, or instead of failing (the default).
  int remap = static_cast<int>((op.c >> 1) % 3);
  FUZZ_OK(somaMemPoolSetAttribute(pool.handle, somaMemPoolAttrRemapFreeMemory, &remap));
  FUZZ_CHECK(read_int(pool.handle, somaMemPoolAttrRemapFreeMemory) == remap,
             "remapping reads other than set");
}

/// S9: a request bounded by live memory; what it may leave is checked by the statistics.
void session::trim_to(const operation& op) {
  pool_record& pool = state_.pool(state_.pick_pool(op.a));
  FUZZ_OK(somaMemPoolTrimTo(pool.handle, op.size));
  if (pool.live_bytes == 0 && op.size == 0 && (op.c & 1)) {
    // With nothing live and every free proven complete, trimming to 0 leaves nothing.
    for (int device = 0; device < kDeviceCount; ++device) {
      FUZZ_OK(somaSetDevice(device));
      FUZZ_OK(somaDeviceSynchronize());
    }
    FUZZ_OK(somaMemPoolTrimTo(pool.handle, 0));
    FUZZ_CHECK(read_pool_stats(pool.handle).reserved_current == 0,
               "trim to 0 of a pool with nothing live left memory reserved");
  }
}

/// S10: setting a high to 0 resets it to the current value.
void session::reset_high(const operation& op) {
  pool_record& pool = state_.pool(state_.pick_pool(op.a));
  const bool used = op.b & 1;
  std::uint64_t zero = 0;
  FUZZ_OK(somaMemPoolSetAttribute(
      pool.handle, used ? somaMemPoolAttrUsedMemHigh : somaMemPoolAttrReservedMemHigh, &zero));
  pool.last = read_pool_stats(pool.handle);
  FUZZ_CHECK(used ? pool.last.used_high == pool.last.used_current
                  : pool.last.reserved_high == pool.last.reserved_current,
             "a reset high reads %llu, not the current value",
             static_cast<unsigned long long>(used ? pool.last.used_high : pool.last.reserved_high));
}

/// S4: a device's current pool must be one of its own.
void session::set_current_pool(const operation& op) {
  const int index = state_.pick_pool(op.a);
  const pool_record& pool = state_.pool(index);
  const int device = op.b % kDeviceCount;
  const bool own = pool.device == device;
  FUZZ_EXPECT_STATUS(somaDeviceSetMemPool(device, pool.handle),
                     own ? somaSuccess : somaErrorInvalidValue);
  if (own) state_.current_pool[static_cast<std::size_t>(device)] = index;
  check_current_pool(device,
                     state_.pool(state_.current_pool[static_cast<std::size_t>(device)]).handle);
}

/// S6: grants and revocations for the other device; the owner keeps read-write.
void session::set_access(const operation& op) {
  pool_record& pool = state_.pool(state_.pick_pool(op.a));
  const int device = op.b % kDeviceCount;
  constexpr somaMemAccessFlags kFlags[] = {somaMemAccessFlagsProtNone, somaMemAccessFlagsProtRead,
                                           somaMemAccessFlagsProtReadWrite};
  const somaMemAccessFlags flags = kFlags[op.c % 3];
  const somaMemAccessDesc desc{{somaMemLocationTypeDevice, device}, flags};
  somaError_t expected = somaSuccess;
  if (device == pool.device && flags == somaMemAccessFlagsProtNone)
    expected = somaErrorInvalidDevice;
  if (device == pool.device && flags == somaMemAccessFlagsProtRead)
    expected = somaErrorNotSupported;
  FUZZ_EXPECT_STATUS(somaMemPoolSetAccess(pool.handle, &desc, 1), expected);
  if (expected == somaSuccess && device != pool.device)
    pool.access[static_cast<std::size_t>(device)] = flags;
  somaMemLocation location{somaMemLocationTypeDevice, device};
  somaMemAccessFlags read = somaMemAccessFlagsProtNone;
  FUZZ_OK(somaMemPoolGetAccess(&read, pool.handle, &location));
  FUZZ_CHECK(read == pool.access[static_cast<std::size_t>(device)],
             "device %d access reads %d, expected %d", device, static_cast<int>(read),
             static_cast<int>(pool.access[static_cast<std::size_t>(device)]));
}

}  // namespace soma_fuzz
