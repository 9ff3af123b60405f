// The C API of snapshots (soma's own): the runtime's pool reports laid out as C arrays that
// stay valid until somaMemSnapshotFree; a pool's latest out-of-memory failure as data.
#include <algorithm>
#include <cstring>
#include <iterator>
#include <optional>
#include <memory>
#include <vector>

#include "capi/capi_support.hpp"
#include "soma/soma.h"

using namespace soma::capi;  // NOLINT(google-build-using-namespace): the C API's helpers

namespace {

using soma::detail::address_range;
using soma::detail::block_view;
using soma::detail::pool_report;

// What a somaMemSnapshot points into; its `storage`.
struct snapshot_storage {
  std::vector<somaMemPoolSnapshot> pools;
  std::vector<std::vector<somaMemRange>> ranges;  // two per pool: reservations, commits
  std::vector<std::vector<somaMemBlockInfo>> blocks;
};

std::vector<somaMemRange> c_ranges(const std::vector<address_range>& ranges) {
  std::vector<somaMemRange> out;
  out.reserve(ranges.size());
  for (const address_range& r : ranges)
    out.push_back({reinterpret_cast<void*>(r.address), r.size_bytes});
  return out;
}

somaMemBlockInfo c_block(const block_view& b, const std::optional<std::uintptr_t>& stream) {
  somaMemBlockInfo out{};
  out.address = reinterpret_cast<void*>(b.address);
  out.bytes = b.size_bytes;
  out.requestedBytes = b.requested_bytes;
  switch (b.what) {
    case block_view::state::live:
      out.state = somaMemBlockLive;
      out.scope = soma::detail::memory_history::process().label_c_str(b.scope);
      break;
    case block_view::state::free:
      out.state = somaMemBlockFree;
      break;
    case block_view::state::pending:
      out.state = somaMemBlockFreePending;
      out.position = b.position;
      out.streamKnown = stream.has_value() ? 1 : 0;
      out.stream = reinterpret_cast<somaStream_t>(stream.value_or(0));
      break;
  }
  return out;
}

void add_pool(snapshot_storage& storage, const pool_report& report) {
  somaMemPoolSnapshot pool{};
  pool.pool = reinterpret_cast<somaMemPool_t>(report.pool_handle);
  pool.device = report.device;
  const std::size_t name_bytes = std::min(report.name.size(), sizeof pool.name - 1);
  std::memcpy(pool.name, report.name.data(), name_bytes);
  pool.reservedBytes = report.contents.reserved_bytes;
  pool.reservedHighBytes = report.contents.reserved_high_bytes;
  pool.usedBytes = report.contents.used_bytes;
  pool.usedHighBytes = report.contents.used_high_bytes;
  // Vectors of vectors: moving the outer vector leaves the inner arrays where they are.
  const std::vector<somaMemRange>& reservations =
      storage.ranges.emplace_back(c_ranges(report.contents.reservations));
  const std::vector<somaMemRange>& commits =
      storage.ranges.emplace_back(c_ranges(report.contents.commits));
  std::vector<somaMemBlockInfo>& blocks = storage.blocks.emplace_back();
  blocks.reserve(report.contents.blocks.size());
  for (std::size_t i = 0; i < report.contents.blocks.size(); ++i)
    blocks.push_back(c_block(report.contents.blocks[i], report.pending_streams[i]));
  pool.reservationCount = reservations.size();
  pool.reservations = reservations.data();
  pool.commitCount = commits.size();
  pool.commits = commits.data();
  pool.blockCount = blocks.size();
  pool.blocks = blocks.data();
  storage.pools.push_back(pool);
}

status hand_out(const std::vector<pool_report>& reports, somaMemSnapshot* snapshot) {
  auto storage = std::make_unique<snapshot_storage>();
  storage->ranges.reserve(2 * reports.size());
  storage->blocks.reserve(reports.size());
  for (const pool_report& report : reports) add_pool(*storage, report);
  snapshot->poolCount = storage->pools.size();
  snapshot->pools = storage->pools.data();
  snapshot->storage = storage.release();
  return status::success();
}

somaStream_t c_stream(std::uintptr_t handle) { return reinterpret_cast<somaStream_t>(handle); }

void fill_report(const soma::detail::out_of_memory_record& r, somaOutOfMemoryReport* out) {
  out->requestedBytes = r.requested_bytes;
  out->stream = c_stream(r.stream);
  out->reservedBytes = r.reserved_bytes;
  out->usedBytes = r.used_bytes;
  out->maxSizeBytes = r.policies.max_size_bytes;
  out->freeBytes = r.facts.free_bytes;
  out->freePieces = r.facts.free_pieces;
  out->largestFreeBytes = r.facts.largest_free_bytes;
  out->pendingBytes = r.facts.pending_bytes;
  const std::size_t kept = std::min(r.facts.pending.size(), std::size(out->pendingStreams));
  out->pendingStreamCount = kept;
  for (std::size_t i = 0; i < kept; ++i) {
    const auto& p = r.facts.pending[i];
    out->pendingStreams[i] = {p.handle.has_value() ? 1 : 0, c_stream(p.handle.value_or(0)), p.bytes,
                              p.largest_bytes};
  }
  out->reuseFollowEventDependencies = r.follow_event_dependencies ? 1 : 0;
  out->reuseAllowOpportunistic = r.opportunistic ? 1 : 0;
  out->reuseAllowInternalDependencies = r.policies.internal_dependencies ? 1 : 0;
  out->compactBeforeGrowth = r.policies.compaction ? 1 : 0;
  out->remapFreeMemory = r.policies.remap;
  out->change = static_cast<somaOutOfMemoryChange>(static_cast<int>(r.change.what));
  out->changeBytes = r.change.bytes;
  out->changeStreamKnown = r.change.stream.has_value() ? 1 : 0;
  out->changeStream = c_stream(r.change.stream.value_or(0));
}

}  // namespace

extern "C" {

somaError_t somaMemPoolSnapshotTake(somaMemPool_t memPool, somaMemSnapshot* snapshot) {
  return with_runtime([&](runtime& rt) -> status {
    if (snapshot == nullptr) return null_argument("somaMemPoolSnapshotTake", "snapshot");
    *snapshot = somaMemSnapshot{};
    result<pool_report> report = rt.snapshot(handle_of(memPool));
    if (!report.ok()) {
      return status(report.error().code(), "somaMemPoolSnapshotTake: " + report.error().message());
    }
    return hand_out({report.value()}, snapshot);
  });
}

somaError_t somaMemSnapshotTakeAll(somaMemSnapshot* snapshot) {
  return with_runtime([&](runtime& rt) -> status {
    if (snapshot == nullptr) return null_argument("somaMemSnapshotTakeAll", "snapshot");
    *snapshot = somaMemSnapshot{};
    return hand_out(rt.snapshot_all(), snapshot);
  });
}

somaError_t somaMemPoolGetLastOutOfMemory(somaMemPool_t memPool, somaOutOfMemoryReport* report) {
  return with_runtime([&](runtime& rt) -> status {
    if (report == nullptr) return null_argument("somaMemPoolGetLastOutOfMemory", "report");
    result<std::optional<soma::detail::out_of_memory_record>> last =
        rt.last_out_of_memory(handle_of(memPool));
    if (!last.ok()) {
      return status(last.error().code(),
                    "somaMemPoolGetLastOutOfMemory: " + last.error().message());
    }
    *report = somaOutOfMemoryReport{};
    if (last.value().has_value()) fill_report(*last.value(), report);
    return status::success();
  });
}

somaError_t somaMemSnapshotFree(somaMemSnapshot* snapshot) {
  return with_runtime([&](runtime&) -> status {
    if (snapshot == nullptr) return null_argument("somaMemSnapshotFree", "snapshot");
    delete static_cast<snapshot_storage*>(snapshot->storage);
    *snapshot = somaMemSnapshot{};
    return status::success();
  });
}

}  // extern "C"
