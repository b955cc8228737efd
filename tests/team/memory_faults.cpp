// Memory running out at every allocation of the team and bootstrap entry points (issue 34 item 4): this test
// replaces the global operator new with one that throws std::bad_alloc at the N-th allocation of the calling thread
// once armed, and sweeps N from 0 until the call no longer reaches it. Every call must succeed or fail with
// errc::out_of_memory (or the error an allocation failure inside a step becomes on its peers), never let an
// exception out or crash, and leave no pvmm object, fd or thread behind.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <pvmm/bootstrap.hpp>
#include <pvmm/diagnostics.hpp>
#include <pvmm/team.hpp>

#include "cases.hpp"
#include "memory_faults.hpp"
#include "open_fds.hpp"

namespace {
// Armed on one thread: allocations left before the one that fails (-1: disarmed); whether it failed.
thread_local long allocations_left = -1;
thread_local bool fault_fired = false;

void* allocate(std::size_t n) {
  if (allocations_left >= 0 && allocations_left-- == 0) {
    fault_fired = true;
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* allocate_aligned(std::size_t n, std::align_val_t a) {
  if (allocations_left >= 0 && allocations_left-- == 0) {
    fault_fired = true;
    throw std::bad_alloc();
  }
  const std::size_t align = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(align, (n + align - 1) / align * align)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t n) { return allocate(n); }
void* operator new[](std::size_t n) { return allocate(n); }
void* operator new(std::size_t n, std::align_val_t a) { return allocate_aligned(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return allocate_aligned(n, a); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return allocate_aligned(n, a);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return allocate_aligned(n, a);
  } catch (...) {
    return nullptr;
  }
}
// Every form, so that no runtime's own definition is needed beside these (ASan's are weak).
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace pvmm_fault_test {

using namespace std::chrono_literals;
using pvmm::errc;

pvmm::status wrong() {
  pvmm::error e;
  e.code = errc::protocol_error;
  e.detail = "the data came back wrong";
  return e;
}

// Runs `call` with the N-th allocation of this thread failing.
outcome armed(long n, const std::function<pvmm::status()>& call) {
  outcome o;
  fault_fired = false;
  allocations_left = n;
  try {
    auto s = call();
    allocations_left = -1;
    o.ok = s.has_value();
    if (!s) o.code = s.code();
  } catch (...) {
    allocations_left = -1;
    o.threw = true;
  }
  o.fired = fault_fired;
  return o;
}

// Sweeps N for one entry point: `round(n)` sets up, runs the armed call and tears down, returning the call's
// outcome. Every outcome is success or out_of_memory (`also` another errc allowed: a peer's view of the failure);
// nothing is left behind. Ends at the first N the call does not reach.
void sweep(const std::string& what, const std::function<outcome(long)>& round, errc also) {
  CAPTURE(what);
  REQUIRE(round(-1).ok);  // unarmed, first: what a process opens once (the backend's) is not a leak
  const std::size_t fds = pvmm_test::open_fd_count();
  const std::size_t threads = pvmm_test::live_thread_count();
  const auto live = pvmm::query_live_objects();
  long n = 0;
  for (; n < 20000; ++n) {
    const std::size_t fds_before = pvmm_test::open_fd_count();
    const outcome o = round(n);
    CAPTURE(n);
    CHECK_MESSAGE(pvmm_test::open_fd_count() == fds_before, "an fd was left behind");
    REQUIRE_MESSAGE(!o.threw, "an exception left the library");
    if (!o.ok) REQUIRE_MESSAGE((o.code == errc::out_of_memory || o.code == also), std::string(pvmm::to_string(o.code)));
    if (!o.fired) {
      REQUIRE_MESSAGE(o.ok, "failed with no allocation failing: " << pvmm::to_string(o.code));
      break;
    }
  }
  CHECK(n < 20000);
  CHECK(pvmm_test::open_fd_count() == fds);
  CHECK(pvmm_test::live_thread_count_settled(threads) <= threads);  // fewer is no leak: a driver may end its own
  CHECK(pvmm::query_live_objects() == live);
}

}  // namespace pvmm_fault_test

using namespace pvmm_fault_test;
using namespace std::chrono_literals;
using pvmm::errc;

TEST_CASE("memory running out at any allocation: make_thread_bootstraps") {
  sweep("make_thread_bootstraps", [](long n) {
    return armed(n, [] {
      auto g = pvmm::make_thread_bootstraps(4);
      return g ? pvmm::status{} : pvmm::status(std::move(g).error());
    });
  });
}

TEST_CASE("memory running out at any allocation: bootstrap allgather, barrier, send, receive (threads adapter)") {
  // Rank 0's call is armed; rank 1 runs the same calls on its own thread. Where rank 0 failed, its bootstrap
  // aborted (a failure inside a call aborts it), so rank 1 returns at once, failing with rank 0's errc.
  using call = std::function<pvmm::status(pvmm::bootstrap&, int)>;
  const std::vector<std::pair<const char*, call>> calls{
      {"allgather",
       [](pvmm::bootstrap& b, int r) {
         std::uint64_t mine = 40u + static_cast<unsigned>(r), all[2] = {};
         auto s = b.allgather(&mine, sizeof mine, all, pvmm::deadline_in(10s));
         if (s && (all[0] != 40 || all[1] != 41)) return wrong();
         return s;
       }},
      {"barrier", [](pvmm::bootstrap& b, int) { return b.barrier(pvmm::deadline_in(10s)); }},
      {"send and receive",
       [](pvmm::bootstrap& b, int r) {
         std::uint32_t out = 7u + static_cast<unsigned>(r), in = 0;
         if (auto sent = b.send(1 - r, 3, &out, sizeof out, pvmm::deadline_in(10s)); !sent) return sent;
         auto s = b.receive(1 - r, 3, &in, sizeof in, pvmm::deadline_in(10s));
         if (s && in != 8u - static_cast<unsigned>(r)) return wrong();
         return s;
       }},
  };
  for (const auto& entry : calls) {
    const call& body = entry.second;  // not a structured binding: C++17 lambdas cannot capture one
    sweep(entry.first, [&](long n) {
      auto g = pvmm::make_thread_bootstraps(2).value();
      pvmm::status other;
      std::thread peer([&] { other = body(*g[1], 1); });
      const outcome o = armed(n, [&] { return body(*g[0], 0); });
      peer.join();
      // Collectives agree; point-to-point does not: rank 0 may fail in its receive after its message was delivered,
      // and rank 1 then completes both (measured in CI's cuda build).
      const bool collective = std::string(entry.first) != "send and receive";
      CHECK_MESSAGE((o.ok || !other || !collective), "rank 1 succeeded where rank 0 failed");
      if (!o.ok && !other)
        CHECK_MESSAGE(other.code() == o.code,
                      "rank 0 " << pvmm::to_string(o.code) << ", rank 1 " << other.error().message());
      return o;
    });
  }
}

TEST_CASE("memory running out at any allocation: team::create, symmetric_window::create and grow (one rank)") {
  if (const auto why = pvmm_team_test::no_device_reason(); !why.empty()) {
    std::printf("[pvmm-skip] %s\n", why.c_str());
    return;
  }
  sweep("team::create", [](long n) {
    auto g = pvmm::make_thread_bootstraps(1).value();
    return armed(n, [&] {
      auto t = pvmm::team::create(g[0]);
      return t ? pvmm::status{} : pvmm::status(std::move(t).error());
    });
  });
  pvmm::window_options o;
  o.size = 2u << 20;
  o.max_size = 8u << 20;
  o.timeout = 10s;
  sweep("symmetric_window::create", [&](long n) {
    auto t = pvmm::team::create(pvmm::make_thread_bootstraps(1).value()[0]).value();
    return armed(n, [&] {
      auto w = pvmm::symmetric_window::create(t, o);
      return w ? pvmm::status{} : pvmm::status(std::move(w).error());
    });
  });
  sweep("symmetric_window::grow", [&](long n) {
    auto t = pvmm::team::create(pvmm::make_thread_bootstraps(1).value()[0]).value();
    auto w = pvmm::symmetric_window::create(t, o).value();
    return armed(n, [&] { return w.grow(4u << 20, 10s); });
  });
}

TEST_CASE("memory running out at any allocation of rank 0: team::create and symmetric_window::create (two ranks)") {
  // Rank 1 (another thread) is never armed. Where rank 0 failed, it aborts its team as a user would: rank 1
  // returns within seconds (the failure travels in the step's agreement, or as the abort), never at its deadline.
  if (const auto why = pvmm_team_test::no_device_reason(); !why.empty()) {
    std::printf("[pvmm-skip] %s\n", why.c_str());
    return;
  }
  pvmm::window_options o;
  o.size = 2u << 20;
  o.timeout = 10s;
  sweep(
      "two ranks: team::create, symmetric_window::create",
      [&](long n) {
        auto g = pvmm::make_thread_bootstraps(2).value();
        auto start = std::chrono::steady_clock::now();
        std::chrono::steady_clock::duration took{};
        std::thread peer([&] {
          if (auto t = pvmm::team::create(g[1])) (void)pvmm::symmetric_window::create(*t, o);
          took = std::chrono::steady_clock::now() - start;
        });
        pvmm::team mine;
        const outcome out = armed(n, [&] {
          auto t = pvmm::team::create(g[0]);
          if (!t) return pvmm::status(std::move(t).error());
          mine = std::move(*t);
          auto w = pvmm::symmetric_window::create(mine, o);
          return w ? pvmm::status{} : pvmm::status(std::move(w).error());
        });
        if (!out.ok) {
          if (mine.valid())
            mine.abort();
          else
            g[0]->abort();
        }
        peer.join();
        CHECK_MESSAGE(took < 5s, "rank 1 returned after "
                                     << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
        return out;
      },
      errc::peer_lost);
}
