// Decodes fuzz input into C API operations: fixed records of six bytes
//   [code] [a] [b] [c] [s0] [s1]
// code picks the operation (modulo the count), a b c pick slots, indices and choices (each
// operation takes them modulo what it needs), s0 s1 give a size: the top three bits of s0
// choose a size class, the other 13 bits a value within it. Fixed records keep a mutation's
// effect local: changing one byte changes one operation.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fuzz_config.hpp"
#include "fuzz_input.hpp"

namespace soma_fuzz {

enum class op_code : std::uint8_t {
  stream_create,
  stream_destroy,
  stream_synchronize,
  stream_query,
  event_create,
  event_record,
  stream_wait_event,
  event_query,
  event_synchronize,
  event_destroy,
  malloc_async,
  malloc_from_pool,
  free_same_stream,
  free_other_stream,
  memset,
  copy,
  check_in_stream,
  pool_create,
  pool_destroy,
  set_reuse_policy,
  set_release_threshold,
  set_compaction,
  trim_to,
  reset_high,
  set_current_pool,
  set_access,
  device_synchronize,
  synchronize_all,
  pointer_attributes,
  bad_call,
  record_history,
  scope_push,
  scope_pop,
  export_history,
  count
};

inline constexpr std::size_t kRecordBytes = 6;

struct operation {
  op_code code = op_code::stream_create;
  std::uint8_t a = 0;
  std::uint8_t b = 0;
  std::uint8_t c = 0;
  std::uint16_t raw = 0;  // s0 s1 as read, for choices that want plain bits
  std::size_t size = 0;   // bytes: an allocation, a threshold, what a trim keeps
};

/// A size of the class in the top three bits of raw: small classes are common in programs,
/// granule multiples hit the pool's boundaries exactly, the last class exceeds a device.
inline std::size_t decode_size(std::uint16_t raw) {
  const std::size_t value = raw & 0x1fffu;
  switch (raw >> 13) {
    case 0:
      return value % 64;  // includes 0: somaMallocAsync gives NULL
    case 1:
      return 1 + value % 256;
    case 2:
      return 1 + value % 4096;
    case 3:
      return 1 + (value * 8) % (64 * KiB);
    case 4:
      return 1 + (value * 32) % (256 * KiB);
    case 5:
      return (1 + value % 64) * kGranularityBytes;
    case 6:
      return 1 + (value * 128) % kDeviceMemoryBytes;
    default:
      return kDeviceMemoryBytes / 2 + value * 128;  // up to a device and past it
  }
}

inline operation decode_operation(input_bytes& input) {
  operation op;
  op.code = static_cast<op_code>(input.byte() % static_cast<std::uint8_t>(op_code::count));
  op.a = input.byte();
  op.b = input.byte();
  op.c = input.byte();
  op.raw = input.u16();
  op.size = decode_size(op.raw);
  return op;
}

}  // namespace soma_fuzz
