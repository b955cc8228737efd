// The C interface of the sleeping allocator (pvmm/c/alloc.h over pvmm/sleeping_allocator.hpp).
#include <cstring>
#include <string>

#include "c_api/alloc.hpp"

using namespace pvmm::c_api;
using namespace pvmm::c_api::alloc_c;

namespace {

/// An entry point on the sleeping allocator behind a handle: act(allocator) gives the pvmm_status.
template <class Act>
pvmm_status on_sleeping(pvmm_sleeping allocator, const char* op, Act&& act) noexcept {
  return call_entry<c_sleeping>(kind::sleeping, allocator.id, op, [&](c_sleeping& s) { return act(s.allocator); });
}

/// An entry point that names tags: act(allocator, the tags) gives the pvmm_status; the tags are checked first.
template <class Act>
pvmm_status on_tags(pvmm_sleeping allocator, const char* const* tags, size_t tag_count, const char* op,
                    Act&& act) noexcept {
  return guard(op, [&]() -> pvmm_status {
    PVMM_C_TRY(names, to_tags(tags, tag_count, op));
    PVMM_C_FIND(c_sleeping, sleeping, s, allocator, op);
    return act(s->allocator, *names);
  });
}

/// The event an asynchronous sleep or wake gave, registered where `done` asks for it.
pvmm_status adopt_done(pvmm::result<pvmm::event>&& e, pvmm_event* done) {
  if (!e) return fail(e.error());
  return done ? adopt(kind::event, std::move(*e), done) : pvmm_status_ok;
}

}  // namespace

extern "C" {

pvmm_status pvmm_sleeping_create(const pvmm_sleeping_options* options, pvmm_sleeping* out) noexcept {
  return optional_options_entry("pvmm_sleeping_create", options, PVMM_INIT(pvmm_sleeping_options),
                                "pvmm_sleeping_options", out, [&](const pvmm_sleeping_options& o) -> pvmm_status {
                                  pvmm::sleeping_options s;
                                  s.device = o.device;
                                  s.copy_streams = o.copy_streams;
                                  s.staging_slots = o.staging_slots;
                                  s.staging_slot_bytes = o.staging_slot_bytes;
                                  if (o.release_address_range >= 0)
                                    s.release_address_range = o.release_address_range != 0;
                                  s.keep_host_memory = o.keep_host_memory != 0;
                                  PVMM_C_TRY(made, pvmm::sleeping_allocator::create(s));
                                  return adopt(kind::sleeping, c_sleeping(std::move(*made)), out);
                                });
}

pvmm_status pvmm_sleeping_release(pvmm_sleeping allocator) noexcept {
  return release_entry<c_sleeping>(kind::sleeping, allocator.id, "pvmm_sleeping_release");
}

pvmm_status pvmm_sleeping_allocate(pvmm_sleeping allocator, size_t size, const char* tag, void** out) noexcept {
  return value_entry<c_sleeping>(
      kind::sleeping, allocator.id, "pvmm_sleeping_allocate", out, "out",
      [&](c_sleeping& s) { return tag ? s.allocator.allocate(size, tag) : s.allocator.allocate(size); });
}

pvmm_status pvmm_sleeping_deallocate(pvmm_sleeping allocator, void* pointer) noexcept {
  return on_sleeping(allocator, "pvmm_sleeping_deallocate",
                     [&](pvmm::sleeping_allocator& a) { return report(a.deallocate(pointer)); });
}

pvmm_status pvmm_sleeping_set_policy(pvmm_sleeping allocator, const char* tag, const pvmm_tag_policy* policy) noexcept {
  constexpr const char* op = "pvmm_sleeping_set_policy";
  return guard(op, [&] {
    PVMM_C_NEED(tag, op);
    PVMM_C_OPTIONS(p, policy, pvmm_tag_policy, op);
    PVMM_C_FIND(c_sleeping, sleeping, s, allocator, op);
    pvmm::tag_policy t;
    t.policy = static_cast<pvmm::sleep_policy>(p.policy);
    t.retain_host_copy = p.retain_host_copy != 0;
    if (p.file_directory) t.file_directory = p.file_directory;
    return report(s->allocator.set_policy(tag, t));
  });
}

pvmm_status pvmm_sleeping_set_tag(pvmm_sleeping allocator, const char* tag, char* previous, size_t capacity) noexcept {
  constexpr const char* op = "pvmm_sleeping_set_tag";
  return guard(op, [&] {
    PVMM_C_NEED(tag, op);
    PVMM_C_FIND(c_sleeping, sleeping, s, allocator, op);
    const std::string outer = s->allocator.exchange_tag(tag);
    if (previous != nullptr && capacity > 0) copy_text(previous, capacity, outer);
    return pvmm_status_ok;
  });
}

using tag_list = std::vector<std::string>;

pvmm_status pvmm_sleeping_sleep(pvmm_sleeping allocator, const char* const* tags, size_t tag_count) noexcept {
  return on_tags(allocator, tags, tag_count, "pvmm_sleeping_sleep",
                 [](pvmm::sleeping_allocator& a, const tag_list& names) { return report(a.sleep(names)); });
}

pvmm_status pvmm_sleeping_wake(pvmm_sleeping allocator, const char* const* tags, size_t tag_count) noexcept {
  return on_tags(allocator, tags, tag_count, "pvmm_sleeping_wake",
                 [](pvmm::sleeping_allocator& a, const tag_list& names) { return report(a.wake(names)); });
}

pvmm_status pvmm_sleeping_sleep_async(pvmm_sleeping allocator, const char* const* tags, size_t tag_count,
                                      pvmm_stream_ref on, pvmm_event* done) noexcept {
  return on_tags(allocator, tags, tag_count, "pvmm_sleeping_sleep_async",
                 [&](pvmm::sleeping_allocator& a, const tag_list& names) {
                   return adopt_done(a.sleep(names, alloc_stream(on)), done);
                 });
}

pvmm_status pvmm_sleeping_wake_async(pvmm_sleeping allocator, const char* const* tags, size_t tag_count,
                                     pvmm_stream_ref on, pvmm_event* done) noexcept {
  return on_tags(allocator, tags, tag_count, "pvmm_sleeping_wake_async",
                 [&](pvmm::sleeping_allocator& a, const tag_list& names) {
                   return adopt_done(a.wake(names, alloc_stream(on)), done);
                 });
}

pvmm_status pvmm_sleeping_read_host_copy(pvmm_sleeping allocator, const void* pointer, size_t offset, void* out,
                                         size_t size) noexcept {
  return on_sleeping(allocator, "pvmm_sleeping_read_host_copy",
                     [&](pvmm::sleeping_allocator& a) { return report(a.read_host_copy(pointer, offset, out, size)); });
}

pvmm_status pvmm_sleeping_tag_of(pvmm_sleeping allocator, const void* pointer, char* tag, size_t capacity) noexcept {
  constexpr const char* op = "pvmm_sleeping_tag_of";
  return guard(op, [&] {
    PVMM_C_NEED(tag, op);
    PVMM_C_FIND(c_sleeping, sleeping, s, allocator, op);
    PVMM_C_TRY(t, s->allocator.tag_of(pointer));
    if (t->size() >= capacity)
      return fail(pvmm::errc::out_of_range, op,
                  "the tag needs " + std::to_string(t->size() + 1) + " bytes; capacity is " + std::to_string(capacity));
    std::memcpy(tag, t->c_str(), t->size() + 1);
    return pvmm_status_ok;
  });
}

pvmm_status pvmm_sleeping_generation(pvmm_sleeping allocator, const void* pointer, uint64_t* out) noexcept {
  return value_entry<c_sleeping>(kind::sleeping, allocator.id, "pvmm_sleeping_generation", out, "out",
                                 [&](c_sleeping& s) { return s.allocator.generation_of(pointer); });
}

pvmm_status pvmm_sleeping_add_backing_callback(pvmm_sleeping allocator, pvmm_backing_callback callback, void* user_data,
                                               uint64_t* id) noexcept {
  constexpr const char* op = "pvmm_sleeping_add_backing_callback";
  return guard(op, [&] {
    PVMM_C_NEED(callback, op);
    PVMM_C_NEED(id, op);
    PVMM_C_FIND(c_sleeping, sleeping, s, allocator, op);
    auto record = std::make_unique<c_sleeping::callback>(c_sleeping::callback{callback, user_data});
    PVMM_C_TRY(added, s->allocator.add_backing_callback(run_c_callback, record.get()));
    std::lock_guard<std::mutex> hold(s->lock);
    s->callbacks.emplace(*added, std::move(record));
    *id = *added;
    return pvmm_status_ok;
  });
}

pvmm_status pvmm_sleeping_remove_backing_callback(pvmm_sleeping allocator, uint64_t id) noexcept {
  constexpr const char* op = "pvmm_sleeping_remove_backing_callback";
  return guard(op, [&] {
    PVMM_C_FIND(c_sleeping, sleeping, s, allocator, op);
    if (auto ok = s->allocator.remove_backing_callback(id); !ok) return fail(ok.error());
    std::lock_guard<std::mutex> hold(s->lock);
    s->callbacks.erase(id);  // not running: removed under the allocator's lock first, and calls copy the list
    return pvmm_status_ok;
  });
}

pvmm_status pvmm_sleeping_prepare_host_memory(pvmm_sleeping allocator, const char* const* tags,
                                              size_t tag_count) noexcept {
  return on_tags(
      allocator, tags, tag_count, "pvmm_sleeping_prepare_host_memory",
      [](pvmm::sleeping_allocator& a, const tag_list& names) { return report(a.prepare_host_memory(names)); });
}

pvmm_status pvmm_sleeping_trim_host_memory(pvmm_sleeping allocator) noexcept {
  return on_sleeping(allocator, "pvmm_sleeping_trim_host_memory",
                     [](pvmm::sleeping_allocator& a) { return report(a.trim_host_memory()); });
}

pvmm_status pvmm_sleeping_stats_get(pvmm_sleeping allocator, const char* tag, pvmm_sleeping_stats* out) noexcept {
  return stats_entry<c_sleeping>(
      kind::sleeping, allocator.id, "pvmm_sleeping_stats_get", out, "pvmm_sleeping_stats", [&](const c_sleeping& c) {
        const pvmm::sleeping_stats st = tag ? c.allocator.stats(tag) : c.allocator.stats();
        return pvmm_sleeping_stats{sizeof(pvmm_sleeping_stats), st.allocations, st.reserved_bytes, st.resident_bytes,
                                   st.offloaded_bytes,          st.asleep,      st.staging_bytes,  st.kept_host_bytes};
      });
}

}  // extern "C"
