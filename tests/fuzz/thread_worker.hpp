// One thread of threads_fuzz: its own streams and allocations, the shared pools and events
// (shared_objects.hpp) that other threads change under it. While threads run it checks what
// holds under concurrency: its allocations keep their bytes and attributes, a pool's used
// memory covers at least its own live allocations, highs stay above currents, a call on a
// shared pool fails only with a dead handle and only when another thread replaced that pool, its
// scopes close in turn (one close too many refused) and a trace it exports, whatever the others
// record meanwhile, is one JSON object. After every thread joined, the target checks the totals
// (threads_fuzz.cpp).
#pragma once

#include <soma/soma.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "api_model.hpp"
#include "byte_runs.hpp"
#include "op_decoder.hpp"
#include "shared_objects.hpp"

namespace soma_fuzz {

class thread_worker {
 public:
  static constexpr int kStreams = kDeviceCount + 2;  // the devices' default streams, then its own

  thread_worker(shared_objects& shared, int index) : shared_(shared), index_(index) {}
  thread_worker(const thread_worker&) = delete;
  thread_worker& operator=(const thread_worker&) = delete;

  /// On the worker's thread: creates its streams, then applies each operation.
  void run(const std::vector<operation>& program);

  // After every thread joined, on the joining thread:
  /// Host check of every live allocation's bytes (the devices were synchronized).
  void verify_contents() const;
  /// Adds its live bytes per pool to totals.
  void add_live_bytes(std::map<somaMemPool_t, std::uint64_t>& totals) const;
  /// Frees its allocations and destroys its streams and event.
  void finish();

 private:
  struct allocation {
    void* pointer = nullptr;
    std::size_t size = 0;
    somaMemPool_t pool = nullptr;
    int device = 0;  // the pool's
    int owner = 0;   // stream index whose work last wrote it
    std::vector<int> readers;
    byte_runs contents{0};
  };
  /// A default pool (slot -1, never destroyed) or a shared one as seen now.
  struct pool_choice {
    int slot = -1;
    pool_view view;
  };

  void apply(const operation& op);
  pool_choice pick_pool(std::uint8_t choice);
  /// Runs use(view) on the chosen pool while no thread can destroy it (shared_objects.hpp).
  template <typename Use>
  void with_pool(std::uint8_t choice, Use&& use) {
    const pool_choice pool = pick_pool(choice);
    if (pool.slot < 0) return use(pool.view);
    shared_.with_pool(pool.slot, use);
  }
  bool raced(const pool_choice& pool, somaError_t status);
  void record_allocation(void* pointer, std::size_t size, int stream, const pool_choice& pool,
                         std::uint8_t fill, std::uint16_t raw);
  int writer_for(int stream, int device) const;
  void take_for_writing(allocation& entry, int stream);
  void free_allocation(std::size_t index, int stream);
  void memset(const operation& op);
  void replace_stream(const operation& op);
  void pool_setting(const pool_view& pool, const operation& op);
  void check_pool_figures(const pool_view& pool);
  void verify_owned_on(int device, int stream) const;
  /// Memory history recorded, stopped or exported (history_ops.hpp); a scope opened or closed.
  void history(const operation& op);
  void scope(const operation& op);

  const stream_ref& stream(int index) const { return streams_[static_cast<std::size_t>(index)]; }
  int pick_stream(std::uint8_t choice) const { return choice % kStreams; }

  shared_objects& shared_;
  int index_;
  std::array<stream_ref, kStreams> streams_{};
  somaEvent_t ordering_ = nullptr;
  std::vector<allocation> live_;
  int scopes_open_ = 0;  // memory history scopes this thread opened and not closed
};

}  // namespace soma_fuzz
