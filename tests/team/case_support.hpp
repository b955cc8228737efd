// What the team case bodies share (cases.cpp, multicast_case.cpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <pvmm/bootstrap.hpp>
#include <pvmm/stream.hpp>
#include <pvmm/team.hpp>
#include <pvmm/testing.hpp>

#include "cases.hpp"

namespace pvmm_team_test {

/// The words rank `rank` writes into its slot at `generation`.
std::vector<std::uint32_t> pattern(std::size_t bytes, int rank, int generation);
/// Whether the `expected.size()` words read from the mapping at `at` (pvmm::testing::copy_from_mapping) are
/// `expected`: false where the read fails too.
bool mapping_holds(const void* at, const std::vector<std::uint32_t>& expected);
/// Forwards every call to the bootstrap it wraps; the test wrappers (cases.cpp, hostile_suite.cpp) change one
/// thing each.
class forwarding_bootstrap : public pvmm::bootstrap {
 public:
  explicit forwarding_bootstrap(std::shared_ptr<pvmm::bootstrap> inner) : inner_(std::move(inner)) {}
  int rank() const noexcept override { return inner_->rank(); }
  int size() const noexcept override { return inner_->size(); }
  int node() const noexcept override { return inner_->node(); }
  int local_rank() const noexcept override { return inner_->local_rank(); }
  int local_size() const noexcept override { return inner_->local_size(); }
  const char* adapter() const noexcept override { return inner_->adapter(); }

 protected:  // the test wrappers override these to change one thing each
  pvmm::status do_allgather(const void* mine, std::size_t bytes, void* all, std::uint64_t,
                            pvmm::deadline until) override {
    return inner_->allgather(mine, bytes, all, until);
  }
  pvmm::status do_barrier(std::uint64_t, pvmm::deadline until) override { return inner_->barrier(until); }
  pvmm::status do_send(int peer, int tag, const void* data, std::size_t bytes, pvmm::deadline until) override {
    return inner_->send(peer, tag, data, bytes, until);
  }
  pvmm::status do_receive(int peer, int tag, void* data, std::size_t bytes, pvmm::deadline until) override {
    return inner_->receive(peer, tag, data, bytes, until);
  }
  void do_abort() noexcept override { inner_->abort(); }

 private:
  std::shared_ptr<pvmm::bootstrap> inner_;
};

/// Hands rank 1 wrong bytes (the first half of `all` zeroed) in collective `armed_at`, though its allgather
/// succeeded (team_rules.cpp, team_rules_closing.cpp).
class half_zeroed_at : public forwarding_bootstrap {
 public:
  explicit half_zeroed_at(std::shared_ptr<pvmm::bootstrap> inner, std::uint64_t armed = ~std::uint64_t{0})
      : forwarding_bootstrap(std::move(inner)), armed_at(armed) {}
  std::uint64_t armed_at;
  std::uint64_t collectives_done() const noexcept { return collectives_completed(); }

 protected:
  pvmm::status do_allgather(const void* mine, std::size_t bytes, void* all, std::uint64_t collective,
                            pvmm::deadline until) override {
    auto done = forwarding_bootstrap::do_allgather(mine, bytes, all, collective, until);
    if (done && collective == armed_at && rank() == 1)
      std::memset(all, 0, bytes * static_cast<std::size_t>(size()) / 2);
    return done;
  }
};

/// What the signal cases run on (signal_cases.cpp, signal_guard_cases.cpp): a team, a window with signal channels,
/// and a stream of the team's device.
struct signal_setup {
  pvmm::team team;
  pvmm::symmetric_window window;
  pvmm::stream stream;
};
/// Makes a signal_setup with a window of `bytes` per rank and `channels` signal channels, on the signal path the
/// case's name asks for (signal_case_path); false (reported in `v`) on failure.
bool make_signal_setup(verdict& v, const std::shared_ptr<pvmm::bootstrap>& b, std::size_t bytes, int channels,
                       signal_setup& out);
/// A signal case's name without its path suffix ("sig-data:driver" is "sig-data" on stream_signal_path::driver),
/// and the path; the suffix is how exec'd and mpirun'd ranks hear it.
std::pair<std::string, pvmm::stream_signal_path> signal_case_path(const std::string& name);
/// The path make_signal_setup uses (set by run_signal_case for the case it runs; every rank sets the same).
void use_signal_path(pvmm::stream_signal_path path);
/// "success", or the failure's message.
inline std::string outcome_text(const pvmm::status& s) { return s ? std::string("success") : s.error().message(); }

/// A window of 2 MiB per rank on `t` (20 s deadline), made collectively; `took`: how long the create took.
pvmm::result<pvmm::symmetric_window> timed_window(pvmm::team& t, std::chrono::steady_clock::duration& took);

/// A row of a case table: the case's name and its body.
using named_case = std::pair<const char*, std::function<void()>>;
/// Runs the body of the row of `cases` named `name`; false when no row is.
inline bool run_named(const std::string& name, std::initializer_list<named_case> cases) {
  for (const auto& c : cases)
    if (name == c.first) {
      c.second();
      return true;
    }
  return false;
}

/// The split cases (split_cases.cpp: "mem-split", "mem-split-lost", "mem-split-dead"): false when `p.name` is none.
bool run_split_body(verdict& v, const case_params& p, const std::shared_ptr<pvmm::bootstrap>& ranks);

/// "rank 3: " for failure lines.
std::string where(const pvmm::bootstrap& b);
/// This rank's team options: several ranks on one device when there are few.
pvmm::team_options team_options_for(const pvmm::bootstrap& b);
/// Writes this rank's slot (pattern(.., generation)), then checks every mapped peer's slot, read through the flat
/// window and through the pointer table, against the checksum its writer sent over the bootstrap.
void write_and_verify(verdict& v, pvmm::bootstrap& b, const pvmm::symmetric_window& w, int generation);
/// The fd-short case (fd_short_case.cpp): rank 1 runs out of fds at window create; process ranks only.
void fd_short_case(verdict& v, std::shared_ptr<pvmm::bootstrap> b);
/// The aborted case (abort_case.cpp).
void aborted_case(verdict& v, std::shared_ptr<pvmm::bootstrap> b, bool process_wide);
/// The ring-aborted case (ring_abort_case.cpp): rank 0 aborts while its peers wait in the fd ring.
void ring_aborted_case(verdict& v, std::shared_ptr<pvmm::bootstrap> b);
/// The multicast case: not_supported naming the ranks where the backend has none, else (only with
/// PVMM_ENABLE_MULTICAST_TESTS=1) a store through the multicast address read back from every bound slot.
void multicast_case(verdict& v, std::shared_ptr<pvmm::bootstrap> b, bool process_wide);

// `bytes` of this rank's pattern at `generation` written at `at`; then the first `read` bytes (every rank has
// written at least that many) of every mapped rank's read at `address_of(r)` and compared with the pattern that
// rank wrote (a pattern's prefix is the shorter pattern).
template <class AddressOf>
inline void write_then_read_all(verdict& v, pvmm::bootstrap& b, void* at, std::size_t bytes, int generation,
                                AddressOf address_of, std::size_t read = 0) {
  if (read == 0) read = bytes;
  const auto mine = pattern(bytes, b.rank(), generation);
  auto wrote = pvmm::testing::copy_to_mapping(at, mine.data(), bytes);
  v.check(wrote.has_value(), where(b) + "writing: " + (wrote ? "" : wrote.error().message()));
  auto met = b.barrier(pvmm::deadline_in(std::chrono::seconds(20)));
  v.check(met.has_value(), where(b) + "barrier: " + (met ? "" : met.error().message()));
  for (int r = 0; r < b.size() && met; ++r) {
    void* from = address_of(r);
    if (from == nullptr) continue;
    v.check(mapping_holds(from, pattern(read, r, generation)), where(b) + "rank " + std::to_string(r) +
                                                                   "'s data at generation " +
                                                                   std::to_string(generation) + " reads back wrong");
  }
  met = b.barrier(
      pvmm::deadline_in(std::chrono::seconds(20)));  // nobody writes the next generation while a peer still reads
  v.check(met.has_value(), where(b) + "barrier after reading");
}

}  // namespace pvmm_team_test
