// pool: construction, names, the fast path (stream caches, used-byte shares) and the free.
// The other concerns are in pool_slow_path.cpp, pool_growth.cpp, pool_release.cpp,
// pool_remap.cpp and pool_diagnosis.cpp.
#include "core/pool.hpp"

#include <algorithm>
#include <new>

#include "core/check.hpp"

namespace soma::detail {
namespace {
std::atomic<std::uint32_t> next_serial{1};
}  // namespace

pool::pool(pool_config config, std::unique_ptr<memory_provider> memory)
    : config_(std::move(config)),
      memory_(std::move(memory)),
      granularity_bytes_(memory_->granularity_bytes()),
      serial_(next_serial.fetch_add(1, std::memory_order_relaxed)),
      name_(config_.name) {
  // The history is made here, where failing is allowed, not by the first note_history: that
  // one runs inside steps that must not fail, and is noexcept.
  memory_history::process();
}

void pool::note_history(history_kind kind, std::uintptr_t address, std::size_t bytes,
                        std::uint64_t stream) const noexcept {
  memory_history& history = memory_history::process();
  if (!history.enabled()) return;
  history_event e;
  e.kind = kind;
  e.pool = serial_;
  e.device = static_cast<std::int16_t>(config_.device);
  e.stream = stream;
  e.address = address;
  e.bytes = bytes;
  e.reserved_bytes = reserved_bytes_.load(std::memory_order_relaxed);
  e.used_bytes = used_now();
  history.record(e);
}

void pool::record_allocated(block& b, const stream_timeline& stream) const noexcept {
  memory_history& history = memory_history::recording_one();
  history_thread& t = memory_history::this_thread();
  // Read now, not reused: the block's memory may come from other threads' frees.
  const std::uint64_t stamp =
      memory_history::exact_stamp(b.history_stamp.load(std::memory_order_relaxed), t);
  b.history_stamp.store(stamp, std::memory_order_relaxed);
  b.scope.store(t.scope, std::memory_order_relaxed);
  history_event e;
  e.kind = history_kind::allocate;
  e.pool = serial_;
  e.device = static_cast<std::int16_t>(config_.device);
  e.stream = stream.history_name();
  e.address = b.address;
  e.bytes = b.requested_bytes;
  e.how = static_cast<std::uint8_t>(b.how);
  e.label = t.scope;
  history.record(e, stamp, t);
}

pool::~pool() {
  {
    std::lock_guard lock(mutex_);
    drain_caches_locked();
    unmap_retired_locked(/*all=*/true);
    for (auto& [address, c] : chunks_)
      memory_->decommit(address, c.size_bytes, c.token, c.offset_bytes);
    chunks_.clear();
    for (const address_range& r : address_space_.reservations())
      memory_->free_reservation(r.address, r.size_bytes);
    address_space_.clear();
    for (auto& [address, b] : all_blocks_) delete b;
    all_blocks_.clear();
  }
  for (auto& segment : cache_segments_) delete segment.load(std::memory_order_relaxed);
}

void pool::detach_directory() {
  std::lock_guard lock(mutex_);
  drain_caches_locked();
  directory_ = nullptr;
}

std::string pool::name() const {
  std::lock_guard lock(name_mutex_);
  return name_;
}

std::string pool::describe() const {
  std::string text = "pool";
  {
    std::lock_guard lock(name_mutex_);
    if (!name_.empty()) text += " '" + name_ + "'";
  }
  if (!config_.location.empty()) return text + " on " + config_.location;
  return text + " on device " + std::to_string(config_.device);
}

void pool::set_name(std::string name) {
  std::lock_guard lock(name_mutex_);
  name_ = std::move(name);
}

// ---- fast path -------------------------------------------------------------------------

stream_cache* pool::create_cache(std::uint32_t slot) {
  std::lock_guard lock(mutex_);
  auto& segment_slot = cache_segments_[slot / caches_per_segment];
  cache_segment* segment = segment_slot.load(std::memory_order_acquire);
  if (segment == nullptr) {
    segment = new cache_segment();
    segment_slot.store(segment, std::memory_order_release);
  }
  auto& cache_slot = segment->caches[slot % caches_per_segment];
  stream_cache* cache = cache_slot.load(std::memory_order_acquire);
  if (cache == nullptr) {
    cache_storage_.push_back(std::make_unique<stream_cache>());
    cache = cache_storage_.back().get();
    cache->set_history_pool(serial_, config_.device);
    cache->next_in_pool = first_cache_.load(std::memory_order_relaxed);
    first_cache_.store(cache, std::memory_order_release);
    cache_slot.store(cache, std::memory_order_release);
  }
  return cache;
}

void pool::publish_used(std::int64_t bytes) noexcept {
  const std::int64_t now =
      used_published_bytes_.fetch_add(bytes, std::memory_order_acq_rel) + bytes;
  if (now <= 0) return;
  const auto used = static_cast<std::uint64_t>(now);
  std::uint64_t high = used_high_bytes_.load(std::memory_order_relaxed);
  while (used > high &&
         !used_high_bytes_.compare_exchange_weak(high, used, std::memory_order_relaxed)) {
  }
}

void pool::fold_used_shares() noexcept {
  std::int64_t shares = 0;
  for (stream_cache* c = first_cache_.load(std::memory_order_acquire); c != nullptr;
       c = c->next_in_pool)
    shares += c->take_used();
  if (shares != 0) used_published_bytes_.fetch_add(shares, std::memory_order_acq_rel);
}

// Every cache is held while the figure is read: read one at a time, a stream's miss could
// publish an allocation after the published figure was read and its free take the bytes off the
// share before the share was, and the sum fell below what was live. Held, the sum is off only by
// calls in flight: an allocation not yet published, or shares taken but not yet folded in.
std::uint64_t pool::used_now() const noexcept {
  stream_cache* const first = first_cache_.load(std::memory_order_acquire);
  for (stream_cache* c = first; c != nullptr; c = c->next_in_pool) c->hold();
  std::int64_t used = used_published_bytes_.load(std::memory_order_acquire);
  for (stream_cache* c = first; c != nullptr; c = c->next_in_pool) {
    used += c->peek_used();
    c->release_hold();
  }
  return used > 0 ? static_cast<std::uint64_t>(used) : 0;
}

std::uint64_t pool::used_estimate() const noexcept {
  std::int64_t used = used_published_bytes_.load(std::memory_order_acquire);
  for (const stream_cache* c = first_cache_.load(std::memory_order_acquire); c != nullptr;
       c = c->next_in_pool)
    used += c->peek_used();
  return used > 0 ? static_cast<std::uint64_t>(used) : 0;
}

result<block*> pool::allocate_missed(std::size_t requested_bytes, const stream_timeline& stream,
                                     stream_hooks* hooks) {
  if (requested_bytes > config_.max_size_bytes) {  // also keeps the roundings below from wrapping
    return status(error_code::out_of_memory,
                  describe() + ": out of memory allocating " + format_bytes(requested_bytes) +
                      ": larger than the pool's max size " + format_bytes(config_.max_size_bytes));
  }
  const call_census::scope in_call(calls_);
  const std::size_t size_bytes = round_up(requested_bytes, allocation_alignment_bytes);
  const bool hooked = hooks != nullptr;
  result<slow_path_outcome> outcome =
      allocate_slow(size_bytes, stream, {.may_wait = hooked, .may_compact = hooked});
  if (outcome.ok() && outcome.value().then == slow_path_outcome::next::compact_first) {
    // S9 compaction before growth: once the stream ran its frees they are proven and the free
    // memory can go back; the allocation then grows into what it needs. A stream that failed
    // proves nothing: trim gives back what it can and the search grows.
    note_history(history_kind::compaction, 0, requested_bytes, stream.id());
    hooks->synchronize(stream);
    trim_to(0);
    outcome = allocate_slow(size_bytes, stream, {.may_wait = true, .may_compact = false});
  }
  if (!outcome.ok()) return outcome.take_error();
  const slow_path_outcome& found = outcome.value();
  SOMA_ASSERT(found.taken != nullptr, "the slow path hands out a block or fails");
  bool added = false;
  try {
    if (directory_ != nullptr) {
      directory_->add(found.taken);
      added = true;
    }
    if (found.then == slow_path_outcome::next::wait)
      hooks->order_after(stream, found.wait_stream_id, found.wait_position);
  } catch (const std::bad_alloc&) {
    // Host memory ran out before the block went live: it is free again, as it was.
    if (added) directory_->forget(found.taken);
    std::lock_guard lock(mutex_);
    file_locked(found.taken);
    throw;
  }
  // The slow path folds every stream's share in, so the high watermark sees the true sum.
  fold_used_shares();
  make_live(found.taken, requested_bytes);
  publish_used(static_cast<std::int64_t>(requested_bytes));
  return found.taken;
}

void pool::free_to_index(block* live, std::int64_t unpublish, const free_note* noted) noexcept {
  const call_census::scope in_call(calls_);
  // Recorded while the block is still the caller's: once in the index another thread may take
  // it, and its allocation must stamp after this.
  if (noted != nullptr) {
    memory_history& history = memory_history::recording_one();
    history_thread& t = memory_history::this_thread();
    const std::uint64_t stamp =
        history.cheap_stamp(live->history_stamp.load(std::memory_order_relaxed), t);
    live->history_stamp.store(stamp, std::memory_order_relaxed);
    history_event e;
    e.kind = history_kind::free;
    e.pool = serial_;
    e.device = static_cast<std::int16_t>(config_.device);
    e.stream = noted->stream->history_name();
    e.address = live->address;
    e.bytes = live->requested_bytes;
    e.label = noted->scope;
    history.record(e, stamp, t);
  }
  if (unpublish != 0) used_published_bytes_.fetch_sub(unpublish, std::memory_order_acq_rel);
  std::lock_guard lock(mutex_);
  if (directory_ != nullptr) directory_->forget(live);
  try {
    index_.insert(live);
  } catch (const std::bad_alloc&) {
    // The index is as it was (free_index::insert's guarantee): the block waits, free and
    // unmerged, for the next slow path.
    leave_unfiled_locked(live);
  }
}

void pool::leave_unfiled_locked(block* first) noexcept {
  block** tail = &first;
  while (*tail != nullptr) tail = &(*tail)->next_in_bin;
  *tail = unfiled_;
  unfiled_ = first;
}

void pool::file_unfiled_locked() noexcept {
  block* waiting = unfiled_;
  unfiled_ = nullptr;
  file_locked(waiting);
}

}  // namespace soma::detail
