// The sleeping allocator (pvmm/sleeping_allocator.hpp) on every backend: each policy's round trip, partial wake,
// nested tag scopes, tag_of and reading the host copy, retained copies, exact errors. Every case runs under the
// leak check (objects, fds, device memory).
#include <cstring>
#include <string>
#include <vector>

#include "sleep_support.hpp"

using namespace pvmm;
using namespace pvmm_test;
using namespace sleep_test;

namespace {
void policy_round_trip(sleep_policy policy) {
  auto a = with_tag_policy("t", policy);
  const std::size_t g = a.granularity();
  std::vector<std::pair<void*, std::size_t>> got;
  for (std::size_t n : {g, 3 * g + 1, std::size_t{1}}) {
    void* at = a.allocate(n, "t").value();
    got.emplace_back(at, a.size_of(at));
    sleep_fill(at, a.size_of(at), static_cast<unsigned>(got.size()));
  }
  const auto before = query_live_objects();
  PVMM_CHECK_OK(a.sleep());
  CHECK(a.stats().asleep == 3);
  CHECK(a.stats().resident_bytes == 0);
  CHECK(query_live_objects().allocations == before.allocations - 3);  // the physical memory went
  CHECK(query_live_objects().mappings == before.mappings - 3);
  CHECK(a.stats().offloaded_bytes == (policy == sleep_policy::discard ? 0 : a.stats().reserved_bytes));
  PVMM_CHECK_OK(a.wake());
  CHECK(a.stats().asleep == 0);
  CHECK(a.stats().offloaded_bytes == 0);  // the host copies went back after the wake
  for (std::size_t i = 0; i < got.size(); ++i) {
    CHECK(a.size_of(got[i].first) == got[i].second);  // same address
    if (policy != sleep_policy::discard) CHECK(sleep_holds(got[i].first, got[i].second, static_cast<unsigned>(i + 1)));
  }
  for (auto& [at, n] : got) PVMM_CHECK_OK(a.deallocate(at));
}
}  // namespace

PVMM_CASE("sleeping allocator: every policy gives the memory back and restores it at the same addresses") {
  PVMM_REQUIRE_SLEEPING();
  SUBCASE("offload to pinned host memory") { policy_round_trip(sleep_policy::offload_pinned); }
  SUBCASE("offload to pageable host memory (through the staging ring)") {
    policy_round_trip(sleep_policy::offload_pageable);
  }
  SUBCASE("offload to a file (through the staging ring)") { policy_round_trip(sleep_policy::offload_file); }
  SUBCASE("discard") { policy_round_trip(sleep_policy::discard); }
}

PVMM_CASE("sleeping allocator: wake by tag leaves the other tags asleep, sleep by tag the others awake") {
  PVMM_REQUIRE_SLEEPING();
  auto a = with_tag_policy("kv", sleep_policy::offload_pageable);
  void* w = a.allocate(a.granularity(), "weights").value();
  void* k = a.allocate(2 * a.granularity(), "kv").value();
  void* o = a.allocate(a.granularity(), "other").value();
  sleep_fill(w, a.size_of(w), 1), sleep_fill(k, a.size_of(k), 2), sleep_fill(o, a.size_of(o), 3);
  PVMM_CHECK_OK(a.sleep({"weights", "kv"}));
  CHECK(a.asleep(w).value());
  CHECK(a.asleep(k).value());
  CHECK_FALSE(a.asleep(o).value());
  PVMM_CHECK_OK(a.wake({"kv"}));
  CHECK(a.asleep(w).value());
  CHECK_FALSE(a.asleep(k).value());
  CHECK(sleep_holds(k, a.size_of(k), 2));
  CHECK(a.stats("weights").asleep == 1);
  CHECK(a.stats("kv").resident_bytes == a.size_of(k));
  PVMM_CHECK_OK(a.wake({"weights"}));
  CHECK(sleep_holds(w, a.size_of(w), 1));
  CHECK(sleep_holds(o, a.size_of(o), 3));
  PVMM_CHECK_OK(a.deallocate(w));
  PVMM_CHECK_OK(a.deallocate(k));
  PVMM_CHECK_OK(a.deallocate(o));
}

PVMM_CASE("sleeping allocator: nested tag scopes restore the outer tag, and tag_of answers inside an allocation") {
  PVMM_REQUIRE_SLEEPING();
  auto a = sleeping_allocator::create().value();
  CHECK(a.current_tag() == "default");
  void *outer1 = nullptr, *inner = nullptr, *outer2 = nullptr;
  {
    sleeping_allocator::tag_scope weights(a, "weights");
    outer1 = a.allocate(1).value();
    {
      sleeping_allocator::tag_scope kv(a, "kv_cache");
      inner = a.allocate(1).value();
    }
    outer2 = a.allocate(1).value();  // the outer tag again, not "default"
  }
  void* after = a.allocate(1).value();
  CHECK(a.tag_of(outer1).value() == "weights");
  CHECK(a.tag_of(inner).value() == "kv_cache");
  CHECK(a.tag_of(outer2).value() == "weights");
  CHECK(a.tag_of(after).value() == "default");
  CHECK(a.tag_of(static_cast<char*>(inner) + a.granularity() - 1).value() == "kv_cache");  // its last byte
  int local = 0;
  PVMM_CHECK_ERRC(a.tag_of(&local), errc::invalid_argument);
  for (void* p : {outer1, inner, outer2, after}) PVMM_CHECK_OK(a.deallocate(p));
}

PVMM_CASE("sleeping allocator: the host copy of a sleeping tag reads back, for every offload policy") {
  PVMM_REQUIRE_SLEEPING();
  for (auto policy : {sleep_policy::offload_pinned, sleep_policy::offload_pageable, sleep_policy::offload_file}) {
    CAPTURE(static_cast<int>(policy));
    auto a = with_tag_policy("w", policy);
    void* x = a.allocate(2 * a.granularity(), "w").value();
    void* y = a.allocate(a.granularity(), "w").value();
    sleep_fill(x, a.size_of(x), 5), sleep_fill(y, a.size_of(y), 6);
    std::vector<unsigned char> out(100);
    PVMM_CHECK_ERRC(a.read_host_copy(x, 0, out.data(), out.size()), errc::invalid_argument);  // awake: none
    PVMM_CHECK_OK(a.sleep({"w"}));
    const auto want_x = sleep_bytes(a.size_of(x), 5);
    const std::size_t off = a.granularity() + 17;  // past the first staging slot, at an odd offset
    PVMM_CHECK_OK(a.read_host_copy(x, off, out.data(), out.size()));
    CHECK(std::memcmp(out.data(), want_x.data() + off, out.size()) == 0);
    PVMM_CHECK_OK(a.read_host_copy(static_cast<char*>(y) + 3, 0, out.data(), out.size()));  // inside y
    CHECK(std::memcmp(out.data(), sleep_bytes(a.size_of(y), 6).data() + 3, out.size()) == 0);
    PVMM_CHECK_ERRC(a.read_host_copy(y, a.size_of(y) - 10, out.data(), 11), errc::out_of_range);
    PVMM_CHECK_ERRC(a.read_host_copy(y, 0, nullptr, 1), errc::invalid_argument);
    PVMM_CHECK_OK(a.wake());
    PVMM_CHECK_OK(a.deallocate(x));
    PVMM_CHECK_OK(a.deallocate(y));
  }
}

PVMM_CASE("sleeping allocator: a retained host copy survives wake, and the next sleep copies nothing") {
  PVMM_REQUIRE_SLEEPING();
  auto a = with_tag_policy("w", sleep_policy::offload_pinned, small_ring(), true);
  void* x = a.allocate(a.granularity(), "w").value();
  sleep_fill(x, a.size_of(x), 9);
  PVMM_CHECK_OK(a.sleep());
  PVMM_CHECK_OK(a.wake());
  CHECK(a.stats().offloaded_bytes == a.size_of(x));  // kept
  std::vector<unsigned char> out(64);
  PVMM_CHECK_OK(a.read_host_copy(x, 0, out.data(), out.size()));  // readable while awake too
  sleep_fill(x, a.size_of(x), 10);  // breaks the caller's promise: the next sleep keeps the old copy (documented)
  PVMM_CHECK_OK(a.sleep());
  PVMM_CHECK_OK(a.wake());
  CHECK(sleep_holds(x, a.size_of(x), 9));
  PVMM_CHECK_OK(a.drop_host_copies());
  CHECK(a.stats().offloaded_bytes == 0);
  sleep_fill(x, a.size_of(x), 11);
  PVMM_CHECK_OK(a.sleep());
  PVMM_CHECK_OK(a.wake());
  check_and_free(a, {{x, 11}});
}

PVMM_CASE("sleeping allocator: exact errors (sizes whose round-up overflows, foreign pointers, empty owner)") {
  PVMM_REQUIRE_SLEEPING();
  auto a = sleeping_allocator::create().value();
  PVMM_CHECK_ERRC(a.allocate(0, "t"), errc::invalid_size);
  PVMM_CHECK_ERRC(a.allocate(static_cast<std::size_t>(-1), "t"), errc::out_of_memory);  // not "size is zero"
  PVMM_CHECK_ERRC(a.allocate(static_cast<std::size_t>(-1) - a.granularity() + 2, "t"), errc::out_of_memory);
  int local = 0;
  PVMM_CHECK_ERRC(a.deallocate(&local), errc::invalid_argument);
  PVMM_CHECK_ERRC(a.generation_of(&local), errc::invalid_argument);
  PVMM_CHECK_ERRC(a.remove_backing_callback(12345), errc::invalid_argument);
  PVMM_CHECK_ERRC(a.add_backing_callback(nullptr, nullptr), errc::invalid_argument);
  sleeping_options bad;
  bad.copy_streams = 0;
  PVMM_CHECK_ERRC(sleeping_allocator::create(bad), errc::invalid_argument);
  bad = {};
  bad.staging_slot_bytes = 100;
  PVMM_CHECK_ERRC(sleeping_allocator::create(bad), errc::invalid_argument);
  PVMM_CHECK_OK(a.release());
  PVMM_CHECK_ERRC(a.release(), errc::already_released);
  PVMM_CHECK_ERRC(a.allocate(1, "t"), errc::already_released);
  PVMM_CHECK_ERRC(a.sleep(), errc::already_released);
  PVMM_CHECK_ERRC(a.wake(), errc::already_released);
  PVMM_CHECK_ERRC(a.tag_of(&local), errc::already_released);
  sleeping_allocator empty;  // default-constructible: empty
  CHECK_FALSE(empty.valid());
}

PVMM_CASE("sleeping allocator: freeing the exact range and reserving it again keeps every address") {
  PVMM_REQUIRE_SLEEPING();
  auto o = small_ring();
  o.release_address_range = true;  // what the hip backend does by default (ROCm returns VRAM only so)
  auto a = sleeping_allocator::create(o).value();
  void* x = a.allocate(2 * a.granularity(), "w").value();
  sleep_fill(x, a.size_of(x), 4);
  const auto reservations = query_live_objects().reservations;
  PVMM_CHECK_OK(a.sleep());
  CHECK(query_live_objects().reservations == reservations - 1);  // the range itself went
  PVMM_CHECK_OK(a.wake());
  CHECK(query_live_objects().reservations == reservations);
  CHECK(a.size_of(x) == 2 * a.granularity());
  check_and_free(a, {{x, 4}});
}

PVMM_CASE("sleeping allocator: keep_host_memory reuses the page-locked memory of the last wake, trim frees it") {
  PVMM_REQUIRE_SLEEPING();
  auto o = small_ring();
  o.keep_host_memory = true;
  auto a = sleeping_allocator::create(o).value();
  void* x = a.allocate(2 * a.granularity(), "w").value();
  void* y = a.allocate(a.granularity(), "w").value();
  sleep_fill(x, a.size_of(x), 1), sleep_fill(y, a.size_of(y), 2);
  PVMM_CHECK_OK(a.sleep());
  PVMM_CHECK_OK(a.wake());
  CHECK(a.stats().kept_host_bytes == 3 * a.granularity());  // one store for the tag, kept
  const auto pinned = query_live_objects().registrations;
  for (unsigned round = 3; round < 6; ++round) {
    sleep_fill(x, a.size_of(x), round);
    PVMM_CHECK_OK(a.sleep());
    CHECK(query_live_objects().registrations == pinned);  // reused, not pinned again
    CHECK(a.stats().kept_host_bytes == 0);
    PVMM_CHECK_OK(a.wake());
    CHECK(sleep_holds(x, a.size_of(x), round));
    CHECK(sleep_holds(y, a.size_of(y), 2));
  }
  PVMM_CHECK_OK(a.trim_host_memory());
  CHECK(a.stats().kept_host_bytes == 0);
  CHECK(query_live_objects().registrations == pinned - 1);
  PVMM_CHECK_OK(a.deallocate(x));
  PVMM_CHECK_OK(a.deallocate(y));
}

// The pinned policy copies into fresh memory it registers (faulted in on several threads, on 2 MiB pages where the
// kernel gives them: a first sleep page-locks 4x faster than through a page-locked allocation on an H200 host),
// not into a page-locked allocation. A store of 2 MiB or more starts on a 2 MiB boundary and covers whole 2 MiB
// pages; a smaller one whole 4 KiB pages.
PVMM_CASE("sleeping allocator: a pinned host copy is fresh registered memory, 2 MiB-aligned from 2 MiB up") {
  PVMM_REQUIRE_SLEEPING();
  PVMM_REQUIRE_CAPABILITY(caps().host_memory.registration, "host memory registration (the pinned policy's stores)");
  constexpr std::size_t huge = std::size_t{2} << 20;
  auto a = with_tag_policy("big", sleep_policy::offload_pinned);
  pvmm::tag_policy p;
  p.policy = sleep_policy::offload_pinned;
  PVMM_CHECK_OK(a.set_policy("small", p));
  void* big = a.allocate(huge + 1, "big").value();  // its copy: more than 2 MiB
  void* small = a.allocate(1, "small").value();
  sleep_fill(big, a.size_of(big), 4), sleep_fill(small, a.size_of(small), 5);
  PVMM_CHECK_OK(a.sleep());  // warm: the staging ring and streams exist from here on
  PVMM_CHECK_OK(a.wake());
  const auto before = query_live_objects();
  PVMM_CHECK_OK(a.sleep());
  CHECK(query_live_objects().registrations == before.registrations + 2);  // one store per tag
  CHECK(query_live_objects().pinned == before.pinned);                    // no page-locked allocation
  auto snap = take_memory_snapshot().value();
  std::size_t seen = 0;
  for (const auto& seg : snap.segments) {
    const bool is_big = seg.label.find("host copy of tag 'big'") != std::string::npos;
    if (!is_big && seg.label.find("host copy of tag 'small'") == std::string::npos) continue;
    ++seen;
    CAPTURE(seg.label);
    const std::size_t unit = seg.total_size >= huge ? huge : 4096;
    CHECK(seg.address % unit == 0);
    CHECK(seg.total_size % unit == 0);
    CHECK(seg.total_size >= a.size_of(is_big ? big : small));
    CHECK(seg.total_size < a.size_of(is_big ? big : small) + unit);
  }
  CHECK(seen == 2);
  PVMM_CHECK_OK(a.wake());
  CHECK(query_live_objects() == before);  // both stores unregistered and unmapped after the wake
  CHECK(sleep_holds(big, a.size_of(big), 4));
  CHECK(sleep_holds(small, a.size_of(small), 5));
  PVMM_CHECK_OK(a.deallocate(big));
  PVMM_CHECK_OK(a.deallocate(small));
}

// prepare_host_memory makes ahead of a sleep the pinned stores that sleep takes (so it page-locks nothing), one per
// pinned tag, sized by the awake allocations; a pageable tag gets none; what a kept store covers is not made again.
PVMM_CASE("sleeping allocator: prepare_host_memory page-locks ahead what the next sleep takes, and only that") {
  PVMM_REQUIRE_SLEEPING();
  PVMM_REQUIRE_CAPABILITY(caps().host_memory.registration, "host memory registration (the pinned policy's stores)");
  auto a = with_tag_policy("paged", sleep_policy::offload_pageable);
  const std::size_t g = a.granularity();
  void* w = a.allocate(3 * g, "weights").value();
  void* k = a.allocate(g, "kv").value();
  void* p = a.allocate(g, "paged").value();
  sleep_fill(w, a.size_of(w), 1), sleep_fill(k, a.size_of(k), 2), sleep_fill(p, a.size_of(p), 3);
  PVMM_CHECK_OK(a.sleep());  // warm: the ring and streams exist from here on
  PVMM_CHECK_OK(a.wake());
  const auto before = query_live_objects();
  PVMM_CHECK_OK(a.prepare_host_memory({"weights"}));
  CHECK(a.stats().kept_host_bytes >= 3 * g);
  CHECK(query_live_objects().registrations == before.registrations + 1);
  PVMM_CHECK_OK(a.prepare_host_memory({"weights"}));  // covered by the kept store: nothing more
  CHECK(query_live_objects().registrations == before.registrations + 1);
  PVMM_CHECK_OK(a.prepare_host_memory());  // kv now; paged is not pinned
  CHECK(query_live_objects().registrations == before.registrations + 2);
  const std::size_t prepared = a.stats().kept_host_bytes;
  CHECK(prepared >= 4 * g);
  PVMM_CHECK_OK(a.sleep());
  CHECK(query_live_objects().registrations == before.registrations + 2);  // taken, none made
  CHECK(a.stats().kept_host_bytes == 0);
  PVMM_CHECK_OK(a.wake());  // without keep_host_memory the stores go back at wake
  CHECK(query_live_objects() == before);
  CHECK(sleep_holds(w, a.size_of(w), 1));
  CHECK(sleep_holds(k, a.size_of(k), 2));
  CHECK(sleep_holds(p, a.size_of(p), 3));
  PVMM_CHECK_OK(a.prepare_host_memory());
  PVMM_CHECK_OK(a.trim_host_memory());  // frees what was prepared
  CHECK(a.stats().kept_host_bytes == 0);
  CHECK(query_live_objects() == before);
  sleeping_allocator moved = std::move(a);
  CHECK(a.prepare_host_memory().code() == errc::already_released);
  for (void* at : {w, k, p}) PVMM_CHECK_OK(moved.deallocate(at));
}

// What prepare_host_memory made stays for its tag: a failed prepare makes nothing, another tag's sleep does not take
// it, and a sleep that fails after taking it puts it back.
PVMM_CASE("sleeping allocator: prepared host memory stays for its tag, through failed prepares and sleeps") {
  PVMM_REQUIRE_SLEEPING();
  PVMM_REQUIRE_CAPABILITY(caps().host_memory.registration, "host memory registration (the pinned policy's stores)");
  auto a = pvmm::sleeping_allocator::create(small_ring()).value();
  const std::size_t g = a.granularity();
  void* w = a.allocate(2 * g, "weights").value();
  void* k = a.allocate(g, "kv").value();
  sleep_fill(w, a.size_of(w), 6), sleep_fill(k, a.size_of(k), 7);
  PVMM_CHECK_OK(a.sleep());  // warm
  PVMM_CHECK_OK(a.wake());
  const auto before = query_live_objects();
  testing::fail_nth_backend_call(2);  // the second tag's registration ("weights", after "kv")
  auto failed = a.prepare_host_memory();
  testing::fail_nth_backend_call(0);
  REQUIRE_FALSE(failed);
  CHECK(failed.error().detail.find("tag 'weights'") != std::string::npos);
  CHECK(a.stats().kept_host_bytes == 0);  // the first tag's store went too
  CHECK(query_live_objects() == before);
  PVMM_CHECK_OK(a.prepare_host_memory({"weights"}));
  const std::size_t prepared = a.stats().kept_host_bytes;
  CHECK(prepared == 2 * g);
  PVMM_CHECK_OK(a.sleep({"kv"}));  // makes its own store: the prepared one is for "weights"
  CHECK(a.stats().kept_host_bytes == prepared);
  PVMM_CHECK_OK(a.wake({"kv"}));
  testing::fail_nth_backend_call(1);  // the sleep's first backend call, after it took the prepared store
  auto slept = a.sleep({"weights"});
  testing::fail_nth_backend_call(0);
  REQUIRE_FALSE(slept);
  CHECK(a.stats().asleep == 0);
  CHECK(a.stats().kept_host_bytes == prepared);  // put back
  PVMM_CHECK_OK(a.sleep({"weights"}));
  CHECK(a.stats().kept_host_bytes == 0);
  PVMM_CHECK_OK(a.wake({"weights"}));
  CHECK(sleep_holds(w, a.size_of(w), 6));
  CHECK(sleep_holds(k, a.size_of(k), 7));
  CHECK(query_live_objects() == before);
  PVMM_CHECK_OK(a.deallocate(w));
  PVMM_CHECK_OK(a.deallocate(k));
}
