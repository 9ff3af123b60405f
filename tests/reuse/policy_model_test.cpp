// Randomized model test of the S11 reuse policies, on every backend.
//
// Three streams pass allocations of one explicit, capped pool along producer -> consumer
// chains: the producer copies a pattern in (somaMemcpyAsync from page-locked host memory);
// handing an allocation to another stream is an event recorded on its owner and waited on by
// the consumer, which copies the allocation out to the host and copies the next pattern in;
// the last owner copies it out once more and frees it. Streams are held by gates for a few
// steps (so frees stay pending), events link streams without a hand-over, synchronizes and
// queries happen at random, and the release threshold changes. The pool is small (16
// granules) and the sizes are fractions of a granule, so it runs full and internal
// dependencies kick in.
//
// Pool memory is device memory on cuda: the host never touches it. Each copy-out lands in a
// staging buffer, and the stream then writes its next sequence number to a progress word; the
// host compares the buffer with the expected pattern once the word says the copy completed
// (every step, and after every synchronize). No host tasks: the driver may run all streams'
// host tasks on one thread, and a held stream's would hold up the others'.
//
// Checked after every step, for every combination of the three policies:
//   - no copy-out ever finds its allocation's pattern changed by someone else (a reuse
//     without ordering corrupts it);
//   - live allocations never overlap; used == sum of live requested sizes; reserved >= used,
//     reserved <= max size and in whole granules; a failed allocation changes nothing.
// The model also keeps its own vector clocks and proofs (design "Happens-before and reuse"),
// so when opportunistic reuse is off it can tell, for each allocation that lands on memory
// another stream freed, whether that reuse was allowed:
//   - always when the free is proven by a synchronize / successful query, or (follow event
//     dependencies on) covered by the allocating stream's clock;
//   - otherwise only through an internal dependency, i.e. with internal dependencies on and
//     only when the pool could not grow by this request (growing beats waiting). cuda commits
//     the whole pool (one 32 MiB step) at the first allocation, so there this last check
//     applies only after a release gave memory back.
// With opportunistic reuse on, completion timing decides, and only the pattern checks apply.
//
// SOMA_POLICY_MODEL_STEPS (environment) sets the steps per test; SOMA_POLICY_MODEL_TRACE=1
// prints every operation.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "host_words.hpp"
#include "seeded_model.hpp"
#include "soma_test_util.hpp"
#include "staging_buffers.hpp"
#include "stream_gate.hpp"

namespace {

using namespace soma_test;

constexpr int kDefaultSteps = 3000;
constexpr int kStreams = 3;
constexpr int kEvents = 8;
constexpr int kPoolGranules = 16;
constexpr int kLiveBudgetGranules = 13;  // the model frees instead of allocating beyond this

std::size_t round_up(std::size_t value, std::size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

/// Copies enqueued on one stream and closed by a progress write: done once the stream's
/// progress word reached `sequence`.
struct ticket {
  const std::uint32_t* progress = nullptr;
  std::uint32_t sequence = 0;
  std::unique_ptr<host_buffer> pattern_in;  // copied into the allocation (a write)
  std::unique_ptr<host_buffer> seen;        // the allocation copied out (a check), or null
  std::size_t size = 0;
  std::uint64_t expected_seed = 0;  // of the pattern `seen` must hold
  std::uint64_t id = 0;
  std::string where;

  bool done() const { return load_word(progress) >= sequence; }
};

void write_pattern(void* pointer, std::size_t size, std::uint64_t seed) {
  auto* bytes = static_cast<unsigned char*>(pointer);
  auto* words = static_cast<std::uint64_t*>(pointer);  // 256-byte aligned
  const std::size_t word_count = size / 8;
  for (std::size_t i = 0; i < word_count; ++i) words[i] = seed ^ (i * 0x9E3779B97F4A7C15ull);
  for (std::size_t i = word_count * 8; i < size; ++i)
    bytes[i] = static_cast<unsigned char>(seed >> (8 * (i % 8)));
}

/// Offset of the first wrong byte, or size if intact.
std::size_t find_mismatch(const void* pointer, std::size_t size, std::uint64_t seed) {
  const auto* words = static_cast<const std::uint64_t*>(pointer);
  const std::size_t word_count = size / 8;
  for (std::size_t i = 0; i < word_count; ++i)
    if (words[i] != (seed ^ (i * 0x9E3779B97F4A7C15ull))) return i * 8;
  const auto* bytes = static_cast<const unsigned char*>(pointer);
  for (std::size_t i = word_count * 8; i < size; ++i)
    if (bytes[i] != static_cast<unsigned char>(seed >> (8 * (i % 8)))) return i;
  return size;
}

struct policies {
  bool follow = true;
  bool opportunistic = true;
  bool internal = true;
};

/// What the model knows of one stream. `id` never repeats, so clocks and free records of a
/// destroyed stream keep meaning what they meant.
struct model_stream {
  int id = 0;
  somaStream_t handle = nullptr;
  std::uint64_t enqueued = 0;          // operations soma counts on it (design: positions)
  std::uint32_t* progress = nullptr;   // the stream writes its ticket sequence numbers here
  std::uint32_t sequence = 0;          // the last one enqueued
  std::map<int, std::uint64_t> clock;  // other stream id -> position known to happen before
  std::unique_ptr<stream_gate> gate;   // holding it, if any
  int open_gate_at_step = 0;
};

struct model_event {
  somaEvent_t handle = nullptr;
  int stream_id = -1;  // -1: never recorded
  std::uint64_t position = 0;
  std::map<int, std::uint64_t> clock;  // captured, own position included
};

struct allocation {
  std::uint64_t id = 0;
  void* pointer = nullptr;
  std::size_t size = 0;
  int owner = 0;  // index into streams_: all use and the free happen there
  std::uint64_t version = 0;
};

/// A range freed on a stream and not yet handed out again: (stream, position) as soma stamps it.
struct free_record {
  std::uintptr_t start = 0;
  std::uintptr_t end = 0;
  int stream_id = 0;
  std::uint64_t position = 0;
};

class policy_model : seeded_model {
 public:
  policy_model(policies p, std::uint64_t seed)
      : seeded_model(seed, "SOMA_POLICY_MODEL_TRACE"), policy_(p), random_(seed) {}
  policy_model(const policy_model&) = delete;
  policy_model& operator=(const policy_model&) = delete;
  /// After a failed assertion too: no stream may still copy into a staging buffer when the
  /// members free them.
  ~policy_model() {
    open_all_gates();
    (void)somaDeviceSynchronize();
  }

  void set_up() {
    SOMA_ASSERT_OK(somaSetDevice(0));
    granule_ = granularity_bytes(0);
    max_size_ = kPoolGranules * granule_;
    const somaMemPoolProps props = pool_props(0, max_size_);
    SOMA_ASSERT_OK(somaMemPoolCreate(&pool_, &props));
    SOMA_ASSERT_OK(set_pool_int(pool_, somaMemPoolReuseFollowEventDependencies, policy_.follow));
    SOMA_ASSERT_OK(set_pool_int(pool_, somaMemPoolReuseAllowOpportunistic, policy_.opportunistic));
    SOMA_ASSERT_OK(
        set_pool_int(pool_, somaMemPoolReuseAllowInternalDependencies, policy_.internal));
    for (int i = 0; i < kStreams; ++i) ASSERT_NO_FATAL_FAILURE(create_stream(i));
    events_.resize(kEvents);
    for (model_event& event : events_) SOMA_ASSERT_OK(somaEventCreate(&event.handle));
  }

  void run(int steps) {
    for (step_ = 0; step_ < steps; ++step_) {
      open_due_gates();
      ASSERT_NO_FATAL_FAILURE(random_step());
      ASSERT_NO_FATAL_FAILURE(check_invariants());
    }
  }

  void tear_down() {
    open_all_gates();
    while (!live_.empty()) ASSERT_NO_FATAL_FAILURE(free_allocation(live_.size() - 1));
    SOMA_ASSERT_OK(somaDeviceSynchronize());
    ASSERT_NO_FATAL_FAILURE(expect_no_pattern_failures());
    EXPECT_TRUE(tickets_.empty()) << tickets_.size()
                                  << " copies not complete after somaDeviceSynchronize";
    EXPECT_EQ(pool_u64(pool_, somaMemPoolAttrUsedMemCurrent), 0u);
    for (model_stream& stream : streams_) SOMA_ASSERT_OK(somaStreamDestroy(stream.handle));
    streams_.clear();
    for (model_event& event : events_) SOMA_ASSERT_OK(somaEventDestroy(event.handle));
    events_.clear();
    SOMA_ASSERT_OK(somaMemPoolDestroy(pool_));
    SOMA_ASSERT_OK(somaDeviceSynchronize());
    std::printf(
        "policies f%d o%d i%d seed %llu: %d steps, %llu allocations (%llu reused "
        "another stream's free: %llu proven/covered, %llu otherwise), %llu out of "
        "memory, %llu pattern checks\n",
        policy_.follow, policy_.opportunistic, policy_.internal,
        static_cast<unsigned long long>(seed_), step_, static_cast<unsigned long long>(next_id_),
        static_cast<unsigned long long>(reused_justified_ + reused_otherwise_),
        static_cast<unsigned long long>(reused_justified_),
        static_cast<unsigned long long>(reused_otherwise_),
        static_cast<unsigned long long>(out_of_memory_), static_cast<unsigned long long>(checks_));
  }

 private:
  std::uint64_t next() { return random_(); }
  std::size_t below(std::size_t bound) { return static_cast<std::size_t>(next() % bound); }

  /// Fractions of a granule (under the cpu test configuration: up to 4 KiB, 4 to 48 KiB,
  /// 48 to 160 KiB), so the pool of kPoolGranules fills alike on every backend.
  std::size_t random_size() {
    const std::size_t bucket = below(100);
    if (bucket < 40) return 1 + below(granule_ / 16);
    if (bucket < 75) return granule_ / 16 + below(granule_ * 11 / 16);
    return granule_ * 3 / 4 + below(granule_ * 7 / 4);
  }

  // ---- streams, gates, clocks --------------------------------------------------------------

  void create_stream(int index) {
    model_stream stream;
    stream.id = next_stream_id_++;
    stream.progress = new_host_word();
    SOMA_ASSERT_OK(somaStreamCreate(&stream.handle));
    proven_.resize(static_cast<std::size_t>(next_stream_id_), 0);
    if (index < static_cast<int>(streams_.size())) {
      streams_[static_cast<std::size_t>(index)] = std::move(stream);
    } else {
      streams_.push_back(std::move(stream));
    }
  }

  model_stream& stream_at(int index) { return streams_[static_cast<std::size_t>(index)]; }

  void open_due_gates() {
    for (model_stream& stream : streams_) {
      if (stream.gate && stream.open_gate_at_step <= step_) {
        trace("open gate of S%d", stream.id);
        stream.gate->open();
        stream.gate.reset();
      }
    }
  }

  void open_all_gates() {
    for (model_stream& stream : streams_) {
      if (stream.gate) {
        stream.gate->open();
        stream.gate.reset();
      }
    }
  }

  std::map<int, std::uint64_t> capture(int index) {
    std::map<int, std::uint64_t> clock = stream_at(index).clock;
    clock[stream_at(index).id] = std::max(clock[stream_at(index).id], stream_at(index).enqueued);
    return clock;
  }

  void record(int event_index, int stream_index) {
    model_event& event = events_[static_cast<std::size_t>(event_index)];
    SOMA_ASSERT_OK(somaEventRecord(event.handle, stream_at(stream_index).handle)) << where();
    event.stream_id = stream_at(stream_index).id;
    event.position = stream_at(stream_index).enqueued;
    event.clock = capture(stream_index);
  }

  void wait(int stream_index, int event_index) {
    model_event& event = events_[static_cast<std::size_t>(event_index)];
    model_stream& stream = stream_at(stream_index);
    SOMA_ASSERT_OK(somaStreamWaitEvent(stream.handle, event.handle, 0)) << where();
    if (event.stream_id < 0) return;  // never recorded: nothing happens
    // The cpu backend queues a wait for another stream's event only; cuda counts a wait on
    // the stream's own event too. Counting fewer positions than soma never makes the model
    // stricter than soma, only less precise.
    if (event.stream_id != stream.id) ++stream.enqueued;
    for (const auto& [id, position] : event.clock)
      stream.clock[id] = std::max(stream.clock[id], position);
  }

  void prove(int stream_id, std::uint64_t position) {
    std::uint64_t& proven = proven_[static_cast<std::size_t>(stream_id)];
    proven = std::max(proven, position);
  }

  bool covered(const free_record& freed, int stream_index) {
    const model_stream& stream = stream_at(stream_index);
    if (freed.stream_id == stream.id) return true;
    if (proven_[static_cast<std::size_t>(freed.stream_id)] >= freed.position) return true;
    if (policy_.follow) {
      auto it = stream.clock.find(freed.stream_id);
      if (it != stream.clock.end() && it->second >= freed.position) return true;
    }
    return false;
  }

  // ---- copies -------------------------------------------------------------------------------

  std::uint64_t pattern_seed(const allocation& a) const {
    return mix(seed_ ^ mix(a.id) ^ (a.version * 0x2545F4914F6CDD1Dull));
  }

  /// Copies a's current pattern into it on its owner.
  void copy_pattern_in(const allocation& a, ticket& t) {
    t.pattern_in = staging_.take(a.size);
    write_pattern(t.pattern_in->data(), a.size, pattern_seed(a));
    SOMA_ASSERT_OK(somaMemcpyAsync(a.pointer, t.pattern_in->data(), a.size, somaMemcpyHostToDevice,
                                   stream_at(a.owner).handle))
        << where();
    ++stream_at(a.owner).enqueued;
  }

  /// Closes the ticket's copies with a progress write on the owner and files it.
  void finish(int owner, ticket t) {
    model_stream& stream = stream_at(owner);
    t.progress = stream.progress;
    t.sequence = ++stream.sequence;
    SOMA_ASSERT_OK(somaStreamWriteValue32(stream.handle, stream.progress, t.sequence, 0))
        << where();
    ++stream.enqueued;
    tickets_.push_back(std::move(t));
  }

  void enqueue_write(const allocation& a) {
    ticket t;
    ASSERT_NO_FATAL_FAILURE(copy_pattern_in(a, t));
    ASSERT_NO_FATAL_FAILURE(finish(a.owner, std::move(t)));
  }

  /// Copies the allocation out to be compared with its current pattern; with rewrite, then
  /// copies the next version's pattern in.
  void enqueue_check(allocation& a, bool rewrite) {
    ticket t;
    t.seen = staging_.take(a.size);
    t.size = a.size;
    t.expected_seed = pattern_seed(a);
    t.id = a.id;
    t.where = where();
    SOMA_ASSERT_OK(somaMemcpyAsync(t.seen->data(), a.pointer, a.size, somaMemcpyDeviceToHost,
                                   stream_at(a.owner).handle))
        << where();
    ++stream_at(a.owner).enqueued;
    if (rewrite) {
      ++a.version;
      ASSERT_NO_FATAL_FAILURE(copy_pattern_in(a, t));
    }
    ASSERT_NO_FATAL_FAILURE(finish(a.owner, std::move(t)));
  }

  /// Compares what completed copies found, and takes their staging buffers back.
  void collect() {
    std::vector<ticket> pending;
    for (ticket& t : tickets_) {
      if (!t.done()) {
        pending.push_back(std::move(t));
        continue;
      }
      if (t.seen != nullptr) {
        ++checks_;
        const std::size_t bad = find_mismatch(t.seen->data(), t.size, t.expected_seed);
        if (bad != t.size && failures_++ == 0) {
          first_failure_ = "allocation " + std::to_string(t.id) + " (" + std::to_string(t.size) +
                           " B) changed at offset " + std::to_string(bad) +
                           " while live; check enqueued at " + t.where;
        }
      }
      staging_.give_back(std::move(t.pattern_in));
      staging_.give_back(std::move(t.seen));
    }
    tickets_ = std::move(pending);
  }

  // ---- operations ---------------------------------------------------------------------------

  void random_step() {
    const std::size_t roll = below(100);
    if (roll < 32) return op_allocate();
    if (roll < 52) return op_hand_over();
    if (roll < 58) return op_use();
    if (roll < 80) return op_free();
    if (roll < 86) return op_link();
    if (roll < 91) return op_hold();
    if (roll < 95) return op_synchronize();
    if (roll < 97) return op_threshold_or_trim();
    if (roll < 99) return op_query();
    return op_recreate_stream();
  }

  void op_allocate() {
    const std::size_t size = random_size();
    if (live_bytes_ + size > kLiveBudgetGranules * granule_) return op_free();
    const int owner = static_cast<int>(below(kStreams));
    const std::uint64_t reserved_before = pool_u64(pool_, somaMemPoolAttrReservedMemCurrent);
    const std::uint64_t used_before = pool_u64(pool_, somaMemPoolAttrUsedMemCurrent);
    void* pointer = nullptr;
    const somaError_t status =
        somaMallocFromPoolAsync(&pointer, size, pool_, stream_at(owner).handle);
    trace("allocate %zu on S%d: %s %p", size, stream_at(owner).id, somaGetErrorName(status),
          pointer);
    if (status == somaErrorMemoryAllocation) {
      ++out_of_memory_;
      EXPECT_EQ(pool_u64(pool_, somaMemPoolAttrUsedMemCurrent), used_before) << where();
      EXPECT_EQ(pool_u64(pool_, somaMemPoolAttrReservedMemCurrent), reserved_before) << where();
      return;
    }
    SOMA_ASSERT_OK(status) << where();
    ASSERT_NE(pointer, nullptr);
    const auto start = reinterpret_cast<std::uintptr_t>(pointer);
    ASSERT_EQ(start % 256, 0u) << where();
    const std::uintptr_t end = start + round_up(size, 256);
    ASSERT_NO_FATAL_FAILURE(check_no_overlap(start, end));
    ASSERT_NO_FATAL_FAILURE(check_reuse_allowed(start, end, size, owner, reserved_before));

    allocation a;
    a.id = next_id_++;
    a.pointer = pointer;
    a.size = size;
    a.owner = owner;
    ranges_.emplace(start, end);
    live_bytes_ += size;
    enqueue_write(a);
    live_.push_back(a);
  }

  /// The S11 check the model can make exactly when opportunistic reuse is off.
  void check_reuse_allowed(std::uintptr_t start, std::uintptr_t end, std::size_t size, int owner,
                           std::uint64_t reserved_before) {
    std::vector<free_record> kept;
    std::vector<int> other_streams;  // ids of other streams whose frees this range reuses
    bool found_unjustified = false;
    free_record unjustified;
    for (const free_record& freed : freed_) {
      if (freed.end <= start || freed.start >= end) {
        kept.push_back(freed);
        continue;
      }
      if (freed.stream_id != stream_at(owner).id) other_streams.push_back(freed.stream_id);
      if (!covered(freed, owner) && !found_unjustified) {
        found_unjustified = true;
        unjustified = freed;
      }
      // The rest of the range stays free with its stamp.
      if (freed.start < start)
        kept.push_back({freed.start, start, freed.stream_id, freed.position});
      if (freed.end > end) kept.push_back({end, freed.end, freed.stream_id, freed.position});
    }
    freed_ = std::move(kept);
    if (!other_streams.empty()) (found_unjustified ? reused_otherwise_ : reused_justified_) += 1;
    if (policy_.opportunistic) return;  // completion timing decides: patterns only

    const std::size_t grow_bytes = round_up(round_up(size, 256), granule_);
    const bool pool_could_not_grow = reserved_before + grow_bytes > max_size_;
    if (found_unjustified) {
      EXPECT_TRUE(policy_.internal)
          << where() << ": S11 violated: " << size << " B on S" << stream_at(owner).id
          << " reuse memory freed on S" << unjustified.stream_id << " at position "
          << unjustified.position << ", neither proven (proven up to "
          << proven_[static_cast<std::size_t>(unjustified.stream_id)]
          << ") nor covered by the stream's clock, with opportunistic and internal "
          << "dependencies off";
      EXPECT_TRUE(pool_could_not_grow)
          << where() << ": an internal dependency was taken while the pool could grow "
          << "(reserved " << reserved_before << " + " << grow_bytes << " <= max " << max_size_
          << "): growing must beat waiting";
    }
    if (policy_.internal && pool_could_not_grow) {
      // soma may have queued a wait of the owner on the freeing stream (on the block's stamp,
      // which can be later than any one record when neighbours merged). Raise the model's
      // clock as far as soma's could have gone; a model more generous than soma only checks
      // less, never wrongly.
      model_stream& stream = stream_at(owner);
      for (int id : other_streams) {
        std::uint64_t position = 0;
        for (const model_stream& other : streams_)
          if (other.id == id) position = other.enqueued;
        for (const free_record& freed : freed_)
          if (freed.stream_id == id) position = std::max(position, freed.position);
        stream.clock[id] = std::max(stream.clock[id], position);
      }
    }
  }

  void check_no_overlap(std::uintptr_t start, std::uintptr_t end) {
    auto after = ranges_.lower_bound(start);
    if (after != ranges_.end()) {
      ASSERT_GE(after->first, end) << where() << ": new allocation overlaps a live one";
    }
    if (after != ranges_.begin()) {
      ASSERT_LE(std::prev(after)->second, start) << where() << ": overlaps a live allocation";
    }
  }

  void op_hand_over() {
    if (live_.empty()) return op_allocate();
    allocation& a = live_[below(live_.size())];
    const int consumer =
        static_cast<int>((static_cast<std::size_t>(a.owner) + 1 + below(kStreams - 1)) % kStreams);
    const int event = static_cast<int>(below(kEvents));
    trace("hand %llu from S%d to S%d via E%d", static_cast<unsigned long long>(a.id),
          stream_at(a.owner).id, stream_at(consumer).id, event);
    ASSERT_NO_FATAL_FAILURE(record(event, a.owner));
    ASSERT_NO_FATAL_FAILURE(wait(consumer, event));
    a.owner = consumer;
    enqueue_check(a, /*rewrite=*/true);
  }

  void op_use() {
    if (live_.empty()) return op_allocate();
    enqueue_check(live_[below(live_.size())], /*rewrite=*/below(2) == 0);
  }

  void op_free() {
    if (live_.empty()) return;
    ASSERT_NO_FATAL_FAILURE(free_allocation(below(live_.size())));
  }

  void free_allocation(std::size_t index) {
    allocation a = live_[index];
    enqueue_check(a, /*rewrite=*/false);
    model_stream& owner = stream_at(a.owner);
    SOMA_ASSERT_OK(somaFreeAsync(a.pointer, owner.handle)) << where();
    trace("free %llu (%p) on S%d at position %llu", static_cast<unsigned long long>(a.id),
          a.pointer, owner.id, static_cast<unsigned long long>(owner.enqueued));
    const auto start = reinterpret_cast<std::uintptr_t>(a.pointer);
    const std::uintptr_t end = start + round_up(a.size, 256);
    freed_.push_back({start, end, owner.id, owner.enqueued});
    ranges_.erase(start);
    live_bytes_ -= a.size;
    live_[index] = live_.back();
    live_.pop_back();
  }

  /// An event dependency without a hand-over: later work on one stream waits on another.
  void op_link() {
    const int from = static_cast<int>(below(kStreams));
    const int to = static_cast<int>(below(kStreams));
    const int event = static_cast<int>(below(kEvents));
    trace("link S%d -> S%d via E%d", stream_at(from).id, stream_at(to).id, event);
    ASSERT_NO_FATAL_FAILURE(record(event, from));
    ASSERT_NO_FATAL_FAILURE(wait(to, event));
  }

  void op_hold() {
    model_stream& stream = stream_at(static_cast<int>(below(kStreams)));
    if (stream.gate) return;
    stream.gate = std::make_unique<stream_gate>();
    SOMA_ASSERT_OK(stream.gate->hold(stream.handle)) << where();
    stream.enqueued += 3;  // a hold: write "entered", wait for the gate, write "left"
    stream.open_gate_at_step = step_ + 1 + static_cast<int>(below(40));
    trace("hold S%d until step %d", stream.id, stream.open_gate_at_step);
  }

  void op_synchronize() {
    open_all_gates();  // a synchronize behind a closed gate would never return
    const std::size_t kind = below(4);
    if (kind == 0) {
      const int index = static_cast<int>(below(kStreams));
      const std::uint64_t position = stream_at(index).enqueued;
      trace("synchronize S%d", stream_at(index).id);
      SOMA_ASSERT_OK(somaStreamSynchronize(stream_at(index).handle)) << where();
      prove(stream_at(index).id, position);
    } else if (kind == 1) {
      const int event = static_cast<int>(below(kEvents));
      model_event& e = events_[static_cast<std::size_t>(event)];
      trace("synchronize E%d", event);
      SOMA_ASSERT_OK(somaEventSynchronize(e.handle)) << where();
      if (e.stream_id >= 0) prove(e.stream_id, e.position);
    } else if (kind == 2) {
      const int index = static_cast<int>(below(kStreams));
      const int event = static_cast<int>(below(kEvents));
      trace("record E%d on S%d and synchronize it", event, stream_at(index).id);
      ASSERT_NO_FATAL_FAILURE(record(event, index));
      model_event& e = events_[static_cast<std::size_t>(event)];
      SOMA_ASSERT_OK(somaEventSynchronize(e.handle)) << where();
      prove(e.stream_id, e.position);
    } else {
      trace("synchronize device");
      for (const model_stream& stream : streams_) prove(stream.id, stream.enqueued);
      for (const retired_stream& retired : retired_) prove(retired.id, retired.enqueued);
      retired_.clear();
      SOMA_ASSERT_OK(somaDeviceSynchronize()) << where();
    }
    ASSERT_NO_FATAL_FAILURE(expect_no_pattern_failures());
  }

  void op_query() {
    if (below(2) == 0) {
      const int index = static_cast<int>(below(kStreams));
      const std::uint64_t position = stream_at(index).enqueued;
      const somaError_t status = somaStreamQuery(stream_at(index).handle);
      trace("query S%d: %s", stream_at(index).id, somaGetErrorName(status));
      if (status == somaSuccess) {
        prove(stream_at(index).id, position);
      } else {
        ASSERT_EQ(status, somaErrorNotReady) << where();
      }
    } else {
      const int event = static_cast<int>(below(kEvents));
      model_event& e = events_[static_cast<std::size_t>(event)];
      const somaError_t status = somaEventQuery(e.handle);
      trace("query E%d: %s", event, somaGetErrorName(status));
      if (status == somaSuccess) {
        if (e.stream_id >= 0) prove(e.stream_id, e.position);
      } else {
        ASSERT_EQ(status, somaErrorNotReady) << where();
      }
    }
  }

  void op_threshold_or_trim() {
    if (below(2) == 0) {
      const std::uint64_t thresholds[] = {0, 4 * granule_, UINT64_MAX};
      const std::uint64_t threshold = thresholds[below(3)];
      trace("release threshold %llu", static_cast<unsigned long long>(threshold));
      SOMA_ASSERT_OK(set_pool_u64(pool_, somaMemPoolAttrReleaseThreshold, threshold));
    } else {
      const std::size_t keep = below(kPoolGranules) * granule_;
      trace("trim to %zu", keep);
      SOMA_ASSERT_OK(somaMemPoolTrimTo(pool_, keep)) << where();
    }
  }

  /// Destroys a stream (its queued work still runs, its frees stay stamped with it; a device
  /// synchronize proves them) and puts a new one in its place. Allocations it owned move to
  /// another stream after an event.
  void op_recreate_stream() {
    const int index = static_cast<int>(below(kStreams));
    model_stream& old = stream_at(index);
    if (old.gate) {
      old.gate->open();
      old.gate.reset();
    }
    const int heir = (index + 1) % kStreams;
    const int event = static_cast<int>(below(kEvents));
    ASSERT_NO_FATAL_FAILURE(record(event, index));
    ASSERT_NO_FATAL_FAILURE(wait(heir, event));
    for (allocation& a : live_) {
      if (a.owner == index) a.owner = heir;
    }
    trace("destroy S%d (heir S%d)", old.id, stream_at(heir).id);
    SOMA_ASSERT_OK(somaStreamDestroy(old.handle)) << where();
    // Its queued work still runs; the next device synchronize waits for it and proves it.
    retired_.push_back({old.id, old.enqueued});
    ASSERT_NO_FATAL_FAILURE(create_stream(index));
  }

  // ---- invariants ---------------------------------------------------------------------------

  void expect_no_pattern_failures() {
    collect();
    ASSERT_EQ(failures_, 0u) << where() << ": a copy-out found its allocation overwritten "
                             << "(reuse without ordering): " << first_failure_;
  }

  void check_invariants() {
    const std::uint64_t used = pool_u64(pool_, somaMemPoolAttrUsedMemCurrent);
    const std::uint64_t reserved = pool_u64(pool_, somaMemPoolAttrReservedMemCurrent);
    ASSERT_EQ(used, live_bytes_) << where() << ": used != sum of live sizes";
    ASSERT_GE(reserved, used) << where();
    ASSERT_LE(reserved, max_size_) << where();
    ASSERT_EQ(reserved % granule_, 0u) << where();
    ASSERT_NO_FATAL_FAILURE(expect_no_pattern_failures());
  }

  const policies policy_;
  std::mt19937_64 random_;
  std::size_t granule_ = 0;
  std::size_t max_size_ = 0;
  somaMemPool_t pool_ = nullptr;
  std::vector<model_stream> streams_;
  struct retired_stream {
    int id;
    std::uint64_t enqueued;  // its final position
  };
  std::vector<retired_stream> retired_;  // destroyed since the last device synchronize
  int next_stream_id_ = 0;
  std::vector<std::uint64_t> proven_;  // by stream id
  std::vector<model_event> events_;
  std::vector<allocation> live_;
  std::map<std::uintptr_t, std::uintptr_t> ranges_;  // live [start, end)
  std::vector<free_record> freed_;
  std::uint64_t live_bytes_ = 0;
  std::uint64_t next_id_ = 0;
  std::uint64_t out_of_memory_ = 0;
  std::uint64_t reused_justified_ = 0;
  std::uint64_t reused_otherwise_ = 0;
  std::uint64_t checks_ = 0;    // copy-outs compared
  std::uint64_t failures_ = 0;  // of them, patterns found changed
  std::string first_failure_;
  // Destroyed after ~policy_model synchronized the device.
  staging_buffers staging_;
  std::vector<ticket> tickets_;  // copies not yet known complete
};

struct model_case {
  int policy_mask = 0;
  std::uint64_t seed = 0;
};

void PrintTo(const model_case& c, std::ostream* out) {
  *out << "{policy mask " << c.policy_mask << ", seed " << c.seed << "}";
}

class S11_ReusePolicyModel : public capi_test, public ::testing::WithParamInterface<model_case> {};

TEST_P(S11_ReusePolicyModel, ProducerConsumerChainsNeverSeeUnorderedReuse) {
  const int mask = GetParam().policy_mask;
  policy_model model(policies{(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0}, GetParam().seed);
  ASSERT_NO_FATAL_FAILURE(model.set_up());
  ASSERT_NO_FATAL_FAILURE(
      model.run(steps_from_environment("SOMA_POLICY_MODEL_STEPS", kDefaultSteps)));
  ASSERT_NO_FATAL_FAILURE(model.tear_down());
}

std::vector<model_case> model_cases() {
  std::vector<model_case> cases;
  for (int mask = 0; mask < 8; ++mask) {
    for (std::uint64_t seed : {std::uint64_t{11}, std::uint64_t{20251201}})
      cases.push_back({mask, seed});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(PoliciesAndSeeds, S11_ReusePolicyModel, ::testing::ValuesIn(model_cases()),
                         [](const ::testing::TestParamInfo<model_case>& info) {
                           const int mask = info.param.policy_mask;
                           return std::string("Follow") + ((mask & 1) ? "On" : "Off") +
                                  "_Opportunistic" + ((mask & 2) ? "On" : "Off") + "_Internal" +
                                  ((mask & 4) ? "On" : "Off") + "_seed" +
                                  std::to_string(info.param.seed);
                         });

}  // namespace
