#include "recorded_trace.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <utility>

#include "json_value.hpp"

namespace soma::tools {
namespace {

recorded_event::kind kind_of(const std::string& name) {
  using k = recorded_event::kind;
  static const std::pair<const char*, k> prefixes[] = {
      {"allocate", k::allocate},     {"free", k::free},
      {"wait inserted", k::wait},    {"grow", k::grow},
      {"release", k::release},       {"trim", k::trim},
      {"compaction", k::compaction}, {"out of memory", k::out_of_memory},
      {"settings", k::settings}};
  for (const auto& [prefix, what] : prefixes) {
    if (name.rfind(prefix, 0) == 0) return what;
  }
  return name.find("synchronize") != std::string::npos ? k::synchronize : k::other;
}

recorded_pool pool_of(const json_value& p) {
  recorded_pool pool;
  pool.name = p.string_or("pool");
  pool.device = static_cast<int>(p.unsigned_or("device"));
  pool.granularity_bytes = p.unsigned_or("granularity_bytes");
  pool.max_size_bytes = p.unsigned_or("max_size_bytes");
  pool.growth_step_bytes = p.unsigned_or("growth_step_bytes");
  pool.release_threshold_bytes = p.unsigned_or("release_threshold_bytes");
  pool.follow_event_dependencies = p.unsigned_or("follow_event_dependencies", 1) != 0;
  pool.opportunistic = p.unsigned_or("opportunistic", 1) != 0;
  pool.internal_dependencies = p.unsigned_or("internal_dependencies", 1) != 0;
  pool.compact_before_growth = p.unsigned_or("compact_before_growth") != 0;
  pool.remap_free_memory = static_cast<int>(p.unsigned_or("remap_free_memory") % 3);
  return pool;
}

}  // namespace

void apply_recorded_settings(const std::string& text, recorded_pool* pool) {
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    start = end + 1;
    const std::size_t equals = item.find('=');
    if (equals == std::string::npos) continue;
    const std::string key = item.substr(0, equals);
    const std::uint64_t value = std::strtoull(item.c_str() + equals + 1, nullptr, 10);
    if (key == "threshold") pool->release_threshold_bytes = value;
    if (key == "follow") pool->follow_event_dependencies = value != 0;
    if (key == "opportunistic") pool->opportunistic = value != 0;
    if (key == "internal") pool->internal_dependencies = value != 0;
    if (key == "compact") pool->compact_before_growth = value != 0;
    if (key == "remap") pool->remap_free_memory = static_cast<int>(value % 3);
    if (key == "granularity") pool->granularity_bytes = value;
    if (key == "max") pool->max_size_bytes = value;
    if (key == "growth") pool->growth_step_bytes = value;
  }
}

bool read_recorded_trace(const std::string& text, recorded_trace* out, std::string* error) {
  json_value root;
  if (!parse_json(text, &root, error)) return false;
  const json_value* events = root.find("traceEvents");
  const json_value* other = root.find("otherData");
  if (events == nullptr || events->what != json_value::kind::array || other == nullptr ||
      other->string_or("producer") != "soma memory history") {
    *error = "not a trace of soma's memory history (write one with somaMemHistoryExportTrace)";
    return false;
  }
  out->backend = other->string_or("backend");
  out->dropped_events = other->unsigned_or("dropped_events");
  if (const json_value* pools = other->find("pools"); pools != nullptr) {
    for (const json_value& p : pools->items) out->pools.push_back(pool_of(p));
  }
  std::map<std::pair<int, int>, std::string> tracks;
  for (const json_value& e : events->items) {
    if (e.string_or("ph") == "M" && e.string_or("name") == "thread_name") {
      const json_value* args = e.find("args");
      tracks[{static_cast<int>(e.number_or("pid")), static_cast<int>(e.number_or("tid"))}] =
          args != nullptr ? args->string_or("name") : "";
    }
  }
  std::vector<std::pair<double, recorded_event>> timed;
  for (const json_value& e : events->items) {
    const std::string phase = e.string_or("ph");
    const json_value* args = e.find("args");
    if (phase == "C") {  // a pool's counter: its peak
      std::uint64_t& peak = out->peak_reserved_bytes[e.string_or("name")];
      if (args != nullptr) peak = std::max(peak, args->unsigned_or("reserved_bytes"));
      continue;
    }
    if (phase != "i") continue;
    recorded_event r;
    r.name = e.string_or("name");
    r.what = kind_of(r.name);
    r.device = static_cast<int>(e.number_or("pid"));
    r.track = static_cast<int>(e.number_or("tid"));
    r.stream = tracks[{r.device, r.track}];
    if (args != nullptr) {
      r.pool = args->string_or("pool");
      r.address = args->unsigned_or("address");
      r.bytes = args->unsigned_or(r.what == recorded_event::kind::trim ? "keep_bytes" : "bytes");
      r.reuse = args->string_or("reuse");
      r.settings = args->string_or("settings");
    }
    timed.emplace_back(e.number_or("ts"), std::move(r));
  }
  std::stable_sort(timed.begin(), timed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [ts, r] : timed) out->events.push_back(std::move(r));
  return true;
}

}  // namespace soma::tools
