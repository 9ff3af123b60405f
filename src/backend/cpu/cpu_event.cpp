#include "backend/cpu/cpu_event.hpp"

namespace soma::detail::backend::cpu {

status cpu_event::record(stream& s) {
  const std::shared_ptr<stream_state>& state = static_cast<cpu_stream&>(s).state();
  std::uint64_t position = 0;
  {
    std::lock_guard lock(state->mutex);
    position = state->enqueued;
  }
  std::lock_guard lock(mutex_);
  source_ = state;
  position_ = position;
  return status::success();
}

cpu_event::snapshot cpu_event::recorded() const {
  std::lock_guard lock(mutex_);
  return {source_, position_};
}

status cpu_event::query() {
  snapshot at = recorded();
  if (at.source == nullptr) return status::success();  // never recorded
  return at.source->query(at.position);
}

status cpu_event::synchronize() {
  snapshot at = recorded();
  if (at.source == nullptr) return status::success();
  return at.source->wait_for(at.position);
}

}  // namespace soma::detail::backend::cpu
