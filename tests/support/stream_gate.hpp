// stream_gate: holds streams until the test opens the gate.
//
//   soma_test::stream_gate gate;
//   SOMA_ASSERT_OK(gate.hold(stream));      // work queued after this waits
//   SOMA_ASSERT_OK(somaFreeAsync(p, stream)); // known incomplete until open()
//   EXPECT_EQ(somaStreamQuery(stream), somaErrorNotReady);
//   gate.open();
//
// A hold is a stream value wait (somaStreamWaitValue32) on a word of host memory that open()
// sets, with value writes before and after it that count entered() and left(). Not a blocking
// host task: on the GPU the driver may run all streams' host tasks on one thread, so a blocked
// host task would also hold every other stream's host tasks; a value wait holds its stream
// only, on every backend.
//
// One gate may hold up to kMaxHolds streams (or one stream several times); open() releases
// all. The destructor opens the gate, so a failing test cannot leave a stream held. The words
// live until the process exits, so the gate may go out of scope before its holds are passed.
//
// Requires: the including binary links `soma`.
#pragma once

#include <soma/soma.h>

#include <array>
#include <chrono>
#include <cstdint>

#include "host_words.hpp"

namespace soma_test {

class stream_gate {
 public:
  static constexpr int kMaxHolds = 16;

  stream_gate() : gate_(new_host_word()) {
    for (auto& w : entered_) w = new_host_word();
    for (auto& w : left_) w = new_host_word();
  }
  ~stream_gate() { open(); }
  stream_gate(const stream_gate&) = delete;
  stream_gate& operator=(const stream_gate&) = delete;

  /// Enqueues on `stream` a wait until open(). Returns the first failing enqueue's status
  /// (somaErrorInvalidValue once kMaxHolds holds were made).
  somaError_t hold(somaStream_t stream) {
    if (holds_ == kMaxHolds) return somaErrorInvalidValue;
    const int index = holds_;
    somaError_t status = somaStreamWriteValue32(stream, entered_[index], 1, 0);
    if (status == somaSuccess)
      status = somaStreamWaitValue32(stream, gate_, 1, somaStreamWaitValueGeq);
    if (status == somaSuccess) status = somaStreamWriteValue32(stream, left_[index], 1, 0);
    if (status == somaSuccess) ++holds_;
    return status;
  }

  /// Releases every hold of this gate (idempotent).
  void open() { store_word(gate_, 1); }

  /// Number of holds the streams have reached (are waiting at or have passed).
  int entered() const { return count(entered_); }
  /// Number of holds the streams have passed.
  int left() const { return count(left_); }

  /// Waits until at least `count` holds have been reached; false on timeout.
  bool wait_entered(int count = 1,
                    std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    return wait_until([&] { return entered() >= count; }, timeout);
  }

 private:
  int count(const std::array<std::uint32_t*, kMaxHolds>& words) const {
    int n = 0;
    for (int i = 0; i < holds_; ++i) n += load_word(words[i]) != 0 ? 1 : 0;
    return n;
  }

  std::uint32_t* gate_;
  std::array<std::uint32_t*, kMaxHolds> entered_{};
  std::array<std::uint32_t*, kMaxHolds> left_{};
  int holds_ = 0;
};

}  // namespace soma_test
