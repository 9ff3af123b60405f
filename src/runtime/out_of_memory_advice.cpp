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

out_of_memory_change choose_out_of_memory_change(const out_of_memory_facts& facts,
                                                 const pool_policies& policies,
                                                 std::uint64_t reserved_bytes, std::size_t bytes,
                                                 std::uintptr_t allocating) {
  using kind = out_of_memory_change::kind;
  const std::size_t granule = std::max<std::size_t>(policies.granularity_bytes, 1);
  const std::uint64_t size_bytes = round_up(bytes, allocation_alignment_bytes);
  const std::uint64_t growth_bytes = round_up(bytes, granule);
  const std::uint64_t room =
      policies.max_size_bytes > reserved_bytes ? policies.max_size_bytes - reserved_bytes : 0;
  const auto pending_elsewhere =
      std::find_if(facts.pending.begin(), facts.pending.end(), [&](const auto& p) {
        return p.largest_bytes >= size_bytes && p.handle != std::optional(allocating);
      });
  const bool pending = pending_elsewhere != facts.pending.end();
  if (growth_bytes > policies.max_size_bytes) return {kind::larger_max_size, growth_bytes, {}};
  if (pending && pending_elsewhere->handle.has_value()) {
    return {policies.internal_dependencies ? kind::synchronize_stream
                                           : kind::allow_internal_dependencies,
            pending_elsewhere->largest_bytes, pending_elsewhere->handle};
  }
  if (pending) return {kind::synchronize_device, pending_elsewhere->largest_bytes, {}};
  // Remapping serves from free whole granules with no synchronize, so it comes first; where it
  // is on and still failed, the pieces' whole granules did not add up, and compaction remains.
  if (policies.remap == 0 && policies.remap_possible && facts.free_pieces > 1 &&
      facts.free_bytes >= growth_bytes)
    return {kind::remap_free_memory, facts.free_bytes, {}};
  if (!policies.compaction && facts.free_pieces > 1 && facts.free_bytes + room >= growth_bytes)
    return {kind::compact_before_growth, facts.free_bytes, {}};
  if (growth_bytes <= room) return {kind::free_device_memory, growth_bytes, {}};
  const std::uint64_t usable = facts.pending_bytes + facts.free_bytes + room;
  if (usable >= growth_bytes) {
    return {policies.compaction ? kind::synchronize_device : kind::synchronize_device_and_compact,
            facts.pending_bytes,
            {}};
  }
  return {kind::more_max_size, growth_bytes - usable, {}};
}

std::string describe_out_of_memory(const out_of_memory_facts& facts,
                                   const out_of_memory_change& change) {
  using kind = out_of_memory_change::kind;
  std::string text;
  switch (change.what) {
    case kind::larger_max_size:
      text = "a pool whose max size is at least " + format_bytes(change.bytes);
      break;
    case kind::synchronize_stream:
      text = "a synchronize of " + stream_name(change.stream) +
             " before this allocation (its free of " + format_bytes(change.bytes) +
             " would then serve every stream)";
      break;
    case kind::allow_internal_dependencies:
      text =
          "somaMemPoolReuseAllowInternalDependencies = 1 (the pool would order this stream "
          "after the free of " +
          format_bytes(change.bytes) + " on " + stream_name(change.stream) + ")";
      break;
    case kind::synchronize_device:
      text = "a somaDeviceSynchronize before this allocation (" +
             (facts.pending.size() == 1 && !facts.pending.front().handle.has_value()
                  ? "a destroyed stream's free of " + format_bytes(change.bytes)
                  : "the frees pending on " + std::to_string(facts.pending.size()) + " stream" +
                        (facts.pending.size() == 1 ? "" : "s")) +
             " would then serve every stream)";
      break;
    case kind::compact_before_growth:
      text = "somaMemPoolAttrCompactBeforeGrowth = 1 (the " + format_bytes(change.bytes) +
             " free in " + std::to_string(facts.free_pieces) +
             " pieces would go back and the pool would grow into one piece)";
      break;
    case kind::remap_free_memory:
      text = "somaMemPoolAttrRemapFreeMemory = 2 (the " + format_bytes(change.bytes) + " free in " +
             std::to_string(facts.free_pieces) +
             " pieces would be mapped again as one range, with no synchronize)";
      break;
    case kind::free_device_memory:
      text =
          "more free memory on the device: the pool was within its max size, and the "
          "platform refused to commit " +
          format_bytes(change.bytes) +
          " more (other pools or processes hold it; somaMemPoolTrimTo gives a pool's free "
          "memory back)";
      break;
    case kind::synchronize_device_and_compact:
      text =
          "a somaDeviceSynchronize before this allocation, with "
          "somaMemPoolAttrCompactBeforeGrowth = 1 (the frees pending on " +
          std::to_string(facts.pending.size()) + " stream" +
          (facts.pending.size() == 1 ? "" : "s") +
          " would be proven, and the pool would grow into what they free)";
      break;
    case kind::more_max_size:
      text = "a max size at least " + format_bytes(change.bytes) +
             " larger (or that much less live memory)";
      break;
  }
  return ". In the pool: " + facts_text(facts) + ". What would have let it succeed: " + text + ".";
}

}  // namespace soma::detail
