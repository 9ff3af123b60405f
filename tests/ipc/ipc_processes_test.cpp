// S7 between real processes: an exporter and importers, each a process of its own with its own
// soma runtime (peer_processes.hpp), the pool handle passed with SCM_RIGHTS, export data as
// plain bytes. Pool memory is touched only by somaMemsetAsync / somaMemcpyAsync, so the same
// flows run on the cpu backend (CI) and on the GPU (label gpu).
//
// Each test is a row of the table at the end: the roles it runs, one process each, and the exit
// status each must reach. A role returns 0 or fails with a ROLE_* message. Most roles start the
// same way, so the two sides of a shared allocation are written once (exporter_side,
// importer_side). The order in which roles wait for each other is the lifetime rule of
// docs/ipc.md: the exporter frees an allocation only after its importers said they are done
// with it, except where a test breaks the rule on purpose.
#include <soma/soma.h>

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "descriptor_filler.hpp"
#include "peer_processes.hpp"
#include "soma_test_util.hpp"
#include "stream_gate.hpp"

namespace {

using soma_test::ipc::peer;
using soma_test::ipc::role_context;

constexpr std::size_t kSmall = 4096;
/// What an exporter that has nothing else to show writes into its allocation.
constexpr unsigned char kPlainFill = 0x45;

/// Offsets in export data (docs/ipc.md gives the layout).
constexpr std::size_t kExportIdAt = 16;
constexpr std::size_t kOffsetAt = 24;
constexpr std::size_t kSizeAt = 32;
constexpr std::size_t kNonceAt = 40;

/// Signals between roles.
enum signal_word : int {
  imported = 1,
  written = 2,
  checked = 3,
  done = 4,
  freed = 5,
};

/// One allocation as the exporter describes it to an importer.
struct shared_allocation {
  somaMemPoolPtrExportData data{};
  std::size_t bytes = 0;
};

somaMemPoolProps exportable_props(int device = 0) {
  return soma_test::pool_props(device, 0, somaMemHandleTypePosixFileDescriptor);
}

std::size_t granule() {
  int kib = 0;
  if (somaDeviceGetAttribute(&kib, somaDevAttrAllocationGranularityKiB, 0) != somaSuccess) return 0;
  return static_cast<std::size_t>(kib) * 1024;
}

void* handle_of(int fd) { return reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)); }

/// 0 if [pointer + offset, + bytes) of pool memory holds `value` in every byte; else a role
/// failure saying how many bytes differ.
int expect_bytes(const void* pointer, std::size_t offset, std::size_t bytes, unsigned char value,
                 somaStream_t stream, int line) {
  somaError_t status = somaSuccess;
  const soma_test::host_buffer copy = soma_test::read_back(
      static_cast<const unsigned char*>(pointer) + offset, bytes, stream, &status);
  if (status != somaSuccess) {
    return soma_test::ipc::role_failed(
        __FILE__, line, "read back",
        (std::string(somaGetErrorName(status)) + ": " + somaGetLastErrorMessage()).c_str());
  }
  const std::size_t wrong = copy.count_not(value);
  if (wrong == 0) return 0;
  return soma_test::ipc::role_failed(
      __FILE__, line, "bytes differ",
      (std::to_string(wrong) + " of " + std::to_string(bytes) + " bytes at offset " +
       std::to_string(offset) + " are not " + std::to_string(value))
          .c_str());
}
#define ROLE_EXPECT_BYTES(pointer, offset, bytes, value, stream) \
  ROLE_TRY(expect_bytes(pointer, offset, bytes, value, stream, __LINE__))

/// Exports pool to the role behind `to` (the descriptor goes by SCM_RIGHTS) and closes this
/// process's copy, as the owner of the descriptor must.
int send_pool(somaMemPool_t pool, const peer& to) {
  int fd = -1;
  ROLE_OK(somaMemPoolExportToShareableHandle(&fd, pool, somaMemHandleTypePosixFileDescriptor, 0));
  ROLE_CHECK(fd >= 0);
  ROLE_CHECK(to.send_value(0, fd));
  ::close(fd);
  return 0;
}

/// Receives a message that carries a descriptor; the receiver owns *fd.
int receive_descriptor(const peer& from, int* fd) {
  int word = -1;
  ROLE_CHECK(from.receive_value(&word, fd));
  ROLE_CHECK(*fd >= 0);
  return 0;
}

/// Receives a pool descriptor and imports it; the descriptor is closed afterwards (the pool
/// holds its own).
int receive_pool(const peer& from, somaMemPool_t* pool) {
  int fd = -1;
  ROLE_TRY(receive_descriptor(from, &fd));
  ROLE_OK(somaMemPoolImportFromShareableHandle(pool, handle_of(fd),
                                               somaMemHandleTypePosixFileDescriptor, 0));
  ::close(fd);
  return 0;
}

int send_allocation(void* pointer, std::size_t bytes, const peer& to) {
  shared_allocation shared;
  shared.bytes = bytes;
  ROLE_OK(somaMemPoolExportPointer(&shared.data, pointer));
  ROLE_CHECK(to.send_value(shared));
  return 0;
}

/// Presents export data with a wrong nonce and expects the refusal. The exporter's service
/// answers one request at a time, so once it refused, it has finished every earlier answer
/// (and closed the descriptors it sent with them).
int round_trip_refused(somaMemPool_t pool, const shared_allocation& shared) {
  somaMemPoolPtrExportData forged = shared.data;
  forged.reserved[kNonceAt] ^= 0x80;
  void* pointer = nullptr;
  ROLE_EXPECT_ERROR(somaMemPoolImportPointer(&pointer, pool, &forged), somaErrorInvalidValue,
                    "nonce");
  return 0;
}

// ---- the two sides of a shared allocation -------------------------------------------------------

/// The exporter's side: its stream, an exportable pool, and one allocation of `bytes` that is
/// filled and synchronized before it is shared (an importer may touch it at once). The pool is
/// destroyed when the role returns, unless destroy_pool checked that earlier.
struct exporter_side {
  exporter_side() = default;
  exporter_side(const exporter_side&) = delete;
  exporter_side& operator=(const exporter_side&) = delete;
  ~exporter_side() {
    if (pool != nullptr) (void)somaMemPoolDestroy(pool);
  }

  /// Creates the pool (S5: of host memory on NUMA node 0 when host_numa).
  int open(bool host_numa = false) {
    somaMemPoolProps props = exportable_props();
    if (host_numa) props.location = {somaMemLocationTypeHostNuma, 0};
    ROLE_OK(somaMemPoolCreate(&pool, &props));
    return 0;
  }
  /// Creates the pool, allocates `size` bytes from it and fills them with `fill`.
  int start(std::size_t size, unsigned char fill) {
    ROLE_TRY(open());
    ROLE_OK(somaMallocFromPoolAsync(&pointer, size, pool, stream));
    bytes = size;
    ROLE_OK(somaMemsetAsync(pointer, fill, size, stream));
    ROLE_OK(somaStreamSynchronize(stream));
    return 0;
  }
  /// Sends `to` a pool handle of its own and the allocation's export data.
  int share_with(const peer& to) const {
    ROLE_TRY(send_pool(pool, to));
    return send_allocation(pointer, bytes, to);
  }
  /// The lifetime rule: frees the allocation once `importer` sent `word`.
  int free_after(const peer& importer, signal_word word) {
    ROLE_CHECK(importer.wait_signal(word));
    ROLE_OK(somaFreeAsync(pointer, stream));
    ROLE_OK(somaStreamSynchronize(stream));
    return 0;
  }
  int destroy_pool() {
    ROLE_OK(somaMemPoolDestroy(std::exchange(pool, nullptr)));
    return 0;
  }

  soma_test::unique_stream stream;
  somaMemPool_t pool = nullptr;
  void* pointer = nullptr;
  std::size_t bytes = 0;
};

/// The importer's side: its peers (peers[0] is the exporter), its stream, the imported pool and
/// one imported allocation.
struct importer_side {
  explicit importer_side(role_context& role) : peers(role), exporter(role[0]) {}

  /// Receives the pool and one allocation's export data from the exporter and imports both.
  int import_shared() {
    ROLE_TRY(receive_pool(exporter, &pool));
    ROLE_CHECK(exporter.receive_value(&shared));
    ROLE_OK(somaMemPoolImportPointer(&pointer, pool, &shared.data));
    return 0;
  }
  /// Frees the pointer, destroys the pool, then tells the exporter it is done.
  int finish() {
    ROLE_OK(somaFreeAsync(pointer, stream));
    ROLE_OK(somaStreamSynchronize(stream));
    ROLE_OK(somaMemPoolDestroy(pool));
    ROLE_CHECK(exporter.signal(done));
    return 0;
  }

  role_context& peers;
  const peer& exporter;
  soma_test::unique_stream stream;
  somaMemPool_t pool = nullptr;
  shared_allocation shared;
  void* pointer = nullptr;
};

/// The role of an importer whose checks `Then` start once the pool and one allocation are
/// imported (kRoles names it `importer_role<Then>`).
template <int (*Then)(importer_side&)>
int importer_role(role_context& peers) {
  importer_side side(peers);
  ROLE_TRY(side.import_shared());
  return Then(side);
}

/// Shares one small allocation of kPlainFill with peers[1] and frees it once that importer is
/// done: the exporter of every test whose checks are all on the importer's side.
int plain_exporter(role_context& peers) {
  exporter_side side;
  ROLE_TRY(side.start(kSmall, kPlainFill));
  ROLE_TRY(side.share_with(peers[1]));
  return side.free_after(peers[1], done);
}

// ---- sharing a host-NUMA pool (S5, S7): host memory both hosts touch directly ------------------

/// Whether this process's backend has host-NUMA pools (a cuda driver may not).
bool host_numa_pools() {
  int supported = 0;
  return somaDeviceGetAttribute(&supported, somaDevAttrHostNumaMemoryPoolsSupported, 0) ==
             somaSuccess &&
         supported == 1;
}

int numa_exporter(role_context& peers) {
  const auto& importer = peers[1];
  if (!host_numa_pools()) {
    std::fprintf(stderr, "numa_exporter: no host-NUMA pools on this backend; nothing to test\n");
    ROLE_CHECK(importer.signal(done));
    return 0;
  }
  exporter_side side;
  ROLE_TRY(side.open(/*host_numa=*/true));
  ROLE_OK(somaMallocFromPoolAsync(&side.pointer, kSmall, side.pool, side.stream));
  side.bytes = kSmall;
  ROLE_OK(somaStreamSynchronize(side.stream));
  std::memset(side.pointer, 0x55, kSmall);  // the host writes host memory directly
  ROLE_TRY(side.share_with(importer));
  ROLE_CHECK(importer.wait_signal(written));
  const auto* bytes = static_cast<const unsigned char*>(side.pointer);
  ROLE_CHECK(bytes[0] == 0x55 && bytes[kSmall - 1] == 0x66);  // the importer's write
  return side.free_after(importer, done);
}

int numa_importer(role_context& peers) {
  if (!host_numa_pools()) return peers[0].wait_signal(done) ? 0 : 1;
  importer_side side(peers);
  ROLE_TRY(side.import_shared());
  somaPointerAttributes attributes{};
  ROLE_OK(somaPointerGetAttributes(&attributes, side.pointer));
  ROLE_CHECK(attributes.type == somaMemoryTypeHost && attributes.pool == side.pool);
  ROLE_CHECK(attributes.location.type == somaMemLocationTypeHostNuma);
  ROLE_CHECK(attributes.hostPointer == side.pointer);
  auto* bytes = static_cast<unsigned char*>(side.pointer);
  ROLE_CHECK(bytes[0] == 0x55 && bytes[kSmall / 2] == 0x55);
  bytes[kSmall - 1] = 0x66;
  ROLE_CHECK(side.exporter.signal(written));
  return side.finish();
}

// ---- sharing: both processes see the same bytes -----------------------------------------------

int share_exporter(role_context& peers) {
  const auto& importer = peers[1];
  exporter_side side;
  const std::size_t big = 3 * granule() + kSmall;  // more than one granule, not a multiple
  ROLE_TRY(side.start(big, 0x11));
  void* const a = side.pointer;
  const somaStream_t stream = side.stream;
  void* b = nullptr;
  ROLE_OK(somaMallocFromPoolAsync(&b, kSmall, side.pool, stream));
  ROLE_OK(somaMemsetAsync(b, 0x22, kSmall, stream));
  ROLE_OK(somaStreamSynchronize(stream));  // the importer touches the memory only after this
  ROLE_TRY(side.share_with(importer));
  ROLE_TRY(send_allocation(b, kSmall, importer));

  // The importer wrote the second half of a: this process sees it, the first half is as it was.
  ROLE_CHECK(importer.wait_signal(written));
  ROLE_EXPECT_BYTES(a, 0, big / 2, 0x11, stream);
  ROLE_EXPECT_BYTES(a, big / 2, big - big / 2, 0x33, stream);
  // And the importer sees what this process writes now.
  ROLE_OK(somaMemsetAsync(b, 0x44, kSmall, stream));
  ROLE_OK(somaStreamSynchronize(stream));
  ROLE_CHECK(importer.signal(written));

  // The lifetime rule: free only after the importer is done.
  ROLE_TRY(side.free_after(importer, done));
  ROLE_OK(somaFreeAsync(b, stream));
  ROLE_OK(somaStreamSynchronize(stream));
  ROLE_OK(somaMemPoolTrimTo(side.pool, 0));
  std::uint64_t reserved = 1;
  ROLE_OK(somaMemPoolGetAttribute(side.pool, somaMemPoolAttrReservedMemCurrent, &reserved));
  ROLE_CHECK(reserved == 0);  // the pool gave its memory back
  return side.destroy_pool();
}

int share_importer(importer_side& side) {
  void* const a = side.pointer;
  const std::size_t a_bytes = side.shared.bytes;
  shared_allocation b_data;
  ROLE_CHECK(side.exporter.receive_value(&b_data));
  void* b = nullptr;
  ROLE_OK(somaMemPoolImportPointer(&b, side.pool, &b_data.data));
  ROLE_CHECK(a != nullptr && b != nullptr && a != b);

  // Pointer attributes name the imported pool, at the start and inside.
  somaPointerAttributes attributes{};
  ROLE_OK(somaPointerGetAttributes(&attributes, a));
  ROLE_CHECK(attributes.isLiveAllocation == 1);
  ROLE_CHECK(attributes.type == somaMemoryTypeDevice);
  ROLE_CHECK(attributes.pool == side.pool);
  ROLE_CHECK(attributes.device == 0);
  ROLE_CHECK(attributes.base == a);
  ROLE_CHECK(attributes.size == a_bytes);
  ROLE_OK(somaPointerGetAttributes(&attributes, static_cast<char*>(a) + a_bytes - 1));
  ROLE_CHECK(attributes.isLiveAllocation == 1 && attributes.pool == side.pool &&
             attributes.base == a);

  // What the exporter wrote, and it sees what this process writes.
  ROLE_EXPECT_BYTES(a, 0, a_bytes, 0x11, side.stream);
  ROLE_EXPECT_BYTES(b, 0, b_data.bytes, 0x22, side.stream);

  // S6 on the imported pool: its own device has read-write, another device nothing until
  // this process grants it (access is not inherited from the exporter).
  somaMemLocation own{somaMemLocationTypeDevice, 0};
  somaMemAccessFlags flags = somaMemAccessFlagsProtNone;
  ROLE_OK(somaMemPoolGetAccess(&flags, side.pool, &own));
  ROLE_CHECK(flags == somaMemAccessFlagsProtReadWrite);
  int devices = 0;
  ROLE_OK(somaGetDeviceCount(&devices));
  if (devices >= 2) {
    somaStream_t other = nullptr;
    ROLE_OK(somaSetDevice(1));
    ROLE_OK(somaStreamCreate(&other));
    ROLE_OK(somaSetDevice(0));
    ROLE_EXPECT_ERROR(somaMemsetAsync(b, 0x55, kSmall, other), somaErrorNotPermitted,
                      "may not write");
    const somaMemAccessDesc grant{{somaMemLocationTypeDevice, 1}, somaMemAccessFlagsProtRead};
    ROLE_OK(somaMemPoolSetAccess(side.pool, &grant, 1));
    ROLE_EXPECT_BYTES(b, 0, b_data.bytes, 0x22, other);  // read through device 1
    ROLE_EXPECT_ERROR(somaMemsetAsync(b, 0x55, kSmall, other), somaErrorNotPermitted,
                      "may not write");
    ROLE_OK(somaStreamDestroy(other));
  }
  const std::size_t half = a_bytes / 2;
  ROLE_OK(somaMemsetAsync(static_cast<char*>(a) + half, 0x33, a_bytes - half, side.stream));
  ROLE_OK(somaStreamSynchronize(side.stream));
  ROLE_CHECK(side.exporter.signal(written));
  ROLE_CHECK(side.exporter.wait_signal(written));
  ROLE_EXPECT_BYTES(b, 0, b_data.bytes, 0x44, side.stream);

  // A copy past the end of the imported allocation is refused, as for any allocation.
  soma_test::host_buffer host(2 * kSmall);
  ROLE_EXPECT_ERROR(
      somaMemcpyAsync(host.data(), b, 2 * kSmall, somaMemcpyDeviceToHost, side.stream),
      somaErrorInvalidValue, "past the end");

  // Done: free, then tell the exporter.
  ROLE_OK(somaFreeAsync(a, side.stream));
  ROLE_OK(somaFreeAsync(b, side.stream));
  ROLE_OK(somaStreamSynchronize(side.stream));
  ROLE_OK(somaPointerGetAttributes(&attributes, a));
  ROLE_CHECK(attributes.isLiveAllocation == 0);
  ROLE_EXPECT_ERROR(somaFreeAsync(a, side.stream), somaErrorInvalidValue, "not a live allocation");
  ROLE_OK(somaMemPoolDestroy(side.pool));
  ROLE_CHECK(side.exporter.signal(done));
  return 0;
}

// ---- importing twice ----------------------------------------------------------------------------

int twice_exporter(role_context& peers) {
  const auto& importer = peers[1];
  exporter_side side;
  ROLE_TRY(side.start(kSmall, 0x5c));
  ROLE_TRY(send_pool(side.pool, importer));
  // Exporting the same allocation twice gives the same data.
  shared_allocation first;
  shared_allocation second;
  ROLE_OK(somaMemPoolExportPointer(&first.data, side.pointer));
  ROLE_OK(somaMemPoolExportPointer(&second.data, side.pointer));
  ROLE_CHECK(std::memcmp(&first.data, &second.data, sizeof first.data) == 0);
  first.bytes = kSmall;
  ROLE_CHECK(importer.send_value(first));
  return side.free_after(importer, done);
}

int twice_importer(importer_side& side) {
  void* const first = side.pointer;
  void* second = nullptr;
  ROLE_OK(somaMemPoolImportPointer(&second, side.pool, &side.shared.data));
  ROLE_CHECK(first == second);
  // Only exactly the data the exporter served finds the live import: forged data is refused.
  ROLE_TRY(round_trip_refused(side.pool, side.shared));
  // One allocation, one free: a second free is a double free.
  ROLE_OK(somaFreeAsync(first, side.stream));
  ROLE_EXPECT_ERROR(somaFreeAsync(second, side.stream), somaErrorInvalidValue,
                    "not a live allocation");
  ROLE_OK(somaStreamSynchronize(side.stream));
  // Importing again after the free maps it again.
  ROLE_OK(somaMemPoolImportPointer(&side.pointer, side.pool, &side.shared.data));
  ROLE_EXPECT_BYTES(side.pointer, 0, side.shared.bytes, 0x5c, side.stream);
  return side.finish();
}

// ---- an allocation over several physical chunks -------------------------------------------------

/// Mappings of soma memfds (cpu backend) that overlap [pointer, pointer + bytes).
int memfd_mappings_in(const void* pointer, std::size_t bytes) {
  const auto begin = reinterpret_cast<std::uintptr_t>(pointer);
  const auto end = begin + bytes;
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  if (maps == nullptr) return -1;
  int count = 0;
  char line[512];
  while (std::fgets(line, sizeof line, maps) != nullptr) {
    unsigned long from = 0;
    unsigned long to = 0;
    if (std::sscanf(line, "%lx-%lx", &from, &to) != 2) continue;
    if (to > begin && from < end && std::strstr(line, "memfd:soma-device") != nullptr) ++count;
  }
  std::fclose(maps);
  return count;
}

int chunks_exporter(role_context& peers) {
  const auto& importer = peers[1];
  // Two commits one after the other (32 MiB is at least the growth step of both backends),
  // freed and coalesced: the next allocation of both sizes spans the two physical chunks.
  constexpr std::size_t kPart = std::size_t{32} << 20;
  exporter_side side;
  ROLE_TRY(side.open());
  const somaStream_t stream = side.stream;
  ROLE_OK(soma_test::set_pool_u64(side.pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  void* first = nullptr;
  void* second = nullptr;
  ROLE_OK(somaMallocFromPoolAsync(&first, kPart, side.pool, stream));
  ROLE_OK(somaMallocFromPoolAsync(&second, kPart, side.pool, stream));
  ROLE_CHECK(static_cast<char*>(second) == static_cast<char*>(first) + kPart);
  ROLE_OK(somaFreeAsync(first, stream));
  ROLE_OK(somaFreeAsync(second, stream));
  ROLE_OK(somaMallocFromPoolAsync(&side.pointer, 2 * kPart, side.pool, stream));
  side.bytes = 2 * kPart;
  void* const whole = side.pointer;
  ROLE_CHECK(whole == first);
  ROLE_OK(somaMemsetAsync(whole, 0x71, kPart, stream));
  ROLE_OK(somaMemsetAsync(static_cast<char*>(whole) + kPart, 0x72, kPart, stream));
  ROLE_OK(somaStreamSynchronize(stream));
  ROLE_TRY(side.share_with(importer));
  ROLE_CHECK(importer.wait_signal(done));
  // The importer wrote across the boundary of the two chunks.
  ROLE_EXPECT_BYTES(whole, kPart - kSmall, 2 * kSmall, 0x73, stream);
  ROLE_EXPECT_BYTES(whole, 0, kPart - kSmall, 0x71, stream);
  ROLE_EXPECT_BYTES(whole, kPart + kSmall, kPart - kSmall, 0x72, stream);
  ROLE_OK(somaFreeAsync(whole, stream));
  ROLE_OK(somaStreamSynchronize(stream));
  return 0;
}

int chunks_importer(importer_side& side) {
  char* const whole = static_cast<char*>(side.pointer);
  if (soma_test::on_cpu_backend()) {
    // There, each physical chunk is a memfd of its own: the allocation maps two.
    ROLE_CHECK(memfd_mappings_in(whole, side.shared.bytes) == 2);
  }
  const std::size_t half = side.shared.bytes / 2;
  ROLE_EXPECT_BYTES(whole, 0, half, 0x71, side.stream);
  ROLE_EXPECT_BYTES(whole, half, half, 0x72, side.stream);
  ROLE_OK(somaMemsetAsync(whole + half - kSmall, 0x73, 2 * kSmall, side.stream));
  return side.finish();
}

// ---- the free of an imported pointer is stream ordered ------------------------------------------

int unmap_importer(importer_side& side) {
  void* const a = side.pointer;
  const std::size_t bytes = side.shared.bytes;
  const bool on_cpu = soma_test::on_cpu_backend();  // there the mapping can be seen in /proc
  if (on_cpu) ROLE_CHECK(memfd_mappings_in(a, bytes) == 1);

  // Work queued before the free still uses the memory: the free waits for it.
  soma_test::host_buffer host(kSmall);
  soma_test::stream_gate gate;
  ROLE_OK(gate.hold(side.stream));
  ROLE_OK(somaMemcpyAsync(host.data(), a, kSmall, somaMemcpyDeviceToHost, side.stream));
  ROLE_OK(somaFreeAsync(a, side.stream));
  somaPointerAttributes attributes{};
  ROLE_OK(somaPointerGetAttributes(&attributes, a));
  ROLE_CHECK(attributes.isLiveAllocation == 0);  // dead for the application at once
  ROLE_CHECK(somaStreamQuery(side.stream) == somaErrorNotReady);
  if (on_cpu) ROLE_CHECK(memfd_mappings_in(a, bytes) == 1);  // still mapped for the copy
  gate.open();
  ROLE_OK(somaStreamSynchronize(side.stream));
  ROLE_CHECK(host.all(kPlainFill));
  if (on_cpu) ROLE_CHECK(memfd_mappings_in(a, bytes) == 0);  // unmapped after the free ran
  ROLE_OK(somaMemPoolDestroy(side.pool));
  ROLE_CHECK(side.exporter.signal(done));
  return 0;
}

// ---- several importers, each with its own handle ------------------------------------------------

int many_exporter(role_context& peers) {
  exporter_side side;
  ROLE_TRY(side.start(2 * kSmall, 0));
  for (int importer = 1; importer <= 2; ++importer) {
    ROLE_TRY(side.share_with(peers[importer]));  // a pool handle of its own for each
  }
  ROLE_CHECK(peers[1].wait_signal(done));
  ROLE_CHECK(peers[2].wait_signal(done));
  ROLE_EXPECT_BYTES(side.pointer, 0, kSmall, 0x01, side.stream);
  ROLE_EXPECT_BYTES(side.pointer, kSmall, kSmall, 0x02, side.stream);
  ROLE_OK(somaFreeAsync(side.pointer, side.stream));
  ROLE_OK(somaStreamSynchronize(side.stream));
  return 0;
}

int many_importer(importer_side& side) {
  // Importer 1 writes the first half, importer 2 the second.
  const int me = side.peers.index;
  char* const half = static_cast<char*>(side.pointer) + (me - 1) * kSmall;
  ROLE_OK(somaMemsetAsync(half, me, kSmall, side.stream));
  return side.finish();
}

// ---- imported pools are restricted as CUDA's are ------------------------------------------------

int restricted_importer(importer_side& side) {
  void* const a = side.pointer;

  void* p = nullptr;
  ROLE_EXPECT_ERROR(somaMallocFromPoolAsync(&p, kSmall, side.pool, side.stream),
                    somaErrorInvalidValue, "imported pool");
  ROLE_CHECK(p == nullptr);
  ROLE_EXPECT_ERROR(somaDeviceSetMemPool(0, side.pool), somaErrorInvalidValue, "imported pool");
  somaMemPool_t current = nullptr;
  ROLE_OK(somaDeviceGetMemPool(&current, 0));
  ROLE_CHECK(current != side.pool);
  for (const somaMemPoolAttr attr :
       {somaMemPoolReuseFollowEventDependencies, somaMemPoolReuseAllowOpportunistic,
        somaMemPoolReuseAllowInternalDependencies}) {
    int flag = 0;
    ROLE_EXPECT_ERROR(somaMemPoolSetAttribute(side.pool, attr, &flag), somaErrorInvalidValue,
                      "imported pool");
    ROLE_EXPECT_ERROR(somaMemPoolGetAttribute(side.pool, attr, &flag), somaErrorInvalidValue,
                      "imported pool");
  }
  std::uint64_t threshold = 0;
  ROLE_EXPECT_ERROR(somaMemPoolSetAttribute(side.pool, somaMemPoolAttrReleaseThreshold, &threshold),
                    somaErrorInvalidValue, "imported pool");
  ROLE_EXPECT_ERROR(somaMemPoolGetAttribute(side.pool, somaMemPoolAttrReleaseThreshold, &threshold),
                    somaErrorInvalidValue, "imported pool");
  std::uint64_t zero = 0;
  ROLE_EXPECT_ERROR(somaMemPoolSetAttribute(side.pool, somaMemPoolAttrUsedMemHigh, &zero),
                    somaErrorInvalidValue, "imported pool");
  // Statistics read 0, as CUDA's do: the memory is the exporter's.
  std::uint64_t reserved = 1;
  std::uint64_t used = 1;
  ROLE_OK(somaMemPoolGetAttribute(side.pool, somaMemPoolAttrReservedMemCurrent, &reserved));
  ROLE_OK(somaMemPoolGetAttribute(side.pool, somaMemPoolAttrUsedMemCurrent, &used));
  ROLE_CHECK(reserved == 0 && used == 0);
  ROLE_EXPECT_ERROR(somaMemPoolTrimTo(side.pool, 0), somaErrorInvalidValue, "imported pool");
  int fd = -1;
  ROLE_EXPECT_ERROR(
      somaMemPoolExportToShareableHandle(&fd, side.pool, somaMemHandleTypePosixFileDescriptor, 0),
      somaErrorInvalidValue, "cannot be exported again");
  ROLE_CHECK(fd == -1);
  somaMemPoolPtrExportData again{};
  ROLE_EXPECT_ERROR(somaMemPoolExportPointer(&again, a), somaErrorInvalidValue,
                    "cannot be exported again");
  // The imported pointer still works after all that.
  ROLE_EXPECT_BYTES(a, 0, kSmall, kPlainFill, side.stream);

  // Destroying the imported pool with an imported pointer live succeeds; the pointer stays
  // usable until it is freed, and new imports through the destroyed pool fail.
  ROLE_OK(somaMemPoolDestroy(side.pool));
  ROLE_EXPECT_BYTES(a, 0, kSmall, kPlainFill, side.stream);
  void* more = nullptr;
  ROLE_EXPECT_ERROR(somaMemPoolImportPointer(&more, side.pool, &side.shared.data),
                    somaErrorInvalidResourceHandle, "not a live pool");
  ROLE_OK(somaFreeAsync(a, side.stream));
  ROLE_OK(somaStreamSynchronize(side.stream));
  ROLE_CHECK(side.exporter.signal(done));
  return 0;
}

// ---- bad export data maps nothing ---------------------------------------------------------------

int bad_data_exporter(role_context& peers) {
  const auto& importer = peers[1];
  exporter_side p;  // its allocation a, and `stale`, freed before the importer tries it
  ROLE_TRY(p.start(kSmall, 0x61));
  const somaStream_t stream = p.stream;
  soma_test::unique_pool q(exportable_props());
  void* stale = nullptr;
  void* c = nullptr;
  ROLE_OK(somaMallocFromPoolAsync(&stale, kSmall, p.pool, stream));
  ROLE_OK(somaMallocFromPoolAsync(&c, kSmall, q, stream));
  ROLE_OK(somaStreamSynchronize(stream));
  const soma_test::pool_stats before = soma_test::read_pool_stats(p.pool);
  ROLE_TRY(p.share_with(importer));
  ROLE_TRY(send_pool(q, importer));
  ROLE_TRY(send_allocation(stale, kSmall, importer));
  ROLE_TRY(send_allocation(c, kSmall, importer));
  ROLE_OK(somaFreeAsync(stale, stream));     // its export data is stale from now on
  ROLE_OK(somaMemPoolDestroy(q.release()));  // c stays live, but nothing of q can be imported
  ROLE_CHECK(importer.signal(freed));
  ROLE_CHECK(importer.wait_signal(done));
  // Nothing the importer tried changed this process's pool or memory.
  ROLE_EXPECT_BYTES(p.pointer, 0, kSmall, 0x61, stream);
  ROLE_OK(somaFreeAsync(p.pointer, stream));
  ROLE_OK(somaFreeAsync(c, stream));
  ROLE_OK(somaStreamSynchronize(stream));
  soma_test::pool_stats after = soma_test::read_pool_stats(p.pool);
  ROLE_CHECK(after.used_current == 0 && before.used_current == 2 * kSmall);
  return 0;
}

int bad_data_importer(role_context& peers) {
  importer_side p(
      peers);  // pool p and the genuine allocation a, imported once the rest was refused
  somaMemPool_t q = nullptr;
  ROLE_TRY(receive_pool(p.exporter, &p.pool));
  ROLE_CHECK(p.exporter.receive_value(&p.shared));
  ROLE_TRY(receive_pool(p.exporter, &q));
  shared_allocation stale;
  shared_allocation c;
  ROLE_CHECK(p.exporter.receive_value(&stale));
  ROLE_CHECK(p.exporter.receive_value(&c));
  ROLE_CHECK(p.exporter.wait_signal(freed));
  somaMemPoolPtrExportData& a = p.shared.data;

  void* const sentinel = reinterpret_cast<void*>(0x5151);
  const int descriptors = soma_test::ipc::open_descriptor_count();
  // Each attempt fails with InvalidValue and a message saying why, leaves the output alone and
  // leaves no descriptor behind (nothing was received or mapped).
  auto refused = [&](somaMemPool_t pool, somaMemPoolPtrExportData data, const char* why) -> int {
    void* pointer = sentinel;
    ROLE_EXPECT_ERROR(somaMemPoolImportPointer(&pointer, pool, &data), somaErrorInvalidValue, why);
    ROLE_CHECK(pointer == sentinel);
    ROLE_CHECK(soma_test::ipc::open_descriptor_count() == descriptors);
    return 0;
  };
  ROLE_TRY(refused(p.pool, c.data, "another pool"));  // foreign: data of pool q given to p
  ROLE_TRY(refused(q, a, "another pool"));
  ROLE_TRY(refused(p.pool, stale.data, "stale export data"));  // freed by the exporter
  ROLE_TRY(refused(q, c.data, "destroyed"));                   // the exporter destroyed q
  // The genuine data with one byte changed.
  struct forgery {
    std::size_t at;
    unsigned char flip;
    const char* why;
  };
  const forgery forgeries[] = {
      {kNonceAt, 0x01, "nonce"},
      {kExportIdAt + 4, 0x40, "never issued"},  // an export id never issued
      {kSizeAt + 2, 0x01, "names"},             // more bytes than the allocation has
      {kOffsetAt + 1, 0x10, "offset"},
      {0, 0xff, "malformed"},
  };
  for (const forgery& f : forgeries) {
    somaMemPoolPtrExportData forged = a;
    forged.reserved[f.at] ^= f.flip;
    ROLE_TRY(refused(p.pool, forged, f.why));
  }
  ROLE_TRY(refused(p.pool, somaMemPoolPtrExportData{}, "malformed"));  // all zero

  // The genuine data still works.
  ROLE_OK(somaMemPoolImportPointer(&p.pointer, p.pool, &a));
  ROLE_EXPECT_BYTES(p.pointer, 0, kSmall, 0x61, p.stream);
  ROLE_OK(somaMemPoolDestroy(q));
  return p.finish();
}

// ---- lifetime: an exporter that frees too early -------------------------------------------------

int early_free_exporter(role_context& peers) {
  const auto& importer = peers[1];
  exporter_side side;
  ROLE_TRY(side.start(2 * granule(), 0x5a));
  ROLE_TRY(side.share_with(importer));
  // Breaks the rule: frees while the importer still uses the memory, and gives it back.
  ROLE_TRY(side.free_after(importer, imported));
  ROLE_OK(somaMemPoolTrimTo(side.pool, 0));
  std::uint64_t reserved = 1;
  ROLE_OK(somaMemPoolGetAttribute(side.pool, somaMemPoolAttrReservedMemCurrent, &reserved));
  ROLE_CHECK(reserved == 0);
  ROLE_CHECK(importer.signal(freed));
  ROLE_CHECK(importer.wait_signal(done));
  return 0;
}

int early_free_importer(importer_side& side) {
  ROLE_CHECK(side.exporter.signal(imported));
  ROLE_CHECK(side.exporter.wait_signal(freed));
  // The physical memory lives as long as this process maps it: no crash, same bytes.
  const std::size_t bytes = side.shared.bytes;
  ROLE_EXPECT_BYTES(side.pointer, 0, bytes, 0x5a, side.stream);
  ROLE_OK(somaMemsetAsync(side.pointer, 0x6b, bytes, side.stream));
  ROLE_EXPECT_BYTES(side.pointer, 0, bytes, 0x6b, side.stream);
  return side.finish();
}

// ---- faults: the exporter dies -----------------------------------------------------------------

int dying_exporter(role_context& peers) {
  const auto& importer = peers[1];
  exporter_side side;
  ROLE_TRY(side.start(kSmall, 0x21));
  void* b = nullptr;
  ROLE_OK(somaMallocFromPoolAsync(&b, kSmall, side.pool, side.stream));
  ROLE_OK(somaStreamSynchronize(side.stream));
  ROLE_TRY(side.share_with(importer));
  ROLE_TRY(send_pool(side.pool, importer));  // a second handle, imported only after the death
  ROLE_TRY(send_allocation(b, kSmall, importer));
  ROLE_CHECK(importer.wait_signal(imported));
  ::raise(SIGKILL);  // dies without freeing, destroying or closing anything
  return 1;
}

int orphaned_importer(importer_side& side) {
  void* const a = side.pointer;
  int second_handle = -1;
  ROLE_TRY(receive_descriptor(side.exporter, &second_handle));
  shared_allocation b_data;
  ROLE_CHECK(side.exporter.receive_value(&b_data));
  ROLE_CHECK(side.exporter.signal(imported));
  ROLE_CHECK(side.exporter.wait_closed());  // the exporter process is gone

  // What was mapped stays valid and readable.
  ROLE_EXPECT_BYTES(a, 0, kSmall, 0x21, side.stream);
  ROLE_OK(somaMemsetAsync(a, 0x22, kSmall, side.stream));
  ROLE_EXPECT_BYTES(a, 0, kSmall, 0x22, side.stream);

  // Further imports fail at once with a clear error: the end of the connection is seen, no
  // timeout is waited for (the configured one is far longer than the bound checked here).
  ::setenv("SOMA_IPC_TIMEOUT_MS", "60000", 1);
  const auto start = std::chrono::steady_clock::now();
  void* b = nullptr;
  ROLE_EXPECT_ERROR(somaMemPoolImportPointer(&b, side.pool, &b_data.data), somaErrorInvalidValue,
                    "closed the connection");
  ROLE_CHECK(b == nullptr);
  somaMemPool_t late = nullptr;
  ROLE_EXPECT_ERROR(somaMemPoolImportFromShareableHandle(&late, handle_of(second_handle),
                                                         somaMemHandleTypePosixFileDescriptor, 0),
                    somaErrorInvalidValue, "closed");
  ROLE_CHECK(late == nullptr);
  ROLE_CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  ::close(second_handle);

  ROLE_OK(somaFreeAsync(a, side.stream));
  ROLE_OK(somaStreamSynchronize(side.stream));
  ROLE_OK(somaMemPoolDestroy(side.pool));
  return 0;
}

// ---- faults: an importer dies ------------------------------------------------------------------

int surviving_exporter(role_context& peers) {
  const auto& first = peers[1];
  const auto& dying = peers[2];
  exporter_side side;
  ROLE_TRY(side.start(kSmall, 0x31));
  const somaMemPool_t pool = side.pool;
  const somaStream_t stream = side.stream;

  // A first importer goes through the whole cycle and exits: whatever this process opens for
  // good on a first export (the service's own descriptor, a driver's) is open after it.
  ROLE_TRY(side.share_with(first));
  ROLE_CHECK(first.wait_signal(imported));
  const int while_connected = soma_test::ipc::open_descriptor_count();
  ROLE_CHECK(first.signal(done));
  ROLE_CHECK(first.wait_closed());
  // The service closes its end of the connection once the importer's end is gone.
  ROLE_CHECK(soma_test::wait_until(
      [&] { return soma_test::ipc::open_descriptor_count() <= while_connected - 1; }));
  const int baseline = soma_test::ipc::open_descriptor_count();
  const soma_test::pool_stats stats = soma_test::read_pool_stats(pool);

  // The second importer dies holding an imported pool and pointer.
  ROLE_TRY(side.share_with(dying));
  ROLE_CHECK(dying.wait_signal(imported));
  ROLE_CHECK(soma_test::ipc::open_descriptor_count() == baseline + 1);  // the service's end only
  ROLE_CHECK(dying.signal(checked));
  ROLE_CHECK(dying.wait_closed());

  // No descriptor leaks, the pool is as it was and works.
  const bool back =
      soma_test::wait_until([&] { return soma_test::ipc::open_descriptor_count() == baseline; });
  if (!back) {
    return soma_test::ipc::role_failed(__FILE__, __LINE__, "descriptors leaked",
                                       ("expected " + std::to_string(baseline) + ", open now:\n" +
                                        soma_test::ipc::describe_open_descriptors())
                                           .c_str());
  }
  ROLE_CHECK(soma_test::read_pool_stats(pool) == stats);
  ROLE_EXPECT_BYTES(side.pointer, 0, kSmall, 0x31, stream);
  void* b = nullptr;
  ROLE_OK(somaMallocFromPoolAsync(&b, kSmall, pool, stream));
  ROLE_OK(somaMemsetAsync(b, 0x32, kSmall, stream));
  ROLE_EXPECT_BYTES(b, 0, kSmall, 0x32, stream);
  ROLE_OK(somaFreeAsync(b, stream));
  ROLE_OK(somaFreeAsync(side.pointer, stream));
  ROLE_OK(somaStreamSynchronize(stream));
  return 0;
}

/// What both importers of surviving_exporter do first: import, read the exporter's bytes, see
/// a forged request refused (so the service has answered everything), and say so.
int import_confirmed(importer_side& side) {
  ROLE_EXPECT_BYTES(side.pointer, 0, kSmall, 0x31, side.stream);
  ROLE_TRY(round_trip_refused(side.pool, side.shared));
  ROLE_CHECK(side.exporter.signal(imported));
  return 0;
}

int first_importer(importer_side& side) {
  ROLE_TRY(import_confirmed(side));
  ROLE_CHECK(side.exporter.wait_signal(done));
  ROLE_OK(somaFreeAsync(side.pointer, side.stream));
  ROLE_OK(somaStreamSynchronize(side.stream));
  ROLE_OK(somaMemPoolDestroy(side.pool));
  return 0;
}

int dying_importer(importer_side& side) {
  ROLE_TRY(import_confirmed(side));
  ROLE_CHECK(side.exporter.wait_signal(checked));
  ::raise(SIGKILL);  // dies holding the imported pool and pointer
  return 1;
}

// ---- out of file descriptors -------------------------------------------------------------------
// A process at its RLIMIT_NOFILE: every call that needs a new descriptor says so
// (somaErrorOperatingSystem, EMFILE, what to do), changes nothing, and works once descriptors
// are free again.

/// 0 if status and the thread's message report a process out of descriptors; else a failure.
int expect_out_of_descriptors(somaError_t status, const char* call, int line) {
  const std::string message = somaGetLastErrorMessage();
  if (status == somaErrorOperatingSystem && message.find("EMFILE") != std::string::npos &&
      message.find("ulimit -n") != std::string::npos)
    return 0;
  return soma_test::ipc::role_failed(
      __FILE__, line, call,
      (std::string("expected somaErrorOperatingSystem naming EMFILE and 'ulimit -n', got ") +
       somaGetErrorName(status) + ": " + message)
          .c_str());
}
#define ROLE_EXPECT_OUT_OF_DESCRIPTORS(call) \
  ROLE_TRY(expect_out_of_descriptors((call), #call, __LINE__))

int descriptors_exporter(role_context& peers) {
  const auto& importer = peers[1];
  exporter_side side;
  ROLE_TRY(side.start(kSmall, 0x5a));
  const somaMemPool_t pool = side.pool;
  const somaStream_t stream = side.stream;
  const soma_test::pool_stats before = soma_test::read_pool_stats(pool);
  {
    soma_test::ipc::descriptor_filler full;
    ROLE_CHECK(full.full());
    int fd = -1;
    ROLE_EXPECT_OUT_OF_DESCRIPTORS(
        somaMemPoolExportToShareableHandle(&fd, pool, somaMemHandleTypePosixFileDescriptor, 0));
    ROLE_CHECK(fd == -1);
    // Growing needs new physical memory, a memfd on the cpu backend: refused the same way.
    if (soma_test::on_cpu_backend()) {
      void* grown = nullptr;
      ROLE_EXPECT_OUT_OF_DESCRIPTORS(somaMallocFromPoolAsync(&grown, 4 * granule(), pool, stream));
      ROLE_CHECK(grown == nullptr);
    }
  }
  const soma_test::pool_stats after = soma_test::read_pool_stats(pool);
  ROLE_CHECK(after.reserved_current == before.reserved_current);
  ROLE_CHECK(after.used_current == before.used_current);
  // Descriptors free again: the same pool exports, grows, and the importer sees its bytes.
  void* grown = nullptr;
  ROLE_OK(somaMallocFromPoolAsync(&grown, 4 * granule(), pool, stream));
  ROLE_OK(somaFreeAsync(grown, stream));
  ROLE_TRY(side.share_with(importer));
  ROLE_TRY(side.free_after(importer, done));
  return side.destroy_pool();
}

int descriptors_importer(role_context& peers) {
  importer_side side(peers);
  int fd = -1;
  ROLE_TRY(receive_descriptor(side.exporter, &fd));
  ROLE_CHECK(side.exporter.receive_value(&side.shared));
  void* const handle = handle_of(fd);
  constexpr auto kPosixFd = somaMemHandleTypePosixFileDescriptor;
  {
    soma_test::ipc::descriptor_filler full;
    ROLE_CHECK(full.full());
    ROLE_EXPECT_OUT_OF_DESCRIPTORS(
        somaMemPoolImportFromShareableHandle(&side.pool, handle, kPosixFd, 0));
    ROLE_CHECK(side.pool == nullptr);
    // One free slot: the pool's own copy of the handle fits, the memory sent for a pointer
    // (SCM_RIGHTS) does not.
    full.release(1);
    ROLE_OK(somaMemPoolImportFromShareableHandle(&side.pool, handle, kPosixFd, 0));
    ROLE_EXPECT_OUT_OF_DESCRIPTORS(
        somaMemPoolImportPointer(&side.pointer, side.pool, &side.shared.data));
    ROLE_CHECK(side.pointer == nullptr);
  }
  ::close(fd);
  // Descriptors free again: the same import works and shows the exporter's bytes.
  ROLE_OK(somaMemPoolImportPointer(&side.pointer, side.pool, &side.shared.data));
  ROLE_EXPECT_BYTES(side.pointer, 0, kSmall, 0x5a, side.stream);
  return side.finish();
}

// ---- the roles of this binary (must follow every role) ------------------------------------------

// Exporters, the importers that receive on their own, then those that start with one import.
const soma_test::ipc::role kRoles[] = {
    {"plain_exporter", plain_exporter},
    {"numa_exporter", numa_exporter},
    {"numa_importer", numa_importer},
    {"share_exporter", share_exporter},
    {"twice_exporter", twice_exporter},
    {"chunks_exporter", chunks_exporter},
    {"many_exporter", many_exporter},
    {"bad_data_exporter", bad_data_exporter},
    {"early_free_exporter", early_free_exporter},
    {"dying_exporter", dying_exporter},
    {"surviving_exporter", surviving_exporter},
    {"descriptors_exporter", descriptors_exporter},
    {"bad_data_importer", bad_data_importer},
    {"descriptors_importer", descriptors_importer},
    {"share_importer", importer_role<share_importer>},
    {"twice_importer", importer_role<twice_importer>},
    {"chunks_importer", importer_role<chunks_importer>},
    {"unmap_importer", importer_role<unmap_importer>},
    {"many_importer", importer_role<many_importer>},
    {"restricted_importer", importer_role<restricted_importer>},
    {"early_free_importer", importer_role<early_free_importer>},
    {"orphaned_importer", importer_role<orphaned_importer>},
    {"first_importer", importer_role<first_importer>},
    {"dying_importer", importer_role<dying_importer>},
};
const int kDispatched = soma_test::ipc::dispatch_role(kRoles);

// ---- the tests: each runs its roles, one process each -------------------------------------------

constexpr int kKilled = 128 + SIGKILL;  // the exit status of a role that kills itself

#if defined(__SANITIZE_ADDRESS__)
// The asan preset adds UBSan, whose vptr check reads a vtable only after probing that the
// memory is readable, through a pipe: in a process with no free descriptor the probe fails
// and every member access of a polymorphic object is reported as an "invalid vptr" that is
// not there. The dev and tsan builds run this test.
constexpr const char* kNeedsFreeDescriptorSkip =
    "UBSan's vptr check needs a free descriptor (it probes memory through a pipe)";
#else
constexpr const char* kNeedsFreeDescriptorSkip = nullptr;
#endif

struct process_test_case {
  const char* name;                   ///< the test's name in its group
  std::vector<const char*> roles;     ///< role i runs in process i, peers[j] talks to role j
  std::vector<int> exit_statuses;     ///< what each role's process must end with
  const char* skip_reason = nullptr;  ///< set where this build cannot run the test
};

/// How gtest shows a test's parameter: its roles.
void PrintTo(const process_test_case& test, std::ostream* out) {
  for (std::size_t i = 0; i < test.roles.size(); ++i)
    *out << (i == 0 ? "" : " + ") << test.roles[i];
}

class S7_IpcProcesses : public ::testing::TestWithParam<process_test_case> {};

TEST_P(S7_IpcProcesses, EveryRoleEndsAsExpected) {
  const process_test_case& test = GetParam();
  if (test.skip_reason != nullptr) GTEST_SKIP() << test.skip_reason;
  const std::vector<soma_test::ipc::role_outcome> outcomes = soma_test::ipc::run_roles(test.roles);
  std::vector<int> statuses;
  for (const soma_test::ipc::role_outcome& outcome : outcomes) statuses.push_back(outcome.status);
  EXPECT_EQ(statuses, test.exit_statuses) << "roles:\n" << soma_test::ipc::describe(outcomes);
}

std::string test_name(const ::testing::TestParamInfo<process_test_case>& info) {
  return info.param.name;
}

const process_test_case kShare[] = {
    {"BothProcessesSeeTheSameBytes", {"share_exporter", "share_importer"}, {0, 0}},
    {"ImportingTheSameDataTwiceGivesTheSamePointer", {"twice_exporter", "twice_importer"}, {0, 0}},
    {"AllocationOverSeveralPhysicalChunks", {"chunks_exporter", "chunks_importer"}, {0, 0}},
    {"FreeOfAnImportedPointerUnmapsOnceItsStreamPassesIt",
     {"plain_exporter", "unmap_importer"},
     {0, 0}},
    {"AHostNumaPoolsMemoryIsBothHostsDirectly", {"numa_exporter", "numa_importer"}, {0, 0}},
    {"SeveralImportersEachWithItsOwnHandle",
     {"many_exporter", "many_importer", "many_importer"},
     {0, 0, 0}},
};
INSTANTIATE_TEST_SUITE_P(Share, S7_IpcProcesses, ::testing::ValuesIn(kShare), test_name);

const process_test_case kImportedPool[] = {
    {"CannotAllocateChangeAttributesTrimOrBeExportedAgain",
     {"plain_exporter", "restricted_importer"},
     {0, 0}},
};
INSTANTIATE_TEST_SUITE_P(ImportedPool, S7_IpcProcesses, ::testing::ValuesIn(kImportedPool),
                         test_name);

const process_test_case kBadExportData[] = {
    {"ForgedStaleForeignOrMalformedDataMapsNothing",
     {"bad_data_exporter", "bad_data_importer"},
     {0, 0}},
};
INSTANTIATE_TEST_SUITE_P(BadExportData, S7_IpcProcesses, ::testing::ValuesIn(kBadExportData),
                         test_name);

const process_test_case kLifetime[] = {
    {"ExporterFreeingEarlyLeavesTheImporterItsMemory",
     {"early_free_exporter", "early_free_importer"},
     {0, 0}},
};
INSTANTIATE_TEST_SUITE_P(Lifetime, S7_IpcProcesses, ::testing::ValuesIn(kLifetime), test_name);

const process_test_case kFaults[] = {
    {"ExporterDeathKeepsMappedMemoryAndFailsFurtherImports",
     {"dying_exporter", "orphaned_importer"},
     {kKilled, 0}},
    {"ImporterDeathLeavesTheExporterIntactWithoutDescriptorLeaks",
     {"surviving_exporter", "first_importer", "dying_importer"},
     {0, 0, kKilled}},
    {"OutOfDescriptorsIsOperatingSystemAndChangesNothing",
     {"descriptors_exporter", "descriptors_importer"},
     {0, 0},
     kNeedsFreeDescriptorSkip},
};
INSTANTIATE_TEST_SUITE_P(Faults, S7_IpcProcesses, ::testing::ValuesIn(kFaults), test_name);

}  // namespace
