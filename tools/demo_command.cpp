// `soma demo`: the stream-ordered allocation story told to a newcomer. A producer stream
// allocates and writes, an event lets a consumer stream read, a third stream frees after the
// consumer. Run on the default pool (release threshold 0) and on an explicit pool that keeps
// 64 MiB, it shows which memory is reused when, and what synchronize and trim give back.
#include "commands.hpp"

#include <soma/soma.hpp>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace soma::tools {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kBytes = 8 * kMiB;
constexpr unsigned char kPattern = 0x5a;
constexpr int kProducer = 0;
constexpr int kConsumer = 1;
constexpr int kReleaser = 2;
const char* const kRoles[] = {"producer", "consumer", "releaser"};

// One run of the story over one pool, with its own three streams.
class scenario {
 public:
  scenario(const soma::pool& pool, bool is_device_default)
      : pool_(pool), is_device_default_(is_device_default) {}
  scenario(const scenario&) = delete;
  scenario& operator=(const scenario&) = delete;
  // Host tasks hold pointers into this object: let them finish even when a step threw.
  ~scenario() {
    for (soma::stream& s : streams_) somaStreamSynchronize(s.handle());
  }

  void run() {
    std::printf("streams: 1 = producer, 2 = consumer, 3 = releaser\n\n");

    std::printf("1. The producer allocates and writes.\n");
    void* data = allocate(kProducer);
    say("the pointer comes back at once; work queued on stream 1 after this call may use it;");
    say("another stream may use it only after an event dependency (S1).");
    write(data);

    std::printf("\n2. An event hands the data to the consumer.\n");
    produced_.record(streams_[kProducer]);
    streams_[kConsumer].wait(produced_);
    std::printf("  event 'produced' recorded on stream 1; stream 2 waits for it\n");
    say("without the wait, stream 2 could read before stream 1 has written (S1).");
    check(data);

    std::printf("\n3. The releaser frees after the consumer.\n");
    consumed_.record(streams_[kConsumer]);
    streams_[kReleaser].wait(consumed_);
    std::printf("  event 'consumed' recorded on stream 2; stream 3 waits for it\n");
    release(data, kReleaser);
    say("freed on stream 3; stream 3 may reuse it at once, other streams once a synchronize");
    say("proves the free complete (S2, S11).");
    show_pool("after the free, before any synchronize");

    std::printf("\n4. Reuse before any synchronize.\n");
    void* same_stream = allocate(kReleaser);
    explain_reuse(same_stream, data, kReleaser);
    release(same_stream, kReleaser);
    void* other_stream = allocate(kProducer);
    explain_reuse(other_stream, data, kProducer);
    release(other_stream, kProducer);

    std::printf("\n5. Synchronize: the observation point (S9, S12).\n");
    show_pool("before synchronize");
    soma::synchronize_device();
    std::printf("  somaDeviceSynchronize(): every stream's work is done, every free is known "
                "complete\n");
    const std::uint64_t reserved_after_sync = pool_.reserved_bytes();
    show_pool("after synchronize ");
    const std::uint64_t threshold = pool_.release_threshold();
    if (threshold < kBytes) {
      say("release threshold " + format_bytes(threshold) +
          ": memory beyond it went back to the OS at the synchronize (S9);");
      say("small footprint, but the next allocation must map memory again.");
    } else {
      say("release threshold " + format_bytes(threshold) +
          ": the pool keeps that much across synchronizations (S9),");
      say("so the next allocations are served without the OS.");
    }

    std::printf("\n6. After the synchronize, any stream may reuse the freed memory.\n");
    // Stream 2 never freed anything itself, so whatever it gets comes from the shared pool.
    void* after_sync = allocate(kConsumer);
    if (reserved_after_sync == 0) {
      say("the pool had given everything back at the synchronize, so it mapped new memory;");
      say("addresses may repeat, because the pool keeps its reserved address range.");
    } else if (after_sync == data || after_sync == other_stream) {
      say(std::string("the block freed on stream ") + (after_sync == data ? "3" : "1") +
          ": stream 2 never freed anything itself; it may reuse");
      say("another stream's free because the synchronize proved that free complete (S11, S12).");
    } else {
      say("memory the pool had in reserve, not one of the blocks freed above.");
    }
    release(after_sync, kConsumer);
    streams_[kConsumer].synchronize();
    show_pool("after free + stream 2 synchronize");

    std::printf("\n7. Trim: give back what the threshold lets the pool keep.\n");
    pool_.trim_to(0);
    std::printf("  somaMemPoolTrimTo(pool, 0)\n");
    say("releases memory whose free is known complete; live memory and granularity limit it (S9).");
    show_pool("after trim        ");
    std::printf("  high watermarks: reserved %s, used %s (S10)\n",
                format_bytes(pool_.reserved_high_bytes()).c_str(),
                format_bytes(pool_.used_high_bytes()).c_str());
    if (check_failed_.load()) {
      throw soma::error(somaErrorIllegalAddress, "the consumer read bytes the producer did not write");
    }
  }

 private:
  static void say(const std::string& text) { std::printf("     %s\n", text.c_str()); }

  void* allocate(int role) {
    void* ptr = is_device_default_ ? soma::malloc_async(kBytes, streams_[role])
                                   : soma::malloc_async(kBytes, pool_, streams_[role]);
    std::printf("  stream %d (%s): %s(%s) -> %p\n", role + 1, kRoles[role],
                is_device_default_ ? "somaMallocAsync" : "somaMallocFromPoolAsync",
                format_bytes(kBytes).c_str(), ptr);
    return ptr;
  }

  void release(void* ptr, int role) {
    soma::free_async(ptr, streams_[role]);
    std::printf("  stream %d (%s): somaFreeAsync(%p) of %s\n", role + 1, kRoles[role], ptr,
                format_bytes(kBytes).c_str());
  }

  void explain_reuse(const void* ptr, const void* freed, int role) {
    if (ptr == freed && role == kReleaser) {
      say("same address: stream 3 reuses the block it freed itself, at once; its own order");
      say("already puts this allocation after the free (S11: reuse within one stream).");
    } else if (ptr == freed) {
      say("same address: soma already knew the free on stream 3 had completed");
      say("(opportunistic reuse, S11; timing-dependent, so this may differ between runs).");
    } else if (role == kReleaser) {
      say("a different address than the block stream 3 freed (the pool chose another block).");
    } else {
      say("a different address: stream " + std::to_string(role + 1) +
          " has no proof yet that stream 3's free completed");
      say("(no event, no synchronize), so the pool gave it other memory.");
    }
  }

  void show_pool(const char* when) {
    std::printf("  pool %s: reserved %s, used %s\n", when,
                format_bytes(pool_.reserved_bytes()).c_str(),
                format_bytes(pool_.used_bytes()).c_str());
  }

  // Producer: a host task writes the pattern where the host may touch pool memory (cpu
  // backend); elsewhere a stream-ordered memset does.
  void write(void* data) {
    soma::stream& producer = streams_[kProducer];
    if (soma::pointer_attributes(data).hostPointer != nullptr) {
      producer.launch([data] {
        std::memset(data, kPattern, kBytes);
        std::printf("  >> stream 1 host task: wrote %s of 0x%02x at %p\n",
                    format_bytes(kBytes).c_str(), kPattern, data);
      });
      std::printf("  stream 1: host task queued: fill it with 0x%02x\n", kPattern);
    } else {
      soma::check(somaMemsetAsync(data, kPattern, kBytes, producer.handle()));
      std::printf("  stream 1: somaMemsetAsync queued: fill it with 0x%02x\n", kPattern);
    }
  }

  // Consumer: a host task checks every byte (read in place, or from a stream-ordered copy).
  void check(void* data) {
    soma::stream& consumer = streams_[kConsumer];
    const unsigned char* bytes = static_cast<const unsigned char*>(data);
    if (soma::pointer_attributes(data).hostPointer == nullptr) {
      host_copy_.resize(kBytes);
      soma::check(somaMemcpyAsync(host_copy_.data(), data, kBytes, somaMemcpyDeviceToHost,
                                  consumer.handle()));
      bytes = host_copy_.data();
    }
    std::atomic<bool>* failed = &check_failed_;
    consumer.launch([bytes, data, failed]() -> somaError_t {
      for (std::size_t i = 0; i < kBytes; ++i) {
        if (bytes[i] != kPattern) {
          std::printf("  >> stream 2 host task: MISMATCH at byte %zu of %p: 0x%02x, expected "
                      "0x%02x\n",
                      i, data, bytes[i], kPattern);
          failed->store(true);
          return somaErrorIllegalAddress;  // becomes stream 2's sticky error
        }
      }
      std::printf("  >> stream 2 host task: checked %s at %p: every byte is 0x%02x\n",
                  format_bytes(kBytes).c_str(), data, kPattern);
      return somaSuccess;
    });
    std::printf("  stream 2: host task queued: check every byte\n");
  }

  const soma::pool& pool_;
  bool is_device_default_;
  soma::stream streams_[3];
  soma::event produced_;
  soma::event consumed_;
  std::vector<unsigned char> host_copy_;
  std::atomic<bool> check_failed_{false};
};

}  // namespace

int run_demo(int argc, char** argv) {
  (void)argc;
  (void)argv;
  std::printf("soma demo (backend %s): one allocation shared by three streams\n",
              soma::backend_name());
  std::printf("  stream 1 (producer) allocates %s and writes it in a host task;\n",
              format_bytes(kBytes).c_str());
  std::printf("  stream 2 (consumer) waits on an event recorded after the write, then checks"
              " it;\n");
  std::printf("  stream 3 (releaser) waits on an event recorded after the check, then frees"
              " it.\n");
  std::printf("Lines starting with '>>' come from host tasks, printed on the streams' workers"
              " as they run,\nso they may appear between the main thread's lines.\n");

  {
    const soma::pool default_pool = soma::pool::default_for(0);
    std::printf("\n=== Part 1: the default pool of device 0 (release threshold %s) ===\n",
                format_bytes(default_pool.release_threshold()).c_str());
    std::printf("somaMallocAsync draws from the device's current pool, at first its default"
                " pool (S4).\n");
    scenario(default_pool, true).run();
  }
  {
    soma::pool_options options;
    options.device = 0;
    options.release_threshold_bytes = 64 * kMiB;
    options.name = "demo";
    const soma::pool pool(options);
    std::printf("\n=== Part 2: an explicit pool 'demo' on device 0 (release threshold %s) ===\n",
                format_bytes(pool.release_threshold()).c_str());
    std::printf("somaMemPoolCreate + somaMemPoolSetAttribute(ReleaseThreshold); allocations name"
                " the pool\n(somaMallocFromPoolAsync, S5).\n");
    scenario(pool, false).run();
  }
  std::printf("\ndemo finished: every soma call succeeded and the consumer saw the producer's "
              "bytes.\n");
  return 0;
}

}  // namespace soma::tools
