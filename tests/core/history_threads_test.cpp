// Memory history with threads racing (S11, docs/observability.md): threads allocate and free on
// streams of their own at once, loop blocks through their caches (runs), and hand blocks to each
// other, so that one block's events go into several logs, written at the same time as other
// threads claim chunks of the ring. In a ring that holds everything, every event made reads back
// once, each address's events in the order made; in rings too small for it (a ring of 512
// events, and one of 16 with more logs than it has chunks, so that claims fail and events are
// dropped), each address's events that are kept still read back in that order.
// history_model_test makes the same checks with one thread at a time. What these cannot see: a
// run left armed where a claim fails (history_log::note_slow ends it first) would miscount the
// next chunk's room and the events dropped, not reorder any.
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "core/biased_lock.hpp"
#include "core/history_clock.hpp"
#include "core/memory_history.hpp"
#include "core/pool.hpp"
#include "history_address_order.hpp"
#include "history_test_pool.hpp"
#include "process_barrier_for_tests.hpp"

namespace {

using soma::detail::block;
using soma::detail::history_clock;
using soma::detail::history_event;
using soma::detail::history_kind;
using soma::detail::memory_history;
using soma::detail::pool;
using soma::detail::stream_timeline;

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;
constexpr int thread_count = 4;

/// An event as made: what must read back at its address.
struct made_event {
  std::uint64_t address = 0;
  history_kind kind = history_kind::allocate;
  std::uint64_t bytes = 0;
  std::uint64_t stream = 0;
};

/// A thread's mailbox for round trips: another thread posts a block (`in`) and waits; this one
/// frees it on one of its streams, allocates the size again there (that stream's cache gives the
/// block back) and returns what it got (`out`).
struct mailbox {
  std::mutex mutex;
  bool busy = false;  // a round trip posted here is not yet over
  block* in = nullptr;
  std::size_t bytes = 0;
  block* out = nullptr;
};

class racing_threads {
 public:
  /// Each thread records on streams_per_thread streams of its own (a cache, so a log, each).
  racing_threads(std::uint32_t seed, bool biased, std::size_t capacity, int streams_per_thread = 1)
      : streams_per_thread_(streams_per_thread), capacity_(capacity) {
    if (biased) soma::detail::biased_lock::use_process_barrier(&soma_test::real_barrier);
    pool_ = soma_test::history_test_pool("racing", 64 * MiB);
    for (int i = 0; i < thread_count * streams_per_thread; ++i) {
      auto& s =
          streams_.emplace_back(std::make_unique<stream_timeline>(static_cast<std::uint32_t>(i)));
      s->set_history_name(0x200 + static_cast<std::uint64_t>(i));
    }
    for (int t = 0; t < thread_count; ++t)
      randoms_.emplace_back(seed * 131 + static_cast<std::uint32_t>(t));
    memory_history::process().start(capacity_);
  }
  ~racing_threads() {
    memory_history::process().stop();
    for (block* b : handed_) pool_->free(b, *streams_[0]);
    pool_.reset();
    soma::detail::biased_lock::use_process_barrier(nullptr);
  }
  racing_threads(const racing_threads&) = delete;
  racing_threads& operator=(const racing_threads&) = delete;

  void run(int steps) {
    std::vector<std::thread> threads;
    for (int t = 0; t < thread_count; ++t) {
      threads.emplace_back([this, t, steps] {
        work(t, steps);
        // Round trips of the others still need this thread until they are all done.
        done_.fetch_add(1);
        while (done_.load() < thread_count) {
          serve(t);
          std::this_thread::yield();
        }
      });
    }
    for (std::thread& t : threads) t.join();
  }

  /// Every event read back once, with its fields, each address's in the order made.
  void check_exactly() const {
    std::uint64_t dropped = 0;
    const std::vector<history_event> events = allocations_and_frees(&dropped);
    ASSERT_EQ(dropped, 0u);
    ASSERT_EQ(events.size(), made_.size()) << "every event made, read back once";
    soma_test::match_by_address(events, made_, /*exact=*/true, same);
    EXPECT_GT(made_.size(), 20000u) << "the threads made events enough to judge";
  }
  /// Each address's kept events in the order made, some left out.
  void check_with_drops() const {
    std::uint64_t dropped = 0;
    const std::vector<history_event> events = allocations_and_frees(&dropped);
    soma_test::match_by_address(events, made_, /*exact=*/false, same);
    EXPECT_GT(events.size(), 0u);
    EXPECT_GT(dropped, 0u) << "the ring was too small for them";
  }

 private:
  std::vector<history_event> allocations_and_frees(std::uint64_t* dropped) const {
    std::vector<history_event> kept;
    for (const history_event& e : memory_history::process().events(dropped)) {
      if (e.kind == history_kind::allocate || e.kind == history_kind::free) kept.push_back(e);
    }
    return kept;
  }
  static bool same(const history_event& e, const made_event& m) {
    return e.kind == m.kind && e.bytes == m.bytes && e.stream == m.stream;
  }

  /// One thread: loops on one of its streams (runs), allocations kept a while, blocks handed to
  /// the others and blocks taken from them, freed on one of its streams (into that stream's
  /// cache, whose next allocation of the size takes it back: one block's events in several
  /// logs).
  void work(int thread, int steps) {
    auto pick = [&](int n) { return this->pick(thread, n); };
    std::vector<block*> kept;
    static constexpr std::size_t sizes[] = {4 * KiB, 4 * KiB, 8 * KiB, 100, 64 * KiB};
    for (int i = 0; i < steps; ++i) {
      const stream_timeline& mine = own_stream(thread);
      const std::size_t bytes = sizes[pick(static_cast<int>(std::size(sizes)))];
      const int what = pick(100);
      if (what < 40) {
        for (int k = 0, pairs = 1 + pick(30); k < pairs; ++k) free(allocate(mine, bytes), mine);
      } else if (what < 60) {
        kept.push_back(allocate(mine, bytes));
      } else if (what < 75 && !kept.empty()) {
        const std::size_t index = static_cast<std::size_t>(pick(static_cast<int>(kept.size())));
        free(kept[index], mine);
        kept.erase(kept.begin() + static_cast<std::ptrdiff_t>(index));
      } else if (what < 88) {
        const std::lock_guard lock(handed_mutex_);
        handed_.push_back(allocate(mine, bytes));
      } else if (what < 93) {
        round_trip(thread, mine, bytes, pick(thread_count - 1), 1 + pick(10));
      } else if (what < 99) {
        block* taken = nullptr;
        {
          const std::lock_guard lock(handed_mutex_);
          if (!handed_.empty()) {
            taken = handed_.front();
            handed_.pop_front();
          }
        }
        if (taken != nullptr) free(taken, mine);
      } else {
        history_clock::advance();
      }
    }
    for (block* b : kept) free(b, own_stream(thread));
  }
  int pick(int thread, int n) {
    return static_cast<int>(randoms_[static_cast<std::size_t>(thread)]() %
                            static_cast<std::uint32_t>(n));
  }
  const stream_timeline& own_stream(int thread) {
    return *streams_[static_cast<std::size_t>(thread * streams_per_thread_ +
                                              pick(thread, streams_per_thread_))];
  }
  /// A loop's block, left taken, sent through another thread's stream and cache and freed on
  /// this thread's stream again on its return: one block's events in two logs, this thread's
  /// run on it not ended by an event of its own (unless it serves a round trip meanwhile).
  void round_trip(int thread, const stream_timeline& mine, std::size_t bytes, int other,
                  int pairs) {
    for (int k = 0; k < pairs; ++k) free(allocate(mine, bytes), mine);
    block* b = allocate(mine, bytes);
    mailbox& box = mailboxes_[static_cast<std::size_t>((thread + 1 + other) % thread_count)];
    {
      const std::lock_guard lock(box.mutex);
      if (box.busy) {
        free(b, mine);
        return;
      }
      box.busy = true;
      box.in = b;
      box.bytes = bytes;
    }
    block* back = nullptr;
    while (back == nullptr) {
      {
        const std::lock_guard lock(box.mutex);
        if (box.out != nullptr) {
          back = box.out;
          box.out = nullptr;
          box.busy = false;
        }
      }
      if (back == nullptr) {
        serve(thread);
        std::this_thread::yield();
      }
    }
    free(back, mine);
  }
  /// Serves a round trip posted to this thread, if any.
  void serve(int thread) {
    mailbox& box = mailboxes_[static_cast<std::size_t>(thread)];
    block* b = nullptr;
    std::size_t bytes = 0;
    {
      const std::lock_guard lock(box.mutex);
      b = box.in;
      bytes = box.bytes;
      box.in = nullptr;
    }
    if (b == nullptr) return;
    const stream_timeline& mine = own_stream(thread);
    free(b, mine);
    block* again = allocate(mine, bytes);
    const std::lock_guard lock(box.mutex);
    box.out = again;
  }
  block* allocate(const stream_timeline& s, std::size_t bytes) {
    auto taken = pool_->allocate(bytes, s);
    EXPECT_TRUE(taken.ok()) << taken.error().message();
    if (!taken.ok())
      std::abort();  // the pool never runs out here; a failure leaves nothing to free
    note({taken.value()->address, history_kind::allocate, bytes, s.history_name()});
    return taken.value();
  }
  /// The free is noted first: once in the cache, another thread may take the block at once.
  void free(block* b, const stream_timeline& s) {
    note({b->address, history_kind::free, b->requested_bytes, s.history_name()});
    pool_->free(b, s);
  }
  void note(const made_event& e) {
    const std::lock_guard lock(made_mutex_);
    made_.push_back(e);
  }

  int streams_per_thread_;
  std::vector<std::mt19937> randoms_;  // a thread's own
  std::size_t capacity_;
  std::vector<std::unique_ptr<stream_timeline>> streams_;
  std::unique_ptr<pool> pool_;
  std::mutex handed_mutex_;
  std::deque<block*> handed_;  // blocks one thread allocated for another to free
  mailbox mailboxes_[thread_count];
  std::atomic<int> done_{0};
  std::mutex made_mutex_;
  std::vector<made_event> made_;  // in the order made at each address
};

TEST(HistoryThreads, S11_RacingThreadsEventsReadBackOnceInEachAddresssOrder) {
  for (std::uint32_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE(seed);
    racing_threads model(seed, false, std::size_t{1} << 20);
    model.run(3000);
    model.check_exactly();
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(HistoryThreads, S11_RacingThreadsEventsReadBackOnceWithTheCacheLocksBiased) {
  if (const char* why = soma_test::register_process_barrier()) GTEST_SKIP() << why;
  for (std::uint32_t seed = 11; seed <= 16; ++seed) {
    SCOPED_TRACE(seed);
    racing_threads model(seed, true, std::size_t{1} << 20);
    model.run(3000);
    model.check_exactly();
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(HistoryThreads, S11_RacingThreadsInRingsTooSmallKeepEachAddresssOrder) {
  // 512 events: chunks taken over from their old writers while these go on writing; 16 events
  // with 24 streams a thread: 96 logs and 4 threads want more chunks than the 4 and the 64 spare
  // (history_ring::spare_chunks) the ring has, so claims fail and events are dropped while other
  // threads write.
  for (const auto& [capacity, streams] : {std::pair{std::size_t{512}, 1}, {std::size_t{16}, 24}}) {
    for (std::uint32_t seed = 21; seed <= 23; ++seed) {
      SCOPED_TRACE(::testing::Message() << "ring " << capacity << ", seed " << seed);
      racing_threads model(seed, false, capacity, streams);
      model.run(3000);
      model.check_with_drops();
      if (::testing::Test::HasFailure()) return;
    }
  }
}

}  // namespace
