// The C interface: streams and events (by native handle), stream-ordered memory pools and their sharing between
// processes (pvmm/pvmm.h over pvmm/stream.hpp, pvmm/memory_pool.hpp and pvmm/managed.hpp's prefetch).
#include <cstddef>
#include <cstring>
#include <type_traits>

#include <pvmm/managed.hpp>
#include <pvmm/memory_pool.hpp>
#include <pvmm/stream.hpp>

#include "c_api/abi.hpp"
#include "c_api/common.hpp"
#include "c_api/convert.hpp"
#include "core/propagate.hpp"

using namespace pvmm::c_api;

namespace {

pvmm::stream_ref to_stream(pvmm_stream_ref s) { return pvmm::stream_ref(pvmm::stream_handle{s.native}, s.device); }

// The C records are the C++ ones byte for byte (copied with memcpy).
static_assert(sizeof(pvmm_pool_id) == sizeof(pvmm::pool_id) && std::is_trivially_copyable_v<pvmm::pool_id>,
              "pvmm_pool_id is pvmm::pool_id");
static_assert(sizeof(pvmm_pool_pointer_export) == sizeof(pvmm::pool_pointer_export) &&
                  offsetof(pvmm_pool_pointer_export, size) == offsetof(pvmm::pool_pointer_export, size) &&
                  offsetof(pvmm_pool_pointer_export, pool) == offsetof(pvmm::pool_pointer_export, pool),
              "pvmm_pool_pointer_export is pvmm::pool_pointer_export");

/// A yes/no answer of a C++ query into an int out-parameter.
pvmm_status answer(const pvmm::result<bool>& r, int* out) {
  if (!r) return fail(r.error());
  *out = *r ? 1 : 0;
  return pvmm_status_ok;
}

/// An entry point on the pool behind a handle: act(pool) gives the pvmm_status.
template <class Act>
pvmm_status on_pool(pvmm_pool pool, const char* op, Act&& act) noexcept {
  return call_entry<pvmm::memory_pool>(kind::pool, pool.id, op, std::forward<Act>(act));
}

}  // namespace

extern "C" {

pvmm_status pvmm_stream_create(int device, pvmm_stream* out) noexcept {
  return create_entry(kind::stream, "pvmm_stream_create", out, [&] { return pvmm::stream::create(device); });
}

pvmm_status pvmm_stream_release(pvmm_stream stream) noexcept {
  return release_entry<pvmm::stream>(kind::stream, stream.id, "pvmm_stream_release");
}

pvmm_status pvmm_stream_native(pvmm_stream stream, pvmm_stream_ref* ref) noexcept {
  return read_entry<pvmm::stream>(kind::stream, stream.id, "pvmm_stream_native", ref, "ref", [](const pvmm::stream& s) {
    return pvmm_stream_ref{s.native_handle().value, s.device()};
  });
}

pvmm_status pvmm_stream_synchronize(pvmm_stream_ref stream) noexcept {
  constexpr const char* op = "pvmm_stream_synchronize";
  return guard(op, [&] { return report(to_stream(stream).synchronize()); });
}

pvmm_status pvmm_stream_query(pvmm_stream_ref stream, int* done) noexcept {
  constexpr const char* op = "pvmm_stream_query";
  return guard(op, [&] {
    PVMM_C_NEED(done, op);
    return answer(to_stream(stream).query(), done);
  });
}

pvmm_status pvmm_copy_async(void* destination, const void* source, size_t size, pvmm_stream_ref on) noexcept {
  constexpr const char* op = "pvmm_copy_async";
  return guard(op, [&] { return report(to_stream(on).copy_async(destination, source, size)); });
}

pvmm_status pvmm_managed_prefetch_async(const void* pointer, size_t size, pvmm_location to,
                                        pvmm_stream_ref on) noexcept {
  constexpr const char* op = "pvmm_managed_prefetch_async";
  return guard(op, [&] {
    PVMM_C_TRY(where, to_location(to, op));
    return report(pvmm::prefetch_async(pointer, size, *where, to_stream(on)));
  });
}

pvmm_status pvmm_event_create(int device, pvmm_event* out) noexcept {
  return create_entry(kind::event, "pvmm_event_create", out, [&] { return pvmm::event::create(device); });
}

pvmm_status pvmm_event_release(pvmm_event event) noexcept {
  return release_entry<pvmm::event>(kind::event, event.id, "pvmm_event_release");
}

pvmm_status pvmm_event_native(pvmm_event event, uint64_t* native) noexcept {
  return read_entry<pvmm::event>(kind::event, event.id, "pvmm_event_native", native, "native",
                                 [](const pvmm::event& e) { return e.native_handle().value; });
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

pvmm_status pvmm_event_query(pvmm_event event, int* done) noexcept {
  constexpr const char* op = "pvmm_event_query";
  return guard(op, [&] {
    PVMM_C_NEED(done, op);
    PVMM_C_FIND(pvmm::event, event, e, event, op);
    return answer(e->query(), done);
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
  return options_entry(op, options, "pvmm_pool_options", out, [&](const pvmm_pool_options& given) {
    PVMM_C_TRY(where, to_location(given.location, op));
    if ((given.exportable & ~unsigned{pvmm_handle_posix_fd | pvmm_handle_fabric}) != 0)
      return fail(pvmm::errc::invalid_argument, op, "exportable holds bits that are not pvmm_handle_* values");
    pvmm::pool_properties p;
    p.location = *where;
    p.max_size = given.max_size;
    p.exportable = static_cast<pvmm::handle_types>(given.exportable);
    return adopt_result(kind::pool, pvmm::memory_pool::create(p), out);
  });
}

pvmm_status pvmm_pool_release(pvmm_pool pool) noexcept {
  return release_entry<pvmm::memory_pool>(kind::pool, pool.id, "pvmm_pool_release");
}

pvmm_status pvmm_pool_allocate_async(pvmm_pool pool, size_t size, pvmm_stream_ref on, void** pointer) noexcept {
  return value_entry<pvmm::memory_pool>(kind::pool, pool.id, "pvmm_pool_allocate_async", pointer, "pointer",
                                        [&](pvmm::memory_pool& p) { return p.allocate_async(size, to_stream(on)); });
}

pvmm_status pvmm_pool_free_async(pvmm_pool pool, void* pointer, pvmm_stream_ref on) noexcept {
  return on_pool(pool, "pvmm_pool_free_async",
                 [&](pvmm::memory_pool& p) { return report(p.free_async(pointer, to_stream(on))); });
}

pvmm_status pvmm_pool_trim_to(pvmm_pool pool, size_t keep) noexcept {
  return on_pool(pool, "pvmm_pool_trim_to", [&](pvmm::memory_pool& p) { return report(p.trim_to(keep)); });
}

pvmm_status pvmm_pool_usage(pvmm_pool pool, uint64_t* reserved, uint64_t* used) noexcept {
  return outputs_entry<pvmm::memory_pool>(
      kind::pool, pool.id, "pvmm_pool_usage", {{reserved, "reserved"}, {used, "used"}},
      [](pvmm::memory_pool& p) { return p.usage(); },
      [&](const auto& u) {
        *reserved = u.reserved_current;
        *used = u.used_current;
      });
}

pvmm_status pvmm_pool_set_release_threshold(pvmm_pool pool, uint64_t bytes) noexcept {
  return on_pool(pool, "pvmm_pool_set_release_threshold",
                 [&](pvmm::memory_pool& p) { return report(p.set_release_threshold(bytes)); });
}

pvmm_status pvmm_pool_release_threshold(pvmm_pool pool, uint64_t* bytes) noexcept {
  return value_entry<pvmm::memory_pool>(kind::pool, pool.id, "pvmm_pool_release_threshold", bytes, "bytes",
                                        [](pvmm::memory_pool& p) -> pvmm::result<std::uint64_t> {
                                          PVMM_TRY_ASSIGN(a, p.attributes());
                                          return a.release_threshold;
                                        });
}

pvmm_status pvmm_pool_set_access(pvmm_pool pool, const pvmm_access_descriptor* grants, size_t count) noexcept {
  constexpr const char* op = "pvmm_pool_set_access";
  return guard(op, [&] {
    PVMM_C_FIND(pvmm::memory_pool, pool, p, pool, op);
    PVMM_C_TRY(list, to_grants(grants, count, op));
    return report(p->set_access(pvmm::access_list(*list)));
  });
}

pvmm_status pvmm_pool_export_posix_fd(pvmm_pool pool, int* fd, pvmm_pool_id* id) noexcept {
  return outputs_entry<pvmm::memory_pool>(
      kind::pool, pool.id, "pvmm_pool_export_posix_fd", {{fd, "fd"}, {id, "id"}},
      [](pvmm::memory_pool& p) { return p.export_posix_fd(); },
      [&](auto& exported) {
        std::memcpy(id->bytes, exported.id.bytes.data(), sizeof id->bytes);
        *fd = exported.fd.detach();
      });
}

pvmm_status pvmm_pool_import_posix_fd(int fd, const pvmm_pool_id* id, int device, pvmm_pool* out) noexcept {
  constexpr const char* op = "pvmm_pool_import_posix_fd";
  return guard(op, [&] {
    PVMM_C_NEED(id, op);
    PVMM_C_NEED(out, op);
    pvmm::pool_export from;
    std::memcpy(from.id.bytes.data(), id->bytes, sizeof id->bytes);
    from.fd = pvmm::owned_fd(fd);
    struct borrowed {  // the fd stays the caller's, whatever happens
      pvmm::owned_fd& fd;
      ~borrowed() { (void)fd.detach(); }
    } keep{from.fd};
    return adopt_result(kind::pool, pvmm::memory_pool::import_posix_fd(from, device), out);
  });
}

pvmm_status pvmm_pool_export_pointer(pvmm_pool pool, const void* pointer, pvmm_pool_pointer_export* out) noexcept {
  constexpr const char* op = "pvmm_pool_export_pointer";
  return guard(op, [&] {
    PVMM_C_NEED(out, op);
    PVMM_C_FIND(pvmm::memory_pool, pool, p, pool, op);
    PVMM_C_TRY(record, p->export_pointer(pointer));
    std::memcpy(static_cast<void*>(out), &*record, sizeof *out);
    return pvmm_status_ok;
  });
}

pvmm_status pvmm_pool_import_pointer(pvmm_pool pool, const pvmm_pool_pointer_export* from, pvmm_stream_ref free_on,
                                     pvmm_pool_allocation* out) noexcept {
  constexpr const char* op = "pvmm_pool_import_pointer";
  return guard(op, [&] {
    PVMM_C_NEED(from, op);
    PVMM_C_NEED(out, op);
    PVMM_C_FIND(pvmm::memory_pool, pool, p, pool, op);
    pvmm::pool_pointer_export record;
    std::memcpy(static_cast<void*>(&record), from, sizeof record);
    return adopt_result(kind::pool_allocation, p->import_pointer(record, to_stream(free_on)), out);
  });
}

pvmm_status pvmm_pool_allocation_data(pvmm_pool_allocation allocation, void** data, size_t* size) noexcept {
  return data_entry<pvmm::pool_allocation>(kind::pool_allocation, allocation.id, "pvmm_pool_allocation_data", data,
                                           size);
}

pvmm_status pvmm_pool_allocation_free_async(pvmm_pool_allocation allocation, pvmm_stream_ref on) noexcept {
  constexpr const char* op = "pvmm_pool_allocation_free_async";
  return guard(op, [&] {
    PVMM_C_FIND(pvmm::pool_allocation, pool_allocation, a, allocation, op);
    if (auto freed = a->free_async(to_stream(on)); !freed) return fail(freed.error());  // the handle stays: retry
    (void)take(kind::pool_allocation, allocation.id, op);                               // empty now: the handle dies
    return pvmm_status_ok;
  });
}

pvmm_status pvmm_pool_allocation_release(pvmm_pool_allocation allocation) noexcept {
  return release_entry<pvmm::pool_allocation>(kind::pool_allocation, allocation.id, "pvmm_pool_allocation_release");
}

}  // extern "C"
