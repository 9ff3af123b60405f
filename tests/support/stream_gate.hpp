// stream_gate: holds streams with a blocking host task until the test opens the gate.
//
//   soma_test::stream_gate gate;
//   SOMA_ASSERT_OK(gate.hold(stream));      // work queued after this waits
//   SOMA_ASSERT_OK(somaFreeAsync(p, stream)); // known incomplete until open()
//   EXPECT_EQ(somaStreamQuery(stream), somaErrorNotReady);
//   gate.open();
//
// One gate may hold several streams; open() releases all of them. The destructor opens the
// gate, so a failing test cannot leave a worker thread blocked. The host task owns a reference
// to the gate's state, so the gate may go out of scope before the task runs.
//
// Requires: the including binary links `soma`.
#pragma once

#include <soma/soma.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <memory>
#include <thread>

namespace soma_test {

class stream_gate {
 public:
  stream_gate() : state_(std::make_shared<state>()) {}
  ~stream_gate() { open(); }
  stream_gate(const stream_gate&) = delete;
  stream_gate& operator=(const stream_gate&) = delete;

  /// Enqueues on `stream` a host task that blocks until open(). Returns the launch status.
  somaError_t hold(somaStream_t stream) {
    auto* reference = new std::shared_ptr<state>(state_);
    const somaError_t status = somaLaunchHostFunc(stream, &stream_gate::run, reference);
    if (status != somaSuccess) delete reference;
    return status;
  }

  /// Releases every task held by this gate (idempotent).
  void open() {
    if (!opened_.exchange(true)) state_->gate.count_down();
  }

  /// Number of held tasks that have started (are blocking or have passed the gate).
  int entered() const { return state_->entered.load(); }
  /// Number of held tasks that have passed the gate.
  int left() const { return state_->left.load(); }

  /// Waits until at least `count` held tasks have started; false on timeout.
  bool wait_entered(int count = 1,
                    std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (state_->entered.load() < count) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }

 private:
  struct state {
    std::latch gate{1};
    std::atomic<int> entered{0};
    std::atomic<int> left{0};
  };

  static void run(void* user_data) {
    auto* reference = static_cast<std::shared_ptr<state>*>(user_data);
    const std::shared_ptr<state> shared = *reference;
    delete reference;
    shared->entered.fetch_add(1);
    shared->gate.wait();
    shared->left.fetch_add(1);
  }

  std::shared_ptr<state> state_;
  std::atomic<bool> opened_{false};
};

}  // namespace soma_test
