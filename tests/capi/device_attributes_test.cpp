// Devices and capability queries (S8): device count, pool support and handle types, soma's
// own memory/granularity attributes, somaMemGetInfo, current device.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include "soma_test_util.hpp"

namespace {

using namespace soma_test;

class S8_DeviceAttributes : public capi_test {};
class S8_Devices : public capi_test {};

TEST_F(S8_Devices, CountFollowsTheConfiguration) {
  int count = 0;
  SOMA_ASSERT_OK(somaGetDeviceCount(&count));
  if (exact_test_config()) {
    EXPECT_EQ(count, kTestDeviceCount);
  } else {
    EXPECT_GE(count, 1);
  }
}

TEST_F(S8_DeviceAttributes, PoolsAreSupportedOnEveryDevice) {
  for (int device = 0; device < device_count(); ++device) {
    EXPECT_EQ(device_attribute(somaDevAttrMemoryPoolsSupported, device), 1) << device;
    EXPECT_EQ(device_attribute(somaDevAttrMemoryPoolSupportedHandleTypes, device),
              static_cast<int>(somaMemHandleTypePosixFileDescriptor))
        << "cpu backend exports POSIX file descriptors only";
  }
}

TEST_F(S8_DeviceAttributes, MemoryAndGranularityFollowTheConfiguration) {
  for (int device = 0; device < device_count(); ++device) {
    const int memory_mib = device_attribute(somaDevAttrTotalMemoryMiB, device);
    const int granularity_kib = device_attribute(somaDevAttrAllocationGranularityKiB, device);
    EXPECT_GT(memory_mib, 0);
    EXPECT_GT(granularity_kib, 0);
    EXPECT_EQ(granularity_kib & (granularity_kib - 1), 0) << "a power of two";
    if (exact_test_config()) {
      EXPECT_EQ(static_cast<std::size_t>(memory_mib) * MiB, kTestDeviceMemoryBytes);
      EXPECT_EQ(static_cast<std::size_t>(granularity_kib) * KiB, kTestGranularityBytes);
    }
  }
}

TEST_F(S8_Devices, MemGetInfoReportsTheCurrentDevice) {
  for (int device = 0; device < device_count(); ++device) {
    SOMA_ASSERT_OK(somaSetDevice(device));
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    SOMA_ASSERT_OK(somaMemGetInfo(&free_bytes, &total_bytes));
    // The attribute is in whole MiB; a GPU's total is not a whole number of them.
    EXPECT_EQ(total_bytes / MiB, device_memory_bytes(device) / MiB);
    EXPECT_LE(free_bytes, total_bytes);
  }
}

TEST_F(S8_Devices, MemGetInfoFreeDropsByWhatAPoolCommits) {
  if (!have_devices(2)) GTEST_SKIP() << "needs 2 devices";
  unique_stream stream;
  SOMA_ASSERT_OK(synchronize_device(0));
  const memory_info device_0 = device_memory_info(0);
  const memory_info device_1 = device_memory_info(1);
  const std::size_t committed_0 = committed_bytes(0);
  const std::size_t committed_1 = committed_bytes(1);
  unique_pool pool(1);
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 2 * MiB, pool, stream));
  const std::uint64_t reserved = pool_u64(pool, somaMemPoolAttrReservedMemCurrent);
  EXPECT_EQ(committed_bytes(1), committed_1 + reserved);
  EXPECT_EQ(committed_bytes(0), committed_0);
  if (on_cpu_backend()) {  // a GPU's free figure also moves with other processes
    EXPECT_EQ(device_memory_info(1).free_bytes, device_1.free_bytes - reserved);
    EXPECT_EQ(device_memory_info(0).free_bytes, device_0.free_bytes);
  } else {
    EXPECT_LE(device_memory_info(1).free_bytes + reserved, device_1.free_bytes + 64 * MiB);
  }
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S8_Devices, SetAndGetDevice) {
  for (int device = 0; device < device_count(); ++device) {
    SOMA_ASSERT_OK(somaSetDevice(device));
    int current = -1;
    SOMA_ASSERT_OK(somaGetDevice(&current));
    EXPECT_EQ(current, device);
  }
}

TEST_F(S8_Devices, CanAccessPeerAnswersForValidPairs) {
  const int count = device_count();
  for (int device = 0; device < count; ++device) {
    for (int peer = 0; peer < count; ++peer) {
      int can_access = -1;
      SOMA_ASSERT_OK(somaDeviceCanAccessPeer(&can_access, device, peer));
      EXPECT_TRUE(can_access == 0 || can_access == 1) << can_access;
    }
  }
}

}  // namespace
