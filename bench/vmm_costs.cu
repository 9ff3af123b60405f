// vmm_costs: what the driver's virtual memory calls cost at the sizes a pool uses them, so that
// remapping and growth can be made cheap where the cost is (issue: PyTorch's inference loop
// reaches its peak again by remapping, and that one call took 3-4x native's time on an H200).
//
// For n granules (1, 16, 256) on device 0, host time in microseconds:
//   create      cuMemCreate of one granule, per call; and of n granules in one allocation
//   map         cuMemMap of one granule, per call
//   access      cuMemSetAccess over n granules in one call
//   unmap       cuMemUnmap a granule at a time (per call), and of all n mappings in one call
//   release     cuMemRelease of one granule, per call
// Then each call again while a kernel of about 20 ms runs on another stream, memory unrelated
// to it: a call that takes about as long as the kernel waits for the device (the driver says
// cuMemUnmap is "synchronous for most use cases").
// Each figure is the median of several rounds.
//
// Usage: vmm_costs [--quick]
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

struct driver {
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
  PFN_cuMemAddressReserve_v10020 reserve = nullptr;
  PFN_cuMemAddressFree_v10020 address_free = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
};

template <typename F>
void entry(const char* name, F* out) {
  cudaDriverEntryPointQueryResult found{};
  void* pointer = nullptr;
  if (cudaGetDriverEntryPointByVersion(name, &pointer, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    std::fprintf(stderr, "vmm_costs: no driver entry point %s\n", name);
    std::exit(2);
  }
  *out = reinterpret_cast<F>(pointer);
}

void check(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return;
  std::fprintf(stderr, "vmm_costs: %s failed (CUresult %d)\n", what, static_cast<int>(result));
  std::exit(1);
}

double us_since(clock_type::time_point start) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

struct setup {
  driver d;
  CUmemAllocationProp prop{};
  CUmemAccessDesc access{};
  std::size_t granule = 0;
};

/// One round's figures for n granules, in microseconds.
struct round_figures {
  double create_each = 0, create_whole = 0, map_each = 0, access_all = 0;
  double unmap_each = 0, unmap_all = 0, release_each = 0;
};

round_figures one_round(const setup& s, int n) {
  const driver& d = s.d;
  const std::size_t bytes = s.granule * static_cast<std::size_t>(n);
  round_figures f;
  CUdeviceptr base = 0;
  check(d.reserve(&base, bytes, s.granule, 0, 0), "cuMemAddressReserve");
  std::vector<CUmemGenericAllocationHandle> handles(static_cast<std::size_t>(n));

  auto start = clock_type::now();
  for (auto& h : handles) check(d.create(&h, s.granule, &s.prop, 0), "cuMemCreate");
  f.create_each = us_since(start) / n;
  CUmemGenericAllocationHandle whole = 0;
  start = clock_type::now();
  check(d.create(&whole, bytes, &s.prop, 0), "cuMemCreate (whole)");
  f.create_whole = us_since(start);
  check(d.release(whole), "cuMemRelease (whole)");

  auto map_all = [&] {
    for (int i = 0; i < n; ++i)
      check(d.map(base + s.granule * i, s.granule, 0, handles[static_cast<std::size_t>(i)], 0),
            "cuMemMap");
  };
  start = clock_type::now();
  map_all();
  f.map_each = us_since(start) / n;
  start = clock_type::now();
  check(d.set_access(base, bytes, &s.access, 1), "cuMemSetAccess");
  f.access_all = us_since(start);

  start = clock_type::now();
  for (int i = 0; i < n; ++i) check(d.unmap(base + s.granule * i, s.granule), "cuMemUnmap");
  f.unmap_each = us_since(start) / n;
  map_all();
  start = clock_type::now();
  check(d.unmap(base, bytes), "cuMemUnmap (all mappings in one call)");
  f.unmap_all = us_since(start);

  start = clock_type::now();
  for (auto h : handles) check(d.release(h), "cuMemRelease");
  f.release_each = us_since(start) / n;
  check(d.address_free(base, bytes), "cuMemAddressFree");
  return f;
}

/// Each call once while a kernel of about kernel_ms runs on another stream: microseconds.
void while_busy(const setup& s, long long cycles, double kernel_ms) {
  const driver& d = s.d;
  cudaStream_t busy = nullptr;
  cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking);
  CUdeviceptr base = 0;
  check(d.reserve(&base, s.granule, s.granule, 0, 0), "cuMemAddressReserve");
  CUmemGenericAllocationHandle h = 0;
  double create = 0, map = 0, access = 0, unmap = 0, release = 0;
  auto busy_now = [&] {
    spin<<<1, 1, 0, busy>>>(cycles);
    cudaStreamQuery(busy);  // flushes the launch to the device
  };
  busy_now();
  auto start = clock_type::now();
  check(d.create(&h, s.granule, &s.prop, 0), "cuMemCreate");
  create = us_since(start);
  cudaStreamSynchronize(busy);
  busy_now();
  start = clock_type::now();
  check(d.map(base, s.granule, 0, h, 0), "cuMemMap");
  map = us_since(start);
  cudaStreamSynchronize(busy);
  busy_now();
  start = clock_type::now();
  check(d.set_access(base, s.granule, &s.access, 1), "cuMemSetAccess");
  access = us_since(start);
  cudaStreamSynchronize(busy);
  busy_now();
  start = clock_type::now();
  check(d.unmap(base, s.granule), "cuMemUnmap");
  unmap = us_since(start);
  cudaStreamSynchronize(busy);
  busy_now();
  start = clock_type::now();
  check(d.release(h), "cuMemRelease");
  release = us_since(start);
  cudaStreamSynchronize(busy);
  check(d.address_free(base, s.granule), "cuMemAddressFree");
  cudaStreamDestroy(busy);
  std::printf("\nwhile a kernel of %.1f ms runs on another stream (one granule, us):\n", kernel_ms);
  std::printf(
      "  cuMemCreate %.1f   cuMemMap %.1f   cuMemSetAccess %.1f   cuMemUnmap %.1f   "
      "cuMemRelease %.1f\n",
      create, map, access, unmap, release);
  std::printf("  (a call near %.0f us waits for the device)\n", kernel_ms * 1000);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  if (cudaFree(nullptr) != cudaSuccess) {
    std::fprintf(stderr, "vmm_costs: no usable GPU\n");
    return 2;
  }
  setup s;
  entry("cuMemCreate", &s.d.create);
  entry("cuMemRelease", &s.d.release);
  entry("cuMemMap", &s.d.map);
  entry("cuMemUnmap", &s.d.unmap);
  entry("cuMemSetAccess", &s.d.set_access);
  entry("cuMemAddressReserve", &s.d.reserve);
  entry("cuMemAddressFree", &s.d.address_free);
  entry("cuMemGetAllocationGranularity", &s.d.granularity);
  s.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  s.prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  s.prop.location.id = 0;
  check(s.d.granularity(&s.granule, &s.prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
        "cuMemGetAllocationGranularity");
  s.access.location = s.prop.location;
  s.access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;

  cudaDeviceProp props{};
  cudaGetDeviceProperties(&props, 0);
  std::printf("vmm_costs: %s, granule %zu KiB; host us, median of %d rounds\n", props.name,
              s.granule >> 10, quick ? 3 : 7);
  std::printf("%-10s %12s %14s %10s %14s %12s %14s %12s\n", "granules", "create/call",
              "create whole", "map/call", "access (all)", "unmap/call", "unmap (all)",
              "release/call");
  for (int n : {1, 16, 256}) {
    std::vector<round_figures> rounds;
    for (int r = 0; r < (quick ? 3 : 7); ++r) rounds.push_back(one_round(s, n));
    auto med = [&](double round_figures::*field) {
      std::vector<double> v;
      for (const auto& f : rounds) v.push_back(f.*field);
      return median(v);
    };
    std::printf("%-10d %12.1f %14.1f %10.2f %14.1f %12.1f %14.1f %12.1f\n", n,
                med(&round_figures::create_each), med(&round_figures::create_whole),
                med(&round_figures::map_each), med(&round_figures::access_all),
                med(&round_figures::unmap_each), med(&round_figures::unmap_all),
                med(&round_figures::release_each));
  }

  // A kernel of about 20 ms: its clock rate measured with events first.
  cudaEvent_t begin = nullptr, end = nullptr;
  cudaEventCreate(&begin);
  cudaEventCreate(&end);
  auto kernel_ms_of = [&](long long spin_cycles) {
    cudaEventRecord(begin);
    spin<<<1, 1>>>(spin_cycles);
    cudaEventRecord(end);
    cudaEventSynchronize(end);
    float ms = 0;
    cudaEventElapsedTime(&ms, begin, end);
    return ms;
  };
  const long long probe_cycles = 10'000'000;
  const float probe_ms = kernel_ms_of(probe_cycles);
  const long long cycles =
      static_cast<long long>(static_cast<double>(probe_cycles) * 20.0 / std::max(probe_ms, 0.01f));
  const float kernel_ms = kernel_ms_of(cycles);
  while_busy(s, cycles, kernel_ms);
  return 0;
}
