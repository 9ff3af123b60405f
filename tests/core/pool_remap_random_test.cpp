// pool: the remap path under random allocations and frees on three streams (S2, S9, S11;
// design §3 "Remapping"), checked against the fake provider's own record of which physical
// memory each address maps: no physical byte is live twice, and a stream receives physical
// memory only where it may use the last free of it (its own stream's, a completed one, or one
// its clock is ordered after). Deterministic: fixed seeds; SEED=n runs that one seed alone.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/pool.hpp"
#include "fake_memory_provider.hpp"

namespace {

using soma::detail::block;
using soma::detail::pool;
using soma::detail::pool_config;
using soma::detail::remap_mode;
using soma::detail::stream_timeline;
using soma_test::fake_memory_provider;
using soma_test::fake_memory_state;

constexpr std::size_t kGranule = 64 * 1024;
constexpr std::size_t kUnit = 256;  // physical memory is followed in units of this size
constexpr int kSteps = 3000;

/// Who last had a unit of physical memory: live, or freed on a stream at a position.
struct unit_owner {
  bool live = false;
  const stream_timeline* freed_on = nullptr;
  std::uint64_t position = 0;
};
using unit = std::pair<std::uint64_t, std::size_t>;  // commit token, unit index in it

struct random_run {
  random_run(unsigned seed, remap_mode mode, std::size_t max_size, bool follow_events)
      : random(seed), events(follow_events) {
    memory->granularity_bytes = kGranule;
    memory->allow_map_again = true;
    memory->allow_partial_decommit = true;
    pool_config config;
    config.name = "random remaps";
    config.max_size_bytes = max_size;
    config.reservation_bytes = 4 * 1024 * 1024;
    the_pool = std::make_unique<pool>(config, std::make_unique<fake_memory_provider>(memory));
    the_pool->set_remap_free_memory(mode);
    the_pool->set_reuse_policy(1, follow_events);
    the_pool->set_reuse_policy(3, false);  // no waits inserted: every reuse is checked as it is
    for (int i = 0; i < 3; ++i) streams.push_back(std::make_unique<stream_timeline>(i));
  }

  /// The physical units backing [address, address + bytes), as the fake maps them.
  std::vector<unit> units(std::uintptr_t address, std::size_t bytes) {
    std::vector<unit> out;
    for (std::uintptr_t a = address / kUnit * kUnit; a < address + bytes; a += kUnit) {
      auto it = memory->mapping_at(a);
      if (it == memory->committed.end()) {
        failure = "an allocation lies on unmapped addresses";
        return out;
      }
      const auto [token, offset] = memory->backing.at(it->first);
      out.push_back({token, (offset + (a - it->first)) / kUnit});
    }
    return out;
  }

  /// Completes t up to `to`, and first what its waits before there wait for: a stream cannot
  /// run past a wait before the awaited work has run.
  void complete(stream_timeline& t, std::uint64_t to) {
    if (t.completed_position() >= to) return;
    for (const wait& w : waits[&t])
      if (w.at <= to) complete(*w.on, w.position);
    t.note_completed(to);
  }

  void allocate(int step, stream_timeline& s) {
    const std::size_t bytes =
        random() % 2 == 0 ? (1 + random() % 6) * kGranule : 1 + random() % (3 * kGranule);
    auto taken = the_pool->allocate(bytes, s);
    if (!taken.ok()) return;  // out of memory at the cap: allowed
    block* b = taken.value();
    for (const unit& u : units(b->address, b->size_bytes)) {
      unit_owner& o = owners[u];
      const std::string at = "step " + std::to_string(step) + ", served by " +
                             std::to_string(static_cast<int>(b->how)) + ": ";
      if (o.live) {
        failure = at + "physical memory live twice";
        return;
      }
      if (o.freed_on != nullptr && o.freed_on != &s && !o.freed_on->has_completed(o.position) &&
          !(events && s.is_ordered_after(o.freed_on, o.position))) {
        failure = at + "a stream got memory another stream freed, before that free completed";
        return;
      }
      o = unit_owner{true, &s, 0};
    }
    live.push_back({b, &s});
  }

  void free_one(stream_timeline& s) {
    const std::size_t i = random() % live.size();
    const live_block l = live[i];
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    stream_timeline& on = random() % 3 == 0 ? s : *l.stream;  // a third freed on another stream
    on.note_enqueued();
    for (const unit& u : units(l.b->address, l.b->size_bytes))
      owners[u] = unit_owner{false, &on, on.enqueued_position()};
    the_pool->free(l.b, on);
  }

  void run() {
    for (int step = 0; step < kSteps && failure.empty() && !::testing::Test::HasFailure(); ++step) {
      const int op = static_cast<int>(random() % 10);
      stream_timeline& s = *streams[random() % streams.size()];
      if (op < 4) {
        allocate(step, s);
      } else if (op < 8) {
        if (!live.empty()) free_one(s);
      } else if (op == 8) {
        // The stream runs up to its latest position or half way there; sometimes a synchronize
        // proves it (S9: memory goes back, old addresses are unmapped).
        const std::uint64_t to =
            s.enqueued_position() - (random() % 2) * (s.enqueued_position() / 2);
        complete(s, to);
        if (random() % 2 == 0) {
          s.prove_completed(to);
          the_pool->on_synchronize();
        }
      } else if (events) {
        // s waits for everything issued on another stream so far (an event record and wait).
        stream_timeline& other = *streams[random() % streams.size()];
        if (&other != &s) {
          const std::uint64_t recorded = other.note_enqueued();
          s.merge_clock(other.capture_clock());
          waits[&s].push_back({s.note_enqueued(), &other, recorded});
        }
      }
    }
  }

  ~random_run() {
    for (const live_block& l : live) {
      l.stream->note_enqueued();
      the_pool->free(l.b, *l.stream);
    }
    for (auto& s : streams) {
      const std::uint64_t at = s->note_enqueued();
      s->note_completed(at);
      s->prove_completed(at);
    }
    the_pool->trim_to(0);
    the_pool.reset();  // before the streams its stamps name
  }

  struct live_block {
    block* b;
    stream_timeline* stream;
  };
  struct wait {
    std::uint64_t at;  ///< the waiting stream's position of the wait
    stream_timeline* on;
    std::uint64_t position;  ///< what it waits for there
  };
  std::mt19937 random;
  bool events;
  std::shared_ptr<fake_memory_state> memory = std::make_shared<fake_memory_state>();
  std::unique_ptr<pool> the_pool;
  std::vector<std::unique_ptr<stream_timeline>> streams;
  std::vector<live_block> live;
  std::map<stream_timeline*, std::vector<wait>> waits;
  std::map<unit, unit_owner> owners;
  std::string failure;
};

std::pair<unsigned, unsigned> seeds(unsigned count) {
  if (const char* one = std::getenv("SEED")) {
    const auto seed = static_cast<unsigned>(std::strtoul(one, nullptr, 10));
    return {seed, seed};
  }
  return {1, count};
}

void run_seeds(unsigned count, remap_mode mode, std::size_t max_size, bool events) {
  const auto [first, last] = seeds(count);
  for (unsigned seed = first; seed <= last && !::testing::Test::HasFailure(); ++seed) {
    random_run r(seed, mode, max_size, events);
    r.run();
    EXPECT_EQ(r.failure, "") << "seed " << seed << " (SEED=" << seed << " runs it alone)";
  }
}

TEST(S9_S11_RandomRemaps, BeforeGrowthNoByteIsLiveTwiceOrReusedTooSoon) {
  run_seeds(15, remap_mode::before_growth, 64 * 1024 * 1024, false);
}

TEST(S9_S11_RandomRemaps, BeforeGrowthFollowingEventsNoByteIsLiveTwiceOrReusedTooSoon) {
  run_seeds(15, remap_mode::before_growth, 64 * 1024 * 1024, true);
}

TEST(S9_S11_RandomRemaps, InsteadOfFailingAtTheCapNoByteIsLiveTwiceOrReusedTooSoon) {
  run_seeds(15, remap_mode::instead_of_failing, 40 * kGranule, false);
}

TEST(S9_S11_RandomRemaps, InsteadOfFailingFollowingEventsNoByteIsLiveTwiceOrReusedTooSoon) {
  run_seeds(15, remap_mode::instead_of_failing, 40 * kGranule, true);
}

}  // namespace
