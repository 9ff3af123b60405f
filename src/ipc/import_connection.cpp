#include "ipc/import_connection.hpp"

#include <unistd.h>

#include <cstring>

#include "ipc/wire_protocol.hpp"

namespace soma::detail::ipc {

result<std::shared_ptr<import_connection>> import_connection::open(unique_fd socket, int fd,
                                                                   int timeout_ms) {
  std::shared_ptr<import_connection> c(new import_connection(std::move(socket)));
  const std::string which = "descriptor " + std::to_string(fd);
  const deadline until(timeout_ms);
  wire::hello hello;
  hello.head = wire::make_header(wire::kind::hello, c->next_request_id_++);
  hello.importer_pid = static_cast<std::int32_t>(::getpid());
  received_message answer;
  transfer_result got = send_message(c->socket_.get(), &hello, sizeof hello, {}, until);
  if (got.ok()) got = c->receive_answer(hello.head.request_id, until, &answer);
  if (got.outcome == transfer::closed) {
    return status(error_code::invalid_value,
                  which +
                      ": the other end of this pool handle is closed (the exporting process "
                      "exited)");
  }
  if (!got.ok()) {
    const status why = c->lost(got, timeout_ms);
    return status(why.code(), which + ": " + why.message());
  }
  wire::welcome welcome;
  if (!wire::read_as(answer, &welcome) ||
      welcome.head.message_kind != static_cast<std::uint16_t>(wire::kind::welcome)) {
    return status(error_code::invalid_value,
                  which + " is not a soma pool handle: the answer is not soma's");
  }
  c->exporter_.pool_id = welcome.pool_id;
  c->exporter_.device = welcome.device;
  c->exporter_.pid = welcome.exporter_pid;
  c->exporter_.backend = wire::get_text(welcome.backend);
  return c;
}

status import_connection::lost(const transfer_result& what, int timeout_ms) const {
  const std::string who =
      "the exporting process" +
      (exporter_.pid != 0 ? " (pid " + std::to_string(exporter_.pid) + ")" : std::string());
  switch (what.outcome) {
    case transfer::closed:
      return status(error_code::invalid_value,
                    who +
                        " closed the connection: it exited or dropped this pool handle; "
                        "memory imported before stays valid, nothing more can be imported");
    case transfer::timed_out:
      return status(error_code::invalid_value,
                    "no answer from " + who + " within " + std::to_string(timeout_ms) +
                        " ms (SOMA_IPC_TIMEOUT_MS); is it a soma pool handle?");
    case transfer::failed:
      if (backend::is_out_of_descriptors(what.error))
        return backend::descriptor_failure(what.detail + " from " + who, what.error);
      break;
    case transfer::done:
      break;
  }
  return status(error_code::invalid_value, "talking to " + who + " failed: " + what.detail);
}

bool import_connection::was_served(std::uint64_t export_id, const export_data_bytes& data) const {
  auto found = served_.find(export_id);
  return found != served_.end() && found->second == data;
}

void import_connection::served(std::uint64_t export_id, const export_data_bytes& data) {
  served_[export_id] = data;
}

transfer_result import_connection::receive_answer(std::uint32_t request_id, const deadline& until,
                                                  received_message* out) {
  for (;;) {
    transfer_result got = receive_message(socket_.get(), wire::largest_message, until, out);
    if (!got.ok()) return got;
    wire::header head;
    if (!wire::read_header(*out, &head)) {
      return {transfer::failed,
              "the peer answered something that is not soma's protocol (is "
              "the descriptor a soma pool handle?)"};
    }
    if (head.request_id == request_id) return got;
    // An answer to an earlier request that timed out: its descriptors close with the next read.
  }
}

result<received_memory> import_connection::request_memory(const export_data_bytes& data,
                                                          int timeout_ms) {
  std::lock_guard lock(socket_mutex_);
  const deadline until(timeout_ms);
  wire::map request;
  request.head = wire::make_header(wire::kind::map, next_request_id_++);
  std::memcpy(request.export_data, data.data(), data.size());
  if (transfer_result sent = send_message(socket_.get(), &request, sizeof request, {}, until);
      !sent.ok())
    return lost(sent, timeout_ms);
  received_memory out;
  std::uint32_t expected_total = 0;
  for (;;) {
    received_message answer;
    if (transfer_result got = receive_answer(request.head.request_id, until, &answer); !got.ok())
      return lost(got, timeout_ms);
    wire::memory reply;
    if (!wire::read_as(answer, &reply) ||
        reply.head.message_kind != static_cast<std::uint16_t>(wire::kind::memory)) {
      return status(error_code::invalid_value, "the exporting process answered out of protocol");
    }
    if (reply.code != 0) {
      return status(static_cast<error_code>(reply.code),
                    "the exporting process (pid " + std::to_string(exporter_.pid) +
                        ") refused: " + wire::get_text(reply.message));
    }
    if (out.pieces.empty()) {
      out.offset_bytes = reply.offset_bytes;
      out.bytes = reply.bytes;
      expected_total = reply.total_pieces;
    }
    if (reply.first_piece != out.pieces.size() || reply.piece_count > wire::pieces_per_message ||
        reply.piece_count != answer.fds.size() || reply.total_pieces != expected_total ||
        reply.first_piece + reply.piece_count > expected_total) {
      return status(error_code::invalid_value,
                    "the exporting process answered out of protocol (pieces do not add up)");
    }
    for (std::uint32_t i = 0; i < reply.piece_count; ++i) {
      received_memory::piece piece;
      piece.bytes = reply.piece_bytes[i];
      piece.fd = std::move(answer.fds[i]);
      out.pieces.push_back(std::move(piece));
    }
    if (out.pieces.size() == expected_total && expected_total > 0) return out;
    if (expected_total == 0) {
      return status(error_code::invalid_value, "the exporting process sent no memory");
    }
  }
}

}  // namespace soma::detail::ipc
