#include "backend/fork_guard.hpp"

#include <pthread.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

namespace soma::detail::backend {

std::atomic<bool> forked_child{false};

namespace {

// Who started, for the message; atomic only because tests may start backends on two threads.
std::atomic<const char*> started_backend{nullptr};
std::atomic<pid_t> started_in_pid{0};

// Runs in the child of every fork() after a backend started; async-signal-safe (one store).
void mark_forked_child() { forked_child.store(true, std::memory_order_relaxed); }

}  // namespace

void note_backend_started(const char* backend_name) {
  static std::once_flag installed;
  if (forked_after_start()) return;  // a forked child keeps its ancestor's record
  started_backend.store(backend_name, std::memory_order_relaxed);
  started_in_pid.store(::getpid(), std::memory_order_relaxed);
  std::call_once(installed, [] { ::pthread_atfork(nullptr, nullptr, mark_forked_child); });
}

status forked_child_error() {
  const char* name = started_backend.load(std::memory_order_relaxed);
  const std::string backend = name != nullptr ? name : "?";
  std::string why;
  if (backend == "cuda") {
    why =
        "CUDA cannot be used in a child forked after it started (the driver answers "
        "CUDA_ERROR_NOT_INITIALIZED there)";
  } else {
    why =
        "its stream threads did not survive fork, and its pool memory is still shared with "
        "process " +
        std::to_string(started_in_pid.load(std::memory_order_relaxed)) +
        ", so using it here would corrupt that process's pools";
  }
  return status(error_code::initialization_error,
                "soma started the " + backend + " backend in process " +
                    std::to_string(started_in_pid.load(std::memory_order_relaxed)) +
                    ", and this process (" + std::to_string(::getpid()) +
                    ") was forked from it afterwards: " + why +
                    ". Start soma in the child only after fork (make no soma call in the parent "
                    "before it forks), or start the child with exec or posix_spawn (Python "
                    "multiprocessing: the 'spawn' or 'forkserver' start method)");
}

}  // namespace soma::detail::backend
