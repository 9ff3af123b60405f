// The importer's side of S7: the connection behind an imported pool. It says hello when the
// pool is imported, then asks for the memory behind export data, one request at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "ipc/export_data.hpp"
#include "ipc/socket_messages.hpp"
#include "ipc/unique_fd.hpp"
#include "runtime/export_table.hpp"
#include "runtime/import_table.hpp"

namespace soma::detail::ipc {

/// Who answered the hello.
struct exporter_info {
  std::uint64_t pool_id = 0;
  int device = 0;
  int pid = 0;
  std::string backend;
};

/// Physical memory received for one allocation: whole physical allocations in address order.
struct received_memory {
  struct piece {
    std::uint64_t bytes = 0;
    unique_fd fd;
  };
  std::uint64_t offset_bytes = 0;  ///< where the allocation starts in the first piece
  std::uint64_t bytes = 0;
  std::vector<piece> pieces;
};

class import_connection final : public import_link {
 public:
  /// Takes socket over and says hello; fails (invalid_value, naming descriptor fd) if no
  /// soma exporter answers within timeout_ms.
  static result<std::shared_ptr<import_connection>> open(unique_fd socket, int fd, int timeout_ms);

  const exporter_info& exporter() const noexcept { return exporter_; }
  /// Held across one whole import, so that one allocation is mapped once; guards the record of
  /// accepted export data below.
  std::mutex& import_mutex() noexcept { return import_mutex_; }
  /// Whether the exporter served exactly this export data before. Requires: import_mutex held.
  bool was_served(std::uint64_t export_id, const export_data_bytes& data) const;
  /// Records that the exporter served data. Requires: import_mutex held.
  void served(std::uint64_t export_id, const export_data_bytes& data);
  /// Asks for the memory behind data; invalid_value with the exporter's reason if it refuses,
  /// or saying that the exporter is gone or does not answer.
  result<received_memory> request_memory(const export_data_bytes& data, int timeout_ms);

 private:
  explicit import_connection(unique_fd socket) : socket_(std::move(socket)) {}
  /// Receives the next message answering request_id into *out; older answers (to requests that
  /// timed out) are dropped with their descriptors. A message out of protocol fails.
  transfer_result receive_answer(std::uint32_t request_id, const deadline& until,
                                 received_message* out);
  /// The error for a transfer that did not complete.
  status lost(const transfer_result& what, int timeout_ms) const;

  unique_fd socket_;
  exporter_info exporter_;
  std::mutex import_mutex_;
  std::map<std::uint64_t, export_data_bytes> served_;  // by export id; import_mutex_
  std::mutex socket_mutex_;
  std::uint32_t next_request_id_ = 1;
};

}  // namespace soma::detail::ipc
