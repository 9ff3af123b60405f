// Shared by the S11 reuse-policy tests (reuse_policies_test.cpp, reuse_rules_test.cpp): the
// three flags, host tasks that write, probe and mark, and a fixture with streams A, B, C, a gate
// and an explicit pool of a few granules that keeps freed memory.
//
// Requires: the including binary links `soma` and GoogleTest.
#pragma once

#include <soma/soma.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "host_task.hpp"
#include "soma_test_util.hpp"
#include "stream_gate.hpp"

namespace soma_test::reuse {

// How long a test waits to see that a held-back host task does not run. A task that is not
// held back runs within microseconds; a correct implementation never runs it in this window.
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

/// A flag set by a host task; shared with the task so it may outlive the test's scope.
class task_flag {
 public:
  bool is_set() const { return value_->load(); }
  /// Waits until set; false on timeout.
  bool wait(std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!value_->load()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }
  std::shared_ptr<std::atomic<bool>> shared() const { return value_; }

 private:
  std::shared_ptr<std::atomic<bool>> value_ = std::make_shared<std::atomic<bool>>(false);
};

/// Enqueues on stream a host task that fills [pointer, pointer + bytes) with `fill` and then
/// sets `done`.
inline somaError_t launch_writer(somaStream_t stream, void* pointer, std::size_t bytes,
                          unsigned char fill, const task_flag& done) {
  return launch_host(stream, [pointer, bytes, fill, done = done.shared()] {
    std::memset(pointer, fill, bytes);
    done->store(true);
  });
}

/// Enqueues on stream a host task that records whether `prerequisite` was set when it started
/// (in `saw_prerequisite`), writes `fill` over the memory and then sets `ran`.
inline somaError_t launch_probe(somaStream_t stream, void* pointer, std::size_t bytes,
                         unsigned char fill, const task_flag& prerequisite, const task_flag& ran,
                         const task_flag& saw_prerequisite) {
  return launch_host(stream, [pointer, bytes, fill, prerequisite = prerequisite.shared(),
                              ran = ran.shared(), saw = saw_prerequisite.shared()] {
    saw->store(prerequisite->load());
    std::memset(pointer, fill, bytes);
    ran->store(true);
  });
}

/// Enqueues a host task that only sets `ran`.
inline somaError_t launch_marker(somaStream_t stream, const task_flag& ran) {
  return launch_host(stream, [ran = ran.shared()] { ran->store(true); });
}

/// Polls somaStreamQuery until it reports success (the stream drained); false on timeout.
inline bool drains(somaStream_t stream, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const somaError_t status = somaStreamQuery(stream);
    if (status == somaSuccess) return true;
    if (status != somaErrorNotReady || std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

/// Streams A, B, C on device 0, a gate to hold them, and an explicit pool on device 0 made by
/// make_pool. TearDown opens the gate before the base class synchronizes every device.
class reuse_fixture : public capi_test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(capi_test::SetUp());
    granule_ = granularity_bytes(0);
    ASSERT_GE(granule_, 4 * KiB);
  }

  void TearDown() override {
    gate_.open();
    capi_test::TearDown();
  }

  /// An explicit pool capped at `granules` granules that keeps freed memory.
  void make_pool(int granules, policies p) {
    pool_ = std::make_unique<unique_pool>(0, static_cast<std::size_t>(granules) * granule_);
    ASSERT_NE(pool_->get(), nullptr);
    SOMA_ASSERT_OK(set_pool_u64(*pool_, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
    SOMA_ASSERT_OK(set_policies(*pool_, p));
  }

  somaMemPool_t pool() const { return pool_->get(); }

  /// One allocation of `bytes` (default: one granule) from the pool on stream.
  somaError_t allocate(void** pointer, somaStream_t stream, std::size_t bytes = 0) {
    *pointer = nullptr;
    return somaMallocFromPoolAsync(pointer, bytes == 0 ? granule_ : bytes, pool(), stream);
  }

  std::uint64_t reserved() const { return pool_u64(pool(), somaMemPoolAttrReservedMemCurrent); }
  std::uint64_t used() const { return pool_u64(pool(), somaMemPoolAttrUsedMemCurrent); }

  /// Asserts that a host task enqueued on stream is held back: it has not run after
  /// kHeldBackWindow, and the stream reports NotReady.
  static void expect_held_back(somaStream_t stream, const task_flag& ran, const char* why) {
    std::this_thread::sleep_for(kHeldBackWindow);
    EXPECT_FALSE(ran.is_set()) << "a host task ran although " << why;
    EXPECT_EQ(somaStreamQuery(stream), somaErrorNotReady) << why;
  }

  /// Asserts that a host task enqueued on stream runs and the stream drains (nothing made it
  /// wait on a held stream).
  static void expect_runs(somaStream_t stream, const task_flag& ran, const char* why) {
    EXPECT_TRUE(ran.wait()) << "a host task did not run although " << why;
    EXPECT_TRUE(drains(stream)) << "the stream did not drain although " << why;
  }

  std::size_t granule_ = 0;
  std::unique_ptr<unique_pool> pool_;
  unique_stream a_;
  unique_stream b_;
  unique_stream c_;
  stream_gate gate_;
};

}  // namespace soma_test::reuse
