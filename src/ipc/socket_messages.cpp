#include "ipc/socket_messages.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace soma::detail::ipc {
namespace {

// Room for the largest SCM_RIGHTS message, aligned as a cmsghdr needs.
union control_buffer {
  cmsghdr header;
  char bytes[CMSG_SPACE(sizeof(int) * max_fds_per_message)];
};

/// Waits until socket is ready for events; the poll() revents, 0 on timeout, -1 on failure.
int wait_for(int socket, short events, const deadline& until) {
  for (;;) {
    pollfd entry{socket, events, 0};
    const int ready = ::poll(&entry, 1, until.remaining_ms());
    if (ready > 0) return entry.revents;
    if (ready == 0) return 0;
    if (errno != EINTR) return -1;
  }
}

transfer_result failed(const char* call, int error) {
  return {transfer::failed, std::string(call) + " failed (" + errno_text(error) + ")", error};
}

// The kernel cuts descriptors off a message when this process cannot take them (its table is
// full) or when the peer sent more than the message may carry. A probe tells which.
transfer_result descriptors_cut_off(int socket) {
  const int probe = ::fcntl(socket, F_DUPFD_CLOEXEC, 0);
  if (probe < 0 && backend::is_out_of_descriptors(errno)) {
    const int error = errno;
    return {transfer::failed, "receiving descriptors", error};
  }
  if (probe >= 0) ::close(probe);
  return {transfer::failed, "descriptors were cut off (more than " +
                                std::to_string(max_fds_per_message) + " in one message)"};
}

}  // namespace

int deadline::remaining_ms() const {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(at_ - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<std::chrono::milliseconds::rep>(left.count(), 0));
}

transfer_result send_message(int socket, const void* data, std::size_t bytes,
                             const std::vector<int>& fds, const deadline& until) {
  if (fds.size() > max_fds_per_message) return {transfer::failed, "too many descriptors"};
  iovec part{const_cast<void*>(data), bytes};
  msghdr message{};
  message.msg_iov = &part;
  message.msg_iovlen = 1;
  control_buffer control{};
  if (!fds.empty()) {
    message.msg_control = control.bytes;
    message.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* rights = CMSG_FIRSTHDR(&message);
    rights->cmsg_level = SOL_SOCKET;
    rights->cmsg_type = SCM_RIGHTS;
    rights->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(rights), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    if (::sendmsg(socket, &message, MSG_NOSIGNAL | MSG_DONTWAIT) >= 0) return {};
    const int error = errno;
    if (error == EINTR) continue;
    if (error == EPIPE || error == ECONNRESET || error == ENOTCONN) return {transfer::closed, {}};
    if (error != EAGAIN && error != EWOULDBLOCK) return failed("sendmsg", error);
    const int ready = wait_for(socket, POLLOUT, until);
    if (ready == 0) return {transfer::timed_out, {}};
    if (ready < 0) return failed("poll", errno);
    if ((ready & POLLOUT) == 0 && (ready & (POLLHUP | POLLERR)) != 0) return {transfer::closed, {}};
  }
}

transfer_result receive_message(int socket, std::size_t max_bytes, const deadline& until,
                                received_message* out) {
  out->bytes.assign(max_bytes, 0);
  out->fds.clear();
  for (;;) {
    iovec part{out->bytes.data(), out->bytes.size()};
    msghdr message{};
    message.msg_iov = &part;
    message.msg_iovlen = 1;
    control_buffer control{};
    message.msg_control = control.bytes;
    message.msg_controllen = sizeof control.bytes;
    const ssize_t received = ::recvmsg(socket, &message, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (received > 0) {
      for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < count; ++i) {
          int fd = -1;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
          out->fds.emplace_back(fd);
        }
      }
      if ((message.msg_flags & MSG_CTRUNC) != 0) return descriptors_cut_off(socket);
      if ((message.msg_flags & MSG_TRUNC) != 0)
        return {transfer::failed, "a message longer than " + std::to_string(max_bytes) + " bytes"};
      out->bytes.resize(static_cast<std::size_t>(received));
      return {};
    }
    if (received == 0) return {transfer::closed, {}};
    const int error = errno;
    if (error == EINTR) continue;
    if (error == ECONNRESET) return {transfer::closed, {}};
    if (error != EAGAIN && error != EWOULDBLOCK) return failed("recvmsg", error);
    const int ready = wait_for(socket, POLLIN, until);
    if (ready == 0) return {transfer::timed_out, {}};
    if (ready < 0) return failed("poll", errno);
    if ((ready & POLLIN) == 0 && (ready & (POLLHUP | POLLERR)) != 0) return {transfer::closed, {}};
    if ((ready & POLLNVAL) != 0) return {transfer::failed, "the descriptor is not open"};
  }
}

}  // namespace soma::detail::ipc
