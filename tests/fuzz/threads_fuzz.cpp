// Fuzz target: three threads run C API operations at once, each on its own streams and
// allocations, against pools they share and destroy and replace while others allocate from
// them (S5), with events recorded by one thread and waited on by another, and memory history
// started, stopped and exported by one thread while the others record. thread_worker.hpp lists
// what each thread checks while they run; after they join this checks what must hold for the whole:
// every allocation kept its bytes, each live pool's used memory is the sum of every thread's
// live sizes in it, each device's current pool is alive and its own (S4), and after cleanup
// every byte is back.
//
// Input: one byte choosing the shared pools' devices and caps, then records of op_decoder.hpp
// dealt to the threads in turn (record i to thread i % 3).
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "api_model.hpp"
#include "fuzz_check.hpp"
#include "fuzz_config.hpp"
#include "op_decoder.hpp"
#include "shared_objects.hpp"
#include "thread_worker.hpp"

namespace {

using namespace soma_fuzz;

constexpr int kThreads = 3;
constexpr std::size_t kMaxOperationsPerThread = 64;

/// used == the sum of every thread's live sizes for each pool still alive; the rest of S10.
void check_totals(const std::vector<std::unique_ptr<thread_worker>>& workers,
                  shared_objects& shared) {
  std::map<somaMemPool_t, std::uint64_t> live;
  for (const auto& worker : workers) worker->add_live_bytes(live);
  std::vector<std::pair<somaMemPool_t, std::size_t>> alive;  // handle, cap
  for (int device = 0; device < kDeviceCount; ++device) {
    somaMemPool_t pool = nullptr;
    FUZZ_OK(somaDeviceGetDefaultMemPool(&pool, device));
    alive.emplace_back(pool, kDeviceMemoryBytes);
  }
  for (int slot = 0; slot < kSharedPools; ++slot)
    alive.emplace_back(shared.pool(slot).handle, shared.pool(slot).cap_bytes);
  for (const auto& [pool, cap] : alive) check_pool_stats(read_pool_stats(pool), live[pool], cap);

  for (int device = 0; device < kDeviceCount; ++device) {
    somaMemPool_t current = nullptr;
    FUZZ_OK(somaDeviceGetMemPool(&current, device));
    bool found = false;
    for (int slot = 0; slot < kSharedPools; ++slot)
      found |= shared.pool(slot).handle == current && shared.pool(slot).device == device;
    somaMemPool_t default_pool = nullptr;
    FUZZ_OK(somaDeviceGetDefaultMemPool(&default_pool, device));
    FUZZ_CHECK(found || current == default_pool,
               "device %d: current pool %p is neither its default nor a live pool of it", device,
               static_cast<void*>(current));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  configure_fuzz_backend();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  input_bytes input(data, size);
  shared_objects shared(input.byte());
  std::vector<std::vector<operation>> programs(kThreads);
  for (std::size_t i = 0; i < kThreads * kMaxOperationsPerThread && !input.empty(); ++i)
    programs[i % kThreads].push_back(decode_operation(input));

  std::vector<std::unique_ptr<thread_worker>> workers;
  for (int t = 0; t < kThreads; ++t) workers.push_back(std::make_unique<thread_worker>(shared, t));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      workers[static_cast<std::size_t>(t)]->run(programs[static_cast<std::size_t>(t)]);
    });
  for (std::thread& thread : threads) thread.join();
  FUZZ_OK(somaMemRecordHistory(0));  // whichever thread started it, it ends with the input

  for (int device = 0; device < kDeviceCount; ++device) {
    FUZZ_OK(somaSetDevice(device));
    FUZZ_OK(somaDeviceSynchronize());
  }
  for (const auto& worker : workers) worker->verify_contents();
  check_totals(workers, shared);

  for (const auto& worker : workers) worker->finish();
  shared.destroy_all();
  for (int device = 0; device < kDeviceCount; ++device) restore_default_pool(device);
  for (int device = 0; device < kDeviceCount; ++device) {
    FUZZ_OK(somaSetDevice(device));
    FUZZ_OK(somaDeviceSynchronize());
  }
  check_all_returned();
  return 0;
}
