// Host memory that streams can reach (somaMallocHost), for tests that must run on every
// backend: pool memory is device memory on cuda, so tests read it back with a copy into a
// host_buffer and observe stream progress through words written by somaStreamWriteValue32.
//
//   soma_test::host_buffer copy(bytes);
//   SOMA_ASSERT_OK(somaMemcpyAsync(copy.data(), pointer, bytes, somaMemcpyDeviceToHost, s));
//   SOMA_ASSERT_OK(somaStreamSynchronize(s));
//   EXPECT_TRUE(copy.all(0x5a));
//
// Words (stream_flag, stream_gate) come from a process-lifetime arena and are never freed: a
// stream may still write a word after the test object that named it is gone.
//
// Requires: the including binary links `soma`.
#pragma once

#include <soma/soma.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

namespace soma_test {

/// somaMallocHost memory, freed on destruction. Starts zeroed.
class host_buffer {
 public:
  explicit host_buffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    if (somaMallocHost(&data_, bytes) != somaSuccess || data_ == nullptr) std::abort();
    std::memset(data_, 0, bytes);
  }
  ~host_buffer() {
    if (data_ != nullptr) (void)somaFreeHost(data_);
  }
  host_buffer(const host_buffer&) = delete;
  host_buffer& operator=(const host_buffer&) = delete;
  host_buffer(host_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  host_buffer& operator=(host_buffer&&) = delete;

  unsigned char* data() const { return static_cast<unsigned char*>(data_); }
  std::size_t size() const { return bytes_; }
  unsigned char operator[](std::size_t i) const { return data()[i]; }
  /// Number of bytes that differ from value.
  std::size_t count_not(unsigned char value) const {
    std::size_t n = 0;
    for (std::size_t i = 0; i < bytes_; ++i) n += data()[i] != value ? 1 : 0;
    return n;
  }
  /// Whether every byte equals value (false for an empty buffer).
  bool all(unsigned char value) const {
    if (bytes_ == 0) return false;
    for (std::size_t i = 0; i < bytes_; ++i)
      if (data()[i] != value) return false;
    return true;
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Copies [pointer, pointer + bytes) of pool memory to the host in stream order and waits for
/// the stream: the one way to read pool memory that works on every backend. On failure the
/// buffer is empty (size 0) and the status is in *status when given.
inline host_buffer read_back(const void* pointer, std::size_t bytes, somaStream_t stream,
                             somaError_t* status = nullptr) {
  host_buffer copy(bytes);
  somaError_t result = somaMemcpyAsync(copy.data(), pointer, bytes, somaMemcpyDeviceToHost, stream);
  if (result == somaSuccess) result = somaStreamSynchronize(stream);
  if (status != nullptr) *status = result;
  if (result != somaSuccess) return host_buffer(0);
  return copy;
}

/// A 32-bit word of somaMallocHost memory that lives until the process exits.
inline std::uint32_t* new_host_word() {
  static std::mutex mutex;
  static std::uint32_t* page = nullptr;
  static std::size_t used = 0;
  constexpr std::size_t kWordsPerPage = 1024;
  std::lock_guard lock(mutex);
  if (page == nullptr || used == kWordsPerPage) {
    void* fresh = nullptr;
    if (somaMallocHost(&fresh, kWordsPerPage * sizeof(std::uint32_t)) != somaSuccess) std::abort();
    std::memset(fresh, 0, kWordsPerPage * sizeof(std::uint32_t));
    page = static_cast<std::uint32_t*>(fresh);
    used = 0;
  }
  return &page[used++];
}

inline std::uint32_t load_word(const std::uint32_t* word) {
  return std::atomic_ref<std::uint32_t>(*const_cast<std::uint32_t*>(word))
      .load(std::memory_order_acquire);
}

inline void store_word(std::uint32_t* word, std::uint32_t value) {
  std::atomic_ref<std::uint32_t>(*word).store(value, std::memory_order_release);
}

/// Waits until pred() holds, polling every millisecond; false on timeout.
template <typename Pred>
bool wait_until(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

/// A flag a stream sets in stream order (somaStreamWriteValue32), so a test sees how far the
/// stream got without a host task: on the GPU the driver may run the host tasks of all streams
/// on one thread, and a held stream's host task would hold up every other stream's.
class stream_flag {
 public:
  stream_flag() : word_(new_host_word()) {}
  /// Enqueues the write that sets the flag once earlier work on stream completed.
  somaError_t set_on(somaStream_t stream) const {
    return somaStreamWriteValue32(stream, word_, 1, 0);
  }
  bool is_set() const { return load_word(word_) != 0; }
  /// Waits until set; false on timeout.
  bool wait(std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    return wait_until([this] { return is_set(); }, timeout);
  }
  std::uint32_t* word() const { return word_; }

 private:
  std::uint32_t* word_;
};

}  // namespace soma_test
