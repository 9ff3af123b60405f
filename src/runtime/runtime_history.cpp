// Memory history (soma's own): recording, scope labels, and export as a Chrome trace.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <utility>
#include <vector>

#include "backend/os_error.hpp"
#include "runtime/history_notes.hpp"
#include "runtime/history_trace.hpp"
#include "runtime/runtime.hpp"

namespace soma::detail {
namespace {

// Names pools by their serial: pools alive now, then pools made while recording (the
// pool_created events), then "pool #serial".
class runtime_labels final : public history_labels {
 public:
  runtime_labels(const memory_history& history, std::map<std::uint32_t, std::string> pools)
      : history_(history), pools_(std::move(pools)) {}
  std::string label(std::uint32_t id) const override { return history_.label_text(id); }
  std::string pool(std::uint32_t serial) const override {
    auto found = pools_.find(serial);
    return found != pools_.end() ? found->second : "pool #" + std::to_string(serial);
  }

 private:
  const memory_history& history_;
  const std::map<std::uint32_t, std::string> pools_;
};

void export_at_exit() {
  const char* path = std::getenv("SOMA_HISTORY_TRACE");
  result<runtime*> rt = runtime::instance();
  if (path == nullptr || !rt.ok()) return;
  if (status written = rt.value()->export_history(path); !written.ok())
    std::fprintf(stderr, "soma: SOMA_HISTORY_TRACE: %s\n", written.message().c_str());
}

}  // namespace

status runtime::start_history_from_environment() {
  const char* text = std::getenv("SOMA_HISTORY");
  if (text == nullptr || *text == '\0') return status::success();
  char* end = nullptr;
  const unsigned long long entries = std::strtoull(text, &end, 10);
  if (*end != '\0' || entries == 0 || entries > max_history_entries) {
    return status(error_code::initialization_error,
                  std::string("SOMA_HISTORY=") + text + " is not a number of events from 1 to " +
                      std::to_string(max_history_entries) + " (unset it to record nothing)");
  }
  memory_history::process().start(entries);
  if (const char* path = std::getenv("SOMA_HISTORY_TRACE"); path != nullptr && *path != '\0')
    std::atexit(export_at_exit);
  return status::success();
}

status runtime::record_history(std::size_t entries) {
  if (entries > max_history_entries) {
    return status(error_code::invalid_value,
                  "somaMemRecordHistory: maxEntries " + std::to_string(entries) +
                      " is above the limit of " + std::to_string(max_history_entries) +
                      " events (64 bytes each)");
  }
  memory_history& history = memory_history::process();
  if (entries == 0) {
    history.stop();
  } else {
    history.start(entries);
    // The pools' settings as recording starts, so that a replay starts from them: gathered
    // under the registry's lock, recorded after it.
    std::vector<history_notes::pool_settings> settings;
    pools_.for_each_live([&settings](const pool_object& p) {
      if (!p.is_imported()) settings.push_back(history_notes::settings_of(p));
    });
    for (history_notes::pool_settings& s : settings) history_notes::record_settings(std::move(s));
  }
  return status::success();
}

std::string runtime::history_trace() const {
  const memory_history& history = memory_history::process();
  history_context context;
  const std::vector<history_event> events = history.events(&context.dropped);
  context.capacity = history.capacity();
  context.backend = backend_->name();
  std::map<std::uint32_t, std::string> names;
  for (const history_event& e : events) {
    if (e.kind == history_kind::pool_created) names[e.pool] = history.label_text(e.label);
  }
  pools_.for_each_live([&](const pool_object& p) {
    names[p.serial()] = history_notes::pool_name(p);
    if (p.is_imported()) return;  // an imported pool holds the exporter's memory: no settings
    history_pool_settings settings;
    settings.serial = p.serial();
    settings.device = p.config().device;
    settings.granularity_bytes = p.granularity_bytes();
    settings.max_size_bytes = p.config().max_size_bytes;
    settings.growth_step_bytes = p.config().growth_step_bytes;
    settings.release_threshold_bytes = p.release_threshold_bytes();
    settings.follow_event_dependencies = p.reuse_policy(1);
    settings.opportunistic = p.reuse_policy(2);
    settings.internal_dependencies = p.reuse_policy(3);
    settings.compact_before_growth = p.compact_before_growth();
    settings.remap_free_memory = static_cast<int>(p.remap_free_memory());
    context.pools.push_back(settings);
  });
  return chrome_trace_json(events, context, runtime_labels(history, names));
}

status runtime::export_history(const std::string& path) const {
  if (path.empty())
    return status(error_code::invalid_value, "somaMemHistoryExportTrace: path is empty");
  const std::string trace = history_trace();
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    return status(error_code::invalid_value, "somaMemHistoryExportTrace: cannot open '" + path +
                                                 "' for writing: " + backend::errno_text(errno));
  }
  const bool written = std::fwrite(trace.data(), 1, trace.size(), file) == trace.size();
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed) {
    return status(error_code::operating_system,
                  "somaMemHistoryExportTrace: writing '" + path + "' failed");
  }
  return status::success();
}

status runtime::push_scope(const char* label) {
  if (label == nullptr) return status(error_code::invalid_value, "somaMemScopePush: label is NULL");
  if (*label == '\0') return status(error_code::invalid_value, "somaMemScopePush: label is empty");
  memory_history::push_scope(memory_history::process().label(label));
  return status::success();
}

status runtime::pop_scope() {
  if (!memory_history::pop_scope()) {
    return status(error_code::illegal_state,
                  "somaMemScopePop: the calling thread has no scope open (each somaMemScopePush "
                  "is closed by one somaMemScopePop on the same thread)");
  }
  return status::success();
}

}  // namespace soma::detail
