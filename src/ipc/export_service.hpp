// The exporter's side of S7: one thread per process that serves every exported pool handle.
// Each somaMemPoolExportToShareableHandle makes a socket pair; the service keeps one end and
// the application gets the other to pass on. The service answers hello and map requests
// (wire_protocol.hpp), hands out physical memory only for live export records whose nonce
// matches (runtime::export_memory), and closes its end when the importer's end is gone.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/status.hpp"
#include "ipc/unique_fd.hpp"

namespace soma::detail {
class runtime;
}

namespace soma::detail::ipc {

class export_service {
 public:
  /// The process's service; it lives until the process exits.
  static export_service& instance();

  /// A new connection serving pool_handle (identity pool_id in export data, on device): the
  /// service keeps one end and returns the other, which the caller owns. Starts the service's
  /// thread on first use.
  result<int> open_connection(runtime& rt, std::uintptr_t pool_handle, std::uint64_t pool_id,
                              int device);

 private:
  struct connection {
    unique_fd socket;
    std::uintptr_t pool_handle = 0;
    std::uint64_t pool_id = 0;
    int device = 0;
  };

  export_service() = default;
  status start(runtime& rt);
  void serve(runtime& rt);
  /// Answers one request on c; false if the connection is to be closed.
  bool answer(runtime& rt, connection& c);
  bool answer_map(runtime& rt, connection& c, std::uint32_t request_id, const std::uint8_t* data);

  std::mutex mutex_;
  bool started_ = false;
  unique_fd wake_;  // eventfd: new connections are waiting in incoming_
  std::vector<std::unique_ptr<connection>> incoming_;
};

}  // namespace soma::detail::ipc
