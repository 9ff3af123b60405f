/* Uses an installed soma through its C API on the cpu backend: allocate on a stream, write and
 * read the memory through stream work, free, synchronize, and check every result.
 * Exit status 0 when everything behaved as documented. */
#include <soma/soma.h>

#include <stdio.h>
#include <string.h>

static int failures = 0;

static void check_call(somaError_t status, const char* call) {
  if (status != somaSuccess) {
    fprintf(stderr, "FAILED: %s returned %s (%d): %s\n", call, somaGetErrorName(status),
            (int)status, somaGetLastErrorMessage());
    ++failures;
  }
}

#define CHECK_CALL(call) check_call((call), #call)

#define CHECK(condition)                                               \
  do {                                                                 \
    if (!(condition)) {                                                \
      fprintf(stderr, "FAILED: %s (line %d)\n", #condition, __LINE__); \
      ++failures;                                                      \
    }                                                                  \
  } while (0)

int main(void) {
  enum { size_bytes = 1 << 20 };
  static unsigned char host_copy[size_bytes];

  const char* backend = NULL;
  CHECK_CALL(somaGetBackendName(&backend));
  CHECK(backend != NULL && strcmp(backend, "cpu") == 0);

  somaStream_t stream = NULL;
  CHECK_CALL(somaStreamCreate(&stream));
  CHECK(stream != NULL);

  void* device_ptr = NULL;
  CHECK_CALL(somaMallocAsync(&device_ptr, size_bytes, stream));
  CHECK(device_ptr != NULL);
  CHECK(((uintptr_t)device_ptr % 256) == 0);
  if (failures != 0 || device_ptr == NULL) {
    return 1;
  }

  somaMemPool_t pool = NULL;
  CHECK_CALL(somaDeviceGetMemPool(&pool, 0));
  uint64_t used_bytes = 0;
  CHECK_CALL(somaMemPoolGetAttribute(pool, somaMemPoolAttrUsedMemCurrent, &used_bytes));
  CHECK(used_bytes >= size_bytes);

  memset(host_copy, 0, sizeof host_copy);
  CHECK_CALL(somaMemsetAsync(device_ptr, 0x5a, size_bytes, stream));
  CHECK_CALL(somaMemcpyAsync(host_copy, device_ptr, size_bytes, somaMemcpyDeviceToHost, stream));
  CHECK_CALL(somaFreeAsync(device_ptr, stream));
  CHECK_CALL(somaStreamSynchronize(stream));

  size_t mismatches = 0;
  for (size_t i = 0; i < size_bytes; ++i) {
    mismatches += host_copy[i] != 0x5a;
  }
  CHECK(mismatches == 0);

  CHECK_CALL(somaMemPoolGetAttribute(pool, somaMemPoolAttrUsedMemCurrent, &used_bytes));
  CHECK(used_bytes == 0);

  /* A second free of the same pointer is an error, never a crash (api-behaviour.md). */
  CHECK(somaFreeAsync(device_ptr, stream) == somaErrorInvalidValue);

  CHECK_CALL(somaStreamDestroy(stream));

  if (failures != 0) {
    fprintf(stderr, "soma_consumer: %d check(s) failed\n", failures);
    return 1;
  }
  printf("soma_consumer: ok (backend %s, %d bytes allocated, written, read back and freed)\n",
         backend, (int)size_bytes);
  return 0;
}
