// The session's life: setup from the state a clean process has, dispatch of operations, the
// checks after every step, and the cleanup that must give every byte back.
#include "session.hpp"

#include <soma/soma.h>

#include <algorithm>

#include "api_model.hpp"
#include "fuzz_check.hpp"

namespace soma_fuzz {

session::session() {
  state_.pool_slots.fill(-1);
  for (int device = 0; device < kDeviceCount; ++device) {
    state_.streams[static_cast<std::size_t>(device)] = {true, {nullptr, device}};
    pool_record pool;
    FUZZ_OK(somaDeviceGetDefaultMemPool(&pool.handle, device));
    pool.device = device;
    pool.is_default = true;
    pool.access[static_cast<std::size_t>(device)] = somaMemAccessFlagsProtReadWrite;
    // The previous input's cleanup must have left the default pool as a fresh process has it.
    somaMemPool_t current = nullptr;
    FUZZ_OK(somaDeviceGetMemPool(&current, device));
    FUZZ_CHECK(current == pool.handle, "device %d starts with a pool other than its default",
               device);
    std::uint64_t threshold = 1;
    FUZZ_OK(somaMemPoolGetAttribute(pool.handle, somaMemPoolAttrReleaseThreshold, &threshold));
    FUZZ_CHECK(threshold == 0, "default pool starts with threshold %llu",
               static_cast<unsigned long long>(threshold));
    pool.last = read_pool_stats(pool.handle);
    FUZZ_CHECK(pool.last == pool_stats{}, "device %d default pool does not start empty", device);
    FUZZ_CHECK(committed_bytes(device) == 0, "device %d starts with memory committed", device);
    state_.pools.push_back(pool);
    state_.pool_slots[static_cast<std::size_t>(device)] = device;
    state_.current_pool[static_cast<std::size_t>(device)] = device;
  }
  FUZZ_OK(somaEventCreate(&state_.ordering));
}

void session::apply(const operation& op) {
  switch (op.code) {
    case op_code::stream_create:
      return stream_create(op);
    case op_code::stream_destroy:
      return stream_destroy(op);
    case op_code::stream_synchronize:
      return stream_synchronize(op);
    case op_code::stream_query:
      return stream_query(op);
    case op_code::event_create:
      return event_create(op);
    case op_code::event_record:
      return event_record(op);
    case op_code::stream_wait_event:
      return stream_wait_event(op);
    case op_code::event_query:
      return event_query(op);
    case op_code::event_synchronize:
      return event_synchronize(op);
    case op_code::event_destroy:
      return event_destroy(op);
    case op_code::malloc_async:
      return malloc_async(op, false);
    case op_code::malloc_from_pool:
      return malloc_async(op, true);
    case op_code::free_same_stream:
      if (state_.live.empty()) return;
      return free_allocation(op.a % state_.live.size(), -1);
    case op_code::free_other_stream:
      if (state_.live.empty()) return;
      return free_allocation(op.a % state_.live.size(), state_.pick_stream(op.b));
    case op_code::memset:
      return memset(op);
    case op_code::copy:
      return copy(op);
    case op_code::check_in_stream:
      return check_in_stream(op);
    case op_code::pool_create:
      return pool_create(op);
    case op_code::pool_destroy:
      return pool_destroy(op);
    case op_code::set_reuse_policy:
      return set_reuse_policy(op);
    case op_code::set_release_threshold:
      return set_release_threshold(op);
    case op_code::set_compaction:
      return set_compaction(op);
    case op_code::trim_to:
      return trim_to(op);
    case op_code::reset_high:
      return reset_high(op);
    case op_code::set_current_pool:
      return set_current_pool(op);
    case op_code::set_access:
      return set_access(op);
    case op_code::device_synchronize:
      return device_synchronize(op.a % kDeviceCount);
    case op_code::synchronize_all:
      return synchronize_all();
    case op_code::pointer_attributes:
      return pointer_attributes(op);
    case op_code::bad_call:
      return bad_call(op);
    case op_code::record_history:
      return record_history(op);
    case op_code::scope_push:
      return scope_push(op);
    case op_code::scope_pop:
      return scope_pop();
    case op_code::export_history:
      return export_history();
    case op_code::count:
      break;
  }
}

void session::check_invariants() {
  std::uint64_t reserved_by_device[kDeviceCount] = {};
  for (pool_record& pool : state_.pools) {
    if (!pool.alive) continue;
    const pool_stats stats = read_pool_stats(pool.handle);
    check_pool_stats(stats, pool.live_bytes, pool.cap_bytes);
    check_snapshot(pool.handle, pool.live_bytes);
    // S10: a high only grows until it is reset.
    FUZZ_CHECK(
        stats.used_high >= pool.last.used_high && stats.reserved_high >= pool.last.reserved_high,
        "a high fell without a reset: used %llu -> %llu, reserved %llu -> %llu",
        static_cast<unsigned long long>(pool.last.used_high),
        static_cast<unsigned long long>(stats.used_high),
        static_cast<unsigned long long>(pool.last.reserved_high),
        static_cast<unsigned long long>(stats.reserved_high));
    pool.last = stats;
    reserved_by_device[pool.device] += stats.reserved_current;
  }
  for (int device = 0; device < kDeviceCount; ++device)
    check_device_figures(device, reserved_by_device[device]);
}

void session::finish() {
  finish_history();
  while (!state_.live.empty()) free_allocation(state_.live.size() - 1, -1);
  for (int slot = kDeviceCount; slot < kStreamSlots; ++slot) {
    stream_slot& entry = state_.streams[static_cast<std::size_t>(slot)];
    if (entry.exists) FUZZ_OK(somaStreamDestroy(entry.stream.handle));
    entry.exists = false;
  }
  for (event_slot& entry : state_.events)
    if (entry.exists) FUZZ_OK(somaEventDestroy(entry.handle));
  FUZZ_OK(somaEventDestroy(state_.ordering));
  for (int device = 0; device < kDeviceCount; ++device) restore_default_pool(device);
  for (pool_record& pool : state_.pools)
    if (pool.alive && !pool.is_default) FUZZ_OK(somaMemPoolDestroy(pool.handle));
  for (int device = 0; device < kDeviceCount; ++device) {
    FUZZ_OK(somaSetDevice(device));
    FUZZ_OK(somaDeviceSynchronize());
  }
  for (void* pointer : state_.freed) check_not_live(pointer);
  check_all_returned();
}

// ---- helpers --------------------------------------------------------------------------------

void session::order_slot_after(int waiter, int target) {
  if (waiter == target) return;
  order_after(state_.ordering, state_.stream(waiter), state_.stream(target));
}

/// Work on slot may now write entry: it runs after the owner's writes and every reader's reads
/// (S1, S2 ask this ordering of the program), and slot becomes the owner.
void session::take_for_writing(allocation& entry, int slot) {
  order_slot_after(slot, entry.owner);
  for (int reader : entry.readers) order_slot_after(slot, reader);
  entry.owner = slot;
  entry.readers.clear();
}

/// Checks on the host the bytes of every live allocation whose owner the caller just saw
/// complete.
void session::verify_owned(bool (*owned)(const session_state&, int slot, int arg), int arg) {
  for (const allocation& entry : state_.live)
    if (owned(state_, entry.owner, arg))
      check_contents(entry.pointer, entry.contents, "after a synchronize");
}

/// Before a stream is destroyed: its device's default stream waits for its work and takes over
/// what it owned or read, so later frees and writes stay ordered after that work.
void session::retire_stream(int slot) {
  const stream_ref& retired = state_.stream(slot);
  const int heir = retired.device;  // the slot of the device's default stream
  bool ordered = false;
  for (allocation& entry : state_.live) {
    const bool owned = entry.owner == slot;
    const bool read =
        std::find(entry.readers.begin(), entry.readers.end(), slot) != entry.readers.end();
    if (!owned && !read) continue;
    if (!ordered) order_slot_after(heir, slot);
    ordered = true;
    std::erase(entry.readers, slot);
    if (owned) {
      entry.owner = heir;
      std::erase(entry.readers, heir);
    } else if (entry.owner != heir &&
               std::find(entry.readers.begin(), entry.readers.end(), heir) == entry.readers.end()) {
      entry.readers.push_back(heir);
    }
  }
}

}  // namespace soma_fuzz
