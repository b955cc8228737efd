// What the team case bodies share (case_support.hpp, cases.hpp): the data pattern and its checks, the failure
// lines' prefix, team options per rank, the window check written two ways, and the device set-up.
#include "case_support.hpp"
#include "cases.hpp"
#include "device_memory.hpp"
#include "open_fds.hpp"
#include "sanitized.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <thread>

#include <pvmm/device.hpp>
#include <pvmm/diagnostics.hpp>
#include <pvmm/reservation.hpp>
#include <pvmm/stream.hpp>
#include <pvmm/team.hpp>
#include <pvmm/team_multicast.hpp>
#include <pvmm/testing.hpp>

namespace pvmm_team_test {

using namespace std::chrono_literals;

namespace {

PVMM_TEST_OWN_BUFFER_LOOP void fill_pattern(std::uint32_t* words, std::size_t count, int rank, int generation) {
  for (std::size_t i = 0; i < count; ++i)
    words[i] = static_cast<std::uint32_t>(rank * 0x01000193u + generation * 0x9e3779b9u + i * 2654435761u);
}

PVMM_TEST_OWN_BUFFER_LOOP std::uint64_t checksum(const std::uint32_t* words, std::size_t count) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < count; ++i) h = (h ^ words[i]) * 1099511628211ull;
  return h;
}

PVMM_TEST_OWN_BUFFER_LOOP bool same_words(const std::uint32_t* a, const std::uint32_t* b, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

// Words not zeroed first (a std::vector's are, one instrumented store each): the copy that follows fills them.
std::unique_ptr<std::uint32_t[]> uninitialized_words(std::size_t count) {
  return std::unique_ptr<std::uint32_t[]>(new std::uint32_t[count]);
}

}  // namespace

std::vector<std::uint32_t> pattern(std::size_t bytes, int rank, int generation) {
  const std::size_t count = bytes / 4;
  auto words = uninitialized_words(count);
  fill_pattern(words.get(), count, rank, generation);
  return std::vector<std::uint32_t>(words.get(), words.get() + count);  // one memmove
}

bool mapping_holds(const void* at, const std::vector<std::uint32_t>& expected) {
  const std::size_t bytes = expected.size() * 4;
  auto back = uninitialized_words(expected.size());
  return pvmm::testing::copy_from_mapping(back.get(), at, bytes).has_value() &&
         same_words(back.get(), expected.data(), expected.size());
}

std::string where(const pvmm::bootstrap& b) { return "rank " + std::to_string(b.rank()) + ": "; }

pvmm::team_options team_options_for(const pvmm::bootstrap& b) {
  pvmm::team_options o;
  const int devices = pvmm::device_count().value_or(1);
  o.device = b.local_rank() % (devices > 0 ? devices : 1);  // several ranks on one device when there are few
  o.timeout = 20s;
  return o;
}

using pvmm::errc;

void write_and_verify(verdict& v, pvmm::bootstrap& b, const pvmm::symmetric_window& w, int generation) {
  const int me = b.rank();
  const std::size_t size = w.size_of(me);
  const auto mine = pattern(size, me, generation);
  auto wrote = pvmm::testing::copy_to_mapping(w.local(), mine.data(), size);
  v.check(wrote.has_value(), where(b) + "writing the own slot: " + (wrote ? "" : wrote.error().message()));
  std::uint64_t sum = checksum(mine.data(), mine.size());
  std::vector<std::uint64_t> sums(b.size());
  auto gathered = b.allgather(&sum, sizeof sum, sums.data(), pvmm::deadline_in(20s));
  v.check(gathered.has_value(), where(b) + "allgather of checksums: " + (gathered ? "" : gathered.error().message()));
  if (!gathered) return;
  const auto table = w.pointer_table();
  std::size_t largest = 0;
  for (int r = 0; r < b.size(); ++r) largest = std::max(largest, w.mapped(r) ? w.size_of(r) : 0);
  auto flat = uninitialized_words(largest / 4), listed = uninitialized_words(largest / 4);
  for (int r = 0; r < b.size(); ++r) {
    if (!w.mapped(r)) continue;
    const std::size_t bytes = w.size_of(r);
    auto* at = static_cast<unsigned char*>(w.base()) + r * w.stride();
    auto a = pvmm::testing::copy_from_mapping(flat.get(), at, bytes);
    auto c = pvmm::testing::copy_from_mapping(listed.get(), table[r], bytes);
    v.check(a.has_value() && c.has_value(), where(b) + "reading rank " + std::to_string(r));
    if (!a || !c) continue;
    v.check(table[r] == at, where(b) + "pointer table and flat window disagree for rank " + std::to_string(r));
    v.check(checksum(flat.get(), bytes / 4) == sums[r], where(b) + "rank " + std::to_string(r) +
                                                            "'s slot read through the flat "
                                                            "window differs from what it wrote");
    v.check(same_words(flat.get(), listed.get(), bytes / 4),
            where(b) + "rank " + std::to_string(r) + " reads differently through the table");
  }
}

std::string verdict::text() const {
  std::string out;
  for (const auto& f : failures) out += f + "\n";
  return out;
}

std::string no_device_reason() {
  const auto backend = pvmm::query_backend();
  if (!backend.available) return backend.name + " backend unavailable: " + backend.unavailable_reason;
  if (pvmm::device_count().value_or(0) < 1) return "no device";
  return {};
}

void use_every_device_once() {
  static const bool used = [] {
    const int devices = pvmm::device_count().value_or(0);
    for (int d = 0; d < devices; ++d) {
      auto stream = pvmm::stream::create(d);
      pvmm::allocation_properties props;
      props.location = pvmm::location::device(d);
      auto unit = pvmm::query_granularity(props);
      if (!stream || !unit) continue;  // the case itself reports what fails
      auto memory = pvmm::physical_allocation::create(unit->minimum, props);
      auto range = pvmm::address_reservation::reserve(unit->minimum);
      if (memory && range)
        (void)range->map_and_grant(0, *memory, 0, unit->minimum,
                                   {pvmm::access_descriptor{props.location, pvmm::access::read_write}});
    }
    return true;
  }();
  (void)used;
}

namespace {
std::atomic<int> signal_path{0};  // every rank thread of a case stores the same value
}  // namespace

std::pair<std::string, pvmm::stream_signal_path> signal_case_path(const std::string& name) {
  const std::string suffix = ":driver";
  if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return {name.substr(0, name.size() - suffix.size()), pvmm::stream_signal_path::driver};
  return {name, pvmm::stream_signal_path::kernel};
}

void use_signal_path(pvmm::stream_signal_path path) { signal_path.store(static_cast<int>(path)); }

bool make_signal_setup(verdict& v, const std::shared_ptr<pvmm::bootstrap>& b, std::size_t bytes, int channels,
                       signal_setup& out) {
  auto t = pvmm::team::create(b, team_options_for(*b));
  if (!t) return v.check(false, where(*b) + "team::create: " + t.error().message()), false;
  pvmm::window_options o;
  o.size = bytes;
  o.signal_channels = channels;
  o.stream_signals = static_cast<pvmm::stream_signal_path>(signal_path.load());
  o.timeout = std::chrono::seconds(20);
  auto w = pvmm::symmetric_window::create(*t, o);
  if (!w) return v.check(false, where(*b) + "window create: " + w.error().message()), false;
  auto s = pvmm::stream::create(t->device());
  if (!s) return v.check(false, where(*b) + "stream::create: " + s.error().message()), false;
  out = {std::move(*t), std::move(*w), std::move(*s)};
  return true;
}

pvmm::result<pvmm::symmetric_window> timed_window(pvmm::team& t, std::chrono::steady_clock::duration& took) {
  pvmm::window_options o;
  o.size = 2u << 20;
  o.timeout = std::chrono::seconds(20);
  const auto start = std::chrono::steady_clock::now();
  auto w = pvmm::symmetric_window::create(t, o);
  took = std::chrono::steady_clock::now() - start;
  return w;
}

}  // namespace pvmm_team_test
