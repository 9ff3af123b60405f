// Chooses the backend from SOMA_BACKEND (cpu, cuda, auto).
#include <cstdlib>
#include <string>

#include "backend/backend.hpp"
#include "backend/cpu/cpu_backend.hpp"
#include "backend/cuda/cuda_backend.hpp"

namespace soma::detail::backend {

result<std::unique_ptr<backend>> create_backend(const cpu_settings& settings) {
  const char* text = std::getenv("SOMA_BACKEND");
  const std::string choice = (text != nullptr && *text != '\0') ? text : "auto";
  if (choice != "cpu" && choice != "cuda" && choice != "auto") {
    return status(error_code::initialization_error,
                  "SOMA_BACKEND='" + choice + "' is not one of cpu, cuda, auto");
  }
  if (choice == "cuda") {
    // cpu settings do not apply: devices and their memory are the GPU's.
    result<std::unique_ptr<backend>> opened = cuda::open_backend();
    if (!opened.ok()) {
      return status(opened.error().code(), "SOMA_BACKEND=cuda: " + opened.error().message());
    }
    return opened;
  }
  // auto: cuda where a driver loads, cuInit succeeds and a device exists. A failure after
  // that (a device that cannot be used) is reported, not hidden behind the cpu backend.
  if (choice == "auto" && cuda::probe().ok()) return cuda::open_backend();
  result<cpu::resolved_settings> resolved = cpu::resolve_settings(settings);
  if (!resolved.ok()) return resolved.take_error();
  return std::unique_ptr<backend>(std::make_unique<cpu::cpu_backend>(resolved.value()));
}

}  // namespace soma::detail::backend
