// Values as text for error details: one wording everywhere.
#pragma once

#include <cstddef>
#include <string>

#include <pvmm/types.hpp>

#include "backend/error_helpers.hpp"  // describe(location)

namespace pvmm::detail {

std::string describe(const allocation_properties& properties);
const char* describe(access a) noexcept;

/// The name of enumerator `value` in `names` (the enumerators in declaration order, from 0), or `fallback` for a value
/// no enumerator has.
template <class Enum, std::size_t count>
constexpr const char* enum_name(Enum value, const char* const (&names)[count], const char* fallback) noexcept {
  const auto index = static_cast<std::size_t>(value);
  return index < count ? names[index] : fallback;
}

}  // namespace pvmm::detail
