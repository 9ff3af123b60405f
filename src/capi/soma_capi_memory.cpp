// The C API of allocation, pools and pointer attributes (S1-S6, S9-S11, S14): translation to
// the runtime, or to the graph layer on a capturing stream (S15).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "capi/capture_dispatch.hpp"
#include "runtime/runtime.hpp"
#include "runtime/runtime_fast_lane.hpp"
#include "soma/soma.h"

using namespace soma::capi;  // NOLINT(google-build-using-namespace): the C API's helpers

extern "C" {

// ---- allocation ------------------------------------------------------------------------------

somaError_t somaMallocAsync(void** devPtr, size_t size, somaStream_t stream) {
  // The fast lane: a hit in the stream's cache while nothing captures (S15).
  if (runtime* rt = runtime::ready();
      rt != nullptr && devPtr != nullptr && !graph_service::any_capture()) [[likely]] {
    somaError_t outcome = somaSuccess;
    if (run_lane(
            [&] {
              void* hit = rt->allocate_cached(size, handle_of(stream));
              if (hit != nullptr) *devPtr = hit;
              return hit != nullptr;
            },
            &outcome)) [[likely]]
      return outcome;
  }
  return with_runtime([&](runtime& rt) -> status {
    if (devPtr == nullptr) return null_argument("somaMallocAsync", "devPtr");
    if (auto* c = capture_of(rt, stream))
      return graph_service::of(rt).capture_alloc(*c, handle_of(stream), devPtr, size, 0);
    return store(rt.allocate(size, handle_of(stream)), devPtr);
  });
}

somaError_t somaMallocFromPoolAsync(void** ptr, size_t size, somaMemPool_t memPool,
                                    somaStream_t stream) {
  if (runtime* rt = runtime::ready();
      rt != nullptr && ptr != nullptr && !graph_service::any_capture()) [[likely]] {
    somaError_t outcome = somaSuccess;
    if (run_lane(
            [&] {
              void* hit =
                  rt->allocate_cached_from_pool(size, handle_of(memPool), handle_of(stream));
              if (hit != nullptr) *ptr = hit;
              return hit != nullptr;
            },
            &outcome)) [[likely]]
      return outcome;
  }
  return with_runtime([&](runtime& rt) -> status {
    if (ptr == nullptr) return null_argument("somaMallocFromPoolAsync", "ptr");
    if (auto* c = capture_of(rt, stream)) {
      if (memPool == nullptr) return null_argument("somaMallocFromPoolAsync", "memPool");
      return graph_service::of(rt).capture_alloc(*c, handle_of(stream), ptr, size,
                                                 handle_of(memPool));
    }
    return store(rt.allocate_from_pool(size, handle_of(memPool), handle_of(stream)), ptr);
  });
}

somaError_t somaFreeAsync(void* devPtr, somaStream_t stream) {
  if (runtime* rt = runtime::ready(); rt != nullptr && !graph_service::any_capture()) [[likely]] {
    somaError_t outcome = somaSuccess;
    if (run_lane([&] { return rt->free_fast(devPtr, handle_of(stream)); }, &outcome)) [[likely]]
      return outcome;
  }
  return with_runtime([&](runtime& rt) -> status {
    if (auto* c = capture_of(rt, stream))
      return graph_service::of(rt).capture_free(*c, handle_of(stream), devPtr);
    return rt.free(devPtr, handle_of(stream));
  });
}

// ---- pools ---------------------------------------------------------------------------------

somaError_t somaMemPoolCreate(somaMemPool_t* memPool, const somaMemPoolProps* poolProps) {
  return with_runtime([&](runtime& rt) -> status {
    if (memPool == nullptr) return null_argument("somaMemPoolCreate", "memPool");
    if (poolProps == nullptr) return null_argument("somaMemPoolCreate", "poolProps");
    soma::detail::raw_pool_properties raw;
    raw.allocation_type = raw_value(poolProps->allocType);
    raw.handle_types = static_cast<unsigned>(raw_value(poolProps->handleTypes));
    raw.location_type = raw_value(poolProps->location.type);
    raw.location_id = poolProps->location.id;
    raw.has_win32_security_attributes = poolProps->win32SecurityAttributes != nullptr;
    raw.max_size_bytes = poolProps->maxSize;
    raw.usage = poolProps->usage;
    for (unsigned char byte : poolProps->reserved)
      raw.reserved_is_zero = raw.reserved_is_zero && byte == 0;
    return store(rt.pools().create(raw), memPool);
  });
}

somaError_t somaMemPoolDestroy(somaMemPool_t memPool) {
  return with_runtime([&](runtime& rt) { return rt.pools().destroy(handle_of(memPool)); });
}

somaError_t somaDeviceGetDefaultMemPool(somaMemPool_t* memPool, int device) {
  return with_runtime([&](runtime& rt) -> status {
    if (memPool == nullptr) return null_argument("somaDeviceGetDefaultMemPool", "memPool");
    return store(rt.pools().default_pool(device), memPool);
  });
}

somaError_t somaMemGetDefaultMemPool(somaMemPool_t* memPool, somaMemLocation* location,
                                     somaMemAllocationType type) {
  return with_runtime([&](runtime& rt) -> status {
    if (memPool == nullptr) return null_argument("somaMemGetDefaultMemPool", "memPool");
    if (location == nullptr) return null_argument("somaMemGetDefaultMemPool", "location");
    return store(
        rt.pools().default_pool_at(raw_value(location->type), location->id, raw_value(type)),
        memPool);
  });
}

somaError_t somaMemGetMemPool(somaMemPool_t* memPool, somaMemLocation* location,
                              somaMemAllocationType type) {
  return with_runtime([&](runtime& rt) -> status {
    if (memPool == nullptr) return null_argument("somaMemGetMemPool", "memPool");
    if (location == nullptr) return null_argument("somaMemGetMemPool", "location");
    return store(rt.pools().current_at(raw_value(location->type), location->id, raw_value(type)),
                 memPool);
  });
}

somaError_t somaMemSetMemPool(somaMemLocation* location, somaMemAllocationType type,
                              somaMemPool_t memPool) {
  return with_runtime([&](runtime& rt) -> status {
    if (location == nullptr) return null_argument("somaMemSetMemPool", "location");
    return rt.pools().set_current_at(raw_value(location->type), location->id, raw_value(type),
                                     handle_of(memPool));
  });
}

somaError_t somaDeviceSetMemPool(int device, somaMemPool_t memPool) {
  return with_runtime(
      [&](runtime& rt) { return rt.pools().set_current(device, handle_of(memPool)); });
}

somaError_t somaDeviceGetMemPool(somaMemPool_t* memPool, int device) {
  return with_runtime([&](runtime& rt) -> status {
    if (memPool == nullptr) return null_argument("somaDeviceGetMemPool", "memPool");
    return store(rt.pools().current(device), memPool);
  });
}

// The runtime's pool attributes are somaMemPoolAttr's values, passed over by a cast.
#define SOMA_SAME_ATTRIBUTE(ours, theirs) \
  static_assert(static_cast<int>(soma::detail::pool_attribute::ours) == (theirs), #theirs)
SOMA_SAME_ATTRIBUTE(reuse_follow_event_dependencies, somaMemPoolReuseFollowEventDependencies);
SOMA_SAME_ATTRIBUTE(reuse_allow_opportunistic, somaMemPoolReuseAllowOpportunistic);
SOMA_SAME_ATTRIBUTE(reuse_allow_internal_dependencies, somaMemPoolReuseAllowInternalDependencies);
SOMA_SAME_ATTRIBUTE(release_threshold, somaMemPoolAttrReleaseThreshold);
SOMA_SAME_ATTRIBUTE(reserved_current, somaMemPoolAttrReservedMemCurrent);
SOMA_SAME_ATTRIBUTE(reserved_high, somaMemPoolAttrReservedMemHigh);
SOMA_SAME_ATTRIBUTE(used_current, somaMemPoolAttrUsedMemCurrent);
SOMA_SAME_ATTRIBUTE(used_high, somaMemPoolAttrUsedMemHigh);
SOMA_SAME_ATTRIBUTE(allocation_type, somaMemPoolAttrAllocationType);
SOMA_SAME_ATTRIBUTE(export_handle_types, somaMemPoolAttrExportHandleTypes);
SOMA_SAME_ATTRIBUTE(location_id, somaMemPoolAttrLocationId);
SOMA_SAME_ATTRIBUTE(location_type, somaMemPoolAttrLocationType);
SOMA_SAME_ATTRIBUTE(max_pool_size, somaMemPoolAttrMaxPoolSize);
SOMA_SAME_ATTRIBUTE(compact_before_growth, somaMemPoolAttrCompactBeforeGrowth);
SOMA_SAME_ATTRIBUTE(remap_free_memory, somaMemPoolAttrRemapFreeMemory);
SOMA_SAME_ATTRIBUTE(remap_count, somaMemPoolAttrRemapCount);
SOMA_SAME_ATTRIBUTE(remapped_bytes, somaMemPoolAttrRemappedBytes);
SOMA_SAME_ATTRIBUTE(remap_kept_bytes, somaMemPoolAttrRemapKeptBytes);
#undef SOMA_SAME_ATTRIBUTE

somaError_t somaMemPoolSetAttribute(somaMemPool_t memPool, somaMemPoolAttr attr, void* value) {
  return with_runtime([&](runtime& rt) {
    return rt.pools().set_attribute(
        handle_of(memPool), static_cast<soma::detail::pool_attribute>(raw_value(attr)), value);
  });
}

somaError_t somaMemPoolGetAttribute(somaMemPool_t memPool, somaMemPoolAttr attr, void* value) {
  return with_runtime([&](runtime& rt) {
    return rt.pools().get_attribute(
        handle_of(memPool), static_cast<soma::detail::pool_attribute>(raw_value(attr)), value);
  });
}

somaError_t somaMemPoolTrimTo(somaMemPool_t memPool, size_t minBytesToKeep) {
  return with_runtime(
      [&](runtime& rt) { return rt.pools().trim(handle_of(memPool), minBytesToKeep); });
}

somaError_t somaMemPoolSetAccess(somaMemPool_t memPool, const somaMemAccessDesc* descList,
                                 size_t count) {
  return with_runtime([&](runtime& rt) -> status {
    if (status ok = rt.pools().check_access_list(descList, count); !ok.ok()) return ok;
    std::vector<access_request> requests;
    if (descList != nullptr) {
      requests.reserve(count);
      for (size_t i = 0; i < count; ++i) {
        requests.push_back({raw_value(descList[i].location.type), descList[i].location.id,
                            raw_value(descList[i].flags)});
      }
    }
    return rt.pools().set_access(handle_of(memPool),
                                 descList == nullptr ? nullptr : requests.data(), count);
  });
}

somaError_t somaMemPoolGetAccess(somaMemAccessFlags* flags, somaMemPool_t memPool,
                                 somaMemLocation* location) {
  return with_runtime([&](runtime& rt) -> status {
    if (flags == nullptr) return null_argument("somaMemPoolGetAccess", "flags");
    if (location == nullptr) return null_argument("somaMemPoolGetAccess", "location");
    result<int> access =
        rt.pools().access(handle_of(memPool), raw_value(location->type), location->id);
    if (!access.ok()) return access.take_error();
    *flags = static_cast<somaMemAccessFlags>(access.value());
    return status::success();
  });
}

somaError_t somaMemPoolSetName(somaMemPool_t memPool, const char* name) {
  return with_runtime([&](runtime& rt) { return rt.pools().set_name(handle_of(memPool), name); });
}

// ---- pointers ------------------------------------------------------------------------------

somaError_t somaPointerGetAttributes(somaPointerAttributes* attributes, const void* ptr) {
  return with_runtime([&](runtime& rt) -> status {
    if (attributes == nullptr) return null_argument("somaPointerGetAttributes", "attributes");
    const soma::detail::pointer_info info = rt.describe_pointer(ptr);
    std::memset(attributes, 0, sizeof *attributes);
    if (info.is_host) {  // somaMallocHost memory, reachable from the host and every device
      attributes->type = somaMemoryTypeHost;
      attributes->hostPointer = const_cast<void*>(ptr);
      attributes->devicePointer = const_cast<void*>(ptr);
      attributes->base = reinterpret_cast<void*>(info.base);
      attributes->size = info.requested_bytes;
      return status::success();
    }
    attributes->type = !info.is_live       ? somaMemoryTypeUnregistered
                       : info.in_host_pool ? somaMemoryTypeHost
                                           : somaMemoryTypeDevice;
    attributes->device = info.device;
    attributes->devicePointer = info.is_live ? const_cast<void*>(ptr) : nullptr;
    // Host memory, and every allocation on the cpu backend, is reachable by the host.
    attributes->hostPointer =
        info.is_live && (info.in_host_pool || rt.devices().backend_name() == "cpu")
            ? const_cast<void*>(ptr)
            : nullptr;
    if (info.is_live) {
      attributes->location.type = !info.in_host_pool    ? somaMemLocationTypeDevice
                                  : info.numa_node >= 0 ? somaMemLocationTypeHostNuma
                                                        : somaMemLocationTypeHost;
      attributes->location.id = info.in_host_pool ? std::max(info.numa_node, 0) : info.device;
    }
    attributes->pool = reinterpret_cast<somaMemPool_t>(info.pool_handle);
    attributes->base = reinterpret_cast<void*>(info.base);
    attributes->size = info.requested_bytes;
    attributes->isLiveAllocation = info.is_live ? 1 : 0;
    return status::success();
  });
}

}  // extern "C"
