// Result and status types of the lower layers (core, backend, runtime): they return a
// status instead of throwing. Codes share their numeric values with somaError_t so the C
// API translates by a cast.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace soma::detail {

enum class error_code : int {
  success = 0,
  invalid_value = 1,
  out_of_memory = 2,
  initialization_error = 3,
  no_device = 100,
  invalid_device = 101,
  operating_system = 304,
  invalid_handle = 400,
  illegal_state = 401,
  not_ready = 600,
  illegal_address = 700,
  launch_failure = 719,
  not_permitted = 800,
  not_supported = 801,
  capture_unsupported = 900,
  capture_invalidated = 901,
  capture_unmatched = 903,
  capture_unjoined = 904,
  unknown = 999,
  address_space_exhausted = 10001,
};

/// A code plus a message with the numbers. Success carries no message and costs no
/// allocation.
class status {
 public:
  status() noexcept = default;
  status(error_code code, std::string message)
      : code_(code), message_(std::make_unique<std::string>(std::move(message))) {}
  status(const status& other)
      : code_(other.code_),
        message_(other.message_ ? std::make_unique<std::string>(*other.message_) : nullptr) {}
  status& operator=(const status& other) {
    if (this != &other) *this = status(other);
    return *this;
  }
  status(status&&) noexcept = default;
  status& operator=(status&&) noexcept = default;
  ~status() = default;

  static status success() noexcept { return {}; }
  bool ok() const noexcept { return code_ == error_code::success; }
  explicit operator bool() const noexcept { return ok(); }
  error_code code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_ ? *message_ : no_message(); }

 private:
  static const std::string& no_message() noexcept;

  error_code code_ = error_code::success;
  // Apart, so that a success (every call on the fast path returns one) is a code and a null
  // pointer: made, moved and dropped without touching a string.
  std::unique_ptr<std::string> message_;
};

/// A value or a failure status.
template <typename T>
class result {
 public:
  result(T value) : value_(std::move(value)) {}            // NOLINT(google-explicit-constructor)
  result(status failure) : status_(std::move(failure)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const noexcept { return status_.ok(); }
  const status& error() const noexcept { return status_; }
  status take_error() { return std::move(status_); }
  T& value() noexcept { return value_; }
  const T& value() const noexcept { return value_; }

 private:
  T value_{};
  status status_;
};

/// "12.0 MiB", "256 B": sizes in messages are read by people.
std::string format_bytes(std::uint64_t bytes);
/// "0x7f12a0000000"
std::string format_address(std::uintptr_t address);

}  // namespace soma::detail
