// Streams: creation, destruction and forgetting, synchronize and query (S12), and the
// ordering pools and graphs ask for (S9, S11, S15).
#include "runtime/stream_registry.hpp"

#include "runtime/history_notes.hpp"

#include <algorithm>
#include <new>
#include <thread>
#include <utility>
#include <vector>

namespace soma::detail {

stream_registry::stream_registry(backend::backend& platform, const device_table& devices,
                                 stream_listener& listener)
    : platform_(platform), devices_(devices), listener_(listener) {}

status stream_registry::start() {
  per_device_.resize(static_cast<std::size_t>(devices_.count()));
  for (int device = 0; device < devices_.count(); ++device) {
    device_streams& mine = per_device_[static_cast<std::size_t>(device)];
    mine.forgotten_frees = std::make_unique<stream_timeline>(UINT32_MAX, &timelines_);
    result<stream_object*> stream = add(device, 0, /*is_default=*/true, nullptr);
    if (!stream.ok()) return stream.take_error();
    mine.default_stream = stream.value();
  }
  return status::success();
}

result<stream_object*> stream_registry::resolve_missing(std::uintptr_t handle) const {
  if (handle == 0) return per_device_[static_cast<std::size_t>(devices_.current())].default_stream;
  return streams_.resolve(handle, "stream", "somaStreamCreate");
}

result<stream_object*> stream_registry::add(int device, unsigned flags, bool is_default,
                                            void* adopt_native, bool native_may_end_first) {
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
  s->timeline.set_history_name(handle);
  result<std::unique_ptr<backend::stream>> queue =
      adopt_native != nullptr
          ? platform_.adopt_stream(device, adopt_native, s->timeline, native_may_end_first)
          : platform_.create_stream(device, s->timeline);
  if (!queue.ok()) {
    if (is_default) {
      streams_.release_slot(slot);
    } else {
      streams_.remove(handle);
    }
    timelines_.forget(s->timeline.id());
    return queue.take_error();
  }
  if (queue.value()->native_handle() != nullptr) s->native_queue = queue.value().get();
  s->queue = std::move(queue.value());
  std::lock_guard lock(mutex_);
  live_.push_back(s);
  by_id_.emplace(s->timeline.id(), std::move(object));
  return s;
}

result<std::uintptr_t> stream_registry::create(unsigned flags) {
  if (flags > 1) {
    return status(error_code::invalid_value, "stream flags " + std::to_string(flags) +
                                                 " are not somaStreamDefault (0) or "
                                                 "somaStreamNonBlocking (1)");
  }
  // Streams destroyed earlier whose work has run are forgotten first: a program that makes a
  // stream per request keeps only what its live streams need.
  forget_finished();
  result<stream_object*> created = add(devices_.current(), flags, false, nullptr);
  if (!created.ok()) return created.take_error();
  return created.value()->handle;
}

result<std::uintptr_t> stream_registry::adopt_native(void* native, int device, bool may_end_first) {
  if (status checked = devices_.check(device); !checked.ok()) return checked;
  if (native == nullptr) {
    return status(error_code::invalid_value, "somaStreamCreateFromNative: nativeStream is NULL");
  }
  result<stream_object*> created = add(device, 0, false, native, may_end_first);
  if (!created.ok()) return created.take_error();
  return created.value()->handle;
}

result<void*> stream_registry::native(std::uintptr_t handle) const {
  result<stream_object*> s = resolve(handle);
  if (!s.ok()) return s.take_error();
  return s.value()->queue->native_handle();
}

status stream_registry::destroy(std::uintptr_t handle) {
  if (handle == 0) {
    return status(error_code::invalid_handle, "the default stream (NULL) cannot be destroyed");
  }
  result<stream_object*> found = resolve(handle);
  if (!found.ok()) return found.take_error();
  stream_object* s = found.value();
  // The handle dies now, but its slot (which names the stream's cache in every pool) stays
  // taken until those caches are drained: a stream created meanwhile on another thread must
  // not inherit blocks freed here, with no ordering against their frees (S2, S11).
  const std::uint32_t slot = streams_.invalidate(handle);
  if (slot == decltype(streams_)::no_slot) return resolve(handle).take_error();
  std::shared_ptr<backend::stream> queue;
  {
    std::lock_guard lock(mutex_);
    live_.erase(std::remove(live_.begin(), live_.end(), s), live_.end());
    s->timeline.stop_accepting_waits();
    queue = std::move(s->queue);
    retired_.push_back(s);  // forgotten once its work has run
    // Blocks cached for this stream go to each pool's index (stamped with this stream).
    listener_.stream_destroyed(s->timeline);
  }
  streams_.release_slot(slot);
  // Dropping the queue returns at once; the backend finishes the queued work.
  queue.reset();
  return status::success();
}

void stream_registry::forget_finished() noexcept {
  try {
    forget_finished_or_throw();
  } catch (const std::bad_alloc&) {
    // The streams stay retired until the next synchronize or create.
  }
}

void stream_registry::forget_finished_or_throw() {
  // Records dropped here are destroyed after the lock is released (declared first).
  std::vector<std::shared_ptr<stream_object>> forgotten;
  std::lock_guard lock(mutex_);
  if (retired_.empty()) return;
  forgotten.reserve(retired_.size());  // before anything changes: the moves below cannot fail
  for (auto it = retired_.begin(); it != retired_.end();) {
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
    stream_timeline& frees = *per_device_[static_cast<std::size_t>(s->device)].forgotten_frees;
    const std::uint64_t position = frees.note_enqueued();
    frees.note_completed(position);
    listener_.timeline_forgotten(s->timeline, free_stamp{&frees, position});
    timelines_.forget(s->timeline.id());
    auto record = by_id_.find(s->timeline.id());
    forgotten.push_back(std::move(record->second));  // events may still hold it
    by_id_.erase(record);
    it = retired_.erase(it);
  }
}

void stream_registry::proven(stream_object& stream, std::uint64_t position) {
  stream.timeline.prove_completed(position);
}

void stream_registry::after_synchronize() {
  forget_finished();
  listener_.synchronized();
}

status stream_registry::ask_queue(stream_object& s, status (backend::stream::*question)()) {
  const std::uint64_t position = s.timeline.enqueued_position();
  status answer = ((*s.queue).*question)();
  if (answer.ok()) proven(s, position);
  return answer;
}

status stream_registry::synchronize(std::uintptr_t handle) {
  result<stream_object*> found = resolve(handle);
  if (!found.ok()) return found.take_error();
  stream_object& s = *found.value();
  status done = ask_queue(s, &backend::stream::synchronize);
  if (!done.ok()) return status(done.code(), describe(s) + ": " + done.message());
  after_synchronize();
  if (history_notes::on()) history_notes::synchronized(s.device, s.handle, "stream synchronize");
  return status::success();
}

status stream_registry::query(std::uintptr_t handle) {
  result<stream_object*> found = resolve(handle);
  if (!found.ok()) return found.take_error();
  return ask_queue(*found.value(), &backend::stream::query);
}

result<int> stream_registry::device_of(std::uintptr_t handle) const {
  result<stream_object*> s = resolve(handle);
  if (!s.ok()) return s.take_error();
  return s.value()->device;
}

status stream_registry::synchronize_device(int device) {
  // Copies keep the records and queues alive if another thread destroys a stream meanwhile
  // (a destroyed stream's record goes once its work has run).
  std::vector<std::pair<std::shared_ptr<stream_object>, std::shared_ptr<backend::stream>>> live;
  // A destroyed stream's queued work still runs; the device synchronize waits for it too,
  // and then the stream is forgotten: its frees serve every stream.
  std::vector<std::shared_ptr<stream_object>> retired;
  {
    std::lock_guard lock(mutex_);
    for (stream_object* s : live_) {
      if (s->device == device) live.emplace_back(s->shared_from_this(), s->queue);
    }
    for (stream_object* s : retired_) {
      if (s->device == device) retired.push_back(s->shared_from_this());
    }
  }
  for (const auto& s : retired) {
    const std::uint64_t position = s->timeline.enqueued_position();
    if (status waited = wait_destroyed(*s, position); !waited.ok()) return waited;
    proven(*s, position);
  }
  status first_failure;
  for (auto& [s, queue] : live) {
    const std::uint64_t position = s->timeline.enqueued_position();
    status done = queue->synchronize();
    if (done.ok()) {
      proven(*s, position);
    } else if (first_failure.ok()) {
      first_failure = status(done.code(), describe(*s) + ": " + done.message());
    }
  }
  // Streams destroyed before this call have run: the backend lets go of them, and once
  // forgotten their frees are proven.
  platform_.release_finished_streams();
  forget_finished();
  stream_timeline& forgotten = *per_device_[static_cast<std::size_t>(device)].forgotten_frees;
  forgotten.prove_completed(forgotten.enqueued_position());
  listener_.synchronized();
  if (history_notes::on()) history_notes::synchronized(device, 0, "device synchronize");
  return first_failure;
}

std::string stream_registry::describe(const stream_object& stream) const {
  if (stream.handle == 0) return "default stream of device " + std::to_string(stream.device);
  return "stream " + format_address(stream.handle) + " on device " + std::to_string(stream.device);
}

std::optional<std::uintptr_t> stream_registry::handle_of_timeline(std::uint64_t timeline_id) const {
  std::lock_guard lock(mutex_);
  auto found = by_id_.find(timeline_id);
  if (found == by_id_.end() || found->second->queue == nullptr) return std::nullopt;
  return found->second->handle;
}

// ---- ordering -----------------------------------------------------------------------------

std::shared_ptr<backend::stream> stream_registry::queue_of(const stream_object& stream) const {
  std::lock_guard lock(mutex_);
  return stream.queue;
}

status stream_registry::wait_until(stream_object& stream, std::uint64_t position) {
  if (stream.timeline.has_completed(position)) return status::success();
  if (std::shared_ptr<backend::stream> queue = queue_of(stream); queue != nullptr) {
    if (status done = queue->synchronize(); !done.ok()) return done;
  }
  return wait_destroyed(stream, position);
}

status stream_registry::wait_destroyed(stream_object& stream, std::uint64_t position) {
  // Polled: the final marker (cuda) or the worker (cpu) tells. Where nothing can tell (cuda:
  // no marker covers the stream's last work), the backend synchronizes the context instead of
  // leaving this loop to spin for good.
  while (!stream.timeline.has_completed(position)) {
    if (status waited = platform_.settle_unmarked_streams(stream.device); !waited.ok()) {
      return status(waited.code(), describe(stream) + " (destroyed): " + waited.message());
    }
    std::this_thread::yield();
  }
  return status::success();
}

status stream_registry::order_after(stream_object& waiter, stream_object& source,
                                    std::uint64_t position) {
  if (&waiter == &source || source.timeline.has_completed(position)) return status::success();
  std::shared_ptr<backend::stream> queue = queue_of(waiter);
  std::shared_ptr<backend::stream> source_queue = queue_of(source);
  if (queue == nullptr) return status(error_code::invalid_handle, "the stream was destroyed");
  if (source_queue != nullptr && queue->enqueue_wait_for(*source_queue, position).ok())
    return status::success();
  return wait_until(source, position);
}

void stream_registry::order_after_free(stream_object& stream, std::uint64_t stream_id,
                                       std::uint64_t position) {
  // The pool handed this stream a block whose free is pending on another stream. The freeing
  // stream is found by id: a stream no longer registered was forgotten, so its work has run.
  std::shared_ptr<stream_object> freeing;
  std::shared_ptr<backend::stream> freeing_queue;
  {
    std::lock_guard lock(mutex_);
    auto found = by_id_.find(stream_id);
    if (found != by_id_.end()) {
      freeing = found->second;
      freeing_queue = freeing->queue;
    }
  }
  if (freeing != nullptr) {
    status waited = freeing_queue != nullptr
                        ? stream.queue->enqueue_wait_for(*freeing_queue, position)
                        : status(error_code::invalid_handle, "freeing stream destroyed");
    if (!waited.ok()) {
      // The freeing stream was destroyed meanwhile (its queue still drains) or this stream
      // failed: wait on the host instead, so the block is never handed out early. If even that
      // fails the context is broken and nothing it runs completes; the block goes out then.
      (void)wait_destroyed(*freeing, position);
    }
    // Only a registered stream's position goes into the clock. A forgotten stream's entry
    // would be dropped anyway, and the device's forgotten-frees timeline stands for many
    // streams at once: a wait on one of its positions orders this stream after that free
    // alone, yet the clock would cover every free forgotten earlier, and following event
    // dependencies would hand those out with opportunistic reuse off (S11).
    stream.timeline.order_after(stream_id, position);
  }
  if (history_notes::on()) {
    history_notes::waited(stream.device, stream.handle, freeing != nullptr ? freeing->handle : 0,
                          position);
  }
}

status stream_registry::synchronize_for_pool(stream_object& stream) {
  return ask_queue(stream, &backend::stream::synchronize);
}

}  // namespace soma::detail
