/**
 * @file soma/cxx/pool.hpp
 * @brief Part of soma's C++ API (include <soma/soma.hpp>): Pools (S3, S4, S5, S6, S9, S10, S11).
 */
#ifndef SOMA_CXX_POOL_HPP
#define SOMA_CXX_POOL_HPP

#include <soma/cxx/stream.hpp>

namespace soma {

// ---- pools (S3, S4, S5, S9, S10, S11) -------------------------------------------------------

/** Creation-time choices of an explicit pool, translated into somaMemPoolProps plus the
 *  release threshold attribute and the name. */
struct pool_options {
  int device = 0;  ///< the pool's device (S4, S5)
  /** S5: where the memory is: the device (Device, the default), host memory on any NUMA node
   *  (Host) or on numa_node (HostNuma). Host memory is the host's at once and a device's once
   *  somaMemPoolSetAccess grants it. */
  somaMemLocationType location = somaMemLocationTypeDevice;
  int numa_node = 0;                          ///< with location HostNuma
  std::size_t max_size_bytes = 0;             ///< cap on reserved memory; 0 = the device's memory
  std::uint64_t release_threshold_bytes = 0;  ///< S9; UINT64_MAX never releases at sync
  bool exportable = false;                    ///< S7: POSIX file descriptor handles
  std::string name;                           ///< used in messages; empty = soma's default
};

/** The somaMemPoolProps of a pool made from options: pinned memory at options.device (or the
 *  host location options.location names),
 *  capped at max_size_bytes, exportable as POSIX file descriptors when asked. The release
 *  threshold and name are attributes, set after creation. */
inline somaMemPoolProps pool_props(const pool_options& options) noexcept {
  somaMemPoolProps props{};
  props.allocType = somaMemAllocationTypePinned;
  props.handleTypes =
      options.exportable ? somaMemHandleTypePosixFileDescriptor : somaMemHandleTypeNone;
  props.location.type = options.location;
  props.location.id = options.location == somaMemLocationTypeDevice     ? options.device
                      : options.location == somaMemLocationTypeHostNuma ? options.numa_node
                                                                        : 0;
  props.maxSize = options.max_size_bytes;
  return props;
}

/**
 * A memory pool. Owning pools are created from pool_options or somaMemPoolProps and
 * destroyed in the destructor, which returns at once: resources go back when the last live
 * allocation is freed (S5). default_for() / current_for() give non-owning views.
 * Move-only. Attribute calls are thread-safe.
 */
class pool {
 public:
  /** S5: creates a pool on options.device. Throws soma::error for bad options (e.g. a bad
   *  device: somaErrorInvalidValue, as CUDA). */
  explicit pool(const pool_options& options) : pool(pool_props(options)) {
    // Delegation completed construction, so a throw below destroys the pool.
    set_release_threshold(options.release_threshold_bytes);
    if (!options.name.empty()) set_name(options.name.c_str());
  }
  /** S5: creates a pool from CUDA-style properties (every field is checked). */
  explicit pool(const somaMemPoolProps& props) {
    check(somaMemPoolCreate(&handle_, &props));
    device_ = props.location.id;
    owning_ = true;
  }
  static std::optional<pool> try_create(const pool_options& options) noexcept {
    somaMemPool_t handle = nullptr;
    if (create(options, handle) != somaSuccess) return std::nullopt;
    return std::optional<pool>(pool(handle, options.device, true));
  }
  /** S4: the default pool of device (non-owning; it cannot be destroyed). */
  static pool default_for(int device) {
    somaMemPool_t handle = nullptr;
    check(somaDeviceGetDefaultMemPool(&handle, device));
    return pool(handle, device, false);
  }
  /** S4: the pool somaMallocAsync uses now on device (non-owning). */
  static pool current_for(int device) {
    somaMemPool_t handle = nullptr;
    check(somaDeviceGetMemPool(&handle, device));
    return pool(handle, device, false);
  }
  /** Wraps a handle of device's pool; owning means the destructor destroys it. */
  static pool from_handle(somaMemPool_t handle, int device, bool owning) noexcept {
    return pool(handle, device, owning);
  }

  pool(const pool&) = delete;
  pool& operator=(const pool&) = delete;
  pool(pool&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)),
        device_(other.device_),
        owning_(std::exchange(other.owning_, false)) {}
  pool& operator=(pool&& other) noexcept {
    if (this != &other) {
      destroy();
      handle_ = std::exchange(other.handle_, nullptr);
      device_ = other.device_;
      owning_ = std::exchange(other.owning_, false);
    }
    return *this;
  }
  ~pool() { destroy(); }

  somaMemPool_t handle() const noexcept { return handle_; }
  int device() const noexcept { return device_; }
  bool is_owning() const noexcept { return owning_; }
  somaMemPool_t release() noexcept {
    owning_ = false;
    return std::exchange(handle_, nullptr);
  }

  /** S4: makes this pool the one somaMallocAsync uses on its device. */
  void make_current() const { check(somaDeviceSetMemPool(device_, handle_)); }
  /** Gives the pool a name for messages ("pool 'tenant-a' on device 0"). */
  void set_name(const char* name) const { check(somaMemPoolSetName(handle_, name)); }
  /** soma's own: the latest out-of-memory failure of an allocation from this pool, as data
   *  (change == somaOomChangeNone: there was none). */
  somaOutOfMemoryReport last_out_of_memory() const {
    somaOutOfMemoryReport report{};
    check(somaMemPoolGetLastOutOfMemory(handle_, &report));
    return report;
  }

  /** S9: bytes kept reserved across synchronizations; above it memory goes back. */
  std::uint64_t release_threshold() const { return get_u64(somaMemPoolAttrReleaseThreshold); }
  void set_release_threshold(std::uint64_t bytes) const {
    set_u64(somaMemPoolAttrReleaseThreshold, bytes);
  }
  /** S10: physical memory the pool holds now / at most since the last reset. */
  std::uint64_t reserved_bytes() const { return get_u64(somaMemPoolAttrReservedMemCurrent); }
  std::uint64_t reserved_high_bytes() const { return get_u64(somaMemPoolAttrReservedMemHigh); }
  /** S10: sum of the sizes of live allocations now / at most since the last reset. */
  std::uint64_t used_bytes() const { return get_u64(somaMemPoolAttrUsedMemCurrent); }
  std::uint64_t used_high_bytes() const { return get_u64(somaMemPoolAttrUsedMemHigh); }
  /** S10: sets both high watermarks to their current values. */
  void reset_high_watermarks() const {
    set_u64(somaMemPoolAttrReservedMemHigh, 0);
    set_u64(somaMemPoolAttrUsedMemHigh, 0);
  }
  /** S9: releases memory whose free is known complete until at most min_bytes_to_keep stay
   *  reserved, as far as live memory and granularity allow. A request, not an exact figure. */
  /** S6: grants (ProtRead, ProtReadWrite) or revokes (ProtNone) a device's access to every
   *  allocation of the pool, present and future. */
  void set_access(int device, somaMemAccessFlags flags) const {
    const somaMemAccessDesc desc{{somaMemLocationTypeDevice, device}, flags};
    check(somaMemPoolSetAccess(handle_, &desc, 1));
  }
  /** S6: ReadWrite for the owner, what set_access granted (ProtNone at first) for others. */
  somaMemAccessFlags access(int device) const {
    somaMemLocation location{somaMemLocationTypeDevice, device};
    somaMemAccessFlags flags = somaMemAccessFlagsProtNone;
    check(somaMemPoolGetAccess(&flags, handle_, &location));
    return flags;
  }
  void trim_to(std::size_t min_bytes_to_keep) const {
    check(somaMemPoolTrimTo(handle_, min_bytes_to_keep));
  }

  /** S11 reuse policies; each on by default. They decide when memory is reused, never
   *  whether a missing user dependency is repaired. */
  bool reuse_follow_event_dependencies() const {
    return get_int(somaMemPoolReuseFollowEventDependencies) != 0;
  }
  void set_reuse_follow_event_dependencies(bool on) const {
    set_int(somaMemPoolReuseFollowEventDependencies, on ? 1 : 0);
  }
  bool reuse_allow_opportunistic() const {
    return get_int(somaMemPoolReuseAllowOpportunistic) != 0;
  }
  void set_reuse_allow_opportunistic(bool on) const {
    set_int(somaMemPoolReuseAllowOpportunistic, on ? 1 : 0);
  }
  bool reuse_allow_internal_dependencies() const {
    return get_int(somaMemPoolReuseAllowInternalDependencies) != 0;
  }
  void set_reuse_allow_internal_dependencies(bool on) const {
    set_int(somaMemPoolReuseAllowInternalDependencies, on ? 1 : 0);
  }

 private:
  pool(somaMemPool_t handle, int device, bool owning) noexcept
      : handle_(handle), device_(device), owning_(owning) {}

  static somaError_t create(const pool_options& options, somaMemPool_t& out) noexcept {
    const somaMemPoolProps props = pool_props(options);
    somaMemPool_t handle = nullptr;
    somaError_t status = somaMemPoolCreate(&handle, &props);
    if (status != somaSuccess) return status;
    std::uint64_t threshold = options.release_threshold_bytes;
    status = somaMemPoolSetAttribute(handle, somaMemPoolAttrReleaseThreshold, &threshold);
    if (status == somaSuccess && !options.name.empty()) {
      status = somaMemPoolSetName(handle, options.name.c_str());
    }
    if (status != somaSuccess) {
      somaMemPoolDestroy(handle);
      return status;
    }
    out = handle;
    return somaSuccess;
  }
  std::uint64_t get_u64(somaMemPoolAttr attr) const {
    std::uint64_t value = 0;
    check(somaMemPoolGetAttribute(handle_, attr, &value));
    return value;
  }
  void set_u64(somaMemPoolAttr attr, std::uint64_t value) const {
    check(somaMemPoolSetAttribute(handle_, attr, &value));
  }
  int get_int(somaMemPoolAttr attr) const {
    int value = 0;
    check(somaMemPoolGetAttribute(handle_, attr, &value));
    return value;
  }
  void set_int(somaMemPoolAttr attr, int value) const {
    check(somaMemPoolSetAttribute(handle_, attr, &value));
  }
  void destroy() noexcept {
    if (owning_ && handle_ != nullptr) somaMemPoolDestroy(handle_);
    handle_ = nullptr;
    owning_ = false;
  }

  somaMemPool_t handle_ = nullptr;
  int device_ = 0;
  bool owning_ = false;
};

inline pool device::default_pool() const { return pool::default_for(ordinal_); }
inline pool device::current_pool() const { return pool::current_for(ordinal_); }

}  // namespace soma

#endif  // SOMA_CXX_POOL_HPP
