// launch_host(stream, callable): runs a C++ callable as a stream host task
// (somaLaunchHostFunc), after all earlier work on the stream.
//
// The callable is moved to the heap and deleted after it runs. A task the stream never runs
// (a sticky error skipped it) leaks its callable; tests keep captures small.
//
// Requires: the including binary links `soma`.
#pragma once

#include <soma/soma.h>

#include <memory>
#include <type_traits>
#include <utility>

namespace soma_test {

/// Moves fn to the heap and hands `launch` a C task (Result (*)(void*)) that runs it once and
/// deletes it, with the heap copy as its argument; deletes the copy itself if launch fails.
template <typename Result, typename Fn>
somaError_t launch_heap_task(somaError_t (*launch)(somaStream_t, Result (*)(void*), void*),
                             somaStream_t stream, Fn&& fn) {
  using callable = std::decay_t<Fn>;
  auto* heap = new callable(std::forward<Fn>(fn));
  const somaError_t status = launch(
      stream,
      [](void* user_data) -> Result {
        const std::unique_ptr<callable> task(static_cast<callable*>(user_data));
        if constexpr (std::is_void_v<Result>) {
          (*task)();  // a launch_host callable's result, if any, is dropped
        } else {
          return (*task)();
        }
      },
      heap);
  if (status != somaSuccess) delete heap;
  return status;
}

template <typename Fn>
somaError_t launch_host(somaStream_t stream, Fn&& fn) {
  return launch_heap_task(somaLaunchHostFunc, stream, std::forward<Fn>(fn));
}

/// Like launch_host, for a callable returning somaError_t (somaLaunchHostFuncWithStatus).
template <typename Fn>
somaError_t launch_host_with_status(somaStream_t stream, Fn&& fn) {
  return launch_heap_task(somaLaunchHostFuncWithStatus, stream, std::forward<Fn>(fn));
}

}  // namespace soma_test
