// soma::memory_resource as a memory resource of CCCL (<cuda/memory_resource>, the CCCL 3.0 of
// the CUDA 13.0 toolkit): it satisfies cuda::mr::resource_with<soma::memory_resource,
// cuda::mr::device_accessible>, so code written only against CCCL takes it through a
// cuda::mr::resource_ref. Include this header instead of <cuda/memory_resource>; the toolkit's
// include/cccl and include directories must be on the include path. CCCL 3.0 marks that header
// experimental: this one defines LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE.
//
// CCCL 3.0's resource is synchronous: allocate(bytes, alignment) and deallocate(ptr, bytes,
// alignment) are memory_resource::allocate_sync and deallocate_sync, memory usable by every
// stream at return. The stream-ordered calls are memory_resource's allocate(stream, ...) and
// deallocate(stream, ...), in the shape of later CCCL versions.
#pragma once

#ifndef LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#endif
#include <cuda/memory_resource>

#include "soma/cxx/memory.hpp"

namespace soma {

/** Found by argument-dependent lookup: soma's pool memory is device memory (S14). */
inline void get_property(const memory_resource&, cuda::mr::device_accessible) noexcept {}

static_assert(cuda::mr::resource_with<memory_resource, cuda::mr::device_accessible>,
              "soma::memory_resource is a CCCL resource of device-accessible memory");

/** A memory_resource over a host pool (S5: pool_options::location Host or HostNuma): its memory
 *  is the host's, and a device's once somaMemPoolSetAccess granted it (grant the devices before
 *  handing the resource to device code). Throws soma::error (somaErrorInvalidValue) for a pool
 *  of device memory. */
class host_memory_resource : public memory_resource {
 public:
  explicit host_memory_resource(const pool& p) : host_memory_resource(p.handle()) {}
  explicit host_memory_resource(somaMemPool_t handle) : memory_resource(handle) {
    int location = 0;
    check(somaMemPoolGetAttribute(handle, somaMemPoolAttrLocationType, &location));
    if (location != somaMemLocationTypeHost && location != somaMemLocationTypeHostNuma)
      throw error(somaErrorInvalidValue, "soma::host_memory_resource: the pool is not a host pool");
  }
};

inline void get_property(const host_memory_resource&, cuda::mr::host_accessible) noexcept {}

static_assert(cuda::mr::resource_with<host_memory_resource, cuda::mr::host_accessible,
                                      cuda::mr::device_accessible>,
              "soma::host_memory_resource is a CCCL resource of host- and device-accessible "
              "memory");

}  // namespace soma
