// Stream capture (S15): work on a capturing stream becomes nodes and runs only when the graph
// is launched; capture states and refusals; fork and join through events. Event record and
// wait nodes order a graph's work against other streams.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "graph_test_util.hpp"
#include "soma_test_util.hpp"
#include "stream_gate.hpp"

namespace {

using namespace soma_test;

constexpr std::size_t kBytes = 4096;

class S15_Capture : public graph_test {};

somaStreamCaptureStatus capture_status(somaStream_t stream) {
  somaStreamCaptureStatus status = static_cast<somaStreamCaptureStatus>(-1);
  const somaError_t result = somaStreamIsCapturing(stream, &status);
  EXPECT_EQ(result, somaSuccess) << last_message();
  return status;
}

void count_call(void* counter) { static_cast<std::atomic<int>*>(counter)->fetch_add(1); }

TEST_F(S15_Capture, CapturedWorkRunsOnlyWhenTheGraphIsLaunched) {
  unique_stream stream;
  host_buffer host(kBytes);
  std::atomic<int> calls{0};
  EXPECT_EQ(capture_status(stream), somaStreamCaptureStatusNone);
  SOMA_ASSERT_OK(somaStreamBeginCapture(stream, somaStreamCaptureModeGlobal));
  EXPECT_EQ(capture_status(stream), somaStreamCaptureStatusActive);
  void* p = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&p, kBytes, stream));
  ASSERT_NE(p, nullptr);
  somaPointerAttributes attributes{};
  SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, p));
  EXPECT_EQ(attributes.isLiveAllocation, 0) << "a captured allocation lives only in launches";
  SOMA_ASSERT_OK(somaMemsetAsync(p, 0x77, kBytes, stream));
  SOMA_ASSERT_OK(somaMemcpyAsync(host.data(), p, kBytes, somaMemcpyDeviceToHost, stream));
  SOMA_ASSERT_OK(somaLaunchHostFunc(stream, count_call, &calls));
  SOMA_ASSERT_OK(somaFreeAsync(p, stream));
  somaGraph_t captured = nullptr;
  SOMA_ASSERT_OK(somaStreamEndCapture(stream, &captured));
  unique_graph graph(captured);
  ASSERT_NE(graph.get(), nullptr);
  EXPECT_EQ(capture_status(stream), somaStreamCaptureStatusNone);
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(calls.load(), 0) << "the captured host function ran at capture";
  EXPECT_EQ(host.count_not(0), 0u) << "the captured copy ran at capture";

  unique_graph_exec exec;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), graph, 0));
  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(calls.load(), 1);
  EXPECT_TRUE(host.all(0x77));
  SOMA_ASSERT_OK(somaGraphLaunch(exec, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(calls.load(), 2);
}

TEST_F(S15_Capture, CapturedGraphDoesWhatTheSameGraphBuiltExplicitlyDoes) {
  unique_stream stream;
  host_buffer from_capture(kBytes), from_explicit(kBytes);

  SOMA_ASSERT_OK(somaStreamBeginCapture(stream, somaStreamCaptureModeGlobal));
  void *a = nullptr, *b = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&a, kBytes, stream));
  SOMA_ASSERT_OK(somaMallocAsync(&b, kBytes, stream));
  SOMA_ASSERT_OK(somaMemsetAsync(a, 0x01, kBytes, stream));
  SOMA_ASSERT_OK(somaMemsetAsync(byte_offset(a, 1000), 0x02, 500, stream));
  SOMA_ASSERT_OK(somaMemsetAsync(b, 0x03, kBytes, stream));
  SOMA_ASSERT_OK(somaMemcpyAsync(byte_offset(b, 2000), a, 1600, somaMemcpyDeviceToDevice, stream));
  SOMA_ASSERT_OK(somaFreeAsync(a, stream));
  SOMA_ASSERT_OK(somaMemcpyAsync(from_capture.data(), b, kBytes, somaMemcpyDeviceToHost, stream));
  SOMA_ASSERT_OK(somaFreeAsync(b, stream));
  somaGraph_t captured = nullptr;
  SOMA_ASSERT_OK(somaStreamEndCapture(stream, &captured));
  unique_graph capture_graph(captured);

  unique_graph built;
  somaGraphNode_t alloc_a = nullptr, alloc_b = nullptr, set_a = nullptr, set_part = nullptr;
  somaGraphNode_t set_b = nullptr, copy = nullptr, free_a = nullptr, out = nullptr;
  somaGraphNode_t free_b = nullptr;
  void *c = nullptr, *d = nullptr;
  SOMA_ASSERT_OK(add_alloc(built, {}, kBytes, &alloc_a, &c));
  SOMA_ASSERT_OK(add_alloc(built, {}, kBytes, &alloc_b, &d));
  SOMA_ASSERT_OK(add_memset(built, {alloc_a}, c, 0x01, kBytes, &set_a));
  SOMA_ASSERT_OK(add_memset(built, {set_a}, byte_offset(c, 1000), 0x02, 500, &set_part));
  SOMA_ASSERT_OK(add_memset(built, {alloc_b}, d, 0x03, kBytes, &set_b));
  SOMA_ASSERT_OK(add_copy(built, {set_part, set_b}, byte_offset(d, 2000), c, 1600, &copy));
  SOMA_ASSERT_OK(add_free(built, {copy}, c, &free_a));
  SOMA_ASSERT_OK(add_copy(built, {copy}, from_explicit.data(), d, kBytes, &out));
  SOMA_ASSERT_OK(add_free(built, {out}, d, &free_b));

  unique_graph_exec capture_exec, built_exec;
  SOMA_ASSERT_OK(somaGraphInstantiate(capture_exec.out(), capture_graph, 0));
  SOMA_ASSERT_OK(somaGraphInstantiate(built_exec.out(), built, 0));
  SOMA_ASSERT_OK(somaGraphLaunch(capture_exec, stream));
  SOMA_ASSERT_OK(somaGraphLaunch(built_exec, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(std::memcmp(from_capture.data(), from_explicit.data(), kBytes), 0);
  // And both are right: b = 0x03, then a's first 1600 bytes at 2000.
  EXPECT_EQ(from_capture[1999], 0x03);
  EXPECT_EQ(from_capture[2000], 0x01);
  EXPECT_EQ(from_capture[2999], 0x01);
  EXPECT_EQ(from_capture[3000], 0x02);
  EXPECT_EQ(from_capture[3499], 0x02);
  EXPECT_EQ(from_capture[3500], 0x01);
  EXPECT_EQ(from_capture[3599], 0x01);
  EXPECT_EQ(from_capture[3600], 0x03);
}

TEST_F(S15_Capture, CaptureStatesAndRefusals) {
  unique_stream stream, other;
  EXPECT_EQ(capture_status(nullptr), somaStreamCaptureStatusNone);
  EXPECT_EQ(somaStreamBeginCapture(nullptr, somaStreamCaptureModeGlobal),
            somaErrorStreamCaptureUnsupported);
  somaGraph_t graph = reinterpret_cast<somaGraph_t>(std::uintptr_t{1});
  EXPECT_EQ(somaStreamEndCapture(stream, &graph), somaErrorStreamCaptureUnmatched);
  EXPECT_EQ(graph, nullptr);
  SOMA_ASSERT_OK(somaStreamBeginCapture(stream, somaStreamCaptureModeRelaxed));
  EXPECT_EQ(somaStreamBeginCapture(stream, somaStreamCaptureModeGlobal), somaErrorIllegalState);
  EXPECT_EQ(capture_status(stream), somaStreamCaptureStatusActive) << "the capture goes on";
  EXPECT_EQ(capture_status(other), somaStreamCaptureStatusNone);
  EXPECT_EQ(somaStreamEndCapture(other, &graph), somaErrorStreamCaptureUnmatched);
  EXPECT_EQ(somaStreamIsCapturing(stream, nullptr), somaErrorInvalidValue);
  SOMA_ASSERT_OK(somaStreamEndCapture(stream, &graph));
  unique_graph empty(graph);
  EXPECT_NE(empty.get(), nullptr) << "an empty capture gives an empty graph";
  EXPECT_EQ(somaStreamEndCapture(stream, &graph), somaErrorStreamCaptureUnmatched);
}

TEST_F(S15_Capture, CallsThatCannotBeCapturedInvalidateTheCapture) {
  unique_stream stream;
  using call = somaError_t (*)(somaStream_t);
  for (call refused : {call{somaStreamSynchronize}, call{somaStreamQuery}}) {
    SOMA_ASSERT_OK(somaStreamBeginCapture(stream, somaStreamCaptureModeGlobal));
    void* p = nullptr;
    SOMA_ASSERT_OK(somaMallocAsync(&p, kBytes, stream));
    EXPECT_EQ(refused(stream), somaErrorStreamCaptureUnsupported);
    EXPECT_EQ(capture_status(stream), somaStreamCaptureStatusInvalidated);
    EXPECT_EQ(somaMemsetAsync(p, 1, kBytes, stream), somaErrorStreamCaptureInvalidated);
    somaGraph_t graph = reinterpret_cast<somaGraph_t>(std::uintptr_t{1});
    EXPECT_EQ(somaStreamEndCapture(stream, &graph), somaErrorStreamCaptureInvalidated);
    EXPECT_EQ(graph, nullptr);
    EXPECT_EQ(capture_status(stream), somaStreamCaptureStatusNone);
    // The stream works again.
    expect_pool_usable(default_pool(0), stream);
  }
}

TEST_F(S15_Capture, StreamsForkAndJoinThroughEvents) {
  unique_stream origin, side;
  unique_event forked, joined;
  host_buffer host(kBytes);
  SOMA_ASSERT_OK(somaStreamBeginCapture(origin, somaStreamCaptureModeGlobal));
  void* p = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&p, kBytes, origin));
  SOMA_ASSERT_OK(somaMemsetAsync(p, 0x10, kBytes, origin));
  SOMA_ASSERT_OK(somaEventRecord(forked, origin));
  SOMA_ASSERT_OK(somaStreamWaitEvent(side, forked, 0));
  EXPECT_EQ(capture_status(side), somaStreamCaptureStatusActive) << "the side stream joined";
  SOMA_ASSERT_OK(somaMemsetAsync(byte_offset(p, 100), 0x20, 100, side));
  SOMA_ASSERT_OK(somaEventRecord(joined, side));
  SOMA_ASSERT_OK(somaStreamWaitEvent(origin, joined, 0));
  SOMA_ASSERT_OK(somaMemcpyAsync(host.data(), p, kBytes, somaMemcpyDeviceToHost, origin));
  SOMA_ASSERT_OK(somaFreeAsync(p, origin));
  somaGraph_t graph = nullptr;
  EXPECT_EQ(somaStreamEndCapture(side, &graph), somaErrorStreamCaptureUnmatched)
      << "only the origin stream ends the capture";
  SOMA_ASSERT_OK(somaStreamEndCapture(origin, &graph));
  unique_graph captured(graph);
  EXPECT_EQ(capture_status(side), somaStreamCaptureStatusNone);
  EXPECT_EQ(host.count_not(0), 0u);

  unique_graph_exec exec;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), captured, 0));
  SOMA_ASSERT_OK(somaGraphLaunch(exec, origin));
  SOMA_ASSERT_OK(somaStreamSynchronize(origin));
  EXPECT_EQ(host.count_not(0x10), 100u);
  EXPECT_EQ(host[99], 0x10);
  EXPECT_EQ(host[100], 0x20);
  EXPECT_EQ(host[199], 0x20);
  EXPECT_EQ(host[200], 0x10);
}

TEST_F(S15_Capture, SideStreamThatDoesNotRejoinFailsTheCapture) {
  unique_stream origin, side;
  unique_event forked;
  host_buffer host(kBytes);
  SOMA_ASSERT_OK(somaStreamBeginCapture(origin, somaStreamCaptureModeGlobal));
  SOMA_ASSERT_OK(somaEventRecord(forked, origin));
  SOMA_ASSERT_OK(somaStreamWaitEvent(side, forked, 0));
  SOMA_ASSERT_OK(somaLaunchHostFunc(
      side, [](void*) {}, nullptr));
  somaGraph_t graph = reinterpret_cast<somaGraph_t>(std::uintptr_t{1});
  EXPECT_EQ(somaStreamEndCapture(origin, &graph), somaErrorStreamCaptureUnjoined);
  EXPECT_EQ(graph, nullptr);
  EXPECT_EQ(capture_status(origin), somaStreamCaptureStatusNone);
  EXPECT_EQ(capture_status(side), somaStreamCaptureStatusNone);
  expect_pool_usable(default_pool(0), side);
  expect_pool_usable(default_pool(0), origin);
}

TEST_F(S15_Capture, DestroyingTheCapturingStreamEndsTheCaptureItBegan) {
  somaStream_t doomed = nullptr;
  SOMA_ASSERT_OK(somaStreamCreate(&doomed));
  unique_stream joined;
  unique_event forked;
  SOMA_ASSERT_OK(somaStreamBeginCapture(doomed, somaStreamCaptureModeGlobal));
  SOMA_ASSERT_OK(somaEventRecord(forked, doomed));
  SOMA_ASSERT_OK(somaStreamWaitEvent(joined, forked, 0));
  EXPECT_EQ(capture_status(joined), somaStreamCaptureStatusActive);
  SOMA_ASSERT_OK(somaStreamDestroy(doomed));
  EXPECT_EQ(capture_status(joined), somaStreamCaptureStatusNone)
      << "the capture ended with the stream that began it";
  expect_pool_usable(default_pool(0), joined);  // work on it runs again
}

TEST_F(S15_Capture, DestroyingAJoinedStreamInvalidatesTheCapture) {
  unique_stream origin;
  somaStream_t side = nullptr;
  SOMA_ASSERT_OK(somaStreamCreate(&side));
  unique_event forked;
  SOMA_ASSERT_OK(somaStreamBeginCapture(origin, somaStreamCaptureModeGlobal));
  SOMA_ASSERT_OK(somaEventRecord(forked, origin));
  SOMA_ASSERT_OK(somaStreamWaitEvent(side, forked, 0));
  SOMA_ASSERT_OK(somaStreamDestroy(side));
  EXPECT_EQ(capture_status(origin), somaStreamCaptureStatusInvalidated);
  somaGraph_t graph = nullptr;
  EXPECT_EQ(somaStreamEndCapture(origin, &graph), somaErrorStreamCaptureInvalidated);
  EXPECT_EQ(graph, nullptr);
  expect_pool_usable(default_pool(0), origin);
}

TEST_F(S15_Capture, CapturedFreeOfMemoryNoCapturedAllocationMadeIsRefused) {
  unique_stream stream;
  void* pool_memory = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pool_memory, kBytes, stream));
  SOMA_ASSERT_OK(somaMemsetAsync(pool_memory, 0x5f, kBytes, stream));
  SOMA_ASSERT_OK(somaStreamBeginCapture(stream, somaStreamCaptureModeGlobal));
  EXPECT_EQ(somaFreeAsync(pool_memory, stream), somaErrorInvalidValue);
  host_buffer on_host(kBytes);
  EXPECT_EQ(somaFreeAsync(on_host.data(), stream), somaErrorInvalidValue);
  somaGraph_t graph = nullptr;
  (void)somaStreamEndCapture(stream, &graph);  // whether the refusal ended it is not S15's
  unique_graph captured(graph);
  // The stream-ordered allocation was not freed.
  somaPointerAttributes attributes{};
  SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, pool_memory));
  EXPECT_EQ(attributes.isLiveAllocation, 1);
  host_buffer bytes = read_back(pool_memory, kBytes, stream);
  EXPECT_TRUE(bytes.all(0x5f));
  SOMA_ASSERT_OK(somaFreeAsync(pool_memory, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S15_Capture, CapturedAllocationIsFreedAfterTheLaunchOutsideTheGraph) {
  unique_stream stream, other;
  SOMA_ASSERT_OK(somaStreamBeginCapture(stream, somaStreamCaptureModeGlobal));
  void* p = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&p, kBytes, stream));
  SOMA_ASSERT_OK(somaMemsetAsync(p, 0x2b, kBytes, stream));
  somaGraph_t graph = nullptr;
  SOMA_ASSERT_OK(somaStreamEndCapture(stream, &graph));
  unique_graph captured(graph);
  unique_graph_exec exec;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), captured, 0));
  for (int launch = 0; launch < 3; ++launch) {
    SOMA_ASSERT_OK(somaGraphLaunch(exec, stream)) << "launch " << launch;
    host_buffer bytes = read_back(p, kBytes, stream);
    EXPECT_TRUE(bytes.all(0x2b)) << "launch " << launch;
    SOMA_ASSERT_OK(somaMemsetAsync(p, 0, kBytes, stream));
    // Freed on another stream, ordered after the launch by an event.
    unique_event done;
    SOMA_ASSERT_OK(somaEventRecord(done, stream));
    SOMA_ASSERT_OK(somaStreamWaitEvent(other, done, 0));
    SOMA_ASSERT_OK(somaFreeAsync(p, other));
  }
  SOMA_ASSERT_OK(somaStreamSynchronize(other));
}

// ---- S15_Events: event record and wait nodes ---------------------------------------------

class S15_Events : public graph_test {};

TEST_F(S15_Events, RecordNodeOrdersAWaitOnAnotherStreamAfterTheGraph) {
  unique_stream graph_stream, waiting;
  unique_event recorded;
  host_buffer graph_out(kBytes), later(kBytes);
  unique_graph graph;
  somaGraphNode_t alloc = nullptr, set = nullptr, copy = nullptr, record = nullptr;
  somaGraphNode_t free = nullptr;
  void* p = nullptr;
  SOMA_ASSERT_OK(add_alloc(graph, {}, kBytes, &alloc, &p));
  SOMA_ASSERT_OK(add_memset(graph, {alloc}, p, 0x5c, kBytes, &set));
  SOMA_ASSERT_OK(add_copy(graph, {set}, graph_out.data(), p, kBytes, &copy));
  SOMA_ASSERT_OK(somaGraphAddEventRecordNode(&record, graph, &copy, 1, recorded));
  SOMA_ASSERT_OK(add_free(graph, {copy}, p, &free));
  unique_graph_exec exec;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), graph, 0));

  stream_gate gate;
  SOMA_ASSERT_OK(gate.hold(graph_stream));
  SOMA_ASSERT_OK(somaGraphLaunch(exec, graph_stream));
  SOMA_ASSERT_OK(somaStreamWaitEvent(waiting, recorded, 0));
  // A host task, not a host-to-host somaMemcpyAsync: the cuda driver does such a copy on the
  // calling thread once the stream gets there, which would wait for the gate this thread opens.
  struct copy_args {
    void* to;
    const void* from;
  } args{later.data(), graph_out.data()};
  SOMA_ASSERT_OK(somaLaunchHostFunc(
      waiting,
      [](void* data) {
        auto* a = static_cast<copy_args*>(data);
        std::memcpy(a->to, a->from, kBytes);
      },
      &args));
  stream_flag passed;
  SOMA_ASSERT_OK(passed.set_on(waiting));
  EXPECT_FALSE(passed.wait(std::chrono::milliseconds(50)))
      << "the waiting stream went on before the graph ran";
  EXPECT_EQ(somaStreamQuery(waiting), somaErrorNotReady);
  gate.open();
  SOMA_ASSERT_OK(somaStreamSynchronize(waiting));
  EXPECT_TRUE(later.all(0x5c)) << "the waiting stream copied before the graph's copy";
  SOMA_ASSERT_OK(somaStreamSynchronize(graph_stream));
}

TEST_F(S15_Events, WaitNodeMakesTheGraphWaitForAnotherStream) {
  unique_stream graph_stream, producer;
  unique_event produced;
  host_buffer host(kBytes);
  void* source = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&source, kBytes, producer));
  SOMA_ASSERT_OK(somaMemsetAsync(source, 0x01, kBytes, producer));
  SOMA_ASSERT_OK(somaStreamSynchronize(producer));

  unique_graph graph;
  somaGraphNode_t wait = nullptr, alloc = nullptr, copy_in = nullptr, copy_out = nullptr;
  somaGraphNode_t free = nullptr;
  void* p = nullptr;
  SOMA_ASSERT_OK(somaGraphAddEventWaitNode(&wait, graph, nullptr, 0, produced));
  SOMA_ASSERT_OK(add_alloc(graph, {}, kBytes, &alloc, &p));
  SOMA_ASSERT_OK(add_copy(graph, {wait, alloc}, p, source, kBytes, &copy_in));
  SOMA_ASSERT_OK(add_copy(graph, {copy_in}, host.data(), p, kBytes, &copy_out));
  SOMA_ASSERT_OK(add_free(graph, {copy_out}, p, &free));
  unique_graph_exec exec;
  SOMA_ASSERT_OK(somaGraphInstantiate(exec.out(), graph, 0));

  stream_gate gate;
  SOMA_ASSERT_OK(gate.hold(producer));
  SOMA_ASSERT_OK(somaMemsetAsync(source, 0x66, kBytes, producer));
  SOMA_ASSERT_OK(somaEventRecord(produced, producer));
  SOMA_ASSERT_OK(somaGraphLaunch(exec, graph_stream));
  stream_flag passed;
  SOMA_ASSERT_OK(passed.set_on(graph_stream));
  EXPECT_FALSE(passed.wait(std::chrono::milliseconds(50)))
      << "the graph ran before the event it waits for";
  gate.open();
  SOMA_ASSERT_OK(somaStreamSynchronize(graph_stream));
  EXPECT_TRUE(host.all(0x66)) << "the graph copied before the producer's memset";
  SOMA_ASSERT_OK(somaFreeAsync(source, producer));
  SOMA_ASSERT_OK(somaStreamSynchronize(producer));
}

}  // namespace
