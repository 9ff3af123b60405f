// Shared by the S11 reuse-policy tests (reuse_policies_test.cpp, reuse_rules_test.cpp): the
// three flags, stream work that writes, probes and marks, and a fixture with streams A, B, C, a
// gate and an explicit pool of a few granules that keeps freed memory, with the steps the tests
// share (a written block freed on A, a stream made to wait for another, a request served by
// reuse or by growth, a probe held back until A's free or run at once).
//
// Everything here runs on every backend. Pool memory is device memory on cuda, so nothing on
// the host touches it: a writer is a somaMemsetAsync plus value writes, a probe copies the
// block into somaMallocHost memory (somaMemcpyAsync, in stream order) before it overwrites it.
// How far a stream got is read from words the stream writes (stream_flag), never from host
// tasks: the driver may run all streams' host tasks on one thread, one after another.
//
// Requires: the including binary links `soma` and GoogleTest.
#pragma once

#include <soma/soma.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "host_words.hpp"
#include "soma_test_util.hpp"
#include "stream_gate.hpp"

namespace soma_test::reuse {

// How long a test waits to see that held-back stream work does not run. Work that is not held
// back runs within microseconds; a correct implementation never runs it in this window.
inline constexpr std::chrono::milliseconds kHeldBackWindow{50};

struct policies {
  bool follow = true;         // somaMemPoolReuseFollowEventDependencies
  bool opportunistic = true;  // somaMemPoolReuseAllowOpportunistic
  bool internal = true;       // somaMemPoolReuseAllowInternalDependencies
};

inline policies decode(int mask) {
  return policies{(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0};
}

inline std::string policy_name(const ::testing::TestParamInfo<int>& info) {
  const policies p = decode(info.param);
  return std::string("Follow") + (p.follow ? "On" : "Off") + "_Opportunistic" +
         (p.opportunistic ? "On" : "Off") + "_Internal" + (p.internal ? "On" : "Off");
}

inline somaError_t set_policies(somaMemPool_t pool, policies p) {
  somaError_t status = set_pool_int(pool, somaMemPoolReuseFollowEventDependencies, p.follow);
  if (status == somaSuccess)
    status = set_pool_int(pool, somaMemPoolReuseAllowOpportunistic, p.opportunistic);
  if (status == somaSuccess)
    status = set_pool_int(pool, somaMemPoolReuseAllowInternalDependencies, p.internal);
  return status;
}

/// A 32-bit value no earlier writer of this process used. Stale device memory (cuda does not
/// clear physical memory it hands out again) may hold an older token, never this one, so
/// seeing it proves the writer ran.
inline std::uint32_t unique_token() {
  static std::atomic<std::uint32_t> count{0};
  return 0x70000000u | (count.fetch_add(1) + 1);
}

/// Work on a block: fill it with `fill`, put `token` into its first word and into the
/// writer's sentinel word (device memory outside the pool under test), then set `done`.
struct writer {
  void* block = nullptr;
  std::size_t bytes = 0;
  unsigned char fill = 0;
  std::uint32_t token = 0;
  std::uint32_t* sentinel = nullptr;  // a word of reuse_fixture's sentinel block
  int slot = 0;                       // its index there
  stream_flag done;
};

/// Enqueues w's work on stream.
inline somaError_t launch_writer(somaStream_t stream, const writer& w) {
  somaError_t status = somaMemsetAsync(w.block, w.fill, w.bytes, stream);
  if (status == somaSuccess)
    status = somaStreamWriteValue32(stream, static_cast<std::uint32_t*>(w.block), w.token, 0);
  if (status == somaSuccess) status = somaStreamWriteValue32(stream, w.sentinel, w.token, 0);
  if (status == somaSuccess) status = w.done.set_on(stream);
  return status;
}

/// Work that finds out, in stream order, what ran before it: it copies its block and the
/// sentinel block to the host, then fills its block with `fill` and sets `ran`. Read `seen`
/// and `sentinels_seen` only once `ran` is set.
struct probe {
  probe(void* block_, std::size_t bytes_, unsigned char fill_, const std::uint32_t* sentinels_,
        std::size_t sentinel_bytes)
      : block(block_),
        bytes(bytes_),
        fill(fill_),
        sentinels(sentinels_),
        seen(bytes_),
        sentinels_seen(sentinel_bytes) {}

  /// Whether the writer's work had completed when the probe ran: its token in the sentinel
  /// (whatever block the probe works on) and, for the writer's own block, its bytes.
  ::testing::AssertionResult saw(const writer& w) const {
    if (!ran.is_set()) return ::testing::AssertionFailure() << "the probe has not run";
    const std::uint32_t sentinel = word(sentinels_seen, static_cast<std::size_t>(w.slot));
    if (sentinel != w.token) {
      return ::testing::AssertionFailure()
             << "the probe ran before the writer's work completed: sentinel " << hex(sentinel)
             << ", the writer's token " << hex(w.token);
    }
    if (block != w.block) return ::testing::AssertionSuccess();
    const std::uint32_t first = word(seen, 0);
    std::size_t wrong = 0;
    for (std::size_t i = sizeof(std::uint32_t); i < bytes && i < w.bytes; ++i)
      wrong += seen[i] != w.fill ? 1 : 0;
    if (first != w.token || wrong != 0) {
      return ::testing::AssertionFailure()
             << "the probe found the block without the writer's bytes: first word " << hex(first)
             << " (token " << hex(w.token) << "), " << wrong << " bytes other than " << hex(w.fill);
    }
    return ::testing::AssertionSuccess();
  }

  void* block;
  std::size_t bytes;
  unsigned char fill;
  const std::uint32_t* sentinels;
  host_buffer seen;            // the block as the probe found it
  host_buffer sentinels_seen;  // the sentinel block as the probe found it
  stream_flag ran;

 private:
  static std::string hex(std::uint32_t value) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%x", static_cast<unsigned>(value));
    return text;
  }
  static std::uint32_t word(const host_buffer& buffer, std::size_t index) {
    std::uint32_t value = 0;
    if ((index + 1) * sizeof value <= buffer.size())
      std::memcpy(&value, buffer.data() + index * sizeof value, sizeof value);
    return value;
  }
};

/// Enqueues the probe's work on stream.
inline somaError_t launch_probe(somaStream_t stream, const probe& p) {
  somaError_t status =
      somaMemcpyAsync(p.seen.data(), p.block, p.bytes, somaMemcpyDeviceToHost, stream);
  if (status == somaSuccess) {
    status = somaMemcpyAsync(p.sentinels_seen.data(), p.sentinels, p.sentinels_seen.size(),
                             somaMemcpyDeviceToHost, stream);
  }
  if (status == somaSuccess) status = somaMemsetAsync(p.block, p.fill, p.bytes, stream);
  if (status == somaSuccess) status = p.ran.set_on(stream);
  return status;
}

/// Enqueues a marker: `ran` is set once the stream's earlier work completed.
inline somaError_t launch_marker(somaStream_t stream, const stream_flag& ran) {
  return ran.set_on(stream);
}

/// Waits until `ran` is set, then a moment more; false on timeout. For a test whose stream
/// must be done as the pool sees it, not only as far as the flag: a backend that learns
/// completion by asking (cuda: cuStreamQuery of the idle stream) may find the stream busy for
/// microseconds after its last value write became visible, and opportunistic reuse asks once
/// per request.
inline bool wait_completed(const stream_flag& ran) {
  if (!ran.wait()) return false;
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return true;
}

/// Polls somaStreamQuery until it reports success (the stream drained); false on timeout.
inline bool drains(somaStream_t stream,
                   std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const somaError_t status = somaStreamQuery(stream);
    if (status == somaSuccess) return true;
    if (status != somaErrorNotReady || std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

/// Streams A, B, C on device 0, a gate to hold them, and an explicit pool on device 0 made by
/// make_pool. TearDown opens the gate and waits for the device before the base class resets
/// the pools; writers and probes live as long as the fixture, so no stream outlives the
/// memory it copies to.
class reuse_fixture : public capi_test {
 protected:
  /// Writers a test may make (one sentinel word each).
  static constexpr int kMaxWriters = 64;
  /// Cap of a pool the tests let grow: far beyond what they allocate, on every backend.
  static constexpr int kGrowableGranules = 64;

  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(capi_test::SetUp());
    granule_ = granularity_bytes(0);
    ASSERT_GE(granule_, 4 * KiB);
    // The sentinels live in device 0's current (default) pool, not in the pool under test,
    // so they change nothing there. Synchronized: every stream may use them at once.
    SOMA_ASSERT_OK(somaMallocAsync(&sentinels_, kMaxWriters * sizeof(std::uint32_t), nullptr));
    SOMA_ASSERT_OK(somaStreamSynchronize(nullptr));
  }

  void TearDown() override {
    gate_.open();
    (void)somaDeviceSynchronize();
    if (headroom_ != nullptr) (void)somaFreeAsync(headroom_, nullptr);
    if (sentinels_ != nullptr) (void)somaFreeAsync(sentinels_, nullptr);
    capi_test::TearDown();
  }

  /// An explicit pool capped at `granules` granules that keeps freed memory. cuda commits in
  /// steps of 32 MiB up to the cap, so a pool of a few granules holds its cap after the first
  /// allocation: "the pool cannot grow" is exact for one granule, and for two it means fresh
  /// memory the first allocation left behind; take_headroom makes growth real.
  void make_pool(int granules, policies p) {
    pool_ = std::make_unique<unique_pool>(0, static_cast<std::size_t>(granules) * granule_);
    ASSERT_NE(pool_->get(), nullptr);
    SOMA_ASSERT_OK(set_pool_u64(*pool_, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
    SOMA_ASSERT_OK(set_policies(*pool_, p));
  }

  /// A pool with room to grow (kGrowableGranules); pair with take_headroom (free_on_a takes it).
  void make_growable_pool(policies p) {
    make_pool(kGrowableGranules, p);
    growable_ = true;
  }

  /// Allocates, on the default stream until TearDown, the memory the pool committed beyond what
  /// is in use. A backend that grows in steps larger than the request (cuda: 32 MiB) leaves
  /// fresh memory that a later request takes before it looks at freed blocks in stream caches;
  /// afterwards, a request that no freed block serves must grow the pool, on every backend
  /// (cpu commits what is asked, so there is nothing to take).
  /// Requires: nothing freed in the pool yet; live sizes whole granules.
  void take_headroom() {
    ASSERT_EQ(headroom_, nullptr) << "one headroom per test";
    const std::uint64_t before = reserved();
    const std::uint64_t fresh = before - used();
    if (fresh == 0) return;
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&headroom_, fresh, pool(), nullptr));
    headroom_bytes_ = fresh;
    ASSERT_EQ(reserved(), before) << "the pool's fresh memory was not one block";
  }

  somaMemPool_t pool() const { return pool_->get(); }

  /// One allocation of `bytes` (default: one granule) from the pool on stream.
  somaError_t allocate(void** pointer, somaStream_t stream, std::size_t bytes = 0) {
    *pointer = nullptr;
    return somaMallocFromPoolAsync(pointer, bytes == 0 ? granule_ : bytes, pool(), stream);
  }

  std::uint64_t reserved() const { return pool_u64(pool(), somaMemPoolAttrReservedMemCurrent); }
  /// Bytes in use by the test's own allocations (the headroom left out).
  std::uint64_t used() const {
    return pool_u64(pool(), somaMemPoolAttrUsedMemCurrent) - headroom_bytes_;
  }

  /// Asserts that the pool grew since reserved() was `before`: by one granule on cpu (it
  /// commits what a one-granule request needs), by its growth step elsewhere.
  void expect_grew(std::uint64_t before, const char* why) const {
    const std::uint64_t now = reserved();
    EXPECT_GT(now, before) << "the pool did not grow although " << why;
    if (on_cpu_backend()) {
      EXPECT_EQ(now, before + granule_) << why;
    }
  }

  /// A writer of `fill` over [block, block + bytes), owned by the fixture.
  writer& make_writer(void* block, std::size_t bytes, unsigned char fill) {
    if (static_cast<int>(writers_.size()) == kMaxWriters) std::abort();  // raise kMaxWriters
    auto w = std::make_unique<writer>();
    w->block = block;
    w->bytes = bytes;
    w->fill = fill;
    w->token = unique_token();
    w->slot = static_cast<int>(writers_.size());
    w->sentinel = static_cast<std::uint32_t*>(sentinels_) + w->slot;
    writers_.push_back(std::move(w));
    return *writers_.back();
  }

  /// A probe of [block, block + bytes) that then writes `fill`, owned by the fixture.
  probe& make_probe(void* block, std::size_t bytes, unsigned char fill) {
    probes_.push_back(std::make_unique<probe>(block, bytes, fill,
                                              static_cast<const std::uint32_t*>(sentinels_),
                                              kMaxWriters * sizeof(std::uint32_t)));
    return *probes_.back();
  }

  /// The start of most tests: freed_, one granule allocated on A (in a growable pool the
  /// headroom is taken right after it), then, with `hold`, A held behind the gate, and on A a
  /// writer over freed_ (a_wrote()) and the free of freed_. With `hold` that free is pending.
  void free_on_a(bool hold) {
    SOMA_ASSERT_OK(allocate(&freed_, a_));
    if (growable_) {
      ASSERT_NO_FATAL_FAILURE(take_headroom());
    }
    if (hold) {
      SOMA_ASSERT_OK(gate_.hold(a_));
    }
    a_wrote_ = &make_writer(freed_, granule_, 0xA1);
    SOMA_ASSERT_OK(launch_writer(a_, *a_wrote_));
    SOMA_ASSERT_OK(somaFreeAsync(freed_, a_));
  }
  /// The writer free_on_a enqueued on A before the free.
  const writer& a_wrote() const { return *a_wrote_; }

  /// Records an event on `from` now and makes `waiter` wait on it: waiter's clock covers all
  /// that `from` enqueued so far. The event lives as long as the fixture.
  void wait_for(somaStream_t waiter, somaStream_t from) {
    unique_event& event = events_.emplace_back();
    SOMA_ASSERT_OK(somaEventRecord(event, from));
    SOMA_ASSERT_OK(somaStreamWaitEvent(waiter, event, 0));
  }

  /// Allocates one granule on `stream` into *q and asserts how it was served: by `freed`
  /// without growth when `reused` (`why_reused`), else by memory the pool grew for, because
  /// `why_grew`.
  void expect_served(void** q, somaStream_t stream, const void* freed, bool reused,
                     const char* why_reused, const char* why_grew) {
    const std::uint64_t reserved_before = reserved();
    SOMA_ASSERT_OK(allocate(q, stream));
    if (reused) {
      EXPECT_EQ(*q, freed) << why_reused;
      EXPECT_EQ(reserved(), reserved_before) << why_reused;
    } else {
      EXPECT_NE(*q, freed) << why_grew;
      expect_grew(reserved_before, why_grew);
    }
  }

  /// Enqueues on `stream` a probe of one granule at `block` that then writes `fill`, asserts
  /// that it is held back (`why`) until the gate opens, and that once `stream` is synchronized
  /// it ran after A's writer (a_wrote()). `between`, if given, is the marker of a stream that
  /// `stream` waits on and that waits on A: it must be held back as well.
  void expect_probe_waits_for_a(somaStream_t stream, void* block, unsigned char fill,
                                const char* why, const stream_flag* between = nullptr) {
    probe& stream_probe = make_probe(block, granule_, fill);
    SOMA_ASSERT_OK(launch_probe(stream, stream_probe));
    expect_held_back(stream, stream_probe.ran, why);
    if (between != nullptr) {
      EXPECT_FALSE(between->is_set()) << "the stream between ran before A";
    }
    gate_.open();
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
    EXPECT_TRUE(stream_probe.ran.is_set());
    EXPECT_TRUE(stream_probe.saw(a_wrote())) << "the probe ran before A's work on the block";
  }

  /// free_on_a without the gate, then waits until A ran past the free (a marker enqueued on A
  /// after it is set) without synchronizing or querying anything: the free has completed, and
  /// nothing proved it to the pool.
  void complete_free_on_a() {
    ASSERT_NO_FATAL_FAILURE(free_on_a(/*hold=*/false));
    const stream_flag& a_after_free = flags_.emplace_back();
    SOMA_ASSERT_OK(launch_marker(a_, a_after_free));
    ASSERT_TRUE(wait_completed(a_after_free)) << "A did not run";
  }

  /// Enqueues on `stream` a probe of one granule at `block` that then writes `fill`, asserts
  /// that it runs (`why`: nothing it waits for is pending) and found A's writer's work done.
  void expect_probe_runs_after_a(somaStream_t stream, void* block, unsigned char fill,
                                 const char* why) {
    probe& stream_probe = make_probe(block, granule_, fill);
    SOMA_ASSERT_OK(launch_probe(stream, stream_probe));
    expect_runs(stream, stream_probe.ran, why);
    EXPECT_TRUE(stream_probe.saw(a_wrote()));
  }

  /// Enqueues a marker on A behind all A has, then destroys A (somaStreamDestroy); its queued
  /// work still runs. Returns the marker.
  const stream_flag& mark_and_destroy_a() {
    const stream_flag& a_done = flags_.emplace_back();
    SOMA_EXPECT_OK(launch_marker(a_, a_done));
    a_.reset();
    return a_done;
  }

  /// Enqueues a marker on stream, then frees block there (a free after work, so pending until
  /// the marker runs), then destroys the stream. Returns the marker.
  const stream_flag& free_and_destroy(unique_stream& stream, void* block) {
    const stream_flag& done = flags_.emplace_back();
    SOMA_EXPECT_OK(launch_marker(stream, done));
    SOMA_EXPECT_OK(somaFreeAsync(block, stream));
    stream.reset();
    return done;
  }

  /// Asserts that a one-granule request on B is served by freed_ (`why` if it is not).
  void expect_b_reuses_freed(const char* why) {
    void* q = nullptr;
    const somaError_t status = allocate(&q, b_);
    SOMA_EXPECT_OK(status) << why;
    EXPECT_EQ(q, freed_) << why;
    if (status == somaSuccess) {
      SOMA_ASSERT_OK(somaFreeAsync(q, b_));
    }
    SOMA_ASSERT_OK(somaStreamSynchronize(b_));
  }

  /// The end of many tests: opens the gate, frees each {pointer, stream} and synchronizes the
  /// device.
  void open_gate_and_free(std::initializer_list<std::pair<void*, somaStream_t>> frees) {
    gate_.open();
    for (const auto& [pointer, stream] : frees) SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
    SOMA_ASSERT_OK(somaDeviceSynchronize());
  }

  /// Allocates two granules on A, *x then *y right after it, and takes the headroom.
  void allocate_adjacent_on_a(void** x, void** y) {
    SOMA_ASSERT_OK(allocate(x, a_));
    SOMA_ASSERT_OK(allocate(y, a_));
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(*y), reinterpret_cast<std::uintptr_t>(*x) + granule_)
        << "the test needs X and Y adjacent";
    ASSERT_NO_FATAL_FAILURE(take_headroom());
  }

  /// Asserts that work enqueued on stream before `ran` is held back: `ran` is not set after
  /// kHeldBackWindow, and the stream reports NotReady.
  static void expect_held_back(somaStream_t stream, const stream_flag& ran, const char* why) {
    std::this_thread::sleep_for(kHeldBackWindow);
    EXPECT_FALSE(ran.is_set()) << "stream work ran although " << why;
    EXPECT_EQ(somaStreamQuery(stream), somaErrorNotReady) << why;
  }

  /// Asserts that work enqueued on stream before `ran` runs and the stream drains (nothing
  /// made it wait on a held stream).
  static void expect_runs(somaStream_t stream, const stream_flag& ran, const char* why) {
    EXPECT_TRUE(ran.wait()) << "stream work did not run although " << why;
    EXPECT_TRUE(drains(stream)) << "the stream did not drain although " << why;
  }

  std::size_t granule_ = 0;
  std::unique_ptr<unique_pool> pool_;
  unique_stream a_;
  unique_stream b_;
  unique_stream c_;
  stream_gate gate_;
  void* freed_ = nullptr;  // the block free_on_a freed on A

 private:
  void* sentinels_ = nullptr;  // kMaxWriters words of device memory, one per writer
  void* headroom_ = nullptr;   // what take_headroom allocated
  std::uint64_t headroom_bytes_ = 0;
  bool growable_ = false;
  const writer* a_wrote_ = nullptr;
  std::deque<unique_event> events_;
  std::deque<stream_flag> flags_;
  std::deque<std::unique_ptr<writer>> writers_;
  std::deque<std::unique_ptr<probe>> probes_;
};

}  // namespace soma_test::reuse
