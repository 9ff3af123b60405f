// One input of the single-threaded target: a session decodes operations, applies each to soma
// and to its model (session_state.hpp), and checks the promises of api_model.hpp after every
// step. finish() frees and destroys everything the input made and checks that all memory came
// back, so every input starts from the same state.
#pragma once

#include <cstddef>
#include <cstdint>

#include "op_decoder.hpp"
#include "session_state.hpp"

namespace soma_fuzz {

class session {
 public:
  session();
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  void apply(const operation& op);
  void check_invariants();
  void finish();

 private:
  // session_ops.cpp: streams and events
  void stream_create(const operation& op);
  void stream_destroy(const operation& op);
  void stream_synchronize(const operation& op);
  void stream_query(const operation& op);
  void event_create(const operation& op);
  void event_record(const operation& op);
  void stream_wait_event(const operation& op);
  void event_query(const operation& op);
  void event_synchronize(const operation& op);
  void event_destroy(const operation& op);
  void device_synchronize(int device);
  void synchronize_all();

  // session_memory.cpp: allocations and their bytes
  void malloc_async(const operation& op, bool from_pool);
  void free_allocation(std::size_t index, int freeing_slot);
  void memset(const operation& op);
  void copy(const operation& op);
  void check_in_stream(const operation& op);
  void pointer_attributes(const operation& op);

  // session_pools.cpp: pools and their settings
  void pool_create(const operation& op);
  void pool_destroy(const operation& op);
  void set_reuse_policy(const operation& op);
  void set_release_threshold(const operation& op);
  void set_compaction(const operation& op);
  void trim_to(const operation& op);
  void reset_high(const operation& op);
  void set_current_pool(const operation& op);
  void set_access(const operation& op);

  // session_bad_calls.cpp: error paths, which must fail and change nothing
  void bad_call(const operation& op);

  // session_history.cpp: memory history recorded, scopes, the trace exported
  void record_history(const operation& op);
  void scope_push(const operation& op);
  void scope_pop();
  void export_history();
  void finish_history();

  // helpers (session.cpp)
  void order_slot_after(int waiter, int target);
  void take_for_writing(allocation& entry, int slot);
  void verify_owned(bool (*owned)(const session_state&, int slot, int arg), int arg);
  void retire_stream(int slot);

  session_state state_;
};

}  // namespace soma_fuzz
