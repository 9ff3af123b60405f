#include "device_pools.hpp"

#include <soma/cxx/pool.hpp>

#include <cstdlib>
#include <string>

#include "failure_log.hpp"

namespace soma::torch_integration {

device_pools::device_pools(int device_count)
    : device_count_(device_count > 0 ? device_count : 0),
      devices_(std::make_unique<device_state[]>(static_cast<std::size_t>(device_count_))) {}

somaError_t device_pools::pool(int device, somaMemPool_t* pool, std::string* failure) {
  device_state& state = devices_[static_cast<std::size_t>(device)];
  if (somaMemPool_t ready = state.pool.load(std::memory_order_acquire)) {
    *pool = ready;
    return somaSuccess;
  }
  std::lock_guard lock(mutex_);
  if (somaMemPool_t ready = state.pool.load(std::memory_order_acquire)) {
    *pool = ready;
    return somaSuccess;
  }
  const somaMemPoolProps props = soma::pool_props({.device = device});
  somaMemPool_t created = nullptr;
  somaError_t status = somaMemPoolCreate(&created, &props);
  if (status != somaSuccess) {
    *failure = "device " + std::to_string(device) +
               ": creating the pool failed: " + describe_soma_error(status);
    return status;
  }
  const std::string name = "torch device " + std::to_string(device);
  (void)somaMemPoolSetName(created, name.c_str());
  status = apply(created, settings_);
  if (status != somaSuccess) {
    *failure = "device " + std::to_string(device) +
               ": setting the pool's attributes failed: " + describe_soma_error(status);
    (void)somaMemPoolDestroy(created);
    return status;
  }
  state.pool.store(created, std::memory_order_release);
  *pool = created;
  return somaSuccess;
}

somaMemPool_t device_pools::existing(int device) const noexcept {
  return devices_[static_cast<std::size_t>(device)].pool.load(std::memory_order_acquire);
}

somaError_t device_pools::configure(const pool_settings& settings, std::string* failure) {
  for (const int flag : {settings.follow_event_dependencies, settings.allow_opportunistic,
                         settings.allow_internal_dependencies}) {
    if (flag != 0 && flag != 1) {
      *failure = "soma_torch_configure: reuse policy flags are 0 or 1, not " + std::to_string(flag);
      return somaErrorInvalidValue;
    }
  }
  std::lock_guard lock(mutex_);
  settings_ = settings;
  for (int device = 0; device < device_count_; ++device) {
    somaMemPool_t pool = existing(device);
    if (pool == nullptr) continue;
    if (somaError_t status = apply(pool, settings); status != somaSuccess) {
      *failure = "device " + std::to_string(device) +
                 ": setting the pool's attributes failed: " + describe_soma_error(status);
      return status;
    }
  }
  return somaSuccess;
}

somaError_t device_pools::apply(somaMemPool_t pool, const pool_settings& settings) {
  std::uint64_t threshold = settings.release_threshold_bytes;
  int follow = settings.follow_event_dependencies;
  int opportunistic = settings.allow_opportunistic;
  int internal = settings.allow_internal_dependencies;
  somaError_t status = somaMemPoolSetAttribute(pool, somaMemPoolAttrReleaseThreshold, &threshold);
  if (status == somaSuccess)
    status = somaMemPoolSetAttribute(pool, somaMemPoolReuseFollowEventDependencies, &follow);
  if (status == somaSuccess)
    status = somaMemPoolSetAttribute(pool, somaMemPoolReuseAllowOpportunistic, &opportunistic);
  if (status == somaSuccess)
    status = somaMemPoolSetAttribute(pool, somaMemPoolReuseAllowInternalDependencies, &internal);
  // SOMA_TORCH_COMPACT=1: compaction before growth (somaMemPoolAttrCompactBeforeGrowth), peak
  // memory near live memory for a stream synchronize where the pool would grow while holding
  // fragmented free memory (docs/torch.md).
  const char* compact = std::getenv("SOMA_TORCH_COMPACT");
  if (status == somaSuccess && compact != nullptr && std::string(compact) == "1") {
    int on = 1;
    status = somaMemPoolSetAttribute(pool, somaMemPoolAttrCompactBeforeGrowth, &on);
  }
  // SOMA_TORCH_REMAP=0|1|2: somaMemPoolAttrRemapFreeMemory (never, before growth, instead of
  // failing). Unset: before growth, which keeps PyTorch's pools near their floor and, holding
  // large free blocks for large requests, maps memory again only in a loop's first steps
  // (docs/torch.md).
  const char* remap = std::getenv("SOMA_TORCH_REMAP");
  int mode = 1;
  if (remap != nullptr && remap[0] >= '0' && remap[0] <= '2' && remap[1] == '\0')
    mode = remap[0] - '0';
  if (status == somaSuccess)
    status = somaMemPoolSetAttribute(pool, somaMemPoolAttrRemapFreeMemory, &mode);
  return status;
}

}  // namespace soma::torch_integration
