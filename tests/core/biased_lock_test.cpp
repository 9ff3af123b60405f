// biased_lock: the stream cache's lock (S11's same-stream reuse is its fast path). The bias
// is earned by a run of entries, taken away by any other thread, and earned again by whichever
// thread makes the next run; through all of it the lock excludes.
#include "core/biased_lock.hpp"
#include "core/stream_cache.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "cache_blocks.hpp"
#include "process_barrier_for_tests.hpp"

namespace {

using soma::detail::biased_lock;

using soma_test::real_barrier;

std::atomic<int> barriers_run{0};
bool counting_barrier() noexcept {
  barriers_run.fetch_add(1);
  return real_barrier();
}

/// Installs the process barrier for one test, and none after it.
class BiasedLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* why = soma_test::register_process_barrier()) GTEST_SKIP() << why;
    barriers_run = 0;
    biased_lock::use_process_barrier(&counting_barrier);
  }
  void TearDown() override { biased_lock::use_process_barrier(nullptr); }
};

void enter_times(biased_lock& lock, std::uint32_t times) {
  for (std::uint32_t i = 0; i < times; ++i) {
    const biased_lock::scope held(lock);
  }
}

/// An increment whose read and write lie 20 us apart, longer than a process barrier takes, so
/// that a thread taking the bias away meets the owner inside.
void slow_increment(std::uint64_t& counter) {
  const std::uint64_t read = counter;
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
  while (std::chrono::steady_clock::now() < until) {
  }
  counter = read + 1;
}

void on_other_thread(biased_lock& lock, std::uint32_t times) {
  std::thread other([&] { enter_times(lock, times); });
  other.join();
}

TEST(S11_BiasedLock, NoThreadIsBiasedWithoutAProcessBarrier) {
  biased_lock::use_process_barrier(nullptr);
  biased_lock lock;
  enter_times(lock, 3 * biased_lock::bias_after_entries);
  EXPECT_FALSE(lock.biased_to_this_thread());
  on_other_thread(lock, 1);
  EXPECT_EQ(lock.revocations(), 0u);
}

TEST_F(BiasedLockTest, ARunOfEntriesEarnsTheBiasAndItsEntriesAreBiased) {
  biased_lock lock;
  enter_times(lock, biased_lock::bias_after_entries - 1);
  EXPECT_FALSE(lock.biased_to_this_thread());
  enter_times(lock, 1);
  EXPECT_TRUE(lock.biased_to_this_thread());
  const biased_lock::entry biased = lock.lock();
  EXPECT_NE(biased, nullptr) << "the owner's entry is the biased one";
  lock.unlock(biased);
  // The shared entry stays open to the owner, and keeps its bias.
  lock.lock_shared();
  lock.unlock_shared();
  EXPECT_TRUE(lock.biased_to_this_thread());
  EXPECT_EQ(barriers_run.load(), 0);
}

TEST_F(BiasedLockTest, AnotherThreadTakesTheBiasAwayWithOneBarrier) {
  biased_lock lock;
  enter_times(lock, biased_lock::bias_after_entries);
  ASSERT_TRUE(lock.biased_to_this_thread());
  on_other_thread(lock, 1);
  EXPECT_FALSE(lock.biased_to_this_thread());
  EXPECT_EQ(lock.revocations(), 1u);
  EXPECT_EQ(barriers_run.load(), 1);
  const biased_lock::entry shared = lock.lock();
  EXPECT_EQ(shared, nullptr) << "the entry after a revocation is the shared one";
  lock.unlock(shared);
  // Earned back by another run.
  enter_times(lock, biased_lock::bias_after_entries);
  EXPECT_TRUE(lock.biased_to_this_thread());
}

TEST_F(BiasedLockTest, AShortRunEarnsNothingAndOthersEntriesBreakTheRun) {
  biased_lock lock;
  enter_times(lock, biased_lock::bias_after_entries - 1);
  on_other_thread(lock, 1);
  enter_times(lock, biased_lock::bias_after_entries - 1);
  EXPECT_FALSE(lock.biased_to_this_thread());
  EXPECT_EQ(lock.revocations(), 0u);
}

TEST_F(BiasedLockTest, AnotherThreadsRunEarnsTheBiasForIt) {
  biased_lock lock;
  enter_times(lock, biased_lock::bias_after_entries);
  bool other_biased = false;
  std::thread other([&] {
    enter_times(lock, biased_lock::bias_after_entries);
    other_biased = lock.biased_to_this_thread();
  });
  other.join();
  EXPECT_TRUE(other_biased);
  EXPECT_FALSE(lock.biased_to_this_thread());
  EXPECT_EQ(lock.revocations(), 1u);
  // The other thread has ended and its slot is nobody's: this thread takes the bias away on
  // entering.
  enter_times(lock, 1);
  EXPECT_EQ(lock.revocations(), 2u);
}

// A thread that ends gives its slot to a later thread; a lock biased to the ended thread is
// then entered by whichever thread took the slot, biased, and by any other after one barrier.
// (Threads made one after another usually get the ended one's slot.)
TEST_F(BiasedLockTest, AnEndedOwnersBiasIsTakenAwayOrInherited) {
  biased_lock lock;
  on_other_thread(lock, biased_lock::bias_after_entries);
  bool inherited = false;
  std::uint64_t revocations_seen = 0;
  std::thread later([&] {
    enter_times(lock, 1);
    inherited = lock.biased_to_this_thread();
    revocations_seen = lock.revocations();
  });
  later.join();
  // Either the later thread took the ended one's slot (no barrier) or it took the bias away.
  EXPECT_EQ(revocations_seen, inherited ? 0u : 1u);
}

// Rounds of: the first thread alone, long enough to earn the bias, then every thread at once,
// so that revocations meet the owner inside. A plain counter incremented inside must count
// every entry.
TEST_F(BiasedLockTest, ExcludesWhileTheBiasIsEarnedAndTakenAway) {
  biased_lock lock;
  std::uint64_t counter = 0;  // guarded by lock, deliberately not atomic
  constexpr int threads = 4;
  constexpr int rounds = 10;
  constexpr std::uint32_t alone = biased_lock::bias_after_entries + 500;
  constexpr std::uint32_t together = 3000;
  std::barrier phase(threads);
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int r = 0; r < rounds; ++r) {
        if (t == 0) {
          for (std::uint32_t i = 0; i < alone; ++i) {
            const biased_lock::scope held(lock);
            ++counter;
          }
        }
        phase.arrive_and_wait();
        for (std::uint32_t i = 0; i < together; ++i) {
          const biased_lock::scope held(lock);
          if (t == 0 && i < 50) {
            slow_increment(counter);
          } else {
            ++counter;
          }
        }
        phase.arrive_and_wait();
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(counter, std::uint64_t{rounds} * (alone + threads * together));
  // Each round's run earned the bias and the others took it away once.
  EXPECT_EQ(lock.revocations(), std::uint64_t{rounds});
  EXPECT_EQ(barriers_run.load(), rounds);
}

// The stream cache over the biased lock: the stream's thread frees and re-allocates (biased,
// after its first run), while another thread drains the cache now and then as the pool does
// for other streams' misses. No block is lost or handed out twice.
TEST_F(BiasedLockTest, AStreamsPairsAndAnotherThreadsDrainsKeepEveryBlock) {
  using soma::detail::block;
  using soma::detail::stream_cache;
  stream_cache cache;
  constexpr std::size_t blocks = 64;
  std::vector<std::unique_ptr<block>> storage;
  std::vector<block*> held;
  for (std::size_t i = 0; i < blocks; ++i) {
    storage.push_back(std::make_unique<block>());
    storage.back()->address = 0x1000000 + i * 0x10000;
    storage.back()->size_bytes = 256 * (1 + i % 4);
    held.push_back(storage.back().get());
  }
  std::mutex returned_mutex;  // what a drain took goes back to the stream's thread
  std::vector<block*> returned;
  std::atomic<bool> done{false};
  std::atomic<int> drains{0};
  std::thread drainer([&] {
    while (!done.load()) {
      const std::vector<block*> taken = soma_test::drained(cache);
      {
        const std::lock_guard lock(returned_mutex);
        returned.insert(returned.end(), taken.begin(), taken.end());
      }
      drains.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  // Until ten drains have met a biased owner (or a time limit).
  int biased_rounds = 0;
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int drains_seen = drains.load(); std::chrono::steady_clock::now() < limit;) {
    {
      const std::lock_guard lock(returned_mutex);
      held.insert(held.end(), returned.begin(), returned.end());
      returned.clear();
    }
    std::vector<std::size_t> sizes;
    for (block* b : held) {
      sizes.push_back(b->size_bytes);
      ASSERT_TRUE(cache.push(b));
    }
    held.clear();
    for (std::size_t size : sizes) {
      if (block* b = cache.pop(size)) held.push_back(b);  // a drain may have taken it
    }
    if (cache.lock().biased_to_this_thread() && drains.load() != drains_seen) {
      drains_seen = drains.load();
      if (++biased_rounds == 10) break;
    }
  }
  done = true;
  drainer.join();
  held.insert(held.end(), returned.begin(), returned.end());
  for (block* b : soma_test::drained(cache)) held.push_back(b);
  const std::set<block*> all(held.begin(), held.end());
  EXPECT_EQ(all.size(), blocks) << "a block lost";
  EXPECT_EQ(held.size(), blocks) << "a block handed out twice";
  EXPECT_EQ(biased_rounds, 10) << "the stream's thread did not keep earning the bias";
  EXPECT_GE(cache.lock().revocations(), 9u);
}

}  // namespace
