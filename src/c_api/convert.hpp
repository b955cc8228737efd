// Conversions between the C interface's structs and the C++ value types (src/c_api).
#pragma once

#include <pvmm/pvmm.h>
#include <pvmm/types.hpp>

#include "c_api/common.hpp"

namespace pvmm::c_api {

/// A C location, checked: errc::invalid_location for a kind outside pvmm_location_kind.
result<location> to_location(const pvmm_location& l, const char* operation);
result<access> to_access(int a, const char* operation);
/// Properties from a caller's struct (struct_size checked).
result<allocation_properties> to_properties(const pvmm_allocation_properties* p, const char* operation);
/// Grants, checked; `grants` may be NULL only with count 0.
result<std::vector<access_descriptor>> to_grants(const pvmm_access_descriptor* grants, std::size_t count,
                                                 const char* operation);

}  // namespace pvmm::c_api
