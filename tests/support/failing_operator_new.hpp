// Host memory that runs out on demand: replaces the global operator new so that the calling
// thread's Nth allocation from now throws std::bad_alloc. Include it in exactly one source file
// of a test binary (the replacements are definitions, not inline).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

namespace soma_test {

/// The calling thread's allocations until one fails: 1 fails the next; 0, none. Counts down,
/// so that a test can tell whether the code it called allocated at all (0 afterwards).
inline thread_local int allocations_until_failure = 0;

inline void* allocate_or_fail(std::size_t bytes) {
  if (allocations_until_failure > 0 && --allocations_until_failure == 0) throw std::bad_alloc();
  if (void* memory = std::malloc(bytes == 0 ? 1 : bytes)) return memory;
  throw std::bad_alloc();
}

}  // namespace soma_test

void* operator new(std::size_t bytes) { return soma_test::allocate_or_fail(bytes); }
void* operator new[](std::size_t bytes) { return soma_test::allocate_or_fail(bytes); }
void operator delete(void* memory) noexcept { std::free(memory); }
void operator delete[](void* memory) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t) noexcept { std::free(memory); }
void operator delete[](void* memory, std::size_t) noexcept { std::free(memory); }
