// The driver table's own declaration of what each entry is for (PVMM_CUDA_ENTRY_POINTS: required, optional,
// optional_exact), applied the way the loader applies it to a driver's entries, on fake-driver tables with entries
// taken away: the loader's verdict without a driver that lacks them.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>

#include <pvmm/pvmm.hpp>

#include "fake_driver.hpp"

using pvmm::cuda::apply_entry_needs;
using pvmm::cuda::driver_api;

TEST_CASE("a table with every entry lacks nothing, at any driver version") {
  driver_api t = pvmm::cuda::fake::table();
  CHECK(apply_entry_needs(t, 13000).empty());
  CHECK((t.cuMemAdvise != nullptr));
}

TEST_CASE("missing required entries are named, with the CUDA version of their ABI") {
  driver_api t = pvmm::cuda::fake::table();
  t.cuMemCreate = nullptr;
  t.cuStreamGetCtx = nullptr;
  CHECK(apply_entry_needs(t, 13000) == "cuStreamGetCtx (CUDA 9.2), cuMemCreate (CUDA 10.2)");
}

TEST_CASE("missing optional entries are no error: the capability that needs them reports itself absent") {
  driver_api t = pvmm::cuda::fake::table(2);
  t.cuMulticastCreate = nullptr;
  t.cuMemPoolCreate = nullptr;
  t.cuMemAdvise_device = nullptr;
  REQUIRE(apply_entry_needs(t, 13000).empty());
  const pvmm::cuda::fake::installed_table driver(t);
  const auto caps = pvmm::query_device(0).value().capabilities;
  CHECK_FALSE(caps.multicast.supported);
  CHECK_FALSE(caps.pools.supported);
  CHECK(caps.managed.supported);  // the location ABI is there
  CHECK(caps.vmm.supported);
}

TEST_CASE("a driver older than the location ABI (12.2) has advice and prefetch only in the device-ordinal ABI") {
  driver_api t = pvmm::cuda::fake::table();
  CHECK(apply_entry_needs(t, 12010).empty());
  CHECK((t.cuMemAdvise == nullptr));
  CHECK((t.cuMemPrefetchAsync == nullptr));
  CHECK((t.cuMemAdvise_device != nullptr));
  driver_api current = pvmm::cuda::fake::table();
  CHECK(apply_entry_needs(current, 12020).empty());
  CHECK((current.cuMemAdvise != nullptr));
}
