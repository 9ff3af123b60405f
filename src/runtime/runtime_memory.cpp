// Stream-ordered allocation and free (S1, S2), pointer attributes (S14).
#include <thread>

#include "core/check.hpp"
#include "runtime/pool_hazards.hpp"
#include "runtime/runtime.hpp"

namespace soma::detail {

// The hooks of one allocation: the pool names the allocating stream by its timeline, which is
// the timeline of `stream` here.
class allocation_hooks final : public stream_hooks {
 public:
  allocation_hooks(runtime& owner, stream_object& stream) : owner_(owner), stream_(stream) {}
  bool synchronize(const stream_timeline& timeline) override {
    SOMA_ASSERT(&timeline == &stream_.timeline, "the pool names the allocating stream");
    return owner_.synchronize_for_pool(stream_).ok();
  }
  void order_after(const stream_timeline& waiter, std::uint64_t stream_id,
                   std::uint64_t position) override {
    SOMA_ASSERT(&waiter == &stream_.timeline, "the pool names the allocating stream");
    owner_.order_after_free(stream_, stream_id, position);
  }

 private:
  runtime& owner_;
  stream_object& stream_;
};

result<void*> runtime::allocate_in(pool_object& pool, std::size_t bytes, stream_object& stream) {
  allocation_hooks hooks(*this, stream);
  result<block*> taken = pool.allocate(bytes, stream.timeline, &hooks);
  if (!taken.ok()) return taken.take_error();
  pointers_.insert(taken.value());
  return reinterpret_cast<void*>(taken.value()->address);
}

status runtime::synchronize_for_pool(stream_object& stream) {
  // S9 compaction before growth: once the stream ran its frees they are proven.
  const std::uint64_t position = stream.timeline.enqueued_position();
  status done = stream.queue->synchronize();
  if (done.ok()) proven(stream, position);
  return done;
}

void runtime::order_after_free(stream_object& stream, std::uint64_t stream_id,
                               std::uint64_t position) {
  // S11 internal dependencies: the pool handed this stream a block whose free is pending on
  // another stream; make the stream's later work wait for that free. The freeing stream is
  // found by id: a stream no longer registered was forgotten, so its work has all run.
  std::shared_ptr<stream_object> freeing;
  std::shared_ptr<backend::stream> freeing_queue;
  {
    std::lock_guard lock(registry_mutex_);
    auto found = streams_by_id_.find(stream_id);
    if (found != streams_by_id_.end()) {
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
      // failed: wait on the host instead, so the block is never handed out early.
      while (!freeing->timeline.has_completed(position)) std::this_thread::yield();
    }
  }
  stream.timeline.order_after(stream_id, position);
}

pool_object* runtime::acquire_current_pool(int device) const {
  const auto& current = devices_[static_cast<std::size_t>(device)]->current_pool;
  std::atomic<const void*>& hazard = pool_hazards::mine();
  pool_object* pool = current.load(std::memory_order_acquire);
  for (;;) {
    hazard.store(pool, std::memory_order_seq_cst);
    pool_object* again = current.load(std::memory_order_seq_cst);
    if (again == pool) return pool;
    pool = again;
  }
}

result<pool_object*> runtime::acquire_pool(std::uintptr_t handle) const {
  std::atomic<const void*>& hazard = pool_hazards::mine();
  for (;;) {
    result<pool_object*> found = resolve_pool(handle);
    if (!found.ok()) return found;
    hazard.store(found.value(), std::memory_order_seq_cst);
    if (pools_.find(handle) == found.value()) return found;
  }
}

void runtime::release_pool() noexcept {
  pool_hazards::mine().store(nullptr, std::memory_order_release);
}

result<void*> runtime::allocate(std::size_t bytes, std::uintptr_t stream_handle) {
  result<stream_object*> s = resolve_stream(stream_handle);
  if (!s.ok()) return s.take_error();
  if (bytes == 0) return static_cast<void*>(nullptr);
  // S4, S5: another thread may destroy the current pool meanwhile (the default pool becomes
  // current); the pool this call found stays until the call is done.
  pool_object* pool = acquire_current_pool(s.value()->device);
  result<void*> allocated = allocate_in(*pool, bytes, *s.value());
  release_pool();
  return allocated;
}

result<void*> runtime::allocate_from_pool(std::size_t bytes, std::uintptr_t pool_handle,
                                          std::uintptr_t stream_handle) {
  result<stream_object*> s = resolve_stream(stream_handle);
  result<pool_object*> p = acquire_pool(pool_handle);
  if (!p.ok()) return p.take_error();
  result<void*> allocated = static_cast<void*>(nullptr);
  if (p.value()->is_imported()) {
    allocated = refuse_imported_allocation(*p.value());
  } else if (!s.ok()) {
    allocated = s.take_error();
  } else if (bytes != 0) {
    allocated = allocate_in(*p.value(), bytes, *s.value());
  }
  release_pool();
  return allocated;
}

status runtime::free(void* pointer, std::uintptr_t stream_handle) {
  if (pointer == nullptr) return status::success();
  result<stream_object*> s = resolve_stream(stream_handle);
  if (!s.ok()) return s.take_error();
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  block* live = pointers_.remove(address);
  if (live == nullptr) {
    if (graph_memory_hooks* graphs = graph_memory_.load(); graphs != nullptr) {
      if (std::optional<status> freed = graphs->free(address, *s.value())) return *freed;
    }
    return explain_unknown_pointer(address, "somaFreeAsync");
  }
  auto* owner = static_cast<pool_object*>(live->owner);
  if (owner->imports() != nullptr) return free_imported(*owner, live, *s.value());
  if (owner->exports() != nullptr) owner->exports()->forget(address);  // S7: data goes stale
  // Read before the free: once it is done another thread may tear the pool down.
  const bool owner_destroyed = owner->is_destroyed();
  owner->free(live, s.value()->timeline);
  if (owner_destroyed) reap_destroyed_pools();
  return status::success();
}

status runtime::explain_unknown_pointer(std::uintptr_t address, const char* action) const {
  const std::string what = std::string(action) + "(" + format_address(address) + "): ";
  std::lock_guard lock(registry_mutex_);
  for (const auto& p : all_pools_) {
    address_diagnosis d = p->diagnose(address);
    switch (d.what) {
      case address_diagnosis::kind::outside_pool:
        continue;
      case address_diagnosis::kind::interior_of_live:
        return status(error_code::invalid_value,
                      what + "an interior pointer, " + std::to_string(address - d.block_address) +
                          " bytes into the live allocation at " + format_address(d.block_address) +
                          " of " + format_bytes(d.block_bytes) + " in " + p->describe() +
                          "; pass the allocation's start");
      case address_diagnosis::kind::freed:
        return status(error_code::invalid_value, what + "not a live allocation: the memory at " +
                                                     format_address(d.block_address) + " in " +
                                                     p->describe() +
                                                     " was already freed (double free?)");
      case address_diagnosis::kind::unallocated:
        return status(error_code::invalid_value,
                      what + "not a live allocation: the address lies in " + p->describe() +
                          " but nothing is allocated there");
    }
  }
  return status(error_code::invalid_value,
                what + "not a live allocation: soma never returned this pointer");
}

pointer_info runtime::describe_pointer(const void* pointer) const {
  pointer_info info;
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  if (address == 0) return info;
  if (const auto [base, size] = find_host(address); base != 0) {
    info.is_host = true;
    info.base = base;
    info.requested_bytes = size;
    return info;
  }
  block* live = pointers_.find(address);
  pool_object* owner = nullptr;
  if (live != nullptr) {
    owner = static_cast<pool_object*>(live->owner);
    info.base = live->address;
    info.requested_bytes = live->requested_bytes;
  } else {
    std::lock_guard lock(registry_mutex_);
    for (const auto& p : all_pools_) {
      address_diagnosis d = p->diagnose(address);
      if (d.what != address_diagnosis::kind::interior_of_live) continue;
      if (address >= d.block_address + d.block_bytes) break;  // in the alignment padding
      owner = p.get();
      info.base = d.block_address;
      info.requested_bytes = d.block_bytes;
      break;
    }
  }
  if (owner == nullptr) owner = find_imported(address, &info);  // S7: inside an imported mapping
  if (owner == nullptr) {
    if (graph_memory_hooks* graphs = graph_memory_.load(); graphs != nullptr)
      graphs->describe(address, info);  // S15
    return info;
  }
  info.is_live = true;
  info.pool = owner;
  info.device = owner->config().device;
  info.pool_handle = owner->handle();
  return info;
}

status runtime::check_range(const void* pointer, std::size_t bytes, const char* what,
                            pointer_info* described) const {
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  if (address == 0) return status(error_code::invalid_value, std::string(what) + " is NULL");
  bool in_pool = false;
  {
    std::lock_guard lock(registry_mutex_);
    for (const auto& p : all_pools_) in_pool = in_pool || p->owns_address(address);
  }
  in_pool = in_pool || find_imported(address, nullptr) != nullptr;  // S7
  if (graph_memory_hooks* graphs = graph_memory_.load(); graphs != nullptr)
    in_pool = in_pool || graphs->owns_address(address);  // S15
  if (!in_pool) return status::success();                // host memory the application owns
  pointer_info info = describe_pointer(pointer);
  if (described != nullptr) *described = info;
  if (!info.is_live) {
    return status(error_code::invalid_value,
                  std::string(what) + " " + format_address(address) +
                      " lies in pool or graph memory that is not a live allocation");
  }
  if (address + bytes > info.base + info.requested_bytes || address + bytes < address) {
    return status(error_code::invalid_value,
                  std::string(what) + ": " + format_bytes(bytes) + " at " +
                      format_address(address) + " run past the end of the allocation at " +
                      format_address(info.base) + " of " + format_bytes(info.requested_bytes));
  }
  return status::success();
}

}  // namespace soma::detail
