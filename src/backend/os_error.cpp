#include "backend/os_error.hpp"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>

namespace soma::detail::backend {

std::string errno_text(int error) {
  const char* description = strerrordesc_np(error);
  const char* name = strerrorname_np(error);
  return std::string(name != nullptr ? name : "errno " + std::to_string(error)) + ": " +
         (description != nullptr ? description : "unknown");
}

bool is_out_of_descriptors(int error) { return error == EMFILE || error == ENFILE; }

status descriptor_failure(const std::string& what, int error) {
  if (error == EMFILE) {
    // Counting the open descriptors would need one more (opendir), so the limit is named.
    rlimit limit{};
    const std::string figure =
        ::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
            ? "its limit of " + std::to_string(limit.rlim_cur) + " open descriptors"
            : "its limit of open descriptors";
    return status(error_code::operating_system,
                  what + " failed: this process is out of file descriptors (EMFILE: it reached " +
                      figure +
                      ", RLIMIT_NOFILE); close descriptors it no longer needs or raise "
                      "the limit (ulimit -n, or setrlimit(RLIMIT_NOFILE))");
  }
  if (error == ENFILE) {
    return status(error_code::operating_system,
                  what +
                      " failed: the system's table of open files is full (ENFILE); close "
                      "files or raise the system's limit (sysctl fs.file-max)");
  }
  if (error == ENOMEM || error == ENOBUFS) {
    return status(error_code::out_of_memory,
                  what + " failed: the kernel is out of memory (" + errno_text(error) + ")");
  }
  return status(error_code::operating_system, what + " failed (" + errno_text(error) + ")");
}

}  // namespace soma::detail::backend
