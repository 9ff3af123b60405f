// The 64 bytes of somaMemPoolPtrExportData (S7). Opaque to applications; the layout, which
// docs/ipc.md also gives, is (native byte order, offsets in bytes):
//
//    0  u32  magic "SOMA"                32  u64  size of the allocation in bytes
//    4  u16  format version (1)          40  u8[16] nonce: random, checked by the exporter
//    6  u16  handle type (1: POSIX fd)   56  u32  exporting process id (for messages)
//    8  u64  pool id: random per pool    60  u32  reserved, 0
//   16  u64  export id: 1, 2, ... per pool, names the exporter's record
//   24  u64  offset of the allocation in its first physical chunk
//
// Nothing in it is trusted: the exporter finds its record by export id and pool id and serves
// memory only if the nonce and size match that record.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "core/status.hpp"
#include "runtime/export_table.hpp"
#include "runtime/import_table.hpp"

namespace soma::detail::ipc {

inline constexpr std::size_t export_data_size = 64;
using export_data_bytes = std::array<std::uint8_t, export_data_size>;

struct export_data {
  std::uint64_t pool_id = 0;
  std::uint64_t export_id = 0;
  std::uint64_t offset_bytes = 0;
  std::uint64_t bytes = 0;
  export_nonce nonce{};
  std::uint32_t exporter_pid = 0;
};

export_data_bytes encode_export_data(const export_data& data);
/// The fields of data, or invalid_value saying what makes it malformed (not soma's format, an
/// unknown version or handle type, zero or overflowing fields).
result<export_data> decode_export_data(const export_data_bytes& bytes);

}  // namespace soma::detail::ipc
