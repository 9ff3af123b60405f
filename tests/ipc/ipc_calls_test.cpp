// S7 calls on bad input, in one process: what cannot be exported, what is not a pool handle,
// what is not an imported pool. Every refusal is somaErrorInvalidValue (or InvalidResourceHandle
// for a dead pool handle) with a message saying why, leaves the outputs alone and leaves no
// descriptor behind. Flows between processes: ipc_processes_test.cpp.
#include <soma/soma.h>

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "peer_processes.hpp"
#include "soma_test_util.hpp"

namespace {

using namespace soma_test;
using soma_test::ipc::open_descriptor_count;

class S7_IpcExportCalls : public capi_test {};
class S7_IpcExportPointerCalls : public capi_test {};
class S7_IpcImportCalls : public capi_test {};
class S7_IpcImportPointerCalls : public capi_test {};

constexpr auto kPosixFd = somaMemHandleTypePosixFileDescriptor;

somaMemPoolProps exportable_props() { return pool_props(0, 0, kPosixFd); }

void* as_handle(int fd) { return reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)); }

somaError_t export_pool(somaMemPool_t pool, int* fd, somaMemAllocationHandleType type = kPosixFd,
                        unsigned long long flags = 0) {
  return somaMemPoolExportToShareableHandle(fd, pool, type, flags);
}

somaError_t import_fd(int fd, somaMemPool_t* pool, somaMemAllocationHandleType type = kPosixFd,
                      unsigned long long flags = 0) {
  return somaMemPoolImportFromShareableHandle(pool, as_handle(fd), type, flags);
}

// ---- export of pools ----------------------------------------------------------------------------

TEST_F(S7_IpcExportCalls, DefaultPoolIsNotExportable) {
  int fd = -1;
  EXPECT_EQ(export_pool(default_pool(0), &fd), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "default pool")) << last_message();
  EXPECT_EQ(fd, -1);
}

TEST_F(S7_IpcExportCalls, PoolWithoutHandleTypesIsNotExportable) {
  unique_pool pool(0);
  int fd = -1;
  EXPECT_EQ(export_pool(pool, &fd), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "handleTypes 0")) << last_message();
  EXPECT_EQ(fd, -1);
}

TEST_F(S7_IpcExportCalls, WrongHandleTypeFlagsOutputOrPoolAreRefused) {
  unique_pool pool(exportable_props());
  const int descriptors = open_descriptor_count();
  int fd = -1;
  for (const int type : {0, 2, 4, 8, 16}) {
    EXPECT_EQ(export_pool(pool, &fd, static_cast<somaMemAllocationHandleType>(type)),
              somaErrorInvalidValue)
        << "handle type " << type;
    EXPECT_TRUE(contains(last_message(), "handle type " + std::to_string(type))) << last_message();
  }
  EXPECT_EQ(export_pool(pool, &fd, kPosixFd, 1), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "flags")) << last_message();
  EXPECT_EQ(somaMemPoolExportToShareableHandle(nullptr, pool, kPosixFd, 0), somaErrorInvalidValue);
  EXPECT_EQ(fd, -1);
  unique_pool destroyed(exportable_props());
  const somaMemPool_t dead = destroyed.release();
  SOMA_ASSERT_OK(somaMemPoolDestroy(dead));
  EXPECT_EQ(export_pool(dead, &fd), somaErrorInvalidResourceHandle);
  EXPECT_EQ(export_pool(reinterpret_cast<somaMemPool_t>(0x1234), &fd),
            somaErrorInvalidResourceHandle);
  EXPECT_EQ(fd, -1);
  EXPECT_EQ(open_descriptor_count(), descriptors);
}

TEST_F(S7_IpcExportCalls, EachExportGivesANewCloseOnExecSocketThatTheCallerCloses) {
  unique_pool pool(exportable_props());
  const int before = open_descriptor_count();
  int first = -1;
  int second = -1;
  SOMA_ASSERT_OK(export_pool(pool, &first));
  SOMA_ASSERT_OK(export_pool(pool, &second));
  ASSERT_GE(first, 0);
  ASSERT_GE(second, 0);
  EXPECT_NE(first, second);
  for (const int fd : {first, second}) {
    EXPECT_NE(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0) << "descriptor " << fd;
    int type = 0;
    socklen_t length = sizeof type;
    ASSERT_EQ(::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length), 0);
    EXPECT_EQ(type, SOCK_SEQPACKET);
  }
  ::close(first);
  ::close(second);
  // The exporter's side of each closes once the caller's end is gone: nothing stays open
  // beyond what the first export started (the service's own descriptor).
  EXPECT_TRUE(wait_until([&] { return open_descriptor_count() <= before + 1; }))
      << soma_test::ipc::describe_open_descriptors();
}

// ---- export of pointers -------------------------------------------------------------------------

TEST_F(S7_IpcExportPointerCalls, RefusesWhatIsNotALiveAllocationOfAnExportablePool) {
  unique_stream stream;
  unique_pool exportable(exportable_props());
  unique_pool plain(0);
  void* pointer = nullptr;
  void* plain_pointer = nullptr;
  void* default_pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 4096, exportable, stream));
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&plain_pointer, 4096, plain, stream));
  SOMA_ASSERT_OK(somaMallocAsync(&default_pointer, 4096, stream));
  somaMemPoolPtrExportData data{};
  auto refused = [&](void* p, const char* why) {
    std::memset(&data, 0x77, sizeof data);
    EXPECT_EQ(somaMemPoolExportPointer(&data, p), somaErrorInvalidValue) << why;
    EXPECT_TRUE(contains(last_message(), why)) << last_message();
    EXPECT_EQ(data.reserved[0], 0x77) << "output written on failure";
  };
  refused(nullptr, "ptr is NULL");
  int on_stack = 0;
  refused(&on_stack, "never returned");
  refused(static_cast<char*>(pointer) + 256, "interior pointer");
  refused(plain_pointer, "without handle types");
  refused(default_pointer, "default pool");
  EXPECT_EQ(somaMemPoolExportPointer(nullptr, pointer), somaErrorInvalidValue);
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  refused(pointer, "already freed");
  SOMA_ASSERT_OK(somaFreeAsync(plain_pointer, stream));
  SOMA_ASSERT_OK(somaFreeAsync(default_pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

// A free in an exportable pool takes the full path (its export data goes stale), after the
// fast lane has claimed the block and given it back: it frees once, and a second free is
// refused with the pool intact.
TEST_F(S7_IpcExportPointerCalls, AFreeFreesOnceAndASecondIsRefused) {
  unique_stream stream;
  unique_pool pool(exportable_props());
  void* a = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&a, 4096, pool, stream));
  SOMA_ASSERT_OK(somaFreeAsync(a, stream));
  EXPECT_EQ(somaFreeAsync(a, stream), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "somaFreeAsync")) << last_message();
  std::uint64_t used = 1;
  SOMA_ASSERT_OK(somaMemPoolGetAttribute(pool, somaMemPoolAttrUsedMemCurrent, &used));
  EXPECT_EQ(used, 0U);
  void* again = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&again, 4096, pool, stream));
  EXPECT_EQ(again, a) << "the stream's own free is reused at once";
  SOMA_ASSERT_OK(somaFreeAsync(again, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S7_IpcExportPointerCalls, SameAllocationGivesTheSameDataAFreshOneNew) {
  unique_stream stream;
  unique_pool pool(exportable_props());
  void* a = nullptr;
  void* b = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&a, 4096, pool, stream));
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&b, 4096, pool, stream));
  somaMemPoolPtrExportData first{};
  somaMemPoolPtrExportData again{};
  somaMemPoolPtrExportData other{};
  SOMA_ASSERT_OK(somaMemPoolExportPointer(&first, a));
  SOMA_ASSERT_OK(somaMemPoolExportPointer(&again, a));
  SOMA_ASSERT_OK(somaMemPoolExportPointer(&other, b));
  EXPECT_EQ(std::memcmp(&first, &again, sizeof first), 0);
  EXPECT_NE(std::memcmp(&first, &other, sizeof first), 0);
  // Freed and allocated again at the same address: a new allocation, new export data.
  SOMA_ASSERT_OK(somaFreeAsync(a, stream));
  void* reused = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&reused, 4096, pool, stream));
  ASSERT_EQ(reused, a) << "the stream's own free is reused at once";
  somaMemPoolPtrExportData fresh{};
  SOMA_ASSERT_OK(somaMemPoolExportPointer(&fresh, reused));
  EXPECT_NE(std::memcmp(&first, &fresh, sizeof first), 0);
  SOMA_ASSERT_OK(somaFreeAsync(reused, stream));
  SOMA_ASSERT_OK(somaFreeAsync(b, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

// ---- import of pools ----------------------------------------------------------------------------

/// Imports fd expecting InvalidValue with `why`; the output stays as it was and the caller's
/// descriptor stays open (the caller owns it).
void expect_import_refused(int fd, const char* why) {
  somaMemPool_t pool = reinterpret_cast<somaMemPool_t>(0x99);
  const int descriptors = open_descriptor_count();
  EXPECT_EQ(import_fd(fd, &pool), somaErrorInvalidValue) << why;
  EXPECT_TRUE(contains(last_message(), why)) << last_message();
  EXPECT_EQ(pool, reinterpret_cast<somaMemPool_t>(0x99));
  EXPECT_EQ(open_descriptor_count(), descriptors) << "a descriptor was left open";
}

TEST_F(S7_IpcImportCalls, DescriptorsThatAreNotPoolHandlesAreRefused) {
  expect_import_refused(-1, "not a file descriptor");
  int pipe_ends[2];
  ASSERT_EQ(::pipe2(pipe_ends, O_CLOEXEC), 0);
  ::close(pipe_ends[1]);
  expect_import_refused(pipe_ends[0], "not a socket");
  ::close(pipe_ends[0]);
  expect_import_refused(pipe_ends[0], "not open");  // closed now
  const int file = ::memfd_create("not-a-socket", MFD_CLOEXEC);
  ASSERT_GE(file, 0);
  expect_import_refused(file, "not a socket");
  ::close(file);
  int stream_ends[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, stream_ends), 0);
  expect_import_refused(stream_ends[0], "SOCK_SEQPACKET");
  ::close(stream_ends[0]);
  ::close(stream_ends[1]);
}

TEST_F(S7_IpcImportCalls, SocketsWithoutASomaExporterAreRefused) {
  int ends[2];
  // The other end is closed: nobody will answer.
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends), 0);
  ::close(ends[1]);
  expect_import_refused(ends[0], "closed");
  ::close(ends[0]);

  // The other end is open but silent: the import gives up after SOMA_IPC_TIMEOUT_MS.
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends), 0);
  ::setenv("SOMA_IPC_TIMEOUT_MS", "300", 1);
  const auto start = std::chrono::steady_clock::now();
  expect_import_refused(ends[0], "no answer");
  const auto waited = std::chrono::steady_clock::now() - start;
  ::unsetenv("SOMA_IPC_TIMEOUT_MS");
  EXPECT_GE(waited, std::chrono::milliseconds(250));
  EXPECT_LT(waited, std::chrono::seconds(5));
  ::close(ends[0]);
  ::close(ends[1]);

  // The other end answers something that is not soma's protocol.
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends), 0);
  std::thread impostor([fd = ends[1]] {
    char request[256];
    if (::recv(fd, request, sizeof request, 0) <= 0) return;
    const char garbage[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
    (void)::send(fd, garbage, sizeof garbage, MSG_NOSIGNAL);
  });
  expect_import_refused(ends[0], "not soma's protocol");
  impostor.join();
  ::close(ends[0]);
  ::close(ends[1]);
}

TEST_F(S7_IpcImportCalls, WrongHandleTypeFlagsOrOutputAreRefused) {
  unique_pool exportable(exportable_props());
  int fd = -1;
  SOMA_ASSERT_OK(export_pool(exportable, &fd));
  somaMemPool_t pool = nullptr;
  for (const int type : {0, 2, 4, 8}) {
    EXPECT_EQ(import_fd(fd, &pool, static_cast<somaMemAllocationHandleType>(type)),
              somaErrorInvalidValue)
        << "handle type " << type;
    EXPECT_TRUE(contains(last_message(), "handle type")) << last_message();
  }
  EXPECT_EQ(import_fd(fd, &pool, kPosixFd, 1), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "flags")) << last_message();
  EXPECT_EQ(somaMemPoolImportFromShareableHandle(nullptr, as_handle(fd), kPosixFd, 0),
            somaErrorInvalidValue);
  EXPECT_EQ(pool, nullptr);
  ::close(fd);
}

// ---- import of pointers -----------------------------------------------------------------------

TEST_F(S7_IpcImportPointerCalls, NeedsAnImportedPoolAndItsArguments) {
  unique_stream stream;
  unique_pool exportable(exportable_props());
  void* a = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&a, 4096, exportable, stream));
  somaMemPoolPtrExportData data{};
  SOMA_ASSERT_OK(somaMemPoolExportPointer(&data, a));
  void* const sentinel = reinterpret_cast<void*>(0x4242);
  void* pointer = sentinel;
  EXPECT_EQ(somaMemPoolImportPointer(&pointer, exportable, &data), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "not an imported pool")) << last_message();
  EXPECT_EQ(somaMemPoolImportPointer(&pointer, default_pool(0), &data), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "not an imported pool")) << last_message();
  EXPECT_EQ(somaMemPoolImportPointer(&pointer, reinterpret_cast<somaMemPool_t>(0x1234), &data),
            somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaMemPoolImportPointer(nullptr, exportable, &data), somaErrorInvalidValue);
  EXPECT_EQ(somaMemPoolImportPointer(&pointer, exportable, nullptr), somaErrorInvalidValue);
  EXPECT_EQ(pointer, sentinel);
  SOMA_ASSERT_OK(somaFreeAsync(a, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

}  // namespace
