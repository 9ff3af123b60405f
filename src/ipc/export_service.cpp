#include "ipc/export_service.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <thread>

#include "ipc/export_data.hpp"
#include "ipc/ipc.hpp"
#include "ipc/wire_protocol.hpp"
#include "runtime/runtime.hpp"

namespace soma::detail::ipc {

export_service& export_service::instance() {
  // Never destroyed: the service thread runs until the process exits.
  static export_service* const service = new export_service();
  return *service;
}

result<int> export_service::open_connection(runtime& rt, std::uintptr_t pool_handle,
                                            std::uint64_t pool_id, int device) {
  int ends[2] = {-1, -1};
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends) != 0) {
    return backend::descriptor_failure("socketpair for the pool handle", errno);
  }
  unique_fd kept(ends[0]);
  unique_fd given(ends[1]);
  auto c = std::make_unique<connection>();
  c->socket = std::move(kept);
  c->pool_handle = pool_handle;
  c->pool_id = pool_id;
  c->device = device;
  std::lock_guard lock(mutex_);
  if (status started = start(rt); !started.ok()) return started;
  incoming_.push_back(std::move(c));
  const std::uint64_t one = 1;
  if (::write(wake_.get(), &one, sizeof one) != sizeof one) {
    incoming_.pop_back();
    return status(error_code::unknown,
                  "waking the export service failed (" + errno_text(errno) + ")");
  }
  return given.release();
}

status export_service::start(runtime& rt) {
  // Requires: mutex_ held.
  if (started_) return status::success();
  wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_) {
    return backend::descriptor_failure("eventfd for the export service", errno);
  }
  try {
    std::thread([this, &rt] { serve(rt); }).detach();
  } catch (const std::system_error& e) {
    wake_.reset();
    return status(error_code::out_of_memory,
                  std::string("starting the export service thread failed (") + e.what() + ")");
  }
  started_ = true;
  return status::success();
}

void export_service::serve(runtime& rt) {
  std::vector<std::unique_ptr<connection>> connections;
  std::vector<pollfd> watched;
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      for (auto& c : incoming_) connections.push_back(std::move(c));
      incoming_.clear();
    }
    watched.assign(1, pollfd{wake_.get(), POLLIN, 0});
    for (const auto& c : connections) watched.push_back(pollfd{c->socket.get(), POLLIN, 0});
    if (::poll(watched.data(), watched.size(), -1) < 0) continue;  // EINTR
    if ((watched[0].revents & POLLIN) != 0) {
      std::uint64_t count = 0;
      while (::read(wake_.get(), &count, sizeof count) > 0) {
      }
    }
    // Answer or drop; a dropped connection closes its end, so the importer sees the end of it.
    std::vector<std::unique_ptr<connection>> kept;
    kept.reserve(connections.size());
    for (std::size_t i = 0; i < connections.size(); ++i) {
      const short events = watched[i + 1].revents;
      bool keep = true;
      if ((events & POLLIN) != 0) {
        keep = answer(rt, *connections[i]);
      } else if ((events & (POLLHUP | POLLERR | POLLNVAL)) != 0) {
        keep = false;
      }
      if (keep) kept.push_back(std::move(connections[i]));
    }
    connections = std::move(kept);
  }
}

bool export_service::answer(runtime& rt, connection& c) {
  received_message request;
  const transfer_result got =
      receive_message(c.socket.get(), wire::largest_message, deadline(0), &request);
  if (got.outcome == transfer::timed_out) return true;  // woken without a whole message
  if (!got.ok()) return false;
  // An importer never sends descriptors; any that came are closed with `request`.
  wire::header head;
  if (!wire::read_header(request, &head)) return false;  // not soma's protocol: hang up
  const deadline until(timeout_ms());
  switch (static_cast<wire::kind>(head.message_kind)) {
    case wire::kind::hello: {
      wire::hello hello;
      if (!wire::read_as(request, &hello)) return false;
      wire::welcome reply;
      reply.head = wire::make_header(wire::kind::welcome, head.request_id);
      reply.pool_id = c.pool_id;
      reply.device = c.device;
      reply.exporter_pid = static_cast<std::int32_t>(::getpid());
      wire::put_text(reply.backend, rt.devices().backend_name());
      return send_message(c.socket.get(), &reply, sizeof reply, {}, until).ok();
    }
    case wire::kind::map: {
      wire::map map;
      if (!wire::read_as(request, &map)) return false;
      return answer_map(rt, c, head.request_id, map.export_data);
    }
    default:
      return false;
  }
}

bool export_service::answer_map(runtime& rt, connection& c, std::uint32_t request_id,
                                const std::uint8_t* data) {
  const deadline until(timeout_ms());
  wire::memory reply;
  reply.head = wire::make_header(wire::kind::memory, request_id);
  auto refuse = [&](const status& why) {
    reply.code = static_cast<std::int32_t>(why.code());
    wire::put_text(reply.message, why.message());
    return send_message(c.socket.get(), &reply, sizeof reply, {}, until).ok();
  };
  export_data_bytes raw{};
  std::memcpy(raw.data(), data, raw.size());
  result<export_data> decoded = decode_export_data(raw);
  if (!decoded.ok()) return refuse(decoded.error());
  const export_data& fields = decoded.value();
  if (fields.pool_id != c.pool_id) {
    return refuse(status(error_code::invalid_value,
                         "export data of another pool: this connection serves another pool of "
                         "the exporting process"));
  }
  result<exported_memory> memory =
      rt.ipc().export_memory(c.pool_handle, fields.export_id, fields.nonce, fields.bytes);
  if (!memory.ok()) return refuse(memory.error());
  std::vector<unique_fd> owned;  // closed once sent: the importer has its own copies then
  owned.reserve(memory.value().pieces.size());
  for (const exported_memory::piece& piece : memory.value().pieces) owned.emplace_back(piece.fd);
  if (memory.value().offset_bytes != fields.offset_bytes) {
    return refuse(status(error_code::invalid_value,
                         "forged or corrupted export data: the offset does not match the "
                         "exported allocation"));
  }
  const auto& pieces = memory.value().pieces;
  reply.total_pieces = static_cast<std::uint32_t>(pieces.size());
  reply.offset_bytes = memory.value().offset_bytes;
  reply.bytes = memory.value().bytes;
  for (std::size_t first = 0; first < pieces.size(); first += wire::pieces_per_message) {
    const std::size_t count = std::min(wire::pieces_per_message, pieces.size() - first);
    reply.first_piece = static_cast<std::uint32_t>(first);
    reply.piece_count = static_cast<std::uint32_t>(count);
    std::vector<int> fds;
    for (std::size_t i = 0; i < count; ++i) {
      reply.piece_bytes[i] = pieces[first + i].bytes;
      fds.push_back(pieces[first + i].fd);
    }
    if (!send_message(c.socket.get(), &reply, sizeof reply, fds, until).ok()) return false;
  }
  return true;
}

}  // namespace soma::detail::ipc
