#include "runtime/last_error.hpp"

namespace soma::detail {
namespace {

thread_local error_code last_code = error_code::success;
thread_local std::string last_message;

}  // namespace

error_code record_outcome(const status& outcome) {
  if (!outcome.ok()) {
    last_code = outcome.code();
    last_message = outcome.message();
  }
  return outcome.code();
}

const std::string& last_error_message() { return last_message; }

error_code take_last_error() {
  const error_code code = last_code;
  last_code = error_code::success;
  return code;
}

}  // namespace soma::detail
