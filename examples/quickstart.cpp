// quickstart.cpp: stream-ordered allocation with soma's C++ API.
//
// RAII owns the stream, the event and the memory; failures throw soma::error (or
// soma::bad_alloc). A producer stream fills a buffer, an event hands it to a consumer stream,
// which copies it to the host; the buffer is freed on the consumer stream, after its last use.
#include <soma/soma.hpp>

#include <cstdio>
#include <vector>

int main() try {
  constexpr std::size_t count = 1 << 18;
  soma::stream producer;
  soma::stream consumer;
  soma::event filled;

  // S1: usable by later work on `producer`; the owner frees it on that stream by default.
  soma::unique_async_ptr<int> buffer = soma::make_unique_async<int>(count, producer);
  soma::check(somaMemsetAsync(buffer.get(), 0, buffer.size_bytes(), producer.handle()));

  // Another stream may use the memory only after an event dependency (S1).
  filled.record(producer);
  consumer.wait(filled);
  std::vector<int> host(count, -1);
  soma::check(somaMemcpyAsync(host.data(), buffer.get(), buffer.size_bytes(),
                              somaMemcpyDeviceToHost, consumer.handle()));

  // S2: free after the last use, which is on `consumer`.
  buffer.reset(consumer);
  consumer.synchronize();

  for (int value : host) {
    if (value != 0) {
      std::fprintf(stderr, "unexpected value %d\n", value);
      return 1;
    }
  }
  std::printf("quickstart (C++): filled on one stream, read on another, freed after the read\n");
  return 0;
} catch (const soma::error& e) {
  std::fprintf(stderr, "quickstart: %s\n", e.what());
  return 1;
} catch (const soma::bad_alloc& e) {
  std::fprintf(stderr, "quickstart: %s\n", e.what());
  return 1;
}
