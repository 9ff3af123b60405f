// Model-based randomized test of the C API, on every backend.
//
// A model keeps what the allocator must guarantee (live allocations, their sizes, pools,
// which streams touched which allocation) and drives soma with random operations that respect
// the contract: an allocation is used only on its stream or after an event dependency (S1), a
// free is ordered after every use (S2). After each step it checks invariants (CONTRIBUTING.md,
// Tests):
//   - live allocations never overlap; pointers are 256-byte aligned;
//   - per pool, used == sum of live requested sizes, reserved >= used, reserved in granules;
//   - a device's free bytes <= total - what its live pools reserve;
//   - every byte a stream wrote is read back unchanged by later reads until its free: writes
//     and reads are stream copies (somaMemcpyAsync) between pool memory and pinned host
//     buffers, never host access to pool memory (device memory on cuda); a read's bytes are
//     checked on the host once a synchronize, a successful query or the end of the run shows
//     its stream complete;
//   - pointer attributes name the live allocation (S14);
//   - capped pools refuse what cannot fit and accept what surely fits; uncapped pools accept
//     everything within the budget (after a full synchronize + trim at worst);
//   - after synchronizing every device, a pool without live allocations keeps no more than its
//     release threshold, up to the unit its backend releases in (S9, S12);
//   - destroying the current pool makes the default current again (S4, S5).
// Operations also switch current pools, change thresholds, trim, and destroy pools that still
// hold live allocations (S5), whose frees must still succeed.
// At the end everything is freed, every pool at threshold 0 reserves nothing after a
// synchronize, pools are destroyed, devices synchronized. On the cpu backend all device memory
// must then be back (somaMemGetInfo free == the value at the start, which is total under
// CTest); on cuda the free figure moves with other processes, so the pools' figures stand in.
//
// Several fixed seeds; SOMA_MODEL_STEPS sets the steps per seed (default keeps the file well
// under a minute in Debug and sanitizer builds); SOMA_MODEL_SEED runs one extra seed;
// SOMA_MODEL_TRACE=1 prints every operation, to turn a failing seed into a repro.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "host_words.hpp"
#include "seeded_model.hpp"
#include "soma_test_util.hpp"
#include "staging_buffers.hpp"

namespace {

using namespace soma_test;

constexpr int kDefaultSteps = 12000;
constexpr std::size_t kPoolLiveBudget = 24 * MiB;     // live bytes per pool the model allows
constexpr std::size_t kDeviceLiveBudget = 56 * MiB;   // live bytes per device
constexpr std::size_t kCappedPoolMaxSize = 16 * MiB;  // rounded up to the granularity
constexpr std::size_t kMaxAllocation = 4 * MiB;       // largest size random_size() gives
// Pools on the cuda backend grow by this much where the cap allows (more only for a larger
// request) and give back only whole commits: the driver cannot release part of one.
constexpr std::size_t kCudaGrowthStep = 32 * MiB;
constexpr int kEventRing = 32;

std::size_t round_up(std::size_t value, std::size_t unit) {
  return (value + unit - 1) / unit * unit;
}

/// Counts pattern mismatches found in read-back copies and remembers the first.
struct check_state {
  std::uint64_t failures = 0;
  std::uint64_t checks_run = 0;
  std::string first_failure;

  void fail(const std::string& what) {
    if (failures++ == 0) first_failure = what;
  }
};

void write_pattern(void* pointer, std::size_t size, std::uint64_t seed) {
  auto* words = static_cast<std::uint64_t*>(pointer);  // 256-byte aligned
  const std::size_t word_count = size / 8;
  for (std::size_t i = 0; i < word_count; ++i) words[i] = seed ^ (i * 0x9E3779B97F4A7C15ull);
  auto* bytes = static_cast<unsigned char*>(pointer);
  for (std::size_t i = word_count * 8; i < size; ++i)
    bytes[i] = static_cast<unsigned char>(seed >> (8 * (i % 8)));
}

/// Offset of the first wrong byte, or size if the pattern is intact.
std::size_t find_pattern_mismatch(const void* pointer, std::size_t size, std::uint64_t seed) {
  const auto* words = static_cast<const std::uint64_t*>(pointer);
  const std::size_t word_count = size / 8;
  for (std::size_t i = 0; i < word_count; ++i) {
    if (words[i] != (seed ^ (i * 0x9E3779B97F4A7C15ull))) return i * 8;
  }
  const auto* bytes = static_cast<const unsigned char*>(pointer);
  for (std::size_t i = word_count * 8; i < size; ++i) {
    if (bytes[i] != static_cast<unsigned char>(seed >> (8 * (i % 8)))) return i;
  }
  return size;
}

struct pool_model {
  somaMemPool_t handle = nullptr;
  int device = 0;
  bool is_default = false;
  bool alive = true;
  std::size_t max_size = 0;                  // 0 = uncapped
  std::uint64_t live_bytes = 0;              // sum of requested sizes of live allocations
  std::uint64_t live_granule_footprint = 0;  // generous physical bound of live allocations
};

struct stream_model {
  somaStream_t handle = nullptr;
  int device = 0;
  bool owned = true;  // false for the NULL stream
};

struct allocation {
  std::uint64_t id = 0;
  void* pointer = nullptr;
  std::size_t size = 0;
  int pool = 0;            // index into pools
  int owner = 0;           // stream that allocated it; writes happen there
  std::vector<int> users;  // other streams that read it since the last write
  std::uint64_t version = 0;
  bool written = false;
};

/// A copy between pool memory and a staging buffer that its stream has not yet been seen to
/// complete: the buffer must stay untouched until then. A check (a read-back copy) keeps what
/// its bytes must be, to be verified once the stream is known complete.
struct pending_copy {
  int stream = 0;  // index into streams_; its completion proves the copy done
  std::unique_ptr<host_buffer> buffer;
  bool is_check = false;
  std::uint64_t id = 0;
  std::uint64_t version = 0;
  std::uint64_t seed = 0;
  const void* pointer = nullptr;
  std::size_t size = 0;
  std::string context;  // where the check was enqueued (seed, step)
};

/// Generous bound of the physical memory an allocation pins once everything else is trimmed:
/// rounding to 256 bytes, at most a doubling for size classes, whole granules, plus one granule
/// it may share with neighbours.
std::uint64_t granule_footprint(std::size_t size, std::size_t granule) {
  const std::uint64_t rounded = 2 * ((size + 255) / 256 * 256);
  return (rounded + granule - 1) / granule * granule + granule;
}

class model : seeded_model {
 public:
  explicit model(std::uint64_t seed) : seeded_model(seed, "SOMA_MODEL_TRACE"), random_(seed) {}
  ~model() {
    // After a failed assertion copies may still be in flight: no stream may use a staging
    // buffer when it is freed.
    for (int device = 0; device < device_count_; ++device) (void)synchronize_device(device);
  }
  model(const model&) = delete;
  model& operator=(const model&) = delete;

  void set_up() {
    SOMA_ASSERT_OK(somaSetDevice(0));
    device_count_ = std::min(device_count(), 2);
    ASSERT_GE(device_count_, 1);
    granularity_.resize(static_cast<std::size_t>(device_count_));
    for (int device = 0; device < device_count_; ++device) {
      granularity_[static_cast<std::size_t>(device)] = granularity_bytes(device);
      SOMA_ASSERT_OK(synchronize_device(device));
      // Normally total (CTest runs each seed in its own process); when the binary runs whole,
      // an earlier seed's leak must not hide what this seed finds.
      free_at_start_.push_back(device_memory_info(device).free_bytes);
      pool_model pool;
      pool.handle = default_pool(device);
      pool.device = device;
      pool.is_default = true;
      ASSERT_EQ(pool_u64(pool.handle, somaMemPoolAttrUsedMemCurrent), 0u);
      pools_.push_back(pool);
      current_pool_.push_back(static_cast<int>(pools_.size()) - 1);
    }
    ASSERT_NO_FATAL_FAILURE(create_pool(0, 0));
    ASSERT_NO_FATAL_FAILURE(create_pool(0, round_up(kCappedPoolMaxSize, granularity_[0])));
    if (device_count_ > 1) {
      ASSERT_NO_FATAL_FAILURE(create_pool(1, 0));
    }

    for (int device = 0; device < device_count_; ++device) {
      SOMA_ASSERT_OK(somaSetDevice(device));
      for (int i = 0; i < (device == 0 ? 2 : 1); ++i) {
        stream_model stream;
        stream.device = device;
        SOMA_ASSERT_OK(somaStreamCreate(&stream.handle));
        streams_.push_back(stream);
      }
    }
    SOMA_ASSERT_OK(somaSetDevice(0));
    streams_.push_back(stream_model{nullptr, 0, false});  // device 0's default stream

    events_.resize(kEventRing, nullptr);
    for (somaEvent_t& event : events_) SOMA_ASSERT_OK(somaEventCreate(&event));
    copy_streams_.assign(streams_.size() * static_cast<std::size_t>(device_count_), nullptr);
  }

  void run(int steps) {
    for (step_ = 0; step_ < steps; ++step_) {
      ASSERT_NO_FATAL_FAILURE(random_step());
      ASSERT_NO_FATAL_FAILURE(check_invariants());
    }
  }

  void tear_down() {
    while (!live_.empty()) ASSERT_NO_FATAL_FAILURE(free_allocation(live_.size() - 1));
    ASSERT_NO_FATAL_FAILURE(synchronize_all());
    ASSERT_TRUE(pending_.empty()) << "copies left unverified after synchronizing every device";
    for (pool_model& pool : pools_) {
      if (!pool.alive) continue;
      EXPECT_EQ(pool_u64(pool.handle, somaMemPoolAttrUsedMemCurrent), 0u);
      SOMA_ASSERT_OK(set_pool_u64(pool.handle, somaMemPoolAttrReleaseThreshold, 0));
    }
    // Every free is proven complete: at threshold 0 a synchronize gives everything back (S9).
    for (int device = 0; device < device_count_; ++device)
      SOMA_ASSERT_OK(synchronize_device(device));
    for (pool_model& pool : pools_) {
      if (!pool.alive) continue;
      const std::uint64_t reserved = pool_u64(pool.handle, somaMemPoolAttrReservedMemCurrent);
      trace("tear down: P%td reserved %llu", &pool - pools_.data(),
            static_cast<unsigned long long>(reserved));
      EXPECT_EQ(reserved, 0u) << "P" << (&pool - pools_.data())
                              << " kept memory at threshold 0 with nothing live";
    }
    for (int device = 0; device < device_count_; ++device) {
      SOMA_ASSERT_OK(somaDeviceSetMemPool(device, pools_[static_cast<std::size_t>(device)].handle));
    }
    for (pool_model& pool : pools_) {
      if (pool.alive && !pool.is_default) {
        SOMA_ASSERT_OK(somaMemPoolDestroy(pool.handle));
        pool.alive = false;
      }
    }
    for (stream_model& stream : streams_) {
      if (stream.owned) {
        SOMA_ASSERT_OK(somaStreamDestroy(stream.handle));
      }
    }
    streams_.clear();
    for (somaStream_t& copy_stream : copy_streams_) {
      if (copy_stream != nullptr) {
        SOMA_ASSERT_OK(somaStreamDestroy(copy_stream));
      }
      copy_stream = nullptr;
    }
    for (somaEvent_t event : events_) SOMA_ASSERT_OK(somaEventDestroy(event));
    events_.clear();
    for (int device = 0; device < device_count_; ++device) {
      SOMA_ASSERT_OK(synchronize_device(device));
      const somaMemPool_t pool = pools_[static_cast<std::size_t>(device)].handle;
      EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), 0u)
          << "default pool of device " << device << " kept memory at threshold 0";
      // Only the cpu backend's devices are private to the process: on cuda other processes
      // move the free figure, and the pools' figures above stand in.
      if (on_cpu_backend()) {
        const memory_info info = device_memory_info(device);
        EXPECT_EQ(info.free_bytes, free_at_start_[static_cast<std::size_t>(device)])
            << "device " << device << ": memory not returned after everything was freed";
      }
    }
    std::printf("seed %llu: %d steps, %llu allocations, %llu read-back checks, %d retries\n",
                static_cast<unsigned long long>(seed_), step_,
                static_cast<unsigned long long>(next_id_),
                static_cast<unsigned long long>(checks_.checks_run), retries_);
  }

 private:
  // ---- randomness (mt19937_64 is specified exactly, so seeds reproduce everywhere) ----------

  std::uint64_t next() { return random_(); }
  std::size_t below(std::size_t bound) { return static_cast<std::size_t>(next() % bound); }

  std::size_t random_size() {
    const std::size_t bucket = below(100);
    if (bucket < 55) return 1 + below(1024);
    if (bucket < 80) return 1025 + below(64 * KiB - 1024);
    if (bucket < 95) return 64 * KiB + below(1 * MiB - 64 * KiB);
    return 1 * MiB + below(kMaxAllocation - 1 * MiB + 1);
  }

  // ---- setup helpers ---------------------------------------------------------------------

  void create_pool(int device, std::size_t max_size) {
    pool_model pool;
    pool.device = device;
    pool.max_size = max_size;
    const somaMemPoolProps props = pool_props(device, max_size);
    SOMA_ASSERT_OK(somaMemPoolCreate(&pool.handle, &props)) << where();
    pools_.push_back(pool);
    trace("create pool P%zu on device %d, max %zu", pools_.size() - 1, device, max_size);
  }

  std::vector<int> alive_pools() const {
    std::vector<int> result;
    for (std::size_t i = 0; i < pools_.size(); ++i)
      if (pools_[i].alive) result.push_back(static_cast<int>(i));
    return result;
  }

  // ---- ordering helpers --------------------------------------------------------------------

  /// Makes `waiter` wait for all work queued so far on `target` (event record + wait).
  void order_after(int waiter, int target) {
    if (waiter == target) return;
    order_handles(streams_[static_cast<std::size_t>(waiter)].handle,
                  streams_[static_cast<std::size_t>(target)].handle, "S", waiter, "S", target);
  }

  void order_handles(somaStream_t waiter, somaStream_t target, const char* waiter_kind,
                     int waiter_index, const char* target_kind, int target_index) {
    const std::size_t event_index = next_event_++ % events_.size();
    somaEvent_t event = events_[event_index];
    trace("record E%zu on %s%d; %s%d waits E%zu", event_index, target_kind, target_index,
          waiter_kind, waiter_index, event_index);
    SOMA_ASSERT_OK(somaEventRecord(event, target)) << where();
    SOMA_ASSERT_OK(somaStreamWaitEvent(waiter, event, 0)) << where();
  }

  // ---- copies between pool memory and staging buffers ---------------------------------------

  /// Enqueues a copy in the order of stream `index`: after its earlier work, before its later
  /// work. Pool memory of another device than the stream's is copied on a stream of that
  /// device, ordered into `index` both ways by events: on cuda a device reaches only its own
  /// pool memory unless somaMemPoolSetAccess grants more (S6), and the model grants nothing.
  void copy_in_order(int index, int memory_device, void* destination, const void* source,
                     std::size_t bytes, somaMemcpyKind kind) {
    const stream_model& stream = streams_[static_cast<std::size_t>(index)];
    if (stream.device == memory_device) {
      SOMA_ASSERT_OK(somaMemcpyAsync(destination, source, bytes, kind, stream.handle)) << where();
      return;
    }
    const int copy_index = index * device_count_ + memory_device;
    somaStream_t& copy_stream = copy_streams_[static_cast<std::size_t>(copy_index)];
    if (copy_stream == nullptr) {
      SOMA_ASSERT_OK(somaSetDevice(memory_device));
      const somaError_t created = somaStreamCreate(&copy_stream);
      SOMA_ASSERT_OK(somaSetDevice(0));
      SOMA_ASSERT_OK(created) << where();
    }
    ASSERT_NO_FATAL_FAILURE(order_handles(copy_stream, stream.handle, "C", copy_index, "S", index));
    SOMA_ASSERT_OK(somaMemcpyAsync(destination, source, bytes, kind, copy_stream)) << where();
    ASSERT_NO_FATAL_FAILURE(order_handles(stream.handle, copy_stream, "S", index, "C", copy_index));
  }

  /// Stream `index` (every stream if -1) is known complete: its copies are done, so read-back
  /// copies are checked and staging buffers recycled.
  void complete_stream(int index) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < pending_.size(); ++i) {
      pending_copy& copy = pending_[i];
      if (index >= 0 && copy.stream != index) {
        if (kept != i) pending_[kept] = std::move(copy);
        ++kept;
        continue;
      }
      if (copy.is_check) verify(copy);
      staging_.give_back(std::move(copy.buffer));
    }
    pending_.resize(kept);
    expect_no_pattern_failures();
  }

  void verify(const pending_copy& copy) {
    ++checks_.checks_run;
    const std::size_t offset = find_pattern_mismatch(copy.buffer->data(), copy.size, copy.seed);
    if (offset != copy.size) {
      std::ostringstream text;
      text << copy.context << ": allocation #" << copy.id << " (" << copy.pointer << ", "
           << copy.size << " B, version " << copy.version << ") changed at offset " << offset
           << " (read on S" << copy.stream << ")";
      checks_.fail(text.str());
    }
  }

  std::uint64_t device_live_bytes(int device) const {
    std::uint64_t sum = 0;
    for (const pool_model& pool : pools_)
      if (pool.device == device) sum += pool.live_bytes;
    return sum;
  }

  // ---- operations ----------------------------------------------------------------------------

  void random_step() {
    struct weighted {
      int weight;
      void (model::*operation)();
    };
    static constexpr weighted operations[] = {
        {300, &model::op_allocate},
        {220, &model::op_free},
        {120, &model::op_write},
        {120, &model::op_check},
        {60, &model::op_event_dependency},
        {40, &model::op_stream_synchronize},
        {30, &model::op_stream_query},
        {20, &model::op_event_synchronize},
        {15, &model::op_device_synchronize},
        {20, &model::op_trim},
        {20, &model::op_threshold},
        {15, &model::op_set_current_pool},
        {30, &model::op_pointer_attributes},
        {5, &model::op_destroy_and_recreate_pool},
    };
    int total = 0;
    for (const weighted& entry : operations) total += entry.weight;
    int pick = static_cast<int>(below(static_cast<std::size_t>(total)));
    for (const weighted& entry : operations) {
      if (pick < entry.weight) {
        (this->*entry.operation)();
        return;
      }
      pick -= entry.weight;
    }
  }

  void op_allocate() {
    const int stream_index = static_cast<int>(below(streams_.size()));
    const stream_model& stream = streams_[static_cast<std::size_t>(stream_index)];
    const bool use_current = below(100) < 40;
    int pool_index = current_pool_[static_cast<std::size_t>(stream.device)];
    if (!use_current) {
      const std::vector<int> candidates = alive_pools();
      pool_index = candidates[below(candidates.size())];
    }
    pool_model& pool = pools_[static_cast<std::size_t>(pool_index)];
    const std::size_t size = random_size();
    if (pool.live_bytes + size > kPoolLiveBudget ||
        device_live_bytes(pool.device) + size > kDeviceLiveBudget) {
      if (!live_.empty()) free_allocation(below(live_.size()));
      return;
    }

    void* pointer = nullptr;
    auto allocate = [&] {
      return use_current ? somaMallocAsync(&pointer, size, stream.handle)
                         : somaMallocFromPoolAsync(&pointer, size, pool.handle, stream.handle);
    };
    somaError_t status = allocate();

    if (pool.max_size != 0 && pool.live_bytes + size > pool.max_size) {
      // The requested sizes alone exceed the cap: no layout can hold them.
      EXPECT_EQ(status, somaErrorMemoryAllocation)
          << where() << ": capped pool accepted " << size << " B with " << pool.live_bytes
          << " B live, max " << pool.max_size;
      if (status == somaSuccess) (void)somaFreeAsync(pointer, stream.handle);
      return;
    }
    if (status == somaErrorMemoryAllocation) {
      // Cached memory, fragmentation or frees not yet known complete may stand in the way.
      // After a full synchronize and a trim only live memory remains: what surely fits then
      // must be accepted (for an uncapped pool the budgets bound the device's live memory).
      const std::size_t granule = granularity_[static_cast<std::size_t>(pool.device)];
      const bool surely_fits =
          pool.max_size == 0 ||
          pool.live_granule_footprint + granule_footprint(size, granule) <= pool.max_size;
      if (!surely_fits) return;
      ++retries_;
      ASSERT_NO_FATAL_FAILURE(synchronize_all());
      for (int index : alive_pools())
        SOMA_ASSERT_OK(somaMemPoolTrimTo(pools_[static_cast<std::size_t>(index)].handle, 0));
      status = allocate();
    }
    ASSERT_EQ(status, somaSuccess)
        << where() << ": allocating " << size << " B: " << last_message();
    ASSERT_NE(pointer, nullptr) << where();
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(pointer) % 256, 0u) << where();
    trace("alloc #%llu: %zu B on S%d from P%d (%s) -> %p",
          static_cast<unsigned long long>(next_id_), size, stream_index, pool_index,
          use_current ? "current" : "explicit", pointer);
    ASSERT_NO_FATAL_FAILURE(insert_range(pointer, size));

    allocation entry;
    entry.id = next_id_++;
    entry.pointer = pointer;
    entry.size = size;
    entry.pool = pool_index;
    entry.owner = stream_index;
    live_.push_back(entry);
    pool.live_bytes += size;
    pool.live_granule_footprint +=
        granule_footprint(size, granularity_[static_cast<std::size_t>(pool.device)]);
  }

  void insert_range(void* pointer, std::size_t size) {
    const auto start = reinterpret_cast<std::uintptr_t>(pointer);
    auto next_range = ranges_.lower_bound(start);
    if (next_range != ranges_.end()) {
      ASSERT_GE(next_range->first, start + size)
          << where() << ": new allocation " << pointer << "+" << size
          << " overlaps live allocation at " << reinterpret_cast<void*>(next_range->first);
    }
    if (next_range != ranges_.begin()) {
      auto previous = std::prev(next_range);
      ASSERT_LE(previous->first + previous->second, start)
          << where() << ": new allocation " << pointer << "+" << size
          << " overlaps live allocation at " << reinterpret_cast<void*>(previous->first) << "+"
          << previous->second;
    }
    ranges_.emplace(start, size);
  }

  void free_allocation(std::size_t live_index) {
    allocation entry = live_[live_index];
    const int freeing = static_cast<int>(below(streams_.size()));
    // S2: the free must come after every use, on every stream.
    ASSERT_NO_FATAL_FAILURE(order_after(freeing, entry.owner));
    for (int user : entry.users) ASSERT_NO_FATAL_FAILURE(order_after(freeing, user));
    trace("free #%llu (%p, %zu B, P%d) on S%d", static_cast<unsigned long long>(entry.id),
          entry.pointer, entry.size, entry.pool, freeing);
    SOMA_ASSERT_OK(somaFreeAsync(entry.pointer, streams_[static_cast<std::size_t>(freeing)].handle))
        << where();
    ranges_.erase(reinterpret_cast<std::uintptr_t>(entry.pointer));
    pool_model& pool = pools_[static_cast<std::size_t>(entry.pool)];
    pool.live_bytes -= entry.size;
    pool.live_granule_footprint -=
        granule_footprint(entry.size, granularity_[static_cast<std::size_t>(pool.device)]);
    live_[live_index] = live_.back();
    live_.pop_back();
  }

  void op_free() {
    if (live_.empty()) return;
    free_allocation(below(live_.size()));
  }

  void op_write() {
    if (live_.empty()) return;
    allocation& entry = live_[below(live_.size())];
    // Write-after-read: the owner waits for every stream that read the old contents.
    for (int user : entry.users) ASSERT_NO_FATAL_FAILURE(order_after(entry.owner, user));
    entry.users.clear();
    ++entry.version;
    entry.written = true;
    const std::uint64_t seed = mix(entry.id * 1000003ull + entry.version);
    trace("write #%llu v%llu on S%d", static_cast<unsigned long long>(entry.id),
          static_cast<unsigned long long>(entry.version), entry.owner);
    // The pattern is filled in on the host now; the stream copies it in its order. The buffer
    // stays untouched until the owner is known complete.
    pending_copy& copy = pending_.emplace_back();
    copy.stream = entry.owner;
    copy.buffer = staging_.take(entry.size);
    write_pattern(copy.buffer->data(), entry.size, seed);
    ASSERT_NO_FATAL_FAILURE(
        copy_in_order(entry.owner, pools_[static_cast<std::size_t>(entry.pool)].device,
                      entry.pointer, copy.buffer->data(), entry.size, somaMemcpyHostToDevice));
  }

  void op_check() {
    if (live_.empty()) return;
    allocation& entry = live_[below(live_.size())];
    if (!entry.written) return;
    const int reader = static_cast<int>(below(streams_.size()));
    if (reader != entry.owner) {
      ASSERT_NO_FATAL_FAILURE(order_after(reader, entry.owner));
      if (std::find(entry.users.begin(), entry.users.end(), reader) == entry.users.end())
        entry.users.push_back(reader);
    }
    trace("check #%llu v%llu on S%d", static_cast<unsigned long long>(entry.id),
          static_cast<unsigned long long>(entry.version), reader);
    // The reader copies the bytes out at its position; they are checked against the version
    // it was ordered after once the reader is known complete (complete_stream).
    pending_copy& copy = pending_.emplace_back();
    copy.stream = reader;
    copy.buffer = staging_.take(entry.size);
    copy.is_check = true;
    copy.id = entry.id;
    copy.version = entry.version;
    copy.seed = mix(entry.id * 1000003ull + entry.version);
    copy.pointer = entry.pointer;
    copy.size = entry.size;
    copy.context = where();
    ASSERT_NO_FATAL_FAILURE(
        copy_in_order(reader, pools_[static_cast<std::size_t>(entry.pool)].device,
                      copy.buffer->data(), entry.pointer, entry.size, somaMemcpyDeviceToHost));
  }

  void op_event_dependency() {
    const int waiter = static_cast<int>(below(streams_.size()));
    const int target = static_cast<int>(below(streams_.size()));
    order_after(waiter, target);
  }

  void op_stream_synchronize() {
    const std::size_t index = below(streams_.size());
    trace("synchronize S%zu", index);
    SOMA_ASSERT_OK(somaStreamSynchronize(streams_[index].handle)) << where();
    complete_stream(static_cast<int>(index));
  }

  void op_stream_query() {
    const std::size_t index = below(streams_.size());
    const somaError_t status = somaStreamQuery(streams_[index].handle);
    trace("query S%zu -> %s", index, somaGetErrorName(status));
    ASSERT_TRUE(status == somaSuccess || status == somaErrorNotReady)
        << where() << ": " << ::testing::PrintToString(status);
    if (status == somaSuccess) complete_stream(static_cast<int>(index));
  }

  void op_event_synchronize() {
    const int target = static_cast<int>(below(streams_.size()));
    const std::size_t event_index = next_event_++ % events_.size();
    somaEvent_t event = events_[event_index];
    trace("record E%zu on S%d; synchronize E%zu", event_index, target, event_index);
    SOMA_ASSERT_OK(somaEventRecord(event, streams_[static_cast<std::size_t>(target)].handle))
        << where();
    SOMA_ASSERT_OK(somaEventSynchronize(event)) << where();
    complete_stream(target);
  }

  void op_device_synchronize() { synchronize_all(); }

  void synchronize_all() {
    trace("synchronize every device");
    for (int device = 0; device < device_count_; ++device)
      SOMA_ASSERT_OK(synchronize_device(device)) << where();
    ASSERT_NO_FATAL_FAILURE(complete_stream(-1));
    // S9: every free is now known complete; a pool without live allocations keeps no more than
    // its release threshold, in the units its backend gives memory back in.
    for (const pool_model& pool : pools_) {
      if (!pool.alive || pool.live_bytes != 0) continue;
      const std::uint64_t threshold = pool_u64(pool.handle, somaMemPoolAttrReleaseThreshold);
      const std::uint64_t reserved = pool_u64(pool.handle, somaMemPoolAttrReservedMemCurrent);
      if (threshold == 0) {
        ASSERT_EQ(reserved, 0u) << where() << ": P" << (&pool - pools_.data())
                                << " has no live allocation, every free completed, threshold 0,"
                                   " yet keeps memory";
      } else {
        ASSERT_TRUE(reserved <= threshold || reserved - threshold < release_unit(pool.device))
            << where() << ": P" << (&pool - pools_.data()) << " has no live allocation, every"
            << " free completed, yet keeps " << reserved << " B with threshold " << threshold
            << " B (release unit " << release_unit(pool.device) << " B)";
      }
    }
  }

  /// What a release may leave above a nonzero threshold (S9: memory goes back "until the pool
  /// is at the threshold", in whole units): the cpu backend gives back any whole granule; the
  /// cuda backend only whole commits, of at most its growth step or the largest request. A
  /// commit stays when giving it back would pass below the threshold, so what stays above the
  /// threshold is less than one unit. With granule-aligned thresholds the cpu bound means
  /// reserved <= threshold exactly.
  std::uint64_t release_unit(int device) const {
    const std::size_t granule = granularity_[static_cast<std::size_t>(device)];
    if (on_cpu_backend()) return granule;
    return std::max(round_up(kCudaGrowthStep, granule), round_up(kMaxAllocation, granule));
  }

  void op_trim() {
    const std::vector<int> candidates = alive_pools();
    pool_model& pool = pools_[static_cast<std::size_t>(candidates[below(candidates.size())])];
    const std::size_t choices[] = {0, 1 * MiB, 8 * MiB, below(32 * MiB)};
    const std::size_t keep = choices[below(4)];
    trace("trim P%td to %zu", &pool - pools_.data(), keep);
    SOMA_ASSERT_OK(somaMemPoolTrimTo(pool.handle, keep)) << where();
  }

  void op_threshold() {
    const std::vector<int> candidates = alive_pools();
    pool_model& pool = pools_[static_cast<std::size_t>(candidates[below(candidates.size())])];
    const std::uint64_t choices[] = {0, 1 * MiB, 16 * MiB, UINT64_MAX};
    const std::uint64_t threshold = choices[below(4)];
    trace("threshold P%td = %llu", &pool - pools_.data(),
          static_cast<unsigned long long>(threshold));
    SOMA_ASSERT_OK(set_pool_u64(pool.handle, somaMemPoolAttrReleaseThreshold, threshold))
        << where();
    ASSERT_EQ(pool_u64(pool.handle, somaMemPoolAttrReleaseThreshold), threshold) << where();
  }

  void op_set_current_pool() {
    const int device = static_cast<int>(below(static_cast<std::size_t>(device_count_)));
    std::vector<int> candidates;
    for (int index : alive_pools())
      if (pools_[static_cast<std::size_t>(index)].device == device) candidates.push_back(index);
    const int chosen = candidates[below(candidates.size())];
    trace("device %d current pool = P%d", device, chosen);
    SOMA_ASSERT_OK(somaDeviceSetMemPool(device, pools_[static_cast<std::size_t>(chosen)].handle))
        << where();
    current_pool_[static_cast<std::size_t>(device)] = chosen;
    ASSERT_EQ(current_pool(device), pools_[static_cast<std::size_t>(chosen)].handle) << where();
  }

  void op_pointer_attributes() {
    if (live_.empty()) return;
    const allocation& entry = live_[below(live_.size())];
    const std::size_t offset = below(entry.size);
    somaPointerAttributes attributes{};
    SOMA_ASSERT_OK(
        somaPointerGetAttributes(&attributes, static_cast<const char*>(entry.pointer) + offset))
        << where();
    const pool_model& pool = pools_[static_cast<std::size_t>(entry.pool)];
    EXPECT_EQ(attributes.isLiveAllocation, 1) << where();
    EXPECT_EQ(attributes.type, somaMemoryTypeDevice) << where();
    EXPECT_EQ(attributes.base, entry.pointer) << where() << " offset " << offset;
    EXPECT_EQ(attributes.size, entry.size) << where();
    EXPECT_EQ(attributes.device, pool.device) << where();
    if (pool.alive) {
      EXPECT_EQ(attributes.pool, pool.handle) << where();
    }
  }

  void op_destroy_and_recreate_pool() {
    std::vector<int> candidates;
    for (int index : alive_pools())
      if (!pools_[static_cast<std::size_t>(index)].is_default) candidates.push_back(index);
    if (candidates.empty()) return;
    const int chosen = candidates[below(candidates.size())];
    pool_model& pool = pools_[static_cast<std::size_t>(chosen)];
    // S5: returns at once even with live allocations and pending frees.
    trace("destroy P%d (%llu B live)", chosen, static_cast<unsigned long long>(pool.live_bytes));
    SOMA_ASSERT_OK(somaMemPoolDestroy(pool.handle)) << where();
    pool.alive = false;
    const int device = pool.device;
    const std::size_t max_size = pool.max_size;
    if (current_pool_[static_cast<std::size_t>(device)] == chosen) {
      current_pool_[static_cast<std::size_t>(device)] = device;  // the default pool's index
      ASSERT_EQ(current_pool(device), pools_[static_cast<std::size_t>(device)].handle)
          << where() << ": destroying the current pool must make the default current";
    }
    ASSERT_NO_FATAL_FAILURE(create_pool(device, max_size));
  }

  // ---- invariants -------------------------------------------------------------------------

  void expect_no_pattern_failures() { ASSERT_EQ(checks_.failures, 0u) << checks_.first_failure; }

  void check_invariants() {
    std::vector<std::uint64_t> reserved_by_device(static_cast<std::size_t>(device_count_), 0);
    for (const pool_model& pool : pools_) {
      if (!pool.alive) continue;
      const pool_stats stats = read_pool_stats(pool.handle);
      ASSERT_EQ(stats.used_current, pool.live_bytes)
          << where() << ": used != sum of live requested sizes";
      ASSERT_GE(stats.reserved_current, stats.used_current) << where();
      ASSERT_EQ(stats.reserved_current % granularity_[static_cast<std::size_t>(pool.device)], 0u)
          << where();
      ASSERT_GE(stats.used_high, stats.used_current) << where();
      ASSERT_GE(stats.reserved_high, stats.reserved_current) << where();
      if (pool.max_size != 0) {
        ASSERT_LE(stats.reserved_current, pool.max_size) << where();
      }
      reserved_by_device[static_cast<std::size_t>(pool.device)] += stats.reserved_current;
    }
    for (int device = 0; device < device_count_; ++device) {
      const memory_info info = device_memory_info(device);
      ASSERT_LE(info.free_bytes + reserved_by_device[static_cast<std::size_t>(device)],
                info.total_bytes)
          << where() << ": device " << device << " reports more free memory than its pools leave";
    }
  }

  std::mt19937_64 random_;
  int device_count_ = 0;
  int retries_ = 0;
  std::uint64_t next_id_ = 0;
  std::size_t next_event_ = 0;
  std::vector<std::size_t> granularity_;
  std::vector<std::size_t> free_at_start_;  // per device
  std::vector<pool_model> pools_;           // default pools first, by device; never shrinks
  std::vector<int> current_pool_;           // per device, index into pools_
  std::vector<stream_model> streams_;
  std::vector<somaEvent_t> events_;
  std::vector<allocation> live_;
  std::map<std::uintptr_t, std::size_t> ranges_;  // live allocations by start address
  // Per (stream, device): the stream's copies of another device's pool memory (copy_in_order).
  std::vector<somaStream_t> copy_streams_;
  check_state checks_;
  staging_buffers staging_;
  std::vector<pending_copy> pending_;  // copies whose stream is not yet known complete
};

class S1_S2_S4_S5_S9_S10_S14_Model : public capi_test,
                                     public ::testing::WithParamInterface<std::uint64_t> {};

TEST_P(S1_S2_S4_S5_S9_S10_S14_Model, RandomOperationsKeepInvariants) {
  model under_test(GetParam());
  ASSERT_NO_FATAL_FAILURE(under_test.set_up());
  ASSERT_NO_FATAL_FAILURE(
      under_test.run(steps_from_environment("SOMA_MODEL_STEPS", kDefaultSteps)));
  ASSERT_NO_FATAL_FAILURE(under_test.tear_down());
}

std::vector<std::uint64_t> seeds() {
  std::vector<std::uint64_t> result = {1, 2, 3, 20251130, 0x5eed50a4};
  if (const char* extra = std::getenv("SOMA_MODEL_SEED"))
    result.push_back(std::strtoull(extra, nullptr, 0));
  return result;
}

INSTANTIATE_TEST_SUITE_P(Seeds, S1_S2_S4_S5_S9_S10_S14_Model, ::testing::ValuesIn(seeds()),
                         [](const ::testing::TestParamInfo<std::uint64_t>& info) {
                           return "seed_" + std::to_string(info.param);
                         });

}  // namespace
