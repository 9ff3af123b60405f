// thread_scaling: does soma scale with threads where the host does? N threads (1 to 64) each
// run independent work for 0.3 s: a xorshift loop (the host's compute), glibc malloc/free pairs
// of 4 KiB (a thread-caching allocator), and soma pairs of 4 KiB on a stream of their own. Where
// soma falls and the other two do not, soma shares something between threads.
//
//   thread_scaling [--quick]              the table, on SOMA_BACKEND's backend (--quick: the same;
//                                          it takes about 8 s)
//   thread_scaling --profile N [ROUNDS]   soma pairs on N threads, sampled: ITIMER_PROF stops a
//                                          running thread every few ms and the interrupted
//                                          instruction is counted; prints the 40 most frequent
//                                          as object+offset (symbolize with addr2line -f -C -e).
//                                          A host without perf or hardware counters still answers.
#include <soma/soma.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>
#include <dlfcn.h>
#include <signal.h>
#include <sys/time.h>
#include <ucontext.h>

#include "bench_support.hpp"

namespace {

void escape(void* p) { asm volatile("" : : "g"(p) : "memory"); }

// Aggregate million operations per second of n threads, each running Work's step for 0.3 s.
template <class Work>
double rate(int n) {
  std::atomic<bool> stop{false};
  std::atomic<bool> go{false};
  std::vector<long> done(static_cast<std::size_t>(n) * 16, 0);  // a cache line apart
  std::barrier start(n + 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      Work work(t);
      start.arrive_and_wait();
      go.wait(false);
      long k = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (int i = 0; i < 16; ++i) work.step();
        k += 16;
      }
      done[static_cast<std::size_t>(t) * 16] = k;
    });
  }
  // The clock starts before any thread may count (taken after the barrier, it started late
  // whenever threads outnumbered cores and the main thread waited for one).
  start.arrive_and_wait();
  const auto begin = std::chrono::steady_clock::now();
  go.store(true);
  go.notify_all();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  stop = true;
  for (std::thread& thread : threads) thread.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  long total = 0;
  for (int t = 0; t < n; ++t) total += done[static_cast<std::size_t>(t) * 16];
  return static_cast<double>(total) / seconds / 1e6;
}

struct compute {
  explicit compute(int t) : x(0x9e3779b97f4a7c15ul + static_cast<unsigned long>(t)) {}
  void step() {
    for (int i = 0; i < 20; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
    }
    escape(&x);
  }
  unsigned long x;
};

struct malloc_pairs {
  explicit malloc_pairs(int) {}
  void step() {
    void* p = std::malloc(4096);
    escape(p);
    std::free(p);
  }
};

struct soma_pairs {
  explicit soma_pairs(int) {
    if (somaStreamCreate(&stream) != somaSuccess) std::abort();
  }
  ~soma_pairs() { (void)somaStreamDestroy(stream); }
  soma_pairs(const soma_pairs&) = delete;
  soma_pairs& operator=(const soma_pairs&) = delete;
  void step() {
    void* p = nullptr;
    if (somaMallocAsync(&p, 4096, stream) != somaSuccess) std::abort();
    escape(p);
    (void)somaFreeAsync(p, stream);
  }
  somaStream_t stream = nullptr;
};

// ---- the sampling profile --------------------------------------------------------------------

constexpr int kMaxSamples = 1 << 20;
std::atomic<int> sample_count{0};
void* samples[kMaxSamples];

void on_sample(int, siginfo_t*, void* context) {
  const int i = sample_count.fetch_add(1, std::memory_order_relaxed);
  if (i < kMaxSamples) {
    samples[i] = reinterpret_cast<void*>(
        static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_RIP]);  // x86-64
  }
}

void start_sampling() {
  struct sigaction action {};
  action.sa_sigaction = on_sample;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigaction(SIGPROF, &action, nullptr);
  itimerval every{{0, 1000}, {0, 1000}};
  setitimer(ITIMER_PROF, &every, nullptr);
}

void print_samples() {
  itimerval off{};
  setitimer(ITIMER_PROF, &off, nullptr);
  std::map<std::string, int> counts;
  const int n = std::min(sample_count.load(), kMaxSamples);
  for (int i = 0; i < n; ++i) {
    Dl_info info{};
    char where[512];
    if (dladdr(samples[i], &info) != 0 && info.dli_fname != nullptr) {
      std::snprintf(where, sizeof where, "%s+0x%lx %s", info.dli_fname,
                    static_cast<unsigned long>(static_cast<char*>(samples[i]) -
                                               static_cast<char*>(info.dli_fbase)),
                    info.dli_sname != nullptr ? info.dli_sname : "");
    } else {
      std::snprintf(where, sizeof where, "%p", samples[i]);
    }
    ++counts[where];
  }
  std::vector<std::pair<int, std::string>> top;
  for (const auto& [where, count] : counts) top.emplace_back(count, where);
  std::sort(top.rbegin(), top.rend());
  std::printf(
      "%d samples (process CPU time: fewer samples than threads x time = threads "
      "asleep)\n",
      n);
  for (std::size_t i = 0; i < top.size() && i < 40; ++i)
    std::printf("%7d %s\n", top[i].first, top[i].second.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const bool profile = argc >= 3 && std::strcmp(argv[1], "--profile") == 0;
  if (!profile && (argc > 2 || (argc == 2 && std::strcmp(argv[1], "--quick") != 0))) {
    std::fprintf(stderr, "usage: thread_scaling [--quick] | --profile THREADS [ROUNDS]\n");
    return 2;
  }
  const char* backend = std::getenv("SOMA_BACKEND");
  std::printf("thread_scaling — aggregate M ops/s of N threads on independent work\n");
  std::printf("date        %s\n", soma_bench::utc_date_text().c_str());
  soma_bench::print_cpu_and_kernel();
  std::printf("soma        backend %s (SOMA_BACKEND)\n", backend != nullptr ? backend : "default");
  if (profile) {
    const int threads = std::atoi(argv[2]);
    const int rounds = argc >= 4 ? std::atoi(argv[3]) : 8;
    (void)rate<soma_pairs>(threads);  // warm: streams, caches, growth
    start_sampling();
    for (int r = 0; r < rounds; ++r)
      std::printf("%d threads: %.1f M pairs/s\n", threads, rate<soma_pairs>(threads));
    print_samples();
    return 0;
  }
  std::printf("%8s %14s %14s %14s\n", "threads", "compute", "malloc pairs", "soma pairs");
  for (int n : {1, 2, 4, 6, 8, 12, 16, 32, 64}) {
    const double host = rate<compute>(n);
    const double glibc = rate<malloc_pairs>(n);
    const double soma = rate<soma_pairs>(n);
    std::printf("%8d %14.1f %14.1f %14.1f\n", n, host, glibc, soma);
    std::fflush(stdout);
  }
  return 0;
}
