// Snapshots of pools for people to read (soma's own): the core's view of each pool, with the
// streams its pending frees wait for named by handle; a pool's latest out-of-memory failure.
#include "runtime/runtime.hpp"

namespace soma::detail {
namespace {

// Under the pool registry's lock (the pool is not deleted meanwhile).
pool_report take(const pool_object& pool) {
  pool_report out;
  out.pool_handle = pool.handle();
  out.device = pool.config().device;
  out.name = pool.name();
  out.contents = pool.snapshot();
  return out;
}

/// Runs fn(pool) under the pool registry's lock (the pool is not deleted meanwhile), or gives
/// the error of a handle that names no live pool.
template <typename Fn>
status with_live_pool(pool_registry& pools, std::uintptr_t handle, Fn&& fn) {
  return pools.with_pool(handle, [&](pool_object* p) -> status {
    if (p == nullptr) return pools.resolve(handle).take_error();
    fn(*p);
    return status::success();
  });
}

}  // namespace

// After the pool registry's lock is released: the stream registry's lock comes first.
void runtime::name_pending_streams(pool_report& report) const {
  report.pending_streams.clear();
  report.pending_streams.reserve(report.contents.blocks.size());
  for (const block_view& b : report.contents.blocks) {
    report.pending_streams.push_back(b.what == block_view::state::pending
                                         ? streams_.handle_of_timeline(b.stream_id)
                                         : std::nullopt);
  }
}

result<pool_report> runtime::snapshot(std::uintptr_t pool_handle) {
  pool_report out;
  status found = with_live_pool(pools_, pool_handle, [&](pool_object& p) { out = take(p); });
  if (!found.ok()) return found;
  name_pending_streams(out);
  return out;
}

std::vector<pool_report> runtime::snapshot_all() {
  std::vector<pool_report> out;
  pools_.for_each_live([&](const pool_object& p) { out.push_back(take(p)); });
  for (pool_report& r : out) name_pending_streams(r);
  return out;
}

result<std::optional<out_of_memory_record>> runtime::last_out_of_memory(
    std::uintptr_t pool_handle) {
  std::optional<out_of_memory_record> out;
  status found =
      with_live_pool(pools_, pool_handle, [&](pool_object& p) { out = p.last_out_of_memory(); });
  if (!found.ok()) return found;
  return out;
}

}  // namespace soma::detail
