// The multicast team case (cases.hpp).
#include <cstdio>
#include <cstdlib>
#include <string>

#include <pvmm/device.hpp>
#include <pvmm/diagnostics.hpp>
#include <pvmm/team.hpp>
#include <pvmm/team_multicast.hpp>
#include <pvmm/testing.hpp>

#include "case_support.hpp"
#include "cases.hpp"
#include "open_fds.hpp"

namespace pvmm_team_test {

using namespace std::chrono_literals;
using pvmm::errc;

// Multicast over a team. Where the backend has none (host, hip), every rank is told not_supported naming the
// ranks that lack it, before any multicast driver call, and nothing is left behind. Where it has it, only with
// PVMM_ENABLE_MULTICAST_TESTS=1 (creating one on shared GPU machines can take them down): a store through the
// multicast address reaches every bound slot of the node, read back through the flat window.
void multicast_case(verdict& v, std::shared_ptr<pvmm::bootstrap> b, bool process_wide) {
  const auto o = team_options_for(*b);
  auto device = pvmm::query_device(o.device);
  if (!device) return v.check(false, where(*b) + "query_device: " + device.error().message());
  const bool supported = device->capabilities.multicast.supported;
  const char* enabled = std::getenv("PVMM_ENABLE_MULTICAST_TESTS");
  if (supported && !(enabled && std::string(enabled) == "1")) {
    std::printf("[pvmm-skip] multicast over a team on real hardware: PVMM_ENABLE_MULTICAST_TESTS is not 1\n");
    return;
  }
  use_every_device_once();
  const auto fds = pvmm_test::open_fd_count();
  const auto live = pvmm::query_live_objects();
  {
    auto t = pvmm::team::create(b, o);
    if (!t) return v.check(false, where(*b) + "team::create: " + t.error().message());
    pvmm::window_options wo;
    wo.size = 2u << 20;
    wo.timeout = 20s;
    auto w = pvmm::symmetric_window::create(*t, wo);
    if (!w) return v.check(false, where(*b) + "symmetric_window::create: " + w.error().message());
    auto m = pvmm::team_multicast::create(*w, {20s});
    if (!supported) {
      const std::string expected = b->size() == 1 ? "not supported on rank 0 (" : "not supported on ranks 0, 1";
      v.check(!m && m.code() == errc::not_supported && m.error().message().find(expected) != std::string::npos,
              where(*b) + "expected not_supported naming the ranks, got " + (m ? "an object" : m.error().message()));
    } else if (!m) {
      v.check(false, where(*b) + "team_multicast::create: " + m.error().message());
    } else {
      if (b->rank() == 0) {
        const auto words = pattern(wo.size, 99, 1);
        auto wrote = pvmm::testing::copy_to_mapping(m->address(), words.data(), wo.size);
        v.check(wrote.has_value(), where(*b) + "a store through the multicast address");
      }
      v.check(b->barrier(pvmm::deadline_in(20s)).has_value(), where(*b) + "barrier after the multicast store");
      std::vector<std::uint32_t> read(wo.size / 4);
      for (int r : m->bound_ranks()) {
        auto got = pvmm::testing::copy_from_mapping(read.data(), w->peer(r), wo.size);
        v.check(got.has_value() && read == pattern(wo.size, 99, 1),
                where(*b) + "rank " + std::to_string(r) + "'s slot does not hold what went through multicast");
      }
      v.check(b->barrier(pvmm::deadline_in(20s)).has_value(), where(*b) + "barrier after reading");
    }
  }
  if (!process_wide) return;
  v.check(pvmm_test::open_fd_count() == fds, where(*b) + "fds: " + std::to_string(fds) + " before, " +
                                                 std::to_string(pvmm_test::open_fd_count()) +
                                                 " after the multicast case");
  const auto now = pvmm::query_live_objects();
  v.check(now.allocations == live.allocations && now.reservations == live.reservations && now.mappings == live.mappings,
          where(*b) + "live allocations, reservations or mappings changed over the multicast case");
}

}  // namespace pvmm_team_test
