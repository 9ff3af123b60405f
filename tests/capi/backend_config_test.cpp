// S8 somaSetCpuBackendConfig: bad settings are refused at the call with somaErrorInvalidValue
// and a message naming the limit, and leave the configuration as it was.
//
// Configuration is possible only before the runtime starts, so each test runs in a fork()ed
// child that starts soma itself; nothing in this binary's parent process may call soma, except
// the configuration set before main by cpu_test_config.hpp, which does not start the runtime.
// Hence no capi_test fixture here.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "cpu_test_config.hpp"
#include "run_in_child.hpp"
#include "soma_test_util.hpp"

namespace {

using soma_test::run_in_child;

/// The one limit of SOMA_CPU_DEVICES and somaCpuBackendConfig::deviceCount (docs/api-behaviour.md).
constexpr int kDeviceLimit = 64;

// Child exit codes: 0 = all checks passed; each failed check has its own code so the parent's
// message says which one failed (the child prints details to stderr).
enum child_result : int {
  child_ok = 0,
  runtime_already_started = 10,
  past_limit_accepted = 11,
  message_without_limit = 12,
  limit_refused = 13,
  refusal_changed_configuration = 14,
  bad_value_after_start_not_invalid = 15,
};

const char* describe(int code) {
  switch (code) {
    case child_ok:
      return "ok";
    case runtime_already_started:
      return "the soma runtime was started before the child ran";
    case past_limit_accepted:
      return "a deviceCount past the limit (or negative) was not somaErrorInvalidValue";
    case message_without_limit:
      return "the refusal's message does not name the limit 64";
    case limit_refused:
      return "deviceCount 64, the limit itself, was refused";
    case refusal_changed_configuration:
      return "after a refused configuration the runtime did not start with the accepted one";
    case bad_value_after_start_not_invalid:
      return "after start, a bad deviceCount was not somaErrorInvalidValue";
    default:
      return "child crashed or failed otherwise";
  }
}

somaError_t configure_devices(int device_count) {
  somaCpuBackendConfig config = soma_test::test_backend_config();
  config.deviceCount = device_count;
  return somaSetCpuBackendConfig(&config);
}

int device_limit_child() {
  const somaCpuBackendConfig test_config = soma_test::test_backend_config();
  if (somaSetCpuBackendConfig(&test_config) != somaSuccess) return runtime_already_started;

  for (const int count : {kDeviceLimit + 1, 5000, -1}) {
    const somaError_t status = configure_devices(count);
    const std::string message = somaGetLastErrorMessage();
    std::fprintf(stderr, "child: deviceCount %d: %s: %s\n", count, somaGetErrorName(status),
                 message.c_str());
    if (status != somaErrorInvalidValue) return past_limit_accepted;
    if (!soma_test::mentions_number(message, kDeviceLimit, "")) return message_without_limit;
  }
  if (configure_devices(kDeviceLimit) != somaSuccess) return limit_refused;

  // The refusals kept nothing: the runtime starts with the last accepted configuration.
  if (somaSetCpuBackendConfig(&test_config) != somaSuccess) return limit_refused;
  int devices = 0;
  if (somaGetDeviceCount(&devices) != somaSuccess ||
      devices != soma_test::test_backend_config().deviceCount) {
    std::fprintf(stderr, "child: %d devices: %s\n", devices, somaGetLastErrorMessage());
    return refusal_changed_configuration;
  }

  // A bad value is bad input whenever it comes; a good one after start is NotPermitted.
  if (configure_devices(5000) != somaErrorInvalidValue) return bad_value_after_start_not_invalid;
  if (configure_devices(1) != somaErrorNotPermitted) return bad_value_after_start_not_invalid;
  return child_ok;
}

TEST(S8_CpuBackendConfig, DeviceCountPastTheLimitIsInvalidValueNamingIt) {
  if (soma_test::requested_backend() != "cpu")
    GTEST_SKIP() << "cpu backend only: the child configures and starts the cpu backend";
  if (!soma_test::using_default_test_config())
    GTEST_SKIP() << "the child checks the device count of the test configuration";
  ASSERT_EQ(soma_test::detail::cpu_test_config_status, somaSuccess);
  const int result = run_in_child(device_limit_child);
  EXPECT_EQ(result, 0) << "child: " << describe(result) << " (exit " << result << ")";
}

}  // namespace
