#include "runtime/runtime.hpp"

#include "backend/fork_guard.hpp"
#include "backend/process_barrier.hpp"
#include "core/biased_lock.hpp"
#include "runtime/pool_hazards.hpp"

#include <utility>

namespace soma::detail {
namespace {

std::mutex start_mutex;
backend::cpu_settings configured_cpu_settings;
status start_failure;
bool start_attempted = false;

}  // namespace

status runtime::configure_cpu(const backend::cpu_settings& settings) {
  // Bad input is refused as such, before or after start, and nothing is kept.
  if (status ok = backend::check_cpu_settings(settings); !ok.ok())
    return status(ok.code(), "somaSetCpuBackendConfig: " + ok.message());
  if (backend::forked_after_start()) return backend::forked_child_error();
  std::lock_guard lock(start_mutex);
  if (start_attempted) {
    return status(error_code::not_permitted,
                  "the cpu backend is configured only before the runtime starts; it started "
                  "with the first soma call of this process");
  }
  configured_cpu_settings = settings;
  return status::success();
}

result<runtime*> runtime::instance() {
  // Every API call comes here: after start it is two loads, no lock.
  if (runtime* ready = started_.load(std::memory_order_acquire)) [[likely]] {
    if (!backend::forked_after_start()) [[likely]]
      return ready;
  }
  // A child forked after start has the runtime's memory but not its threads (nor, on cuda, a
  // usable driver); asked before the lock, which fork may have left held.
  if (backend::forked_after_start()) return backend::forked_child_error();
  std::lock_guard lock(start_mutex);
  if (runtime* ready = started_.load(std::memory_order_acquire)) return ready;
  if (start_attempted) return start_failure;
  start_attempted = true;
  result<std::unique_ptr<backend::backend>> platform =
      backend::create_backend(configured_cpu_settings);
  if (!platform.ok()) {
    start_failure = platform.take_error();
    return start_failure;
  }
  auto* created = new runtime(std::move(platform.value()));
  if (status started = created->start(); !started.ok()) {
    failed_start_ = created;
    start_failure = started;
    return start_failure;  // the half-started runtime is kept alive on purpose
  }
  started_.store(created, std::memory_order_release);
  return created;
}

runtime::runtime(std::unique_ptr<backend::backend> platform)
    : backend_(std::move(platform)),
      devices_(*backend_),
      pools_(*backend_, devices_, pointers_),
      streams_(*backend_, devices_, pools_),
      host_memory_(*backend_),
      ipc_(*backend_, pools_, pointers_) {
  // The stream caches' locks go biased where the hazards' publish goes without a fence: both
  // leave the fence to a rare process barrier.
  if (pool_hazards::asymmetric()) biased_lock::use_process_barrier(&backend::process_barrier);
}

status runtime::start() {
  if (status any = devices_.check_any(); !any.ok()) return any;
  if (status history = start_history_from_environment(); !history.ok()) return history;
  if (status started = pools_.start(); !started.ok()) return started;
  return streams_.start();
}

status runtime::synchronize_device() { return streams_.synchronize_device(devices_.current()); }

}  // namespace soma::detail
