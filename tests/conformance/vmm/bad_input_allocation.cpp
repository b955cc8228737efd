// Bad input to device queries and physical_allocation::create: each case asserts the exact portable error and that
// nothing leaked (the case's leak check).
#include <optional>

#include "support.hpp"

using namespace pvmm;
using namespace pvmm_test;

namespace {
/// A granule of memory with `p`, which asks for a feature: checks that it is not_supported where the device lacks
/// the feature (`capable` false) and made where it has it.
result<physical_allocation> create_where_capable(const allocation_properties& p, bool capable) {
  auto r = physical_allocation::create(granule(), p);
  if (!capable) {
    PVMM_CHECK_ERRC(r, errc::not_supported);
  } else {
    PVMM_CHECK_OK(r);
  }
  return r;
}
}  // namespace

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
  PVMM_CASE("query_granularity: a location that does not exist") {
    PVMM_REQUIRE_DEVICE();
    struct bad_location {
      const char* name;
      location where;
      errc expected;
    };
    const bad_location rows[] = {
        {"unknown device", location::device(1000), errc::invalid_device},
        {"host location with a nonzero id", {location::kind::host, 5}, errc::invalid_location},
        {"negative NUMA node", location::host_numa(-1), errc::invalid_location},
    };
    for (const bad_location& row : rows) {
      SUBCASE(row.name) {
        allocation_properties p;
        p.location = row.where;
        PVMM_CHECK_ERRC(query_granularity(p), row.expected);
      }
    }
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
  PVMM_CASE("create: properties naming what does not exist") {
    PVMM_REQUIRE_DEVICE();
    struct bad_properties {
      const char* name;
      location where;
      std::optional<handle_types> exportable;  // empty: default_properties()'s
      errc expected;
    };
    const bad_properties rows[] = {
        {"unknown device", location::device(1000), {}, errc::invalid_device},
        {"unknown location kind", {static_cast<location::kind>(7), 0}, {}, errc::invalid_location},
        {"NUMA node that does not exist", location::host_numa(100000), {}, errc::invalid_location},
        {"unknown handle type bits", location::device(0), static_cast<handle_types>(1u << 7), errc::invalid_argument},
    };
    for (const bad_properties& row : rows) {
      SUBCASE(row.name) {
        allocation_properties p = default_properties();
        p.location = row.where;
        if (row.exportable) p.exportable = *row.exportable;
        PVMM_CHECK_ERRC(physical_allocation::create(granule(), p), row.expected);
      }
    }
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
    auto r = create_where_capable(p, caps().vmm.compression);
    if (r) CHECK(r->properties().value().compression);
  }
  PVMM_CASE("create: GPUDirect RDMA requested") {
    PVMM_REQUIRE_DEVICE();
    allocation_properties p = default_properties();
    p.gpu_direct_rdma = true;
    (void)create_where_capable(p, caps().vmm.gpu_direct_rdma);  // the checks are the point: the memory goes at once
  }
}  // TEST_SUITE
