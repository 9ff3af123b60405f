// Streams, events and the work enqueued on them.
#include <algorithm>
#include <thread>

#include "runtime/runtime.hpp"

namespace soma::detail {

result<stream_object*> runtime::resolve_stream(std::uintptr_t handle) const {
  if (handle == 0) return devices_[static_cast<std::size_t>(current_device())]->default_stream;
  stream_object* s = streams_.find(handle);
  if (s == nullptr) {
    return status(error_code::invalid_handle, "stream " + format_address(handle) +
                                                  " is not a live stream (destroyed, or never "
                                                  "created by somaStreamCreate)");
  }
  return s;
}

result<event_object*> runtime::resolve_event(std::uintptr_t handle) const {
  event_object* e = handle == 0 ? nullptr : events_.find(handle);
  if (e == nullptr) {
    return status(error_code::invalid_handle, "event " + format_address(handle) +
                                                  " is not a live event (destroyed, or never "
                                                  "created by somaEventCreate)");
  }
  return e;
}

result<stream_object*> runtime::new_stream(int device, unsigned flags, bool is_default,
                                           void* adopt_native) {
  // The cache slot is the handle's dense slot. A default stream is reached as NULL, never by
  // a handle, so it takes a slot that no handle names and keeps it for good.
  std::uint32_t slot = 0;
  std::uintptr_t handle = 0;
  auto object = std::make_shared<stream_object>(device, 0, &timelines_);
  stream_object* s = object.get();
  if (is_default) {
    slot = streams_.reserve_slot();
  } else {
    handle = streams_.add(s, &slot);
    if (handle == 0) slot = decltype(streams_)::no_slot;
  }
  if (slot == decltype(streams_)::no_slot) {
    timelines_.forget(s->timeline.id());
    return status(error_code::out_of_memory,
                  "too many live streams (limit " +
                      std::to_string(decltype(streams_)::slots_per_segment *
                                     decltype(streams_)::segment_count) +
                      ")");
  }
  s->timeline.set_cache_slot(slot);
  s->flags = flags;
  s->handle = handle;
  result<std::unique_ptr<backend::stream>> queue =
      adopt_native != nullptr ? backend_->adopt_stream(device, adopt_native, s->timeline)
                              : backend_->create_stream(device, s->timeline);
  if (!queue.ok()) {
    if (is_default) {
      streams_.release_slot(slot);
    } else {
      streams_.remove(handle);
    }
    timelines_.forget(s->timeline.id());
    return queue.take_error();
  }
  s->queue = std::move(queue.value());
  std::lock_guard lock(registry_mutex_);
  live_streams_.push_back(s);
  streams_by_id_.emplace(s->timeline.id(), std::move(object));
  return s;
}

result<std::uintptr_t> runtime::create_stream(unsigned flags) {
  if (flags > 1) {
    return status(error_code::invalid_value, "stream flags " + std::to_string(flags) +
                                                 " are not somaStreamDefault (0) or "
                                                 "somaStreamNonBlocking (1)");
  }
  // Streams destroyed earlier whose work has run are forgotten first: a program that makes a
  // stream per request keeps only what its live streams need.
  forget_finished_streams();
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
  // The handle dies now, but its slot (which names the stream's cache in every pool) stays
  // taken until those caches are drained: a stream created meanwhile on another thread must
  // not inherit blocks freed here, with no ordering against their frees (S2, S11).
  const std::uint32_t slot = streams_.invalidate(handle);
  if (slot == decltype(streams_)::no_slot) return resolve_stream(handle).take_error();
  std::shared_ptr<backend::stream> queue;
  {
    std::lock_guard lock(registry_mutex_);
    live_streams_.erase(std::remove(live_streams_.begin(), live_streams_.end(), s),
                        live_streams_.end());
    s->timeline.stop_accepting_waits();
    queue = std::move(s->queue);
    retired_streams_.push_back(s);  // forgotten once its work has run
    // Blocks cached for this stream go to each pool's index (stamped with this stream).
    for (const auto& p : all_pools_) p->forget_stream(s->timeline);
  }
  streams_.release_slot(slot);
  // Dropping the queue returns at once; the backend finishes the queued work.
  queue.reset();
  return status::success();
}

void runtime::forget_finished_streams() {
  // Records dropped here are destroyed after the lock is released (declared first).
  std::vector<std::shared_ptr<stream_object>> forgotten;
  std::lock_guard lock(registry_mutex_);
  if (retired_streams_.empty()) return;
  for (auto it = retired_streams_.begin(); it != retired_streams_.end();) {
    stream_object* s = *it;
    // While a poller is attached the backend still refers to the timeline (cuda: a retired
    // stream's completion tracker, detached when the backend recycles it).
    if (s->timeline.has_poller() || !s->timeline.has_completed(s->timeline.enqueued_position())) {
      ++it;
      continue;
    }
    // Its work has run, so every free made on it is complete. Those not yet proven move to the
    // device's forgotten-frees timeline at a position already complete (opportunistic reuse
    // takes them; a device synchronize proves them), so no block names this stream and
    // clocks may drop its entry (S11).
    stream_timeline& frees = *devices_[static_cast<std::size_t>(s->device)]->forgotten_frees;
    const std::uint64_t position = frees.note_enqueued();
    frees.note_completed(position);
    for (const auto& p : all_pools_) p->forget_timeline(s->timeline, free_stamp{&frees, position});
    timelines_.forget(s->timeline.id());
    auto record = streams_by_id_.find(s->timeline.id());
    forgotten.push_back(std::move(record->second));  // events may still hold it
    streams_by_id_.erase(record);
    it = retired_streams_.erase(it);
  }
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
  // Under the event's lock, so a record on another thread cannot pair the backend's wait
  // with another record's clock.
  std::lock_guard lock(recorded.mutex);
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
  event_object& event = *e.value();
  std::lock_guard lock(event.mutex);
  if (event.recorded_stream.get() != s.value())
    event.recorded_stream = s.value()->shared_from_this();
  event.recorded_position = s.value()->timeline.enqueued_position();
  ++event.record_count;
  s.value()->timeline.capture_clock_into(event.clock);
  return event.backend_event->record(*s.value()->queue);
}

std::shared_ptr<backend::stream> runtime::queue_of(const stream_object& stream) const {
  std::lock_guard lock(registry_mutex_);
  return stream.queue;
}

status runtime::wait_until(stream_object& stream, std::uint64_t position) {
  if (stream.timeline.has_completed(position)) return status::success();
  if (std::shared_ptr<backend::stream> queue = queue_of(stream); queue != nullptr) {
    if (status done = queue->synchronize(); !done.ok()) return done;
  }
  while (!stream.timeline.has_completed(position)) std::this_thread::yield();
  return status::success();
}

status runtime::order_stream_after(stream_object& waiter, stream_object& source,
                                   std::uint64_t position) {
  if (&waiter == &source || source.timeline.has_completed(position)) return status::success();
  std::shared_ptr<backend::stream> queue = queue_of(waiter);
  std::shared_ptr<backend::stream> source_queue = queue_of(source);
  if (queue == nullptr) return status(error_code::invalid_handle, "the stream was destroyed");
  if (source_queue != nullptr && queue->enqueue_wait_for(*source_queue, position).ok())
    return status::success();
  return wait_until(source, position);
}

void runtime::note_event_recorded(event_object& event, stream_object& stream,
                                  std::uint64_t position) {
  if (event.recorded_stream.get() != &stream) event.recorded_stream = stream.shared_from_this();
  event.recorded_position = position;
  ++event.record_count;
  stream.timeline.capture_clock_into(event.clock);
}

status runtime::query_event(std::uintptr_t handle) {
  result<event_object*> e = resolve_event(handle);
  if (!e.ok()) return e.take_error();
  event_object& event = *e.value();
  std::lock_guard lock(event.mutex);  // the answer and the position it proves go together
  status state = event.backend_event->query();
  if (state.ok() && event.recorded_stream != nullptr)
    proven(*event.recorded_stream, event.recorded_position);
  return state;
}

status runtime::synchronize_event(std::uintptr_t handle) {
  result<event_object*> e = resolve_event(handle);
  if (!e.ok()) return e.take_error();
  event_object& event = *e.value();
  std::shared_ptr<stream_object> recorded;
  std::uint64_t position = 0;
  std::uint64_t record_count = 0;
  {
    std::lock_guard lock(event.mutex);
    recorded = event.recorded_stream;
    position = event.recorded_position;
    record_count = event.record_count;
  }
  // Not under the event's lock: another thread may record it meanwhile, and a stream's work
  // may wait for that thread.
  status done = event.backend_event->synchronize();
  if (!done.ok()) return done;
  bool unchanged = false;
  {
    std::lock_guard lock(event.mutex);
    unchanged = event.record_count == record_count;
  }
  // A record made meanwhile may name another stream: then the wait proved nothing of ours.
  if (recorded != nullptr && unchanged) proven(*recorded, position);
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
