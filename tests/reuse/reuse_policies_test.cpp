// S11 reuse policies, on every backend: when memory freed on one stream serves another.
//
// A free on stream A is stamped (A, k), k = the number of operations enqueued on A so far.
// Stream B may take the block without any added ordering when it is B's own free, when a
// synchronize or a successful query proved A's position k (S12), when B's vector clock covers
// A:k through events (follow event dependencies), or when A has actually completed k
// (opportunistic). Otherwise the pool grows; only when growth fails with out of memory does it
// hand B the pending block and enqueue a wait of B on A:k (internal dependencies).
//
// Every test uses an explicit pool that keeps freed memory (release threshold UINT64_MAX), so
// "reused" and "fresh" are told apart by the address and by ReservedMemCurrent. A pool of one
// granule makes "the pool cannot grow" exact; a test that needs growth uses a pool with room
// and takes the memory a backend committed ahead of need (take_headroom: cuda commits 32 MiB
// steps), so fresh memory comes from real growth. A stream_gate holds A, so a free behind it
// is known incomplete. "B waited" is observed as a flag that B sets after the allocation (a
// stream value write) staying unset, and somaStreamQuery(B) == somaErrorNotReady, while A is
// held. Whether B's work ran after A's is read from what B's probe copied to the host: A's
// writer left a token in the block and in a sentinel word.
//
// S11_ReusePolicies runs over all 8 combinations of the three attributes; the expectation of
// each test is written as a function of the flags. S11_ReusePolicyAttributes checks the
// attributes' defaults and validation; reuse_rules_test.cpp pins single rules. The shared
// fixture is reuse_test_fixture.hpp; docs/reuse-policies.md tells the rules in prose.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "reuse_test_fixture.hpp"

namespace {

using namespace soma_test;
using namespace soma_test::reuse;
using namespace std::chrono_literals;

// ---- all 8 combinations ----------------------------------------------------------------

class S11_ReusePolicies : public reuse_fixture, public ::testing::WithParamInterface<int> {
 protected:
  policies policy() const { return decode(GetParam()); }

  /// With A held and the one-granule pool full: a whole granule on A is `block` again (all of
  /// it was freed on A), without growth. Then frees it, releases A and expects the pool empty.
  void expect_whole_block_serves_a_again(void* block, const ::testing::Message& why) {
    void* whole = nullptr;
    SOMA_ASSERT_OK(allocate(&whole, a_)) << why;
    EXPECT_EQ(whole, block);
    EXPECT_EQ(reserved(), granule_) << "never grew";
    SOMA_ASSERT_OK(somaFreeAsync(whole, a_));
    gate_.open();
    SOMA_ASSERT_OK(somaStreamSynchronize(a_));
    EXPECT_EQ(used(), 0u);
  }
};

TEST_P(S11_ReusePolicies, AttributesReadBackAsSet) {
  ASSERT_NO_FATAL_FAILURE(make_pool(1, policy()));
  EXPECT_EQ(pool_int(pool(), somaMemPoolReuseFollowEventDependencies), policy().follow ? 1 : 0);
  EXPECT_EQ(pool_int(pool(), somaMemPoolReuseAllowOpportunistic), policy().opportunistic ? 1 : 0);
  EXPECT_EQ(pool_int(pool(), somaMemPoolReuseAllowInternalDependencies), policy().internal ? 1 : 0);
}

TEST_P(S11_ReusePolicies, SameStreamReuseIsAlwaysAllowed) {
  ASSERT_NO_FATAL_FAILURE(make_pool(1, policy()));
  SOMA_ASSERT_OK(gate_.hold(a_));  // nothing on A completes: only the stream's order counts
  void* p = nullptr;
  SOMA_ASSERT_OK(allocate(&p, a_));
  SOMA_ASSERT_OK(somaFreeAsync(p, a_));

  void* q = nullptr;
  SOMA_ASSERT_OK(allocate(&q, a_)) << "same size, same stream: the stream's cache";
  EXPECT_EQ(q, p);
  SOMA_ASSERT_OK(somaFreeAsync(q, a_));

  void* half = nullptr;
  SOMA_ASSERT_OK(allocate(&half, a_, granule_ / 2)) << "another size: the pool's index";
  EXPECT_EQ(half, p);
  EXPECT_EQ(used(), granule_ / 2);
  SOMA_ASSERT_OK(somaFreeAsync(half, a_));

  ASSERT_NO_FATAL_FAILURE(expect_whole_block_serves_a_again(
      p, ::testing::Message() << "the two halves, both freed on A, merge again"));
}

// S2: a stream reuses its own frees whatever lies between them on the stream. Here work on A
// comes between the two frees (on cuda every free takes a point of its own anyway), so the
// halves carry different stamps; the whole block still serves A with the pool full.
TEST_P(S11_ReusePolicies, SameStreamReuseMergesItsFreesMadeAtDifferentPoints) {
  ASSERT_NO_FATAL_FAILURE(make_pool(1, policy()));
  SOMA_ASSERT_OK(gate_.hold(a_));
  void* p = nullptr;
  SOMA_ASSERT_OK(allocate(&p, a_));
  void* upper = static_cast<char*>(p) + granule_ / 2;
  SOMA_ASSERT_OK(somaFreeAsync(p, a_));
  void* half = nullptr;
  SOMA_ASSERT_OK(allocate(&half, a_, granule_ / 2));
  ASSERT_EQ(half, p);
  SOMA_ASSERT_OK(somaMemsetAsync(half, 0, granule_ / 2, a_));  // A's work between the frees
  SOMA_ASSERT_OK(somaFreeAsync(half, a_));
  ASSERT_NO_FATAL_FAILURE(expect_whole_block_serves_a_again(
      p, ::testing::Message() << "the lower half freed after A's memset, the upper (" << upper
                              << ") before it: both are A's"));
}

// A's free is pending (A held) and nothing orders B after it: whatever the flags, B gets fresh
// memory while the pool has some (cpu grows by a granule; cuda committed the second granule
// with the first), and B is not made to wait. Once the pool is full, B gets the pending block
// with an inserted wait iff internal dependencies are on; otherwise out of memory.
TEST_P(S11_ReusePolicies, UnorderedPendingFreeGrowsFirstAndWaitsOnlyWhenFull) {
  ASSERT_NO_FATAL_FAILURE(make_pool(2, policy()));
  ASSERT_NO_FATAL_FAILURE(free_on_a(/*hold=*/true));
  void* const p = freed_;

  void* q = nullptr;
  SOMA_ASSERT_OK(allocate(&q, b_)) << "the pool has room for one more granule";
  EXPECT_NE(q, p) << "growing beats waiting: a pending free on a held stream is not reused";
  EXPECT_EQ(reserved(), 2 * granule_);
  EXPECT_EQ(used(), granule_);
  stream_flag b_first_ran;
  SOMA_ASSERT_OK(launch_marker(b_, b_first_ran));
  expect_runs(b_, b_first_ran, "fresh memory needs no wait on A");

  void* r = nullptr;
  const somaError_t status = allocate(&r, b_);
  if (policy().internal) {
    SOMA_ASSERT_OK(status) << "full pool: internal dependencies take A's pending block";
    EXPECT_EQ(r, p);
    ASSERT_NO_FATAL_FAILURE(
        expect_probe_waits_for_a(b_, r, 0xB2, "the pool made B wait for A's free"));
    EXPECT_EQ(used(), 2 * granule_);
    SOMA_ASSERT_OK(somaFreeAsync(r, b_));
  } else {
    EXPECT_EQ(status, somaErrorMemoryAllocation)
        << "internal dependencies off: a full pool does not wait on another stream";
    EXPECT_EQ(r, nullptr);
    EXPECT_EQ(used(), granule_) << "a failed call changes nothing";
    EXPECT_EQ(reserved(), 2 * granule_);
    gate_.open();
  }
  // Whatever the flags: once a synchronize proved A's free, B reuses the block.
  SOMA_ASSERT_OK(somaStreamSynchronize(a_));
  SOMA_ASSERT_OK(somaStreamSynchronize(b_));
  void* s = nullptr;
  SOMA_ASSERT_OK(allocate(&s, b_)) << "proven free: any stream, any flags";
  EXPECT_EQ(s, p);
  EXPECT_EQ(reserved(), 2 * granule_);
  SOMA_ASSERT_OK(somaFreeAsync(s, b_));
  SOMA_ASSERT_OK(somaFreeAsync(q, b_));
  SOMA_ASSERT_OK(somaStreamSynchronize(b_));
  EXPECT_EQ(used(), 0u);
}

// B waits on an event recorded on A after the free: B's clock covers A:k. With follow event
// dependencies B reuses the block at once (no growth); without, the pool grows (A is held, so
// opportunistic cannot apply, and internal dependencies do not apply while the pool can grow).
TEST_P(S11_ReusePolicies, EventAfterFreeIsFollowedWhenThePoolCanGrow) {
  ASSERT_NO_FATAL_FAILURE(make_growable_pool(policy()));
  ASSERT_NO_FATAL_FAILURE(free_on_a(/*hold=*/true));
  ASSERT_NO_FATAL_FAILURE(wait_for(b_, a_));

  void* q = nullptr;
  ASSERT_NO_FATAL_FAILURE(expect_served(&q, b_, freed_, policy().follow,
                                        "B already waits on the free: reuse without growth",
                                        "follow event dependencies are off"));
  EXPECT_EQ(used(), granule_);
  ASSERT_NO_FATAL_FAILURE(
      expect_probe_waits_for_a(b_, q, 0xB2, "B waits on the event (the user's own dependency)"));
  SOMA_ASSERT_OK(somaFreeAsync(q, b_));
  SOMA_ASSERT_OK(somaStreamSynchronize(b_));
}

// Same, in a pool that cannot grow: the block goes to B if follow event dependencies cover it,
// or through an (here redundant) internal dependency; with both off, out of memory.
TEST_P(S11_ReusePolicies, EventAfterFreeWhenThePoolIsFull) {
  ASSERT_NO_FATAL_FAILURE(make_pool(1, policy()));
  ASSERT_NO_FATAL_FAILURE(free_on_a(/*hold=*/true));
  ASSERT_NO_FATAL_FAILURE(wait_for(b_, a_));

  void* q = nullptr;
  const somaError_t status = allocate(&q, b_);
  if (policy().follow || policy().internal) {
    SOMA_ASSERT_OK(status);
    EXPECT_EQ(q, freed_);
    ASSERT_NO_FATAL_FAILURE(expect_probe_waits_for_a(b_, q, 0xB2, "B is ordered after A's free"));
    SOMA_ASSERT_OK(somaFreeAsync(q, b_));
  } else {
    EXPECT_EQ(status, somaErrorMemoryAllocation)
        << "follow and internal dependencies off, A held, pool full";
    EXPECT_EQ(used(), 0u);
    gate_.open();
  }
  EXPECT_EQ(reserved(), granule_);
  SOMA_ASSERT_OK(somaDeviceSynchronize());
}

// A -> event -> B -> event -> C: C's clock covers A's free through B.
TEST_P(S11_ReusePolicies, EventChainIsTransitive) {
  ASSERT_NO_FATAL_FAILURE(make_growable_pool(policy()));
  ASSERT_NO_FATAL_FAILURE(free_on_a(/*hold=*/true));
  ASSERT_NO_FATAL_FAILURE(wait_for(b_, a_));
  stream_flag b_ran;
  SOMA_ASSERT_OK(launch_marker(b_, b_ran));  // B has work of its own between the two events
  ASSERT_NO_FATAL_FAILURE(wait_for(c_, b_));

  void* q = nullptr;
  ASSERT_NO_FATAL_FAILURE(expect_served(&q, c_, freed_, policy().follow,
                                        "C waits on B, which waits on A's free",
                                        "follow event dependencies are off"));
  ASSERT_NO_FATAL_FAILURE(
      expect_probe_waits_for_a(c_, q, 0xC3, "C waits on B, which waits on A", &b_ran));
  SOMA_ASSERT_OK(somaFreeAsync(q, c_));
  SOMA_ASSERT_OK(somaDeviceSynchronize());
}

// A's free has completed (a later marker on A was seen) but nothing proved it and nothing
// orders B after it: reused iff opportunistic; otherwise the pool grows.
TEST_P(S11_ReusePolicies, CompletedFreeIsReusedOnlyOpportunistically) {
  ASSERT_NO_FATAL_FAILURE(make_growable_pool(policy()));
  ASSERT_NO_FATAL_FAILURE(complete_free_on_a());

  void* q = nullptr;
  ASSERT_NO_FATAL_FAILURE(expect_served(
      &q, b_, freed_, policy().opportunistic, "the free already ran: reuse without growth",
      "opportunistic reuse is off: only proof or a dependency lets B reuse"));
  ASSERT_NO_FATAL_FAILURE(expect_probe_runs_after_a(b_, q, 0xB2, "nothing B waits for is pending"));
  SOMA_ASSERT_OK(somaFreeAsync(q, b_));
  SOMA_ASSERT_OK(somaDeviceSynchronize());
}

// Same, in a pool that cannot grow: opportunistic reuse, else an internal dependency on a
// position A has already reached (B does not actually wait), else out of memory.
TEST_P(S11_ReusePolicies, CompletedFreeWhenThePoolIsFull) {
  ASSERT_NO_FATAL_FAILURE(make_pool(1, policy()));
  ASSERT_NO_FATAL_FAILURE(complete_free_on_a());

  void* q = nullptr;
  const somaError_t status = allocate(&q, b_);
  if (policy().opportunistic || policy().internal) {
    SOMA_ASSERT_OK(status);
    EXPECT_EQ(q, freed_);
    ASSERT_NO_FATAL_FAILURE(
        expect_probe_runs_after_a(b_, q, 0xB2, "A has already passed the free"));
    SOMA_ASSERT_OK(somaFreeAsync(q, b_));
  } else {
    EXPECT_EQ(status, somaErrorMemoryAllocation) << "opportunistic and internal off, no proof";
    EXPECT_EQ(used(), 0u);
  }
  SOMA_ASSERT_OK(somaDeviceSynchronize());
}

// Every way of proving a free complete lets any stream reuse it, whatever the flags (with all
// three off this is the only way across streams). The pool could grow: reuse must win.
TEST_P(S11_ReusePolicies, ProvenFreeServesAnyStreamBeforeGrowth) {
  ASSERT_NO_FATAL_FAILURE(make_growable_pool(policy()));
  enum class proof {
    stream_synchronize,
    stream_query,
    event_synchronize,
    event_query,
    device_synchronize
  };
  const proof proofs[] = {proof::stream_synchronize, proof::stream_query, proof::event_synchronize,
                          proof::event_query, proof::device_synchronize};
  void* first = nullptr;
  std::uint64_t reserved_first = 0;
  for (proof how : proofs) {
    SCOPED_TRACE("proof " + std::to_string(static_cast<int>(how)));
    unique_stream a;
    stream_gate gate;
    void* p = nullptr;
    SOMA_ASSERT_OK(allocate(&p, a));
    if (first == nullptr) {
      first = p;
      ASSERT_NO_FATAL_FAILURE(take_headroom());
      reserved_first = reserved();
    }
    EXPECT_EQ(p, first) << "the block proven in the previous round";
    SOMA_ASSERT_OK(gate.hold(a));
    SOMA_ASSERT_OK(launch_writer(a, make_writer(p, granule_, 0xA1)));
    SOMA_ASSERT_OK(somaFreeAsync(p, a));
    unique_event after_free;
    SOMA_ASSERT_OK(somaEventRecord(after_free, a));
    gate.open();
    switch (how) {
      case proof::stream_synchronize:
        SOMA_ASSERT_OK(somaStreamSynchronize(a));
        break;
      case proof::stream_query:
        ASSERT_TRUE(drains(a));
        break;
      case proof::event_synchronize:
        SOMA_ASSERT_OK(somaEventSynchronize(after_free));
        break;
      case proof::event_query: {
        const auto deadline = std::chrono::steady_clock::now() + 10s;
        somaError_t status = somaErrorNotReady;
        while ((status = somaEventQuery(after_free)) == somaErrorNotReady &&
               std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(1ms);
        }
        SOMA_ASSERT_OK(status);
        break;
      }
      case proof::device_synchronize:
        SOMA_ASSERT_OK(somaDeviceSynchronize());
        break;
    }
    void* q = nullptr;
    SOMA_ASSERT_OK(allocate(&q, b_));
    EXPECT_EQ(q, p) << "a proven free is reused before the pool grows";
    EXPECT_EQ(reserved(), reserved_first);
    SOMA_ASSERT_OK(somaFreeAsync(q, b_));
    SOMA_ASSERT_OK(somaStreamSynchronize(b_));
  }
}

// Memory a stream freed and cached for itself serves another stream once the free is proven:
// the pool drains every stream's cache on a miss instead of growing.
TEST_P(S11_ReusePolicies, IdleStreamCacheServesAnotherStreamOnceProven) {
  ASSERT_NO_FATAL_FAILURE(make_growable_pool(policy()));
  // The free is of the size of the next request: into A's cache.
  ASSERT_NO_FATAL_FAILURE(free_on_a(/*hold=*/false));
  SOMA_ASSERT_OK(somaStreamSynchronize(a_));
  void* q = nullptr;
  ASSERT_NO_FATAL_FAILURE(
      expect_served(&q, b_, freed_, /*reused=*/true, "a proven free in A's cache serves B", ""));
  SOMA_ASSERT_OK(somaFreeAsync(q, b_));
  SOMA_ASSERT_OK(somaStreamSynchronize(b_));
}

// A stream frees memory and is destroyed; its work has completed and the device was
// synchronized. The memory serves other streams, whatever the flags (never stranded), even in
// a pool that cannot grow.
TEST_P(S11_ReusePolicies, FreesOfADestroyedStreamAreNotStranded) {
  ASSERT_NO_FATAL_FAILURE(make_pool(1, policy()));
  ASSERT_NO_FATAL_FAILURE(free_on_a(/*hold=*/false));
  const stream_flag& a_after_free = mark_and_destroy_a();
  ASSERT_TRUE(a_after_free.wait()) << "a destroyed stream still runs its queued work";
  SOMA_ASSERT_OK(somaDeviceSynchronize());
  expect_b_reuses_freed("memory freed on a destroyed stream is stranded");
}

// Same, proven through an event recorded on the stream after the free.
TEST_P(S11_ReusePolicies, FreesOfADestroyedStreamProvenByAnEvent) {
  ASSERT_NO_FATAL_FAILURE(make_pool(1, policy()));
  ASSERT_NO_FATAL_FAILURE(free_on_a(/*hold=*/true));
  unique_event after_free;
  SOMA_ASSERT_OK(somaEventRecord(after_free, a_));
  a_.reset();
  gate_.open();
  SOMA_ASSERT_OK(somaEventSynchronize(after_free));
  expect_b_reuses_freed("the event proved the free of a destroyed stream");
}

INSTANTIATE_TEST_SUITE_P(AllCombinations, S11_ReusePolicies, ::testing::Range(0, 8), policy_name);

// ---- attributes --------------------------------------------------------------------------

class S11_ReusePolicyAttributes : public capi_test {};

const somaMemPoolAttr kReuseAttributes[] = {somaMemPoolReuseFollowEventDependencies,
                                            somaMemPoolReuseAllowOpportunistic,
                                            somaMemPoolReuseAllowInternalDependencies};

TEST_F(S11_ReusePolicyAttributes, AllOnByDefault) {
  unique_pool explicit_pool(0);
  for (int device = 0; device < device_count(); ++device) {
    for (somaMemPoolAttr attr : kReuseAttributes) {
      EXPECT_EQ(pool_int(default_pool(device), attr), 1)
          << "default pool of device " << device << ", attribute " << attr;
    }
  }
  for (somaMemPoolAttr attr : kReuseAttributes) {
    EXPECT_EQ(pool_int(explicit_pool, attr), 1) << "new explicit pool, attribute " << attr;
  }
}

TEST_F(S11_ReusePolicyAttributes, SetAndGetRoundTripOneAttributeAtATime) {
  unique_pool pool(0);
  for (somaMemPoolAttr attr : kReuseAttributes) {
    SOMA_ASSERT_OK(set_pool_int(pool, attr, 0));
    for (somaMemPoolAttr other : kReuseAttributes) {
      EXPECT_EQ(pool_int(pool, other), other == attr ? 0 : 1) << "after setting " << attr;
    }
    SOMA_ASSERT_OK(set_pool_int(pool, attr, 1));
    EXPECT_EQ(pool_int(pool, attr), 1);
  }
}

TEST_F(S11_ReusePolicyAttributes, ValuesOtherThanZeroOrOneAreRejected) {
  unique_pool pool(0);
  for (somaMemPoolAttr attr : kReuseAttributes) {
    SOMA_ASSERT_OK(set_pool_int(pool, attr, 0));
    for (int bad : {2, -1, 256, 0x7fffffff}) {
      EXPECT_EQ(set_pool_int(pool, attr, bad), somaErrorInvalidValue)
          << "attribute " << attr << " value " << bad;
      EXPECT_EQ(pool_int(pool, attr), 0) << "a rejected value changes nothing";
    }
    EXPECT_EQ(somaMemPoolSetAttribute(pool, attr, nullptr), somaErrorInvalidValue);
    EXPECT_EQ(somaMemPoolGetAttribute(pool, attr, nullptr), somaErrorInvalidValue);
    SOMA_ASSERT_OK(set_pool_int(pool, attr, 1));
  }
}

TEST_F(S11_ReusePolicyAttributes, ArePerPool) {
  unique_pool first(0);
  unique_pool second(0);
  for (somaMemPoolAttr attr : kReuseAttributes) SOMA_ASSERT_OK(set_pool_int(first, attr, 0));
  for (somaMemPoolAttr attr : kReuseAttributes) {
    EXPECT_EQ(pool_int(first, attr), 0);
    EXPECT_EQ(pool_int(second, attr), 1);
    EXPECT_EQ(pool_int(default_pool(0), attr), 1);
  }
}

}  // namespace
