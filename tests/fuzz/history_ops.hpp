// Memory history in the fuzz targets (docs/observability.md): the rings they record into, the
// scope labels they open, and the trace they export, written to a file of the caller's and read
// back: one JSON object, whatever was recorded meanwhile.
#pragma once

#include <soma/soma.h>

#include <unistd.h>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "fuzz_check.hpp"

namespace soma_fuzz {

/// A trace file of this process's own (`who` tells the callers apart: one file each).
inline std::string trace_path(int who) {
  return "/tmp/soma-fuzz-trace-" + std::to_string(static_cast<long>(getpid())) + "-" +
         std::to_string(who) + ".json";
}

/// Exports the history to path and checks the file holds one JSON object.
inline void export_and_check_trace(const std::string& path) {
  FUZZ_OK(somaMemHistoryExportTrace(path.c_str()));
  std::FILE* file = std::fopen(path.c_str(), "r");
  FUZZ_CHECK(file != nullptr, "the exported trace %s cannot be opened", path.c_str());
  std::string text;
  char buffer[4096];
  for (std::size_t n = 0; (n = std::fread(buffer, 1, sizeof buffer, file)) > 0;)
    text.append(buffer, n);
  std::fclose(file);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())) != 0)
    text.pop_back();
  FUZZ_CHECK(!text.empty() && text.front() == '{' && text.back() == '}',
             "the exported trace is not one JSON object (%zu bytes)", text.size());
}

/// A ring size for somaMemRecordHistory from an operation's bits: 1 to 4096 events, small
/// enough to wrap and drop within an input.
inline std::size_t history_entries(std::uint16_t raw) { return 1 + raw % 4096; }

inline constexpr const char* kScopeLabels[] = {"forward", "backward", "optimizer"};

}  // namespace soma_fuzz
