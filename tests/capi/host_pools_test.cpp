// Pools of host memory (S5, with S1, S2, S6, S9-S12, S14 as device pools have them), pools
// keyed by location (somaMemGetDefaultMemPool, somaMemGetMemPool, somaMemSetMemPool) and the
// read-only pool attributes of CUDA 13.2 (allocation type, export handle types, location,
// maximum size). Runs on both backends; on cuda, where the driver has no host pools
// (somaDevAttrHostMemoryPoolsSupported 0), the host tests are skipped.
#include <soma/soma.h>

#include <gtest/gtest.h>
#include <linux/mempolicy.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "soma_test_util.hpp"
#include "stream_gate.hpp"

namespace {

using namespace soma_test;

constexpr std::size_t KiB = 1024;

somaMemPoolProps host_props(somaMemLocationType type = somaMemLocationTypeHost, int id = 0,
                            std::size_t max_size_bytes = 0) {
  somaMemPoolProps props = pool_props(0, max_size_bytes);
  props.location.type = type;
  props.location.id = id;
  return props;
}

somaError_t grant(somaMemPool_t pool, int device, somaMemAccessFlags flags) {
  const somaMemAccessDesc desc{{somaMemLocationTypeDevice, device}, flags};
  return somaMemPoolSetAccess(pool, &desc, 1);
}

somaMemAccessFlags access_of(somaMemPool_t pool, somaMemLocation location) {
  auto flags = static_cast<somaMemAccessFlags>(-1);
  EXPECT_EQ(somaMemPoolGetAccess(&flags, pool, &location), somaSuccess) << last_message();
  return flags;
}

class S5_HostPools : public capi_test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(capi_test::SetUp());
    if (device_attribute(somaDevAttrHostMemoryPoolsSupported, 0) == 0)
      GTEST_SKIP() << "the driver has no host memory pools here";
  }
};

class S5_LocationKeyedPools : public capi_test {};
class S5_PoolIntrospection : public capi_test {};

TEST_F(S5_HostPools, HostAndHostNumaPoolsAreCreatedAndHostNumaCurrentIsRefused) {
  unique_pool host(host_props());
  unique_pool numa(host_props(somaMemLocationTypeHostNuma, 0));
  EXPECT_EQ(pool_int(host, somaMemPoolAttrLocationType), somaMemLocationTypeHost);
  EXPECT_EQ(pool_int(numa, somaMemPoolAttrLocationType), somaMemLocationTypeHostNuma);
  EXPECT_EQ(pool_int(numa, somaMemPoolAttrLocationId), 0);

  somaMemPool_t refused = nullptr;
  const somaMemPoolProps current = host_props(somaMemLocationTypeHostNumaCurrent);
  EXPECT_EQ(somaMemPoolCreate(&refused, &current), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "HostNumaCurrent")) << last_message();
  const somaMemPoolProps no_node = host_props(somaMemLocationTypeHostNuma, 4096);
  EXPECT_EQ(somaMemPoolCreate(&refused, &no_node), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "NUMA node")) << last_message();
  somaMemPoolProps exportable = host_props();
  exportable.handleTypes = somaMemHandleTypePosixFileDescriptor;
  EXPECT_EQ(somaMemPoolCreate(&refused, &exportable), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "host-NUMA pool can be exportable")) << last_message();
}

TEST_F(S5_HostPools, ManagedMemoryIsNotSupportedAndSaysWhy) {
  somaMemPoolProps managed = host_props();
  managed.allocType = somaMemAllocationTypeManaged;
  somaMemPool_t refused = nullptr;
  EXPECT_EQ(somaMemPoolCreate(&refused, &managed), somaErrorNotSupported);
  EXPECT_TRUE(contains(last_message(), "virtual memory")) << last_message();
  somaMemLocation host{somaMemLocationTypeHost, 0};
  EXPECT_EQ(somaMemGetDefaultMemPool(&refused, &host, somaMemAllocationTypeManaged),
            somaErrorNotSupported);
  EXPECT_TRUE(contains(last_message(), "managed memory is not supported")) << last_message();
}

TEST_F(S5_HostPools, MemoryIsTheHostsAtOnceAndStreamOrdered) {  // S1, S2, S12, S14
  unique_pool pool(host_props());
  unique_stream stream;
  void* p = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&p, 64 * KiB, pool, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  // The host reaches it directly: no grant, no copy.
  std::memset(p, 0x3c, 64 * KiB);
  EXPECT_EQ(static_cast<unsigned char*>(p)[64 * KiB - 1], 0x3c);

  somaPointerAttributes attributes{};
  SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, static_cast<char*>(p) + 100));
  EXPECT_EQ(attributes.type, somaMemoryTypeHost);
  EXPECT_EQ(attributes.device, -1);
  EXPECT_EQ(attributes.hostPointer, static_cast<char*>(p) + 100);
  EXPECT_EQ(attributes.pool, pool.get());
  EXPECT_EQ(attributes.base, p);
  EXPECT_EQ(attributes.size, 64 * KiB);
  EXPECT_EQ(attributes.location.type, somaMemLocationTypeHost);

  // S2: the freeing stream reuses it at once.
  SOMA_ASSERT_OK(somaFreeAsync(p, stream));
  void* again = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&again, 64 * KiB, pool, stream));
  EXPECT_EQ(again, p);
  SOMA_ASSERT_OK(somaFreeAsync(again, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), 0u);
}

TEST_F(S5_HostPools, DevicesReachItOnlyOnceGranted) {  // S6
  unique_pool pool(host_props());
  unique_stream stream;
  const somaMemLocation host{somaMemLocationTypeHost, 0};
  EXPECT_EQ(access_of(pool, host), somaMemAccessFlagsProtReadWrite);
  for (int device = 0; device < device_count(); ++device)
    EXPECT_EQ(access_of(pool, {somaMemLocationTypeDevice, device}), somaMemAccessFlagsProtNone);

  void* p = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&p, 4 * KiB, pool, stream));
  // soma's own operations run on the stream's device, which has no access yet.
  EXPECT_EQ(somaMemsetAsync(p, 1, 4 * KiB, stream), somaErrorNotPermitted);
  EXPECT_TRUE(contains(last_message(), "on the host")) << last_message();

  SOMA_ASSERT_OK(grant(pool, 0, somaMemAccessFlagsProtReadWrite));
  EXPECT_EQ(access_of(pool, {somaMemLocationTypeDevice, 0}), somaMemAccessFlagsProtReadWrite);
  SOMA_ASSERT_OK(somaMemsetAsync(p, 0x77, 4 * KiB, stream));
  host_buffer copy(4 * KiB);
  SOMA_ASSERT_OK(somaMemcpyAsync(copy.data(), p, 4 * KiB, somaMemcpyDefault, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(static_cast<unsigned char*>(copy.data())[4095], 0x77);
  EXPECT_EQ(static_cast<unsigned char*>(p)[0], 0x77);  // and the host sees the device's write

  // Revoked again, and the host's own access cannot be lowered.
  SOMA_ASSERT_OK(grant(pool, 0, somaMemAccessFlagsProtNone));
  EXPECT_EQ(somaMemsetAsync(p, 1, 4 * KiB, stream), somaErrorNotPermitted);
  const somaMemAccessDesc host_read{host, somaMemAccessFlagsProtRead};
  EXPECT_EQ(somaMemPoolSetAccess(pool, &host_read, 1), somaErrorNotSupported);
  const somaMemAccessDesc host_rw{host, somaMemAccessFlagsProtReadWrite};
  SOMA_EXPECT_OK(somaMemPoolSetAccess(pool, &host_rw, 1));
  SOMA_ASSERT_OK(somaFreeAsync(p, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S5_HostPools, EveryDevicesStreamsAllocateFromIt) {
  unique_pool pool(host_props());
  for (int device = 0; device < device_count(); ++device) {
    SOMA_ASSERT_OK(somaSetDevice(device));
    unique_stream stream;
    SOMA_ASSERT_OK(grant(pool, device, somaMemAccessFlagsProtReadWrite));
    expect_pool_usable(pool, stream);
  }
}

TEST_F(S5_HostPools, ReleasedAtTheThresholdAsDevicePools) {  // S9, S10
  unique_pool pool(host_props());
  unique_stream stream;
  void* p = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&p, 4 << 20, pool, stream));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), std::uint64_t{4} << 20);
  EXPECT_GE(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), std::uint64_t{4} << 20);
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  SOMA_ASSERT_OK(somaFreeAsync(p, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_GE(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), std::uint64_t{4} << 20);
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, 0));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), 0u);
  EXPECT_GE(pool_u64(pool, somaMemPoolAttrReservedMemHigh), std::uint64_t{4} << 20);
}

TEST_F(S5_HostPools, AnotherStreamReusesAFreeOnlyAfterAnEvent) {  // S11
  // The same steps on a host pool and on a device pool reuse the same way: the free on a held
  // stream is not another stream's until that stream waits on an event recorded after it.
  unique_pool host(host_props());
  unique_pool device(0);
  bool reused[2][2] = {};
  int which = 0;
  for (somaMemPool_t pool : {host.get(), device.get()}) {
    SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolReuseAllowOpportunistic, 0));
    SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolReuseAllowInternalDependencies, 0));
    unique_stream first, second;
    stream_gate gate;
    void* p = nullptr;
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&p, 64 * KiB, pool, first));
    SOMA_ASSERT_OK(gate.hold(first));  // the free stays incomplete until the gate opens
    SOMA_ASSERT_OK(somaFreeAsync(p, first));
    unique_event freed;
    SOMA_ASSERT_OK(somaEventRecord(freed, first));
    void* unordered = nullptr;
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&unordered, 64 * KiB, pool, second));
    SOMA_ASSERT_OK(somaStreamWaitEvent(second, freed, 0));
    void* ordered = nullptr;
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&ordered, 64 * KiB, pool, second));
    reused[which][0] = unordered == p;
    reused[which][1] = ordered == p;
    gate.open();
    SOMA_ASSERT_OK(somaFreeAsync(unordered, second));
    SOMA_ASSERT_OK(somaFreeAsync(ordered, second));
    SOMA_ASSERT_OK(somaStreamSynchronize(second));
    SOMA_ASSERT_OK(somaStreamSynchronize(first));
    ++which;
  }
  EXPECT_FALSE(reused[0][0]) << "a stream with no order after the free reused it";
  EXPECT_EQ(reused[0][0], reused[1][0]);
  EXPECT_EQ(reused[0][1], reused[1][1]) << "host and device pools reuse differently";
  if (on_cpu_backend()) {
    EXPECT_TRUE(reused[0][1]) << "the event's wait did not cover the free";
  }
}

TEST_F(S5_HostPools, HostNumaPoolMemoryLivesOnItsNode) {
  unique_pool pool(host_props(somaMemLocationTypeHostNuma, 0));
  unique_stream stream;
  void* p = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&p, 64 * KiB, pool, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  somaPointerAttributes attributes{};
  SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, p));
  EXPECT_EQ(attributes.type, somaMemoryTypeHost);
  EXPECT_EQ(attributes.location.type, somaMemLocationTypeHostNuma);
  EXPECT_EQ(attributes.location.id, 0);
  static_cast<volatile char*>(p)[0] = 1;  // the page exists now
  // cpu: soma bound the memfd to the node. cuda: the driver's pages, mapped by the driver,
  // which the kernel's NUMA policy calls do not describe.
  if (on_cpu_backend()) {
    int node = -1;
    ASSERT_EQ(syscall(SYS_get_mempolicy, &node, nullptr, 0, p, MPOL_F_NODE | MPOL_F_ADDR), 0)
        << std::strerror(errno);
    EXPECT_EQ(node, 0);
  }
  SOMA_ASSERT_OK(somaFreeAsync(p, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S5_HostPools, HostDefaultPoolsAreMadeOnceAndDestroyingTheCurrentOneRestoresThem) {
  somaMemLocation host{somaMemLocationTypeHost, 0};
  somaMemPool_t first = nullptr, again = nullptr, current = nullptr;
  SOMA_ASSERT_OK(somaMemGetDefaultMemPool(&first, &host, somaMemAllocationTypePinned));
  SOMA_ASSERT_OK(somaMemGetDefaultMemPool(&again, &host, somaMemAllocationTypePinned));
  EXPECT_EQ(first, again);
  EXPECT_EQ(pool_int(first, somaMemPoolAttrLocationType), somaMemLocationTypeHost);
  EXPECT_EQ(somaMemPoolDestroy(first), somaErrorInvalidValue);  // a default pool stays
  SOMA_ASSERT_OK(somaMemGetMemPool(&current, &host, somaMemAllocationTypePinned));
  EXPECT_EQ(current, first);

  somaMemPool_t mine = nullptr;
  const somaMemPoolProps props = host_props();
  SOMA_ASSERT_OK(somaMemPoolCreate(&mine, &props));
  SOMA_ASSERT_OK(somaMemSetMemPool(&host, somaMemAllocationTypePinned, mine));
  SOMA_ASSERT_OK(somaMemGetMemPool(&current, &host, somaMemAllocationTypePinned));
  EXPECT_EQ(current, mine);
  // somaMallocAsync takes the stream's device's current pool, never the host's (as CUDA).
  unique_stream stream;
  void* p = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&p, 4 * KiB, stream));
  somaPointerAttributes attributes{};
  SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, p));
  EXPECT_EQ(attributes.pool, current_pool(0));
  EXPECT_EQ(attributes.type, somaMemoryTypeDevice);
  SOMA_ASSERT_OK(somaFreeAsync(p, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));

  SOMA_ASSERT_OK(somaMemPoolDestroy(mine));
  SOMA_ASSERT_OK(somaMemGetMemPool(&current, &host, somaMemAllocationTypePinned));
  EXPECT_EQ(current, first);
  somaMemLocation numa{somaMemLocationTypeHostNuma, 0};
  somaMemPool_t numa_default = nullptr;
  SOMA_ASSERT_OK(somaMemGetDefaultMemPool(&numa_default, &numa, somaMemAllocationTypePinned));
  EXPECT_NE(numa_default, first);
  EXPECT_EQ(pool_int(numa_default, somaMemPoolAttrLocationType), somaMemLocationTypeHostNuma);
}

TEST_F(S5_HostPools, APoolIsCurrentOnlyAtItsOwnLocation) {
  unique_pool host_pool(host_props());
  unique_pool device_pool(0);
  somaMemLocation host{somaMemLocationTypeHost, 0};
  somaMemLocation device{somaMemLocationTypeDevice, 0};
  EXPECT_EQ(somaMemSetMemPool(&host, somaMemAllocationTypePinned, device_pool),
            somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "is not a pool of the host")) << last_message();
  EXPECT_EQ(somaMemSetMemPool(&device, somaMemAllocationTypePinned, host_pool),
            somaErrorInvalidValue);
  EXPECT_EQ(somaDeviceSetMemPool(0, host_pool), somaErrorInvalidValue);
  somaMemLocation numa{somaMemLocationTypeHostNuma, 0};
  EXPECT_EQ(somaMemSetMemPool(&numa, somaMemAllocationTypePinned, host_pool),
            somaErrorInvalidValue);
  EXPECT_EQ(current_pool(0), default_pool(0));
}

TEST_F(S5_LocationKeyedPools, TheDeviceCaseIsTheDeviceCalls) {
  for (int d = 0; d < device_count(); ++d) {
    somaMemLocation device{somaMemLocationTypeDevice, d};
    somaMemPool_t pool = nullptr;
    SOMA_ASSERT_OK(somaMemGetDefaultMemPool(&pool, &device, somaMemAllocationTypePinned));
    EXPECT_EQ(pool, default_pool(d));
    SOMA_ASSERT_OK(somaMemGetMemPool(&pool, &device, somaMemAllocationTypePinned));
    EXPECT_EQ(pool, current_pool(d));
  }
  unique_pool mine(0);
  somaMemLocation device{somaMemLocationTypeDevice, 0};
  SOMA_ASSERT_OK(somaMemSetMemPool(&device, somaMemAllocationTypePinned, mine));
  EXPECT_EQ(current_pool(0), mine.get());
  SOMA_ASSERT_OK(somaDeviceSetMemPool(0, default_pool(0)));
}

TEST_F(S5_LocationKeyedPools, BadLocationsAndTypesAreInvalidValue) {
  somaMemPool_t pool = nullptr;
  const somaMemPool_t before = current_pool(0);
  struct bad_case {
    somaMemLocation location;
    somaMemAllocationType type;
  };
  const std::vector<bad_case> cases = {
      {{somaMemLocationTypeDevice, -1}, somaMemAllocationTypePinned},
      {{somaMemLocationTypeDevice, 1000}, somaMemAllocationTypePinned},
      {{somaMemLocationTypeInvalid, 0}, somaMemAllocationTypePinned},
      {{static_cast<somaMemLocationType>(7), 0}, somaMemAllocationTypePinned},
      {{somaMemLocationTypeHostNuma, -1}, somaMemAllocationTypePinned},
      {{somaMemLocationTypeDevice, 0}, somaMemAllocationTypeInvalid},
      {{somaMemLocationTypeDevice, 0}, static_cast<somaMemAllocationType>(3)},
  };
  for (const bad_case& c : cases) {
    somaMemLocation location = c.location;
    const std::string which = "location {" + std::to_string(c.location.type) + ", " +
                              std::to_string(c.location.id) + "}, type " + std::to_string(c.type);
    EXPECT_EQ(somaMemGetDefaultMemPool(&pool, &location, c.type), somaErrorInvalidValue) << which;
    EXPECT_FALSE(last_message().empty()) << which;
    EXPECT_EQ(somaMemGetMemPool(&pool, &location, c.type), somaErrorInvalidValue) << which;
    EXPECT_EQ(somaMemSetMemPool(&location, c.type, default_pool(0)), somaErrorInvalidValue)
        << which;
  }
  // HostNumaCurrent: NotSupported here (pool creation: InvalidValue), as CUDA answers.
  somaMemLocation numa_current{somaMemLocationTypeHostNumaCurrent, 0};
  EXPECT_EQ(somaMemGetDefaultMemPool(&pool, &numa_current, somaMemAllocationTypePinned),
            somaErrorNotSupported);
  EXPECT_EQ(somaMemGetMemPool(&pool, &numa_current, somaMemAllocationTypePinned),
            somaErrorNotSupported);
  EXPECT_EQ(somaMemSetMemPool(&numa_current, somaMemAllocationTypePinned, default_pool(0)),
            somaErrorNotSupported);
  somaMemLocation device{somaMemLocationTypeDevice, 0};
  EXPECT_EQ(somaMemGetDefaultMemPool(nullptr, &device, somaMemAllocationTypePinned),
            somaErrorInvalidValue);
  EXPECT_EQ(somaMemGetMemPool(&pool, nullptr, somaMemAllocationTypePinned), somaErrorInvalidValue);
  EXPECT_EQ(somaMemSetMemPool(nullptr, somaMemAllocationTypePinned, default_pool(0)),
            somaErrorInvalidValue);
  EXPECT_EQ(somaMemSetMemPool(&device, somaMemAllocationTypePinned, nullptr),
            somaErrorInvalidValue);
  EXPECT_EQ(current_pool(0), before);
}

TEST_F(S5_PoolIntrospection, ReadOnlyAttributesSayWhatThePoolWasCreatedWith) {
  const std::size_t cap = 8 * granularity_bytes(0);
  unique_pool capped(0, cap);
  EXPECT_EQ(pool_int(capped, somaMemPoolAttrAllocationType), somaMemAllocationTypePinned);
  EXPECT_EQ(pool_int(capped, somaMemPoolAttrExportHandleTypes), somaMemHandleTypeNone);
  EXPECT_EQ(pool_int(capped, somaMemPoolAttrLocationType), somaMemLocationTypeDevice);
  EXPECT_EQ(pool_int(capped, somaMemPoolAttrLocationId), 0);
  EXPECT_EQ(pool_u64(capped, somaMemPoolAttrMaxPoolSize), cap);
  EXPECT_EQ(pool_u64(default_pool(0), somaMemPoolAttrMaxPoolSize), 0u);
  const int last = device_count() - 1;
  EXPECT_EQ(pool_int(default_pool(last), somaMemPoolAttrLocationId), last);
  if ((device_attribute(somaDevAttrMemoryPoolSupportedHandleTypes, 0) &
       somaMemHandleTypePosixFileDescriptor) != 0) {
    somaMemPoolProps props = pool_props(0);
    props.handleTypes = somaMemHandleTypePosixFileDescriptor;
    unique_pool exportable(props);
    EXPECT_EQ(pool_int(exportable, somaMemPoolAttrExportHandleTypes),
              somaMemHandleTypePosixFileDescriptor);
  }
  for (somaMemPoolAttr attr : {somaMemPoolAttrAllocationType, somaMemPoolAttrExportHandleTypes,
                               somaMemPoolAttrLocationId, somaMemPoolAttrLocationType}) {
    EXPECT_EQ(set_pool_int(capped, attr, 1), somaErrorInvalidValue) << attr;
    EXPECT_TRUE(contains(last_message(), "read-only")) << last_message();
  }
  EXPECT_EQ(set_pool_u64(capped, somaMemPoolAttrMaxPoolSize, cap), somaErrorInvalidValue);
}

TEST_F(S5_PoolIntrospection, DeviceAttributesTellWhetherHostPoolsExist) {
  const int host = device_attribute(somaDevAttrHostMemoryPoolsSupported, 0);
  const int numa = device_attribute(somaDevAttrHostNumaMemoryPoolsSupported, 0);
  EXPECT_TRUE(host == 0 || host == 1);
  EXPECT_TRUE(numa == 0 || numa == 1);
  if (on_cpu_backend()) {
    EXPECT_EQ(host, 1);
    EXPECT_EQ(numa, 1);
  }
  somaMemPool_t pool = nullptr;
  const somaMemPoolProps props = host_props();
  const somaError_t created = somaMemPoolCreate(&pool, &props);
  EXPECT_EQ(created, host == 1 ? somaSuccess : somaErrorNotSupported) << last_message();
  if (created == somaSuccess) {
    SOMA_EXPECT_OK(somaMemPoolDestroy(pool));
  }
}

}  // namespace
