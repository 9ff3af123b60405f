// Stream-ordered allocation and free (S1, S2), pointer attributes (S14).
#include <new>

#include "core/check.hpp"
#include "runtime/history_notes.hpp"
#include "runtime/out_of_memory_advice.hpp"
#include "runtime/runtime.hpp"
#include "runtime/runtime_fast_lane.hpp"

namespace soma::detail {

// The hooks of one allocation: the pool names the allocating stream by its timeline, which is
// the timeline of `stream` here.
class allocation_hooks final : public stream_hooks {
 public:
  allocation_hooks(stream_registry& streams, stream_object& stream)
      : streams_(streams), stream_(stream) {}
  bool synchronize([[maybe_unused]] const stream_timeline& timeline) override {
    SOMA_ASSERT(&timeline == &stream_.timeline, "the pool names the allocating stream");
    return streams_.synchronize_for_pool(stream_).ok();
  }
  void order_after([[maybe_unused]] const stream_timeline& waiter, std::uint64_t stream_id,
                   std::uint64_t position) override {
    SOMA_ASSERT(&waiter == &stream_.timeline, "the pool names the allocating stream");
    streams_.order_after_free(stream_, stream_id, position);
  }

 private:
  stream_registry& streams_;
  stream_object& stream_;
};

result<void*> runtime::allocate_in(pool_object& pool, std::size_t bytes, stream_object& stream) {
  allocation_hooks hooks(streams_, stream);
  result<block*> taken = pool.allocate(bytes, stream.timeline, &hooks);
  if (!taken.ok() && taken.error().code() == error_code::out_of_memory) {
    std::string message = taken.error().message() + explain_out_of_memory(pool, bytes, stream);
    if (history_notes::on()) history_notes::out_of_memory(pool, bytes, stream.handle, message);
    return status(error_code::out_of_memory, std::move(message));
  }
  if (!taken.ok()) return taken.take_error();
  // The pool put the block in pointers_ (its block_directory) when its slow path handed it out;
  // a block from the stream's cache kept its entry from before. The pool recorded it in memory
  // history.
  return reinterpret_cast<void*>(taken.value()->address);
}

result<void*> runtime::allocate(std::size_t bytes, std::uintptr_t stream_handle) {
  stream_object* stream = streams_.find(stream_handle);
  if (stream == nullptr) [[unlikely]] {
    result<stream_object*> s = streams_.resolve(stream_handle);
    if (!s.ok()) return s.take_error();
    stream = s.value();
  }
  if (bytes == 0) return static_cast<void*>(nullptr);
  // S4, S5: another thread may destroy the current pool meanwhile (the default pool becomes
  // current); the pool this call found stays until the call is done.
  pool_object* pool = pools_.acquire_current(stream->device);
  result<void*> allocated = allocate_in(*pool, bytes, *stream);
  pool_registry::release();
  return allocated;
}

result<void*> runtime::allocate_from_pool(std::size_t bytes, std::uintptr_t pool_handle,
                                          std::uintptr_t stream_handle) {
  result<stream_object*> s = streams_.resolve(stream_handle);
  result<pool_object*> p = pools_.acquire(pool_handle);
  if (!p.ok()) return p.take_error();
  result<void*> allocated = static_cast<void*>(nullptr);
  if (p.value()->is_imported()) {
    allocated = refuse_imported_allocation(*p.value());
  } else if (!s.ok()) {
    allocated = s.take_error();
  } else if (bytes != 0) {
    allocated = allocate_in(*p.value(), bytes, *s.value());
  }
  pool_registry::release();
  return allocated;
}

status runtime::refuse_imported_allocation(const pool_object& pool) const {
  return status(error_code::invalid_value,
                "somaMallocFromPoolAsync: " + pool.describe() +
                    " is an imported pool; imported pools hold memory of the exporting process "
                    "and cannot allocate");
}

status runtime::free(void* pointer, std::uintptr_t stream_handle) {
  if (pointer == nullptr) return status::success();
  stream_object* stream = streams_.find(stream_handle);
  if (stream == nullptr) [[unlikely]] {
    result<stream_object*> s = streams_.resolve(stream_handle);
    if (!s.ok()) return s.take_error();
    stream = s.value();
  }
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  const live_entry<pool_object> live = claim_for_free(address);
  if (live.live == nullptr) {
    if (graph_memory_hooks* graphs = graph_memory_.load(); graphs != nullptr) {
      if (std::optional<status> freed = graphs->free(address, *stream)) return *freed;
    }
    return pools_.explain_unknown_pointer(address, "somaFreeAsync");
  }
  pool_object& owner = *live.owner;
  if (owner.imports() != nullptr) {
    pointers_.remove(address);  // an imported mapping has no cache: its entry goes now
    return pools_.free_imported(owner, live.live, stream->timeline);
  }
  if (owner.exports() != nullptr) owner.exports()->forget(address);  // S7: data goes stale
  free_claimed(live, *stream);
  return status::success();
}

void runtime::free_claimed(const live_entry<pool_object>& live, stream_object& stream) {
  pool_object& owner = *live.owner;
  // Read before the free: once it is done another thread may tear the pool down.
  const bool owner_destroyed = owner.is_destroyed();
  free_into(owner, live.live, stream);
  if (owner_destroyed) {
    try {
      pools_.reap();
    } catch (const std::bad_alloc&) {
      // The free is done; the pool goes at a later reap (the next free of it, or teardown).
    }
  }
}

live_entry<pool_object> runtime::claim_for_free(std::uintptr_t address) {
  for (;;) {
    const live_entry<pool_object> found = pointers_.find(address);
    // Not live: never allocated, or freed (a cached block keeps its entry: block_directory).
    if (found.live == nullptr || !found.live->claim_for_free()) return {};
    if (found.live->address == address) return found;
    // The lookup took no lock, so the block it found may have been merged away and made anew
    // at another address since (its memory stays a block: block_store): let it go, look again.
    found.live->set_state(block_state::live);
  }
}

pointer_info runtime::describe_pointer(const void* pointer) const {
  pointer_info info;
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  if (address == 0) return info;
  if (const auto [base, size] = host_memory_.find(address); base != 0) {
    info.is_host = true;
    info.base = base;
    info.requested_bytes = size;
    return info;
  }
  live_entry<pool_object> live = pointers_.find(address);
  if (live.live != nullptr && (!live.live->is_live() || live.live->address != address)) live = {};
  const pool_object* owner = live.owner;
  if (live.live != nullptr) {
    info.base = live.live->address;
    info.requested_bytes = live.live->requested_bytes;
  } else {
    owner = pools_.find_interior(address, &info);
  }
  if (owner == nullptr) owner = pools_.find_imported(address, &info);  // S7: in an import
  if (owner == nullptr) {
    if (graph_memory_hooks* graphs = graph_memory_.load(); graphs != nullptr)
      graphs->describe(address, info);  // S15
    return info;
  }
  info.is_live = true;
  info.pool = owner;
  info.device = owner->config().device;
  const backend::memory_location where = owner->properties().location;
  info.in_host_pool = where.is_host();
  if (where.type == backend::memory_location::kind::host_numa) info.numa_node = where.id;
  info.pool_handle = owner->handle();
  return info;
}

status runtime::check_range(const void* pointer, std::size_t bytes, const char* what,
                            pointer_info* described) const {
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  if (address == 0) return status(error_code::invalid_value, std::string(what) + " is NULL");
  bool in_pool = pools_.owns_address(address);
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

std::string runtime::explain_out_of_memory(pool_object& pool, std::size_t bytes,
                                           const stream_object& stream) const {
  // The caller holds the pool (pool_hazards), so it is not deleted meanwhile.
  pool_report report;
  report.contents = pool.snapshot();
  name_pending_streams(report);
  out_of_memory_record record;
  record.requested_bytes = bytes;
  record.stream = stream.handle;
  record.reserved_bytes = report.contents.reserved_bytes;
  record.used_bytes = report.contents.used_bytes;
  record.policies.max_size_bytes = pool.config().max_size_bytes;
  record.policies.granularity_bytes = pool.granularity_bytes();
  record.policies.internal_dependencies = pool.reuse_policy(3);
  record.policies.compaction = pool.compact_before_growth();
  record.policies.remap = static_cast<int>(pool.remap_free_memory());
  record.policies.remap_possible = pool.remaps_any_commit();
  record.follow_event_dependencies = pool.reuse_policy(1);
  record.opportunistic = pool.reuse_policy(2);
  record.facts = gather_out_of_memory_facts(report);
  record.change = choose_out_of_memory_change(record.facts, record.policies, record.reserved_bytes,
                                              bytes, stream.handle);
  std::string text = describe_out_of_memory(record.facts, record.change);
  pool.note_out_of_memory(std::move(record));
  return text;
}

}  // namespace soma::detail
