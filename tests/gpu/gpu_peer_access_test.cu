// Access across GPUs (S6, S13) with real kernels and a distributed engine on top: a kernel on
// device 1 reads and writes a device-0 pool's memory once somaMemPoolSetAccess granted it
// (cuMemSetAccess underneath), and NCCL all-reduces buffers allocated from soma pools across
// two GPUs. Needs two GPUs: with fewer every test reports SKIPPED with the reason.
//
// NCCL is loaded at run time (dlopen; SOMA_NCCL_LIBRARY names the file, else libnccl.so.2 on
// the library path), so the build needs no NCCL headers and the binary runs without NCCL,
// where the NCCL test skips with the reason.
#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "gpu_test_util.cuh"

// A named namespace: nvcc's generated stub cannot name a kernel inside an anonymous
// namespace when another anonymous namespace is visible through a using-directive.
namespace peer_kernels {
__global__ void add_one_kernel(const std::uint32_t* in, std::uint32_t* out, std::size_t count) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride)
    out[i] = in[i] + 1;
}
}  // namespace peer_kernels

namespace {

using namespace soma_gpu_test;
using peer_kernels::add_one_kernel;

class S6_GpuPeerAccess : public gpu_test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(gpu_test::SetUp());
    if (IsSkipped()) return;
    int devices = 0;
    SOMA_ASSERT_OK(somaGetDeviceCount(&devices));
    if (devices < 2) GTEST_SKIP() << "needs 2 GPUs, " << devices << " here";
    int can = 0;
    SOMA_ASSERT_OK(somaDeviceCanAccessPeer(&can, 1, 0));
    if (can == 0) GTEST_SKIP() << "device 1 cannot access device 0 (somaDeviceCanAccessPeer)";
  }

  /// A soma stream of `device`, its native stream usable for kernels with that device current.
  static somaStream_t stream_on(int device) {
    somaStream_t stream = nullptr;
    EXPECT_EQ(somaSetDevice(device), somaSuccess);
    EXPECT_EQ(somaStreamCreate(&stream), somaSuccess) << last_message();
    EXPECT_EQ(somaSetDevice(0), somaSuccess);
    return stream;
  }

  static somaError_t grant(somaMemPool_t pool, int device, somaMemAccessFlags flags) {
    const somaMemAccessDesc desc{{somaMemLocationTypeDevice, device}, flags};
    return somaMemPoolSetAccess(pool, &desc, 1);
  }
};

TEST_F(S6_GpuPeerAccess, KernelOnDevice1ReadsAndWritesADevice0PoolOnceGranted) {
  unique_pool pool(0);  // device 0
  somaStream_t owner = stream_on(0);
  somaStream_t peer = stream_on(1);
  constexpr std::size_t words = 4 * MiB;
  void* input = nullptr;
  void* output = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&input, words * 4, pool, owner));
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&output, words * 4, pool, owner));
  fill(owner, input, words, 0x5eed);
  CUDA_ASSERT_LAUNCHED();
  unique_event filled;
  SOMA_ASSERT_OK(somaEventRecord(filled, owner));

  // Before the grant soma refuses what it can see; the device-1 kernel would fault.
  EXPECT_EQ(somaMemsetAsync(output, 0, words * 4, peer), somaErrorNotPermitted);
  SOMA_ASSERT_OK(grant(pool, 1, somaMemAccessFlagsProtReadWrite));
  somaMemLocation location{somaMemLocationTypeDevice, 1};
  somaMemAccessFlags flags{};
  SOMA_ASSERT_OK(somaMemPoolGetAccess(&flags, pool, &location));
  EXPECT_EQ(flags, somaMemAccessFlagsProtReadWrite);

  SOMA_ASSERT_OK(somaStreamWaitEvent(peer, filled, 0));
  CUDA_ASSERT_OK(cudaSetDevice(1));
  add_one_kernel<<<1024, 256, 0, native_stream(peer)>>>(static_cast<std::uint32_t*>(input),
                                                        static_cast<std::uint32_t*>(output), words);
  CUDA_ASSERT_LAUNCHED();
  CUDA_ASSERT_OK(cudaSetDevice(0));
  unique_event added;
  SOMA_ASSERT_OK(somaEventRecord(added, peer));
  SOMA_ASSERT_OK(somaStreamWaitEvent(owner, added, 0));
  std::vector<std::uint32_t> host(words);
  SOMA_ASSERT_OK(somaMemcpyAsync(host.data(), output, words * 4, somaMemcpyDeviceToHost, owner));
  SOMA_ASSERT_OK(somaStreamSynchronize(owner));
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < words; ++i) wrong += host[i] != pattern_value(i, 0x5eed) + 1 ? 1 : 0;
  EXPECT_EQ(wrong, 0u) << "device 1 read device 0's words and wrote them back plus one";

  // Growth after the grant is accessible too: a fresh commit, written by device 1.
  void* later = nullptr;
  const std::size_t later_bytes = 256 * MiB;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&later, later_bytes, pool, owner));
  SOMA_ASSERT_OK(somaStreamSynchronize(owner));
  SOMA_ASSERT_OK(somaMemsetAsync(later, 0x3c, later_bytes, peer));
  unsigned long long* mismatches = nullptr;
  CUDA_ASSERT_OK(cudaMallocManaged(&mismatches, sizeof *mismatches));
  *mismatches = 0;
  SOMA_ASSERT_OK(somaStreamSynchronize(peer));
  CUDA_ASSERT_OK(cudaSetDevice(0));
  check_bytes_kernel<<<1024, 256, 0, native_stream(owner)>>>(static_cast<unsigned char*>(later),
                                                             later_bytes, 0x3c, mismatches);
  CUDA_ASSERT_LAUNCHED();
  SOMA_ASSERT_OK(somaStreamSynchronize(owner));
  EXPECT_EQ(*mismatches, 0u);
  CUDA_EXPECT_OK(cudaFree(mismatches));

  SOMA_ASSERT_OK(somaFreeAsync(input, owner));
  SOMA_ASSERT_OK(somaFreeAsync(output, owner));
  SOMA_ASSERT_OK(somaFreeAsync(later, owner));
  SOMA_ASSERT_OK(somaStreamSynchronize(owner));
  SOMA_ASSERT_OK(somaStreamDestroy(owner));
  SOMA_ASSERT_OK(somaStreamDestroy(peer));
}

// ---- NCCL, declared here: the few entry points the test calls (nccl.h's ABI) ---------------

using nccl_comm = struct nccl_comm_opaque*;
using nccl_result = int;
constexpr int nccl_float32 = 7;  // ncclFloat32
constexpr int nccl_sum = 0;      // ncclSum

struct nccl_api {
  nccl_result (*comm_init_all)(nccl_comm*, int, const int*) = nullptr;
  nccl_result (*all_reduce)(const void*, void*, std::size_t, int, int, nccl_comm,
                            cudaStream_t) = nullptr;
  nccl_result (*group_start)() = nullptr;
  nccl_result (*group_end)() = nullptr;
  nccl_result (*comm_destroy)(nccl_comm) = nullptr;
  const char* (*error_string)(nccl_result) = nullptr;
  std::string why_missing;

  static nccl_api load() {
    nccl_api api;
    const char* named = std::getenv("SOMA_NCCL_LIBRARY");
    const char* file = named != nullptr && *named != '\0' ? named : "libnccl.so.2";
    void* library = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* error = dlerror();
      api.why_missing = std::string(file) + ": " + (error != nullptr ? error : "dlopen failed");
      return api;
    }
    auto bind = [&](auto& member, const char* symbol) {
      void* found = dlsym(library, symbol);
      if (found == nullptr)
        api.why_missing += std::string(api.why_missing.empty() ? "" : ", ") + symbol + " missing";
      std::memcpy(&member, &found, sizeof found);
    };
    bind(api.comm_init_all, "ncclCommInitAll");
    bind(api.all_reduce, "ncclAllReduce");
    bind(api.group_start, "ncclGroupStart");
    bind(api.group_end, "ncclGroupEnd");
    bind(api.comm_destroy, "ncclCommDestroy");
    bind(api.error_string, "ncclGetErrorString");
    return api;  // the library stays loaded: NCCL's threads may outlive the test
  }
};

TEST_F(S6_GpuPeerAccess, NcclAllReduceOverBuffersFromSomaPools) {
  const nccl_api nccl = nccl_api::load();
  if (!nccl.why_missing.empty())
    GTEST_SKIP() << "NCCL not available: " << nccl.why_missing
                 << " (set SOMA_NCCL_LIBRARY to libnccl.so.2)";
  constexpr int kDevices = 2;
  const int device_list[kDevices] = {0, 1};
  nccl_comm comms[kDevices] = {};
  ASSERT_EQ(nccl.comm_init_all(comms, kDevices, device_list), 0) << "ncclCommInitAll";
  constexpr std::size_t count = 8 * MiB;  // floats per rank
  somaStream_t streams[kDevices] = {};
  void* send[kDevices] = {};
  void* receive[kDevices] = {};
  for (int d = 0; d < kDevices; ++d) {
    streams[d] = stream_on(d);
    // Each rank's buffers come from its device's default pool (somaMallocAsync on its stream).
    SOMA_ASSERT_OK(somaMallocAsync(&send[d], count * sizeof(float), streams[d]));
    SOMA_ASSERT_OK(somaMallocAsync(&receive[d], count * sizeof(float), streams[d]));
    std::vector<float> values(count);
    for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<float>((d + 1) * (i % 1000));
    SOMA_ASSERT_OK(somaMemcpyAsync(send[d], values.data(), count * sizeof(float),
                                   somaMemcpyHostToDevice, streams[d]));
    SOMA_ASSERT_OK(somaStreamSynchronize(streams[d]));
  }
  ASSERT_EQ(nccl.group_start(), 0);
  for (int d = 0; d < kDevices; ++d) {
    CUDA_ASSERT_OK(cudaSetDevice(d));
    const nccl_result r = nccl.all_reduce(send[d], receive[d], count, nccl_float32, nccl_sum,
                                          comms[d], native_stream(streams[d]));
    ASSERT_EQ(r, 0) << "ncclAllReduce: " << nccl.error_string(r);
  }
  ASSERT_EQ(nccl.group_end(), 0);
  CUDA_ASSERT_OK(cudaSetDevice(0));
  for (int d = 0; d < kDevices; ++d) {
    std::vector<float> result(count);
    SOMA_ASSERT_OK(somaMemcpyAsync(result.data(), receive[d], count * sizeof(float),
                                   somaMemcpyDeviceToHost, streams[d]));
    SOMA_ASSERT_OK(somaStreamSynchronize(streams[d]));
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i)
      wrong += result[i] != static_cast<float>(3 * (i % 1000)) ? 1 : 0;  // 1x + 2x
    EXPECT_EQ(wrong, 0u) << "rank " << d << ": the sum over both GPUs";
    SOMA_ASSERT_OK(somaFreeAsync(send[d], streams[d]));
    SOMA_ASSERT_OK(somaFreeAsync(receive[d], streams[d]));
    SOMA_ASSERT_OK(somaStreamSynchronize(streams[d]));
  }
  for (int d = 0; d < kDevices; ++d) {
    (void)nccl.comm_destroy(comms[d]);
    SOMA_ASSERT_OK(somaStreamDestroy(streams[d]));
  }
}

}  // namespace
