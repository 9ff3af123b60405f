// Snapshots of pools (soma's own, over S10 statistics and S11 pending frees):
// somaMemPoolSnapshotTake, somaMemSnapshotTakeAll, somaMemSnapshotFree. With the pool quiet a
// snapshot is exact: live blocks sum to used, blocks tile the commits, commits sum to reserved.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "soma_test_util.hpp"

namespace {

using namespace soma_test;

class S10_Snapshot : public capi_test {};
class S10_SnapshotBadInput : public capi_test {};

/// Owns a snapshot for one test.
struct taken_snapshot {
  somaMemSnapshot data{};
  ~taken_snapshot() { EXPECT_EQ(somaMemSnapshotFree(&data), somaSuccess); }
  const somaMemPoolSnapshot& only() const {
    EXPECT_EQ(data.poolCount, 1u);
    return data.pools[0];
  }
};

const somaMemBlockInfo* block_at(const somaMemPoolSnapshot& pool, const void* address) {
  for (std::size_t i = 0; i < pool.blockCount; ++i) {
    if (pool.blocks[i].address == address) return &pool.blocks[i];
  }
  return nullptr;
}

std::uintptr_t address_of(const void* pointer) { return reinterpret_cast<std::uintptr_t>(pointer); }

/// The invariants of a quiet pool's snapshot.
void expect_consistent(const somaMemPoolSnapshot& pool) {
  std::uint64_t live = 0;
  std::uint64_t block_bytes = 0;
  for (std::size_t i = 0; i < pool.blockCount; ++i) {
    const somaMemBlockInfo& b = pool.blocks[i];
    block_bytes += b.bytes;
    EXPECT_EQ(b.bytes % 256, 0u);
    if (b.state == somaMemBlockLive) {
      live += b.requestedBytes;
      EXPECT_LE(b.requestedBytes, b.bytes);
    } else {
      EXPECT_EQ(b.requestedBytes, 0u);
    }
    if (i > 0) {
      const somaMemBlockInfo& before = pool.blocks[i - 1];
      EXPECT_LE(address_of(before.address) + before.bytes, address_of(b.address))
          << "blocks are in address order and do not overlap";
    }
  }
  std::uint64_t commit_bytes = 0;
  for (std::size_t i = 0; i < pool.commitCount; ++i) {
    const somaMemRange& c = pool.commits[i];
    commit_bytes += c.bytes;
    bool inside = false;
    for (std::size_t r = 0; r < pool.reservationCount; ++r) {
      const somaMemRange& reserved = pool.reservations[r];
      inside = inside ||
               (address_of(c.address) >= address_of(reserved.address) &&
                address_of(c.address) + c.bytes <= address_of(reserved.address) + reserved.bytes);
    }
    EXPECT_TRUE(inside) << "commit " << i << " lies inside a reservation";
  }
  EXPECT_EQ(live, pool.usedBytes) << "the live blocks sum to used";
  EXPECT_EQ(block_bytes, commit_bytes) << "the blocks tile the commits";
  EXPECT_EQ(commit_bytes, pool.reservedBytes) << "the commits sum to reserved";
  EXPECT_GE(pool.usedHighBytes, pool.usedBytes);
  EXPECT_GE(pool.reservedHighBytes, pool.reservedBytes);
}

TEST_F(S10_Snapshot, EveryFigureAddsUpAndEveryAllocationIsALiveBlock) {
  unique_stream stream;
  unique_pool pool(0);
  SOMA_ASSERT_OK(somaMemPoolSetName(pool, "snapshot-test"));
  const std::vector<std::size_t> sizes = {1, 1000, 4097, 1 * MiB + 3, 255, 70000};
  std::vector<void*> pointers;
  for (std::size_t size : sizes) {
    void* pointer = nullptr;
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, size, pool, stream));
    pointers.push_back(pointer);
  }
  SOMA_ASSERT_OK(somaFreeAsync(pointers[2], stream));
  taken_snapshot s;
  SOMA_ASSERT_OK(somaMemPoolSnapshotTake(pool, &s.data));
  const somaMemPoolSnapshot& p = s.only();
  EXPECT_EQ(p.pool, pool.get());
  EXPECT_EQ(p.device, 0);
  EXPECT_EQ(std::string(p.name), "snapshot-test");
  EXPECT_GE(p.reservationCount, 1u);
  expect_consistent(p);
  for (std::size_t i = 0; i < pointers.size(); ++i) {
    const somaMemBlockInfo* b = block_at(p, pointers[i]);
    ASSERT_NE(b, nullptr) << "allocation " << i;
    if (i == 2) {
      EXPECT_NE(b->state, somaMemBlockLive);
    } else {
      EXPECT_EQ(b->state, somaMemBlockLive);
      EXPECT_EQ(b->requestedBytes, sizes[i]);
    }
  }
  for (std::size_t i = 0; i < pointers.size(); ++i) {
    if (i != 2) {
      SOMA_ASSERT_OK(somaFreeAsync(pointers[i], stream));
    }
  }
}

/// Allocates 4 KiB from pool on stream, writes it there, frees it there, and returns the
/// block's entry in a snapshot taken right after (a pending free: nothing proved it yet).
somaMemBlockInfo freed_block(somaMemPool_t pool, somaStream_t stream, void** pointer) {
  somaMemBlockInfo found{};
  EXPECT_EQ(somaMallocFromPoolAsync(pointer, 4096, pool, stream), somaSuccess);
  EXPECT_EQ(somaMemsetAsync(*pointer, 1, 4096, stream), somaSuccess);
  EXPECT_EQ(somaFreeAsync(*pointer, stream), somaSuccess);
  taken_snapshot s;
  EXPECT_EQ(somaMemPoolSnapshotTake(pool, &s.data), somaSuccess);
  if (const somaMemBlockInfo* b = block_at(s.only(), *pointer); b != nullptr) found = *b;
  expect_consistent(s.only());
  return found;
}

TEST_F(S10_Snapshot, APendingFreeNamesItsStreamAndPositionUntilASynchronizeProvesIt) {
  unique_stream stream;
  unique_pool pool(0);
  void* pointer = nullptr;
  const somaMemBlockInfo pending = freed_block(pool, stream, &pointer);
  EXPECT_EQ(pending.state, somaMemBlockFreePending);
  EXPECT_EQ(pending.streamKnown, 1);
  EXPECT_EQ(pending.stream, stream.get());
  EXPECT_GE(pending.position, 1u) << "after the memset";
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  taken_snapshot s;
  SOMA_ASSERT_OK(somaMemPoolSnapshotTake(pool, &s.data));
  // Threshold 0 may give the memory back at the synchronize; if the block is still there it is
  // free for every stream now.
  if (const somaMemBlockInfo* b = block_at(s.only(), pointer); b != nullptr) {
    EXPECT_EQ(b->state, somaMemBlockFree);
    EXPECT_EQ(b->streamKnown, 0);
    EXPECT_EQ(b->position, 0u);
  }
  expect_consistent(s.only());
}

TEST_F(S10_Snapshot, AFreeOnTheDefaultStreamNamesTheNullStream) {
  unique_pool pool(0);
  void* pointer = nullptr;
  const somaMemBlockInfo pending = freed_block(pool, nullptr, &pointer);
  EXPECT_EQ(pending.state, somaMemBlockFreePending);
  EXPECT_EQ(pending.streamKnown, 1);
  EXPECT_EQ(pending.stream, nullptr);
  SOMA_ASSERT_OK(somaDeviceSynchronize());
}

TEST_F(S10_Snapshot, AFreeOnADestroyedStreamNamesNoStream) {
  unique_pool pool(0);
  void* pointer = nullptr;
  {
    unique_stream stream;
    (void)freed_block(pool, stream, &pointer);
  }
  taken_snapshot s;
  SOMA_ASSERT_OK(somaMemPoolSnapshotTake(pool, &s.data));
  const somaMemBlockInfo* b = block_at(s.only(), pointer);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->state, somaMemBlockFreePending) << "nothing proved the free yet";
  EXPECT_EQ(b->streamKnown, 0);
  EXPECT_EQ(b->stream, nullptr);
  expect_consistent(s.only());
  SOMA_ASSERT_OK(somaDeviceSynchronize());
}

TEST_F(S10_Snapshot, TakeAllHasTheDefaultPoolsFirstThenLivePoolsInCreationOrder) {
  unique_pool first(0);
  somaMemPool_t destroyed = nullptr;
  const somaMemPoolProps props = pool_props(0);
  SOMA_ASSERT_OK(somaMemPoolCreate(&destroyed, &props));
  unique_pool last(device_count() > 1 ? 1 : 0);
  SOMA_ASSERT_OK(somaMemPoolDestroy(destroyed));
  taken_snapshot s;
  SOMA_ASSERT_OK(somaMemSnapshotTakeAll(&s.data));
  const int devices = device_count();
  ASSERT_EQ(s.data.poolCount, static_cast<std::size_t>(devices) + 2);
  for (int d = 0; d < devices; ++d) {
    somaMemPool_t default_pool = nullptr;
    SOMA_ASSERT_OK(somaDeviceGetDefaultMemPool(&default_pool, d));
    EXPECT_EQ(s.data.pools[d].pool, default_pool);
    EXPECT_EQ(s.data.pools[d].device, d);
  }
  EXPECT_EQ(s.data.pools[devices].pool, first.get());
  EXPECT_EQ(s.data.pools[devices + 1].pool, last.get()) << "the destroyed pool is left out";
  for (std::size_t i = 0; i < s.data.poolCount; ++i) expect_consistent(s.data.pools[i]);
}

TEST_F(S10_Snapshot, ALongNameIsTruncatedAndTerminated) {
  unique_pool pool(0);
  const std::string name(100, 'n');
  SOMA_ASSERT_OK(somaMemPoolSetName(pool, name.c_str()));
  taken_snapshot s;
  SOMA_ASSERT_OK(somaMemPoolSnapshotTake(pool, &s.data));
  EXPECT_EQ(std::string(s.only().name), name.substr(0, 63));
}

TEST_F(S10_SnapshotBadInput, EachBadArgumentIsRefusedAndThePoolStaysUsable) {
  unique_pool pool(0);
  somaMemSnapshot out{};
  EXPECT_EQ(somaMemPoolSnapshotTake(pool, nullptr), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "snapshot is NULL")) << last_message();
  EXPECT_EQ(somaMemPoolSnapshotTake(nullptr, &out), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "the pool is NULL")) << last_message();
  EXPECT_EQ(out.poolCount, 0u);
  EXPECT_EQ(out.pools, nullptr);
  somaMemPool_t gone = destroyed_pool();
  EXPECT_EQ(somaMemPoolSnapshotTake(gone, &out), somaErrorInvalidResourceHandle);
  EXPECT_TRUE(contains(last_message(), "is not a live pool")) << last_message();
  EXPECT_EQ(somaMemSnapshotTakeAll(nullptr), somaErrorInvalidValue);
  EXPECT_EQ(somaMemSnapshotFree(nullptr), somaErrorInvalidValue);
  EXPECT_EQ(somaMemSnapshotFree(&out), somaSuccess) << "a zeroed snapshot frees nothing";
  // The pool is intact.
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 512, pool, nullptr));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, nullptr));
  SOMA_ASSERT_OK(somaDeviceSynchronize());
}

}  // namespace
