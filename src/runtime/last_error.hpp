// The calling thread's last failure: code and message (somaGetLastErrorMessage).
#pragma once

#include <string>

#include "core/status.hpp"

namespace soma::detail {

/// Records outcome for the calling thread if it failed; returns its code.
error_code record_outcome(const status& outcome);
/// Message of the thread's last failure ("" if none).
const std::string& last_error_message();
/// Returns and clears the thread's last error code.
error_code take_last_error();

}  // namespace soma::detail
