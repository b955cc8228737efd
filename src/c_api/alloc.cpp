// The C interface of the allocators (pvmm/c/alloc.h over pvmm/caching_allocator.hpp, growable_arena.hpp and
// sleeping_allocator.hpp).
#include <string>

#include "c_api/alloc.hpp"

using namespace pvmm::c_api;

using namespace pvmm::c_api::alloc_c;

extern "C" {

// ---- the caching allocator ----

pvmm_status pvmm_caching_create(const pvmm_caching_options* options, pvmm_caching* out) noexcept {
  return optional_options_entry("pvmm_caching_create", options, PVMM_INIT(pvmm_caching_options), "pvmm_caching_options",
                                out, [&](const pvmm_caching_options& o) {
                                  pvmm::caching_options c;
                                  c.device = o.device;
                                  c.chunk_size = o.chunk_size;
                                  c.max_reserved = o.max_reserved;
                                  c.wait_for_pending_frees = o.wait_for_pending_frees != 0;
                                  c.slack_percent = o.slack_percent;
                                  c.max_ghost_bytes = o.max_ghost_bytes;
                                  c.grow_in_place = o.grow_in_place != 0;
                                  return adopt_result(kind::caching, pvmm::caching_allocator::create(c), out);
                                });
}

pvmm_status pvmm_caching_release(pvmm_caching allocator) noexcept {
  return release_idle<pvmm::caching_allocator>(kind::caching, allocator.id, "pvmm_caching_release",
                                               "blocks are still allocated",
                                               [](const pvmm::caching_allocator& a) { return a.stats().live_blocks; });
}

pvmm_status pvmm_caching_allocate(pvmm_caching allocator, size_t size, pvmm_stream_ref on, void** out) noexcept {
  return value_entry<pvmm::caching_allocator>(
      kind::caching, allocator.id, "pvmm_caching_allocate", out, "out",
      [&](pvmm::caching_allocator& a) { return a.allocate(size, alloc_stream(on)); });
}

pvmm_status pvmm_caching_deallocate(pvmm_caching allocator, void* pointer, pvmm_stream_ref on) noexcept {
  return call_entry<pvmm::caching_allocator>(
      kind::caching, allocator.id, "pvmm_caching_deallocate",
      [&](pvmm::caching_allocator& a) { return report(a.deallocate(pointer, alloc_stream(on))); });
}

pvmm_status pvmm_caching_trim(pvmm_caching allocator) noexcept {
  return call_entry<pvmm::caching_allocator>(kind::caching, allocator.id, "pvmm_caching_trim",
                                             [](pvmm::caching_allocator& a) { return report(a.trim()); });
}

pvmm_status pvmm_caching_stats_get(pvmm_caching allocator, pvmm_caching_stats* out) noexcept {
  return stats_entry<pvmm::caching_allocator>(kind::caching, allocator.id, "pvmm_caching_stats_get", out,
                                              "pvmm_caching_stats", [](const pvmm::caching_allocator& a) {
                                                const pvmm::caching_stats s = a.stats();
                                                return pvmm_caching_stats{sizeof(pvmm_caching_stats),
                                                                          s.reserved,
                                                                          s.live,
                                                                          s.peak_reserved,
                                                                          s.peak_live,
                                                                          s.live_blocks,
                                                                          s.cached_blocks,
                                                                          s.cache_hits,
                                                                          s.stitches,
                                                                          s.chunks_reused,
                                                                          s.waits,
                                                                          s.pressure_retries,
                                                                          s.chunks_created,
                                                                          s.maps,
                                                                          s.unmaps,
                                                                          s.event_records,
                                                                          s.event_queries,
                                                                          s.device_waits,
                                                                          s.host_syncs,
                                                                          s.ghost_bytes,
                                                                          s.stitch_ns,
                                                                          s.unmap_ns,
                                                                          s.create_ns,
                                                                          s.event_record_ns,
                                                                          s.event_query_ns,
                                                                          s.device_wait_ns};
                                              });
}

pvmm_status pvmm_caching_reset_peaks(pvmm_caching allocator) noexcept {
  return call_entry<pvmm::caching_allocator>(kind::caching, allocator.id, "pvmm_caching_reset_peaks",
                                             [](pvmm::caching_allocator& a) {
                                               a.reset_peaks();
                                               return pvmm_status_ok;
                                             });
}

// ---- the growable arena ----

pvmm_status pvmm_arena_create(const pvmm_arena_options* options, pvmm_arena* out) noexcept {
  return optional_options_entry("pvmm_arena_create", options, PVMM_INIT(pvmm_arena_options), "pvmm_arena_options", out,
                                [&](const pvmm_arena_options& o) {
                                  pvmm::arena_options a;
                                  a.device = o.device;
                                  a.reserve_size = o.reserve_size;
                                  a.chunk_size = o.chunk_size;
                                  return adopt_result(kind::arena, pvmm::growable_arena::create(a), out);
                                });
}

pvmm_status pvmm_arena_release(pvmm_arena arena) noexcept {
  return release_idle<pvmm::growable_arena>(kind::arena, arena.id, "pvmm_arena_release", "allocations are still live",
                                            [](const pvmm::growable_arena& a) { return a.stats().allocations; });
}

pvmm_status pvmm_arena_allocate(pvmm_arena arena, size_t size, void** out) noexcept {
  return value_entry<pvmm::growable_arena>(kind::arena, arena.id, "pvmm_arena_allocate", out, "out",
                                           [&](pvmm::growable_arena& a) { return a.allocate(size); });
}

pvmm_status pvmm_arena_deallocate(pvmm_arena arena, void* pointer) noexcept {
  return call_entry<pvmm::growable_arena>(kind::arena, arena.id, "pvmm_arena_deallocate",
                                          [&](pvmm::growable_arena& a) { return report(a.deallocate(pointer)); });
}

pvmm_status pvmm_arena_stats_get(pvmm_arena arena, pvmm_arena_stats* out) noexcept {
  return stats_entry<pvmm::growable_arena>(
      kind::arena, arena.id, "pvmm_arena_stats_get", out, "pvmm_arena_stats", [](const pvmm::growable_arena& a) {
        const pvmm::arena_stats s = a.stats();
        return pvmm_arena_stats{sizeof(pvmm_arena_stats), s.allocations,    s.allocated_bytes, s.mapped_bytes,
                                s.peak_mapped_bytes,      s.reserved_bytes, s.grows,           s.shrinks};
      });
}

}  // extern "C"
