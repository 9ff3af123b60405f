// soma::memory_resource through CCCL (<soma/cxx/cccl.hpp>, the CUDA toolkit's CCCL 3.0): the
// concept holds at compile time, and code written only against cuda::mr allocates from a soma
// pool (S1, S9, S10, S14).
#include <soma/cxx/cccl.hpp>
#include <soma/soma.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "soma_test_util.hpp"

namespace {

using namespace soma_test;

static_assert(cuda::mr::resource<soma::memory_resource>);
static_assert(cuda::mr::resource_with<soma::memory_resource, cuda::mr::device_accessible>);
static_assert(!cuda::mr::resource_with<soma::memory_resource, cuda::mr::host_accessible>,
              "device pools are not host-accessible in CUDA's sense");

static_assert(cuda::mr::resource_with<soma::host_memory_resource, cuda::mr::host_accessible,
                                      cuda::mr::device_accessible>);

// Code that knows CCCL only: allocates through the reference, frees the same way.
void* take(cuda::mr::resource_ref<cuda::mr::device_accessible> memory, std::size_t bytes) {
  return memory.allocate(bytes, 256);
}
void give_back(cuda::mr::resource_ref<cuda::mr::device_accessible> memory, void* ptr,
               std::size_t bytes) {
  memory.deallocate(ptr, bytes, 256);
}

class S14_CcclResource : public capi_test {};

TEST_F(S14_CcclResource, CodeWrittenAgainstCcclAllocatesFromTheSomaPool) {
  soma::pool p(soma::pool_options{});
  soma::memory_resource resource(p);
  void* ptr = take(resource, MiB);
  ASSERT_NE(ptr, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(ptr) % 256, 0u);
  EXPECT_EQ(p.used_bytes(), MiB);                            // S10
  SOMA_ASSERT_OK(somaMemsetAsync(ptr, 0x5a, MiB, nullptr));  // usable at return: no stream
  SOMA_ASSERT_OK(somaStreamSynchronize(nullptr));
  give_back(resource, ptr, MiB);
  EXPECT_EQ(p.used_bytes(), 0u);
}

TEST_F(S14_CcclResource, ReferencesToOnePoolCompareEqual) {
  soma::pool a(soma::pool_options{});
  soma::pool b(soma::pool_options{});
  soma::memory_resource first(a);
  soma::memory_resource again(a);
  soma::memory_resource other(b);
  EXPECT_TRUE(cuda::mr::resource_ref<cuda::mr::device_accessible>(first) ==
              cuda::mr::resource_ref<cuda::mr::device_accessible>(again));
  EXPECT_FALSE(cuda::mr::resource_ref<cuda::mr::device_accessible>(first) ==
               cuda::mr::resource_ref<cuda::mr::device_accessible>(other));
}

TEST_F(S14_CcclResource, AnAlignmentSomaCannotGiveIsRefusedThroughTheReference) {
  soma::pool p(soma::pool_options{});
  soma::memory_resource resource(p);
  cuda::mr::resource_ref<cuda::mr::device_accessible> memory(resource);
  try {
    (void)memory.allocate(MiB, 4096);
    FAIL() << "an alignment above 256 bytes was accepted";
  } catch (const soma::error& e) {
    EXPECT_EQ(e.code(), somaErrorInvalidValue);
    EXPECT_NE(std::strstr(e.what(), "alignment 4096"), nullptr) << e.what();
  }
  EXPECT_EQ(p.used_bytes(), 0u);
}

// Code that knows only host-accessible CCCL memory: it writes and reads with the CPU.
std::size_t fill_and_count(cuda::mr::resource_ref<cuda::mr::host_accessible> memory,
                           std::size_t bytes) {
  auto* p = static_cast<unsigned char*>(memory.allocate(bytes, 256));
  std::memset(p, 0x7e, bytes);
  std::size_t count = 0;
  for (std::size_t i = 0; i < bytes; ++i) count += p[i] == 0x7e ? 1 : 0;
  memory.deallocate(p, bytes, 256);
  return count;
}

TEST_F(S14_CcclResource, AHostPoolIsHostAccessibleMemoryForCcclCode) {  // S5
  if (device_attribute(somaDevAttrHostMemoryPoolsSupported, 0) == 0)
    GTEST_SKIP() << "the driver has no host memory pools here";
  soma::pool_options options;
  options.location = somaMemLocationTypeHost;
  soma::pool p(options);
  soma::host_memory_resource resource(p);
  EXPECT_EQ(fill_and_count(resource, MiB), MiB);
  EXPECT_EQ(p.used_bytes(), 0u);
  // The same resource is device-accessible memory once the device is granted.
  const somaMemAccessDesc grant{{somaMemLocationTypeDevice, 0}, somaMemAccessFlagsProtReadWrite};
  SOMA_ASSERT_OK(somaMemPoolSetAccess(p.handle(), &grant, 1));
  void* ptr = take(resource, MiB);
  SOMA_ASSERT_OK(somaMemsetAsync(ptr, 0x11, MiB, nullptr));
  SOMA_ASSERT_OK(somaStreamSynchronize(nullptr));
  EXPECT_EQ(static_cast<unsigned char*>(ptr)[MiB - 1], 0x11);
  give_back(resource, ptr, MiB);
}

TEST_F(S14_CcclResource, AHostResourceOverADevicePoolIsRefused) {
  soma::pool p(soma::pool_options{});
  try {
    soma::host_memory_resource resource(p);
    FAIL() << "a device pool became a host resource";
  } catch (const soma::error& e) {
    EXPECT_EQ(e.code(), somaErrorInvalidValue);
    EXPECT_NE(std::strstr(e.what(), "not a host pool"), nullptr) << e.what();
  }
}

}  // namespace
