// What the cases about buffers share: a buffer's chunks, and the raw descriptors of its exported fds.
#pragma once

#include <cstddef>
#include <vector>

#include "support.hpp"

namespace pvmm_test {

/// `count` allocations of one granule each with default_properties(): a buffer's chunks.
inline std::vector<pvmm::physical_allocation> granule_allocations(std::size_t count) {
  std::vector<pvmm::physical_allocation> chunks;
  for (std::size_t i = 0; i < count; ++i)
    chunks.push_back(pvmm::physical_allocation::create(granule(), default_properties()).value());
  return chunks;
}

/// The descriptors of `fds`, still owned there: what the raw-pointer import_buffer takes.
inline std::vector<int> raw_fds(const std::vector<pvmm::owned_fd>& fds) {
  std::vector<int> raw;
  for (const auto& fd : fds) raw.push_back(fd.get());
  return raw;
}

}  // namespace pvmm_test
