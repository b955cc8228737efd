// Memory snapshots (pvmm/snapshot.hpp): every kind of memory this backend has is described, blocks tile their
// segments, the history ring records what happened and only while on, and the pickle and file forms are refused
// exactly where they should be.
#include <unistd.h>
#include <cstdio>
#include <string>

#include <pvmm/pvmm.h>
#include <pvmm/pvmm.hpp>
#include <pvmm/snapshot.hpp>

#include "memory_kinds.hpp"
#include "support.hpp"

using namespace pvmm;

namespace {
const snapshot_segment* segment_at(const memory_snapshot& s, const void* address) {
  for (const auto& seg : s.segments)
    if (seg.address == reinterpret_cast<std::uintptr_t>(address)) return &seg;
  return nullptr;
}
bool traced(const memory_snapshot& s, const char* action, const void* address) {
  for (const auto& device : s.device_traces)
    for (const auto& e : device)
      if (e.action == action && e.address == reinterpret_cast<std::uintptr_t>(address)) return true;
  return false;
}
/// Turns the history off at scope exit, so no later case pays for it.
struct history_off {
  ~history_off() { (void)record_memory_history(0); }
};
}  // namespace

TEST_SUITE("api") {
  PVMM_CASE("snapshot: reservations with mappings and imports, pools, pinned memory, tiled blocks, the history") {
    PVMM_REQUIRE_DEVICE();
    history_off off;
    PVMM_CHECK_OK(record_memory_history(256));
    CHECK(memory_history_capacity() == 256);
    const std::size_t g = pvmm_test::granule();
    auto props = pvmm_test::default_properties();
    props.exportable = handle_types::posix_fd;
    const bool fd = pvmm_test::caps().sharing.posix_fd;
    if (!fd) props.exportable = handle_types::none;
    auto memory = physical_allocation::create(g, props);
    PVMM_REQUIRE_VALUE(memory);
    auto range = address_reservation::reserve(3 * g);
    PVMM_REQUIRE_VALUE(range);
    PVMM_CHECK_OK(range->map(g, *memory, 0, g));  // [0, g) and [2g, 3g) stay unmapped
    address_reservation imported_range;
    physical_allocation imported;
    if (fd) {
      auto exported = memory->export_posix_fd();
      PVMM_REQUIRE_VALUE(exported);
      auto in = physical_allocation::import_posix_fd(exported->get(), g);
      PVMM_REQUIRE_VALUE(in);
      imported = std::move(*in);
      imported_range = address_reservation::reserve(g).value();
      PVMM_CHECK_OK(imported_range.map(0, imported, 0, g));
    }
    memory_pool pool;
    void* pooled = nullptr;
    stream s;
    if (pvmm_test::caps().pools.supported) {
      pool = pvmm_test::make_pool();
      s = stream::create(0).value();
      pooled = pool.allocate_async(4096, s).value();
    }
    pinned_allocation pinned;
    if (pvmm_test::caps().host_memory.pinned) pinned = pinned_allocation::create(8192).value();
    pvmm_test::program_pages pages(2);
    host_registration registered;
    if (pvmm_test::caps().host_memory.registration)
      registered = host_registration::create(pages.data, pages.size).value();
    managed_allocation managed;
    if (pvmm_test::caps().managed.supported) managed = managed_allocation::create(g).value();

    auto snap = take_memory_snapshot();
    PVMM_REQUIRE_VALUE(snap);
    for (const auto& seg : snap->segments) {  // blocks tile every segment, in address order
      std::uintptr_t at = seg.address;
      for (const auto& b : seg.blocks) {
        CHECK(b.address == at);
        at += b.size;
      }
      CHECK(at == seg.address + seg.total_size);
    }
    const auto* r = segment_at(*snap, range->address());
    REQUIRE(r != nullptr);
    CHECK(r->kind == "reservation");
    CHECK(r->total_size == 3 * g);
    REQUIRE(r->blocks.size() == 3);
    CHECK(r->blocks[0].state == block_state::inactive);
    CHECK(r->blocks[1].state == block_state::active_allocated);
    CHECK(r->blocks[1].size == g);
    CHECK(r->blocks[1].label.find("imported") == std::string::npos);
    CHECK(r->blocks[2].state == block_state::inactive);
    CHECK(r->allocated_size() == g);
    if (fd) {
      const auto* i = segment_at(*snap, imported_range.address());
      REQUIRE(i != nullptr);
      REQUIRE(i->blocks.size() == 1);
      CHECK(i->blocks[0].label.find("imported from another process") != std::string::npos);
    }
    if (pooled) {
      const auto* p = segment_at(*snap, pooled);
      REQUIRE(p != nullptr);
      CHECK(p->kind == "pool");
      CHECK(p->pool_id[0] == 1);
      CHECK(p->pool_id[1] >= 1);
      CHECK(traced(*snap, "alloc", pooled));
    }
    if (pinned) {
      const auto* p = segment_at(*snap, pinned.data());
      REQUIRE(p != nullptr);
      CHECK(p->kind == "pinned");
      CHECK(p->device == -1);
    }
    if (registered) {
      const auto* p = segment_at(*snap, pages.data);
      REQUIRE(p != nullptr);
      CHECK(p->kind == "registered");
      CHECK(p->device == -1);
      CHECK(p->total_size == pages.size);
    }
    if (managed) {
      const auto* p = segment_at(*snap, managed.data());
      REQUIRE(p != nullptr);
      CHECK(p->kind == "managed");
    }
    CHECK(traced(*snap, "segment_alloc", range->address()));
    CHECK(traced(*snap, "segment_map", static_cast<char*>(range->address()) + g));
    CHECK(traced(*snap, "snapshot", nullptr));

    auto bytes = snapshot_pickle(*snap);
    PVMM_REQUIRE_VALUE(bytes);
    REQUIRE(bytes->size() > 3);
    CHECK(bytes->substr(0, 2) == std::string("\x80\x02", 2));
    CHECK(bytes->back() == '.');

    if (pooled) PVMM_CHECK_OK(pool.free_async(pooled, s));
    if (s) PVMM_CHECK_OK(s.synchronize());
    PVMM_CHECK_OK(range->unmap(g, g));
    void* const freed = range->address();
    PVMM_CHECK_OK(range->release());
    auto after = take_memory_snapshot();
    PVMM_REQUIRE_VALUE(after);
    CHECK(segment_at(*after, freed) == nullptr);
    CHECK(traced(*after, "segment_unmap", static_cast<char*>(freed) + g));
    CHECK(traced(*after, "segment_free", freed));
    if (pooled) CHECK(traced(*after, "free_completed", pooled));
    if (fd) PVMM_CHECK_OK(imported_range.unmap(0, g));
  }

  PVMM_CASE("snapshot: the history records nothing while off, keeps the newest entries, and refuses a huge ring") {
    PVMM_REQUIRE_DEVICE();
    history_off off;
    PVMM_CHECK_OK(record_memory_history(0));
    CHECK(memory_history_capacity() == 0);
    {
      auto range = address_reservation::reserve(pvmm_test::granule()).value();
      auto snap = take_memory_snapshot().value();
      CHECK(segment_at(snap, range.address()) != nullptr);
      CHECK_FALSE(traced(snap, "segment_alloc", range.address()));
      std::size_t entries = 0;
      for (const auto& d : snap.device_traces) entries += d.size();
      CHECK(entries == 0);
    }
    PVMM_CHECK_OK(record_memory_history(2));
    for (int i = 0; i < 3; ++i) (void)address_reservation::reserve(pvmm_test::granule()).value();  // 6 events
    auto snap = take_memory_snapshot().value();
    std::size_t entries = 0;
    for (const auto& d : snap.device_traces) entries += d.size();
    CHECK(entries == 2);  // the ring's newest two: the last free and the snapshot itself
    CHECK(snap.device_traces[0].back().action == "snapshot");
    CHECK(snap.device_traces[0].front().action == "segment_free");
    PVMM_CHECK_ERRC(record_memory_history((std::size_t{1} << 24) + 1), errc::invalid_argument);
    CHECK(memory_history_capacity() == 2);  // a refused call changes nothing
  }

  PVMM_CASE("snapshot: write_snapshot refuses an empty path and says why a file cannot be written") {
    auto snap = take_memory_snapshot().value();
    PVMM_CHECK_ERRC(write_snapshot(snap, ""), errc::invalid_argument);
    auto missing = write_snapshot(snap, "/nonexistent-pvmm-dir/snapshot.pickle");
    REQUIRE_FALSE(missing);
    CHECK(missing.error().code == errc::system_error);
    CHECK(missing.error().detail.find("/nonexistent-pvmm-dir/snapshot.pickle") != std::string::npos);
    const std::string path = "/tmp/pvmm-snapshot-" + std::to_string(::getpid()) + ".pickle";
    PVMM_CHECK_OK(dump_snapshot(path));
    std::FILE* f = std::fopen(path.c_str(), "rb");
    REQUIRE(f != nullptr);
    unsigned char head[2] = {0, 0};
    CHECK(std::fread(head, 1, 2, f) == 2);
    std::fclose(f);
    std::remove(path.c_str());
    CHECK(head[0] == 0x80);
    CHECK(head[1] == 0x02);
  }

  PVMM_CASE("snapshot: the C entry points give the same pickle and refuse null arguments") {
    void* data = nullptr;
    size_t size = 0;
    CHECK(pvmm_snapshot_pickle(nullptr, &size) == pvmm_status_invalid_argument);
    CHECK(pvmm_snapshot_pickle(&data, nullptr) == pvmm_status_invalid_argument);
    REQUIRE(pvmm_snapshot_pickle(&data, &size) == pvmm_status_ok);
    REQUIRE(size > 2);
    CHECK(static_cast<unsigned char*>(data)[0] == 0x80);
    CHECK(static_cast<unsigned char*>(data)[size - 1] == '.');
    pvmm_snapshot_free(data);
    pvmm_snapshot_free(nullptr);
    CHECK(pvmm_dump_snapshot(nullptr) == pvmm_status_invalid_argument);
    CHECK(pvmm_dump_snapshot("") == pvmm_status_invalid_argument);
    CHECK(pvmm_dump_snapshot("/nonexistent-pvmm-dir/s.pickle") == pvmm_status_system_error);
    CHECK(pvmm_record_memory_history((size_t{1} << 24) + 1) == pvmm_status_invalid_argument);
    CHECK(pvmm_record_memory_history(8) == pvmm_status_ok);
    CHECK(memory_history_capacity() == 8);
    CHECK(pvmm_record_memory_history(0) == pvmm_status_ok);
    CHECK(memory_history_capacity() == 0);
  }

  PVMM_CASE("snapshot: NVTX registration is off by default and refused where the build has no NVTX") {
    CHECK_FALSE(nvtx_registration());
    PVMM_CHECK_OK(register_with_nvtx(false));
    if (query_backend().name == "cuda") {
      PVMM_CHECK_OK(register_with_nvtx(true));
      CHECK(nvtx_registration());
      PVMM_CHECK_OK(register_with_nvtx(false));
    } else {
      PVMM_CHECK_ERRC(register_with_nvtx(true), errc::not_supported);
      CHECK_FALSE(nvtx_registration());
    }
  }

  PVMM_CASE("snapshot: a caching allocator's regions show its live, cached and awaiting blocks, described once") {
    PVMM_REQUIRE_DEVICE();
    history_off off;
    PVMM_CHECK_OK(record_memory_history(64));
    auto cache = caching_allocator::create({});
    PVMM_REQUIRE_VALUE(cache);
    auto s1 = stream::create(0).value();
    auto s2 = stream::create(0).value();
    void* kept = cache->allocate(1000, s1).value();
    void* freed = cache->allocate(3000, s1).value();
    void* elsewhere = cache->allocate(5000, s1).value();
    PVMM_CHECK_OK(cache->deallocate(freed, s1));
    PVMM_CHECK_OK(cache->deallocate(elsewhere, s2));  // its reuse on s1 waits until s2's work is seen complete
    auto snap = take_memory_snapshot().value();
    const snapshot_segment* region = nullptr;
    for (const auto& seg : snap.segments)
      if (seg.kind == "caching" && seg.address <= reinterpret_cast<std::uintptr_t>(kept) &&
          reinterpret_cast<std::uintptr_t>(kept) < seg.address + seg.total_size)
        region = &seg;
    REQUIRE(region != nullptr);
    CHECK(region->pool_id[0] == 2);
    CHECK(region->label.find("caching allocator") != std::string::npos);
    std::size_t reservations_there = 0;  // the region's reservation is not described a second time
    for (const auto& seg : snap.segments) reservations_there += seg.address == region->address ? 1 : 0;
    CHECK(reservations_there == 1);
    auto block_at = [&](void* p) -> const snapshot_block* {  // the block that holds p (freed ones merge)
      const auto a = reinterpret_cast<std::uintptr_t>(p);
      for (const auto& b : region->blocks)
        if (b.address <= a && a < b.address + b.size) return &b;
      return nullptr;
    };
    REQUIRE(block_at(kept) != nullptr);
    CHECK(block_at(kept)->state == block_state::active_allocated);
    CHECK(block_at(kept)->requested_size == 1000);
    CHECK(block_at(kept)->size == 1024);
    REQUIRE(block_at(elsewhere) != nullptr);
    CHECK(block_at(elsewhere)->state == block_state::active_awaiting_free);  // merged with `freed`, waits for s2
    CHECK(block_at(kept)->address == reinterpret_cast<std::uintptr_t>(kept));
    CHECK(region->allocated_size() == 1024);
    CHECK(traced(snap, "alloc", kept));
    CHECK(traced(snap, "free_requested", freed));
    CHECK(traced(snap, "free_completed", freed));
    PVMM_CHECK_OK(cache->deallocate(kept, s1));
    PVMM_CHECK_OK(s2.synchronize());
    PVMM_CHECK_OK(cache->release());
    auto after = take_memory_snapshot().value();
    for (const auto& seg : after.segments) CHECK(seg.kind != "caching");  // a released allocator leaves no trace
  }

  PVMM_CASE("snapshot: a sleeping allocator's allocations by tag, awake or asleep, with the pinned host copy") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_CAPABILITY(pvmm_test::caps().host_memory.pinned, "page-locked host memory");
    auto sleeper = sleeping_allocator::create({});
    PVMM_REQUIRE_VALUE(sleeper);
    void* weights = sleeper->allocate(pvmm_test::granule(), "weights").value();
    void* cache = sleeper->allocate(pvmm_test::granule(), "kv-cache").value();
    PVMM_CHECK_OK(sleeper->sleep({"weights"}));
    auto snap = take_memory_snapshot().value();
    const auto* asleep = segment_at(snap, weights);
    const auto* awake = segment_at(snap, cache);
    REQUIRE(asleep != nullptr);
    REQUIRE(awake != nullptr);
    CHECK(asleep->kind == "sleeping");
    CHECK(asleep->label.find("tag 'weights': asleep, contents in pinned host memory") != std::string::npos);
    CHECK(asleep->allocated_size() == 0);
    CHECK(awake->label.find("tag 'kv-cache': awake") != std::string::npos);
    CHECK(awake->allocated_size() == pvmm_test::granule());
    std::size_t copies = 0;
    for (const auto& seg : snap.segments)
      copies += seg.label.find("host copy of tag 'weights'") != std::string::npos ? 1 : 0;
    CHECK(copies == 1);
    PVMM_CHECK_OK(sleeper->wake({"weights"}));
    auto woken = take_memory_snapshot().value();
    REQUIRE(segment_at(woken, weights) != nullptr);
    CHECK(segment_at(woken, weights)->allocated_size() == pvmm_test::granule());
    PVMM_CHECK_OK(sleeper->release());
  }
}
