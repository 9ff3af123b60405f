// Streams and events (S12): their handles, the stream records kept while queued work runs,
// the forgetting of destroyed streams once it has, and the locking that lets events be used
// from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.hpp"
#include "core/status.hpp"
#include "core/timeline_registry.hpp"
#include "runtime/device_table.hpp"
#include "runtime/handle_table.hpp"
#include "runtime/stream_object.hpp"

namespace soma::detail {

/// What the stream registry tells the pools (pool_registry): streams it retires and forgets,
/// and synchronizes that proved work complete (S9, S11, S12). Called under the registry's
/// lock except synchronized().
class stream_listener {
 public:
  /// A destroyed stream: blocks cached for it go where every stream can find them.
  virtual void stream_destroyed(const stream_timeline& timeline) = 0;
  /// A destroyed stream whose work has all run: what names it is stamped `instead`.
  virtual void timeline_forgotten(const stream_timeline& timeline, free_stamp instead) = 0;
  /// A synchronize proved work complete: memory may be released, destroyed pools deleted.
  virtual void synchronized() = 0;

 protected:
  ~stream_listener() = default;
};

/// Thread-safe. Lock order: this registry's lock, then the listener's.
class stream_registry {
 public:
  stream_registry(backend::backend& platform, const device_table& devices,
                  stream_listener& listener);
  stream_registry(const stream_registry&) = delete;
  stream_registry& operator=(const stream_registry&) = delete;

  /// Creates each device's default stream.
  status start();

  // -- streams -------------------------------------------------------------------------
  /// The stream of handle (0: the current device's default stream) or invalid_handle. Inline:
  /// record and wait resolve two handles a call, and out of line each result went through
  /// memory.
  result<stream_object*> resolve(std::uintptr_t handle) const {
    if (stream_object* found = find(handle)) [[likely]]
      return found;
    return resolve_missing(handle);
  }
  /// The stream of a handle somaStreamCreate made (or adopted) and nothing has destroyed;
  /// nullptr otherwise, where resolve tells why (or finds the default stream for 0). Lock-free.
  stream_object* find(std::uintptr_t handle) const noexcept { return streams_.find(handle); }
  result<std::uintptr_t> create(unsigned flags);
  /// A soma stream over native (cuda: a CUstream the caller owns). may_end_first: the owner
  /// may destroy native before the soma stream (somaNativeStreamMayEndFirst).
  result<std::uintptr_t> adopt_native(void* native, int device, bool may_end_first);
  result<void*> native(std::uintptr_t handle) const;
  status destroy(std::uintptr_t handle);
  status synchronize(std::uintptr_t handle);
  status query(std::uintptr_t handle);
  status wait_event(std::uintptr_t stream_handle, std::uintptr_t event_handle);
  result<int> device_of(std::uintptr_t handle) const;
  /// Every stream of device, destroyed ones whose work still runs included (S12).
  status synchronize_device(int device);
  std::string describe(const stream_object& stream) const;
  /// The handle of the live stream with timeline id (0: a default stream); nullopt once it
  /// was destroyed.
  std::optional<std::uintptr_t> handle_of_timeline(std::uint64_t timeline_id) const;

  // -- events --------------------------------------------------------------------------
  result<event_object*> resolve_event(std::uintptr_t handle) const {
    return events_.resolve(handle, "event", "somaEventCreate");
  }
  result<std::uintptr_t> create_event(unsigned flags);
  status destroy_event(std::uintptr_t handle);
  status record_event(std::uintptr_t event_handle, std::uintptr_t stream_handle);
  status query_event(std::uintptr_t handle);
  status synchronize_event(std::uintptr_t handle);
  /// A graph launch recorded event on stream before position (caller holds event.mutex).
  static void note_event_recorded(event_object& event, stream_object& stream,
                                  std::uint64_t position);

  // -- ordering, for pools (S9, S11) and graphs (S15) ----------------------------------
  /// The backend queue of stream, or null once it is destroyed.
  std::shared_ptr<backend::stream> queue_of(const stream_object& stream) const;
  /// Blocks until stream completed position (its queue's synchronize while it lives).
  status wait_until(stream_object& stream, std::uint64_t position);
  /// Later work on waiter waits until source completed position (on the host where the
  /// source's queue is gone).
  status order_after(stream_object& waiter, stream_object& source, std::uint64_t position);
  /// S11 internal dependencies: later work on stream waits for position of the stream with
  /// timeline id stream_id (nothing if that stream was forgotten: its work has all run).
  void order_after_free(stream_object& stream, std::uint64_t stream_id, std::uint64_t position);
  /// S9 compaction before growth: synchronizes stream so its frees are proven; no release.
  status synchronize_for_pool(stream_object& stream);
  /// A synchronize or successful query showed stream complete up to position (S12).
  static void proven(stream_object& stream, std::uint64_t position);
  /// Asks s's queue a question that proves its work when it succeeds (synchronize, query):
  /// what s had enqueued before it is then proven.
  static status ask_queue(stream_object& s, status (backend::stream::*question)());
  /// After a synchronize: forgets finished streams, then tells the listener.
  void after_synchronize();

 private:
  /// resolve() for a handle find() does not know: the default stream (0) or the error.
  result<stream_object*> resolve_missing(std::uintptr_t handle) const;
  struct device_streams {
    stream_object* default_stream = nullptr;
    // Stands for destroyed streams of this device once they are forgotten: their frees not
    // yet proven are stamped with it, and a device synchronize proves it (S9, S12).
    std::unique_ptr<stream_timeline> forgotten_frees;
  };

  result<stream_object*> add(int device, unsigned flags, bool is_default, void* adopt_native,
                             bool native_may_end_first = false);
  /// Blocks until stream (destroyed, or about to be) has completed position.
  status wait_destroyed(stream_object& stream, std::uint64_t position);
  /// Destroyed streams whose work has all run: their frees serve every stream, and their
  /// records and clock entries go (bounded memory under stream churn). Housekeeping, not the
  /// caller's result: where host memory runs out for it, the streams wait for the next call
  /// (each step is safe to repeat), and the synchronize or create that called it goes on.
  void forget_finished() noexcept;
  void forget_finished_or_throw();

  backend::backend& platform_;
  const device_table& devices_;
  stream_listener& listener_;
  timeline_registry timelines_;
  handle_table<stream_object, handle_kind::stream> streams_;
  handle_table<event_object, handle_kind::event> events_;
  std::vector<device_streams> per_device_;

  mutable std::mutex mutex_;  // the lists below and every stream's queue pointer
  // Every stream record not yet forgotten, by timeline id: live, and destroyed with work
  // that may still run (an internal dependency names a stream by id: slow_path_outcome).
  std::unordered_map<std::uint64_t, std::shared_ptr<stream_object>> by_id_;
  std::vector<stream_object*> live_;
  std::vector<stream_object*> retired_;  // destroyed, not yet forgotten
};

}  // namespace soma::detail
