// Bad input to multicast objects: each case asserts the exact portable error.
#include "support.hpp"

using namespace pvmm;
using namespace pvmm_test;

TEST_SUITE("bad input") {
  // ---- multicast ----
  PVMM_CASE("multicast: team of zero devices") {
    PVMM_REQUIRE_DEVICE();
    multicast_properties p;
    p.team_size = 0;
    p.size = granule();
    PVMM_CHECK_ERRC(multicast_object::create(p), errc::invalid_argument);
  }
  PVMM_CASE("multicast: granularity where multicast is absent") {
    PVMM_REQUIRE_DEVICE();
    // Where multicast exists, a real query is made on CUDA by the recording test, never created here.
    PVMM_SKIP_UNLESS(!caps().multicast.supported, "the device has multicast: this case is about devices without it");
    multicast_properties p;
    p.team_size = 1;
    p.size = granule();
    PVMM_CHECK_ERRC(multicast_granularity(p), errc::not_supported);
    PVMM_CHECK_ERRC(multicast_object::create(p), errc::not_supported);
  }
}  // TEST_SUITE
