// run_in_child(fn): runs fn in a fork()ed child process and returns how the child ended.
//
// For tests that change process-wide state that cannot be undone (setrlimit(RLIMIT_AS), a
// runtime started with another configuration) or that may crash. The child runs only fn and
// leaves with _exit (no atexit handlers, no gtest teardown), so its gtest assertions do not
// reach the parent: fn reports through its return value (0 = success) and stderr.
//
// Threads do not survive fork(): a child must not rely on threads the parent started. Tests
// that need a fresh soma runtime in the child must therefore not start soma in the parent; in
// a child forked after it started, soma refuses every call (somaErrorInitializationError).
#pragma once

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <exception>
#include <utility>

namespace soma_test {

/// Exit status of a child whose fn threw an exception.
inline constexpr int kChildThrew = 126;
/// Returned by run_in_child when fork or waitpid failed.
inline constexpr int kForkFailed = -1;

/// Runs `int fn()` in a child. Returns the child's exit status (0..255), 128 + signal number
/// if a signal killed it, or kForkFailed.
template <typename Fn>
int run_in_child(Fn&& fn) {
  std::fflush(nullptr);  // do not write buffered parent output twice
  const pid_t pid = ::fork();
  if (pid < 0) return kForkFailed;
  if (pid == 0) {
    int code = kChildThrew;
    try {
      code = std::forward<Fn>(fn)();
    } catch (const std::exception& error) {
      std::fprintf(stderr, "run_in_child: child threw: %s\n", error.what());
    } catch (...) {
      std::fprintf(stderr, "run_in_child: child threw\n");
    }
    std::fflush(nullptr);
    ::_exit(code & 0xff);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return kForkFailed;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kForkFailed;
}

}  // namespace soma_test
