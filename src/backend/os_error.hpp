// OS errors as soma statuses, for the cpu backend and for ipc above it: the errno name in every
// message, and for calls that make a file descriptor, what to do when none is left.
#pragma once

#include <string>

#include "core/status.hpp"

namespace soma::detail::backend {

/// "EMFILE: Too many open files", for messages.
std::string errno_text(int error);

/// Whether error says no descriptor was left: EMFILE (this process's RLIMIT_NOFILE) or ENFILE
/// (the system's table of open files).
bool is_out_of_descriptors(int error);

/// The status of a failed call that makes a descriptor (dup, memfd_create, socketpair,
/// eventfd, one received with SCM_RIGHTS); what names it ("dup of descriptor 7"). EMFILE and
/// ENFILE: operating_system, with the limit and what to do; ENOMEM, ENOBUFS: out_of_memory;
/// anything else: operating_system with the errno name.
status descriptor_failure(const std::string& what, int error);

}  // namespace soma::detail::backend
