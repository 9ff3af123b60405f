// Address space, physical memory, mapping, access and export of the cuda backend: the
// driver's virtual memory API (design §"Physical memory"; reference §4).
#include <algorithm>
#include <cstdint>
#include <new>
#include <numeric>
#include <span>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/host_memory.hpp"

namespace soma::detail::backend::cuda {
namespace {

int protection(access_flags flags) {
  switch (flags) {
    case access_flags::none:
      return CU_MEM_ACCESS_FLAGS_PROT_NONE;
    case access_flags::read:
      return CU_MEM_ACCESS_FLAGS_PROT_READ;
    case access_flags::read_write:
      return CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  return CU_MEM_ACCESS_FLAGS_PROT_NONE;
}

CUmemAccessDesc access_for(int device, int flags) {
  CUmemAccessDesc desc;
  desc.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  desc.flags = flags;
  return desc;
}

/// The host's own access to host memory: a HOST_NUMA entry (the driver ignores its id).
CUmemAccessDesc host_access() {
  CUmemAccessDesc desc;
  desc.location = {CU_MEM_LOCATION_TYPE_HOST_NUMA, 0};
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return desc;
}

CUmemLocation driver_location(memory_location where) {
  switch (where.type) {
    case memory_location::kind::host:
      return {CU_MEM_LOCATION_TYPE_HOST, 0};
    case memory_location::kind::host_numa:
      return {CU_MEM_LOCATION_TYPE_HOST_NUMA, where.id};
    case memory_location::kind::device:
      break;
  }
  return {CU_MEM_LOCATION_TYPE_DEVICE, where.id};
}

std::string range_text(std::uintptr_t address, std::size_t bytes) {
  return format_bytes(bytes) + " at " + format_address(address);
}

}  // namespace

cuda_backend::reservation* cuda_backend::find_reservation(std::uintptr_t address,
                                                          std::size_t bytes) {
  std::lock_guard lock(memory_mutex_);
  auto it = reservations_.upper_bound(address);
  if (it == reservations_.begin()) return nullptr;
  --it;
  const std::uintptr_t base = it->first;
  if (address + bytes > base + it->second->bytes || address + bytes < address) return nullptr;
  return it->second.get();
}

result<cuda_backend::reservation*> cuda_backend::reservation_of(std::uintptr_t address,
                                                                std::size_t bytes) {
  if (reservation* r = find_reservation(address, bytes)) return r;
  return status(
      error_code::invalid_value,
      range_text(address, bytes) + " is not inside an address range this backend reserved");
}

std::size_t cuda_backend::granularity_of(memory_location where) const {
  if (!where.is_host())
    return devices_[static_cast<std::size_t>(where.id)]->properties.granularity_bytes;
  return host_properties(where).granularity_bytes;
}

status cuda_backend::check_location(memory_location where) const {
  if (!where.is_host()) return check_device(where.id);
  const device_properties& first = devices_.front()->properties;
  const bool supported = where.type == memory_location::kind::host
                             ? first.host_memory_pools_supported
                             : first.host_numa_memory_pools_supported;
  if (supported) return status::success();
  return status(error_code::not_supported,
                "memory on " + describe(where) +
                    ": the driver reports no host memory through the virtual memory API "
                    "(CU_DEVICE_ATTRIBUTE_HOST_*MEMORY_POOLS_SUPPORTED and "
                    "..._VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)");
}

device_properties cuda_backend::host_properties(memory_location where) const {
  device_properties p = devices_.front()->properties;
  p.name = describe(where);
  p.total_memory_bytes = host_memory_bytes();
  // CUDA: memory of the host location cannot be exported; a host NUMA node's can.
  if (where.type == memory_location::kind::host) p.supported_handle_types = 0;
  context_scope scope(driver_, devices_.front()->context);
  CUmemAllocationProp prop;
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = driver_location(where);
  std::size_t granularity = 0;
  if (scope.entered().ok() &&
      driver_.cuMemGetAllocationGranularity(&granularity, &prop,
                                            CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) == CUDA_SUCCESS &&
      granularity != 0) {
    p.granularity_bytes = std::lcm(p.granularity_bytes, granularity);
    p.growth_step_bytes =
        (p.growth_step_bytes + p.granularity_bytes - 1) / p.granularity_bytes * p.granularity_bytes;
  }
  return p;
}

result<std::uintptr_t> cuda_backend::reserve_address(memory_location where, std::size_t bytes) {
  if (status checked = check_location(where); !checked.ok()) return checked;
  const int device = where.context_device();
  const std::size_t granularity = granularity_of(where);
  const std::size_t rounded = (bytes + granularity - 1) / granularity * granularity;
  // Host memory first (the record), and a record that cannot be filed gives the range back:
  // what soma does not know of, nothing would free.
  auto record = std::make_unique<reservation>();
  record->device = device;
  record->host = where.is_host();
  record->bytes = rounded;
  context_scope scope(driver_, devices_[static_cast<std::size_t>(device)]->context);
  if (!scope.entered().ok()) return scope.entered();
  CUdeviceptr base = 0;
  const CUresult reserved = driver_.cuMemAddressReserve(&base, rounded, granularity, 0, 0);
  if (reserved != CUDA_SUCCESS) {
    // S16: the limit is the driver's virtual address space for this process.
    return status(error_code::address_space_exhausted,
                  driver_
                      .check(reserved, "cuMemAddressReserve",
                             "reserving " + format_bytes(rounded) +
                                 " of device address space "
                                 "for device " +
                                 std::to_string(device) +
                                 " (the driver's virtual address space is exhausted or fragmented;"
                                 " lower the pool's maxSize)")
                      .message());
  }
  try {
    std::lock_guard lock(memory_mutex_);
    reservations_[static_cast<std::uintptr_t>(base)] = std::move(record);
  } catch (const std::bad_alloc&) {
    driver_.cuMemAddressFree(base, rounded);
    throw;
  }
  return static_cast<std::uintptr_t>(base);
}

void cuda_backend::free_address(std::uintptr_t base, std::size_t bytes) {
  std::size_t reserved_bytes = bytes;
  int device = 0;
  {
    std::lock_guard lock(memory_mutex_);
    auto it = reservations_.find(base);
    if (it == reservations_.end()) return;  // not ours
    reserved_bytes = it->second->bytes;
    device = it->second->device;
    reservations_.erase(it);
  }
  context_scope scope(driver_, devices_[static_cast<std::size_t>(device)]->context);
  if (scope.entered().ok())
    driver_.cuMemAddressFree(static_cast<CUdeviceptr>(base), reserved_bytes);
}

void cuda_backend::memory_info(int device, std::size_t* free_bytes,
                               std::size_t* total_bytes) const {
  context_scope scope(driver_, devices_[static_cast<std::size_t>(device)]->context);
  if (!scope.entered().ok() || driver_.cuMemGetInfo(free_bytes, total_bytes) != CUDA_SUCCESS) {
    *total_bytes = properties(device).total_memory_bytes;
    *free_bytes = *total_bytes - std::min(*total_bytes, committed_bytes(device));
  }
}

std::string cuda_backend::explain_out_of_memory(int device, std::size_t bytes,
                                                CUresult created) const {
  std::string text = driver_
                         .check(created, "cuMemCreate",
                                format_bytes(bytes) + " on device " + std::to_string(device))
                         .message();
  std::size_t free_bytes = 0, total_bytes = 0;
  if (driver_.cuMemGetInfo(&free_bytes, &total_bytes) == CUDA_SUCCESS) {
    text +=
        "; the device has " + format_bytes(free_bytes) + " free of " + format_bytes(total_bytes);
  }
  return text + ", soma's pools in this process hold " + format_bytes(committed_bytes(device));
}

result<std::uint64_t> cuda_backend::create_physical(memory_location where, std::size_t bytes,
                                                    unsigned export_handle_types) {
  if (status checked = check_location(where); !checked.ok()) return checked;
  const int device = where.context_device();
  device_state& d = *devices_[static_cast<std::size_t>(device)];
  context_scope scope(driver_, d.context);
  if (!scope.entered().ok()) return scope.entered();
  CUmemAllocationProp prop;
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = driver_location(where);  // the ordinal, or the host (NUMA node)
  if ((export_handle_types & handle_type_posix_fd) != 0)
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle handle = 0;
  const CUresult created = driver_.cuMemCreate(&handle, bytes, &prop, 0);
  if (created == CUDA_ERROR_OUT_OF_MEMORY && !where.is_host()) {
    return status(error_code::out_of_memory, explain_out_of_memory(device, bytes, created));
  }
  if (status s = driver_.check(created, "cuMemCreate",
                               [&] { return format_bytes(bytes) + " on " + describe(where); });
      !s.ok())
    return s;
  try {
    std::lock_guard lock(memory_mutex_);
    physicals_[handle] =
        physical{.device = device, .bytes = bytes, .counts_against_device = !where.is_host()};
  } catch (const std::bad_alloc&) {
    driver_.cuMemRelease(handle);  // not recorded: nothing else would release it
    throw;
  }
  if (!where.is_host()) d.committed_bytes.fetch_add(bytes, std::memory_order_acq_rel);
  return static_cast<std::uint64_t>(handle);
}

void cuda_backend::release_physical(std::uint64_t handle) {
  physical released;
  {
    std::lock_guard lock(memory_mutex_);
    auto it = physicals_.find(handle);
    if (it == physicals_.end()) return;  // not ours
    released = it->second;
    if (--it->second.references == 0) physicals_.erase(it);
  }
  // Each create and each import holds one reference of the driver's.
  context_scope scope(driver_, devices_[static_cast<std::size_t>(released.device)]->context);
  if (scope.entered().ok()) driver_.cuMemRelease(handle);
  if (released.counts_against_device && released.references == 1) {
    devices_[static_cast<std::size_t>(released.device)]->committed_bytes.fetch_sub(
        released.bytes, std::memory_order_acq_rel);
  }
}

status cuda_backend::map_part(std::uintptr_t address, std::size_t bytes, std::uint64_t handle,
                              std::size_t offset, memory_location owner) {
  const mapping_part part{handle, offset, bytes};
  return map_parts(address, std::span(&part, 1), owner);
}

status cuda_backend::map_parts(std::uintptr_t address, std::span<const mapping_part> parts,
                               memory_location owner) {
  std::size_t total_bytes = 0;
  for (const mapping_part& part : parts) {
    if (part.offset != 0) {
      return status(error_code::not_supported,
                    "cuMemMap maps a physical allocation from its start only (offset " +
                        std::to_string(part.offset) + " asked)");
    }
    total_bytes += part.bytes;
  }
  if (status checked = check_location(owner); !checked.ok()) return checked;
  const int device = owner.context_device();
  result<reservation*> found = reservation_of(address, total_bytes);
  if (!found.ok()) return found.take_error();
  reservation* r = found.value();
  std::lock_guard lock(r->mutex);
  context_scope scope(driver_, devices_[static_cast<std::size_t>(device)]->context);
  if (!scope.entered().ok()) return scope.entered();
  // Mapping grants no access: the owner (a device, or the host for host memory), then every
  // device granted the reservation, in one grant over the whole range (cuMemSetAccess costs
  // tens of microseconds a call). Host memory first: the list is made before anything is mapped.
  std::vector<CUmemAccessDesc> access{
      owner.is_host() ? host_access() : access_for(device, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)};
  for (const auto& [peer, flags] : r->granted) {
    if ((owner.is_host() || peer != device) && flags != access_flags::none)
      access.push_back(access_for(peer, protection(flags)));
  }
  const auto base = static_cast<CUdeviceptr>(address);
  std::size_t mapped_bytes = 0;
  for (const mapping_part& part : parts) {
    const CUresult mapped = driver_.cuMemMap(base + mapped_bytes, part.bytes, 0, part.handle, 0);
    if (mapped != CUDA_SUCCESS) {
      unmap_mappings(address, parts.first(static_cast<std::size_t>(&part - parts.data())));
      return driver_.check(mapped, "cuMemMap",
                           [&] { return range_text(address + mapped_bytes, part.bytes); });
    }
    mapped_bytes += part.bytes;
  }
  CUresult granted = driver_.cuMemSetAccess(base, total_bytes, access.data(), access.size());
  if (granted == CUDA_ERROR_INVALID_VALUE && owner.type == memory_location::kind::host) {
    // Memory of the host location (no NUMA node) may name the host as HOST instead.
    access.front().location = {CU_MEM_LOCATION_TYPE_HOST, 0};
    granted = driver_.cuMemSetAccess(base, total_bytes, access.data(), access.size());
  }
  if (granted != CUDA_SUCCESS) {
    unmap_mappings(address, parts);
    return driver_.check(
        granted, "cuMemSetAccess",
        range_text(address, total_bytes) + " for " + std::to_string(access.size()) + " device(s)");
  }
  std::uintptr_t at = address;
  try {
    for (const mapping_part& part : parts) {
      r->mapped_bytes[at] = part.bytes;
      at += part.bytes;
    }
  } catch (const std::bad_alloc&) {
    // Mappings soma has no record of would be found mapped by the next map there.
    r->mapped_bytes.erase(r->mapped_bytes.lower_bound(address), r->mapped_bytes.lower_bound(at));
    unmap_mappings(address, parts);
    throw;
  }
  return status::success();
}

void cuda_backend::unmap(std::uintptr_t address, std::size_t bytes) {
  reservation* r = find_reservation(address, bytes);
  if (r == nullptr) return;
  std::lock_guard lock(r->mutex);
  context_scope scope(driver_, devices_[static_cast<std::size_t>(r->device)]->context);
  // Not stream ordered: the caller unmaps only memory no pending work uses.
  const auto first = r->mapped_bytes.lower_bound(address);
  const auto last = r->mapped_bytes.lower_bound(address + bytes);
  if (scope.entered().ok()) {
    std::size_t recorded_bytes = 0;
    std::size_t count = 0;
    for (auto it = first; it != last; ++it, ++count) recorded_bytes += it->second;
    const mapping_part whole{0, 0, bytes};
    std::vector<mapping_part> mapped;
    if (recorded_bytes == bytes && count > 1) {
      try {
        mapped.reserve(count);
        for (auto it = first; it != last; ++it) mapped.push_back({0, 0, it->second});
      } catch (const std::bad_alloc&) {
        mapped.clear();  // the range as asked: one call, or the driver refuses and it stays
      }
    }
    // Not as recorded, one mapping, or no host memory for the list: the range as asked.
    unmap_mappings(address, mapped.empty() ? std::span(&whole, 1) : std::span(mapped));
  }
  r->mapped_bytes.erase(first, last);
}

void cuda_backend::unmap_mappings(std::uintptr_t address, std::span<const mapping_part> parts) {
  std::size_t total_bytes = 0;
  for (const mapping_part& part : parts) total_bytes += part.bytes;
  if (total_bytes == 0) return;
  // cuMemUnmap takes a range of whole mappings end to end (NVIDIA's vectorAddMMAP sample unmaps
  // its per-device stripes so), and costs 16-27 us a call whatever it covers: one call for the
  // range. A driver that refuses it gets one call a mapping.
  if (driver_.cuMemUnmap(static_cast<CUdeviceptr>(address), total_bytes) == CUDA_SUCCESS ||
      parts.size() == 1)
    return;
  unmap_fallbacks_.fetch_add(1, std::memory_order_relaxed);
  std::uintptr_t at = address;
  for (const mapping_part& part : parts) {
    driver_.cuMemUnmap(static_cast<CUdeviceptr>(at), part.bytes);
    at += part.bytes;
  }
}

status cuda_backend::set_access(std::uintptr_t address, std::size_t bytes, int device,
                                access_flags flags) {
  if (status checked = check_device(device); !checked.ok()) return checked;
  result<reservation*> found = reservation_of(address, bytes);
  if (!found.ok()) return found.take_error();
  reservation* r = found.value();
  std::lock_guard lock(r->mutex);
  if (!r->host && device == r->device) {
    if (flags == access_flags::read_write) return status::success();
    return status(error_code::invalid_value, "device " + std::to_string(device) +
                                                 " owns this memory and keeps read-write access");
  }
  // Host memory belongs to no device: any device may be granted it.
  if (!r->host && flags != access_flags::none && !can_access_peer(device, r->device)) {
    return status(error_code::invalid_device,
                  "device " + std::to_string(device) + " cannot access memory of device " +
                      std::to_string(r->device) + " (cuDeviceCanAccessPeer says no)");
  }
  context_scope scope(driver_, devices_[static_cast<std::size_t>(r->device)]->context);
  if (!scope.entered().ok()) return scope.entered();
  const CUmemAccessDesc access = access_for(device, protection(flags));
  // Every mapped piece that overlaps the range; later maps read `granted`.
  for (auto it = r->mapped_bytes.begin(); it != r->mapped_bytes.end(); ++it) {
    // Named, not a structured binding: clang 14 cannot capture one in the lambda below.
    const std::uintptr_t piece = it->first;
    const std::size_t piece_bytes = it->second;
    if (piece + piece_bytes <= address || piece >= address + bytes) continue;
    if (status s = driver_.check(
            driver_.cuMemSetAccess(static_cast<CUdeviceptr>(piece), piece_bytes, &access, 1),
            "cuMemSetAccess",
            [&] {
              return range_text(piece, piece_bytes) + " for device " + std::to_string(device);
            });
        !s.ok())
      return s;
  }
  if (flags == access_flags::none) {
    r->granted.erase(device);
  } else {
    r->granted[device] = flags;
  }
  return status::success();
}

result<int> cuda_backend::export_physical(std::uint64_t handle) {
  int device = 0;
  {
    std::lock_guard lock(memory_mutex_);
    auto it = physicals_.find(handle);
    if (it == physicals_.end()) {
      return status(error_code::invalid_handle, "physical handle " + std::to_string(handle) +
                                                    " was not created by this backend");
    }
    device = it->second.device;
  }
  context_scope scope(driver_, devices_[static_cast<std::size_t>(device)]->context);
  if (!scope.entered().ok()) return scope.entered();
  int fd = -1;
  if (status s = driver_.check(driver_.cuMemExportToShareableHandle(
                                   &fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                               "cuMemExportToShareableHandle",
                               [] {
                                 return std::string(
                                     "exporting needs a pool created with "
                                     "somaMemHandleTypePosixFileDescriptor");
                               });
      !s.ok())
    return s;
  return fd;
}

result<std::uint64_t> cuda_backend::import_physical(int device, int fd, std::size_t bytes) {
  if (status checked = check_device(device); !checked.ok()) return checked;
  context_scope scope(driver_, devices_[static_cast<std::size_t>(device)]->context);
  if (!scope.entered().ok()) return scope.entered();
  CUmemGenericAllocationHandle handle = 0;
  // The descriptor goes by value in the pointer; the driver does not take it over.
  void* os_handle = reinterpret_cast<void*>(static_cast<std::intptr_t>(fd));
  if (status s = driver_.check(
          driver_.cuMemImportFromShareableHandle(&handle, os_handle,
                                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
          "cuMemImportFromShareableHandle",
          [&] { return "descriptor " + std::to_string(fd) + " of " + format_bytes(bytes); });
      !s.ok())
    return s;
  try {
    std::lock_guard lock(memory_mutex_);
    auto [it, inserted] = physicals_.try_emplace(
        handle, physical{.device = device, .bytes = bytes, .counts_against_device = false});
    if (!inserted) ++it->second.references;  // the driver hands out one handle per allocation
  } catch (const std::bad_alloc&) {
    driver_.cuMemRelease(handle);  // the import's reference: not recorded, nothing would drop it
    throw;
  }
  return static_cast<std::uint64_t>(handle);
}

}  // namespace soma::detail::backend::cuda
