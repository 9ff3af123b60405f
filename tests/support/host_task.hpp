// launch_host(stream, callable): runs a C++ callable as a stream host task
// (somaLaunchHostFunc), after all earlier work on the stream.
//
// The callable is moved to the heap and deleted after it runs. A task the stream never runs
// (a sticky error skipped it) leaks its callable; tests keep captures small.
//
// Requires: the including binary links `soma`.
#pragma once

#include <soma/soma.h>

#include <type_traits>
#include <utility>

namespace soma_test {

template <typename Fn>
somaError_t launch_host(somaStream_t stream, Fn&& fn) {
  using callable = std::decay_t<Fn>;
  auto* heap = new callable(std::forward<Fn>(fn));
  const somaError_t status = somaLaunchHostFunc(
      stream,
      [](void* user_data) {
        auto* task = static_cast<callable*>(user_data);
        (*task)();
        delete task;
      },
      heap);
  if (status != somaSuccess) delete heap;
  return status;
}

/// Like launch_host, for a callable returning somaError_t (somaLaunchHostFuncWithStatus).
template <typename Fn>
somaError_t launch_host_with_status(somaStream_t stream, Fn&& fn) {
  using callable = std::decay_t<Fn>;
  auto* heap = new callable(std::forward<Fn>(fn));
  const somaError_t status = somaLaunchHostFuncWithStatus(
      stream,
      [](void* user_data) -> somaError_t {
        auto* task = static_cast<callable*>(user_data);
        const somaError_t result = (*task)();
        delete task;
        return result;
      },
      heap);
  if (status != somaSuccess) delete heap;
  return status;
}

}  // namespace soma_test
