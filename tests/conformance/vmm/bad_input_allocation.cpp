// Bad input to device queries and physical_allocation::create: each case asserts the exact portable error and that
// nothing leaked (the case's leak check).
#include "support.hpp"

using namespace pvmm;
using namespace pvmm_test;

TEST_SUITE("bad input") {
  // ---- devices and queries ----
  PVMM_CASE("query_device: negative ordinal") {
    PVMM_REQUIRE_DEVICE();
    PVMM_CHECK_ERRC(query_device(-1), errc::invalid_device);
  }
  PVMM_CASE("query_device: ordinal one past the last device") {
    PVMM_REQUIRE_DEVICE();
    PVMM_CHECK_ERRC(query_device(device_count().value()), errc::invalid_device);
  }
  PVMM_CASE("query_granularity: unknown device") {
    PVMM_REQUIRE_DEVICE();
    allocation_properties p;
    p.location = location::device(1000);
    PVMM_CHECK_ERRC(query_granularity(p), errc::invalid_device);
  }
  PVMM_CASE("query_granularity: host location with a nonzero id") {
    PVMM_REQUIRE_DEVICE();
    allocation_properties p;
    p.location = {location::kind::host, 5};
    PVMM_CHECK_ERRC(query_granularity(p), errc::invalid_location);
  }
  PVMM_CASE("query_granularity: negative NUMA node") {
    PVMM_REQUIRE_DEVICE();
    allocation_properties p;
    p.location = location::host_numa(-1);
    PVMM_CHECK_ERRC(query_granularity(p), errc::invalid_location);
  }
  PVMM_CASE("query_memory: unknown device") {
    PVMM_REQUIRE_DEVICE();
    PVMM_CHECK_ERRC(query_memory(1000), errc::invalid_device);
  }

  // ---- physical_allocation::create ----
  PVMM_CASE("create: zero size") {
    PVMM_REQUIRE_DEVICE();
    PVMM_CHECK_ERRC(physical_allocation::create(0, default_properties()), errc::invalid_size);
  }
  PVMM_CASE("create: size not a multiple of the granularity") {
    PVMM_REQUIRE_DEVICE();
    PVMM_CHECK_ERRC(physical_allocation::create(granule() + 1, default_properties()), errc::unaligned);
  }
  PVMM_CASE("create: unknown device") {
    PVMM_REQUIRE_DEVICE();
    allocation_properties p = default_properties();
    p.location = location::device(1000);
    PVMM_CHECK_ERRC(physical_allocation::create(granule(), p), errc::invalid_device);
  }
  PVMM_CASE("create: unknown location kind") {
    PVMM_REQUIRE_DEVICE();
    allocation_properties p = default_properties();
    p.location = {static_cast<location::kind>(7), 0};
    PVMM_CHECK_ERRC(physical_allocation::create(granule(), p), errc::invalid_location);
  }
  PVMM_CASE("create: NUMA node that does not exist") {
    PVMM_REQUIRE_DEVICE();
    allocation_properties p = default_properties();
    p.location = location::host_numa(100000);
    PVMM_CHECK_ERRC(physical_allocation::create(granule(), p), errc::invalid_location);
  }
  PVMM_CASE("create: unknown handle type bits") {
    PVMM_REQUIRE_DEVICE();
    allocation_properties p = default_properties();
    p.exportable = static_cast<handle_types>(1u << 7);
    PVMM_CHECK_ERRC(physical_allocation::create(granule(), p), errc::invalid_argument);
  }
  PVMM_CASE("create: fabric handles requested") {
    PVMM_REQUIRE_DEVICE();
    allocation_properties p = default_properties();
    p.exportable = handle_types::fabric;
    auto r = physical_allocation::create(granule(), p);
    if (!caps().sharing.fabric) {
      PVMM_CHECK_ERRC(r, errc::not_supported);
    } else if (!r) {
      PVMM_CHECK_ERRC(r, errc::not_permitted);  // supported by the device, refused by the system (no IMEX channel)
      CHECK(r.error().hint.find("IMEX") != std::string::npos);
    }
  }
  PVMM_CASE("create: compression requested") {
    PVMM_REQUIRE_DEVICE();
    allocation_properties p = default_properties();
    p.compression = true;
    auto r = physical_allocation::create(granule(), p);
    if (!caps().vmm.compression) {
      PVMM_CHECK_ERRC(r, errc::not_supported);
    } else {
      PVMM_CHECK_OK(r);
      if (r) CHECK(r->properties().value().compression);
    }
  }
  PVMM_CASE("create: GPUDirect RDMA requested") {
    PVMM_REQUIRE_DEVICE();
    allocation_properties p = default_properties();
    p.gpu_direct_rdma = true;
    auto r = physical_allocation::create(granule(), p);
    if (!caps().vmm.gpu_direct_rdma) {
      PVMM_CHECK_ERRC(r, errc::not_supported);
    } else {
      PVMM_CHECK_OK(r);
    }
  }
}  // TEST_SUITE
