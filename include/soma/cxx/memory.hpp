/**
 * @file soma/cxx/memory.hpp
 * @brief Part of soma's C++ API (include <soma/soma.hpp>): Stream-ordered allocation: raw calls,
 * unique_async_ptr, the memory resource.
 */
#ifndef SOMA_CXX_MEMORY_HPP
#define SOMA_CXX_MEMORY_HPP

#include <soma/cxx/pool.hpp>

namespace soma {

// ---- raw stream-ordered allocation (S1, S2) -------------------------------------------------

/** S1: bytes from the current pool of s's device, usable by later work on s; other streams
 *  need an event dependency. 0 bytes gives nullptr. Throws soma::bad_alloc when out of memory. */
inline void* malloc_async(std::size_t bytes, stream_ref s) {
  void* ptr = nullptr;
  check(somaMallocAsync(&ptr, bytes, s.handle()));
  return ptr;
}
/** S1, S5: as malloc_async, from p (which may belong to another device than s). */
inline void* malloc_async(std::size_t bytes, const pool& p, stream_ref s) {
  void* ptr = nullptr;
  check(somaMallocFromPoolAsync(&ptr, bytes, p.handle(), s.handle()));
  return ptr;
}
/** S2: releases ptr after all earlier work on s. Throws soma::error for a pointer that is
 *  not a live allocation (double free, foreign pointer, interior pointer). */
inline void free_async(void* ptr, stream_ref s) { check(somaFreeAsync(ptr, s.handle())); }

// ---- unique_async_ptr ---------------------------------------------------------------------

/**
 * Owns count elements of stream-ordered memory and the stream to free it on. The destructor
 * enqueues the free on that stream (S2) and never throws; order the stream after every use on
 * other streams first (stream.wait(event)) or call set_stream()/reset(stream) with the stream
 * that used it last. The stream must outlive the pointer. The memory holds no constructed
 * objects (it may be device memory), so T must be trivially copyable. Move-only.
 */
template <class T>
class unique_async_ptr {
  static_assert(std::is_trivially_copyable_v<T> && !std::is_array_v<T>,
                "stream-ordered memory holds raw elements: T must be trivially copyable");

 public:
  using element_type = T;

  constexpr unique_async_ptr() noexcept = default;
  /** Adopts ptr (from somaMallocAsync) holding count elements, to be freed on s. */
  unique_async_ptr(T* ptr, std::size_t count, stream_ref s) noexcept
      : ptr_(ptr), count_(count), stream_(s) {}
  unique_async_ptr(const unique_async_ptr&) = delete;
  unique_async_ptr& operator=(const unique_async_ptr&) = delete;
  unique_async_ptr(unique_async_ptr&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)),
        count_(std::exchange(other.count_, 0)),
        stream_(other.stream_) {}
  unique_async_ptr& operator=(unique_async_ptr&& other) noexcept {
    if (this != &other) {
      reset();
      ptr_ = std::exchange(other.ptr_, nullptr);
      count_ = std::exchange(other.count_, 0);
      stream_ = other.stream_;
    }
    return *this;
  }
  ~unique_async_ptr() { reset(); }

  T* get() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return count_; }
  std::size_t size_bytes() const noexcept { return count_ * sizeof(T); }
  stream_ref stream() const noexcept { return stream_; }
  explicit operator bool() const noexcept { return ptr_ != nullptr; }

  /** The stream the eventual free goes on. */
  void set_stream(stream_ref s) noexcept { stream_ = s; }
  /** Gives up ownership; the caller frees the pointer. */
  T* release() noexcept {
    count_ = 0;
    return std::exchange(ptr_, nullptr);
  }
  /** S2: enqueues the free on the owned stream and becomes empty. */
  void reset() noexcept { reset(stream_); }
  /** S2: enqueues the free on s (the stream that used the memory last) and becomes empty. */
  void reset(stream_ref s) noexcept {
    if (ptr_ != nullptr) somaFreeAsync(ptr_, s.handle());
    ptr_ = nullptr;
    count_ = 0;
  }
  void swap(unique_async_ptr& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(count_, other.count_);
    std::swap(stream_, other.stream_);
  }

 private:
  T* ptr_ = nullptr;
  std::size_t count_ = 0;
  stream_ref stream_;
};

namespace detail {
template <class T>
somaError_t bytes_for(std::size_t count, std::size_t& bytes) noexcept {
  if (count > std::numeric_limits<std::size_t>::max() / sizeof(T)) return somaErrorMemoryAllocation;
  bytes = count * sizeof(T);
  return somaSuccess;
}
template <class T>
[[noreturn]] void throw_count_overflow(std::size_t count) {
  throw bad_alloc(somaErrorMemoryAllocation, std::to_string(count) + " elements of " +
                                                 std::to_string(sizeof(T)) +
                                                 " bytes overflow size_t");
}
}  // namespace detail

/** S1: count elements from the current pool of s's device, freed on s by the owner. */
template <class T>
unique_async_ptr<T> make_unique_async(std::size_t count, stream_ref s) {
  std::size_t bytes = 0;
  if (detail::bytes_for<T>(count, bytes) != somaSuccess) detail::throw_count_overflow<T>(count);
  return unique_async_ptr<T>(static_cast<T*>(malloc_async(bytes, s)), count, s);
}
/** S1, S5: count elements from p, freed on s by the owner. */
template <class T>
unique_async_ptr<T> make_unique_async(std::size_t count, stream_ref s, const pool& p) {
  std::size_t bytes = 0;
  if (detail::bytes_for<T>(count, bytes) != somaSuccess) detail::throw_count_overflow<T>(count);
  return unique_async_ptr<T>(static_cast<T*>(malloc_async(bytes, p, s)), count, s);
}
/** As make_unique_async; an empty pointer on failure (see somaGetLastError/-Message). */
template <class T>
unique_async_ptr<T> try_make_unique_async(std::size_t count, stream_ref s) noexcept {
  std::size_t bytes = 0;
  void* ptr = nullptr;
  if (detail::bytes_for<T>(count, bytes) != somaSuccess ||
      somaMallocAsync(&ptr, bytes, s.handle()) != somaSuccess) {
    return {};
  }
  return unique_async_ptr<T>(static_cast<T*>(ptr), count, s);
}
template <class T>
unique_async_ptr<T> try_make_unique_async(std::size_t count, stream_ref s, const pool& p) noexcept {
  std::size_t bytes = 0;
  void* ptr = nullptr;
  if (detail::bytes_for<T>(count, bytes) != somaSuccess ||
      somaMallocFromPoolAsync(&ptr, bytes, p.handle(), s.handle()) != somaSuccess) {
    return {};
  }
  return unique_async_ptr<T>(static_cast<T*>(ptr), count, s);
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

  explicit memory_resource(const pool& p) noexcept : pool_(p.handle()) {}
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
  void* allocate(stream_ref s, std::size_t bytes, std::size_t alignment = default_alignment) {
    if (!is_supported_alignment(alignment)) throw_bad_alignment(alignment);
    void* ptr = nullptr;
    check(somaMallocFromPoolAsync(&ptr, bytes, pool_, s.handle()));
    return ptr;
  }
  /** As allocate; nullptr on failure (see somaGetLastError/-Message). */
  void* try_allocate(stream_ref s, std::size_t bytes,
                     std::size_t alignment = default_alignment) noexcept {
    if (!is_supported_alignment(alignment)) return nullptr;
    void* ptr = nullptr;
    if (somaMallocFromPoolAsync(&ptr, bytes, pool_, s.handle()) != somaSuccess) return nullptr;
    return ptr;
  }
  /** S2: releases ptr after all earlier work on s; s must be ordered after every use of ptr.
   *  bytes and alignment are those given to allocate (soma does not need them). Errors such
   *  as a double free are not reported here; use soma::free_async to see them. */
  void deallocate(stream_ref s, void* ptr, std::size_t bytes,
                  std::size_t alignment = default_alignment) noexcept {
    (void)bytes;
    (void)alignment;
    somaFreeAsync(ptr, s.handle());
  }

  /** Memory usable at return by any stream: allocates on the current device's default
   *  stream and synchronizes it. */
  void* allocate_sync(std::size_t bytes, std::size_t alignment = default_alignment) {
    void* ptr = allocate(stream_ref{}, bytes, alignment);
    const somaError_t status = somaStreamSynchronize(nullptr);
    if (status != somaSuccess) {
      const char* message = somaGetLastErrorMessage();
      std::string detail = message != nullptr ? message : "";
      somaFreeAsync(ptr, nullptr);
      throw_error(status, detail);
    }
    return ptr;
  }
  /** Frees ptr, whose every use has completed, on the current device's default stream and
   *  synchronizes it: the memory is reusable by every stream at return (S9, S12). */
  void deallocate_sync(void* ptr, std::size_t bytes,
                       std::size_t alignment = default_alignment) noexcept {
    deallocate(stream_ref{}, ptr, bytes, alignment);
    somaStreamSynchronize(nullptr);
  }

  /** CCCL 3.0's synchronous resource shape (cuda::mr::resource, <soma/cxx/cccl.hpp>): the same
   *  as allocate_sync and deallocate_sync. */
  void* allocate(std::size_t bytes, std::size_t alignment) {
    return allocate_sync(bytes, alignment);
  }
  void deallocate(void* ptr, std::size_t bytes, std::size_t alignment) noexcept {
    deallocate_sync(ptr, bytes, alignment);
  }

  somaMemPool_t pool_handle() const noexcept { return pool_; }
  friend bool operator==(const memory_resource& a, const memory_resource& b) noexcept {
    return a.pool_ == b.pool_;
  }
  friend void get_property(const memory_resource&, device_accessible) noexcept {}

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

}  // namespace soma

#endif  // SOMA_CXX_MEMORY_HPP
