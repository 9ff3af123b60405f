// S16 Virtual memory: when the OS refuses an address reservation (a low `ulimit -v`, i.e.
// RLIMIT_AS) while physical memory is plentiful, soma reports somaErrorAddressSpaceExhausted,
// not somaErrorMemoryAllocation, and its message names the limit.
//
// Each test runs in a fork()ed child that lowers RLIMIT_AS, which cannot be undone for the
// process as a whole. The child must start the soma runtime itself (threads do not survive
// fork), so nothing in this binary's parent process may call soma, except the configuration
// set before main by cpu_test_config.hpp, which does not start the runtime. Hence no
// capi_test fixture here.
#include <soma/soma.h>

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "cpu_test_config.hpp"
#include "run_in_child.hpp"
#include "soma_test_util.hpp"

namespace {

using soma_test::run_in_child;

constexpr std::size_t kMiB = std::size_t{1} << 20;
/// Fits the test device's 256 MiB of physical memory, not the lowered address-space limit.
constexpr std::size_t kRequest = 96 * kMiB;

/// Current virtual size of this process in bytes (/proc/self/statm, first field), 0 if unknown.
std::size_t virtual_size_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0;
  if (!(statm >> pages)) return 0;
  return pages * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

const char* name(somaError_t status) {
  const char* text = somaGetErrorName(status);
  return text != nullptr ? text : "(null)";
}

// Child exit codes: 0 = all checks passed; each failed check has its own code so the parent's
// message says which one failed (the child also prints details to stderr).
enum child_result : int {
  child_ok = 0,
  runtime_already_started = 10,
  runtime_start_failed = 11,
  limit_not_set = 12,
  pool_create_wrong_error = 13,
  wrong_error_code = 14,
  message_without_limit = 15,
  message_without_size = 19,
  reserved_pool_cannot_allocate = 16,
  no_recovery_after_raising_limit = 17,
  failed_call_changed_stats = 18,
};

const char* describe(int code) {
  switch (code) {
    case child_ok:
      return "ok";
    case runtime_already_started:
      return "the soma runtime was started before the child ran";
    case runtime_start_failed:
      return "starting the runtime and a first allocation failed";
    case limit_not_set:
      return "setrlimit(RLIMIT_AS) failed";
    case pool_create_wrong_error:
      return "somaMemPoolCreate under RLIMIT_AS failed with a code other than "
             "AddressSpaceExhausted";
    case wrong_error_code:
      return "allocation whose address reservation fails did not return "
             "somaErrorAddressSpaceExhausted";
    case message_without_limit:
      return "the message does not name RLIMIT_AS";
    case message_without_size:
      return "the message does not state the requested size";
    case reserved_pool_cannot_allocate:
      return "a pool whose range was reserved before the limit could not allocate (physical "
             "memory is plentiful)";
    case no_recovery_after_raising_limit:
      return "after raising the limit again the pool still could not allocate";
    case failed_call_changed_stats:
      return "the failed allocation changed the pool's statistics";
    default:
      return "child crashed or failed otherwise";
  }
}

/// Lowers the soft RLIMIT_AS to the current virtual size plus headroom; returns the old limit.
bool lower_address_space_limit(std::size_t headroom_bytes, rlimit* previous) {
  if (::getrlimit(RLIMIT_AS, previous) != 0) return false;
  rlimit lowered = *previous;
  lowered.rlim_cur = virtual_size_bytes() + headroom_bytes;
  if (previous->rlim_max != RLIM_INFINITY && lowered.rlim_cur > previous->rlim_max) return false;
  return ::setrlimit(RLIMIT_AS, &lowered) == 0;
}

somaMemPoolProps device_pool_props(int device) {
  somaMemPoolProps props{};
  props.allocType = somaMemAllocationTypePinned;
  props.handleTypes = somaMemHandleTypeNone;
  props.location.type = somaMemLocationTypeDevice;
  props.location.id = device;
  return props;
}

/// Body of the child for the reservation test: see the test below.
int reservation_failure_child() {
  // The runtime must not be running yet (a configuration call is refused once it is).
  const somaCpuBackendConfig config = soma_test::test_backend_config();
  if (somaSetCpuBackendConfig(&config) != somaSuccess) return runtime_already_started;

  // Start the runtime with normal limits: workers, the default pool's range, one allocation.
  somaStream_t stream = nullptr;
  void* warm = nullptr;
  if (somaStreamCreate(&stream) != somaSuccess ||
      somaMallocAsync(&warm, kMiB, stream) != somaSuccess ||
      somaFreeAsync(warm, stream) != somaSuccess || somaStreamSynchronize(stream) != somaSuccess) {
    std::fprintf(stderr, "child: start failed: %s\n", somaGetLastErrorMessage());
    return runtime_start_failed;
  }

  // Now only 32 MiB more address space, and a request of 96 MiB: physical memory (256 MiB per
  // device) is plentiful, but no range for the request can be reserved, not even one of the
  // request's own size.
  rlimit previous{};
  if (!lower_address_space_limit(32 * kMiB, &previous)) return limit_not_set;

  // A pool reserves its range lazily or at creation; either way the reservation must fail with
  // the address-space code and a message naming the limit.
  somaMemPool_t pool = nullptr;
  const somaMemPoolProps props = device_pool_props(0);
  somaError_t status = somaMemPoolCreate(&pool, &props);
  bool pool_created = status == somaSuccess;
  if (!pool_created) {
    std::fprintf(stderr, "child: somaMemPoolCreate: %s: %s\n", name(status),
                 somaGetLastErrorMessage());
    if (status != somaErrorAddressSpaceExhausted) return pool_create_wrong_error;
  } else {
    void* pointer = nullptr;
    status = somaMallocFromPoolAsync(&pointer, kRequest, pool, stream);
    const std::string message = somaGetLastErrorMessage();
    std::fprintf(stderr, "child: somaMallocFromPoolAsync: %s: %s\n", name(status), message.c_str());
    if (status != somaErrorAddressSpaceExhausted) return wrong_error_code;
    if (message.find("RLIMIT_AS") == std::string::npos) return message_without_limit;
    if (!soma_test::mentions_size(message, kRequest)) return message_without_size;
    std::uint64_t used = 1;
    std::uint64_t reserved = 1;
    if (somaMemPoolGetAttribute(pool, somaMemPoolAttrUsedMemCurrent, &used) != somaSuccess ||
        somaMemPoolGetAttribute(pool, somaMemPoolAttrReservedMemCurrent, &reserved) !=
            somaSuccess ||
        used != 0 || reserved != 0)
      return failed_call_changed_stats;
  }
  if (!pool_created &&
      std::string(somaGetLastErrorMessage()).find("RLIMIT_AS") == std::string::npos)
    return message_without_limit;

  // Physical memory is plentiful: the default pool, whose range exists, still allocates.
  void* pointer = nullptr;
  status = somaMallocAsync(&pointer, 4 * kMiB, stream);
  if (status != somaSuccess) {
    std::fprintf(stderr, "child: default pool under the limit: %s: %s\n", name(status),
                 somaGetLastErrorMessage());
    return reserved_pool_cannot_allocate;
  }
  if (somaFreeAsync(pointer, stream) != somaSuccess) return reserved_pool_cannot_allocate;

  // With the limit raised again, the pool works: the failure changed nothing.
  if (::setrlimit(RLIMIT_AS, &previous) != 0) return limit_not_set;
  if (!pool_created) {
    if (somaMemPoolCreate(&pool, &props) != somaSuccess) return no_recovery_after_raising_limit;
  }
  status = somaMallocFromPoolAsync(&pointer, kRequest, pool, stream);
  if (status != somaSuccess) {
    std::fprintf(stderr, "child: after raising the limit: %s: %s\n", name(status),
                 somaGetLastErrorMessage());
    return no_recovery_after_raising_limit;
  }
  if (somaFreeAsync(pointer, stream) != somaSuccess ||
      somaStreamSynchronize(stream) != somaSuccess || somaMemPoolDestroy(pool) != somaSuccess ||
      somaStreamDestroy(stream) != somaSuccess)
    return no_recovery_after_raising_limit;
  return child_ok;
}

TEST(S16_VirtualMemory, ReservationRefusedByRlimitAsIsAddressSpaceExhausted) {
  if (soma_test::requested_backend() != "cpu")
    GTEST_SKIP() << "cpu backend only: the child configures the cpu backend (its device budget, "
                    "and RLIMIT_AS, which bounds the host address space cpu pools reserve)";
  ASSERT_EQ(soma_test::detail::cpu_test_config_status, somaSuccess);
  const int result = run_in_child(reservation_failure_child);
  EXPECT_EQ(result, 0) << "child: " << describe(result) << " (exit " << result << ")";
}

/// Body of the child for the second test: an allocation beyond the device's memory under a
/// normal limit is physical exhaustion, not address space.
int physical_exhaustion_child() {
  const somaCpuBackendConfig config = soma_test::test_backend_config();
  if (somaSetCpuBackendConfig(&config) != somaSuccess) return runtime_already_started;
  somaMemPool_t pool = nullptr;
  const somaMemPoolProps props = device_pool_props(0);
  if (somaMemPoolCreate(&pool, &props) != somaSuccess) return runtime_start_failed;
  int memory_mib = 0;
  if (somaDeviceGetAttribute(&memory_mib, somaDevAttrTotalMemoryMiB, 0) != somaSuccess)
    return runtime_start_failed;
  void* pointer = nullptr;
  const somaError_t status = somaMallocFromPoolAsync(
      &pointer, (static_cast<std::size_t>(memory_mib) + 1) * kMiB, pool, nullptr);
  if (status != somaErrorMemoryAllocation) {
    std::fprintf(stderr, "child: %s: %s\n", name(status), somaGetLastErrorMessage());
    return wrong_error_code;
  }
  if (somaMemPoolDestroy(pool) != somaSuccess) return runtime_start_failed;
  return child_ok;
}

TEST(S16_VirtualMemory, PhysicalExhaustionIsMemoryAllocationNotAddressSpace) {
  if (soma_test::requested_backend() != "cpu")
    GTEST_SKIP() << "cpu backend only: the child configures the cpu backend (its device budget, "
                    "and RLIMIT_AS, which bounds the host address space cpu pools reserve)";
  ASSERT_EQ(soma_test::detail::cpu_test_config_status, somaSuccess);
  const int result = run_in_child(physical_exhaustion_child);
  EXPECT_EQ(result, 0) << "child: " << describe(result) << " (exit " << result << ")";
}

}  // namespace
