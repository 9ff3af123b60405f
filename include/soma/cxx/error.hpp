/**
 * @file soma/cxx/error.hpp
 * @brief Part of soma's C++ API (include <soma/soma.hpp>): Errors: soma::error, soma::bad_alloc and
 * check(), which turns a status into an exception.
 */
#ifndef SOMA_CXX_ERROR_HPP
#define SOMA_CXX_ERROR_HPP

#if !defined(__cplusplus) || __cplusplus < 202002L
#error "soma's C++ API needs C++20 (use soma.h from C or older C++)"
#endif

#include <soma/soma.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace soma {

// ---- errors ------------------------------------------------------------------------------

namespace detail {
inline std::string compose_message(somaError_t code, const std::string& detail) {
  const char* name = somaGetErrorName(code);
  std::string text = name != nullptr ? name : "somaError";
  text += ": ";
  if (!detail.empty()) {
    text += detail;
  } else {
    const char* description = somaGetErrorString(code);
    text += description != nullptr ? description : "unknown error";
  }
  return text;
}
inline std::size_t detail_offset(somaError_t code) {
  const char* name = somaGetErrorName(code);
  return (name != nullptr ? std::char_traits<char>::length(name) : 9) + 2;
}
}  // namespace detail

/** A failed soma call. what() reads "<error name>: <detail>", where the detail is the
 *  thread's somaGetLastErrorMessage() at the failure (or the code's description). */
class error : public std::runtime_error {
 public:
  /** Requires: code != somaSuccess. */
  error(somaError_t code, const std::string& detail)
      : std::runtime_error(detail::compose_message(code, detail)),
        code_(code),
        detail_offset_(detail::detail_offset(code)) {}
  somaError_t code() const noexcept { return code_; }
  /** The error's name, e.g. "somaErrorInvalidValue". */
  const char* name() const noexcept { return somaGetErrorName(code_); }
  /** The message without the name: what failed, with the numbers. */
  const char* detail() const noexcept { return what() + detail_offset_; }

 private:
  somaError_t code_;
  std::size_t detail_offset_;
};

/** Out of physical memory (somaErrorMemoryAllocation) or of address space
 *  (somaErrorAddressSpaceExhausted, S16). Catchable as std::bad_alloc. */
class bad_alloc : public std::bad_alloc {
 public:
  bad_alloc(somaError_t code, const std::string& detail)
      : message_(std::make_shared<const std::string>(detail::compose_message(code, detail))),
        code_(code),
        detail_offset_(detail::detail_offset(code)) {}
  const char* what() const noexcept override { return message_->c_str(); }
  somaError_t code() const noexcept { return code_; }
  const char* name() const noexcept { return somaGetErrorName(code_); }
  const char* detail() const noexcept { return what() + detail_offset_; }
  /** True when the address reservation failed, not the physical memory (S16). */
  bool is_address_space_exhausted() const noexcept {
    return code_ == somaErrorAddressSpaceExhausted;
  }

 private:
  std::shared_ptr<const std::string> message_;  // shared: exceptions need a noexcept copy
  somaError_t code_;
  std::size_t detail_offset_;
};

/** Throws the exception for code with the given detail. Requires: code != somaSuccess. */
[[noreturn]] inline void throw_error(somaError_t code, const std::string& detail) {
  if (code == somaErrorMemoryAllocation || code == somaErrorAddressSpaceExhausted) {
    throw bad_alloc(code, detail);
  }
  throw error(code, detail);
}

/** Throws soma::error or soma::bad_alloc when code is not somaSuccess, with the calling
 *  thread's last-error message. Call it right after the failing call, on the same thread. */
inline void check(somaError_t code) {
  if (code != somaSuccess) [[unlikely]] {
    const char* message = somaGetLastErrorMessage();  // copied before any other soma call
    throw_error(code, message != nullptr ? std::string(message) : std::string());
  }
}

}  // namespace soma

#endif  // SOMA_CXX_ERROR_HPP
