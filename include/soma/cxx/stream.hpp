/**
 * @file soma/cxx/stream.hpp
 * @brief Part of soma's C++ API (include <soma/soma.hpp>): Streams, events and host tasks.
 */
#ifndef SOMA_CXX_STREAM_HPP
#define SOMA_CXX_STREAM_HPP

#include <soma/cxx/device.hpp>

namespace soma {

// ---- streams and events -----------------------------------------------------------------------

class event;

namespace detail {
template <class Task>
somaError_t run_host_task(void* user_data) noexcept;
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
  constexpr stream_ref(somaStream_t handle) noexcept : handle_(handle) {}  // NOLINT: implicit
  stream_ref(int) = delete;             // 0 is not a stream; say stream_ref{} for the default
  stream_ref(std::nullptr_t) = delete;  // likewise

  constexpr somaStream_t handle() const noexcept { return handle_; }
  /** Waits for all queued work; an observation point: completed frees become reusable by
   *  every stream and memory above the release threshold goes back (S9, S12). */
  void synchronize() const { check(somaStreamSynchronize(handle_)); }
  /** True if all queued work completed, false if some has not (NotReady). */
  bool query() const {
    const somaError_t status = somaStreamQuery(handle_);
    if (status == somaErrorNotReady) return false;
    check(status);
    return true;
  }
  /** Later work on this stream waits for the position recorded in e (S1, S2, S11). */
  void wait(const event& e) const;
  void wait(somaEvent_t e) const { check(somaStreamWaitEvent(handle_, e, 0)); }
  /** Sets bytes at ptr to (unsigned char)value after earlier work (S1); pool memory of another
   *  device needs a read-write grant (S6). */
  void memset_async(void* ptr, int value, std::size_t bytes) const {
    check(somaMemsetAsync(ptr, value, bytes, handle_));
  }
  /** Copies bytes after earlier work; each pointer's device comes from the pointer (S13). */
  void memcpy_async(void* destination, const void* source, std::size_t bytes) const {
    check(somaMemcpyAsync(destination, source, bytes, somaMemcpyDefault, handle_));
  }
  /** Later work waits until the word at address satisfies condition (somaStreamWaitValue32);
   *  address is in malloc_host() memory or a live pool allocation. */
  void wait_value32(std::uint32_t* address, std::uint32_t value,
                    somaStreamWaitValueFlags condition = somaStreamWaitValueGeq) const {
    check(somaStreamWaitValue32(handle_, address, value, static_cast<unsigned>(condition)));
  }
  /** Writes value to the word at address once earlier work completed (somaStreamWriteValue32). */
  void write_value32(std::uint32_t* address, std::uint32_t value) const {
    check(somaStreamWriteValue32(handle_, address, value, 0));
  }
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
  template <class Task>
  void launch(Task&& task) const {
    check(try_launch(std::forward<Task>(task)));
  }
  /** As launch(), returning the enqueue status instead of throwing. */
  template <class Task>
  somaError_t try_launch(Task&& task) const noexcept {
    using task_type = std::decay_t<Task>;
    static_assert(std::is_invocable_v<task_type&>, "a host task takes no arguments");
    task_type* owned = nullptr;
    try {
      owned = new task_type(std::forward<Task>(task));
    } catch (...) {
      return somaErrorMemoryAllocation;
    }
    const somaError_t status =
        somaLaunchHostFuncWithStatus(handle_, &detail::run_host_task<task_type>, owned);
    if (status != somaSuccess) delete owned;  // not enqueued: the task never runs
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
    if (somaStreamCreateWithFlags(&handle, flags) != somaSuccess) return std::nullopt;
    return std::optional<stream>(adopt(handle));
  }
  /** Takes ownership of a handle from somaStreamCreate. */
  static stream adopt(somaStream_t handle) noexcept { return stream(handle, adopt_tag{}); }

  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  stream(stream&& other) noexcept : stream_ref(std::exchange(other.handle_, nullptr)) {}
  stream& operator=(stream&& other) noexcept {
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
    if (handle_ != nullptr) somaStreamDestroy(handle_);
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
    if (somaEventCreateWithFlags(&handle, flags) != somaSuccess) return std::nullopt;
    return std::optional<event>(adopt(handle));
  }
  static event adopt(somaEvent_t handle) noexcept { return event(handle, adopt_tag{}); }

  event(const event&) = delete;
  event& operator=(const event&) = delete;
  event(event&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  event& operator=(event&& other) noexcept {
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
    if (status == somaErrorNotReady) return false;
    check(status);
    return true;
  }
  somaEvent_t handle() const noexcept { return handle_; }
  somaEvent_t release() noexcept { return std::exchange(handle_, nullptr); }

 private:
  struct adopt_tag {};
  event(somaEvent_t handle, adopt_tag) noexcept : handle_(handle) {}
  void destroy() noexcept {
    if (handle_ != nullptr) somaEventDestroy(handle_);
    handle_ = nullptr;
  }
  somaEvent_t handle_ = nullptr;
};

inline void stream_ref::wait(const event& e) const { wait(e.handle()); }

namespace detail {
template <class Task>
somaError_t run_host_task(void* user_data) noexcept {
  std::unique_ptr<Task> task(static_cast<Task*>(user_data));
  try {
    if constexpr (std::is_same_v<std::invoke_result_t<Task&>, somaError_t>) {
      return std::invoke(*task);
    } else {
      std::invoke(*task);
      return somaSuccess;
    }
  } catch (const soma::error& e) {
    return e.code();
  } catch (const soma::bad_alloc& e) {
    return e.code();
  } catch (const std::bad_alloc&) {
    return somaErrorMemoryAllocation;
  } catch (...) {
    return somaErrorLaunchFailure;
  }
}
}  // namespace detail

}  // namespace soma

#endif  // SOMA_CXX_STREAM_HPP
