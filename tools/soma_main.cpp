// soma: the command line program. Dispatches to a subcommand and turns soma's exceptions
// into a message (error name + the thread's last-error message) and a non-zero exit status.
#include "commands.hpp"

#include <soma/soma.hpp>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>

namespace soma::tools {

bool read_whole_file(const char* command, const std::string& path, std::string* text) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "soma %s: cannot read '%s': %s\n", command, path.c_str(),
                 std::strerror(errno));
    return false;
  }
  std::stringstream contents;
  contents << in.rdbuf();
  *text = contents.str();
  return true;
}

std::string format_bytes(std::uint64_t bytes) {
  if (bytes == UINT64_MAX) return "unlimited (UINT64_MAX)";
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  std::uint64_t scale = 1;
  while (unit < 5 && bytes >= scale * 1024) {
    scale *= 1024;
    ++unit;
  }
  char text[64];
  if (bytes % scale == 0) {
    std::snprintf(text, sizeof text, "%" PRIu64 " %s", bytes / scale, units[unit]);
  } else {
    std::snprintf(text, sizeof text, "%.2f %s (%" PRIu64 " B)",
                  static_cast<double>(bytes) / static_cast<double>(scale), units[unit], bytes);
  }
  return text;
}

}  // namespace soma::tools

namespace {

void print_usage(std::FILE* out) {
  std::fputs(
      "usage: soma <command>\n"
      "\n"
      "soma is a stream-ordered memory allocator with memory pools (cudaMallocAsync's\n"
      "semantics, on the GPU or on the CPU).\n"
      "\n"
      "commands:\n"
      "  info    backend, devices, their memory and pools, and the SOMA_* environment\n"
      "  demo    a producer, a consumer and a releaser stream share one allocation; shows\n"
      "          reuse, reserved and used memory, synchronize and trim, and the reuse\n"
      "          policies that decide when one stream's free serves another stream\n"
      "  report  TRACE.json [-o PAGE.html]: the page of a memory-history trace (memory over\n"
      "          time in total and per stream, the peak's largest blocks and holes, out-of-\n"
      "          memory failures); record one with SOMA_HISTORY=<events>\n"
      "          SOMA_HISTORY_TRACE=<path>\n"
      "  replay  TRACE.json [--try threshold=0,internal=0,compact=1 ...]: the trace replayed\n"
      "          on the pool logic under its recorded settings and others: peak memory,\n"
      "          inserted waits, synchronizes, failures, side by side\n"
      "  help    this text\n"
      "\n"
      "environment: SOMA_BACKEND=cpu|cuda|auto, SOMA_CPU_DEVICES, SOMA_CPU_DEVICE_MEMORY,\n"
      "SOMA_CPU_GRANULARITY (see `soma info`), SOMA_HISTORY, SOMA_HISTORY_TRACE.\n",
      out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stdout);
    return 0;
  }
  const char* command = argv[1];
  if (std::strcmp(command, "help") == 0 || std::strcmp(command, "--help") == 0 ||
      std::strcmp(command, "-h") == 0) {
    print_usage(stdout);
    return 0;
  }
  try {
    if (std::strcmp(command, "info") == 0) return soma::tools::run_info(argc - 1, argv + 1);
    if (std::strcmp(command, "demo") == 0) return soma::tools::run_demo(argc - 1, argv + 1);
    if (std::strcmp(command, "report") == 0) return soma::tools::run_report(argc - 1, argv + 1);
    if (std::strcmp(command, "replay") == 0) return soma::tools::run_replay(argc - 1, argv + 1);
  } catch (const soma::error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "soma %s: failed: %s: %s\n", command, e.name(), e.detail());
    return 1;
  } catch (const soma::bad_alloc& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "soma %s: failed: %s: %s\n", command, e.name(), e.detail());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "soma %s: failed: %s\n", command, e.what());
    return 1;
  }
  std::fprintf(stderr, "soma: unknown command '%s'\n\n", command);
  print_usage(stderr);
  return 2;
}
