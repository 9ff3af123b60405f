// Host memory set aside ahead for the nodes of a pool's maps and sets, so that a step which must
// not stop halfway (a split, a carve, a remap, a release) allocates first and then changes its
// structures with nothing left that can fail (api-behaviour.md, "Host memory exhausted").
#pragma once

#include <cstddef>
#include <new>

namespace soma::detail {

/// Slots for tree nodes, kept on a free list: a node given back is kept for the next one, and
/// reserve() makes slots ahead. Memory goes back to the system only when the reserve does.
/// Not thread-safe: the structures that share one are guarded by one lock.
class node_reserve {
 public:
  /// Fits the node of a std::map<std::uintptr_t, T> with T up to 24 bytes (libstdc++, libc++).
  static constexpr std::size_t slot_bytes = 64;

  node_reserve() = default;
  node_reserve(const node_reserve&) = delete;
  node_reserve& operator=(const node_reserve&) = delete;
  ~node_reserve() {
    while (kept_ != nullptr) {
      slot* next = kept_->next;
      ::operator delete(static_cast<void*>(kept_));
      kept_ = next;
    }
  }

  /// At least `count` slots are kept after this: the next `count` nodes allocate nothing. May
  /// throw std::bad_alloc; the slots already made stay.
  void reserve(std::size_t count) {
    while (count_ < count) give(::operator new(slot_bytes));
  }
  /// Gives the slots beyond `count` back to the system (tests: a step then finds only what it
  /// prepared, and one that needs more allocates in the middle, where a failure shows).
  void keep_at_most(std::size_t count) noexcept {
    while (count_ > count) {
      slot* s = kept_;
      kept_ = s->next;
      --count_;
      ::operator delete(static_cast<void*>(s));
    }
  }
  /// A kept slot, or a new one.
  void* take() {
    if (kept_ == nullptr) return ::operator new(slot_bytes);
    slot* s = kept_;
    kept_ = s->next;
    --count_;
    return s;
  }
  void give(void* memory) noexcept {
    kept_ = ::new (memory) slot{kept_};
    ++count_;
  }
  std::size_t kept() const noexcept { return count_; }

 private:
  struct slot {
    slot* next;
  };
  slot* kept_ = nullptr;
  std::size_t count_ = 0;
};

/// A standard allocator over a node_reserve: single nodes come from its slots, anything larger
/// (no tree asks for more) from operator new.
template <typename T>
class reserve_allocator {
 public:
  using value_type = T;

  explicit reserve_allocator(node_reserve& nodes) noexcept : nodes_(&nodes) {}
  template <typename U>
  reserve_allocator(const reserve_allocator<U>& other) noexcept  // NOLINT: rebinding converts
      : nodes_(other.nodes()) {}

  T* allocate(std::size_t n) {
    if (fits(n)) return static_cast<T*>(nodes_->take());
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* memory, std::size_t n) noexcept {
    if (fits(n)) {
      nodes_->give(memory);
    } else {
      ::operator delete(memory);
    }
  }
  node_reserve* nodes() const noexcept { return nodes_; }
  template <typename U>
  bool operator==(const reserve_allocator<U>& other) const noexcept {
    return nodes_ == other.nodes();
  }

 private:
  static constexpr bool fits(std::size_t n) noexcept {
    return n == 1 && sizeof(T) <= node_reserve::slot_bytes &&
           alignof(T) <= alignof(std::max_align_t);
  }
  node_reserve* nodes_;
};

}  // namespace soma::detail
