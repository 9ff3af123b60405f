// graph_vs_driver: soma's graphs with memory nodes (S15) against the driver's own graph memory
// nodes, in one process on one GPU, same graphs, same run.
//
// The graph: 8 times [alloc 1 MiB -> memset -> (kernel) -> free], each alloc after the previous
// free, built node by node (soma: the kernel enters as a native child graph). Per variant
// (without and with the kernels) and per allocator:
//   build        building the graph, µs
//   instantiate  instantiating it, µs
//   enqueue      one launch, enqueue only (host time per launch over many launches), µs
//   run          one launch and a stream synchronize, µs
//   reserved     graph reserved memory after the launches (ReservedMemCurrent), MiB
// Each time is the median of several trials; trials alternate between soma and the driver.
//
// Usage: graph_vs_driver [--quick]   (SOMA_BACKEND defaults to cuda; exit 2 if soma is not on cuda)
#include <soma/soma.h>

#include "bench_support.hpp"

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
using soma_bench::median;
using soma_bench::seconds_since;

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr int kSteps = 8;
constexpr std::size_t kBytes = 1 * MiB;

#define CUDA_CHECK(call)                                                           \
  do {                                                                             \
    const cudaError_t status_ = (call);                                            \
    if (status_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(status_)); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)
#define SOMA_CHECK(call)                                                            \
  do {                                                                              \
    const somaError_t status_ = (call);                                             \
    if (status_ != somaSuccess) {                                                   \
      std::fprintf(stderr, "%s failed: %s: %s\n", #call, somaGetErrorName(status_), \
                   somaGetLastErrorMessage());                                      \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

__global__ void touch_kernel(unsigned char* bytes, std::size_t count) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride)
    bytes[i] = static_cast<unsigned char>(bytes[i] + 1);
}

struct figures {
  double build_us = 0;
  double instantiate_us = 0;
  double enqueue_us = 0;
  double run_us = 0;
  double reserved_mib = 0;
};

struct settings {
  int trials = 11;
  int launches = 1000;
};

// A CUDA graph holding one kernel over pointer, made by capturing a side stream.
cudaGraph_t kernel_graph(cudaStream_t side, void* pointer) {
  cudaGraph_t g = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(side, cudaStreamCaptureModeRelaxed));
  touch_kernel<<<64, 256, 0, side>>>(static_cast<unsigned char*>(pointer), kBytes);
  CUDA_CHECK(cudaStreamEndCapture(side, &g));
  return g;
}

// ---- the driver's graph memory nodes ------------------------------------------------------

cudaGraph_t build_driver(bool kernels, cudaStream_t side) {
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaGraphCreate(&graph, 0));
  cudaGraphNode_t last = nullptr;
  for (int i = 0; i < kSteps; ++i) {
    cudaMemAllocNodeParams p{};
    p.poolProps.allocType = cudaMemAllocationTypePinned;
    p.poolProps.location.type = cudaMemLocationTypeDevice;
    p.poolProps.location.id = 0;
    p.bytesize = kBytes;
    cudaGraphNode_t alloc = nullptr, set = nullptr, release = nullptr;
    CUDA_CHECK(cudaGraphAddMemAllocNode(&alloc, graph, last ? &last : nullptr, last ? 1 : 0, &p));
    cudaMemsetParams m{};
    m.dst = p.dptr;
    m.value = i;
    m.elementSize = 1;
    m.width = kBytes;
    m.height = 1;
    CUDA_CHECK(cudaGraphAddMemsetNode(&set, graph, &alloc, 1, &m));
    cudaGraphNode_t before_free = set;
    if (kernels) {
      cudaGraph_t child = kernel_graph(side, p.dptr);
      cudaGraphNode_t k = nullptr;
      CUDA_CHECK(cudaGraphAddChildGraphNode(&k, graph, &set, 1, child));
      CUDA_CHECK(cudaGraphDestroy(child));
      before_free = k;
    }
    CUDA_CHECK(cudaGraphAddMemFreeNode(&release, graph, &before_free, 1, p.dptr));
    last = release;
  }
  return graph;
}

struct samples {
  std::vector<double> build, inst, enqueue, run;
  std::uint64_t reserved = 0;
  figures medians() const {
    return {median(build), median(inst), median(enqueue), median(run),
            static_cast<double>(reserved) / MiB};
  }
};

void trial_driver(bool kernels, const settings& s, cudaStream_t stream, cudaStream_t side,
                  samples& out) {
  auto& [build, inst, enqueue, run, reserved] = out;
  {
    auto start = clock_type::now();
    cudaGraph_t graph = build_driver(kernels, side);
    build.push_back(seconds_since(start) * 1e6);
    start = clock_type::now();
    cudaGraphExec_t exec = nullptr;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    inst.push_back(seconds_since(start) * 1e6);
    CUDA_CHECK(cudaGraphLaunch(exec, stream));  // maps memory: not timed
    CUDA_CHECK(cudaStreamSynchronize(stream));
    start = clock_type::now();
    for (int i = 0; i < s.launches; ++i) CUDA_CHECK(cudaGraphLaunch(exec, stream));
    enqueue.push_back(seconds_since(start) * 1e6 / s.launches);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    start = clock_type::now();
    for (int i = 0; i < s.launches / 4; ++i) {
      CUDA_CHECK(cudaGraphLaunch(exec, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    run.push_back(seconds_since(start) * 1e6 / (s.launches / 4));
    CUDA_CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &reserved));
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaDeviceGraphMemTrim(0));
  }
}

// ---- soma's graphs -----------------------------------------------------------------------

struct soma_graph {
  somaGraph_t graph = nullptr;
  std::vector<cudaGraph_t> children;  // kept until the graph is instantiated
};

soma_graph build_soma(bool kernels, cudaStream_t side) {
  soma_graph made;
  SOMA_CHECK(somaGraphCreate(&made.graph, 0));
  somaGraphNode_t last = nullptr;
  for (int i = 0; i < kSteps; ++i) {
    somaMemAllocNodeParams p{};
    p.poolProps.allocType = somaMemAllocationTypePinned;
    p.poolProps.location.type = somaMemLocationTypeDevice;
    p.poolProps.location.id = 0;
    p.bytesize = kBytes;
    somaGraphNode_t alloc = nullptr, set = nullptr, release = nullptr;
    SOMA_CHECK(
        somaGraphAddMemAllocNode(&alloc, made.graph, last ? &last : nullptr, last ? 1 : 0, &p));
    somaMemsetParams m{};
    m.dst = p.dptr;
    m.value = static_cast<unsigned>(i);
    m.elementSize = 1;
    m.width = kBytes;
    m.height = 1;
    SOMA_CHECK(somaGraphAddMemsetNode(&set, made.graph, &alloc, 1, &m));
    somaGraphNode_t before_free = set;
    if (kernels) {
      cudaGraph_t child = kernel_graph(side, p.dptr);
      somaGraphNode_t k = nullptr;
      SOMA_CHECK(somaGraphAddNativeChildGraphNode(&k, made.graph, &set, 1, child));
      made.children.push_back(child);
      before_free = k;
    }
    SOMA_CHECK(somaGraphAddMemFreeNode(&release, made.graph, &before_free, 1, p.dptr));
    last = release;
  }
  return made;
}

void trial_soma(bool kernels, const settings& s, somaStream_t stream, cudaStream_t side,
                samples& out) {
  auto& [build, inst, enqueue, run, reserved] = out;
  {
    auto start = clock_type::now();
    soma_graph g = build_soma(kernels, side);
    build.push_back(seconds_since(start) * 1e6);
    start = clock_type::now();
    somaGraphExec_t exec = nullptr;
    SOMA_CHECK(somaGraphInstantiate(&exec, g.graph, 0));
    inst.push_back(seconds_since(start) * 1e6);
    for (cudaGraph_t child : g.children) CUDA_CHECK(cudaGraphDestroy(child));
    SOMA_CHECK(somaGraphLaunch(exec, stream));  // maps memory: not timed
    SOMA_CHECK(somaStreamSynchronize(stream));
    start = clock_type::now();
    for (int i = 0; i < s.launches; ++i) SOMA_CHECK(somaGraphLaunch(exec, stream));
    enqueue.push_back(seconds_since(start) * 1e6 / s.launches);
    SOMA_CHECK(somaStreamSynchronize(stream));
    start = clock_type::now();
    for (int i = 0; i < s.launches / 4; ++i) {
      SOMA_CHECK(somaGraphLaunch(exec, stream));
      SOMA_CHECK(somaStreamSynchronize(stream));
    }
    run.push_back(seconds_since(start) * 1e6 / (s.launches / 4));
    SOMA_CHECK(somaDeviceGetGraphMemAttribute(0, somaGraphMemAttrReservedMemCurrent, &reserved));
    SOMA_CHECK(somaGraphExecDestroy(exec));
    SOMA_CHECK(somaGraphDestroy(g.graph));
    SOMA_CHECK(somaDeviceGraphMemTrim(0));
  }
}

// Trials alternate between the allocators, so drift of the machine affects both alike.
void measure(bool kernels, const settings& s, figures& soma_figures, figures& driver_figures) {
  cudaStream_t stream = nullptr, side = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  somaStream_t soma_stream = nullptr;
  SOMA_CHECK(somaStreamCreateWithFlags(&soma_stream, somaStreamNonBlocking));
  samples soma_samples, driver_samples;
  for (int t = 0; t < s.trials; ++t) {
    trial_driver(kernels, s, stream, side, driver_samples);
    trial_soma(kernels, s, soma_stream, side, soma_samples);
  }
  soma_figures = soma_samples.medians();
  driver_figures = driver_samples.medians();
  SOMA_CHECK(somaStreamDestroy(soma_stream));
  CUDA_CHECK(cudaStreamDestroy(side));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

void report(const char* variant, const figures& soma, const figures& driver) {
  auto line = [](const char* what, double s, double d, const char* unit) {
    std::printf("  %-12s %10.1f %10.1f %8.2f  %s\n", what, s, d, d > 0 ? s / d : 0.0, unit);
  };
  std::printf("%s\n  %-12s %10s %10s %8s\n", variant, "", "soma", "driver", "ratio");
  line("build", soma.build_us, driver.build_us, "us");
  line("instantiate", soma.instantiate_us, driver.instantiate_us, "us");
  line("enqueue", soma.enqueue_us, driver.enqueue_us, "us per launch");
  line("run", soma.run_us, driver.run_us, "us per launch + synchronize");
  line("reserved", soma.reserved_mib, driver.reserved_mib, "MiB graph memory");
}

}  // namespace

int main(int argc, char** argv) {
  settings s;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      s.trials = 5;
      s.launches = 200;
    } else {
      std::fprintf(stderr, "usage: graph_vs_driver [--quick]\n");
      return 2;
    }
  }
  ::setenv("SOMA_BACKEND", "cuda", 0);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "graph_vs_driver: no CUDA device\n");
    return 2;
  }
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaFree(nullptr));
  const char* backend = nullptr;
  if (somaGetBackendName(&backend) != somaSuccess || std::strcmp(backend, "cuda") != 0) {
    std::fprintf(stderr, "graph_vs_driver: soma is not on the cuda backend: %s\n",
                 somaGetLastErrorMessage());
    return 2;
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0;
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  std::printf("graph_vs_driver: %s, driver %d, %d trials, %d launches per trial\n", prop.name,
              driver, s.trials, s.launches);
  std::printf("graph: %d x [alloc %zu MiB -> memset -> (kernel) -> free], chained\n\n", kSteps,
              kBytes / MiB);
  for (bool kernels : {false, true}) {
    figures soma_figures, driver_figures;
    measure(kernels, s, soma_figures, driver_figures);
    report(kernels ? "memsets and kernels" : "memsets", soma_figures, driver_figures);
    std::printf("\n");
  }
  return 0;
}
