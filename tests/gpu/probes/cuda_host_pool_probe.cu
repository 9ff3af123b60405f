// What CUDA itself does with host pools and location-keyed pools (the facts soma's host pools
// follow, docs/api-behaviour.md "Pools"): prints one line per question with the driver's
// answer. Not a test: run it on a GPU machine (scripts/gpu-check.sh step 1 logs it).
#include <cuda_runtime.h>

#include <cstdio>

namespace {

const char* name(cudaError_t status) { return cudaGetErrorName(status); }

cudaMemPoolProps props_at(cudaMemLocationType type, int id) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = type;
  props.location.id = id;
  return props;
}

}  // namespace

int main() {
  int value = 0;
  cudaDeviceGetAttribute(&value, cudaDevAttrHostMemoryPoolsSupported, 0);
  std::printf("attribute HostMemoryPoolsSupported: %d\n", value);
  cudaDeviceGetAttribute(&value, cudaDevAttrHostNumaMemoryPoolsSupported, 0);
  std::printf("attribute HostNumaMemoryPoolsSupported: %d\n", value);

  cudaMemPool_t host_pool = nullptr, numa_pool = nullptr, other = nullptr;
  cudaMemPoolProps host = props_at(cudaMemLocationTypeHost, 0);
  std::printf("create Host pool: %s\n", name(cudaMemPoolCreate(&host_pool, &host)));
  cudaMemPoolProps numa = props_at(cudaMemLocationTypeHostNuma, 0);
  std::printf("create HostNuma 0 pool: %s\n", name(cudaMemPoolCreate(&numa_pool, &numa)));
  cudaMemPoolProps bad_node = props_at(cudaMemLocationTypeHostNuma, 4096);
  std::printf("create HostNuma 4096 pool: %s\n", name(cudaMemPoolCreate(&other, &bad_node)));
  cudaMemPoolProps exportable = host;
  exportable.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  std::printf("create exportable Host pool: %s\n", name(cudaMemPoolCreate(&other, &exportable)));
  cudaMemPoolProps numa_exportable = numa;
  numa_exportable.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  cudaError_t made = cudaMemPoolCreate(&other, &numa_exportable);
  std::printf("create exportable HostNuma 0 pool: %s\n", name(made));
  if (made == cudaSuccess) cudaMemPoolDestroy(other);

  cudaMemLocation where{cudaMemLocationTypeHost, 0};
  cudaMemPool_t found = nullptr;
  std::printf("GetDefaultMemPool(Host): %s\n",
              name(cudaMemGetDefaultMemPool(&found, &where, cudaMemAllocationTypePinned)));
  cudaMemLocation current_numa{cudaMemLocationTypeHostNumaCurrent, 0};
  std::printf("GetDefaultMemPool(HostNumaCurrent): %s\n",
              name(cudaMemGetDefaultMemPool(&found, &current_numa, cudaMemAllocationTypePinned)));
  cudaMemLocation device{cudaMemLocationTypeDevice, 0};
  std::printf("SetMemPool(Device 0, host pool): %s\n",
              name(cudaMemSetMemPool(&device, cudaMemAllocationTypePinned, host_pool)));
  std::printf("DeviceSetMemPool(0, host pool): %s\n", name(cudaDeviceSetMemPool(0, host_pool)));
  std::printf("SetMemPool(Host, host pool): %s\n",
              name(cudaMemSetMemPool(&where, cudaMemAllocationTypePinned, host_pool)));

  // With the host's current pool set: where does cudaMallocAsync take memory from?
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  void* p = nullptr;
  std::printf("MallocAsync with a Host current pool: %s\n",
              name(cudaMallocAsync(&p, 1 << 20, stream)));
  cudaPointerAttributes attributes{};
  cudaStreamSynchronize(stream);
  cudaPointerGetAttributes(&attributes, p);
  cudaMemPool_t device_current = nullptr;
  cudaDeviceGetMemPool(&device_current, 0);
  std::printf("  it came from: %s (type %d)\n",
              attributes.type == cudaMemoryTypeDevice ? "device memory" : "host memory",
              static_cast<int>(attributes.type));
  cudaFreeAsync(p, stream);

  void* h = nullptr;
  std::printf("MallocFromPoolAsync(host pool): %s\n",
              name(cudaMallocFromPoolAsync(&h, 1 << 20, host_pool, stream)));
  cudaStreamSynchronize(stream);
  cudaPointerGetAttributes(&attributes, h);
  std::printf("  pointer attributes: type %d device %d hostPointer %s devicePointer %s\n",
              static_cast<int>(attributes.type), attributes.device,
              attributes.hostPointer == h ? "= p" : "other",
              attributes.devicePointer == h ? "= p" : "other");
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  std::printf("GetAccess(host pool, Device 0): %s flags %d\n",
              name(cudaMemPoolGetAccess(&flags, host_pool, &device)), static_cast<int>(flags));
  std::printf("GetAccess(host pool, Host): %s flags %d\n",
              name(cudaMemPoolGetAccess(&flags, host_pool, &where)), static_cast<int>(flags));
  cudaMemAccessDesc host_read{where, cudaMemAccessFlagsProtRead};
  std::printf("SetAccess(host pool, Host read): %s\n",
              name(cudaMemPoolSetAccess(host_pool, &host_read, 1)));
  cudaMemAccessDesc grant{device, cudaMemAccessFlagsProtReadWrite};
  std::printf("SetAccess(host pool, Device 0 rw): %s\n",
              name(cudaMemPoolSetAccess(host_pool, &grant, 1)));
  cudaMemAccessDesc revoke{device, cudaMemAccessFlagsProtNone};
  std::printf("SetAccess(host pool, Device 0 none): %s\n",
              name(cudaMemPoolSetAccess(host_pool, &revoke, 1)));
  cudaFreeAsync(h, stream);
  cudaStreamSynchronize(stream);
  std::printf("destroy current Host pool: %s\n", name(cudaMemPoolDestroy(host_pool)));
  cudaMemGetMemPool(&found, &where, cudaMemAllocationTypePinned);
  cudaMemPool_t host_default = nullptr;
  cudaMemGetDefaultMemPool(&host_default, &where, cudaMemAllocationTypePinned);
  std::printf("  the Host current pool is now %s\n",
              found == host_default ? "its default pool" : "something else");
  cudaMemPoolDestroy(numa_pool);
  return 0;
}
