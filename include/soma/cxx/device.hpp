/**
 * @file soma/cxx/device.hpp
 * @brief Part of soma's C++ API (include <soma/soma.hpp>): Process, devices and pointers (S8, S13,
 * S14).
 */
#ifndef SOMA_CXX_DEVICE_HPP
#define SOMA_CXX_DEVICE_HPP

#include <soma/cxx/error.hpp>

namespace soma {

// ---- process, devices and pointers (S8, S13, S14) -------------------------------------------

/** Host memory streams can reach (somaMallocHost): page-locked on cuda, so copies to and from
 *  pool memory are asynchronous. 0 bytes gives nullptr; throws soma::bad_alloc when refused. */
inline void* malloc_host(std::size_t bytes) {
  void* ptr = nullptr;
  check(somaMallocHost(&ptr, bytes));
  return ptr;
}
/** Frees malloc_host() memory; nullptr is a no-op. Other pointers are refused (the code stays in
 *  somaGetLastError()); never throws. */
inline void free_host(void* ptr) noexcept { (void)somaFreeHost(ptr); }

/** Sets the cpu backend's devices, memory and granularity. Only before the runtime starts;
 *  afterwards NotPermitted. */
inline void set_cpu_backend_config(const somaCpuBackendConfig& config) {
  check(somaSetCpuBackendConfig(&config));
}
/** "cpu" or "cuda"; starts the runtime. */
inline const char* backend_name() {
  const char* name = nullptr;
  check(somaGetBackendName(&name));
  return name;
}
inline int device_count() {
  int count = 0;
  check(somaGetDeviceCount(&count));
  return count;
}

/** Free and total physical memory of the calling thread's current device. */
struct memory_info {
  std::size_t free_bytes;
  std::size_t total_bytes;
};

class pool;

/** A device ordinal with its queries. A value type; it owns nothing. */
class device {
 public:
  explicit constexpr device(int ordinal) noexcept : ordinal_(ordinal) {}
  /** The calling thread's current device (starts at 0). */
  static device current() {
    int ordinal = 0;
    check(somaGetDevice(&ordinal));
    return device(ordinal);
  }
  constexpr int ordinal() const noexcept { return ordinal_; }
  /** Makes this the calling thread's current device. Throws on a bad ordinal. */
  void make_current() const { check(somaSetDevice(ordinal_)); }
  int attribute(somaDeviceAttr attr) const {
    int value = 0;
    check(somaDeviceGetAttribute(&value, attr, ordinal_));
    return value;
  }
  /** S8: capability, not a version number, tells whether pools exist. */
  bool memory_pools_supported() const { return attribute(somaDevAttrMemoryPoolsSupported) != 0; }
  /** S8: mask of somaMemAllocationHandleType an exportable pool may use. */
  unsigned supported_handle_types() const {
    return static_cast<unsigned>(attribute(somaDevAttrMemoryPoolSupportedHandleTypes));
  }
  std::size_t total_memory_bytes() const {
    return static_cast<std::size_t>(attribute(somaDevAttrTotalMemoryMiB)) << 20;
  }
  std::size_t granularity_bytes() const {
    return static_cast<std::size_t>(attribute(somaDevAttrAllocationGranularityKiB)) << 10;
  }
  /** Whether this device can be granted access to memory of peer (S6: grants nothing). */
  bool can_access_peer(device peer) const {
    int value = 0;
    check(somaDeviceCanAccessPeer(&value, ordinal_, peer.ordinal_));
    return value != 0;
  }
  /** S4: the device's default pool (non-owning). */
  pool default_pool() const;
  /** S4: the pool somaMallocAsync uses now on this device (non-owning). */
  pool current_pool() const;
  friend constexpr bool operator==(device, device) noexcept = default;

 private:
  int ordinal_;
};

/** Free/total memory of the current device (somaMemGetInfo). */
/** Bytes this process's pools hold on a device (somaDeviceGetCommittedBytes). */
inline std::size_t committed_bytes(int device) {
  std::size_t bytes = 0;
  check(somaDeviceGetCommittedBytes(&bytes, device));
  return bytes;
}

inline memory_info get_memory_info() {
  memory_info info{0, 0};
  check(somaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}
/** Waits for all work on every stream of the current device; an observation point (S9, S12). */
inline void synchronize_device() { check(somaDeviceSynchronize()); }

/** Makes `device` current on the calling thread for the guard's life, then the previous device
 *  again (as c10::cuda::CUDAGuard). Never throws, so C boundaries can use it: status() is
 *  somaSuccess when the switch worked; a guard whose switch failed changes nothing. */
class device_guard {
 public:
  explicit device_guard(int device) noexcept {
    status_ = somaGetDevice(&previous_);
    if (status_ == somaSuccess) status_ = somaSetDevice(device);
  }
  ~device_guard() {
    if (status_ == somaSuccess) (void)somaSetDevice(previous_);
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;
  somaError_t status() const noexcept { return status_; }

 private:
  int previous_ = 0;
  somaError_t status_ = somaSuccess;
};

/** Waits for all work on every stream of `device`; the current device stays as it was. */
inline void synchronize_device(int device) {
  const device_guard on(device);
  check(on.status());
  synchronize_device();
}

/** S14: attributes of ptr. For a pointer soma does not know, or a freed one, isLiveAllocation
 *  is 0 and no exception is thrown. */
inline somaPointerAttributes pointer_attributes(const void* ptr) {
  somaPointerAttributes attributes{};
  check(somaPointerGetAttributes(&attributes, ptr));
  return attributes;
}

}  // namespace soma

#endif  // SOMA_CXX_DEVICE_HPP
