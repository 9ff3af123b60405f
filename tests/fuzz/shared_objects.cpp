#include "shared_objects.hpp"

#include "api_model.hpp"
#include "fuzz_check.hpp"

namespace soma_fuzz {

shared_objects::shared_objects(std::uint8_t setup_bits) {
  for (int i = 0; i < kSharedPools; ++i)
    create_pool(pools_[static_cast<std::size_t>(i)], (setup_bits >> i) & 1,
                (setup_bits >> (4 + i)) & 1 ? 128 * KiB : 0);
  for (somaEvent_t& event : events_) FUZZ_OK(somaEventCreate(&event));
}

pool_view shared_objects::pool(int slot) const {
  const pool_slot& entry = pools_[static_cast<std::size_t>(slot)];
  std::shared_lock lock(entry.mutex);
  return entry.view;
}

bool shared_objects::pool_changed(int slot, std::uint64_t generation) const {
  return pool(slot).generation != generation;
}

void shared_objects::replace_pool(int slot, int device, std::size_t max_size) {
  pool_slot& entry = pools_[static_cast<std::size_t>(slot)];
  std::unique_lock lock(entry.mutex);
  ++entry.view.generation;  // before the destroy: see the header
  FUZZ_OK(somaMemPoolDestroy(entry.view.handle));
  create_pool(entry, device, max_size);
}

void shared_objects::destroy_all() {
  for (pool_slot& slot : pools_) {
    std::unique_lock lock(slot.mutex);
    ++slot.view.generation;
    FUZZ_OK(somaMemPoolDestroy(slot.view.handle));
  }
  for (somaEvent_t event : events_) FUZZ_OK(somaEventDestroy(event));
}

void shared_objects::create_pool(pool_slot& slot, int device, std::size_t max_size) {
  const somaMemPoolProps props = pool_props(device, max_size, false);
  FUZZ_OK(somaMemPoolCreate(&slot.view.handle, &props));
  slot.view.device = device;
  slot.view.cap_bytes = max_size == 0 ? kDeviceMemoryBytes : round_up(max_size, kGranularityBytes);
}

}  // namespace soma_fuzz
