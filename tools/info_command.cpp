// `soma info`: what soma sees on this machine — backend, devices, their memory and default
// pools — and the environment variables that change it.
#include "commands.hpp"

#include <soma/soma.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace soma::tools {
namespace {

struct environment_variable {
  const char* name;
  const char* default_value;
  const char* meaning;
};

constexpr environment_variable kEnvironment[] = {
    {"SOMA_BACKEND", "auto", "cpu, cuda, or auto (cuda where a driver and a device exist)"},
    {"SOMA_CPU_DEVICES", "1", "cpu backend: number of devices"},
    {"SOMA_CPU_DEVICE_MEMORY", "4G", "cpu backend: memory per device (bytes, K/M/G suffix)"},
    {"SOMA_CPU_GRANULARITY", "2M", "cpu backend: physical granule (power of two >= page)"},
    {"SOMA_HISTORY", "off", "memory history: events kept from the start (1 to 2^26)"},
    {"SOMA_HISTORY_TRACE", "none", "with SOMA_HISTORY: write the trace here at exit"},
};

std::string handle_type_names(unsigned mask) {
  if (mask == 0) return "none";
  std::string names;
  const auto add = [&names](const char* name) {
    if (!names.empty()) names += ", ";
    names += name;
  };
  if (mask & somaMemHandleTypePosixFileDescriptor) add("POSIX file descriptor");
  if (mask & somaMemHandleTypeWin32) add("Win32");
  if (mask & somaMemHandleTypeWin32Kmt) add("Win32 KMT");
  if (mask & somaMemHandleTypeFabric) add("fabric");
  return names;
}

const char* on_off(bool on) { return on ? "on" : "off"; }

void print_device(const soma::device& d, int device_count) {
  std::printf("\ndevice %d\n", d.ordinal());
  std::printf("  total memory            %s\n", format_bytes(d.total_memory_bytes()).c_str());

  // somaMemGetInfo answers for the calling thread's current device.
  const soma::device previous = soma::device::current();
  d.make_current();
  const soma::memory_info info = soma::get_memory_info();
  previous.make_current();
  std::printf("  free memory             %s (not committed by any pool)\n",
              format_bytes(info.free_bytes).c_str());
  std::printf("  allocation granularity  %s (pools commit and release memory in these units)\n",
              format_bytes(d.granularity_bytes()).c_str());
  std::printf("  memory pools supported  %s (S8)\n", d.memory_pools_supported() ? "yes" : "no");
  std::printf("  exportable handle types %s (S7, S8)\n",
              handle_type_names(d.supported_handle_types()).c_str());
  for (int peer = 0; peer < device_count; ++peer) {
    if (peer == d.ordinal()) continue;
    std::printf("  can access device %d     %s (access must still be granted, S6)\n", peer,
                d.can_access_peer(soma::device(peer)) ? "yes" : "no");
  }

  const soma::pool pool = d.default_pool();
  std::printf("  default pool\n");
  const std::uint64_t threshold = pool.release_threshold();
  std::printf("    release threshold     %s%s\n", format_bytes(threshold).c_str(),
              threshold == 0 ? " (freed memory goes back at every synchronize, S9)" : " (S9)");
  std::printf(
      "    reuse policies (S11)  follow event dependencies %s, opportunistic %s,\n"
      "                          internal dependencies %s\n",
      on_off(pool.reuse_follow_event_dependencies()), on_off(pool.reuse_allow_opportunistic()),
      on_off(pool.reuse_allow_internal_dependencies()));
  std::printf("    reserved / used       %s / %s (S10)\n",
              format_bytes(pool.reserved_bytes()).c_str(), format_bytes(pool.used_bytes()).c_str());
  const soma::pool current = d.current_pool();
  std::printf("    current pool          %s\n", current.handle() == pool.handle()
                                                    ? "the default pool (S4)"
                                                    : "an explicit pool (S4)");
}

}  // namespace

int run_info(int argc, char** argv) {
  (void)argc;
  (void)argv;
  const char* backend = soma::backend_name();
  const int device_count = soma::device_count();
  std::printf("soma info\n");
  std::printf("backend                   %s\n", backend);
  std::printf("devices                   %d\n", device_count);
  for (int ordinal = 0; ordinal < device_count; ++ordinal) {
    print_device(soma::device(ordinal), device_count);
  }

  std::printf("\nenvironment (read when the runtime starts)\n");
  for (const environment_variable& variable : kEnvironment) {
    const char* value = std::getenv(variable.name);
    std::string shown = value != nullptr ? std::string("= ") + value
                                         : std::string("unset, default ") + variable.default_value;
    std::printf("  %-24s %-22s %s\n", variable.name, shown.c_str(), variable.meaning);
  }
  return 0;
}

}  // namespace soma::tools
