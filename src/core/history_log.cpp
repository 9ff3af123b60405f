#include "core/history_log.hpp"

#include <algorithm>

namespace soma::detail {
namespace {

std::uint64_t tagged(log_entry what, std::uint64_t low) {
  return low | std::uint64_t{static_cast<std::uint8_t>(what)} << 56;
}

}  // namespace

void history_log::note_slow(history_thread& t, history_kind kind, block& b, std::uint64_t bytes,
                            std::uintptr_t stream, std::uint32_t scope,
                            std::uint64_t floor) noexcept {
  // The block carries its scope whether or not the event can be written.
  if (scope != 0 && kind == history_kind::allocate) b.scope.store(scope, std::memory_order_relaxed);
  // The run ends (its events take their room), and none starts unless the event is written.
  arm(nullptr);
  const std::uint64_t beat = history_clock::beat();
  history_ring* ring = memory_history::recording_one().ring_in_use();
  if (ring == nullptr) return;
  // A source, a mark, a scope and the event: four entries at most.
  bool fresh = false;
  if (cursor_.ring != ring || cursor_.epoch != ring->epoch() || chunk_ == &no_chunk ||
      entries() + 4 > limit_) {
    // No room until a claim succeeds: the claim hands the old chunk back first, and where it
    // then finds none free the fast path must not go on writing into the chunk given back.
    chunk_ = &no_chunk;
    limit_ = 0;
    if (!ring->claim_for_log(cursor_)) return;  // every chunk is being filled: dropped
    chunk_ = cursor_.chunk;
    limit_ = ring->log_entries();
    fresh = true;
  }
  std::uint32_t n = entries();
  if (fresh || stream != stream_) {
    put(n++, tagged(log_entry::source, pool_ | std::uint64_t{device_} << 32), stream);
    stream_ = stream;
  }
  std::uint64_t stamp = mark_;
  if (beat != beat_ || fresh) stamp = std::max(stamp, history_clock::ticks());
  // After the thread's last event, wherever it went (t.clock.last: its stamp).
  if (t.log != this || t.clock.last != mark_) stamp = std::max(stamp, t.clock.last + 1);
  if (floor >= stamp) stamp = floor + 1;
  if (fresh || stamp != mark_) {
    put(n++, tagged(log_entry::mark, 0), stamp);
    mark_ = stamp;
  }
  beat_ = beat;
  if (scope != 0) put(n++, tagged(log_entry::scope, scope), 0);
  publish(n);
  t.log = this;
  t.clock.last = mark_;
  put_event(kind, b, bytes, floor);
  if (scope != 0) arm(nullptr);  // the block's next event names no label: not a repeat
}

bool history_log::start_run() noexcept {
  if (run_count_ != 0) return false;  // the run filled the chunk's room
  const std::uint32_t n = entries();
  if (n + 1 >= limit_) return false;  // one entry for the repeat, and room for one event
  put(n, tagged(log_entry::repeat, 0), 1);
  publish(n + 1);
  run_word_ = entry(n) + 1;
  run_count_ = 1;
  run_room_ = limit_ - (n + 1);
  return true;
}

void decode_log(const std::uint64_t* words, std::size_t entries, std::size_t room,
                std::vector<history_event>& out) {
  history_event context;  // the source and mark so far
  bool marked = false;
  bool after_event = false;  // the last entry was an event (or a repeat), out.back() its last
  std::uint32_t scope = 0;
  for (std::size_t i = 0; i < entries; ++i) {
    const std::uint64_t first = words[2 * i];
    const std::uint64_t second = words[2 * i + 1];
    switch (static_cast<log_entry>(first >> 56)) {
      case log_entry::event: {
        if (!marked) break;  // never written so: a claim starts with a source and a mark
        history_event e = context;
        e.bytes = first & ((std::uint64_t{1} << 48) - 1);
        e.kind = static_cast<history_kind>((first >> 48) & 0xf);
        e.address = second;
        e.label = scope;
        scope = 0;
        out.push_back(e);
        after_event = true;
        continue;
      }
      case log_entry::repeat: {
        if (!after_event) break;
        history_event e = out.back();
        // A run takes the chunk's room for its events: a count beyond it was never written.
        for (std::uint64_t k = 0; k < std::min<std::uint64_t>(second, room); ++k) {
          e.kind = e.kind == history_kind::allocate ? history_kind::free : history_kind::allocate;
          out.push_back(e);
        }
        continue;
      }
      case log_entry::mark:
        context.time_ns = second;
        marked = true;
        break;
      case log_entry::source:
        context.pool = static_cast<std::uint32_t>(first);
        context.device = static_cast<std::int16_t>(static_cast<std::uint16_t>(first >> 32));
        context.stream = second;
        break;
      case log_entry::scope:
        scope = static_cast<std::uint32_t>(first);
        break;
    }
    after_event = false;
  }
}

}  // namespace soma::detail
