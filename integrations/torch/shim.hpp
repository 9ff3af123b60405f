// shim: the process state behind the C functions of soma_torch.h.
//
// soma is started once, at the first call; then: the pool of each device (device_pools), the
// soma stream of each native stream (stream_registry), the streams record_stream declared
// (recorded_uses), the failure log. The shim is never destroyed: PyTorch may free tensors while
// the process exits, after static destructors ran, and soma's own runtime is kept alive for
// the same reason. Every member function is thread-safe; none throws except std::bad_alloc
// (the C functions catch it).
#pragma once

#include <soma/soma.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device_pools.hpp"
#include "failure_log.hpp"
#include "recorded_uses.hpp"
#include "soma_torch.h"
#include "stream_registry.hpp"

namespace soma::torch_integration {

class shim {
 public:
  /// The process's shim, started on first use.
  static shim& instance();
  shim(const shim&) = delete;
  shim& operator=(const shim&) = delete;

  // The allocator and PyTorch's hooks (soma_torch.h says what each does).
  void* allocate(std::int64_t size, int device, cudaStream_t native);
  void free(void* pointer, int device, cudaStream_t native);
  void record_stream(void* pointer, cudaStream_t native);
  void empty_cache();
  void set_memory_fraction(double fraction, int device);
  void* base_allocation(void* pointer, std::size_t* size);

  // Configuration, statistics and handles.
  somaError_t configure(const pool_settings& settings);
  somaError_t stats(int device, soma_torch_stats* stats);
  somaError_t reset_peak(int device);
  somaError_t synchronize(int device);
  int device_count() const noexcept;
  int adopts_native_streams() const noexcept;
  somaStream_t stream(int device, cudaStream_t native);
  somaMemPool_t pool(int device);

  failure_log& log() noexcept { return log_; }

 private:
  shim();
  somaError_t try_allocate(std::int64_t size, int device, cudaStream_t native, void** pointer,
                           std::string* failure);
  somaError_t try_free(void* pointer, int device, cudaStream_t native, std::string* failure);
  /// Frees pointer after the work so far of stream and of every recorded stream: on the
  /// device's free stream when another stream was recorded (*unified = true), else on stream.
  somaError_t free_after_uses(void* pointer, int device, somaStream_t stream,
                              const recorded_streams& recorded, bool* unified,
                              std::string* failure);
  /// The device's free stream, made on first use.
  somaError_t free_stream(int device, somaStream_t* stream, std::string* failure);
  /// Start failure or bad ordinal, with the message in *failure; somaSuccess otherwise.
  somaError_t check_device(int device, std::string* failure) const;
  somaEvent_t take_event(somaError_t* status);
  void give_event(somaEvent_t event);

  failure_log log_;
  somaError_t start_status_ = somaSuccess;
  std::string start_failure_;
  bool adopt_native_ = false;
  bool abort_on_oom_ = false;
  std::unique_ptr<device_pools> pools_;
  std::unique_ptr<stream_registry> streams_;
  recorded_uses uses_;
  std::mutex events_mutex_;
  std::vector<somaEvent_t> spare_events_;  // for ordering frees after recorded streams
  std::mutex free_streams_mutex_;
};

/// somaDeviceSynchronize of device from any thread (the thread's current device is put back).
somaError_t synchronize_device(int device);

}  // namespace soma::torch_integration
