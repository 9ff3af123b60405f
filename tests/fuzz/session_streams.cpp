// Streams, events and synchronization. A synchronize (or a query that reports the stream
// complete) is where the host may read what the stream wrote, so each one checks the bytes of
// the allocations that stream owns.
#include <soma/soma.h>

#include "api_model.hpp"
#include "fuzz_check.hpp"
#include "session.hpp"

namespace soma_fuzz {
namespace {

bool owned_by_slot(const session_state&, int owner, int slot) { return owner == slot; }
bool owned_on_device(const session_state& state, int owner, int device) {
  return state.stream(owner).device == device;
}
bool owned_anywhere(const session_state&, int, int) { return true; }

}  // namespace

void session::stream_create(const operation& op) {
  const int slot = kDeviceCount + op.a % (kStreamSlots - kDeviceCount);
  stream_slot& entry = state_.streams[static_cast<std::size_t>(slot)];
  if (entry.exists) return;
  const int device = op.b % kDeviceCount;
  FUZZ_OK(somaSetDevice(device));
  const unsigned int flags = op.c & 1 ? somaStreamNonBlocking : somaStreamDefault;
  FUZZ_OK(somaStreamCreateWithFlags(&entry.stream.handle, flags));
  int reported = -1;
  FUZZ_OK(somaStreamGetDevice(entry.stream.handle, &reported));
  FUZZ_CHECK(reported == device, "stream created on device %d reports device %d", device, reported);
  entry.stream.device = device;
  entry.exists = true;
}

void session::stream_destroy(const operation& op) {
  const int slot = kDeviceCount + op.a % (kStreamSlots - kDeviceCount);
  stream_slot& entry = state_.streams[static_cast<std::size_t>(slot)];
  if (!entry.exists) return;
  retire_stream(slot);
  // Queued work still runs (somaStreamDestroy returns at once); the handle is dead.
  FUZZ_OK(somaStreamDestroy(entry.stream.handle));
  FUZZ_EXPECT_STATUS(somaStreamQuery(entry.stream.handle), somaErrorInvalidResourceHandle);
  state_.stale_streams.push_back(entry.stream.handle);
  entry = stream_slot{};
}

void session::stream_synchronize(const operation& op) {
  const int slot = state_.pick_stream(op.a);
  FUZZ_OK(somaStreamSynchronize(use(state_.stream(slot))));
  verify_owned(owned_by_slot, slot);
}

void session::stream_query(const operation& op) {
  const int slot = state_.pick_stream(op.a);
  const somaError_t status = somaStreamQuery(use(state_.stream(slot)));
  FUZZ_CHECK(status == somaSuccess || status == somaErrorNotReady, "somaStreamQuery: %s",
             somaGetErrorName(status));
  if (status == somaSuccess) verify_owned(owned_by_slot, slot);
}

void session::event_create(const operation& op) {
  event_slot& entry = state_.events[op.a % kEventSlots];
  if (entry.exists) return;
  FUZZ_OK(somaEventCreateWithFlags(&entry.handle, op.c & 3));
  entry.exists = true;
  // A new event has recorded nothing: it is complete.
  FUZZ_OK(somaEventQuery(entry.handle));
}

void session::event_record(const operation& op) {
  const int event = state_.pick_event(op.a);
  if (event < 0) return;
  const int slot = state_.pick_stream(op.b);
  FUZZ_OK(somaEventRecord(state_.events[static_cast<std::size_t>(event)].handle,
                          use(state_.stream(slot))));
}

void session::stream_wait_event(const operation& op) {
  const int event = state_.pick_event(op.a);
  if (event < 0) return;
  const int slot = state_.pick_stream(op.b);
  FUZZ_OK(somaStreamWaitEvent(use(state_.stream(slot)),
                              state_.events[static_cast<std::size_t>(event)].handle, 0));
}

void session::event_query(const operation& op) {
  const int event = state_.pick_event(op.a);
  if (event < 0) return;
  const somaError_t status = somaEventQuery(state_.events[static_cast<std::size_t>(event)].handle);
  FUZZ_CHECK(status == somaSuccess || status == somaErrorNotReady, "somaEventQuery: %s",
             somaGetErrorName(status));
}

void session::event_synchronize(const operation& op) {
  const int event = state_.pick_event(op.a);
  if (event < 0) return;
  FUZZ_OK(somaEventSynchronize(state_.events[static_cast<std::size_t>(event)].handle));
}

void session::event_destroy(const operation& op) {
  const int event = state_.pick_event(op.a);
  if (event < 0) return;
  event_slot& entry = state_.events[static_cast<std::size_t>(event)];
  FUZZ_OK(somaEventDestroy(entry.handle));
  FUZZ_EXPECT_STATUS(somaEventQuery(entry.handle), somaErrorInvalidResourceHandle);
  state_.stale_events.push_back(entry.handle);
  entry = event_slot{};
}

void session::device_synchronize(int device) {
  FUZZ_OK(somaSetDevice(device));
  FUZZ_OK(somaDeviceSynchronize());
  verify_owned(owned_on_device, device);
}

/// Every device synchronized: every free is complete, so a pool without live allocations keeps
/// no more than its release threshold, to within one release unit (S9): the granule the cpu
/// backend releases in, or for an exportable pool a whole commit (S7), which stays when giving
/// it back would pass below the threshold.
void session::synchronize_all() {
  for (int device = 0; device < kDeviceCount; ++device) {
    FUZZ_OK(somaSetDevice(device));
    FUZZ_OK(somaDeviceSynchronize());
  }
  verify_owned(owned_anywhere, 0);
  for (const pool_record& pool : state_.pools) {
    if (!pool.alive || pool.live_bytes != 0) continue;
    const std::uint64_t reserved = read_pool_stats(pool.handle).reserved_current;
    const std::size_t unit = pool.exportable ? pool.largest_commit_bytes : kGranularityBytes;
    FUZZ_CHECK(reserved <= pool.threshold || reserved - pool.threshold < unit,
               "pool %p on device %d: nothing live, every free complete, yet %llu B reserved "
               "over threshold %llu (release unit %zu B)",
               static_cast<void*>(pool.handle), pool.device,
               static_cast<unsigned long long>(reserved),
               static_cast<unsigned long long>(pool.threshold), unit);
  }
}

}  // namespace soma_fuzz
