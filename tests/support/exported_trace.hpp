// Memory history's trace as the tests read it: exported to a file of the test process's own
// (somaMemHistoryExportTrace), read back whole, and the file removed.
// Calls the C API: included only by tests that link `soma`.
#pragma once

#include <soma/soma.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>

#include "soma_status.hpp"

namespace soma_test {

/// The trace exported now, as text; where the export fails the calling test fails and the text
/// is "". `tag` keeps the file apart from other tests' running at the same time.
inline std::string exported_trace(const std::string& tag) {
  const std::string path = "/tmp/soma_" + tag + "_" + std::to_string(getpid()) + ".json";
  const somaError_t status = somaMemHistoryExportTrace(path.c_str());
  EXPECT_EQ(status, somaSuccess) << "somaMemHistoryExportTrace: " << last_message();
  if (status != somaSuccess) return {};
  std::string text;
  {
    std::ifstream in(path);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::remove(path.c_str());
  return text;
}

/// Stops memory history at the end of a scope, however the test leaves it (an assertion
/// returns early).
struct history_recording_stopper {
  history_recording_stopper() = default;
  history_recording_stopper(const history_recording_stopper&) = delete;
  history_recording_stopper& operator=(const history_recording_stopper&) = delete;
  ~history_recording_stopper() { (void)somaMemRecordHistory(0); }
};

}  // namespace soma_test
