// The team memory cases (issue 35, items 4-6): windows over the caller's memory (create_from), the symmetric heap,
// and team::split. Each body runs on one rank, under every adapter (suite.cpp, rank_main.cpp).
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <pvmm/allocation.hpp>
#include <pvmm/device.hpp>
#include <pvmm/diagnostics.hpp>
#include <pvmm/growable_buffer.hpp>
#include <pvmm/symmetric_heap.hpp>
#include <pvmm/team.hpp>
#include <pvmm/testing.hpp>

#include "case_support.hpp"
#include "cases.hpp"
#include "open_fds.hpp"

namespace pvmm_team_test {

using namespace std::chrono_literals;
using pvmm::errc;

namespace {

constexpr std::size_t unit = 2u << 20;

pvmm::allocation_properties slot_properties(const pvmm::team& t, pvmm::handle_types exportable) {
  pvmm::allocation_properties p;
  p.location = pvmm::location::device(t.device());
  p.exportable = exportable;
  return p;
}

// create_from: a physical allocation, then a growable buffer's chunks (its data seen through the window: no copy),
// read by every peer; the window grows past the caller's memory.
void from_case(verdict& v, std::shared_ptr<pvmm::bootstrap> b) {
  auto t = pvmm::team::create(b, team_options_for(*b));
  if (!t) return v.check(false, where(*b) + "team::create: " + t.error().message());
  const auto props = slot_properties(*t, pvmm::handle_types::posix_fd);
  {
    auto a = pvmm::physical_allocation::create(unit, props);
    if (!a) return v.check(false, where(*b) + "allocation: " + a.error().message());
    pvmm::window_options o;
    o.timeout = 20s;
    auto w = pvmm::symmetric_window::create_from(*t, *a, o);
    if (!w) return v.check(false, where(*b) + "create_from (allocation): " + w.error().message());
    v.check(w->size_of(b->rank()) == unit, where(*b) + "the slot is not the allocation's size");
    auto let_go = a->release();  // the caller's owner goes; the window's reference keeps the memory
    v.check(let_go.has_value(), where(*b) + "releasing the caller's owner");
    write_and_verify(v, *b, *w, 1);
  }
  pvmm::growable_options g;
  g.properties = props;
  g.access = {{pvmm::location::device(t->device()), pvmm::access::read_write}};
  g.chunk_size = unit;
  g.reserve_size = 4 * unit;
  auto buffer = pvmm::growable_buffer::create(g);
  if (!buffer) return v.check(false, where(*b) + "growable_buffer::create: " + buffer.error().message());
  auto resized = buffer->resize((1 + b->rank() % 2) * unit);  // per-rank sizes: 1 or 2 chunks
  if (!resized) return v.check(false, where(*b) + "resize: " + resized.error().message());
  const auto before = pattern(buffer->size(), b->rank(), 7);
  v.check(pvmm::testing::copy_to_mapping(buffer->data(), before.data(), buffer->size()).has_value(),
          where(*b) + "writing the buffer");
  pvmm::window_options o;
  o.max_size = 4 * unit;
  o.timeout = 20s;
  auto w = pvmm::symmetric_window::create_from(*t, *buffer, o);
  if (!w) return v.check(false, where(*b) + "create_from (growable buffer): " + w.error().message());
  v.check(mapping_holds(w->local(), before),
          where(*b) + "the window's slot does not show what was written into the buffer");
  write_then_read_all(
      v, *b, w->local(), buffer->size(), 2, [&](int r) { return w->peer(r); }, unit);
  v.check(mapping_holds(buffer->data(), pattern(buffer->size(), b->rank(), 2)),
          where(*b) + "the buffer does not show what was written through the window");
  auto grown = w->grow(3 * unit, 20s);
  if (!grown) return v.check(false, where(*b) + "grow past the caller's memory: " + grown.error().message());
  write_then_read_all(v, *b, w->local(), 3 * unit, 3, [&](int r) { return w->peer(r); });
  // A heap over a window of the caller's memory (symmetric_heap::over): the first block fills the allocation, the
  // next grows the window past it.
  auto mem = pvmm::physical_allocation::create(unit, props);
  if (!mem) return v.check(false, where(*b) + "allocation: " + mem.error().message());
  pvmm::window_options ho;
  ho.max_size = 2 * unit;
  ho.timeout = 20s;
  auto hw = pvmm::symmetric_window::create_from(*t, *mem, ho);
  if (!hw) return v.check(false, where(*b) + "create_from for the heap: " + hw.error().message());
  auto heap = pvmm::symmetric_heap::over(std::move(*hw));
  if (!heap) return v.check(false, where(*b) + "symmetric_heap::over: " + heap.error().message());
  v.check(heap->statistics().capacity == unit && heap->statistics().max_size == 2 * unit,
          where(*b) + "the heap over the window spans the caller's allocation, up to max_size");
  auto whole = heap->allocate(unit, 256, 20s);
  v.check(whole && whole->offset() == 0, where(*b) + "a block filling the caller's allocation");
  if (whole) write_then_read_all(v, *b, whole->local(), unit, 4, [&](int r) { return whole->peer(r); });
  auto next = heap->allocate(4096, 256, 20s);
  v.check(next && next->offset() == unit && heap->statistics().grow_count == 1,
          where(*b) + "the next block grows the window past the caller's memory: " +
              (next ? "no growth" : next.error().message()));
}

// The last rank offers memory it cannot share (not exportable as a POSIX fd; its node has peers): every rank fails
// at once with handle_type_not_requested naming it; then a rank calling create beside create_from is team_mismatch.
void from_refused_case(verdict& v, std::shared_ptr<pvmm::bootstrap> b) {
  auto t = pvmm::team::create(b, team_options_for(*b));
  if (!t) return v.check(false, where(*b) + "team::create: " + t.error().message());
  // Rank 0 offers no memory (an empty owner), then another device's memory where there is one: invalid_argument
  // on every rank, naming rank 0; the team goes on (each refusal travelled in the step's envelope).
  {
    auto good = pvmm::physical_allocation::create(unit, slot_properties(*t, pvmm::handle_types::posix_fd));
    if (!good) return v.check(false, where(*b) + "allocation: " + good.error().message());
    pvmm::physical_allocation empty;
    pvmm::window_options o;
    o.timeout = 5s;
    auto w = pvmm::symmetric_window::create_from(*t, b->rank() == 0 ? empty : *good, o);
    v.check(!w && w.code() == errc::invalid_argument && w.error().message().find("rank 0") != std::string::npos,
            where(*b) + "empty memory on rank 0: got " + (w ? "a window" : w.error().message()));
    const int devices = pvmm::device_count().value_or(1);
    if (devices > 1) {
      pvmm::allocation_properties other = slot_properties(*t, pvmm::handle_types::posix_fd);
      other.location = pvmm::location::device((t->device() + 1) % devices);
      auto elsewhere = pvmm::physical_allocation::create(unit, other);
      if (!elsewhere) return v.check(false, where(*b) + "allocation elsewhere: " + elsewhere.error().message());
      auto x = pvmm::symmetric_window::create_from(*t, b->rank() == 0 ? *elsewhere : *good, o);
      v.check(!x && x.code() == errc::invalid_argument && x.error().message().find("rank 0") != std::string::npos,
              where(*b) + "another device's memory on rank 0: got " + (x ? "a window" : x.error().message()));
    }
  }
  const int refuser = b->size() - 1;
  auto a = pvmm::physical_allocation::create(
      unit, slot_properties(*t, b->rank() == refuser ? pvmm::handle_types::none : pvmm::handle_types::posix_fd));
  if (!a) return v.check(false, where(*b) + "allocation: " + a.error().message());
  pvmm::window_options o;
  o.timeout = 5s;
  const auto start = std::chrono::steady_clock::now();
  auto w = pvmm::symmetric_window::create_from(*t, *a, o);
  v.check(!w && w.code() == errc::handle_type_not_requested &&
              w.error().message().find("rank " + std::to_string(refuser)) != std::string::npos,
          where(*b) + "expected handle_type_not_requested naming rank " + std::to_string(refuser) + ", got " +
              (w ? "a window" : w.error().message()));
  v.check(std::chrono::steady_clock::now() - start < 3s, where(*b) + "the refusal took as long as a timeout");
  // The team goes on: rank 0 calls create while the others call create_from.
  pvmm::window_options c;
  c.size = unit;
  c.timeout = 5s;
  auto ok = pvmm::physical_allocation::create(unit, slot_properties(*t, pvmm::handle_types::posix_fd));
  if (!ok) return v.check(false, where(*b) + "allocation: " + ok.error().message());
  auto mixed = b->rank() == 0 ? pvmm::symmetric_window::create(*t, c) : pvmm::symmetric_window::create_from(*t, *ok, c);
  v.check(!mixed && mixed.code() == errc::team_mismatch, where(*b) +
                                                             "create beside create_from: expected team_mismatch, got " +
                                                             (mixed ? "a window" : mixed.error().message()));
}

std::vector<std::uint64_t> gather(verdict& v, pvmm::bootstrap& b, std::uint64_t mine) {
  std::vector<std::uint64_t> all(b.size());
  auto ok = b.allgather(&mine, sizeof mine, all.data(), pvmm::deadline_in(20s));
  v.check(ok.has_value(), where(b) + "allgather: " + (ok ? "" : ok.error().message()));
  return all;
}

// The heap: the same offsets on every rank, data read by every peer, alignment, first-fit reuse after free, growth
// when full, out_of_memory past max_size, team_mismatch for ranks that disagree, and statistics.
void heap_case(verdict& v, std::shared_ptr<pvmm::bootstrap> b) {
  auto t = pvmm::team::create(b, team_options_for(*b));
  if (!t) return v.check(false, where(*b) + "team::create: " + t.error().message());
  pvmm::heap_options ho;
  ho.size = unit;
  ho.max_size = 4 * unit;
  ho.timeout = 20s;
  auto h = pvmm::symmetric_heap::create(*t, ho);
  if (!h) return v.check(false, where(*b) + "symmetric_heap::create: " + h.error().message());
  auto a = h->allocate(1000, 256, 20s);
  auto c = h->allocate(3000, 64u << 10, 20s);
  if (!a || !c) return v.check(false, where(*b) + "allocate: " + (a ? c.error() : a.error()).message());
  for (auto offset : gather(v, *b, a->offset() * 1000003 + c->offset()))
    v.check(offset == a->offset() * 1000003 + c->offset(), where(*b) + "the ranks' offsets differ");
  v.check(c->offset() % (64u << 10) == 0, where(*b) + "the 64 KiB alignment was not kept");
  auto s = h->statistics();
  v.check(s.allocation_count == 2 && s.bytes_in_use == 1024 + 3072 && s.capacity == unit && s.bytes_free == unit - 4096,
          where(*b) + "statistics after two blocks");
  write_then_read_all(v, *b, c->local(), 2048, 1, [&](int r) { return c->peer(r); });
  auto freed = h->free(a->offset(), 20s);
  v.check(freed.has_value(), where(*b) + "free: " + (freed ? "" : freed.error().message()));
  auto again = h->allocate(512, 256, 20s);
  v.check(again && again->offset() == a->offset(), where(*b) + "the freed block was not reused first-fit");
  // Full: 3 units do not fit in the first, so the window grows (doubling, at least to fit: just past 3 units).
  auto big = h->allocate(3 * unit, 256, 20s);
  if (!big) return v.check(false, where(*b) + "allocate past the capacity: " + big.error().message());
  s = h->statistics();
  v.check(s.grow_count == 1 && s.capacity >= 3 * unit && s.capacity <= 4 * unit &&
              h->window().size_of(b->rank()) == s.capacity,
          where(*b) + "the heap did not grow to fit 3 units: grew " + std::to_string(s.grow_count) + " times to " +
              std::to_string(s.capacity) + ", the slot holds " + std::to_string(h->window().size_of(b->rank())));
  write_then_read_all(v, *b, big->local(), 3 * unit, 2, [&](int r) { return big->peer(r); });
  auto past = h->allocate(2 * unit, 256, 20s);
  v.check(!past && past.code() == errc::out_of_memory,
          where(*b) + "past max_size: expected out_of_memory, got " + (past ? "a block" : past.error().message()));
  if (b->size() > 1) {
    auto odd = h->allocate(b->rank() == 1 ? 2048 : 1024, 256, 20s);
    v.check(!odd && odd.code() == errc::team_mismatch && odd.error().message().find("rank 1") != std::string::npos,
            where(*b) + "disagreeing sizes: expected team_mismatch naming rank 1, got " +
                (odd ? "a block" : odd.error().message()));
    auto wrong = h->free(b->rank() == 1 ? big->offset() : again->offset(), 20s);
    v.check(!wrong && wrong.code() == errc::team_mismatch, where(*b) + "disagreeing frees: expected team_mismatch");
  }
  auto nowhere = h->free(12345, 20s);
  v.check(!nowhere && nowhere.code() == errc::invalid_argument, where(*b) + "freeing no block: invalid_argument");
  auto bad = h->allocate(64, b->rank() == 0 ? 3 : 256, 20s);  // rank 0's alignment is bad: every rank hears it
  v.check(!bad && bad.code() == errc::invalid_alignment && bad.error().message().find("rank 0") != std::string::npos,
          where(*b) + "a bad alignment on rank 0: got " + (bad ? "a block" : bad.error().message()));
  for (auto off : {again->offset(), c->offset(), big->offset()}) {
    auto f = h->free(off, 20s);
    v.check(f.has_value(), where(*b) + "free: " + (f ? "" : f.error().message()));
  }
  s = h->statistics();
  v.check(
      s.allocation_count == 0 && s.bytes_in_use == 0 && s.peak_bytes_in_use >= 3 * unit && s.bytes_free == s.capacity,
      where(*b) + "statistics after freeing everything");
  auto whole = h->allocate(4 * unit, 256, 20s);  // every hole coalesced back into one
  v.check(whole && whole->offset() == 0, where(*b) + "the holes were not coalesced");
}

// "mem-reserve-refused": the last rank's address reservation fails (an injected backend failure: process-wide, so
// process ranks only; endpoints, whose count of calls before it is known) in create, then in create_from: that rank
// still takes part, so every rank fails at once, the others naming it; then the team goes on (a window made next works
// on every rank).
void reserve_refused_case(verdict& v, std::shared_ptr<pvmm::bootstrap> b) {
  auto t = pvmm::team::create(b, team_options_for(*b));
  if (!t) return v.check(false, where(*b) + "team::create: " + t.error().message());
  auto a = pvmm::physical_allocation::create(unit, slot_properties(*t, pvmm::handle_types::posix_fd));
  if (!a) return v.check(false, where(*b) + "allocation: " + a.error().message());
  const int last = b->size() - 1;
  pvmm::window_options o;
  o.size = unit;
  o.timeout = 20s;
  for (const bool from : {false, true}) {
    const std::string what = where(*b) + (from ? "create_from: " : "create: ");
    // Counted calls on the endpoints adapter: 1 the first allgather, 2 the reservation (the case checks it hit it).
    if (b->rank() == last) pvmm::testing::fail_nth_backend_call(2);
    const auto start = std::chrono::steady_clock::now();
    auto w = from ? pvmm::symmetric_window::create_from(*t, *a, o) : pvmm::symmetric_window::create(*t, o);
    pvmm::testing::fail_nth_backend_call(0);
    v.check(std::chrono::steady_clock::now() - start < 10s, what + "took longer than the deadline allows");
    if (w) {
      v.check(false, what + "a window though rank " + std::to_string(last) + "'s reservation failed");
      continue;
    }
    const std::string message = w.error().message();
    if (b->rank() == last)
      v.check(message.find("address_reservation") != std::string::npos &&
                  message.find("fault injected") != std::string::npos,
              what + "expected this rank's failed reservation, got " + message);
    else
      v.check(message.find("rank " + std::to_string(last)) != std::string::npos,
              what + "the error does not name rank " + std::to_string(last) + ": " + message);
  }
  auto after = pvmm::symmetric_window::create(*t, o);
  v.check(after.has_value(),
          where(*b) + "a window after the refused ones: " + (after ? std::string("made") : after.error().message()));
}

// One run of memory case `p.name` on this rank; false when it is none of them.
bool run_mem_body(verdict& v, const case_params& p, const std::shared_ptr<pvmm::bootstrap>& ranks) {
  return run_named(p.name, {{"mem-from", [&] { from_case(v, ranks); }},
                            {"mem-from-refused", [&] { from_refused_case(v, ranks); }},
                            {"mem-heap", [&] { heap_case(v, ranks); }},
                            {"mem-reserve-refused", [&] { reserve_refused_case(v, ranks); }}}) ||
         run_split_body(v, p, ranks);
}

}  // namespace

bool run_mem_case(verdict& v, const case_params& p, std::shared_ptr<pvmm::bootstrap> ranks) {
  // Where a rank is a process, what the case leaves behind is its own: fds, threads and live objects as before
  // (ranks that are threads share them; the suite checks the process once they are done).
  const std::string who = where(*ranks);
  // Where ranks are processes, the cases that can run twice run once first: the driver's one-time set-up (its
  // threads and fds, measured on the H100 and H200: 20 fds and threads on a first window over caller memory) is no
  // leak. Both runs must pass.
  const bool twice = p.one_rank_per_process && (p.name == "mem-from" || p.name == "mem-heap" || p.name == "mem-split");
  if (twice) run_mem_body(v, p, ranks);
  use_every_device_once();
  const auto fds = pvmm_test::open_fd_count();
  const auto threads = pvmm_test::live_thread_count();
  const auto live = pvmm::query_live_objects();
  struct leak_check {
    verdict& v;
    bool on, split;
    std::string who;
    std::size_t fds, threads;
    pvmm::live_objects live;
    ~leak_check() {
      if (!on) return;
      const auto now = pvmm::query_live_objects();
      v.check(
          now.allocations == live.allocations && now.reservations == live.reservations && now.mappings == live.mappings,
          who + "allocations, reservations or mappings left after the case");
      // A split's messages open the parent bootstrap's point-to-point connections (endpoints), which it keeps for
      // its life: the caller's bootstrap's fds, not the case's.
      v.check(split || pvmm_test::open_fd_count() <= fds, who + "fds: " + std::to_string(fds) + " before, " +
                                                              std::to_string(pvmm_test::open_fd_count()) + " after");
      v.check(pvmm_test::live_thread_count_settled(threads) <= threads, who + "threads left after the case");
    }
  } leaks{v, p.one_rank_per_process, p.name.rfind("mem-split", 0) == 0, who, fds, threads, live};
  return run_mem_body(v, p, std::move(ranks));
}

}  // namespace pvmm_team_test
