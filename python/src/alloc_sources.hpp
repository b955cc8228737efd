// The source the C entry points (pvmm_torch_alloc/free, pvmm_cupy_malloc/free) serve, and the allocator classes'
// binding functions (bind_allocators.cpp calls them).
#pragma once

#include <memory>

#include <pvmm/pvmm.hpp>

#include "common.hpp"
#include "holder.hpp"

namespace pvmm_py {

/// Makes the C entry points allocate from `source` (the last installed wins). Frees reach the source that made
/// them for as long as it holds allocations made through them.
void install_c_source(const std::shared_ptr<pvmm::growable_arena>& source);
void install_c_source(const std::shared_ptr<pvmm::sleeping_allocator>& source);
void install_c_source(const std::shared_ptr<pvmm::caching_allocator>& source);
/// Uninstalls `source` if it is the one installed (its owner is closing); it stays while it holds allocations.
void uninstall_c_source(const std::shared_ptr<void>& source);

/// Closes a holder: uninstalls its object from the C entry points and drops the share without the GIL.
template <class Holder>
void close_source(Holder& h) {
  auto share = h.take();
  if (share) uninstall_c_source(share);
  release_without_gil(std::move(share));
}

/// The methods of an allocator the C entry points may serve from: install_c_allocator (documented by `install_doc`,
/// its use named `install_op`) makes them allocate from it, and closable_with's, where closing uninstalls it
/// (close_source).
template <class W, class... Doc>
nanobind::class_<W> closable_source(nanobind::class_<W> cls, const char* install_op, const char* install_doc,
                                    const Doc&... close_doc) {
  cls.def(
      "install_c_allocator", [install_op](const W& w) { install_c_source(w.h.use(install_op)); }, install_doc);
  return closable_with(
      std::move(cls), [](W& w) { close_source(w.h); }, close_doc...);
}

/// A share of the object for a call that may unmap memory a view reaches (free): BusyError while views of the
/// object live. Unlike holder::begin_reshape, calls of this kind may run at once on several threads.
template <class T>
std::shared_ptr<T> use_unviewed(const holder<T>& h, const char* operation) {
  auto p = h.use(operation);
  if (const std::size_t n = h.export_count()) throw_exported(operation, n);
  return p;
}

void bind_arena(nb::module_& m);     // arena.cpp: pvmm.GrowableArena
void bind_caching(nb::module_& m);   // arena.cpp: pvmm.CachingAllocator
void bind_sleeping(nb::module_& m);  // sleeping.cpp: pvmm.SleepingAllocator

}  // namespace pvmm_py
