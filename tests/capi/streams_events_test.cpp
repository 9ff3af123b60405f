// Streams and events on the cpu backend (api-behaviour.md "Streams and events"; S1: memory is
// usable by later work of the same stream and by other streams only through events; S12:
// synchronize calls observe completion).
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "host_task.hpp"
#include "soma_test_util.hpp"
#include "stream_gate.hpp"

namespace {

using namespace soma_test;
using namespace std::chrono_literals;

class S1_Streams : public capi_test {};
class S1_Events : public capi_test {};
class S12_Synchronize : public capi_test {};

constexpr auto kHangTimeout = 5s;

TEST_F(S1_Streams, TasksRunInOrder) {
  unique_stream stream;
  std::vector<int> order;  // touched only by the stream's tasks, read after synchronize
  for (int i = 0; i < 200; ++i) {
    SOMA_ASSERT_OK(launch_host(stream, [&order, i] { order.push_back(i); }));
  }
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  ASSERT_EQ(order.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
}

TEST_F(S1_Streams, QueryIsNotReadyWhileWorkIsHeld) {
  unique_stream stream;
  SOMA_ASSERT_OK(somaStreamQuery(stream)) << "an empty stream is complete";
  stream_gate gate;
  SOMA_ASSERT_OK(gate.hold(stream));
  ASSERT_TRUE(gate.wait_entered());
  EXPECT_EQ(somaStreamQuery(stream), somaErrorNotReady);
  EXPECT_EQ(somaStreamQuery(stream), somaErrorNotReady) << "NotReady is not sticky, but repeats";
  gate.open();
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  SOMA_EXPECT_OK(somaStreamQuery(stream));
  EXPECT_EQ(gate.left(), 1);
}

TEST_F(S1_Streams, SynchronizeWaitsForQueuedWork) {
  unique_stream stream;
  std::atomic<bool> done{false};
  SOMA_ASSERT_OK(launch_host(stream, [&] {
    std::this_thread::sleep_for(30ms);
    done.store(true);
  }));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_TRUE(done.load());
}

TEST_F(S1_Streams, DestroyReturnsAtOnceAndQueuedWorkStillRuns) {
  somaStream_t stream = nullptr;
  SOMA_ASSERT_OK(somaStreamCreate(&stream));
  stream_gate gate;
  SOMA_ASSERT_OK(gate.hold(stream));
  auto ran = std::make_shared<std::promise<void>>();
  std::future<void> ran_future = ran->get_future();
  SOMA_ASSERT_OK(launch_host(stream, [ran] { ran->set_value(); }));

  auto destroy = std::async(std::launch::async, [stream] { return somaStreamDestroy(stream); });
  const bool returned = destroy.wait_for(kHangTimeout) == std::future_status::ready;
  gate.open();
  EXPECT_TRUE(returned) << "somaStreamDestroy waited for held work";
  EXPECT_EQ(destroy.get(), somaSuccess);
  EXPECT_EQ(ran_future.wait_for(kHangTimeout), std::future_status::ready)
      << "work queued before destroy did not run";
}

TEST_F(S1_Streams, NonBlockingFlagCreatesWorkingStream) {
  somaStream_t stream = nullptr;
  SOMA_ASSERT_OK(somaStreamCreateWithFlags(&stream, somaStreamNonBlocking));
  std::atomic<bool> ran{false};
  SOMA_ASSERT_OK(launch_host(stream, [&] { ran.store(true); }));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_TRUE(ran.load());
  SOMA_ASSERT_OK(somaStreamDestroy(stream));
}

TEST_F(S1_Streams, NullIsTheCurrentDevicesDefaultStream) {
  std::atomic<bool> ran{false};
  SOMA_ASSERT_OK(launch_host(nullptr, [&] { ran.store(true); }));
  SOMA_ASSERT_OK(somaStreamSynchronize(nullptr));
  EXPECT_TRUE(ran.load());
  SOMA_EXPECT_OK(somaStreamQuery(nullptr));
  int device = -1;
  SOMA_ASSERT_OK(somaStreamGetDevice(nullptr, &device));
  EXPECT_EQ(device, 0);
  if (have_devices(2)) {
    SOMA_ASSERT_OK(somaSetDevice(1));
    SOMA_ASSERT_OK(somaStreamGetDevice(nullptr, &device));
    EXPECT_EQ(device, 1);
    void* pointer = nullptr;
    SOMA_ASSERT_OK(somaMallocAsync(&pointer, 1024, nullptr));
    somaPointerAttributes attributes{};
    SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, pointer));
    EXPECT_EQ(attributes.device, 1) << "NULL stream follows the current device";
    SOMA_ASSERT_OK(somaFreeAsync(pointer, nullptr));
    SOMA_ASSERT_OK(somaStreamSynchronize(nullptr));
  }
}

TEST_F(S1_Streams, DefaultStreamDoesNotSynchronizeWithOtherStreams) {
  unique_stream stream;
  stream_gate gate;
  SOMA_ASSERT_OK(gate.hold(stream));
  ASSERT_TRUE(gate.wait_entered());
  auto sync_default = std::async(std::launch::async, [] {
    if (somaSetDevice(0) != somaSuccess) return somaErrorInvalidDevice;
    const somaError_t launched = soma_test::launch_host(nullptr, [] {});
    if (launched != somaSuccess) return launched;
    return somaStreamSynchronize(nullptr);
  });
  const bool finished = sync_default.wait_for(kHangTimeout) == std::future_status::ready;
  gate.open();
  EXPECT_TRUE(finished) << "the NULL stream waited for another stream (legacy semantics)";
  EXPECT_EQ(sync_default.get(), somaSuccess);
  SOMA_EXPECT_OK(somaStreamSynchronize(stream));
}

TEST_F(S1_Streams, NativeStreamsOnTheCpuBackend) {
  SOMA_REQUIRE_CPU_BACKEND("what the cpu backend answers; tests/gpu covers native CUstreams");
  unique_stream stream;
  void* native = &stream;  // anything but NULL
  SOMA_ASSERT_OK(somaStreamGetNative(stream, &native));
  EXPECT_EQ(native, nullptr) << "cpu backend: no native stream behind a soma stream";
  somaStream_t adopted = nullptr;
  int not_a_native_stream = 0;
  EXPECT_EQ(somaStreamCreateFromNative(&adopted, &not_a_native_stream, 0), somaErrorNotSupported);
  EXPECT_EQ(somaStreamCreateFromNativeWithFlags(&adopted, &not_a_native_stream, 0,
                                                somaNativeStreamMayEndFirst),
            somaErrorNotSupported);
}

TEST_F(S1_Streams, AdoptionFlagsAreCheckedFirst) {
  somaStream_t adopted = nullptr;
  int not_a_native_stream = 0;
  EXPECT_EQ(somaStreamCreateFromNativeWithFlags(&adopted, &not_a_native_stream, 0, 2),
            somaErrorInvalidValue);
  EXPECT_NE(std::string(somaGetLastErrorMessage()).find("somaNativeStreamMayEndFirst (1)"),
            std::string::npos)
      << somaGetLastErrorMessage();
  EXPECT_EQ(somaStreamCreateFromNativeWithFlags(nullptr, &not_a_native_stream, 0,
                                                somaNativeStreamMayEndFirst),
            somaErrorInvalidValue);
  EXPECT_EQ(adopted, nullptr);
}

TEST_F(S1_Streams, StreamBelongsToDeviceCurrentAtCreation) {
  if (!have_devices(2)) GTEST_SKIP() << "needs 2 devices";
  SOMA_ASSERT_OK(somaSetDevice(1));
  unique_stream on_device_1;
  SOMA_ASSERT_OK(somaSetDevice(0));
  int device = -1;
  SOMA_ASSERT_OK(somaStreamGetDevice(on_device_1, &device));
  EXPECT_EQ(device, 1);
  // Allocation on it draws from device 1's current pool (S4), whatever this thread's device.
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 4096, on_device_1));
  somaPointerAttributes attributes{};
  SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, pointer));
  EXPECT_EQ(attributes.device, 1);
  EXPECT_EQ(attributes.pool, default_pool(1));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, on_device_1));
  SOMA_ASSERT_OK(somaStreamSynchronize(on_device_1));
}

TEST_F(S1_Streams, CurrentDeviceIsPerThreadAndStartsAtZero) {
  if (!have_devices(2)) GTEST_SKIP() << "needs 2 devices";
  SOMA_ASSERT_OK(somaSetDevice(1));
  int other_thread_device = -1;
  std::thread other([&] { (void)somaGetDevice(&other_thread_device); });
  other.join();
  EXPECT_EQ(other_thread_device, 0);
  int device = -1;
  SOMA_ASSERT_OK(somaGetDevice(&device));
  EXPECT_EQ(device, 1);
}

// ---- events --------------------------------------------------------------------------------

TEST_F(S1_Events, NeverRecordedEventQueriesAndSynchronizesAsComplete) {
  unique_event event;
  SOMA_EXPECT_OK(somaEventQuery(event));
  SOMA_EXPECT_OK(somaEventSynchronize(event));
  somaEvent_t flagged = nullptr;
  SOMA_ASSERT_OK(
      somaEventCreateWithFlags(&flagged, somaEventDisableTiming | somaEventBlockingSync));
  SOMA_EXPECT_OK(somaEventQuery(flagged));
  SOMA_EXPECT_OK(somaEventDestroy(flagged));
}

TEST_F(S1_Events, RecordedEventCompletesWhenStreamPassesIt) {
  unique_stream stream;
  unique_event event;
  stream_gate gate;
  SOMA_ASSERT_OK(gate.hold(stream));
  SOMA_ASSERT_OK(somaEventRecord(event, stream));
  ASSERT_TRUE(gate.wait_entered());
  EXPECT_EQ(somaEventQuery(event), somaErrorNotReady);
  gate.open();
  SOMA_ASSERT_OK(somaEventSynchronize(event));
  SOMA_EXPECT_OK(somaEventQuery(event));
}

TEST_F(S1_Events, RecordCapturesOnlyWorkQueuedSoFar) {
  unique_stream stream;
  unique_event event;
  SOMA_ASSERT_OK(somaEventRecord(event, stream));
  stream_gate gate;
  SOMA_ASSERT_OK(gate.hold(stream));  // queued after the record
  ASSERT_TRUE(gate.wait_entered());
  SOMA_EXPECT_OK(somaEventSynchronize(event)) << "the event does not cover later work";
  SOMA_EXPECT_OK(somaEventQuery(event));
  EXPECT_EQ(somaStreamQuery(stream), somaErrorNotReady);
  gate.open();
}

TEST_F(S1_Events, ReRecordMovesTheEvent) {
  unique_stream stream;
  unique_event event;
  SOMA_ASSERT_OK(somaEventRecord(event, stream));
  SOMA_ASSERT_OK(somaEventSynchronize(event));
  stream_gate gate;
  SOMA_ASSERT_OK(gate.hold(stream));
  SOMA_ASSERT_OK(somaEventRecord(event, stream));
  ASSERT_TRUE(gate.wait_entered());
  EXPECT_EQ(somaEventQuery(event), somaErrorNotReady);
  gate.open();
  SOMA_EXPECT_OK(somaEventSynchronize(event));
}

TEST_F(S1_Events, StreamWaitEventOrdersWorkAcrossStreams) {
  unique_stream producer;
  unique_stream consumer;
  unique_event event;
  stream_gate gate;
  std::atomic<bool> produced{false};
  std::atomic<bool> consumer_saw_product{false};
  std::atomic<bool> consumer_ran{false};

  SOMA_ASSERT_OK(gate.hold(producer));
  SOMA_ASSERT_OK(launch_host(producer, [&] { produced.store(true); }));
  SOMA_ASSERT_OK(somaEventRecord(event, producer));
  SOMA_ASSERT_OK(somaStreamWaitEvent(consumer, event, 0));
  SOMA_ASSERT_OK(launch_host(consumer, [&] {
    consumer_saw_product.store(produced.load());
    consumer_ran.store(true);
  }));

  ASSERT_TRUE(gate.wait_entered());
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(consumer_ran.load()) << "consumer ran before the event it waits on";
  EXPECT_EQ(somaStreamQuery(consumer), somaErrorNotReady);
  gate.open();
  SOMA_ASSERT_OK(somaStreamSynchronize(consumer));
  EXPECT_TRUE(consumer_ran.load());
  EXPECT_TRUE(consumer_saw_product.load());
}

TEST_F(S1_Events, WaitCapturesTheEventAsRecordedAtTheCall) {
  unique_stream producer;
  unique_stream consumer;
  unique_event event;
  SOMA_ASSERT_OK(somaEventRecord(event, producer));  // empty stream: complete position
  SOMA_ASSERT_OK(somaStreamWaitEvent(consumer, event, 0));
  stream_gate gate;
  SOMA_ASSERT_OK(gate.hold(producer));
  SOMA_ASSERT_OK(somaEventRecord(event, producer));  // re-record after the wait
  ASSERT_TRUE(gate.wait_entered());
  auto sync_consumer = std::async(std::launch::async, [&] {
    const somaError_t launched = soma_test::launch_host(consumer.get(), [] {});
    if (launched != somaSuccess) return launched;
    return somaStreamSynchronize(consumer.get());
  });
  const bool finished = sync_consumer.wait_for(kHangTimeout) == std::future_status::ready;
  gate.open();
  EXPECT_TRUE(finished) << "the wait followed a later record of the event";
  EXPECT_EQ(sync_consumer.get(), somaSuccess);
}

TEST_F(S1_Events, WaitAcrossDevices) {
  if (!have_devices(2)) GTEST_SKIP() << "needs 2 devices";
  unique_stream on_device_0;
  SOMA_ASSERT_OK(somaSetDevice(1));
  unique_stream on_device_1;
  unique_event event;  // created on device 1
  SOMA_ASSERT_OK(somaSetDevice(0));
  stream_gate gate;
  std::atomic<bool> produced{false};
  std::atomic<bool> saw{false};
  SOMA_ASSERT_OK(gate.hold(on_device_1));
  SOMA_ASSERT_OK(launch_host(on_device_1, [&] { produced.store(true); }));
  SOMA_ASSERT_OK(somaEventRecord(event, on_device_1));
  SOMA_ASSERT_OK(somaStreamWaitEvent(on_device_0, event, 0));
  SOMA_ASSERT_OK(launch_host(on_device_0, [&] { saw.store(produced.load()); }));
  ASSERT_TRUE(gate.wait_entered());
  EXPECT_EQ(somaStreamQuery(on_device_0), somaErrorNotReady);
  gate.open();
  SOMA_ASSERT_OK(somaStreamSynchronize(on_device_0));
  EXPECT_TRUE(saw.load());
}

TEST_F(S1_Events, EventOutlivesDestroyedStream) {
  somaStream_t stream = nullptr;
  SOMA_ASSERT_OK(somaStreamCreate(&stream));
  unique_event event;
  std::atomic<bool> ran{false};
  SOMA_ASSERT_OK(launch_host(stream, [&] {
    std::this_thread::sleep_for(10ms);
    ran.store(true);
  }));
  SOMA_ASSERT_OK(somaEventRecord(event, stream));
  SOMA_ASSERT_OK(somaStreamDestroy(stream));
  SOMA_EXPECT_OK(somaEventSynchronize(event));
  EXPECT_TRUE(ran.load());
}

TEST_F(S1_Events, RecordOnNullStream) {
  unique_event event;
  std::atomic<bool> ran{false};
  SOMA_ASSERT_OK(launch_host(nullptr, [&] {
    std::this_thread::sleep_for(10ms);
    ran.store(true);
  }));
  SOMA_ASSERT_OK(somaEventRecord(event, nullptr));
  SOMA_ASSERT_OK(somaEventSynchronize(event));
  EXPECT_TRUE(ran.load());
}

// ---- synchronize (S12) ----------------------------------------------------------------------

TEST_F(S12_Synchronize, DeviceSynchronizeWaitsForEveryStreamOfTheDevice) {
  unique_stream a;
  unique_stream b;
  std::atomic<int> done{0};
  for (somaStream_t stream : {a.get(), b.get(), static_cast<somaStream_t>(nullptr)}) {
    SOMA_ASSERT_OK(launch_host(stream, [&] {
      std::this_thread::sleep_for(20ms);
      done.fetch_add(1);
    }));
  }
  SOMA_ASSERT_OK(somaDeviceSynchronize());
  EXPECT_EQ(done.load(), 3);
  SOMA_EXPECT_OK(somaStreamQuery(a));
  SOMA_EXPECT_OK(somaStreamQuery(b));
}

TEST_F(S12_Synchronize, DeviceSynchronizeCoversOnlyTheCurrentDevice) {
  if (!have_devices(2)) GTEST_SKIP() << "needs 2 devices";
  SOMA_ASSERT_OK(somaSetDevice(1));
  unique_stream on_device_1;
  SOMA_ASSERT_OK(somaSetDevice(0));
  stream_gate gate;
  SOMA_ASSERT_OK(gate.hold(on_device_1));
  ASSERT_TRUE(gate.wait_entered());
  auto sync_device_0 = std::async(std::launch::async, [] {
    if (somaSetDevice(0) != somaSuccess) return somaErrorInvalidDevice;
    return somaDeviceSynchronize();
  });
  const bool finished = sync_device_0.wait_for(kHangTimeout) == std::future_status::ready;
  gate.open();
  EXPECT_TRUE(finished) << "device 0's synchronize waited for device 1's stream";
  EXPECT_EQ(sync_device_0.get(), somaSuccess);
}

}  // namespace
