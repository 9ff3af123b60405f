// Events (S12): record, wait, query and synchronize, safe to use from several threads at once:
// each event's lock keeps its recorded stream, position and clock consistent with the backend
// record.
#include "runtime/stream_registry.hpp"

#include "runtime/history_notes.hpp"

namespace soma::detail {

result<std::uintptr_t> stream_registry::create_event(unsigned flags) {
  if (flags > 7) {
    return status(error_code::invalid_value, "event flags " + std::to_string(flags) +
                                                 " are not a combination of somaEvent* flags");
  }
  result<std::unique_ptr<backend::event>> created = platform_.create_event();
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

status stream_registry::destroy_event(std::uintptr_t handle) {
  result<event_object*> e = resolve_event(handle);
  if (!e.ok()) return e.take_error();
  if (!events_.remove(handle)) return resolve_event(handle).take_error();
  delete e.value();
  return status::success();
}

status stream_registry::record_event(std::uintptr_t event_handle, std::uintptr_t stream_handle) {
  result<event_object*> e = resolve_event(event_handle);
  if (!e.ok()) return e.take_error();
  result<stream_object*> s = resolve(stream_handle);
  if (!s.ok()) return s.take_error();
  if (status failed = s.value()->queue->sticky_error(); !failed.ok()) return failed;
  event_object& event = *e.value();
  std::lock_guard lock(event.mutex);
  note_event_recorded(event, *s.value(), s.value()->timeline.enqueued_position());
  return event.backend_event->record(*s.value()->queue);
}

void stream_registry::note_event_recorded(event_object& event, stream_object& stream,
                                          std::uint64_t position) {
  if (event.recorded_stream.get() != &stream) event.recorded_stream = stream.shared_from_this();
  event.recorded_position = position;
  ++event.record_count;
  stream.timeline.capture_clock_into(event.clock);
}

status stream_registry::wait_event(std::uintptr_t stream_handle, std::uintptr_t event_handle) {
  result<stream_object*> s = resolve(stream_handle);
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

status stream_registry::query_event(std::uintptr_t handle) {
  result<event_object*> e = resolve_event(handle);
  if (!e.ok()) return e.take_error();
  event_object& event = *e.value();
  std::lock_guard lock(event.mutex);  // the answer and the position it proves go together
  status state = event.backend_event->query();
  if (state.ok() && event.recorded_stream != nullptr)
    proven(*event.recorded_stream, event.recorded_position);
  return state;
}

status stream_registry::synchronize_event(std::uintptr_t handle) {
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
  if (history_notes::on()) {
    history_notes::synchronized(recorded != nullptr ? recorded->device : -1,
                                recorded != nullptr ? recorded->handle : 0, "event synchronize");
  }
  return status::success();
}

}  // namespace soma::detail
