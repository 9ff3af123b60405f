// Memory history (docs/observability.md) while everything else runs: recording started into
// rings small enough to wrap and stopped, scopes opened and closed (one too many closes must be
// refused), and the trace exported and read back as one JSON object.
#include <soma/soma.h>

#include <cstdio>

#include "fuzz_check.hpp"
#include "session.hpp"
#include "history_ops.hpp"

namespace soma_fuzz {

void session::record_history(const operation& op) {
  // A quarter of the time recording stops; otherwise a ring of 1 to 4096 events starts.
  const std::size_t entries = op.a % 4 == 0 ? 0 : history_entries(op.raw);
  FUZZ_OK(somaMemRecordHistory(entries));
}

void session::scope_push(const operation& op) {
  FUZZ_OK(somaMemScopePush(kScopeLabels[op.a % 3]));
  ++state_.scopes_open;
}

void session::scope_pop() {
  if (state_.scopes_open == 0) {
    FUZZ_EXPECT_STATUS(somaMemScopePop(), somaErrorIllegalState);
    return;
  }
  FUZZ_OK(somaMemScopePop());
  --state_.scopes_open;
}

void session::export_history() { export_and_check_trace(trace_path(0)); }

void session::finish_history() {
  FUZZ_OK(somaMemRecordHistory(0));
  while (state_.scopes_open > 0) {
    FUZZ_OK(somaMemScopePop());
    --state_.scopes_open;
  }
  std::remove(trace_path(0).c_str());
}

}  // namespace soma_fuzz
