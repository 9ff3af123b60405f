// Chooses the backend from SOMA_BACKEND (cpu, cuda, auto).
#include <cstdlib>
#include <string>

#include "backend/backend.hpp"
#include "backend/cpu/cpu_backend.hpp"

namespace soma::detail::backend {

result<std::unique_ptr<backend>> create_backend(const cpu_settings& settings) {
  const char* text = std::getenv("SOMA_BACKEND");
  const std::string choice = (text != nullptr && *text != '\0') ? text : "auto";
  if (choice == "cuda") {
    return status(error_code::no_device,
                  "SOMA_BACKEND=cuda: this build has no cuda backend yet; use cpu or auto");
  }
  if (choice != "cpu" && choice != "auto") {
    return status(error_code::initialization_error,
                  "SOMA_BACKEND='" + choice + "' is not one of cpu, cuda, auto");
  }
  result<cpu::resolved_settings> resolved = cpu::resolve_settings(settings);
  if (!resolved.ok()) return resolved.take_error();
  return std::unique_ptr<backend>(std::make_unique<cpu::cpu_backend>(resolved.value()));
}

}  // namespace soma::detail::backend
