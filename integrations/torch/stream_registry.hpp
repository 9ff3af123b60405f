// stream_registry: the soma stream that stands for each (device, native stream) PyTorch uses.
//
// cuda backend: the native stream is adopted once (somaStreamCreateFromNative), so whatever
// soma enqueues (a free, an event record, a wait) lands on PyTorch's own stream, in order with
// its kernels. Stream 0, PyTorch's default stream, is the legacy NULL stream: it is adopted as
// CU_STREAM_LEGACY (0x1), the handle that names that stream explicitly (soma refuses NULL, which
// means its own default stream). cudaStreamPerThread (0x2) is refused: it names a different
// stream on each host thread, and soma enqueues from whichever thread frees.
//
// cpu backend (no native streams): each distinct (device, value) gets a soma stream of its
// own, created on that device, so the library runs and is tested without a GPU.
//
// Entries are never removed: a soma stream lives as long as the process, so the native stream
// must too (PyTorch's pool streams do; an ExternalStream destroyed while soma still has it
// is the caller's error). Lookups go through a small per-thread cache, then a shared map.
// Thread-safe. Requires: one registry per process (the per-thread cache is shared).
#pragma once

#include <soma/soma.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "soma_torch.h"

namespace soma::torch_integration {

class stream_registry {
 public:
  stream_registry(bool adopt_native, int device_count);

  /// The soma stream for (device, native), created on first use. On failure *failure says why.
  /// Requires: 0 <= device < device_count.
  somaError_t get(int device, cudaStream_t native, somaStream_t* stream, std::string* failure);
  /// Distinct native streams seen on device.
  std::uint64_t count(int device) const;
  bool adopts_native() const noexcept { return adopt_native_; }

  /// cuda's handles of its two implicit streams.
  static constexpr std::uintptr_t legacy_stream_handle = 0x1;
  static constexpr std::uintptr_t per_thread_stream_handle = 0x2;

 private:
  struct key {
    int device = 0;
    std::uintptr_t native = 0;
    bool operator==(const key&) const = default;
  };
  struct key_hash {
    std::size_t operator()(const key& k) const noexcept {
      return std::hash<std::uintptr_t>()(k.native) ^ (static_cast<std::size_t>(k.device) << 1);
    }
  };

  somaError_t create(int device, std::uintptr_t native, somaStream_t* stream,
                     std::string* failure) const;

  const bool adopt_native_;
  mutable std::mutex mutex_;
  std::unordered_map<key, somaStream_t, key_hash> streams_;
  std::vector<std::uint64_t> counts_;
};

/// A non-blocking soma stream of soma's own on device (the calling thread's current device is
/// put back). The thread's last soma message says why on failure.
somaError_t create_own_stream(int device, somaStream_t* stream);

}  // namespace soma::torch_integration
