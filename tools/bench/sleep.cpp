// pvmm-bench sleep: pvmm::sleeping_allocator's sleep and wake against the bus (the same bytes through one pinned
// buffer, D2H then H2D, on one stream), for each offload policy: time, GiB/s, the first cycle and the steady state
// (median of the others), device memory given back (the driver's free memory asleep against awake), every byte of
// every block checked after each wake.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>

#include "bench.hpp"

namespace bench {

double sleep_gib = 8;
std::size_t sleep_block_mib = 128;
int sleep_cycles = 5;
std::string sleep_policies = "pinned,pinned-kept,pinned-prepared,pageable";

namespace {

constexpr double gib = 1024.0 * 1024.0 * 1024.0;

std::uint64_t word_of(std::size_t block, std::size_t i, unsigned round) {
  return (std::uint64_t{block} << 40) ^ (i * 0x9E3779B97F4A7C15ULL) ^ (std::uint64_t{round} << 56);
}
void make_block(std::uint64_t* out, std::size_t words, std::size_t block, unsigned round) {
  for (std::size_t i = 0; i < words; ++i) out[i] = word_of(block, i, round);
}
bool check_block(const std::uint64_t* in, std::size_t words, std::size_t block, unsigned round) {
  for (std::size_t i = 0; i < words; ++i)
    if (in[i] != word_of(block, i, round)) return false;
  return true;
}

std::size_t device_free() {
  auto m = pvmm::query_memory(0);
  return m && !m->shared_with_system ? m->free : 0;
}

pvmm::sleep_policy policy_named(const std::string& name) {
  if (name == "pageable") return pvmm::sleep_policy::offload_pageable;
  if (name == "file") return pvmm::sleep_policy::offload_file;
  if (name == "discard") return pvmm::sleep_policy::discard;
  return pvmm::sleep_policy::offload_pinned;
}

struct timing {
  double first = 0, steady = 0;
};
timing summarize(std::vector<double> t) {
  timing out;
  if (t.empty()) return out;
  out.first = t.front();
  t.erase(t.begin());
  out.steady = t.empty() ? out.first : median(t);
  return out;
}
std::string rate(double bytes, double s) { return s > 0 ? fmt::format("{:6.1f} GiB/s", bytes / gib / s) : "-"; }

}  // namespace

void sleep_bench() {
  const std::size_t block = sleep_block_mib << 20;
  const auto blocks = static_cast<std::size_t>(sleep_gib * gib / static_cast<double>(block));
  const std::size_t total = blocks * block;
  const std::size_t words = block / sizeof(std::uint64_t);
  fmt::print("\nsleep: {:.2f} GiB in {} x {} MiB, {} cycles (first, then the median of the rest)\n",
             static_cast<double>(total) / gib, blocks, sleep_block_mib, sleep_cycles);
  sleep_floor(total);
  auto s = pvmm::stream::create(0);
  check(s.has_value(), "stream::create");
  // The bus: one pinned buffer holding every block's bytes, D2H then H2D on one stream.
  auto host = pvmm::pinned_allocation::create(total);
  check(host.has_value(), "pinned_allocation::create (the bus's buffer)");
  auto* bytes = static_cast<unsigned char*>(host->data());

  for (std::size_t at = 0, next; at <= sleep_policies.size(); at = next + 1) {
    next = sleep_policies.find(',', at);
    if (next == std::string::npos) next = sleep_policies.size();
    const std::string name = sleep_policies.substr(at, next - at);
    if (name.empty()) continue;
    const std::size_t free_before = device_free();
    pvmm::sleeping_options so;
    // pinned-kept reuses the page-locked memory of the last wake; pinned-prepared also page-locks it before the
    // first sleep (prepare_host_memory, timed apart), as an engine would at start-up.
    const bool prepared = name == "pinned-prepared";
    so.keep_host_memory = prepared || name == "pinned-kept";
    auto made = pvmm::sleeping_allocator::create(so);
    check(made.has_value(), "sleeping_allocator::create");
    auto& a = *made;
    pvmm::tag_policy p;
    p.policy = policy_named(name);
    check(a.set_policy("bench", p).has_value(), "set_policy");
    std::vector<void*> ptrs;
    for (std::size_t b = 0; b < blocks; ++b) {
      auto q = a.allocate(block, "bench");
      check(q.has_value(), "sleeping_allocator::allocate");
      ptrs.push_back(*q);
    }
    const std::size_t free_awake = device_free();
    double prepare_s = 0;
    if (prepared) {
      const auto t = clock_type::now();
      check(a.prepare_host_memory({"bench"}).has_value(), "sleeping_allocator::prepare_host_memory");
      prepare_s = seconds_since(t);
    }
    std::vector<double> bus_d2h, bus_h2d, sleeps, wakes;
    std::size_t free_asleep = 0;
    bool all_checked = true;
    for (int cycle = 0; cycle < sleep_cycles; ++cycle) {
      const auto round = static_cast<unsigned>(cycle + 1);
      for (std::size_t b = 0; b < blocks; ++b)
        make_block(reinterpret_cast<std::uint64_t*>(bytes + b * block), words, b, round);
      auto t = clock_type::now();  // the bus, H2D: also what puts this cycle's bytes in place
      for (std::size_t b = 0; b < blocks; ++b)
        check(s->copy_async(ptrs[b], bytes + b * block, block).has_value(), "H2D");
      check(s->synchronize().has_value(), "synchronize");
      bus_h2d.push_back(seconds_since(t));
      t = clock_type::now();  // the bus, D2H
      for (std::size_t b = 0; b < blocks; ++b)
        check(s->copy_async(bytes + b * block, ptrs[b], block).has_value(), "D2H");
      check(s->synchronize().has_value(), "synchronize");
      bus_d2h.push_back(seconds_since(t));
      std::memset(bytes, 0, total);
      t = clock_type::now();
      check(a.sleep({"bench"}).has_value(), "sleeping_allocator::sleep");
      sleeps.push_back(seconds_since(t));
      if (cycle == 0) free_asleep = device_free();
      t = clock_type::now();
      check(a.wake({"bench"}).has_value(), "sleeping_allocator::wake");
      wakes.push_back(seconds_since(t));
      if (p.policy == pvmm::sleep_policy::discard) continue;
      for (std::size_t b = 0; b < blocks; ++b)
        check(s->copy_async(bytes + b * block, ptrs[b], block).has_value(), "D2H");
      check(s->synchronize().has_value(), "synchronize");
      for (std::size_t b = 0; b < blocks; ++b)
        all_checked =
            all_checked && check_block(reinterpret_cast<const std::uint64_t*>(bytes + b * block), words, b, round);
    }
    const auto bd = summarize(bus_d2h), bh = summarize(bus_h2d), sl = summarize(sleeps), wk = summarize(wakes);
    const double bytes_moved = static_cast<double>(total);
    fmt::print("  policy {}\n", name);
    if (prepared)
      fmt::print("    prepare_host_memory before the first sleep (not in it): {:.3f} s {}\n", prepare_s,
                 rate(bytes_moved, prepare_s));
    fmt::print("    {:<24} {:>9} {:>14}   {:>9} {:>14}   {:>8}\n", "", "first s", "", "steady s", "", "of bus");
    fmt::print("    {:<24} {:9.3f} {:>14}   {:9.3f} {:>14}\n", "bus D2H (one pinned buf)", bd.first,
               rate(bytes_moved, bd.first), bd.steady, rate(bytes_moved, bd.steady));
    fmt::print("    {:<24} {:9.3f} {:>14}   {:9.3f} {:>14}   {:7.0f}%\n", "pvmm sleep", sl.first,
               rate(bytes_moved, sl.first), sl.steady, rate(bytes_moved, sl.steady),
               sl.steady > 0 ? 100.0 * bd.steady / sl.steady : 0.0);
    fmt::print("    {:<24} {:9.3f} {:>14}   {:9.3f} {:>14}\n", "bus H2D (one pinned buf)", bh.first,
               rate(bytes_moved, bh.first), bh.steady, rate(bytes_moved, bh.steady));
    fmt::print("    {:<24} {:9.3f} {:>14}   {:9.3f} {:>14}   {:7.0f}%\n", "pvmm wake", wk.first,
               rate(bytes_moved, wk.first), wk.steady, rate(bytes_moved, wk.steady),
               wk.steady > 0 ? 100.0 * bh.steady / wk.steady : 0.0);
    if (free_awake && free_asleep)
      fmt::print(
          "    device memory given back asleep: {:.3f} GiB of {:.3f} GiB allocated ({:.3f} GiB short of the "
          "free memory before)\n",
          static_cast<double>(free_asleep - free_awake) / gib, bytes_moved / gib,
          (static_cast<double>(free_before) - static_cast<double>(free_asleep)) / gib);
    else
      fmt::print("    device memory given back: n/a (the device's memory is the system's)\n");
    fmt::print("    every byte checked after each wake: {}\n", p.policy == pvmm::sleep_policy::discard ? "n/a (discard)"
                                                               : all_checked ? "yes, all equal"
                                                                             : "MISMATCH");
    check(all_checked, "the bytes after wake");
    for (void* q : ptrs) check(a.deallocate(q).has_value(), "deallocate");
  }
}

}  // namespace bench
