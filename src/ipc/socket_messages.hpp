// Messages with file descriptors over a Unix SOCK_SEQPACKET socket: one call sends or receives
// one whole message, descriptors travel as SCM_RIGHTS, every wait has a deadline, and a peer
// that went away is told apart from one that is slow.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/os_error.hpp"
#include "ipc/unique_fd.hpp"

namespace soma::detail::ipc {

/// Most descriptors one message carries.
inline constexpr std::size_t max_fds_per_message = 32;

/// A point in time after which a send or receive gives up.
class deadline {
 public:
  explicit deadline(int timeout_ms)
      : at_(std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms)) {}
  /// Milliseconds left (0 once passed), as poll() takes them.
  int remaining_ms() const;

 private:
  std::chrono::steady_clock::time_point at_;
};

/// How a send or receive ended.
enum class transfer { done, closed, timed_out, failed };

struct transfer_result {
  transfer outcome = transfer::done;
  std::string detail;  ///< for failed: the call and errno name
  int error = 0;       ///< for failed: errno where an OS call failed (EMFILE: no descriptor left)
  bool ok() const noexcept { return outcome == transfer::done; }
};

struct received_message {
  std::vector<std::uint8_t> bytes;
  std::vector<unique_fd> fds;
};

/// Sends one message of bytes with fds (at most max_fds_per_message; the caller keeps its
/// copies) on socket. Never raises SIGPIPE.
transfer_result send_message(int socket, const void* data, std::size_t bytes,
                             const std::vector<int>& fds, const deadline& until);
/// Receives one message of at most max_bytes into *out (a longer one fails). Descriptors
/// arrive close-on-exec and are owned by *out.
transfer_result receive_message(int socket, std::size_t max_bytes, const deadline& until,
                                received_message* out);

/// "ENOTSOCK: Socket operation on non-socket" for errno values in messages.
using backend::errno_text;

}  // namespace soma::detail::ipc
