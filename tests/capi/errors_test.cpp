// Error reporting of the C API (design.md §2 "Errors", api-behaviour.md): every code has a
// name and a description, failures leave a message for the calling thread, and failures of
// asynchronous work are sticky on their stream (S1: every call returns a status).
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <initializer_list>
#include <set>
#include <string>
#include <thread>

#include "c_caller.h"
#include "host_task.hpp"
#include "soma_test_util.hpp"
#include "stream_gate.hpp"

namespace {

using namespace soma_test;

class S1_Errors : public capi_test {};

/// Host task for work a failed stream must skip. A plain function with stack data, not
/// launch_host: a skipped task never runs, so it could not free a heap-allocated callable.
void count_run(void* counter) { static_cast<std::atomic<int>*>(counter)->fetch_add(1); }
class S1_AsyncErrors : public capi_test {};

constexpr somaError_t kAllCodes[] = {
    somaSuccess,
    somaErrorInvalidValue,
    somaErrorMemoryAllocation,
    somaErrorInitializationError,
    somaErrorInvalidDevice,
    somaErrorNoDevice,
    somaErrorOperatingSystem,
    somaErrorInvalidResourceHandle,
    somaErrorNotReady,
    somaErrorIllegalAddress,
    somaErrorLaunchFailure,
    somaErrorNotPermitted,
    somaErrorNotSupported,
    somaErrorUnknown,
    somaErrorAddressSpaceExhausted,
};

TEST_F(S1_Errors, EveryCodeHasADistinctNameAndADescription) {
  std::set<std::string> names;
  for (somaError_t code : kAllCodes) {
    const char* name = somaGetErrorName(code);
    const char* text = somaGetErrorString(code);
    ASSERT_NE(name, nullptr) << static_cast<int>(code);
    ASSERT_NE(text, nullptr) << static_cast<int>(code);
    EXPECT_GT(std::strlen(name), 0u) << static_cast<int>(code);
    EXPECT_GT(std::strlen(text), 0u) << static_cast<int>(code);
    EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
  }
  // Names follow the enumerators (CUDA: cudaGetErrorName gives "cudaErrorInvalidValue").
  EXPECT_STREQ(somaGetErrorName(somaSuccess), "somaSuccess");
  EXPECT_STREQ(somaGetErrorName(somaErrorInvalidValue), "somaErrorInvalidValue");
  EXPECT_STREQ(somaGetErrorName(somaErrorAddressSpaceExhausted), "somaErrorAddressSpaceExhausted");
}

TEST_F(S1_Errors, UnknownCodeStillHasAName) {
  const auto bogus = static_cast<somaError_t>(12345);  // within the enum's range, not a code
  ASSERT_NE(somaGetErrorName(bogus), nullptr);
  ASSERT_NE(somaGetErrorString(bogus), nullptr);
  // From C any int may come (outside the C++ enum's range too).
  for (int code : {-1, 123456, 0x7fffffff}) {
    EXPECT_NE(c_caller_error_name(code), nullptr) << code;
    EXPECT_NE(c_caller_error_string(code), nullptr) << code;
  }
}

TEST_F(S1_Errors, FailureSetsThreadMessageAndLastError) {
  ASSERT_EQ(somaMallocAsync(nullptr, 1024, nullptr), somaErrorInvalidValue);
  EXPECT_FALSE(last_message().empty()) << "a failure must leave a message";
  EXPECT_EQ(somaGetLastError(), somaErrorInvalidValue);
  EXPECT_EQ(somaGetLastError(), somaSuccess) << "somaGetLastError clears the code";
}

TEST_F(S1_Errors, MessagesArePerThread) {
  ASSERT_EQ(somaMallocAsync(nullptr, 1024, nullptr), somaErrorInvalidValue);
  const std::string main_message = last_message();
  ASSERT_FALSE(main_message.empty());

  std::string other_message = "unset";
  somaError_t other_last = somaErrorUnknown;
  std::thread other([&] {
    other_message = last_message();
    other_last = somaGetLastError();
  });
  other.join();
  EXPECT_EQ(other_message, "") << "a fresh thread has no last failure";
  EXPECT_EQ(other_last, somaSuccess);
  EXPECT_EQ(last_message(), main_message) << "another thread must not change this thread's";
}

TEST_F(S1_Errors, SetCpuBackendConfigAfterStartIsNotPermitted) {
  int count = 0;
  SOMA_ASSERT_OK(somaGetDeviceCount(&count));  // the runtime is started
  somaCpuBackendConfig config{};
  config.deviceCount = 3;
  EXPECT_EQ(somaSetCpuBackendConfig(&config), somaErrorNotPermitted);
  int after = 0;
  SOMA_ASSERT_OK(somaGetDeviceCount(&after));
  EXPECT_EQ(after, count) << "a refused configuration must change nothing";
}

TEST_F(S1_Errors, BackendIsTheRequestedOne) {
  const char* name = nullptr;
  SOMA_ASSERT_OK(somaGetBackendName(&name));
  ASSERT_NE(name, nullptr);
  EXPECT_EQ(std::string(name), requested_backend()) << "SOMA_BACKEND picks the backend";
}

// ---- sticky errors of asynchronous work --------------------------------------------------

TEST_F(S1_AsyncErrors, FailedHostTaskIsStickyOnItsStream) {
  unique_stream stream;
  unique_stream other;
  unique_event before_failure;
  unique_event after_failure;
  stream_gate gate;
  std::atomic<int> ran_after_failure{0};

  // Hold the stream so the failure happens after everything below is enqueued.
  SOMA_ASSERT_OK(gate.hold(stream));
  SOMA_ASSERT_OK(somaEventRecord(before_failure, stream));
  SOMA_ASSERT_OK(launch_host_with_status(stream, [] { return somaErrorInvalidValue; }));
  SOMA_ASSERT_OK(somaLaunchHostFunc(stream, count_run, &ran_after_failure));
  SOMA_ASSERT_OK(somaEventRecord(after_failure, stream));
  gate.open();

  EXPECT_EQ(somaStreamSynchronize(stream), somaErrorLaunchFailure);
  EXPECT_EQ(ran_after_failure.load(), 0) << "work after a failure must be skipped";
  EXPECT_EQ(somaStreamQuery(stream), somaErrorLaunchFailure) << "sticky: query reports it";
  EXPECT_EQ(somaStreamSynchronize(stream), somaErrorLaunchFailure) << "sticky: reported again";
  EXPECT_EQ(somaEventSynchronize(after_failure), somaErrorLaunchFailure);
  EXPECT_EQ(somaEventQuery(after_failure), somaErrorLaunchFailure);
  SOMA_EXPECT_OK(somaEventSynchronize(before_failure));
  EXPECT_EQ(somaLaunchHostFunc(stream, count_run, &ran_after_failure), somaErrorLaunchFailure)
      << "enqueue on a failed stream";

  // Another stream is not affected.
  SOMA_EXPECT_OK(launch_host(other, [] {}));
  SOMA_EXPECT_OK(somaStreamSynchronize(other));
  SOMA_EXPECT_OK(somaStreamQuery(other));
  EXPECT_EQ(ran_after_failure.load(), 0);
}

TEST_F(S1_AsyncErrors, AllocationAndFreeStillWorkOnFailedStream) {
  unique_stream stream;
  const somaMemPool_t pool = default_pool(0);
  const std::uint64_t used_before = pool_u64(pool, somaMemPoolAttrUsedMemCurrent);
  SOMA_ASSERT_OK(launch_host_with_status(stream, [] { return somaErrorUnknown; }));
  ASSERT_EQ(somaStreamSynchronize(stream), somaErrorLaunchFailure);

  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 4096, stream));
  ASSERT_NE(pointer, nullptr);
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), used_before + 4096);
  EXPECT_EQ(somaMemsetAsync(pointer, 0, 4096, stream), somaErrorLaunchFailure)
      << "further enqueues on a failed stream report the failure";
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), used_before);

  // Destroying the stream gets rid of the error; the pool keeps working elsewhere.
  SOMA_ASSERT_OK(somaStreamDestroy(stream.release()));
  unique_stream fresh;
  expect_pool_usable(pool, fresh);
}

TEST_F(S1_AsyncErrors, SuccessfulStatusTaskIsNotAnError) {
  unique_stream stream;
  std::atomic<int> ran{0};
  SOMA_ASSERT_OK(launch_host_with_status(stream, [&] {
    ran.fetch_add(1);
    return somaSuccess;
  }));
  SOMA_ASSERT_OK(launch_host(stream, [&] { ran.fetch_add(1); }));
  SOMA_EXPECT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(ran.load(), 2);
}

}  // namespace
