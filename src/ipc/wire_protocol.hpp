// The messages on a pool's socket (S7). The importer asks, the exporter's service answers, one
// request at a time per connection; every message starts with a header and goes whole (a
// SOCK_SEQPACKET message). Both ends run on one machine, so fields are in native byte order.
//
//   hello     importer -> exporter: who is asking (pid)
//   welcome   exporter -> importer: pool id, device, backend, exporter pid
//   map       importer -> exporter: export data (64 bytes)
//   memory    exporter -> importer: a status; on success the physical pieces behind the
//             allocation, their sizes in the body and their descriptors as SCM_RIGHTS, up to
//             pieces_per_message per message (further messages carry the rest)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "ipc/socket_messages.hpp"

namespace soma::detail::ipc::wire {

inline constexpr std::uint32_t protocol_magic = 0x43504953;  // "SIPC"
inline constexpr std::uint16_t protocol_version = 1;
inline constexpr std::size_t pieces_per_message = max_fds_per_message;

enum class kind : std::uint16_t { hello = 1, welcome = 2, map = 3, memory = 4 };

struct header {
  std::uint32_t magic = protocol_magic;
  std::uint16_t version = protocol_version;
  std::uint16_t message_kind = 0;
  std::uint32_t request_id = 0;
  std::uint32_t reserved = 0;
};

struct hello {
  header head;
  std::int32_t importer_pid = 0;
  std::uint32_t reserved = 0;
};

struct welcome {
  header head;
  std::uint64_t pool_id = 0;
  std::int32_t device = 0;
  std::int32_t exporter_pid = 0;
  char backend[16] = {};
};

struct map {
  header head;
  std::uint8_t export_data[64] = {};
};

struct memory {
  header head;
  std::int32_t code = 0;  ///< a somaError_t; not 0: `message` says why, nothing else follows
  std::uint32_t total_pieces = 0;
  std::uint64_t offset_bytes = 0;  ///< where the allocation starts in the first piece
  std::uint64_t bytes = 0;         ///< the allocation's size
  std::uint32_t first_piece = 0;   ///< index of piece_bytes[0] among all pieces
  std::uint32_t piece_count = 0;   ///< pieces (and descriptors) in this message
  std::uint64_t piece_bytes[pieces_per_message] = {};
  char message[256] = {};
};

inline constexpr std::size_t largest_message = sizeof(memory);

inline header make_header(kind k, std::uint32_t request_id) {
  header h;
  h.message_kind = static_cast<std::uint16_t>(k);
  h.request_id = request_id;
  return h;
}

/// The header of a received message, if it has soma's magic and version; false otherwise.
inline bool read_header(const received_message& received, header* out) {
  if (received.bytes.size() < sizeof(header)) return false;
  std::memcpy(out, received.bytes.data(), sizeof(header));
  return out->magic == protocol_magic && out->version == protocol_version;
}

/// The message as T if it has T's exact size; false otherwise.
template <typename T>
bool read_as(const received_message& received, T* out) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (received.bytes.size() != sizeof(T)) return false;
  std::memcpy(out, received.bytes.data(), sizeof(T));
  return true;
}

/// Copies text into a fixed field, cut to fit and always terminated.
template <std::size_t N>
void put_text(char (&field)[N], const std::string& text) {
  const std::size_t length = text.size() < N - 1 ? text.size() : N - 1;
  std::memcpy(field, text.data(), length);
  field[length] = '\0';
}

template <std::size_t N>
std::string get_text(const char (&field)[N]) {
  return std::string(field, strnlen(field, N));
}

}  // namespace soma::detail::ipc::wire
