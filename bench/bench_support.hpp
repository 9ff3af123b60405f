// What every benchmark program shares: timing helpers and the lines that name the machine.
#pragma once

#include <sys/utsname.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace soma_bench {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Requires: values is not empty.
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

/// "256 B", "4 KiB", "64 MiB".
inline std::string size_name(std::size_t bytes) {
  constexpr std::size_t kib = std::size_t{1} << 10;
  constexpr std::size_t mib = std::size_t{1} << 20;
  char text[32];
  if (bytes >= mib) {
    std::snprintf(text, sizeof text, "%zu MiB", bytes / mib);
  } else if (bytes >= kib) {
    std::snprintf(text, sizeof text, "%zu KiB", bytes / kib);
  } else {
    std::snprintf(text, sizeof text, "%zu B", bytes);
  }
  return text;
}

inline std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const std::size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

/// "2026-11-30 12:21:07 UTC"
inline std::string utc_date_text() {
  const std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  return date;
}

/// The "cpu" and "kernel" lines of a benchmark's header.
inline void print_cpu_and_kernel() {
  utsname system_name{};
  uname(&system_name);
  std::printf("cpu         %s (%u hardware threads)\n", cpu_model().c_str(),
              std::thread::hardware_concurrency());
  std::printf("kernel      %s %s %s\n", system_name.sysname, system_name.release,
              system_name.machine);
}

/// Memory history's cost on one measure: `rounds` rounds, each a `measure()` (ns per operation)
/// with recording off and one with it on (a ring of 2^20 events), their order turning about from
/// round to round. A host's slow phase lasts seconds and a round a fraction of one, so a round's
/// two measures meet the same phase: the increase is the median of the rounds' own increases (the
/// medians of off and on alone, printed beside it, may come from different phases). Prints it
/// beside the goal (recording on adds at most 5 %) with the rounds' range. `record` is
/// somaMemRecordHistory.
template <typename Measure, typename Record>
void print_history_cost(const std::string& scenario, Measure measure, Record record,
                        int rounds = 9) {
  std::vector<double> off;
  std::vector<double> on;
  std::vector<double> increases;
  for (int round = 0; round < rounds; ++round) {
    double off_ns = 0;
    double on_ns = 0;
    const auto measure_on = [&] {
      record(std::size_t{1} << 20);
      on_ns = measure();
      record(0);
    };
    if (round % 2 == 0) {
      off_ns = measure();
      measure_on();
    } else {
      measure_on();
      off_ns = measure();
    }
    off.push_back(off_ns);
    on.push_back(on_ns);
    increases.push_back(100.0 * (on_ns - off_ns) / off_ns);
  }
  const auto [low, high] = std::minmax_element(increases.begin(), increases.end());
  const double low_increase = *low;
  const double high_increase = *high;
  const double increase = median(std::move(increases));
  std::printf("%-48s %9.1f %9.1f %+8.1f %%   goal <= +5 %%: %-7s (rounds %+.1f to %+.1f %%)\n",
              scenario.c_str(), median(std::move(off)), median(std::move(on)), increase,
              increase <= 5.0 ? "met" : "NOT met", low_increase, high_increase);
}

/// Aggregate ns per pair of thread_count threads that run pairs until told to stop, the median of
/// `trials` trials of about trial_seconds each. Each trial: before_trial() (outside the clock),
/// then every thread t runs warm(t) and meets the others at a start line; the clock starts before
/// any thread may count a pair (taken after the start line, it started late whenever threads
/// outnumbered cores and the main thread waited for one), and each thread runs pair(t) in bursts
/// of `burst`. The clock stops when the threads are told to stop, before the joins: joining
/// threads that outnumber the cores waits for each to be scheduled again, which counted against
/// the rows with many threads. A thread counts at most the burst it was in when told to stop.
template <typename Warm, typename Pair, typename BeforeTrial>
double threaded_pairs_ns(int thread_count, int trials, double trial_seconds, int burst, Warm warm,
                         Pair pair, BeforeTrial before_trial) {
  std::vector<double> results;
  for (int trial = 0; trial < trials; ++trial) {
    before_trial();
    std::atomic<bool> stop{false};
    std::atomic<bool> go{false};
    std::vector<long> pairs(static_cast<std::size_t>(thread_count), 0);
    std::barrier start_line(thread_count + 1);
    std::vector<std::thread> threads;
    threads.reserve(static_cast<std::size_t>(thread_count));
    for (int t = 0; t < thread_count; ++t) {
      threads.emplace_back([&, t] {
        warm(t, trial);
        start_line.arrive_and_wait();
        go.wait(false);
        long done = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          for (int i = 0; i < burst; ++i) pair(t);
          done += burst;
        }
        pairs[static_cast<std::size_t>(t)] = done;
      });
    }
    start_line.arrive_and_wait();
    const std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    go.store(true);
    go.notify_all();
    std::this_thread::sleep_for(std::chrono::duration<double>(trial_seconds));
    const double elapsed = seconds_since(start);
    stop.store(true);
    for (std::thread& thread : threads) thread.join();
    long total = 0;
    for (long count : pairs) total += count;
    results.push_back(elapsed * 1e9 / static_cast<double>(std::max(total, 1L)));
  }
  return median(results);
}

/// For each of `configurations`, the median of `trials` results of trial(configuration, round),
/// taken in rounds: each round runs every configuration once, in turn, so that a slow or fast
/// phase of the host weighs on all of them alike. For rows compared with each other.
template <typename Trial>
std::vector<double> interleaved_medians(std::size_t configurations, int trials, Trial trial) {
  std::vector<std::vector<double>> results(configurations);
  for (int round = 0; round < trials; ++round) {
    for (std::size_t c = 0; c < configurations; ++c) results[c].push_back(trial(c, round));
  }
  std::vector<double> medians;
  medians.reserve(configurations);
  for (std::vector<double>& r : results) medians.push_back(median(std::move(r)));
  return medians;
}

inline void print_history_header() {
  std::printf("\nmemory history (ns per pair)                      %9s %9s %10s\n", "off", "on",
              "increase (median of the rounds' own)");
}

}  // namespace soma_bench
