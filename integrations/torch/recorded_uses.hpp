// recorded_uses: the streams record_stream named for each live allocation, until its free.
//
// PyTorch frees a tensor on the stream it was allocated on. A tensor also used on another
// stream is the caller's to declare (torch.Tensor.record_stream). soma_torch_free then frees it
// on the device's free stream, a stream of soma's own that first waits (events) for the
// allocating stream's and every declared stream's work up to the free: soma hands the memory
// out again only once all of it is done, and no stream PyTorch runs on is made to wait, which
// is what PyTorch's own allocators promise for record_stream.
//
// What is stored here is the soma stream standing for each declared native stream, resolved
// when it was declared; a stream that could not be resolved makes the entry unordered, and
// such a free is kept back (the memory leaks rather than being handed out while that stream
// may still use it).
//
// Most processes never call record_stream: then every free costs one atomic load here.
// Thread-safe.
#pragma once

#include <soma/soma.h>

#include <atomic>
#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace soma::torch_integration {

/// What a free must wait for.
struct recorded_streams {
  std::vector<somaStream_t> streams;
  bool unordered = false;  ///< a declared stream could not be resolved
  bool empty() const noexcept { return streams.empty() && !unordered; }
};

class recorded_uses {
 public:
  /// Declares that the allocation starting at base is also used on stream (nullptr: a stream
  /// that could not be resolved). Repeats are stored once.
  void record(const void* base, somaStream_t stream);
  /// Whether no allocation has declared uses (one acquire load).
  bool empty() const noexcept { return entries_.load(std::memory_order_acquire) == 0; }
  /// Removes and returns what was declared for base.
  recorded_streams take(const void* base);

 private:
  std::mutex mutex_;
  std::unordered_map<const void*, recorded_streams> uses_;
  std::atomic<std::size_t> entries_{0};
};

}  // namespace soma::torch_integration
