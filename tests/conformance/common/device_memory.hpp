// A device's free memory before and after cycles (issue 27: on a GPU, 100 cycles leave it unchanged).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include <pvmm/device.hpp>

namespace pvmm_test {

/// What the driver may keep between two measurements without a leak (its own caches grow in steps of 2 MiB);
/// a leak of one 2 MiB chunk per cycle is 200 MiB over 100 cycles.
inline constexpr std::size_t device_memory_slack = std::size_t{16} << 20;

/// Free bytes of device `ordinal`; nothing where that memory is the system's (host backend): it moves with
/// everything else the machine does and tells nothing of a leak.
inline std::optional<std::size_t> device_free_bytes(int ordinal) {
  auto m = pvmm::query_memory(ordinal);
  if (!m || m->shared_with_system) return std::nullopt;
  return m->free;
}

/// Empty when device memory `after` is within the slack of `before` (or either is unknown), else what was lost.
inline std::string device_memory_lost(std::optional<std::size_t> before, std::optional<std::size_t> after) {
  if (!before || !after || *after + device_memory_slack >= *before) return {};
  return "device free memory fell by " + std::to_string((*before - *after) >> 20) + " MiB (slack " +
         std::to_string(device_memory_slack >> 20) + " MiB)";
}

}  // namespace pvmm_test
