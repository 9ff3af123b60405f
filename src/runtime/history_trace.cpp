#include "runtime/history_trace.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <utility>

#include "core/block.hpp"
#include "core/status.hpp"

namespace soma::detail {
namespace {

const char* kind_name(history_kind kind) {
  // Indexed by history_kind, whose values are fixed.
  static constexpr const char* names[] = {
      "pool created", "allocate",   "free",        "wait inserted", "grow",     "release",
      "trim",         "compaction", "synchronize", "out of memory", "settings", "remap"};
  const auto index = static_cast<std::size_t>(kind);
  return index < std::size(names) ? names[index] : "event";
}

const char* served_by_name(std::uint8_t how) {
  static constexpr const char* names[] = {"stream cache (same stream)",
                                          "same stream",
                                          "proven free (synchronized)",
                                          "follow event dependencies",
                                          "opportunistic",
                                          "internal dependency",
                                          "growth",
                                          "remap"};
  return how < std::size(names) ? names[how] : "unknown";
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string stream_name(std::uintptr_t handle) {
  return handle == 0 ? std::string("default stream") : "stream " + format_address(handle);
}

// Builds the trace-event list: one process per device, one thread (track) per stream, and a
// "pools" track (tid 0) per device for growth, release and trims.
class trace_writer {
 public:
  trace_writer(const history_labels& labels, std::uint64_t start_ns)
      : labels_(labels), start_ns_(start_ns) {}

  void add(const history_event& e) {
    const int pid = e.device < 0 ? 0 : e.device;
    const int tid = track_of(pid, e);
    std::string args;
    std::string name = kind_name(e.kind);
    const char* scope = "t";
    switch (e.kind) {
      case history_kind::allocate:
      case history_kind::free:
        name.append(" ").append(format_bytes(e.bytes));
        args = field("address", format_address(e.address)) + "," + number("bytes", e.bytes);
        if (e.kind == history_kind::allocate) args += "," + field("reuse", served_by_name(e.how));
        if (e.label != 0) args += "," + field("scope", labels_.label(e.label));
        break;
      case history_kind::wait:
        args = field("after", stream_name(e.address)) + "," + number("position", e.bytes);
        break;
      case history_kind::grow:
      case history_kind::release:
      case history_kind::remap:
        name.append(" ").append(format_bytes(e.bytes));
        args = field("address", format_address(e.address)) + "," + number("bytes", e.bytes);
        break;
      case history_kind::trim:
        args = number("keep_bytes", e.bytes);
        break;
      case history_kind::compaction:
        args = number("request_bytes", e.bytes);
        break;
      case history_kind::synchronize:
        name = labels_.label(e.label);
        scope = e.device < 0 ? "g" : "p";
        break;
      case history_kind::out_of_memory:
        name.append(" ").append(format_bytes(e.bytes));
        args = number("bytes", e.bytes) + "," + field("message", labels_.label(e.label));
        scope = "g";
        break;
      case history_kind::pool_created:
        break;  // named by the pool argument below
      case history_kind::settings:
        args = field("settings", labels_.label(e.label));
        break;
    }
    if (e.pool != 0) args += std::string(args.empty() ? "" : ",") + field("pool", pool_name(e));
    emit("{\"name\":" + json_string(name) + ",\"cat\":\"soma\",\"ph\":\"i\",\"s\":\"" + scope +
         "\"," + where(e, pid, tid) + ",\"args\":{" + args + "}}");
    if (e.pool != 0 && e.kind != history_kind::wait && e.kind != history_kind::synchronize) {
      const pool_figures& now = follow(e);
      emit("{\"name\":" + json_string(pool_name(e)) + ",\"ph\":\"C\"," + where(e, pid, 0) +
           ",\"args\":{" + number("reserved_bytes", now.reserved) + "," +
           number("used_bytes", now.used) + "}}");
    }
  }

  std::string finish(const history_context& context) {
    for (const auto& [pid, name] : processes_) {
      emit("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
           ",\"tid\":0,\"args\":{\"name\":" + json_string(name) + "}}");
    }
    for (const auto& [key, track] : tracks_) {
      emit("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + std::to_string(key.first) +
           ",\"tid\":" + std::to_string(track.first) +
           ",\"args\":{\"name\":" + json_string(track.second) + "}}");
    }
    std::string pools;
    for (const history_pool_settings& p : context.pools) {
      if (!pools.empty()) pools += ",";
      // Appended, not "{" + ...: gcc 12 warns (-Wrestrict, a false positive) on the insert at
      // the front that operator+(const char*, std::string&&) makes.
      pools += '{';
      pools += field("pool", labels_.pool(p.serial)) + "," +
               number("device", static_cast<std::uint64_t>(p.device)) + "," +
               number("granularity_bytes", p.granularity_bytes) + "," +
               number("max_size_bytes", p.max_size_bytes) + "," +
               number("growth_step_bytes", p.growth_step_bytes) + "," +
               number("release_threshold_bytes", p.release_threshold_bytes) + "," +
               number("follow_event_dependencies", p.follow_event_dependencies ? 1 : 0) + "," +
               number("opportunistic", p.opportunistic ? 1 : 0) + "," +
               number("internal_dependencies", p.internal_dependencies ? 1 : 0) + "," +
               number("compact_before_growth", p.compact_before_growth ? 1 : 0) + "," +
               number("remap_free_memory", static_cast<std::uint64_t>(p.remap_free_memory)) + "}";
    }
    return "{\"traceEvents\":[\n" + body_ + "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{" +
           field("producer", "soma memory history") + "," +
           number("dropped_events", context.dropped) + "," +
           number("capacity_events", context.capacity) + "," + field("backend", context.backend) +
           ",\"pools\":[" + pools + "]}}\n";
  }

 private:
  static std::string field(const char* key, const std::string& value) {
    return json_string(key) + ":" + json_string(value);
  }
  static std::string number(const char* key, std::uint64_t value) {
    return json_string(key) + ":" + std::to_string(value);
  }
  std::string where(const history_event& e, int pid, int tid) const {
    char ts[32];
    std::snprintf(ts, sizeof ts, "%.3f", static_cast<double>(e.time_ns - start_ns_) / 1000.0);
    return std::string("\"ts\":") + ts + ",\"pid\":" + std::to_string(pid) +
           ",\"tid\":" + std::to_string(tid);
  }
  std::string pool_name(const history_event& e) const { return labels_.pool(e.pool); }
  void emit(const std::string& event) {
    if (!body_.empty()) body_ += ",\n";
    body_ += event;
  }
  int track_of(int pid, const history_event& e) {
    if (!processes_.count(pid))
      processes_[pid] = e.device < 0 ? "soma" : "soma device " + std::to_string(pid);
    tracks_.try_emplace({pid, pools_track}, 0, std::string("pools"));
    const bool on_stream = e.kind == history_kind::allocate || e.kind == history_kind::free ||
                           e.kind == history_kind::wait || e.kind == history_kind::out_of_memory ||
                           (e.kind == history_kind::synchronize && e.stream != 0);
    if (!on_stream) return 0;
    auto [it, added] = tracks_.try_emplace({pid, e.stream}, 0, stream_name(e.stream));
    if (added) it->second.first = static_cast<int>(tracks_.size());
    return it->second.first;
  }

  static constexpr std::uint64_t pools_track = UINT64_MAX;  // no stream has this handle

  struct pool_figures {
    std::uint64_t reserved = 0;
    std::uint64_t used = 0;
  };
  /// A pool's figures after e: pool events carry them; allocations and frees move used bytes.
  const pool_figures& follow(const history_event& e) {
    pool_figures& f = pools_[e.pool];
    if (e.kind == history_kind::allocate) {
      f.used += e.bytes;
    } else if (e.kind == history_kind::free) {
      f.used -= std::min(f.used, e.bytes);  // an allocation before the ring's window
    } else {
      f = {e.reserved_bytes, e.used_bytes};
    }
    return f;
  }

  const history_labels& labels_;
  const std::uint64_t start_ns_;
  std::map<std::uint32_t, pool_figures> pools_;
  std::map<int, std::string> processes_;
  std::map<std::pair<int, std::uint64_t>, std::pair<int, std::string>> tracks_;
  std::string body_;
};

}  // namespace

std::string chrome_trace_json(const std::vector<history_event>& events,
                              const history_context& context, const history_labels& labels) {
  trace_writer writer(labels, events.empty() ? 0 : events.front().time_ns);
  for (const history_event& e : events) writer.add(e);
  return writer.finish(context);
}

}  // namespace soma::detail
