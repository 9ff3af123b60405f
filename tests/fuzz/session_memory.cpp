// Allocations, frees and the bytes in between. Every write is stream work (memset, copy) on the
// allocation's owner stream, ordered after earlier users as a correct program orders it; the
// model keeps what each byte must then be.
#include <soma/soma.h>

#include <algorithm>
#include <cstdint>

#include "api_model.hpp"
#include "fuzz_check.hpp"
#include "session.hpp"

namespace soma_fuzz {

void session::malloc_async(const operation& op, bool from_pool) {
  const int slot = state_.pick_stream(op.a);
  const stream_ref& stream = state_.stream(slot);
  const int pool_index = from_pool ? state_.pick_pool(op.b)
                                   : state_.current_pool[static_cast<std::size_t>(stream.device)];
  pool_record& pool = state_.pool(pool_index);
  void* pointer = reinterpret_cast<void*>(std::uintptr_t{1});
  const std::size_t size = op.size;
  const somaError_t status = from_pool
                                 ? somaMallocFromPoolAsync(&pointer, size, pool.handle, use(stream))
                                 : somaMallocAsync(&pointer, size, use(stream));
  if (size == 0) {  // S1: size 0 gives NULL
    FUZZ_CHECK(status == somaSuccess && pointer == nullptr, "size 0: %s, %p",
               somaGetErrorName(status), pointer);
    return;
  }
  if (size > pool.cap_bytes) {
    FUZZ_EXPECT_STATUS(status, somaErrorMemoryAllocation);
    return;
  }
  // Whether a request that fits the cap is served depends on the other pools and on which
  // frees are known complete; either answer is a promise kept, and a refusal changes nothing
  // (the next check compares used with the model).
  FUZZ_CHECK(status == somaSuccess || status == somaErrorMemoryAllocation,
             "allocating %zu B: %s (%s)", size, somaGetErrorName(status),
             somaGetLastErrorMessage());
  if (status != somaSuccess) return;

  const auto start = reinterpret_cast<std::uintptr_t>(pointer);
  FUZZ_CHECK(pointer != nullptr && start % 256 == 0, "allocation at %p is not 256-byte aligned",
             pointer);
  const auto next = state_.ranges.lower_bound(start);
  FUZZ_CHECK(next == state_.ranges.end() || next->first >= start + size,
             "new %p+%zu overlaps live %p", pointer, size, reinterpret_cast<void*>(next->first));
  FUZZ_CHECK(
      next == state_.ranges.begin() || std::prev(next)->first + std::prev(next)->second <= start,
      "new %p+%zu overlaps live %p+%zu", pointer, size,
      reinterpret_cast<void*>(std::prev(next)->first), std::prev(next)->second);
  state_.ranges.emplace(start, size);
  std::erase(state_.freed, pointer);
  pool.live_bytes += size;
  pool.largest_commit_bytes =
      std::max(pool.largest_commit_bytes, round_up(size, kGranularityBytes));
  check_live_attributes(pointer, size, pool.device, pool.handle, op.raw % size);

  allocation entry;
  entry.pointer = pointer;
  entry.size = size;
  entry.pool = pool_index;
  entry.owner = slot;
  entry.contents = byte_runs(size);
  // S6: a stream of another device may write the pool's memory only with access granted.
  const somaError_t written = somaMemsetAsync(pointer, op.c, size, use(stream));
  FUZZ_EXPECT_STATUS(written,
                     state_.may_write(pool, stream.device) ? somaSuccess : somaErrorNotPermitted);
  if (written == somaSuccess) entry.contents.set(0, size, op.c);
  state_.live.push_back(std::move(entry));
}

/// Frees live[index] on freeing_slot (-1: its owner), after every use (S2).
void session::free_allocation(std::size_t index, int freeing_slot) {
  allocation& entry = state_.live[index];
  const int slot = freeing_slot < 0 ? entry.owner : freeing_slot;
  take_for_writing(entry, slot);
  FUZZ_OK(somaFreeAsync(entry.pointer, use(state_.stream(slot))));
  // S2: the pointer is dead at once.
  check_not_live(entry.pointer);
  state_.ranges.erase(reinterpret_cast<std::uintptr_t>(entry.pointer));
  state_.pool(entry.pool).live_bytes -= entry.size;
  if (state_.freed.size() == kRememberedFrees) state_.freed.erase(state_.freed.begin());
  state_.freed.push_back(entry.pointer);
  entry = std::move(state_.live.back());
  state_.live.pop_back();
}

void session::memset(const operation& op) {
  if (state_.live.empty()) return;
  allocation& entry = state_.live[op.a % state_.live.size()];
  const int slot = state_.pick_stream(op.b);
  take_for_writing(entry, slot);
  std::size_t offset = 0;
  std::size_t length = entry.size;
  if (op.raw & 1) {  // part of it
    offset = (op.raw >> 1) % entry.size;
    length = 1 + (op.raw >> 4) % (entry.size - offset);
  }
  const stream_ref& stream = state_.stream(slot);
  const somaError_t status =
      somaMemsetAsync(static_cast<char*>(entry.pointer) + offset, op.c, length, use(stream));
  FUZZ_EXPECT_STATUS(status, state_.may_write(state_.pool(entry.pool), stream.device)
                                 ? somaSuccess
                                 : somaErrorNotPermitted);
  if (status == somaSuccess) entry.contents.set(offset, length, op.c);
}

void session::copy(const operation& op) {
  if (state_.live.size() < 2) return;
  const std::size_t source_index = op.a % state_.live.size();
  const std::size_t target_index = op.b % state_.live.size();
  if (source_index == target_index) return;
  allocation& source = state_.live[source_index];
  allocation& target = state_.live[target_index];
  // The copy runs on the target's owner, after the source's writes.
  const int slot = target.owner;
  take_for_writing(target, slot);
  order_slot_after(slot, source.owner);
  const std::size_t count = std::min(source.size, target.size);
  const stream_ref& stream = state_.stream(slot);
  const somaMemcpyKind kind = op.c & 1 ? somaMemcpyDefault : somaMemcpyDeviceToDevice;
  const somaError_t status =
      somaMemcpyAsync(target.pointer, source.pointer, count, kind, use(stream));
  const bool permitted = state_.may_read(state_.pool(source.pool), stream.device) &&
                         state_.may_write(state_.pool(target.pool), stream.device);
  FUZZ_EXPECT_STATUS(status, permitted ? somaSuccess : somaErrorNotPermitted);
  if (status != somaSuccess) return;
  target.contents.copy_from(source.contents, count);
  if (slot != source.owner &&
      std::find(source.readers.begin(), source.readers.end(), slot) == source.readers.end())
    source.readers.push_back(slot);
}

/// A host task compares the bytes in stream order, on the owner or on a reader ordered after it.
void session::check_in_stream(const operation& op) {
  if (state_.live.empty()) return;
  allocation& entry = state_.live[op.a % state_.live.size()];
  int slot = entry.owner;
  if (op.c & 1) {
    slot = state_.pick_stream(op.b);
    order_slot_after(slot, entry.owner);
    if (slot != entry.owner &&
        std::find(entry.readers.begin(), entry.readers.end(), slot) == entry.readers.end())
      entry.readers.push_back(slot);
  }
  launch_contents_check(use(state_.stream(slot)), entry.pointer, entry.contents);
}

void session::pointer_attributes(const operation& op) {
  if (!state_.live.empty()) {
    const allocation& entry = state_.live[op.a % state_.live.size()];
    const pool_record& pool = state_.pool(entry.pool);
    check_live_attributes(entry.pointer, entry.size, pool.device,
                          pool.alive ? pool.handle : nullptr, op.raw % entry.size);
  }
  if (!state_.freed.empty()) {
    void* freed = state_.freed[op.b % state_.freed.size()];
    if (state_.containing(freed) == nullptr) check_not_live(freed);
  }
}

}  // namespace soma_fuzz
