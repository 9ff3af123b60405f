// Objects used from several threads at once (soma.h: every call is thread-safe). Each test
// reproduces a defect that was found by running these patterns under the sanitizers:
// - S2/S11: a stream destroyed on one thread while another creates streams must not hand its
//   cached blocks to the new stream (they were freed on the old stream, with no ordering
//   against the new one);
// - S11/S12: one event recorded on one thread while others wait on, query and synchronize it;
// - S4/S5: the current pool destroyed while other threads allocate from it (legal in CUDA: the
//   default pool becomes current, and allocations in flight land in one pool or the other).
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "host_task.hpp"
#include "soma_test_util.hpp"

namespace {

using namespace soma_test;

class S2_S11_StreamDestroy : public capi_test {};
class S11_S12_EventThreads : public capi_test {};
class S4_S5_CurrentPoolDestroy : public capi_test {};

// A block freed on stream A (whose free has not run yet, because A is held) must not be handed
// to a stream B created after A is destroyed, whatever slot B gets: B has no ordering against
// A's free. Under cross-stream rules B may only take it once the free is known complete.
TEST_F(S2_S11_StreamDestroy, ANewStreamNeverTakesTheDestroyedStreamsPendingBlock) {
  unique_pool pool(0);
  // Only same-stream reuse and proven frees: nothing else lets B take A's block.
  for (auto attr : {somaMemPoolReuseFollowEventDependencies, somaMemPoolReuseAllowOpportunistic,
                    somaMemPoolReuseAllowInternalDependencies}) {
    SOMA_ASSERT_OK(set_pool_int(pool, attr, 0));
  }
  for (int round = 0; round < 50; ++round) {
    somaStream_t a = nullptr;
    SOMA_ASSERT_OK(somaStreamCreate(&a));
    std::atomic<bool> release{false};
    SOMA_ASSERT_OK(launch_host(a, [&release] {
      while (!release.load()) std::this_thread::yield();
    }));
    void* freed_on_a = nullptr;
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&freed_on_a, 4096, pool, a));
    SOMA_ASSERT_OK(somaFreeAsync(freed_on_a, a));  // pending: a is held
    SOMA_ASSERT_OK(somaStreamDestroy(a));
    unique_stream b;
    void* taken_by_b = nullptr;
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&taken_by_b, 4096, pool, b));
    EXPECT_NE(taken_by_b, freed_on_a) << "round " << round
                                      << ": stream b took memory whose free "
                                         "on the destroyed stream a has not run";
    release.store(true);
    SOMA_ASSERT_OK(somaFreeAsync(taken_by_b, b));
    SOMA_ASSERT_OK(somaDeviceSynchronize());
  }
}

// The same race with threads: streams destroyed (with work still pending) while other threads
// create streams; each new stream's allocation, written by its own stream, keeps its bytes.
TEST_F(S2_S11_StreamDestroy, StreamsCreatedWhileOthersAreDestroyedKeepTheirBytes) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 300;
  constexpr std::size_t kBytes = 4096;
  std::atomic<int> corrupted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto* host = static_cast<unsigned char*>(nullptr);
      SOMA_ASSERT_OK(somaMallocHost(reinterpret_cast<void**>(&host), kBytes));
      for (int round = 0; round < kRounds; ++round) {
        somaStream_t s = nullptr;
        SOMA_ASSERT_OK(somaStreamCreate(&s));
        void* p = nullptr;
        SOMA_ASSERT_OK(somaMallocAsync(&p, kBytes, s));
        const int value = (t * 31 + round) & 0xff;
        SOMA_ASSERT_OK(somaMemsetAsync(p, value, kBytes, s));
        SOMA_ASSERT_OK(somaMemcpyAsync(host, p, kBytes, somaMemcpyDeviceToHost, s));
        SOMA_ASSERT_OK(somaStreamSynchronize(s));
        for (std::size_t i = 0; i < kBytes; ++i) {
          if (host[i] != static_cast<unsigned char>(value)) {
            corrupted.fetch_add(1);
            break;
          }
        }
        // Work still pending on s when it is destroyed: a late write, then the free. Whoever
        // takes this block next must be ordered after both.
        SOMA_ASSERT_OK(
            launch_host(s, [] { std::this_thread::sleep_for(std::chrono::microseconds(200)); }));
        SOMA_ASSERT_OK(somaMemsetAsync(p, 0xEE, kBytes, s));
        SOMA_ASSERT_OK(somaFreeAsync(p, s));
        SOMA_ASSERT_OK(somaStreamDestroy(s));
      }
      SOMA_ASSERT_OK(somaFreeHost(host));
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(corrupted.load(), 0);
  SOMA_EXPECT_OK(somaDeviceSynchronize());
  EXPECT_EQ(pool_u64(current_pool(0), somaMemPoolAttrUsedMemCurrent), 0u);
}

// The same, watched directly: with every cross-stream reuse rule off, a block freed on a
// destroyed stream whose work has not run may go to no other stream. Idle pools lengthen each
// destroy's drain, which widens the window in which a new stream could take the slot.
TEST_F(S2_S11_StreamDestroy, NoStreamTakesABlockWhoseFreeOnADestroyedStreamIsPending) {
  constexpr int kThreads = 6;
  constexpr int kRounds = 200;
  unique_pool pool(0);
  for (auto attr : {somaMemPoolReuseFollowEventDependencies, somaMemPoolReuseAllowOpportunistic,
                    somaMemPoolReuseAllowInternalDependencies}) {
    SOMA_ASSERT_OK(set_pool_int(pool, attr, 0));
  }
  std::vector<std::unique_ptr<unique_pool>> idle;
  for (int i = 0; i < 48; ++i) idle.push_back(std::make_unique<unique_pool>(0));
  std::mutex pending_mutex;
  std::vector<void*> pending;  // freed on a destroyed stream, free not yet run
  std::atomic<int> taken_early{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int round = 0; round < kRounds; ++round) {
        somaStream_t s = nullptr;
        SOMA_ASSERT_OK(somaStreamCreate(&s));
        void* p = nullptr;
        SOMA_ASSERT_OK(somaMallocFromPoolAsync(&p, 4096, pool, s));
        {
          std::lock_guard lock(pending_mutex);
          if (std::find(pending.begin(), pending.end(), p) != pending.end()) taken_early++;
          pending.push_back(p);
        }
        SOMA_ASSERT_OK(
            launch_host(s, [] { std::this_thread::sleep_for(std::chrono::microseconds(100)); }));
        SOMA_ASSERT_OK(somaFreeAsync(p, s));
        SOMA_ASSERT_OK(launch_host(s, [&pending_mutex, &pending, p] {
          std::lock_guard lock(pending_mutex);
          pending.erase(std::find(pending.begin(), pending.end(), p));
        }));
        SOMA_ASSERT_OK(somaStreamDestroy(s));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  SOMA_EXPECT_OK(somaDeviceSynchronize());
  EXPECT_EQ(taken_early.load(), 0) << "a new stream took a block whose free had not run";
}

TEST_F(S11_S12_EventThreads, OneEventRecordedWhileOtherThreadsWaitQueryAndSynchronize) {
  constexpr int kRounds = 2000;
  unique_event event;
  unique_stream recorder_a;
  unique_stream recorder_b;
  std::atomic<bool> stop{false};
  std::thread recorder([&] {
    for (int i = 0; i < kRounds; ++i) {
      EXPECT_EQ(somaEventRecord(event, i % 2 == 0 ? recorder_a.get() : recorder_b.get()),
                somaSuccess);
    }
    stop.store(true);
  });
  std::vector<std::thread> users;
  for (int u = 0; u < 3; ++u) {
    users.emplace_back([&, u] {
      unique_stream waiter;
      while (!stop.load()) {
        if (u == 0) {
          EXPECT_EQ(somaStreamWaitEvent(waiter, event, 0), somaSuccess);
        } else if (u == 1) {
          const somaError_t state = somaEventQuery(event);
          EXPECT_TRUE(state == somaSuccess || state == somaErrorNotReady) << state;
        } else {
          EXPECT_EQ(somaEventSynchronize(event), somaSuccess);
        }
      }
      EXPECT_EQ(somaStreamSynchronize(waiter), somaSuccess);
    });
  }
  recorder.join();
  for (auto& user : users) user.join();
  SOMA_EXPECT_OK(somaDeviceSynchronize());
}

TEST_F(S4_S5_CurrentPoolDestroy, DestroyingTheCurrentPoolWhileOthersAllocateIsSafe) {
  constexpr int kRounds = 100;
  constexpr int kAllocators = 2;
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> allocators;
  for (int a = 0; a < kAllocators; ++a) {
    allocators.emplace_back([&] {
      unique_stream s;
      while (!stop.load()) {
        void* p = nullptr;
        if (somaMallocAsync(&p, 4096, s) != somaSuccess) {
          failures.fetch_add(1);
          continue;
        }
        if (somaFreeAsync(p, s) != somaSuccess) failures.fetch_add(1);
        somaMemPool_t current = nullptr;
        if (somaDeviceGetMemPool(&current, 0) != somaSuccess) failures.fetch_add(1);
      }
      EXPECT_EQ(somaStreamSynchronize(s), somaSuccess);
    });
  }
  for (int round = 0; round < kRounds; ++round) {
    somaMemPool_t pool = nullptr;
    const somaMemPoolProps props = pool_props(0);
    SOMA_ASSERT_OK(somaMemPoolCreate(&pool, &props));
    SOMA_ASSERT_OK(somaDeviceSetMemPool(0, pool));
    std::this_thread::yield();
    SOMA_ASSERT_OK(somaMemPoolDestroy(pool));  // the default pool becomes current again
  }
  stop.store(true);
  for (auto& thread : allocators) thread.join();
  EXPECT_EQ(failures.load(), 0) << last_message();
  EXPECT_EQ(current_pool(0), default_pool(0));
  SOMA_EXPECT_OK(somaDeviceSynchronize());
  EXPECT_EQ(pool_u64(default_pool(0), somaMemPoolAttrUsedMemCurrent), 0u);
}

}  // namespace
