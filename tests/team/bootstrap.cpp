// The bootstrap contract (pvmm/bootstrap.hpp), one body per adapter: threads, endpoints (ranks as threads of this
// process), the in-process store, and an adapter written here the way a user would (as MSCCL++'s bootstrap_tests
// runs one body per adapter). Then what only some adapters have: strangers at the endpoints root, bounds on ranks
// and deadlines, memory running out.
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <pvmm/bootstrap.hpp>
#include <pvmm/endpoint.hpp>
#include <pvmm/ipc.hpp>

#include <doctest/doctest.h>

#include "bootstrap_support.hpp"
#include "sanitized.hpp"

using namespace std::chrono_literals;
using pvmm::errc;

using namespace bootstrap_test;

TEST_CASE("contract: allgather delivers in rank order, for odd sizes") {
  for_each_adapter(3, [&](const char*, group& g) {
    for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{7}, std::size_t{40001}}) {
      CAPTURE(bytes);
      std::vector<std::string> bad(3);
      on_every_rank(3, [&](int r) {
        std::vector<std::uint8_t> mine(bytes), all(3 * bytes + 1, 0xee);
        for (std::size_t i = 0; i < bytes; ++i) mine[i] = static_cast<std::uint8_t>(r * 31 + i);
        auto ok = g[r]->allgather(mine.data(), bytes, all.data(), pvmm::deadline_in(10s));
        if (!ok) bad[r] = text(ok);
        for (std::size_t q = 0; q < 3 && ok; ++q)
          for (std::size_t i = 0; i < bytes; ++i)
            if (all[q * bytes + i] != static_cast<std::uint8_t>(q * 31 + i)) bad[r] = "wrong byte";
        if (all[3 * bytes] != 0xee) bad[r] = "wrote past the end";
      });
      for (auto& b : bad) CHECK_MESSAGE(b.empty(), b);
    }
  });
}

TEST_CASE("contract: barrier returns only once every rank arrived") {
  for_each_adapter(3, [&](const char*, group& g) {
    std::vector<std::string> bad(3);
    const auto took = on_every_rank_timed(3, [&](int r) {
      if (r == 2) std::this_thread::sleep_for(300ms);
      auto ok = g[r]->barrier(pvmm::deadline_in(10s));
      if (!ok) bad[r] = text(ok);
    });
    for (int r = 0; r < 3; ++r) {
      CHECK_MESSAGE(bad[r].empty(), bad[r]);
      CHECK(took[r] >= 280ms);
    }
  });
}

TEST_CASE("contract: mismatched sizes are team_mismatch naming the rank, and the bootstrap stays broken") {
  for_each_adapter(3, [&](const char*, group& g) {
    std::vector<pvmm::status> first(3), later(3);
    on_every_rank(3, [&](int r) {
      const std::size_t bytes = r == 1 ? 5 : 4;
      std::vector<std::uint8_t> mine(bytes), all(3 * bytes);
      first[r] = g[r]->allgather(mine.data(), bytes, all.data(), pvmm::deadline_in(10s));
      later[r] = g[r]->barrier(pvmm::deadline_in(10s));
    });
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      CHECK_MESSAGE(first[r].code() == errc::team_mismatch, text(first[r]));
      CHECK_MESSAGE(names(first[r], "rank 1 gave 5"), text(first[r]));
      CHECK_MESSAGE(later[r].code() == first[r].code(), text(later[r]));
    }
  });
}

TEST_CASE("contract: a missing rank is timeout naming it, within the deadline") {
  for_each_adapter(3, [&](const char*, group& g) {
    std::vector<pvmm::status> got(3);
    const auto took = on_every_rank_timed(2, [&](int r) { got[r] = g[r]->barrier(pvmm::deadline_in(500ms)); });
    expect_failed(got, 2, errc::timeout, "rank 2", took);
  });
}

TEST_CASE("contract: an abort is peer_lost naming the aborting rank on every waiting rank, within a slice") {
  for_each_adapter(3, [&](const char*, group& g) {
    std::vector<pvmm::status> got(3);
    const auto took = on_every_rank_timed(3, [&](int r) {
      if (r == 1) {
        std::this_thread::sleep_for(200ms);
        g[r]->abort();
        got[r] = g[r]->barrier(pvmm::deadline_in(20s));
      } else {
        got[r] = g[r]->barrier(pvmm::deadline_in(20s));
      }
    });
    expect_failed(got, 3, errc::peer_lost, "rank 1 aborted", took);
  });
}

TEST_CASE("contract: a rank that aborts inside a collective fails it on every rank") {
  for_each_adapter(2, [&](const char*, group& g) {
    std::vector<pvmm::status> got(2);
    on_every_rank(2, [&](int r) {
      if (r == 1) {
        std::thread aborter([&] {
          std::this_thread::sleep_for(100ms);
          g[1]->abort();
        });
        got[r] = g[r]->barrier(pvmm::deadline_in(20s));
        aborter.join();
      } else {
        std::this_thread::sleep_for(400ms);  // arrives after rank 1 gave up
        got[r] = g[r]->barrier(pvmm::deadline_in(20s));
      }
    });
    expect_failed(got, 2, errc::peer_lost, "rank 1 aborted");
  });
}

TEST_CASE("contract: a rank that failed and then aborts makes the others fail with its errc, within a slice") {
  // Rank 1's receive expires (a failure only it sees on the store adapter), then it aborts: ranks 0 and 2, waiting
  // in a barrier, fail with timeout too, not peer_lost, so every rank reports one outcome. An adapter written by a
  // user that does not carry the errc gives peer_lost (the base's aborted_by).
  for_each_adapter(3, [&](const char* a, group& g) {
    std::vector<pvmm::status> got(3);
    const auto took = on_every_rank_timed(3, [&](int r) {
      if (r == 1) {
        std::this_thread::sleep_for(200ms);
        std::uint32_t word = 0;
        got[r] = g[r]->receive(0, 5, &word, sizeof word, pvmm::deadline_in(0ms));
        g[r]->abort();
      } else {
        got[r] = g[r]->barrier(pvmm::deadline_in(20s));
      }
    });
    const bool carries = std::string(a) != "user";
    CHECK_MESSAGE(got[1].code() == errc::timeout, text(got[1]));
    for (int r : {0, 2}) {
      CAPTURE(r);
      CHECK_MESSAGE(got[r].code() == (carries ? errc::timeout : errc::peer_lost), text(got[r]));
      CHECK(took[r] < 3s);
    }
    if (std::string(a) == "store") CHECK_MESSAGE(names(got[0], "rank 1 failed with timeout and aborted"), text(got[0]));
  });
}

TEST_CASE("contract: an abort reaches the ranks waiting in receive, within a slice") {
  for_each_adapter(3, [&](const char*, group& g) {
    std::vector<pvmm::status> got(3);
    const auto took = on_every_rank_timed(3, [&](int r) {
      char x = 0;
      if (r == 2) {
        std::this_thread::sleep_for(300ms);
        g[2]->abort();
      } else {
        got[r] = g[r]->receive(1 - r, 0, &x, 1, pvmm::deadline_in(20s));  // 0 and 1 wait for each other
      }
    });
    expect_failed(got, 2, errc::peer_lost, "rank 2 aborted", took);
  });
}

TEST_CASE("contract: an abort from another thread ends this rank's receive at once, before any message came") {
  // Rank 0 waits for a message rank 1 never sends; another thread of rank 0 aborts. On endpoints the receive waited
  // for rank 1's first point-to-point connection on a listener abort() did not wake: the whole deadline.
  for_each_adapter(2, [&](const char*, group& g) {
    std::uint32_t value = 0;
    const auto start = std::chrono::steady_clock::now();
    std::thread aborter([&] {
      std::this_thread::sleep_for(200ms);
      g[0]->abort();
    });
    auto got = g[0]->receive(1, 7, &value, sizeof value, pvmm::deadline_in(20s));
    aborter.join();
    CHECK_MESSAGE(got.code() == errc::peer_lost, text(got));
    CHECK_MESSAGE(names(got, "rank 0 aborted"), text(got));
    CHECK(std::chrono::steady_clock::now() - start < 5s);
    g[1]->abort();
  });
}

TEST_CASE("contract: a group can be made again, and runs many rounds") {
  for (const char* a : adapters) {
    CAPTURE(a);
    const std::string name = unique_name("again");  // the same endpoint name both times
    for (int again = 0; again < 2; ++again) {
      auto g = make_group(a, 3, name);
      std::vector<std::string> bad(3);
      on_every_rank(3, [&](int r) {
        for (std::uint64_t round = 0; round < 200 && bad[r].empty(); ++round) {
          const std::uint64_t mine = round * 1000 + static_cast<std::uint64_t>(r);
          std::uint64_t all[3] = {};
          auto ok = round % 3 == 2 ? g[r]->barrier(pvmm::deadline_in(10s))
                                   : g[r]->allgather(&mine, sizeof mine, all, pvmm::deadline_in(10s));
          if (!ok) bad[r] = text(ok);
          for (std::uint64_t q = 0; q < 3 && ok && round % 3 != 2; ++q)
            if (all[q] != round * 1000 + q) bad[r] = "round " + std::to_string(round) + " is wrong";
        }
      });
      for (auto& b : bad) CHECK_MESSAGE(b.empty(), b);
    }
  }
}

TEST_CASE("contract: two ranks each send 8 MiB to the other, then receive: no deadlock, the bytes arrive") {
  // On endpoints a send larger than the socket buffer waited for the peer to read, and the peer was sending too:
  // both waited out the deadline.
  constexpr std::size_t words = (8u << 20) / sizeof(std::uint32_t);
  for_each_adapter(2, [&](const char*, group& g) {
    std::vector<std::string> bad(2);
    const auto start = std::chrono::steady_clock::now();
    on_every_rank(2, [&](int r) {
      std::vector<std::uint32_t> out(words), in(words);
      for (std::size_t i = 0; i < words; ++i) out[i] = static_cast<std::uint32_t>(i * 2 + static_cast<unsigned>(r));
      auto sent = g[r]->send(1 - r, 3, out.data(), out.size() * sizeof out[0], pvmm::deadline_in(20s));
      if (!sent) return void(bad[r] = "send: " + text(sent));
      auto got = g[r]->receive(1 - r, 3, in.data(), in.size() * sizeof in[0], pvmm::deadline_in(20s));
      if (!got) return void(bad[r] = "receive: " + text(got));
      for (std::size_t i = 0; i < words; ++i)
        if (in[i] != static_cast<std::uint32_t>(i * 2 + static_cast<unsigned>(1 - r)))
          return void(bad[r] = "word " + std::to_string(i) + " is wrong");
    });
    for (auto& b : bad) CHECK_MESSAGE(b.empty(), b);
    CHECK(std::chrono::steady_clock::now() - start < 10s);
  });
}

TEST_CASE("contract: send and receive match tags, keep other tags for later, and check sizes") {
  for_each_adapter(3, [&](const char*, group& g) {
    std::vector<std::string> bad(3);
    const std::vector<std::uint8_t> big(100000, 0x5a);
    on_every_rank(3, [&](int r) {
      const auto until = pvmm::deadline_in(10s);
      auto need = [&](const pvmm::status& s) {
        if (!s && bad[r].empty()) bad[r] = text(s);
      };
      if (r == 0) {
        need(g[0]->send(1, 5, "a12", 3, until));
        need(g[0]->send(1, 7, "bb", 2, until));
        need(g[0]->send(1, 5, "c", 1, until));
      }
      if (r == 2) {
        need(g[2]->send(1, 0, big.data(), big.size(), until));
        char x[2] = {};
        need(g[2]->receive(1, 1, x, 2, until));
        if (std::string(x, 2) != "hi") bad[2] = "rank 2 got the wrong bytes from rank 1";
      }
      if (r == 1) {
        char bb[2] = {}, a3[3] = {}, c[1] = {};
        need(g[1]->receive(0, 7, bb, 2, until));
        need(g[1]->receive(0, 5, a3, 3, until));
        need(g[1]->receive(0, 5, c, 1, until));
        if (std::string(bb, 2) != "bb" || std::string(a3, 3) != "a12" || c[0] != 'c') bad[1] = "tags mixed up";
        std::vector<std::uint8_t> got(big.size());
        need(g[1]->receive(2, 0, got.data(), got.size(), until));
        if (got != big) bad[1] = "the big message is wrong";
        need(g[1]->send(2, 1, "hi", 2, until));
      }
    });
    for (auto& b : bad) CHECK_MESSAGE(b.empty(), b);
    // A receive of the wrong size is team_mismatch naming the sender.
    pvmm::status wrong;
    on_every_rank(2, [&](int r) {
      char x[8] = {};
      if (r == 0) (void)g[0]->send(1, 3, x, 4, pvmm::deadline_in(10s));
      if (r == 1) wrong = g[1]->receive(0, 3, x, 8, pvmm::deadline_in(10s));
    });
    CHECK_MESSAGE(wrong.code() == errc::team_mismatch, text(wrong));
    CHECK_MESSAGE(names(wrong, "rank 0 sent 4 bytes"), text(wrong));
    char x = 0;
    CHECK(g[1]->send(1, 0, &x, 1, pvmm::deadline_in(1s)).code() != errc{});
    CHECK(g[2]->send(0, -1, &x, 1, pvmm::deadline_in(1s)).code() == errc::invalid_argument);
    CHECK(g[2]->send(7, 0, &x, 1, pvmm::deadline_in(1s)).code() == errc::invalid_argument);
  });
}

TEST_CASE("deadline_in saturates: wait_forever, 300 years and milliseconds::max never wait out") {
  const auto now = std::chrono::steady_clock::now();
  CHECK(pvmm::deadline_in(pvmm::ipc::wait_forever) == pvmm::deadline::max());
  CHECK(pvmm::deadline_in(std::chrono::milliseconds::max()) == pvmm::deadline::max());
  const auto years300 = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::hours(24 * 365 * 300));
  CHECK(pvmm::deadline_in(years300) > now + std::chrono::hours(24 * 365 * 200));
  const auto negative = pvmm::deadline_in(-5ms);
  CHECK(negative <= std::chrono::steady_clock::now());
  // A collective bounded by such a deadline waits, not fails at once: the missing rank is seen by its abort.
  auto g = pvmm::make_thread_bootstraps(2).value();
  pvmm::status got;
  std::thread waiter([&] { got = g[0]->barrier(pvmm::deadline_in(years300)); });
  std::this_thread::sleep_for(100ms);
  g[1]->abort();
  waiter.join();
  CHECK_MESSAGE(got.code() == errc::peer_lost, text(got));
}
