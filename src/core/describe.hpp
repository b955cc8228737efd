// Values as text for error details: one wording everywhere.
#pragma once

#include <string>

#include <pvmm/types.hpp>

#include "backend/error_helpers.hpp"  // describe(location)

namespace pvmm::detail {

std::string describe(const allocation_properties& properties);
const char* describe(access a) noexcept;

}  // namespace pvmm::detail
