#include "ipc/ipc.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/host_memory.hpp"
#include "ipc/export_service.hpp"
#include "ipc/import_connection.hpp"
#include "ipc/socket_messages.hpp"
#include "runtime/runtime.hpp"

namespace soma::detail::ipc {
namespace {

constexpr int handle_type_posix_fd = 1;

status invalid(const std::string& message) { return status(error_code::invalid_value, message); }

status check_type_and_flags(const char* call, int handle_type, unsigned long long flags) {
  if (flags != 0)
    return invalid(std::string(call) + ": flags must be 0, not " + std::to_string(flags));
  if (handle_type != handle_type_posix_fd) {
    return invalid(std::string(call) + ": handle type " + std::to_string(handle_type) +
                   " is not supported; soma shares pools as "
                   "somaMemHandleTypePosixFileDescriptor (1)");
  }
  return status::success();
}

status random_bytes(void* out, std::size_t bytes) {
  auto* cursor = static_cast<unsigned char*>(out);
  while (bytes > 0) {
    const ssize_t got = ::getrandom(cursor, bytes, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return status(error_code::unknown, "getrandom failed (" + errno_text(errno) + ")");
    }
    cursor += got;
    bytes -= static_cast<std::size_t>(got);
  }
  return status::success();
}

result<std::uint64_t> random_id() {
  std::uint64_t id = 0;
  while (id == 0) {
    if (status s = random_bytes(&id, sizeof id); !s.ok()) return s;
  }
  return id;
}

/// An imported allocation's address range and what is mapped into it.
struct mapped_range {
  struct piece {
    std::uintptr_t address = 0;
    std::size_t bytes = 0;
    std::uint64_t handle = 0;
    bool mapped = false;
  };
  std::uintptr_t base = 0;
  std::size_t bytes = 0;
  std::vector<piece> pieces;
};

void unmap_range(backend::backend& platform, const mapped_range& range) noexcept {
  for (const mapped_range::piece& p : range.pieces) {
    if (p.mapped) platform.unmap(p.address, p.bytes);
    platform.release_physical(p.handle);
  }
  if (range.base != 0) platform.free_address(range.base, range.bytes);
}

/// The exporter's location on the wire, in the welcome's device field: a device ordinal, or
/// -2 - node for a host NUMA node (S5; host memory of no node cannot be exported).
int wire_location(backend::memory_location where) {
  return where.is_host() ? -2 - where.id : where.id;
}
backend::memory_location location_from_wire(int value) {
  return value >= 0 ? backend::memory_location(value)
                    : backend::memory_location::host_numa(-2 - value);
}

/// Maps the received pieces next to each other in a new reservation, as they lie in the
/// exporter, readable and writable by owner (the importing device, or the host).
result<mapped_range> map_pieces(backend::backend& platform, backend::memory_location owner,
                                received_memory& memory) {
  const int device = owner.context_device();
  mapped_range range;
  for (const received_memory::piece& p : memory.pieces) range.bytes += p.bytes;
  for (received_memory::piece& p : memory.pieces) {
    result<std::uint64_t> handle = platform.import_physical(device, p.fd.get(), p.bytes);
    p.fd.reset();  // the backend holds its own reference now (or failed)
    if (!handle.ok()) {
      unmap_range(platform, range);
      return handle.take_error();
    }
    range.pieces.push_back({0, static_cast<std::size_t>(p.bytes), handle.value(), false});
  }
  result<std::uintptr_t> base = platform.reserve_address(owner, range.bytes);
  if (!base.ok()) {
    unmap_range(platform, range);
    return base.take_error();
  }
  range.base = base.value();
  std::uintptr_t at = range.base;
  for (mapped_range::piece& p : range.pieces) {
    p.address = at;
    if (status mapped = platform.map(p.address, p.bytes, p.handle, owner); !mapped.ok()) {
      unmap_range(platform, range);
      return mapped;
    }
    p.mapped = true;
    at += p.bytes;
  }
  return range;
}

}  // namespace

int timeout_ms() {
  constexpr int fallback = 10000;
  const char* text = std::getenv("SOMA_IPC_TIMEOUT_MS");
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value <= 0 || value > INT_MAX) return fallback;
  return static_cast<int>(value);
}

// ---- exporter ----------------------------------------------------------------------------------

result<int> export_pool(runtime& rt, std::uintptr_t pool_handle, int handle_type,
                        unsigned long long flags) {
  const char* call = "somaMemPoolExportToShareableHandle";
  result<std::uint64_t> proposed = random_id();
  if (!proposed.ok()) return proposed.take_error();
  result<std::uint64_t> pool_id = rt.ipc().exportable_pool(
      pool_handle, static_cast<unsigned>(handle_type), proposed.value(), call);
  if (!pool_id.ok()) return pool_id.take_error();
  if (status checked = check_type_and_flags(call, handle_type, flags); !checked.ok())
    return checked;
  result<backend::memory_location> where = rt.ipc().pool_location(pool_handle);
  if (!where.ok()) return where.take_error();
  return export_service::instance().open_connection(rt, pool_handle, pool_id.value(),
                                                    wire_location(where.value()));
}

result<export_data_bytes> export_pointer(runtime& rt, const void* pointer) {
  result<std::uint64_t> proposed = random_id();
  if (!proposed.ok()) return proposed.take_error();
  export_nonce nonce{};
  if (status s = random_bytes(nonce.data(), nonce.size()); !s.ok()) return s;
  result<pointer_export> exported = rt.ipc().export_pointer(pointer, proposed.value(), nonce);
  if (!exported.ok()) return exported.take_error();
  export_data data;
  data.pool_id = exported.value().pool_id;
  data.export_id = exported.value().export_id;
  data.offset_bytes = exported.value().offset_bytes;
  data.bytes = exported.value().bytes;
  data.nonce = exported.value().nonce;
  data.exporter_pid = static_cast<std::uint32_t>(::getpid());
  return encode_export_data(data);
}

// ---- importer ----------------------------------------------------------------------------------

result<std::uintptr_t> import_pool(runtime& rt, std::intptr_t os_handle, int handle_type,
                                   unsigned long long flags) {
  const std::string call = "somaMemPoolImportFromShareableHandle";
  if (status checked = check_type_and_flags(call.c_str(), handle_type, flags); !checked.ok())
    return checked;
  if (os_handle < 0 || os_handle > INT_MAX) {
    return invalid(call + ": " + std::to_string(os_handle) +
                   " is not a file descriptor (pass the int from "
                   "somaMemPoolExportToShareableHandle, cast to void*)");
  }
  const int fd = static_cast<int>(os_handle);
  const std::string which = call + ": descriptor " + std::to_string(fd);
  if (::fcntl(fd, F_GETFD) < 0) return invalid(which + " is not open");
  int type = 0;
  int domain = 0;
  socklen_t length = sizeof type;
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) != 0) {
    return invalid(which + " is not a soma pool handle (not a socket: " + errno_text(errno) + ")");
  }
  length = sizeof domain;
  if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &length) != 0 || domain != AF_UNIX ||
      type != SOCK_SEQPACKET) {
    return invalid(which +
                   " is not a soma pool handle (a socket, but not a Unix "
                   "SOCK_SEQPACKET one)");
  }
  unique_fd own(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (!own) return backend::descriptor_failure(which + ": dup", errno);
  result<std::shared_ptr<import_connection>> connection =
      import_connection::open(std::move(own), fd, timeout_ms());
  if (!connection.ok())
    return status(connection.error().code(), call + ": " + connection.error().message());
  const exporter_info& exporter = connection.value()->exporter();
  if (exporter.backend != rt.devices().backend_name()) {
    return invalid(which + ": the exporting process runs the " + exporter.backend +
                   " backend, this one the " + rt.devices().backend_name() + " backend");
  }
  const backend::memory_location where = location_from_wire(exporter.device);
  if (where.is_host() && where.id >= backend::host_numa_node_count()) {
    return invalid(which + ": the exported pool is on host NUMA node " + std::to_string(where.id) +
                   ", which this host does not have");
  }
  if (!where.is_host() && (where.id < 0 || where.id >= rt.devices().count())) {
    return invalid(which + ": the exported pool is on device " + std::to_string(exporter.device) +
                   ", which this process does not have (" + std::to_string(rt.devices().count()) +
                   " devices)");
  }
  return rt.ipc().create_imported_pool(where, connection.value(),
                                       "imported from process " + std::to_string(exporter.pid));
}

result<void*> import_pointer(runtime& rt, std::uintptr_t pool_handle,
                             const export_data_bytes& raw) {
  const std::string call = "somaMemPoolImportPointer";
  result<imported_pool_view> pool = rt.ipc().imported_pool(pool_handle, call.c_str());
  if (!pool.ok()) return pool.take_error();
  auto& connection = static_cast<import_connection&>(*pool.value().link);
  result<export_data> decoded = decode_export_data(raw);
  if (!decoded.ok()) return status(decoded.error().code(), call + ": " + decoded.error().message());
  const export_data& data = decoded.value();
  if (data.pool_id != connection.exporter().pool_id) {
    return invalid(call + ": export data of another pool (made by process " +
                   std::to_string(data.exporter_pid) +
                   "); this pool was imported from a pool of "
                   "process " +
                   std::to_string(connection.exporter().pid) + "; nothing was mapped");
  }
  std::lock_guard serial(connection.import_mutex());
  // The same allocation imported before and still live: the same pointer, without asking
  // again, but only for exactly the data the exporter accepted then.
  if (connection.was_served(data.export_id, raw)) {
    if (void* existing = rt.ipc().find_imported_allocation(pool_handle, data.export_id))
      return existing;
  }
  result<received_memory> memory = connection.request_memory(raw, timeout_ms());
  if (!memory.ok()) return status(memory.error().code(), call + ": " + memory.error().message());
  received_memory& received = memory.value();
  std::uint64_t span = 0;
  for (const received_memory::piece& p : received.pieces) span += p.bytes;
  if (received.offset_bytes != data.offset_bytes || received.bytes != data.bytes ||
      received.offset_bytes + received.bytes > span) {
    return invalid(call +
                   ": the exporting process answered with memory that does not match the "
                   "export data; nothing was mapped");
  }
  backend::backend& platform = rt.platform();
  result<mapped_range> mapped = map_pieces(platform, pool.value().location, received);
  if (!mapped.ok()) {
    return status(mapped.error().code(),
                  call + ": mapping " + format_bytes(span) +
                      " of imported memory failed: " + mapped.error().message());
  }
  const mapped_range range = mapped.value();
  connection.served(data.export_id, raw);
  return rt.ipc().add_imported_allocation(
      pool_handle, data.export_id, range.base + static_cast<std::uintptr_t>(data.offset_bytes),
      static_cast<std::size_t>(data.bytes), [&platform, range] { unmap_range(platform, range); });
}

}  // namespace soma::detail::ipc
