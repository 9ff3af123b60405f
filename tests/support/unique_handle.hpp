// unique_handle<Handle, Destroy>: owns one soma handle and destroys it with Destroy. The
// RAII handles of the test helpers (unique_stream, unique_pool, unique_graph, ...) are this
// with the call that makes one. Destroy errors are ignored: the test asserts what it needs.
//
// Requires: the including binary links `soma`.
#pragma once

#include <soma/soma.h>

#include <utility>

namespace soma_test {

template <typename Handle, somaError_t (*Destroy)(Handle)>
class unique_handle {
 public:
  unique_handle() = default;
  /// Takes ownership of a handle made elsewhere.
  explicit unique_handle(Handle handle) : handle_(handle) {}
  ~unique_handle() { reset(); }
  unique_handle(const unique_handle&) = delete;
  unique_handle& operator=(const unique_handle&) = delete;

  Handle get() const { return handle_; }
  operator Handle() const { return handle_; }  // NOLINT(google-explicit-constructor)
  /// For a call that makes a handle (somaGraphInstantiate); destroys what it held first.
  Handle* out() {
    reset();
    return &handle_;
  }
  /// Gives up ownership (the test destroys it itself).
  Handle release() { return std::exchange(handle_, nullptr); }
  void reset() {
    if (handle_ != nullptr) (void)Destroy(std::exchange(handle_, nullptr));
  }

 private:
  Handle handle_ = nullptr;
};

}  // namespace soma_test
