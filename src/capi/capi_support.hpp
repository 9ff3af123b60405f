// What every C API file shares: running a call with the runtime started, recording its outcome
// for somaGetLastErrorMessage, and reading C arguments safely.
#pragma once

#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "runtime/last_error.hpp"
#include "runtime/runtime.hpp"
#include "soma/soma.h"

namespace soma::capi {

using soma::detail::access_request;
using soma::detail::error_code;
using soma::detail::result;
using soma::detail::runtime;
using soma::detail::status;

inline somaError_t report(const status& outcome) {
  if (outcome.ok()) [[likely]]
    return somaSuccess;
  return static_cast<somaError_t>(soma::detail::record_outcome(outcome));
}

// Runs body(runtime&) -> status with the runtime started, mapping exceptions to codes.
template <typename Body>
inline somaError_t with_runtime(Body&& body) noexcept {
  try {
    if (runtime* ready = runtime::ready()) [[likely]]
      return report(body(*ready));
    result<runtime*> rt = runtime::instance();
    if (!rt.ok()) return report(rt.error());
    return report(body(*rt.value()));
  } catch (const std::bad_alloc&) {
    return report(status(error_code::out_of_memory, "host memory exhausted inside soma"));
  } catch (const std::exception& e) {
    return report(status(error_code::unknown, std::string("internal error: ") + e.what()));
  } catch (...) {
    return report(status(error_code::unknown, "internal error"));
  }
}

/// Runs a fast lane (runtime_fast_lane.hpp): lane() returns true once it did the call, false
/// to leave it to the full path with nothing done. What it throws becomes *outcome, as
/// with_runtime maps it, and the call is done. Requires: the runtime is ready.
template <typename Lane>
inline bool run_lane(Lane&& lane, somaError_t* outcome) noexcept {
  try {
    return lane();
  } catch (...) {
    const std::exception_ptr thrown = std::current_exception();
    *outcome = with_runtime([&](runtime&) -> status { std::rethrow_exception(thrown); });
    return true;
  }
}

inline status null_argument(const char* call, const char* argument) {
  return status(error_code::invalid_value, std::string(call) + ": " + argument + " is NULL");
}

template <typename T, typename Out>
status store(result<T> value, Out* out) {
  if (!value.ok()) return value.take_error();
  *out = reinterpret_cast<Out>(value.value());
  return status::success();
}

/// The handle make(runtime) creates, stored in *out; a NULL out is refused naming call and
/// argument ("<call>: <argument> is NULL").
template <typename Out, typename Make>
somaError_t create_into(Out* out, const char* call, const char* argument, Make&& make) noexcept {
  return with_runtime([&](runtime& rt) -> status {
    if (out == nullptr) return null_argument(call, argument);
    return store(make(rt), out);
  });
}

inline std::uintptr_t handle_of(const void* handle) {
  return reinterpret_cast<std::uintptr_t>(handle);
}

// C callers may pass any int where the API names an enum. Reading such a value as the C++
// enum type is undefined when it lies outside the enum's range, so enums are read as ints.
template <typename Enum>
inline int raw_value(const Enum& value) noexcept {
  static_assert(sizeof(Enum) == sizeof(int), "C enums of the API are int-sized");
  int raw = 0;
  std::memcpy(&raw, &value, sizeof raw);
  return raw;
}

}  // namespace soma::capi
