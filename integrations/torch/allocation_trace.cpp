#include "allocation_trace.hpp"

#include <cstdlib>

namespace soma::torch_integration {

allocation_trace& allocation_trace::instance() {
  static allocation_trace trace;
  return trace;
}

allocation_trace::allocation_trace() {
  const char* path = std::getenv("SOMA_TORCH_TRACE");
  if (path == nullptr || *path == '\0') return;
  file_ = std::fopen(path, "w");
  if (file_ == nullptr) std::fprintf(stderr, "soma_torch: cannot write the trace %s\n", path);
}

allocation_trace::~allocation_trace() {
  if (file_ != nullptr) std::fclose(file_);
}

void allocation_trace::allocated(const void* pointer, std::size_t bytes) {
  if (file_ == nullptr || pointer == nullptr) return;
  std::lock_guard lock(mutex_);
  const std::uint64_t id = next_id_++;
  ids_[pointer] = id;
  std::fprintf(file_, "a %llu %zu\n", static_cast<unsigned long long>(id), bytes);
}

void allocation_trace::freed(const void* pointer) {
  if (file_ == nullptr || pointer == nullptr) return;
  std::lock_guard lock(mutex_);
  auto found = ids_.find(pointer);
  if (found == ids_.end()) return;
  std::fprintf(file_, "f %llu\n", static_cast<unsigned long long>(found->second));
  ids_.erase(found);
}

}  // namespace soma::torch_integration
