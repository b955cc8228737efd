// The C interface: growable buffers, pinned and registered host memory, managed memory, and query_pointer
// (pvmm/pvmm.h over pvmm/growable_buffer.hpp, pinned.hpp, managed.hpp and pointer.hpp).
#include <pvmm/growable_buffer.hpp>
#include <pvmm/managed.hpp>
#include <pvmm/pinned.hpp>
#include <pvmm/pointer.hpp>

#include "c_api/abi.hpp"
#include "c_api/common.hpp"
#include "c_api/convert.hpp"

using namespace pvmm::c_api;

namespace {

pvmm::result<pvmm::pinned_options> to_pinned_options(const pvmm_pinned_options* o, const char* op) {
  pvmm::pinned_options out;
  if (o == nullptr) return out;
  static_assert(first_published<pvmm_pinned_options>::size == sizeof(pvmm_pinned_options), "grew: use read_prefix");
  if (!size_readable<pvmm_pinned_options>(o->struct_size)) {
    pvmm::error e;
    e.code = pvmm::errc::version_mismatch;
    e.operation = op;
    e.detail = "pvmm_pinned_options.struct_size is " + std::to_string(o->struct_size) + "; this library knows " +
               std::to_string(sizeof(pvmm_pinned_options)) + " (set it with PVMM_INIT(pvmm_pinned_options))";
    return e;
  }
  out.portable = o->portable != 0;
  out.mapped = o->mapped != 0;
  out.write_combined = o->write_combined != 0;
  return out;
}

static_assert(static_cast<int>(pvmm::advice::set_read_mostly) == pvmm_advice_set_read_mostly &&
                  static_cast<int>(pvmm::advice::set_preferred_location) == pvmm_advice_set_preferred_location &&
                  static_cast<int>(pvmm::advice::unset_accessed_by) == pvmm_advice_unset_accessed_by,
              "pvmm_advice is pvmm::advice");

}  // namespace

extern "C" {

pvmm_status pvmm_growable_create(const pvmm_growable_options* options, pvmm_growable* out) noexcept {
  constexpr const char* op = "pvmm_growable_create";
  return options_entry(op, options, "pvmm_growable_options", out, [&](const pvmm_growable_options& given) {
    PVMM_C_TRY(properties, to_properties(&given.properties, op));
    PVMM_C_TRY(grants, to_grants(given.access, given.access_count, op));
    pvmm::growable_options o;
    o.properties = *properties;
    o.access = std::move(*grants);
    o.chunk_size = given.chunk_size;
    o.reserve_size = given.reserve_size;
    return adopt_result(kind::growable, pvmm::growable_buffer::create(o), out);
  });
}

pvmm_status pvmm_growable_release(pvmm_growable buffer) noexcept {
  return release_entry<pvmm::growable_buffer>(kind::growable, buffer.id, "pvmm_growable_release");
}

pvmm_status pvmm_growable_resize(pvmm_growable buffer, size_t size, int* moved) noexcept {
  constexpr const char* op = "pvmm_growable_resize";
  return guard(op, [&] {
    PVMM_C_FIND(pvmm::growable_buffer, growable, b, buffer, op);
    PVMM_C_TRY(outcome, b->resize(size));
    if (moved != nullptr) *moved = outcome->moved ? 1 : 0;
    return pvmm_status_ok;
  });
}

pvmm_status pvmm_growable_data(pvmm_growable buffer, void** data, size_t* size) noexcept {
  return data_entry<pvmm::growable_buffer>(kind::growable, buffer.id, "pvmm_growable_data", data, size);
}

pvmm_status pvmm_pinned_create(size_t size, const pvmm_pinned_options* options, pvmm_pinned* out) noexcept {
  constexpr const char* op = "pvmm_pinned_create";
  return guard(op, [&] {
    PVMM_C_NEED(out, op);
    PVMM_C_TRY(o, to_pinned_options(options, op));
    return adopt_result(kind::pinned, pvmm::pinned_allocation::create(size, *o), out);
  });
}

pvmm_status pvmm_pinned_release(pvmm_pinned memory) noexcept {
  return release_entry<pvmm::pinned_allocation>(kind::pinned, memory.id, "pvmm_pinned_release");
}

pvmm_status pvmm_pinned_data(pvmm_pinned memory, void** data, size_t* size) noexcept {
  return data_entry<pvmm::pinned_allocation>(kind::pinned, memory.id, "pvmm_pinned_data", data, size);
}

pvmm_status pvmm_register_host_memory(void* pointer, size_t size, const pvmm_pinned_options* options) noexcept {
  constexpr const char* op = "pvmm_register_host_memory";
  return guard(op, [&] {
    PVMM_C_TRY(o, to_pinned_options(options, op));
    return report(pvmm::register_host_memory(pointer, size, *o));
  });
}

pvmm_status pvmm_unregister_host_memory(void* pointer) noexcept {
  constexpr const char* op = "pvmm_unregister_host_memory";
  return guard(op, [&] { return report(pvmm::unregister_host_memory(pointer)); });
}

pvmm_status pvmm_managed_create(size_t size, int attach_mode, pvmm_managed* out) noexcept {
  constexpr const char* op = "pvmm_managed_create";
  return guard(op, [&] {
    PVMM_C_NEED(out, op);
    if (attach_mode < pvmm_attach_global || attach_mode > pvmm_attach_single) {
      return fail(
          pvmm::errc::invalid_argument, op,
          "attach_mode " + std::to_string(attach_mode) + " is not a pvmm_attach_mode (0 global, 1 host, 2 single)");
    }
    return adopt_result(kind::managed,
                        pvmm::managed_allocation::create(size, static_cast<pvmm::attach_mode>(attach_mode)), out);
  });
}

pvmm_status pvmm_managed_release(pvmm_managed memory) noexcept {
  return release_entry<pvmm::managed_allocation>(kind::managed, memory.id, "pvmm_managed_release");
}

pvmm_status pvmm_managed_data(pvmm_managed memory, void** data, size_t* size) noexcept {
  return data_entry<pvmm::managed_allocation>(kind::managed, memory.id, "pvmm_managed_data", data, size);
}

pvmm_status pvmm_managed_advise(const void* pointer, size_t size, int advice, const pvmm_location* where) noexcept {
  constexpr const char* op = "pvmm_managed_advise";
  return guard(op, [&] {
    if (advice < pvmm_advice_set_read_mostly || advice > pvmm_advice_unset_accessed_by) {
      return fail(pvmm::errc::invalid_argument, op,
                  "advice " + std::to_string(advice) + " is not a pvmm_advice (0 to 5)");
    }
    const auto what = static_cast<pvmm::advice>(advice);
    if (where == nullptr) return report(pvmm::advise(pointer, size, what));
    PVMM_C_TRY(l, to_location(*where, op));
    return report(pvmm::advise(pointer, size, what, *l));
  });
}

pvmm_status pvmm_query_pointer(const void* pointer, pvmm_pointer_attributes* attributes) noexcept {
  constexpr const char* op = "pvmm_query_pointer";
  return guard(op, [&] {
    PVMM_C_NEED(attributes, op);
    PVMM_C_SIZE(attributes, pvmm_pointer_attributes, op);
    PVMM_C_TRY(a, pvmm::query_pointer(pointer));
    attributes->kind = static_cast<int>(a->kind);
    attributes->base = a->base;
    attributes->size = a->size;
    attributes->device = a->device;
    attributes->device_accessible_from_host = a->device_accessible_from_host ? 1 : 0;
    attributes->mapped = a->mapped ? 1 : 0;
    return pvmm_status_ok;
  });
}

}  // extern "C"
