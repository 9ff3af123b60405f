#include "stream_registry.hpp"

#include <array>

#include "failure_log.hpp"

namespace soma::torch_integration {
namespace {

// The per-thread cache: PyTorch allocates and frees almost always on the same one or two
// streams per thread, so the shared map (and its lock) is rarely reached. Entries stay valid
// because the registry never removes a stream.
struct cached_stream {
  std::uintptr_t native = 0;
  somaStream_t stream = nullptr;  // nullptr: empty entry
  int device = 0;
};
constexpr std::size_t cache_entries = 4;
thread_local std::array<cached_stream, cache_entries> cache{};
thread_local std::size_t cache_next = 0;

}  // namespace

stream_registry::stream_registry(bool adopt_native, int device_count)
    : adopt_native_(adopt_native), counts_(static_cast<std::size_t>(device_count), 0) {}

somaError_t stream_registry::get(int device, cudaStream_t native, somaStream_t* stream,
                                 std::string* failure) {
  auto value = reinterpret_cast<std::uintptr_t>(native);
  if (adopt_native_ && value == 0) value = legacy_stream_handle;
  for (const cached_stream& entry : cache) {
    if (entry.stream != nullptr && entry.native == value && entry.device == device) {
      *stream = entry.stream;
      return somaSuccess;
    }
  }
  somaStream_t found = nullptr;
  {
    std::lock_guard lock(mutex_);
    auto at = streams_.find(key{device, value});
    if (at != streams_.end()) {
      found = at->second;
    } else {
      // Created under the lock: two threads meeting a new stream at once must not adopt it
      // twice (soma would take the two for different streams and order them needlessly).
      if (somaError_t status = create(device, value, &found, failure); status != somaSuccess)
        return status;
      streams_.emplace(key{device, value}, found);
      ++counts_[static_cast<std::size_t>(device)];
    }
  }
  cache[cache_next] = cached_stream{value, found, device};
  cache_next = (cache_next + 1) % cache_entries;
  *stream = found;
  return somaSuccess;
}

std::uint64_t stream_registry::count(int device) const {
  std::lock_guard lock(mutex_);
  return counts_[static_cast<std::size_t>(device)];
}

somaError_t stream_registry::create(int device, std::uintptr_t native, somaStream_t* stream,
                                    std::string* failure) const {
  if (adopt_native_) {
    if (native == per_thread_stream_handle) {
      *failure = "device " + std::to_string(device) +
                 ": cudaStreamPerThread (0x2) cannot be adopted: it names another stream on "
                 "every host thread; use a stream of its own";
      return somaErrorInvalidValue;
    }
    // NOLINTNEXTLINE(performance-no-int-to-ptr): the handle value is the native stream
    const somaError_t status =
        somaStreamCreateFromNative(stream, reinterpret_cast<void*>(native), device);
    if (status != somaSuccess) {
      *failure = "device " + std::to_string(device) + ": adopting stream " +
                 format_address(native) + " failed: " + describe_soma_error(status);
    }
    return status;
  }
  // cpu: a stream of soma's own for this value.
  const somaError_t status = create_own_stream(device, stream);
  if (status != somaSuccess) {
    *failure = "device " + std::to_string(device) + ": creating the stream for value " +
               format_address(native) + " failed: " + describe_soma_error(status);
  }
  return status;
}

somaError_t create_own_stream(int device, somaStream_t* stream) {
  // The current device is per thread: put the caller's back.
  int previous = 0;
  somaError_t status = somaGetDevice(&previous);
  if (status != somaSuccess) return status;
  status = somaSetDevice(device);
  if (status != somaSuccess) return status;
  status = somaStreamCreateWithFlags(stream, somaStreamNonBlocking);
  const somaError_t restored = somaSetDevice(previous);
  return status != somaSuccess ? status : restored;
}

}  // namespace soma::torch_integration
