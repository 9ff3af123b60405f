/* ipc_share.c: sharing a pool's memory with other processes (S7, docs/ipc.md).
 *
 * The parent creates an exportable pool and one buffer per child. For each child it exports
 * the pool (a file descriptor, sent with SCM_RIGHTS over a Unix socket) and the buffer (64
 * bytes of export data). Each child imports both, fills its buffer with its letter, frees its
 * import and says "done". The parent then reads the buffers back and checks the letters.
 *
 * The children are forked before the parent makes its first soma call: every process starts
 * its own soma runtime (a fork()ed copy of a started runtime would lack its threads). The
 * order of the lifetime rule is kept: a child frees its import before the parent frees the
 * buffer. Works on every backend: pool memory is touched only by memset and memcpy. */
#define _GNU_SOURCE
#include <soma/soma.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(call)                                                            \
  do {                                                                         \
    somaError_t status_ = (call);                                              \
    if (status_ != somaSuccess) {                                              \
      fprintf(stderr, "%s failed: %s: %s\n", #call, somaGetErrorName(status_), \
              somaGetLastErrorMessage());                                      \
      return 1;                                                                \
    }                                                                          \
  } while (0)

enum { kChildren = 2, kBytes = 1 << 20 };

/* What the parent tells a child, with the pool's descriptor alongside. */
struct share_message {
  somaMemPoolPtrExportData buffer;
  size_t bytes;
  char letter;
};

/* Sends one message, with a descriptor when fd >= 0. */
static int send_with_fd(int socket, const void* data, size_t bytes, int fd) {
  struct iovec part;
  struct msghdr message;
  union {
    struct cmsghdr header;
    char bytes[CMSG_SPACE(sizeof(int))];
  } control;
  memset(&message, 0, sizeof message);
  memset(&control, 0, sizeof control);
  part.iov_base = (void*)data;
  part.iov_len = bytes;
  message.msg_iov = &part;
  message.msg_iovlen = 1;
  if (fd >= 0) {
    struct cmsghdr* rights;
    message.msg_control = control.bytes;
    message.msg_controllen = sizeof control.bytes;
    rights = CMSG_FIRSTHDR(&message);
    rights->cmsg_level = SOL_SOCKET;
    rights->cmsg_type = SCM_RIGHTS;
    rights->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(rights), &fd, sizeof fd);
  }
  return sendmsg(socket, &message, MSG_NOSIGNAL) == (ssize_t)bytes ? 0 : -1;
}

/* Receives one message of `bytes` and the descriptor that came with it (-1 if none). */
static int receive_with_fd(int socket, void* data, size_t bytes, int* fd) {
  struct iovec part;
  struct msghdr message;
  struct cmsghdr* rights;
  union {
    struct cmsghdr header;
    char bytes[CMSG_SPACE(sizeof(int))];
  } control;
  memset(&message, 0, sizeof message);
  part.iov_base = data;
  part.iov_len = bytes;
  message.msg_iov = &part;
  message.msg_iovlen = 1;
  message.msg_control = control.bytes;
  message.msg_controllen = sizeof control.bytes;
  if (recvmsg(socket, &message, MSG_CMSG_CLOEXEC) != (ssize_t)bytes) return -1;
  *fd = -1;
  rights = CMSG_FIRSTHDR(&message);
  if (rights != NULL && rights->cmsg_type == SCM_RIGHTS) memcpy(fd, CMSG_DATA(rights), sizeof *fd);
  return 0;
}

/* A child: import the pool and the buffer, fill it, free the import, say done. */
static int child(int socket) {
  struct share_message message;
  int fd = -1;
  somaMemPool_t pool = NULL;
  somaStream_t stream = NULL;
  void* buffer = NULL;
  char done = 'D';

  if (receive_with_fd(socket, &message, sizeof message, &fd) != 0 || fd < 0) {
    fprintf(stderr, "child: no pool handle received\n");
    return 1;
  }
  /* The descriptor goes by value, cast to void*, as with CUDA. The pool keeps its own copy. */
  CHECK(somaMemPoolImportFromShareableHandle(&pool, (void*)(intptr_t)fd,
                                             somaMemHandleTypePosixFileDescriptor, 0));
  close(fd);
  CHECK(somaMemPoolImportPointer(&buffer, pool, &message.buffer));
  CHECK(somaStreamCreate(&stream));
  CHECK(somaMemsetAsync(buffer, message.letter, message.bytes, stream));
  CHECK(somaFreeAsync(buffer, stream)); /* unmapped once the memset has run */
  CHECK(somaStreamSynchronize(stream)); /* the letters are in the parent's memory now */
  CHECK(somaStreamDestroy(stream));
  CHECK(somaMemPoolDestroy(pool));
  return send(socket, &done, 1, MSG_NOSIGNAL) == 1 ? 0 : 1;
}

int main(void) {
  int sockets[kChildren];
  pid_t pids[kChildren];
  void* buffers[kChildren];
  somaMemPoolProps props;
  somaMemPool_t pool = NULL;
  somaStream_t stream = NULL;
  unsigned char* host = NULL;
  int i;
  size_t b;

  /* Fork first: no soma call has been made in this process yet. */
  for (i = 0; i < kChildren; ++i) {
    int ends[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends) != 0) return 1;
    pids[i] = fork();
    if (pids[i] < 0) return 1;
    if (pids[i] == 0) {
      close(ends[0]);
      _exit(child(ends[1]));
    }
    close(ends[1]);
    sockets[i] = ends[0];
  }

  memset(&props, 0, sizeof props);
  props.allocType = somaMemAllocationTypePinned;
  props.handleTypes = somaMemHandleTypePosixFileDescriptor; /* exportable: fixed at creation */
  props.location.type = somaMemLocationTypeDevice;
  props.location.id = 0;
  CHECK(somaMemPoolCreate(&pool, &props));
  CHECK(somaStreamCreate(&stream));
  for (i = 0; i < kChildren; ++i) {
    struct share_message message;
    int fd = -1;
    CHECK(somaMallocFromPoolAsync(&buffers[i], kBytes, pool, stream));
    CHECK(somaMemsetAsync(buffers[i], 0, kBytes, stream));
    CHECK(somaStreamSynchronize(stream)); /* zeroed before a child writes */
    CHECK(somaMemPoolExportToShareableHandle(&fd, pool, somaMemHandleTypePosixFileDescriptor, 0));
    memset(&message, 0, sizeof message);
    CHECK(somaMemPoolExportPointer(&message.buffer, buffers[i]));
    message.bytes = kBytes;
    message.letter = (char)('A' + i);
    if (send_with_fd(sockets[i], &message, sizeof message, fd) != 0) {
      fprintf(stderr, "sending to child %d failed\n", i);
      return 1;
    }
    close(fd); /* the child has its own copy now; each process closes its own */
  }

  CHECK(somaMallocHost((void**)&host, kBytes));
  for (i = 0; i < kChildren; ++i) {
    char done = 0;
    int status = 0;
    if (recv(sockets[i], &done, 1, 0) != 1 || done != 'D') {
      fprintf(stderr, "child %d did not finish\n", i);
      return 1;
    }
    if (waitpid(pids[i], &status, 0) != pids[i] || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "child %d failed\n", i);
      return 1;
    }
    close(sockets[i]);
    CHECK(somaMemcpyAsync(host, buffers[i], kBytes, somaMemcpyDeviceToHost, stream));
    /* The child freed its import first: now the owner may free (the lifetime rule). */
    CHECK(somaFreeAsync(buffers[i], stream));
    CHECK(somaStreamSynchronize(stream));
    for (b = 0; b < kBytes; ++b) {
      if (host[b] != (unsigned char)('A' + i)) {
        fprintf(stderr, "buffer %d: byte %zu is 0x%02x, expected '%c'\n", i, b, host[b], 'A' + i);
        return 1;
      }
    }
  }
  CHECK(somaFreeHost(host));
  CHECK(somaStreamDestroy(stream));
  CHECK(somaMemPoolDestroy(pool));
  printf(
      "ipc_share: %d child processes filled their shared 1 MiB buffers; the parent read them "
      "back\n",
      kChildren);
  return 0;
}
