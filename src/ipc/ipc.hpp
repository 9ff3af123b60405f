// Sharing pools and allocations between processes (S7): what the four C API calls do.
//
//   exporter                                   importer
//   somaMemPoolExportToShareableHandle -> fd --(SCM_RIGHTS, the application's)--> fd
//                                              somaMemPoolImportFromShareableHandle(fd)
//   somaMemPoolExportPointer -> 64 bytes --(any channel)--> somaMemPoolImportPointer
//
// The fd is one end of a socket pair whose other end the exporter's service holds
// (export_service.hpp); the importer asks it for the physical memory behind export data and
// maps it (import_connection.hpp). docs/ipc.md has the threat model and the lifetime rule.
#pragma once

#include <cstdint>

#include "core/status.hpp"
#include "ipc/export_data.hpp"

namespace soma::detail {
class runtime;
}

namespace soma::detail::ipc {

/// Milliseconds an exchange with the other process may take: SOMA_IPC_TIMEOUT_MS, default
/// 10000, read at every call.
int timeout_ms();

/// somaMemPoolExportToShareableHandle: a new descriptor the caller owns.
result<int> export_pool(runtime& rt, std::uintptr_t pool_handle, int handle_type,
                        unsigned long long flags);
/// somaMemPoolImportFromShareableHandle: os_handle is the descriptor's value; the caller keeps
/// owning the descriptor (the pool holds its own duplicate).
result<std::uintptr_t> import_pool(runtime& rt, std::intptr_t os_handle, int handle_type,
                                   unsigned long long flags);
/// somaMemPoolExportPointer.
result<export_data_bytes> export_pointer(runtime& rt, const void* pointer);
/// somaMemPoolImportPointer: maps the allocation, or gives the pointer of an earlier import of
/// the same allocation that is still live.
result<void*> import_pointer(runtime& rt, std::uintptr_t pool_handle,
                             const export_data_bytes& data);

}  // namespace soma::detail::ipc
