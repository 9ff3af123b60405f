// A child forked after soma started (S1: every call returns a status that says what failed).
// Neither backend can serve such a child: CUDA cannot be used after fork (the driver answers
// CUDA_ERROR_NOT_INITIALIZED), and the cpu backend's stream threads do not survive fork while
// its pool memory stays shared with the parent. Every call that needs the runtime returns
// somaErrorInitializationError, at once, with a message that says why and what to do instead;
// the parent goes on unharmed. docs/api-behaviour.md, "Runtime start and devices".
#include <soma/soma.h>

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "run_in_child.hpp"
#include "soma_test_util.hpp"

namespace {

using namespace soma_test;

class S1_ForkedChild : public capi_test {};

// Child exit codes: 0 = every call refused as documented; else the first call that was not
// (its code and message are on stderr).
enum child_result : int {
  child_ok = 0,
  malloc_not_refused = 10,
  synchronize_not_refused = 11,
  free_not_refused = 12,
  device_count_not_refused = 13,
  configure_not_refused = 14,
  stream_create_not_refused = 15,
};

/// Whether status and the thread's message are the forked-child refusal.
bool refused_as_forked_child(somaError_t status, const char* call) {
  const std::string message = last_message();
  const bool refused = status == somaErrorInitializationError && contains(message, "forked") &&
                       contains(message, "spawn") && contains(message, "after fork");
  if (!refused)
    std::fprintf(stderr, "child: %s: %s: %s\n", call, somaGetErrorName(status), message.c_str());
  return refused;
}

TEST_F(S1_ForkedChild, EveryCallIsRefusedWithWhyAndWhatToDoAndTheParentGoesOn) {
  unique_stream stream;
  unique_pool pool(0);
  constexpr std::size_t bytes = 64 * KiB;
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, bytes, pool, stream));
  SOMA_ASSERT_OK(somaMemsetAsync(pointer, 0x11, bytes, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  const pool_stats before = read_pool_stats(pool);
  somaStream_t raw_stream = stream;

  const int result = run_in_child([&] {
    ::alarm(20);  // a call that waits for a stream thread the fork left behind would hang
    void* fresh = nullptr;
    if (!refused_as_forked_child(somaMallocAsync(&fresh, bytes, raw_stream), "somaMallocAsync"))
      return malloc_not_refused;
    if (!refused_as_forked_child(somaStreamSynchronize(raw_stream), "somaStreamSynchronize"))
      return synchronize_not_refused;
    if (!refused_as_forked_child(somaFreeAsync(pointer, raw_stream), "somaFreeAsync"))
      return free_not_refused;
    int count = 0;
    if (!refused_as_forked_child(somaGetDeviceCount(&count), "somaGetDeviceCount"))
      return device_count_not_refused;
    somaStream_t other = nullptr;
    if (!refused_as_forked_child(somaStreamCreate(&other), "somaStreamCreate"))
      return stream_create_not_refused;
    const somaCpuBackendConfig config{};
    if (!refused_as_forked_child(somaSetCpuBackendConfig(&config), "somaSetCpuBackendConfig"))
      return configure_not_refused;
    return child_ok;
  });
  EXPECT_EQ(result, 0) << "see the child's stderr for the call that was not refused";

  // The parent is unharmed: the allocation is live with its bytes, and the pool works.
  EXPECT_EQ(read_pool_stats(pool), before);
  const host_buffer seen = read_back(pointer, bytes, stream);
  EXPECT_EQ(seen.count_not(0x11), 0u);
  SOMA_EXPECT_OK(somaFreeAsync(pointer, stream));
  expect_pool_usable(pool, stream);
}

}  // namespace
