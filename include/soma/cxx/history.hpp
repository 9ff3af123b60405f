/**
 * @file soma/cxx/history.hpp
 * @brief Part of soma's C++ API (include <soma/soma.hpp>): memory history (soma's own):
 * recording, export as a Chrome trace, and scope labels.
 */
#ifndef SOMA_CXX_HISTORY_HPP
#define SOMA_CXX_HISTORY_HPP

#include <soma/cxx/error.hpp>

#include <cstddef>
#include <string>

namespace soma {

/** What every pool of the process does, kept in a ring of the last events while recording. */
namespace history {

/** Starts recording into a fresh ring of max_entries events (somaMemRecordHistory). */
inline void record(std::size_t max_entries) { check(somaMemRecordHistory(max_entries)); }
/** Stops recording; what was recorded stays for export_trace. */
inline void stop() { check(somaMemRecordHistory(0)); }
/** Writes the history as Chrome trace-event JSON for Perfetto or chrome://tracing. */
inline void export_trace(const std::string& path) {
  check(somaMemHistoryExportTrace(path.c_str()));
}

}  // namespace history

/** Labels the calling thread's allocations in history and snapshots for its life, e.g.
 *  `soma::memory_scope forward("forward");`. Scopes nest; destroy them on the thread that made
 *  them, innermost first. */
class memory_scope {
 public:
  explicit memory_scope(const char* label) { check(somaMemScopePush(label)); }
  explicit memory_scope(const std::string& label) : memory_scope(label.c_str()) {}
  ~memory_scope() { (void)somaMemScopePop(); }
  memory_scope(const memory_scope&) = delete;
  memory_scope& operator=(const memory_scope&) = delete;
};

}  // namespace soma

#endif  // SOMA_CXX_HISTORY_HPP
