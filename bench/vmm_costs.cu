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
// Then cuMemSetAccess over 16 and 256 granules by how the range is backed: one allocation, an
// allocation a granule, and those same allocations mapped at a second address (what a remap
// pays): is its cost per byte or per allocation, and is it paid again? And one allocation's
// granules mapped at a second address a granule at a time by offset, in order and reversed (what
// a remap would pay with granules carved from larger allocations). Then a kernel's random reads
// over 4 GiB from cudaMalloc, from one allocation and from a granule per allocation (does the
// backing change what the device pays, e.g. in TLB misses?). Then each call again while a kernel of
// about 20 ms runs on another stream, memory unrelated to it: a call that takes about as long as
// the kernel waits for the device (the driver says cuMemUnmap is "synchronous for most use cases").
// Last, a remap of 10 and 64 granules (cuMemMap each, one cuMemSetAccess) in the middle of a
// step's 400 kernel launches, four ways: none (the kernel after it writes memory mapped before),
// on the launching thread (what a pool does today), the same and the old addresses unmapped too
// (+unmap: what a pool does once their frees complete), and on a helper thread while the stream
// waits for it on a flag in pinned host memory (cuStreamWaitValue32), the launching thread going
// on at once. Kernels of about 2 us (the host paces the step) and about 20 us (the device does):
// does a remap stall the device, the launching thread, or neither, and would a helper hide it? Each
// figure is the median of several rounds.
//
// Then the same remap amid memory-bound kernels (a copy over every SM) of about 25 us and 1 ms,
// none, inline and +unmap: does a map, or an unmap of the old addresses, slow the device's work?
//
// Usage: vmm_costs [--quick] [--remaps-only]   (--remaps-only: the two remap tables alone)
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <thread>
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
  PFN_cuStreamWaitValue32_v11070 wait_value = nullptr;
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
  if (std::any_of(v.begin(), v.end(), [](double x) { return std::isnan(x); })) return std::nan("");
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// The median over rounds of one field of their figures.
template <typename Figures>
double median_of(const std::vector<Figures>& rounds, double Figures::*field) {
  std::vector<double> v;
  for (const Figures& f : rounds) v.push_back(f.*field);
  return median(v);
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

/// Maps each handle, one granule, at base + i granules: a cuMemMap each (no offset but 0 maps).
void map_granules(const setup& s, CUdeviceptr base,
                  const std::vector<CUmemGenericAllocationHandle>& handles) {
  for (std::size_t i = 0; i < handles.size(); ++i)
    check(s.d.map(base + s.granule * i, s.granule, 0, handles[i], 0), "cuMemMap");
}

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

  start = clock_type::now();
  map_granules(s, base, handles);
  f.map_each = us_since(start) / n;
  start = clock_type::now();
  check(d.set_access(base, bytes, &s.access, 1), "cuMemSetAccess");
  f.access_all = us_since(start);

  start = clock_type::now();
  for (int i = 0; i < n; ++i) check(d.unmap(base + s.granule * i, s.granule), "cuMemUnmap");
  f.unmap_each = us_since(start) / n;
  map_granules(s, base, handles);
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

/// cuMemSetAccess over n granules, us, for the backings of the same range. The last two map one
/// allocation's granules at a second address, a cuMemMap each at its offset (what a remap would
/// pay if the pool's granules were parts of larger allocations): NaN where the driver refuses an
/// offset other than 0.
struct access_shapes {
  double one_allocation = 0, allocation_per_granule = 0, mapped_again = 0;
  double offsets_in_order = 0, offsets_reversed = 0;
};

access_shapes access_by_shape(const setup& s, int n) {
  const driver& d = s.d;
  const std::size_t bytes = s.granule * static_cast<std::size_t>(n);
  access_shapes a;
  CUdeviceptr base = 0, second = 0;
  check(d.reserve(&base, bytes, s.granule, 0, 0), "cuMemAddressReserve");
  check(d.reserve(&second, bytes, s.granule, 0, 0), "cuMemAddressReserve");
  auto timed_access = [&](CUdeviceptr at) {
    const auto start = clock_type::now();
    check(d.set_access(at, bytes, &s.access, 1), "cuMemSetAccess");
    return us_since(start);
  };
  CUmemGenericAllocationHandle whole = 0;
  check(d.create(&whole, bytes, &s.prop, 0), "cuMemCreate (whole)");
  check(d.map(base, bytes, 0, whole, 0), "cuMemMap (whole)");
  a.one_allocation = timed_access(base);
  // cuda.h says both that the offset must be a multiple of the granularity and that it "currently
  // must be zero" (driver 580.159.04 refuses any other: docs/benchmarks.md): a granule at a time
  // at its offset, in order and reversed (a remap's granules need not keep their order), at the
  // second address while the first mapping stays.
  auto map_offsets = [&](bool reversed) {
    for (int i = 0; i < n; ++i) {
      const int from = reversed ? n - 1 - i : i;
      const CUresult mapped = d.map(second + s.granule * i, s.granule,
                                    s.granule * static_cast<std::size_t>(from), whole, 0);
      if (mapped != CUDA_SUCCESS) {
        if (i > 0) check(d.unmap(second, s.granule * static_cast<std::size_t>(i)), "cuMemUnmap");
        return false;
      }
    }
    return true;
  };
  for (bool reversed : {false, true}) {
    double& figure = reversed ? a.offsets_reversed : a.offsets_in_order;
    if (map_offsets(reversed)) {
      figure = timed_access(second);
      check(d.unmap(second, bytes), "cuMemUnmap");
    } else {
      figure = std::nan("");
    }
  }
  check(d.unmap(base, bytes), "cuMemUnmap");
  check(d.release(whole), "cuMemRelease");
  std::vector<CUmemGenericAllocationHandle> handles(static_cast<std::size_t>(n));
  for (auto& h : handles) check(d.create(&h, s.granule, &s.prop, 0), "cuMemCreate");
  map_granules(s, base, handles);
  a.allocation_per_granule = timed_access(base);
  // What a remap pays: the same allocations, still mapped and accessible at base, mapped at a
  // second address.
  map_granules(s, second, handles);
  a.mapped_again = timed_access(second);
  check(d.unmap(second, bytes), "cuMemUnmap");
  check(d.unmap(base, bytes), "cuMemUnmap");
  for (auto h : handles) check(d.release(h), "cuMemRelease");
  check(d.address_free(second, bytes), "cuMemAddressFree");
  check(d.address_free(base, bytes), "cuMemAddressFree");
  return a;
}

/// Reads of 16 bytes at pseudo-random places across the buffer; the sum keeps them.
__global__ void gather(const uint4* data, std::size_t count, std::size_t reads, unsigned* out) {
  std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  unsigned long long x = i * 0x9E3779B97F4A7C15ull + 1;
  unsigned sum = 0;
  for (std::size_t r = 0; r < reads; ++r) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const uint4 v = data[x % count];
    sum += v.x ^ v.w;
  }
  if (sum == 0xFFFFFFFFu) *out = sum;
}

/// Milliseconds for the gather over bytes at base (median of rounds).
double gather_ms(CUdeviceptr base, std::size_t bytes, unsigned* out, int rounds) {
  cudaEvent_t begin = nullptr, end = nullptr;
  cudaEventCreate(&begin);
  cudaEventCreate(&end);
  std::vector<double> times;
  for (int r = 0; r < rounds + 1; ++r) {
    cudaEventRecord(begin);
    gather<<<1024, 256>>>(reinterpret_cast<const uint4*>(base), bytes / sizeof(uint4), 256, out);
    cudaEventRecord(end);
    cudaEventSynchronize(end);
    float ms = 0;
    cudaEventElapsedTime(&ms, begin, end);
    if (r > 0) times.push_back(ms);  // the first round warms up
  }
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  return median(times);
}

/// The gather over 4 GiB from cudaMalloc, from one VMM allocation, from a granule per allocation.
void gather_by_backing(const setup& s, int rounds) {
  const driver& d = s.d;
  const std::size_t bytes = std::size_t{4} << 30;
  const int n = static_cast<int>(bytes / s.granule);
  unsigned* out = nullptr;
  cudaMalloc(&out, sizeof(unsigned));
  void* plain = nullptr;
  if (cudaMalloc(&plain, bytes) != cudaSuccess) {
    std::printf("\nrandom reads: cudaMalloc of 4 GiB failed, skipped\n");
    return;
  }
  cudaMemset(plain, 1, bytes);
  const double plain_ms = gather_ms(reinterpret_cast<CUdeviceptr>(plain), bytes, out, rounds);
  cudaFree(plain);

  CUdeviceptr base = 0;
  check(d.reserve(&base, bytes, s.granule, 0, 0), "cuMemAddressReserve");
  CUmemGenericAllocationHandle whole = 0;
  check(d.create(&whole, bytes, &s.prop, 0), "cuMemCreate (whole)");
  check(d.map(base, bytes, 0, whole, 0), "cuMemMap (whole)");
  check(d.set_access(base, bytes, &s.access, 1), "cuMemSetAccess");
  cudaMemset(reinterpret_cast<void*>(base), 1, bytes);
  const double whole_ms = gather_ms(base, bytes, out, rounds);
  check(d.unmap(base, bytes), "cuMemUnmap");
  check(d.release(whole), "cuMemRelease");

  std::vector<CUmemGenericAllocationHandle> handles(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    check(d.create(&handles[static_cast<std::size_t>(i)], s.granule, &s.prop, 0), "cuMemCreate");
    check(d.map(base + s.granule * i, s.granule, 0, handles[static_cast<std::size_t>(i)], 0),
          "cuMemMap");
  }
  check(d.set_access(base, bytes, &s.access, 1), "cuMemSetAccess");
  cudaMemset(reinterpret_cast<void*>(base), 1, bytes);
  const double granules_ms = gather_ms(base, bytes, out, rounds);
  check(d.unmap(base, bytes), "cuMemUnmap");
  for (auto h : handles) check(d.release(h), "cuMemRelease");
  check(d.address_free(base, bytes), "cuMemAddressFree");
  cudaFree(out);
  std::printf(
      "\nrandom 16-byte reads over 4 GiB (262144 threads x 256 reads, ms, median of %d):\n"
      "  cudaMalloc %.3f   one VMM allocation %.3f   a VMM allocation per granule %.3f\n",
      rounds, plain_ms, whole_ms, granules_ms);
}

__global__ void touch_granules(char* base, std::size_t granule, int granules, int value) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < granules) base[static_cast<std::size_t>(i) * granule] = static_cast<char>(value);
}

/// A step's launches with a remap among them: milliseconds.
struct step_figures {
  double wall = 0, device = 0, launching = 0;
};

/// A step's kernel: a spin of one thread (no memory traffic) or, where `words` is not 0, a copy
/// across the whole device (memory-bound: what a map or unmap that stalls the device's memory
/// traffic would slow).
struct step_work {
  int launches = 400;
  long long spin_cycles = 0;
  const float4* in = nullptr;
  float4* out = nullptr;
  std::size_t words = 0;
  int blocks = 0;
};

__global__ void copy_words(const float4* in, float4* out, std::size_t words) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[i] = in[i];
}

enum class remap_mode { none, inline_, inline_unmap, helper };

/// The granules a remap maps again: each its own allocation, mapped and accessible at `old_base`
/// (free blocks' granules), and address space at `new_base` for the second mapping; a helper
/// thread that maps them there on a signal and then raises a flag the device can wait on.
class remap_bench {
 public:
  remap_bench(const setup& s, int granules) : s_(s), n_(granules), bytes_(s.granule * n_) {
    const driver& d = s_.d;
    check(d.reserve(&old_base_, bytes_, s_.granule, 0, 0), "cuMemAddressReserve");
    check(d.reserve(&new_base_, bytes_, s_.granule, 0, 0), "cuMemAddressReserve");
    handles_.resize(static_cast<std::size_t>(n_));
    for (auto& h : handles_) check(d.create(&h, s_.granule, &s_.prop, 0), "cuMemCreate");
    map_at(old_base_);
    cudaHostAlloc(reinterpret_cast<void**>(&flag_), sizeof(unsigned), cudaHostAllocMapped);
    *flag_ = 0;
    void* device_flag = nullptr;
    cudaHostGetDevicePointer(&device_flag, flag_, 0);
    device_flag_ = reinterpret_cast<CUdeviceptr>(device_flag);
    cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    cudaEventCreate(&begin_);
    cudaEventCreate(&end_);
    helper_ = std::thread([this] { serve(); });
  }
  remap_bench(const remap_bench&) = delete;
  remap_bench& operator=(const remap_bench&) = delete;
  ~remap_bench() {
    go_.store(-1, std::memory_order_release);
    helper_.join();
    const driver& d = s_.d;
    check(d.unmap(old_base_, bytes_), "cuMemUnmap");
    for (auto h : handles_) check(d.release(h), "cuMemRelease");
    check(d.address_free(new_base_, bytes_), "cuMemAddressFree");
    check(d.address_free(old_base_, bytes_), "cuMemAddressFree");
    cudaFreeHost(flag_);
    cudaStreamDestroy(stream_);
    cudaEventDestroy(begin_);
    cudaEventDestroy(end_);
  }

  /// `w.launches` launches of w's kernel; after the first quarter of them the remap (by mode),
  /// then a kernel that writes the first byte of every granule at the new address (the old one
  /// when mode is none).
  step_figures step(remap_mode mode, const step_work& w) {
    const driver& d = s_.d;
    cudaDeviceSynchronize();
    const auto start = clock_type::now();
    cudaEventRecord(begin_, stream_);
    CUdeviceptr target = old_base_;
    const int at = w.launches / 4;
    for (int i = 0; i < w.launches; ++i) {
      if (i == at && (mode == remap_mode::inline_ || mode == remap_mode::inline_unmap)) {
        map_again();
        // A pool unmaps a remap's old addresses once their frees complete, on a later call.
        if (mode == remap_mode::inline_unmap) check(d.unmap(old_base_, bytes_), "cuMemUnmap");
        target = new_base_;
      } else if (i == at && mode == remap_mode::helper) {
        ++round_;
        check(d.wait_value(stream_, device_flag_, round_, CU_STREAM_WAIT_VALUE_GEQ),
              "cuStreamWaitValue32");
        go_.store(round_, std::memory_order_release);
        target = new_base_;
      }
      if (i == at)
        touch_granules<<<(n_ + 127) / 128, 128, 0, stream_>>>(reinterpret_cast<char*>(target),
                                                              s_.granule, n_, i);
      if (w.words == 0)
        spin<<<1, 1, 0, stream_>>>(w.spin_cycles);
      else
        copy_words<<<w.blocks, 256, 0, stream_>>>(w.in, w.out, w.words);
    }
    cudaEventRecord(end_, stream_);
    step_figures f;
    f.launching = us_since(start) / 1000;
    cudaEventSynchronize(end_);
    f.wall = us_since(start) / 1000;
    float ms = 0;
    cudaEventElapsedTime(&ms, begin_, end_);
    f.device = ms;
    if (mode != remap_mode::none) check(d.unmap(new_base_, bytes_), "cuMemUnmap");
    if (mode == remap_mode::inline_unmap) map_at(old_base_);
    return f;
  }

 private:
  void map_again() { map_at(new_base_); }

  void map_at(CUdeviceptr base) {
    map_granules(s_, base, handles_);
    check(s_.d.set_access(base, bytes_, &s_.access, 1), "cuMemSetAccess");
  }

  /// The helper: waits (spinning: a wake-up would add its own latency) for a round, remaps, and
  /// raises the flag the stream waits on.
  void serve() {
    unsigned served = 0;
    for (;;) {
      const long long go = go_.load(std::memory_order_acquire);
      if (go < 0) return;
      if (static_cast<unsigned>(go) == served) {
        std::this_thread::yield();
        continue;
      }
      served = static_cast<unsigned>(go);
      map_again();
      std::atomic_ref<unsigned>(*flag_).store(served, std::memory_order_release);
    }
  }

  const setup& s_;
  int n_;
  std::size_t bytes_;
  CUdeviceptr old_base_ = 0, new_base_ = 0, device_flag_ = 0;
  std::vector<CUmemGenericAllocationHandle> handles_;
  unsigned* flag_ = nullptr;
  unsigned round_ = 0;
  std::atomic<long long> go_{0};
  cudaStream_t stream_ = nullptr;
  cudaEvent_t begin_ = nullptr, end_ = nullptr;
  std::thread helper_;
};

const char* name_of(remap_mode mode) {
  switch (mode) {
    case remap_mode::none:
      return "none";
    case remap_mode::inline_:
      return "inline";
    case remap_mode::inline_unmap:
      return "+unmap";
    case remap_mode::helper:
      return "helper";
  }
  return "?";
}

/// `rounds` of w's step in each mode, the modes interleaved, then a row a mode: the medians of
/// wall, device and launching time.
void time_modes(remap_bench& bench, const step_work& w, std::span<const remap_mode> modes,
                int rounds, int granules, const std::string& kernel) {
  std::vector<std::vector<step_figures>> figures(modes.size());
  for (int r = 0; r < rounds; ++r)
    for (std::size_t m = 0; m < modes.size(); ++m) figures[m].push_back(bench.step(modes[m], w));
  for (std::size_t m = 0; m < modes.size(); ++m)
    std::printf("%-9d %-14s %-9s %10.3f %10.3f %11.3f\n", granules, kernel.c_str(),
                name_of(modes[m]), median_of(figures[m], &step_figures::wall),
                median_of(figures[m], &step_figures::device),
                median_of(figures[m], &step_figures::launching));
}

/// The remap beside a step's work, for kernels of about 2 and 20 us, rounds interleaved by mode.
void remap_beside_work(const setup& s, long long cycles_per_us, int rounds) {
  std::printf(
      "\na remap amid 400 launches on one stream (ms, median of %d rounds; wall from the first "
      "launch to the step's end, device between events around it, launching the host's time to "
      "enqueue it):\n",
      rounds);
  std::printf("%-9s %-14s %-9s %10s %10s %11s\n", "granules", "kernel", "remap", "wall", "device",
              "launching");
  const remap_mode modes[] = {remap_mode::none, remap_mode::inline_, remap_mode::inline_unmap,
                              remap_mode::helper};
  for (int granules : {10, 64}) {
    remap_bench bench(s, granules);
    for (int kernel_us : {2, 20}) {
      step_work w;
      w.spin_cycles = cycles_per_us * kernel_us;
      bench.step(remap_mode::none, w);  // warms the kernels and the stream up
      bench.step(remap_mode::helper, w);
      time_modes(bench, w, modes, rounds, granules, std::to_string(kernel_us) + " us");
    }
  }
}

/// The remap beside memory-bound kernels (a copy across every SM) of about 25 us and about 1 ms:
/// does mapping, or unmapping the old addresses, slow the device's own work (its time between
/// events), as a change of the page tables that every SM must see could?
void remap_beside_copies(const setup& s, int rounds) {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const std::size_t big = std::size_t{1} << 30;
  float4* in = nullptr;
  float4* out = nullptr;
  if (cudaMalloc(&in, big) != cudaSuccess || cudaMalloc(&out, big) != cudaSuccess) {
    std::printf("\nremap beside copies: no room for 2 GiB of buffers\n");
    return;
  }
  cudaMemset(in, 1, big);
  std::printf(
      "\na remap amid memory-bound kernels on one stream (a copy over every SM; ms, median of %d "
      "rounds; device: between events around the step, what a stalled kernel lengthens):\n",
      rounds);
  std::printf("%-9s %-14s %-9s %10s %10s %11s\n", "granules", "kernel", "remap", "wall", "device",
              "launching");
  const remap_mode modes[] = {remap_mode::none, remap_mode::inline_, remap_mode::inline_unmap};
  for (int granules : {10, 64}) {
    remap_bench bench(s, granules);
    for (std::size_t copied : {std::size_t{32} << 20, big}) {
      step_work w;
      w.in = in;
      w.out = out;
      w.words = copied / sizeof(float4);
      w.blocks = sms * 4;
      w.launches = copied == big ? 40 : 400;
      bench.step(remap_mode::none, w);  // warms the kernels and the stream up
      time_modes(bench, w, modes, rounds, granules,
                 std::to_string(copied >> 20) + " MiB x" + std::to_string(w.launches));
    }
  }
  cudaFree(in);
  cudaFree(out);
}

/// The calls one by one, access by backing, and reads by backing: the tables before the remaps.
void call_tables(const setup& s, bool quick) {
  std::printf("%-10s %12s %14s %10s %14s %12s %14s %12s\n", "granules", "create/call",
              "create whole", "map/call", "access (all)", "unmap/call", "unmap (all)",
              "release/call");
  for (int n : {1, 16, 256}) {
    std::vector<round_figures> rounds;
    for (int r = 0; r < (quick ? 3 : 7); ++r) rounds.push_back(one_round(s, n));
    auto med = [&](double round_figures::*field) { return median_of(rounds, field); };
    std::printf("%-10d %12.1f %14.1f %10.2f %14.1f %12.1f %14.1f %12.1f\n", n,
                med(&round_figures::create_each), med(&round_figures::create_whole),
                med(&round_figures::map_each), med(&round_figures::access_all),
                med(&round_figures::unmap_each), med(&round_figures::unmap_all),
                med(&round_figures::release_each));
  }

  std::printf(
      "\ncuMemSetAccess by backing (us, median of %d rounds; nan: cuMemMap refused an "
      "offset other than 0):\n",
      quick ? 3 : 7);
  std::printf("%-10s %16s %22s %28s %26s %18s\n", "granules", "one allocation",
              "an allocation a granule", "the same, mapped a 2nd time", "one allocation's granules",
              "the same, reversed");
  std::printf("%-10s %16s %22s %28s %26s %18s\n", "", "", "", "", "mapped a 2nd time by offset",
              "");
  for (int n : {16, 256}) {
    std::vector<access_shapes> rounds;
    for (int r = 0; r < (quick ? 3 : 7); ++r) rounds.push_back(access_by_shape(s, n));
    auto med = [&](double access_shapes::*field) { return median_of(rounds, field); };
    std::printf("%-10d %16.1f %22.1f %28.1f %26.1f %18.1f\n", n,
                med(&access_shapes::one_allocation), med(&access_shapes::allocation_per_granule),
                med(&access_shapes::mapped_again), med(&access_shapes::offsets_in_order),
                med(&access_shapes::offsets_reversed));
  }
  gather_by_backing(s, quick ? 3 : 7);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, remaps_only = false;
  for (int i = 1; i < argc; ++i) {
    quick = quick || std::strcmp(argv[i], "--quick") == 0;
    remaps_only = remaps_only || std::strcmp(argv[i], "--remaps-only") == 0;
  }
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
  entry("cuStreamWaitValue32", &s.d.wait_value);
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
  if (!remaps_only) call_tables(s, quick);

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
  if (!remaps_only) while_busy(s, cycles, kernel_ms);
  remap_beside_work(s, static_cast<long long>(static_cast<double>(cycles) / (kernel_ms * 1000)),
                    quick ? 5 : 9);
  remap_beside_copies(s, quick ? 5 : 9);
  return 0;
}
