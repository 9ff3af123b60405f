// Memory history against a model (S11, docs/observability.md): random allocations and frees on
// several streams, in and out of scopes, across beats, synchronizes, streams forgotten and
// replaced, other threads' turns and restarts of recording, with the runs of the stream caches'
// logs forming wherever a block comes back. Every event made must read back, once, with its
// kind, bytes, stream and label; each address's events in the order they were made; each
// thread's events in the order it made them.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <thread>
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

/// An event as the model expects it.
struct made_event {
  int thread = 0;  // 0: the test's own; n > 0: the n-th other thread
  history_kind kind = history_kind::allocate;
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  std::uint64_t stream = 0;
  std::uint32_t label = 0;
};

struct live_block {
  block* b = nullptr;
  std::uint32_t label = 0;  // its allocation's scope label
};

/// The pool, its streams and what the model says was made.
class history_model {
 public:
  history_model(std::uint32_t seed, bool biased, std::size_t capacity, int streams = 3)
      : random_(seed), capacity_(capacity), streams_in_use_(streams) {
    if (biased) soma::detail::biased_lock::use_process_barrier(&soma_test::real_barrier);
    pool_ = soma_test::history_test_pool("model", 16 * MiB);
    for (int slot = 0; slot < streams_in_use_; ++slot) add_stream(static_cast<std::uint32_t>(slot));
    memory_history::process().start(capacity_);
    labels_ = {memory_history::process().label("forward"),
               memory_history::process().label("backward"),
               memory_history::process().label("optimizer")};
  }
  ~history_model() {
    memory_history::process().stop();
    while (memory_history::pop_scope()) {
    }
    for (const live_block& l : live_) pool_->free(l.b, *current_[0]);
    pool_.reset();  // before the streams its blocks may name
    soma::detail::biased_lock::use_process_barrier(nullptr);
  }
  history_model(const history_model&) = delete;
  history_model& operator=(const history_model&) = delete;

  /// One random step.
  void step() {
    const int what = pick(100);
    if (what < 25) {
      allocate(pick_stream(), 0);
    } else if (what < 45) {
      free_one(0);
    } else if (what < 75) {
      loop(1 + pick(40), 0);
    } else if (what < 80) {
      scope();
    } else if (what < 83) {
      history_clock::advance();
    } else if (what < 87) {
      synchronize();
    } else if (what < 89) {
      replace_stream();
    } else if (what < 94) {
      other_thread();
    } else if (what < 96) {
      hand_through_another_stream();
    } else if (what < 99) {
      check();  // what this ring holds, then a new one, and often the loop again at once
      memory_history::process().start(capacity_);
      made_.clear();
      if (pick(2) == 0) loop(1 + pick(5), 0);
    } else {
      loop(200 + pick(1200), 0);  // long runs, past a chunk's room
    }
  }

  /// Reads the history back and checks it against the model.
  void check() const {
    std::vector<history_event> events;
    std::uint64_t dropped = 0;
    const std::vector<history_event> all = memory_history::process().events(&dropped);
    for (const history_event& e : all) {
      if (e.kind == history_kind::allocate || e.kind == history_kind::free) events.push_back(e);
    }
    checked_ += events.size();
    dropped_ += dropped;
    if (capacity_ < exact_capacity) {
      // The pool's own events (growth, synchronizes) are read back or dropped too.
      ASSERT_GE(all.size() + dropped, made_.size()) << "every event read back or dropped";
      check_with_drops(events);
    } else {
      ASSERT_EQ(dropped, 0u);
      check_exactly(events);
    }
  }
  /// Events read back and checked so far, and dropped by the ring.
  std::size_t checked() const { return checked_; }
  std::uint64_t dropped() const { return dropped_; }

  /// Events a ring of this many holds: more than the model makes between checks.
  static constexpr std::size_t exact_capacity = std::size_t{1} << 18;

 private:
  /// Every event made read back once, with its fields; each address's events and each
  /// thread's in the order made.
  void check_exactly(const std::vector<history_event>& events) const {
    ASSERT_EQ(events.size(), made_.size()) << "every event made, read back once";
    // The k-th event read back at an address is the k-th made there.
    const std::vector<std::size_t> matched = soma_test::match_by_address(
        events, made_, /*exact=*/true,
        [this](const history_event& e, const made_event& m) { return same(e, m); });
    ASSERT_EQ(matched.size(), events.size());
    std::vector<std::size_t> read_at(made_.size(), 0);  // made index -> position read back
    for (std::size_t j = 0; j < matched.size(); ++j) read_at[matched[j]] = j;
    std::map<int, std::size_t> last;
    for (std::size_t i = 0; i < made_.size(); ++i) {
      const auto before = last.find(made_[i].thread);
      if (before != last.end()) {
        EXPECT_LT(read_at[before->second], read_at[i])
            << "thread " << made_[i].thread << ": made " << before->second << " then " << i;
      }
      last[made_[i].thread] = i;
    }
  }
  /// A ring too small for it all: each address's events read back in the order made, some
  /// left out.
  void check_with_drops(const std::vector<history_event>& events) const {
    ASSERT_LE(events.size(), made_.size());
    soma_test::match_by_address(
        events, made_, /*exact=*/false,
        [this](const history_event& e, const made_event& m) { return same(e, m); });
  }
  bool same(const history_event& e, const made_event& m) const {
    return e.kind == m.kind && e.bytes == m.bytes && e.stream == m.stream && e.label == m.label &&
           e.pool == pool_->serial();
  }

  int pick(int n) { return static_cast<int>(random_() % static_cast<std::uint32_t>(n)); }
  const stream_timeline& pick_stream() { return *current_[pick(streams_in_use_)]; }
  std::size_t pick_bytes() {
    static constexpr std::size_t sizes[] = {4 * KiB, 4 * KiB,  4 * KiB,   8 * KiB, 12 * KiB,
                                            100,     64 * KiB, 200 * KiB, 1 * MiB};
    return sizes[pick(static_cast<int>(std::size(sizes)))];
  }
  void add_stream(std::uint32_t slot) {
    auto& s = streams_.emplace_back(std::make_unique<stream_timeline>(slot));
    s->set_history_name(0x100 + streams_.size());
    if (current_.size() <= slot) current_.resize(slot + 1);
    current_[slot] = s.get();
  }
  block* allocate(const stream_timeline& s, int thread, std::size_t bytes = 0) {
    if (bytes == 0) bytes = pick_bytes();
    auto taken = pool_->allocate(bytes, s);
    EXPECT_TRUE(taken.ok()) << taken.error().message();
    if (!taken.ok()) return nullptr;
    const std::uint32_t label = memory_history::current_scope();
    live_.push_back({taken.value(), label});
    made_.push_back(
        {thread, history_kind::allocate, taken.value()->address, bytes, s.history_name(), label});
    return taken.value();
  }
  void free_block(std::size_t index, const stream_timeline& s, int thread) {
    const live_block l = live_[index];
    live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(index));
    made_.push_back({thread, history_kind::free, l.b->address, l.b->requested_bytes,
                     s.history_name(), l.label});
    pool_->free(l.b, s);
  }
  /// A live block freed on some stream: often the newest (a run's, which then ends or goes on
  /// elsewhere), on its loop's stream.
  void free_one(int thread) {
    if (live_.empty()) return;
    const bool newest = pick(2) == 0;
    const std::size_t index =
        newest ? live_.size() - 1 : static_cast<std::size_t>(pick(static_cast<int>(live_.size())));
    const bool on_loop = newest && loop_stream_ != nullptr && pick(2) == 0;
    free_block(index, on_loop ? *loop_stream_ : pick_stream(), thread);
  }
  /// A block taken and given back on one stream, over and over (a run, where it hits): often the
  /// last loop again, across whatever came between; sometimes ending with the block taken.
  void loop(int pairs, int thread, bool end_taken) {
    if (loop_stream_ == nullptr || pick(2) == 0) {
      loop_stream_ = &pick_stream();
      loop_bytes_ = pick_bytes();
    }
    const stream_timeline& s = *loop_stream_;
    for (int i = 0; i < pairs; ++i) {
      if (allocate(s, thread, loop_bytes_) == nullptr) return;
      free_block(live_.size() - 1, s, thread);
    }
    if (end_taken) allocate(s, thread, loop_bytes_);
  }
  void loop(int pairs, int thread) { loop(pairs, thread, pick(3) == 0); }
  void scope() {
    if (pick(2) == 0 && memory_history::current_scope() != 0) {
      memory_history::pop_scope();
    } else {
      memory_history::push_scope(labels_[static_cast<std::size_t>(pick(3))]);
    }
  }
  /// Every stream's work done and proven (a device synchronize): frees serve other streams.
  void synchronize() {
    for (stream_timeline* s : current_) {
      s->note_completed(s->enqueued_position());
      s->prove_completed(s->enqueued_position());
    }
    pool_->on_synchronize();
  }
  /// A stream forgotten and a new one in its slot (the old timeline stays for the blocks that
  /// name it).
  void replace_stream() {
    const auto slot = static_cast<std::uint32_t>(pick(streams_in_use_));
    pool_->forget_stream(*current_[slot]);
    if (loop_stream_ == current_[slot]) loop_stream_ = nullptr;
    add_stream(slot);
  }
  /// A loop's block, left taken, freed on another stream by another thread, which takes it back
  /// from that stream's cache; then this thread frees it on the loop's stream.
  void hand_through_another_stream() {
    loop(1 + pick(5), 0, /*end_taken=*/true);
    if (loop_stream_ == nullptr || live_.empty()) return;
    const stream_timeline* other = &pick_stream();
    if (other == loop_stream_) return;
    const int thread = ++threads_;
    std::thread t([&] {
      free_block(live_.size() - 1, *other, thread);
      allocate(*other, thread, loop_bytes_);  // from other's cache: the block just freed
    });
    t.join();
    free_block(live_.size() - 1, *loop_stream_, 0);
  }
  /// Another thread's turn: a few allocations, frees and a loop, then it ends.
  void other_thread() {
    const int thread = ++threads_;
    const int steps = 1 + pick(4);
    std::thread other([&] {
      for (int i = 0; i < steps; ++i) {
        if (pick(3) == 0) {
          loop(1 + pick(20), thread);
        } else if (pick(2) == 0) {
          allocate(loop_stream_ != nullptr && pick(2) == 0 ? *loop_stream_ : pick_stream(), thread,
                   pick(2) == 0 ? loop_bytes_ : 0);
        } else {
          free_one(thread);
        }
      }
    });
    other.join();
  }

  std::mt19937 random_;
  std::size_t capacity_;
  int streams_in_use_;
  std::vector<std::unique_ptr<stream_timeline>> streams_;  // every stream made, kept
  std::vector<stream_timeline*> current_;                  // those in use, a slot each
  std::unique_ptr<pool> pool_;
  std::vector<live_block> live_;
  std::vector<made_event> made_;
  std::vector<std::uint32_t> labels_;
  int threads_ = 0;
  mutable std::size_t checked_ = 0;
  mutable std::uint64_t dropped_ = 0;
  const stream_timeline* loop_stream_ = nullptr;  // the last loop's, while it is in use
  std::size_t loop_bytes_ = 4 * KiB;
};

void run_model(std::uint32_t seed, bool biased,
               std::size_t capacity = history_model::exact_capacity, int streams = 3) {
  history_model model(seed, biased, capacity, streams);
  for (int i = 0; i < 3000; ++i) {
    model.step();
    if (i % 1000 == 999) {
      model.check();
      if (::testing::Test::HasFailure()) return;
    }
  }
  model.check();
  if (capacity >= history_model::exact_capacity) {
    EXPECT_GT(model.checked(), 10000u) << "the model made and read back events enough to judge";
  } else {
    EXPECT_GT(model.checked(), 500u) << "the model read back events enough to judge";
    EXPECT_GT(model.dropped(), 0u) << "the ring was too small for them";
  }
}

TEST(HistoryModel, S11_RandomEventsReadBackAsMade) {
  for (std::uint32_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE(seed);
    run_model(seed, false);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(HistoryModel, S11_RandomEventsReadBackAsMadeWithTheCacheLocksBiased) {
  if (const char* why = soma_test::register_process_barrier()) GTEST_SKIP() << why;
  for (std::uint32_t seed = 11; seed <= 16; ++seed) {
    SCOPED_TRACE(seed);
    run_model(seed, true);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(HistoryModel, S11_ARingTooSmallKeepsEachAddresssEventsInTheOrderMade) {
  for (std::uint32_t seed = 21; seed <= 26; ++seed) {
    SCOPED_TRACE(seed);
    run_model(seed, false, 512);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(HistoryModel, S11_LogsThatFindNoFreeChunkKeepEachAddresssEventsInTheOrderMade) {
  // 90 streams' caches log into a ring of 16 events: 4 chunks and 64 spare, fewer than the
  // logs that hold one, so claims fail and events are dropped (history_log::note_slow).
  for (std::uint32_t seed = 31; seed <= 36; ++seed) {
    SCOPED_TRACE(seed);
    run_model(seed, false, 16, 90);
    if (::testing::Test::HasFailure()) return;
  }
}

}  // namespace
