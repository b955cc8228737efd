// A fake CUDA driver: a driver table whose every entry answers at once, for what swaps the backend's table
// (install_driver_api) — the tests in tests/cuda, which record calls or keep a context stack by setting a few
// entries of their own, and pvmm-own-cost, which measures pvmm against it. Not part of the library.
#pragma once

#include <array>
#include <cstdint>

#include "driver_api.hpp"

namespace pvmm::cuda::fake {

/// One id per entry of the driver table, in its order.
enum entry_id : int {
#define PVMM_FAKE_ID(name, version, need) id_##name,
#define PVMM_FAKE_ID_AS(field, name, prototype, version, need) id_##field,
  PVMM_CUDA_ENTRY_POINTS(PVMM_FAKE_ID, PVMM_FAKE_ID_AS)
#undef PVMM_FAKE_ID
#undef PVMM_FAKE_ID_AS
      entry_count
};
/// The entry's name in the table.
const char* name_of(int id) noexcept;

/// How many calls each entry of the fake's own has answered (entries a caller sets itself count only if they add
/// to it). Global because the entries are plain function pointers with no state of their own; counted without
/// synchronisation (a fake table serves one thread at a time), so counting costs next to nothing.
extern std::array<std::uint64_t, entry_count> calls;

/// The fake driver's table: CUDA 13.0 with `devices` devices, each with every device attribute 1 (every feature
/// present; set cuDeviceGetAttribute for fewer) and 2 MiB granularity; the primary context (0x100) always current;
/// fresh addresses (above 1 TiB, 2 MiB aligned, never dereferenceable) from reservations, pools and pinned
/// allocations, fresh handles from cuMemCreate; every other entry zeroes its outputs and succeeds.
driver_api table(int devices = 1);

/// Installs a copy of `table` as the backend's driver table (install_driver_api) for its own life and puts the one
/// before back when it goes. Declared before a case's pvmm objects, it outlives them: their destructors still call
/// the fake.
class installed_table {
 public:
  explicit installed_table(const driver_api& table) noexcept : table_(table), previous_(install_driver_api(&table_)) {}
  ~installed_table() { install_driver_api(previous_); }
  installed_table(const installed_table&) = delete;
  installed_table& operator=(const installed_table&) = delete;

 private:
  driver_api table_;
  const driver_api* previous_;
};

}  // namespace pvmm::cuda::fake
