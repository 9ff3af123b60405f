#include "runtime/out_of_memory_advice.hpp"

#include <algorithm>
#include <map>

#include "core/block.hpp"
#include "core/status.hpp"

namespace soma::detail {
namespace {

std::string stream_name(const std::optional<std::uintptr_t>& handle) {
  if (!handle.has_value()) return "a destroyed stream";
  if (*handle == 0) return "the default stream";
  return "stream " + format_address(*handle);
}

std::string facts_text(const out_of_memory_facts& facts) {
  std::string text = format_bytes(facts.free_bytes) + " free";
  if (facts.free_pieces > 0) {
    text += " in " + std::to_string(facts.free_pieces) + " piece" +
            (facts.free_pieces == 1 ? "" : "s") + " (largest " +
            format_bytes(facts.largest_free_bytes) + ")";
  }
  for (const out_of_memory_facts::pending_stream& p : facts.pending) {
    text += ", " + format_bytes(p.bytes) + " freed on " + stream_name(p.handle) +
            " and not yet known complete";
  }
  return text;
}

}  // namespace

out_of_memory_facts gather_out_of_memory_facts(const pool_report& report) {
  out_of_memory_facts facts;
  std::map<std::optional<std::uintptr_t>, out_of_memory_facts::pending_stream> by_stream;
  for (std::size_t i = 0; i < report.contents.blocks.size(); ++i) {
    const block_view& b = report.contents.blocks[i];
    if (b.what == block_view::state::free) {
      facts.free_bytes += b.size_bytes;
      ++facts.free_pieces;
      facts.largest_free_bytes = std::max<std::uint64_t>(facts.largest_free_bytes, b.size_bytes);
    } else if (b.what == block_view::state::pending) {
      out_of_memory_facts::pending_stream& p = by_stream[report.pending_streams[i]];
      p.handle = report.pending_streams[i];
      p.bytes += b.size_bytes;
      p.largest_bytes = std::max<std::uint64_t>(p.largest_bytes, b.size_bytes);
      facts.pending_bytes += b.size_bytes;
    }
  }
  for (const auto& [handle, p] : by_stream) facts.pending.push_back(p);
  std::sort(facts.pending.begin(), facts.pending.end(),
            [](const auto& a, const auto& b) { return a.bytes > b.bytes; });
  return facts;
}

std::string advise_out_of_memory(const out_of_memory_facts& facts, const pool_policies& policies,
                                 const pool_report& report, std::size_t bytes,
                                 std::uintptr_t allocating) {
  const std::size_t granule = std::max<std::size_t>(policies.granularity_bytes, 1);
  const std::uint64_t size_bytes = round_up(bytes, allocation_alignment_bytes);
  const std::uint64_t growth_bytes = round_up(bytes, granule);
  const std::uint64_t reserved = report.contents.reserved_bytes;
  const std::uint64_t room =
      policies.max_size_bytes > reserved ? policies.max_size_bytes - reserved : 0;
  std::string change;
  const auto pending_elsewhere =
      std::find_if(facts.pending.begin(), facts.pending.end(), [&](const auto& p) {
        return p.largest_bytes >= size_bytes && p.handle != std::optional(allocating);
      });
  if (growth_bytes > policies.max_size_bytes) {
    change = "a pool whose max size is at least " + format_bytes(growth_bytes);
  } else if (pending_elsewhere != facts.pending.end() && policies.internal_dependencies &&
             pending_elsewhere->handle.has_value()) {
    change = "a synchronize of " + stream_name(pending_elsewhere->handle) +
             " before this allocation (its free of " +
             format_bytes(pending_elsewhere->largest_bytes) + " would then serve every stream)";
  } else if (pending_elsewhere != facts.pending.end() && pending_elsewhere->handle.has_value()) {
    change =
        "somaMemPoolReuseAllowInternalDependencies = 1 (the pool would order this stream "
        "after the free of " +
        format_bytes(pending_elsewhere->largest_bytes) + " on " +
        stream_name(pending_elsewhere->handle) + ")";
  } else if (pending_elsewhere != facts.pending.end()) {
    change = "a somaDeviceSynchronize before this allocation (a destroyed stream's free of " +
             format_bytes(pending_elsewhere->largest_bytes) + " would then serve every stream)";
  } else if (!policies.compaction && facts.free_pieces > 1 &&
             facts.free_bytes + room >= growth_bytes) {
    change = "somaMemPoolAttrCompactBeforeGrowth = 1 (the " + format_bytes(facts.free_bytes) +
             " free in " + std::to_string(facts.free_pieces) +
             " pieces would go back and the pool would grow into one piece)";
  } else if (growth_bytes <= room) {
    change =
        "more free memory on the device: the pool was within its max size, and the "
        "platform refused to commit " +
        format_bytes(growth_bytes) +
        " more (other pools or processes hold it; somaMemPoolTrimTo gives a pool's free "
        "memory back)";
  } else if (facts.pending_bytes + facts.free_bytes + room >= growth_bytes) {
    change = std::string("a somaDeviceSynchronize before this allocation") +
             (policies.compaction ? "" : ", with somaMemPoolAttrCompactBeforeGrowth = 1") +
             " (the frees pending on " + std::to_string(facts.pending.size()) + " stream" +
             (facts.pending.size() == 1 ? "" : "s") +
             " would be proven, and the pool would grow into what they free)";
  } else {
    const std::uint64_t usable = facts.pending_bytes + facts.free_bytes + room;
    change = "a max size at least " + format_bytes(growth_bytes - usable) +
             " larger (or that much less live memory)";
  }
  return ". In the pool: " + facts_text(facts) + ". What would have let it succeed: " + change +
         ".";
}

}  // namespace soma::detail
