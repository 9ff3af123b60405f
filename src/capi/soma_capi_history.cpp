// The C API of memory history (soma's own): recording, the Chrome trace, scope labels.
#include "capi/capi_support.hpp"
#include "soma/soma.h"

using namespace soma::capi;  // NOLINT(google-build-using-namespace): the C API's helpers

extern "C" {

somaError_t somaMemRecordHistory(size_t maxEntries) {
  return with_runtime([&](runtime& rt) { return rt.record_history(maxEntries); });
}

somaError_t somaMemHistoryExportTrace(const char* path) {
  return with_runtime([&](runtime& rt) -> status {
    if (path == nullptr) return null_argument("somaMemHistoryExportTrace", "path");
    return rt.export_history(path);
  });
}

somaError_t somaMemScopePush(const char* label) {
  return with_runtime([&](runtime&) { return runtime::push_scope(label); });
}

somaError_t somaMemScopePop(void) {
  return with_runtime([&](runtime&) { return runtime::pop_scope(); });
}

}  // extern "C"
