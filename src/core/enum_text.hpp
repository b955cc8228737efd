#pragma once
// The text of an enumerator, from a table indexed by the enumerator's value: one body for the names the library
// prints (snapshot states, history actions, sleep policies, memory kinds).

#include <cstddef>

namespace pvmm::detail {

/// texts[e] for an enum whose enumerators are 0, 1, ... N - 1 in the order of `texts`; `otherwise` for any other value.
template <class Enum, std::size_t N>
constexpr const char* enum_text(Enum e, const char* const (&texts)[N], const char* otherwise) noexcept {
  const auto i = static_cast<std::size_t>(e);
  return i < N ? texts[i] : otherwise;
}

}  // namespace pvmm::detail
