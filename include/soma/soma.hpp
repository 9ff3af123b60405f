/**
 * @file soma.hpp
 * @brief soma's C++ API: RAII and exceptions over the C API of soma.h.
 *
 * Header-only and a pure translation: every member calls one C function (or a few, for
 * creation with options) and turns its status into an exception. No allocator logic lives
 * here. Contract clauses (S1..S16) are those of docs/design.md.
 *
 * Errors: a failing call throws soma::error, or soma::bad_alloc (derived from
 * std::bad_alloc) for somaErrorMemoryAllocation and somaErrorAddressSpaceExhausted. Both
 * carry the code and the calling thread's somaGetLastErrorMessage() taken at the failure.
 * Destructors, frees and deallocate() are noexcept; try_ forms report failure without
 * throwing (the code stays available through somaGetLastError()).
 *
 * Threads: every operation may be called from any thread, as the C API allows. One RAII
 * object must not be moved, assigned or destroyed while another thread uses it.
 */
#ifndef SOMA_SOMA_HPP
#define SOMA_SOMA_HPP

#if !defined(__cplusplus) || __cplusplus < 202002L
#error "soma.hpp needs C++20 (use soma.h from C or older C++)"
#endif

#include <soma/soma.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace soma {

// ---- errors ------------------------------------------------------------------------------

namespace detail {
inline std::string compose_message(somaError_t code, const std::string &detail) {
  const char *name = somaGetErrorName(code);
  std::string text = name != nullptr ? name : "somaError";
  text += ": ";
  if (!detail.empty()) {
    text += detail;
  } else {
    const char *description = somaGetErrorString(code);
    text += description != nullptr ? description : "unknown error";
  }
  return text;
}
inline std::size_t detail_offset(somaError_t code) {
  const char *name = somaGetErrorName(code);
  return (name != nullptr ? std::char_traits<char>::length(name) : 9) + 2;
}
} // namespace detail

/** A failed soma call. what() reads "<error name>: <detail>", where the detail is the
 *  thread's somaGetLastErrorMessage() at the failure (or the code's description). */
class error : public std::runtime_error {
public:
  /** Requires: code != somaSuccess. */
  error(somaError_t code, const std::string &detail)
      : std::runtime_error(detail::compose_message(code, detail)), code_(code),
        detail_offset_(detail::detail_offset(code)) {}
  somaError_t code() const noexcept { return code_; }
  /** The error's name, e.g. "somaErrorInvalidValue". */
  const char *name() const noexcept { return somaGetErrorName(code_); }
  /** The message without the name: what failed, with the numbers. */
  const char *detail() const noexcept { return what() + detail_offset_; }

private:
  somaError_t code_;
  std::size_t detail_offset_;
};

/** Out of physical memory (somaErrorMemoryAllocation) or of address space
 *  (somaErrorAddressSpaceExhausted, S16). Catchable as std::bad_alloc. */
class bad_alloc : public std::bad_alloc {
public:
  bad_alloc(somaError_t code, const std::string &detail)
      : message_(std::make_shared<const std::string>(detail::compose_message(code, detail))),
        code_(code), detail_offset_(detail::detail_offset(code)) {}
  const char *what() const noexcept override { return message_->c_str(); }
  somaError_t code() const noexcept { return code_; }
  const char *name() const noexcept { return somaGetErrorName(code_); }
  const char *detail() const noexcept { return what() + detail_offset_; }
  /** True when the address reservation failed, not the physical memory (S16). */
  bool is_address_space_exhausted() const noexcept {
    return code_ == somaErrorAddressSpaceExhausted;
  }

private:
  std::shared_ptr<const std::string> message_; // shared: exceptions need a noexcept copy
  somaError_t code_;
  std::size_t detail_offset_;
};

/** Throws the exception for code with the given detail. Requires: code != somaSuccess. */
[[noreturn]] inline void throw_error(somaError_t code, const std::string &detail) {
  if (code == somaErrorMemoryAllocation || code == somaErrorAddressSpaceExhausted) {
    throw bad_alloc(code, detail);
  }
  throw error(code, detail);
}

/** Throws soma::error or soma::bad_alloc when code is not somaSuccess, with the calling
 *  thread's last-error message. Call it right after the failing call, on the same thread. */
inline void check(somaError_t code) {
  if (code != somaSuccess) [[unlikely]] {
    const char *message = somaGetLastErrorMessage(); // copied before any other soma call
    throw_error(code, message != nullptr ? std::string(message) : std::string());
  }
}

// ---- process, devices and pointers (S8, S13, S14) -------------------------------------------

/** Sets the cpu backend's devices, memory and granularity. Only before the runtime starts;
 *  afterwards NotPermitted. */
inline void set_cpu_backend_config(const somaCpuBackendConfig &config) {
  check(somaSetCpuBackendConfig(&config));
}
/** "cpu" or "cuda"; starts the runtime. */
inline const char *backend_name() {
  const char *name = nullptr;
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
inline memory_info get_memory_info() {
  memory_info info{0, 0};
  check(somaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}
/** Waits for all work on every stream of the current device; an observation point (S9, S12). */
inline void synchronize_device() { check(somaDeviceSynchronize()); }

/** S14: attributes of ptr. For a pointer soma does not know, or a freed one, isLiveAllocation
 *  is 0 and no exception is thrown. */
inline somaPointerAttributes pointer_attributes(const void *ptr) {
  somaPointerAttributes attributes{};
  check(somaPointerGetAttributes(&attributes, ptr));
  return attributes;
}

// ---- streams and events -----------------------------------------------------------------------

class event;

namespace detail {
template <class Task> somaError_t run_host_task(void *user_data) noexcept;
}

/**
 * A non-owning view of a stream, like cuda::stream_ref. A default-constructed view is the
 * current device's default stream (NULL handle); soma's default stream is an ordinary
 * in-order stream that does not synchronize implicitly with others.
 *
 * Errors of asynchronous work are sticky on their stream: synchronize(), query(), wait()
 * and launch() then throw soma::error with somaErrorLaunchFailure.
 */
class stream_ref {
public:
  constexpr stream_ref() noexcept = default;
  constexpr stream_ref(somaStream_t handle) noexcept : handle_(handle) {} // NOLINT: implicit
  stream_ref(int) = delete;            // 0 is not a stream; say stream_ref{} for the default
  stream_ref(std::nullptr_t) = delete; // likewise

  constexpr somaStream_t handle() const noexcept { return handle_; }
  /** Waits for all queued work; an observation point: completed frees become reusable by
   *  every stream and memory above the release threshold goes back (S9, S12). */
  void synchronize() const { check(somaStreamSynchronize(handle_)); }
  /** True if all queued work completed, false if some has not (NotReady). */
  bool query() const {
    const somaError_t status = somaStreamQuery(handle_);
    if (status == somaErrorNotReady)
      return false;
    check(status);
    return true;
  }
  /** Later work on this stream waits for the position recorded in e (S1, S2, S11). */
  void wait(const event &e) const;
  void wait(somaEvent_t e) const { check(somaStreamWaitEvent(handle_, e, 0)); }
  /** The device the stream belongs to. */
  soma::device device() const {
    int ordinal = 0;
    check(somaStreamGetDevice(handle_, &ordinal));
    return soma::device(ordinal);
  }

  /**
   * Runs a copy of task on this stream after all earlier work; later work waits for it
   * (somaLaunchHostFuncWithStatus). task may return void or somaError_t. An exception
   * thrown by task, or a returned status other than somaSuccess, becomes the stream's sticky
   * error (somaErrorLaunchFailure); the exception's text is not kept. Throws if enqueueing
   * fails, in which case task is not run. task runs on the stream's worker, not the caller's
   * thread: it must not call synchronize on its own stream.
   * Limitation: a task skipped because an earlier task on the stream failed is never run
   * and its copy is never destroyed (the C API gives no notice of skipped tasks), so
   * captures that own resources leak on a failed stream.
   */
  template <class Task> void launch(Task &&task) const {
    check(try_launch(std::forward<Task>(task)));
  }
  /** As launch(), returning the enqueue status instead of throwing. */
  template <class Task> somaError_t try_launch(Task &&task) const noexcept {
    using task_type = std::decay_t<Task>;
    static_assert(std::is_invocable_v<task_type &>, "a host task takes no arguments");
    task_type *owned = nullptr;
    try {
      owned = new task_type(std::forward<Task>(task));
    } catch (...) {
      return somaErrorMemoryAllocation;
    }
    const somaError_t status =
        somaLaunchHostFuncWithStatus(handle_, &detail::run_host_task<task_type>, owned);
    if (status != somaSuccess)
      delete owned; // not enqueued: the task never runs
    return status;
  }

  friend constexpr bool operator==(stream_ref a, stream_ref b) noexcept {
    return a.handle_ == b.handle_;
  }

protected:
  somaStream_t handle_ = nullptr;
};

/** An owned stream: created in the constructor, destroyed in the destructor (work already
 *  queued still runs). Move-only; a moved-from stream must only be assigned or destroyed.
 *  Keep a stream alive while frees enqueued on it are pending. */
class stream : public stream_ref {
public:
  /** Creates a stream on the calling thread's current device. */
  explicit stream(unsigned flags = somaStreamDefault) {
    check(somaStreamCreateWithFlags(&handle_, flags));
  }
  /** Creates a stream, or nothing on failure (see somaGetLastError/-Message). */
  static std::optional<stream> try_create(unsigned flags = somaStreamDefault) noexcept {
    somaStream_t handle = nullptr;
    if (somaStreamCreateWithFlags(&handle, flags) != somaSuccess)
      return std::nullopt;
    return std::optional<stream>(adopt(handle));
  }
  /** Takes ownership of a handle from somaStreamCreate. */
  static stream adopt(somaStream_t handle) noexcept { return stream(handle, adopt_tag{}); }

  stream(const stream &) = delete;
  stream &operator=(const stream &) = delete;
  stream(stream &&other) noexcept : stream_ref(std::exchange(other.handle_, nullptr)) {}
  stream &operator=(stream &&other) noexcept {
    if (this != &other) {
      destroy();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  ~stream() { destroy(); }

  /** Gives up ownership; the caller destroys the handle. */
  somaStream_t release() noexcept { return std::exchange(handle_, nullptr); }
  stream_ref ref() const noexcept { return stream_ref(handle_); }

private:
  struct adopt_tag {};
  stream(somaStream_t handle, adopt_tag) noexcept : stream_ref(handle) {}
  void destroy() noexcept {
    if (handle_ != nullptr)
      somaStreamDestroy(handle_);
    handle_ = nullptr;
  }
};

/** An owned event: a position in a stream. Recording copies the stream's position;
 *  a stream that waits on it is ordered after everything before that position (S1, S11). */
class event {
public:
  explicit event(unsigned flags = somaEventDisableTiming) {
    check(somaEventCreateWithFlags(&handle_, flags));
  }
  static std::optional<event> try_create(unsigned flags = somaEventDisableTiming) noexcept {
    somaEvent_t handle = nullptr;
    if (somaEventCreateWithFlags(&handle, flags) != somaSuccess)
      return std::nullopt;
    return std::optional<event>(adopt(handle));
  }
  static event adopt(somaEvent_t handle) noexcept { return event(handle, adopt_tag{}); }

  event(const event &) = delete;
  event &operator=(const event &) = delete;
  event(event &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  event &operator=(event &&other) noexcept {
    if (this != &other) {
      destroy();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  ~event() { destroy(); }

  /** Captures the position of all work queued so far on s. */
  void record(stream_ref s) { check(somaEventRecord(handle_, s.handle())); }
  /** Waits until the recorded position completes; an observation point (S9, S12). An event
   *  never recorded is complete. */
  void synchronize() const { check(somaEventSynchronize(handle_)); }
  /** True if the recorded position completed, false if not yet (NotReady). */
  bool query() const {
    const somaError_t status = somaEventQuery(handle_);
    if (status == somaErrorNotReady)
      return false;
    check(status);
    return true;
  }
  somaEvent_t handle() const noexcept { return handle_; }
  somaEvent_t release() noexcept { return std::exchange(handle_, nullptr); }

private:
  struct adopt_tag {};
  event(somaEvent_t handle, adopt_tag) noexcept : handle_(handle) {}
  void destroy() noexcept {
    if (handle_ != nullptr)
      somaEventDestroy(handle_);
    handle_ = nullptr;
  }
  somaEvent_t handle_ = nullptr;
};

inline void stream_ref::wait(const event &e) const { wait(e.handle()); }

namespace detail {
template <class Task> somaError_t run_host_task(void *user_data) noexcept {
  std::unique_ptr<Task> task(static_cast<Task *>(user_data));
  try {
    if constexpr (std::is_same_v<std::invoke_result_t<Task &>, somaError_t>) {
      return std::invoke(*task);
    } else {
      std::invoke(*task);
      return somaSuccess;
    }
  } catch (const soma::error &e) {
    return e.code();
  } catch (const soma::bad_alloc &e) {
    return e.code();
  } catch (const std::bad_alloc &) {
    return somaErrorMemoryAllocation;
  } catch (...) {
    return somaErrorLaunchFailure;
  }
}
} // namespace detail

// ---- pools (S3, S4, S5, S9, S10, S11) -------------------------------------------------------

/** Creation-time choices of an explicit pool, translated into somaMemPoolProps plus the
 *  release threshold attribute and the name. */
struct pool_options {
  int device = 0;                            ///< the pool's device (S4, S5)
  std::size_t max_size_bytes = 0;            ///< cap on reserved memory; 0 = the device's memory
  std::uint64_t release_threshold_bytes = 0; ///< S9; UINT64_MAX never releases at sync
  bool exportable = false;                   ///< S7: POSIX file descriptor handles
  std::string name;                          ///< used in messages; empty = soma's default
};

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
  explicit pool(const pool_options &options) : pool(props_for(options)) {
    // Delegation completed construction, so a throw below destroys the pool.
    set_release_threshold(options.release_threshold_bytes);
    if (!options.name.empty())
      set_name(options.name.c_str());
  }
  /** S5: creates a pool from CUDA-style properties (every field is checked). */
  explicit pool(const somaMemPoolProps &props) {
    check(somaMemPoolCreate(&handle_, &props));
    device_ = props.location.id;
    owning_ = true;
  }
  static std::optional<pool> try_create(const pool_options &options) noexcept {
    somaMemPool_t handle = nullptr;
    if (create(options, handle) != somaSuccess)
      return std::nullopt;
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

  pool(const pool &) = delete;
  pool &operator=(const pool &) = delete;
  pool(pool &&other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)), device_(other.device_),
        owning_(std::exchange(other.owning_, false)) {}
  pool &operator=(pool &&other) noexcept {
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
  void set_name(const char *name) const { check(somaMemPoolSetName(handle_, name)); }

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

  static somaMemPoolProps props_for(const pool_options &options) noexcept {
    somaMemPoolProps props{};
    props.allocType = somaMemAllocationTypePinned;
    props.handleTypes =
        options.exportable ? somaMemHandleTypePosixFileDescriptor : somaMemHandleTypeNone;
    props.location.type = somaMemLocationTypeDevice;
    props.location.id = options.device;
    props.maxSize = options.max_size_bytes;
    return props;
  }
  static somaError_t create(const pool_options &options, somaMemPool_t &out) noexcept {
    const somaMemPoolProps props = props_for(options);
    somaMemPool_t handle = nullptr;
    somaError_t status = somaMemPoolCreate(&handle, &props);
    if (status != somaSuccess)
      return status;
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
    if (owning_ && handle_ != nullptr)
      somaMemPoolDestroy(handle_);
    handle_ = nullptr;
    owning_ = false;
  }

  somaMemPool_t handle_ = nullptr;
  int device_ = 0;
  bool owning_ = false;
};

inline pool device::default_pool() const { return pool::default_for(ordinal_); }
inline pool device::current_pool() const { return pool::current_for(ordinal_); }

// ---- raw stream-ordered allocation (S1, S2) -------------------------------------------------

/** S1: bytes from the current pool of s's device, usable by later work on s; other streams
 *  need an event dependency. 0 bytes gives nullptr. Throws soma::bad_alloc when out of memory. */
inline void *malloc_async(std::size_t bytes, stream_ref s) {
  void *ptr = nullptr;
  check(somaMallocAsync(&ptr, bytes, s.handle()));
  return ptr;
}
/** S1, S5: as malloc_async, from p (which may belong to another device than s). */
inline void *malloc_async(std::size_t bytes, const pool &p, stream_ref s) {
  void *ptr = nullptr;
  check(somaMallocFromPoolAsync(&ptr, bytes, p.handle(), s.handle()));
  return ptr;
}
/** S2: releases ptr after all earlier work on s. Throws soma::error for a pointer that is
 *  not a live allocation (double free, foreign pointer, interior pointer). */
inline void free_async(void *ptr, stream_ref s) { check(somaFreeAsync(ptr, s.handle())); }

// ---- unique_async_ptr ---------------------------------------------------------------------

/**
 * Owns count elements of stream-ordered memory and the stream to free it on. The destructor
 * enqueues the free on that stream (S2) and never throws; order the stream after every use on
 * other streams first (stream.wait(event)) or call set_stream()/reset(stream) with the stream
 * that used it last. The stream must outlive the pointer. The memory holds no constructed
 * objects (it may be device memory), so T must be trivially copyable. Move-only.
 */
template <class T> class unique_async_ptr {
  static_assert(std::is_trivially_copyable_v<T> && !std::is_array_v<T>,
                "stream-ordered memory holds raw elements: T must be trivially copyable");

public:
  using element_type = T;

  constexpr unique_async_ptr() noexcept = default;
  /** Adopts ptr (from somaMallocAsync) holding count elements, to be freed on s. */
  unique_async_ptr(T *ptr, std::size_t count, stream_ref s) noexcept
      : ptr_(ptr), count_(count), stream_(s) {}
  unique_async_ptr(const unique_async_ptr &) = delete;
  unique_async_ptr &operator=(const unique_async_ptr &) = delete;
  unique_async_ptr(unique_async_ptr &&other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), count_(std::exchange(other.count_, 0)),
        stream_(other.stream_) {}
  unique_async_ptr &operator=(unique_async_ptr &&other) noexcept {
    if (this != &other) {
      reset();
      ptr_ = std::exchange(other.ptr_, nullptr);
      count_ = std::exchange(other.count_, 0);
      stream_ = other.stream_;
    }
    return *this;
  }
  ~unique_async_ptr() { reset(); }

  T *get() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return count_; }
  std::size_t size_bytes() const noexcept { return count_ * sizeof(T); }
  stream_ref stream() const noexcept { return stream_; }
  explicit operator bool() const noexcept { return ptr_ != nullptr; }

  /** The stream the eventual free goes on. */
  void set_stream(stream_ref s) noexcept { stream_ = s; }
  /** Gives up ownership; the caller frees the pointer. */
  T *release() noexcept {
    count_ = 0;
    return std::exchange(ptr_, nullptr);
  }
  /** S2: enqueues the free on the owned stream and becomes empty. */
  void reset() noexcept { reset(stream_); }
  /** S2: enqueues the free on s (the stream that used the memory last) and becomes empty. */
  void reset(stream_ref s) noexcept {
    if (ptr_ != nullptr)
      somaFreeAsync(ptr_, s.handle());
    ptr_ = nullptr;
    count_ = 0;
  }
  void swap(unique_async_ptr &other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(count_, other.count_);
    std::swap(stream_, other.stream_);
  }

private:
  T *ptr_ = nullptr;
  std::size_t count_ = 0;
  stream_ref stream_;
};

namespace detail {
template <class T> somaError_t bytes_for(std::size_t count, std::size_t &bytes) noexcept {
  if (count > std::numeric_limits<std::size_t>::max() / sizeof(T))
    return somaErrorMemoryAllocation;
  bytes = count * sizeof(T);
  return somaSuccess;
}
template <class T> [[noreturn]] void throw_count_overflow(std::size_t count) {
  throw bad_alloc(somaErrorMemoryAllocation, std::to_string(count) + " elements of " +
                                                 std::to_string(sizeof(T)) +
                                                 " bytes overflow size_t");
}
} // namespace detail

/** S1: count elements from the current pool of s's device, freed on s by the owner. */
template <class T> unique_async_ptr<T> make_unique_async(std::size_t count, stream_ref s) {
  std::size_t bytes = 0;
  if (detail::bytes_for<T>(count, bytes) != somaSuccess)
    detail::throw_count_overflow<T>(count);
  return unique_async_ptr<T>(static_cast<T *>(malloc_async(bytes, s)), count, s);
}
/** S1, S5: count elements from p, freed on s by the owner. */
template <class T>
unique_async_ptr<T> make_unique_async(std::size_t count, stream_ref s, const pool &p) {
  std::size_t bytes = 0;
  if (detail::bytes_for<T>(count, bytes) != somaSuccess)
    detail::throw_count_overflow<T>(count);
  return unique_async_ptr<T>(static_cast<T *>(malloc_async(bytes, p, s)), count, s);
}
/** As make_unique_async; an empty pointer on failure (see somaGetLastError/-Message). */
template <class T>
unique_async_ptr<T> try_make_unique_async(std::size_t count, stream_ref s) noexcept {
  std::size_t bytes = 0;
  void *ptr = nullptr;
  if (detail::bytes_for<T>(count, bytes) != somaSuccess ||
      somaMallocAsync(&ptr, bytes, s.handle()) != somaSuccess) {
    return {};
  }
  return unique_async_ptr<T>(static_cast<T *>(ptr), count, s);
}
template <class T>
unique_async_ptr<T> try_make_unique_async(std::size_t count, stream_ref s, const pool &p) noexcept {
  std::size_t bytes = 0;
  void *ptr = nullptr;
  if (detail::bytes_for<T>(count, bytes) != somaSuccess ||
      somaMallocFromPoolAsync(&ptr, bytes, p.handle(), s.handle()) != somaSuccess) {
    return {};
  }
  return unique_async_ptr<T>(static_cast<T *>(ptr), count, s);
}

// ---- memory_resource (CCCL cuda::mr shape) --------------------------------------------------

/** Property tag: memory of the resource is accessible from its device (cuda::mr style). */
struct device_accessible {};

/**
 * A stream-ordered memory resource over one pool, in the shape of CCCL's cuda::mr resource
 * concept (as RMM uses it): allocate(stream, bytes, alignment), deallocate(stream, ptr, bytes,
 * alignment), allocate_sync / deallocate_sync, operator==, get_property(device_accessible).
 * Copyable and cheap: it holds the pool handle, not the pool; the pool must outlive it.
 * Two resources are equal when they draw from the same pool (memory from one may be given
 * back through the other). Thread-safe.
 */
class memory_resource {
public:
  /** soma aligns every allocation to this many bytes. */
  static constexpr std::size_t default_alignment = 256;

  explicit memory_resource(const pool &p) noexcept : pool_(p.handle()) {}
  explicit memory_resource(somaMemPool_t handle) noexcept : pool_(handle) {}
  /** The pool that is current on device now (S4); later changes of it are not followed. */
  static memory_resource current_for(int device) {
    somaMemPool_t handle = nullptr;
    check(somaDeviceGetMemPool(&handle, device));
    return memory_resource(handle);
  }

  /**
   * S1: bytes usable by later work on s; other streams need an event dependency.
   * Throws soma::bad_alloc when out of memory or address space, soma::error with
   * somaErrorInvalidValue when alignment is not a power of two or exceeds 256.
   */
  void *allocate(stream_ref s, std::size_t bytes, std::size_t alignment = default_alignment) {
    if (!is_supported_alignment(alignment))
      throw_bad_alignment(alignment);
    void *ptr = nullptr;
    check(somaMallocFromPoolAsync(&ptr, bytes, pool_, s.handle()));
    return ptr;
  }
  /** As allocate; nullptr on failure (see somaGetLastError/-Message). */
  void *try_allocate(stream_ref s, std::size_t bytes,
                     std::size_t alignment = default_alignment) noexcept {
    if (!is_supported_alignment(alignment))
      return nullptr;
    void *ptr = nullptr;
    if (somaMallocFromPoolAsync(&ptr, bytes, pool_, s.handle()) != somaSuccess)
      return nullptr;
    return ptr;
  }
  /** S2: releases ptr after all earlier work on s; s must be ordered after every use of ptr.
   *  bytes and alignment are those given to allocate (soma does not need them). Errors such
   *  as a double free are not reported here; use soma::free_async to see them. */
  void deallocate(stream_ref s, void *ptr, std::size_t bytes,
                  std::size_t alignment = default_alignment) noexcept {
    (void)bytes;
    (void)alignment;
    somaFreeAsync(ptr, s.handle());
  }

  /** Memory usable at return by any stream: allocates on the current device's default
   *  stream and synchronizes it. */
  void *allocate_sync(std::size_t bytes, std::size_t alignment = default_alignment) {
    void *ptr = allocate(stream_ref{}, bytes, alignment);
    const somaError_t status = somaStreamSynchronize(nullptr);
    if (status != somaSuccess) {
      const char *message = somaGetLastErrorMessage();
      std::string detail = message != nullptr ? message : "";
      somaFreeAsync(ptr, nullptr);
      throw_error(status, detail);
    }
    return ptr;
  }
  /** Frees ptr, whose every use has completed, on the current device's default stream and
   *  synchronizes it: the memory is reusable by every stream at return (S9, S12). */
  void deallocate_sync(void *ptr, std::size_t bytes,
                       std::size_t alignment = default_alignment) noexcept {
    deallocate(stream_ref{}, ptr, bytes, alignment);
    somaStreamSynchronize(nullptr);
  }

  somaMemPool_t pool_handle() const noexcept { return pool_; }
  friend bool operator==(const memory_resource &a, const memory_resource &b) noexcept {
    return a.pool_ == b.pool_;
  }
  friend void get_property(const memory_resource &, device_accessible) noexcept {}

private:
  static constexpr bool is_supported_alignment(std::size_t alignment) noexcept {
    return alignment != 0 && (alignment & (alignment - 1)) == 0 && alignment <= default_alignment;
  }
  [[noreturn]] static void throw_bad_alignment(std::size_t alignment) {
    throw error(somaErrorInvalidValue, "alignment " + std::to_string(alignment) +
                                           " is not a power of two of at most 256 bytes");
  }

  somaMemPool_t pool_;
};

} // namespace soma

#endif // SOMA_SOMA_HPP
