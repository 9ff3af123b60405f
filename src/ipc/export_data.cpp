#include "ipc/export_data.hpp"

#include <cstring>
#include <string>

namespace soma::detail::ipc {
namespace {

constexpr std::uint32_t magic = 0x414d4f53;  // "SOMA" in memory order on little-endian machines
constexpr std::uint16_t version = 1;
constexpr std::uint16_t handle_type_posix_fd = 1;

template <typename T>
void put(export_data_bytes& bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof value);
}

template <typename T>
T get(const export_data_bytes& bytes, std::size_t offset) {
  T value{};
  std::memcpy(&value, bytes.data() + offset, sizeof value);
  return value;
}

status malformed(const std::string& why) {
  return status(error_code::invalid_value, "malformed export data: " + why);
}

}  // namespace

export_data_bytes encode_export_data(const export_data& data) {
  export_data_bytes bytes{};
  put(bytes, 0, magic);
  put(bytes, 4, version);
  put(bytes, 6, handle_type_posix_fd);
  put(bytes, 8, data.pool_id);
  put(bytes, 16, data.export_id);
  put(bytes, 24, data.offset_bytes);
  put(bytes, 32, data.bytes);
  std::memcpy(bytes.data() + 40, data.nonce.data(), data.nonce.size());
  put(bytes, 56, data.exporter_pid);
  put(bytes, 60, std::uint32_t{0});
  return bytes;
}

result<export_data> decode_export_data(const export_data_bytes& bytes) {
  if (get<std::uint32_t>(bytes, 0) != magic)
    return malformed("it was not made by somaMemPoolExportPointer (no soma signature)");
  if (const auto v = get<std::uint16_t>(bytes, 4); v != version)
    return malformed("format version " + std::to_string(v) + ", this soma reads version " +
                     std::to_string(version));
  if (const auto type = get<std::uint16_t>(bytes, 6); type != handle_type_posix_fd)
    return malformed("handle type " + std::to_string(type) +
                     " is not somaMemHandleTypePosixFileDescriptor (1)");
  if (get<std::uint32_t>(bytes, 60) != 0) return malformed("reserved bytes are not zero");
  export_data data;
  data.pool_id = get<std::uint64_t>(bytes, 8);
  data.export_id = get<std::uint64_t>(bytes, 16);
  data.offset_bytes = get<std::uint64_t>(bytes, 24);
  data.bytes = get<std::uint64_t>(bytes, 32);
  std::memcpy(data.nonce.data(), bytes.data() + 40, data.nonce.size());
  data.exporter_pid = get<std::uint32_t>(bytes, 56);
  if (data.pool_id == 0 || data.export_id == 0) return malformed("pool id or export id is 0");
  if (data.bytes == 0) return malformed("size is 0");
  if (data.offset_bytes + data.bytes < data.offset_bytes)
    return malformed("offset + size overflows");
  return data;
}

}  // namespace soma::detail::ipc
