// Test data helpers shared by the suite and its child programs (no test framework here).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <pvmm/testing.hpp>

namespace pvmm_test {

inline std::vector<std::uint32_t> pattern(std::size_t bytes, std::uint32_t seed) {
  std::vector<std::uint32_t> v(bytes / sizeof(std::uint32_t));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = seed * 2654435761u + static_cast<std::uint32_t>(i);
  return v;
}

inline void write_words(void* where, const std::vector<std::uint32_t>& words, int device = -1) {
  pvmm::testing::copy_to_mapping(where, words.data(), words.size() * sizeof(std::uint32_t), device).value();
}

inline std::vector<std::uint32_t> read_words(const void* where, std::size_t bytes, int device = -1) {
  std::vector<std::uint32_t> v(bytes / sizeof(std::uint32_t));
  pvmm::testing::copy_from_mapping(v.data(), where, bytes, device).value();
  return v;
}

}  // namespace pvmm_test
