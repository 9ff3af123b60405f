// Devices, pools and RAII handles through the C API, for the cpu test suites
// (soma_test_util.hpp) and the GPU test programs (tests/gpu/gpu_test_util.cuh): default and
// current pools, valid pool properties, device attributes and memory figures, and
// unique_stream, unique_event and unique_pool. Helpers about a device take it as an argument;
// a failed call is a test failure that names the call and the thread's last message. A plain
// header (soma.h, soma's C++ API headers, GoogleTest), so nvcc compiles it too.
//
// Requires: the including binary links `soma` and GoogleTest.
#pragma once

#include <soma/cxx/device.hpp>
#include <soma/cxx/pool.hpp>
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <cstddef>

#include "soma_status.hpp"
#include "unique_handle.hpp"

namespace soma_test {

// ---- pools ----------------------------------------------------------------------------

inline somaMemPool_t default_pool(int device) {
  somaMemPool_t pool = nullptr;
  const somaError_t status = somaDeviceGetDefaultMemPool(&pool, device);
  EXPECT_EQ(status, somaSuccess) << "somaDeviceGetDefaultMemPool: " << last_message();
  return pool;
}

inline somaMemPool_t current_pool(int device) {
  somaMemPool_t pool = nullptr;
  const somaError_t status = somaDeviceGetMemPool(&pool, device);
  EXPECT_EQ(status, somaSuccess) << "somaDeviceGetMemPool: " << last_message();
  return pool;
}

/// Valid properties of an explicit pool on `device` (Pinned, no export, cap `max_size_bytes`).
inline somaMemPoolProps pool_props(
    int device, std::size_t max_size_bytes = 0,
    somaMemAllocationHandleType handle_types = somaMemHandleTypeNone) {
  somaMemPoolProps props = soma::pool_props({.device = device, .max_size_bytes = max_size_bytes});
  props.handleTypes = handle_types;
  return props;
}

// ---- devices --------------------------------------------------------------------------

inline int device_count() {
  int count = 0;
  const somaError_t status = somaGetDeviceCount(&count);
  EXPECT_EQ(status, somaSuccess) << "somaGetDeviceCount: " << last_message();
  return count;
}

inline int device_attribute(somaDeviceAttr attr, int device) {
  int value = -1;
  const somaError_t status = somaDeviceGetAttribute(&value, attr, device);
  EXPECT_EQ(status, somaSuccess) << "somaDeviceGetAttribute(" << static_cast<int>(attr) << ", "
                                 << device << "): " << last_message();
  return value;
}

inline std::size_t device_memory_bytes(int device) {
  return static_cast<std::size_t>(device_attribute(somaDevAttrTotalMemoryMiB, device)) * MiB;
}

inline std::size_t granularity_bytes(int device) {
  return static_cast<std::size_t>(device_attribute(somaDevAttrAllocationGranularityKiB, device)) *
         KiB;
}

struct memory_info {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};

/// somaMemGetInfo of `device` (switches the calling thread's device and back).
inline memory_info device_memory_info(int device) {
  int previous = 0;
  EXPECT_EQ(somaGetDevice(&previous), somaSuccess);
  EXPECT_EQ(somaSetDevice(device), somaSuccess);
  memory_info info;
  const somaError_t status = somaMemGetInfo(&info.free_bytes, &info.total_bytes);
  EXPECT_EQ(status, somaSuccess) << "somaMemGetInfo: " << last_message();
  EXPECT_EQ(somaSetDevice(previous), somaSuccess);
  return info;
}

/// somaDeviceGetCommittedBytes: what this process's pools hold on device. Tests compare it
/// rather than somaMemGetInfo's free figure, which on a GPU other processes move too.
inline std::size_t committed_bytes(int device) {
  std::size_t bytes = 0;
  const somaError_t status = somaDeviceGetCommittedBytes(&bytes, device);
  EXPECT_EQ(status, somaSuccess) << "somaDeviceGetCommittedBytes: " << last_message();
  return bytes;
}

/// somaDeviceSynchronize of `device` (the calling thread's current device stays as it was).
inline somaError_t synchronize_device(int device) {
  const soma::device_guard on(device);
  return on.status() != somaSuccess ? on.status() : somaDeviceSynchronize();
}

// ---- RAII handles (unique_handle.hpp), each made by its create call --------------------

/// Expects a create call to have succeeded, naming it and the last message if not.
inline void expect_created(somaError_t status, const char* call) {
  EXPECT_EQ(status, somaSuccess) << call << ": " << last_message();
}

class unique_stream : public unique_handle<somaStream_t, somaStreamDestroy> {
 public:
  unique_stream() { expect_created(somaStreamCreate(out()), "somaStreamCreate"); }
};

class unique_event : public unique_handle<somaEvent_t, somaEventDestroy> {
 public:
  unique_event() { expect_created(somaEventCreate(out()), "somaEventCreate"); }
};

class unique_pool : public unique_handle<somaMemPool_t, somaMemPoolDestroy> {
 public:
  explicit unique_pool(const somaMemPoolProps& props) {
    expect_created(somaMemPoolCreate(out(), &props), "somaMemPoolCreate");
  }
  explicit unique_pool(int device, std::size_t max_size_bytes = 0)
      : unique_pool(pool_props(device, max_size_bytes)) {}
};

/// The handle of a pool that was created on device 0 and destroyed: no longer live.
inline somaMemPool_t destroyed_pool() {
  somaMemPool_t gone = nullptr;
  const somaMemPoolProps props = pool_props(0);
  EXPECT_EQ(somaMemPoolCreate(&gone, &props), somaSuccess) << last_message();
  EXPECT_EQ(somaMemPoolDestroy(gone), somaSuccess) << last_message();
  return gone;
}

}  // namespace soma_test
