// memory_history.cpp: record what the pools do, label it by phase, and open it in Perfetto.
//
// Two streams run a few "training steps": a forward phase allocates activations, a backward
// phase allocates a gradient and frees the activations on another stream after an event. With
// history recording on, every allocation carries its phase (memory_scope) and the rule that let
// soma reuse memory for it; the trace written at the end opens in ui.perfetto.dev or
// chrome://tracing.
//
//   ./example_memory_history [trace.json]
#include <soma/soma.hpp>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) try {
  const std::string path = argc > 1 ? argv[1] : "soma_history.json";
  soma::history::record(1 << 16);  // the last 65536 events (4 MiB)

  soma::stream compute;
  soma::stream copies;
  for (int step = 0; step < 3; ++step) {
    std::vector<soma::unique_async_ptr<float>> activations;
    {
      const soma::memory_scope forward("forward");
      for (int layer = 0; layer < 4; ++layer)
        activations.push_back(soma::make_unique_async<float>((layer + 1) << 18, compute));
    }
    soma::event done;
    done.record(compute);
    copies.wait(done);
    const soma::memory_scope backward("backward");
    auto gradient = soma::make_unique_async<float>(1 << 18, copies);
    // S2: freed on `copies`, after the event made it wait for `compute`.
    for (auto& a : activations) a.reset(copies);
  }
  copies.synchronize();
  soma::pool::default_for(0).trim_to(0);  // S9: give the memory back

  // An allocation a capped pool cannot serve: the trace keeps the failure and its advice.
  soma::pool_options capped;
  capped.max_size_bytes = 16 << 20;
  capped.name = "capped";
  const soma::pool small(capped);
  try {
    auto too_big = soma::make_unique_async<char>(32 << 20, compute, small);
  } catch (const soma::bad_alloc& e) {
    std::printf("refused as expected: %s\n", e.what());
  }

  soma::history::export_trace(path);
  std::printf("wrote %s: open it at https://ui.perfetto.dev or chrome://tracing\n", path.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "memory_history failed: %s\n", e.what());
  return 1;
}
