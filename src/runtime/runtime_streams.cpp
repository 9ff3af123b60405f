// Streams, events and the work enqueued on them.
#include <algorithm>

#include "runtime/runtime.hpp"

namespace soma::detail {

result<stream_object*> runtime::resolve_stream(std::uintptr_t handle) const {
  if (handle == 0) return devices_[static_cast<std::size_t>(current_device())]->default_stream;
  stream_object* s = streams_.find(handle);
  if (s == nullptr) {
    return status(error_code::invalid_handle,
                  "stream " + format_address(handle) + " is not a live stream (destroyed, or never "
                  "created by somaStreamCreate)");
  }
  return s;
}

result<event_object*> runtime::resolve_event(std::uintptr_t handle) const {
  event_object* e = handle == 0 ? nullptr : events_.find(handle);
  if (e == nullptr) {
    return status(error_code::invalid_handle,
                  "event " + format_address(handle) + " is not a live event (destroyed, or never "
                  "created by somaEventCreate)");
  }
  return e;
}

result<stream_object*> runtime::new_stream(int device, unsigned flags, bool is_default,
                                           void* adopt_native) {
  std::uint32_t slot = 0;
  // The cache slot is the handle's dense slot; default streams use slots too.
  auto object = std::make_unique<stream_object>(device, 0);
  stream_object* s = object.get();
  const std::uintptr_t handle = streams_.add(s, &slot);
  if (handle == 0) {
    return status(error_code::out_of_memory, "too many live streams (limit " +
                                                 std::to_string(handle_table<stream_object>::slots_per_segment *
                                                                handle_table<stream_object>::segment_count) +
                                                 ")");
  }
  s->timeline.set_cache_slot(slot);
  s->timeline.set_owner(s);
  s->flags = flags;
  s->handle = is_default ? 0 : handle;
  result<std::unique_ptr<backend::stream>> queue =
      adopt_native != nullptr ? backend_->adopt_stream(device, adopt_native, s->timeline)
                              : backend_->create_stream(device, s->timeline);
  if (!queue.ok()) {
    streams_.remove(handle);
    return queue.take_error();
  }
  // A default stream keeps its table entry for good (it is reached as NULL), so its
  // cache slot is never handed to another stream.
  s->queue = std::move(queue.value());
  std::lock_guard lock(registry_mutex_);
  live_streams_.push_back(s);
  all_streams_.push_back(std::move(object));
  return s;
}

result<std::uintptr_t> runtime::create_stream(unsigned flags) {
  if (flags > 1) {
    return status(error_code::invalid_value,
                  "stream flags " + std::to_string(flags) + " are not somaStreamDefault (0) or "
                  "somaStreamNonBlocking (1)");
  }
  result<stream_object*> created = new_stream(current_device(), flags, false);
  if (!created.ok()) return created.take_error();
  return created.value()->handle;
}

result<std::uintptr_t> runtime::adopt_native_stream(void* native, int device) {
  if (status checked = check_device(device); !checked.ok()) return checked;
  if (native == nullptr) {
    return status(error_code::invalid_value, "somaStreamCreateFromNative: nativeStream is NULL");
  }
  result<stream_object*> created = new_stream(device, 0, false, native);
  if (!created.ok()) return created.take_error();
  return created.value()->handle;
}

result<void*> runtime::native_stream(std::uintptr_t handle) {
  result<stream_object*> s = resolve_stream(handle);
  if (!s.ok()) return s.take_error();
  return s.value()->queue->native_handle();
}

status runtime::destroy_stream(std::uintptr_t handle) {
  if (handle == 0) {
    return status(error_code::invalid_handle, "the default stream (NULL) cannot be destroyed");
  }
  result<stream_object*> found = resolve_stream(handle);
  if (!found.ok()) return found.take_error();
  stream_object* s = found.value();
  if (!streams_.remove(handle)) return resolve_stream(handle).take_error();
  std::shared_ptr<backend::stream> queue;
  std::vector<memory_pool*> pools;
  {
    std::lock_guard lock(registry_mutex_);
    live_streams_.erase(std::remove(live_streams_.begin(), live_streams_.end(), s),
                        live_streams_.end());
    s->timeline.stop_accepting_waits();
    queue = std::move(s->queue);
    retired_streams_.push_back(s);  // a device synchronize proves its last frees
    for (const auto& p : all_pools_) pools.push_back(p.get());
    // Blocks cached for this stream go to each pool's index (stamped with this stream),
    // so the cache slot can serve the next stream.
    for (memory_pool* p : pools) p->forget_stream(s->timeline);
  }
  // Dropping the queue returns at once; the backend finishes the queued work.
  return status::success();
}

status runtime::synchronize_stream(std::uintptr_t handle) {
  result<stream_object*> found = resolve_stream(handle);
  if (!found.ok()) return found.take_error();
  stream_object& s = *found.value();
  const std::uint64_t position = s.timeline.enqueued_position();
  status done = s.queue->synchronize();
  if (!done.ok()) return status(done.code(), describe_stream(s) + ": " + done.message());
  proven(s, position);
  after_synchronize();
  return status::success();
}

status runtime::query_stream(std::uintptr_t handle) {
  result<stream_object*> found = resolve_stream(handle);
  if (!found.ok()) return found.take_error();
  stream_object& s = *found.value();
  const std::uint64_t position = s.timeline.enqueued_position();
  status state = s.queue->query();
  if (state.ok()) proven(s, position);
  return state;
}

status runtime::stream_wait_event(std::uintptr_t stream_handle, std::uintptr_t event_handle) {
  result<stream_object*> s = resolve_stream(stream_handle);
  if (!s.ok()) return s.take_error();
  result<event_object*> e = resolve_event(event_handle);
  if (!e.ok()) return e.take_error();
  event_object& recorded = *e.value();
  if (recorded.recorded_stream == nullptr) return status::success();  // nothing to wait for
  if (status waited = s.value()->queue->enqueue_wait(*recorded.backend_event); !waited.ok())
    return waited;
  // Later work on the stream happens after everything before the record (S11: follow event
  // dependencies reads this).
  s.value()->timeline.merge_clock(recorded.clock);
  return status::success();
}

result<int> runtime::stream_device(std::uintptr_t handle) {
  result<stream_object*> s = resolve_stream(handle);
  if (!s.ok()) return s.take_error();
  return s.value()->device;
}

result<std::uintptr_t> runtime::create_event(unsigned flags) {
  if (flags > 7) {
    return status(error_code::invalid_value, "event flags " + std::to_string(flags) +
                                                 " are not a combination of somaEvent* flags");
  }
  result<std::unique_ptr<backend::event>> created = backend_->create_event();
  if (!created.ok()) return created.take_error();
  auto* e = new event_object();
  e->backend_event = std::move(created.value());
  e->flags = flags;
  const std::uintptr_t handle = events_.add(e);
  if (handle == 0) {
    delete e;
    return status(error_code::out_of_memory, "too many live events");
  }
  return handle;
}

status runtime::destroy_event(std::uintptr_t handle) {
  result<event_object*> e = resolve_event(handle);
  if (!e.ok()) return e.take_error();
  if (!events_.remove(handle)) return resolve_event(handle).take_error();
  delete e.value();
  return status::success();
}

status runtime::record_event(std::uintptr_t event_handle, std::uintptr_t stream_handle) {
  result<event_object*> e = resolve_event(event_handle);
  if (!e.ok()) return e.take_error();
  result<stream_object*> s = resolve_stream(stream_handle);
  if (!s.ok()) return s.take_error();
  if (status failed = s.value()->queue->sticky_error(); !failed.ok()) return failed;
  e.value()->recorded_stream = s.value();
  e.value()->recorded_position = s.value()->timeline.enqueued_position();
  s.value()->timeline.capture_clock_into(e.value()->clock);
  return e.value()->backend_event->record(*s.value()->queue);
}

status runtime::query_event(std::uintptr_t handle) {
  result<event_object*> e = resolve_event(handle);
  if (!e.ok()) return e.take_error();
  status state = e.value()->backend_event->query();
  if (state.ok() && e.value()->recorded_stream != nullptr)
    proven(*e.value()->recorded_stream, e.value()->recorded_position);
  return state;
}

status runtime::synchronize_event(std::uintptr_t handle) {
  result<event_object*> e = resolve_event(handle);
  if (!e.ok()) return e.take_error();
  stream_object* recorded = e.value()->recorded_stream;
  const std::uint64_t position = e.value()->recorded_position;
  status done = e.value()->backend_event->synchronize();
  if (!done.ok()) return done;
  if (recorded != nullptr) proven(*recorded, position);
  after_synchronize();
  return status::success();
}

status runtime::launch_host_task(std::uintptr_t stream_handle, backend::host_task task) {
  result<stream_object*> s = resolve_stream(stream_handle);
  if (!s.ok()) return s.take_error();
  return s.value()->queue->enqueue_host_task(std::move(task));
}

status runtime::memset_async(void* destination, int value, std::size_t bytes,
                             std::uintptr_t stream_handle) {
  result<stream_object*> s = resolve_stream(stream_handle);
  if (!s.ok()) return s.take_error();
  if (bytes == 0) return status::success();
  if (status ok = check_use(destination, bytes, "somaMemsetAsync destination", s.value()->device,
                            backend::access_flags::read_write);
      !ok.ok())
    return ok;
  return s.value()->queue->enqueue_memset(destination, value, bytes);
}

status runtime::memcpy_async(void* destination, const void* source, std::size_t bytes,
                             std::uintptr_t stream_handle) {
  result<stream_object*> s = resolve_stream(stream_handle);
  if (!s.ok()) return s.take_error();
  if (bytes == 0) return status::success();
  // Each pointer's device comes from the pointer itself (S13); the stream's device runs the
  // copy and must be allowed to write the destination and read the source.
  if (status ok = check_use(destination, bytes, "somaMemcpyAsync destination", s.value()->device,
                            backend::access_flags::read_write);
      !ok.ok())
    return ok;
  if (status ok = check_use(source, bytes, "somaMemcpyAsync source", s.value()->device,
                            backend::access_flags::read);
      !ok.ok())
    return ok;
  return s.value()->queue->enqueue_memcpy(destination, source, bytes);
}

}  // namespace soma::detail
