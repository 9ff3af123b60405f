// Error paths: calls a program gets wrong (double and interior frees, dead and forged handles,
// NULL pools and pointers, values an attribute does not take). Each must return its code and
// change no pool's statistics (api-behaviour.md: "A failed call changes nothing in the pool").
#include <soma/soma.h>

#include <cstdint>
#include <vector>

#include "api_model.hpp"
#include "fuzz_check.hpp"
#include "session.hpp"

namespace soma_fuzz {
namespace {

/// A handle value soma never issued: a small integer, or the kind's top byte over input bits
/// (issued handles mix a random salt, so input cannot name a live one).
template <typename Handle>
Handle forged(std::uint16_t bits, std::uint8_t kind_byte) {
  if (bits & 1) return reinterpret_cast<Handle>(std::uintptr_t{bits} | 0x10000);
  return reinterpret_cast<Handle>((std::uintptr_t{kind_byte} << 56) | (std::uintptr_t{bits} << 20));
}

template <typename Handle>
Handle dead_or_forged(const std::vector<Handle>& stale, const operation& op, std::uint8_t kind) {
  if (!stale.empty() && (op.c & 1)) return stale[op.b % stale.size()];
  return forged<Handle>(op.raw, kind);
}

}  // namespace

void session::bad_call(const operation& op) {
  std::vector<pool_stats> before;
  for (const pool_record& pool : state_.pools)
    if (pool.alive) before.push_back(read_pool_stats(pool.handle));

  const stream_ref& stream = state_.stream(state_.pick_stream(op.b));
  const auto bad_stream = dead_or_forged(state_.stale_streams, op, 0xa1);
  const auto bad_event = dead_or_forged(state_.stale_events, op, 0xa2);
  const auto bad_pool = dead_or_forged(state_.stale_pools, op, 0xa3);
  const allocation* live = state_.live.empty() ? nullptr : &state_.live[op.b % state_.live.size()];
  void* pointer = nullptr;
  std::uint64_t value = 0;
  int flag = 2 + op.c;

  switch (op.a % 16) {
    case 0:  // double free (S2)
      if (!state_.freed.empty()) {
        void* freed = state_.freed[op.c % state_.freed.size()];
        if (state_.containing(freed) == nullptr)
          FUZZ_EXPECT_STATUS(somaFreeAsync(freed, use(stream)), somaErrorInvalidValue);
      }
      break;
    case 1:  // a pointer inside an allocation; the allocation survives
      if (live != nullptr && live->size > 1) {
        const std::size_t offset = 1 + op.raw % (live->size - 1);
        FUZZ_EXPECT_STATUS(somaFreeAsync(static_cast<char*>(live->pointer) + offset, use(stream)),
                           somaErrorInvalidValue);
        check_live_attributes(live->pointer, live->size, state_.pool(live->pool).device, nullptr,
                              0);
      }
      break;
    case 2: {  // memory soma never returned
      int on_stack = 0;
      FUZZ_EXPECT_STATUS(somaFreeAsync(&on_stack, use(stream)), somaErrorInvalidValue);
      break;
    }
    case 3:  // dead or forged streams
      FUZZ_EXPECT_STATUS(somaMallocAsync(&pointer, 64, bad_stream), somaErrorInvalidResourceHandle);
      FUZZ_EXPECT_STATUS(somaStreamSynchronize(bad_stream), somaErrorInvalidResourceHandle);
      FUZZ_EXPECT_STATUS(somaStreamDestroy(bad_stream), somaErrorInvalidResourceHandle);
      if (live != nullptr) {
        FUZZ_EXPECT_STATUS(somaFreeAsync(live->pointer, bad_stream),
                           somaErrorInvalidResourceHandle);
        FUZZ_EXPECT_STATUS(somaMemsetAsync(live->pointer, 0, live->size, bad_stream),
                           somaErrorInvalidResourceHandle);
      }
      break;
    case 4:  // dead or forged pools
      FUZZ_EXPECT_STATUS(somaMallocFromPoolAsync(&pointer, 64, bad_pool, use(stream)),
                         somaErrorInvalidResourceHandle);
      FUZZ_EXPECT_STATUS(somaMemPoolTrimTo(bad_pool, 0), somaErrorInvalidResourceHandle);
      FUZZ_EXPECT_STATUS(somaDeviceSetMemPool(0, bad_pool), somaErrorInvalidResourceHandle);
      FUZZ_EXPECT_STATUS(somaMemPoolDestroy(bad_pool), somaErrorInvalidResourceHandle);
      FUZZ_EXPECT_STATUS(somaMemPoolGetAttribute(bad_pool, somaMemPoolAttrUsedMemCurrent, &value),
                         somaErrorInvalidResourceHandle);
      break;
    case 5:  // a NULL pool, as CUDA
      FUZZ_EXPECT_STATUS(somaMallocFromPoolAsync(&pointer, 64, nullptr, use(stream)),
                         somaErrorInvalidValue);
      break;
    case 6:  // default pools cannot be destroyed (S5)
      FUZZ_EXPECT_STATUS(somaMemPoolDestroy(state_.pool(op.c % kDeviceCount).handle),
                         somaErrorInvalidValue);
      break;
    case 7:  // dead or forged events
      FUZZ_EXPECT_STATUS(somaEventRecord(bad_event, use(stream)), somaErrorInvalidResourceHandle);
      FUZZ_EXPECT_STATUS(somaStreamWaitEvent(use(stream), bad_event, 0),
                         somaErrorInvalidResourceHandle);
      FUZZ_EXPECT_STATUS(somaEventSynchronize(bad_event), somaErrorInvalidResourceHandle);
      FUZZ_EXPECT_STATUS(somaEventDestroy(bad_event), somaErrorInvalidResourceHandle);
      break;
    case 8: {  // values an attribute does not take
      const pool_record& pool = state_.pool(state_.pick_pool(op.c));
      FUZZ_EXPECT_STATUS(
          somaMemPoolSetAttribute(pool.handle, somaMemPoolReuseAllowOpportunistic, &flag),
          somaErrorInvalidValue);
      FUZZ_EXPECT_STATUS(
          somaMemPoolSetAttribute(pool.handle, somaMemPoolAttrCompactBeforeGrowth, &flag),
          somaErrorInvalidValue);
      value = 1 + op.raw;
      FUZZ_EXPECT_STATUS(somaMemPoolSetAttribute(pool.handle, somaMemPoolAttrUsedMemHigh, &value),
                         somaErrorInvalidValue);
      FUZZ_EXPECT_STATUS(
          somaMemPoolSetAttribute(pool.handle, somaMemPoolAttrReservedMemHigh, &value),
          somaErrorInvalidValue);
      FUZZ_EXPECT_STATUS(
          somaMemPoolSetAttribute(pool.handle, somaMemPoolAttrUsedMemCurrent, &value),
          somaErrorInvalidValue);
      FUZZ_EXPECT_STATUS(
          somaMemPoolSetAttribute(pool.handle, somaMemPoolAttrReleaseThreshold, nullptr),
          somaErrorInvalidValue);
      break;
    }
    case 9: {  // a pool of the other device cannot be current (S4)
      const pool_record& pool = state_.pool(state_.pick_pool(op.c));
      FUZZ_EXPECT_STATUS(somaDeviceSetMemPool(1 - pool.device, pool.handle), somaErrorInvalidValue);
      break;
    }
    case 10:  // NULL result pointers
      FUZZ_EXPECT_STATUS(somaMallocAsync(nullptr, 64, use(stream)), somaErrorInvalidValue);
      FUZZ_EXPECT_STATUS(somaMallocFromPoolAsync(nullptr, 64, state_.pool(0).handle, use(stream)),
                         somaErrorInvalidValue);
      break;
    case 11:  // a memset past the end of a live allocation (S13)
      if (live != nullptr) {
        const std::size_t offset = op.raw % live->size;
        FUZZ_EXPECT_STATUS(somaMemsetAsync(static_cast<char*>(live->pointer) + offset, 0,
                                           live->size - offset + 1 + op.c, use(stream)),
                           somaErrorInvalidValue);
      }
      break;
    case 12:  // a device that does not exist
      FUZZ_EXPECT_STATUS(somaSetDevice(kDeviceCount + op.c), somaErrorInvalidDevice);
      FUZZ_EXPECT_STATUS(somaSetDevice(-1 - op.c), somaErrorInvalidDevice);
      break;
    case 13: {  // properties a pool cannot have
      somaMemPoolProps props = pool_props(op.c % kDeviceCount, 0, false);
      props.reserved[op.raw % sizeof props.reserved] = 1;
      somaMemPool_t pool = nullptr;
      FUZZ_EXPECT_STATUS(somaMemPoolCreate(&pool, &props), somaErrorInvalidValue);
      props = pool_props(op.c % kDeviceCount, 0, false);
      props.allocType = somaMemAllocationTypeManaged;
      FUZZ_EXPECT_STATUS(somaMemPoolCreate(&pool, &props), somaErrorNotSupported);
      props = pool_props(kDeviceCount + op.c, 0, false);
      FUZZ_EXPECT_STATUS(somaMemPoolCreate(&pool, &props), somaErrorInvalidValue);
      break;
    }
    case 14:  // a free on a dead stream keeps the allocation live
      if (live != nullptr) {
        FUZZ_EXPECT_STATUS(somaFreeAsync(live->pointer, bad_stream),
                           somaErrorInvalidResourceHandle);
        check_live_attributes(live->pointer, live->size, state_.pool(live->pool).device, nullptr,
                              0);
      }
      break;
    default:  // a size no device has
      FUZZ_EXPECT_STATUS(somaMallocAsync(&pointer, kDeviceMemoryBytes + 1 + op.raw, use(stream)),
                         somaErrorMemoryAllocation);
      break;
  }

  std::size_t i = 0;
  for (const pool_record& pool : state_.pools) {
    if (!pool.alive) continue;
    FUZZ_CHECK(read_pool_stats(pool.handle) == before[i],
               "a refused call (kind %d) changed a pool's statistics", op.a % 16);
    ++i;
  }
}

}  // namespace soma_fuzz
