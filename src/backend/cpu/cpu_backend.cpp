#include "backend/cpu/cpu_backend.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/cpu/cpu_event.hpp"
#include "backend/cpu/cpu_stream.hpp"
#include "backend/fork_guard.hpp"
#include "backend/host_memory.hpp"
#include "backend/os_error.hpp"
#include "backend/sequential_graph.hpp"

namespace soma::detail::backend::cpu {
namespace {

std::size_t process_virtual_size_bytes() {
  unsigned long long pages = 0;
  if (FILE* statm = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(statm, "%llu", &pages) != 1) pages = 0;
    std::fclose(statm);
  }
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// S16: say which limit made a reservation fail.
std::string explain_reservation_failure(std::size_t bytes, int error) {
  std::string text = "mmap(PROT_NONE) reserving " + format_bytes(bytes) +
                     " of address space failed (" + errno_text(error) + ")";
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    text += ": RLIMIT_AS (ulimit -v) is " + format_bytes(limit.rlim_cur) +
            " and the process already maps " + format_bytes(process_virtual_size_bytes()) +
            "; raise the limit or lower SOMA_CPU_DEVICE_MEMORY / the pool's maxSize";
  } else {
    text += ": the kernel refused the address range (vm.max_map_count or overcommit policy)";
  }
  return text;
}

}  // namespace

cpu_backend::cpu_backend(const resolved_settings& settings)
    : settings_(settings), committed_(static_cast<std::size_t>(settings.device_count)) {
  note_backend_started("cpu");
  // Pools keep one descriptor per physical chunk: allow as many as the hard limit permits.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
}

device_properties cpu_backend::properties(int device) const {
  device_properties p;
  p.name = "cpu executor " + std::to_string(device);
  p.total_memory_bytes = settings_.device_memory_bytes;
  p.granularity_bytes = settings_.granularity_bytes;
  // Part of a memfd can go back on its own (punch hole), so small steps cost nothing later.
  p.growth_step_bytes = settings_.granularity_bytes;
  p.supported_handle_types = handle_type_posix_fd;
  return p;
}

device_properties cpu_backend::host_properties(memory_location where) const {
  device_properties p = properties(0);
  p.name = describe(where);
  p.total_memory_bytes = host_memory_bytes();
  // CUDA: memory of a host (not NUMA) location cannot be exported.
  p.supported_handle_types = where.type == memory_location::kind::host ? 0 : handle_type_posix_fd;
  return p;
}

std::atomic<std::size_t>& cpu_backend::committed_of(memory_location where) {
  if (where.is_host()) return host_committed_;
  return committed_[static_cast<std::size_t>(where.id)];
}

std::atomic<std::size_t>& cpu_backend::committed_of(const physical& p) {
  return p.host ? host_committed_ : committed_[static_cast<std::size_t>(p.device)];
}

std::size_t cpu_backend::budget_of(memory_location where) const {
  return where.is_host() ? host_memory_bytes() : settings_.device_memory_bytes;
}

std::size_t cpu_backend::committed_bytes(int device) const {
  return committed_[static_cast<std::size_t>(device)].load(std::memory_order_acquire);
}

void cpu_backend::memory_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) const {
  const std::size_t committed = committed_bytes(device);
  *total_bytes = settings_.device_memory_bytes;
  *free_bytes = committed >= *total_bytes ? 0 : *total_bytes - committed;
}

bool cpu_backend::can_access_peer(int device, int peer) const {
  return device != peer && device >= 0 && peer >= 0 && device < settings_.device_count &&
         peer < settings_.device_count;
}

result<std::uintptr_t> cpu_backend::reserve_address(memory_location /*where*/, std::size_t bytes) {
  const std::size_t alignment = settings_.granularity_bytes;
  const std::size_t padded = bytes + alignment;
  void* raw = mmap(nullptr, padded, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) {
    const int error = errno;
    return status(error == ENOMEM ? error_code::address_space_exhausted : error_code::unknown,
                  explain_reservation_failure(bytes, error));
  }
  // Trim to an aligned range so every chunk starts on a granule.
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + alignment - 1) / alignment * alignment;
  if (aligned > start) munmap(raw, aligned - start);
  const std::uintptr_t tail = aligned + bytes;
  const std::uintptr_t raw_end = start + padded;
  if (raw_end > tail) munmap(reinterpret_cast<void*>(tail), raw_end - tail);
  return aligned;
}

void cpu_backend::free_address(std::uintptr_t base, std::size_t bytes) {
  munmap(reinterpret_cast<void*>(base), bytes);
}

result<std::uint64_t> cpu_backend::create_physical(memory_location where, std::size_t bytes,
                                                   unsigned /*export_handle_types*/) {
  auto& committed = committed_of(where);
  const std::size_t budget = budget_of(where);
  std::size_t before = committed.load(std::memory_order_relaxed);
  do {
    if (before + bytes > budget || before + bytes < before) {
      return status(error_code::out_of_memory, describe(where) + " has " + format_bytes(before) +
                                                   " of " + format_bytes(budget) + " committed; " +
                                                   format_bytes(bytes) + " more do not fit");
    }
  } while (!committed.compare_exchange_weak(before, before + bytes, std::memory_order_acq_rel));
  result<int> made = make_memory(where, bytes);
  if (!made.ok()) {
    committed.fetch_sub(bytes, std::memory_order_acq_rel);
    return made.take_error();
  }
  std::lock_guard lock(mutex_);
  physicals_[made.value()] = physical{.device = where.context_device(),
                                      .bytes = bytes,
                                      .counts_against_device = true,
                                      .host = where.is_host()};
  return static_cast<std::uint64_t>(made.value());
}

result<int> cpu_backend::make_memory(memory_location where, std::size_t bytes) {
  const std::string place = describe(where);
  auto fail = [&](const char* call, int error) -> result<int> {
    if (is_out_of_descriptors(error))
      return descriptor_failure(std::string(call) + " of " + format_bytes(bytes) + " on " + place,
                                error);
    const bool no_memory = error == ENOSPC || error == ENOMEM || error == EFBIG;
    return status(no_memory ? error_code::out_of_memory : error_code::unknown,
                  std::string(call) + " of " + format_bytes(bytes) + " on " + place + " failed (" +
                      errno_text(error) + ")");
  };
  char name[40];
  if (where.is_host()) {
    std::snprintf(name, sizeof name, "soma-host-%d", where.id);
  } else {
    std::snprintf(name, sizeof name, "soma-device-%d", where.id);
  }
  const int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return fail("memfd_create", errno);
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int error = errno;
    close(fd);
    return fail("ftruncate", error);
  }
  if (where.type == memory_location::kind::host_numa) {
    // The policy belongs to the memory: set through a mapping, it rules the pages fallocate
    // makes below and every later mapping of them.
    void* view = mmap(nullptr, bytes, PROT_NONE, MAP_SHARED, fd, 0);
    status bound = view == MAP_FAILED ? status(error_code::unknown,
                                               "mmap for mbind failed (" + errno_text(errno) + ")")
                                      : bind_to_numa_node(view, bytes, where.id);
    if (view != MAP_FAILED) munmap(view, bytes);
    if (!bound.ok()) {
      close(fd);
      return bound;
    }
  }
  // fallocate commits the pages now, so running out is an error here and never a SIGBUS
  // on first touch.
  if (fallocate(fd, 0, 0, static_cast<off_t>(bytes)) != 0) {
    const int error = errno;
    close(fd);
    return fail("fallocate", error);
  }
  return fd;
}

void cpu_backend::release_physical(std::uint64_t handle) {
  const int fd = static_cast<int>(handle);
  physical released;
  {
    std::lock_guard lock(mutex_);
    auto it = physicals_.find(fd);
    if (it == physicals_.end()) return;
    released = it->second;
    physicals_.erase(it);
  }
  close(fd);
  if (released.counts_against_device) {
    committed_of(released).fetch_sub(released.bytes - released.discarded_bytes,
                                     std::memory_order_acq_rel);
  }
}

void cpu_backend::discard_physical_part(std::uint64_t handle, std::size_t offset,
                                        std::size_t bytes) {
  const int fd = static_cast<int>(handle);
  // Punching a hole frees the pages now; the memfd keeps its size for the pieces still mapped.
  fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
            static_cast<off_t>(bytes));
  std::lock_guard lock(mutex_);
  auto it = physicals_.find(fd);
  if (it == physicals_.end()) return;
  it->second.discarded_bytes += bytes;
  if (it->second.counts_against_device)
    committed_of(it->second).fetch_sub(bytes, std::memory_order_acq_rel);
}

status cpu_backend::map_part(std::uintptr_t address, std::size_t bytes, std::uint64_t handle,
                             std::size_t offset, memory_location owner) {
  void* mapped = mmap(reinterpret_cast<void*>(address), bytes, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_FIXED, static_cast<int>(handle), static_cast<off_t>(offset));
  if (mapped == MAP_FAILED) {
    const int error = errno;
    return status(error == ENOMEM ? error_code::address_space_exhausted : error_code::unknown,
                  "mmap(MAP_FIXED) of " + format_bytes(bytes) + " at " + format_address(address) +
                      " for " + describe(owner) + " failed (" + errno_text(error) + ")");
  }
  return status::success();
}

void cpu_backend::unmap(std::uintptr_t address, std::size_t bytes) {
  // Put the reservation back instead of munmap, so the range stays the pool's.
  void* reserved = mmap(reinterpret_cast<void*>(address), bytes, PROT_NONE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  if (reserved == MAP_FAILED) {
    // Keep the range (munmap could let another mapping land in the pool's addresses) but
    // make it inaccessible and give its pages back.
    mprotect(reinterpret_cast<void*>(address), bytes, PROT_NONE);
    madvise(reinterpret_cast<void*>(address), bytes, MADV_REMOVE);
  }
}

status cpu_backend::set_access(std::uintptr_t, std::size_t, int device, access_flags) {
  // Every cpu executor shares the process's address space; access between devices is
  // enforced by soma's own operations, not by page protection.
  if (device < 0 || device >= settings_.device_count)
    return status(error_code::invalid_device, "no device " + std::to_string(device));
  return status::success();
}

result<int> cpu_backend::export_physical(std::uint64_t handle) {
  const int fd = fcntl(static_cast<int>(handle), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return descriptor_failure("dup of a physical memory handle", errno);
  return fd;
}

result<std::uint64_t> cpu_backend::import_physical(int device, int fd, std::size_t bytes) {
  struct stat info {};
  if (fstat(fd, &info) != 0 || static_cast<std::size_t>(info.st_size) < bytes) {
    return status(error_code::invalid_value, "descriptor " + std::to_string(fd) +
                                                 " is not physical memory of at least " +
                                                 format_bytes(bytes));
  }
  const int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return descriptor_failure("dup of imported descriptor " + std::to_string(fd), errno);
  std::lock_guard lock(mutex_);
  physicals_[own] = physical{.device = device, .bytes = bytes, .counts_against_device = false};
  return static_cast<std::uint64_t>(own);
}

result<std::unique_ptr<stream>> cpu_backend::create_stream(int device, stream_timeline& timeline) {
  return std::unique_ptr<stream>(std::make_unique<cpu_stream>(device, timeline));
}

result<std::unique_ptr<stream>> cpu_backend::adopt_stream(int, void*, stream_timeline&, bool) {
  return status(error_code::not_supported,
                "the cpu backend has no native streams to adopt; use somaStreamCreate");
}

// Graphs replay their nodes on the launching stream; there is no native stream to record.
result<std::unique_ptr<work_graph>> cpu_backend::create_work_graph(int) {
  return std::unique_ptr<work_graph>(std::make_unique<sequential_graph>());
}

status cpu_backend::begin_native_capture(stream&) { return status::success(); }

result<void*> cpu_backend::end_native_capture(stream&) { return static_cast<void*>(nullptr); }

void cpu_backend::destroy_native_graph(void*) {}

result<std::unique_ptr<event>> cpu_backend::create_event() {
  return std::unique_ptr<event>(std::make_unique<cpu_event>());
}

result<void*> cpu_backend::allocate_host(std::size_t bytes) {
  // Ordinary anonymous pages: on the cpu every host page is as good as a pinned one.
  void* pointer =
      ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (pointer == MAP_FAILED) {
    const int error = errno;
    return status(error == ENOMEM ? error_code::out_of_memory : error_code::unknown,
                  "mmap of " + std::to_string(bytes) + " bytes of host memory failed (" +
                      std::strerror(error) + ")");
  }
  return pointer;
}

void cpu_backend::free_host(void* pointer, std::size_t bytes) { ::munmap(pointer, bytes); }

}  // namespace soma::detail::backend::cpu
