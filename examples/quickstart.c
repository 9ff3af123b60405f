/* quickstart.c: stream-ordered allocation with soma's C API.
 *
 * The same program with CUDA would say cudaMallocAsync, cudaMemsetAsync, ...: soma keeps the
 * names with the prefix `soma`. Allocate on a stream, use the memory on that stream, free it
 * on that stream, synchronize. Works on every backend (cpu or cuda): the host only reads the
 * memory through a stream-ordered copy. */
#include <soma/soma.h>

#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                            \
  do {                                                                         \
    somaError_t status_ = (call);                                              \
    if (status_ != somaSuccess) {                                              \
      fprintf(stderr, "%s failed: %s: %s\n", #call, somaGetErrorName(status_), \
              somaGetLastErrorMessage());                                      \
      return 1;                                                                \
    }                                                                          \
  } while (0)

int main(void) {
  enum { kBytes = 1 << 20 };
  static unsigned char host[kBytes];
  somaStream_t stream = NULL;
  void* data = NULL;
  size_t i;

  CHECK(somaStreamCreate(&stream));
  /* S1: the pointer comes back at once; work queued on `stream` after this call may use it. */
  CHECK(somaMallocAsync(&data, kBytes, stream));
  CHECK(somaMemsetAsync(data, 0x2a, kBytes, stream));
  CHECK(somaMemcpyAsync(host, data, kBytes, somaMemcpyDeviceToHost, stream));
  /* S2: the free runs after the copy, in stream order; `data` is dead from here on. */
  CHECK(somaFreeAsync(data, stream));
  /* The host waits for the stream: the copy has landed, and the pool may now reuse the memory
   * on any stream (S9, S12). */
  CHECK(somaStreamSynchronize(stream));

  for (i = 0; i < kBytes; ++i) {
    if (host[i] != 0x2a) {
      fprintf(stderr, "byte %zu is 0x%02x, expected 0x2a\n", i, host[i]);
      return 1;
    }
  }
  printf("quickstart (C): allocated, filled, copied back and freed 1 MiB on one stream\n");
  CHECK(somaStreamDestroy(stream));
  return 0;
}
