// A fake soma::detail::memory_provider for core pool tests: synthetic addresses, no mapping.
//
// The pool never touches the memory it manages, so reserve hands out made-up, granule
// aligned addresses and commit only records the range. The fake checks the pool's side of
// the contract on every call (commits granule aligned, inside a live reservation, never
// overlapping another commit; decommits inside one commit, and the whole of it unless partial
// decommit is allowed) and reports violations as
// gtest failures. It can be told to fail the N-th commit (out_of_memory), every reservation,
// or reservations above a size (address_space_exhausted); allow_partial_decommit sets what
// can_decommit_part() answers. Reservations are never contiguous unless a test places one with
// reserve_at, as an OS may when other mappings next to a pool go away.
//
// The state lives in a shared fake_memory_state so a test keeps observing it while the pool
// owns the fake (and after the pool is destroyed).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <span>
#include <memory>
#include <utility>
#include <vector>

#include "core/memory_provider.hpp"
#include "core/status.hpp"

namespace soma_test {

struct fake_memory_state {
  struct range {
    std::uintptr_t address = 0;
    std::size_t bytes = 0;
  };

  std::size_t granularity_bytes = std::size_t{64} << 10;

  // -- failure injection ----------------------------------------------------------------
  /// Fails the commit with this 1-based number (counting every commit call); 0 = never.
  std::size_t fail_commit_number = 0;
  /// Every reserve call fails with address_space_exhausted.
  bool fail_reservations = false;
  /// Reserve calls for more than this many bytes fail with address_space_exhausted.
  std::size_t max_reservation_bytes = std::numeric_limits<std::size_t>::max();
  /// What can_decommit_part() answers: may part of a commit be released on its own.
  bool allow_partial_decommit = false;
  /// What can_map_again() answers: may granules of a commit be mapped at a second address.
  bool allow_map_again = false;
  /// Bases for the next reservations, used front first; once empty, bases come from next_base.
  std::vector<std::uintptr_t> reserve_at;

  // -- observations -----------------------------------------------------------------------
  std::size_t commit_calls = 0;
  std::size_t reserve_calls = 0;
  std::size_t map_again_calls = 0;
  std::size_t unmap_alias_calls = 0;
  std::map<std::uintptr_t, range> reservations;     ///< live reservations by base
  std::map<std::uintptr_t, std::size_t> committed;  ///< mapped ranges by address
  /// What each range of `committed` maps: the commit's token and the offset inside it.
  std::map<std::uintptr_t, std::pair<std::uint64_t, std::size_t>> backing;
  std::map<std::uint64_t, range> tokens;                   ///< commit token -> range
  std::map<std::uint64_t, std::size_t> token_decommitted;  ///< token -> bytes released so far
  std::vector<range> commits;                              ///< every successful commit, in order
  std::vector<range> decommits;                            ///< every decommit, in order
  std::uint64_t next_token = 1;
  std::uintptr_t next_base = std::uintptr_t{0x100000000000};

  std::size_t committed_bytes() const {
    std::size_t total = 0;
    for (const auto& [address, bytes] : committed) total += bytes;
    return total;
  }
  /// Physical bytes held: every commit, less what was given back (an alias counts once).
  std::size_t physical_bytes() const {
    std::size_t total = 0;
    for (const auto& [token, r] : tokens) {
      auto released = token_decommitted.find(token);
      total += r.bytes - (released == token_decommitted.end() ? 0 : released->second);
    }
    return total;
  }
  /// The mapped range holding address: its start; committed.end() if none.
  std::map<std::uintptr_t, std::size_t>::iterator mapping_at(std::uintptr_t address) {
    auto it = committed.upper_bound(address);
    if (it == committed.begin()) return committed.end();
    --it;
    return address < it->first + it->second ? it : committed.end();
  }
  /// Takes [address, address + bytes), which must lie in one mapped range, out of the mapped
  /// ranges; returns what it mapped (token, offset at address), token 0 if it was not mapped.
  std::pair<std::uint64_t, std::size_t> unmap_range(std::uintptr_t address, std::size_t bytes) {
    auto it = mapping_at(address);
    if (it == committed.end() || it->first + it->second < address + bytes) return {0, 0};
    const std::uintptr_t start = it->first;
    const std::uintptr_t end = it->first + it->second;
    const auto [token, offset] = backing[start];
    committed.erase(it);
    backing.erase(start);
    if (start < address) {
      committed[start] = address - start;
      backing[start] = {token, offset};
    }
    if (address + bytes < end) {
      committed[address + bytes] = end - (address + bytes);
      backing[address + bytes] = {token, offset + (address + bytes - start)};
    }
    return {token, offset + (address - start)};
  }
  /// How many bytes of [offset, offset + bytes) of token are mapped at some address. A range
  /// may lie in several mappings (remaps and unmaps split them), and a byte in two counts once.
  std::size_t mapped_bytes_of(std::uint64_t token, std::size_t offset, std::size_t bytes) const {
    std::map<std::size_t, std::size_t> spans;  // offset in the commit -> end, merged below
    for (const auto& [address, b] : backing) {
      if (b.first != token) continue;
      const std::size_t from = std::max(offset, b.second);
      const std::size_t to = std::min(offset + bytes, b.second + committed.at(address));
      if (from < to) spans[from] = std::max(spans[from], to);
    }
    std::size_t mapped = 0;
    std::size_t covered = offset;
    for (const auto& [from, to] : spans) {
      const std::size_t start = std::max(from, covered);
      if (to > start) mapped += to - start;
      covered = std::max(covered, to);
    }
    return mapped;
  }
  /// Whether every byte of [offset, offset + bytes) of token is mapped at some address.
  bool is_mapped_anywhere(std::uint64_t token, std::size_t offset, std::size_t bytes) const {
    return mapped_bytes_of(token, offset, bytes) == bytes;
  }
  /// True if [address, address + bytes) lies inside one committed range.
  bool is_committed(std::uintptr_t address, std::size_t bytes) const {
    auto it = committed.upper_bound(address);
    if (it == committed.begin()) return false;
    --it;
    // Adjacent commits (tail extension) form one contiguous range: follow them.
    std::uintptr_t end = it->first + it->second;
    if (address >= end) return false;
    while (end < address + bytes) {
      auto next = committed.find(end);
      if (next == committed.end()) return false;
      end = next->first + next->second;
    }
    return true;
  }
};

class fake_memory_provider final : public soma::detail::memory_provider {
 public:
  explicit fake_memory_provider(std::shared_ptr<fake_memory_state> state)
      : state_(std::move(state)) {}

  std::size_t granularity_bytes() const override { return state_->granularity_bytes; }

  soma::detail::result<std::uintptr_t> reserve(std::size_t bytes) override {
    using soma::detail::error_code;
    fake_memory_state& s = *state_;
    ++s.reserve_calls;
    EXPECT_EQ(bytes % s.granularity_bytes, 0u) << "reservation size not granule aligned";
    if (s.fail_reservations || bytes > s.max_reservation_bytes) {
      return soma::detail::status(
          error_code::address_space_exhausted,
          "fake address space limit hit reserving " + std::to_string(bytes) + " B");
    }
    std::uintptr_t base = s.next_base;
    if (!s.reserve_at.empty()) {
      base = s.reserve_at.front();
      s.reserve_at.erase(s.reserve_at.begin());
    }
    for (const auto& [other, r] : s.reservations) {
      EXPECT_TRUE(base + bytes <= other || other + r.bytes <= base)
          << "reservation overlaps the one at " << std::hex << other;
    }
    // Leave a gap of one granule so reservations from next_base are never contiguous.
    s.next_base = std::max(s.next_base, base + bytes + s.granularity_bytes);
    s.reservations[base] = {base, bytes};
    return base;
  }

  void free_reservation(std::uintptr_t base, std::size_t bytes) override {
    fake_memory_state& s = *state_;
    auto it = s.reservations.find(base);
    if (it == s.reservations.end()) {
      ADD_FAILURE() << "free_reservation of unknown base " << std::hex << base;
      return;
    }
    EXPECT_EQ(it->second.bytes, bytes) << "free_reservation with a different size";
    // Nothing may stay committed inside a freed reservation.
    for (const auto& [address, length] : s.committed) {
      EXPECT_FALSE(address >= base && address < base + bytes)
          << "reservation freed while still committed at " << std::hex << address;
    }
    s.reservations.erase(it);
  }

  soma::detail::result<std::uint64_t> commit(std::uintptr_t address, std::size_t bytes) override {
    using soma::detail::error_code;
    fake_memory_state& s = *state_;
    ++s.commit_calls;
    if (s.commit_calls == s.fail_commit_number) {
      return soma::detail::status(
          error_code::out_of_memory,
          "fake device out of memory committing " + std::to_string(bytes) + " B");
    }
    EXPECT_GT(bytes, 0u);
    EXPECT_EQ(address % s.granularity_bytes, 0u) << "commit address not granule aligned";
    EXPECT_EQ(bytes % s.granularity_bytes, 0u) << "commit size not granule aligned";
    bool inside = false;
    for (const auto& [base, r] : s.reservations) {
      inside = inside || (address >= base && address + bytes <= base + r.bytes);
    }
    EXPECT_TRUE(inside) << "commit outside every reservation at " << std::hex << address;
    auto next = s.committed.lower_bound(address);
    if (next != s.committed.end()) {
      EXPECT_GE(next->first, address + bytes) << "commit overlaps a later committed range";
    }
    if (next != s.committed.begin()) {
      auto previous = std::prev(next);
      EXPECT_LE(previous->first + previous->second, address)
          << "commit overlaps an earlier committed range";
    }
    s.committed[address] = bytes;
    const std::uint64_t token = s.next_token++;
    s.backing[address] = {token, 0};
    s.tokens[token] = {address, bytes};
    s.commits.push_back({address, bytes});
    return token;
  }

  void decommit(std::uintptr_t address, std::size_t bytes, std::uint64_t token,
                std::size_t offset_bytes) override {
    fake_memory_state& s = *state_;
    auto t = s.tokens.find(token);
    if (t == s.tokens.end()) {
      ADD_FAILURE() << "decommit with unknown token " << token;
      return;
    }
    const fake_memory_state::range whole = t->second;
    EXPECT_LE(offset_bytes + bytes, whole.bytes) << "decommit beyond its commit";
    if (!s.allow_partial_decommit) {
      EXPECT_EQ(offset_bytes, 0u) << "part of a commit released without can_decommit_part()";
      EXPECT_EQ(bytes, whole.bytes) << "part of a commit released without can_decommit_part()";
    }
    EXPECT_GT(bytes, 0u);
    EXPECT_EQ(address % s.granularity_bytes, 0u) << "decommit address not granule aligned";
    EXPECT_EQ(bytes % s.granularity_bytes, 0u) << "decommit size not granule aligned";
    // The range must be mapped now, to that part of the commit; the rest stays mapped.
    const auto [mapped_token, mapped_offset] = s.unmap_range(address, bytes);
    if (mapped_token == 0) {
      ADD_FAILURE() << "decommit of a range not committed at " << std::hex << address;
      return;
    }
    EXPECT_EQ(mapped_token, token) << "decommit names another commit than the one mapped";
    EXPECT_EQ(mapped_offset, offset_bytes) << "offset does not match the mapping";
    EXPECT_EQ(s.mapped_bytes_of(token, offset_bytes, bytes), 0u)
        << "physical memory given back while still mapped at another address";
    s.token_decommitted[token] += bytes;
    if (s.token_decommitted[token] >= whole.bytes) {
      s.token_decommitted.erase(token);
      s.tokens.erase(t);
    }
    s.decommits.push_back({address, bytes});
  }

  bool can_decommit_part(std::uint64_t) const override { return state_->allow_partial_decommit; }

  bool can_map_again(std::uint64_t) const override { return state_->allow_map_again; }

  soma::detail::status map_again(std::span<const soma::detail::physical_piece> pieces) override {
    fake_memory_state& s = *state_;
    ++s.map_again_calls;
    EXPECT_TRUE(s.allow_map_again) << "map_again without can_map_again()";
    std::uintptr_t expected = pieces.empty() ? 0 : pieces.front().address;
    for (const soma::detail::physical_piece& p : pieces) {
      EXPECT_EQ(p.address, expected) << "pieces are not one after another";
      EXPECT_EQ(p.address % s.granularity_bytes, 0u) << "remap address not granule aligned";
      EXPECT_EQ(p.size_bytes % s.granularity_bytes, 0u) << "remap size not granule aligned";
      EXPECT_EQ(p.offset_bytes % s.granularity_bytes, 0u) << "remap offset not granule aligned";
      EXPECT_TRUE(s.mapping_at(p.address) == s.committed.end()) << "remap over mapped memory";
      EXPECT_TRUE(s.is_mapped_anywhere(p.token, p.offset_bytes, p.size_bytes))
          << "remap of physical memory that is not mapped (given back, or never committed)";
      expected = p.address + p.size_bytes;
    }
    for (const soma::detail::physical_piece& p : pieces) {
      s.committed[p.address] = p.size_bytes;
      s.backing[p.address] = {p.token, p.offset_bytes};
    }
    return soma::detail::status::success();
  }

  void unmap_alias(std::span<const soma::detail::physical_piece> pieces) override {
    fake_memory_state& s = *state_;
    ++s.unmap_alias_calls;
    std::uintptr_t expected = pieces.empty() ? 0 : pieces.front().address;
    for (const soma::detail::physical_piece& p : pieces) {
      EXPECT_EQ(p.address, expected) << "unmap_alias pieces are not one after another";
      expected = p.address + p.size_bytes;
      const auto [mapped_token, mapped_offset] = s.unmap_range(p.address, p.size_bytes);
      EXPECT_EQ(mapped_token, p.token) << "unmap_alias of a range that does not map that commit";
      EXPECT_EQ(mapped_offset, p.offset_bytes) << "unmap_alias offset does not match the mapping";
      EXPECT_TRUE(s.is_mapped_anywhere(p.token, p.offset_bytes, p.size_bytes))
          << "unmap_alias of the last mapping of physical memory";
    }
  }

 private:
  std::shared_ptr<fake_memory_state> state_;
};

}  // namespace soma_test
