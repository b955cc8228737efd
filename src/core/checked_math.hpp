// Overflow-checked size arithmetic: every size, offset and alignment sum or round-up in pvmm goes through
// these (invariant 11). A wrapped sum must never become a "successful" reservation, mapping or resize: each
// helper answers std::nullopt where the exact result does not fit in std::size_t, and the caller turns that
// into an error naming the operands.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace pvmm::detail {

/// a + b, or nullopt when it does not fit.
constexpr std::optional<std::size_t> checked_add(std::size_t a, std::size_t b) noexcept {
  std::size_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

/// a * b, or nullopt when it does not fit.
constexpr std::optional<std::size_t> checked_mul(std::size_t a, std::size_t b) noexcept {
  std::size_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

/// The smallest multiple of `unit` (nonzero) that is >= v, or nullopt when it does not fit.
constexpr std::optional<std::size_t> checked_round_up(std::size_t v, std::size_t unit) noexcept {
  if (unit == 0) return std::nullopt;
  const std::size_t rem = v % unit;
  if (rem == 0) return v;
  return checked_add(v - rem, unit);
}

/// Whether [offset, offset + size) lies inside [0, limit) (no wrapped sum can pass).
constexpr bool range_within(std::size_t offset, std::size_t size, std::size_t limit) noexcept {
  return offset <= limit && size <= limit - offset;
}

constexpr bool is_power_of_two(std::size_t v) noexcept { return v != 0 && (v & (v - 1)) == 0; }

/// Whether v is a multiple of `unit` (nonzero). Granularities are powers of two in practice: a mask then,
/// not a 64-bit division (tens of cycles, three per map, next to sub-microsecond driver calls).
constexpr bool is_multiple(std::size_t v, std::size_t unit) noexcept {
  return (unit & (unit - 1)) == 0 ? (v & (unit - 1)) == 0 : v % unit == 0;
}

}  // namespace pvmm::detail
