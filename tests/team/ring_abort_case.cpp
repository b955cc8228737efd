// The ring-aborted team case (cases.hpp): team::abort() reaches a node-local peer that waits inside a step's fd
// ring (on the team endpoints, not the bootstrap) at once.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include <pvmm/team.hpp>

#include "case_support.hpp"
#include "cases.hpp"

namespace pvmm_team_test {

using namespace std::chrono_literals;
using pvmm::errc;

namespace {

// How long rank 0 stays away from the ring after aborting: its peers must not need it to return.
constexpr auto away = 3s;

// Where rank 0 leaves the moment it aborted (steady_clock is CLOCK_MONOTONIC: one clock for every process here), so
// that a peer measures its own return from that moment and not from the start of a window create that, with a dozen
// test processes on the GPUs, takes seconds by itself. The ranks are the suite process's children: its pid names it.
std::string abort_time_file(int ranks) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/pvmm-ring-abort-" + std::to_string(::getppid()) + "-" +
         std::to_string(ranks);
}
void write_abort_time(int ranks) {
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  if (std::FILE* f = std::fopen(abort_time_file(ranks).c_str(), "w")) {
    std::fprintf(f, "%lld\n", static_cast<long long>(now));
    std::fclose(f);
  }
}
/// Time since rank 0 aborted; nullopt when it left no time.
std::optional<std::chrono::steady_clock::duration> since_abort(int ranks) {
  long long then = 0;
  std::FILE* f = std::fopen(abort_time_file(ranks).c_str(), "r");
  if (!f) return std::nullopt;
  const bool read = std::fscanf(f, "%lld", &then) == 1;
  std::fclose(f);
  if (!read) return std::nullopt;
  return std::chrono::steady_clock::now().time_since_epoch() - std::chrono::steady_clock::duration(then);
}

// Rank 0's bootstrap: once armed, the second allgather (window create's chunk records, after its window sizes)
// completes, then rank 0 aborts its team and stays away; its peers are in the fd ring by then, waiting for its
// message.
class aborting_bootstrap : public forwarding_bootstrap {
 public:
  using forwarding_bootstrap::forwarding_bootstrap;
  pvmm::team* team = nullptr;
  int allgathers_left = -1;  // armed: counts down to the chunk records

 protected:
  pvmm::status do_allgather(const void* mine, std::size_t bytes, void* all, std::uint64_t collective,
                            pvmm::deadline until) override {
    auto done = forwarding_bootstrap::do_allgather(mine, bytes, all, collective, until);
    if (done && team && allgathers_left > 0 && --allgathers_left == 0) {
      write_abort_time(size());
      team->abort();
      std::this_thread::sleep_for(away);
    }
    return done;
  }
};

}  // namespace

// "ring-aborted": rank 0 aborts while every other rank waits in window create's fd ring for its message. Every
// other rank returns peer_lost naming rank 0 well before rank 0 comes back (and before its 20 s deadline).
void ring_aborted_case(verdict& v, std::shared_ptr<pvmm::bootstrap> b) {
  std::shared_ptr<aborting_bootstrap> wrapper;
  if (b->rank() == 0) b = wrapper = std::make_shared<aborting_bootstrap>(b);
  auto t = pvmm::team::create(b, team_options_for(*b));
  if (!t) return v.check(false, where(*b) + "team::create: " + t.error().message());
  if (wrapper) {
    wrapper->team = &*t;
    wrapper->allgathers_left = 2;
  }
  std::chrono::steady_clock::duration took{};
  auto w = timed_window(*t, took);
  v.check(!w && w.code() == errc::peer_lost && w.error().message().find("rank 0") != std::string::npos,
          where(*b) + "expected peer_lost naming rank 0, got " + (w ? "success" : w.error().message()));
  if (b->rank() == 0) {  // back after `away`: a peer that has not read the time by now is late anyway
    std::remove(abort_time_file(b->size()).c_str());
    return;
  }
  const auto late = since_abort(b->size());
  const auto ms = [](auto d) {
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
  };
  v.check(late.has_value(),
          where(*b) +
              "no abort time from rank 0 (none written, or this rank returned after rank 0 came back and removed it; "
              "window create took " +
              ms(took) + " ms)");
  if (late)
    v.check(*late < away / 2, where(*b) + "heard of rank 0's abort in the fd ring " + ms(*late) +
                                  " ms after it (window create took " + ms(took) +
                                  " ms): " + (w ? std::string("success") : w.error().message()));
}

}  // namespace pvmm_team_test
