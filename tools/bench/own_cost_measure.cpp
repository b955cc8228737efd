// pvmm-own-cost's measuring: interleaved rounds of the pvmm side and the raw side, in a random order, and the
// median of the per-round differences with its IQR.
#include <link.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define OWN_COST_VALGRIND 1
#define OWN_COST_MARK(...) VALGRIND_PRINTF(__VA_ARGS__)
#else  // the arguments stay referenced (unevaluated), so that a build without valgrind's header has no unused ones
#define OWN_COST_MARK(...) ((void)sizeof(std::printf(__VA_ARGS__)))
#endif

#include "own_cost.hpp"

namespace own_cost {

bool counting = false;
int per_round = 64;
int rounds = 101;
std::array<std::uint64_t, pvmm::cuda::fake::entry_count> timed_calls{};

namespace {
std::vector<unsigned char> evict_buffer(std::size_t{8} << 20);  // above the L2 of every host measured
void evict() {
  for (std::size_t i = 0; i < evict_buffer.size(); i += 64)
    evict_buffer[i] = static_cast<unsigned char>(evict_buffer[i] + 1);
}

/// The three samples of interleaved rounds: pvmm's time, the raw time and their difference, per round.
struct samples {
  std::vector<double> pvmm, raw, added;
  std::string row(const std::string& name) const {
    using bench::quantile;
    return fmt::format("  {:<26} {:>9.1f} {:>9.1f} {:>9.1f}  [{:>6.1f} {:>6.1f}]", name, quantile(pvmm, 0.5),
                       quantile(raw, 0.5), quantile(added, 0.5), quantile(added, 0.25), quantile(added, 0.75));
  }
};

/// `count` rounds of both sides, each round in a random order (so neither side always runs on the other's
/// leftovers), each side's result divided by `per`.
template <class P, class R>
samples interleave(int count, unsigned seed, double per, const P& pvmm_side, const R& raw_side) {
  std::mt19937 order(seed);
  samples s;
  for (int r = 0; r < count; ++r) {
    double a, b;
    if (order() & 1)
      a = pvmm_side(), b = raw_side();
    else
      b = raw_side(), a = pvmm_side();
    s.pvmm.push_back(a / per), s.raw.push_back(b / per), s.added.push_back((a - b) / per);
  }
  return s;
}

}  // namespace

std::size_t evicted_mib() { return evict_buffer.size() >> 20; }

void report(const measured& m) {
  (void)m.pvmm_op(per_round), (void)m.raw_op(per_round);  // warm-up
  (void)m.pvmm_op(1);
  std::string driver_calls;
  for (int i = 0; i < pvmm::cuda::fake::entry_count; ++i)
    if (timed_calls[i] != 0)
      driver_calls += fmt::format("{}{}{}", driver_calls.empty() ? "" : " ", pvmm::cuda::fake::name_of(i),
                                  timed_calls[i] > 1 ? fmt::format("x{}", timed_calls[i]) : "");
  const samples s = interleave(
      rounds, 7, per_round, [&] { return m.pvmm_op(per_round); }, [&] { return m.raw_op(per_round); });
  fmt::print("{}  {}\n", s.row(m.name), driver_calls.empty() ? "(none)" : driver_calls);
}

void report_cold(const measured_cold& m) {
  const int n = 64, cold_rounds = 31;
  auto side = [n](const std::function<void(int)>& setup, const std::function<void(int)>& op,
                  const std::function<void()>& teardown) {
    setup(n);
    double ns = 0;
    for (int i = 0; i < n; ++i) {
      evict();
      const auto t0 = bench::clock_type::now();
      op(i);
      ns += ns_since(t0);
    }
    teardown();
    return ns / n;
  };
  auto pvmm_side = [&] { return side(m.pvmm_setup, m.pvmm_op, m.pvmm_teardown); };
  auto raw_side = [&] { return side(m.raw_setup, m.raw_op, m.raw_teardown); };
  (void)pvmm_side(), (void)raw_side();  // warm-up
  fmt::print("{}\n", interleave(cold_rounds, 11, 1, pvmm_side, raw_side).row(m.name));
}

void report_lock_costs() {
  std::atomic<int> word{0};
  auto timed = [&](auto&& step) {
    std::vector<double> ns;
    for (int r = 0; r < 201; ++r) {
      const auto t0 = bench::clock_type::now();
      for (int i = 0; i < 256; ++i) step();
      ns.push_back(ns_since(t0) / 256);
    }
    return ns;
  };
  const auto lock = timed([&] {
    while (word.exchange(1, std::memory_order_acquire) != 0) {
    }
    word.store(0, std::memory_order_release);
  });
  const auto add = timed([&] { word.fetch_add(1, std::memory_order_acq_rel); });
  bench::check(word.load() == 201 * 256, "atomic adds");
  fmt::print("unit prices here, warm, median of 201 rounds of 256 [IQR]:\n");
  for (const auto& [label, ns] : {std::pair{"a lock round trip (exchange, then a release store)", &lock},
                                  std::pair{"an atomic add (fetch_add, acq_rel)", &add}})
    fmt::print("  {:<60} {:>6.1f} ns  [{:>6.1f} {:>6.1f}]\n", label, bench::quantile(*ns, 0.5),
               bench::quantile(*ns, 0.25), bench::quantile(*ns, 0.75));
}

void report_miss_costs() {
  // 32 lines chased one after another (each load's address is the previous load's value), after the stream: on 32
  // pages untouched since it (cache and TLB miss each), and on one page touched just after it (cache misses only).
  const std::size_t pages = 4096, chain = 32, page = 4096;
  std::vector<unsigned char> arena_bytes(pages * page + page);
  unsigned char* const arena =
      arena_bytes.data() + (page - reinterpret_cast<std::uintptr_t>(arena_bytes.data()) % page);
  std::mt19937 rng(3);
  auto chase = [&](bool one_page) {
    std::vector<unsigned char*> at;
    const std::size_t first = rng() % (pages - 1);
    // 32 distinct pages (a page drawn twice could hold the same line twice: a write would cut the chain short).
    std::vector<std::size_t> distinct;
    while (!one_page && distinct.size() < chain) {
      const std::size_t p = rng() % pages;
      if (std::find(distinct.begin(), distinct.end(), p) == distinct.end()) distinct.push_back(p);
    }
    for (std::size_t i = 0; i < chain; ++i)
      at.push_back(one_page ? arena + first * page + i * 64 * (page / 64 / chain)
                            : arena + distinct[i] * page + (rng() % (page / 64)) * 64);
    std::shuffle(at.begin(), at.end(), rng);
    for (std::size_t i = 0; i < chain; ++i) {
      unsigned char* next = i + 1 < chain ? at[i + 1] : nullptr;
      std::memcpy(at[i], &next, sizeof next);
    }
    evict();
    if (one_page) (void)*static_cast<volatile unsigned char*>(arena + first * page + page - 1);  // its TLB entry
    const auto t0 = bench::clock_type::now();
    std::size_t loads = 0;
    for (unsigned char* p = at[0]; p; ++loads) p = *reinterpret_cast<unsigned char* volatile*>(p);
    const double ns = ns_since(t0);
    bench::check(loads == chain, "chain");
    return ns / chain;
  };
  for (bool one_page : {false, true}) {
    std::vector<double> ns;
    for (int r = 0; r < 201; ++r) ns.push_back(chase(one_page));
    fmt::print("  {:<60} {:>6.1f} ns  [{:>6.1f} {:>6.1f}]\n",
               one_page ? "a dependent load, line evicted, its page's TLB entry warm"
                        : "a dependent load, line evicted, on a page not touched since",
               bench::quantile(ns, 0.5), bench::quantile(ns, 0.25), bench::quantile(ns, 0.75));
  }
}

bool lines_marked() {
#ifdef OWN_COST_VALGRIND
  return RUNNING_ON_VALGRIND != 0;
#else
  return false;
#endif
}

void mark_objects() {
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void*) {
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const auto& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          const std::uintptr_t start = info->dlpi_addr + ph.p_vaddr;
          OWN_COST_MARK("own-cost-object %lx %lx %lx %s\n", static_cast<unsigned long>(start),
                        static_cast<unsigned long>(start + ph.p_memsz), static_cast<unsigned long>(info->dlpi_addr),
                        info->dlpi_name[0] != 0 ? info->dlpi_name : "(main)");
        }
        return 0;
      },
      nullptr);
}

void mark_cold(const measured_cold& m) {
  const int n = 64, marked_calls = 4, unmarked_rounds = 4;  // report_cold's calls per round
  auto side = [&](const char* which, const std::function<void(int)>& setup, const std::function<void(int)>& op,
                  const std::function<void()>& teardown, bool marked) {
    setup(n);
    for (int i = 0; i < n; ++i) {
      const volatile char frame = 0;  // the stack's place: the script counts lines near it as the stack's
      const bool mark = marked && i >= n - marked_calls;
      if (mark)
        OWN_COST_MARK("own-cost-begin %s %s %d %lx\n", m.name.c_str(), which, i,
                      static_cast<unsigned long>(reinterpret_cast<std::uintptr_t>(&frame)));
      op(i);
      if (mark) OWN_COST_MARK("own-cost-end\n");
    }
    teardown();
  };
  // Unmarked rounds first, as the table's earlier rounds: the per-thread state cache is full and every registry
  // shard has its table, so the marked calls allocate nothing, as the timed ones do.
  for (int round = 0; round <= unmarked_rounds; ++round) {
    side("pvmm", m.pvmm_setup, m.pvmm_op, m.pvmm_teardown, round == unmarked_rounds);
    side("raw", m.raw_setup, m.raw_op, m.raw_teardown, round == unmarked_rounds);
  }
}

bool counts_instructions() {
#if defined(OWN_COST_VALGRIND) && __has_include(<valgrind/callgrind.h>)
  return RUNNING_ON_VALGRIND != 0;
#else
  return false;
#endif
}

void count_warm(const measured& m) {
  const int warm_rounds = 3, count_rounds = 5;
  counting = false;  // warm: the state caches and the registry's tables filled, as in the timed rounds
  for (int r = 0; r < warm_rounds; ++r) (void)m.pvmm_op(per_round), (void)m.raw_op(per_round);
  counting = true;
  for (int r = 0; r < count_rounds; ++r) {
    for (const char* side : {"pvmm", "raw"}) {
      (void)(side[0] == 'p' ? m.pvmm_op(per_round) : m.raw_op(per_round));
#if defined(OWN_COST_VALGRIND) && __has_include(<valgrind/callgrind.h>)
      const std::string name = fmt::format("{}|{}|{}", m.name, side, per_round);
      CALLGRIND_DUMP_STATS_AT(name.c_str());
#endif
    }
  }
  counting = false;
}

}  // namespace own_cost
