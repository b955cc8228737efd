// The C interface: streams and events (by native handle) and stream-ordered memory pools (pvmm/pvmm.h over
// pvmm/stream.hpp and pvmm/memory_pool.hpp).
#include <pvmm/memory_pool.hpp>
#include <pvmm/stream.hpp>

#include "c_api/common.hpp"
#include "c_api/convert.hpp"

using namespace pvmm::c_api;

namespace {

pvmm::stream_ref to_stream(pvmm_stream_ref s) { return pvmm::stream_ref(pvmm::stream_handle{s.native}, s.device); }

}  // namespace

extern "C" {

pvmm_status pvmm_stream_create(int device, pvmm_stream* out) noexcept {
  constexpr const char* op = "pvmm_stream_create";
  return guard(op, [&] {
    PVMM_C_NEED(out, op);
    auto s = pvmm::stream::create(device);
    if (!s) return fail(s.error());
    return adopt(kind::stream, std::move(*s), out);
  });
}

pvmm_status pvmm_stream_release(pvmm_stream stream) noexcept {
  constexpr const char* op = "pvmm_stream_release";
  return guard(op, [&] {
    auto s = take<pvmm::stream>(kind::stream, stream.id, op);
    if (!s) return fail(s.error());
    return report((*s)->release());
  });
}

pvmm_status pvmm_stream_native(pvmm_stream stream, pvmm_stream_ref* ref) noexcept {
  constexpr const char* op = "pvmm_stream_native";
  return guard(op, [&] {
    PVMM_C_NEED(ref, op);
    PVMM_C_FIND(pvmm::stream, stream, s, stream, op);
    ref->native = s->native_handle().value;
    ref->device = s->device();
    return pvmm_status_ok;
  });
}

pvmm_status pvmm_stream_synchronize(pvmm_stream_ref stream) noexcept {
  constexpr const char* op = "pvmm_stream_synchronize";
  return guard(op, [&] { return report(to_stream(stream).synchronize()); });
}

pvmm_status pvmm_event_create(int device, pvmm_event* out) noexcept {
  constexpr const char* op = "pvmm_event_create";
  return guard(op, [&] {
    PVMM_C_NEED(out, op);
    auto e = pvmm::event::create(device);
    if (!e) return fail(e.error());
    return adopt(kind::event, std::move(*e), out);
  });
}

pvmm_status pvmm_event_release(pvmm_event event) noexcept {
  constexpr const char* op = "pvmm_event_release";
  return guard(op, [&] {
    auto e = take<pvmm::event>(kind::event, event.id, op);
    if (!e) return fail(e.error());
    return report((*e)->release());
  });
}

pvmm_status pvmm_event_record(pvmm_event event, pvmm_stream_ref on) noexcept {
  constexpr const char* op = "pvmm_event_record";
  return guard(op, [&] {
    PVMM_C_FIND(pvmm::event, event, e, event, op);
    return report(e->record(to_stream(on)));
  });
}

pvmm_status pvmm_event_synchronize(pvmm_event event) noexcept {
  constexpr const char* op = "pvmm_event_synchronize";
  return guard(op, [&] {
    PVMM_C_FIND(pvmm::event, event, e, event, op);
    return report(e->synchronize());
  });
}

pvmm_status pvmm_stream_wait_event(pvmm_stream_ref stream, pvmm_event event) noexcept {
  constexpr const char* op = "pvmm_stream_wait_event";
  return guard(op, [&] {
    PVMM_C_FIND(pvmm::event, event, e, event, op);
    return report(to_stream(stream).wait(*e));
  });
}

pvmm_status pvmm_pool_create(const pvmm_pool_options* options, pvmm_pool* out) noexcept {
  constexpr const char* op = "pvmm_pool_create";
  return guard(op, [&] {
    PVMM_C_NEED(options, op);
    PVMM_C_NEED(out, op);
    PVMM_C_SIZE(options, pvmm_pool_options, op);
    auto where = to_location(options->location, op);
    if (!where) return fail(where.error());
    if ((options->exportable & ~unsigned{pvmm_handle_posix_fd | pvmm_handle_fabric}) != 0)
      return fail(pvmm::errc::invalid_argument, op, "exportable holds bits that are not pvmm_handle_* values");
    pvmm::pool_properties p;
    p.location = *where;
    p.max_size = options->max_size;
    p.exportable = static_cast<pvmm::handle_types>(options->exportable);
    auto pool = pvmm::memory_pool::create(p);
    if (!pool) return fail(pool.error());
    return adopt(kind::pool, std::move(*pool), out);
  });
}

pvmm_status pvmm_pool_release(pvmm_pool pool) noexcept {
  constexpr const char* op = "pvmm_pool_release";
  return guard(op, [&] {
    auto p = take<pvmm::memory_pool>(kind::pool, pool.id, op);
    if (!p) return fail(p.error());
    return report((*p)->release());
  });
}

pvmm_status pvmm_pool_allocate_async(pvmm_pool pool, size_t size, pvmm_stream_ref on, void** pointer) noexcept {
  constexpr const char* op = "pvmm_pool_allocate_async";
  return guard(op, [&] {
    PVMM_C_NEED(pointer, op);
    PVMM_C_FIND(pvmm::memory_pool, pool, p, pool, op);
    auto allocated = p->allocate_async(size, to_stream(on));
    if (!allocated) return fail(allocated.error());
    *pointer = *allocated;
    return pvmm_status_ok;
  });
}

pvmm_status pvmm_pool_free_async(pvmm_pool pool, void* pointer, pvmm_stream_ref on) noexcept {
  constexpr const char* op = "pvmm_pool_free_async";
  return guard(op, [&] {
    PVMM_C_FIND(pvmm::memory_pool, pool, p, pool, op);
    return report(p->free_async(pointer, to_stream(on)));
  });
}

pvmm_status pvmm_pool_trim_to(pvmm_pool pool, size_t keep) noexcept {
  constexpr const char* op = "pvmm_pool_trim_to";
  return guard(op, [&] {
    PVMM_C_FIND(pvmm::memory_pool, pool, p, pool, op);
    return report(p->trim_to(keep));
  });
}

pvmm_status pvmm_pool_usage(pvmm_pool pool, uint64_t* reserved, uint64_t* used) noexcept {
  constexpr const char* op = "pvmm_pool_usage";
  return guard(op, [&] {
    PVMM_C_NEED(reserved, op);
    PVMM_C_NEED(used, op);
    PVMM_C_FIND(pvmm::memory_pool, pool, p, pool, op);
    auto u = p->usage();
    if (!u) return fail(u.error());
    *reserved = u->reserved_current;
    *used = u->used_current;
    return pvmm_status_ok;
  });
}

}  // extern "C"
