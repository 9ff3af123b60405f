#include "runtime/runtime.hpp"

#include "backend/fork_guard.hpp"
#include "runtime/pool_hazards.hpp"

#include <algorithm>
#include <thread>

namespace soma::detail {
namespace {

std::mutex start_mutex;
backend::cpu_settings configured_cpu_settings;
// Never destroyed: worker threads may outlive main. Read without the lock once set.
std::atomic<runtime*> started_runtime{nullptr};
status start_failure;
bool start_attempted = false;
thread_local int current_device_index = 0;

}  // namespace

status runtime::configure_cpu(const backend::cpu_settings& settings) {
  // Bad input is refused as such, before or after start, and nothing is kept.
  if (status ok = backend::check_cpu_settings(settings); !ok.ok())
    return status(ok.code(), "somaSetCpuBackendConfig: " + ok.message());
  if (backend::forked_after_start()) return backend::forked_child_error();
  std::lock_guard lock(start_mutex);
  if (start_attempted) {
    return status(error_code::not_permitted,
                  "the cpu backend is configured only before the runtime starts; it started "
                  "with the first soma call of this process");
  }
  configured_cpu_settings = settings;
  return status::success();
}

result<runtime*> runtime::instance() {
  // Every API call comes here: after start it is two loads, no lock.
  if (runtime* ready = started_runtime.load(std::memory_order_acquire)) [[likely]] {
    if (!backend::forked_after_start()) [[likely]]
      return ready;
  }
  // A child forked after start has the runtime's memory but not its threads (nor, on cuda, a
  // usable driver); asked before the lock, which fork may have left held.
  if (backend::forked_after_start()) return backend::forked_child_error();
  std::lock_guard lock(start_mutex);
  if (runtime* ready = started_runtime.load(std::memory_order_acquire)) return ready;
  if (start_attempted) return start_failure;
  start_attempted = true;
  result<std::unique_ptr<backend::backend>> platform =
      backend::create_backend(configured_cpu_settings);
  if (!platform.ok()) {
    start_failure = platform.take_error();
    return start_failure;
  }
  auto* created = new runtime(std::move(platform.value()));
  if (status started = created->start(); !started.ok()) {
    start_failure = started;
    return start_failure;  // the half-started runtime is kept alive on purpose
  }
  started_runtime.store(created, std::memory_order_release);
  return created;
}

runtime::runtime(std::unique_ptr<backend::backend> platform) : backend_(std::move(platform)) {}

status runtime::start() {
  const int count = backend_->device_count();
  if (count <= 0) return status(error_code::no_device, backend_->name() + " backend: no device");
  for (int device = 0; device < count; ++device) {
    auto state = std::make_unique<device_state>();
    state->properties = backend_->properties(device);
    state->forgotten_frees = std::make_unique<stream_timeline>(UINT32_MAX, &timelines_);
    devices_.push_back(std::move(state));
  }
  for (int device = 0; device < count; ++device) {
    pool_properties properties;
    properties.device = device;
    result<pool_object*> created = new_pool(properties, /*is_default=*/true, "default");
    if (!created.ok()) return created.take_error();
    devices_[static_cast<std::size_t>(device)]->default_pool = created.value();
    devices_[static_cast<std::size_t>(device)]->current_pool.store(created.value());
    result<stream_object*> stream = new_stream(device, 0, /*is_default=*/true);
    if (!stream.ok()) return stream.take_error();
    devices_[static_cast<std::size_t>(device)]->default_stream = stream.value();
  }
  return status::success();
}

status runtime::check_device(int device) const {
  if (device < 0 || device >= device_count()) {
    return status(error_code::invalid_device,
                  "device " + std::to_string(device) + " does not exist (the " + backend_->name() +
                      " backend has " + std::to_string(device_count()) + " device" +
                      (device_count() == 1 ? "" : "s") + ")");
  }
  return status::success();
}

status runtime::set_current_device(int device) {
  if (status checked = check_device(device); !checked.ok()) return checked;
  current_device_index = device;
  return status::success();
}

int runtime::current_device() const { return current_device_index; }

result<int> runtime::device_attribute(enum device_attribute attribute, int device) const {
  if (status checked = check_device(device); !checked.ok()) return checked;
  const backend::device_properties& p = devices_[static_cast<std::size_t>(device)]->properties;
  switch (attribute) {
    case device_attribute::memory_pools_supported:
      return p.memory_pools_supported ? 1 : 0;
    case device_attribute::pool_supported_handle_types:
      return static_cast<int>(p.supported_handle_types);
    case device_attribute::total_memory_mib:
      return static_cast<int>(p.total_memory_bytes >> 20);
    case device_attribute::granularity_kib:
      return static_cast<int>(p.granularity_bytes >> 10);
  }
  return status(error_code::invalid_value,
                "unknown device attribute " + std::to_string(static_cast<int>(attribute)));
}

result<bool> runtime::can_access_peer(int device, int peer) const {
  if (status checked = check_device(device); !checked.ok()) return checked;
  if (status checked = check_device(peer); !checked.ok()) return checked;
  return backend_->can_access_peer(device, peer);
}

status runtime::memory_info(std::size_t* free_bytes, std::size_t* total_bytes) const {
  backend_->memory_info(current_device(), free_bytes, total_bytes);
  return status::success();
}

result<std::size_t> runtime::committed_bytes(int device) const {
  if (status checked = check_device(device); !checked.ok()) return checked;
  return backend_->committed_bytes(device);
}

// ---- synchronize hooks (S9, S12) -------------------------------------------------------

void runtime::proven(stream_object& stream, std::uint64_t position) {
  stream.timeline.prove_completed(position);
}

void runtime::after_synchronize() {
  {
    // Shared: a concurrent reap cannot delete a pool while it releases memory here.
    std::shared_lock using_pools(reap_mutex_);
    std::vector<pool_object*> pools;
    {
      std::lock_guard lock(registry_mutex_);
      pools.reserve(all_pools_.size());
      for (const auto& p : all_pools_) pools.push_back(p.get());
    }
    for (pool_object* p : pools) p->on_synchronize();
  }
  forget_finished_streams();
  reap_destroyed_pools();
}

void runtime::reap_destroyed_pools() {
  std::unique_lock deleting(reap_mutex_);
  std::vector<std::unique_ptr<pool_object>> finished;
  {
    std::lock_guard lock(registry_mutex_);
    for (auto it = all_pools_.begin(); it != all_pools_.end();) {
      pool_object& p = **it;
      const bool imports_released = release_imported(p);  // S7: unmaps what was freed
      // A pool another thread still uses (it found it current just before the destroy)
      // stays until a later reap; whatever it allocated keeps it alive anyway.
      if (p.is_destroyed() && imports_released && !pool_hazards::is_in_use(&p) &&
          p.try_release_everything()) {
        finished.push_back(std::move(*it));
        it = all_pools_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // finished pools are deleted here, outside the registry lock but under `deleting`.
  finished.clear();
}

status runtime::synchronize_device() {
  const int device = current_device();
  // Copies keep the records and queues alive if another thread destroys a stream meanwhile
  // (a destroyed stream's record goes once its work has run).
  std::vector<std::pair<std::shared_ptr<stream_object>, std::shared_ptr<backend::stream>>> streams;
  {
    std::lock_guard lock(registry_mutex_);
    for (stream_object* s : live_streams_) {
      if (s->device == device) streams.emplace_back(s->shared_from_this(), s->queue);
    }
  }
  // A destroyed stream's queued work still runs; the device synchronize waits for it too,
  // and then the stream is forgotten (after_synchronize): its frees serve every stream.
  std::vector<std::shared_ptr<stream_object>> retired;
  {
    std::lock_guard lock(registry_mutex_);
    for (stream_object* s : retired_streams_) {
      if (s->device == device) retired.push_back(s->shared_from_this());
    }
  }
  for (const auto& s : retired) {
    const std::uint64_t position = s->timeline.enqueued_position();
    while (!s->timeline.has_completed(position)) std::this_thread::yield();
    proven(*s, position);
  }
  status first_failure;
  for (auto& [s, queue] : streams) {
    const std::uint64_t position = s->timeline.enqueued_position();
    status done = queue->synchronize();
    if (done.ok()) {
      proven(*s, position);
    } else if (first_failure.ok()) {
      first_failure = status(done.code(), describe_stream(*s) + ": " + done.message());
    }
  }
  // Streams destroyed before this call have run: once forgotten, their frees are proven.
  forget_finished_streams();
  stream_timeline& forgotten = *devices_[static_cast<std::size_t>(device)]->forgotten_frees;
  forgotten.prove_completed(forgotten.enqueued_position());
  after_synchronize();
  return first_failure;
}

std::string runtime::describe_stream(const stream_object& stream) const {
  if (stream.handle == 0) return "default stream of device " + std::to_string(stream.device);
  return "stream " + format_address(stream.handle) + " on device " + std::to_string(stream.device);
}

}  // namespace soma::detail
