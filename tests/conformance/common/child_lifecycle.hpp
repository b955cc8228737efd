// The child program's lifecycle modes (child_lifecycle.cpp) and what the exporter-death mode sends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <pvmm/memory_pool.hpp>

namespace pvmm_test {

/// The export-and-die child's memory holds pattern(size, exporter_death_seed), its pool allocation
/// pattern(exporter_death_pool_bytes, exporter_death_seed + 1).
inline constexpr std::uint32_t exporter_death_seed = 71;
inline constexpr std::size_t exporter_death_pool_bytes = std::size_t{1} << 20;

/// The payload of the export-and-die child's message; its fds: the memory's, then the pool's when has_pool.
struct exporter_death_record {
  std::uint64_t memory_size = 0;
  std::uint32_t has_pool = 0;
  pvmm::pool_id pool;
  pvmm::pool_pointer_export pointer;
};

/// Runs `mode` if it is a lifecycle mode (its exit status), else -1.
int run_lifecycle_mode(int sock, const std::string& mode, int argc, char** argv);

}  // namespace pvmm_test
