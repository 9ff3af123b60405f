// Memory history read back against the events a test made, address by address
// (history_model_test, history_threads_test): a block's events must keep their order across
// threads, streams and chunks, so each event read back is matched to one made at its address.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "core/memory_history.hpp"

namespace soma_test {

/// For each event read back, the index in `made` of the event it is; made[i].address is where
/// event i was made, and `same(read, made)` compares the rest. Exact: the k-th event read back at
/// an address is the k-th made there (nothing left out). Else the next event made there that
/// `same` accepts, so that events the ring left out are skipped, never gone back over. On an
/// event read back at an address never used, or out of its address's order, the test fails and
/// the matches found so far come back.
template <typename Made, typename Same>
std::vector<std::size_t> match_by_address(const std::vector<soma::detail::history_event>& events,
                                          const std::vector<Made>& made, bool exact, Same same) {
  std::map<std::uint64_t, std::vector<std::size_t>> made_at;
  for (std::size_t i = 0; i < made.size(); ++i) made_at[made[i].address].push_back(i);
  std::map<std::uint64_t, std::size_t> next;  // each address's first made event not yet matched
  std::vector<std::size_t> matched;
  matched.reserve(events.size());
  for (std::size_t j = 0; j < events.size(); ++j) {
    const auto found = made_at.find(events[j].address);
    if (found == made_at.end()) {
      ADD_FAILURE() << "read back " << j << " at an address never used";
      return matched;
    }
    const std::vector<std::size_t>& there = found->second;
    std::size_t& k = next[events[j].address];
    if (!exact) {
      while (k < there.size() && !same(events[j], made[there[k]])) ++k;
    }
    if (k >= there.size()) {
      ADD_FAILURE() << "read back " << j
                    << (exact ? ": more events at its address than made"
                              : ": out of its address's order");
      return matched;
    }
    if (exact && !same(events[j], made[there[k]])) {
      ADD_FAILURE() << "read back " << j << " is not made " << there[k] << ", the " << k
                    << "-th event made at its address";
      return matched;
    }
    matched.push_back(there[k++]);
  }
  return matched;
}

}  // namespace soma_test
