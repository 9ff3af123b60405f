// `soma demo`: the stream-ordered allocation story told to a newcomer. A producer stream
// allocates and writes, an event lets a consumer stream read, a third stream frees after the
// consumer. Parts 1 and 2 run it on the default pool (release threshold 0) and on an explicit
// pool that keeps 64 MiB: which memory is reused when, and what synchronize and trim give
// back. Parts 3 and 4 show the reuse policies (S11) that decide when memory freed on one stream
// may serve another: a pool with event-following and opportunistic reuse off, and a pool that
// cannot grow (internal dependencies).
//
// Every claim the demo prints is one the rules guarantee, never one that depends on timing:
// opportunistic reuse (did the free happen to run already?) is avoided, or said to be a "may".
// Where the text names an outcome (same address, different address, NotReady) the demo checks
// it first and fails instead of printing something untrue.
#include "commands.hpp"

#include <soma/soma.hpp>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace soma::tools {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr unsigned char kPattern = 0x5a;
constexpr int kProducer = 0;
constexpr int kConsumer = 1;
constexpr int kReleaser = 2;
const char* const kRoles[] = {"producer", "consumer", "releaser"};

const char* on_off(bool on) { return on ? "on" : "off"; }

void say(const std::string& text) { std::printf("     %s\n", text.c_str()); }

// The demo's claims are the allocator's guarantees: if one does not hold, stop.
void expect(bool holds, const char* claim) {
  if (!holds) throw std::logic_error(std::string("the demo expected: ") + claim);
}

void show_policies(const soma::pool& pool) {
  std::printf(
      "  reuse policies of this pool: follow event dependencies %s, opportunistic %s,\n"
      "                               internal dependencies %s\n",
      on_off(pool.reuse_follow_event_dependencies()), on_off(pool.reuse_allow_opportunistic()),
      on_off(pool.reuse_allow_internal_dependencies()));
}

void set_policy(const soma::pool& pool, const char* pool_name, somaMemPoolAttr attribute,
                const char* attribute_name, int value) {
  soma::check(somaMemPoolSetAttribute(pool.handle(), attribute, &value));
  std::printf("  somaMemPoolSetAttribute(%s, %s, %d)\n", pool_name, attribute_name, value);
}

// One run of the story over one pool, with its own three streams.
class story {
 public:
  story(const soma::pool& pool, bool is_device_default, std::size_t bytes)
      : pool_(pool), is_device_default_(is_device_default), bytes_(bytes) {}
  story(const story&) = delete;
  story& operator=(const story&) = delete;
  // Host tasks hold pointers into this object: let them finish even when a step threw.
  ~story() {
    open_gate();
    for (soma::stream& s : streams_) somaStreamSynchronize(s.handle());
  }

  // Parts 1 and 2: hand-over, reuse before and after a synchronize, release and trim.
  void run_basics() {
    std::printf("streams: 1 = producer, 2 = consumer, 3 = releaser\n\n");
    void* data = hand_over(/*verbose=*/true, /*hold_releaser=*/false);
    say("freed on stream 3: the block is free once stream 3's earlier work has run, that is");
    say("after the consumer's check (S2). Stream 3 may reuse it at once; step 4 shows when");
    say("another stream may.");
    show_pool("after the free, before any synchronize");

    std::printf("\n4. Reuse before any synchronize: who may take the block freed on stream 3?\n");
    show_policies(pool_);
    say("Stream 3 itself, at once: its own order puts its later work after the free (S11).");
    say("Another stream, at once, if a synchronize or a successful query proved the free");
    say("complete. Before that, the pool's reuse policies decide (S11):");
    say("- follow event dependencies: the stream waits on an event recorded after the free;");
    say("- opportunistic: soma sees that the free has already run. That depends on timing,");
    say("  so it may or may not happen; this demo never counts on it;");
    say("- internal dependencies: only when the pool cannot grow, it hands the block over and");
    say("  makes the stream wait for the free (part 4).");

    std::printf("\n4a. Same stream: the releaser allocates again.\n");
    void* again = allocate(kReleaser);
    expect(again == data, "stream 3 gets back the block it freed itself");
    say("same address: stream 3 takes back the block it freed itself; no policy is involved.");
    release(again, kReleaser);

    std::printf("\n4b. Another stream, ordered after the free by an event.\n");
    freed_.record(streams_[kReleaser]);
    streams_[kProducer].wait(freed_);
    std::printf("  event 'freed' recorded on stream 3 after the free; stream 1 waits for it\n");
    void* ordered = allocate(kProducer);
    expect(ordered == data, "stream 1, waiting on 'freed', gets the block freed on stream 3");
    say("same address, and no synchronize: stream 1's later work comes after the event, so");
    say("after the free, and the pool hands it the block (follow event dependencies).");
    say("Without the wait, stream 1 might get this block or other memory, depending on whether");
    say("the free had run yet (opportunistic); part 3 turns both policies off.");
    release(ordered, kProducer);

    std::printf("\n5. Synchronize: the observation point (S9, S12).\n");
    show_pool("before synchronize");
    soma::synchronize_device();
    std::printf(
        "  somaDeviceSynchronize(): every stream's work is done, every free is known "
        "complete\n");
    const std::uint64_t reserved_after_sync = pool_.reserved_bytes();
    show_pool("after synchronize ");
    const std::uint64_t threshold = pool_.release_threshold();
    if (threshold < bytes_) {
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
    } else if (after_sync == data) {
      say("the same block again, last freed on stream 1 in step 4b: stream 2 never freed it and");
      say("waited on no event after that free, but the synchronize proved the free complete,");
      say("and a proven free serves every stream (S11, S12).");
    } else {
      say("memory the pool had in reserve, not the block freed above.");
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
    throw_if_check_failed();
  }

  // Part 3: with event-following and opportunistic reuse off, only a proof makes another
  // stream's free usable (or, were the pool unable to grow, internal dependencies).
  void run_policies_off() {
    std::printf("streams: 1 = producer, 2 = consumer, 3 = releaser\n");
    show_policies(pool_);
    std::printf(
        "\n1-3. As in part 1: stream 1 allocates and writes, stream 2 checks, "
        "stream 3 frees.\n");
    void* data = hand_over(/*verbose=*/false, /*hold_releaser=*/false);
    show_pool("after the free");

    std::printf("\n4. The same event as in step 4b of part 1.\n");
    freed_.record(streams_[kReleaser]);
    streams_[kProducer].wait(freed_);
    std::printf("  event 'freed' recorded on stream 3 after the free; stream 1 waits for it\n");
    void* other = allocate(kProducer);
    expect(other != data, "with both policies off, stream 1 does not get the unproven block");
    say("a different address, every run: this pool ignores the event and does not look at");
    say("whether the free has run, and nothing proved the free complete, so the block is not");
    say("stream 1's to take. Internal dependencies is on, but it applies only when the pool");
    say("cannot grow: this pool could, and new memory makes no stream wait.");
    show_pool("now");

    std::printf("\n5. A synchronize proves the free.\n");
    streams_[kReleaser].synchronize();
    std::printf("  somaStreamSynchronize(stream 3): stream 3's work, the free included, is done\n");
    void* proven = allocate(kProducer);
    expect(proven == data, "after stream 3's synchronize, stream 1 gets the block freed there");
    say("the block freed on stream 3: the synchronize proved its free complete, and a proven");
    say("free serves every stream, whatever the policies (S11, S12).");
    release(proven, kProducer);
    release(other, kProducer);
    soma::synchronize_device();
    std::printf("  somaDeviceSynchronize()\n");
    show_pool("at the end");
    throw_if_check_failed();
  }

  // Part 4: the pool is full and the only free block's free is pending on a held stream.
  void run_internal_dependencies(const char* pool_name) {
    std::printf("streams: 1 = producer, 2 = consumer, 3 = releaser\n");
    show_policies(pool_);
    std::printf(
        "\n1-3. As in part 1, except that stream 3 is busy: before its free it runs a "
        "host task\n     that waits for a go-ahead from the main thread.\n");
    void* data = hand_over(/*verbose=*/false, /*hold_releaser=*/true);
    show_pool("after the free");

    std::printf("\n4. Stream 1 needs another %s while stream 3's free is pending.\n",
                format_bytes(bytes_).c_str());
    say("The pool is at its max size and cannot grow; stream 1 waited on no event after the");
    say("free; the free has not run, since stream 3 is held, so opportunistic reuse cannot");
    say("apply either. Only internal dependencies can serve stream 1.");
    set_policy(pool_, pool_name, somaMemPoolReuseAllowInternalDependencies,
               "somaMemPoolReuseAllowInternalDependencies", 0);
    void* refused = nullptr;
    const somaError_t refusal =
        somaMallocFromPoolAsync(&refused, bytes_, pool_.handle(), streams_[kProducer].handle());
    std::printf("  stream 1 (producer): somaMallocFromPoolAsync(%s) -> %s\n",
                format_bytes(bytes_).c_str(), somaGetErrorName(refusal));
    expect(refusal == somaErrorMemoryAllocation,
           "without internal dependencies the full pool refuses stream 1");
    say("internal dependencies off: no block is stream 1's to take, so the allocation is out");
    say("of memory although " + format_bytes(bytes_) + " sits free in the pool.");
    set_policy(pool_, pool_name, somaMemPoolReuseAllowInternalDependencies,
               "somaMemPoolReuseAllowInternalDependencies", 1);
    void* waiting = allocate(kProducer);
    expect(waiting == data, "with internal dependencies stream 1 gets the pending block");
    say("the same block, its free still pending: the pool made stream 1 wait for stream 3's");
    say("free, so work queued on stream 1 from now on runs after the free.");
    write(waiting, "the next batch");
    const somaError_t releaser_state = somaStreamQuery(streams_[kReleaser].handle());
    std::printf("  somaStreamQuery(stream 3) -> %s\n", somaGetErrorName(releaser_state));
    expect(releaser_state == somaErrorNotReady, "stream 3 is not done while it is held");
    say("stream 3 is held: its host task waits for the go-ahead, and the free comes after it.");
    const somaError_t producer_state = somaStreamQuery(streams_[kProducer].handle());
    std::printf("  somaStreamQuery(stream 1) -> %s\n", somaGetErrorName(producer_state));
    expect(producer_state == somaErrorNotReady, "stream 1 waits for stream 3's free");
    say("stream 1 is not done either: it waits for stream 3's free before its write.");

    std::printf("\n5. The main thread gives the go-ahead.\n");
    std::printf("  main thread: go-ahead for stream 3's host task\n");
    open_gate();
    streams_[kProducer].synchronize();
    std::printf("  somaStreamSynchronize(stream 1) returned\n");
    say("stream 3's host task ran to its end, then its free completed, and only then did");
    if (wrote_in_host_task_)
      say("stream 1 write the next batch: those two '>>' lines come in that order every run.");
    else
      say("stream 1 write the next batch.");
    const somaError_t producer_done = somaStreamQuery(streams_[kProducer].handle());
    std::printf("  somaStreamQuery(stream 1) -> %s\n", somaGetErrorName(producer_done));
    expect(producer_done == somaSuccess, "stream 1 is done after its synchronize");
    release(waiting, kProducer);
    soma::synchronize_device();
    std::printf("  somaDeviceSynchronize()\n");
    show_pool("at the end");
    throw_if_check_failed();
  }

 private:
  // Steps 1 to 3: the producer allocates and writes, the consumer checks after an event, the
  // releaser frees after another event. Returns the freed pointer.
  void* hand_over(bool verbose, bool hold_releaser) {
    if (verbose) std::printf("1. The producer allocates and writes.\n");
    void* data = allocate(kProducer);
    if (verbose) {
      say("the pointer comes back at once; work queued on stream 1 after this call may use it;");
      say("another stream may use it only after an event dependency (S1).");
    }
    write(data, "the data");

    if (verbose) std::printf("\n2. An event hands the data to the consumer.\n");
    produced_.record(streams_[kProducer]);
    streams_[kConsumer].wait(produced_);
    std::printf("  event 'produced' recorded on stream 1; stream 2 waits for it\n");
    if (verbose) say("without the wait, stream 2 could read before stream 1 has written (S1).");
    check(data);

    if (verbose) std::printf("\n3. The releaser frees after the consumer.\n");
    consumed_.record(streams_[kConsumer]);
    streams_[kReleaser].wait(consumed_);
    std::printf("  event 'consumed' recorded on stream 2; stream 3 waits for it\n");
    if (hold_releaser) hold_releaser_stream();
    release(data, kReleaser);
    return data;
  }

  void* allocate(int role) {
    void* ptr = is_device_default_ ? soma::malloc_async(bytes_, streams_[role])
                                   : soma::malloc_async(bytes_, pool_, streams_[role]);
    std::printf("  stream %d (%s): %s(%s) -> %p\n", role + 1, kRoles[role],
                is_device_default_ ? "somaMallocAsync" : "somaMallocFromPoolAsync",
                format_bytes(bytes_).c_str(), ptr);
    return ptr;
  }

  void release(void* ptr, int role) {
    soma::free_async(ptr, streams_[role]);
    std::printf("  stream %d (%s): somaFreeAsync(%p) of %s\n", role + 1, kRoles[role], ptr,
                format_bytes(bytes_).c_str());
  }

  void show_pool(const char* when) {
    std::printf("  pool %s: reserved %s, used %s\n", when,
                format_bytes(pool_.reserved_bytes()).c_str(),
                format_bytes(pool_.used_bytes()).c_str());
  }

  // Releaser: a host task that blocks stream 3 until the main thread opens the gate.
  void hold_releaser_stream() {
    go_ahead_.store(false);
    std::atomic<bool>* gate = &go_ahead_;
    streams_[kReleaser].launch([gate] {
      gate->wait(false);
      std::printf("  >> stream 3 host task: got the go-ahead\n");
    });
    std::printf("  stream 3: host task queued: wait for the main thread's go-ahead\n");
  }

  void open_gate() {
    go_ahead_.store(true);
    go_ahead_.notify_all();
  }

  // Producer: a host task writes the pattern where the host may touch pool memory (cpu
  // backend); elsewhere a stream-ordered memset does.
  void write(void* data, const char* what) {
    soma::stream& producer = streams_[kProducer];
    const std::size_t bytes = bytes_;
    if (soma::pointer_attributes(data).hostPointer != nullptr) {
      producer.launch([data, bytes, what] {
        std::memset(data, kPattern, bytes);
        std::printf("  >> stream 1 host task: wrote %s, %s of 0x%02x at %p\n", what,
                    format_bytes(bytes).c_str(), kPattern, data);
      });
      std::printf("  stream 1: host task queued: write %s (0x%02x)\n", what, kPattern);
      wrote_in_host_task_ = true;
    } else {
      soma::check(somaMemsetAsync(data, kPattern, bytes, producer.handle()));
      std::printf("  stream 1: somaMemsetAsync queued: write %s (0x%02x)\n", what, kPattern);
      wrote_in_host_task_ = false;
    }
  }

  // Consumer: a host task checks every byte (read in place, or from a stream-ordered copy).
  void check(void* data) {
    soma::stream& consumer = streams_[kConsumer];
    const std::size_t bytes = bytes_;
    const unsigned char* seen = static_cast<const unsigned char*>(data);
    if (soma::pointer_attributes(data).hostPointer == nullptr) {
      host_copy_.resize(bytes);
      soma::check(somaMemcpyAsync(host_copy_.data(), data, bytes, somaMemcpyDeviceToHost,
                                  consumer.handle()));
      seen = host_copy_.data();
    }
    std::atomic<bool>* failed = &check_failed_;
    consumer.launch([seen, data, bytes, failed]() -> somaError_t {
      for (std::size_t i = 0; i < bytes; ++i) {
        if (seen[i] != kPattern) {
          std::printf(
              "  >> stream 2 host task: MISMATCH at byte %zu of %p: 0x%02x, expected "
              "0x%02x\n",
              i, data, seen[i], kPattern);
          failed->store(true);
          return somaErrorIllegalAddress;  // becomes stream 2's sticky error
        }
      }
      std::printf("  >> stream 2 host task: checked %s at %p: every byte is 0x%02x\n",
                  format_bytes(bytes).c_str(), data, kPattern);
      return somaSuccess;
    });
    std::printf("  stream 2: host task queued: check every byte\n");
  }

  void throw_if_check_failed() const {
    if (check_failed_.load()) {
      throw soma::error(somaErrorIllegalAddress,
                        "the consumer read bytes the producer did not write");
    }
  }

  const soma::pool& pool_;
  bool is_device_default_;
  std::size_t bytes_;
  soma::stream streams_[3];
  soma::event produced_;
  soma::event consumed_;
  soma::event freed_;
  std::vector<unsigned char> host_copy_;
  std::atomic<bool> check_failed_{false};
  std::atomic<bool> go_ahead_{true};
  bool wrote_in_host_task_ = false;
};

}  // namespace

int run_demo(int argc, char** argv) {
  (void)argc;
  (void)argv;
  // 8 MiB, or one granule if granules are larger: every allocation is then exactly one
  // growth of the pool, with no remainder that another stream could take instead.
  const std::size_t granularity = soma::device(0).granularity_bytes();
  const std::size_t bytes = (8 * kMiB + granularity - 1) / granularity * granularity;

  std::printf("soma demo (backend %s): one allocation shared by three streams\n",
              soma::backend_name());
  std::printf("  stream 1 (producer) allocates %s and writes it;\n", format_bytes(bytes).c_str());
  std::printf(
      "  stream 2 (consumer) waits on an event recorded after the write, then checks"
      " it;\n");
  std::printf(
      "  stream 3 (releaser) waits on an event recorded after the check, then frees"
      " it.\n");
  std::printf(
      "Parts 1 and 2 follow the memory through reuse, synchronize and trim on two pools;"
      "\nparts 3 and 4 show the reuse policies, which decide when memory freed on one"
      " stream\nmay serve another (S11).\n");
  std::printf(
      "Lines starting with '>>' come from host tasks, printed on the streams' workers"
      " as they run,\nso they may appear between the main thread's lines.\n");

  {
    const soma::pool default_pool = soma::pool::default_for(0);
    std::printf("\n=== Part 1: the default pool of device 0 (release threshold %s) ===\n",
                format_bytes(default_pool.release_threshold()).c_str());
    std::printf(
        "somaMallocAsync draws from the device's current pool, at first its default"
        " pool (S4).\n");
    story(default_pool, true, bytes).run_basics();
  }
  {
    soma::pool_options options;
    options.device = 0;
    options.release_threshold_bytes = 64 * kMiB;
    options.name = "demo";
    const soma::pool pool(options);
    std::printf("\n=== Part 2: an explicit pool 'demo' on device 0 (release threshold %s) ===\n",
                format_bytes(pool.release_threshold()).c_str());
    std::printf(
        "somaMemPoolCreate + somaMemPoolSetAttribute(ReleaseThreshold); allocations name"
        " the pool\n(somaMallocFromPoolAsync, S5).\n");
    story(pool, false, bytes).run_basics();
  }
  {
    soma::pool_options options;
    options.device = 0;
    options.release_threshold_bytes = 64 * kMiB;  // a synchronize keeps the memory mapped
    options.name = "strict";
    const soma::pool pool(options);
    std::printf("\n=== Part 3: two reuse policies off: pool 'strict' (release threshold %s) ===\n",
                format_bytes(pool.release_threshold()).c_str());
    std::printf(
        "The reuse policies are pool attributes, all on by default (S11). This pool turns"
        " two off:\n");
    set_policy(pool, "strict", somaMemPoolReuseFollowEventDependencies,
               "somaMemPoolReuseFollowEventDependencies", 0);
    set_policy(pool, "strict", somaMemPoolReuseAllowOpportunistic,
               "somaMemPoolReuseAllowOpportunistic", 0);
    std::printf(
        "Now memory freed on one stream serves another only once a synchronize or a"
        " successful\nquery proves the free complete, or through internal dependencies"
        " when the pool cannot grow.\n");
    story(pool, false, bytes).run_policies_off();
  }
  {
    soma::pool_options options;
    options.device = 0;
    options.max_size_bytes = bytes;
    options.name = "bounded";
    const soma::pool pool(options);
    std::printf("\n=== Part 4: a pool that cannot grow: pool 'bounded' (max size %s) ===\n",
                format_bytes(bytes).c_str());
    std::printf(
        "somaMemPoolCreate with maxSize %s: one allocation fills it. The reuse policies"
        " are\nas by default.\n",
        format_bytes(bytes).c_str());
    story(pool, false, bytes).run_internal_dependencies("bounded");
  }
  std::printf(
      "\ndemo finished: every outcome shown above is the one the text gives, and the"
      " consumer\nsaw the producer's bytes in every part.\n");
  return 0;
}

}  // namespace soma::tools
