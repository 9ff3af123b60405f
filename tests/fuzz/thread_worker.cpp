#include "thread_worker.hpp"

#include <algorithm>
#include <cstdio>

#include "fuzz_check.hpp"
#include "history_ops.hpp"

namespace soma_fuzz {
namespace {

// The thread's own operation set, numbered apart from op_code: a record's code byte picks one
// modulo the count (the decoder has already taken it modulo op_code::count).
constexpr int kOperations = 21;

somaMemPool_t default_pool(int device) {
  somaMemPool_t pool = nullptr;
  FUZZ_OK(somaDeviceGetDefaultMemPool(&pool, device));
  return pool;
}

}  // namespace

void thread_worker::run(const std::vector<operation>& program) {
  for (int device = 0; device < kDeviceCount; ++device)
    streams_[static_cast<std::size_t>(device)] = {nullptr, device};
  for (int own = kDeviceCount; own < kStreams; ++own) {
    const int device = (index_ + own) % kDeviceCount;
    FUZZ_OK(somaSetDevice(device));
    FUZZ_OK(somaStreamCreate(&streams_[static_cast<std::size_t>(own)].handle));
    streams_[static_cast<std::size_t>(own)].device = device;
  }
  FUZZ_OK(somaEventCreate(&ordering_));
  for (const operation& op : program) apply(op);
  // Scopes belong to the thread that opened them: closed here, before it ends.
  for (; scopes_open_ > 0; --scopes_open_) FUZZ_OK(somaMemScopePop());
}

void thread_worker::apply(const operation& op) {
  void* pointer = reinterpret_cast<void*>(std::uintptr_t{1});
  switch (static_cast<int>(op.code) % kOperations) {
    case 0: {  // the device's current pool, which other threads switch (S4)
      const int s = pick_stream(op.a);
      const somaError_t status = somaMallocAsync(&pointer, op.size, use(stream(s)));
      FUZZ_CHECK(status == somaSuccess || status == somaErrorMemoryAllocation,
                 "somaMallocAsync: %s", somaGetErrorName(status));
      if (status == somaSuccess) record_allocation(pointer, op.size, s, {}, op.c, op.raw);
      return;
    }
    case 1: {  // an explicit pool another thread may destroy meanwhile (S5)
      const int s = pick_stream(op.a);
      const pool_choice pool = pick_pool(op.b);
      const somaError_t status =
          somaMallocFromPoolAsync(&pointer, op.size, pool.view.handle, use(stream(s)));
      if (raced(pool, status)) return;
      if (op.size > pool.view.cap_bytes)
        return FUZZ_EXPECT_STATUS(status, somaErrorMemoryAllocation);
      FUZZ_CHECK(status == somaSuccess || status == somaErrorMemoryAllocation,
                 "somaMallocFromPoolAsync: %s", somaGetErrorName(status));
      if (status == somaSuccess) record_allocation(pointer, op.size, s, pool, op.c, op.raw);
      return;
    }
    case 2:
      if (!live_.empty()) free_allocation(op.a % live_.size(), -1);
      return;
    case 3:
      if (!live_.empty()) free_allocation(op.a % live_.size(), pick_stream(op.b));
      return;
    case 4:
      return memset(op);
    case 5:
      if (!live_.empty()) {
        const allocation& entry = live_[op.a % live_.size()];
        launch_contents_check(use(stream(entry.owner)), entry.pointer, entry.contents);
      }
      return;
    case 6: {
      const int s = pick_stream(op.a);
      FUZZ_OK(somaStreamSynchronize(use(stream(s))));
      return verify_owned_on(-1, s);
    }
    case 7:
      return replace_stream(op);
    case 8:  // events cross threads: one records, others wait
      FUZZ_OK(somaEventRecord(shared_.event(op.a % kSharedEvents), use(stream(pick_stream(op.b)))));
      return;
    case 9:
      FUZZ_OK(somaStreamWaitEvent(use(stream(pick_stream(op.b))),
                                  shared_.event(op.a % kSharedEvents), 0));
      return;
    case 10: {
      const somaEvent_t event = shared_.event(op.a % kSharedEvents);
      if (op.c & 1) return FUZZ_OK(somaEventSynchronize(event));
      const somaError_t status = somaEventQuery(event);
      FUZZ_CHECK(status == somaSuccess || status == somaErrorNotReady, "somaEventQuery: %s",
                 somaGetErrorName(status));
      return;
    }
    case 11: {
      const int s = pick_stream(op.a);
      const somaError_t status = somaStreamQuery(use(stream(s)));
      FUZZ_CHECK(status == somaSuccess || status == somaErrorNotReady, "somaStreamQuery: %s",
                 somaGetErrorName(status));
      if (status == somaSuccess) verify_owned_on(-1, s);
      return;
    }
    case 12:
      return with_pool(op.a, [&](const pool_view& pool) { pool_setting(pool, op); });
    case 13:
      return with_pool(
          op.a, [&](const pool_view& pool) { FUZZ_OK(somaMemPoolTrimTo(pool.handle, op.size)); });
    case 14: {
      constexpr std::size_t kMaxSizes[] = {0, 64 * KiB, kDeviceMemoryBytes / 2 + 3};
      return shared_.replace_pool(op.a % kSharedPools, op.b % kDeviceCount, kMaxSizes[op.c % 3]);
    }
    case 15:  // S4: its own device's pools only
      return with_pool(op.a, [&](const pool_view& pool) {
        const int device = op.b % kDeviceCount;
        FUZZ_EXPECT_STATUS(somaDeviceSetMemPool(device, pool.handle),
                           pool.device == device ? somaSuccess : somaErrorInvalidValue);
      });
    case 16:
      if (!live_.empty()) {
        const allocation& entry = live_[op.a % live_.size()];
        check_live_attributes(entry.pointer, entry.size, entry.device, nullptr,
                              op.raw % entry.size);
      }
      return;
    case 17:
      return with_pool(op.a, [&](const pool_view& pool) { check_pool_figures(pool); });
    case 19:  // memory history started, stopped and exported while other threads record
      return history(op);
    case 20:
      return scope(op);
    default: {
      const int device = op.a % kDeviceCount;
      FUZZ_OK(somaSetDevice(device));
      FUZZ_OK(somaDeviceSynchronize());
      return verify_owned_on(device, -1);
    }
  }
}

thread_worker::pool_choice thread_worker::pick_pool(std::uint8_t choice) {
  pool_choice pool;
  const int pick = choice % (kDeviceCount + kSharedPools);
  if (pick < kDeviceCount) {
    pool.view.handle = default_pool(pick);
    pool.view.device = pick;
  } else {
    pool.slot = pick - kDeviceCount;
    pool.view = shared_.pool(pool.slot);
  }
  return pool;
}

/// A dead handle is a legitimate answer only for a shared pool another thread replaced.
bool thread_worker::raced(const pool_choice& pool, somaError_t status) {
  return status == somaErrorInvalidResourceHandle && pool.slot >= 0 &&
         shared_.pool_changed(pool.slot, pool.view.generation);
}

void thread_worker::record_allocation(void* pointer, std::size_t size, int s,
                                      const pool_choice& pool, std::uint8_t fill,
                                      std::uint16_t raw) {
  if (size == 0) {
    FUZZ_CHECK(pointer == nullptr, "size 0 gave %p", pointer);
    return;
  }
  FUZZ_CHECK(pointer != nullptr && reinterpret_cast<std::uintptr_t>(pointer) % 256 == 0,
             "allocation at %p", pointer);
  allocation entry;
  entry.pointer = pointer;
  entry.size = size;
  entry.owner = s;
  entry.contents = byte_runs(size);
  if (pool.view.handle ==
      nullptr) {  // the current pool: attributes say which, on the stream's device
    entry.device = stream(s).device;
    entry.pool = check_live_attributes(pointer, size, entry.device, nullptr, raw % size).pool;
  } else {
    entry.device = pool.view.device;
    entry.pool = pool.view.handle;
    const somaPointerAttributes attributes =
        check_live_attributes(pointer, size, entry.device, nullptr, raw % size);
    // While the pool lives, attributes name it (S14).
    if (!(pool.slot >= 0 && shared_.pool_changed(pool.slot, pool.view.generation)))
      FUZZ_CHECK(attributes.pool == entry.pool, "attributes name pool %p, not %p",
                 static_cast<void*>(attributes.pool), static_cast<void*>(entry.pool));
  }
  const int writer = writer_for(s, entry.device);
  take_for_writing(entry, writer);
  FUZZ_OK(somaMemsetAsync(pointer, fill, size, use(stream(writer))));
  entry.contents.set(0, size, fill);
  live_.push_back(std::move(entry));
}

/// Writes run on a stream of the memory's device, so other threads' access grants and
/// revocations (S6) cannot refuse them.
int thread_worker::writer_for(int s, int device) const {
  return stream(s).device == device ? s : device;  // index `device` is its default stream
}

void thread_worker::take_for_writing(allocation& entry, int s) {
  for (int user : entry.readers) order_after(ordering_, stream(s), stream(user));
  order_after(ordering_, stream(s), stream(entry.owner));
  entry.owner = s;
  entry.readers.clear();
}

void thread_worker::free_allocation(std::size_t index, int s) {
  allocation& entry = live_[index];
  take_for_writing(entry, s < 0 ? entry.owner : s);
  FUZZ_OK(somaFreeAsync(entry.pointer, use(stream(entry.owner))));
  entry = std::move(live_.back());
  live_.pop_back();
}

void thread_worker::memset(const operation& op) {
  if (live_.empty()) return;
  allocation& entry = live_[op.a % live_.size()];
  const int writer = writer_for(pick_stream(op.b), entry.device);
  take_for_writing(entry, writer);
  const std::size_t offset = (op.raw >> 1) % entry.size;
  const std::size_t length =
      op.raw & 1 ? 1 + (op.raw >> 4) % (entry.size - offset) : entry.size - offset;
  FUZZ_OK(somaMemsetAsync(static_cast<char*>(entry.pointer) + offset, op.c, length,
                          use(stream(writer))));
  entry.contents.set(offset, length, op.c);
}

/// Destroys one of its own streams with work possibly queued and creates another; the device's
/// default stream inherits what the old one owned.
void thread_worker::replace_stream(const operation& op) {
  const int s = kDeviceCount + op.a % (kStreams - kDeviceCount);
  const int heir = stream(s).device;
  order_after(ordering_, stream(heir), stream(s));
  for (allocation& entry : live_) {
    std::replace(entry.readers.begin(), entry.readers.end(), s, heir);
    if (entry.owner == s) entry.owner = heir;
  }
  FUZZ_OK(somaStreamDestroy(stream(s).handle));
  const int device = op.b % kDeviceCount;
  FUZZ_OK(somaSetDevice(device));
  FUZZ_OK(somaStreamCreateWithFlags(&streams_[static_cast<std::size_t>(s)].handle, op.c & 1));
  streams_[static_cast<std::size_t>(s)].device = device;
}

void thread_worker::pool_setting(const pool_view& pool, const operation& op) {
  int flag = op.c & 1;
  std::uint64_t threshold = op.c & 2 ? UINT64_MAX : op.size;
  switch (op.b % 6) {
    case 0:
      return FUZZ_OK(
          somaMemPoolSetAttribute(pool.handle, somaMemPoolAttrReleaseThreshold, &threshold));
    case 1:
      return FUZZ_OK(
          somaMemPoolSetAttribute(pool.handle, somaMemPoolReuseFollowEventDependencies, &flag));
    case 2:
      return FUZZ_OK(
          somaMemPoolSetAttribute(pool.handle, somaMemPoolReuseAllowOpportunistic, &flag));
    case 3:
      return FUZZ_OK(
          somaMemPoolSetAttribute(pool.handle, somaMemPoolReuseAllowInternalDependencies, &flag));
    case 4: {
      FUZZ_OK(somaMemPoolSetAttribute(pool.handle, somaMemPoolAttrCompactBeforeGrowth, &flag));
      int remap = static_cast<int>((op.c >> 1) % 3);  // never, before growth, instead of failing
      return FUZZ_OK(somaMemPoolSetAttribute(pool.handle, somaMemPoolAttrRemapFreeMemory, &remap));
    }
    default: {  // S6, for the other device only: the owner's access is fixed
      const somaMemAccessDesc desc{
          {somaMemLocationTypeDevice, 1 - pool.device},
          op.c & 1 ? somaMemAccessFlagsProtReadWrite : somaMemAccessFlagsProtNone};
      return FUZZ_OK(somaMemPoolSetAccess(pool.handle, &desc, 1));
    }
  }
}

/// What holds while other threads allocate and free: used covers this thread's live bytes in
/// the pool, reserved covers used, highs cover currents (read first), whole granules, the cap.
void thread_worker::check_pool_figures(const pool_view& pool) {
  std::uint64_t own = 0;
  for (const allocation& entry : live_)
    if (entry.pool == pool.handle) own += entry.size;
  const pool_stats stats = read_pool_stats(pool.handle);
  FUZZ_CHECK(stats.used_current >= own && stats.reserved_current >= own,
             "pool %p: used %llu reserved %llu, but this thread alone holds %llu live",
             static_cast<void*>(pool.handle), static_cast<unsigned long long>(stats.used_current),
             static_cast<unsigned long long>(stats.reserved_current),
             static_cast<unsigned long long>(own));
  FUZZ_CHECK(stats.used_high >= stats.used_current && stats.reserved_high >= stats.reserved_current,
             "a high below its current value");
  FUZZ_CHECK(
      stats.reserved_current % kGranularityBytes == 0 && stats.reserved_current <= pool.cap_bytes,
      "reserved %llu: not whole granules, or over the cap %zu",
      static_cast<unsigned long long>(stats.reserved_current), pool.cap_bytes);
}

/// Host check of allocations whose owner completed: those on device (or -1: on stream s).
void thread_worker::verify_owned_on(int device, int s) const {
  for (const allocation& entry : live_) {
    const bool complete = device >= 0 ? stream(entry.owner).device == device : entry.owner == s;
    if (complete) check_contents(entry.pointer, entry.contents, "after a synchronize (threads)");
  }
}

void thread_worker::verify_contents() const {
  for (const allocation& entry : live_) check_contents(entry.pointer, entry.contents, "after join");
}

void thread_worker::add_live_bytes(std::map<somaMemPool_t, std::uint64_t>& totals) const {
  for (const allocation& entry : live_) totals[entry.pool] += entry.size;
}

void thread_worker::history(const operation& op) {
  switch (op.b % 3) {
    case 0:
      FUZZ_OK(somaMemRecordHistory(0));
      return;
    case 1:
      FUZZ_OK(somaMemRecordHistory(history_entries(op.raw)));
      return;
    default:
      export_and_check_trace(trace_path(1 + index_));
      std::remove(trace_path(1 + index_).c_str());
      return;
  }
}

void thread_worker::scope(const operation& op) {
  if (op.b % 2 == 0) {
    FUZZ_OK(somaMemScopePush(kScopeLabels[op.a % 3]));
    ++scopes_open_;
  } else if (scopes_open_ == 0) {
    FUZZ_EXPECT_STATUS(somaMemScopePop(), somaErrorIllegalState);
  } else {
    FUZZ_OK(somaMemScopePop());
    --scopes_open_;
  }
}

void thread_worker::finish() {
  while (!live_.empty()) free_allocation(live_.size() - 1, -1);
  for (int own = kDeviceCount; own < kStreams; ++own)
    FUZZ_OK(somaStreamDestroy(stream(own).handle));
  FUZZ_OK(somaEventDestroy(ordering_));
}

}  // namespace soma_fuzz
