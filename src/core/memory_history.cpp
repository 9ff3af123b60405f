#include "core/memory_history.hpp"

#include "core/history_log.hpp"

#include <algorithm>
#include <bit>

namespace soma::detail {
namespace {

thread_local std::vector<std::uint32_t> scopes;  // the calling thread's open scope labels

}  // namespace

constinit thread_local history_thread this_thread_history;

history_event decode(const std::uint64_t* words) noexcept {
  history_event e;
  e.time_ns = words[0];
  e.stream = words[1];
  e.address = words[2];
  e.bytes = words[3];
  e.reserved_bytes = words[4];
  e.used_bytes = words[5];
  e.pool = static_cast<std::uint32_t>(words[6]);
  e.label = static_cast<std::uint32_t>(words[6] >> 32);
  e.kind = static_cast<history_kind>(words[7] & 0xff);
  e.how = static_cast<std::uint8_t>(words[7] >> 8);
  e.device = static_cast<std::int16_t>(static_cast<std::uint16_t>(words[7] >> 16));
  return e;
}

void memory_history::start(std::size_t capacity) {
  capacity = std::max<std::size_t>(capacity, 1);
  std::lock_guard lock(mutex_);
  clock_.start();
  // Rings stay until exit (a writer that loaded one may still write into it), so they come in
  // powers of two and a start finds the one of its size again: at most one a size, less than
  // twice the largest ring in all. A ring made anew for every capacity held 2 GiB after a
  // fuzz input's thousands of starts.
  const std::size_t size = std::bit_ceil(capacity);
  const auto same_size = std::find_if(rings_.begin(), rings_.end(),
                                      [size](const auto& r) { return r->capacity() == size; });
  history_ring* ring = nullptr;
  if (same_size != rings_.end()) {
    ring = same_size->get();
    ring->restart();  // its writers' cursors, of an older epoch, claim afresh
  } else {
    rings_.push_back(std::make_unique<history_ring>(size));
    ring = rings_.back().get();
  }
  capacity_.store(capacity, std::memory_order_relaxed);
  ring_.store(ring, std::memory_order_release);
  // Stream caches' logs check their chunk at a beat's change: this one sends them to the ring
  // restarted or made above.
  history_clock::advance();
  enabled_.store(true, std::memory_order_release);
}

void memory_history::stop() noexcept {
  enabled_.store(false, std::memory_order_release);
  clock_.stop();
}

std::size_t memory_history::capacity() const { return capacity_.load(std::memory_order_relaxed); }

std::vector<history_event> memory_history::events(std::uint64_t* dropped) const {
  std::vector<history_event> out;
  if (dropped != nullptr) *dropped = 0;
  std::lock_guard lock(mutex_);  // start() may restart the ring otherwise
  const history_ring* r = ring_.load(std::memory_order_acquire);
  if (r == nullptr) return out;
  std::uint64_t lost = 0;
  for (const history_ring::chunk_events& chunk : r->read(&lost)) {
    if (chunk.entry_words == 2) {  // a stream cache's log
      decode_log(chunk.words.data(), chunk.words.size() / 2, r->log_entries(), out);
      continue;
    }
    for (std::size_t i = 0; i + 8 <= chunk.words.size(); i += 8)
      out.push_back(decode(chunk.words.data() + i));
  }
  // Chunks come in claim order, each chunk's events in their order: a stable sort by stamp
  // keeps the events of a chunk that share a stamp in order. A thread's events in different
  // chunks, and one block's, never share a stamp (history_log, memory_history::record).
  std::stable_sort(out.begin(), out.end(), [](const history_event& a, const history_event& b) {
    return a.time_ns < b.time_ns;
  });
  const std::size_t kept = capacity_.load(std::memory_order_relaxed);  // asked for: r's or less
  if (out.size() > kept) {
    lost += out.size() - kept;
    out.erase(out.begin(), out.end() - static_cast<std::ptrdiff_t>(kept));
  }
  const history_clock::converter to_ns = clock_.conversion();
  for (history_event& e : out) e.time_ns = to_ns.ns(e.time_ns);
  if (dropped != nullptr) *dropped = lost;
  return out;
}

std::uint32_t memory_history::label(const std::string& text) {
  if (text.empty()) return 0;
  std::lock_guard lock(mutex_);
  auto [it, added] = ids_.emplace(text, static_cast<std::uint32_t>(texts_.size()));
  if (added) texts_.push_back(text);
  return it->second;
}

std::string memory_history::label_text(std::uint32_t id) const {
  std::lock_guard lock(mutex_);
  return id < texts_.size() ? texts_[id] : std::string();
}

const char* memory_history::label_c_str(std::uint32_t id) const {
  std::lock_guard lock(mutex_);
  return id != 0 && id < texts_.size() ? texts_[id].c_str() : nullptr;
}

void memory_history::push_scope(std::uint32_t label) {
  scopes.push_back(label);
  this_thread_history.scope = label;
}

bool memory_history::pop_scope() noexcept {
  if (scopes.empty()) return false;
  scopes.pop_back();
  this_thread_history.scope = scopes.empty() ? 0 : scopes.back();
  return true;
}

}  // namespace soma::detail
