// Memory history (soma's own, over S1, S2, S9, S11 and S12): somaMemRecordHistory,
// somaMemHistoryExportTrace, somaMemScopePush/Pop. The trace names each allocation's reuse
// rule (S11) and scope, the inserted waits, growth and release (S9), synchronize points (S12)
// and out-of-memory failures; snapshots carry the scope of live blocks.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "exported_trace.hpp"
#include "soma_test_util.hpp"
#include "stream_gate.hpp"

namespace {

using namespace soma_test;

class S11_History : public capi_test {
 protected:
  void SetUp() override {
    capi_test::SetUp();
    SOMA_ASSERT_OK(somaMemRecordHistory(10000));
  }
  void TearDown() override {
    EXPECT_EQ(somaMemRecordHistory(0), somaSuccess);
    while (somaMemScopePop() == somaSuccess) {
    }
    capi_test::TearDown();
  }
  /// The trace exported now.
  static std::string trace() { return exported_trace("history_test"); }
  static std::size_t count(const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
      ++n;
    return n;
  }

  std::size_t granule = granularity_bytes(0);
};

class S11_HistoryBadInput : public S11_History {};

TEST_F(S11_History, EachAllocationNamesTheRuleThatServedIt) {
  unique_pool pool(0);
  unique_stream stream;
  void* first = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&first, MiB, pool, stream));
  SOMA_ASSERT_OK(somaFreeAsync(first, stream));
  void* again = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&again, MiB, pool, stream));
  EXPECT_EQ(again, first);  // S11: the stream's own free serves it at once
  SOMA_ASSERT_OK(somaFreeAsync(again, stream));
  const std::string text = trace();
  EXPECT_EQ(count(text, "\"name\":\"allocate 1.0 MiB"), 2u) << text;
  EXPECT_EQ(count(text, "\"name\":\"free 1.0 MiB"), 2u) << text;
  EXPECT_EQ(count(text, "\"reuse\":\"growth\""), 1u) << text;
  EXPECT_EQ(count(text, "\"reuse\":\"stream cache (same stream)\""), 1u) << text;
  EXPECT_EQ(count(text, "\"name\":\"grow "), 1u) << text;
  EXPECT_GE(count(text, "\"reserved_bytes\":"), 4u) << "a counter after each pool event";
}

TEST_F(S11_History, AFreeOnOneThreadComesBeforeAnotherThreadsReuseOfTheBlock) {
  // Allocations and frees reuse their thread's last clock reading for a while (cheap stamps),
  // so the main thread's reuse below would carry a stamp from before the other thread's free,
  // but for the block's own order.
  unique_pool pool(0);
  unique_stream stream;
  void* first = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&first, 2 * MiB, pool, stream));
  SOMA_ASSERT_OK(somaFreeAsync(first, stream));  // a cheap stamp: read now, reused next
  void* block = nullptr;
  std::thread([&] {
    EXPECT_EQ(somaMallocFromPoolAsync(&block, MiB, pool, stream), somaSuccess);
    EXPECT_EQ(somaFreeAsync(block, stream), somaSuccess);
  }).join();
  void* reused = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&reused, MiB, pool, stream));
  EXPECT_EQ(reused, block);  // S11: the stream's own free, from its cache
  const std::string text = trace();
  const std::size_t allocated = text.find("\"name\":\"allocate 1.0 MiB");
  const std::size_t freed = text.find("\"name\":\"free 1.0 MiB");
  const std::size_t again = text.find("\"name\":\"allocate 1.0 MiB", allocated + 1);
  ASSERT_NE(again, std::string::npos) << text;
  EXPECT_LT(allocated, freed) << text;
  EXPECT_LT(freed, again) << "the reuse comes after the free it reuses\n" << text;
  SOMA_EXPECT_OK(somaFreeAsync(reused, stream));
}

TEST_F(S11_History, AWaitTheAllocatorInsertsIsRecorded) {
  unique_pool pool(0, granule);
  SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolReuseFollowEventDependencies, 0));
  SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolReuseAllowOpportunistic, 0));
  unique_stream freeing;
  unique_stream waiting;
  stream_gate gate;
  SOMA_ASSERT_OK(gate.hold(freeing));  // the free stays pending until the gate opens
  void* block = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&block, granule, pool, freeing));
  SOMA_ASSERT_OK(somaFreeAsync(block, freeing));
  void* reused = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&reused, granule, pool, waiting));
  EXPECT_EQ(reused, block);
  gate.open();
  SOMA_ASSERT_OK(somaFreeAsync(reused, waiting));
  const std::string text = trace();
  EXPECT_EQ(count(text, "\"reuse\":\"internal dependency\""), 1u) << text;
  EXPECT_EQ(count(text, "\"name\":\"wait inserted\""), 1u) << text;
}

TEST_F(S11_History, SynchronizeReleaseAndTrimAreRecorded) {
  unique_pool pool(0);
  unique_stream stream;
  void* block = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&block, 2 * granule, pool, stream));
  SOMA_ASSERT_OK(somaFreeAsync(block, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));  // threshold 0: the memory goes back (S9)
  SOMA_ASSERT_OK(somaMemPoolTrimTo(pool, 0));
  const std::string text = trace();
  EXPECT_EQ(count(text, "\"name\":\"stream synchronize\""), 1u) << text;
  EXPECT_GE(count(text, "\"name\":\"release "), 1u) << text;
  EXPECT_EQ(count(text, "\"name\":\"trim\""), 1u) << text;
  EXPECT_NE(text.find("\"reserved_bytes\":0,"), std::string::npos) << text;
}

TEST_F(S11_History, AnOutOfMemoryFailureIsRecordedWithItsMessage) {
  unique_pool pool(0, granule);
  void* pointer = nullptr;
  EXPECT_EQ(somaMallocFromPoolAsync(&pointer, 2 * granule, pool, nullptr),
            somaErrorMemoryAllocation);
  const std::string text = trace();
  EXPECT_EQ(count(text, "\"name\":\"out of memory "), 1u) << text;
  EXPECT_NE(text.find("What would have let it succeed"), std::string::npos) << text;
}

TEST_F(S11_History, ScopesLabelAllocationsInTheTraceAndTheSnapshot) {
  unique_pool pool(0);
  unique_stream stream;
  SOMA_ASSERT_OK(somaMemScopePush("forward"));
  SOMA_ASSERT_OK(somaMemScopePush("attention"));
  void* inner = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&inner, MiB, pool, stream));
  SOMA_ASSERT_OK(somaMemScopePop());
  void* outer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&outer, 2 * MiB, pool, stream));
  SOMA_ASSERT_OK(somaMemScopePop());
  void* none = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&none, 3 * MiB, pool, stream));

  somaMemSnapshot snapshot{};
  SOMA_ASSERT_OK(somaMemPoolSnapshotTake(pool, &snapshot));
  auto scope_of = [&](const void* address) -> std::string {
    for (std::size_t i = 0; i < snapshot.pools[0].blockCount; ++i) {
      const somaMemBlockInfo& b = snapshot.pools[0].blocks[i];
      if (b.address == address) return b.scope != nullptr ? b.scope : "(none)";
    }
    return "(no such block)";
  };
  EXPECT_EQ(scope_of(inner), "attention");
  EXPECT_EQ(scope_of(outer), "forward");
  EXPECT_EQ(scope_of(none), "(none)");
  SOMA_EXPECT_OK(somaMemSnapshotFree(&snapshot));

  const std::string text = trace();
  EXPECT_EQ(count(text, "\"scope\":\"attention\""), 1u) << text;
  EXPECT_EQ(count(text, "\"scope\":\"forward\""), 1u) << text;
  for (void* p : {inner, outer, none}) SOMA_EXPECT_OK(somaFreeAsync(p, stream));
}

TEST_F(S11_History, AReusedBlockDoesNotKeepAnEarlierAllocationsScope) {
  unique_pool pool(0);
  unique_stream stream;
  void* block = nullptr;
  SOMA_ASSERT_OK(somaMemScopePush("step 1"));
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&block, MiB, pool, stream));
  SOMA_ASSERT_OK(somaFreeAsync(block, stream));
  SOMA_ASSERT_OK(somaMemRecordHistory(0));  // scopes label nothing once recording stops
  void* again = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&again, MiB, pool, stream));
  ASSERT_EQ(again, block);  // the stream's own free, from its cache
  somaMemSnapshot snapshot{};
  SOMA_ASSERT_OK(somaMemPoolSnapshotTake(pool, &snapshot));
  for (std::size_t i = 0; i < snapshot.pools[0].blockCount; ++i) {
    if (snapshot.pools[0].blocks[i].address == again) {
      EXPECT_EQ(snapshot.pools[0].blocks[i].scope, nullptr);
    }
  }
  SOMA_EXPECT_OK(somaMemSnapshotFree(&snapshot));
  SOMA_EXPECT_OK(somaFreeAsync(again, stream));
}

TEST_F(S11_History, TheRingKeepsTheNewestEventsAndCountsTheDropped) {
  SOMA_ASSERT_OK(somaMemRecordHistory(4));
  unique_pool pool(0);
  void* block = nullptr;
  for (int i = 0; i < 5; ++i) {
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&block, MiB, pool, nullptr));
    SOMA_ASSERT_OK(somaFreeAsync(block, nullptr));
  }
  const std::string text = trace();
  EXPECT_EQ(count(text, "\"ph\":\"i\""), 4u) << text;
  EXPECT_NE(text.find("\"capacity_events\":4"), std::string::npos) << text;
  EXPECT_EQ(text.find("\"dropped_events\":0"), std::string::npos) << text;
}

TEST_F(S11_History, ThreadsRecordIntoOneRingWhileItIsExported) {
  SOMA_ASSERT_OK(somaMemRecordHistory(512));  // small: the ring wraps many times
  unique_pool pool(0);
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      somaStream_t stream = nullptr;
      if (somaStreamCreate(&stream) != somaSuccess) {
        failed = true;
        return;
      }
      const std::string label = "thread " + std::to_string(t);
      if (somaMemScopePush(label.c_str()) != somaSuccess) failed = true;
      for (int i = 0; i < 2000 && !failed; ++i) {
        void* p = nullptr;
        if (somaMallocFromPoolAsync(&p, KiB * (1 + i % 7), pool, stream) != somaSuccess ||
            somaFreeAsync(p, stream) != somaSuccess)
          failed = true;
      }
      if (somaMemScopePop() != somaSuccess) failed = true;
      if (somaStreamDestroy(stream) != somaSuccess) failed = true;
    });
  }
  for (int i = 0; i < 5; ++i) {
    const std::string text = trace();
    EXPECT_LE(count(text, "\"ph\":\"i\""), 512u);
  }
  for (auto& thread : threads) thread.join();
  EXPECT_FALSE(failed) << last_message();
  const std::string text = trace();
  EXPECT_EQ(count(text, "\"ph\":\"i\""), 512u) << "a full ring, every slot written";
  EXPECT_NE(text.find("\"scope\":\"thread "), std::string::npos);
}

TEST_F(S11_History, StoppedRecordingAddsNothingAndKeepsWhatWasRecorded) {
  unique_pool pool(0);
  void* block = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&block, MiB, pool, nullptr));
  SOMA_ASSERT_OK(somaMemRecordHistory(0));
  SOMA_ASSERT_OK(somaFreeAsync(block, nullptr));
  const std::string text = trace();
  EXPECT_EQ(count(text, "\"name\":\"allocate"), 1u) << text;
  EXPECT_EQ(count(text, "\"name\":\"free"), 0u) << text;
}

TEST_F(S11_HistoryBadInput, EachIsRefusedWithAMessageAndChangesNothing) {
  unique_pool pool(0);
  void* block = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&block, MiB, pool, nullptr));
  EXPECT_EQ(somaMemRecordHistory((std::size_t{1} << 26) + 1), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "above the limit")) << last_message();
  EXPECT_EQ(somaMemHistoryExportTrace(nullptr), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "path")) << last_message();
  EXPECT_EQ(somaMemHistoryExportTrace(""), somaErrorInvalidValue);
  EXPECT_EQ(somaMemHistoryExportTrace("/nonexistent-dir/trace.json"), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "ENOENT")) << last_message();
  EXPECT_EQ(somaMemScopePush(nullptr), somaErrorInvalidValue);
  EXPECT_EQ(somaMemScopePush(""), somaErrorInvalidValue);
  EXPECT_EQ(somaMemScopePop(), somaErrorIllegalState);
  EXPECT_TRUE(contains(last_message(), "no scope open")) << last_message();
  // Recording went on through every refusal, and the pool still serves.
  SOMA_ASSERT_OK(somaFreeAsync(block, nullptr));
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&block, MiB, pool, nullptr));
  SOMA_ASSERT_OK(somaFreeAsync(block, nullptr));
  const std::string text = trace();
  EXPECT_EQ(count(text, "\"name\":\"allocate"), 2u) << text;
}

}  // namespace
