#include "graph/graph_memory.hpp"

#include <algorithm>
#include <cstdint>

namespace soma::detail::graph {
namespace {

// Graph address space comes in large reservations: an alloc node's address costs nothing
// physical, and few reservations keep owns_address cheap.
constexpr std::size_t reservation_bytes = std::size_t{16} << 30;

std::size_t round_up(std::size_t bytes, std::size_t unit) {
  return (bytes + unit - 1) / unit * unit;
}

std::string name_of(const graph_allocation& a) {
  return "graph allocation " + std::to_string(a.id) + " at " + format_address(a.address) + " (" +
         format_bytes(a.bytes) + ")";
}

}  // namespace

graph_allocation::~graph_allocation() { memory.release_address(*this); }

graph_memory::graph_memory(runtime& owner)
    : runtime_(owner),
      platform_(owner.platform()),
      devices_(static_cast<std::size_t>(owner.devices().count())) {}

result<std::shared_ptr<graph_allocation>> graph_memory::create_allocation(
    int device, std::size_t bytes, std::vector<access_grant> access) {
  const std::size_t granularity = runtime_.devices().properties(device).granularity_bytes;
  const std::size_t span = round_up(bytes, granularity);
  std::lock_guard lock(mutex_);
  result<std::uintptr_t> address =
      take_address_locked(devices_[static_cast<std::size_t>(device)], device, span);
  if (!address.ok()) return address.take_error();
  auto a = std::make_shared<graph_allocation>(*this, device, address.value(), bytes, span);
  a->access = std::move(access);
  a->id = next_id_++;
  allocations_[a->address] = a;
  return a;
}

result<std::uintptr_t> graph_memory::take_address_locked(device_space& space, int device,
                                                         std::size_t span) {
  for (auto it = space.free_ranges.begin(); it != space.free_ranges.end(); ++it) {
    if (it->second < span) continue;
    const auto [base, size] = *it;
    space.free_ranges.erase(it);
    if (size > span) space.free_ranges.emplace(base + span, size - span);
    return base;
  }
  const std::size_t bytes = std::max(reservation_bytes, span);
  result<std::uintptr_t> reserved = platform_.reserve_address(device, bytes);
  if (!reserved.ok()) return reserved.take_error();
  space.reservations.emplace_back(reserved.value(), bytes);
  if (bytes > span) space.free_ranges.emplace(reserved.value() + span, bytes - span);
  return reserved.value();
}

void graph_memory::release_address(const graph_allocation& a) noexcept {
  std::lock_guard lock(mutex_);
  allocations_.erase(a.address);
  auto& ranges = devices_[static_cast<std::size_t>(a.device)].free_ranges;
  std::uintptr_t base = a.address;
  std::size_t size = a.span;
  // Coalesce with the neighbours; ranges never merge across reservations since a reservation's
  // end is never another's start unless the platform placed them so (harmless then: both stay
  // reserved until exit).
  if (auto next = ranges.find(base + size); next != ranges.end()) {
    size += next->second;
    ranges.erase(next);
  }
  if (auto after = ranges.lower_bound(base); after != ranges.begin()) {
    auto before = std::prev(after);
    if (before->first + before->second == base) {
      before->second += size;
      return;
    }
  }
  ranges.emplace(base, size);
}

std::shared_ptr<graph_allocation> graph_memory::find(std::uintptr_t address) const {
  // The caller's copy outlives the lock: if it becomes the last owner, its destructor takes it.
  std::lock_guard lock(mutex_);
  return find_locked(address);
}

std::shared_ptr<graph_allocation> graph_memory::find_locked(std::uintptr_t address) const {
  auto it = allocations_.upper_bound(address);
  if (it == allocations_.begin()) return nullptr;
  std::shared_ptr<graph_allocation> a = std::prev(it)->second.lock();
  if (a == nullptr || address >= a->address + a->span) return nullptr;
  return a;
}

status graph_memory::claim_free(graph_allocation& a, const void* graph, const char* call) {
  std::lock_guard lock(mutex_);
  if (a.freeing_graph != nullptr) {
    return status(error_code::invalid_value,
                  std::string(call) + ": " + name_of(a) + " has a free node already, in " +
                      (a.freeing_graph == graph ? "this graph" : "another graph") +
                      "; an allocation is freed once");
  }
  a.freeing_graph = graph;
  return status::success();
}

void graph_memory::unclaim_free(graph_allocation& a, const void* graph) {
  std::lock_guard lock(mutex_);
  if (a.freeing_graph == graph) a.freeing_graph = nullptr;
}

bool graph_memory::complete_locked(const backing& b) const {
  if (b.bound != nullptr && !b.bound->timeline.has_completed(b.last_position)) return false;
  return std::all_of(b.waits.begin(), b.waits.end(),
                     [](const auto& w) { return w.first->timeline.has_completed(w.second); });
}

status graph_memory::prepare(exec_memory& exec, stream_object& stream, bool auto_free,
                             bool for_launch) {
  std::vector<std::shared_ptr<exec_memory>> dropped;  // released after the lock
  std::unique_lock lock(mutex_);
  reap_retired_locked(dropped);
  if (!exec.outstanding.empty()) {
    if (!for_launch) return status::success();  // mapped already, and must stay where it is
    if (!auto_free) {
      const graph_allocation& a = *exec.outstanding.front();
      return status(error_code::invalid_value,
                    "somaGraphLaunch: the previous launch left " + name_of(a) +
                        " unfreed; free it with somaFreeAsync before launching again, or "
                        "instantiate with somaGraphInstantiateFlagAutoFreeOnLaunch");
    }
    while (!exec.outstanding.empty()) {
      if (status freed = release_live_locked(exec, *exec.outstanding.back(), stream); !freed.ok())
        return freed;
    }
  }
  for (const auto& a : exec.frees_of_others) {
    if (for_launch && a->live_in == nullptr) {
      return status(error_code::invalid_value,
                    "somaGraphLaunch: the graph frees " + name_of(*a) +
                        ", which is not live: launch the graph that allocates it first (and do "
                        "not free it elsewhere)");
    }
  }
  backing* b = choose_backing_locked(exec, &stream);
  if (b->capacity < exec.footprint) {
    if (status grown = grow_locked(*b, exec.footprint); !grown.ok()) return grown;
  }
  if (exec.mapped != b) {
    if (exec.mapped != nullptr) {
      // Its addresses map another backing, which its last launch may still use.
      if (exec.last_stream != nullptr) {
        if (status done = runtime_.streams().wait_until(*exec.last_stream, exec.last_position);
            !done.ok())
          return done;
      }
      unmap_locked(exec);
    }
    if (status mapped = map_locked(exec, *b); !mapped.ok()) return mapped;
  }
  for (const auto& [source, position] : b->waits) {
    if (status ordered = runtime_.streams().order_after(stream, *source, position); !ordered.ok())
      return ordered;
  }
  b->waits.clear();
  if (b->bound.get() != &stream) {
    b->bound = stream.shared_from_this();
    b->last_position = stream.timeline.enqueued_position();
  }
  note_highs_locked(devices_[static_cast<std::size_t>(exec.device)]);
  return status::success();
}

status graph_memory::map_for_instantiation(exec_memory& exec) {
  std::vector<std::shared_ptr<exec_memory>> dropped;
  std::lock_guard lock(mutex_);
  reap_retired_locked(dropped);
  backing* b = choose_backing_locked(exec, nullptr);
  if (b->capacity < exec.footprint) {
    if (status grown = grow_locked(*b, exec.footprint); !grown.ok()) return grown;
  }
  if (exec.mapped != b) {
    if (status mapped = map_locked(exec, *b); !mapped.ok()) return mapped;
  }
  note_highs_locked(devices_[static_cast<std::size_t>(exec.device)]);
  return status::success();
}

backing* graph_memory::choose_backing_locked(exec_memory& exec, const stream_object* stream) {
  device_space& space = devices_[static_cast<std::size_t>(exec.device)];
  // Graphs launched into one stream share: the executable's own backing, else any of the
  // stream. A backing whose work is all done may move to another stream.
  if (exec.mapped != nullptr && exec.mapped->pins == 0 &&
      ((stream != nullptr && exec.mapped->bound.get() == stream) || complete_locked(*exec.mapped)))
    return exec.mapped;
  backing* idle = nullptr;
  for (const auto& b : space.backings) {
    if (b->pins != 0) continue;  // an unfreed allocation's memory is never shared
    if (stream != nullptr && b->bound.get() == stream) return b.get();
    if (idle == nullptr && complete_locked(*b)) idle = b.get();
  }
  if (idle != nullptr) {
    // Everything that ran on it is done: it may move to this stream. Executables mapped there
    // must map again before they next run, wherever that is.
    while (!idle->mapped.empty()) unmap_locked(*idle->mapped.back());
    return idle;
  }
  auto fresh = std::make_unique<backing>();
  fresh->device = exec.device;
  space.backings.push_back(std::move(fresh));
  return space.backings.back().get();
}

status graph_memory::grow_locked(backing& b, std::size_t bytes) {
  const backend::device_properties& props = runtime_.devices().properties(b.device);
  const std::size_t more = round_up(bytes - b.capacity, props.granularity_bytes);
  // Where a physical allocation maps only whole, each granule is one, so any granule-aligned
  // range of the backing maps piece by piece.
  const std::size_t piece = props.maps_at_offset ? more : props.granularity_bytes;
  for (std::size_t made = 0; made < more; made += piece) {
    result<std::uint64_t> created = platform_.create_physical(b.device, piece, 0);
    if (!created.ok()) {
      return status(created.error().code(), "graph memory on device " + std::to_string(b.device) +
                                                " could not grow by " + format_bytes(more - made) +
                                                ": " + created.error().message());
    }
    b.chunks.push_back({created.value(), piece});
    b.capacity += piece;
  }
  return status::success();
}

status graph_memory::map_locked(exec_memory& exec, backing& b) {
  exec.mapped = &b;
  b.mapped.push_back(&exec);
  // In address order, allocations end to end map as one range: one access grant for the range,
  // where cuMemSetAccess costs about 31 us a call and allocation. A range stays inside one
  // reservation, as the platform requires: freed address ranges of reservations placed end to
  // end merge (release_address), so one allocation may cross from one into the next.
  std::vector<const placed_allocation*> order;
  order.reserve(exec.allocations.size());
  for (const placed_allocation& p : exec.allocations) order.push_back(&p);
  std::sort(order.begin(), order.end(), [](const placed_allocation* x, const placed_allocation* y) {
    return x->allocation->address < y->allocation->address;
  });
  const device_space& space = devices_[static_cast<std::size_t>(exec.device)];
  std::vector<backend::backend::mapping_part> parts;
  std::uintptr_t run_start = 0;
  std::uintptr_t run_end = 0;
  std::uintptr_t run_limit = 0;  // the end of run_start's reservation
  auto map_run = [&]() -> status {
    if (parts.empty()) return status::success();
    if (status m = platform_.map_parts(run_start, parts, b.device); !m.ok()) return m;
    exec.pieces.push_back({run_start, run_end - run_start});
    parts.clear();
    return status::success();
  };
  // Appends [offset, offset + bytes) of handle at `at`, cut where a reservation ends.
  auto add_part = [&](std::uintptr_t at, std::uint64_t handle, std::size_t offset,
                      std::size_t bytes) -> status {
    while (bytes != 0) {
      if (at != run_end || at == run_limit) {
        if (status m = map_run(); !m.ok()) return m;
        run_start = at;
        run_limit = reservation_end(space, at);
      }
      const std::size_t taken = std::min<std::size_t>(bytes, run_limit - at);
      parts.push_back({handle, offset, taken});
      at += taken;
      offset += taken;
      bytes -= taken;
      run_end = at;
    }
    return status::success();
  };
  for (const placed_allocation* p : order) {
    const graph_allocation& a = *p->allocation;
    // The chunks of the backing under [offset, offset + span), in order: they tile the span.
    std::size_t chunk_start = 0;
    for (const backing::chunk& c : b.chunks) {
      const std::size_t begin = std::max(p->offset, chunk_start);
      const std::size_t end = std::min(p->offset + a.span, chunk_start + c.bytes);
      if (begin < end) {
        if (status m = add_part(a.address + (begin - p->offset), c.handle, begin - chunk_start,
                                end - begin);
            !m.ok()) {
          unmap_locked(exec);
          return m;
        }
      }
      chunk_start += c.bytes;
    }
  }
  if (status m = map_run(); !m.ok()) {
    unmap_locked(exec);
    return m;
  }
  for (const placed_allocation& p : exec.allocations) {
    const graph_allocation& a = *p.allocation;
    for (const access_grant& g : a.access) {
      if (g.device == a.device) continue;
      // A grant per reservation the allocation lies in.
      for (std::uintptr_t at = a.address; at < a.address + a.span;) {
        const std::uintptr_t to = std::min(a.address + a.span, reservation_end(space, at));
        if (status s = platform_.set_access(at, to - at, g.device, g.flags); !s.ok()) {
          unmap_locked(exec);
          return s;
        }
        at = to;
      }
    }
  }
  return status::success();
}

std::uintptr_t graph_memory::reservation_end(const device_space& space, std::uintptr_t address) {
  for (const auto& [base, bytes] : space.reservations)
    if (address >= base && address - base < bytes) return base + bytes;
  return UINTPTR_MAX;  // not graph address space: the platform refuses it and says so
}

void graph_memory::unmap_locked(exec_memory& exec) {
  for (const exec_memory::piece& p : exec.pieces) platform_.unmap(p.address, p.bytes);
  exec.pieces.clear();
  if (exec.mapped != nullptr) {
    auto& list = exec.mapped->mapped;
    list.erase(std::remove(list.begin(), list.end(), &exec), list.end());
  }
  exec.mapped = nullptr;
}

status graph_memory::release_live_locked(exec_memory& exec, graph_allocation& a,
                                         stream_object& stream) {
  auto& live = exec.outstanding;
  live.erase(std::remove(live.begin(), live.end(), &a), live.end());
  a.live_in = nullptr;
  if (backing* b = exec.mapped; b != nullptr) {
    --b->pins;
    // Later launches on the backing's stream wait for this free where it is on another stream.
    if (b->bound.get() != &stream)
      b->waits.emplace_back(stream.shared_from_this(), stream.timeline.enqueued_position());
  }
  return status::success();
}

void graph_memory::launched(exec_memory& exec, stream_object& stream, std::uint64_t position) {
  std::lock_guard lock(mutex_);
  exec.last_stream = stream.shared_from_this();
  exec.last_position = position;
  backing* b = exec.mapped;
  if (b != nullptr) b->last_position = std::max(b->last_position, position);
  for (const placed_allocation& p : exec.allocations) {
    if (p.freed_in_graph) continue;
    exec.outstanding.push_back(p.allocation.get());
    p.allocation->live_in = &exec;
    if (b != nullptr) ++b->pins;
  }
  for (const auto& a : exec.frees_of_others) {
    if (a->live_in != nullptr) (void)release_live_locked(*a->live_in, *a, stream);
  }
  note_highs_locked(devices_[static_cast<std::size_t>(exec.device)]);
}

void graph_memory::retire(std::shared_ptr<exec_memory> exec) {
  std::vector<std::shared_ptr<exec_memory>> dropped;
  std::lock_guard lock(mutex_);
  retired_.push_back(std::move(exec));
  reap_retired_locked(dropped);
}

void graph_memory::reap_retired_locked(std::vector<std::shared_ptr<exec_memory>>& dropped) {
  for (auto it = retired_.begin(); it != retired_.end();) {
    exec_memory& e = **it;
    const bool done =
        e.last_stream == nullptr || e.last_stream->timeline.has_completed(e.last_position);
    if (!e.outstanding.empty() || !done) {
      ++it;
      continue;
    }
    unmap_locked(e);
    dropped.push_back(std::move(*it));
    it = retired_.erase(it);
  }
}

status graph_memory::trim(int device) {
  std::vector<std::shared_ptr<exec_memory>> dropped;
  std::lock_guard lock(mutex_);
  reap_retired_locked(dropped);
  auto& backings = devices_[static_cast<std::size_t>(device)].backings;
  for (auto it = backings.begin(); it != backings.end();) {
    backing& b = **it;
    if (b.pins != 0 || !complete_locked(b)) {
      ++it;
      continue;
    }
    while (!b.mapped.empty()) unmap_locked(*b.mapped.back());
    for (const backing::chunk& c : b.chunks) platform_.release_physical(c.handle);
    it = backings.erase(it);
  }
  return status::success();
}

std::size_t graph_memory::used_locked(const device_space& space) const {
  std::size_t used = 0;
  for (const auto& b : space.backings) {
    std::size_t extent = 0;
    for (const exec_memory* e : b->mapped) extent = std::max(extent, e->footprint);
    used += std::min(extent, b->capacity);
  }
  return used;
}

std::size_t graph_memory::reserved_locked(const device_space& space) const {
  std::size_t reserved = 0;
  for (const auto& b : space.backings) reserved += b->capacity;
  return reserved;
}

void graph_memory::note_highs_locked(device_space& space) {
  space.used_high = std::max(space.used_high, used_locked(space));
  space.reserved_high = std::max(space.reserved_high, reserved_locked(space));
}

result<std::uint64_t> graph_memory::attribute(int device, int which) {
  std::vector<std::shared_ptr<exec_memory>> dropped;
  std::lock_guard lock(mutex_);
  reap_retired_locked(dropped);
  const device_space& space = devices_[static_cast<std::size_t>(device)];
  switch (which) {
    case 0:
      return std::uint64_t{used_locked(space)};
    case 1:
      return std::uint64_t{space.used_high};
    case 2:
      return std::uint64_t{reserved_locked(space)};
    case 3:
      return std::uint64_t{space.reserved_high};
    default:
      break;
  }
  return status(error_code::invalid_value, "somaDeviceGetGraphMemAttribute: attribute " +
                                               std::to_string(which) +
                                               " is not a somaGraphMemAttr* value (0..3)");
}

status graph_memory::reset_attribute(int device, int which) {
  std::lock_guard lock(mutex_);
  device_space& space = devices_[static_cast<std::size_t>(device)];
  if (which == 1) {
    space.used_high = used_locked(space);
  } else if (which == 3) {
    space.reserved_high = reserved_locked(space);
  } else {
    return status(error_code::invalid_value,
                  "somaDeviceSetGraphMemAttribute: attribute " + std::to_string(which) +
                      " cannot be set; only somaGraphMemAttrUsedMemHigh (1) and "
                      "somaGraphMemAttrReservedMemHigh (3) can, to 0");
  }
  return status::success();
}

bool graph_memory::owns_address(std::uintptr_t address) const {
  std::lock_guard lock(mutex_);
  return owns_address_locked(address);
}

bool graph_memory::owns_address_locked(std::uintptr_t address) const {
  for (const device_space& space : devices_) {
    for (const auto& [base, bytes] : space.reservations) {
      if (address >= base && address - base < bytes) return true;
    }
  }
  return false;
}

bool graph_memory::describe(std::uintptr_t address, pointer_info& info) const {
  std::shared_ptr<graph_allocation> a;  // outlives the lock (its destructor may take it)
  std::lock_guard lock(mutex_);
  a = find_locked(address);
  if (a == nullptr || a->live_in == nullptr || address >= a->address + a->bytes) return false;
  info.is_live = true;
  info.is_graph = true;
  info.device = a->device;
  info.base = a->address;
  info.requested_bytes = a->bytes;
  return true;
}

std::optional<status> graph_memory::free(std::uintptr_t address, stream_object& stream) {
  std::shared_ptr<graph_allocation> a;  // outlives the lock (its destructor may take it)
  std::lock_guard lock(mutex_);
  if (!owns_address_locked(address)) return std::nullopt;
  a = find_locked(address);
  const std::string call = "somaFreeAsync(" + format_address(address) + "): ";
  if (a == nullptr)
    return status(error_code::invalid_value, call + "graph address space, but no graph allocation");
  if (a->address != address) {
    return status(error_code::invalid_value,
                  call + "an interior pointer, " + std::to_string(address - a->address) +
                      " bytes into " + name_of(*a) + "; pass the allocation's start");
  }
  if (a->live_in == nullptr) {
    return status(error_code::invalid_value,
                  call + name_of(*a) +
                      " is not live: no launch left it unfreed (its graph frees it, it was freed "
                      "already, or its graph was not launched)");
  }
  return release_live_locked(*a->live_in, *a, stream);
}

}  // namespace soma::detail::graph
