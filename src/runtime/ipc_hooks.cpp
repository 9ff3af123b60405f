#include "runtime/ipc_hooks.hpp"

#include <unistd.h>

namespace soma::detail {
namespace {

status invalid(std::string message) {
  return status(error_code::invalid_value, std::move(message));
}

}  // namespace

// ---- exporter ----------------------------------------------------------------------------------

result<std::uint64_t> ipc_hooks::exportable_pool(std::uintptr_t pool_handle, unsigned handle_type,
                                                 std::uint64_t proposed_pool_id, const char* call) {
  result<pool_object*> found = pools_.resolve(pool_handle);
  if (!found.ok())
    return status(found.error().code(), std::string(call) + ": " + found.error().message());
  pool_object& p = *found.value();
  if (p.is_imported()) {
    return invalid(std::string(call) + ": " + p.describe() +
                   " is an imported pool; imported pools cannot be exported again");
  }
  if (p.is_default()) {
    return invalid(std::string(call) + ": " + p.describe() +
                   " is a default pool, which is not exportable; create a pool with handleTypes "
                   "somaMemHandleTypePosixFileDescriptor");
  }
  if ((p.properties().export_handle_types & handle_type) == 0 || p.exports() == nullptr) {
    return invalid(std::string(call) + ": " + p.describe() + " was created with handleTypes " +
                   std::to_string(p.properties().export_handle_types) +
                   ", which does not include handle type " + std::to_string(handle_type) +
                   "; exportability is fixed when the pool is created");
  }
  return p.exports()->pool_id(proposed_pool_id);
}

result<backend::memory_location> ipc_hooks::pool_location(std::uintptr_t pool_handle) const {
  result<pool_object*> found = pools_.resolve(pool_handle);
  if (!found.ok()) return found.take_error();
  return found.value()->properties().location;
}

result<pointer_export> ipc_hooks::export_pointer(const void* pointer,
                                                 std::uint64_t proposed_pool_id,
                                                 const export_nonce& fresh_nonce) {
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  live_entry<pool_object> live = address == 0 ? live_entry<pool_object>{} : pointers_.find(address);
  if (live.live != nullptr && (!live.live->is_live() || live.live->address != address)) live = {};
  if (live.live == nullptr)
    return pools_.explain_unknown_pointer(address, "somaMemPoolExportPointer");
  pool_object& owner = *live.owner;
  const std::string what = "somaMemPoolExportPointer(" + format_address(address) + "): ";
  if (owner.is_imported()) {
    return invalid(what + "the allocation was imported from another process (" + owner.describe() +
                   "); imported memory cannot be exported again");
  }
  if (owner.exports() == nullptr) {
    return invalid(what + "the allocation belongs to " + owner.describe() +
                   (owner.is_default() ? ", a default pool, which is not exportable"
                                       : ", which was created without handle types") +
                   "; allocate from a pool created with handleTypes "
                   "somaMemHandleTypePosixFileDescriptor");
  }
  const std::size_t bytes = live.live->requested_bytes;
  std::uintptr_t first_piece = 0;
  status backed = owner.visit_physical_pieces(address, bytes, [&](const physical_piece& piece) {
    if (first_piece == 0) first_piece = piece.address;
    return status::success();
  });
  if (!backed.ok()) return status(backed.code(), what + backed.message());
  pointer_export out;
  out.pool_id = owner.exports()->pool_id(proposed_pool_id);
  const export_record record = owner.exports()->record_for(address, bytes, fresh_nonce);
  out.export_id = record.export_id;
  out.nonce = record.nonce;
  out.offset_bytes = address - first_piece;
  out.bytes = bytes;
  return out;
}

result<exported_memory> ipc_hooks::export_memory(std::uintptr_t pool_handle,
                                                 std::uint64_t export_id, const export_nonce& nonce,
                                                 std::size_t bytes) {
  exported_memory out;
  // The registry lock keeps the pool from being torn down while its memory is exported; the
  // record's lock keeps the allocation from being freed meanwhile.
  status exported = pools_.with_pool(pool_handle, [&](pool_object* p) -> status {
    if (p == nullptr || p->exports() == nullptr)
      return invalid("the exporting pool was destroyed; its memory can no longer be imported");
    return p->exports()->with_live_record(export_id, nonce, bytes, [&](const export_record& r) {
      out.bytes = r.bytes;
      return p->visit_physical_pieces(r.address, r.bytes, [&](const physical_piece& piece) {
        if (piece.offset_bytes != 0) {
          return status(error_code::unknown,
                        p->describe() + ": the memory at " + format_address(piece.address) +
                            " is part of a physical allocation and cannot be exported alone");
        }
        result<int> fd = platform_.export_physical(piece.token);
        if (!fd.ok()) return fd.take_error();
        if (out.pieces.empty()) out.offset_bytes = r.address - piece.address;
        out.pieces.push_back({piece.size_bytes, fd.value()});
        return status::success();
      });
    });
  });
  if (!exported.ok()) {
    for (const exported_memory::piece& piece : out.pieces) ::close(piece.fd);
    return exported;
  }
  return out;
}

// ---- importer ----------------------------------------------------------------------------------

result<std::uintptr_t> ipc_hooks::create_imported_pool(backend::memory_location where,
                                                       std::shared_ptr<import_link> link,
                                                       std::string name) {
  result<pool_object*> created = pools_.create_imported(where, std::move(name));
  if (!created.ok()) return created.take_error();
  created.value()->imports()->set_link(std::move(link));
  return created.value()->handle();
}

result<imported_pool_view> ipc_hooks::imported_pool(std::uintptr_t pool_handle,
                                                    const char* call) const {
  result<pool_object*> found = pools_.resolve(pool_handle);
  if (!found.ok())
    return status(found.error().code(), std::string(call) + ": " + found.error().message());
  const pool_object& p = *found.value();
  if (!p.is_imported()) {
    return invalid(std::string(call) + ": " + p.describe() +
                   " is not an imported pool; import the exporter's pool with "
                   "somaMemPoolImportFromShareableHandle and pass that pool");
  }
  imported_pool_view view;
  view.device = p.config().device;
  view.location = p.properties().location;
  view.link = p.imports()->link();
  if (view.link == nullptr)
    return invalid(std::string(call) + ": " + p.describe() + " was destroyed");
  return view;
}

void* ipc_hooks::find_imported_allocation(std::uintptr_t pool_handle, std::uint64_t key) const {
  result<pool_object*> p = pools_.resolve(pool_handle);
  if (!p.ok() || p.value()->imports() == nullptr) return nullptr;
  block* live = p.value()->imports()->find(key);
  return live == nullptr ? nullptr : reinterpret_cast<void*>(live->address);
}

result<void*> ipc_hooks::add_imported_allocation(std::uintptr_t pool_handle, std::uint64_t key,
                                                 std::uintptr_t address, std::size_t bytes,
                                                 std::function<void()> release) {
  void* added = nullptr;
  // Under the registry lock: the pool is not torn down meanwhile.
  status done = pools_.with_pool(pool_handle, [&](pool_object* p) -> status {
    if (p == nullptr || p->imports() == nullptr) {
      release();
      return status(error_code::invalid_handle,
                    "somaMemPoolImportPointer: the imported pool was destroyed during the import");
    }
    // Grants of somaMemPoolSetAccess on the imported pool reach this mapping too (S6), now and
    // later, until the mapping goes.
    if (status adopted = p->adopt_mapping(address, bytes); !adopted.ok()) {
      release();
      return adopted;
    }
    auto forget_then_release = [p, address, release = std::move(release)] {
      p->forget_mapping(address);
      release();
    };
    auto [entry, is_new] = p->imports()->add(key, address, bytes, std::move(forget_then_release));
    if (is_new) pointers_.insert(entry, *p);
    added = reinterpret_cast<void*>(entry->address);
    return status::success();
  });
  if (!done.ok()) return done;
  return added;
}

}  // namespace soma::detail
