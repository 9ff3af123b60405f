// Real processes for S7 tests: each role of a test runs in a process of its own, started by
// fork + exec of this test binary, so that every process starts its own soma runtime as two
// unrelated programs would (a fork()ed copy of a process whose runtime or CUDA driver already
// started could use neither). Roles are connected pairwise by Unix SOCK_SEQPACKET sockets, over
// which they pass messages and descriptors (SCM_RIGHTS) and see each other go (end of file).
//
//   int exporter(soma_test::ipc::role_context& peers) { ... peers[1].send_fd(fd) ...; return 0; }
//   const soma_test::ipc::role kRoles[] = {{"exporter", exporter}, {"importer", importer}};
//   const int kDispatched = soma_test::ipc::dispatch_role(kRoles);  // after the table, at the end
//   TEST(S7_..., ...) { EXPECT_ROLES_EXIT(run_roles({"exporter", "importer"}), 0, 0); }
//
// dispatch_role runs during static initialization: in a role process (SOMA_IPC_TEST_ROLE set)
// it runs the role and leaves with _exit, so gtest never starts there; in the test process it
// returns at once. A role reports failures on stderr (ROLE_* macros) and by its exit status;
// run_roles collects each role's stderr for the test's failure message.
//
// Requires: the including binary links `soma`.
#pragma once

#include <soma/soma.h>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace soma_test::ipc {

inline constexpr int kDefaultWaitMs = 30000;

/// One end of the socket between two roles.
class peer {
 public:
  peer() = default;
  explicit peer(int fd) : fd_(fd) {}
  int fd() const { return fd_; }

  /// Sends one message, with one descriptor (SCM_RIGHTS) when fd >= 0.
  bool send(const void* data, std::size_t bytes, int fd = -1) const {
    iovec part{const_cast<void*>(data), bytes};
    msghdr message{};
    message.msg_iov = &part;
    message.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    if (fd >= 0) {
      message.msg_control = control;
      message.msg_controllen = sizeof control;
      cmsghdr* rights = CMSG_FIRSTHDR(&message);
      rights->cmsg_level = SOL_SOCKET;
      rights->cmsg_type = SCM_RIGHTS;
      rights->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(rights), &fd, sizeof fd);
    }
    return ::sendmsg(fd_, &message, MSG_NOSIGNAL) == static_cast<ssize_t>(bytes);
  }
  /// Receives one message of exactly `bytes`; a descriptor that came with it goes to *fd.
  bool receive(void* data, std::size_t bytes, int* fd = nullptr,
               int wait_ms = kDefaultWaitMs) const {
    pollfd entry{fd_, POLLIN, 0};
    if (::poll(&entry, 1, wait_ms) != 1 || (entry.revents & POLLIN) == 0) return false;
    iovec part{data, bytes};
    msghdr message{};
    message.msg_iov = &part;
    message.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    const ssize_t got = ::recvmsg(fd_, &message, MSG_CMSG_CLOEXEC);
    int passed = -1;
    if (cmsghdr* rights = CMSG_FIRSTHDR(&message);
        rights != nullptr && rights->cmsg_type == SCM_RIGHTS) {
      std::memcpy(&passed, CMSG_DATA(rights), sizeof passed);
    }
    if (fd != nullptr) {
      *fd = passed;
    } else if (passed >= 0) {
      ::close(passed);
    }
    return got == static_cast<ssize_t>(bytes);
  }
  template <typename T>
  bool send_value(const T& value, int fd = -1) const {
    return send(&value, sizeof value, fd);
  }
  template <typename T>
  bool receive_value(T* value, int* fd = nullptr, int wait_ms = kDefaultWaitMs) const {
    return receive(value, sizeof *value, fd, wait_ms);
  }
  /// Sends a one-word signal ("ready", "done"...).
  bool signal(int word) const { return send_value(word); }
  /// Waits for the signal `word`; false on anything else or timeout.
  bool wait_signal(int word, int wait_ms = kDefaultWaitMs) const {
    int got = 0;
    return receive_value(&got, nullptr, wait_ms) && got == word;
  }
  /// Waits until the other role's end is closed (it exited); false on a message or timeout.
  bool wait_closed(int wait_ms = kDefaultWaitMs) const {
    pollfd entry{fd_, POLLIN, 0};
    if (::poll(&entry, 1, wait_ms) != 1) return false;
    char byte = 0;
    return ::recv(fd_, &byte, 1, MSG_DONTWAIT) == 0;
  }

 private:
  int fd_ = -1;
};

/// What a role gets: its index and its sockets to every other role of the test.
struct role_context {
  int index = 0;
  const char* name = "";
  std::vector<peer> peers;
  const peer& operator[](std::size_t i) const { return peers.at(i); }
};

using role_function = int (*)(role_context&);
struct role {
  const char* name;
  role_function run;
};

namespace detail {
inline const char*& current_role_name() {
  static const char* name = "test";
  return name;
}
}  // namespace detail

/// Prints a role's failure (with the thread's last soma message) and returns 1, its exit code.
inline int role_failed(const char* file, int line, const char* what, const char* detail) {
  std::fprintf(stderr, "[role %s] %s:%d: %s%s%s\n", detail::current_role_name(), file, line, what,
               detail[0] != '\0' ? ": " : "", detail);
  std::fflush(stderr);
  return 1;
}

/// Open descriptors of this process (entries of /proc/self/fd, the listing's own excluded).
inline int open_descriptor_count() {
  DIR* directory = ::opendir("/proc/self/fd");
  if (directory == nullptr) return -1;
  int count = 0;
  while (dirent* entry = ::readdir(directory)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(directory);
  return count - 1;
}

/// "3 -> socket:[123]" lines of /proc/self/fd, for messages when a count is off.
inline std::string describe_open_descriptors() {
  std::string text;
  DIR* directory = ::opendir("/proc/self/fd");
  if (directory == nullptr) return text;
  while (dirent* entry = ::readdir(directory)) {
    if (entry->d_name[0] == '.') continue;
    char target[256] = {};
    const std::string path = std::string("/proc/self/fd/") + entry->d_name;
    if (::readlink(path.c_str(), target, sizeof target - 1) < 0) continue;
    text += std::string(entry->d_name) + " -> " + target + "\n";
  }
  ::closedir(directory);
  return text;
}

/// In a role process runs the role named by SOMA_IPC_TEST_ROLE and exits with its result;
/// in the test process returns 0 at once.
inline int dispatch_role(std::span<const role> roles) {
  const char* wanted = std::getenv("SOMA_IPC_TEST_ROLE");
  if (wanted == nullptr) return 0;
  role_context context;
  context.name = wanted;
  detail::current_role_name() = wanted;
  if (const char* links = std::getenv("SOMA_IPC_TEST_PEERS")) {
    for (const char* at = links; *at != '\0';) {
      char* end = nullptr;
      const long fd = std::strtol(at, &end, 10);
      if (fd < 0) context.index = static_cast<int>(context.peers.size());
      context.peers.emplace_back(static_cast<int>(fd));
      at = *end == ',' ? end + 1 : end;
    }
  }
  for (const role& r : roles) {
    if (std::strcmp(r.name, wanted) == 0) {
      const int code = r.run(context);
      std::fflush(nullptr);
      ::_exit(code & 0xff);
    }
  }
  std::fprintf(stderr, "no role named %s in this binary\n", wanted);
  ::_exit(127);
}

/// How one role process ended, and what it wrote to stderr.
struct role_outcome {
  std::string name;
  int status = -1;  ///< exit status, 128 + signal number, or -1 if it could not start
  std::string messages;
};

/// Runs the named roles, each in its own process, all connected pairwise; waits at most
/// timeout for all of them (then kills the rest). Role i's peers[j] talks to role j.
inline std::vector<role_outcome> run_roles(
    const std::vector<const char*>& names,
    std::chrono::seconds timeout = std::chrono::seconds(90)) {
  const std::size_t n = names.size();
  std::vector<std::vector<int>> link(n, std::vector<int>(n, -1));
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n; ++j) {
      int pair[2];
      if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) std::abort();
      link[i][j] = pair[0];
      link[j][i] = pair[1];
    }
  }
  std::vector<role_outcome> outcomes(n);
  std::vector<pid_t> pids(n, -1);
  std::vector<int> logs(n, -1);
  std::size_t i = 0;
  std::fflush(nullptr);
  for (const char* name : names) {
    outcomes[i].name = name;
    logs[i] = ::memfd_create("role-stderr", MFD_CLOEXEC);
    // Everything the child needs is prepared before fork: only exec-safe calls after it.
    std::string peers_text;
    for (std::size_t j = 0; j < n; ++j) {
      if (j != 0) peers_text += ',';
      peers_text += std::to_string(link[i][j]);
    }
    std::vector<std::string> environment;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "SOMA_IPC_TEST_", 14) != 0) environment.emplace_back(*e);
    }
    environment.push_back(std::string("SOMA_IPC_TEST_ROLE=") + name);
    environment.push_back("SOMA_IPC_TEST_PEERS=" + peers_text);
    std::vector<char*> envp;
    for (std::string& e : environment) envp.push_back(e.data());
    envp.push_back(nullptr);
    char self[] = "/proc/self/exe";
    char* argv[] = {self, nullptr};
    const pid_t pid = ::fork();
    if (pid == 0) {
      for (std::size_t j = 0; j < n; ++j) {
        if (link[i][j] >= 0) ::fcntl(link[i][j], F_SETFD, 0);  // kept across exec
      }
      if (logs[i] >= 0) ::dup2(logs[i], STDERR_FILENO);
      ::execve(self, argv, envp.data());
      ::_exit(127);
    }
    pids[i] = pid;
    ++i;
  }
  // The test process keeps no end: a role sees another go when that role's process ends.
  for (auto& row : link) {
    for (int fd : row) {
      if (fd >= 0) ::close(fd);
    }
  }
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  std::size_t running = 0;
  for (pid_t pid : pids) running += pid > 0 ? 1 : 0;
  while (running > 0) {
    for (std::size_t k = 0; k < n; ++k) {
      if (pids[k] <= 0) continue;
      int status = 0;
      const pid_t done = ::waitpid(pids[k], &status, WNOHANG);
      if (done != pids[k]) continue;
      outcomes[k].status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      pids[k] = -1;
      --running;
    }
    if (running == 0) break;
    if (std::chrono::steady_clock::now() > give_up) {
      for (std::size_t k = 0; k < n; ++k) {
        if (pids[k] <= 0) continue;
        ::kill(pids[k], SIGKILL);
        ::waitpid(pids[k], nullptr, 0);
        outcomes[k].status = 128 + SIGKILL;
        outcomes[k].messages =
            "(killed: still running after " + std::to_string(timeout.count()) + " s)\n";
        pids[k] = -1;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (std::size_t k = 0; k < n; ++k) {
    if (logs[k] < 0) continue;
    char buffer[4096];
    ::lseek(logs[k], 0, SEEK_SET);
    for (ssize_t got; (got = ::read(logs[k], buffer, sizeof buffer)) > 0;) {
      outcomes[k].messages.append(buffer, static_cast<std::size_t>(got));
    }
    ::close(logs[k]);
  }
  return outcomes;
}

/// One line per role for a failure message: "importer: exit 1\n<its stderr>".
inline std::string describe(const std::vector<role_outcome>& outcomes) {
  std::string text;
  for (const role_outcome& o : outcomes) {
    text += "  " + o.name + ": exit " + std::to_string(o.status) + "\n";
    if (!o.messages.empty()) text += o.messages;
  }
  return text;
}

}  // namespace soma_test::ipc

/// In a role: fails the role (exit 1) with the condition's text unless it holds.
#define ROLE_CHECK(condition)                                                                    \
  do {                                                                                           \
    if (!(condition))                                                                            \
      return ::soma_test::ipc::role_failed(__FILE__, __LINE__, "check failed: " #condition, ""); \
  } while (0)

/// In a role: fails the role unless the soma call succeeds (prints code and message).
#define ROLE_OK(call)                                                                      \
  do {                                                                                     \
    const somaError_t role_status_ = (call);                                               \
    if (role_status_ != somaSuccess)                                                       \
      return ::soma_test::ipc::role_failed(                                                \
          __FILE__, __LINE__, #call,                                                       \
          (std::string(somaGetErrorName(role_status_)) + ": " + somaGetLastErrorMessage()) \
              .c_str());                                                                   \
  } while (0)

/// In a role: fails the role unless the soma call fails with `code` and a message holding
/// `text` (case-sensitive).
#define ROLE_EXPECT_ERROR(call, code, text)                                               \
  do {                                                                                    \
    const somaError_t role_status_ = (call);                                              \
    const std::string role_message_ = somaGetLastErrorMessage();                          \
    if (role_status_ != (code) || role_message_.find(text) == std::string::npos)          \
      return ::soma_test::ipc::role_failed(                                               \
          __FILE__, __LINE__, #call,                                                      \
          (std::string("expected ") + somaGetErrorName(code) + " mentioning '" + (text) + \
           "', got " + somaGetErrorName(role_status_) + ": " + role_message_)             \
              .c_str());                                                                  \
  } while (0)

/// In a role: runs a helper that returns a role exit code; returns it if not 0.
#define ROLE_TRY(expression)                \
  do {                                      \
    const int role_code_ = (expression);    \
    if (role_code_ != 0) return role_code_; \
  } while (0)

/// In a test: every role exited with the status expected (0 unless given per role).
#define EXPECT_ROLES_EXIT(outcomes, ...)                                           \
  do {                                                                             \
    const std::vector<::soma_test::ipc::role_outcome> roles_ = (outcomes);         \
    const std::vector<int> expected_ = {__VA_ARGS__};                              \
    bool as_expected_ = roles_.size() == expected_.size();                         \
    for (std::size_t k = 0; as_expected_ && k < roles_.size(); ++k)                \
      as_expected_ = roles_[k].status == expected_[k];                             \
    EXPECT_TRUE(as_expected_) << "roles:\n" << ::soma_test::ipc::describe(roles_); \
  } while (0)
