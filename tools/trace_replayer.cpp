#include "trace_replayer.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "core/pool.hpp"
#include "core/stream_timeline.hpp"
#include "core/synthetic_memory.hpp"

namespace soma::tools {
namespace {

using detail::block;
using detail::pool;
using detail::stream_timeline;

/// A stream of the trace: its timeline, keyed by device and track.
using stream_key = std::pair<int, int>;

/// The latest free at an address: which stream, at which of its positions.
struct recorded_free {
  stream_key stream;
  std::uint64_t position = 0;
  std::uint64_t bytes = 0;
};

class replayer final : public detail::stream_hooks {
 public:
  replayer(const recorded_trace& trace, const replay_settings& settings)
      : trace_(trace), settings_(settings) {
    // Pools live at export start with their settings then; the trace's settings events
    // (creation, changes, the start of recording) take over from where they stand.
    for (const recorded_pool& p : trace.pools) pools_[p.name] = make_pool(p);
  }

  replay_outcome run(const recorded_trace& trace) {
    for (const recorded_event& e : trace.events) step(e);
    for (auto& [name, p] : pools_) {
      const detail::pool_statistics figures = p->statistics();
      outcome_.peak_reserved_bytes += figures.reserved_high_bytes;
      outcome_.peak_used_bytes += figures.used_high_bytes;
      const detail::remap_statistics remapped = p->remap_counts();
      outcome_.remaps += remapped.remaps;
      outcome_.remapped_bytes += remapped.remapped_bytes;
    }
    for (auto& [address, live] : live_) live.second->free(live.first, *idle_);
    for (auto& [key, s] : streams_) prove(*s);  // a pool goes only with every free complete
    for (auto& [name, p] : pools_) p->on_synchronize();
    return outcome_;
  }

  // The pools' hooks: compaction synchronizes a stream; internal dependencies order one.
  bool synchronize(const stream_timeline& stream) override {
    ++outcome_.synchronizes;
    prove(const_cast<stream_timeline&>(stream));
    return true;
  }
  void order_after(const stream_timeline& waiter, std::uint64_t stream_id,
                   std::uint64_t position) override {
    ++outcome_.waits;
    const_cast<stream_timeline&>(waiter).order_after(stream_id, position);
  }

 private:
  std::unique_ptr<pool> make_pool(const recorded_pool& p) const {
    detail::pool_config config;
    config.device = p.device;
    config.name = p.name;
    config.max_size_bytes = p.max_size_bytes;
    config.reservation_bytes = p.max_size_bytes * 2;
    config.growth_step_bytes = p.growth_step_bytes;
    const bool compact = settings_.compact_before_growth.value_or(p.compact_before_growth);
    const bool remap = settings_.remap_free_memory.value_or(p.remap_free_memory) == 1;
    const std::uint64_t threshold =
        settings_.release_threshold_bytes.value_or(p.release_threshold_bytes);
    // The cpu backend gives memory back (and maps it again) granule by granule; cuda whole
    // commits, except that with compaction, or remapping in a pool that keeps memory, it
    // commits granule by granule (runtime/pool_object.hpp).
    const bool partial = trace_.backend == "cpu" || compact || (remap && threshold > 0);
    auto made = std::make_unique<pool>(
        config, std::make_unique<detail::synthetic_memory>(p.granularity_bytes, partial));
    configure(*made, p);
    return made;
  }
  /// The recorded settings that can change, under the replay's own.
  void configure(pool& target, const recorded_pool& p) const {
    const replay_settings& s = settings_;
    target.set_release_threshold_bytes(
        s.release_threshold_bytes.value_or(p.release_threshold_bytes));
    target.set_reuse_policy(1, s.follow_event_dependencies.value_or(p.follow_event_dependencies));
    target.set_reuse_policy(2, s.opportunistic.value_or(p.opportunistic));
    target.set_reuse_policy(3, s.internal_dependencies.value_or(p.internal_dependencies));
    target.set_compact_before_growth(s.compact_before_growth.value_or(p.compact_before_growth));
    target.set_remap_free_memory(
        static_cast<detail::remap_mode>(s.remap_free_memory.value_or(p.remap_free_memory)));
  }
  void settings_changed(const recorded_event& e) {
    recorded_pool& recorded = recorded_[e.pool];
    recorded.name = e.pool;
    recorded.device = e.device;
    apply_recorded_settings(e.settings, &recorded);
    auto& target = pools_[e.pool];
    if (target == nullptr) {
      target = make_pool(recorded);  // made while recording
    } else {
      configure(*target, recorded);
    }
  }

  stream_timeline& stream_of(int device, int track) {
    auto& slot = streams_[{device, track}];
    if (slot == nullptr) slot = std::make_unique<stream_timeline>(next_slot_++);
    return *slot;
  }
  static void prove(stream_timeline& s) {
    const std::uint64_t position = s.enqueued_position();
    s.note_completed(position);
    s.prove_completed(position);
  }

  void step(const recorded_event& e) {
    using k = recorded_event::kind;
    if (e.what == k::synchronize) return synchronized(e);
    if (e.what == k::settings) return settings_changed(e);
    if (e.what != k::allocate && e.what != k::free && e.what != k::trim &&
        e.what != k::out_of_memory)
      return;
    auto found = pools_.find(e.pool);
    if (found == pools_.end()) {
      ++outcome_.skipped_events;
      return;
    }
    pool& p = *found->second;
    if (e.what == k::trim) return p.trim_to(e.bytes);
    stream_timeline& stream = stream_of(e.device, e.track);
    if (e.what == k::allocate) return allocate(e, p, stream);
    if (e.what == k::out_of_memory) return attempt(e, p, stream);
    auto live = live_.find(e.address);
    if (live == live_.end()) return;  // allocated before the trace's window
    work_before_free(e);
    p.free(live->second.first, stream);
    live_.erase(live);
    frees_[e.address] = {{e.device, e.track}, stream.enqueued_position(), e.bytes};
  }

  /// The work that used a block runs before its free (S2), but the trace does not show it: a
  /// position is taken for it unless the stream's previous event was also a free, so frees
  /// made one after another share a position, as they do when no work comes between them.
  void work_before_free(const recorded_event& e) {
    const stream_key key{e.device, e.track};
    if (last_free_.count(key) == 0) stream_of(e.device, e.track).note_enqueued();
    last_free_.insert(key);
  }

  void allocate(const recorded_event& e, pool& p, stream_timeline& stream) {
    last_free_.erase({e.device, e.track});
    learn_from(e, stream);
    detail::result<block*> made = p.allocate(e.bytes, stream, this);
    if (!made.ok()) {
      ++outcome_.failures;
      return;
    }
    live_[e.address] = {made.value(), &p};

    if (idle_ == nullptr) idle_ = &stream;
  }

  /// A recorded failure: tried again; if these settings serve it, its lifetime is unknown, so it
  /// is freed at once.
  void attempt(const recorded_event& e, pool& p, stream_timeline& stream) {
    detail::result<block*> made = p.allocate(e.bytes, stream, this);
    if (!made.ok()) {
      ++outcome_.failures;
      return;
    }
    work_before_free(e);
    p.free(made.value(), stream);
  }

  /// What the recorded rule says the GPU had done when the recording reused another stream's
  /// frees: they had completed (opportunistic), were proven (a synchronize), or the allocating
  /// stream already waited for them (event dependencies).
  void learn_from(const recorded_event& e, stream_timeline& stream) {
    // The recorded block may span several freed blocks the pool had merged: every free under
    // it counts, the latest of each stream.
    const std::uint64_t end = e.address + (e.bytes + 255) / 256 * 256;
    auto it = frees_.upper_bound(e.address);
    if (it != frees_.begin() && std::prev(it)->first + std::prev(it)->second.bytes > e.address)
      --it;
    std::map<stream_key, std::uint64_t> latest;
    while (it != frees_.end() && it->first < end) {
      std::uint64_t& position = latest[it->second.stream];
      position = std::max(position, it->second.position);
      it = frees_.erase(it);
    }
    const stream_key here{e.device, e.track};
    for (const auto& [key, position] : latest) {
      if (key == here) continue;
      stream_timeline& freeing = stream_of(key.first, key.second);
      if (e.reuse == "opportunistic") freeing.note_completed(position);
      if (e.reuse.rfind("proven free", 0) == 0) {
        freeing.note_completed(position);
        freeing.prove_completed(position);
      }
      if (e.reuse == "follow event dependencies") stream.order_after(freeing.id(), position);
    }
  }

  void synchronized(const recorded_event& e) {
    ++outcome_.synchronizes;
    if (e.track != 0) {
      prove(stream_of(e.device, e.track));
    } else {
      for (auto& [key, s] : streams_) {
        if (e.name != "device synchronize" || key.first == e.device) prove(*s);
      }
    }
    for (auto& [name, p] : pools_) p->on_synchronize();
  }

  const recorded_trace& trace_;
  const replay_settings& settings_;
  std::map<std::string, recorded_pool> recorded_;  // settings as the trace's events set them
  // The streams outlive the pools: a pool's teardown reads the stamps its frees left.
  std::map<stream_key, std::unique_ptr<stream_timeline>> streams_;
  std::map<std::string, std::unique_ptr<pool>> pools_;
  std::map<std::uint64_t, std::pair<block*, pool*>> live_;  // by recorded address
  std::map<std::uint64_t, recorded_free> frees_;            // by recorded address
  std::set<stream_key> last_free_;                          // streams whose latest event was a free
  stream_timeline* idle_ = nullptr;                         // frees what is still live at the end
  std::uint32_t next_slot_ = 0;
  replay_outcome outcome_;
};

bool parse_bytes(const std::string& text, std::uint64_t* out) {
  if (text == "max") {
    *out = UINT64_MAX;
    return true;
  }
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str()) return false;
  const std::string unit = end;
  const std::uint64_t scale = unit.empty()  ? 1
                              : unit == "K" ? std::uint64_t{1} << 10
                              : unit == "M" ? std::uint64_t{1} << 20
                              : unit == "G" ? std::uint64_t{1} << 30
                                            : 0;
  if (scale == 0) return false;
  *out = value * scale;
  return true;
}

}  // namespace

bool parse_replay_settings(const std::string& text, replay_settings* out, std::string* error) {
  out->label = text;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    const std::size_t equals = item.find('=');
    const std::string key = item.substr(0, equals);
    const std::string value = equals == std::string::npos ? "" : item.substr(equals + 1);
    if (key == "threshold") {
      std::uint64_t bytes = 0;
      if (!parse_bytes(value, &bytes)) {
        *error = "threshold=" + value + " is not a size such as 0, 64M or max";
        return false;
      }
      out->release_threshold_bytes = bytes;
      continue;
    }
    if (key == "remap" && (value == "0" || value == "1" || value == "2")) {
      out->remap_free_memory = value[0] - '0';
      continue;
    }
    if (value != "0" && value != "1") {
      *error = "'" + item + "': expected key=0 or key=1 (or threshold=SIZE, remap=0|1|2)";
      return false;
    }
    const bool on = value == "1";
    if (key == "follow") {
      out->follow_event_dependencies = on;
    } else if (key == "opportunistic") {
      out->opportunistic = on;
    } else if (key == "internal") {
      out->internal_dependencies = on;
    } else if (key == "compact") {
      out->compact_before_growth = on;
    } else {
      *error = "unknown setting '" + key +
               "' (threshold, follow, opportunistic, internal, compact, remap)";
      return false;
    }
  }
  return true;
}

replay_outcome replay_trace(const recorded_trace& trace, const replay_settings& settings) {
  return replayer(trace, settings).run(trace);
}

}  // namespace soma::tools
