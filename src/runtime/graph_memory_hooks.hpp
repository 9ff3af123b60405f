// Graph memory (S15) belongs to src/graph, a layer above; the runtime's calls that take
// pointers (somaFreeAsync, pointer attributes, range checks of memset, copy and host tasks)
// ask it about the addresses no pool holds.
#pragma once

#include <cstdint>
#include <optional>

#include "core/status.hpp"
#include "runtime/pointer_info.hpp"

namespace soma::detail {

struct stream_object;

class graph_memory_hooks {
 public:
  virtual ~graph_memory_hooks() = default;
  /// Whether address lies in graph address space (live or not).
  virtual bool owns_address(std::uintptr_t address) const = 0;
  /// For an address inside a graph allocation a launch left live: fills info, returns true.
  virtual bool describe(std::uintptr_t address, pointer_info& info) const = 0;
  /// Frees the live graph allocation that starts at address, ordered after stream's work;
  /// invalid_value saying why it cannot; nullopt when address is no graph memory at all.
  virtual std::optional<status> free(std::uintptr_t address, stream_object& stream) = 0;
};

}  // namespace soma::detail
