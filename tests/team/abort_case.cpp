// The aborted team case (cases.hpp): what team::abort() does to the windows of the rank that calls it, and to its
// peers.
#include <chrono>
#include <string>
#include <thread>

#include <pvmm/diagnostics.hpp>
#include <pvmm/team.hpp>
#include <pvmm/testing.hpp>

#include "case_support.hpp"
#include "cases.hpp"

namespace pvmm_team_test {

using namespace std::chrono_literals;
using pvmm::errc;

namespace {

// Rank 0, once its window holds data: abort from another thread unmaps every peer's slot at once and lets go of
// the imports (the live counters fall by one mapping and one allocation per peer), keeps the own slot's data, and
// makes later steps peer_lost. Aborting again changes nothing.
void abort_and_check(verdict& v, pvmm::bootstrap& b, pvmm::team& t, pvmm::symmetric_window& w, bool process_wide) {
  std::size_t peers_mapped = 0;
  for (int r = 1; r < b.size(); ++r) peers_mapped += w.mapped(r) ? 1 : 0;
  const auto before = pvmm::query_live_objects();
  std::thread([&] { t.abort(); }).join();
  for (int r = 1; r < b.size(); ++r)
    v.check(!w.mapped(r) && w.peer(r) == nullptr && w.unmapped_reason(r).find("aborted its team") != std::string::npos,
            where(b) + "rank " + std::to_string(r) + " still mapped after abort, or no reason: '" +
                w.unmapped_reason(r) + "'");
  const std::size_t bytes = w.size_of(0);
  v.check(mapping_holds(w.local(), pattern(bytes, 0, 1)), where(b) + "the own slot lost its data at abort");
  if (process_wide) {  // ranks that are threads share the counters: the suite checks the process afterwards
    const auto now = pvmm::query_live_objects();
    v.check(before.mappings - now.mappings == peers_mapped && before.allocations - now.allocations == peers_mapped,
            where(b) + "abort let go of " + std::to_string(before.mappings - now.mappings) + " mappings and " +
                std::to_string(before.allocations - now.allocations) + " allocations; " + std::to_string(peers_mapped) +
                " peers were mapped");
  }
  auto later = w.grow(w.size_of(0), 20s);
  v.check(!later && later.code() == errc::peer_lost,
          where(b) + "a step after abort: " + (later ? "succeeded" : later.error().message()));
  t.abort();
  v.check(w.mapped(0), where(b) + "a second abort unmapped the own slot");
}

}  // namespace

// "aborted": every rank makes a window and fills it; rank 0 aborts its team while the others grow theirs. Every
// other rank's grow fails with peer_lost naming rank 0 well before its deadline.
void aborted_case(verdict& v, std::shared_ptr<pvmm::bootstrap> b, bool process_wide) {
  auto t = pvmm::team::create(b, team_options_for(*b));
  if (!t) return v.check(false, where(*b) + "team::create: " + t.error().message());
  pvmm::window_options o;
  o.size = 2u << 20;
  o.max_size = 4u << 20;
  o.timeout = 20s;
  auto w = pvmm::symmetric_window::create(*t, o);
  if (!w) return v.check(false, where(*b) + "symmetric_window::create: " + w.error().message());
  write_and_verify(v, *b, *w, 1);
  if (!v.failures.empty()) return;
  if (b->rank() == 0) return abort_and_check(v, *b, *t, *w, process_wide);
  const auto start = std::chrono::steady_clock::now();
  auto grown = w->grow(4u << 20, 20s);
  const auto took = std::chrono::steady_clock::now() - start;
  v.check(!grown && grown.code() == errc::peer_lost && grown.error().message().find("rank 0") != std::string::npos,
          where(*b) + "expected peer_lost naming rank 0, got " + (grown ? "success" : grown.error().message()));
  v.check(took < 5s, where(*b) + "heard of rank 0's abort only after " +
                         std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()) + " ms");
}

}  // namespace pvmm_team_test
