/**
 * @file soma.hpp
 * @brief soma's C++ API: RAII and exceptions over the C API of soma.h.
 *
 * Header-only and a pure translation: every member calls one C function (or a few, for
 * creation with options) and turns its status into an exception. No allocator logic lives
 * here. Contract clauses (S1..S16) are those of docs/design.md.
 *
 * Errors: a failing call throws soma::error, or soma::bad_alloc (derived from
 * std::bad_alloc) for somaErrorMemoryAllocation and somaErrorAddressSpaceExhausted. Both
 * carry the code and the calling thread's somaGetLastErrorMessage() taken at the failure.
 * Destructors, frees and deallocate() are noexcept; try_ forms report failure without
 * throwing (the code stays available through somaGetLastError()).
 *
 * Threads: every operation may be called from any thread, as the C API allows. One RAII
 * object must not be moved, assigned or destroyed while another thread uses it.
 */
#ifndef SOMA_SOMA_HPP
#define SOMA_SOMA_HPP

#if !defined(__cplusplus) || __cplusplus < 202002L
#error "soma.hpp needs C++20 (use soma.h from C or older C++)"
#endif

#include <soma/soma.h>

#include <soma/cxx/error.hpp>
#include <soma/cxx/device.hpp>
#include <soma/cxx/stream.hpp>
#include <soma/cxx/pool.hpp>
#include <soma/cxx/memory.hpp>
#include <soma/cxx/graph.hpp>
#include <soma/cxx/snapshot.hpp>
#include <soma/cxx/history.hpp>

#endif  // SOMA_SOMA_HPP
