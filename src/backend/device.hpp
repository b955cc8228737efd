// Backend feature "device": what the backend is, its devices, their memory and granularities.
//
// The backend boundary (src/backend/*.hpp): one header per feature, implemented once per backend in
// backends/<name>/<feature>.cpp, or by src/backend/unsupported/<feature>.cpp for a backend that lacks it.
// Exactly one backend is linked into a build, so these are plain functions. Validation, bookkeeping and
// error context are the neutral layer's: a backend receives validated arguments and only translates.
#pragma once

#include <cstddef>

#include <pvmm/error.hpp>
#include <pvmm/types.hpp>

#include "backend/error_helpers.hpp"

namespace pvmm::detail::backend {

/// What differs between backends and is known without asking a device: constant data.
struct backend_traits {
  const char* name;                  // "cuda", "hip", "host"
  bool set_access_spans_mappings;    // one set_access call may cover several adjacent mappings (HIP: no)
  bool copy_stages_pageable;         // copy_async needs to know whether the source is pageable (host: yes)
  const char* managed_requirements;  // what managed memory and prefetching need here: the hint of their not_supported
};
[[gnu::visibility("hidden")]] extern const backend_traits traits;

backend_info info();
result<int> device_count();               // 0 when the backend is unavailable
result<device_info> device(int ordinal);  // name, identifier, total memory; capabilities are per feature
result<memory_info> memory(int ordinal);
result<bool> can_access_peer(int device, int peer);  // both validated and distinct
result<granularity> allocation_granularity(const allocation_properties& properties);

}  // namespace pvmm::detail::backend
